"""Node IPAM (range allocator): Nodes get pod CIDRs, none twice, full ranges, bad CIDRs."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kube_ccm.api import wellknown as wk
from kube_ccm.api.selectors import parse_selector
from kube_ccm.api.wellknown import REASON_POD_CIDR_DUPLICATE, REASON_POD_CIDR_NOT_IN_CLUSTER_CIDR
from kube_ccm.app.options.validation import parse_node_ipam
from kube_ccm.controllers.errors import ApiCallError, SyncError
from kube_ccm.controllers.nodeipam import (
    NodeIpamController,
)
from kube_ccm.controllers.nodescope import EVERY_NODE, NodeScope
from kube_ccm.testing.waiting import eventually
from kube_ccm.testing.world import World, node_object

DUAL_STACK = "10.244.0.0/16,fd00:10:244::/56"


def controller(
    world: World,
    cluster_cidr: str = "10.244.0.0/16",
    scope: NodeScope = EVERY_NODE,
    **flags: Any,
) -> NodeIpamController:
    ipam = NodeIpamController(
        client=world.client,
        nodes=world.nodes,
        recorder=world.recorder,
        metrics=world.metrics,
        options=parse_node_ipam(cluster_cidr=cluster_cidr, **flags),
        scope=scope,
    )
    ipam.occupy_existing()
    return ipam


@contextlib.asynccontextmanager
async def running(ipam: NodeIpamController) -> AsyncIterator[NodeIpamController]:
    task = asyncio.create_task(ipam.run())
    try:
        yield ipam
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def add_node(world: World, name: str, *cidrs: str, **labels: str) -> None:
    obj = node_object(name, tainted=False, labels=dict(labels))
    if cidrs:
        obj["spec"]["podCIDRs"] = list(cidrs)
        obj["spec"]["podCIDR"] = cidrs[0]
    await world.add(obj)


def put_node(world: World, name: str, *cidrs: str) -> None:
    """Add a Node while the controller runs (no waiting for the informer: the
    controller may patch it first)."""
    obj = node_object(name, tainted=False)
    if cidrs:
        obj["spec"].update(podCIDR=cidrs[0], podCIDRs=list(cidrs))
    world.api.put_object(obj)


def pod_cidrs(world: World, name: str) -> tuple[str, list[str]]:
    spec: dict[str, Any] = world.node(name)["spec"]
    return spec.get("podCIDR", ""), spec.get("podCIDRs", [])


def warnings(world: World, reason: str) -> list[str]:
    return [e.message for e in world.recorder.events if e.reason == reason and e.type == "Warning"]


async def test_a_node_gets_one_cidr_of_each_family_in_podcidr_and_podcidrs(world: World) -> None:
    await add_node(world, "n1")
    ipam = controller(world, DUAL_STACK)

    await ipam.sync("n1")

    assert pod_cidrs(world, "n1") == ("10.244.0.0/24", ["10.244.0.0/24", "fd00:10:244::/64"])
    assert [f"{r.method} {r.path}" for r in world.api.writes()][-1] == "PATCH /api/v1/nodes/n1"


async def test_cidrs_nodes_hold_at_start_are_never_handed_out_again(world: World) -> None:
    """A restart or a failover: the new allocator starts from what the Nodes hold."""
    await add_node(world, "old-a", "10.244.0.0/24")
    await add_node(world, "old-b", "10.244.2.0/24")
    await add_node(world, "new-c")
    await add_node(world, "new-d")
    ipam = controller(world)

    await ipam.sync("new-c")
    await ipam.sync("new-d")

    assert pod_cidrs(world, "new-c")[1] == ["10.244.1.0/24"]
    assert pod_cidrs(world, "new-d")[1] == ["10.244.3.0/24"]
    assert pod_cidrs(world, "old-a")[1] == ["10.244.0.0/24"], "untouched"


async def test_the_service_range_is_kept_out(world: World) -> None:
    await add_node(world, "n1")
    ipam = controller(world, "10.0.0.0/22", service_cluster_ip_range="10.0.0.0/24")

    await ipam.sync("n1")

    assert pod_cidrs(world, "n1")[1] == ["10.0.1.0/24"]


async def test_mask_sizes_come_from_the_flags(world: World) -> None:
    await add_node(world, "n1")
    ipam = controller(world, DUAL_STACK, node_cidr_mask_size_ipv4=26, node_cidr_mask_size_ipv6=72)

    await ipam.sync("n1")

    assert pod_cidrs(world, "n1")[1] == ["10.244.0.0/26", "fd00:10:244::/72"]


async def test_a_full_range_gives_the_node_the_event_and_a_retry_once_a_cidr_is_free(
    world: World,
) -> None:
    await add_node(world, "holder", "10.244.0.0/24")
    await add_node(world, "waiting")
    ipam = controller(world, "10.244.0.0/24")

    with pytest.raises(SyncError, match="no remaining CIDRs"):
        await ipam.sync("waiting")
    assert warnings(world, wk.REASON_CIDR_NOT_AVAILABLE) == [
        "Node waiting status is now: CIDRNotAvailable"
    ]
    assert pod_cidrs(world, "waiting") == ("", [])

    async with running(ipam):
        world.api.delete_object("/api/v1/nodes/holder")
        await eventually(
            lambda: pod_cidrs(world, "waiting")[1] == ["10.244.0.0/24"],
            what="the freed CIDR given to the waiting node",
            within=5,
        )


async def test_a_full_second_family_gives_back_the_first(world: World) -> None:
    await add_node(world, "holder", "10.244.0.0/24", "fd00::/64")
    await add_node(world, "waiting")
    ipam = controller(world, "10.244.0.0/16,fd00::/64", node_cidr_mask_size_ipv6=64)

    with pytest.raises(SyncError):
        await ipam.sync("waiting")

    assert [s.allocated for s in ipam.sets] == [1, 1], "the IPv4 CIDR went back"


async def test_a_deleted_nodes_cidr_is_free_again(world: World) -> None:
    await add_node(world, "gone", "10.244.0.0/24")
    async with running(controller(world, "10.244.0.0/24")) as ipam:
        world.api.delete_object("/api/v1/nodes/gone")
        await eventually(lambda: ipam.sets[0].allocated == 0, what="the CIDR released")
        world.api.put_object(node_object("next", tainted=False))
        await eventually(
            lambda: pod_cidrs(world, "next")[1] == ["10.244.0.0/24"], what="the CIDR reused"
        )


async def test_a_cidr_two_nodes_hold_stays_used_when_one_goes(world: World) -> None:
    await add_node(world, "a", "10.244.0.0/24")
    await add_node(world, "b", "10.244.0.0/24")
    async with running(controller(world, "10.244.0.0/24")) as ipam:
        world.api.delete_object("/api/v1/nodes/a")
        await world.settle("a")
        await asyncio.sleep(0.05)
        assert ipam.sets[0].allocated == 1


async def test_a_cidr_set_by_hand_outside_the_range_is_kept_and_flagged_once(
    world: World,
) -> None:
    await add_node(world, "manual", "192.168.7.0/24")
    ipam = controller(world)
    await ipam.sync("manual")
    await ipam.sync("manual")

    assert pod_cidrs(world, "manual")[1] == ["192.168.7.0/24"], "kept"
    flagged = warnings(world, REASON_POD_CIDR_NOT_IN_CLUSTER_CIDR)
    assert len(flagged) == 1
    assert "192.168.7.0/24 is outside cluster CIDR 10.244.0.0/16" in flagged[0]
    assert not [r for r in world.api.writes() if r.method == "PATCH"]


@pytest.mark.parametrize(
    ("brought", "problem"),
    [
        ("10.244.0.0/16", "pod CIDR 10.244.0.0/16 is a /16, not one /24 of cluster CIDR"),
        ("10.244.0.0/23", "pod CIDR 10.244.0.0/23 is a /23, not one /24"),
        ("10.244.0.128/25", "pod CIDR 10.244.0.128/25 is a /25, not one /24"),
        ("10.0.0.0/8", "pod CIDR 10.0.0.0/8 is a /8, not one /24"),
    ],
)
async def test_a_node_bringing_a_cidr_of_another_size_gets_a_warning_and_counts_for_nothing(
    world: World, brought: str, problem: str
) -> None:
    """The attack: a node registers with the whole cluster CIDR (or a block of another
    size); upstream marks every node CIDR it covers in use, and frees them all when it
    goes, the other Nodes' included."""
    await add_node(world, "attacker", brought)
    await add_node(world, "next")
    ipam = controller(world)

    await ipam.sync("attacker")
    await ipam.sync("next")

    assert ipam.sets[0].allocated == 1, "only the CIDR given to the next node"
    assert pod_cidrs(world, "next")[1] == ["10.244.0.0/24"]
    assert pod_cidrs(world, "attacker")[1] == [brought], "left as it is"
    (flagged,) = warnings(world, REASON_POD_CIDR_NOT_IN_CLUSTER_CIDR)
    assert problem in flagged
    assert "re-register the Node without it" in flagged

    async with running(ipam):
        world.api.delete_object("/api/v1/nodes/attacker")
        await world.settle("attacker")
        put_node(world, "third")
        await eventually(lambda: bool(pod_cidrs(world, "third")[1]), what="a CIDR", within=5)
    assert pod_cidrs(world, "third")[1] == ["10.244.1.0/24"], "not the next node's"
    assert ipam.sets[0].allocated == 2


async def test_a_node_bringing_another_nodes_cidr_is_flagged_and_frees_nothing(
    world: World,
) -> None:
    await add_node(world, "first")
    ipam = controller(world)
    await ipam.sync("first")
    assert pod_cidrs(world, "first")[1] == ["10.244.0.0/24"]
    await world.settle("first")

    async with running(ipam):
        put_node(world, "copycat", "10.244.0.0/24")
        await eventually(
            lambda: bool(warnings(world, REASON_POD_CIDR_DUPLICATE)), what="the warning", within=5
        )
        (flagged,) = warnings(world, REASON_POD_CIDR_DUPLICATE)
        assert "pod CIDR 10.244.0.0/24 is already Node first's" in flagged
        assert not warnings(world, REASON_POD_CIDR_NOT_IN_CLUSTER_CIDR)

        world.api.delete_object("/api/v1/nodes/copycat")
        await world.settle("copycat")
        put_node(world, "second")
        await eventually(lambda: bool(pod_cidrs(world, "second")[1]), what="a CIDR", within=5)
        assert pod_cidrs(world, "second")[1] == ["10.244.1.0/24"], "not first's"

        # The one it counts for goes while another Node holds it: it stays in use.
        put_node(world, "copycat-2", "10.244.0.0/24")
        await world.settle("copycat-2")
        world.api.delete_object("/api/v1/nodes/first")
        await world.settle("first")
        put_node(world, "third")
        await eventually(lambda: bool(pod_cidrs(world, "third")[1]), what="a CIDR", within=5)
        assert pod_cidrs(world, "third")[1] == ["10.244.2.0/24"], "not copycat-2's"
    assert ipam.sets[0].allocated == 3


async def test_at_a_restart_the_older_of_two_nodes_holds_their_cidr(world: World) -> None:
    young = node_object("young", tainted=False)
    old = node_object("old", tainted=False)
    for obj, created in ((young, "2026-02-01T00:00:00Z"), (old, "2026-01-01T00:00:00Z")):
        obj["metadata"]["creationTimestamp"] = created
        obj["spec"].update(podCIDR="10.244.5.0/24", podCIDRs=["10.244.5.0/24"])
        await world.add(obj)
    ipam = controller(world)

    await ipam.sync("young")
    await ipam.sync("old")

    (flagged,) = warnings(world, REASON_POD_CIDR_DUPLICATE)
    assert flagged.startswith("Node young: pod CIDR 10.244.5.0/24 is already Node old's")


@pytest.mark.parametrize(
    "cidrs", [("not-a-cidr",), ("10.244.1.0/24", "fd00::/64"), ("fd00:10:244::/64",)]
)
async def test_unusable_pod_cidrs_are_flagged_not_fatal(world: World, cidrs: tuple[str]) -> None:
    await add_node(world, "odd", *cidrs)
    ipam = controller(world)  # occupy_existing does not raise

    await ipam.sync("odd")

    assert len(warnings(world, REASON_POD_CIDR_NOT_IN_CLUSTER_CIDR)) == 1


async def test_nodes_outside_the_scope_get_nothing_but_their_cidrs_count(world: World) -> None:
    await add_node(world, "theirs", "10.244.0.0/24")
    await add_node(world, "theirs-new")
    await add_node(world, "ours", pool="ours")
    ipam = controller(world, scope=NodeScope(selector=parse_selector("pool=ours")))

    await ipam.sync("theirs-new")
    await ipam.sync("ours")

    assert pod_cidrs(world, "theirs-new") == ("", [])
    assert pod_cidrs(world, "ours")[1] == ["10.244.1.0/24"]


async def test_a_refused_patch_is_an_event_and_gives_the_cidrs_back(world: World) -> None:
    await add_node(world, "n1")
    ipam = controller(world)
    world.api.fail_next("PATCH", "/api/v1/nodes/n1", status=422, reason="Invalid")

    with pytest.raises(ApiCallError, match="failed to update node n1 PodCIDR"):
        await ipam.sync("n1")

    assert warnings(world, wk.REASON_CIDR_ASSIGNMENT_FAILED) == [
        "Node n1 status is now: CIDRAssignmentFailed"
    ]
    assert world.api.count("PATCH", "/api/v1/nodes/n1") == 1, "a refusal is not retried"
    assert ipam.sets[0].allocated == 0


async def test_a_patch_that_may_have_landed_keeps_its_cidrs_for_the_retry(world: World) -> None:
    await add_node(world, "n1")
    await add_node(world, "n2")
    ipam = controller(world)
    world.api.fail_next("PATCH", "/api/v1/nodes/n1", status=503, reason="", count=3)

    with pytest.raises(ApiCallError):
        await ipam.sync("n1")
    assert world.api.count("PATCH", "/api/v1/nodes/n1") == 3
    await ipam.sync("n2")
    await ipam.sync("n1")

    assert pod_cidrs(world, "n1")[1] == ["10.244.0.0/24"], "the same CIDR, not a new one"
    assert pod_cidrs(world, "n2")[1] == ["10.244.1.0/24"]
    assert ipam.sets[0].allocated == 2


async def test_a_stale_cache_does_not_hand_a_node_a_second_cidr(world: World) -> None:
    await add_node(world, "n1")
    ipam = controller(world)

    await ipam.sync("n1")
    await ipam.sync("n1")  # before the informer has the patched Node

    assert pod_cidrs(world, "n1")[1] == ["10.244.0.0/24"]
    assert ipam.sets[0].allocated == 1


async def test_a_node_being_deleted_frees_its_cidrs(world: World) -> None:
    obj = node_object("leaving", tainted=False)
    obj["spec"].update(podCIDR="10.244.0.0/24", podCIDRs=["10.244.0.0/24"])
    obj["metadata"].update(deletionTimestamp="2026-01-01T00:00:00Z", finalizers=["x/hold"])
    await world.add(obj)
    ipam = controller(world)
    assert ipam.sets[0].allocated == 0, "not counted at start"

    await ipam.sync("leaving")

    assert ipam.sets[0].allocated == 0


async def test_the_metrics_follow_the_allocations(world: World) -> None:
    await add_node(world, "n1")
    ipam = controller(world, "10.244.0.0/22")

    await ipam.sync("n1")

    label = {"clusterCIDR": "10.244.0.0/22"}
    assert world.metrics.sample(wk.METRIC_NODE_IPAM_CIDRSET_ALLOCATIONS, label) == 1
    assert world.metrics.sample(wk.METRIC_NODE_IPAM_CIDRSET_USAGE, label) == 0.25
    assert world.metrics.sample(wk.METRIC_NODE_IPAM_CIDRSET_MAX_CIDRS, label) == 4


async def test_every_node_gets_a_distinct_cidr_with_many_workers(world: World) -> None:
    for index in range(40):
        await add_node(world, f"n{index}")
    async with running(controller(world, "10.244.0.0/16")):

        def all_given() -> bool:
            return all(pod_cidrs(world, f"n{i}")[1] for i in range(40))

        await eventually(all_given, what="every node a CIDR", within=10)
    given = [pod_cidrs(world, f"n{i}")[1][0] for i in range(40)]
    assert len(set(given)) == 40
