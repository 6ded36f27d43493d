"""Waiting for the cluster to converge, without sleeping a fixed time."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable

__all__ = ["eventually"]


async def eventually(
    predicate: Callable[[], bool | Awaitable[bool]],
    *,
    within: float = 30.0,
    interval: float = 0.05,
    what: str = "",
) -> None:
    """Poll ``predicate`` (sync or async) until it is true; fail after ``within`` seconds.

    Raises ``AssertionError`` naming ``what`` so a failing test says what never happened.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        result = predicate()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return
        if loop.time() >= deadline:
            raise AssertionError(f"not within {within:g} s: {what or predicate!r}")
        await asyncio.sleep(interval)
