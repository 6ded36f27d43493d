"""The example provider (examples/minimal-provider) keeps its promises, without a cluster.

The package is imported from its source tree (``pythonpath`` in pyproject.toml):
first the provider alone, then through the registry as the daemon builds it, its
own main, and finally under the real node controllers on the in-memory apiserver,
which is how a provider author tests a provider without binaries.
"""

from __future__ import annotations

import asyncio
import tomllib
from pathlib import Path

import pytest
from kube_ccm_example import main as example_main
from kube_ccm_example.provider import PROVIDER_NAME, ExampleCloud, factory

from kube_ccm.api import wellknown as wk
from kube_ccm.api.objects import Node, NodeSpec, ObjectMeta
from kube_ccm.cloudprovider import (
    CloudConfigError,
    CloudProviderInitError,
    InstanceNotFoundError,
    InstancesV2,
    NodeAddress,
    Registry,
)
from kube_ccm.cloudprovider import _registry as registry_module
from kube_ccm.controllers.node import CloudNodeController
from kube_ccm.controllers.nodelifecycle import CloudNodeLifecycleController
from kube_ccm.testing.world import World, node_object

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "minimal-provider"

INVENTORY = b"""
clusterID: demo
instances:
  - name: node-1
    providerID: example://i-1
    type: m1.small
    zone: zone-a
    region: region-1
    addresses:
      - {type: InternalIP, address: 10.0.0.1}
      - {type: ExternalIP, address: 203.0.113.1}
  - {name: node-2, providerID: example://i-2, state: shutdown}
  - {name: node-3, providerID: example://i-3, state: terminated}
"""


def node(name: str, provider_id: str = "") -> Node:
    return Node(metadata=ObjectMeta(name=name), spec=NodeSpec(provider_id=provider_id))


@pytest.fixture
def instances() -> InstancesV2:
    offered = factory(INVENTORY).instances_v2()
    assert offered is not None
    return offered


# -- the provider alone --------------------------------------------------------


async def test_a_listed_node_gets_its_metadata_from_the_inventory(
    instances: InstancesV2,
) -> None:
    metadata = await instances.instance_metadata(node("node-1"))

    assert metadata is not None
    assert metadata.provider_id == "example://i-1"
    assert (metadata.instance_type, metadata.zone, metadata.region) == (
        "m1.small",
        "zone-a",
        "region-1",
    )
    assert metadata.node_addresses == (
        NodeAddress(type="InternalIP", address="10.0.0.1"),
        NodeAddress(type="ExternalIP", address="203.0.113.1"),
    )


async def test_a_node_with_a_provider_id_is_found_by_it_whatever_its_name(
    instances: InstancesV2,
) -> None:
    renamed = node("renamed", "example://i-1")

    assert await instances.instance_exists(renamed)
    metadata = await instances.instance_metadata(renamed)
    assert metadata is not None
    assert metadata.instance_type == "m1.small"


async def test_a_provider_id_missing_from_the_inventory_means_gone_even_if_the_name_is_listed(
    instances: InstancesV2,
) -> None:
    replaced = node("node-1", "example://i-old")

    assert not await instances.instance_exists(replaced)


@pytest.mark.parametrize("name", ["unknown", "node-3"], ids=["unlisted", "terminated"])
async def test_an_unlisted_or_terminated_instance_does_not_exist_and_has_no_metadata(
    instances: InstancesV2, name: str
) -> None:
    assert not await instances.instance_exists(node(name))
    assert not await instances.instance_shutdown(node(name))
    with pytest.raises(InstanceNotFoundError, match=f"node '{name}'.*not a running"):
        await instances.instance_metadata(node(name))


async def test_a_shut_down_instance_still_exists_and_is_shut_down(
    instances: InstancesV2,
) -> None:
    assert await instances.instance_exists(node("node-2"))
    assert await instances.instance_shutdown(node("node-2"))
    assert not await instances.instance_shutdown(node("node-1"))


def test_only_instances_v2_is_offered_and_the_cluster_id_comes_from_the_config() -> None:
    cloud = factory(INVENTORY)

    assert cloud.provider_name() == PROVIDER_NAME == "example"
    assert cloud.has_cluster_id()
    assert not factory(b"instances: []").has_cluster_id()
    assert (
        cloud.instances(),
        cloud.zones(),
        cloud.load_balancer(),
        cloud.routes(),
        cloud.clusters(),
    ) == (None, None, None, None, None)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (b"instances: [", "the cloud-config is not valid YAML"),
        (b"hello", "must be a mapping with an `instances:` list"),
        (b"instance: []", "must be a mapping with an `instances:` list"),
        (b"instances: []\nclusterId: x", "unknown field `clusterId`; known fields: clusterID"),
        (b"instances: [{name: a}]", "instances[0] needs at least `name` and `providerID`"),
        (
            b"instances: [{name: a, providerID: x, instanceType: m1}]",
            "instances[0]: unknown field `instanceType`; known fields: name, providerID, type",
        ),
        (
            b"instances: [{name: a, providerID: x, state: gone}]",
            "instances[0].state is 'gone': use one of running, shutdown, terminated",
        ),
        (
            b"instances: [{name: a, providerID: x, addresses: [10.0.0.1]}]",
            "instances[0].addresses[0] must be {type: T, address: A} with T one of InternalIP",
        ),
        (
            b"instances: [{name: a, providerID: x, addresses: [{type: InternalIP, address: a}]}]",
            "instances[0].addresses[0]: 'a' is not an IP address",
        ),
        (
            b"instances: [{name: a, providerID: x}, {name: a, providerID: y}]",
            "instances: name 'a' is listed more than once",
        ),
        (
            b"instances: [{name: a, providerID: x}, {name: b, providerID: x}]",
            "instances: providerID 'x' is listed more than once",
        ),
    ],
)
def test_a_malformed_cloud_config_is_refused_with_what_to_fix(config: bytes, message: str) -> None:
    with pytest.raises(CloudConfigError) as raised:
        factory(config)

    assert message in str(raised.value)


def test_no_cloud_config_is_refused() -> None:
    with pytest.raises(CloudConfigError, match=r"needs --cloud-config=PATH"):
        factory(None)


# -- as the daemon builds it ---------------------------------------------------


def test_the_daemon_builds_it_from_the_cloud_config_file(tmp_path: Path) -> None:
    registry = Registry(entry_point_group=None)
    registry.register(PROVIDER_NAME, factory)
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_bytes(INVENTORY)
    bad.write_bytes(b"instances: [{name: a}]")

    assert isinstance(registry.init_cloud_provider("example", str(good)), ExampleCloud)
    with pytest.raises(CloudProviderInitError) as raised:
        registry.init_cloud_provider("example", str(bad))
    assert str(raised.value) == (
        'could not init cloud provider "example": '
        "instances[0] needs at least `name` and `providerID`"
    )


def test_the_package_declares_its_factory_as_the_example_entry_point() -> None:
    project = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["project"]

    assert project["entry-points"]["kube_ccm.cloud_providers"] == {
        "example": "kube_ccm_example.provider:factory"
    }
    assert project["scripts"] == {"example-cloud-controller-manager": "kube_ccm_example.main:main"}


def test_its_own_main_registers_the_provider_then_runs_the_daemon(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    registry = Registry(entry_point_group=None)  # no installed packages: only main registers
    monkeypatch.setattr(registry_module, "default_registry", registry)
    runs: list[str] = []

    def fake_run(argv: list[str] | None = None, program: str = "") -> int:
        assert registry.factory("example") is factory
        runs.append(program)
        return 0

    monkeypatch.setattr(example_main, "run", fake_run)

    for _ in range(2):  # a second main() in one process is not a duplicate registration
        with pytest.raises(SystemExit) as exited:
            example_main.main()
        assert exited.value.code == 0
    assert runs == ["example-cloud-controller-manager"] * 2


# -- under the real controllers, on the in-memory apiserver --------------------


async def test_the_node_controller_initialises_a_listed_node(world: World) -> None:
    ccm = CloudNodeController(
        client=world.client,
        nodes=world.nodes,
        cloud=factory(INVENTORY),
        recorder=world.recorder,
        metrics=world.metrics,
    )
    await world.add(node_object("node-1"))

    await ccm.sync("node-1")

    initialised = world.node("node-1")
    assert initialised["spec"]["providerID"] == "example://i-1"
    assert wk.TAINT_UNINITIALIZED not in world.taint_keys("node-1")
    assert {
        wk.LABEL_INSTANCE_TYPE: "m1.small",
        wk.LABEL_ZONE: "zone-a",
        wk.LABEL_REGION: "region-1",
    }.items() <= initialised["metadata"]["labels"].items()
    assert initialised["status"]["addresses"] == [
        {"type": "InternalIP", "address": "10.0.0.1"},
        {"type": "ExternalIP", "address": "203.0.113.1"},
        {"type": "Hostname", "address": "node-1"},  # the kubelet's, kept
    ]
    assert world.recorder.reasons() == [wk.REASON_SYNCED]


async def test_an_unlisted_node_stays_tainted_and_the_error_names_it(world: World) -> None:
    ccm = CloudNodeController(
        client=world.client,
        nodes=world.nodes,
        cloud=factory(INVENTORY),
        recorder=world.recorder,
        metrics=world.metrics,
    )
    await world.add(node_object("stranger"))

    with pytest.raises(InstanceNotFoundError, match="stranger"):
        await ccm.sync("stranger")  # the worker logs this and retries with backoff

    assert wk.TAINT_UNINITIALIZED in world.taint_keys("stranger")


async def test_the_lifecycle_controller_deletes_gone_nodes_and_taints_shut_down_ones(
    world: World,
) -> None:
    lifecycle = CloudNodeLifecycleController(
        client=world.client,
        nodes=world.nodes,
        cloud=factory(INVENTORY),
        recorder=world.recorder,
        monitor_period=0.01,
    )
    for name in ("node-1", "node-2", "node-3"):
        await world.add(node_object(name, tainted=False, ready="False"))

    # A gone instance is confirmed by a second check a monitor period later.
    await lifecycle.monitor_nodes()
    await asyncio.sleep(lifecycle.monitor_period)
    await lifecycle.monitor_nodes()

    assert world.api.object("/api/v1/nodes/node-3") is None, "terminated: deleted"
    assert wk.TAINT_SHUTDOWN in world.taint_keys("node-2")
    assert world.taint_keys("node-1") == []
