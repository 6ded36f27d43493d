"""A deduplicating, rate-limited work queue with client-go's semantics, for asyncio.

The rules every controller relies on:

* **Deduplication.** An item added while it waits is stored once. An item added
  while a worker processes it is marked dirty and handed out again after
  ``done`` — so one item is never processed by two workers at once, and an
  update that arrives mid-sync is never lost.
* **Retries.** ``add_rate_limited`` re-adds after the limiter's delay (per-item
  exponential backoff, a global bucket); ``forget`` resets the backoff after a
  success; ``add_after`` re-adds after a fixed delay (waiting items are
  deduplicated too, keeping the earliest time).
* **Shutdown.** ``shut_down`` makes ``get`` return ``None`` at once — queued
  items are abandoned (the next leader lists everything again) — and ignores
  new adds; ``shut_down_with_drain`` also waits until every item being
  processed is ``done``. This is how SIGTERM lets in-flight syncs finish
  without starting new ones.

Metrics are client-go's ``workqueue_*`` family, labelled with the queue name.
:func:`run_workers` is the worker loop controllers share.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

from prometheus_client import Counter, Gauge, Histogram

from kube_ccm.api import wellknown as wk
from kube_ccm.runtime.metrics import Metrics, exponential_buckets
from kube_ccm.runtime.ratelimit import RateLimiter

log = logging.getLogger(__name__)

T = TypeVar("T", bound=Hashable)

_DURATION_BUCKETS = exponential_buckets(10e-9, 10, 10)


class _QueueMetrics:
    def __init__(self, metrics: Metrics, name: str, queue: RateLimitingQueue[T]) -> None:
        # Every series is labelled with the queue's name.
        def gauge(metric: str, documentation: str) -> Gauge:
            return metrics.gauge(metric, documentation, ("name",)).labels(name=name)

        def counter(metric: str, documentation: str) -> Counter:
            return metrics.counter(metric, documentation, ("name",)).labels(name=name)

        def histogram(metric: str, documentation: str) -> Histogram:
            return metrics.histogram(metric, documentation, _DURATION_BUCKETS, ("name",)).labels(
                name=name
            )

        self.depth = gauge(wk.METRIC_WORKQUEUE_DEPTH, "Current depth of workqueue")
        self.adds = counter(
            wk.METRIC_WORKQUEUE_ADDS_TOTAL, "Total number of adds handled by workqueue"
        )
        self.queue_latency = histogram(
            wk.METRIC_WORKQUEUE_QUEUE_DURATION,
            "How long in seconds an item stays in workqueue before being requested.",
        )
        self.work_duration = histogram(
            wk.METRIC_WORKQUEUE_WORK_DURATION,
            "How long in seconds processing an item from workqueue takes.",
        )
        self.retries = counter(
            wk.METRIC_WORKQUEUE_RETRIES_TOTAL, "Total number of retries handled by workqueue"
        )
        gauge(
            wk.METRIC_WORKQUEUE_UNFINISHED_WORK,
            "How many seconds of work has been done that is in progress and hasn't been observed "
            "by work_duration. Large values indicate stuck threads.",
        ).set_function(queue.unfinished_work_seconds)
        gauge(
            wk.METRIC_WORKQUEUE_LONGEST_RUNNING_PROCESSOR,
            "How many seconds has the longest running processor for workqueue been running.",
        ).set_function(queue.longest_running_processor_seconds)


class RateLimitingQueue(Generic[T]):
    """See the module docstring. Single event loop; not thread-safe."""

    def __init__(
        self,
        name: str,
        limiter: RateLimiter,
        metrics: Metrics | None = None,
        *,
        owns: Callable[[T], bool] | None = None,
    ) -> None:
        self.name = name
        self._owns = owns
        """Items this queue takes (``--worker-processes``: this process's shard); None: all."""
        self._limiter = limiter
        self._queue: deque[T] = deque()
        self._dirty: set[T] = set()
        self._processing: dict[T, float] = {}
        self._added_at: dict[T, float] = {}
        self._waiting: dict[T, tuple[float, asyncio.TimerHandle]] = {}
        self._shutting_down = False
        self._getters: deque[asyncio.Future[None]] = deque()
        self._drainers: list[asyncio.Future[None]] = []
        self._metrics = _QueueMetrics(metrics, name, self) if metrics else None

    # -- adding ---------------------------------------------------------------

    def add(self, item: T) -> None:
        """Queue ``item`` unless it is already queued; if it is being processed, after ``done``."""
        if self._shutting_down or item in self._dirty:
            return
        if self._owns is not None and not self._owns(item):
            return
        if self._metrics:
            self._metrics.adds.inc()
        self._dirty.add(item)
        if item in self._processing:
            return
        self._push(item)

    def add_after(self, item: T, delay: float) -> None:
        """Queue ``item`` after ``delay`` seconds (the earliest pending time wins)."""
        if self._shutting_down or (self._owns is not None and not self._owns(item)):
            return
        if delay <= 0:
            self.add(item)
            return
        loop = asyncio.get_running_loop()
        ready_at = loop.time() + delay
        pending = self._waiting.get(item)
        if pending is not None:
            if pending[0] <= ready_at:
                return
            pending[1].cancel()
        handle = loop.call_at(ready_at, self._fire, item)
        self._waiting[item] = (ready_at, handle)

    def add_rate_limited(self, item: T) -> None:
        """Queue ``item`` after the limiter's delay, counting one more failure."""
        if self._metrics:
            self._metrics.retries.inc()
        self.add_after(item, self._limiter.when(item))

    def forget(self, item: T) -> None:
        """Reset ``item``'s backoff (call after a successful sync)."""
        self._limiter.forget(item)

    def num_requeues(self, item: T) -> int:
        return self._limiter.num_requeues(item)

    # -- processing -----------------------------------------------------------

    async def get(self) -> T | None:
        """The next item to process (mark it ``done`` later), or ``None`` once shut down."""
        while not self._queue and not self._shutting_down:
            waiter = asyncio.get_running_loop().create_future()
            self._getters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                with contextlib.suppress(ValueError):
                    self._getters.remove(waiter)
                if waiter.done() and not waiter.cancelled():
                    self._wake_getter()  # pass the wake-up on; we will not take the item
                raise
        if self._shutting_down:
            return None
        item = self._queue.popleft()
        now = time.monotonic()
        self._processing[item] = now
        self._dirty.discard(item)
        added = self._added_at.pop(item, now)
        if self._metrics:
            self._metrics.depth.dec()
            self._metrics.queue_latency.observe(now - added)
        return item

    def done(self, item: T) -> None:
        """Processing of ``item`` finished; re-queue it if it was added meanwhile."""
        started = self._processing.pop(item, None)
        if started is not None and self._metrics:
            self._metrics.work_duration.observe(time.monotonic() - started)
        if item in self._dirty and not self._shutting_down:
            self._push(item)
        if not self._processing:
            for drainer in self._drainers:
                if not drainer.done():
                    drainer.set_result(None)
            self._drainers.clear()

    def __len__(self) -> int:
        return len(self._queue)

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    def shut_down(self) -> None:
        """Hand out nothing more; ignore new adds; cancel delayed adds."""
        self._shutting_down = True
        for _, handle in self._waiting.values():
            handle.cancel()
        self._waiting.clear()
        while self._getters:
            self._wake_getter()

    async def shut_down_with_drain(self) -> None:
        """:meth:`shut_down`, then wait until every item being processed is ``done``."""
        self.shut_down()
        if self._processing:
            drained = asyncio.get_running_loop().create_future()
            self._drainers.append(drained)
            await drained

    # -- metrics --------------------------------------------------------------

    def unfinished_work_seconds(self) -> float:
        now = time.monotonic()
        return sum(now - started for started in self._processing.values())

    def longest_running_processor_seconds(self) -> float:
        if not self._processing:
            return 0.0
        return time.monotonic() - min(self._processing.values())

    # -- internals ------------------------------------------------------------

    def _push(self, item: T) -> None:
        self._queue.append(item)
        self._added_at[item] = time.monotonic()
        if self._metrics:
            self._metrics.depth.inc()
        self._wake_getter()

    def _fire(self, item: T) -> None:
        self._waiting.pop(item, None)
        self.add(item)

    def _wake_getter(self) -> None:
        while self._getters:
            waiter = self._getters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return


async def run_workers(
    queue: RateLimitingQueue[T],
    handler: Callable[[T], Awaitable[None]],
    workers: int,
    *,
    retry_after: Callable[[Exception], float | None] | None = None,
) -> None:
    """Run ``workers`` loops that process items until the queue shuts down.

    Success → ``forget``. An exception for which ``retry_after`` returns a delay
    → re-added after exactly that delay, backoff untouched (how the service
    controller honours the provider's RetryError). Any other exception → logged
    ``error syncing '<item>': <error>, requeuing`` and re-added rate-limited.
    Cancellation propagates; the item being processed is still marked done.
    """

    async def worker() -> None:
        while (item := await queue.get()) is not None:
            try:
                await handler(item)
            except Exception as exc:
                delay = retry_after(exc) if retry_after else None
                if delay is not None:
                    log.warning("error syncing %r: %s, retrying after %g s", item, exc, delay)
                    queue.add_after(item, delay)
                else:
                    log.error("error syncing %r: %s, requeuing", item, exc)
                    queue.add_rate_limited(item)
            else:
                queue.forget(item)
            finally:
                queue.done(item)

    async with asyncio.TaskGroup() as group:
        for _ in range(max(workers, 1)):
            group.create_task(worker())
