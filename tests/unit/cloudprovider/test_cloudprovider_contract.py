"""The provider contract: capabilities, "None means unsupported", mix-ins (§1.1-§1.8).

The contract's own defaults are tested on minimal subclasses; what it carries on
:class:`FakeProvider`; what a provider must do (keep state across calls) on the
reference provider, the simulated cloud."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from kube_ccm.api.objects import ObjectMeta, PersistentVolumeSpec
from kube_ccm.cloudprovider import (
    ClientBuilder,
    ClientConfig,
    CloudProvider,
    InformerUser,
    InstanceMetadata,
    Instances,
    KubernetesClient,
    LoadBalancer,
    LoadBalancerIngress,
    Node,
    NodeAddress,
    NotImplementedByProviderError,
    PatchType,
    PersistentVolume,
    ProbeLine,
    PVLabeler,
    Route,
    SelfProbing,
    Service,
    Zone,
    Zones,
)
from kube_ccm.providers.simulated import SimulatedCloud, SimulatedConfig
from kube_ccm.providers.simulated.config import LoadBalancerConfig
from kube_ccm.providers.simulated.provider import CSI_DRIVER
from kube_ccm.testing.fakeprovider import FakeInformerUser, FakeLabelingProvider, FakeProvider


# The subjects of the tests of the contract's own defaults: each implements only what
# its ABC makes mandatory (a fake would override the defaults under test).
class MinimalCloud(CloudProvider):
    """Supports nothing: only the two mandatory methods."""

    def provider_name(self) -> str:
        return "minimal"

    def has_cluster_id(self) -> bool:
        return True


class MinimalInstances(Instances):
    """The V1 methods the controllers use; the kubelet-only ones left to the defaults."""

    async def node_addresses(self, node_name: str) -> tuple[NodeAddress, ...]:
        return ()

    async def node_addresses_by_provider_id(self, provider_id: str) -> tuple[NodeAddress, ...]:
        return ()

    async def instance_id(self, node_name: str) -> str:
        return ""

    async def instance_type(self, node_name: str) -> str:
        return ""

    async def instance_type_by_provider_id(self, provider_id: str) -> str:
        return ""

    async def instance_exists_by_provider_id(self, provider_id: str) -> bool:
        return True


class MinimalZones(Zones):
    """The two lookups the controllers use; ``get_zone`` (kubelet-only) left to the default."""

    async def get_zone_by_provider_id(self, provider_id: str) -> Zone:
        return Zone("z1", "r1")

    async def get_zone_by_node_name(self, node_name: str) -> Zone:
        return Zone("z1", "r1")


def simulated(**overrides: Any) -> SimulatedCloud:
    """The reference provider, for what a provider must do (it keeps state)."""
    return SimulatedCloud(SimulatedConfig(state=":memory:", **overrides))


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
    """What ``initialize`` is given serves a provider: clients from the builder, and a
    ``stop`` that ends the work it starts."""
    clients: list[KubernetesClient] = []
    background: list[asyncio.Task[bool]] = []

    async def initialize(client_builder: ClientBuilder, stop: asyncio.Event) -> None:
        clients.append(client_builder.client("fake-cloud"))
        background.append(asyncio.create_task(stop.wait()))

    cloud = FakeProvider(answers={"initialize": initialize})
    builder = FakeClientBuilder()
    stop = asyncio.Event()
    await cloud.initialize(builder, stop)
    assert cloud.calls_to("initialize") == [(builder, stop)]
    assert builder.names == ["fake-cloud"]
    (client,) = clients
    assert await client.get("/api/v1/nodes") == {"path": "/api/v1/nodes"}
    (task,) = background
    assert not task.done()
    stop.set()
    await asyncio.wait_for(task, timeout=1)


def test_optional_mixins_are_detected_with_isinstance() -> None:
    informed = FakeInformerUser()
    assert isinstance(informed, InformerUser)
    assert isinstance(FakeLabelingProvider(), PVLabeler)
    sentinel = object()
    informed.set_informers(sentinel)
    assert informed.calls_to("set_informers") == [(sentinel,)]


async def test_self_probing_is_found_by_the_method_name_alone() -> None:
    """``kube-ccm doctor``'s hook is in the contract, and a provider needs no base class
    for it: a ``doctor_probe`` method makes it one; a provider without is not."""

    class Line:
        name, status, detail, fix = "endpoint", "PASS", "answers", ""

    class Probed(MinimalCloud):
        async def doctor_probe(self) -> list[ProbeLine]:
            return [Line()]

    assert not isinstance(MinimalCloud(), SelfProbing)
    probed = Probed()
    assert isinstance(probed, SelfProbing)
    (line,) = await probed.doctor_probe()
    assert (line.name, line.status, line.detail, line.fix) == ("endpoint", "PASS", "answers", "")


async def test_pv_labeler_labels_only_its_own_volume_type() -> None:
    cloud = simulated()
    cloud.state.sync.add_volume("vol-1", zone="z1", region="r1")
    csi = PersistentVolume(
        spec=PersistentVolumeSpec(csi={"driver": CSI_DRIVER, "volumeHandle": "vol-1"})
    )
    foreign = PersistentVolume(
        spec=PersistentVolumeSpec(csi={"driver": "other.csi", "volumeHandle": "vol-1"})
    )
    nfs = PersistentVolume(spec=PersistentVolumeSpec(nfs={"server": "nas", "path": "/x"}))
    assert await cloud.get_labels_for_volume(csi) == {
        "topology.kubernetes.io/zone": "z1",
        "topology.kubernetes.io/region": "r1",
    }
    assert await cloud.get_labels_for_volume(foreign) == {}
    assert await cloud.get_labels_for_volume(nfs) == {}


async def test_load_balancer_absent_until_ensured_then_deleted_idempotently() -> None:
    lb = simulated(load_balancer=LoadBalancerConfig(ip_pool=("192.0.2.0/30",))).load_balancer()
    assert lb is not None
    service = _service()
    assert await lb.get_load_balancer("kubernetes", service) is None
    status = await lb.ensure_load_balancer("kubernetes", service, [_node("n1"), _node("n2")])
    assert status.ingress == (LoadBalancerIngress(ip="192.0.2.1", ip_mode="VIP"),)
    assert await lb.get_load_balancer("kubernetes", service) == status
    await lb.ensure_load_balancer_deleted("kubernetes", service)
    await lb.ensure_load_balancer_deleted("kubernetes", service)
    assert await lb.get_load_balancer("kubernetes", service) is None


async def test_instances_v2_metadata_none_means_skip_the_node() -> None:
    def metadata(node: Node) -> InstanceMetadata | None:
        name = node.metadata.name
        return InstanceMetadata(provider_id=f"fake://{name}") if name == "n1" else None

    cloud = FakeProvider(
        capabilities={"instances_v2"},
        answers={
            "instance_metadata": metadata,
            "instance_exists": lambda node: node.metadata.name == "n1",
        },
    )
    v2 = cloud.instances_v2()
    assert v2 is not None
    found = await v2.instance_metadata(_node("n1"))
    assert found is not None
    assert found.provider_id == "fake://n1"
    assert found.additional_labels == {}
    assert await v2.instance_metadata(_node("gone")) is None
    assert await v2.instance_exists(_node("gone")) is False


async def test_v1_instances_unused_methods_default_to_unimplemented() -> None:
    v1 = MinimalInstances()
    with pytest.raises(NotImplementedByProviderError, match=r"^unimplemented$"):
        await v1.instance_shutdown_by_provider_id("fake://n1")
    with pytest.raises(NotImplementedByProviderError):
        await v1.add_ssh_key_to_all_instances("core", b"ssh-ed25519 AAAA")
    with pytest.raises(NotImplementedByProviderError):
        await v1.current_node_name("host")


async def test_zones_get_zone_is_kubelet_only_and_unimplemented_by_default() -> None:
    zones = MinimalZones()
    assert await zones.get_zone_by_node_name("n1") == Zone(failure_domain="z1", region="r1")
    with pytest.raises(NotImplementedByProviderError):
        await zones.get_zone()


async def test_routes_round_trip_through_list_create_delete() -> None:
    cloud = simulated()
    cloud.state.sync.add_instance("n1", zone="z1", region="r1", instance_type="small")
    routes = cloud.routes()
    assert routes is not None
    await routes.create_route(
        "kubernetes", "uid-1", Route(target_node="n1", destination_cidr="10.244.1.0/24")
    )
    (listed,) = await routes.list_routes("kubernetes")
    assert (listed.name, listed.target_node, listed.blackhole) == (
        "kubernetes-uid-1-10-244-1-0-24",
        "n1",
        False,
    )
    await routes.delete_route("kubernetes", listed)
    assert list(await routes.list_routes("kubernetes")) == []


async def test_clusters_capability_lists_clusters() -> None:
    cloud = FakeProvider(
        capabilities={"clusters"},
        answers={"list_clusters": ("kubernetes",), "master": "https://192.0.2.10:6443"},
    )
    clusters = cloud.clusters()
    assert clusters is not None
    assert await clusters.list_clusters() == ("kubernetes",)
    assert await clusters.master("kubernetes") == "https://192.0.2.10:6443"


def test_value_types_are_immutable() -> None:
    route = Route(target_node="n1", destination_cidr="10.244.1.0/24")
    with pytest.raises(AttributeError):
        route.blackhole = True  # type: ignore[misc]
    with pytest.raises(AttributeError):
        InstanceMetadata().zone = "z"  # type: ignore[misc]
