"""The example provider does what its docstring promises, without a cluster."""

from __future__ import annotations

import pytest
from kube_ccm_example.provider import factory

from kube_ccm.api.objects import Node, NodeSpec, ObjectMeta
from kube_ccm.cloudprovider import CloudConfigError, InstanceNotFoundError

INVENTORY = b"""
clusterID: demo
instances:
  - name: node-1
    providerID: example://i-1
    type: m1.small
    zone: zone-a
    region: region-1
    addresses: [{type: InternalIP, address: 10.0.0.1}]
  - {name: node-2, providerID: example://i-2, state: shutdown}
  - {name: node-3, providerID: example://i-3, state: terminated}
"""


def node(name: str, provider_id: str = "") -> Node:
    return Node(metadata=ObjectMeta(name=name), spec=NodeSpec(provider_id=provider_id))


async def test_metadata_comes_from_the_inventory() -> None:
    cloud = factory(INVENTORY)
    instances = cloud.instances_v2()
    assert instances is not None
    metadata = await instances.instance_metadata(node("node-1"))
    assert metadata is not None
    assert metadata.provider_id == "example://i-1"
    assert (metadata.instance_type, metadata.zone, metadata.region) == (
        "m1.small",
        "zone-a",
        "region-1",
    )
    assert [a.address for a in metadata.node_addresses] == ["10.0.0.1"]
    assert cloud.has_cluster_id()
    assert cloud.load_balancer() is None, "everything else is unsupported"


async def test_states_map_to_exists_and_shutdown() -> None:
    instances = factory(INVENTORY).instances_v2()
    assert instances is not None
    assert await instances.instance_exists(node("node-1"))
    assert await instances.instance_shutdown(node("node-2"))
    assert not await instances.instance_exists(node("node-3"))
    assert not await instances.instance_exists(node("unknown"))
    assert await instances.instance_exists(node("renamed", "example://i-1")), "by providerID"
    with pytest.raises(InstanceNotFoundError):
        await instances.instance_metadata(node("unknown"))


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (b"instances: [", "not valid YAML"),
        (b"hello", "`instances:` list"),
        (b"instances: [{name: a}]", "instances[0] needs at least `name` and `providerID`"),
        (b"instances: [{name: a, providerID: x, state: gone}]", "use running, shutdown or"),
    ],
)
def test_malformed_inventories_say_what_to_fix(config: bytes, message: str) -> None:
    with pytest.raises(CloudConfigError) as raised:
        factory(config)
    assert message in str(raised.value)


def test_no_cloud_config_is_an_error() -> None:
    with pytest.raises(CloudConfigError, match="needs --cloud-config"):
        factory(None)
