"""CloudInstances: one view of V1 and V2 instances, with upstream's fallbacks."""

from __future__ import annotations

from typing import Any

import pytest

from kube_ccm.api.objects import Node, NodeAddress, NodeSpec, ObjectMeta
from kube_ccm.cloudprovider import (
    CloudProvider,
    InstanceMetadata,
    InstanceNotFoundError,
    NotImplementedByProviderError,
    Zone,
)
from kube_ccm.controllers.cloudcalls import CloudCallTimeoutError
from kube_ccm.controllers.errors import CloudCallError
from kube_ccm.controllers.instances import CloudInstances
from kube_ccm.testing import FakeProvider
from kube_ccm.testing.world import guarded

ADDR_BY_ID = (NodeAddress(type="InternalIP", address="10.0.0.1"),)
ADDR_BY_NAME = (NodeAddress(type="InternalIP", address="10.0.0.2"),)


def node(name: str = "n1", provider_id: str = "") -> Node:
    return Node(metadata=ObjectMeta(name=name), spec=NodeSpec(provider_id=provider_id))


V2_METHODS = ("instance_exists", "instance_shutdown", "instance_metadata")


def v2_answers(
    metadata: InstanceMetadata | None = None, *, exists: bool = True, shutdown: bool = False
) -> dict[str, Any]:
    return {"instance_metadata": metadata, "instance_exists": exists, "instance_shutdown": shutdown}


def v1_answers(
    *,
    instance_id: Exception | None = None,
    by_id_fails: bool = False,
    by_name_fails: bool = False,
    exists: bool = True,
    shutdown: Exception | bool = False,
) -> dict[str, Any]:
    by_id_down, by_name_down = RuntimeError("by id down"), RuntimeError("by name down")
    return {
        "node_addresses": by_name_down if by_name_fails else ADDR_BY_NAME,
        "node_addresses_by_provider_id": by_id_down if by_id_fails else ADDR_BY_ID,
        "instance_id": instance_id or (lambda node_name: f"id-{node_name}"),
        "instance_type": by_name_down if by_name_fails else "by-name.type",
        "instance_type_by_provider_id": by_id_down if by_id_fails else "by-id.type",
        "instance_exists_by_provider_id": exists,
        "instance_shutdown_by_provider_id": shutdown,
    }


def zones_answers(*, by_id_fails: bool = False, by_name_fails: bool = False) -> dict[str, Any]:
    return {
        "get_zone_by_provider_id": RuntimeError("zones by id down")
        if by_id_fails
        else Zone(failure_domain="z-id", region="r-id"),
        "get_zone_by_node_name": RuntimeError("zones by name down")
        if by_name_fails
        else Zone(failure_domain="z-name", region="r-name"),
    }


def cloud(
    *,
    v2: dict[str, Any] | None = None,
    v1: dict[str, Any] | None = None,
    zones: dict[str, Any] | None = None,
) -> FakeProvider:
    """A provider with the capabilities given answers (get_zone is never scripted)."""
    parts = {"instances_v2": v2, "instances": v1, "zones": zones}
    answers = {k: v for part in parts.values() if part is not None for k, v in part.items()}
    return FakeProvider(
        capabilities={name for name, part in parts.items() if part is not None},
        answers=answers,
    )


def v1_calls(fake: FakeProvider) -> list[tuple[Any, ...]]:
    return [(c.method, *c.args) for c in fake.calls if c.capability == "instances"]


def adapter(cloud: CloudProvider, timeout: float = 1.0) -> CloudInstances:
    return CloudInstances(guarded(cloud, timeout=timeout))


def test_a_provider_with_neither_interface_is_refused() -> None:
    with pytest.raises(ValueError, match="cloud provider does not support instances"):
        CloudInstances(FakeProvider())


# -- V2 ------------------------------------------------------------------------


async def test_v2_is_preferred_over_v1() -> None:
    fake = cloud(v2=v2_answers(InstanceMetadata(provider_id="p://1")), v1=v1_answers())
    instances = adapter(fake)
    assert await instances.instance_metadata(node()) == InstanceMetadata(provider_id="p://1")
    assert await instances.instance_exists(node())
    assert not await instances.instance_shutdown(node())
    assert fake.called() == ["instance_metadata", "instance_exists", "instance_shutdown"]


async def test_v2_metadata_without_a_provider_id_needs_the_nodes_own() -> None:
    instances = adapter(cloud(v2=v2_answers(InstanceMetadata(instance_type="t"))))
    with pytest.raises(ValueError, match="does not set node provider ID for node n1"):
        await instances.instance_metadata(node())
    metadata = await instances.instance_metadata(node(provider_id="kubelet://n1"))
    assert metadata is not None
    assert metadata.instance_type == "t"


async def test_v2_nil_metadata_is_none_for_init_and_for_addresses() -> None:
    instances = adapter(cloud(v2=v2_answers(None)))
    assert await instances.instance_metadata(node()) is None
    assert await instances.node_addresses(node()) is None


async def test_v2_addresses_come_from_one_metadata_call() -> None:
    fake = cloud(v2=v2_answers(InstanceMetadata(node_addresses=ADDR_BY_ID)))
    assert await adapter(fake).node_addresses(node()) == ADDR_BY_ID
    assert fake.called() == ["instance_metadata"]


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
    fake = cloud(v2=v2_answers())
    for slow in V2_METHODS:
        fake.delay(slow, 10)
    instances = adapter(fake, timeout=0.01)
    with pytest.raises(CloudCallTimeoutError, match=f"call {name} did not return"):
        await getattr(instances, method)(node(provider_id="p://1"))


# -- V1 metadata ---------------------------------------------------------------


async def test_v1_metadata_uses_the_provider_id_helper_then_by_provider_id_calls() -> None:
    fake = cloud(v1=v1_answers(), zones=zones_answers())
    metadata = await adapter(fake).instance_metadata(node())
    assert metadata == InstanceMetadata(
        provider_id="fake://id-n1",
        instance_type="by-id.type",
        node_addresses=ADDR_BY_ID,
        zone="z-id",
        region="r-id",
    )
    assert v1_calls(fake) == [
        ("instance_id", "n1"),
        ("node_addresses_by_provider_id", "fake://id-n1"),
        ("instance_type_by_provider_id", "fake://id-n1"),
    ]
    assert fake.called("zones") == ["get_zone_by_provider_id"]


async def test_v1_metadata_keeps_the_nodes_provider_id_and_falls_back_by_name() -> None:
    fake = cloud(v1=v1_answers(by_id_fails=True), zones=zones_answers(by_id_fails=True))
    metadata = await adapter(fake).instance_metadata(node(provider_id="own://1"))
    assert metadata == InstanceMetadata(
        provider_id="own://1",
        instance_type="by-name.type",
        node_addresses=ADDR_BY_NAME,
        zone="z-name",
        region="r-name",
    )
    assert ("instance_id", "n1") not in v1_calls(fake)
    assert fake.called("zones") == ["get_zone_by_provider_id", "get_zone_by_node_name"]


async def test_v1_metadata_without_zones_has_no_zone_and_allows_no_provider_id() -> None:
    fake = cloud(v1=v1_answers(instance_id=NotImplementedByProviderError("InstanceID")))
    metadata = await adapter(fake).instance_metadata(node())
    assert metadata is not None
    assert (metadata.provider_id, metadata.zone, metadata.region) == ("", "", "")
    assert ("node_addresses_by_provider_id", "") in v1_calls(fake), (
        "called with an empty providerID"
    )


async def test_v1_metadata_errors_name_both_paths() -> None:
    instances = adapter(cloud(v1=v1_answers(by_id_fails=True, by_name_fails=True)))
    with pytest.raises(CloudCallError, match="failed to get addresses: by providerID: by id down"):
        await instances.instance_metadata(node(provider_id="p://1"))


async def test_v1_zone_failure_on_both_paths_is_an_error() -> None:
    fake = cloud(v1=v1_answers(), zones=zones_answers(by_id_fails=True, by_name_fails=True))
    with pytest.raises(CloudCallError, match="failed to get zone from cloud provider"):
        await adapter(fake).instance_metadata(node(provider_id="p://1"))


async def test_v1_instance_id_errors_other_than_not_implemented_propagate() -> None:
    fake = cloud(v1=v1_answers(instance_id=InstanceNotFoundError("gone")))
    with pytest.raises(InstanceNotFoundError):
        await adapter(fake).instance_metadata(node())


async def test_v1_addresses_are_one_call_when_by_provider_id_answers() -> None:
    fake = cloud(v1=v1_answers())
    assert await adapter(fake).node_addresses(node(provider_id="p://1")) == ADDR_BY_ID
    assert v1_calls(fake) == [("node_addresses_by_provider_id", "p://1")]
    fake = cloud(v1=v1_answers(by_id_fails=True))
    assert await adapter(fake).node_addresses(node(provider_id="p://1")) == ADDR_BY_NAME


# -- V1 exists / shut down -----------------------------------------------------


async def test_v1_exists_and_shutdown_by_the_nodes_provider_id() -> None:
    fake = cloud(v1=v1_answers(exists=True, shutdown=True))
    instances = adapter(fake)
    assert await instances.instance_exists(node(provider_id="p://1"))
    assert await instances.instance_shutdown(node(provider_id="p://1"))
    assert v1_calls(fake) == [
        ("instance_exists_by_provider_id", "p://1"),
        ("instance_shutdown_by_provider_id", "p://1"),
    ]


async def test_v1_without_a_provider_id_asks_the_helper() -> None:
    fake = cloud(v1=v1_answers(exists=False))
    assert not await adapter(fake).instance_exists(node())
    assert v1_calls(fake) == [
        ("instance_id", "n1"),
        ("instance_exists_by_provider_id", "fake://id-n1"),
    ]


async def test_v1_instance_not_found_means_gone_and_not_shut_down() -> None:
    fake = cloud(v1=v1_answers(instance_id=InstanceNotFoundError("gone"), shutdown=True))
    instances = adapter(fake)
    assert not await instances.instance_exists(node())
    assert not await instances.instance_shutdown(node())
    assert fake.called("instances") == ["instance_id", "instance_id"]
    assert await instances.provider_id(node()) is None


async def test_v1_other_helper_errors_propagate() -> None:
    instances = adapter(cloud(v1=v1_answers(instance_id=RuntimeError("API down"))))
    with pytest.raises(Exception, match="failed to get instance ID from cloud provider"):
        await instances.instance_exists(node())


async def test_v1_not_implemented_shutdown_means_not_shut_down() -> None:
    fake = cloud(
        v1=v1_answers(shutdown=NotImplementedByProviderError("InstanceShutdownByProviderID"))
    )
    assert not await adapter(fake).instance_shutdown(node(provider_id="p://1"))


@pytest.mark.parametrize(
    ("method", "name", "slow"),
    [
        ("instance_exists", "InstanceExistsByProviderID", "instance_exists_by_provider_id"),
        ("instance_shutdown", "InstanceShutdownByProviderID", "instance_shutdown_by_provider_id"),
        ("node_addresses", "NodeAddresses", "node_addresses"),
    ],
)
async def test_v1_calls_have_a_deadline_and_their_upstream_name(
    method: str, name: str, slow: str
) -> None:
    fake = cloud(v1=v1_answers(by_id_fails=True))
    fake.delay(slow, 10)
    with pytest.raises(Exception, match=f"call {name} did not return"):
        await getattr(adapter(fake, timeout=0.01), method)(node(provider_id="p://1"))


async def test_v1_instance_id_call_has_its_name() -> None:
    fake = cloud(v1=v1_answers())
    fake.delay("instance_id", 10)
    instances = adapter(fake, timeout=0.01)
    with pytest.raises(CloudCallTimeoutError, match="call InstanceID did not return"):
        await instances.provider_id(node())
