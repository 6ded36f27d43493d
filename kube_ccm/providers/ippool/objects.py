"""LoadBalancerPool objects: pools a user can see, ``kubectl get lbpool``.

A cluster-scoped custom resource of group ``ippool.kube-ccm.io`` (its CRD is
``deploy/crd-loadbalancerpools.yaml``)::

    apiVersion: ippool.kube-ccm.io/v1alpha1
    kind: LoadBalancerPool
    metadata: {name: lan}
    spec:
      addresses: [192.0.2.0/24, 198.51.100.10-198.51.100.20, 2001:db8::/120]
      autoAssign: true          # false: only for Services that ask for the pool or
                                # for one of its addresses
      avoidBuggyIPs: true       # never hand out an IPv4 address ending in .0 or .255
      allowFirstLastIPs: false  # false: not the first and last address of each CIDR
                                # (of /30, /126 and wider), as Cilium's default
      disabled: false           # true: no new addresses; those handed out are kept
      serviceAllocation:        # MetalLB's: whom the pool serves (all when empty)
        priority: 10            # lower first; pools without one come last
        namespaces: [team-a]
        namespaceSelectors: [{matchLabels: {tier: web}}]
        serviceSelectors: [{matchExpressions: [{key: app, operator: In, values: [a]}]}]

The fields are MetalLB's ``IPAddressPool`` (``addresses``, ``autoAssign``,
``avoidBuggyIPs``, ``serviceAllocation``) plus Cilium's ``allowFirstLastIPs`` (a
boolean here, Cilium writes ``"Yes"``/``"No"``) and ``disabled``.

Checked as a whole: an address that does not parse, a reserved address, or a
selector that does not parse makes the pool *broken* (it serves nothing, its
status says why). A pool overlapping another, or a kube-vip pool, *conflicts*: the
one created later serves no new address (as Cilium), both statuses name the other.
The claims (:mod:`.claims`) keep an address from being handed out twice whatever
the pools say.
"""

from __future__ import annotations

import ipaddress
import itertools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import msgspec

from kube_ccm.cloudprovider import RawObject, Resource
from kube_ccm.providers.ippool.pools import (
    Pool,
    PoolError,
    Pools,
    Span,
    parse_span,
    reserved_overlap,
)

GROUP = "ippool.kube-ccm.io"
VERSION = "v1alpha1"
KIND = "LoadBalancerPool"
RESOURCE = "loadbalancerpools"
MAX_STATUS_INT = 2**63 - 1
"""Status counts are int64 in the API; an IPv6 /64's size is capped here."""

_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


class PoolMeta(msgspec.Struct, rename="camel"):
    name: str = ""
    uid: str = ""
    generation: int = 0
    creation_timestamp: str = ""
    resource_version: str = ""


class PoolObject(msgspec.Struct):
    """A LoadBalancerPool as the informer keeps it (a struct, so it is keyed by name)."""

    metadata: PoolMeta = msgspec.field(default_factory=PoolMeta)
    spec: Any = None
    status: Any = None


POOL_OBJECTS: Resource[PoolObject] = Resource(
    GROUP, VERSION, RESOURCE, False, PoolObject, frozenset({"status"})
)
"""``LOAD_BALANCER_POOLS`` decoded into :class:`PoolObject`, for the informer."""
LOAD_BALANCER_POOLS: Resource[RawObject] = Resource(
    group=GROUP, version=VERSION, plural=RESOURCE, namespaced=False, type=dict
)
"""The pools as JSON (``deploy/crd-loadbalancerpools.yaml``); ``status`` is written by
kube-ccm."""
METALLB_IP_ADDRESS_POOLS: Resource[RawObject] = Resource(
    group="metallb.io", version="v1beta1", plural="ipaddresspools", namespaced=True, type=dict
)
"""MetalLB's pools: never read by kube-ccm; only whether the API serves them (the group
version's discovery document), to point a migrating user at the guide."""
CILIUM_LOAD_BALANCER_IP_POOLS: tuple[Resource[RawObject], ...] = tuple(
    Resource(
        group="cilium.io",
        version=version,
        plural="ciliumloadbalancerippools",
        namespaced=False,
        type=dict,
    )
    for version in ("v2", "v2alpha1")
)
"""Cilium LB-IPAM's pools (``cilium.io/v2`` since Cilium 1.18, ``v2alpha1`` before):
as :data:`METALLB_IP_ADDRESS_POOLS`, never read."""


SERVICE_NAMESPACE_LABEL = "io.kubernetes.service.namespace"
"""Cilium LB-IPAM's label key for a Service's namespace in a pool's ``serviceSelector``."""
SERVICE_NAME_LABEL = "io.kubernetes.service.name"
"""Cilium LB-IPAM's label key for a Service's name in a pool's ``serviceSelector``."""


def selector_labels(namespace: str, name: str, labels: Mapping[str, str]) -> dict[str, str]:
    """The labels a pool's Service selector sees: the Service's own, with
    :data:`SERVICE_NAMESPACE_LABEL` and :data:`SERVICE_NAME_LABEL` set to its real
    namespace and name, over any label of those keys it carries (Cilium's
    ``operator/pkg/lbipam`` does the same). A tenant writes its Service's labels, so a
    label of its own never meets a selector meant for another namespace."""
    return {**labels, SERVICE_NAMESPACE_LABEL: namespace, SERVICE_NAME_LABEL: name}


@dataclass(frozen=True)
class Selector:
    """A parsed ``metav1.LabelSelector``: every term must hold (empty: all match)."""

    labels: tuple[tuple[str, str], ...] = ()
    expressions: tuple[tuple[str, str, frozenset[str]], ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if any(labels.get(k) != v for k, v in self.labels):
            return False
        for key, operator, values in self.expressions:
            present = key in labels
            if operator == "In" and not (present and labels[key] in values):
                return False
            if operator == "NotIn" and present and labels[key] in values:
                return False
            if operator == "Exists" and not present:
                return False
            if operator == "DoesNotExist" and present:
                return False
        return True


def _label_key(key: object, where: str) -> str:
    if not isinstance(key, str):
        raise PoolError(f"{where}: label key {key!r} is not a string")
    prefix, slash, name = key.rpartition("/")
    if (
        not name
        or len(name) > 63
        or not _LABEL_NAME.match(name)
        or (slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)))
    ):
        raise PoolError(f"{where}: {key[:80]!r} is not a label key")
    return key


def _label_value(value: object, where: str) -> str:
    if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
        raise PoolError(f"{where}: {str(value)[:80]!r} is not a label value")
    return value


def parse_selector(raw: object, where: str) -> Selector:
    """A label selector as the API writes one; :class:`PoolError` naming the term."""
    if raw is None:
        return Selector()
    if not isinstance(raw, dict):
        raise PoolError(f"{where}: a selector is an object with matchLabels/matchExpressions")
    unknown = set(raw) - {"matchLabels", "matchExpressions"}
    if unknown:
        raise PoolError(f"{where}: unknown selector field {sorted(unknown)[0]!r}")
    match_labels = raw.get("matchLabels") or {}
    if not isinstance(match_labels, dict):
        raise PoolError(f"{where}.matchLabels: write key: value pairs")
    labels = tuple(
        (_label_key(k, f"{where}.matchLabels"), _label_value(v, f"{where}.matchLabels.{k}"))
        for k, v in sorted(match_labels.items())
    )
    expressions: list[tuple[str, str, frozenset[str]]] = []
    terms = raw.get("matchExpressions") or []
    if not isinstance(terms, list):
        raise PoolError(f"{where}.matchExpressions: write a list of key/operator/values")
    for i, term in enumerate(terms):
        here = f"{where}.matchExpressions[{i}]"
        if not isinstance(term, dict):
            raise PoolError(f"{here}: write key, operator and values")
        key = _label_key(term.get("key"), here)
        operator = term.get("operator")
        values = term.get("values") or []
        if operator not in _OPERATORS:
            raise PoolError(
                f"{here}: operator {str(operator)[:40]!r} is not one of {', '.join(_OPERATORS)}"
            )
        if not isinstance(values, list):
            raise PoolError(f"{here}: values must be a list")
        if operator in ("In", "NotIn") and not values:
            raise PoolError(f"{here}: operator {operator} needs values")
        if operator in ("Exists", "DoesNotExist") and values:
            raise PoolError(f"{here}: operator {operator} takes no values")
        expressions.append(
            (key, str(operator), frozenset(_label_value(v, f"{here}.values") for v in values))
        )
    return Selector(labels, tuple(expressions))


@dataclass(frozen=True)
class ObjectPool:
    """One LoadBalancerPool, parsed."""

    pool: Pool
    """Its addresses (empty when they do not parse); ``resource`` is ``loadbalancerpools``."""
    generation: int = 0
    uid: str = ""
    created: str = ""
    """``metadata.creationTimestamp``: the older of two overlapping pools serves on."""
    auto_assign: bool = True
    disabled: bool = False
    priority: int | None = None
    namespaces: frozenset[str] = frozenset()
    namespace_selectors: tuple[Selector, ...] = ()
    service_selectors: tuple[Selector, ...] = ()
    problem: str = ""
    """Why it serves nothing (it is broken): what is wrong, naming the field."""
    conflicts: tuple[str, ...] = ()
    """Each overlap with another pool, in words (in both pools' status)."""
    stopped_by: str = ""
    """The pool it overlaps that was there first: it gives out nothing new."""

    @property
    def name(self) -> str:
        return self.pool.name

    @property
    def usable(self) -> bool:
        """Gives out new addresses."""
        return not (self.problem or self.disabled or self.stopped_by)

    @property
    def needs_namespace_labels(self) -> bool:
        return bool(self.namespace_selectors)

    def why_not_usable(self) -> str:
        if self.problem:
            return f"LoadBalancerPool {self.name} is invalid: {self.problem}"
        if self.disabled:
            return (
                f"LoadBalancerPool {self.name} is disabled (spec.disabled): it gives out no "
                "new address; those it gave out are kept"
            )
        if self.stopped_by:
            return (
                f"LoadBalancerPool {self.name} overlaps {self.stopped_by}, which was there "
                "first, so it gives out no new address; give each address to one pool"
            )
        return ""

    def why_not_serving(
        self,
        namespace: str,
        namespace_labels: Mapping[str, str],
        labels: Mapping[str, str],
        name: str,
    ) -> str:
        """Why the pool does not serve Service ``namespace``/``name`` with ``labels``
        ("" when it does); MetalLB's ``serviceAllocation`` rules: the namespace must be
        listed or match a namespace selector (when either is given), and the Service
        must match a Service selector (when any is given). The Service selectors see
        the Service's labels as Cilium's LB-IPAM does (:func:`selector_labels`): its
        real namespace and name under :data:`SERVICE_NAMESPACE_LABEL` and
        :data:`SERVICE_NAME_LABEL`, whatever labels of those keys it carries."""
        if (
            (self.namespaces or self.namespace_selectors)
            and namespace not in self.namespaces
            and not any(s.matches(namespace_labels) for s in self.namespace_selectors)
        ):
            return (
                f"LoadBalancerPool {self.name} serves other namespaces "
                "(spec.serviceAllocation.namespaces/namespaceSelectors)"
            )
        seen = selector_labels(namespace, name, labels)
        if self.service_selectors and not any(s.matches(seen) for s in self.service_selectors):
            return (
                f"LoadBalancerPool {self.name} serves only Services matching its "
                "spec.serviceAllocation.serviceSelectors, and this one's labels do not"
            )
        return ""

    @property
    def order(self) -> tuple[bool, int, str]:
        """Lower priority first, pools without a priority last, then by name."""
        return (self.priority is None, self.priority or 0, self.name)


def _bool(spec: Mapping[str, Any], key: str, default: bool) -> bool:
    value = spec.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value in ("Yes", "No"):  # Cilium's spelling
        return value == "Yes"
    raise PoolError(f"spec.{key}: {str(value)[:40]!r} is not true or false")


def parse_addresses(items: object, *, allow_first_last: bool) -> tuple[Span, ...]:
    """``spec.addresses``: CIDRs, ranges ``a-b`` and single addresses, both families;
    without ``allow_first_last`` a CIDR of 4 addresses or more loses its first and last."""
    if not isinstance(items, list) or not items:
        raise PoolError("spec.addresses: give CIDRs or ranges (192.0.2.0/24, a-b), a list")
    spans: list[Span] = []
    for i, item in enumerate(items):
        where = f"spec.addresses[{i}]"
        if not isinstance(item, str):
            raise PoolError(f"{where}: {str(item)[:40]!r} is not a string")
        text = item.strip()
        span = parse_span(text, where, skip_cidr_ends=False)
        if "/" in text and not allow_first_last:
            network = ipaddress.ip_network(text, strict=False)
            if network.num_addresses >= 4:
                span = Span(span.first + 1, span.last - 1, text)
        reserved = reserved_overlap(span)
        if reserved is not None:
            raise PoolError(
                f"{where}: {text!r} overlaps {reserved}, which no load balancer may use"
            )
        spans.append(span)
    spans.sort(key=lambda s: (s.first.version, int(s.first)))
    for a, b in itertools.pairwise(spans):
        if a.overlaps(b):
            raise PoolError(f"spec.addresses: {a.text!r} and {b.text!r} overlap; list each once")
    return tuple(spans)


def parse_object(item: Mapping[str, Any] | PoolObject) -> ObjectPool:
    """A LoadBalancerPool as read from the API; a problem makes it broken, never raises."""
    raw: Mapping[str, Any] = msgspec.to_builtins(item) if isinstance(item, PoolObject) else item
    metadata = raw.get("metadata") or {}
    name = str(metadata.get("name", ""))
    spec = raw.get("spec") or {}
    base = ObjectPool(
        pool=Pool(name, f"LoadBalancerPool {name}", (), resource=RESOURCE),
        generation=int(metadata.get("generation") or 0),
        uid=str(metadata.get("uid", "")),
        created=str(metadata.get("creationTimestamp", "")),
    )
    try:
        if not isinstance(spec, dict):
            raise PoolError("spec: write an object")
        avoid_buggy = _bool(spec, "avoidBuggyIPs", True)
        allow_first_last = _bool(spec, "allowFirstLastIPs", False)
        spans = parse_addresses(spec.get("addresses"), allow_first_last=allow_first_last)
        allocation = spec.get("serviceAllocation") or {}
        if not isinstance(allocation, dict):
            raise PoolError("spec.serviceAllocation: write an object")
        priority = allocation.get("priority")
        if priority is not None and (not isinstance(priority, int) or isinstance(priority, bool)):
            raise PoolError(f"spec.serviceAllocation.priority: {priority!r} is not a number")
        namespaces = allocation.get("namespaces") or []
        if not isinstance(namespaces, list) or not all(isinstance(n, str) for n in namespaces):
            raise PoolError("spec.serviceAllocation.namespaces: write a list of namespaces")

        def selectors(key: str) -> tuple[Selector, ...]:
            raw = allocation.get(key) or []
            if not isinstance(raw, list):
                raise PoolError(f"spec.serviceAllocation.{key}: write a list of selectors")
            return tuple(
                parse_selector(s, f"spec.serviceAllocation.{key}[{i}]") for i, s in enumerate(raw)
            )

        pool = replace(base.pool, spans=spans, avoid_buggy=avoid_buggy)
        if size_of(pool) <= 0:
            raise PoolError("spec.addresses holds no address that may be handed out")
        return replace(
            base,
            pool=pool,
            auto_assign=_bool(spec, "autoAssign", True),
            disabled=_bool(spec, "disabled", False),
            priority=priority,
            namespaces=frozenset(namespaces),
            namespace_selectors=selectors("namespaceSelectors"),
            service_selectors=selectors("serviceSelectors"),
        )
    except PoolError as exc:
        return replace(base, problem=str(exc))


def objects_of(pools: Pools) -> tuple[ObjectPool, ...]:
    """The LoadBalancerPools among ``pools``, in the order they are tried."""
    return tuple(o for o in pools.objects if isinstance(o, ObjectPool))


def object_named(pools: Pools, name: str) -> ObjectPool | None:
    return next((o for o in objects_of(pools) if o.name == name), None)


def _overlap(a: Pool, b: Pool) -> str:
    """The first overlap of ``a`` and ``b`` in words, or ""."""
    for x in a.spans:
        for y in b.spans:
            if x.overlaps(y):
                return f"{x.text} and {y.text}"
    return ""


def resolve(objects: Iterable[ObjectPool], others: Sequence[Pool]) -> tuple[ObjectPool, ...]:
    """The pools with their conflicts: an object pool overlapping a kube-vip pool
    (``others``, there first by definition) or an older object pool gives out nothing
    new; both name each other in their status. Sorted by :attr:`ObjectPool.order`."""
    pools = sorted(objects, key=lambda o: (o.created, o.name))
    conflicts: dict[str, list[str]] = {o.name: [] for o in pools}
    stopped: dict[str, str] = {}
    for i, pool in enumerate(pools):
        if pool.problem:
            continue
        for other in others:
            where = _overlap(pool.pool, other)
            if where:
                conflicts[pool.name].append(f"overlaps {other.key} ({where})")
                stopped.setdefault(pool.name, other.key)
        for older in pools[:i]:
            if older.problem:
                continue
            where = _overlap(pool.pool, older.pool)
            if not where:
                continue
            conflicts[pool.name].append(f"overlaps LoadBalancerPool {older.name} ({where})")
            conflicts[older.name].append(f"overlaps LoadBalancerPool {pool.name} ({where})")
            if older.name not in stopped:
                stopped.setdefault(pool.name, f"LoadBalancerPool {older.name}")
    resolved = [
        replace(o, conflicts=tuple(conflicts[o.name]), stopped_by=stopped.get(o.name, ""))
        for o in pools
    ]
    return tuple(sorted(resolved, key=lambda o: o.order))


def _skipped_in(first: int, last: int) -> int:
    """How many IPv4 addresses from ``first`` to ``last`` end in .0 or .255."""

    def upto(x: int) -> int:  # values v in [0, x] with v % 256 in (0, 255)
        return 0 if x < 0 else x // 256 + 1 + (x + 1) // 256

    return upto(last) - upto(first - 1)


def size_of(pool: Pool, family: str | None = None) -> int:
    """How many addresses the pool may hand out unasked (of ``family``)."""
    total = 0
    for span in pool.spans:
        if family is not None and span.family != family:
            continue
        total += span.size
        if pool.avoid_buggy and span.first.version == 4:
            total -= _skipped_in(int(span.first), int(span.last))
    return total


def status_of(pool: ObjectPool, used: Mapping[str, int]) -> dict[str, Any]:
    """The ``status`` kube-ccm writes on a LoadBalancerPool."""
    status: dict[str, Any] = {"observedGeneration": pool.generation}
    for family, key in (("IPv4", "ipv4"), ("IPv6", "ipv6")):
        size = size_of(pool.pool, family)
        if not size and not used.get(family):
            continue
        count = used.get(family, 0)
        status[key] = {
            "size": min(size, MAX_STATUS_INT),
            "used": count,
            "free": min(max(size - count, 0), MAX_STATUS_INT),
        }
    status["conflicts"] = list(pool.conflicts)
    status["problem"] = pool.why_not_usable() if not pool.disabled else ""
    status["serving"] = pool.usable
    return status


__all__ = [
    "GROUP",
    "KIND",
    "RESOURCE",
    "SERVICE_NAMESPACE_LABEL",
    "SERVICE_NAME_LABEL",
    "VERSION",
    "ObjectPool",
    "PoolObject",
    "Selector",
    "parse_object",
    "parse_selector",
    "resolve",
    "selector_labels",
    "size_of",
    "status_of",
]
