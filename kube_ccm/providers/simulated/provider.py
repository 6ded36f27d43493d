"""The ``simulated`` cloud provider: a real provider whose cloud is a SQLite file.

It implements the whole contract (InstancesV2, and V1 Instances + Zones when the
cloud-config says ``instancesApi: v1``; load balancers; routes; PV labels; pod CIDRs
per instance when the cloud-config gives ``podCIDRs.ranges``) over
:mod:`kube_ccm.providers.simulated.state`, and behaves like a cloud where that
matters for a CCM: every call is counted by its upstream method name, can be
slowed down (``latency``), throttled (``rateLimit``), fail at random
(``failureRate``), or be made to fail, ask for a retry or hang on purpose
(``kube-ccm simcloud faults set``).

Authentication: when the cloud's state holds accepted credentials (``kube-ccm
simcloud credentials set``), every call must present one of them; the provider
presents the value of the cloud-config's ``credentials:`` (a file, reloaded when
it changes, or an environment variable) through
:class:`~kube_ccm.cloudprovider.Credentials`. A refused call raises
:class:`SimulatedAuthError`, whose message names where the credentials came from
and their fingerprint, never their value.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TypeVar, cast

from kube_ccm.api import wellknown as wk
from kube_ccm.api.objects import (
    LoadBalancerIngress,
    LoadBalancerStatus,
    Node,
    NodeAddress,
    PersistentVolume,
    Service,
)
from kube_ccm.api.wellknown import ANNOTATION_LOAD_BALANCER_SOURCE_RANGES
from kube_ccm.cloudprovider import (
    ClientBuilder,
    CloudProvider,
    CloudProviderError,
    Credentials,
    InstanceMetadata,
    InstanceNotFoundError,
    Instances,
    InstancesV2,
    LoadBalancer,
    LoadBalancerInventory,
    NodePodCIDRs,
    OwnedLoadBalancer,
    PVLabeler,
    RetryError,
    Route,
    Routes,
    TransientCloudError,
    Zone,
    Zones,
    default_load_balancer_name,
    get_load_balancer_source_ranges,
)
from kube_ccm.cloudprovider.annotations import boolean, cidr_list
from kube_ccm.providers.simulated.config import SimulatedConfig
from kube_ccm.providers.simulated.state import (
    AsyncCloudState,
    Authentication,
    CloudState,
    Fault,
    Instance,
    StateError,
)

log = logging.getLogger(__name__)

PROVIDER_NAME = "simulated"
CSI_DRIVER = "simulated.csi.kube-ccm.io"

R = TypeVar("R")


class SimulatedCloudError(CloudProviderError):
    """A failure the simulated cloud produced (random, injected or quota)."""


class SimulatedTransientError(SimulatedCloudError, TransientCloudError):
    """A random failure with ``failureKind: transient``: as a cloud's 5xx or throttling,
    the daemon's cloud-call boundary tries the call again at once."""


class SimulatedAuthError(SimulatedCloudError):
    """The simulated cloud refused the call's credentials (missing or not accepted)."""


class _Quota:
    """The cloud's API rate limit: a token bucket; over quota, calls are refused."""

    def __init__(self, qps: float, burst: int) -> None:
        self.qps = qps
        self.burst = max(1, burst) if qps > 0 else 0
        self._tokens = float(self.burst)
        self._last = time.monotonic()

    def take(self) -> bool:
        if self.qps <= 0:
            return True
        now = time.monotonic()
        self._tokens = min(self.burst, self._tokens + (now - self._last) * self.qps)
        self._last = now
        if self._tokens >= 1:
            self._tokens -= 1
            return True
        return False


class SimulatedCloud(CloudProvider, PVLabeler, NodePodCIDRs):
    """The embedded default cloud. Build it with :func:`factory` or directly."""

    def __init__(
        self,
        config: SimulatedConfig,
        *,
        state: AsyncCloudState | None = None,
        credentials: Credentials | None = None,
    ) -> None:
        """Build the cloud; with ``config.credentials`` they are read now (before the state
        is opened), so a missing file or variable raises
        :class:`~kube_ccm.cloudprovider.CredentialsError` and the daemon does not start.
        ``credentials`` replaces the ones the config names (tests)."""
        self.config = config
        if credentials is None and config.credentials is not None:
            credentials = Credentials(
                config.credentials, reload_interval=config.credentials_reload_interval
            )
        if credentials is not None:
            credentials.current()
        self.credentials = credentials
        self.state = state or AsyncCloudState(
            config.state, call_counts_flush_interval=config.call_counts_flush_interval
        )
        if config.load_balancer.ip_pool and not config.load_balancer.hostname_mode:
            self.state.sync.seed_ip_pool(config.load_balancer.ip_pool)
        self._quota = _Quota(config.rate_limit.qps, config.rate_limit.burst)
        self._random = random.Random(config.random_seed)
        self._failure_streaks: dict[str, int] = {}
        """Method → its random failures in a row (``maxFailureStreak``)."""
        self._instances_v2 = _InstancesV2(self)
        self._instances_v1 = _InstancesV1(self)
        self._zones = _Zones(self)
        self._lb = _LoadBalancer(self)
        self._routes = _Routes(self)
        self.client_builder: ClientBuilder | None = None

    # -- the contract ---------------------------------------------------------

    async def initialize(self, client_builder: ClientBuilder, stop: asyncio.Event) -> None:
        self.client_builder = client_builder
        if self.credentials is not None:
            self.credentials.start(stop)

    def provider_name(self) -> str:
        return PROVIDER_NAME

    def has_cluster_id(self) -> bool:
        return True

    def instances_v2(self) -> InstancesV2 | None:
        return self._instances_v2 if self.config.instances_api == "v2" else None

    def instances(self) -> Instances | None:
        return self._instances_v1

    def zones(self) -> Zones | None:
        return self._zones

    def load_balancer(self) -> LoadBalancer | None:
        return self._lb

    def routes(self) -> Routes | None:
        return self._routes

    async def get_labels_for_volume(self, pv: PersistentVolume) -> Mapping[str, str]:
        async def labels() -> Mapping[str, str]:
            source = pv.spec.volume_source
            if source is None or source[0] != "csi" or source[1].get("driver") != CSI_DRIVER:
                return {}
            handle = str(source[1].get("volumeHandle", ""))
            volume = await self.state.run(lambda s: s.volume(handle))
            if volume is None:
                raise SimulatedCloudError(
                    f"volume {handle!r} does not exist in the simulated cloud"
                )
            return {wk.LABEL_ZONE: volume.zone, wk.LABEL_REGION: volume.region}

        return await self.call("GetLabelsForVolume", labels)

    async def node_pod_cidrs(self, node: Node) -> Sequence[str]:
        """The n-th CIDR of each ``podCIDRs`` range for the instance created n-th, as a
        cloud hands out alias ranges; none when no range is configured or it is used up."""

        def step(state: CloudState) -> Sequence[str]:
            number = state.instance_number(self.instance_in(state, node).id)
            cidrs = []
            for network, mask in self.config.pod_cidrs.networks():
                size = 1 << (network.max_prefixlen - mask)
                if number >= 1 << (mask - network.prefixlen):
                    return ()  # the range is used up: no pod CIDRs for this instance
                first = int(network.network_address) + number * size
                cidrs.append(str(ipaddress.ip_network((first, mask))))
            return tuple(cidrs)

        return await self.call_step("NodePodCIDRs", step)

    # -- plumbing -------------------------------------------------------------

    async def call(self, method: str, body: Callable[[], Awaitable[R]]) -> R:
        """Run one cloud call: count it, then credentials, quota, injected fault, random
        failure, latency."""
        presented = self._presented()
        verdict, fault = await self.state.run(lambda s: _begin_call(s, method, presented))
        return await self._complete(method, verdict, fault, body)

    async def call_step(self, method: str, step: Callable[[CloudState], R]) -> R:
        """Run one cloud call whose work is one step on the cloud's database.

        With no latency, no random failures and no quota configured (what the
        benchmarks run), the call is counted, its credentials checked and its step
        run at once on the event loop's thread (after yielding once, as a network
        call would), as an in-memory cloud would answer: no trip to the database
        thread, whose hand-offs under a busy event loop cost more than the SQLite
        work itself, so the benchmarks measure the CCM rather than this fake.
        Refused or faulted, it goes on as :meth:`call` does; otherwise it is
        :meth:`call` around the step, on the database thread.
        """
        config = self.config
        if config.latency or config.failure_rate or self._quota.qps > 0:
            return await self.call(method, lambda: self.state.run(step))
        presented = self._presented()
        await asyncio.sleep(0)
        try:
            verdict, fault, value = self.state.run_here(
                lambda s: _call_in_one_step(s, method, presented, step)
            )
        except BaseException as exc:
            self._count_failure(method, exc)
            raise
        if verdict == "ok" and fault is None:  # the step ran
            return cast(R, value)
        return await self._complete(method, verdict, fault, lambda: self.state.run(step))

    def _count_failure(self, method: str, exc: BaseException) -> None:
        """Count a failed call: not a cancellation, nor a not-found answer."""
        if not isinstance(exc, asyncio.CancelledError | InstanceNotFoundError):
            self.state.count_error(method)

    async def _complete(
        self,
        method: str,
        verdict: Authentication,
        fault: Fault | None,
        body: Callable[[], Awaitable[R]],
    ) -> R:
        """The rest of a call once it is counted: a refusal re-checked with credentials
        read again, then quota, injected fault, random failure, latency and the body."""
        if verdict != "ok" and self.credentials is not None and await self.credentials.refresh():
            # Refused, and the file changed since the last poll: present the new value.
            presented = self._presented()
            verdict, fault = await self.state.run(
                lambda s: _begin_call(s, method, presented, count=False)
            )
        try:
            if verdict != "ok":
                raise self._auth_error(method, verdict)
            if not self._quota.take():
                raise SimulatedCloudError(
                    f"{method}: cloud API rate limit exceeded ({self._quota.qps:g} calls/s)"
                )
            if fault is not None:
                if fault.mode == "hang":
                    await asyncio.Event().wait()
                if fault.mode == "retry":
                    raise RetryError(
                        f"{method}: the simulated cloud asks to retry later", fault.retry_after
                    )
                raise SimulatedCloudError(f"{method}: injected failure")
            if self._random_failure(method):
                if self.config.failure_kind == "transient":
                    raise SimulatedTransientError(f"{method}: simulated transient failure")
                raise SimulatedCloudError(f"{method}: simulated random failure")
            if self.config.latency:
                await asyncio.sleep(self.config.latency)
            return await body()
        except BaseException as exc:
            self._count_failure(method, exc)
            raise

    def _random_failure(self, method: str) -> bool:
        """Whether this call fails at random (``failureRate``), at most
        ``maxFailureStreak`` times in a row per method when that is set."""
        config = self.config
        if not config.failure_rate:
            return False
        streak = self._failure_streaks.get(method, 0)
        fails = self._random.random() < config.failure_rate
        if fails and config.max_failure_streak and streak >= config.max_failure_streak:
            fails = False
        self._failure_streaks[method] = streak + 1 if fails else 0
        return fails

    def _presented(self) -> str | None:
        return self.credentials.current().reveal() if self.credentials is not None else None

    def _auth_error(self, method: str, verdict: Authentication) -> SimulatedAuthError:
        if self.credentials is None:
            return SimulatedAuthError(
                f"{method}: authentication failed: the simulated cloud requires credentials "
                "and none are configured; add `credentials: {file: PATH}` or "
                "`credentials: {env: VARIABLE}` to the cloud-config"
            )
        source = self.credentials.source
        if source.file:
            fix = (
                f"write the credentials the cloud accepts into that file (a change is used "
                f"within {self.credentials.reload_interval:g} s, without a restart)"
            )
        else:
            fix = (
                "set that variable to the credentials the cloud accepts and restart the "
                "daemon (an environment variable is read once)"
            )
        return SimulatedAuthError(
            f"{method}: authentication failed: the simulated cloud rejected the credentials "
            f"from {source.describe()} (sha256 {self.credentials.current().fingerprint}); "
            f"{fix}; `kube-ccm simcloud credentials list` shows the fingerprints it accepts"
        )

    def provider_id(self, instance: Instance) -> str:
        return f"{PROVIDER_NAME}://{instance.id}"

    def instance_in(
        self, state: CloudState, node: Node | None, *, name: str = "", provider_id: str = ""
    ) -> Instance:
        """The instance behind a node (providerID first, then name); may auto-create.
        A step for :meth:`call_step`."""
        provider_id = provider_id or (node.spec.provider_id if node else "")
        name = name or (node.metadata.name if node else "")
        config = self.config
        if state.blind():  # `kube-ccm simcloud blind on`: a wrong identity sees nothing
            raise InstanceNotFoundError()
        found: Instance | None = None
        if provider_id:
            found = state.instance_by_id(provider_id.removeprefix(f"{PROVIDER_NAME}://"))
        if found is None and name:
            found = state.instance_by_node(name)
            if found is None and config.unknown_nodes == "create":
                zone = config.zones[
                    int(hashlib.sha256(name.encode()).hexdigest(), 16) % len(config.zones)
                ]
                found = state.add_instance(
                    name, zone=zone, region=config.region, instance_type=config.instance_type
                )
        if found is None or found.state == "terminated":
            raise InstanceNotFoundError()
        return found

    def has_instance(self, state: CloudState, node: Node | None, *, provider_id: str = "") -> bool:
        """Whether :meth:`instance_in` finds an instance. A step for :meth:`call_step`."""
        try:
            self.instance_in(state, node, provider_id=provider_id)
        except InstanceNotFoundError:
            return False
        return True

    def close(self) -> None:
        if self.credentials is not None:
            self.credentials.close()
        self.state.close()

    async def aclose(self) -> None:
        log.info("closing the simulated cloud")
        self.close()


def _begin_call(
    state: CloudState, method: str, presented: str | None, *, count: bool = True
) -> tuple[Authentication, Fault | None]:
    """Count the call, check its credentials, and take its injected fault if they pass."""
    if count:
        state.record_call(method)
    verdict = state.authenticate(presented)
    return verdict, (state.take_fault(method) if verdict == "ok" else None)


def _call_in_one_step(
    state: CloudState, method: str, presented: str | None, step: Callable[[CloudState], R]
) -> tuple[Authentication, Fault | None, R | None]:
    """:func:`_begin_call`, then the step if the call may go on (accepted, no fault):
    (verdict, fault, the step's value or None when it did not run)."""
    verdict, fault = _begin_call(state, method, presented)
    if verdict != "ok" or fault is not None:
        return verdict, fault, None
    return verdict, None, step(state)


def _addresses(instance: Instance) -> tuple[NodeAddress, ...]:
    return tuple(NodeAddress(type=t, address=a) for t, a in instance.addresses)


def _belongs_step(node_name: str, metadata: InstanceMetadata) -> Callable[[CloudState], bool]:
    """A step: whether the instance the providerID names was made for ``node_name``
    (the instance's own ``node_name`` in the cloud's state, which no Node can write)."""

    def step(state: CloudState) -> bool:
        prefix = f"{PROVIDER_NAME}://"
        if not metadata.provider_id.startswith(prefix):
            return False
        instance = state.instance_by_id(metadata.provider_id.removeprefix(prefix))
        return instance is not None and instance.node_name == node_name

    return step


class _InstancesV2(InstancesV2):
    authoritative = True
    """Every answer is the simulated cloud's state, never the Node's."""

    def __init__(self, cloud: SimulatedCloud) -> None:
        self._cloud = cloud

    async def instance_belongs_to(self, node_name: str, metadata: InstanceMetadata) -> bool:
        return await self._cloud.call_step("InstanceBelongsTo", _belongs_step(node_name, metadata))

    async def instance_exists(self, node: Node) -> bool:
        return await self._cloud.call_step(
            "InstanceExists", lambda state: self._cloud.has_instance(state, node)
        )

    async def instance_shutdown(self, node: Node) -> bool:
        def step(state: CloudState) -> bool:
            return self._cloud.instance_in(state, node).state == "shutdown"

        return await self._cloud.call_step("InstanceShutdown", step)

    async def instance_metadata(self, node: Node) -> InstanceMetadata | None:
        def step(state: CloudState) -> InstanceMetadata | None:
            instance = self._cloud.instance_in(state, node)
            return InstanceMetadata(
                provider_id=self._cloud.provider_id(instance),
                instance_type=instance.instance_type,
                node_addresses=_addresses(instance),
                zone=instance.zone,
                region=instance.region,
                additional_labels=dict(instance.labels),
            )

        return await self._cloud.call_step("InstanceMetadata", step)


class _InstancesV1(Instances):
    authoritative = True

    def __init__(self, cloud: SimulatedCloud) -> None:
        self._cloud = cloud

    async def instance_belongs_to(self, node_name: str, metadata: InstanceMetadata) -> bool:
        return await self._cloud.call_step("InstanceBelongsTo", _belongs_step(node_name, metadata))

    async def node_addresses(self, node_name: str) -> tuple[NodeAddress, ...]:
        def step(state: CloudState) -> tuple[NodeAddress, ...]:
            return _addresses(self._cloud.instance_in(state, None, name=node_name))

        return await self._cloud.call_step("NodeAddresses", step)

    async def node_addresses_by_provider_id(self, provider_id: str) -> tuple[NodeAddress, ...]:
        def step(state: CloudState) -> tuple[NodeAddress, ...]:
            if not provider_id:
                raise SimulatedCloudError("empty providerID")
            return _addresses(self._cloud.instance_in(state, None, provider_id=provider_id))

        return await self._cloud.call_step("NodeAddressesByProviderID", step)

    async def instance_id(self, node_name: str) -> str:
        def step(state: CloudState) -> str:
            return self._cloud.instance_in(state, None, name=node_name).id

        return await self._cloud.call_step("InstanceID", step)

    async def instance_type(self, node_name: str) -> str:
        def step(state: CloudState) -> str:
            return self._cloud.instance_in(state, None, name=node_name).instance_type

        return await self._cloud.call_step("InstanceType", step)

    async def instance_type_by_provider_id(self, provider_id: str) -> str:
        def step(state: CloudState) -> str:
            if not provider_id:
                raise SimulatedCloudError("empty providerID")
            return self._cloud.instance_in(state, None, provider_id=provider_id).instance_type

        return await self._cloud.call_step("InstanceTypeByProviderID", step)

    async def instance_exists_by_provider_id(self, provider_id: str) -> bool:
        return await self._cloud.call_step(
            "InstanceExistsByProviderID",
            lambda state: self._cloud.has_instance(state, None, provider_id=provider_id),
        )

    async def instance_shutdown_by_provider_id(self, provider_id: str) -> bool:
        def step(state: CloudState) -> bool:
            instance = self._cloud.instance_in(state, None, provider_id=provider_id)
            return instance.state == "shutdown"

        return await self._cloud.call_step("InstanceShutdownByProviderID", step)


class _Zones(Zones):
    def __init__(self, cloud: SimulatedCloud) -> None:
        self._cloud = cloud

    async def get_zone(self) -> Zone:
        raise SimulatedCloudError("GetZone needs local instance metadata; the CCM never calls it")

    async def get_zone_by_provider_id(self, provider_id: str) -> Zone:
        def step(state: CloudState) -> Zone:
            instance = self._cloud.instance_in(state, None, provider_id=provider_id)
            return Zone(failure_domain=instance.zone, region=instance.region)

        return await self._cloud.call_step("GetZoneByProviderID", step)

    async def get_zone_by_node_name(self, node_name: str) -> Zone:
        def step(state: CloudState) -> Zone:
            instance = self._cloud.instance_in(state, None, name=node_name)
            return Zone(failure_domain=instance.zone, region=instance.region)

        return await self._cloud.call_step("GetZoneByNodeName", step)


ANNOTATION_HOSTNAME_MODE = "simulated.kube-ccm.io/hostname-mode"
"""Per-Service override of ``loadBalancer.hostnameMode`` (a declared annotation)."""


class _LoadBalancer(LoadBalancer, LoadBalancerInventory):
    service_annotations = (
        boolean(
            ANNOTATION_HOSTNAME_MODE,
            "true: this Service's load balancer gets a hostname instead of an IP; false: an "
            "IP; absent: the cloud-config's loadBalancer.hostnameMode",
        ),
        cidr_list(
            ANNOTATION_LOAD_BALANCER_SOURCE_RANGES,
            "CIDRs allowed to reach the load balancer when spec.loadBalancerSourceRanges "
            "is empty (comma-separated; empty or absent: everyone)",
        ),
    )

    def __init__(self, cloud: SimulatedCloud) -> None:
        self._cloud = cloud
        self._last_nodes: tuple[Sequence[Node], tuple[str, ...]] | None = None

    def _names(self, nodes: Sequence[Node]) -> tuple[str, ...]:
        """The sorted node names; the service controller passes every Service the same
        node list object until the nodes change, so it is sorted once, not per Service
        (sorting 5,000 names for each of 2,000 Services was this fake's biggest cost)."""
        last = self._last_nodes
        if last is not None and last[0] is nodes:
            return last[1]
        names = tuple(sorted(n.metadata.name for n in nodes))
        if not self._cloud.config.load_balancer.backend_names:
            digest = hashlib.sha256("\n".join(names).encode()).hexdigest()[:16]
            names = (f"{len(names)} nodes, sha256 {digest}",)
        if isinstance(nodes, tuple):  # immutable: its identity says its content
            self._last_nodes = (nodes, names)
        return names

    def get_load_balancer_name(self, cluster_name: str, service: Service) -> str:
        return default_load_balancer_name(service)

    def _status(self, ip: str | None, hostname: str | None) -> LoadBalancerStatus:
        if hostname:
            return LoadBalancerStatus(ingress=(LoadBalancerIngress(hostname=hostname),))
        ip_mode = self._cloud.config.load_balancer.ip_mode or None
        return LoadBalancerStatus(ingress=(LoadBalancerIngress(ip=ip or "", ip_mode=ip_mode),))

    async def get_load_balancer(
        self, cluster_name: str, service: Service
    ) -> LoadBalancerStatus | None:
        name = self.get_load_balancer_name(cluster_name, service)

        def step(state: CloudState) -> LoadBalancerStatus | None:
            record = state.load_balancer(name)
            if record is None or record.cluster != cluster_name:
                return None
            return self._status(record.ip, record.hostname)

        return await self._cloud.call_step("GetLoadBalancer", step)

    async def ensure_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> LoadBalancerStatus:
        name = self.get_load_balancer_name(cluster_name, service)
        ranges = sorted(str(n) for n in get_load_balancer_source_ranges(service))
        ports = [
            {"name": p.name, "protocol": p.protocol, "port": p.port, "nodePort": p.node_port}
            for p in service.spec.ports
        ]
        lb_config = self._cloud.config.load_balancer
        hostname_mode = lb_config.hostname_mode
        requested_mode = service.metadata.annotations.get(ANNOTATION_HOSTNAME_MODE)
        if requested_mode is not None:
            problem = self.service_annotations[0].problem(requested_mode)
            if problem is not None:
                raise SimulatedCloudError(problem)
            hostname_mode = requested_mode.lower() in ("true", "1")

        names = self._names(nodes)

        def step(state: CloudState) -> LoadBalancerStatus:
            record = state.upsert_load_balancer(
                name=name,
                cluster=cluster_name,
                service=f"{service.metadata.namespace}/{service.metadata.name}",
                service_uid=service.metadata.uid,
                ports=ports,
                nodes=names,
                source_ranges=ranges,
                hostname_mode=hostname_mode,
                hostname_suffix=lb_config.hostname_suffix,
                requested_ip=service.spec.load_balancer_ip or None,
            )
            return self._status(record.ip, record.hostname)

        try:
            return await self._cloud.call_step("EnsureLoadBalancer", step)
        except StateError as exc:
            raise SimulatedCloudError(str(exc)) from exc

    async def update_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> None:
        name = self.get_load_balancer_name(cluster_name, service)

        names = self._names(nodes)

        def step(state: CloudState) -> None:
            if not state.update_load_balancer_nodes(name, names):
                raise SimulatedCloudError(f"load balancer {name} does not exist")

        await self._cloud.call_step("UpdateLoadBalancer", step)

    async def list_load_balancers(self, cluster_name: str) -> Sequence[OwnedLoadBalancer]:
        async def body() -> Sequence[OwnedLoadBalancer]:
            records = await self._cloud.state.run(lambda s: s.load_balancers())
            return [
                OwnedLoadBalancer(
                    name=r.name,
                    namespace=r.service.partition("/")[0],
                    service_name=r.service.partition("/")[2],
                    service_uid=r.service_uid,
                )
                for r in records
                if r.cluster == cluster_name
            ]

        return await self._cloud.call("ListLoadBalancers", body)

    async def ensure_load_balancer_deleted(self, cluster_name: str, service: Service) -> None:
        name = self.get_load_balancer_name(cluster_name, service)

        await self._cloud.call_step(
            "EnsureLoadBalancerDeleted", lambda s: s.delete_load_balancer(name)
        )


class _Routes(Routes):
    def __init__(self, cloud: SimulatedCloud) -> None:
        self._cloud = cloud

    async def list_routes(self, cluster_name: str) -> Sequence[Route]:
        async def body() -> Sequence[Route]:
            records = await self._cloud.state.run(lambda s: s.routes(cluster_name))
            nodes = {
                i.node_name
                for i in await self._cloud.state.run(lambda s: s.instances())
                if i.state != "terminated"
            }
            return [
                Route(
                    name=r.name,
                    target_node=r.target_node,
                    destination_cidr=r.destination_cidr,
                    target_node_addresses=tuple(
                        NodeAddress(type=t, address=a) for t, a in r.target_addresses
                    ),
                    blackhole=r.target_node not in nodes,
                )
                for r in records
            ]

        return await self._cloud.call("ListRoutes", body)

    async def create_route(self, cluster_name: str, name_hint: str, route: Route) -> None:
        cidr_part = route.destination_cidr.replace("/", "-").replace(":", "-").replace(".", "-")
        name = f"{cluster_name}-{name_hint}-{cidr_part}"

        def step(state: CloudState) -> None:
            state.upsert_route(
                name=name,
                cluster=cluster_name,
                target_node=route.target_node,
                destination_cidr=route.destination_cidr,
                target_addresses=[(a.type, a.address) for a in route.target_node_addresses],
            )

        await self._cloud.call_step("CreateRoute", step)

    async def delete_route(self, cluster_name: str, route: Route) -> None:
        await self._cloud.call_step("DeleteRoute", lambda s: s.delete_route(route.name))
