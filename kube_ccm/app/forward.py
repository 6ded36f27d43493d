"""``kube-ccm forward``: the ServiceLB pod's forwarder, klipper-lb's contract.

The servicelb provider runs one container per Service port in its DaemonSet
``svclb-<name>-<uid8>``; each runs this subcommand, configured by the same
environment as k3s gives klipper-lb's ``entry`` script:

=============  =================================================================
``SRC_PORT``   the port clients connect to (the Service port, held as a hostPort)
``SRC_RANGES`` comma list of CIDRs allowed in (the Service's
               ``loadBalancerSourceRanges``; k3s sends ``0.0.0.0/0``, plus
               ``,::/0`` when the Service has IPv6); host bits are ignored
``DEST_PROTO`` ``TCP``, ``UDP`` (or ``SCTP``, iptables mode only), any case
``DEST_PORT``  the port to forward to: the Service port, or its nodePort with
               ``externalTrafficPolicy: Local``
``DEST_IPS``   comma list: the Service's ClusterIPs, or with ``Local`` the node's
               ``status.hostIPs`` (downward API), so kube-proxy's nodePort picks
               a backend on this node and keeps the client address
=============  =================================================================

Every value may also be given as a flag (``--src-port`` ...), which wins over the
environment. Two modes (``--mode`` or ``FORWARD_MODE``):

``userspace`` (default)
    An asyncio TCP and UDP proxy (:mod:`kube_ccm.app.forward_userspace`). Needs no
    capability and no sysctl, only to bind ``SRC_PORT``. Listens for each address
    family that ``DEST_IPS`` has, picks a destination of the client's family
    first. The backend sees the pod's address as the client, as with klipper-lb's
    MASQUERADE.
``iptables``
    What klipper-lb does (:mod:`kube_ccm.app.forward_iptables`): DNAT and
    MASQUERADE in the pod's network namespace, IPv4 and IPv6, a FORWARD ACCEPT per
    source range and a DROP for the rest; the rules are deleted on SIGTERM. Needs
    ``NET_ADMIN``, ``iptables``/``ip6tables`` in the image and ``ip_forward`` set in
    the pod (the pod sysctls k3s sets, which the kubelet must allow with
    ``--allowed-unsafe-sysctls``).

Where this deviates from klipper-lb, on purpose: klipper-lb silently installs
nothing for a family whose ``ip_forward`` is 0, and forwards nothing for an empty
``SRC_RANGES``; here both are a startup error naming the fix.

Failures. A malformed value: exit status 2, a line naming the variable, what was
given and what is expected. A setup failure (no route to any ``DEST_IPS``, the
port taken, ``iptables`` missing or refused, ``ip_forward`` off): exit status 1.
Both messages also go to ``/dev/termination-log`` when it exists, so
``kubectl describe pod`` shows them as the container's last state; the kubelet's
restart back-off paces retries (nothing here loops on an error). At run time, a
connection the destination refuses is closed and logged, at most once per
10 seconds per destination.

Readiness: the process binds its sockets (or installs its rules) before it
reports ready: with ``--ready-file`` it creates that file then (an exec probe
``test -e`` checks it) and removes it on shutdown. For TCP, a ``tcpSocket``
readiness probe on ``SRC_PORT`` checks more: in both modes it is forwarded, so it
succeeds only when a backend accepts (with ``Local``, only on nodes with one).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import logging
import os
import signal
import socket
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Protocol = Literal["TCP", "UDP", "SCTP"]
Mode = Literal["userspace", "iptables"]

MODES: tuple[Mode, ...] = ("userspace", "iptables")
DEFAULT_MODE: Mode = "userspace"
TERMINATION_LOG = Path("/dev/termination-log")

log = logging.getLogger("kube_ccm.forward")


class ForwardError(Exception):
    """The forwarder cannot start; the message says what to fix.

    ``ForwardError``
      ``ConfigError``  a malformed or missing value (exit status 2)
      ``SetupError``   the environment refuses (exit status 1): no route, port
                       taken, no permission, ``ip_forward`` off
    """

    exit_status = 1


class ConfigError(ForwardError):
    exit_status = 2


class SetupError(ForwardError):
    exit_status = 1


@dataclass(frozen=True)
class ForwardSpec:
    """One Service port's forwarding, decoded once from klipper-lb's environment."""

    src_port: int
    src_ranges: tuple[IPNetwork, ...]
    protocol: Protocol
    dest_port: int
    dest_ips: tuple[IPAddress, ...]
    listen_ips: tuple[IPAddress, ...] = ()

    @property
    def families(self) -> tuple[int, ...]:
        """The address families to serve: those of ``DEST_IPS``, IPv4 first."""
        found = {ip.version for ip in self.dest_ips}
        return tuple(v for v in (4, 6) if v in found)

    def allows(self, client: IPAddress) -> bool:
        """Whether ``client`` is inside ``SRC_RANGES`` (IPv4-mapped IPv6 as IPv4)."""
        if isinstance(client, ipaddress.IPv6Address) and client.ipv4_mapped is not None:
            client = client.ipv4_mapped
        return any(client in net for net in self.src_ranges if net.version == client.version)

    def destinations(self, family: int) -> tuple[IPAddress, ...]:
        """``DEST_IPS`` to try for a client of ``family``: its own family first."""
        same = tuple(ip for ip in self.dest_ips if ip.version == family)
        return same + tuple(ip for ip in self.dest_ips if ip.version != family)


# -- decoding -------------------------------------------------------------------------


def _port(name: str, text: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        value = 0
    if not 1 <= value <= 65535:
        raise ConfigError(f"{name}={text!r}: expected a port number from 1 to 65535")
    return value


def _items(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _addresses(name: str, text: str) -> tuple[IPAddress, ...]:
    items = _items(text)
    if not items:
        raise ConfigError(
            f"{name} is empty: expected a comma list of IP addresses (the Service's "
            "ClusterIPs, or the node's status.hostIPs with externalTrafficPolicy Local)"
        )
    found: list[IPAddress] = []
    for item in items:
        try:
            found.append(ipaddress.ip_address(item))
        except ValueError:
            raise ConfigError(
                f"{name}={text!r}: {item!r} is not an IP address (expected e.g. "
                "10.43.0.10,fd00:43::10)"
            ) from None
    return tuple(dict.fromkeys(found))


def _networks(name: str, text: str) -> tuple[IPNetwork, ...]:
    items = _items(text)
    if not items:
        raise ConfigError(
            f"{name} is empty: expected a comma list of CIDRs allowed to connect "
            "(0.0.0.0/0,::/0 for everyone), as the Service's loadBalancerSourceRanges"
        )
    found: list[IPNetwork] = []
    for item in items:
        try:
            found.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ConfigError(
                f"{name}={text!r}: {item!r} is not a CIDR (expected e.g. 192.0.2.0/24)"
            ) from None
    return tuple(dict.fromkeys(found))


def _protocol(name: str, text: str) -> Protocol:
    value = text.strip().upper()
    if value == "TCP":
        return "TCP"
    if value == "UDP":
        return "UDP"
    if value == "SCTP":
        return "SCTP"
    raise ConfigError(f"{name}={text!r}: expected TCP, UDP or SCTP")


def _value(name: str, flag: str | None, env: Mapping[str, str]) -> str:
    if flag is not None:
        return flag
    if name not in env:
        flag_name = "--" + name.lower().replace("_", "-")
        raise ConfigError(f"{name} is not set: set the environment variable or {flag_name}")
    return env[name]


def spec_from(args: argparse.Namespace, env: Mapping[str, str]) -> ForwardSpec:
    """The spec from the flags, falling back to klipper-lb's environment variables."""
    listen = args.listen_ips if args.listen_ips is not None else env.get("LISTEN_IPS", "")
    spec = ForwardSpec(
        src_port=_port("SRC_PORT", _value("SRC_PORT", args.src_port, env)),
        src_ranges=_networks("SRC_RANGES", _value("SRC_RANGES", args.src_ranges, env)),
        protocol=_protocol("DEST_PROTO", _value("DEST_PROTO", args.dest_proto, env)),
        dest_port=_port("DEST_PORT", _value("DEST_PORT", args.dest_port, env)),
        dest_ips=_addresses("DEST_IPS", _value("DEST_IPS", args.dest_ips, env)),
        listen_ips=_addresses("LISTEN_IPS", listen) if _items(listen) else (),
    )
    missing = [str(ip) for ip in spec.listen_ips if ip.version not in spec.families]
    if missing:
        raise ConfigError(
            f"LISTEN_IPS has {', '.join(missing)} but DEST_IPS has no address of that "
            "family: drop it, or add a destination of its family"
        )
    return spec


def mode_from(args: argparse.Namespace, env: Mapping[str, str]) -> Mode:
    text = args.mode if args.mode is not None else env.get("FORWARD_MODE", DEFAULT_MODE)
    for mode in MODES:
        if text.strip().lower() == mode:
            return mode
    raise ConfigError(f"FORWARD_MODE={text!r}: expected one of {', '.join(MODES)}")


# -- checks before serving ------------------------------------------------------------


def check_routes(spec: ForwardSpec) -> None:
    """Fail unless the kernel has a route to at least one of ``DEST_IPS``.

    A connected UDP socket makes the kernel look the route up without sending
    anything. Destinations without a route are logged; all of them is an error.
    """
    unroutable: list[str] = []
    for ip in spec.dest_ips:
        family = socket.AF_INET if ip.version == 4 else socket.AF_INET6
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as probe:
                probe.connect((str(ip), spec.dest_port))
        except OSError as exc:
            unroutable.append(f"{ip} ({exc.strerror or exc})")
    if len(unroutable) == len(spec.dest_ips):
        raise SetupError(
            f"no route from this pod to any of DEST_IPS: {'; '.join(unroutable)}; check "
            "the pod network (the Service's ClusterIPs must be reachable from pods, the "
            "node's IPs with externalTrafficPolicy Local)"
        )
    for entry in unroutable:
        log.warning("no route to DEST_IPS entry %s: clients of its family are not served", entry)


# -- running --------------------------------------------------------------------------


def report_fatal(message: str) -> None:
    """Say why the forwarder stops on stderr and, in a container, in its termination log."""
    print(f"error: {message}", file=sys.stderr)
    if TERMINATION_LOG.exists():
        with contextlib.suppress(OSError):
            TERMINATION_LOG.write_text(message + "\n")


@contextlib.contextmanager
def _ready(path: Path) -> Iterator[None]:
    path.write_text("ready\n")
    try:
        yield
    finally:
        path.unlink(missing_ok=True)


async def serve(
    spec: ForwardSpec,
    mode: Mode,
    *,
    udp_idle_timeout: float,
    ready_file: Path | None,
    stop: asyncio.Event,
) -> None:
    """Forward until ``stop`` is set; undo everything on the way out."""
    async with contextlib.AsyncExitStack() as stack:
        if mode == "userspace":
            from kube_ccm.app.forward_userspace import UserspaceForwarder  # noqa: PLC0415

            forwarder = UserspaceForwarder(spec, udp_idle_timeout=udp_idle_timeout)
            await stack.enter_async_context(forwarder)
        else:
            from kube_ccm.app.forward_iptables import installed_rules  # noqa: PLC0415

            stack.enter_context(installed_rules(spec))
        if ready_file is not None:
            stack.enter_context(_ready(ready_file))
        log.info(
            "forwarding %s %s:%d -> %s port %d (%s mode, from %s)",
            spec.protocol,
            ",".join(str(ip) for ip in spec.listen_ips) or "*",
            spec.src_port,
            ",".join(str(ip) for ip in spec.dest_ips),
            spec.dest_port,
            mode,
            ",".join(str(net) for net in spec.src_ranges),
        )
        await stop.wait()
        log.info("stopping")


async def _main(
    spec: ForwardSpec, mode: Mode, udp_idle_timeout: float, ready_file: Path | None
) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await serve(spec, mode, udp_idle_timeout=udp_idle_timeout, ready_file=ready_file, stop=stop)


def handle(args: argparse.Namespace) -> int:
    """The subcommand's handler: logging as the flags say, then :func:`run`."""
    from kube_ccm.app.logs import configure_logging  # noqa: PLC0415

    configure_logging(args.v, args.logging_format)
    return run(args)


def run(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> int:
    """Decode, check, forward until SIGTERM; the exit status."""
    environ = os.environ if env is None else env
    try:
        mode = mode_from(args, environ)
        spec = spec_from(args, environ)
        if spec.protocol == "SCTP" and mode == "userspace":
            raise ConfigError(
                "DEST_PROTO=SCTP: the userspace mode forwards TCP and UDP only; use "
                "--mode iptables (FORWARD_MODE=iptables) for SCTP"
            )
        check_routes(spec)
        asyncio.run(_main(spec, mode, args.udp_idle_timeout, args.ready_file))
    except ForwardError as exc:
        report_fatal(str(exc))
        return exc.exit_status
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``kube-ccm forward`` with its flags, each defaulting to klipper-lb's variable."""
    forward = sub.add_parser(
        "forward",
        help="forward a ServiceLB port (the svclb pods' container; klipper-lb's env)",
        description=(
            "Forward one Service port, as klipper-lb's entry script does, configured by "
            "the same environment (SRC_PORT, SRC_RANGES, DEST_PROTO, DEST_PORT, DEST_IPS); "
            "a flag wins over its variable. Runs until SIGTERM. Exit status 2 for a "
            "malformed value, 1 when the forwarding cannot be set up."
        ),
    )
    forward.add_argument(
        "--mode",
        choices=MODES,
        default=None,
        help="userspace: an asyncio TCP/UDP proxy, no privileges; iptables: DNAT and "
        "MASQUERADE as klipper-lb, needs NET_ADMIN and ip_forward (default: $FORWARD_MODE, "
        f"else {DEFAULT_MODE})",
    )
    forward.add_argument("--src-port", default=None, help="default $SRC_PORT")
    forward.add_argument("--src-ranges", default=None, help="default $SRC_RANGES")
    forward.add_argument("--dest-proto", default=None, help="default $DEST_PROTO")
    forward.add_argument("--dest-port", default=None, help="default $DEST_PORT")
    forward.add_argument("--dest-ips", default=None, help="default $DEST_IPS")
    forward.add_argument(
        "--listen-ips",
        default=None,
        help="only these local addresses (e.g. the node's IP when on the host network); "
        "default $LISTEN_IPS, else every address",
    )
    forward.add_argument(
        "--udp-idle-timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="userspace mode: a UDP client's session (its socket to the destination) is "
        "closed after this long without a datagram either way (default 60)",
    )
    forward.add_argument(
        "--ready-file",
        type=Path,
        default=None,
        help="create this file once forwarding is set up, remove it on shutdown, for an "
        "exec readiness probe (default none)",
    )
    forward.add_argument("-v", type=int, default=0, help="log verbosity (4: debug)")
    forward.add_argument(
        "--logging-format", choices=("text", "json"), default="text", help="default text"
    )
    forward.set_defaults(handler=handle)
