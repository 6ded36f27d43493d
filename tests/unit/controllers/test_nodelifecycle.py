"""Cloud node lifecycle controller (§3): delete gone nodes, taint shut-down ones."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from kube_ccm.api import wellknown as wk
from kube_ccm.api.selectors import parse_selector
from kube_ccm.api.wellknown import REASON_NODE_DELETION_DISABLED
from kube_ccm.cloudprovider import (
    CloudProvider,
    InstanceNotFoundError,
    NotImplementedByProviderError,
)
from kube_ccm.controllers.deletionguard import DeletionGuard
from kube_ccm.controllers.nodelifecycle import (
    CloudNodeLifecycleController,
)
from kube_ccm.controllers.nodescope import NodeScope
from kube_ccm.testing import FakeProvider
from kube_ccm.testing.world import World, guarded, node_object

SHUTDOWN = {"key": wk.TAINT_SHUTDOWN, "effect": "NoSchedule"}


def controller(world: World, cloud: CloudProvider | None = None) -> CloudNodeLifecycleController:
    return CloudNodeLifecycleController(
        client=world.client,
        nodes=world.nodes,
        cloud=guarded(cloud or world.cloud, timeout=0.2),
        recorder=world.recorder,
        monitor_period=0.01,
    )


async def confirmed(ccm: CloudNodeLifecycleController) -> None:
    """Two passes a monitor period apart: a gone instance is deleted only on the second."""
    await ccm.monitor_nodes()
    await asyncio.sleep(ccm.monitor_period)
    await ccm.monitor_nodes()


def instance(world: World, name: str, state: str = "running") -> None:
    world.state.add_instance(name, zone="z", region="r", instance_type="t")
    if state != "running":
        world.state.set_instance_state(name, state)  # type: ignore[arg-type]


@pytest.fixture
def cloud_config() -> dict[str, Any]:
    return {"unknown_nodes": "notFound"}


async def test_a_not_ready_node_whose_instance_is_gone_is_deleted_with_an_event(
    world: World,
) -> None:
    instance(world, "gone", "terminated")
    await world.add(node_object("gone", tainted=False, ready="False"))
    ccm = controller(world)

    await ccm.monitor_nodes()
    assert world.api.object("/api/v1/nodes/gone") is not None, "one answer is not enough"
    await asyncio.sleep(ccm.monitor_period)
    await ccm.monitor_nodes()

    assert world.api.object("/api/v1/nodes/gone") is None
    assert world.recorder.reasons() == [wk.REASON_DELETING_NODE]
    event = world.recorder.events[0]
    assert (event.ref.kind, event.ref.name, event.type) == ("Node", "gone", "Normal")
    assert event.message == wk.MESSAGE_DELETING_NODE.format(node="gone")


async def test_an_uninitialised_node_without_an_instance_yet_is_kept_while_its_kubelet_reports(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    # A real kubelet registers before its instance exists and stays NotReady until its
    # network add-on runs; it would never register again once its Node is deleted.
    await world.add(node_object("early", tainted=True, ready="False"))
    ccm = controller(world)

    for _ in range(3):
        await confirmed(ccm)

    assert world.api.object("/api/v1/nodes/early") is not None
    assert world.node_writes() == []
    assert world.recorder.events == []
    kept = [r for r in caplog.records if "not deleting it" in r.getMessage()]
    assert len(kept) == 1, "logged once, not at every pass"
    assert "node early: not Ready and the instance does not exist yet" in kept[0].getMessage()

    # Initialised (the taint gone) and still without an instance: deleted as usual.
    await world.add(node_object("early", tainted=False, ready="False"))
    await confirmed(ccm)
    assert world.api.object("/api/v1/nodes/early") is None
    assert world.recorder.reasons() == [wk.REASON_DELETING_NODE]


async def test_an_uninitialised_node_whose_kubelet_stopped_reporting_is_deleted(
    world: World,
) -> None:
    """A machine gone before it was initialised (Ready Unknown): deleted, as upstream."""
    await world.add(node_object("stillborn", tainted=True, ready="Unknown"))
    await confirmed(controller(world))
    assert world.api.object("/api/v1/nodes/stillborn") is None
    assert world.recorder.reasons() == [wk.REASON_DELETING_NODE]


async def test_a_node_without_a_ready_condition_counts_as_unknown(world: World) -> None:
    await world.add(node_object("ghost", tainted=False))

    await confirmed(controller(world))

    assert world.api.object("/api/v1/nodes/ghost") is None


async def test_a_ready_node_is_never_deleted_nor_asked_about(world: World) -> None:
    await world.add(node_object("ready-ghost", tainted=False, ready="True"))

    await controller(world).monitor_nodes()

    assert world.api.object("/api/v1/nodes/ready-ghost") is not None
    assert world.state.calls() == {}
    assert world.node_writes() == []


async def test_a_ready_node_is_looked_at_again_once_its_object_changes(world: World) -> None:
    instance(world, "n1")
    await world.add(node_object("n1", tainted=False, ready="True"))
    ccm = controller(world)
    await ccm.monitor_nodes()
    await ccm.monitor_nodes()  # the same object: settled, not checked again
    assert world.state.calls() == {}

    world.state.set_instance_state("n1", "shutdown")
    node = world.node("n1")
    node["status"]["conditions"] = [{"type": "Ready", "status": "Unknown", "reason": "Test"}]
    await world.add(node)
    await world.settle("n1")
    await ccm.monitor_nodes()

    assert world.taint_keys("n1") == [wk.TAINT_SHUTDOWN]
    assert world.state.calls().keys() == {"InstanceExists", "InstanceShutdown"}


async def test_shutdown_instance_gets_the_taint_once_and_loses_it_when_ready(
    world: World,
) -> None:
    instance(world, "n1", "shutdown")
    await world.add(node_object("n1", tainted=False, ready="Unknown"))
    ccm = controller(world)

    await ccm.monitor_nodes()
    assert world.taint_keys("n1") == [wk.TAINT_SHUTDOWN]
    patches = world.api.count("PATCH", "/api/v1/nodes/n1")

    await world.settle("n1")
    await ccm.monitor_nodes()
    assert world.api.count("PATCH", "/api/v1/nodes/n1") == patches, "already tainted: no write"

    world.state.set_instance_state("n1", "running")
    node = world.node("n1")
    node["status"]["conditions"] = [{"type": "Ready", "status": "True", "reason": "Test"}]
    await world.add(node)
    await ccm.monitor_nodes()
    assert world.taint_keys("n1") == []


async def test_a_running_not_ready_node_is_left_alone(world: World) -> None:
    instance(world, "n1")
    await world.add(node_object("n1", tainted=False, ready="False"))

    await controller(world).monitor_nodes()

    assert world.taint_keys("n1") == []
    assert world.node_writes() == []


async def test_a_cloud_error_never_deletes(world: World) -> None:
    world.state.set_fault("InstanceExists", "error")
    await world.add(node_object("n1", tainted=False, ready="False"))

    await controller(world).monitor_nodes()

    assert world.api.object("/api/v1/nodes/n1") is not None
    assert world.recorder.events == []


async def test_a_hanging_cloud_never_deletes_and_does_not_stall_other_nodes(
    world: World,
) -> None:
    world.state.set_fault("InstanceExists", "hang", remaining=1)
    await world.add(node_object("a-hangs", tainted=False, ready="False"))
    await world.add(node_object("b-gone", tainted=False, ready="False"))

    await asyncio.wait_for(confirmed(controller(world)), 5)

    assert world.api.object("/api/v1/nodes/a-hangs") is not None
    assert world.api.object("/api/v1/nodes/b-gone") is None


async def test_a_failed_delete_emits_deleting_node_failed(world: World) -> None:
    await world.add(node_object("n1", tainted=False, ready="False"))
    world.api.fail_next("DELETE", "/api/v1/nodes/n1", status=500)

    await confirmed(controller(world))

    assert world.recorder.reasons() == [wk.REASON_DELETING_NODE, wk.REASON_DELETING_NODE_FAILED]
    failed = world.recorder.events[1]
    assert failed.type == "Warning"
    assert failed.message.startswith("Failed deleting node n1: ")


async def test_the_shutdown_taint_write_survives_a_conflict(world: World) -> None:
    instance(world, "n1", "shutdown")
    other = {"key": "dedicated", "value": "x", "effect": "NoExecute"}
    await world.add(node_object("n1", tainted=False, ready="False", taints=[other]))
    world.api.conflict_next_write("/api/v1/nodes/n1")

    await controller(world).monitor_nodes()

    assert world.taint_keys("n1") == ["dedicated", wk.TAINT_SHUTDOWN]


async def test_run_loops_until_shutdown(world: World) -> None:
    await world.add(node_object("gone", tainted=False, ready="False"))
    ccm = controller(world)
    running = asyncio.create_task(ccm.run())
    for _ in range(200):
        if world.api.object("/api/v1/nodes/gone") is None:
            break
        await asyncio.sleep(0.01)
    await ccm.shutdown()
    await asyncio.wait_for(running, 2)
    assert world.api.object("/api/v1/nodes/gone") is None


# -- V1 ----------------------------------------------------------------------


def v1_cloud(
    *,
    exists: bool = True,
    shutdown: Exception | bool = False,
    instance_id: Exception | None = None,
) -> FakeProvider:
    """A provider named "v1" with V1 instances only."""
    return FakeProvider(
        name="v1",
        capabilities={"instances"},
        answers={
            "node_addresses": (),
            "node_addresses_by_provider_id": (),
            "instance_id": instance_id or (lambda node_name: node_name),
            "instance_type": "",
            "instance_type_by_provider_id": "",
            "instance_exists_by_provider_id": exists,
            "instance_shutdown_by_provider_id": shutdown,
        },
    )


async def test_v1_instance_not_found_from_the_id_helper_means_gone(world: World) -> None:
    v1 = v1_cloud(instance_id=InstanceNotFoundError("no instance"))
    await world.add(node_object("n1", tainted=False, ready="False"))

    await confirmed(controller(world, v1))

    assert world.api.object("/api/v1/nodes/n1") is None


async def test_v1_not_implemented_shutdown_means_not_shut_down(world: World) -> None:
    v1 = v1_cloud(shutdown=NotImplementedByProviderError("InstanceShutdownByProviderID"))
    await world.add(node_object("n1", tainted=False, ready="False", provider_id="v1://n1"))

    await controller(world, v1).monitor_nodes()

    assert world.taint_keys("n1") == []
    assert world.api.object("/api/v1/nodes/n1") is not None


async def test_v1_shutdown_by_provider_id_taints(world: World) -> None:
    await world.add(node_object("n1", tainted=False, ready="False", provider_id="v1://n1"))

    await controller(world, v1_cloud(shutdown=True)).monitor_nodes()

    assert world.taint_keys("n1") == [wk.TAINT_SHUTDOWN]
    assert SHUTDOWN in world.node("n1")["spec"]["taints"]


async def test_an_error_between_two_gone_answers_starts_the_confirmation_over(
    world: World,
) -> None:
    await world.add(node_object("n1", tainted=False, ready="False"))
    ccm = controller(world)
    await ccm.monitor_nodes()  # gone, once
    await asyncio.sleep(ccm.monitor_period)
    world.state.set_fault("InstanceExists", "error", remaining=1)
    await ccm.monitor_nodes()  # an error: never counts
    await asyncio.sleep(ccm.monitor_period)
    await ccm.monitor_nodes()  # gone, once again
    assert world.api.object("/api/v1/nodes/n1") is not None
    await asyncio.sleep(ccm.monitor_period)
    await ccm.monitor_nodes()  # gone, confirmed
    assert world.api.object("/api/v1/nodes/n1") is None


async def test_with_deletion_off_a_gone_instance_only_taints_and_warns_once(
    world: World,
) -> None:
    await world.add(node_object("n1", tainted=False, ready="False"))
    ccm = CloudNodeLifecycleController(
        client=world.client,
        nodes=world.nodes,
        cloud=world.guarded(timeout=0.2),
        recorder=world.recorder,
        monitor_period=0.01,
        delete_nodes=False,
    )
    for _ in range(4):
        await ccm.monitor_nodes()
        await world.settle("n1")
        await asyncio.sleep(ccm.monitor_period)

    assert world.api.object("/api/v1/nodes/n1") is not None
    assert world.taint_keys("n1") == [wk.TAINT_SHUTDOWN]
    assert world.recorder.reasons() == [REASON_NODE_DELETION_DISABLED]
    assert "--enable-node-deletion=false" in world.recorder.events[0].message


async def test_another_providers_node_is_never_looked_at(world: World) -> None:
    await world.add(
        node_object("theirs", tainted=False, ready="False", provider_id="othercloud://i-1")
    )
    await world.add(node_object("excluded", tainted=False, ready="False"))
    ccm = CloudNodeLifecycleController(
        client=world.client,
        nodes=world.nodes,
        cloud=world.cloud,
        recorder=world.recorder,
        monitor_period=0.01,
        scope=NodeScope(provider="simulated", selector=parse_selector("!example.com/other")),
    )
    node = world.node("excluded")
    node["metadata"]["labels"]["example.com/other"] = ""
    await world.add(node)

    await confirmed(ccm)

    assert world.api.object("/api/v1/nodes/theirs") is not None
    assert world.api.object("/api/v1/nodes/excluded") is not None
    assert world.state.calls() == {}


async def test_a_node_whose_provider_id_has_no_scheme_is_looked_at(world: World) -> None:
    world.state.add_instance(
        "n17", zone="zone-b", region="region-1", instance_type="sim.large", instance_id="node-17"
    )
    world.state.set_instance_state("node-17", "shutdown")
    await world.add(node_object("n17", tainted=False, ready="False", provider_id="node-17"))
    ccm = CloudNodeLifecycleController(
        client=world.client,
        nodes=world.nodes,
        cloud=world.cloud,
        recorder=world.recorder,
        monitor_period=0.01,
        scope=NodeScope(provider="simulated"),
    )

    await ccm.monitor_nodes()

    assert world.taint_keys("n17") == [wk.TAINT_SHUTDOWN]


async def test_the_shutdown_taint_added_or_removed_is_logged_once_naming_the_node(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    instance(world, "n1", "shutdown")
    await world.add(node_object("n1", tainted=False, ready="Unknown"))
    ccm = controller(world)

    def said() -> list[str]:
        return [
            r.getMessage()
            for r in caplog.records
            if r.levelno >= logging.INFO and wk.TAINT_SHUTDOWN in r.getMessage()
        ]

    with caplog.at_level(logging.INFO, logger="kube_ccm.controllers.nodelifecycle"):
        await ccm.monitor_nodes()
        await world.settle("n1")
        await ccm.monitor_nodes()  # already tainted: nothing to say
        assert said() == [
            f"node n1: added the taint {wk.TAINT_SHUTDOWN}:NoSchedule: its instance is shut down"
        ]

        world.state.set_instance_state("n1", "running")
        node = world.node("n1")
        node["status"]["conditions"] = [{"type": "Ready", "status": "True", "reason": "Test"}]
        await world.add(node)
        await ccm.monitor_nodes()
        await world.settle("n1")
        await ccm.monitor_nodes()
        assert said()[1:] == [
            f"node n1: removed the taint {wk.TAINT_SHUTDOWN}:NoSchedule: the node is Ready"
        ]


# -- the node deletion guard ---------------------------------------------------------


def guarded_controller(world: World, *, guard: bool = True) -> CloudNodeLifecycleController:
    return CloudNodeLifecycleController(
        client=world.client,
        nodes=world.nodes,
        cloud=guarded(world.cloud, timeout=0.2),
        recorder=world.recorder,
        monitor_period=0.01,
        guard=DeletionGuard(metrics=world.metrics) if guard else None,
    )


FLEET = [f"n{i}" for i in range(5)]


async def not_ready_fleet(world: World) -> None:
    for name in FLEET:
        instance(world, name)
        await world.add(node_object(name, tainted=False, ready="False"))


def present(world: World) -> list[str]:
    return [n for n in FLEET if world.api.object(f"/api/v1/nodes/{n}") is not None]


async def passes(ccm: CloudNodeLifecycleController, count: int) -> None:
    for _ in range(count):
        await ccm.monitor_nodes()
        await asyncio.sleep(ccm.monitor_period)


async def test_a_blind_cloud_deletes_no_node_and_each_held_node_gets_one_warning(
    world: World,
) -> None:
    await not_ready_fleet(world)
    ccm = guarded_controller(world)
    world.state.set_blind(True)

    await passes(ccm, 4)

    assert present(world) == FLEET
    assert world.recorder.reasons() == [wk.REASON_NODE_DELETION_GUARDED] * 5
    assert {e.ref.name for e in world.recorder.events} == set(FLEET)
    assert all(e.type == "Warning" for e in world.recorder.events)
    assert "Check the cloud credentials, account, region" in world.recorder.events[0].message
    assert world.metrics.sample(wk.METRIC_NODE_DELETION_GUARD_HELD) == 5
    assert ccm.readiness_checks()[wk.READYZ_NODE_DELETION_GUARD]()[0] is False

    # The identity is back: nothing is deleted, the guard lets go.
    world.state.set_blind(False)
    await passes(ccm, 3)
    assert present(world) == FLEET
    assert world.recorder.reasons() == [wk.REASON_NODE_DELETION_GUARDED] * 5
    assert world.metrics.sample(wk.METRIC_NODE_DELETION_GUARD_HELD) == 0
    assert ccm.readiness_checks()[wk.READYZ_NODE_DELETION_GUARD]() == (True, "")


async def test_a_confirmed_mass_termination_deletes_the_nodes_one_per_pass(world: World) -> None:
    await not_ready_fleet(world)
    ccm = guarded_controller(world)
    for name in FLEET:
        world.state.set_instance_state(name, "terminated")
    await passes(ccm, 3)
    assert present(world) == FLEET
    trip = ccm.guard.trip if ccm.guard else None
    assert trip is not None

    for name in FLEET[:4]:
        confirmed_node = node_object(
            name,
            tainted=False,
            ready="False",
            labels={wk.LABEL_CONFIRM_NODE_DELETION: trip.id},
        )
        await world.add(confirmed_node)
    remaining = []
    for _ in range(6):
        await ccm.monitor_nodes()
        for name in FLEET:
            await world.settle(name)
        remaining.append(len(present(world)))
        await asyncio.sleep(ccm.monitor_period)

    assert remaining == [4, 3, 2, 1, 1, 1], "one confirmed Node per pass, the unconfirmed stays"
    assert present(world) == ["n4"]
    assert world.recorder.reasons().count(wk.REASON_DELETING_NODE) == 4


async def test_with_the_guard_off_a_blind_cloud_deletes_every_not_ready_node_as_upstream(
    world: World,
) -> None:
    await not_ready_fleet(world)
    ccm = guarded_controller(world, guard=False)
    world.state.set_blind(True)

    await ccm.monitor_nodes()
    assert present(world) == FLEET
    await asyncio.sleep(ccm.monitor_period)
    await ccm.monitor_nodes()

    assert present(world) == []
    assert world.recorder.reasons() == [wk.REASON_DELETING_NODE] * 5
    assert ccm.readiness_checks() == {}


async def test_with_node_deletion_off_there_is_nothing_to_guard(world: World) -> None:
    ccm = CloudNodeLifecycleController(
        client=world.client,
        nodes=world.nodes,
        cloud=guarded(world.cloud, timeout=0.2),
        recorder=world.recorder,
        monitor_period=0.01,
        delete_nodes=False,
        guard=DeletionGuard(),
    )
    assert ccm.guard is None
