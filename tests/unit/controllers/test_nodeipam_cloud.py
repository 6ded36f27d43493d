"""Node IPAM's cloud allocator: each Node gets the pod CIDRs the cloud gave its instance."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from kube_ccm.api import wellknown as wk
from kube_ccm.api.objects import Node
from kube_ccm.api.wellknown import REASON_POD_CIDR_NOT_FROM_CLOUD
from kube_ccm.app.descriptors import BY_NAME, Controller, ControllerContext, StartupError
from kube_ccm.app.manager import node_ipam_before_leading
from kube_ccm.app.options.buildconfig import parse_options
from kube_ccm.cloudprovider import CloudProvider, NodePodCIDRs
from kube_ccm.controllers.errors import CloudCallError
from kube_ccm.controllers.nodeipam_cloud import (
    MESSAGE_IMPLICIT_ROUTE,
    CloudAllocatorController,
    CloudAllocatorOptions,
)
from kube_ccm.providers.simulated.config import PodCIDRsConfig
from kube_ccm.runtime.client import KubeClient
from kube_ccm.runtime.informer import InformerFactory
from kube_ccm.testing import FakeProvider
from kube_ccm.testing.waiting import eventually
from kube_ccm.testing.world import World, node_object

RANGES = ("10.100.0.0/16", "fd00:100::/48")


@pytest.fixture
def cloud_config() -> dict[str, Any]:
    return {"pod_cidrs": PodCIDRsConfig(ranges=RANGES)}


class Scripted(CloudProvider, NodePodCIDRs):
    """A cloud answering ``answer`` (or raising it) for every Node."""

    def __init__(self, answer: Sequence[str] | Exception) -> None:
        self.answer = answer
        self.asked: list[str] = []

    def provider_name(self) -> str:
        return "scripted"

    def has_cluster_id(self) -> bool:
        return True

    async def node_pod_cidrs(self, node: Node) -> Sequence[str]:
        self.asked.append(node.metadata.name)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def allocator(
    world: World, cloud: NodePodCIDRs | None = None, *, owns_network_condition: bool = True
) -> CloudAllocatorController:
    return CloudAllocatorController(
        client=world.client,
        nodes=world.nodes,
        cloud=cloud or world.cloud,
        recorder=world.recorder,
        metrics=world.metrics,
        options=CloudAllocatorOptions(owns_network_condition=owns_network_condition),
    )


async def add_node(world: World, name: str, *cidrs: str, initialised: bool = True) -> None:
    provider_id = ""
    if initialised:
        instance = world.state.add_instance(name, zone="z", region="r", instance_type="t")
        provider_id = f"simulated://{instance.id}"
    obj = node_object(name, tainted=not initialised, provider_id=provider_id)
    if cidrs:
        obj["spec"]["podCIDRs"] = list(cidrs)
        obj["spec"]["podCIDR"] = cidrs[0]
    await world.add(obj)


def pod_cidrs(world: World, name: str) -> list[str]:
    found: list[str] = world.node(name)["spec"].get("podCIDRs", [])
    return found


def network_condition(world: World, name: str) -> dict[str, Any] | None:
    for c in world.node(name)["status"].get("conditions") or []:
        if c["type"] == wk.NODE_CONDITION_NETWORK_UNAVAILABLE:
            found: dict[str, Any] = c
            return found
    return None


def warnings(world: World, reason: str) -> list[str]:
    return [e.message for e in world.recorder.events if e.reason == reason and e.type == "Warning"]


@contextlib.asynccontextmanager
async def running(controller: CloudAllocatorController) -> AsyncIterator[None]:
    task = asyncio.create_task(controller.run())
    try:
        yield
    finally:
        await controller.shutdown()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_node_gets_its_instances_pod_cidrs_and_the_network_available(
    world: World,
) -> None:
    await add_node(world, "n0")
    await add_node(world, "n1")

    await allocator(world).sync("n1")

    assert pod_cidrs(world, "n1") == ["10.100.1.0/24", "fd00:100:0:1::/64"]
    assert world.node("n1")["spec"]["podCIDR"] == "10.100.1.0/24"
    condition = network_condition(world, "n1")
    assert condition is not None
    assert (condition["status"], condition["reason"], condition["message"]) == (
        "False",
        wk.REASON_ROUTE_CREATED,
        MESSAGE_IMPLICIT_ROUTE,
    )
    assert world.cloud_calls() == {"NodePodCIDRs": 1}
    assert pod_cidrs(world, "n0") == [], "only the Node synced"


async def test_a_node_without_a_provider_id_waits_for_it(world: World) -> None:
    await add_node(world, "n1", initialised=False)
    ipam = allocator(world)

    async with running(ipam):
        await asyncio.sleep(0.1)
        assert world.cloud_calls() == {}, "no instance to ask about yet"
        instance = world.state.add_instance("n1", zone="z", region="r", instance_type="t")
        node = world.node("n1")
        node["spec"]["providerID"] = f"simulated://{instance.id}"
        world.api.put_object(node)  # the cloud node controller initialises it

        await eventually(lambda: bool(pod_cidrs(world, "n1")), within=5, what="pod CIDRs")
    assert pod_cidrs(world, "n1") == ["10.100.0.0/24", "fd00:100::/64"]


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        ((), "Node n1 has no CIDRs"),
        (RuntimeError("quota"), "failed to get cidr(s) from provider: quota"),
    ],
)
async def test_no_cidr_from_the_cloud_is_cidr_not_available_and_a_retry(
    world: World, answer: Sequence[str] | Exception, error: str
) -> None:
    await add_node(world, "n1")

    with pytest.raises(CloudCallError) as raised:
        await allocator(world, Scripted(answer)).sync("n1")

    assert error in str(raised.value)
    assert warnings(world, wk.REASON_CIDR_NOT_AVAILABLE) == [
        "Node n1 status is now: CIDRNotAvailable"
    ]
    assert pod_cidrs(world, "n1") == []
    assert network_condition(world, "n1") is None


async def test_more_than_two_cidrs_are_cut_to_two_as_upstream(world: World) -> None:
    await add_node(world, "n1")
    cloud = Scripted(["10.1.0.0/24", "fd00:1::/64", "10.2.0.0/24"])

    await allocator(world, cloud).sync("n1")

    assert pod_cidrs(world, "n1") == ["10.1.0.0/24", "fd00:1::/64"]


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (["10.1.0.0/24", "10.2.0.0/24"], "not dual-stack"),
        (["banana"], "failed to parse"),
    ],
)
async def test_a_bad_answer_is_an_error_and_nothing_is_written(
    world: World, answer: list[str], error: str
) -> None:
    await add_node(world, "n1")

    with pytest.raises(CloudCallError, match=error):
        await allocator(world, Scripted(answer)).sync("n1")

    assert pod_cidrs(world, "n1") == []


async def test_a_node_with_other_cidrs_keeps_them_and_is_flagged_once(world: World) -> None:
    await add_node(world, "n1", "10.244.7.0/24")
    ipam = allocator(world)

    await ipam.sync("n1")
    await ipam.sync("n1")

    assert pod_cidrs(world, "n1") == ["10.244.7.0/24"]
    (message,) = warnings(world, REASON_POD_CIDR_NOT_FROM_CLOUD)
    assert "has pod CIDRs 10.244.7.0/24 but the cloud reports 10.100.0.0/24" in message
    assert network_condition(world, "n1") is None


async def test_a_node_that_already_has_the_clouds_cidrs_only_gets_the_condition(
    world: World,
) -> None:
    await add_node(world, "n1", "10.100.0.0/24", "fd00:100::/64")

    await allocator(world).sync("n1")

    assert world.node_writes() == ["PATCH /api/v1/nodes/n1/status"]
    assert warnings(world, REASON_POD_CIDR_NOT_FROM_CLOUD) == []


async def test_where_the_route_controller_runs_the_condition_is_left_to_it(
    world: World,
) -> None:
    await add_node(world, "n1")

    await allocator(world, owns_network_condition=False).sync("n1")

    assert pod_cidrs(world, "n1") == ["10.100.0.0/24", "fd00:100::/64"]
    assert network_condition(world, "n1") is None
    assert world.node_writes() == ["PATCH /api/v1/nodes/n1"]


@pytest.mark.parametrize("cloud_config", [{"pod_cidrs": PodCIDRsConfig(ranges=("10.9.0.0/23",))}])
async def test_the_simulated_cloud_runs_out_of_pod_cidrs(world: World) -> None:
    for name in ("n0", "n1", "n2"):
        await add_node(world, name)
    ipam = allocator(world)

    await ipam.sync("n0")
    await ipam.sync("n1")
    with pytest.raises(CloudCallError, match="has no CIDRs"):
        await ipam.sync("n2")

    assert [pod_cidrs(world, n) for n in ("n0", "n1")] == [["10.9.0.0/24"], ["10.9.1.0/24"]]


class _ClientsOf:
    """The one client a descriptor's builder asks for: the world's."""

    def __init__(self, world: World) -> None:
        self._world = world

    def client(self, identity: str) -> KubeClient:
        del identity
        return self._world.client


def built(world: World, cloud: CloudProvider, *flags: str) -> Controller:
    config = parse_options(
        [
            "--cloud-provider=simulated",
            "--allocate-node-cidrs",
            "--cidr-allocator-type=CloudAllocator",
            *flags,
        ]
    )
    ctx = ControllerContext(
        config=config,
        cloud=cloud,
        clients=_ClientsOf(world),  # type: ignore[arg-type]
        informers=InformerFactory(world.client),
        metrics=world.metrics,
        recorder=lambda _component: world.recorder,  # type: ignore[arg-type,return-value]
        node_ipam=node_ipam_before_leading(config),
    )
    descriptor = BY_NAME[wk.CONTROLLER_NODE_IPAM]
    return descriptor.build(ctx, descriptor.names)


async def test_the_controller_table_runs_the_cloud_allocator_with_its_flag(world: World) -> None:
    alone = built(world, world.cloud, "--controllers=nodeipam")
    assert isinstance(alone, CloudAllocatorController)
    assert alone.options.owns_network_condition

    with_routes = built(world, world.cloud, "--controllers=*,nodeipam", "--cluster-cidr=10.0.0.0/8")
    assert isinstance(with_routes, CloudAllocatorController)
    assert not with_routes.options.owns_network_condition, "the route controller's condition"

    no_routes = built(
        world, world.cloud, "--controllers=*,nodeipam", "--configure-cloud-routes=false"
    )
    assert isinstance(no_routes, CloudAllocatorController)
    assert no_routes.options.owns_network_condition


async def test_a_provider_without_pod_cidrs_cannot_run_the_cloud_allocator(world: World) -> None:
    provider = FakeProvider(name="plain", capabilities={"instances_v2"})
    with pytest.raises(StartupError, match="'plain' does not report Nodes' pod CIDRs"):
        built(world, provider, "--controllers=nodeipam")
