"""Blocking SDK calls off the event loop, on a bounded pool of threads.

Many cloud SDKs (libvirt's, most vendors' REST clients) block. ``asyncio.to_thread``
runs them on the loop's default executor, which every provider and the daemon share
and which grows with the CPU count; a hung SDK call can then starve everyone.
:class:`BlockingCalls` gives a provider threads of its own, a fixed number of them::

    self._blocking = BlockingCalls("mycloud", max_workers=4)
    ...
    server = await self._blocking.run(self._sdk.get_server, server_id)

Calls beyond ``max_workers`` wait their turn. A call whose caller gave up (the
daemon's deadline, ``--cloud-call-timeout``) keeps its thread until the SDK returns
(threads cannot be interrupted), which is why the pool is bounded. ``close()`` lets
running calls finish and frees the threads.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

__all__ = ["BlockingCalls"]


class BlockingCalls:
    def __init__(self, name: str, max_workers: int = 4) -> None:
        if max_workers < 1:
            raise ValueError(f"max_workers must be at least 1, not {max_workers}")
        self.name = name
        self.max_workers = max_workers
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=max_workers, thread_name_prefix=f"{name}-blocking"
        )

    async def run(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
        """``fn(*args, **kwargs)`` on one of this pool's threads (context variables kept)."""
        loop = asyncio.get_running_loop()
        call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
        return await loop.run_in_executor(self._executor, call)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
