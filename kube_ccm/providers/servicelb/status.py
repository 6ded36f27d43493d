"""The ingress rule (k3s ``getStatus``/``podIPs``/``filterByIPFamily``), on the
addresses a Node may have published (unlike k3s).

A Service's ingress lists the nodes that run a ready svclb pod of it (bound, with a
pod IP, ``Ready``, not being deleted), ``externalTrafficPolicy: Local`` or not (with
the cloud-config's ``localTrafficAddresses: endpointNodes``, k3s's rule, for Local
only those among them with a ready endpoint (a pod) of the Service): their published
``ExternalIP`` addresses if any of those nodes has one, else their published
``InternalIP`` addresses; then, for each of the Service's ``ipFamilies`` in order,
that family's addresses sorted as strings.

Which addresses are published (:func:`node_addresses`): a Node's ``status.addresses``
is written by the node itself (NodeRestriction lets a kubelet write its own Node
status at any time; with k3s or rke2 instances they come from the node's own
annotations), and every ingress address has ``ipMode: VIP``, so kube-proxy on every
node sends traffic for it to the Service's backends. An address a node reports is
therefore published only if it cannot be someone else's: never an unspecified,
loopback, link-local, multicast, reserved or IPv4-mapped IPv6 address, an address of
the ``kubernetes`` Service (its ClusterIPs; kube-apiserver's endpoints, but on a Node
labelled as a control-plane node, whose own address that is: the label is one a node
cannot set on itself under NodeRestriction), an address two Nodes report (neither
publishes it), nor, when the operator set ``nodeAddressCIDRs``, one outside those
networks. k3s publishes every address.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kube_ccm.api.objects import LoadBalancerIngress, LoadBalancerStatus, Node, Service
from kube_ccm.providers.servicelb.objects import EndpointSlice, Pod

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
PUBLISHED_TYPES = ("ExternalIP", "InternalIP")
"""The address types ServiceLB publishes (k3s's); ``Hostname`` and others are ignored."""
_THIS_NETWORK = ipaddress.IPv4Network("0.0.0.0/8")
CONTROL_PLANE_LABELS = ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")
"""Labels of a control-plane node (kubeadm's, k3s's): NodeRestriction refuses a kubelet
any ``node-role.kubernetes.io/`` label, so a cluster admin (or the installer) set them."""


@dataclass(frozen=True)
class AddressRules:
    """What a Node's reported address is checked against besides its own kind.

    ``networks``: the operator's ``nodeAddressCIDRs`` (empty: any network);
    ``cluster_ips``: the ``kubernetes`` Service's ClusterIPs; ``endpoints``:
    kube-apiserver's addresses (the Service's EndpointSlices)."""

    networks: tuple[IPNetwork, ...] = ()
    cluster_ips: frozenset[IPAddress] = frozenset()
    endpoints: frozenset[IPAddress] = frozenset()


@dataclass(frozen=True)
class Refusal:
    """An address of ``node`` (of ``kind``, as reported) not published, and why."""

    node: str
    kind: str
    address: str
    why: str


@dataclass(frozen=True)
class NodeAddresses:
    """Every Node's published addresses (``node -> ((kind, address), ...)``, the address
    in its canonical text) and the refused ones."""

    published: Mapping[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    refused: tuple[Refusal, ...] = ()


def parse_address(text: str) -> IPAddress | None:
    """``text`` as an IP address; ``None`` if it is not one (a scoped IPv6 address
    ``fe80::1%eth0`` included)."""
    if "%" in text:
        return None
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def special_kind(ip: IPAddress) -> str | None:
    """The kind of address ``ip`` is if it can never be one node's own, else ``None``."""
    if ip.is_unspecified or (ip.version == 4 and ip in _THIS_NETWORK):
        return "an unspecified address"
    if ip.is_loopback:
        return "a loopback address"
    if ip.is_link_local:
        return "a link-local address"
    if ip.is_multicast:
        return "a multicast address"
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return "an IPv4-mapped IPv6 address"
    if ip.is_reserved:
        return "a reserved address"
    return None


def refusal(
    ip: IPAddress | None, rules: AddressRules, *, control_plane: bool = False
) -> str | None:
    """Why ``ip`` (one node's reported address) cannot be published, ``None`` if it may
    (but for the duplicates, which need every Node: :func:`node_addresses`).
    ``control_plane``: the Node is labelled a control-plane node (by an admin), so an
    address of kube-apiserver's may be its own."""
    if ip is None:
        return "it is not an IP address"
    kind = special_kind(ip)
    if kind is not None:
        return f"it is {kind}"
    if ip in rules.cluster_ips:
        return "it is the ClusterIP of the kubernetes Service (kube-apiserver's)"
    if ip in rules.endpoints and not control_plane:
        return (
            "it is an endpoint of the kubernetes Service (kube-apiserver's address), and "
            "the Node is not labelled a control-plane node (" + CONTROL_PLANE_LABELS[0] + ")"
        )
    if rules.networks and not any(ip in net for net in rules.networks):
        return (
            "it is outside nodeAddressCIDRs ("
            + ", ".join(str(net) for net in rules.networks)
            + ") of the servicelb cloud-config"
        )
    return None


def node_addresses(nodes: Iterable[Node], rules: AddressRules | None = None) -> NodeAddresses:
    """The addresses each Node may have published, and the refused ones (see the
    module): ``nodes`` must be every Node, for an address two Nodes report is refused to
    both."""
    rules = rules or AddressRules()
    reported: list[tuple[str, str, str, IPAddress | None]] = []
    holders: dict[IPAddress, set[str]] = {}
    control_plane: set[str] = set()
    for node in nodes:
        name = node.metadata.name
        if any(label in node.metadata.labels for label in CONTROL_PLANE_LABELS):
            control_plane.add(name)
        for entry in node.status.addresses:
            if entry.type not in PUBLISHED_TYPES:
                continue
            ip = parse_address(entry.address)
            reported.append((name, entry.type, entry.address, ip))
            if ip is not None:
                holders.setdefault(ip, set()).add(name)
    published: dict[str, list[tuple[str, str]]] = {}
    refused: list[Refusal] = []
    for name, kind, text, ip in reported:
        why = refusal(ip, rules, control_plane=name in control_plane)
        if why is None and ip is not None and len(holders[ip]) > 1:
            others = sorted(holders[ip] - {name})
            why = "Node " + ", ".join(others[:5]) + (" and others" if len(others) > 5 else "")
            why += " reports it too"
        if why is not None:
            # The node wrote the text: quoted and cut when it is not an address.
            shown = text if ip is not None else repr(text[:64])
            refused.append(Refusal(name, kind, shown, why))
            continue
        assert ip is not None
        pair = (kind, str(ip))
        mine = published.setdefault(name, [])
        if pair not in mine:
            mine.append(pair)
    return NodeAddresses(
        published={name: tuple(pairs) for name, pairs in published.items()},
        refused=tuple(refused),
    )


def serving_nodes(pods: Iterable[Pod]) -> frozenset[str]:
    """Nodes with a ready svclb pod (bound, with an IP, not being deleted: unlike k3s,
    a pod whose node was labelled out leaves the status when its deletion starts, not
    only once its kubelet has reported it unready)."""
    return frozenset(
        p.spec.node_name
        for p in pods
        if p.spec.node_name
        and p.status.pod_ip
        and p.ready
        and p.metadata.deletion_timestamp is None
    )


def endpoint_nodes(slices: Iterable[EndpointSlice]) -> frozenset[str]:
    """Nodes with a ready pod endpoint in ``slices`` (one Service's)."""
    return frozenset(
        e.node_name
        for s in slices
        for e in s.endpoints or ()
        if e.node_name
        and e.conditions.ready is True
        and e.target_ref is not None
        and e.target_ref.kind == "Pod"
    )


def ingress(
    service: Service, addresses: NodeAddresses, serving: Iterable[str]
) -> LoadBalancerStatus:
    """The status for ``service`` given the ``serving`` node names (already narrowed to
    ready endpoints for Local under ``endpointNodes``) and the Nodes' published
    ``addresses``; a node with none
    (refused, or no longer a Node) adds nothing. Only a published ``ExternalIP`` turns
    the Service to external addresses: a refused one changes nothing."""
    external: set[str] = set()
    internal: set[str] = set()
    for name in serving:
        for kind, address in addresses.published.get(name, ()):
            (external if kind == "ExternalIP" else internal).add(address)
    chosen = external or internal
    by_family: dict[str, list[str]] = {"IPv4": [], "IPv6": []}
    for text in chosen:
        version = ipaddress.ip_address(text).version
        by_family["IPv4" if version == 4 else "IPv6"].append(text)
    ips = [ip for family in service.spec.ip_families for ip in sorted(by_family.get(family, ()))]
    return LoadBalancerStatus(
        ingress=tuple(LoadBalancerIngress(ip=ip, ip_mode="VIP") for ip in ips)
    )


__all__ = [
    "CONTROL_PLANE_LABELS",
    "PUBLISHED_TYPES",
    "AddressRules",
    "NodeAddresses",
    "Refusal",
    "endpoint_nodes",
    "ingress",
    "node_addresses",
    "parse_address",
    "refusal",
    "serving_nodes",
    "special_kind",
]
