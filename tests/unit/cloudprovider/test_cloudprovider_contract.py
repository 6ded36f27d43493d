"""The provider contract: capabilities, "None means unsupported", mix-ins (§1.1-§1.8)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from kube_ccm.api.objects import ObjectMeta, PersistentVolumeSpec
from kube_ccm.cloudprovider import (
    ClientBuilder,
    ClientConfig,
    CloudProvider,
    Clusters,
    InformerUser,
    InstanceMetadata,
    Instances,
    InstancesV2,
    KubernetesClient,
    LoadBalancer,
    LoadBalancerIngress,
    LoadBalancerStatus,
    Node,
    NodeAddress,
    NotImplementedByProviderError,
    PatchType,
    PersistentVolume,
    PVLabeler,
    Route,
    Routes,
    Service,
    Zone,
    Zones,
)


class MinimalCloud(CloudProvider):
    """Supports nothing: only the two mandatory methods."""

    def provider_name(self) -> str:
        return "minimal"

    def has_cluster_id(self) -> bool:
        return True


class FakeLoadBalancer(LoadBalancer):
    def __init__(self) -> None:
        self.balancers: dict[str, LoadBalancerStatus] = {}
        self.backends: dict[str, tuple[str, ...]] = {}

    async def get_load_balancer(
        self, cluster_name: str, service: Service
    ) -> LoadBalancerStatus | None:
        return self.balancers.get(self.get_load_balancer_name(cluster_name, service))

    def get_load_balancer_name(self, cluster_name: str, service: Service) -> str:
        return f"{cluster_name}-{service.metadata.namespace}-{service.metadata.name}"

    async def ensure_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> LoadBalancerStatus:
        name = self.get_load_balancer_name(cluster_name, service)
        status = LoadBalancerStatus(ingress=(LoadBalancerIngress(ip="192.0.2.1"),))
        self.balancers[name] = status
        self.backends[name] = tuple(n.metadata.name for n in nodes)
        return status

    async def update_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> None:
        name = self.get_load_balancer_name(cluster_name, service)
        self.backends[name] = tuple(n.metadata.name for n in nodes)

    async def ensure_load_balancer_deleted(self, cluster_name: str, service: Service) -> None:
        self.balancers.pop(self.get_load_balancer_name(cluster_name, service), None)


class FakeInstancesV2(InstancesV2):
    def __init__(self, existing: set[str]) -> None:
        self.existing = existing

    async def instance_exists(self, node: Node) -> bool:
        return node.metadata.name in self.existing

    async def instance_shutdown(self, node: Node) -> bool:
        return False

    async def instance_metadata(self, node: Node) -> InstanceMetadata | None:
        if node.metadata.name not in self.existing:
            return None
        return InstanceMetadata(
            provider_id=f"fake://{node.metadata.name}",
            instance_type="small",
            node_addresses=(NodeAddress(type="InternalIP", address="10.0.0.1"),),
            zone="z1",
            region="r1",
        )


class FakeInstances(Instances):
    async def node_addresses(self, node_name: str) -> tuple[NodeAddress, ...]:
        return (NodeAddress(type="Hostname", address=node_name),)

    async def node_addresses_by_provider_id(self, provider_id: str) -> tuple[NodeAddress, ...]:
        return ()

    async def instance_id(self, node_name: str) -> str:
        return f"i-{node_name}"

    async def instance_type(self, node_name: str) -> str:
        return "small"

    async def instance_type_by_provider_id(self, provider_id: str) -> str:
        return "small"

    async def instance_exists_by_provider_id(self, provider_id: str) -> bool:
        return True


class FakeRoutes(Routes):
    def __init__(self) -> None:
        self.routes: list[Route] = []

    async def list_routes(self, cluster_name: str) -> Sequence[Route]:
        return tuple(self.routes)

    async def create_route(self, cluster_name: str, name_hint: str, route: Route) -> None:
        self.routes.append(
            Route(
                name=name_hint,
                target_node=route.target_node,
                destination_cidr=route.destination_cidr,
            )
        )

    async def delete_route(self, cluster_name: str, route: Route) -> None:
        self.routes.remove(route)


class FakeZones(Zones):
    async def get_zone_by_provider_id(self, provider_id: str) -> Zone:
        return Zone("z1", "r1")

    async def get_zone_by_node_name(self, node_name: str) -> Zone:
        return Zone("z1", "r1")


class FakeClusters(Clusters):
    async def list_clusters(self) -> Sequence[str]:
        return ("kubernetes",)

    async def master(self, cluster_name: str) -> str:
        return "https://192.0.2.10:6443"


class FullCloud(CloudProvider, InformerUser, PVLabeler):
    """Supports every capability, wants informers, labels volumes, runs a background task."""

    def __init__(self) -> None:
        self._lb = FakeLoadBalancer()
        self._v2 = FakeInstancesV2({"n1"})
        self._v1 = FakeInstances()
        self._routes = FakeRoutes()
        self._zones = FakeZones()
        self._clusters = FakeClusters()
        self.informers: Any = None
        self.client: KubernetesClient | None = None
        self.background: asyncio.Task[bool] | None = None

    async def initialize(self, client_builder: ClientBuilder, stop: asyncio.Event) -> None:
        self.client = client_builder.client("fake-cloud")
        self.background = asyncio.create_task(stop.wait())

    def set_informers(self, informers: Any) -> None:
        self.informers = informers

    async def get_labels_for_volume(self, pv: PersistentVolume) -> Mapping[str, str]:
        source = pv.spec.volume_source
        if source is None or source[0] != "csi":
            return {}
        return {"topology.kubernetes.io/zone": "z1__z2"}

    def load_balancer(self) -> LoadBalancer | None:
        return self._lb

    def instances(self) -> Instances | None:
        return self._v1

    def instances_v2(self) -> InstancesV2 | None:
        return self._v2

    def zones(self) -> Zones | None:
        return self._zones

    def clusters(self) -> Clusters | None:
        return self._clusters

    def routes(self) -> Routes | None:
        return self._routes

    def provider_name(self) -> str:
        return "fake"

    def has_cluster_id(self) -> bool:
        return False


class FakeConfig:
    server = "https://127.0.0.1:6443"
    user_agent = "cloud-controller-manager/fake-cloud"


class FakeClient:
    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str | int] | None = None,
        body: Any = None,
        content: bytes | None = None,
        content_type: str | None = None,
        request_timeout: float | None = None,
    ) -> bytes:
        return b"{}"

    async def get(self, path: str, params: Mapping[str, str | int] | None = None) -> Any:
        return {"path": path}

    async def create(self, path: str, body: Any) -> Any:
        return body

    async def replace(self, path: str, body: Any) -> Any:
        return body

    async def patch(
        self,
        path: str,
        body: Any,
        *,
        patch_type: PatchType = "strategic",
        params: Mapping[str, str | int] | None = None,
    ) -> Any:
        return body

    async def delete(
        self, path: str, body: Any = None, params: Mapping[str, str | int] | None = None
    ) -> Any:
        return {}


class FakeClientBuilder:
    def __init__(self) -> None:
        self.names: list[str] = []

    def config(self, name: str) -> ClientConfig:
        self.names.append(name)
        return FakeConfig()

    def client(self, name: str) -> KubernetesClient:
        self.names.append(name)
        return FakeClient()


def _node(name: str) -> Node:
    return Node(metadata=ObjectMeta(name=name))


def _service() -> Service:
    return Service(metadata=ObjectMeta(name="web", namespace="shop", uid="u-1"))


def test_a_provider_that_overrides_nothing_supports_no_capability() -> None:
    cloud = MinimalCloud()
    assert cloud.load_balancer() is None
    assert cloud.instances() is None
    assert cloud.instances_v2() is None
    assert cloud.zones() is None
    assert cloud.clusters() is None
    assert cloud.routes() is None
    assert not isinstance(cloud, PVLabeler)
    assert not isinstance(cloud, InformerUser)


def test_a_provider_must_name_itself_and_answer_the_cluster_id_question() -> None:
    class Nameless(CloudProvider):
        def has_cluster_id(self) -> bool:
            return True

    with pytest.raises(TypeError, match="provider_name"):
        Nameless()  # type: ignore[abstract]


def test_a_capability_missing_a_required_method_cannot_be_built() -> None:
    class HalfBalancer(LoadBalancer):
        def get_load_balancer_name(self, cluster_name: str, service: Service) -> str:
            return "x"

    with pytest.raises(TypeError, match="ensure_load_balancer"):
        HalfBalancer()  # type: ignore[abstract]


async def test_default_initialize_does_nothing() -> None:
    await MinimalCloud().initialize(FakeClientBuilder(), asyncio.Event())


async def test_initialize_gets_clients_and_background_work_ends_on_stop() -> None:
    cloud = FullCloud()
    builder = FakeClientBuilder()
    stop = asyncio.Event()
    await cloud.initialize(builder, stop)
    assert builder.names == ["fake-cloud"]
    assert cloud.client is not None
    assert await cloud.client.get("/api/v1/nodes") == {"path": "/api/v1/nodes"}
    assert cloud.background is not None
    assert not cloud.background.done()
    stop.set()
    await asyncio.wait_for(cloud.background, timeout=1)


def test_optional_mixins_are_detected_with_isinstance() -> None:
    cloud = FullCloud()
    assert isinstance(cloud, InformerUser)
    assert isinstance(cloud, PVLabeler)
    sentinel = object()
    cloud.set_informers(sentinel)
    assert cloud.informers is sentinel


async def test_pv_labeler_labels_only_its_own_volume_type() -> None:
    cloud = FullCloud()
    csi = PersistentVolume(spec=PersistentVolumeSpec(csi={"driver": "fake.csi"}))
    nfs = PersistentVolume(spec=PersistentVolumeSpec(nfs={"server": "nas", "path": "/x"}))
    assert await cloud.get_labels_for_volume(csi) == {"topology.kubernetes.io/zone": "z1__z2"}
    assert await cloud.get_labels_for_volume(nfs) == {}


async def test_load_balancer_absent_until_ensured_then_deleted_idempotently() -> None:
    lb = FullCloud().load_balancer()
    assert lb is not None
    service = _service()
    assert await lb.get_load_balancer("kubernetes", service) is None
    status = await lb.ensure_load_balancer("kubernetes", service, [_node("n1"), _node("n2")])
    assert status.ingress == (LoadBalancerIngress(ip="192.0.2.1"),)
    assert await lb.get_load_balancer("kubernetes", service) == status
    await lb.ensure_load_balancer_deleted("kubernetes", service)
    await lb.ensure_load_balancer_deleted("kubernetes", service)
    assert await lb.get_load_balancer("kubernetes", service) is None


async def test_instances_v2_metadata_none_means_skip_the_node() -> None:
    v2 = FullCloud().instances_v2()
    assert v2 is not None
    metadata = await v2.instance_metadata(_node("n1"))
    assert metadata is not None
    assert metadata.provider_id == "fake://n1"
    assert metadata.additional_labels == {}
    assert await v2.instance_metadata(_node("gone")) is None
    assert await v2.instance_exists(_node("gone")) is False


async def test_v1_instances_unused_methods_default_to_unimplemented() -> None:
    v1 = FakeInstances()
    with pytest.raises(NotImplementedByProviderError, match=r"^unimplemented$"):
        await v1.instance_shutdown_by_provider_id("fake://n1")
    with pytest.raises(NotImplementedByProviderError):
        await v1.add_ssh_key_to_all_instances("core", b"ssh-ed25519 AAAA")
    with pytest.raises(NotImplementedByProviderError):
        await v1.current_node_name("host")


async def test_zones_get_zone_is_kubelet_only_and_unimplemented_by_default() -> None:
    zones = FakeZones()
    assert await zones.get_zone_by_node_name("n1") == Zone(failure_domain="z1", region="r1")
    with pytest.raises(NotImplementedByProviderError):
        await zones.get_zone()


async def test_routes_round_trip_through_list_create_delete() -> None:
    routes = FullCloud().routes()
    assert routes is not None
    await routes.create_route(
        "kubernetes", "uid-1", Route(target_node="n1", destination_cidr="10.244.1.0/24")
    )
    (listed,) = await routes.list_routes("kubernetes")
    assert (listed.name, listed.target_node, listed.blackhole) == ("uid-1", "n1", False)
    await routes.delete_route("kubernetes", listed)
    assert await routes.list_routes("kubernetes") == ()


async def test_clusters_capability_lists_clusters() -> None:
    clusters = FullCloud().clusters()
    assert clusters is not None
    assert await clusters.list_clusters() == ("kubernetes",)
    assert await clusters.master("kubernetes") == "https://192.0.2.10:6443"


def test_value_types_are_immutable() -> None:
    route = Route(target_node="n1", destination_cidr="10.244.1.0/24")
    with pytest.raises(AttributeError):
        route.blackhole = True  # type: ignore[misc]
    with pytest.raises(AttributeError):
        InstanceMetadata().zone = "z"  # type: ignore[misc]
