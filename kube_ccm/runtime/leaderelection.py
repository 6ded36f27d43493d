"""Leader election on a ``coordination.k8s.io/v1`` Lease, with client-go's semantics.

Compatible with client-go (the record fields, the timing rules and the
optimistic-concurrency updates are the same), so kube-ccm and an upstream Go
cloud-controller-manager respect each other's lease during a migration.

* A candidate acquires the Lease when it does not exist, when it already holds
  it, or when the holder's record has not changed for ``lease_duration`` as
  observed on *this* candidate's clock (client-go never trusts the holder's
  ``renewTime`` across machines).
* Every change is a PUT carrying the resourceVersion read, so two candidates
  can never both win a round: the loser gets 409 Conflict. The PUT sends the
  Lease as read (:class:`~kube_ccm.api.objects.Lease` keeps every field a
  client sets), with only the leader-election record changed.
* The leader renews every ``retry_period``; if it has not renewed for
  ``renew_deadline`` it has lost the lease: the work is cancelled and
  :class:`LeadershipLostError` raised, and the daemon exits 1. There is no
  voluntary release on shutdown (upstream CCM behaviour).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import random
import socket
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import msgspec

from kube_ccm.api.objects import Lease, LeaseSpec
from kube_ccm.runtime.client import ApiError, KubeClient
from kube_ccm.runtime.events import EventRecorder, ObjectReference
from kube_ccm.runtime.resources import LEASES
from kube_ccm.runtime.typedclient import TypedClient

log = logging.getLogger(__name__)

JITTER_FACTOR = 1.2
HEALTH_TIMEOUT_TOLERANCE = 20.0


def _hint(exc: ApiError, config: LeaderElectionConfig) -> str:
    """The error, and for a refusal what to grant: a CCM without its RBAC waits here."""
    if exc.status != 403:
        return str(exc)
    return (
        f"{exc}; kube-ccm needs get, create and update on leases.coordination.k8s.io "
        f"in {config.namespace}: apply the leader-election Role and RoleBinding of "
        "deploy/rbac.yaml (the Helm chart with rbac.create=true), or point "
        "--leader-elect-resource-namespace at a namespace where it has them"
    )


class LeadershipLostError(Exception):
    """This process held the lease and could not renew it within the renew deadline."""


@dataclass(frozen=True)
class LeaderElectionConfig:
    """client-go's defaults for controller managers."""

    namespace: str = "kube-system"
    name: str = "cloud-controller-manager"
    identity: str = ""
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0


def _record(spec: LeaseSpec) -> LeaseSpec:
    """The leader-election record of a Lease: the fields an observer compares."""
    return LeaseSpec(
        holder_identity=spec.holder_identity,
        lease_duration_seconds=spec.lease_duration_seconds,
        acquire_time=spec.acquire_time,
        renew_time=spec.renew_time,
        lease_transitions=spec.lease_transitions,
    )


def default_identity() -> str:
    """``<hostname>_<random UUID>``, as upstream controller managers use."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


def _micro_time(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class LeaderElector:
    """Acquire, hold and renew one Lease; run work only while holding it."""

    def __init__(
        self,
        client: KubeClient,
        config: LeaderElectionConfig,
        *,
        recorder: EventRecorder | None = None,
        on_leader_change: Callable[[bool], None] | None = None,
    ) -> None:
        self._api = TypedClient(client)
        self.config = config
        self.identity = config.identity or default_identity()
        self._recorder = recorder
        self._on_leader_change = on_leader_change
        self._path = LEASES.path(config.name, namespace=config.namespace)
        """For messages."""
        self._observed_record: LeaseSpec | None = None
        self._observed_at = 0.0
        self._last_renew = 0.0
        self.is_leader = False
        self._written: Lease | None = None
        """The Lease as this elector last wrote it (for the optimistic renew)."""

    # -- health ---------------------------------------------------------------

    def healthy(self) -> bool:
        """The ``leaderElection`` health check: false only for a leader that stopped renewing."""
        if not self.is_leader:
            return True
        loop = asyncio.get_running_loop()
        overdue = loop.time() - self._last_renew
        return overdue <= self.config.lease_duration + HEALTH_TIMEOUT_TOLERANCE

    @property
    def lease_collection_path(self) -> str:
        """The API path of the Leases in the lease's namespace (the elector writes there)."""
        return LEASES.path(namespace=self.config.namespace)

    def lease_in_doubt(self) -> str | None:
        """``None`` while this replica leads and renewed its lease less than
        ``renew_deadline`` ago (measured from when the renewal was sent); else why the
        lease is not known to be its own. ``renew_deadline`` < ``lease_duration``, so
        no other replica can have taken the lease over while this says ``None``.

        The renew loop notices a lost lease at its next turn; a process that was
        stopped (SIGSTOP, a VM pause, an event loop blocked) resumes with workers
        ready to write before that turn. The daemon asks this before every write and
        cloud call, so they wait for the renew loop instead of racing it."""
        if not self.is_leader:
            return "this replica does not hold the leader lease"
        since = asyncio.get_running_loop().time() - self._last_renew
        if since >= self.config.renew_deadline:
            return (
                f"the leader lease was last renewed {since:.1f} s ago, more than the "
                f"renew deadline ({self.config.renew_deadline:g} s); it may be another's"
            )
        return None

    def held_until(self) -> float:
        """The event loop time (``time.monotonic``) until which :meth:`lease_in_doubt`
        says ``None`` unless the lease is renewed again; 0 when not leading. Worker
        processes (``--worker-processes``) are given it to guard their writes.

        It is when the last successful renewal was *sent* plus ``renew_deadline``:
        the renewTime plus ``lease_duration`` minus a safety margin of
        ``lease_duration - renew_deadline``, all on this process's monotonic clock.
        Another candidate takes over only ``lease_duration`` after it *observed* that
        renewal (client-go's observedTime), which cannot be before it was sent; the
        margin covers clock-rate differences and the apiserver's delay. A stopped
        process resumes with its monotonic clock moved on, so it is past this at once."""
        if not self.is_leader:
            return 0.0
        return self._last_renew + self.config.renew_deadline

    # -- running --------------------------------------------------------------

    async def run(self, work: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Acquire the lease, then run ``work`` while renewing it.

        Returns when ``work`` returns. Raises :class:`LeadershipLostError` (after
        cancelling ``work``) when the lease cannot be renewed in time.
        """
        await self._acquire()
        work_task = asyncio.create_task(work(), name="leader-work")
        renew_task = asyncio.create_task(self._renew_loop(), name="leader-renew")
        try:
            await asyncio.wait({work_task, renew_task}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (work_task, renew_task):
                task.cancel()
            await asyncio.gather(work_task, renew_task, return_exceptions=True)
        if renew_task.done() and not renew_task.cancelled():
            error = renew_task.exception()
            if error is not None:
                raise error
        if work_task.done() and not work_task.cancelled():
            work_task.result()

    async def _acquire(self) -> None:
        log.info(
            "attempting to acquire leader lease %s/%s...", self.config.namespace, self.config.name
        )
        while True:
            if await self._try_acquire_or_renew():
                self._set_leader(True)
                log.info(
                    "successfully acquired lease %s/%s as %s",
                    self.config.namespace,
                    self.config.name,
                    self.identity,
                )
                if self._recorder is not None:
                    self._recorder.event(
                        ObjectReference(
                            kind="Lease",
                            name=self.config.name,
                            namespace=self.config.namespace,
                            api_version="coordination.k8s.io/v1",
                        ),
                        "Normal",
                        "LeaderElection",
                        f"{self.identity} became leader",
                    )
                return
            await asyncio.sleep(
                self.config.retry_period * (1 + random.random() * (JITTER_FACTOR - 1))
            )

    async def _renew_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.config.retry_period)
            deadline = self._last_renew + self.config.renew_deadline
            renewed = False
            while loop.time() < deadline:
                try:
                    async with asyncio.timeout(max(0.1, deadline - loop.time())):
                        renewed = await self._try_acquire_or_renew()
                except TimeoutError:
                    renewed = False
                if renewed:
                    break
                await asyncio.sleep(
                    min(self.config.retry_period / 4, max(0.0, deadline - loop.time()))
                )
            if not renewed:
                self._set_leader(False)
                log.error(
                    "failed to renew lease %s/%s: leaderelection lost",
                    self.config.namespace,
                    self.config.name,
                )
                raise LeadershipLostError(
                    f"leaderelection lost: could not renew lease {self.config.namespace}/"
                    f"{self.config.name} within {self.config.renew_deadline:g} s"
                )

    def _set_leader(self, leader: bool) -> None:
        if leader != self.is_leader and self._on_leader_change is not None:
            self._on_leader_change(leader)
        self.is_leader = leader

    async def _try_acquire_or_renew(self) -> bool:
        loop = asyncio.get_running_loop()
        if await self._renew_optimistically():
            return True
        now = _micro_time(_utcnow())
        record = LeaseSpec(
            holder_identity=self.identity,
            lease_duration_seconds=int(self.config.lease_duration),
            acquire_time=now,
            renew_time=now,
            lease_transitions=0,
        )
        name, namespace = self.config.name, self.config.namespace
        try:
            lease = await self._api.get(LEASES, name, namespace=namespace)
        except ApiError as exc:
            if not exc.not_found:
                log.warning("error retrieving lease %s: %s", self._path, _hint(exc, self.config))
                return False
            sent = loop.time()
            try:
                self._written = await self._api.create(
                    LEASES, Lease.new(name, namespace, record), namespace=namespace
                )
            except ApiError as create_exc:
                log.warning(
                    "error creating lease %s: %s", self._path, _hint(create_exc, self.config)
                )
                return False
            self._observe(record, loop.time())
            self._last_renew = sent
            return True
        except Exception as exc:
            log.warning("error retrieving lease %s: %s", self._path, exc)
            return False

        spec = lease.spec
        observed = _record(spec)
        if observed != self._observed_record:
            self._observe(observed, loop.time())
        holder = spec.holder_identity or ""
        duration = spec.lease_duration_seconds or self.config.lease_duration
        held_by_other = holder and holder != self.identity
        if held_by_other and self._observed_at + float(duration) > loop.time():
            return False  # the lease is held and not expired
        if holder == self.identity:
            record = msgspec.structs.replace(
                record,
                acquire_time=spec.acquire_time or record.acquire_time,
                lease_transitions=spec.lease_transitions or 0,
            )
        else:
            record = msgspec.structs.replace(
                record, lease_transitions=(spec.lease_transitions or 0) + 1
            )
        updated = msgspec.structs.replace(
            lease,
            spec=msgspec.structs.replace(
                spec,
                holder_identity=record.holder_identity,
                lease_duration_seconds=record.lease_duration_seconds,
                acquire_time=record.acquire_time,
                renew_time=record.renew_time,
                lease_transitions=record.lease_transitions,
            ),
        )
        sent = loop.time()
        try:
            self._written = await self._api.replace(LEASES, name, updated, namespace=namespace)
        except ApiError as exc:
            if not exc.conflict:
                log.warning("error updating lease %s: %s", self._path, _hint(exc, self.config))
            return False
        except Exception as exc:
            log.warning("error updating lease %s: %s", self._path, exc)
            return False
        self._observe(record, loop.time())
        self._last_renew = sent
        return True

    async def _renew_optimistically(self) -> bool:
        """client-go's fast path: a leader whose lease is still valid renews with one
        update of the Lease it last wrote, no GET first. Any failure (a conflict
        means someone else wrote it) falls back to the full read-then-write."""
        loop = asyncio.get_running_loop()
        written, self._written = self._written, None
        if (
            written is None
            or not self.is_leader
            or self._observed_at + self.config.lease_duration <= loop.time()
        ):
            return False
        spec = msgspec.structs.replace(written.spec, renew_time=_micro_time(_utcnow()))
        sent = loop.time()
        try:
            self._written = await self._api.replace(
                LEASES,
                self.config.name,
                msgspec.structs.replace(written, spec=spec),
                namespace=self.config.namespace,
            )
        except Exception as exc:
            log.info("optimistic renew of lease %s failed (%s); reading it first", self._path, exc)
            return False
        self._observe(_record(spec), loop.time())
        self._last_renew = sent
        return True

    def _observe(self, record: LeaseSpec, at: float) -> None:
        self._observed_record = _record(record)
        self._observed_at = at
