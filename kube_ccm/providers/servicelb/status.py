"""The ingress rule (k3s ``getStatus``/``podIPs``/``filterByIPFamily``).

A Service's ingress lists the nodes that run a ready svclb pod of it (bound, with a
pod IP, ``Ready``, not being deleted), and with ``externalTrafficPolicy: Local`` only
those among them with a ready endpoint (a pod) of the Service: their ``ExternalIP``
addresses if any of those nodes has one, else their ``InternalIP`` addresses; then,
for each of the Service's ``ipFamilies`` in order, that family's addresses sorted as
strings.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping

from kube_ccm.api.objects import LoadBalancerIngress, LoadBalancerStatus, Node, Service
from kube_ccm.providers.servicelb.objects import EndpointSlice, Pod


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
    service: Service, nodes: Mapping[str, Node], serving: Iterable[str]
) -> LoadBalancerStatus:
    """The status for ``service`` given the ``serving`` node names (already narrowed to
    ready endpoints for Local); nodes no longer in ``nodes`` are skipped."""
    external: set[str] = set()
    internal: set[str] = set()
    for name in serving:
        node = nodes.get(name)
        if node is None:
            continue
        for address in node.status.addresses:
            if address.type == "ExternalIP":
                external.add(address.address)
            elif address.type == "InternalIP":
                internal.add(address.address)
    chosen = external or internal
    by_family: dict[str, list[str]] = {"IPv4": [], "IPv6": []}
    for text in chosen:
        try:
            version = ipaddress.ip_address(text).version
        except ValueError:
            continue
        by_family["IPv4" if version == 4 else "IPv6"].append(text)
    ips = [ip for family in service.spec.ip_families for ip in sorted(by_family.get(family, ()))]
    return LoadBalancerStatus(
        ingress=tuple(LoadBalancerIngress(ip=ip, ip_mode="VIP") for ip in ips)
    )


__all__ = ["endpoint_nodes", "ingress", "serving_nodes"]
