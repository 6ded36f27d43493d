"""Rate limiters: client-go's delays, per-item memory and compositions."""

from __future__ import annotations

import asyncio
import time

import pytest

from kube_ccm.runtime.ratelimit import (
    AsyncTokenBucket,
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    MaxOfRateLimiter,
    MaxWaitRateLimiter,
    TokenBucket,
    default_controller_rate_limiter,
    service_rate_limiter,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_exponential_backoff_doubles_per_item_until_the_cap_and_forget_resets() -> None:
    limiter = ItemExponentialFailureRateLimiter(0.005, 1000.0)
    delays = [limiter.when("a") for _ in range(20)]
    assert delays[:4] == [0.005, 0.01, 0.02, 0.04]
    assert delays[-1] == 1000.0
    assert limiter.num_requeues("a") == 20
    assert limiter.when("b") == 0.005, "items back off independently"
    limiter.forget("a")
    assert limiter.num_requeues("a") == 0
    assert limiter.when("a") == 0.005


def test_exponential_backoff_survives_thousands_of_failures() -> None:
    limiter = ItemExponentialFailureRateLimiter(5.0, 300.0)
    for _ in range(5000):
        delay = limiter.when("x")
    assert delay == 300.0


def test_service_limiter_is_5s_to_300s_without_a_bucket() -> None:
    limiter = service_rate_limiter()
    assert [limiter.when("svc") for _ in range(8)] == [5, 10, 20, 40, 80, 160, 300, 300]
    assert [service_rate_limiter().when(str(i)) for i in range(500)] == [5.0] * 500


def test_token_bucket_gives_burst_free_then_spaces_reservations_at_qps() -> None:
    clock = FakeClock()
    bucket = TokenBucket(10.0, 3, clock)
    assert [bucket.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.reserve() == pytest.approx(0.1)
    assert bucket.reserve() == pytest.approx(0.2)
    clock.now += 10
    assert bucket.reserve() == 0.0, "the bucket refills, up to burst"


def test_default_controller_limiter_is_max_of_backoff_and_global_bucket() -> None:
    clock = FakeClock()  # real time passing under load would refill the bucket
    limiter = default_controller_rate_limiter(clock)
    # 100 different items fit the burst: each waits only its own 5 ms backoff.
    assert all(limiter.when(f"node-{i}") == 0.005 for i in range(100))
    # The 101st retry in the same instant waits for the 10 qps bucket.
    assert limiter.when("node-100") == pytest.approx(0.1)
    assert limiter.num_requeues("node-0") == 1
    limiter.forget("node-0")
    assert limiter.num_requeues("node-0") == 0


def test_max_of_takes_the_longest_delay() -> None:
    clock = FakeClock()
    limiter = MaxOfRateLimiter(
        ItemExponentialFailureRateLimiter(1.0, 8.0), BucketRateLimiter(1.0, 1, clock)
    )
    assert limiter.when("a") == 1.0
    assert limiter.when("a") == 2.0
    assert limiter.when("b") == pytest.approx(2.0), "the bucket is the longer wait here"


def test_max_wait_caps_a_bucket_that_keeps_reserving_further_ahead() -> None:
    """The route controller's watch-based queue: one per 10 s, never more than 10 s away."""
    clock = FakeClock()
    limiter = MaxWaitRateLimiter(BucketRateLimiter(0.1, 1, clock), 10.0)
    assert limiter.when("routes") == 0.0, "the first request runs at once"
    clock.now += 3
    assert limiter.when("routes") == pytest.approx(7.0), "the next waits out the interval"
    assert [limiter.when("routes") for _ in range(5)] == [10.0] * 5, "capped, not 17, 27, ..."
    assert limiter.num_requeues("routes") == 0


def test_invalid_limiter_settings_are_rejected() -> None:
    with pytest.raises(ValueError, match="base_delay"):
        ItemExponentialFailureRateLimiter(10.0, 1.0)
    with pytest.raises(ValueError, match="qps"):
        TokenBucket(0, 1)
    with pytest.raises(ValueError, match="at least one"):
        MaxOfRateLimiter()


async def test_async_token_bucket_throttles_to_qps_after_burst() -> None:
    bucket = AsyncTokenBucket(qps=50.0, burst=5)
    started = time.monotonic()
    await asyncio.gather(*(bucket.acquire() for _ in range(15)))
    elapsed = time.monotonic() - started
    # 5 free, then 10 more at 50/s: about 0.2 s. A loose lower bound proves throttling.
    assert elapsed >= 0.15
