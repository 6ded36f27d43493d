"""Batched EC2 instance lookups: one ``DescribeInstances`` per wave, not one per Node.

The node controllers ask about one Node at a time, often many at once (the workers
of the cloud node controller, the periodic address refresh) or one after the other
within a fraction of a second (the lifecycle controller's pass, ``InstanceExists``
then ``InstanceShutdown`` for each not-Ready Node). :class:`Lookups` turns that into
few calls:

* **coalescing**: lookups arriving within ``window`` (a few ms) are answered by one
  ``DescribeInstances`` whose filter lists every instance ID (or private DNS name)
  asked for, up to 200 values a call (EC2's limit of filter values);
* **sharing**: a lookup of a key already in a call on its way waits for that call;
* **a short memory**: each answer, "no such instance" included, is reused for
  ``ttl`` seconds (a wave), so ``InstanceShutdown`` right after ``InstanceExists``
  costs nothing;
* **prefetch**: a call by instance ID also asks, in its spare filter values, for
  the other instance IDs asked about in the last ten minutes whose answers are
  older than half the ``ttl``, so the next Node of a lifecycle pass finds its
  answer waiting.

A filter (``instance-id``, ``private-dns-name``) rather than ``InstanceIds`` is
what makes batching safe: with ``InstanceIds`` one unknown ID fails the whole call
(``InvalidInstanceID.NotFound``); a filter answers with what exists. Terminated
instances stay visible for about an hour and are reported as such.

An error fails every lookup of its call (each retries on its own); nothing is
remembered from it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

log = logging.getLogger(__name__)

MAX_FILTER_VALUES = 200
"""EC2's limit of filter values in one call."""
KNOWN_IDS_FOR = 600.0
"""Seconds an instance ID asked about stays in the prefetch set."""

Kind = Literal["instance-id", "private-dns-name"]
I = TypeVar("I")  # noqa: E741 (the instance type, as the caller defines it)


@dataclass(frozen=True, slots=True)
class Answer(Generic[I]):
    """What one call said about a key: the instances it matched (none: not found)."""

    instances: tuple[I, ...]
    at: float


Describe = Callable[[Kind, list[str]], Awaitable[Sequence[I]]]
KeysOf = Callable[[Kind, I], Sequence[str]]


class Lookups(Generic[I]):
    """Coalesces lookups into ``describe(kind, keys)`` calls (see the module doc).

    ``describe`` makes one call (its pages) and returns the instances that match any
    of ``keys``; ``keys_of(kind, instance)`` tells which keys of ``kind`` an
    instance answers (its ID; its private DNS name).
    """

    def __init__(
        self,
        describe: Describe[I],
        keys_of: KeysOf[I],
        *,
        window: float = 0.005,
        ttl: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._describe = describe
        self._keys_of = keys_of
        self.window = window
        self.ttl = ttl
        self._clock = clock
        self._answers: dict[Kind, dict[str, Answer[I]]] = {
            "instance-id": {},
            "private-dns-name": {},
        }
        self._pending: dict[Kind, dict[str, asyncio.Future[Answer[I]]]] = {
            "instance-id": {},
            "private-dns-name": {},
        }
        self._in_flight: dict[Kind, dict[str, asyncio.Future[Answer[I]]]] = {
            "instance-id": {},
            "private-dns-name": {},
        }
        self._timers: dict[Kind, asyncio.TimerHandle] = {}
        self._known_ids: dict[str, float] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.calls = 0
        """``describe`` calls made so far."""

    async def get(self, kind: Kind, key: str) -> tuple[I, ...]:
        """The instances ``key`` matches (by ``kind``), from a fresh answer or a call."""
        return (await self.answer(kind, key)).instances

    async def answer(self, kind: Kind, key: str) -> Answer[I]:
        """What a fresh answer or a call said about ``key``, with when it was made."""
        now = self._clock()
        if kind == "instance-id":
            self._known_ids[key] = now
        answer = self._answers[kind].get(key)
        if answer is not None and now - answer.at < self.ttl:
            return answer
        future = self._in_flight[kind].get(key) or self._pending[kind].get(key)
        if future is None:
            future = asyncio.get_running_loop().create_future()
            self._pending[kind][key] = future
            self._schedule(kind)
        # Shielded: one caller giving up (its deadline) must not cancel the others' answer.
        return await asyncio.shield(future)

    def forget(self) -> None:
        """Drop every remembered answer (the next lookups call EC2)."""
        for answers in self._answers.values():
            answers.clear()

    async def aclose(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        for task in list(self._tasks):
            task.cancel()
        for pending in self._pending.values():
            for future in pending.values():
                future.cancel()
            pending.clear()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- batching ---------------------------------------------------------------------

    def _schedule(self, kind: Kind) -> None:
        loop = asyncio.get_running_loop()
        if len(self._pending[kind]) >= MAX_FILTER_VALUES:
            timer = self._timers.pop(kind, None)
            if timer is not None:
                timer.cancel()
            self._flush(kind)
        elif kind not in self._timers:
            self._timers[kind] = loop.call_later(self.window, self._flush, kind)

    def _flush(self, kind: Kind) -> None:
        self._timers.pop(kind, None)
        pending, self._pending[kind] = self._pending[kind], {}
        if not pending:
            return
        keys = list(pending)
        futures = dict(pending)
        chunks = [keys[i : i + MAX_FILTER_VALUES] for i in range(0, len(keys), MAX_FILTER_VALUES)]
        room = MAX_FILTER_VALUES - len(chunks[-1]) if kind == "instance-id" else 0
        for extra in self._prefetch(set(keys), room):
            chunks[-1].append(extra)
            futures[extra] = asyncio.get_running_loop().create_future()
        for chunk in chunks:
            mine = {key: futures[key] for key in chunk}
            for key, future in mine.items():
                self._in_flight[kind][key] = future
            task = asyncio.get_running_loop().create_task(
                self._call(kind, chunk, mine), name=f"aws-describe-{kind}"
            )
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _prefetch(self, asked: set[str], room: int) -> list[str]:
        """Recently asked-about IDs worth refreshing in this call's spare values."""
        now = self._clock()
        for answers in self._answers.values():  # forget what no lookup can use any more
            for key in [k for k, a in answers.items() if now - a.at > max(self.ttl, 60.0)]:
                del answers[key]
        if room <= 0 or self.ttl <= 0:
            return []
        answers = self._answers["instance-id"]
        in_flight = self._in_flight["instance-id"]
        extra: list[str] = []
        for key, asked_at in list(self._known_ids.items()):
            if now - asked_at > KNOWN_IDS_FOR:
                del self._known_ids[key]
                answers.pop(key, None)
                continue
            if key in asked or key in in_flight:
                continue
            answer = answers.get(key)
            if answer is not None and now - answer.at < self.ttl / 2:
                continue
            extra.append(key)
            if len(extra) >= room:
                break
        return extra

    async def _call(
        self, kind: Kind, keys: list[str], futures: dict[str, asyncio.Future[Answer[I]]]
    ) -> None:
        self.calls += 1
        try:
            instances = await self._describe(kind, keys)
        except BaseException as exc:
            for future in futures.values():
                if not future.done():
                    future.set_exception(exc)
                    future.add_done_callback(_retrieve)
            if not isinstance(exc, Exception):
                raise
            return
        finally:
            in_flight = self._in_flight[kind]
            for key, future in futures.items():
                if in_flight.get(key) is future:
                    del in_flight[key]
        now = self._clock()
        matched: dict[str, list[I]] = {key: [] for key in keys}
        for instance in instances:
            for key in self._keys_of(kind, instance):
                if key in matched:
                    matched[key].append(instance)
            # What a lookup by name found also answers lookups by its ID.
            if kind == "private-dns-name":
                for key in self._keys_of("instance-id", instance):
                    self._answers["instance-id"][key] = Answer((instance,), now)
                    self._known_ids.setdefault(key, now)
        for key, found in matched.items():
            answer = Answer(tuple(found), now)
            self._answers[kind][key] = answer
            future = futures[key]
            if not future.done():
                future.set_result(answer)


def _retrieve(future: asyncio.Future[Any]) -> None:
    """Mark a failed batch future's exception as seen (a prefetched key has no waiter)."""
    if not future.cancelled():
        future.exception()
