"""What ippool reads from a Service's annotations and spec, and the names it writes.

kube-vip's address annotation (what kube-vip announces, and how a Service asks for
given addresses), ippool's own sharing key, pool and cross-namespace annotations,
and MetalLB's and Cilium's forms of each, honoured so Services move over unchanged
(a Cilium key read as Cilium does, its older ``io.cilium/`` form when the newer is
absent). Each value is length-checked before it is parsed
(:func:`kube_ccm.cloudprovider.annotations.bounded`) and quoted in messages only as
a short prefix; :data:`SERVICE_ANNOTATIONS` offers the same checks to the
service-annotations webhook. A bad value is an :class:`IPPoolError` whose message
(an Event) says what to change.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping, Sequence

from kube_ccm.api.objects import ObjectMeta, Service
from kube_ccm.cloudprovider.annotations import (
    AnnotationTooLongError,
    ServiceAnnotation,
    bounded,
    quoted,
)
from kube_ccm.providers.ippool.claims import ANY_NAMESPACE, Claim, Holder, key_digest
from kube_ccm.providers.ippool.pools import IPAddress, family_of, zone_problem

ADDRESSES_ANNOTATION = "kube-vip.io/loadbalancerIPs"
"""What kube-vip announces; also how a Service asks for given addresses."""
ALLOCATED_ANNOTATION = "ippool.kube-ccm.io/allocated"
"""The addresses this provider wrote to :data:`ADDRESSES_ANNOTATION` (so a value the
provider wrote itself is not read back as the user's request). Empty, with
``announcer: status`` (no address annotation to remove): a guest of another namespace
lost its address, and is marked so that the service controller syncs it again (its
status still shows that address); the mark goes when it has an address again. (The
same key as ever, so that an admission policy that allows it needs no change.)"""
SHARING_KEY_ANNOTATION = "ippool.kube-ccm.io/sharing-key"
POOL_ANNOTATION = "ippool.kube-ccm.io/pool"
"""The LoadBalancerPool a Service takes its addresses from (also one with
``autoAssign: false``)."""
POOL_NAME_LIMIT = 253
METALLB_SHARING_KEY_ANNOTATION = "metallb.universe.tf/allow-shared-ip"
"""MetalLB's sharing key (its older form), honoured too so Services move over unchanged."""
METALLB_IO_SHARING_KEY_ANNOTATION = "metallb.io/allow-shared-ip"
CILIUM_SHARING_KEY_ANNOTATION = "lbipam.cilium.io/sharing-key"
METALLB_ADDRESSES_ANNOTATIONS = (
    "metallb.io/loadBalancerIPs",
    "metallb.universe.tf/loadBalancerIPs",
)
CILIUM_ADDRESSES_ANNOTATION = "lbipam.cilium.io/ips"
CILIUM_ADDRESSES_ALIAS = "io.cilium/lb-ipam-ips"
"""Cilium's older form of :data:`CILIUM_ADDRESSES_ANNOTATION`, which Cilium still reads
(``annotation.LBIPAMIPKeyAlias``) when the newer key is absent; so does ippool."""
CILIUM_SHARING_KEY_ALIAS = "io.cilium/lb-ipam-sharing-key"
"""Cilium's older form of :data:`CILIUM_SHARING_KEY_ANNOTATION` (read likewise)."""
CILIUM_CROSS_NAMESPACE_ALIAS = "io.cilium/lb-ipam-sharing-cross-namespace"
"""Cilium's older form of :data:`CILIUM_CROSS_NAMESPACE_ANNOTATION` (read likewise)."""
METALLB_POOL_ANNOTATIONS = ("metallb.io/address-pool", "metallb.universe.tf/address-pool")
SHARING_KEY_ALIASES: tuple[tuple[str, str], ...] = (
    (SHARING_KEY_ANNOTATION, ""),
    (METALLB_IO_SHARING_KEY_ANNOTATION, "metallb"),
    (METALLB_SHARING_KEY_ANNOTATION, "metallb"),
    (CILIUM_SHARING_KEY_ANNOTATION, "cilium"),
)
"""Where a sharing key may be written, and whose sharing rules it brings."""
ADDRESSES_ALIASES = (*METALLB_ADDRESSES_ANNOTATIONS, CILIUM_ADDRESSES_ANNOTATION)
"""MetalLB's and Cilium's forms of :data:`ADDRESSES_ANNOTATION` (a request only: ippool
writes kube-vip's)."""
CROSS_NAMESPACE_ANNOTATION = "ippool.kube-ccm.io/sharing-cross-namespace"
"""The namespaces (comma-separated, ``*`` for all) a Service agrees to share its
address with; both sides must name each other."""
CILIUM_CROSS_NAMESPACE_ANNOTATION = "lbipam.cilium.io/sharing-cross-namespace"
"""Cilium LB-IPAM's form of :data:`CROSS_NAMESPACE_ANNOTATION`, honoured too."""
CILIUM_ALIASES = {
    CILIUM_ADDRESSES_ANNOTATION: CILIUM_ADDRESSES_ALIAS,
    CILIUM_SHARING_KEY_ANNOTATION: CILIUM_SHARING_KEY_ALIAS,
    CILIUM_CROSS_NAMESPACE_ANNOTATION: CILIUM_CROSS_NAMESPACE_ALIAS,
}
"""Each Cilium annotation and its older ``io.cilium/`` form. As Cilium's
``annotation.Get``: the older form is read only when the newer key is absent (a newer
key that is present wins, even when empty)."""
DEFAULT_CLUSTER = "kubernetes"
"""``--cluster-name``'s default: the cluster of claims that record none."""
ADDRESSES_LIMIT = 128
"""The longest address annotation read (two IPv6 addresses in full take 79)."""
SHARING_KEY_LIMIT = 253
NAMESPACES_LIMIT = 2048
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class IPPoolError(Exception):
    """A Service cannot get an address; the message (an Event) says why and what to do."""


class IPPoolRetryError(IPPoolError):
    """Lost races, nothing the user must change: the retry will do."""


def _ports(service: Service) -> tuple[str, ...]:
    return tuple(sorted({f"{p.protocol or 'TCP'}/{p.port}" for p in service.spec.ports}))


def annotation(service: Service, key: str, limit: int) -> str:
    """The stripped value of ``key``; :class:`IPPoolError` when it is over ``limit``
    (checked before anything else reads it)."""
    try:
        return bounded(service.metadata.annotations, key, limit).strip()
    except AnnotationTooLongError as exc:
        raise IPPoolError(str(exc)) from None


def cilium_key(service: Service, key: str) -> str:
    """Where Cilium reads ``key`` on this Service: ``key`` itself, or its older
    ``io.cilium/`` form (:data:`CILIUM_ALIASES`) when only that is there."""
    alias = CILIUM_ALIASES.get(key)
    annotations = service.metadata.annotations
    return alias if alias and key not in annotations and alias in annotations else key


def _one_of(service: Service, keys: Sequence[str], limit: int) -> tuple[str, list[str]]:
    """The value the annotations ``keys`` agree on ("" for none) and those that say
    it (a Cilium key read as Cilium does, :func:`cilium_key`); :class:`IPPoolError`
    naming two that contradict each other."""
    found = [
        (cilium_key(service, k), annotation(service, cilium_key(service, k), limit)) for k in keys
    ]
    found = [(k, v) for k, v in found if v]
    if not found:
        return "", []
    first_key, value = found[0]
    for key, other in found[1:]:
        if other != value:
            raise IPPoolError(
                f"contradicting annotations: {first_key} is {quoted(value)} and {key} is "
                f"{quoted(other)}; keep one, or give both the same value"
            )
    return value, [k for k, _ in found]


def sharing_key(service: Service) -> str:
    return sharing_rules(service)[0]


def sharing_rules(service: Service) -> tuple[str, frozenset[str]]:
    """The Service's sharing key, from ours, MetalLB's or Cilium's annotation, and
    whose sharing rules apply (each project's, for the annotation it is written in)."""
    keys = [k for k, _ in SHARING_KEY_ALIASES]
    value, where = _one_of(service, keys, SHARING_KEY_LIMIT)
    rules = frozenset(r for k, r in SHARING_KEY_ALIASES if cilium_key(service, k) in where and r)
    return value, rules


def pool_name(service: Service) -> str:
    """The pool a Service names: :data:`POOL_ANNOTATION` or MetalLB's."""
    return _one_of(service, (POOL_ANNOTATION, *METALLB_POOL_ANNOTATIONS), POOL_NAME_LIMIT)[0]


def namespace_list(text: str) -> frozenset[str]:
    """A cross-namespace annotation's value: namespaces, comma-separated, or ``*``;
    ``ValueError`` naming a bad entry (quoted short)."""
    if len(text) > NAMESPACES_LIMIT:
        raise ValueError(f"it is {len(text)} characters long, over the limit of {NAMESPACES_LIMIT}")
    names: set[str] = set()
    for part in text.split(","):
        name = part.strip()
        if not name:
            continue
        if name != ANY_NAMESPACE and not _NAMESPACE.match(name):
            raise ValueError(
                f"{quoted(name)} is not a namespace name; write namespaces, "
                f"comma-separated, or {ANY_NAMESPACE} for all"
            )
        names.add(name)
    return frozenset(names)


def share_with(service: Service) -> frozenset[str]:
    """The namespaces the Service's cross-namespace annotations name."""
    names: set[str] = set()
    for key in (CROSS_NAMESPACE_ANNOTATION, cilium_key(service, CILIUM_CROSS_NAMESPACE_ANNOTATION)):
        try:
            names |= namespace_list(annotation(service, key, NAMESPACES_LIMIT))
        except ValueError as exc:
            raise IPPoolError(f"annotation {key}: {exc}") from None
    return frozenset(names)


def _check_length(limit: int) -> Callable[[str], None]:
    def check(value: str) -> None:
        if len(value) > limit:
            raise ValueError(f"it is {len(value)} characters long, over the limit of {limit}")

    return check


def _check_addresses(value: str) -> None:
    if len(value) > ADDRESSES_LIMIT:
        raise ValueError(f"it is {len(value)} characters long, over the limit of {ADDRESSES_LIMIT}")
    try:
        requested_addresses(Service(metadata=ObjectMeta(annotations={ADDRESSES_ANNOTATION: value})))
    except IPPoolError as exc:
        raise ValueError(str(exc)) from None


def _check_namespaces(value: str) -> None:
    namespace_list(value)


SERVICE_ANNOTATIONS: tuple[ServiceAnnotation, ...] = (
    ServiceAnnotation(
        ADDRESSES_ANNOTATION,
        "the addresses to give this Service, one per IP family, comma-separated (each "
        "in a pool serving its namespace); also where ippool writes what it gave",
        _check_addresses,
    ),
    *(
        ServiceAnnotation(
            key,
            f"{'MetalLB' if key.startswith('metallb') else 'Cilium'}'s form of "
            f"{ADDRESSES_ANNOTATION} (a request; ippool writes kube-vip's)",
            _check_addresses,
        )
        for key in ADDRESSES_ALIASES
    ),
    *(
        ServiceAnnotation(
            key, f"MetalLB's form of {POOL_ANNOTATION}", _check_length(POOL_NAME_LIMIT)
        )
        for key in METALLB_POOL_ANNOTATIONS
    ),
    ServiceAnnotation(
        METALLB_IO_SHARING_KEY_ANNOTATION,
        f"MetalLB's form of {SHARING_KEY_ANNOTATION}, with MetalLB's sharing rules",
        _check_length(SHARING_KEY_LIMIT),
    ),
    ServiceAnnotation(
        CILIUM_SHARING_KEY_ANNOTATION,
        f"Cilium's form of {SHARING_KEY_ANNOTATION}, with Cilium's sharing rules",
        _check_length(SHARING_KEY_LIMIT),
    ),
    ServiceAnnotation(
        POOL_ANNOTATION,
        "the LoadBalancerPool to take this Service's addresses from (also one with "
        "autoAssign: false)",
        _check_length(POOL_NAME_LIMIT),
    ),
    ServiceAnnotation(
        SHARING_KEY_ANNOTATION,
        "Services of one namespace with the same key share an address when their ports "
        f"do not collide (at most {SHARING_KEY_LIMIT} characters)",
        _check_length(SHARING_KEY_LIMIT),
    ),
    ServiceAnnotation(
        METALLB_SHARING_KEY_ANNOTATION,
        f"MetalLB's form of {SHARING_KEY_ANNOTATION}",
        _check_length(SHARING_KEY_LIMIT),
    ),
    ServiceAnnotation(
        CROSS_NAMESPACE_ANNOTATION,
        "the other namespaces this Service may share its address with (comma-separated, "
        "* for all); the other side must name this one too",
        _check_namespaces,
    ),
    ServiceAnnotation(
        CILIUM_CROSS_NAMESPACE_ANNOTATION,
        f"Cilium's form of {CROSS_NAMESPACE_ANNOTATION}",
        _check_namespaces,
    ),
    ServiceAnnotation(
        CILIUM_ADDRESSES_ALIAS,
        f"Cilium's older form of {CILIUM_ADDRESSES_ANNOTATION} (read when that is absent)",
        _check_addresses,
    ),
    ServiceAnnotation(
        CILIUM_SHARING_KEY_ALIAS,
        f"Cilium's older form of {CILIUM_SHARING_KEY_ANNOTATION} (read when that is absent)",
        _check_length(SHARING_KEY_LIMIT),
    ),
    ServiceAnnotation(
        CILIUM_CROSS_NAMESPACE_ALIAS,
        f"Cilium's older form of {CILIUM_CROSS_NAMESPACE_ANNOTATION} (read when that is absent)",
        _check_namespaces,
    ),
)
"""What ippool reads from a Service, for the service-annotations webhook (which
refuses a bad value at ``kubectl apply``) and the service controller's length check."""


def holder_of(service: Service, cluster_name: str = DEFAULT_CLUSTER) -> Holder:
    key, rules = sharing_rules(service)
    return Holder(
        cluster=cluster_name,
        namespace=service.metadata.namespace,
        name=service.metadata.name,
        uid=service.metadata.uid,
        ports=_ports(service),
        sharing_key=key_digest(key) if key else "",
        share_with=share_with(service),
        rules=rules,
        traffic_policy=(service.spec.external_traffic_policy or "Cluster") if key else "",
    )


def in_family_order(service: Service, claims: Sequence[Claim]) -> list[Claim]:
    """The Service's primary family first (``spec.ipFamilies`` order), as the apiserver
    orders ``spec.clusterIPs``; IPv4 first when it names none."""
    order = service.spec.ip_families or ("IPv4", "IPv6")

    def rank(claim: Claim) -> int:
        family = family_of(claim.address)
        return order.index(family) if family in order else len(order)

    return sorted(claims, key=lambda c: (rank(c), c.address.version))


def wanted_families(service: Service) -> tuple[tuple[str, ...], bool]:
    """(families in order, all required): one address per family the Service has
    when it is dual-stack, else its first family (IPv4 if it names none)."""
    families = service.spec.ip_families or ("IPv4",)
    policy = service.spec.ip_family_policy or "SingleStack"
    if policy == "SingleStack":
        return families[:1], True
    return families, policy == "RequireDualStack"


def request_source(service: Service) -> str:
    """Where the Service's request is written (kube-vip reads the annotation first)."""
    return _requests(service)[0][0] if _requests(service) else "spec.loadBalancerIP"


def _parse_addresses(text: str, source: str) -> tuple[IPAddress, ...]:
    addresses: list[IPAddress] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        zoned = zone_problem(part)
        if zoned:
            raise IPPoolError(f"{source} {quoted(part)} {zoned}")
        try:
            addresses.append(ipaddress.ip_address(part))
        except ValueError:
            raise IPPoolError(
                f"{source} {quoted(part)} is not an IP address; write addresses, comma-separated"
            ) from None
    if len({a.version for a in addresses}) != len(addresses):
        raise IPPoolError(_one_per_family(addresses, text, source))
    return tuple(addresses)


def _one_per_family(addresses: Sequence[IPAddress], text: str, source: str) -> str:
    """Why a request of two addresses of one family is refused, and what to change
    (Cilium's documented ``lbipam.cilium.io/ips: "20.0.10.100,20.0.10.200"`` among
    them: LB-IPAM gives a Service every address listed)."""
    counts = {v: sum(a.version == v for a in addresses) for v in (4, 6)}
    version = next(v for v in (4, 6) if counts[v] > 1)
    family = f"IPv{version}"
    peer = (
        " (Cilium LB-IPAM gives a Service every address listed)"
        if source in CILIUM_ALIASES or source in CILIUM_ALIASES.values()
        else ""
    )
    return (
        f"{source} {quoted(text)} asks for {counts[version]} {family} addresses; ippool gives "
        f"a Service one per family{peer}: keep one, and ask for each other in a Service "
        "of its own (same selector and ports)"
    )


def _requests(service: Service) -> list[tuple[str, tuple[IPAddress, ...]]]:
    """Each place the Service asks for addresses, with what it asks for: kube-vip's
    annotation (unless ippool wrote it), MetalLB's and Cilium's, then
    ``spec.loadBalancerIP``."""
    found: list[tuple[str, tuple[IPAddress, ...]]] = []
    text = annotation(service, ADDRESSES_ANNOTATION, ADDRESSES_LIMIT)
    if text and text != annotation(service, ALLOCATED_ANNOTATION, ADDRESSES_LIMIT):
        found.append((ADDRESSES_ANNOTATION, _parse_addresses(text, ADDRESSES_ANNOTATION)))
    for key in (cilium_key(service, k) for k in ADDRESSES_ALIASES):
        text = annotation(service, key, ADDRESSES_LIMIT)
        if text:
            found.append((key, _parse_addresses(text, key)))
    if service.spec.load_balancer_ip:
        source = "spec.loadBalancerIP"
        found.append((source, _parse_addresses(service.spec.load_balancer_ip, source)))
    return [(source, addresses) for source, addresses in found if addresses]


def still_announced(address: IPAddress, source: str, namespace: str, kube_vip: bool = True) -> str:
    """What a refused request still does (``kube_vip``: when kube-vip announces), and
    what to change."""
    if not kube_vip or source not in (ADDRESSES_ANNOTATION, "spec.loadBalancerIP"):
        return (
            f"; remove {source}, or change it to a free address of a pool serving "
            f"namespace {namespace!r}"
        )
    if address == ipaddress.IPv4Address("0.0.0.0"):
        return (
            f"; 0.0.0.0 is kube-vip's DHCP mode: kube-vip still asks a DHCP server for an "
            f"address for this Service, from its {source}, which ippool does not support: "
            f"remove {source}, or change it to a free address of a pool serving "
            f"namespace {namespace!r}"
        )
    return (
        f"; kube-vip still announces {address} for this Service, from its {source} "
        f"(kube-vip reads {ADDRESSES_ANNOTATION} first, then spec.loadBalancerIP): "
        f"remove {source}, or change it to a free address of a pool serving "
        f"namespace {namespace!r}"
    )


def own_annotation_write(
    old: Mapping[str, str], new: Mapping[str, str], *, writes_annotation: bool = True
) -> bool:
    """Whether ``old`` → ``new`` is only this provider writing what it gave (both
    :data:`ADDRESSES_ANNOTATION` and :data:`ALLOCATED_ANNOTATION`, equal): a change
    the service controller need not sync again for. A user's edit of either, their
    removal (a guest evicted), or the empty :data:`ALLOCATED_ANNOTATION` that marks
    an eviction is not. Without ``writes_annotation`` (``announcer: status``) the
    removal of what an earlier run wrote, or of that mark, is this provider's own."""
    changed = {k for k in old.keys() | new.keys() if old.get(k) != new.get(k)}
    if not changed or not changed <= {ADDRESSES_ANNOTATION, ALLOCATED_ANNOTATION}:
        return False
    written = new.get(ALLOCATED_ANNOTATION)
    if written is not None:
        return bool(written) and new.get(ADDRESSES_ANNOTATION) == written
    mine = old.get(ALLOCATED_ANNOTATION)
    return (
        not writes_annotation
        and mine is not None
        and (
            ADDRESSES_ANNOTATION not in changed
            or (ADDRESSES_ANNOTATION not in new and old.get(ADDRESSES_ANNOTATION) == mine)
        )
    )


def requested_addresses(service: Service) -> tuple[IPAddress, ...]:
    """The addresses the Service asks for; raises :class:`IPPoolError` for a bad one,
    or for two requests that contradict each other (naming both). The annotations
    must ask for the same addresses; ``spec.loadBalancerIP``, read only when no
    annotation asks (as before), contradicts them only when it is not one of theirs."""
    found = _requests(service)
    if not found:
        return ()
    source, addresses = found[0]
    for other, theirs in found[1:]:
        agree = (
            set(theirs) <= set(addresses)
            if other == "spec.loadBalancerIP"
            else set(theirs) == set(addresses)
        )
        if not agree:
            raise IPPoolError(
                f"contradicting requests: {source} asks for "
                f"{','.join(a.compressed for a in addresses)} and {other} for "
                f"{','.join(a.compressed for a in theirs)}; keep one, or make them agree"
            )
    return addresses
