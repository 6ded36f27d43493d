"""One check's view of the target: the provider built and initialised, the driver with
the instances it made, capability look-ups that skip with the reason, and bounded calls."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Literal, TypeVar

import pytest

from kube_ccm.api.objects import (
    LoadBalancerStatus,
    Node,
    NodeAddress,
    NodeCondition,
    NodeSpec,
    NodeStatus,
    ObjectMeta,
    Service,
    ServicePort,
    ServiceSpec,
)
from kube_ccm.cloudprovider import (
    ClientBuilder,
    ClientConfig,
    CloudProvider,
    Instances,
    InstancesV2,
    KubernetesClient,
    LoadBalancer,
    LoadBalancerInventory,
    OwnedLoadBalancer,
    Routes,
    get_instance_provider_id,
)
from kube_ccm.runtime.client import KubeClient
from kube_ccm.runtime.clientbuilder import ClientConfigView
from kube_ccm.runtime.transport import Request, Response, StreamResponse, Transport
from kube_ccm.testing.conformance._target import ConformanceTarget, InstanceDriver
from kube_ccm.testing.fakeapi import FakeApiServer

log = logging.getLogger(__name__)

T = TypeVar("T")

NAMESPACE = "conformance"
"""The namespace of the Services the contract-level checks pass to the provider."""


class _InFlight:
    """A transport whose requests and responses are in flight for a turn of the loop."""

    def __init__(self, inner: Transport) -> None:
        self._inner = inner
        self.server = inner.server

    async def send(self, request: Request) -> Response:
        await asyncio.sleep(0)
        response = await self._inner.send(request)
        await asyncio.sleep(0)
        return response

    def stream(
        self, request: Request, *, read_timeout: float
    ) -> AbstractAsyncContextManager[StreamResponse]:
        return self._inner.stream(request, read_timeout=read_timeout)

    async def aclose(self) -> None:
        await self._inner.aclose()


class KitClientBuilder:
    """A :class:`~kube_ccm.cloudprovider.ClientBuilder` whose clients the kit closes."""

    def __init__(self, server: str, make: Callable[[str], KubeClient]) -> None:
        self._server = server
        self._make = make
        self._clients: list[KubeClient] = []

    @classmethod
    def in_memory(cls) -> KitClientBuilder:
        """Clients of one fresh in-memory API server, whose requests and responses take
        a turn of the event loop each way, as on a network: a call cancelled after the
        server acted but before its answer arrived is possible, as in production."""
        transport = _InFlight(FakeApiServer().transport())

        def make(agent: str) -> KubeClient:
            return KubeClient(transport, user_agent=agent)

        return cls("https://fake-apiserver", make)

    @classmethod
    def from_kubeconfig(cls, kubeconfig: Path) -> KitClientBuilder:
        """Clients of the cluster ``kubeconfig`` names."""
        return cls(str(kubeconfig), lambda _agent: KubeClient.from_kubeconfig(kubeconfig))

    def config(self, name: str) -> ClientConfig:
        return ClientConfigView(self._server, f"cloud-controller-manager/{name}")

    def client(self, name: str) -> KubernetesClient:
        client = self._make(f"cloud-controller-manager/{name}")
        self._clients.append(client)
        return client

    async def aclose(self) -> None:
        clients, self._clients = self._clients, []
        for client in clients:
            with contextlib.suppress(Exception):
                await client.aclose()


def unique(prefix: str) -> str:
    """A DNS-label name no other check uses (short: libvirt and clouds limit names)."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def ready_node(
    name: str,
    *,
    provider_id: str = "",
    addresses: tuple[NodeAddress, ...] = (),
    pod_cidr: str = "",
) -> Node:
    """A Ready Node as the informers would hand it to the provider."""
    return Node(
        metadata=ObjectMeta(name=name, uid=str(uuid.uuid4())),
        spec=NodeSpec(
            provider_id=provider_id,
            pod_cidr=pod_cidr,
            pod_cidrs=(pod_cidr,) if pod_cidr else (),
        ),
        status=NodeStatus(
            addresses=addresses or (NodeAddress(type="Hostname", address=name),),
            conditions=(NodeCondition(type="Ready", status="True", reason="KubeletReady"),),
        ),
    )


def lb_service(name: str) -> Service:
    """A ``type: LoadBalancer`` Service as the service controller hands it over."""
    return Service(
        metadata=ObjectMeta(
            name=name, namespace=NAMESPACE, uid=str(uuid.uuid4()), resource_version="1"
        ),
        spec=ServiceSpec(
            type="LoadBalancer",
            ports=(ServicePort(name="http", protocol="TCP", port=80, node_port=30080),),
            external_traffic_policy="Cluster",
            ip_families=("IPv4",),
            ip_family_policy="SingleStack",
        ),
    )


def pod_cidr() -> str:
    """A /24 inside the kit's cluster CIDR 10.244.0.0/16, likely unused."""
    return f"10.244.{uuid.uuid4().int % 250 + 3}.0/24"


NO_INSTANCES_V2 = "provider offers no instances_v2()"
NO_INSTANCES_V1 = "provider offers no instances() (the V1 instance API)"
NO_INSTANCES = "provider offers neither instances_v2() nor instances()"
NO_LOAD_BALANCER = "provider offers no load_balancer()"
NO_ROUTES = "provider offers no routes()"
NO_DRIVER = (
    "the target has no InstanceDriver, so the kit cannot create instances "
    "(give ConformanceTarget(driver=...))"
)
Need = Literal["instances", "load_balancer", "routes", "driver"]


def missing(
    provider: CloudProvider, need: Need, target: ConformanceTarget | None = None
) -> str | None:
    """Why a check needing ``need`` cannot run, or ``None`` when it can."""
    if need == "instances":
        offered = provider.instances_v2() is not None or provider.instances() is not None
        return None if offered else NO_INSTANCES
    if need == "load_balancer":
        return None if provider.load_balancer() is not None else NO_LOAD_BALANCER
    if need == "routes":
        return None if provider.routes() is not None else NO_ROUTES
    return None if target is None or target.driver is not None else NO_DRIVER


def require(provider: CloudProvider, target: ConformanceTarget, *needs: Need) -> None:
    """Skip the check, saying why, unless everything it needs is there."""
    for need in needs:
        reason = missing(provider, need, target)
        if reason is not None:
            pytest.skip(reason)


def _offered(capability: T | None, reason: str) -> T:
    """The capability an accessor returned; None skips the check, saying ``reason``."""
    if capability is None:
        pytest.skip(reason)
    return capability


class Conformance:
    """The target, opened for one check. Build with :func:`open_conformance`."""

    def __init__(self, target: ConformanceTarget, client_builder: ClientBuilder | None) -> None:
        self.target = target
        self.cluster_name = target.cluster_name
        self._builder = client_builder or target.client_builder
        self._own_builder: KitClientBuilder | None = None
        self._provider: CloudProvider | None = None
        self._stop = asyncio.Event()
        self._created: list[str] = []
        self.listeners: list[Callable[[], Awaitable[None]]] = []
        """Called after each change the driver makes when it is not live (the daemon
        level restarts its daemon there)."""

    # -- the provider ----------------------------------------------------------

    @property
    def provider(self) -> CloudProvider:
        assert self._provider is not None, "the conformance target is not open"
        return self._provider

    async def _build(self) -> None:
        source = self.target.provider
        if isinstance(source, CloudProvider):
            self._provider = source
            return
        provider = source()
        if not isinstance(provider, CloudProvider):
            raise TypeError(
                f"ConformanceTarget.provider returned {type(provider).__name__}, "
                "not a CloudProvider"
            )
        builder = self._builder or self._own_builder
        if builder is None:
            self._own_builder = builder = KitClientBuilder.in_memory()
        self._stop = asyncio.Event()
        self._provider = provider
        async with asyncio.timeout(self.target.call_timeout):
            await provider.initialize(builder, self._stop)

    async def _close_provider(self) -> None:
        provider, self._provider = self._provider, None
        if provider is None or isinstance(self.target.provider, CloudProvider):
            return
        self._stop.set()
        try:
            async with asyncio.timeout(10):
                await provider.aclose()
        except Exception:
            log.exception("the provider's aclose() failed")

    async def reopen(self) -> None:
        """Build the provider again (a factory target), so what it reports next comes
        from the cloud, not from what an earlier call of this instance remembers."""
        if not isinstance(self.target.provider, CloudProvider):
            await self._close_provider()
            await self._build()

    async def aclose(self) -> None:
        driver = self.target.driver
        if driver is not None:
            for name in reversed(self._created):
                try:
                    async with asyncio.timeout(self.target.call_timeout):
                        await driver.delete_instance(name)
                except Exception as exc:
                    log.warning("could not delete the check's instance %s: %s", name, exc)
        await self._close_provider()
        if self._own_builder is not None:
            await self._own_builder.aclose()

    # -- capabilities: each skips the check, saying why, when it is missing ----

    def instances_v2(self) -> InstancesV2:
        return _offered(self.provider.instances_v2(), NO_INSTANCES_V2)

    def instances_v1(self) -> Instances:
        return _offered(self.provider.instances(), NO_INSTANCES_V1)

    def has_instances(self) -> bool:
        return missing(self.provider, "instances") is None

    def require_instances(self) -> None:
        require(self.provider, self.target, "instances")

    def load_balancer(self) -> LoadBalancer:
        return _offered(self.provider.load_balancer(), NO_LOAD_BALANCER)

    def inventory(self) -> LoadBalancerInventory | None:
        found = self.provider.load_balancer()
        return found if isinstance(found, LoadBalancerInventory) else None

    def routes(self) -> Routes:
        return _offered(self.provider.routes(), NO_ROUTES)

    def driver(self) -> InstanceDriver:
        if self.target.driver is None:
            pytest.skip(NO_DRIVER)
        return self.target.driver

    # -- calls -----------------------------------------------------------------

    async def call(self, method: str, call: Awaitable[T]) -> T:
        """Await one provider call within ``call_timeout``; a builtin
        :class:`NotImplementedError` fails the check (the contract's is
        ``NotImplementedByProviderError``)."""
        try:
            async with asyncio.timeout(self.target.call_timeout):
                return await call
        except TimeoutError:
            raise AssertionError(
                f"{method} did not return within {self.target.call_timeout:g} s; the daemon "
                "would time the call out and retry it (bound your own network timeouts)"
            ) from None
        except NotImplementedError as exc:
            raise AssertionError(
                f"{method} raised Python's NotImplementedError ({exc}); to say 'unsupported', "
                "raise kube_ccm.cloudprovider.NotImplementedByProviderError, or return None "
                "from the capability's accessor"
            ) from exc

    # -- instances ---------------------------------------------------------------

    async def create_instance(self, prefix: str = "cc") -> str:
        """A new running instance; returns its Node name."""
        driver = self.driver()
        name = unique(prefix)
        self._created.append(name)
        async with asyncio.timeout(self.target.call_timeout):
            await driver.create_instance(name)
        await self.changed()
        return name

    async def stop_instance(self, name: str) -> None:
        async with asyncio.timeout(self.target.call_timeout):
            await self.driver().stop_instance(name)
        await self.changed()

    async def start_instance(self, name: str) -> None:
        async with asyncio.timeout(self.target.call_timeout):
            await self.driver().start_instance(name)
        await self.changed()

    async def delete_instance(self, name: str) -> None:
        async with asyncio.timeout(self.target.call_timeout):
            await self.driver().delete_instance(name)
        await self.changed()

    async def make_blackhole(self, name: str) -> None:
        try:
            async with asyncio.timeout(self.target.call_timeout):
                await self.driver().make_blackhole(name)
        except NotImplementedError as exc:
            pytest.skip(f"the driver cannot make a blackhole route ({exc})")
        await self.changed()

    @contextlib.asynccontextmanager
    async def api_errors(self) -> AsyncIterator[None]:
        """The driver's outage; skips the check when the driver cannot make one."""
        driver = self.driver()
        async with contextlib.AsyncExitStack() as stack:
            try:
                await stack.enter_async_context(driver.api_errors())
            except NotImplementedError as exc:
                pytest.skip(
                    f"{exc}: implement InstanceDriver.api_errors() to check that an API "
                    "error is raised rather than reported as a missing instance"
                )
            yield

    async def changed(self) -> None:
        """After a change of the driver's: a cloud that is not live is read again."""
        driver = self.target.driver
        if driver is None or driver.live:
            return
        if isinstance(self.target.provider, CloudProvider):
            raise TypeError(
                "an InstanceDriver with live=False needs ConformanceTarget(provider=<a "
                "factory>): the kit builds the provider again after each change"
            )
        await self.reopen()
        for listener in self.listeners:
            await listener()

    async def provider_id_of(self, name: str) -> str:
        """The providerID the provider gives the Node ``name`` (V2, else V1)."""
        v2 = self.provider.instances_v2()
        if v2 is not None:
            metadata = await self.call("InstanceMetadata", v2.instance_metadata(ready_node(name)))
            assert metadata is not None, (
                f"instance_metadata returned None for the Node {name} of a running instance"
            )
            return metadata.provider_id
        self.instances_v1()
        return await self.call("InstanceID", get_instance_provider_id(self.provider, name))

    async def backend_node(self) -> Node:
        """A Ready Node for a load balancer: of a real instance when the target can make
        one and the provider offers instances, else a Node with only a name and an IP."""
        if self.target.driver is not None and self.has_instances():
            name = await self.create_instance("lb")
            v2 = self.provider.instances_v2()
            addresses: tuple[NodeAddress, ...] = ()
            if v2 is not None:
                metadata = await self.call(
                    "InstanceMetadata", v2.instance_metadata(ready_node(name))
                )
                if metadata is not None:
                    addresses = metadata.node_addresses
            return ready_node(
                name, provider_id=await self.provider_id_of(name), addresses=addresses
            )
        name = unique("lb")
        address = f"10.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}.10"
        return ready_node(
            name,
            addresses=(
                NodeAddress(type="InternalIP", address=address),
                NodeAddress(type="Hostname", address=name),
            ),
        )

    async def ensure_load_balancer(
        self, service: Service, nodes: Sequence[Node]
    ) -> LoadBalancerStatus:
        lb = self.load_balancer()
        return await self.call(
            "EnsureLoadBalancer", lb.ensure_load_balancer(self.cluster_name, service, nodes)
        )

    async def update_load_balancer(self, service: Service, nodes: Sequence[Node]) -> None:
        lb = self.load_balancer()
        await self.call(
            "UpdateLoadBalancer", lb.update_load_balancer(self.cluster_name, service, nodes)
        )

    async def delete_load_balancer(self, service: Service) -> None:
        lb = self.load_balancer()
        await self.call(
            "EnsureLoadBalancerDeleted", lb.ensure_load_balancer_deleted(self.cluster_name, service)
        )

    async def get_load_balancer(self, service: Service) -> LoadBalancerStatus | None:
        lb = self.load_balancer()
        return await self.call("GetLoadBalancer", lb.get_load_balancer(self.cluster_name, service))

    async def list_load_balancers(
        self, cluster_name: str | None = None
    ) -> Sequence[OwnedLoadBalancer]:
        """What the inventory lists (nothing without one)."""
        inventory = self.inventory()
        if inventory is None:
            return ()
        return await self.call(
            "ListLoadBalancers", inventory.list_load_balancers(cluster_name or self.cluster_name)
        )

    async def listed_uids(self, cluster_name: str | None = None) -> set[str]:
        """The Service UIDs of the load balancers the inventory lists."""
        return {o.service_uid for o in await self.list_load_balancers(cluster_name)}


@contextlib.asynccontextmanager
async def open_conformance(
    target: ConformanceTarget, *, client_builder: ClientBuilder | None = None
) -> AsyncIterator[Conformance]:
    """The target opened for one check, closed (instances deleted, provider closed) after."""
    if not isinstance(target, ConformanceTarget):
        raise TypeError(
            f"the conformance_provider fixture returned {type(target).__name__}; return a "
            "kube_ccm.testing.conformance.ConformanceTarget"
        )
    conformance = Conformance(target, client_builder)
    try:
        await conformance._build()
        yield conformance
    finally:
        await conformance.aclose()
