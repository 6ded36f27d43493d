"""The ippool provider's load balancer: addresses from the pools, claimed in the API.

What it does, and the tenant rules, are in :mod:`kube_ccm.providers.ippool.provider`'s
docstring. Here: the allocation walk (the pools serving a Service, a request, a
sharer, a free address, the claim), the sharing rules between two holders
(:func:`conflict`), the release, and the messages that explain a refusal without
naming another namespace's Services.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from kube_ccm.api.objects import LoadBalancerIngress, LoadBalancerStatus, Node, ObjectMeta, Service
from kube_ccm.cloudprovider import (
    NAMESPACES,
    SERVICES,
    ApiError,
    KubernetesClient,
    LoadBalancer,
    LoadBalancerInventory,
    OwnedLoadBalancer,
    TypedClient,
    default_load_balancer_name,
)
from kube_ccm.cloudprovider.annotations import ServiceAnnotation, quoted
from kube_ccm.providers.ippool.annotations import (
    ADDRESSES_ANNOTATION,
    ALLOCATED_ANNOTATION,
    CROSS_NAMESPACE_ANNOTATION,
    DEFAULT_CLUSTER,
    SERVICE_ANNOTATIONS,
    SHARING_KEY_ANNOTATION,
    IPPoolError,
    IPPoolRetryError,
    holder_of,
    in_family_order,
    own_annotation_write,
    pool_name,
    request_source,
    requested_addresses,
    still_announced,
    wanted_families,
)
from kube_ccm.providers.ippool.claims import Claim, ClaimStore, Holder, key_digest
from kube_ccm.providers.ippool.config import IPPoolConfig
from kube_ccm.providers.ippool.objects import RESOURCE, ObjectPool, object_named, objects_of
from kube_ccm.providers.ippool.pools import GLOBAL, FreeIndex, IPAddress, Pool, Pools, family_of

log = logging.getLogger(__name__)

NOT_SHARED_REASON = "AddressNotShared"
"""Warning Event: a Service with a sharing key got an address of its own, and why."""
OUTSIDE_POOLS_REASON = "AddressOutsidePools"
"""Warning Event: a Service keeps an address that no pool holds any more."""
ALLOCATION_FAILED_REASON = "AllocationFailed"
"""Warning Event: a Service was refused an address. MetalLB's controller's reason and
message shape (``Failed to allocate IP for "<namespace>/<name>": <why>``), so that
alerts on it keep working; the service controller's ``SyncLoadBalancerFailed``, with
the same words, is written too."""


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


class PoolSource(Protocol):
    """What the load balancer asks of its provider (:class:`~.provider.IPPoolProvider`):
    the cloud-config, the pools, the claims, the client, and where Events go."""

    @property
    def config(self) -> IPPoolConfig: ...
    @property
    def client(self) -> KubernetesClient: ...
    @property
    def api(self) -> TypedClient: ...
    @property
    def store(self) -> ClaimStore: ...
    async def pools(self) -> Pools: ...
    async def peers_hint(self) -> str: ...
    def claims_changed(self) -> None: ...
    def event(self, holder: Holder, reason: str, message: str) -> None: ...
    def service_event(
        self, namespace: str, name: str, uid: str, reason: str, message: str
    ) -> None: ...


class IPPoolLoadBalancer(LoadBalancer, LoadBalancerInventory):
    """Addresses from the pools, claimed in the API (see :mod:`.provider`)."""

    service_annotations: Sequence[ServiceAnnotation] = SERVICE_ANNOTATIONS

    def __init__(self, provider: PoolSource) -> None:
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
        except IPPoolRetryError:
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
            raise IPPoolRetryError(f"lost {lost[0]} while announcing it; will retry")
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
                    if not isinstance(exc, IPPoolRetryError):
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
                        if isinstance(exc, IPPoolRetryError) or not serving.refused:
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
        kube-vip's global pool. A Service naming a pool
        (:data:`~.annotations.POOL_ANNOTATION`) gets that one only, or an error saying
        why not."""
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
        raise IPPoolRetryError(f"address {address} kept changing while claiming it; will retry")

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
        raise IPPoolRetryError(f"could not claim a {family} address (lost 20 races); will retry")

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
                raise IPPoolRetryError(f"the claim on {claim.address} vanished; will retry")
            claim = refreshed
        raise IPPoolRetryError(f"address {claim.address} kept changing; will retry")

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
        raise IPPoolRetryError(f"could not release {claim.address} (it kept changing); will retry")

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
