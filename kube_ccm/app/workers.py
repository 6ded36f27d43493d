"""``--worker-processes``: the controllers in worker processes under one leader lease.

One Python process runs on one core. With ``--worker-processes N`` (N > 1) the
daemon (the *parent*) keeps what makes it one cloud-controller-manager: the flags,
the one Lease (acquired, renewed and lost as without workers), the secure port
(health, ``/metrics``, ``/configz``) and the webhooks. Once it leads it starts the
workers, which run the controllers; it runs none itself.

* **What runs where** (:func:`plan_workers`): cloud-node-controller's Nodes and
  service-lb-controller's Services are split by a CRC-32 of their name (a
  :class:`~kube_ccm.runtime.shard.Shard`) across as many workers as that
  controller has ``--concurrent-*-syncs`` (at most N), the syncs split among
  them, so the flags keep counting syncs in the whole daemon. Every other
  enabled controller runs in worker 0. Each worker has its own informers (so its
  own watches) and queues only its shard's keys; a worker with nothing to run is
  not started.
* **One leader.** A worker writes only while the parent's lease is held: the
  parent sends each worker, every ``STAMP_PERIOD``, the monotonic time until
  which its lease is known to be its own (:meth:`LeaderElector.held_until`, the
  clock is the machine's); a worker's writes and cloud calls are refused after it,
  as the parent's own would be. Losing the lease kills the workers (SIGKILL) before
  the parent exits 1. A worker dies with its parent: ``PR_SET_PDEATHSIG`` and, for
  the moment in between, the end of its socket to the parent.
* **A worker that exits** (crashed, killed) ends the daemon with status 1, one
  line naming it: the supervisor restarts it, and a new leader starts afresh,
  rather than a half-sharded daemon running on.
* **SIGTERM**: the workers get SIGTERM and drain as a daemon does
  (``--shutdown-grace-period``); one that has not exited after that is killed.
* **Metrics**: a scrape asks every worker for its families over its socket and
  serves them merged with the parent's (:func:`merge_families`): one daemon to
  ``/metrics`` consumers. Readiness: ready once every worker's caches synced.

The wire between them is a Unix socket pair: length-prefixed pickles (parent and
workers are the same program, and nothing else holds the socket).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import os
import pickle
import signal
import socket
import struct
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client.metrics_core import Metric

from kube_ccm.api import wellknown as wk
from kube_ccm.app.options.config import DaemonConfig
from kube_ccm.runtime.shard import Shard

__all__ = [
    "SHARDED",
    "WorkerExitedError",
    "WorkerPlan",
    "WorkerPool",
    "guard_readiness",
    "plan_workers",
    "receive",
    "send",
]

log = logging.getLogger(__name__)

SHARDED: Mapping[str, str] = {
    wk.CONTROLLER_CLOUD_NODE: "concurrent_node_syncs",
    wk.CONTROLLER_SERVICE_LB: "concurrent_service_syncs",
}
"""The controllers whose keys are split, with the ``DaemonConfig`` field of their syncs."""

STAMP_PERIOD = 0.5
"""Seconds between two lease stamps sent to each worker."""
SCRAPE_TIMEOUT = 5.0
"""Seconds a scrape waits for a worker's metrics (then serves the last it gave)."""
_FRAME = struct.Struct("!I")


class WorkerExitedError(RuntimeError):
    """A worker process exited while the daemon ran: the daemon exits 1."""


@dataclass(frozen=True)
class WorkerPlan:
    """What worker ``index`` runs: controller names, the shard of each sharded one,
    and the syncs (``DaemonConfig`` field → value) it runs them with."""

    index: int
    controllers: frozenset[str]
    shards: Mapping[str, Shard]
    syncs: Mapping[str, int]

    def config(self, parent: DaemonConfig) -> DaemonConfig:
        """The worker's configuration: the parent's, with its controllers and syncs,
        without a lease, serving or webhooks of its own."""
        return dataclasses.replace(
            parent,
            controllers=self.controllers,
            leader_elect=False,
            secure_port=0,
            webhooks=frozenset(),
            worker_processes=1,
            concurrent_node_syncs=self._syncs(parent, "concurrent_node_syncs"),
            concurrent_node_status_updates=self._syncs(parent, "concurrent_node_status_updates"),
            concurrent_service_syncs=self._syncs(parent, "concurrent_service_syncs"),
        )

    def _syncs(self, parent: DaemonConfig, field: str) -> int:
        return self.syncs.get(field, int(getattr(parent, field)))


def _split(total: int, parts: int) -> list[int]:
    """``total`` as ``parts`` near-equal positive numbers (the first ones larger)."""
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def plan_workers(config: DaemonConfig, processes: int) -> list[WorkerPlan]:
    """The workers to start (see the module docstring); none has an empty plan."""
    enabled = frozenset(config.controllers)
    controllers: list[set[str]] = [set() for _ in range(processes)]
    shards: list[dict[str, Shard]] = [{} for _ in range(processes)]
    syncs: list[dict[str, int]] = [{} for _ in range(processes)]
    for name, field in SHARDED.items():
        if name not in enabled:
            continue
        total = int(getattr(config, field))
        count = max(1, min(processes, total))
        for index, share in enumerate(_split(total, count)):
            controllers[index].add(name)
            shards[index][name] = Shard(index, count)
            syncs[index][field] = share
            if name == wk.CONTROLLER_CLOUD_NODE and config.concurrent_node_status_updates:
                status = _split(max(config.concurrent_node_status_updates, count), count)
                syncs[index]["concurrent_node_status_updates"] = status[index]
    controllers[0] |= enabled - SHARDED.keys()
    return [
        WorkerPlan(i, frozenset(controllers[i]), dict(shards[i]), dict(syncs[i]))
        for i in range(processes)
        if controllers[i]
    ]


# -- the wire -------------------------------------------------------------------------


async def send(writer: asyncio.StreamWriter, message: tuple[Any, ...]) -> None:
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    writer.write(_FRAME.pack(len(body)) + body)
    await writer.drain()


async def receive(reader: asyncio.StreamReader) -> tuple[Any, ...]:
    """The next message; ``asyncio.IncompleteReadError`` at the end of the stream."""
    (size,) = _FRAME.unpack(await reader.readexactly(_FRAME.size))
    message = pickle.loads(await reader.readexactly(size))
    assert isinstance(message, tuple)
    return message


# -- the parent -----------------------------------------------------------------------


class _Worker:
    """One started worker process, as the parent sees it."""

    def __init__(
        self,
        plan: WorkerPlan,
        process: asyncio.subprocess.Process,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        self.plan = plan
        self.process = process
        self.reader = reader
        self.writer = writer
        self.synced = False
        self.families: list[Metric] = []
        self.scrape: asyncio.Future[list[Metric]] | None = None
        self.scrape_lock = asyncio.Lock()
        self.scrapes = 0

    def kill(self) -> None:
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()


class WorkerPool:
    """The parent's side: starts the workers, stamps their lease, gathers their
    metrics, and ends them (see the module docstring)."""

    def __init__(self, config: DaemonConfig, held_until: Callable[[], float]) -> None:
        self.config = config
        self.plans = plan_workers(config, config.worker_processes)
        self._held_until = held_until
        self._workers: list[_Worker] = []
        self._stopping = False
        self.synced = asyncio.Event()
        """Set once every worker's informers have synced."""

    def kill(self) -> None:
        """SIGKILL every worker now (the lease is lost: no write may follow)."""
        self._stopping = True
        for worker in self._workers:
            worker.kill()

    async def run(self) -> None:
        """Start the workers and serve them until cancelled (then stop them) or until
        one exits (:class:`WorkerExitedError`)."""
        if not self.plans:
            log.info("no controller to run: no worker process started")
            self.synced.set()
        try:
            for plan in self.plans:
                await self._start(plan)
                log.info(
                    "started worker process %d (pid %d): %s",
                    plan.index,
                    self._workers[-1].process.pid,
                    ", ".join(
                        f"{name} (shard {plan.shards[name].index + 1} of {plan.shards[name].count})"
                        if name in plan.shards
                        else name
                        for name in sorted(plan.controllers)
                    ),
                )
            async with asyncio.TaskGroup() as group:
                group.create_task(self._stamp())
                for worker in self._workers:
                    group.create_task(self._read(worker))
                    group.create_task(self._watch(worker))
        finally:
            await self._stop()

    async def _start(self, plan: WorkerPlan) -> None:
        """Start worker ``plan.index`` and hand it its configuration; one that dies
        before it has read it ends the pool as any exited worker does."""
        ours, theirs = socket.socketpair()
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "kube_ccm.app.workerproc",
                str(theirs.fileno()),
                str(os.getpid()),
                stdin=asyncio.subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
            )
        finally:
            theirs.close()
        reader, writer = await asyncio.open_unix_connection(sock=ours)
        worker = _Worker(plan, process, reader, writer)
        self._workers.append(worker)  # from here on, no way out leaves it running
        try:
            await send(
                writer, ("start", plan.config(self.config), dict(plan.shards), self._stamp_now())
            )
        except ConnectionError:
            raise self._exited(worker, await process.wait()) from None

    def _stamp_now(self) -> float:
        return math.inf if not self.config.leader_elect else self._held_until()

    async def _stamp(self) -> None:
        while True:
            await asyncio.sleep(STAMP_PERIOD)
            stamp = self._stamp_now()
            for worker in self._workers:
                with contextlib.suppress(ConnectionError):
                    await send(worker.writer, ("lease", stamp))

    async def _read(self, worker: _Worker) -> None:
        while True:
            try:
                message = await receive(worker.reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                return  # the process's exit is reported by _watch
            if message[0] == "synced":
                worker.synced = True
                if all(w.synced for w in self._workers):
                    self.synced.set()
            elif message[0] == "metrics":
                worker.families = message[1]
                if worker.scrape is not None and not worker.scrape.done():
                    worker.scrape.set_result(worker.families)

    async def _watch(self, worker: _Worker) -> None:
        status = await worker.process.wait()
        if not self._stopping:
            raise self._exited(worker, status)

    @staticmethod
    def _exited(worker: _Worker, status: int) -> WorkerExitedError:
        return WorkerExitedError(
            f"worker process {worker.plan.index} (pid {worker.process.pid}, "
            f"{', '.join(sorted(worker.plan.controllers))}) exited with status {status}; "
            "the controller manager exits so that it restarts whole"
        )

    async def metrics(self) -> list[list[Metric]]:
        """Every worker's metric families, asked for now (the last ones a worker gave
        when it does not answer within ``SCRAPE_TIMEOUT``)."""
        return list(await asyncio.gather(*(self._scrape(w) for w in self._workers)))

    async def _scrape(self, worker: _Worker) -> list[Metric]:
        async with worker.scrape_lock:
            if worker.process.returncode is not None:
                return worker.families
            worker.scrape = asyncio.get_running_loop().create_future()
            try:
                await send(worker.writer, ("metrics",))
                async with asyncio.timeout(SCRAPE_TIMEOUT):
                    return await worker.scrape
            except (TimeoutError, ConnectionError):
                return worker.families
            finally:
                worker.scrape = None

    async def shutdown(self, grace: float) -> None:
        """SIGTERM every worker and wait up to ``grace`` seconds (plus a little for
        their own exit) for them to drain; then kill what is left."""
        self._stopping = True
        for worker in self._workers:
            if worker.process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    worker.process.send_signal(signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(grace + 5.0):
                await asyncio.gather(*(w.process.wait() for w in self._workers))
        self.kill()

    async def _stop(self) -> None:
        """However the pool ends (after :meth:`shutdown`, or cancelled because the
        daemon failed or lost its lease): no worker outlives it."""
        self.kill()
        for worker in self._workers:
            with contextlib.suppress(Exception):
                await worker.process.wait()
            worker.writer.close()


def guard_readiness(groups: Iterable[Iterable[Metric]]) -> tuple[bool, str]:
    """The node deletion guard's ``/readyz?verbose`` condition read from the worker
    processes' metric families (the lifecycle controller runs in one of them)."""
    held = sum(
        sample.value
        for families in groups
        for family in families
        if family.name == wk.METRIC_NODE_DELETION_GUARD_HELD
        for sample in family.samples
    )
    if not held:
        return True, ""
    return False, f"tripped: {held:g} Node deletions held"
