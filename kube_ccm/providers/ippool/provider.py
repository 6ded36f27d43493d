"""The ``ippool`` provider: load balancer addresses from pools, with no cloud behind them.

Pools come from kube-vip-cloud-provider's ConfigMap, the cloud-config, and
LoadBalancerPool objects (:mod:`.objects`), watched by an informer of the
provider's own; a Service is served by its namespace's kube-vip pool, then the
LoadBalancerPools that serve it (by priority), then the global kube-vip pool, or by
the one pool it names in :data:`POOL_ANNOTATION`. The provider writes each
LoadBalancerPool's status.

On bare metal nothing hands out LoadBalancer addresses; this provider does, and an
announcer (kube-vip, or anything that reads the same annotation) makes them
reachable. It gives each ``type: LoadBalancer`` Service an address per IP family
from the pools serving its namespace, records the claim in the API first
(:mod:`.claims`), then writes the address to the Service's
``kube-vip.io/loadbalancerIPs`` annotation (what kube-vip announces) and returns
``status.loadBalancer.ingress`` with ``ipMode: VIP``. Deleting the Service (the
service controller's finalizer path) releases the address.

A Service may ask for its addresses with ``kube-vip.io/loadbalancerIPs`` (comma-
separated, one per family) or ``spec.loadBalancerIP``; each must lie in a pool
serving its namespace and be free, or shareable: Services with the same sharing key
(:data:`SHARING_KEY_ANNOTATION`) may share an address when no protocol/port pair
collides (TCP and UDP may use one port number).

Tenants: sharing stays inside a namespace unless every Service involved names the
other's namespace in :data:`CROSS_NAMESPACE_ANNOTATION` (or Cilium's). The
namespace that took an address first owns it: its Services win a port over a guest
of another namespace, and when its last Service leaves, the guests lose the address
too (their annotation is removed, so the announcer stops and they are synced
again). A Service's Events never name another namespace's Services, ports, keys or
pools ("taken"); the daemon's log has the detail. Annotation values are
length-checked before they are parsed, and quoted in messages only as a short prefix.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from kube_ccm.api.objects import (
    LoadBalancerIngress,
    LoadBalancerStatus,
    Node,
    ObjectMeta,
    Service,
)
from kube_ccm.cloudprovider import (
    CONFIG_MAPS,
    NAMESPACES,
    SERVICES,
    ApiError,
    ClientBuilder,
    CloudProvider,
    EventRecorder,
    Informer,
    KubeClient,
    KubernetesClient,
    LoadBalancer,
    LoadBalancerInventory,
    ObjectReference,
    OwnedLoadBalancer,
    ProviderEventRecorder,
    TransportError,
    TypedClient,
    default_load_balancer_name,
    start_event_recorder,
)
from kube_ccm.cloudprovider.annotations import (
    AnnotationTooLongError,
    ServiceAnnotation,
    bounded,
    quoted,
)
from kube_ccm.providers.ippool.claims import (
    ANY_NAMESPACE,
    Claim,
    ClaimStore,
    Holder,
    key_digest,
)
from kube_ccm.providers.ippool.config import IPPoolConfig
from kube_ccm.providers.ippool.kubevip import read_kubevip
from kube_ccm.providers.ippool.objects import (
    CILIUM_LOAD_BALANCER_IP_POOLS,
    GROUP,
    KIND,
    LOAD_BALANCER_POOLS,
    METALLB_IP_ADDRESS_POOLS,
    POOL_OBJECTS,
    RESOURCE,
    VERSION,
    ObjectPool,
    PoolObject,
    object_named,
    objects_of,
    parse_object,
    resolve,
    status_of,
)
from kube_ccm.providers.ippool.pools import (
    GLOBAL,
    FreeIndex,
    IPAddress,
    Pool,
    PoolError,
    Pools,
    family_of,
    zone_problem,
)

log = logging.getLogger(__name__)

PROVIDER_NAME = "ippool"
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
POOL_CONFLICT_REASON = "PoolConflict"
"""Warning Event on a LoadBalancerPool that overlaps another pool."""
POOL_INVALID_REASON = "PoolInvalid"
"""Warning Event on a LoadBalancerPool that cannot be read (an address, a selector)."""
OBJECTS_RETRY = 60.0
"""Seconds between looks for the LoadBalancerPool CRD while it is not installed."""
OBJECTS_WAIT = 30.0
"""Seconds an allocation waits for the LoadBalancerPools to be read before it is
retried (never served without them: it could take an address they would not give)."""
PEERS_TTL = 300.0
"""Seconds a look for MetalLB's and Cilium's pool kinds (:meth:`IPPoolProvider.peers`)
is kept."""
PEERS = (
    (
        "MetalLB's IPAddressPool (metallb.io)",
        (METALLB_IP_ADDRESS_POOLS,),
        "one LoadBalancerPool per IPAddressPool (docs/on-prem.md, Migrating from MetalLB)",
    ),
    (
        "Cilium's CiliumLoadBalancerIPPool (cilium.io)",
        CILIUM_LOAD_BALANCER_IP_POOLS,
        "one LoadBalancerPool per CiliumLoadBalancerIPPool (docs/on-prem.md, Migrating "
        "from Cilium LB-IPAM)",
    ),
)
"""The pool kinds of the allocators ippool replaces, and what to write instead."""
STATUS_DELAY = 1.0
"""Seconds a pool's status waits after a change, to write many changes at once."""
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
NOT_SHARED_REASON = "AddressNotShared"
"""Warning Event: a Service with a sharing key got an address of its own, and why."""
OUTSIDE_POOLS_REASON = "AddressOutsidePools"
"""Warning Event: a Service keeps an address that no pool holds any more."""
ALLOCATION_FAILED_REASON = "AllocationFailed"
"""Warning Event: a Service was refused an address. MetalLB's controller's reason and
message shape (``Failed to allocate IP for "<namespace>/<name>": <why>``), so that
alerts on it keep working; the service controller's ``SyncLoadBalancerFailed``, with
the same words, is written too."""
EVENT_SOURCE = "ippool"
DEFAULT_CLUSTER = "kubernetes"
"""``--cluster-name``'s default: the cluster of claims that record none."""
ADDRESSES_LIMIT = 128
"""The longest address annotation read (two IPv6 addresses in full take 79)."""
SHARING_KEY_LIMIT = 253
NAMESPACES_LIMIT = 2048
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class IPPoolError(Exception):
    """A Service cannot get an address; the message (an Event) says why and what to do."""


class _RetryError(IPPoolError):
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


def collisions(holder: Holder, others: Sequence[Holder]) -> list[str]:
    """The protocol/port pairs ``holder`` and ``others`` both use."""
    mine = set(holder.ports)
    return sorted({f"{p} ({o.key})" for o in others for p in o.ports if p in mine})


def count(addresses: int) -> str:
    """A number of addresses as a reader takes it in: exact up to a billion, else as a
    power of two (an IPv6 /64 is ``2^64``), ``more than 2^N`` when not one."""
    if addresses < 10**9:
        return str(addresses)
    power = addresses.bit_length() - 1
    return f"2^{power}" if addresses == 1 << power else f"more than 2^{power}"


def describe_pools(pools: Sequence[Pool], family: str | None = None) -> str:
    """Each pool and its size (of ``family``; per family for a pool of both when none
    is given): ``lb (14 IPv4, 2^64 IPv6 addresses)``, never the two summed."""

    def sizes(pool: Pool) -> str:
        families = (family,) if family else tuple(sorted(pool.families()))
        if len(families) == 1:
            return count(pool.size(families[0]))
        return ", ".join(f"{count(pool.size(f))} {f}" for f in families)

    return ", ".join(f"{p.key} ({sizes(p)} addresses)" for p in pools) or "none"


def _left_out(pools: Pools, address: IPAddress) -> str:
    """Why ``address``, inside a pool's CIDR, is in none of its spans: the CIDR's first
    or last address, which kube-vip's ``skip-end-ips-in-cidr`` (or a LoadBalancerPool
    without ``allowFirstLastIPs``) leaves out; "" when it is in no pool's CIDR."""
    for pool in (*pools.pools, *(o.pool for o in objects_of(pools))):
        for span in pool.spans:
            if "/" not in span.text:
                continue
            network = ipaddress.ip_network(span.text, strict=False)
            if network.version == address.version and address in network:
                rule = (
                    "skip-end-ips-in-cidr"
                    if pool.resource != RESOURCE
                    else "the LoadBalancerPool (allowFirstLastIPs is false)"
                )
                return (
                    f"its address {address} is in {span.text} of {pool.key}, but as the "
                    f"first or last address of that CIDR it is left out by {rule}"
                )
    return ""


def _backend(holder: Holder) -> str:
    """MetalLB's backend key (``k8salloc.BackendKey``): the selector for Local, else ""."""
    return holder.selector if holder.traffic_policy == "Local" else ""


def conflict(holder: Holder, other: Holder) -> str:
    """Why ``holder`` may not share an address with ``other`` ("" when it may), in
    full: for the daemon's log, or for an Event when both are of one namespace."""
    if holder.sharing is None:
        return f"held by {other.key}; to share it, give both the same {SHARING_KEY_ANNOTATION}"
    if other.sharing != holder.sharing:
        return (
            f"held by {other.key} with another sharing key; only Services with the same "
            f"{SHARING_KEY_ANNOTATION} share an address"
        )
    if not (holder.consents(other.namespace) and other.consents(holder.namespace)):
        return (
            f"held by {other.key} of another namespace; Services of two namespaces share "
            f"only when each names the other's namespace in {CROSS_NAMESPACE_ANNOTATION}"
        )
    clash = collisions(holder, [other])
    if clash:
        return f"port collision with {', '.join(clash)}; give the Services different ports"
    rules = holder.rules | other.rules
    if "metallb" in rules and _backend(holder) != _backend(other):
        return (
            f"held by {other.key}; MetalLB's rule (its sharing-key annotation): a Service "
            "with externalTrafficPolicy: Local shares an address only with Local Services "
            "of the same spec.selector"
        )
    if "cilium" in rules and holder.traffic_policy != other.traffic_policy:
        return (
            f"held by {other.key} with externalTrafficPolicy "
            f"{other.traffic_policy or 'Cluster'}, this one has "
            f"{holder.traffic_policy or 'Cluster'}; Cilium's rule (its sharing-key "
            "annotation) shares an address only between Services with the same policy"
        )
    return ""


def cross_namespace_hint(holder: Holder) -> str:
    """What a Service with a sharing key, refused an address held in another namespace
    (of which it is told nothing), may change: both sides' opt-in, where MetalLB
    shares by key alone. Said whatever the other Service's key, so it confirms none."""
    if holder.sharing is None:
        return ""
    metallb = (
        "MetalLB shares an address by sharing key alone, across namespaces; "
        if "metallb" in holder.rules
        else ""
    )
    return (
        f"; {metallb}ippool shares with another namespace only when both Services name "
        f"each other's namespace in {CROSS_NAMESPACE_ANNOTATION}: if a Service of "
        "another namespace should share this address, add that annotation to both"
    )


@dataclass(frozen=True)
class _Verdict:
    """Whether a Service may hold a claim alongside the others holding it."""

    detail: str = ""
    """Why not, in full (the daemon's log); "" when it may."""
    public: str = ""
    """Why not, for the Service's Event: "" when a Service of another namespace is in
    the way (nothing of it is told)."""
    evict: tuple[Holder, ...] = ()
    """Guests of another namespace that give way to the owning namespace's Service."""

    @property
    def blocked(self) -> bool:
        return bool(self.detail)


class _CountedLock(asyncio.Lock):
    """A lock that knows how many tasks hold or wait for it (to drop it after)."""

    def __init__(self) -> None:
        super().__init__()
        self.users = 0


class IPPoolLoadBalancer(LoadBalancer, LoadBalancerInventory):
    """Addresses from the pools, claimed in the API (see the module docstring)."""

    service_annotations: Sequence[ServiceAnnotation] = SERVICE_ANNOTATIONS

    def __init__(self, provider: IPPoolProvider) -> None:
        self._provider = provider
        self._indexes: dict[tuple[Pool, str], FreeIndex] = {}
        """The free-address index of each pool and family, for the claims of
        :attr:`_generation`."""
        self._generation = -1
        self._claiming: dict[IPAddress, str] = {}
        """Addresses being created now, with the namespace taking each: the workers
        of this process skip them, and the namespace cap counts them."""
        self._outside: set[IPAddress] = set()
        """Claims already flagged as outside every pool."""
        self._checked: tuple[int, int] | None = None
        """(id of the Pools, claims generation) last checked for claims outside them."""
        self._sharing_locks: dict[tuple[str, str], _CountedLock] = {}
        """One lock per sharing rule in use (:meth:`_allocate`)."""

    def own_annotation_write(self, old: Mapping[str, str], new: Mapping[str, str]) -> bool:
        """The service controller skips a sync for this provider's own write."""
        return own_annotation_write(old, new, writes_annotation=self._writes_annotation)

    @property
    def _writes_annotation(self) -> bool:
        return self._provider.config.writes_annotation

    @property
    def _store(self) -> ClaimStore:
        return self._provider.store

    async def ready(self) -> ClaimStore:
        """The claims, loaded."""
        return await self._ready()

    async def _ready(self) -> ClaimStore:
        store = self._provider.store
        if not store.loaded:
            await self._load()
        return store

    async def _load(self) -> ClaimStore:
        """(Re)build the index, and rewrite claims an older kube-ccm wrote."""
        store = self._provider.store
        await store.load()
        for claim in [c for c in store.all() if c.legacy]:
            await self._migrate(store, claim)
        return store

    async def _migrate(self, store: ClaimStore, claim: Claim) -> None:
        """A claim from before digests and namespaces: its keys become digests, and
        Services of other namespaces that joined by key alone (none could opt in
        then) lose the address, as a guest without consent would now."""
        kept = tuple(h for h in claim.holders if h.namespace == claim.owner)
        evict = tuple(h for h in claim.holders if h.namespace != claim.owner)
        try:
            await self._replace(store, claim, kept, evict)
        except ApiError as exc:
            log.warning("IPAddress %s: could not rewrite its holders: %s", claim.address, exc)

    # -- the contract ------------------------------------------------------------------

    def get_load_balancer_name(self, cluster_name: str, service: Service) -> str:
        return default_load_balancer_name(service)

    async def get_load_balancer(
        self, cluster_name: str, service: Service
    ) -> LoadBalancerStatus | None:
        store = await self._ready()
        held = store.held_by(service.metadata.uid)
        return _status(in_family_order(service, held)) if held else None

    async def ensure_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> LoadBalancerStatus:
        try:
            held = await self._ensure_claims(service, cluster_name)
        except _RetryError:
            raise
        except IPPoolError as exc:
            meta = service.metadata
            self._provider.service_event(
                meta.namespace,
                meta.name,
                meta.uid,
                ALLOCATION_FAILED_REASON,
                f"Failed to allocate IP for {json.dumps(f'{meta.namespace}/{meta.name}')}: {exc}",
            )
            raise
        finally:
            self._provider.claims_changed()
        await self._annotate(service, [c.address for c in held])
        store = self._store
        lost = [c.address for c in held if not _holds(store.get(c.address), service)]
        if lost and self._writes_annotation:
            # Evicted (the owning namespace took a port) between the claims and the
            # annotation: the eviction's own removal may have read the Service before
            # this write, so take it away here, and try again.
            await self._unannotate(service)
            raise _RetryError(f"lost {lost[0]} while announcing it; will retry")
        return _status(held)

    async def update_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> None:
        """Nothing to do: the announcer, not this provider, reaches the nodes."""

    async def ensure_load_balancer_deleted(self, cluster_name: str, service: Service) -> None:
        store = await self._ready()
        for claim in store.held_by(service.metadata.uid):
            await self._leave(claim, service.metadata.uid)
            self._provider.claims_changed()
        if service.metadata.name and (
            self._writes_annotation or ALLOCATED_ANNOTATION in service.metadata.annotations
        ):
            # With announcer: status ippool writes nothing a deleted Service must lose
            # (unless an earlier run did): no read of it either.
            await self._unannotate(service)

    async def list_load_balancers(self, cluster_name: str) -> Sequence[OwnedLoadBalancer]:
        store = await self._load()
        owned: dict[str, OwnedLoadBalancer] = {}
        for claim in store.all():
            for h in claim.holders:
                if (h.cluster or DEFAULT_CLUSTER) != cluster_name:
                    continue  # another --cluster-name's, on this API server
                owned[h.uid] = OwnedLoadBalancer(
                    name=default_load_balancer_name(
                        Service(metadata=ObjectMeta(namespace=h.namespace, name=h.name, uid=h.uid))
                    ),
                    namespace=h.namespace,
                    service_name=h.name,
                    service_uid=h.uid,
                )
        return tuple(owned.values())

    # -- allocation --------------------------------------------------------------------

    async def _ensure_claims(self, service: Service, cluster_name: str) -> list[Claim]:
        store = await self._ready()
        pools = await self._provider.pools()
        self._flag_outside(store, pools)
        namespace = service.metadata.namespace
        serving = await self._serving(pools, service)
        problem = pools.problem_for(namespace)
        if problem is not None and not serving.objects:
            raise IPPoolError(
                f"the pool serving namespace {namespace!r} is invalid: {problem} (the "
                "other pools serve on)"
            )
        kubevip = pools.for_namespace(namespace)
        eligible = serving.automatic
        holder = holder_of(service, cluster_name)
        if "metallb" in holder.rules:
            holder = replace(holder, selector=await self._selector_digest(service))
        if holder.sharing is None and kubevip and pools.sharing_allowed(namespace):
            # kube-vip's allow-share-<namespace> (else -global), also for a namespace
            # served by the global pool: its Services share an address whenever
            # their ports do not collide.
            holder = replace(holder, pool_share=kubevip[0].name)
        requested = requested_addresses(service)
        families, required = wanted_families(service)
        held = store.held_by(holder.uid)

        if requested:
            source = request_source(service)
            named = pool_name(service)
            outside = [a for a in requested if named and not any(a in p for p in serving.requested)]
            if outside:
                raise IPPoolError(
                    f"contradicting requests: {source} asks for {outside[0]}, which is not "
                    f"in LoadBalancerPool {quoted(named)} that the Service's pool annotation "
                    "names; drop one of them"
                    + still_announced(outside[0], source, namespace, self._writes_annotation)
                )
            result = []
            for address in requested:
                try:
                    result.append(
                        await self._take(store, pools, serving.requested, holder, address)
                    )
                except IPPoolError as exc:
                    if not isinstance(exc, _RetryError):
                        raise IPPoolError(
                            f"{exc}"
                            + still_announced(address, source, namespace, self._writes_annotation)
                        ) from None
                    raise
        else:
            result = []
            for family in families:
                mine = next((c for c in held if family_of(c.address) == family), None)
                if mine is not None:
                    result.append(await self._update_ports(store, mine, holder))
                    continue
                offering = [p for p in eligible if family in p.families()]
                if offering:
                    try:
                        result.append(await self._allocate(store, offering, holder, family))
                    except IPPoolError as exc:
                        if isinstance(exc, _RetryError) or not serving.refused:
                            raise
                        raise IPPoolError(f"{exc}; {'; '.join(serving.refused)}") from None
                elif required:
                    raise await self._no_pool(service, family, eligible, serving.refused)
            if not result:
                raise await self._no_pool(service, families[0], eligible, serving.refused)
        wanted = {c.address for c in result}
        for claim in held:
            if claim.address not in wanted:
                await self._leave(claim, holder.uid)
        return in_family_order(service, result)

    async def _no_pool(
        self, service: Service, family: str, eligible: Sequence[Pool], refused: Sequence[str]
    ) -> IPPoolError:
        namespace = service.metadata.namespace
        where = self._provider.config.config_map or "the ippool cloud-config"
        why = f"; {'; '.join(refused)}" if refused else ""
        return IPPoolError(
            f"no pool serving Service {namespace}/{service.metadata.name} (by its namespace "
            f"{namespace!r}, and a LoadBalancerPool's serviceAllocation) has {family} "
            "addresses (pools: "
            f"{describe_pools(eligible, family)}){why}; add one, e.g. a LoadBalancerPool, or "
            f"range-{namespace} or range-global in {where}" + await self._provider.peers_hint()
        )

    async def _serving(self, pools: Pools, service: Service) -> _Serving:
        """The pools that serve ``service``, in the order they are tried: its namespace's
        kube-vip pool, the LoadBalancerPools that serve it (lowest priority first),
        kube-vip's global pool. A Service naming a pool (:data:`POOL_ANNOTATION`) gets
        that one only, or an error saying why not."""
        namespace = service.metadata.namespace
        own = pools.by_name.get(namespace)
        glob = pools.by_name.get(GLOBAL)
        named = pool_name(service)
        labels: Mapping[str, str] | None = None
        serving: list[ObjectPool] = []
        refused: list[str] = []
        for obj in objects_of(pools):
            if obj.problem:
                if not named or named == obj.name:
                    refused.append(f"LoadBalancerPool {obj.name} is invalid (see its status)")
                continue
            if named and obj.name != named:
                continue
            if labels is None and obj.needs_namespace_labels:
                labels = await self._namespace_labels(namespace)
            why = obj.why_not_serving(
                namespace, labels or {}, service.metadata.labels, service.metadata.name
            )
            if why:
                if named:
                    refused.append(why)
                continue
            if not obj.usable:
                refused.append(obj.why_not_usable())
                continue
            serving.append(obj)
        if named:
            if not serving:
                raise IPPoolError(
                    f"the Service's pool annotation asks for LoadBalancerPool "
                    f"{quoted(named)}: "
                    + ("; ".join(refused) if refused else "there is no pool of that name")
                )
            pool = serving[0].pool
            return _Serving((pool,), (pool,), tuple(serving), tuple(refused))
        automatic = [p for p in (own,) if p]
        automatic += [o.pool for o in serving if o.auto_assign]
        automatic += [p for p in (glob,) if p and p is not own]
        requested = [p for p in (own,) if p]
        requested += [o.pool for o in serving]
        requested += [p for p in (glob,) if p and p is not own]
        return _Serving(tuple(automatic), tuple(requested), tuple(serving), tuple(refused))

    async def _selector_digest(self, service: Service) -> str:
        """A digest of the Service's ``spec.selector`` (read fresh: the object model
        keeps no selector), for MetalLB's sharing rule; "" for none."""
        try:
            item = await self._provider.client.get(
                SERVICES.path(service.metadata.name, namespace=service.metadata.namespace)
            )
        except ApiError as exc:
            if exc.not_found:
                return ""
            raise
        selector = (item.get("spec") or {}).get("selector") or {}
        if not isinstance(selector, dict) or not selector:
            return ""
        return key_digest(json.dumps(selector, sort_keys=True, separators=(",", ":")))

    async def _namespace_labels(self, namespace: str) -> Mapping[str, str]:
        try:
            item = await self._provider.api.get(NAMESPACES, namespace)
        except ApiError as exc:
            if exc.not_found:
                return {}
            raise
        labels = (item.get("metadata") or {}).get("labels") or {}
        return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}

    async def _take(
        self,
        store: ClaimStore,
        pools: Pools,
        eligible: Sequence[Pool],
        holder: Holder,
        address: IPAddress,
    ) -> Claim:
        """Claim a requested address, or join it when it may be shared. An address the
        Service already holds stays its own even when no pool holds it any more
        (flagged by :meth:`_flag_outside`, not refused at every sync)."""
        held = store.get(address)
        if held is not None and held.held_by(holder.uid):
            return await self._update_ports(store, held, holder)
        pool = next((p for p in eligible if address in p), None)
        if pool is None:
            elsewhere = pools.containing(address)
            holding = (
                object_named(pools, elsewhere.name)
                if elsewhere is not None and elsewhere.resource == RESOURCE
                else None
            )
            if holding is not None and not holding.usable and not holding.problem:
                raise IPPoolError(
                    f"requested address {address} cannot be used: {holding.why_not_usable()}"
                )
            log.warning(
                "%s asks for %s, which is %s",
                holder.key,
                address,
                f"in {elsewhere.key}" if elsewhere is not None else "in no pool",
            )
            # Which other pool holds it is another namespace's business.
            raise IPPoolError(
                f"requested address {address} cannot be used: it is not in a pool serving "
                f"Service {holder.key} (pools serve by namespace, and LoadBalancerPools "
                "also by spec.serviceAllocation); pools serving it: "
                f"{describe_pools(eligible)}"
            )
        for _attempt in range(5):
            claim = store.get(address)
            if claim is None:
                if address in self._claiming:
                    await asyncio.sleep(0.01)  # another worker is creating it: see who wins
                    continue
                created = await self._create(store, address, pool, holder)
                if created is not None:
                    return created
                continue
            if claim.held_by(holder.uid):
                return await self._update_ports(store, claim, holder)
            verdict = self._verdict(claim, holder)
            if verdict.blocked:
                raise self._refusal(f"requested address {address} is taken", holder, verdict)
            kept = tuple(h for h in claim.holders if h not in verdict.evict)
            joined = await self._replace(store, claim, (*kept, holder), verdict.evict)
            if joined is not None:
                return joined
        raise _RetryError(f"address {address} kept changing while claiming it; will retry")

    async def _allocate(
        self, store: ClaimStore, offering: Sequence[Pool], holder: Holder, family: str
    ) -> Claim:
        """The lowest free address of ``family``, the namespace's pool first; a Service
        with a sharing key first joins an address its key-mates hold, and when it
        cannot, is told why (a Warning Event). Services of one sharing rule allocate
        one at a time (else two created at once would each take an address of their
        own); no other lock is held."""
        if holder.sharing is None:
            return await self._allocate_unlocked(store, offering, holder, family)
        lock = self._sharing_locks.setdefault(holder.sharing, _CountedLock())
        lock.users += 1
        try:
            async with lock:
                return await self._allocate_unlocked(store, offering, holder, family)
        finally:
            lock.users -= 1
            if not lock.users:
                del self._sharing_locks[holder.sharing]

    async def _allocate_unlocked(
        self, store: ClaimStore, offering: Sequence[Pool], holder: Holder, family: str
    ) -> Claim:
        refused: list[str] = []
        if holder.sharing is not None:
            for claim in store.sharing(holder.sharing):
                if family_of(claim.address) != family or not any(
                    claim.address in p for p in offering
                ):
                    continue
                verdict = self._verdict(claim, holder)
                if not verdict.blocked and not verdict.evict:
                    joined = await store.set_holders(claim, (*claim.holders, holder))
                    if joined is not None:
                        return joined
                elif verdict.public:
                    refused.append(f"{claim.address}: {verdict.public}")
                elif verdict.blocked and all(
                    other.consents(holder.namespace) for other in claim.others(holder.uid)
                ):
                    # Every holder invited this namespace: it may learn that much.
                    refused.append(f"{claim.address}: held by a Service it may not share with")
                elif verdict.blocked:
                    # Held in another namespace that did not invite this one: the Service
                    # is told nothing of it, so a guessed key reads the same whether it is
                    # in use elsewhere or not.
                    log.info(
                        "%s does not join %s of its sharing key: %s",
                        holder.key,
                        claim.address,
                        verdict.detail,
                    )
        for _attempt in range(20):
            for pool in offering:
                address = self._index(store, pool, family).next_free(
                    lambda a: a in self._claiming or store.get(a) is not None
                )
                if address is None:
                    continue
                created = await self._create(store, address, pool, holder)
                if created is not None:
                    if refused and holder.sharing_key:
                        self._not_shared(holder, created.address, refused)
                    return created
                break  # lost a race: the index now has that claim; look again
            else:
                raise IPPoolError(
                    f"no free {family} address for {holder.key}: "
                    f"{describe_pools(offering, family)} all in use; add addresses to "
                    "a pool or delete LoadBalancer Services that no longer need theirs"
                )
        raise _RetryError(f"could not claim a {family} address (lost 20 races); will retry")

    async def _create(
        self, store: ClaimStore, address: IPAddress, pool: Pool, holder: Holder
    ) -> Claim | None:
        """Claim ``address`` (the namespace cap checked, the address marked as being
        claimed so the other workers pass it by); None when someone else has it. The
        apiserver's create is the arbiter: no lock is held around it."""
        self._check_cap(store, holder)
        self._claiming[address] = holder.namespace
        try:
            return await store.create(address, pool.name, holder, pool.resource)
        finally:
            del self._claiming[address]

    def _index(self, store: ClaimStore, pool: Pool, family: str) -> FreeIndex:
        """The pool's free-address index (rebuilt after the claims are reloaded)."""
        if self._generation != store.generation:
            self._indexes.clear()
            self._generation = store.generation
            store.on_release = self._released
        index = self._indexes.get((pool, family))
        if index is None:
            index = self._indexes[(pool, family)] = FreeIndex(pool, family)
        return index

    def _released(self, address: IPAddress) -> None:
        for (pool, _family), index in self._indexes.items():
            if address in pool:
                index.release(address)

    def _not_shared(self, holder: Holder, address: IPAddress, refused: Sequence[str]) -> None:
        message = (
            f"got {address} of its own: no address of its sharing key could take it "
            f"({'; '.join(refused)})"
        )
        log.warning("%s %s", holder.key, message)
        self._provider.event(holder, NOT_SHARED_REASON, message)

    def _flag_outside(self, store: ClaimStore, pools: Pools) -> None:
        """Each claim that no pool holds (a pool shrunk or removed under it) is kept,
        and flagged once: a log line, and a Warning Event on each of its Services.
        Checked when the pools or the claims were reloaded; a broken pool's claims
        wait for it to be fixed."""
        checked = (id(pools), store.generation)
        if self._checked == checked:
            return
        self._checked = checked
        outside = {
            c.address: c
            for c in store.all()
            if not c.foreign
            and c.pool_ref not in pools.broken
            and not _broken_object(pools, c)
            and pools.containing(c.address) is None
        }
        self._outside &= outside.keys()
        for address, claim in sorted(outside.items(), key=lambda i: (i[0].version, int(i[0]))):
            if address in self._outside:
                continue
            self._outside.add(address)
            log.warning(
                "address %s is outside every pool now; kept for %s until they release it",
                address,
                ", ".join(h.key for h in claim.holders),
            )
            why = _left_out(pools, address) or (
                f"its address {address} is outside every pool now (was the pool shrunk or removed?)"
            )
            for holder in claim.holders:
                self._provider.event(
                    holder,
                    OUTSIDE_POOLS_REASON,
                    f"{why}; it keeps it, and no other Service gets it, "
                    "until it is deleted or asks for another; put the address back "
                    "in a pool to clear this",
                )

    def _verdict(self, claim: Claim, holder: Holder) -> _Verdict:
        """May ``holder`` hold ``claim`` beside its other holders? A Service of the
        owning namespace makes guests it conflicts with give way; anyone else yields."""
        if claim.foreign:
            return _Verdict(detail="another manager's IPAddress (a ClusterIP?) holds it")
        others = claim.others(holder.uid)
        owning = not others or holder.namespace == claim.owner
        blocking: list[tuple[Holder, str]] = []
        evict: list[Holder] = []
        for other in others:
            why = conflict(holder, other)
            if not why:
                continue
            if owning and other.namespace != holder.namespace:
                evict.append(other)
            else:
                blocking.append((other, why))
        if not blocking:
            return _Verdict(evict=tuple(evict))
        detail = "; ".join(why for _, why in blocking)
        private = any(other.namespace != holder.namespace for other, _ in blocking)
        return _Verdict(detail=detail, public="" if private else detail)

    @staticmethod
    def _refusal(what: str, holder: Holder, verdict: _Verdict) -> IPPoolError:
        log.warning("%s for %s: %s", what, holder.key, verdict.detail)
        if verdict.public:
            return IPPoolError(f"{what}: {verdict.public}")
        return IPPoolError(what + cross_namespace_hint(holder))

    def _check_cap(self, store: ClaimStore, holder: Holder) -> None:
        """Refuse a new address to a namespace at its cap (the cloud-config's
        ``namespaceLimit``/``namespaceLimits``); joining an address costs nothing."""
        config = self._provider.config
        limit = config.limit_for(holder.namespace)
        if not limit:
            return
        # The Service's own claims do not count: moving it to another address
        # takes the new one before releasing the old. Claims being created count.
        own = sum(1 for c in store.held_by(holder.uid) if c.owner == holder.namespace)
        claiming = sum(1 for n in self._claiming.values() if n == holder.namespace)
        owned = store.owned_by(holder.namespace) - own + claiming
        if owned >= limit:
            where = (
                f"namespaceLimits.{holder.namespace}"
                if holder.namespace in config.namespace_limits
                else "namespaceLimit"
            )
            raise IPPoolError(
                f"namespace {holder.namespace!r} already holds {owned} pool addresses, its "
                f"cap ({where} in the ippool cloud-config); delete a LoadBalancer Service "
                "it no longer needs, or ask a cluster admin to raise the cap"
            )

    async def _replace(
        self,
        store: ClaimStore,
        claim: Claim,
        holders: Sequence[Holder],
        evict: Sequence[Holder],
    ) -> Claim | None:
        """Set the claim's holders; the ``evict``ed guests first lose the annotation the
        announcer reads (which also has the service controller sync them again), and
        lose it again once they hold the claim no more: a sync of a guest that ran
        between the two found it still holding and wrote the annotation back. With
        ``announcer: status`` there is no such annotation: once they hold the claim no
        more, an empty :data:`ALLOCATED_ANNOTATION` has them synced again."""
        guests = [
            Service(metadata=ObjectMeta(namespace=g.namespace, name=g.name, uid=g.uid))
            for g in evict
        ]
        for guest in evict:
            log.warning(
                "address %s (owned by namespace %s): %s of another namespace loses it",
                claim.address,
                claim.owner,
                guest.key,
            )
        if self._writes_annotation:
            for service in guests:
                await self._unannotate(service)
        updated = await store.set_holders(claim, holders)
        if updated is not None:
            for service in guests:
                await self._unannotate(service, evicted=True)
        return updated

    async def _update_ports(self, store: ClaimStore, claim: Claim, holder: Holder) -> Claim:
        for _attempt in range(5):
            mine = next((h for h in claim.holders if h.uid == holder.uid), None)
            if mine == holder:
                return claim
            verdict = self._verdict(claim, holder)
            if verdict.blocked:
                if not verdict.public:
                    verdict = replace(verdict, public="one of them is taken on it")
                raise self._refusal(
                    f"address {claim.address} cannot take the new ports", holder, verdict
                )
            updated = await self._replace(
                store,
                claim,
                tuple(
                    holder if h.uid == holder.uid else h
                    for h in claim.holders
                    if h not in verdict.evict
                ),
                verdict.evict,
            )
            if updated is not None:
                return updated
            refreshed = store.get(claim.address)
            if refreshed is None or not refreshed.held_by(holder.uid):
                raise _RetryError(f"the claim on {claim.address} vanished; will retry")
            claim = refreshed
        raise _RetryError(f"address {claim.address} kept changing; will retry")

    async def _leave(self, claim: Claim, uid: str) -> None:
        """Release ``uid``'s hold. When the owning namespace's last Service leaves, its
        guests leave too: the address returns to the pools, never to a Service that
        could not have taken it alone."""
        for _attempt in range(5):
            remaining = claim.others(uid)
            heirs = [h for h in remaining if h.namespace == claim.owner]
            if heirs:
                kept = (heirs[0], *(h for h in remaining if h is not heirs[0]))
                evict: tuple[Holder, ...] = ()
            else:
                kept, evict = (), remaining
            if await self._replace(self._store, claim, kept, evict) is not None:
                return
            refreshed = self._store.get(claim.address)
            if refreshed is None or not refreshed.held_by(uid):
                return
            claim = refreshed
        raise _RetryError(f"could not release {claim.address} (it kept changing); will retry")

    # -- the Service's annotation ------------------------------------------------------

    async def _unannotate(self, service: Service, evicted: bool = False) -> None:
        """Remove the addresses this provider wrote (or mark an ``evicted`` guest,
        :meth:`_annotate`), read fresh: the Service given on deletion may be a skeleton
        (``kube-ccm gc``) or older than the last write."""
        try:
            item = await self._provider.api.get(
                SERVICES, service.metadata.name, namespace=service.metadata.namespace
            )
        except ApiError as exc:
            if exc.not_found:
                return
            raise
        if item.metadata.uid == service.metadata.uid:
            current = ObjectMeta(
                namespace=service.metadata.namespace,
                name=service.metadata.name,
                uid=service.metadata.uid,
                annotations=item.metadata.annotations,
            )
            await self._annotate(Service(metadata=current), [], evicted=evicted)

    async def _annotate(
        self, service: Service, addresses: Sequence[IPAddress], evicted: bool = False
    ) -> None:
        """Write the addresses where the announcer reads them (or remove them). With
        ``announcer: status`` nothing is written for an address (the announcer reads
        the status the service controller writes): what an earlier run wrote is
        removed, and an ``evicted`` guest gets an empty :data:`ALLOCATED_ANNOTATION`
        instead, so that it is synced again. One patch, or none when nothing changes."""
        text = ",".join(a.compressed for a in addresses) if self._writes_annotation else ""
        annotations = service.metadata.annotations
        current = annotations.get(ADDRESSES_ANNOTATION, "")
        mine = annotations.get(ALLOCATED_ANNOTATION)
        patch: dict[str, Any] = {}
        if text:
            if current != text or mine != text:
                patch = {ADDRESSES_ANNOTATION: text, ALLOCATED_ANNOTATION: text}
        elif evicted and not self._writes_annotation:
            if mine != "":
                patch = {ALLOCATED_ANNOTATION: ""}
                if mine is not None and current == mine:
                    patch[ADDRESSES_ANNOTATION] = None
        elif mine is not None:  # ours to remove (a user's request stays)
            patch = {ALLOCATED_ANNOTATION: None}
            if current == mine:
                patch[ADDRESSES_ANNOTATION] = None
        if not patch:
            return
        try:
            await self._provider.api.patch(
                SERVICES,
                service.metadata.name,
                {"metadata": {"annotations": patch}},
                namespace=service.metadata.namespace,
                patch_type="merge",
            )
        except ApiError as exc:
            if not exc.not_found:
                raise


@dataclass(frozen=True)
class _Serving:
    """The pools serving one Service (:meth:`IPPoolLoadBalancer._serving`)."""

    automatic: tuple[Pool, ...]
    """Where an address is found for it, in order."""
    requested: tuple[Pool, ...]
    """Where an address it asks for may be (``autoAssign: false`` pools too)."""
    objects: tuple[ObjectPool, ...]
    """The LoadBalancerPools among them."""
    refused: tuple[str, ...]
    """Why other LoadBalancerPools do not serve it now (disabled, conflicting, broken)."""


def _holds(claim: Claim | None, service: Service) -> bool:
    return claim is not None and claim.held_by(service.metadata.uid)


def _broken_object(pools: Pools, claim: Claim) -> bool:
    """Whether the claim's LoadBalancerPool is broken (its claims wait for the fix)."""
    if claim.pool_resource != RESOURCE:
        return False
    obj = object_named(pools, claim.pool)
    return obj is not None and bool(obj.problem)


def _status(claims: Sequence[Claim]) -> LoadBalancerStatus:
    return LoadBalancerStatus(
        ingress=tuple(LoadBalancerIngress(ip=c.address.compressed, ip_mode="VIP") for c in claims)
    )


class IPPoolProvider(CloudProvider):
    """Load balancers only; compose it with an instances provider (``composite``)."""

    def __init__(self, config: IPPoolConfig) -> None:
        self.config = config
        self._client: KubernetesClient | None = None
        self._store: ClaimStore | None = None
        self._lb = IPPoolLoadBalancer(self)
        static = read_kubevip(config.pools, "cloud-config `pools`")
        self._static = Pools.of(static.pools, share=static.share)
        self._pools: tuple[str, int, Pools] | None = None
        """The ConfigMap's resourceVersion, :attr:`_objects_version` and the pools."""
        self._objects: Informer[PoolObject] | None = None
        """The LoadBalancerPools, once their CRD was found."""
        self._objects_version = 0
        self._objects_ready = asyncio.Event()
        """Set once the LoadBalancerPools are known (or known to be absent)."""
        self._status_dirty = asyncio.Event()
        self._written: dict[str, dict[str, Any]] = {}
        """The status last written on each LoadBalancerPool, by name."""
        self._evented: dict[str, tuple[str, ...]] = {}
        """The conflicts and problem last told in an Event on each pool, by name."""
        self._tasks: list[asyncio.Task[None]] = []
        self._reading: asyncio.Future[Pools] | None = None
        self._peers: tuple[float, tuple[str, ...]] | None = None
        """(when, names of the :data:`PEERS` served): :meth:`peers`' last look."""
        self.recorder: EventRecorder | None = None
        """Where this provider's own Warning Events go (a :class:`ProviderEventRecorder`
        once initialized); the service controller records the rest."""
        self._events: ProviderEventRecorder | None = None
        """The recorder this provider started (``recorder`` may be replaced in tests)."""

    async def initialize(self, client_builder: ClientBuilder, stop: asyncio.Event) -> None:
        self._client = client_builder.client("ippool")
        self._store = ClaimStore(self._client)
        if isinstance(self._client, KubeClient):
            self.recorder = self._events = start_event_recorder(self._client, EVENT_SOURCE)
            loop = asyncio.get_running_loop()
            self._tasks = [
                loop.create_task(self._watch_objects(self._client), name="ippool-pools"),
                loop.create_task(self._write_statuses(), name="ippool-pool-status"),
            ]
        else:
            self._objects_ready.set()

    async def aclose(self) -> None:
        tasks, self._tasks = self._tasks, []
        for running in tasks:
            running.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        events, self._events = self._events, None
        if events is not None:
            await events.aclose()

    def event(self, holder: Holder, reason: str, message: str) -> None:
        """A Warning Event on the Service ``holder`` is (never raises, never blocks)."""
        self.service_event(holder.namespace, holder.name, holder.uid, reason, message)

    def service_event(self, namespace: str, name: str, uid: str, reason: str, message: str) -> None:
        """A Warning Event on a Service (never raises, never blocks)."""
        if self.recorder is not None:
            self.recorder.event(
                ObjectReference(kind="Service", name=name, namespace=namespace, uid=uid),
                "Warning",
                reason,
                message,
            )

    def pool_event(self, pool: ObjectPool, reason: str, message: str) -> None:
        """A Warning Event on a LoadBalancerPool (in namespace ``default``, as for any
        cluster-scoped object)."""
        if self.recorder is not None:
            self.recorder.event(
                ObjectReference(
                    kind=KIND, name=pool.name, uid=pool.uid, api_version=f"{GROUP}/{VERSION}"
                ),
                "Warning",
                reason,
                message,
            )

    # -- LoadBalancerPool objects ------------------------------------------------------

    async def _watch_objects(self, client: KubeClient) -> None:
        """Keep the LoadBalancerPools in an informer (one list, then a watch: never a
        read per allocation). While their CRD is not installed (404), or not readable
        (403: the RBAC of an older release), there are none, and it is looked for
        again every :data:`OBJECTS_RETRY` seconds."""
        told = ""
        while True:
            try:
                await self.api.list(LOAD_BALANCER_POOLS, limit=1)
                break
            except (ApiError, TransportError, OSError) as exc:
                status = exc.status if isinstance(exc, ApiError) else 0
                why = (
                    "its CRD (deploy/crd-loadbalancerpools.yaml) is not installed"
                    if status == 404
                    else f"they cannot be read: {exc}"
                )
                if why != told:
                    told = why
                    (log.info if status == 404 else log.warning)(
                        "ippool: no LoadBalancerPools, %s; looking again every %.0f s",
                        why,
                        OBJECTS_RETRY,
                    )
                self._objects_ready.set()
                await asyncio.sleep(OBJECTS_RETRY)
        informer = Informer(client, POOL_OBJECTS, name="ippool-loadbalancerpools")
        informer.add_handler(
            on_add=self._objects_changed,
            on_update=lambda old, new: self._objects_changed(new),
            on_delete=self._objects_changed,
        )
        async with asyncio.TaskGroup() as group:
            group.create_task(informer.run())
            await informer.wait_synced()
            self._objects = informer
            self._objects_changed(None)
            self._objects_ready.set()

    def _objects_changed(self, _item: object) -> None:
        self._objects_version += 1
        self._status_dirty.set()

    def claims_changed(self) -> None:
        """The pools' counts may have moved: write their status soon."""
        if self._objects is not None and len(self._objects):
            self._status_dirty.set()

    async def _write_statuses(self) -> None:
        """Each LoadBalancerPool's status (sizes, use, conflicts, problems), written
        :data:`STATUS_DELAY` after a change, only where it changed; a Warning Event on a
        pool whose conflicts or problem changed."""
        while True:
            await self._status_dirty.wait()
            await asyncio.sleep(STATUS_DELAY)
            self._status_dirty.clear()
            try:
                await self.write_statuses()
            except (ApiError, IPPoolError, TransportError, OSError) as exc:
                log.warning("ippool: could not write the LoadBalancerPools' status: %s", exc)
                await asyncio.sleep(STATUS_DELAY * 30)
                self._status_dirty.set()

    async def write_statuses(self) -> None:
        if self._objects is None or not len(self._objects):
            self._written.clear()
            self._evented.clear()
            return
        pools = await self.pools()
        store = self.store
        if not store.loaded:
            await self._lb.ready()
        used: dict[str, dict[str, int]] = {o.name: {} for o in objects_of(pools)}
        for claim in store.all():
            if claim.foreign:
                continue
            # The pool the claim names, else the first holding it (a claim of a
            # kube-vip pool, or of a pool deleted and made again): counted once.
            named = object_named(pools, claim.pool) if claim.pool_resource == RESOURCE else None
            if named is None or claim.address not in named.pool:
                named = next((o for o in objects_of(pools) if claim.address in o.pool), None)
            if named is not None:
                counts = used[named.name]
                family = family_of(claim.address)
                counts[family] = counts.get(family, 0) + 1
        names = {o.name for o in objects_of(pools)}
        for gone in set(self._written) - names:
            del self._written[gone]
            self._evented.pop(gone, None)
        for obj in objects_of(pools):
            told = (*obj.conflicts, obj.problem)
            if self._evented.get(obj.name) != told:
                self._evented[obj.name] = told
                if obj.problem:
                    self.pool_event(obj, POOL_INVALID_REASON, f"serves nothing: {obj.problem}")
                if obj.conflicts:
                    self.pool_event(
                        obj,
                        POOL_CONFLICT_REASON,
                        "; ".join(obj.conflicts)
                        + (
                            f"; {obj.stopped_by} was there first, so this pool gives out "
                            "no new address until the overlap is removed"
                            if obj.stopped_by
                            else "; the other pool gives out no new address until the "
                            "overlap is removed, and no address is handed out twice"
                        ),
                    )
            status = status_of(obj, used[obj.name])
            current = self._objects.get(obj.name)
            if self._written.get(obj.name) == status or (
                current is not None and current.status == status
            ):
                self._written[obj.name] = status
                continue
            try:
                await self.api.patch(
                    LOAD_BALANCER_POOLS,
                    obj.name,
                    {"status": status},
                    subresource="status",
                    patch_type="merge",
                )
            except ApiError as exc:
                if not exc.not_found:
                    raise
            self._written[obj.name] = status

    def object_pools(self) -> tuple[ObjectPool, ...]:
        informer = self._objects
        if informer is None:
            return ()
        return tuple(parse_object(item) for item in informer.list())

    @property
    def client(self) -> KubernetesClient:
        if self._client is None:
            raise RuntimeError("the ippool provider is used before initialize()")
        return self._client

    @property
    def api(self) -> TypedClient:
        """The client, by resource descriptor."""
        return TypedClient(self.client)

    @property
    def store(self) -> ClaimStore:
        if self._store is None:
            raise RuntimeError("the ippool provider is used before initialize()")
        return self._store

    async def pools(self) -> Pools:
        """The cloud-config's pools and the ConfigMap's, read now (a change applies to
        the next allocation, no restart). Workers asking at once share one read, and
        the pools are parsed again only when the ConfigMap's resourceVersion moved.

        A malformed pool of the ConfigMap stops only the Services it would serve
        (:meth:`Pools.problem_for`); a malformed ``search-order`` or
        ``skip-end-ips-in-cidr`` stops them all."""
        if self._reading is None:
            self._reading = asyncio.get_running_loop().create_future()
            reading = self._reading
            try:
                reading.set_result(await self._read_pools())
            except BaseException as exc:
                reading.set_exception(
                    _RetryError("reading the pools was interrupted; will retry")
                    if isinstance(exc, asyncio.CancelledError)
                    else exc
                )
                reading.exception()  # retrieved: only the waiters re-raise it
                raise
            finally:
                self._reading = None
            return reading.result()
        return await asyncio.shield(self._reading)

    async def _read_pools(self) -> Pools:
        try:
            async with asyncio.timeout(OBJECTS_WAIT):
                await self._objects_ready.wait()
        except TimeoutError:
            raise _RetryError("the LoadBalancerPools are not read yet; will retry") from None
        objects_version = self._objects_version
        if not self.config.config_map:
            if self._pools is not None and self._pools[1] == objects_version:
                merged = self._pools[2]
            else:
                merged = self._with_objects(self._static)
                self._pools = ("", objects_version, merged)
        else:
            namespace, _, name = self.config.config_map.partition("/")
            try:
                item = await self.api.get(CONFIG_MAPS, name, namespace=namespace)
            except ApiError as exc:
                if not exc.not_found:
                    raise
                item = {}
            version = str((item.get("metadata") or {}).get("resourceVersion", ""))
            if (
                self._pools is not None
                and version
                and self._pools[:2] == (version, objects_version)
            ):
                return self._pools[2]
            data = item.get("data") or {}
            try:
                found = read_kubevip(data, f"ConfigMap {self.config.config_map}", strict=False)
                merged = Pools.of(
                    (*self._static.pools, *found.pools),
                    strict=False,
                    broken=found.broken,
                    share={**self._static.share, **found.share},
                )
            except PoolError as exc:
                raise IPPoolError(f"the pools are invalid: {exc}") from exc
            merged = self._with_objects(merged)
            self._pools = (version, objects_version, merged)
        if not merged and not merged.broken and not merged.objects:
            raise IPPoolError(
                "no address pools: create a LoadBalancerPool (ippool.kube-ccm.io/v1alpha1), "
                f"or the ConfigMap {self.config.config_map or '(none)'} with a key such as "
                "range-global: 192.0.2.10-192.0.2.50, or set `pools` in the ippool "
                "cloud-config" + await self.peers_hint()
            )
        return merged

    async def peers(self) -> tuple[str, ...]:
        """Which of :data:`PEERS` the API serves, by the group version's discovery
        document (which every authenticated user may read: no RBAC of its own, no
        object read); looked at once per :data:`PEERS_TTL`. A failed look counts as
        absent."""
        now = asyncio.get_running_loop().time()
        if self._peers is not None and now - self._peers[0] < PEERS_TTL:
            return self._peers[1]
        found: list[str] = []
        for name, resources, _instead in PEERS:
            for resource in resources:
                try:
                    document = await self.client.get(resource.prefix)
                except (ApiError, TransportError):
                    continue
                listed = document.get("resources") if isinstance(document, dict) else None
                if any(
                    isinstance(r, dict) and r.get("name") == resource.plural for r in listed or ()
                ):
                    found.append(name)
                    break
        self._peers = (now, tuple(found))
        return self._peers[1]

    async def peers_hint(self) -> str:
        """What to tell a Service no pool serves when MetalLB's or Cilium's pool kind is
        installed: ippool does not read their pools, and what to write instead."""
        served = await self.peers()
        return "".join(
            f"; {name} is installed in this cluster, but ippool does not read its pools: "
            f"write {instead}"
            for name, _resources, instead in PEERS
            if name in served
        )

    def _with_objects(self, pools: Pools) -> Pools:
        """``pools`` (kube-vip's) and the LoadBalancerPools, their conflicts resolved."""
        objects = self.object_pools()
        if not objects:
            return pools
        return replace(pools, objects=resolve(objects, pools.pools))

    def load_balancer(self) -> IPPoolLoadBalancer:
        return self._lb

    def provider_name(self) -> str:
        return PROVIDER_NAME

    def has_cluster_id(self) -> bool:
        return True
