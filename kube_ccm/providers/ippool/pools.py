"""Address pools: parsed, checked, and searched for a free address.

A pool is a list of address spans (a CIDR is one span, a range ``a-b`` another)
that serve either every namespace (``global``) or one namespace. Pools are checked
as a whole: a malformed CIDR or range, a range that runs backwards, a pool with no
usable address, and a namespace's pool overlapping the global one (or two pools
for one name overlapping) are each an error naming the key. Two namespaces' pools
may overlap, as in kube-vip's own example ConfigMap: an address is claimed once
for the whole cluster (:mod:`.claims`), so it goes to whichever Service takes it
first, never to two.

A pool that is wrong on its own (a malformed value, reserved addresses, a namespace's
pool overlapping the global one) is *broken*: read from the ConfigMap it stops only
the Services it would serve (:meth:`Pools.problem_for`), never the other pools.

Like kube-vip-cloud-provider's ``FindFreeAddress``, no IPv4 address ending in ``.0``
or ``.255`` is handed out on its own (:func:`skipped`), in CIDRs and ranges, in either
search order; a Service may still ask for one.
"""

from __future__ import annotations

import bisect
import heapq
import ipaddress
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from kube_ccm.cloudprovider import one_line

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

GLOBAL = "global"


class PoolError(ValueError):
    """The pools are invalid; the message names the key and what to write."""

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))


def family_of(address: IPAddress) -> str:
    return "IPv4" if address.version == 4 else "IPv6"


def skipped(address: IPAddress) -> bool:
    """Never handed out unasked: an IPv4 address ending in .0 or .255, as
    kube-vip-cloud-provider's ``isNetworkIDOrBroadcastIP`` (pkg/ipam/ipam.go)."""
    return address.version == 4 and int(address) & 0xFF in (0, 0xFF)


@dataclass(frozen=True)
class Span:
    """Addresses ``first`` to ``last``, both included, one family."""

    first: IPAddress
    last: IPAddress
    text: str

    @property
    def family(self) -> str:
        return family_of(self.first)

    @property
    def size(self) -> int:
        return int(self.last) - int(self.first) + 1

    def __contains__(self, address: IPAddress) -> bool:
        return address.version == self.first.version and int(self.first) <= int(address) <= int(
            self.last
        )

    def overlaps(self, other: Span) -> bool:
        return (
            self.first.version == other.first.version
            and int(self.first) <= int(other.last)
            and int(other.first) <= int(self.last)
        )

    def addresses(self, *, descending: bool = False) -> Iterator[IPAddress]:
        cls = type(self.first)
        values = (
            range(int(self.last), int(self.first) - 1, -1)
            if descending
            else range(int(self.first), int(self.last) + 1)
        )
        for value in values:
            yield cls(value)


@dataclass(frozen=True)
class Pool:
    """The addresses one key (``cidr-global``, ``range-team-a``, ...) gives out."""

    name: str
    """``global`` or the namespace it serves."""
    key: str
    """Where it was written (a ConfigMap key or a cloud-config key), for messages."""
    spans: tuple[Span, ...]
    allow_share: bool = False
    """kube-vip's ``allow-share-<name>`` (else ``allow-share-global``) for this pool."""
    descending: bool = False
    """Give out the highest free address first (kube-vip's ``search-order: desc``)."""
    resource: str = "pools"
    """What the claims' ``spec.parentRef`` names: ``pools`` for a kube-vip pool (named
    by its namespace or ``global``), ``loadbalancerpools`` for a LoadBalancerPool
    object (:mod:`.objects`)."""
    avoid_buggy: bool = True
    """Never hand out an IPv4 address ending in .0 or .255 unasked (:func:`skipped`);
    only a LoadBalancerPool with ``avoidBuggyIPs: false`` turns it off."""

    @property
    def ref(self) -> str:
        """The pool's identity across both kinds (a namespace may not be called
        ``loadbalancerpools/...``)."""
        return self.name if self.resource == "pools" else f"{self.resource}/{self.name}"

    def skips(self, address: IPAddress) -> bool:
        return self.avoid_buggy and skipped(address)

    def families(self) -> frozenset[str]:
        return frozenset(s.family for s in self.spans)

    def size(self, family: str | None = None) -> int:
        return sum(s.size for s in self.spans if family is None or s.family == family)

    def __contains__(self, address: IPAddress) -> bool:
        return any(address in s for s in self.spans)

    def free(self, family: str, taken: Callable[[IPAddress], bool]) -> IPAddress | None:
        """The lowest address of ``family`` not ``taken`` nor :func:`skipped` (the
        highest when :attr:`descending`), or None. A linear scan, for tests and
        one-off use: the provider keeps a :class:`FreeIndex` per pool."""
        for span in reversed(self.spans) if self.descending else self.spans:
            if span.family != family:
                continue
            for address in span.addresses(descending=self.descending):
                if not self.skips(address) and not taken(address):
                    return address
        return None


def zone_problem(text: str) -> str:
    """Why ``text`` cannot be a load-balancer address when it carries an IPv6 zone
    (``2001:db8::11%eth0``), else "". Python's parser takes a zone; kube-apiserver
    refuses it (422) in an IPAddress's name and a Service's status, so it is refused
    here, once, before anything is written."""
    if "%" not in text:
        return ""
    return (
        "is a scoped IPv6 address (it has a %zone): a zone names a link of one host, "
        "which no load-balancer address can have, and Kubernetes refuses it; write the "
        "address without the %zone"
    )


def parse_span(text: str, key: str, *, skip_cidr_ends: bool = True) -> Span:
    """``192.0.2.0/28`` (a CIDR; IPv4 CIDRs of /30 and wider give out neither the
    network nor the broadcast address) or ``192.0.2.10-192.0.2.20`` (a range)."""
    text = text.strip()
    zoned = zone_problem(text)
    if zoned:
        raise PoolError(f"{key}: {text[:80]!r} {zoned}")
    try:
        if "/" in text:
            network = ipaddress.ip_network(text, strict=False)
            first: IPAddress = network.network_address
            last: IPAddress = network.broadcast_address
            if skip_cidr_ends and network.version == 4 and network.num_addresses >= 4:
                first, last = first + 1, last - 1
            return Span(first, last, text)
        if "-" in text:
            low, _, high = text.partition("-")
            first, last = ipaddress.ip_address(low.strip()), ipaddress.ip_address(high.strip())
            if first.version != last.version:
                raise PoolError(f"{key}: range {text!r} mixes IPv4 and IPv6")
            if int(last) < int(first):
                raise PoolError(f"{key}: range {text!r} ends before it starts; write low-high")
            return Span(first, last, text)
        address = ipaddress.ip_address(text)
        return Span(address, address, text)
    except ValueError as exc:
        if isinstance(exc, PoolError):
            raise
        raise PoolError(
            f"{key}: {text!r} is neither a CIDR (192.0.2.0/24) nor a range "
            f"(192.0.2.10-192.0.2.20): {exc}"
        ) from exc


def parse_spans(value: str, key: str) -> tuple[Span, ...]:
    """A comma-separated list of CIDRs or ranges."""
    parts = [p for p in (v.strip() for v in value.split(",")) if p]
    if not parts:
        raise PoolError(f"{key} is empty; give CIDRs or ranges, comma-separated")
    return tuple(parse_span(p, key) for p in parts)


RESERVED: tuple[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, str], ...] = (
    (ipaddress.IPv4Network("0.0.0.0/8"), "this-network addresses"),
    (ipaddress.IPv4Network("127.0.0.0/8"), "loopback"),
    (
        ipaddress.IPv4Network("169.254.0.0/16"),
        "link-local (169.254.169.254 is the cloud metadata address)",
    ),
    (ipaddress.IPv4Network("224.0.0.0/4"), "multicast"),
    (ipaddress.IPv4Network("240.0.0.0/4"), "reserved and broadcast"),
    (ipaddress.IPv6Network("::/127"), "the unspecified and loopback addresses"),
    (ipaddress.IPv6Network("fe80::/10"), "link-local"),
    (ipaddress.IPv6Network("ff00::/8"), "multicast"),
)
"""Addresses no pool may hold: announcing one for a Service would capture a node's
own traffic (loopback, the metadata address) or reach no one."""


def reserved_overlap(span: Span) -> str | None:
    """What reserved block ``span`` overlaps, or None."""
    for network, what in RESERVED:
        if (
            network.version == span.first.version
            and int(span.first) <= int(network.broadcast_address)
            and int(network.network_address) <= int(span.last)
        ):
            return f"{network} ({what})"
    return None


class PoolObjectLike(Protocol):
    """What :class:`Pools` needs of a LoadBalancerPool (:class:`.objects.ObjectPool`)."""

    @property
    def pool(self) -> Pool: ...

    @property
    def usable(self) -> bool: ...


@dataclass(frozen=True)
class Pools:
    """Every pool, and which serves a namespace."""

    pools: tuple[Pool, ...] = ()
    by_name: Mapping[str, Pool] = field(default_factory=dict)
    broken: Mapping[str, str] = field(default_factory=dict)
    """Pools left out because they are wrong, by name: what is wrong, naming the key."""
    share: Mapping[str, bool] = field(default_factory=dict)
    """``allow-share-<name>`` by name (``global`` included), whether or not the
    name has a pool of its own."""
    objects: tuple[PoolObjectLike, ...] = ()
    """The LoadBalancerPool objects (:mod:`.objects`), checked, conflicts resolved;
    disabled, conflicting and broken ones included (their addresses stay theirs)."""

    @classmethod
    def of(
        cls,
        pools: Iterable[Pool],
        *,
        strict: bool = True,
        broken: Mapping[str, str] | None = None,
        share: Mapping[str, bool] | None = None,
    ) -> Pools:
        """The pools, checked. ``strict`` (the cloud-config, at start-up) raises
        :class:`PoolError` for the first problem; otherwise (the ConfigMap, read while
        serving) a pool with a problem is left out and recorded in :attr:`broken`,
        and the others serve on."""
        candidates = tuple(pools)
        bad: dict[str, str] = dict(broken or {})
        for names, message in _problems(candidates):
            if strict:
                raise PoolError(message)
            for name in names:
                bad.setdefault(name, one_line(message))
        checked = tuple(p for p in candidates if p.name not in bad)
        return cls(checked, {p.name: p for p in checked}, bad, dict(share or {}))

    def for_namespace(self, namespace: str) -> Sequence[Pool]:
        """The namespace's own pool first, then the global one.

        kube-vip-cloud-provider uses the global pool only for a namespace with no
        pool of its own; ippool also lets a namespace whose pool is exhausted (or
        lacks the IP family asked for) take a global address. See
        :mod:`kube_ccm.providers.ippool.kubevip`."""
        return tuple(p for p in (self.by_name.get(namespace), self.by_name.get(GLOBAL)) if p)

    def problem_for(self, namespace: str) -> str | None:
        """Why the namespace's Services get no address: its own pool is broken, or it
        has none and the global one is broken. None when it is served."""
        if namespace in self.broken:
            return self.broken[namespace]
        if namespace not in self.by_name and GLOBAL in self.broken:
            return self.broken[GLOBAL]
        return None

    def sharing_allowed(self, namespace: str) -> bool:
        """kube-vip's rule (its ``discoverPool``): ``allow-share-<namespace>``, else
        ``allow-share-global``, whichever pool serves the namespace."""
        if namespace in self.share:
            return self.share[namespace]
        return self.share.get(GLOBAL, False)

    def containing(self, address: IPAddress) -> Pool | None:
        found = next((p for p in self.pools if address in p), None)
        if found is None:
            found = next((o.pool for o in self.objects if address in o.pool), None)
        return found

    def __bool__(self) -> bool:
        return bool(self.pools) or any(o.usable for o in self.objects)


def _problems(pools: Sequence[Pool]) -> Iterator[tuple[tuple[str, ...], str]]:
    """Each problem: the names of the pools it stops, and the message. A namespace's
    pool overlapping the global one stops the namespace's (the global one serves on)."""
    spans = [(pool, span) for pool in pools for span in pool.spans]
    for i, (pool, span) in enumerate(spans):
        if span.size <= 0:
            yield (pool.name,), f"{pool.key}: {span.text!r} holds no usable address"
        reserved = reserved_overlap(span)
        if reserved is not None:
            yield (
                (pool.name,),
                f"{pool.key}: {span.text!r} overlaps {reserved}, which no load "
                "balancer may use; give addresses outside it",
            )
        for other_pool, other in spans[i + 1 :]:
            if not span.overlaps(other):
                continue
            if other_pool.name != pool.name and GLOBAL not in (pool.name, other_pool.name):
                continue  # two namespaces' pools: each address is claimed once anyway
            where = (
                f"{pool.key} ({span.text})"
                if other_pool.key == pool.key
                else f"{pool.key} ({span.text}) and {other_pool.key}"
            )
            stopped = tuple(n for n in {pool.name, other_pool.name} if n != GLOBAL) or (GLOBAL,)
            yield (
                stopped,
                f"pools overlap: {where} ({other.text}) share addresses; "
                "give each address to one pool (a namespace's pool may not "
                "overlap the global one)",
            )
    names: dict[str, Pool] = {}
    for pool in pools:
        if pool.name in names:
            yield (
                (pool.name,),
                f"{pool.key} and {names[pool.name].key} both define the pool for "
                f"{pool.name!r}; merge them into one key",
            )
        names[pool.name] = pool


class FreeIndex:
    """Where the next free address of one pool and family is, without a scan.

    Positions count the pool's addresses in search order (lowest first, or highest
    first when :attr:`Pool.descending`). Everything before :attr:`cursor` has been
    seen taken or skipped; an address released below it goes into a heap of holes.
    :meth:`next_free` so looks at each address about once between releases: O(1)
    amortized per allocation, however many claims there are. The caller's
    ``taken`` is the truth (the claim index and the addresses being claimed); the
    index only says where to look first."""

    def __init__(self, pool: Pool, family: str) -> None:
        spans = [s for s in pool.spans if s.family == family]
        self.descending = pool.descending
        self._avoid_buggy = pool.avoid_buggy
        self._spans = list(reversed(spans)) if pool.descending else spans
        self._starts: list[int] = []
        total = 0
        for span in self._spans:
            self._starts.append(total)
            total += span.size
        self.size = total
        self.cursor = 0
        self._holes: list[int] = []
        self._cls = type(spans[0].first) if spans else ipaddress.IPv4Address

    def _at(self, position: int) -> IPAddress:
        i = bisect.bisect_right(self._starts, position) - 1
        span, offset = self._spans[i], position - self._starts[i]
        value = int(span.last) - offset if self.descending else int(span.first) + offset
        return self._cls(value)

    def position(self, address: IPAddress) -> int | None:
        for span, start in zip(self._spans, self._starts, strict=True):
            if address in span:
                offset = (
                    int(span.last) - int(address)
                    if self.descending
                    else int(address) - int(span.first)
                )
                return start + offset
        return None

    def next_free(self, taken: Callable[[IPAddress], bool]) -> IPAddress | None:
        """The first free address in search order, or None. It stays where it is until
        it is seen taken, so a claim that fails (not a lost race) finds it again."""
        while self._holes:
            address = self._at(self._holes[0])
            if not (self._avoid_buggy and skipped(address)) and not taken(address):
                return address
            heapq.heappop(self._holes)
        while self.cursor < self.size:
            address = self._at(self.cursor)
            if not (self._avoid_buggy and skipped(address)) and not taken(address):
                return address
            self.cursor += 1
        return None

    def release(self, address: IPAddress) -> None:
        """``address`` may be free again."""
        position = self.position(address)
        if position is not None and position < self.cursor:
            heapq.heappush(self._holes, position)
