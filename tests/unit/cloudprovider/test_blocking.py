"""BlockingCalls: blocking SDK calls on a provider's own bounded pool of threads."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time

import pytest

from kube_ccm.cloudprovider import BlockingCalls

REQUEST: contextvars.ContextVar[str] = contextvars.ContextVar("request", default="")


async def test_no_more_than_max_workers_calls_run_at_once_and_the_loop_stays_free() -> None:
    calls = BlockingCalls("sdk", max_workers=2)
    running = 0
    peak = 0
    lock = threading.Lock()

    def slow(i: int) -> int:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.05)
        with lock:
            running -= 1
        return i * 2

    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.005)

    tick = asyncio.create_task(ticker())
    results = await asyncio.gather(*(calls.run(slow, i) for i in range(6)))
    tick.cancel()
    calls.close()
    assert results == [0, 2, 4, 6, 8, 10]
    assert peak == 2
    assert ticks >= 10  # 3 rounds of 50 ms: the loop ran meanwhile


async def test_calls_run_on_named_threads_with_the_callers_context() -> None:
    calls = BlockingCalls("mycloud", max_workers=1)
    REQUEST.set("req-1")

    def where() -> tuple[str, str]:
        return threading.current_thread().name, REQUEST.get()

    name, request = await calls.run(where)
    calls.close()
    assert name.startswith("mycloud-blocking")
    assert request == "req-1"


async def test_an_sdk_error_reaches_the_caller() -> None:
    calls = BlockingCalls("sdk")

    def fail() -> None:
        raise OSError("connection reset")

    with pytest.raises(OSError, match="connection reset"):
        await calls.run(fail)
    calls.close()


def test_a_pool_needs_a_thread() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        BlockingCalls("sdk", max_workers=0)
