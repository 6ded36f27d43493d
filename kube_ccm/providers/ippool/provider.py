"""The ``ippool`` provider: load balancer addresses from pools, with no cloud behind them.

Pools come from kube-vip-cloud-provider's ConfigMap, the cloud-config, and
LoadBalancerPool objects (:mod:`.objects`), watched by an informer of the
provider's own; a Service is served by its namespace's kube-vip pool, then the
LoadBalancerPools that serve it (by priority), then the global kube-vip pool, or by
the one pool it names in :data:`~.annotations.POOL_ANNOTATION`. The provider writes
each LoadBalancerPool's status.

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
(:data:`~.annotations.SHARING_KEY_ANNOTATION`) may share an address when no
protocol/port pair collides (TCP and UDP may use one port number).

Tenants: sharing stays inside a namespace unless every Service involved names the
other's namespace in :data:`~.annotations.CROSS_NAMESPACE_ANNOTATION` (or Cilium's).
The namespace that took an address first owns it: its Services win a port over a guest
of another namespace, and when its last Service leaves, the guests lose the address
too (their annotation is removed, so the announcer stops and they are synced
again). A Service's Events never name another namespace's Services, ports, keys or
pools ("taken"); the daemon's log has the detail. Annotation values
(:mod:`.annotations`) are length-checked before they are parsed, and quoted in
messages only as a short prefix.

This module holds the provider: the pools (the ConfigMap, the cloud-config and the
LoadBalancerPools' informer), the pools' status and its Events. The allocation
walk, the sharing rules and the messages that explain a refusal are in
:mod:`.loadbalancer`; what is read from a Service is in :mod:`.annotations`.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import Any

from kube_ccm.cloudprovider import (
    CONFIG_MAPS,
    ApiError,
    ClientBuilder,
    CloudProvider,
    EventRecorder,
    Informer,
    KubeClient,
    KubernetesClient,
    ObjectReference,
    ProviderEventRecorder,
    TransportError,
    TypedClient,
    start_event_recorder,
)
from kube_ccm.providers.ippool.annotations import IPPoolError, IPPoolRetryError
from kube_ccm.providers.ippool.claims import ClaimStore, Holder
from kube_ccm.providers.ippool.config import IPPoolConfig
from kube_ccm.providers.ippool.kubevip import read_kubevip
from kube_ccm.providers.ippool.loadbalancer import IPPoolLoadBalancer
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
from kube_ccm.providers.ippool.pools import PoolError, Pools, family_of

log = logging.getLogger(__name__)

PROVIDER_NAME = "ippool"
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
EVENT_SOURCE = "ippool"


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
                    IPPoolRetryError("reading the pools was interrupted; will retry")
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
            raise IPPoolRetryError("the LoadBalancerPools are not read yet; will retry") from None
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
