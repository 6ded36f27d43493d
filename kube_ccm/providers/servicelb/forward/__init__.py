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
               a backend on this node (the forwarder's own connection, or
               MASQUERADE, still hides the client's address from it)
=============  =================================================================

Every value may also be given as a flag (``--src-port`` ...), which wins over the
environment. Two modes (``--mode`` or ``FORWARD_MODE``):

``userspace`` (default)
    An asyncio TCP and UDP proxy (:mod:`._userspace`). Needs no
    capability and no sysctl, only to bind ``SRC_PORT``. Listens for each address
    family that ``DEST_IPS`` has, picks a destination of the client's family
    first. The backend sees the pod's address as the client, as with klipper-lb's
    MASQUERADE.
``iptables``
    What klipper-lb does (:mod:`._iptables`): DNAT and
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
reports ready: with ``--ready-file`` it creates that file then (for an exec probe,
``test -e``) and removes it on shutdown. A ``tcpSocket`` probe says no more in
userspace mode (the forwarder completes the handshake itself); in iptables mode
the probe is forwarded like any client, so it succeeds only when a destination
accepts.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from kube_ccm.providers.servicelb.forward._spec import (
    DEFAULT_MODE,
    MODES,
    ConfigError,
    ForwardError,
    ForwardSpec,
    IPAddress,
    IPNetwork,
    Mode,
    Protocol,
    SetupError,
    check_routes,
    log,
    mode_from,
    spec_from,
)

__all__ = [
    "ConfigError",
    "ForwardError",
    "ForwardSpec",
    "IPAddress",
    "IPNetwork",
    "Mode",
    "Protocol",
    "SetupError",
    "add_parser",
    "check_routes",
    "mode_from",
    "run",
    "serve",
    "spec_from",
]

TERMINATION_LOG = Path("/dev/termination-log")


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
            from kube_ccm.providers.servicelb.forward._userspace import UserspaceForwarder  # noqa: PLC0415

            forwarder = UserspaceForwarder(spec, udp_idle_timeout=udp_idle_timeout)
            await stack.enter_async_context(forwarder)
        else:
            from kube_ccm.providers.servicelb.forward._iptables import installed_rules  # noqa: PLC0415

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


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    *,
    configure_logging: Callable[[int, str], None],
) -> None:
    """Register ``kube-ccm forward`` on the ``kube-ccm`` command's subparsers, with its
    flags, each defaulting to klipper-lb's variable. ``configure_logging(verbosity,
    format)`` is the command's logging set-up (the daemon's, redaction included), called
    with ``-v`` and ``--logging-format`` before :func:`run`."""
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

    def handle(args: argparse.Namespace) -> int:
        configure_logging(args.v, args.logging_format)
        return run(args)

    forward.set_defaults(handler=handle)
