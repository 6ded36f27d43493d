"""The forwarder's input: klipper-lb's environment decoded once into a
:class:`ForwardSpec`, the errors that stop it, and the checks before it serves.

Errors (each message says what to fix)::

    ForwardError
      ConfigError   a malformed or missing value: exit status 2
      SetupError    the environment refuses (no route, port taken, no permission,
                    ip_forward off): exit status 1
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Protocol = Literal["TCP", "UDP", "SCTP"]
Mode = Literal["userspace", "iptables"]

MODES: tuple[Mode, ...] = ("userspace", "iptables")
DEFAULT_MODE: Mode = "userspace"

log = logging.getLogger("kube_ccm.forward")


class ForwardError(Exception):
    """The forwarder cannot start; the message says what to fix."""

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
