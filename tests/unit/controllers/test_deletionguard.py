"""The node deletion guard's rule, on a fake clock: when it trips, what it holds, how
deletion resumes (the identity back, an operator's confirmation one Node at a time)."""

from __future__ import annotations

import datetime
import logging
from collections.abc import Iterable

import pytest

from kube_ccm.api import wellknown as wk
from kube_ccm.cloudprovider import CloudIdentityError
from kube_ccm.controllers.deletionguard import (
    RULE_EVERY_NODE_ASKED,
    RULE_SHARE,
    RULE_ZONE,
    Decision,
    DeletionGuard,
    GuardSettings,
    ServedNode,
)
from kube_ccm.runtime.metrics import Metrics


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.wall = datetime.datetime(2026, 11, 28, 13, 0, tzinfo=datetime.UTC)

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.wall += datetime.timedelta(seconds=seconds)


class World:
    """A guard, its clock and metrics, and the Nodes it serves."""

    def __init__(self, nodes: int, **settings: float) -> None:
        self.clock = Clock()
        self.metrics = Metrics()
        self.guard = DeletionGuard(
            GuardSettings(**settings),  # type: ignore[arg-type]
            metrics=self.metrics,
            clock=self.clock,
            wall=lambda: self.clock.wall,
        )
        self.nodes = {f"n{i}": ServedNode(f"n{i}", ready=True) for i in range(nodes)}

    def set(self, name: str, **fields: object) -> None:
        node = self.nodes.get(name, ServedNode(name))
        self.nodes[name] = ServedNode(**{**_fields(node), **fields})  # type: ignore[arg-type]

    def not_ready(self, *names: str, zone: str = "") -> None:
        for name in names:
            self.set(name, ready=False, **({"zone": zone} if zone else {}))

    def delete(self, *names: str) -> None:
        for name in names:
            self.nodes.pop(name)

    def pass_(
        self,
        gone: Iterable[str] = (),
        exists: Iterable[str] = (),
        candidates: Iterable[str] = (),
    ) -> Decision:
        """One pass a monitor period (5 s) after the last: the cloud's answers, then the
        decision; deleted Nodes leave the world."""
        self.clock.advance(5)
        self.guard.begin()
        for name in gone:
            self.guard.gone(name)
        for name in exists:
            self.guard.exists(name)
        decision = self.guard.decide(list(self.nodes.values()), sorted(candidates))
        self.delete(*decision.delete)
        return decision

    def held_gauge(self) -> float | None:
        return self.metrics.sample(wk.METRIC_NODE_DELETION_GUARD_HELD)

    def trips(self, rule: str) -> float | None:
        return self.metrics.sample(wk.METRIC_NODE_DELETION_GUARD_TRIPS + "_total", {"rule": rule})


def _fields(node: ServedNode) -> dict[str, object]:
    return {f: getattr(node, f) for f in ServedNode.__slots__}


def gone_twice(world: World, *names: str, exists: Iterable[str] = ()) -> Decision:
    """The controller's confirmation: a first "gone", then a second one that makes the
    Nodes candidates for deletion (``exists``: instances the cloud sees meanwhile)."""
    world.pass_(gone=names, exists=exists)
    return world.pass_(gone=names, exists=exists, candidates=names)


# -- small losses are deleted as without the guard ---------------------------------------


def test_one_not_ready_node_of_three_whose_instance_is_gone_is_deleted() -> None:
    world = World(3)
    world.not_ready("n0")
    decision = gone_twice(world, "n0")
    assert decision.delete == ["n0"]
    assert decision.trip is None


def test_two_nodes_gone_at_once_are_below_the_minimum_and_deleted() -> None:
    world = World(3)
    world.not_ready("n0", "n1")
    assert gone_twice(world, "n0", "n1").delete == ["n0", "n1"]


def test_a_single_node_cluster_loses_its_only_node_as_without_the_guard() -> None:
    world = World(1)
    world.not_ready("n0")
    assert gone_twice(world, "n0").delete == ["n0"]


# -- the three ways to trip -------------------------------------------------------------


def test_every_node_asked_about_gone_trips_and_nothing_is_deleted() -> None:
    world = World(100)
    names = ("n0", "n1", "n2")
    world.not_ready(*names)

    first = world.pass_(gone=names)
    assert first.trip is not None
    assert first.trip.rule == RULE_EVERY_NODE_ASKED
    assert first.newly_held == list(names)
    for _ in range(5):
        decision = world.pass_(gone=names, candidates=names)
        assert decision.delete == []
        assert decision.newly_held == [], "one Event per Node per trip"
    assert world.held_gauge() == 3
    assert world.trips(RULE_EVERY_NODE_ASKED) == 1


def test_an_instance_reported_existing_in_the_pass_stops_the_every_node_asked_rule() -> None:
    world = World(100)
    world.not_ready("n0", "n1", "n2", "n3")
    decision = gone_twice(world, "n0", "n1", "n2", exists=["n3"])  # the cloud sees
    assert decision.trip is None
    assert decision.delete == ["n0", "n1", "n2"]


def test_every_node_asked_counts_the_window_since_the_last_existing_instance() -> None:
    """A blind cloud while kubelets restart one by one (a rolling upgrade): each Node is
    gone at its turn; the third within the window trips, the first two were deleted."""
    world = World(100)
    for name in ("n0", "n1"):
        world.not_ready(name)
        assert gone_twice(world, name).delete == [name]
        world.clock.advance(120)
    world.not_ready("n2")
    decision = world.pass_(gone=["n2"])
    assert decision.trip is not None
    assert decision.trip.rule == RULE_EVERY_NODE_ASKED
    assert "3 Nodes" in decision.trip.cause


def test_no_node_reported_gone_never_trips_whatever_the_minimum() -> None:
    # Every rule rests on Nodes reported gone; with a minimum of 0 (refused by the
    # flag's validation, allowed by the settings) "every Node asked" used to trip on
    # zero of them.
    world = World(5, min_nodes=0)
    decision = world.pass_(exists=["n1"])
    decision = world.pass_()
    assert decision.trip is None
    assert world.trips(RULE_EVERY_NODE_ASKED) in (None, 0.0)


def test_gone_reports_older_than_the_window_are_forgotten() -> None:
    world = World(100, window=300.0)
    for name in ("n0", "n1", "n2"):
        world.not_ready(name)
        assert gone_twice(world, name).delete == [name]
        world.clock.advance(200)
    assert world.guard.trip is None


def test_more_than_the_threshold_of_the_served_nodes_gone_trips_the_share_rule() -> None:
    world = World(10)  # threshold 0.3: 4 of 10 is more, 3 of 10 is not
    world.not_ready("n0", "n1", "n2", "n9")
    decision = gone_twice(world, "n0", "n1", "n2", exists=["n9"])
    assert decision.trip is None
    assert decision.delete == ["n0", "n1", "n2"]
    world.not_ready("n3")
    decision = world.pass_(gone=["n3"], exists=["n9"])
    assert decision.trip is not None
    assert decision.trip.rule == RULE_SHARE
    assert "4 of the 10 Nodes" in decision.trip.cause, "deleted Nodes still count as served"
    assert decision.newly_held == ["n3"], "those already deleted cannot be held"


def test_every_node_of_a_zone_gone_trips_the_zone_rule_even_below_the_minimum() -> None:
    world = World(100)
    world.not_ready("n0", "n1", zone="zone-b")
    world.not_ready("n2", zone="zone-a")
    world.set("n3", zone="zone-a")
    decision = world.pass_(gone=["n0", "n1"], exists=["n2"])
    assert decision.trip is not None
    assert decision.trip.rule == RULE_ZONE
    assert "all 2 Nodes of zone zone-b" in decision.trip.cause


def test_a_zone_of_one_node_does_not_trip() -> None:
    world = World(100)
    world.not_ready("n0", zone="zone-c")
    world.not_ready("n1")
    assert gone_twice(world, "n0").delete == ["n0"]


def test_an_autoscalers_nodes_are_neither_counted_nor_held() -> None:
    """cluster-autoscaler taints what it terminates; kubelets cannot set that taint on
    their registered Node, so it stands for an admin's or a controller's intent."""
    world = World(10)
    names = [f"n{i}" for i in range(6)]
    for name in names:
        world.set(name, ready=False, exempt=True)
    decision = gone_twice(world, *names)
    assert decision.trip is None
    assert decision.delete == names


def test_more_nodes_for_the_minimum_hold_fewer() -> None:
    world = World(100, min_nodes=5)
    names = ("n0", "n1", "n2", "n3")
    world.not_ready(*names)
    assert gone_twice(world, *names).delete == list(names)


# -- while tripped ---------------------------------------------------------------------


def tripped(world: World, *names: str) -> str:
    world.not_ready(*names)
    decision = world.pass_(gone=names)
    assert decision.trip is not None
    return decision.trip.id


def test_a_node_reported_gone_while_tripped_is_held_too() -> None:
    world = World(100)
    tripped(world, "n0", "n1", "n2")
    world.not_ready("n7")
    decision = world.pass_(gone=["n0", "n1", "n2", "n7"])
    assert decision.newly_held == ["n7"]
    assert world.guard.held == {"n0", "n1", "n2", "n7"}


def test_the_identity_back_ends_the_trip_and_starts_every_held_node_from_scratch() -> None:
    world = World(100)
    tripped(world, "n0", "n1", "n2", "n3", "n4")
    world.pass_(gone=["n0", "n1", "n2", "n3", "n4"], candidates=["n0", "n1", "n2", "n3", "n4"])

    back = world.pass_(gone=["n0", "n1"], exists=["n2", "n3", "n4"], candidates=["n0", "n1"])
    assert back.delete == []
    assert back.restart == ["n0", "n1", "n2", "n3", "n4"]
    assert world.guard.trip is None
    assert world.held_gauge() == 0
    # n0 and n1 really are gone: a fresh confirmation, below the minimum: deleted.
    decision = gone_twice(world, "n0", "n1")
    assert decision.delete == ["n0", "n1"]
    assert decision.trip is None


def test_the_identity_back_with_many_really_gone_trips_again_rather_than_deleting_in_a_burst() -> (
    None
):
    world = World(100)
    names = [f"n{i}" for i in range(6)]
    tripped(world, *names)
    back = world.pass_(gone=names[:5], exists=["n5"], candidates=names[:5])
    assert back.trip is None
    assert back.delete == []
    # Five really gone, asked again from scratch: they trip the guard again.
    again = world.pass_(gone=names[:5])
    assert again.trip is not None
    assert again.delete == []
    assert world.pass_(gone=names[:5], candidates=names[:5]).delete == []


def test_a_confirmed_mass_termination_is_deleted_one_node_per_pass() -> None:
    world = World(100)
    names = ("n0", "n1", "n2", "n3")
    trip_id = tripped(world, *names)
    for name in ("n0", "n1", "n2"):
        world.set(name, confirmation=trip_id)
    world.set("n3", confirmation="20200101T000000Z")  # an older trip's: counts for nothing

    deleted = []
    for _ in range(5):
        decision = world.pass_(gone=list(world.guard.held), candidates=list(world.guard.held))
        assert len(decision.delete) <= 1
        deleted += decision.delete
    assert deleted == ["n0", "n1", "n2"]
    assert world.guard.held == {"n3"}
    assert world.held_gauge() == 1
    assert world.guard.trip is not None


def test_a_confirmation_waits_for_the_controllers_two_answers() -> None:
    world = World(100)
    trip_id = tripped(world, "n0", "n1", "n2")
    world.set("n0", confirmation=trip_id)
    assert world.pass_(gone=["n0", "n1", "n2"]).delete == []  # not yet a candidate
    assert world.pass_(gone=["n0", "n1", "n2"], candidates=["n0"]).delete == ["n0"]


def test_the_trip_ends_when_no_held_node_is_left() -> None:
    world = World(100)
    trip_id = tripped(world, "n0", "n1", "n2")
    world.set("n0", ready=True)  # its kubelet is back
    world.delete("n1")  # an operator deleted it
    world.set("n2", confirmation=trip_id)
    decision = world.pass_(gone=["n2"], candidates=["n2"])
    assert decision.delete == ["n2"]
    assert decision.trip is None
    assert world.held_gauge() == 0


def test_two_trips_in_one_second_have_two_ids() -> None:
    world = World(100)
    first = tripped(world, "n0", "n1", "n2")
    world.pass_(exists=["n0"])
    world.clock.now += 1  # the wall clock stays in the same second
    world.set("n0", ready=True)
    second = world.pass_(gone=["n1", "n2", "n3"])
    assert second.trip is not None
    assert second.trip.id != first
    assert first == "20261128T130005Z"


def test_one_log_line_per_trip_says_what_to_check_with_the_providers_hint(
    caplog: pytest.LogCaptureFixture,
) -> None:
    world = World(100)
    world.guard.error(
        CloudIdentityError(
            "the token sees no VM", hint="grant VM.Audit on / to the token kube-ccm@pve!ccm"
        )
    )
    with caplog.at_level(logging.INFO, logger="kube_ccm.controllers.deletionguard"):
        trip_id = tripped(world, "n0", "n1", "n2")
        world.pass_(gone=["n0", "n1", "n2"], candidates=["n0", "n1", "n2"])
    lines = [r.getMessage() for r in caplog.records if "guard tripped" in r.getMessage()]
    assert len(lines) == 1
    line = lines[0]
    for words in (
        "not deleting 3 Nodes",
        "n0 n1 n2",
        "credentials",
        "account",
        "region",
        "permissions",
        "grant VM.Audit on / to the token kube-ccm@pve!ccm",
        f"kubectl label node n0 n1 n2 {wk.LABEL_CONFIRM_NODE_DELETION}={trip_id}",
    ):
        assert words in line
    assert world.guard.readiness() == (False, "tripped (every-node-asked): 3 Node deletions held")
    assert f"{wk.LABEL_CONFIRM_NODE_DELETION}={trip_id}" in world.guard.message("n1")
