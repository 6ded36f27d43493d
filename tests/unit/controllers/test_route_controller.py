"""Route controller (§5): routes for pod CIDRs inside the cluster CIDRs, NetworkUnavailable."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kube_ccm.api import wellknown as wk
from kube_ccm.api.objects import Node
from kube_ccm.api.wellknown import REASON_ROUTE_BLACKHOLED
from kube_ccm.app.options.validation import ClusterCIDRError, parse_cluster_cidrs
from kube_ccm.controllers.errors import CloudCallError
from kube_ccm.controllers.nodescope import NodeScope
from kube_ccm.controllers.route import (
    RouteController,
    RouteControllerOptions,
)
from kube_ccm.runtime.informer import Informer
from kube_ccm.runtime.resources import NODES
from kube_ccm.testing.world import World, node_object

CLUSTER = "kubernetes"


def controller(world: World, cidrs: str = "10.244.0.0/16,fd00:10:244::/56") -> RouteController:
    return RouteController(
        client=world.client,
        nodes=world.nodes,
        cloud=world.cloud,
        recorder=world.recorder,
        metrics=world.metrics,
        options=RouteControllerOptions(
            cluster_name=CLUSTER, cluster_cidrs=parse_cluster_cidrs(cidrs)
        ),
    )


def new_node(world: World, name: str, *cidrs: str) -> dict[str, Any]:
    world.state.add_instance(name, zone="z", region="r", instance_type="t")
    obj = node_object(
        name, tainted=False, addresses=[{"type": "InternalIP", "address": "10.0.0.9"}]
    )
    obj["metadata"]["uid"] = f"uid-{name}"
    if cidrs:
        obj["spec"]["podCIDRs"] = list(cidrs)
        obj["spec"]["podCIDR"] = cidrs[0]
    return obj


async def add_node(world: World, name: str, *cidrs: str) -> None:
    await world.add(new_node(world, name, *cidrs))


async def put_node(world: World, name: str, *cidrs: str) -> None:
    """Store a node and wait until the informer has it, in any version: a running
    controller may write its condition at once."""
    world.api.put_object(new_node(world, name, *cidrs))
    for _ in range(200):
        if world.nodes.get(name) is not None:
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"informer never saw node {name}")


def routes(world: World) -> set[tuple[str, str]]:
    return {(r.target_node, r.destination_cidr) for r in world.state.routes(CLUSTER)}


def condition(world: World, name: str) -> dict[str, Any] | None:
    for c in world.node(name)["status"].get("conditions") or []:
        if c["type"] == "NetworkUnavailable":
            found: dict[str, Any] = c
            return found
    return None


async def test_each_pod_cidr_gets_a_route_and_the_node_network_available(world: World) -> None:
    await add_node(world, "n1", "10.244.1.0/24", "fd00:10:244:1::/64")
    await add_node(world, "n2", "10.244.2.0/24")
    await add_node(world, "no-cidr")

    await controller(world).reconcile()

    assert routes(world) == {
        ("n1", "10.244.1.0/24"),
        ("n1", "fd00:10:244:1::/64"),
        ("n2", "10.244.2.0/24"),
    }
    cond = condition(world, "n1")
    assert cond is not None
    assert (cond["status"], cond["reason"], cond["message"]) == (
        "False",
        wk.REASON_ROUTE_CREATED,
        wk.MESSAGE_ROUTE_CREATED,
    )
    assert condition(world, "no-cidr") is None, "nodes without pod CIDRs are not touched"
    assert world.metrics.sample(wk.METRIC_ROUTE_SYNC_TOTAL) == 1


async def test_a_second_pass_changes_nothing(world: World) -> None:
    await add_node(world, "n1", "10.244.1.0/24")
    ccm = controller(world)
    await ccm.reconcile()
    await world.settle("n1")
    writes = len(world.api.writes())
    world.state.reset_calls()

    await ccm.reconcile()

    assert len(world.api.writes()) == writes
    assert world.cloud_calls() == {"ListRoutes": 1}


async def test_routes_of_deleted_nodes_go_but_foreign_routes_stay(world: World) -> None:
    await add_node(world, "n1", "10.244.1.0/24")
    ccm = controller(world)
    await ccm.reconcile()
    world.state.upsert_route(
        name="foreign",
        cluster=CLUSTER,
        target_node="elsewhere",
        destination_cidr="192.168.0.0/24",
        target_addresses=[],
    )
    world.state.upsert_route(
        name="stale",
        cluster=CLUSTER,
        target_node="gone",
        destination_cidr="10.244.9.0/24",
        target_addresses=[],
    )

    await ccm.reconcile()

    assert routes(world) == {("n1", "10.244.1.0/24"), ("elsewhere", "192.168.0.0/24")}


async def test_a_blackhole_route_a_node_still_needs_is_kept_with_one_warning(
    world: World,
) -> None:
    """A Ready node whose instance is terminated: upstream deletes its route as a
    blackhole and creates it again on the next pass, forever. It is kept here."""
    await add_node(world, "n1", "10.244.1.0/24")
    ccm = controller(world)
    await ccm.reconcile()
    world.state.set_instance_state("n1", "terminated")
    world.state.reset_calls()

    for _ in range(3):
        await ccm.reconcile()

    assert routes(world) == {("n1", "10.244.1.0/24")}
    calls = world.cloud_calls()
    assert "CreateRoute" not in calls
    assert "DeleteRoute" not in calls
    warnings = [e for e in world.recorder.events if e.reason == REASON_ROUTE_BLACKHOLED]
    assert len(warnings) == 1
    assert "route" in warnings[0].message
    assert "n1" in warnings[0].message

    # The Node goes (the lifecycle controller deletes it): so does its route.
    world.api.delete_object("/api/v1/nodes/n1")
    await world.settle("n1")
    await ccm.reconcile()
    assert routes(world) == set()


async def test_another_providers_node_gets_no_route_and_keeps_the_one_it_has(
    world: World,
) -> None:
    await add_node(world, "ours", "10.244.1.0/24")
    theirs = node_object("theirs", tainted=False)
    theirs["spec"].update(providerID="othercloud://i-9", podCIDRs=["10.244.2.0/24"])
    await world.add(theirs)
    world.state.upsert_route(
        name="theirs-route",
        cluster=CLUSTER,
        target_node="theirs",
        destination_cidr="10.244.9.0/24",
        target_addresses=[],
    )
    ccm = RouteController(
        client=world.client,
        nodes=world.nodes,
        cloud=world.cloud,
        recorder=world.recorder,
        metrics=world.metrics,
        options=RouteControllerOptions(
            cluster_name=CLUSTER, cluster_cidrs=parse_cluster_cidrs("10.244.0.0/16")
        ),
        scope=NodeScope(provider="simulated"),
    )

    await ccm.reconcile()

    assert routes(world) == {("ours", "10.244.1.0/24"), ("theirs", "10.244.9.0/24")}
    assert condition(world, "theirs") is None


async def test_a_node_that_loses_its_cidr_loses_its_route(world: World) -> None:
    await add_node(world, "n1", "10.244.1.0/24")
    ccm = controller(world)
    await ccm.reconcile()
    node = world.node("n1")
    node["spec"]["podCIDRs"] = ["10.244.7.0/24"]
    await world.add(node)

    await ccm.reconcile()

    assert routes(world) == {("n1", "10.244.7.0/24")}


async def test_a_failed_create_is_an_event_and_network_unavailable(world: World) -> None:
    await add_node(world, "n1", "10.244.1.0/24")
    world.state.set_fault("CreateRoute", "error", remaining=1)

    await controller(world).reconcile()

    assert world.recorder.reasons() == [wk.REASON_FAILED_TO_CREATE_ROUTE]
    assert world.recorder.events[0].message.startswith(
        "Could not create route uid-n1 10.244.1.0/24"
    )
    cond = condition(world, "n1")
    assert cond is not None
    assert (cond["status"], cond["reason"]) == ("True", wk.REASON_NO_ROUTE_CREATED)


async def test_a_list_error_fails_the_pass(world: World) -> None:
    world.state.set_fault("ListRoutes", "error", remaining=1)
    with pytest.raises(CloudCallError, match="error listing routes"):
        await controller(world).reconcile()


async def test_watch_based_mode_reconciles_on_node_changes(world: World) -> None:
    ccm = RouteController(
        client=world.client,
        nodes=world.nodes,
        cloud=world.cloud,
        recorder=world.recorder,
        metrics=world.metrics,
        options=RouteControllerOptions(
            cluster_cidrs=parse_cluster_cidrs("10.244.0.0/16"), watch_based=True
        ),
    )
    task = asyncio.create_task(ccm.run())
    world.state.add_instance("n1", zone="z", region="r", instance_type="t")
    obj = node_object("n1", tainted=False)
    obj["spec"]["podCIDRs"] = ["10.244.1.0/24"]
    world.api.put_object(obj)  # the controller writes the condition at once: no settle
    for _ in range(300):
        if routes(world):
            break
        await asyncio.sleep(0.01)
    await ccm.shutdown()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert routes(world) == {("n1", "10.244.1.0/24")}


def watch_based(world: World, interval: float) -> RouteController:
    """The controller with the gate on, at most one pass per ``interval`` seconds."""
    return RouteController(
        client=world.client,
        nodes=world.nodes,
        cloud=world.cloud,
        recorder=world.recorder,
        metrics=world.metrics,
        options=RouteControllerOptions(
            cluster_name=CLUSTER,
            cluster_cidrs=parse_cluster_cidrs("10.244.0.0/16"),
            watch_based=True,
            min_sync_interval=interval,
        ),
    )


@contextlib.asynccontextmanager
async def running(ccm: RouteController) -> AsyncIterator[None]:
    task = asyncio.create_task(ccm.run())
    try:
        yield
    finally:
        await ccm.shutdown()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def passes(world: World) -> float | None:
    return world.metrics.sample(wk.METRIC_ROUTE_SYNC_TOTAL)


async def test_watch_based_mode_does_nothing_while_nothing_changes(world: World) -> None:
    await add_node(world, "n1", "10.244.1.0/24")
    ccm = watch_based(world, interval=0.2)

    async with running(ccm):
        await asyncio.sleep(1.5)  # seven intervals without a Node change

    assert passes(world) == 1, "one pass at start, then none until a Node changes"
    assert world.cloud_calls()["ListRoutes"] == 1
    assert routes(world) == {("n1", "10.244.1.0/24")}


async def test_watch_based_mode_makes_one_pass_of_a_burst_of_node_adds(world: World) -> None:
    ccm = watch_based(world, interval=1.0)
    async with running(ccm):
        for _ in range(100):  # the pass at start
            if passes(world) == 1:
                break
            await asyncio.sleep(0.01)
        for i in range(6):  # six adds within half an interval
            await put_node(world, f"n{i}", f"10.244.{i}.0/24")
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)
        assert passes(world) == 1, "the burst waits for the interval to pass"
        await asyncio.sleep(1.2)

        assert passes(world) == 2, "one pass for the whole burst"
        assert routes(world) == {(f"n{i}", f"10.244.{i}.0/24") for i in range(6)}
        await put_node(world, "later", "10.244.9.0/24")
        await asyncio.sleep(1.3)
        assert passes(world) == 3, "a later change is served within an interval"
        assert ("later", "10.244.9.0/24") in routes(world)


async def test_watch_based_mode_retries_a_failed_pass_within_the_interval(world: World) -> None:
    await add_node(world, "n1", "10.244.1.0/24")
    world.state.set_fault("ListRoutes", "error", remaining=1)
    ccm = watch_based(world, interval=0.5)

    async with running(ccm):
        await asyncio.sleep(0.25)
        assert passes(world) == 1, "the failed pass is not retried at once"
        assert routes(world) == set()
        await asyncio.sleep(0.6)

    assert passes(world) == 2
    assert routes(world) == {("n1", "10.244.1.0/24")}


async def test_watch_based_mode_cleans_up_at_the_informers_resync(world: World) -> None:
    """Nothing changes in the cluster, but a route was deleted behind the controller's
    back: the resync (upstream's periodic cleanup pass) creates it again."""
    await add_node(world, "n1", "10.244.1.0/24")
    nodes: Informer[Node] = Informer(world.client, NODES)
    ccm = RouteController(
        client=world.client,
        nodes=nodes,
        cloud=world.cloud,
        recorder=world.recorder,
        metrics=world.metrics,
        options=RouteControllerOptions(
            cluster_name=CLUSTER,
            cluster_cidrs=parse_cluster_cidrs("10.244.0.0/16"),
            watch_based=True,
            min_sync_interval=0.1,
            resync_period=0.5,
        ),
    )
    informer = asyncio.create_task(nodes.run())
    try:
        async with running(ccm):
            for _ in range(100):
                if routes(world):
                    break
                await asyncio.sleep(0.01)
            assert passes(world) == 1
            (route,) = world.state.routes(CLUSTER)
            world.state.delete_route(route.name)
            for _ in range(200):
                if routes(world):
                    break
                await asyncio.sleep(0.01)
    finally:
        informer.cancel()
        await asyncio.gather(informer, return_exceptions=True)

    assert passes(world) == 2
    assert routes(world) == {("n1", "10.244.1.0/24")}


@pytest.mark.parametrize(
    ("text", "count"),
    [("10.244.0.0/16", 1), ("10.244.0.0/16,fd00::/56", 2), (" fd00::/56 , 10.0.0.0/8 ", 2)],
)
def test_cluster_cidrs(text: str, count: int) -> None:
    parsed = parse_cluster_cidrs(text)
    assert len(parsed) == count
    assert all(isinstance(n, ipaddress.IPv4Network | ipaddress.IPv6Network) for n in parsed)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "--cluster-cidr is required"),
        ("10.0.0.0/8,", "--cluster-cidr is required"),
        ("banana", "'banana' is not a valid CIDR"),
        ("10.0.0.0/8,10.1.0.0/16", "dual-stack pair"),
        ("10.0.0.0/8,fd00::/56,fd01::/56", "at most two"),
    ],
)
def test_bad_cluster_cidrs(text: str, message: str) -> None:
    with pytest.raises(ClusterCIDRError) as raised:
        parse_cluster_cidrs(text)
    assert message in str(raised.value)


async def test_a_pod_cidr_outside_the_cluster_cidr_gets_no_route_but_an_event(
    world: World,
) -> None:
    await add_node(world, "n1", "192.168.5.0/24")

    await controller(world, "10.244.0.0/16").reconcile()

    assert routes(world) == set()
    assert world.recorder.reasons() == [wk.REASON_FAILED_TO_CREATE_ROUTE]
    assert "outside --cluster-cidr 10.244.0.0/16" in world.recorder.events[0].message
    cond = condition(world, "n1")
    assert cond is not None
    assert cond["status"] == "True"


async def test_a_refusal_is_logged_once_per_change_and_its_event_recorded_every_pass(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 38: the refusal Warning was logged on every pass (every 10 s, forever)."""
    caplog.set_level(logging.DEBUG, logger="kube_ccm.controllers.route")
    await add_node(world, "n1", "192.168.5.0/24")
    routing = controller(world, "10.244.0.0/16")

    async def pod_cidr(cidr: str) -> None:
        obj = world.node("n1")
        obj["spec"]["podCIDRs"] = [cidr]
        obj["spec"]["podCIDR"] = cidr
        await world.add(obj)

    def warnings() -> list[str]:
        return [
            r.getMessage()
            for r in caplog.records
            if r.name == "kube_ccm.controllers.route" and r.levelno == logging.WARNING
        ]

    for _ in range(3):
        await routing.reconcile()
    assert len(warnings()) == 1
    assert "192.168.5.0/24 of node n1 is outside --cluster-cidr" in warnings()[0]
    assert world.recorder.reasons() == [wk.REASON_FAILED_TO_CREATE_ROUTE] * 3, (
        "the Event every pass: the recorder folds it into one Event's count"
    )

    # The refusal changes (another CIDR outside): logged again, once.
    await pod_cidr("192.168.6.0/24")
    for _ in range(2):
        await routing.reconcile()
    assert len(warnings()) == 2
    assert "192.168.6.0/24" in warnings()[1]

    # It ends, and comes back: logged again.
    await pod_cidr("10.244.6.0/24")
    await routing.reconcile()
    assert routes(world) == {("n1", "10.244.6.0/24")}
    await pod_cidr("192.168.6.0/24")
    await routing.reconcile()
    assert len(warnings()) == 3
    assert world.recorder.reasons() == [wk.REASON_FAILED_TO_CREATE_ROUTE] * 6
