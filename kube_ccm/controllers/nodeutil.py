"""Pure rules of the cloud node controller.

No I/O here: what addresses a node should carry given the cloud's answer and
the kubelet's ``--node-ip`` annotation, which additional labels may be added,
and which GA labels must follow their beta twins. Each function is tested on
its own in tests/unit/controllers.
"""

from __future__ import annotations

import ipaddress
import logging
import re
from collections.abc import Mapping, Sequence
from typing import Protocol, TypeVar

log = logging.getLogger(__name__)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class AddressLike(Protocol):
    @property
    def type(self) -> str: ...

    @property
    def address(self) -> str: ...


A = TypeVar("A", bound=AddressLike)


class NodeIPError(ValueError):
    """The node-IP annotation cannot be satisfied; the message says why."""


def parse_node_ip_annotation(value: str) -> tuple[IPAddress, ...]:
    """Parse ``alpha.kubernetes.io/provided-node-ip``: one IP, or one IPv4 + one IPv6.

    Anything else (unparsable, unspecified addresses, two of one family, more
    than two) is an error, as in upstream's ``ParseNodeIPAnnotation``.
    """
    parts = [p.strip() for p in value.split(",")]
    if len(parts) > 2:
        raise NodeIPError(f"could not parse {value!r}: must contain at most one IP per family")
    ips: list[IPAddress] = []
    for part in parts:
        try:
            ip = ipaddress.ip_address(part)
        except ValueError:
            raise NodeIPError(f"could not parse {part!r} in {value!r} as an IP address") from None
        if ip.is_unspecified:
            raise NodeIPError(f"{value!r} contains an unspecified address ({part})")
        ips.append(ip)
    if len(ips) == 2 and ips[0].version == ips[1].version:
        raise NodeIPError(f"{value!r} must be a dual-stack pair (one IPv4 and one IPv6)")
    return tuple(ips)


def _same_ip(address: str, ip: IPAddress) -> bool:
    try:
        return ipaddress.ip_address(address) == ip
    except ValueError:
        return False


def addresses_for_node_ips(cloud: Sequence[A], node_ips: Sequence[IPAddress]) -> list[A]:
    """Reorder and filter cloud addresses for the node IPs (``GetNodeAddressesFromNodeIP``).

    For each node IP in order, every cloud address equal to it (compared as
    IPs) comes first; then every other cloud address whose *type* was not
    matched. Secondary addresses of a matched type are dropped.
    """
    chosen: list[A] = []
    matched_types: set[str] = set()
    for ip in node_ips:
        matches = [a for a in cloud if _same_ip(a.address, ip)]
        if not matches:
            raise NodeIPError(
                f"failed to get node address from cloud provider that matches ip: {ip}"
            )
        for match in matches:
            chosen.append(match)
            matched_types.add(match.type)
    chosen.extend(a for a in cloud if a.type not in matched_types)
    return chosen


def desired_addresses(
    cloud: Sequence[A],
    existing: Sequence[A],
    node_ip_annotation: str | None,
) -> list[A] | None:
    """The address list a node should carry, or None to leave it alone.

    Raises :class:`NodeIPError` when the annotation cannot be satisfied.
    """
    if not cloud:
        return None
    addresses = list(cloud)
    if not any(a.type == "Hostname" for a in addresses):
        addresses.extend(a for a in existing if a.type == "Hostname")
    if node_ip_annotation:
        addresses = addresses_for_node_ips(addresses, parse_node_ip_annotation(node_ip_annotation))
    return addresses


def check_node_ip(cloud: Sequence[A], node_ip_annotation: str | None) -> None:
    """The provided-node-ip gate of initialisation: raise if the annotation cannot be met."""
    if node_ip_annotation:
        addresses_for_node_ips(cloud, parse_node_ip_annotation(node_ip_annotation))


def addresses_changed(old: Sequence[AddressLike], new: Sequence[AddressLike]) -> bool:
    """Upstream's change detection (lengths, then type→address, last wins), plus the order
    of the address types.

    Upstream ignores order, so a list that another writer (or a race) left as
    ``[Hostname, InternalIP, ExternalIP]`` would stay that way forever; here the next
    refresh puts the cloud's addresses first and the kubelet's Hostname after them again.
    A provider that returns its types in a stable order never causes an extra write.
    """
    if len(old) != len(new):
        return True
    if [a.type for a in old] != [a.type for a in new]:
        return True
    by_type = {a.type: a.address for a in old}
    return any(by_type.get(a.type) != a.address for a in new)


_RESERVED_LABEL = re.compile(r"(^|\.)(kubernetes|k8s)\.io/")


def additional_labels_to_add(
    additional: Mapping[str, str], existing: Mapping[str, str], node_name: str = ""
) -> dict[str, str]:
    """Provider's additional labels that may be added.

    Keys in a Kubernetes-reserved domain are dropped; keys the node already
    has are never overwritten (a differing value is logged).
    """
    result: dict[str, str] = {}
    for key, value in additional.items():
        if _RESERVED_LABEL.search(key):
            log.info("node %s: not adding reserved additional label %s", node_name, key)
            continue
        if key in existing:
            if existing[key] != value:
                log.warning(
                    "node %s: additional label %s=%s from the cloud differs from the node's %s; "
                    "keeping the node's",
                    node_name,
                    key,
                    value,
                    existing[key],
                )
            continue
        result[key] = value
    return result


BETA_TO_GA_LABELS: tuple[tuple[str, str], ...] = (
    ("failure-domain.beta.kubernetes.io/zone", "topology.kubernetes.io/zone"),
    ("failure-domain.beta.kubernetes.io/region", "topology.kubernetes.io/region"),
    ("beta.kubernetes.io/instance-type", "node.kubernetes.io/instance-type"),
)


def ga_label_fixes(labels: Mapping[str, str]) -> dict[str, str]:
    """GA labels to set so they follow their beta twins; empty = no write."""
    fixes: dict[str, str] = {}
    for beta, ga in BETA_TO_GA_LABELS:
        if beta in labels and labels.get(ga) != labels[beta]:
            fixes[ga] = labels[beta]
    return fixes
