"""Route controller: a route rests on a pod CIDR kube-ccm (or an admin) gave the Node,
not on what the Node wrote in ``spec.podCIDRs`` when it registered (issue 37).

With node IPAM's range allocator in the daemon, only the CIDRs it counts as the Node's
are routed; without it, a CIDR must have the node mask size (when the flags give it)
and must not equal or overlap an older Node's."""

from __future__ import annotations

import asyncio
from typing import Any

from kube_ccm.api import wellknown as wk
from kube_ccm.app.descriptors import CONTROLLERS, Controller, ControllerContext
from kube_ccm.app.manager import node_ipam_before_leading
from kube_ccm.app.options.buildconfig import parse_options
from kube_ccm.app.options.validation import parse_cluster_cidrs, parse_node_ipam
from kube_ccm.controllers.nodeipam import NodeIpamController
from kube_ccm.controllers.nodescope import NodeScope
from kube_ccm.controllers.podcidrholders import LateHolders, PodCIDRHolders
from kube_ccm.controllers.route import RouteController, RouteControllerOptions
from kube_ccm.runtime.client import KubeClient
from kube_ccm.runtime.informer import InformerFactory
from kube_ccm.testing.world import World, node_object

CLUSTER = "kubernetes"
RANGE = "10.244.0.0/16"


def route_controller(
    world: World,
    *,
    holders: PodCIDRHolders | None = None,
    masks: tuple[int | None, ...] = (),
    cidrs: str = RANGE,
    scope: NodeScope | None = None,
    watch_based: bool = False,
) -> RouteController:
    return RouteController(
        client=world.client,
        nodes=world.nodes,
        cloud=world.cloud,
        recorder=world.recorder,
        metrics=world.metrics,
        options=RouteControllerOptions(
            cluster_name=CLUSTER,
            cluster_cidrs=parse_cluster_cidrs(cidrs),
            node_mask_sizes=masks,
            watch_based=watch_based,
            min_sync_interval=0.1,
        ),
        holders=holders,
        **({"scope": scope} if scope is not None else {}),
    )


def ipam(world: World, *, start: bool = True) -> NodeIpamController:
    allocator = NodeIpamController(
        client=world.client,
        nodes=world.nodes,
        recorder=world.recorder,
        metrics=world.metrics,
        options=parse_node_ipam(cluster_cidr=RANGE),
    )
    if start:
        allocator.occupy_existing()
    return allocator


def node(world: World, name: str, *cidrs: str, created: str = "") -> dict[str, Any]:
    world.state.add_instance(name, zone="z", region="r", instance_type="t")
    obj = node_object(
        name, tainted=False, addresses=[{"type": "InternalIP", "address": "10.0.0.9"}]
    )
    obj["metadata"]["uid"] = f"uid-{name}"
    if created:
        obj["metadata"]["creationTimestamp"] = created
    if cidrs:
        obj["spec"].update(podCIDR=cidrs[0], podCIDRs=list(cidrs))
    return obj


async def add_node(world: World, name: str, *cidrs: str, created: str = "") -> None:
    await world.add(node(world, name, *cidrs, created=created))


def routes(world: World) -> set[tuple[str, str]]:
    return {(r.target_node, r.destination_cidr) for r in world.state.routes(CLUSTER)}


def refusals(world: World, name: str) -> list[str]:
    return [
        e.message
        for e in world.recorder.events
        if e.reason == wk.REASON_FAILED_TO_CREATE_ROUTE
        and e.type == "Warning"
        and e.ref.name == name
    ]


def condition(world: World, name: str) -> tuple[str, str] | None:
    for c in world.node(name)["status"].get("conditions") or []:
        if c["type"] == "NetworkUnavailable":
            return c["status"], c["reason"]
    return None


# -- with node IPAM's range allocator in the daemon --------------------------------------


async def test_with_ipam_a_node_registered_with_another_nodes_cidr_gets_no_route(
    world: World,
) -> None:
    """The victim got its CIDR from the allocator; the attacker registered with it."""
    await add_node(world, "victim", created="2026-01-01T00:00:00Z")
    allocator = ipam(world)
    await allocator.sync("victim")
    await world.settle("victim")
    (given,) = world.node("victim")["spec"]["podCIDRs"]
    await add_node(world, "attacker", given, created="2026-01-02T00:00:00Z")
    await allocator.sync("attacker")

    await route_controller(world, holders=allocator).reconcile()

    assert routes(world) == {("victim", given)}
    (message,) = refusals(world, "attacker")
    assert f"pod CIDR {given} is already Node victim's" in message
    assert "not creating a route" in message.lower()
    assert refusals(world, "victim") == []
    assert condition(world, "attacker") == ("True", wk.REASON_NO_ROUTE_CREATED)


async def test_with_ipam_the_whole_cluster_cidr_or_another_size_gets_no_route(
    world: World,
) -> None:
    await add_node(world, "whole", RANGE)
    await add_node(world, "small", "10.244.9.128/25")
    allocator = ipam(world)

    await route_controller(world, holders=allocator).reconcile()

    assert routes(world) == set()
    assert "is a /16, not one /24 of cluster CIDR 10.244.0.0/16" in refusals(world, "whole")[0]
    assert "is a /25, not one /24" in refusals(world, "small")[0]


async def test_with_ipam_a_free_block_the_node_brought_is_routed_once_ipam_counts_it(
    world: World,
) -> None:
    """A node CIDR nobody holds, brought by the Node: node IPAM takes it in as the Node's
    (as being given it), so it is routed; before IPAM has counted it, it waits."""
    await add_node(world, "n1", "10.244.7.0/24")
    allocator = ipam(world, start=False)
    ccm = route_controller(world, holders=allocator)

    await ccm.reconcile()
    assert routes(world) == set(), "not judged yet: no route"
    assert refusals(world, "n1") == []
    assert condition(world, "n1") is None, "the condition waits too"

    allocator.occupy_existing()
    await ccm.reconcile()
    assert routes(world) == {("n1", "10.244.7.0/24")}
    assert condition(world, "n1") == ("False", wk.REASON_ROUTE_CREATED)


async def test_with_ipam_a_pending_cidr_keeps_the_route_it_has(world: World) -> None:
    """A restart: the route exists, the allocator has not counted the Nodes yet. The
    route is neither deleted nor re-created while the allocator catches up."""
    await add_node(world, "n1", "10.244.3.0/24")
    await route_controller(world).reconcile()
    world.state.reset_calls()

    await route_controller(world, holders=ipam(world, start=False)).reconcile()

    assert routes(world) == {("n1", "10.244.3.0/24")}
    assert world.cloud_calls() == {"ListRoutes": 1}


async def test_with_ipam_an_attackers_existing_route_is_deleted(world: World) -> None:
    """Routes made before this release, for a CIDR node IPAM refused: they go."""
    await add_node(world, "victim", "10.244.1.0/24", created="2026-01-01T00:00:00Z")
    await add_node(world, "attacker", "10.244.1.0/24", created="2026-01-02T00:00:00Z")
    world.state.upsert_route(
        name="old",
        cluster=CLUSTER,
        target_node="attacker",
        destination_cidr="10.244.1.0/24",
        target_addresses=[],
    )

    await route_controller(world, holders=ipam(world)).reconcile()

    assert routes(world) == {("victim", "10.244.1.0/24")}


async def test_late_holders_wait_until_the_allocator_is_bound(world: World) -> None:
    await add_node(world, "n1", "10.244.5.0/24")
    late = LateHolders()
    ccm = route_controller(world, holders=late)

    await ccm.reconcile()
    assert routes(world) == set()

    late.bind(ipam(world))
    await ccm.reconcile()
    assert routes(world) == {("n1", "10.244.5.0/24")}


async def test_watch_based_mode_asks_again_while_ipam_has_not_judged(world: World) -> None:
    """Node IPAM counting a CIDR changes no Node, so no Node event would come: the
    controller asks for another pass itself while a CIDR waits."""
    await add_node(world, "n1", "10.244.6.0/24")
    allocator = ipam(world, start=False)
    ccm = route_controller(world, holders=allocator, watch_based=True)
    task = asyncio.create_task(ccm.run())
    try:
        for _ in range(100):
            if world.metrics.sample(wk.METRIC_ROUTE_SYNC_TOTAL):
                break
            await asyncio.sleep(0.01)
        allocator.occupy_existing()
        for _ in range(300):
            if routes(world):
                break
            await asyncio.sleep(0.01)
    finally:
        await ccm.shutdown()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert routes(world) == {("n1", "10.244.6.0/24")}


# -- with node IPAM elsewhere (kube-controller-manager, a CNI) ---------------------------


async def test_without_ipam_the_later_node_with_a_duplicate_cidr_gets_no_route(
    world: World,
) -> None:
    """The older Node keeps its route; the later one (by creationTimestamp) gets none
    and a Warning naming the older Node, whatever the names' order."""
    await add_node(world, "a-attacker", "10.244.1.0/24", created="2026-01-02T00:00:00Z")
    await add_node(world, "z-victim", "10.244.1.0/24", created="2026-01-01T00:00:00Z")

    await route_controller(world).reconcile()

    assert routes(world) == {("z-victim", "10.244.1.0/24")}
    (message,) = refusals(world, "a-attacker")
    assert "is Node z-victim's pod CIDR 10.244.1.0/24 (Node z-victim registered first)" in message
    assert refusals(world, "z-victim") == []


async def test_without_ipam_a_tie_in_age_goes_by_name(world: World) -> None:
    await add_node(world, "b", "10.244.1.0/24", created="2026-01-01T00:00:00Z")
    await add_node(world, "a", "10.244.1.0/24", created="2026-01-01T00:00:00Z")

    await route_controller(world).reconcile()

    assert routes(world) == {("a", "10.244.1.0/24")}
    assert "is Node a's pod CIDR" in refusals(world, "b")[0]


async def test_without_ipam_a_cidr_overlapping_older_nodes_gets_no_route(world: World) -> None:
    """The whole cluster CIDR, registered after two Nodes, with no mask size known."""
    await add_node(world, "n1", "10.244.1.0/24", created="2026-01-01T00:00:00Z")
    await add_node(world, "n2", "10.244.200.0/24", created="2026-01-01T00:00:01Z")
    await add_node(world, "wide", RANGE, created="2026-01-02T00:00:00Z")
    await add_node(world, "inner", "10.244.200.128/25", created="2026-01-03T00:00:00Z")

    await route_controller(world).reconcile()

    assert routes(world) == {("n1", "10.244.1.0/24"), ("n2", "10.244.200.0/24")}
    assert "overlaps Node n1's pod CIDR 10.244.1.0/24" in refusals(world, "wide")[0]
    assert "overlaps Node n2's pod CIDR 10.244.200.0/24" in refusals(world, "inner")[0]


async def test_without_ipam_the_mask_size_is_checked_when_the_flags_give_it(
    world: World,
) -> None:
    await add_node(world, "whole", RANGE)
    await add_node(world, "n1", "10.244.1.0/24")

    await route_controller(world, masks=(24,)).reconcile()

    assert routes(world) == {("n1", "10.244.1.0/24")}
    assert "is a /16, not one /24 of cluster CIDR 10.244.0.0/16" in refusals(world, "whole")[0]


async def test_without_ipam_and_no_mask_size_any_size_inside_is_routed(world: World) -> None:
    """Upstream's behaviour where nothing says otherwise: another IPAM may use /23s."""
    await add_node(world, "n1", "10.244.2.0/23")

    await route_controller(world).reconcile()

    assert routes(world) == {("n1", "10.244.2.0/23")}


async def test_without_ipam_another_ccms_older_node_holds_its_cidr(world: World) -> None:
    theirs = node(world, "theirs", "10.244.1.0/24", created="2026-01-01T00:00:00Z")
    theirs["spec"]["providerID"] = "othercloud://i-1"
    await world.add(theirs)
    await add_node(world, "ours", "10.244.1.0/24", created="2026-01-02T00:00:00Z")

    await route_controller(world, scope=NodeScope(provider="simulated")).reconcile()

    assert routes(world) == set()
    assert "is Node theirs's pod CIDR" in refusals(world, "ours")[0]
    assert refusals(world, "theirs") == []


async def test_without_ipam_the_older_nodes_route_stays_and_the_later_ones_goes(
    world: World,
) -> None:
    """Both routes exist (made by an older kube-ccm): the hijacking one is deleted, the
    older Node's is kept (not deleted, not re-created)."""
    await add_node(world, "victim", "10.244.1.0/24", created="2026-01-01T00:00:00Z")
    await add_node(world, "attacker", "10.244.1.0/24", created="2026-01-02T00:00:00Z")
    for target in ("victim", "attacker"):
        world.state.upsert_route(
            name=f"route-{target}",
            cluster=CLUSTER,
            target_node=target,
            destination_cidr="10.244.1.0/24",
            target_addresses=[],
        )
    world.state.reset_calls()

    await route_controller(world).reconcile()

    assert routes(world) == {("victim", "10.244.1.0/24")}
    calls = world.cloud_calls()
    assert calls.get("DeleteRoute") == 1
    assert "CreateRoute" not in calls
    deleted = [r for r in world.state.routes(CLUSTER) if r.target_node == "attacker"]
    assert deleted == []


async def test_without_ipam_a_refused_cidrs_blackhole_route_is_not_kept(world: World) -> None:
    await add_node(world, "victim", "10.244.1.0/24", created="2026-01-01T00:00:00Z")
    await add_node(world, "attacker", "10.244.1.0/24", created="2026-01-02T00:00:00Z")
    world.state.upsert_route(
        name="dark",
        cluster=CLUSTER,
        target_node="attacker",
        destination_cidr="10.244.1.0/24",
        target_addresses=[],
    )
    world.state.set_instance_state("attacker", "terminated")

    await route_controller(world).reconcile()

    assert ("attacker", "10.244.1.0/24") not in routes(world)


class _ClientsOf:
    """The one client a descriptor's builder asks for: the world's."""

    def __init__(self, world: World) -> None:
        self._world = world

    def client(self, identity: str) -> KubeClient:
        del identity
        return self._world.client


async def table_built(world: World, *flags: str) -> tuple[RouteController, Controller | None]:
    """The route controller (and node-ipam-controller, when the flags run it) as the
    manager builds them: from the controller table, the route controller first."""
    config = parse_options(["--cloud-provider=simulated", *flags])
    informers = InformerFactory(world.client)
    ctx = ControllerContext(
        config=config,
        cloud=world.cloud,
        clients=_ClientsOf(world),  # type: ignore[arg-type]
        informers=informers,
        metrics=world.metrics,
        recorder=lambda _component: world.recorder,  # type: ignore[arg-type,return-value]
        cluster_cidrs=parse_cluster_cidrs(config.cluster_cidr),
        node_ipam=node_ipam_before_leading(config),
    )
    built = {d.name: d.build(ctx, d.names) for d in CONTROLLERS if d.name in config.controllers}
    running = asyncio.create_task(informers.run())
    try:
        await informers.wait_synced()
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
    route = built[wk.CONTROLLER_NODE_ROUTE]
    assert isinstance(route, RouteController)
    return route, built.get(wk.CONTROLLER_NODE_IPAM)


async def test_the_daemon_wires_node_ipams_holders_into_the_route_controller(
    world: World,
) -> None:
    await add_node(world, "victim", "10.244.1.0/24", created="2026-01-01T00:00:00Z")
    await add_node(world, "attacker", "10.244.1.0/24", created="2026-01-02T00:00:00Z")
    route, allocator = await table_built(
        world,
        "--controllers=route,nodeipam",
        "--allocate-node-cidrs",
        f"--cluster-cidr={RANGE}",
    )
    assert isinstance(allocator, NodeIpamController)

    await route.reconcile()
    assert routes(world) == set(), "node IPAM has not counted the Nodes yet"

    allocator.occupy_existing()
    await route.reconcile()
    assert routes(world) == {("victim", "10.244.1.0/24")}
    assert (
        "node IPAM: pod CIDR 10.244.1.0/24 is already Node victim's"
        in (refusals(world, "attacker")[0])
    )


async def test_the_daemon_without_node_ipam_checks_the_mask_size_its_flags_give(
    world: World,
) -> None:
    await add_node(world, "whole", RANGE)
    route, allocator = await table_built(
        world, "--controllers=route", f"--cluster-cidr={RANGE}", "--node-cidr-mask-size=24"
    )
    assert allocator is None

    await route.reconcile()

    assert routes(world) == set()
    assert "(--node-cidr-mask-size)" in refusals(world, "whole")[0]


async def test_the_daemon_without_node_ipam_or_mask_flags_routes_any_size(world: World) -> None:
    await add_node(world, "n1", "10.244.2.0/23")
    route, _ = await table_built(world, "--controllers=route", f"--cluster-cidr={RANGE}")

    await route.reconcile()

    assert routes(world) == {("n1", "10.244.2.0/23")}
