"""CloudInstances: one view of V1 and V2 instances, with upstream's fallbacks."""

from __future__ import annotations

import asyncio

import pytest

from kube_ccm.api.objects import Node, NodeAddress, NodeSpec, ObjectMeta
from kube_ccm.cloudprovider import (
    CloudProvider,
    InstanceMetadata,
    InstanceNotFoundError,
    Instances,
    InstancesV2,
    NotImplementedByProviderError,
    Zone,
    Zones,
)
from kube_ccm.controllers.instances import CloudInstances
from kube_ccm.runtime.cloudcalls import CloudCallTimeoutError
from kube_ccm.testing.world import guarded

ADDR_BY_ID = (NodeAddress(type="InternalIP", address="10.0.0.1"),)
ADDR_BY_NAME = (NodeAddress(type="InternalIP", address="10.0.0.2"),)


def node(name: str = "n1", provider_id: str = "") -> Node:
    return Node(metadata=ObjectMeta(name=name), spec=NodeSpec(provider_id=provider_id))


class V2(InstancesV2):
    def __init__(
        self,
        metadata: InstanceMetadata | None = None,
        *,
        exists: bool = True,
        shutdown: bool = False,
        hang: bool = False,
    ) -> None:
        self.metadata = metadata
        self.exists, self.shutdown, self.hang = exists, shutdown, hang
        self.calls: list[str] = []

    async def _maybe_hang(self) -> None:
        if self.hang:
            await asyncio.sleep(10)

    async def instance_exists(self, node: Node) -> bool:
        self.calls.append("InstanceExists")
        await self._maybe_hang()
        return self.exists

    async def instance_shutdown(self, node: Node) -> bool:
        self.calls.append("InstanceShutdown")
        await self._maybe_hang()
        return self.shutdown

    async def instance_metadata(self, node: Node) -> InstanceMetadata | None:
        self.calls.append("InstanceMetadata")
        await self._maybe_hang()
        return self.metadata


class V1(Instances):
    def __init__(
        self,
        *,
        instance_id: Exception | None = None,
        by_id_fails: bool = False,
        by_name_fails: bool = False,
        exists: bool = True,
        shutdown: Exception | bool = False,
        hang: str = "",
    ) -> None:
        self.instance_id_error = instance_id
        self.by_id_fails, self.by_name_fails = by_id_fails, by_name_fails
        self.exists, self.shutdown, self.hang = exists, shutdown, hang
        self.calls: list[tuple[str, str]] = []

    async def _call(self, name: str, arg: str) -> None:
        self.calls.append((name, arg))
        if self.hang == name:
            await asyncio.sleep(10)

    async def node_addresses(self, node_name: str) -> tuple[NodeAddress, ...]:
        await self._call("NodeAddresses", node_name)
        if self.by_name_fails:
            raise RuntimeError("by name down")
        return ADDR_BY_NAME

    async def node_addresses_by_provider_id(self, provider_id: str) -> tuple[NodeAddress, ...]:
        await self._call("NodeAddressesByProviderID", provider_id)
        if self.by_id_fails:
            raise RuntimeError("by id down")
        return ADDR_BY_ID

    async def instance_id(self, node_name: str) -> str:
        await self._call("InstanceID", node_name)
        if self.instance_id_error:
            raise self.instance_id_error
        return f"id-{node_name}"

    async def instance_type(self, node_name: str) -> str:
        await self._call("InstanceType", node_name)
        if self.by_name_fails:
            raise RuntimeError("by name down")
        return "by-name.type"

    async def instance_type_by_provider_id(self, provider_id: str) -> str:
        await self._call("InstanceTypeByProviderID", provider_id)
        if self.by_id_fails:
            raise RuntimeError("by id down")
        return "by-id.type"

    async def instance_exists_by_provider_id(self, provider_id: str) -> bool:
        await self._call("InstanceExistsByProviderID", provider_id)
        return self.exists

    async def instance_shutdown_by_provider_id(self, provider_id: str) -> bool:
        await self._call("InstanceShutdownByProviderID", provider_id)
        if isinstance(self.shutdown, Exception):
            raise self.shutdown
        return self.shutdown


class FakeZones(Zones):
    def __init__(self, *, by_id_fails: bool = False, by_name_fails: bool = False) -> None:
        self.by_id_fails, self.by_name_fails = by_id_fails, by_name_fails
        self.calls: list[str] = []

    async def get_zone(self) -> Zone:
        raise AssertionError("never called")

    async def get_zone_by_provider_id(self, provider_id: str) -> Zone:
        self.calls.append("GetZoneByProviderID")
        if self.by_id_fails:
            raise RuntimeError("zones by id down")
        return Zone(failure_domain="z-id", region="r-id")

    async def get_zone_by_node_name(self, node_name: str) -> Zone:
        self.calls.append("GetZoneByNodeName")
        if self.by_name_fails:
            raise RuntimeError("zones by name down")
        return Zone(failure_domain="z-name", region="r-name")


class Cloud(CloudProvider):
    def __init__(
        self, v2: InstancesV2 | None = None, v1: Instances | None = None, zones: Zones | None = None
    ) -> None:
        self._v2, self._v1, self._zones = v2, v1, zones

    def provider_name(self) -> str:
        return "fake"

    def has_cluster_id(self) -> bool:
        return True

    def instances_v2(self) -> InstancesV2 | None:
        return self._v2

    def instances(self) -> Instances | None:
        return self._v1

    def zones(self) -> Zones | None:
        return self._zones


def adapter(cloud: CloudProvider, timeout: float = 1.0) -> CloudInstances:
    return CloudInstances(guarded(cloud, timeout=timeout))


def test_a_provider_with_neither_interface_is_refused() -> None:
    with pytest.raises(ValueError, match="cloud provider does not support instances"):
        CloudInstances(Cloud())


# -- V2 ------------------------------------------------------------------------


async def test_v2_is_preferred_over_v1() -> None:
    v1, v2 = V1(), V2(InstanceMetadata(provider_id="p://1"))
    instances = adapter(Cloud(v2=v2, v1=v1))
    assert await instances.instance_metadata(node()) == InstanceMetadata(provider_id="p://1")
    assert await instances.instance_exists(node())
    assert not await instances.instance_shutdown(node())
    assert v2.calls == ["InstanceMetadata", "InstanceExists", "InstanceShutdown"]
    assert v1.calls == []


async def test_v2_metadata_without_a_provider_id_needs_the_nodes_own() -> None:
    instances = adapter(Cloud(v2=V2(InstanceMetadata(instance_type="t"))))
    with pytest.raises(ValueError, match="does not set node provider ID for node n1"):
        await instances.instance_metadata(node())
    metadata = await instances.instance_metadata(node(provider_id="kubelet://n1"))
    assert metadata is not None
    assert metadata.instance_type == "t"


async def test_v2_nil_metadata_is_none_for_init_and_for_addresses() -> None:
    instances = adapter(Cloud(v2=V2(None)))
    assert await instances.instance_metadata(node()) is None
    assert await instances.node_addresses(node()) is None


async def test_v2_addresses_come_from_one_metadata_call() -> None:
    v2 = V2(InstanceMetadata(node_addresses=ADDR_BY_ID))
    assert await adapter(Cloud(v2=v2)).node_addresses(node()) == ADDR_BY_ID
    assert v2.calls == ["InstanceMetadata"]


@pytest.mark.parametrize(
    ("method", "name"),
    [
        ("instance_metadata", "InstanceMetadata"),
        ("node_addresses", "InstanceMetadata"),
        ("instance_exists", "InstanceExists"),
        ("instance_shutdown", "InstanceShutdown"),
    ],
)
async def test_v2_calls_have_a_deadline_and_their_upstream_name(method: str, name: str) -> None:
    instances = adapter(Cloud(v2=V2(hang=True)), timeout=0.01)
    with pytest.raises(CloudCallTimeoutError, match=f"call {name} did not return"):
        await getattr(instances, method)(node(provider_id="p://1"))


# -- V1 metadata ---------------------------------------------------------------


async def test_v1_metadata_uses_the_provider_id_helper_then_by_provider_id_calls() -> None:
    v1, zones = V1(), FakeZones()
    metadata = await adapter(Cloud(v1=v1, zones=zones)).instance_metadata(node())
    assert metadata == InstanceMetadata(
        provider_id="fake://id-n1",
        instance_type="by-id.type",
        node_addresses=ADDR_BY_ID,
        zone="z-id",
        region="r-id",
    )
    assert v1.calls == [
        ("InstanceID", "n1"),
        ("NodeAddressesByProviderID", "fake://id-n1"),
        ("InstanceTypeByProviderID", "fake://id-n1"),
    ]
    assert zones.calls == ["GetZoneByProviderID"]


async def test_v1_metadata_keeps_the_nodes_provider_id_and_falls_back_by_name() -> None:
    v1, zones = V1(by_id_fails=True), FakeZones(by_id_fails=True)
    metadata = await adapter(Cloud(v1=v1, zones=zones)).instance_metadata(
        node(provider_id="own://1")
    )
    assert metadata == InstanceMetadata(
        provider_id="own://1",
        instance_type="by-name.type",
        node_addresses=ADDR_BY_NAME,
        zone="z-name",
        region="r-name",
    )
    assert ("InstanceID", "n1") not in v1.calls
    assert zones.calls == ["GetZoneByProviderID", "GetZoneByNodeName"]


async def test_v1_metadata_without_zones_has_no_zone_and_allows_no_provider_id() -> None:
    v1 = V1(instance_id=NotImplementedByProviderError("InstanceID"))
    metadata = await adapter(Cloud(v1=v1)).instance_metadata(node())
    assert metadata is not None
    assert (metadata.provider_id, metadata.zone, metadata.region) == ("", "", "")
    assert ("NodeAddressesByProviderID", "") in v1.calls, "called with an empty providerID"


async def test_v1_metadata_errors_name_both_paths() -> None:
    instances = adapter(Cloud(v1=V1(by_id_fails=True, by_name_fails=True)))
    with pytest.raises(RuntimeError, match="failed to get addresses: by providerID: by id down"):
        await instances.instance_metadata(node(provider_id="p://1"))


async def test_v1_zone_failure_on_both_paths_is_an_error() -> None:
    cloud = Cloud(v1=V1(), zones=FakeZones(by_id_fails=True, by_name_fails=True))
    with pytest.raises(RuntimeError, match="failed to get zone from cloud provider"):
        await adapter(cloud).instance_metadata(node(provider_id="p://1"))


async def test_v1_instance_id_errors_other_than_not_implemented_propagate() -> None:
    cloud = Cloud(v1=V1(instance_id=InstanceNotFoundError("gone")))
    with pytest.raises(InstanceNotFoundError):
        await adapter(cloud).instance_metadata(node())


async def test_v1_addresses_are_one_call_when_by_provider_id_answers() -> None:
    v1 = V1()
    assert await adapter(Cloud(v1=v1)).node_addresses(node(provider_id="p://1")) == ADDR_BY_ID
    assert v1.calls == [("NodeAddressesByProviderID", "p://1")]
    v1 = V1(by_id_fails=True)
    assert await adapter(Cloud(v1=v1)).node_addresses(node(provider_id="p://1")) == ADDR_BY_NAME


# -- V1 exists / shut down -----------------------------------------------------


async def test_v1_exists_and_shutdown_by_the_nodes_provider_id() -> None:
    v1 = V1(exists=True, shutdown=True)
    instances = adapter(Cloud(v1=v1))
    assert await instances.instance_exists(node(provider_id="p://1"))
    assert await instances.instance_shutdown(node(provider_id="p://1"))
    assert v1.calls == [
        ("InstanceExistsByProviderID", "p://1"),
        ("InstanceShutdownByProviderID", "p://1"),
    ]


async def test_v1_without_a_provider_id_asks_the_helper() -> None:
    v1 = V1(exists=False)
    assert not await adapter(Cloud(v1=v1)).instance_exists(node())
    assert v1.calls == [("InstanceID", "n1"), ("InstanceExistsByProviderID", "fake://id-n1")]


async def test_v1_instance_not_found_means_gone_and_not_shut_down() -> None:
    v1 = V1(instance_id=InstanceNotFoundError("gone"), shutdown=True)
    instances = adapter(Cloud(v1=v1))
    assert not await instances.instance_exists(node())
    assert not await instances.instance_shutdown(node())
    assert [c[0] for c in v1.calls] == ["InstanceID", "InstanceID"]
    assert await instances.provider_id(node()) is None


async def test_v1_other_helper_errors_propagate() -> None:
    instances = adapter(Cloud(v1=V1(instance_id=RuntimeError("API down"))))
    with pytest.raises(Exception, match="failed to get instance ID from cloud provider"):
        await instances.instance_exists(node())


async def test_v1_not_implemented_shutdown_means_not_shut_down() -> None:
    v1 = V1(shutdown=NotImplementedByProviderError("InstanceShutdownByProviderID"))
    assert not await adapter(Cloud(v1=v1)).instance_shutdown(node(provider_id="p://1"))


@pytest.mark.parametrize(
    ("method", "name"),
    [
        ("instance_exists", "InstanceExistsByProviderID"),
        ("instance_shutdown", "InstanceShutdownByProviderID"),
        ("node_addresses", "NodeAddresses"),
    ],
)
async def test_v1_calls_have_a_deadline_and_their_upstream_name(method: str, name: str) -> None:
    v1 = V1(hang=name, by_id_fails=True)
    with pytest.raises(Exception, match=f"call {name} did not return"):
        await getattr(adapter(Cloud(v1=v1), timeout=0.01), method)(node(provider_id="p://1"))


async def test_v1_instance_id_call_has_its_name() -> None:
    instances = adapter(Cloud(v1=V1(hang="InstanceID")), timeout=0.01)
    with pytest.raises(CloudCallTimeoutError, match="call InstanceID did not return"):
        await instances.provider_id(node())
