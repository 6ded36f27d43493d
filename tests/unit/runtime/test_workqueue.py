"""Work queue: deduplication, no concurrent processing of one item, retries, shutdown."""

from __future__ import annotations

import asyncio

import pytest

from kube_ccm.runtime.metrics import Metrics
from kube_ccm.runtime.ratelimit import ItemExponentialFailureRateLimiter
from kube_ccm.runtime.workqueue import RateLimitingQueue, run_workers


def make_queue(metrics: Metrics | None = None) -> RateLimitingQueue[str]:
    return RateLimitingQueue("test", ItemExponentialFailureRateLimiter(0.01, 0.08), metrics)


async def test_adding_a_waiting_item_twice_queues_it_once() -> None:
    queue = make_queue()
    for name in ("a", "b", "a", "a"):
        queue.add(name)
    assert len(queue) == 2
    assert await queue.get() == "a"
    assert await queue.get() == "b"


async def test_item_added_while_processing_is_handed_out_again_after_done() -> None:
    queue = make_queue()
    queue.add("a")
    item = await queue.get()
    queue.add("a")
    assert len(queue) == 0, "never handed to a second worker while in flight"
    assert item is not None
    queue.done(item)
    assert len(queue) == 1
    assert await queue.get() == "a"


async def test_get_waits_for_an_add() -> None:
    queue = make_queue()
    getter = asyncio.create_task(queue.get())
    await asyncio.sleep(0.01)
    assert not getter.done()
    queue.add("late")
    assert await asyncio.wait_for(getter, 1) == "late"


async def test_cancelled_getter_does_not_swallow_an_item() -> None:
    queue = make_queue()
    first = asyncio.create_task(queue.get())
    second = asyncio.create_task(queue.get())
    await asyncio.sleep(0)
    queue.add("x")
    first.cancel()
    results = await asyncio.gather(first, asyncio.wait_for(second, 1), return_exceptions=True)
    assert isinstance(results[0], asyncio.CancelledError) or results[0] == "x"
    assert "x" in results


async def test_add_after_keeps_the_earliest_time() -> None:
    queue = make_queue()
    queue.add_after("a", 10)
    queue.add_after("a", 0.02)
    queue.add_after("a", 5)
    assert len(queue) == 0
    assert await asyncio.wait_for(queue.get(), 1) == "a"


async def test_rate_limited_adds_back_off_and_forget_resets() -> None:
    queue = make_queue()
    loop = asyncio.get_running_loop()
    queue.add_rate_limited("a")
    queue.add_rate_limited("a")
    assert queue.num_requeues("a") == 2
    started = loop.time()
    assert await asyncio.wait_for(queue.get(), 1) == "a"
    assert loop.time() - started >= 0.009
    queue.forget("a")
    assert queue.num_requeues("a") == 0


async def test_shut_down_releases_getters_ignores_adds_and_cancels_delayed_adds() -> None:
    queue = make_queue()
    getter = asyncio.create_task(queue.get())
    await asyncio.sleep(0)
    queue.add_after("later", 0.01)
    queue.shut_down()
    assert await asyncio.wait_for(getter, 1) is None
    queue.add("new")
    await asyncio.sleep(0.03)
    assert len(queue) == 0
    assert await queue.get() is None


async def test_shut_down_with_drain_waits_for_items_in_flight() -> None:
    queue = make_queue()
    queue.add("busy")
    item = await queue.get()
    assert item == "busy"
    drain = asyncio.create_task(queue.shut_down_with_drain())
    await asyncio.sleep(0.02)
    assert not drain.done(), "an item is still being processed"
    queue.done(item)
    await asyncio.wait_for(drain, 1)


async def test_run_workers_retries_failures_with_backoff_and_forgets_success() -> None:
    queue = make_queue()
    attempts: list[str] = []

    async def handler(item: str) -> None:
        attempts.append(item)
        if len(attempts) < 3:
            raise RuntimeError("cloud says no")
        queue.shut_down()

    queue.add("node-1")
    await asyncio.wait_for(run_workers(queue, handler, 1), 2)
    assert attempts == ["node-1"] * 3
    assert queue.num_requeues("node-1") == 0, "success forgets the backoff"


async def test_run_workers_honours_a_fixed_retry_delay_without_backoff() -> None:
    queue = make_queue()
    calls = 0

    class LaterError(Exception):
        pass

    async def handler(item: str) -> None:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise LaterError(item)
        queue.shut_down()

    def retry_after(exc: Exception) -> float | None:
        return 0.01 if isinstance(exc, LaterError) else None

    queue.add("svc")
    await asyncio.wait_for(run_workers(queue, handler, 1, retry_after=retry_after), 2)
    assert calls == 3
    assert queue.num_requeues("svc") == 0, "fixed-delay retries do not count as failures"


async def test_run_workers_never_processes_one_item_concurrently() -> None:
    queue = make_queue()
    active: set[str] = set()
    overlaps = 0
    processed = 0

    async def handler(item: str) -> None:
        nonlocal overlaps, processed
        if item in active:
            overlaps += 1
        active.add(item)
        await asyncio.sleep(0.001)
        queue.add(item if processed < 50 else "other")
        active.discard(item)
        processed += 1
        if processed >= 60:
            queue.shut_down()

    for i in range(4):
        queue.add(f"n{i}")
    await asyncio.wait_for(run_workers(queue, handler, 8), 5)
    assert overlaps == 0
    assert processed >= 60


async def test_queue_metrics_use_client_go_names() -> None:
    metrics = Metrics()
    queue: RateLimitingQueue[str] = RateLimitingQueue(
        "Nodes", ItemExponentialFailureRateLimiter(0.01, 1), metrics
    )
    queue.add("a")
    queue.add("b")
    queue.add("a")
    assert metrics.sample("workqueue_depth", {"name": "Nodes"}) == 2
    assert metrics.sample("workqueue_adds_total", {"name": "Nodes"}) == 2
    item = await queue.get()
    assert item is not None
    longest = metrics.sample("workqueue_longest_running_processor_seconds", {"name": "Nodes"})
    assert longest is not None
    assert longest >= 0
    queue.done(item)
    queue.add_rate_limited("c")
    assert metrics.sample("workqueue_retries_total", {"name": "Nodes"}) == 1
    assert metrics.sample("workqueue_work_duration_seconds_count", {"name": "Nodes"}) == 1
    assert metrics.sample("workqueue_queue_duration_seconds_count", {"name": "Nodes"}) == 1
    queue.shut_down()


@pytest.mark.parametrize("workers", [1, 16])
async def test_many_workers_process_every_item_once(workers: int) -> None:
    queue = make_queue()
    seen: list[int] = []

    async def handler(item: str) -> None:
        seen.append(int(item))
        if len(seen) == 500:
            queue.shut_down()

    for i in range(500):
        queue.add(str(i))
    await asyncio.wait_for(run_workers(queue, handler, workers), 5)
    assert sorted(seen) == list(range(500))
