"""Rate limiters for work queues and API clients, with client-go's semantics.

A :class:`RateLimiter` answers "how long should this item wait before it is
retried?" (``when``), remembers failures per item until ``forget``, and counts
them (``num_requeues``). The compositions upstream controllers use:

* :func:`default_controller_rate_limiter` — per-item exponential backoff
  5 ms → 1000 s combined (max) with a global token bucket of 10 qps / burst 100;
  the cloud node controller's queue ``Nodes``.
* :func:`service_rate_limiter` — per-item exponential backoff 5 s → 300 s and no
  global bucket; the service controller's queues.
* a :class:`BucketRateLimiter` of one per 10 s, capped by :class:`MaxWaitRateLimiter`
  at 10 s: the route controller's watch-based queue ``Routes``.

:class:`AsyncTokenBucket` is the client-side QPS/burst limiter of API clients
(``--kube-api-qps`` / ``--kube-api-burst``): ``await bucket.acquire()`` before
each request.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Hashable
from typing import Protocol


class RateLimiter(Protocol):
    def when(self, item: Hashable) -> float:
        """Seconds ``item`` must wait before its next try; records one more failure."""

    def forget(self, item: Hashable) -> None:
        """The item succeeded: drop its failure history."""

    def num_requeues(self, item: Hashable) -> int:
        """How many failures are recorded for ``item``."""


class ItemExponentialFailureRateLimiter:
    """``base * 2**failures`` seconds per item, capped at ``max_delay``."""

    def __init__(self, base_delay: float, max_delay: float) -> None:
        if base_delay < 0 or max_delay < base_delay:
            raise ValueError(f"need 0 <= base_delay <= max_delay, got {base_delay}, {max_delay}")
        self.base_delay = base_delay
        self.max_delay = max_delay
        self._failures: dict[Hashable, int] = {}

    def when(self, item: Hashable) -> float:
        exponent = self._failures.get(item, 0)
        self._failures[item] = exponent + 1
        # Past 2**64 the product is astronomically above any sane cap; avoid float overflow.
        if exponent > 64:
            return self.max_delay
        return min(self.base_delay * (1 << exponent), self.max_delay)

    def forget(self, item: Hashable) -> None:
        self._failures.pop(item, None)

    def num_requeues(self, item: Hashable) -> int:
        return self._failures.get(item, 0)


class TokenBucket:
    """A token bucket that hands out *reservations*: the delay until a token is free.

    Like ``golang.org/x/time/rate.Limiter.Reserve``: each call takes one token,
    possibly from the future, and says how long the caller must wait for it.
    """

    def __init__(self, qps: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError(f"need qps > 0 and burst >= 1, got qps={qps}, burst={burst}")
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._last = clock()

    def reserve(self) -> float:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._last) * self.qps)
        self._last = now
        self._tokens -= 1.0
        if self._tokens >= 0:
            return 0.0
        return -self._tokens / self.qps


class BucketRateLimiter:
    """The global part of the default limiter: every retry takes a token; no per-item state."""

    def __init__(self, qps: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._bucket = TokenBucket(qps, burst, clock)

    def when(self, item: Hashable) -> float:
        del item
        return self._bucket.reserve()

    def forget(self, item: Hashable) -> None:
        del item

    def num_requeues(self, item: Hashable) -> int:
        del item
        return 0


class MaxOfRateLimiter:
    """The longest delay of several limiters (each one records the failure)."""

    def __init__(self, *limiters: RateLimiter) -> None:
        if not limiters:
            raise ValueError("MaxOfRateLimiter needs at least one limiter")
        self._limiters = limiters

    def when(self, item: Hashable) -> float:
        return max(limiter.when(item) for limiter in self._limiters)

    def forget(self, item: Hashable) -> None:
        for limiter in self._limiters:
            limiter.forget(item)

    def num_requeues(self, item: Hashable) -> int:
        return max(limiter.num_requeues(item) for limiter in self._limiters)


class MaxWaitRateLimiter:
    """Another limiter's delay, capped at ``max_wait`` (client-go's
    ``WithMaxWaitRateLimiter``): a bucket keeps handing out reservations further in
    the future under a stream of adds; the cap keeps the wait bounded."""

    def __init__(self, limiter: RateLimiter, max_wait: float) -> None:
        self._limiter = limiter
        self.max_wait = max_wait

    def when(self, item: Hashable) -> float:
        return min(self._limiter.when(item), self.max_wait)

    def forget(self, item: Hashable) -> None:
        self._limiter.forget(item)

    def num_requeues(self, item: Hashable) -> int:
        return self._limiter.num_requeues(item)


def default_controller_rate_limiter(
    clock: Callable[[], float] = time.monotonic,
) -> RateLimiter:
    """client-go's ``DefaultControllerRateLimiter``: 5 ms → 1000 s per item, max with 10 qps/100."""
    return MaxOfRateLimiter(
        ItemExponentialFailureRateLimiter(0.005, 1000.0),
        BucketRateLimiter(10.0, 100, clock),
    )


def service_rate_limiter() -> RateLimiter:
    """The service controller's limiter: 5 s → 300 s per item, no global bucket."""
    return ItemExponentialFailureRateLimiter(5.0, 300.0)


class AsyncTokenBucket:
    """Client-side request throttling: ``await acquire()`` waits for a token.

    Tokens are reserved in arrival order, so concurrent callers are served
    fairly and the long-run rate never exceeds ``qps`` after the first ``burst``.
    """

    def __init__(self, qps: float, burst: int) -> None:
        self._bucket = TokenBucket(qps, max(burst, 1))

    async def acquire(self) -> None:
        delay = self._bucket.reserve()
        if delay > 0:
            await asyncio.sleep(delay)
