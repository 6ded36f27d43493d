"""The Node deletion guard: no mass deletion when a cloud suddenly sees nothing.

The cloud node lifecycle controller deletes a NotReady Node whose instance the cloud
reports gone. A cloud asked under the wrong identity (a token that lost a read
privilege, another account's key, another region, another host) reports *every*
instance gone, and upstream then deletes every NotReady Node within seconds; a kubelet
whose Node is deleted never registers again. The guard, in the spirit of
kube-controller-manager's ``--unhealthy-zone-threshold``, holds those deletions.

**The rule.** Only Nodes this CCM serves count (its scope), and never a Node carrying
cluster-autoscaler's ``ToBeDeletedByClusterAutoscaler`` taint (its instance is
expected to go; kubelets cannot set taints on their Node once registered). A "gone"
answer is the cloud saying an instance does not exist, on either of the two checks
the controller makes before deleting; errors are no answer, and an uninitialised Node
kept while its kubelet reports is left out. Within ``window`` (the reports of the last
``window`` seconds, Nodes already deleted included), the guard trips when:

* **share**: at least ``min_nodes`` Nodes were reported gone and they are more than
  ``threshold`` of the Nodes served (those listed now plus those deleted in the
  window);
* **zone**: every Node of one zone (``topology.kubernetes.io/zone``) with at least
  two Nodes was reported gone;
* **every-node-asked**: since the last pass in which the cloud said some instance
  exists, it said "gone" about at least ``min_nodes`` Nodes and nothing else.

So fewer than ``min_nodes`` Nodes gone at once are deleted as without the guard
(one NotReady Node of three, two of a hundred), whatever the rule.

**Tripped.** Every Node reported gone in the window and still there is *held*: not
deleted, one Warning Event each (:data:`~kube_ccm.api.wellknown.REASON_NODE_DELETION_GUARDED`);
so is every Node reported gone while the guard stays tripped. One log line per trip
says what to check. The gauge :data:`~kube_ccm.api.wellknown.METRIC_NODE_DELETION_GUARD_HELD`
counts the held Nodes, the counter :data:`~kube_ccm.api.wellknown.METRIC_NODE_DELETION_GUARD_TRIPS`
the trips by rule.

**Resumption.**

* *The identity is back*: the cloud reports a held Node's instance as existing. The
  trip ends and everything is forgotten: every held Node is checked from scratch
  (two answers again, the rule again), so nothing is deleted in a burst.
* *An operator confirms* a real mass termination, Node by Node, with the label
  :data:`~kube_ccm.api.wellknown.LABEL_CONFIRM_NODE_DELETION` set to the trip's
  id (given in the log line and the Events): such Nodes are deleted one per pass, and
  each must still be reported gone. A confirmation of an older trip counts for
  nothing. The label's domain is ``node-restriction.kubernetes.io``: NodeRestriction
  refuses it from every kubelet, on its own Node too, so a node cannot ask for its own
  deletion (a kubelet may not delete its Node; deleted, it could register again
  without the taints an admin gave it).
* A held Node that turns Ready, is deleted by someone else or leaves the scope is no
  longer held; when none is left, the trip ends (the window's reports stay).

The guard decides once per pass, after every Node has been asked, so no deletion of a
pass happens before the pass's answers are counted. It holds no lock and does no I/O:
the controller feeds it and acts on its :class:`Decision`; ``clock`` and ``wall`` are
injectable for tests.
"""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

from kube_ccm.api import wellknown as wk
from kube_ccm.cloudprovider import CloudIdentityError
from kube_ccm.runtime.metrics import Metrics

log = logging.getLogger(__name__)

RULE_SHARE: Final = "share"
RULE_ZONE: Final = "zone"
RULE_EVERY_NODE_ASKED: Final = "every-node-asked"

MAX_NAMES_LOGGED: Final = 20
"""A trip's log line names at most this many Nodes (and says how many more)."""


@dataclass(frozen=True, slots=True)
class GuardSettings:
    """``--node-deletion-guard-threshold``, ``-window`` and ``-min-nodes``."""

    threshold: float = 0.3
    window: float = 600.0
    min_nodes: int = 3


@dataclass(frozen=True, slots=True)
class ServedNode:
    """A Node in this CCM's scope, as one pass saw it."""

    name: str
    zone: str = ""
    ready: bool = False
    exempt: bool = False
    """Marked for termination by a cluster autoscaler: never counted, never held."""
    confirmation: str = ""
    """The value of the confirmation label, if any."""


@dataclass(frozen=True, slots=True)
class Trip:
    id: str
    rule: str
    cause: str
    started: float


@dataclass
class Decision:
    """What the controller does at the end of a pass."""

    delete: list[str] = field(default_factory=list)
    """Nodes to delete now."""
    newly_held: list[str] = field(default_factory=list)
    """Nodes held from now on (one Warning Event each)."""
    restart: list[str] = field(default_factory=list)
    """Nodes whose confirmation starts over (the identity is back)."""
    trip: Trip | None = None
    """The trip in force after this pass."""


@dataclass(slots=True)
class _Report:
    at: float
    zone: str
    deleted: bool = False


def _utc_id(now: datetime.datetime) -> str:
    return now.strftime("%Y%m%dT%H%M%SZ")


class DeletionGuard:
    """Counts the cloud's "gone" answers per pass and holds deletions when they look
    like a blind cloud rather than terminated machines (see the module docstring)."""

    def __init__(
        self,
        settings: GuardSettings = GuardSettings(),
        *,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
    ) -> None:
        self.settings = settings
        self._clock = clock
        self._wall = wall
        self._reports: dict[str, _Report] = {}
        """Node → its latest "gone" answer within the window (deleted Nodes included)."""
        self._last_exists = -float("inf")
        """When the cloud last said some instance exists (a pass's time)."""
        self._trip: Trip | None = None
        self._last_id_base = ""
        self._id_sequence = 0
        self._held: set[str] = set()
        self._identity_error: tuple[float, str] | None = None
        # This pass.
        self._served: dict[str, ServedNode] = {}
        self._gone: set[str] = set()
        self._exists: set[str] = set()
        metrics = metrics or Metrics()
        self._held_gauge = metrics.gauge(
            wk.METRIC_NODE_DELETION_GUARD_HELD,
            "Nodes whose deletion the node deletion guard holds (their instances reported "
            "gone by a cloud that reports too many gone at once)",
        )
        self._trips = metrics.counter(
            wk.METRIC_NODE_DELETION_GUARD_TRIPS,
            "Times the node deletion guard tripped, by the rule that tripped it",
            ("rule",),
        )

    # -- what the controller tells it ------------------------------------------------

    @property
    def trip(self) -> Trip | None:
        return self._trip

    @property
    def held(self) -> frozenset[str]:
        return frozenset(self._held)

    def begin(self) -> None:
        """A pass starts."""
        self._gone.clear()
        self._exists.clear()

    def gone(self, name: str) -> None:
        """The cloud said ``name``'s instance does not exist."""
        self._gone.add(name)

    def exists(self, name: str) -> None:
        """The cloud said ``name``'s instance exists."""
        self._exists.add(name)

    def error(self, exc: BaseException) -> None:
        """A cloud call failed; a :class:`CloudIdentityError`'s hint is remembered for
        the next trip's log line."""
        if isinstance(exc, CloudIdentityError):
            self._identity_error = (self._clock(), exc.hint or str(exc))

    def decide(self, served: Iterable[ServedNode], candidates: Sequence[str]) -> Decision:
        """End of the pass: ``served`` are the Nodes this CCM serves now (every one,
        Ready or not); which of ``candidates`` (Nodes whose instance is confirmed gone:
        two answers a monitor period apart) to delete, which Nodes are held."""
        self._served = {node.name: node for node in served}
        now = self._clock()
        decision = Decision()
        window_start = now - self.settings.window
        self._reports = {n: r for n, r in self._reports.items() if r.at >= window_start}
        # Held Nodes that turned Ready, went away, left the scope or were marked for
        # termination by an autoscaler are no longer held.
        self._held = {n for n in self._held if self._holdable(n)}
        if self._trip is not None and self._held & self._exists:
            decision.restart = sorted(self._held)
            self._identity_back(sorted(self._held & self._exists))
            self._update_gauge()
            return decision
        counted_gone = {n for n in self._gone if n in self._served and not self._exempt(n)}
        for name in counted_gone:
            self._reports[name] = _Report(at=now, zone=self._served[name].zone)
        for name in self._exists:
            self._reports.pop(name, None)
        if self._exists:
            self._last_exists = now
        started = False
        if self._trip is None:
            tripped = self._rule()
            if tripped is not None:
                self._start_trip(*tripped, now)
                started = True
        if self._trip is not None:
            before = set(self._held)
            self._held |= {n for n in self._reports if self._holdable(n)}
            decision.newly_held = sorted(self._held - before)
            if started:
                self._log_trip(self._trip)
        decision.delete = self._deletable(candidates)
        for name in decision.delete:
            report = self._reports.get(name)
            if report is not None:
                report.deleted = True
        if self._trip is not None and not self._held:
            log.info(
                "node deletion guard: no Node is held any more (trip %s); deleting Nodes "
                "whose instance is gone as usual again",
                self._trip.id,
            )
            self._trip = None
        decision.trip = self._trip
        self._update_gauge()
        return decision

    # -- the rule --------------------------------------------------------------------

    def _exempt(self, name: str) -> bool:
        node = self._served.get(name)
        return node is not None and node.exempt

    def _holdable(self, name: str) -> bool:
        node = self._served.get(name)
        return node is not None and not node.ready and not node.exempt

    def _rule(self) -> tuple[str, str] | None:
        """The rule that trips, and why in words; None when none does: always when no
        Node was reported gone within the window, which every rule needs (a pass over
        every served Node saved at each monitor period: 0.1 s at 100,000 Nodes)."""
        if not self._reports:
            return None
        settings = self.settings
        deleted = {n for n, r in self._reports.items() if r.deleted and n not in self._served}
        served = {n for n, s in self._served.items() if not s.exempt} | deleted
        gone = {n: r for n, r in self._reports.items() if n in served}
        minimum = settings.min_nodes
        if len(gone) >= minimum and served and len(gone) > settings.threshold * len(served):
            return RULE_SHARE, (
                f"the cloud reported {len(gone)} of the {len(served)} Nodes this CCM serves "
                f"gone within {settings.window:g} s, more than "
                f"--node-deletion-guard-threshold={settings.threshold:g}"
            )
        zones: dict[str, set[str]] = {}
        for name in served:
            zone = gone[name].zone if name in deleted else self._served[name].zone
            if zone:
                zones.setdefault(zone, set()).add(name)
        for zone, members in sorted(zones.items()):
            if len(members) >= 2 and members <= gone.keys():
                return RULE_ZONE, (
                    f"the cloud reported all {len(members)} Nodes of zone {zone} gone "
                    f"within {settings.window:g} s"
                )
        since = [n for n, r in gone.items() if r.at > self._last_exists]
        if len(since) >= minimum:
            return RULE_EVERY_NODE_ASKED, (
                f"the cloud reported every Node it was asked about gone ({len(since)} Nodes, "
                f"none reported existing, at least --node-deletion-guard-min-nodes={minimum})"
            )
        return None

    def _deletable(self, candidates: Sequence[str]) -> list[str]:
        if self._trip is None:
            return list(candidates)
        free = [n for n in candidates if n not in self._held]
        confirmed = sorted(
            n
            for n in candidates
            if n in self._held
            and n in self._served
            and self._served[n].confirmation == self._trip.id
        )
        if confirmed:
            name = confirmed[0]  # one confirmed Node per pass
            self._held.discard(name)
            self._reports.pop(name, None)  # a confirmed termination counts for nothing
            log.info(
                "node deletion guard: deleting node %s, confirmed by its label %s=%s "
                "(%d more held)",
                name,
                wk.LABEL_CONFIRM_NODE_DELETION,
                self._trip.id,
                len(self._held),
            )
            free.append(name)
        return free

    # -- trips -----------------------------------------------------------------------

    def _start_trip(self, rule: str, cause: str, now: float) -> None:
        base = _utc_id(self._wall())
        if base == self._last_id_base:  # two trips in one second: still two ids
            self._id_sequence += 1
            trip_id = f"{base}-{self._id_sequence}"
        else:
            self._last_id_base, self._id_sequence, trip_id = base, 0, base
        self._trip = Trip(id=trip_id, rule=rule, cause=cause, started=now)
        self._trips.labels(rule=rule).inc()

    def _log_trip(self, trip: Trip) -> None:
        names = sorted(self._held)
        shown = " ".join(names[:MAX_NAMES_LOGGED])
        more = f" and {len(names) - MAX_NAMES_LOGGED} more" if len(names) > MAX_NAMES_LOGGED else ""
        hint = ""
        if self._identity_error is not None:
            at, text = self._identity_error
            if at >= trip.started - self.settings.window:
                hint = f"; the provider said: {text}"
        log.warning(
            "node deletion guard tripped (%s, trip %s): not deleting %d Nodes whose "
            "instances the cloud reports gone (%s%s): %s. A cloud that suddenly sees no "
            "instances is usually asked under the wrong identity: check the cloud "
            "credentials (expired, rotated, or short of the privilege to read "
            "instances), the account or project, the region, and the permissions%s. "
            "Deletion resumes by itself once the cloud reports one of these instances "
            "again; if they are really terminated, confirm with: kubectl label node "
            "%s %s=%s (one Node is then deleted per --node-monitor-period)",
            trip.rule,
            trip.id,
            len(names),
            shown,
            more,
            trip.cause,
            hint,
            shown if not more else "NODE...",
            wk.LABEL_CONFIRM_NODE_DELETION,
            trip.id,
        )

    def _identity_back(self, existing: list[str]) -> None:
        assert self._trip is not None
        log.warning(
            "node deletion guard: the cloud reports the instance of %s existing again "
            "(trip %s ends): its identity is back; the %d held Nodes are checked from "
            "scratch, none is deleted before two more answers and the rule",
            ", ".join(existing),
            self._trip.id,
            len(self._held),
        )
        self._trip = None
        self._held.clear()
        self._reports.clear()
        self._last_exists = self._clock()
        self._identity_error = None

    def message(self, name: str) -> str:
        """The Warning Event of a held Node."""
        trip = self._trip
        assert trip is not None
        return (
            f"Not deleting node {name} although the cloud reports its instance gone: "
            f"{trip.cause} (trip {trip.id}). Check the cloud credentials, account, region "
            "and permissions; deletion resumes once the cloud reports these instances "
            "again. If the instance is really terminated, confirm with: kubectl label "
            f"node {name} {wk.LABEL_CONFIRM_NODE_DELETION}={trip.id}"
        )

    def readiness(self) -> tuple[bool, str]:
        """For ``/readyz?verbose``: (not tripped, what it holds)."""
        if self._trip is None:
            return True, ""
        return False, f"tripped ({self._trip.rule}): {len(self._held)} Node deletions held"

    def _update_gauge(self) -> None:
        self._held_gauge.set(len(self._held))


__all__ = [
    "RULE_EVERY_NODE_ASKED",
    "RULE_SHARE",
    "RULE_ZONE",
    "Decision",
    "DeletionGuard",
    "GuardSettings",
    "ServedNode",
    "Trip",
]
