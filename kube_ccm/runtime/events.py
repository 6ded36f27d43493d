"""Kubernetes Events, recorded the way client-go's event recorder does.

Controllers call :meth:`EventRecorder.event` (never blocks, never raises); a few
sink tasks write ``core/v1`` Events, up to eight at once. A repeat of the same
event (same involved object, type, reason, message and source) within ten
minutes does not create a new object: the existing one is patched with a higher
``count`` and a new ``lastTimestamp``, which is what ``kubectl describe`` shows
as ``(x5 over 3m)``. Events of cluster-scoped objects (Nodes) go to the
``default`` namespace, as upstream's do.

Writes of one event (one key) never overlap: while an event is queued or being
written, its repeats only raise the count the next write carries, so a burst of
repeats is one create plus at most one patch per write round trip, and two
Events for one key never exist. Events of one involved object are written one at
a time, in the order they were fired (as upstream's broadcaster writes them:
``kubectl describe`` sorts by second-precision timestamps, so an
``EnsuredLoadBalancer`` must not be created before its ``EnsuringLoadBalancer``);
events of different objects are written concurrently. Each Event's name
(``<object>.<hex nanoseconds>``, as upstream) and timestamps are taken when it
was fired, so listings sort the same whichever write finished first.

A full queue (1,000 distinct events pending, client-go's size) drops the newest
event with a log line rather than slowing a controller down; a write that fails
for want of an answer (no connection, 429, 5xx) is retried a few times with
backoff and then dropped. An answer that says the write cannot succeed is not
retried, as client-go's ``recordEvent`` does not retry a ``StatusError``: an
Event into a namespace being deleted (403 with the cause ``NamespaceTerminating``,
from the ``NamespaceLifecycle`` admission plugin) is dropped with a debug line,
as upstream logs it at V(5); any other refusal (403 for want of RBAC, 422, a
missing namespace) is dropped with one warning.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Literal, Protocol

import msgspec

from kube_ccm.api import wellknown as wk
from kube_ccm.runtime.client import PATCH_CONTENT_TYPES, ApiError
from kube_ccm.runtime.resources import EVENTS, RequestClient, TypedClient

log = logging.getLogger(__name__)

EventType = Literal["Normal", "Warning"]

_AGGREGATION_WINDOW = 600.0  # seconds; client-go's correlator keeps ten minutes
_QUEUE_SIZE = 1000
_CACHE_SIZE = 4096
_WRITE_ATTEMPTS = 3
MAX_IN_FLIGHT = 8
MAX_MESSAGE_LENGTH = 1024
"""An Event message is cut to this many characters (events.k8s.io/v1 caps ``note`` at
1 kB): a message quoting user input stays small whatever the input."""
"""Event writes an :class:`ApiEventRecorder` has in flight at most (its sink tasks)."""


@dataclass(frozen=True)
class ObjectReference:
    """The object an event is about (core/v1 ObjectReference, the fields upstream sets)."""

    kind: str
    name: str
    namespace: str = ""
    uid: str = ""
    api_version: str = "v1"

    def to_dict(self) -> dict[str, str]:
        ref = {"kind": self.kind, "name": self.name, "apiVersion": self.api_version}
        if self.namespace:
            ref["namespace"] = self.namespace
        if self.uid:
            ref["uid"] = self.uid
        return ref


@dataclass(frozen=True)
class Event:
    """One call to :meth:`EventRecorder.event`, as recorded."""

    ref: ObjectReference
    type: EventType
    reason: str
    message: str


class EventRecorder(Protocol):
    """What controllers need: fire an event and forget it."""

    def event(
        self, ref: ObjectReference, event_type: EventType, reason: str, message: str
    ) -> None: ...


# -- the wire -----------------------------------------------------------------


class _Metadata(msgspec.Struct):
    name: str
    namespace: str


class _Source(msgspec.Struct):
    component: str
    host: str


class _EventBody(msgspec.Struct, rename="camel"):
    metadata: _Metadata
    involved_object: dict[str, str]
    reason: str
    message: str
    type: str
    source: msgspec.Raw
    first_timestamp: str
    last_timestamp: str
    count: int
    reporting_component: str
    reporting_instance: str
    api_version: str = "v1"
    kind: str = "Event"


class _CountPatch(msgspec.Struct, rename="camel"):
    count: int
    last_timestamp: str


_encode = msgspec.json.Encoder().encode
_MERGE_PATCH = PATCH_CONTENT_TYPES["merge"]


class _Clock:
    """Event names and timestamps; module state, shared by every recorder."""

    last_ns = 0
    stamp_second = -1
    stamp = ""

    @classmethod
    def unique_ns(cls) -> int:
        """Wall-clock nanoseconds, strictly increasing within the process (Event names)."""
        now = time.time_ns()
        if now <= cls.last_ns:
            now = cls.last_ns + 1
        cls.last_ns = now
        return now

    @classmethod
    def timestamp(cls, ns: int) -> str:
        """RFC 3339 in whole seconds (the Event API's precision), formatted once a second."""
        second = ns // 1_000_000_000
        if second != cls.stamp_second:
            cls.stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(second))
            cls.stamp_second = second
        return cls.stamp


# -- the recorder ---------------------------------------------------------------

_Key = tuple[ObjectReference, str, str, str]


@dataclass
class _Aggregate:
    namespace: str
    name: str
    count: int
    last_seen: float


class _Pending:
    """One event key queued or being written, with the repeats fired meanwhile."""

    __slots__ = ("create_ns", "done", "fired", "key", "last_ns")

    def __init__(self, key: _Key, now_ns: int) -> None:
        self.key = key
        self.fired = 1
        """Events fired for this key since it was queued."""
        self.done = 0
        """Of those, the ones written or dropped."""
        self.last_ns = now_ns
        self.create_ns = now_ns
        """Names the Event a create makes (0: take a new time); kept across the retries
        of one create, so a retry after a lost answer finds its own Event."""


class ApiEventRecorder:
    """Writes Events through the API for one component (``source.component``).

    Run :meth:`run` as a task; :meth:`stop` writes what is queued (for a while)
    and ends it, cancelling it ends it at once.
    """

    def __init__(
        self,
        client: RequestClient,
        component: str,
        *,
        host: str | None = None,
        instance: str | None = None,
        max_in_flight: int = MAX_IN_FLIGHT,
        queue_size: int = _QUEUE_SIZE,
    ) -> None:
        self._api = TypedClient(client)
        self.component = component
        self.host = host if host is not None else socket.gethostname()
        self.instance = instance or self.host
        self._source = msgspec.Raw(_encode(_Source(component, self.host)))
        self._max_in_flight = max(1, max_in_flight)
        self._queue_size = queue_size
        # Unbounded: event() enforces queue_size for new keys; a key whose repeats came
        # in while it was being written goes back in line whatever the length.
        self._queue: asyncio.Queue[_Pending] = asyncio.Queue()
        self._pending: dict[_Key, _Pending] = {}
        self._lanes: dict[ObjectReference, deque[_Pending]] = {}
        """Per involved object with an event queued or being written (that one is in
        ``_queue`` or with a worker): its later events, in the order fired. The next
        one enters ``_queue`` when the one before it is done."""
        self._held = 0
        """Events waiting in ``_lanes``."""
        self._seen: OrderedDict[_Key, _Aggregate] = OrderedDict()
        self._workers: list[asyncio.Task[None]] = []
        self._stopped = False
        self._ended = asyncio.Event()
        self.dropped = 0
        """Events not written: the queue was full, every attempt failed, or stopped."""
        self.written = 0
        """Events written (a repeat folded into a count counts too)."""

    def event(self, ref: ObjectReference, event_type: EventType, reason: str, message: str) -> None:
        try:
            if len(message) > MAX_MESSAGE_LENGTH:
                message = message[: MAX_MESSAGE_LENGTH - 3] + "..."
            key = (ref, event_type, reason, message)
            pending = self._pending.get(key)
            if pending is not None:
                # Queued or being written: the next write of this key carries it.
                pending.fired += 1
                pending.last_ns = time.time_ns()
                return
            if self._stopped or self._queue.qsize() + self._held >= self._queue_size:
                self.dropped += 1
                log.warning(
                    "event queue full; dropping %s event %s for %s/%s",
                    event_type,
                    reason,
                    ref.kind,
                    ref.name,
                )
                return
            pending = _Pending(key, _Clock.unique_ns())
            self._pending[key] = pending
            lane = self._lanes.get(ref)
            if lane is None:
                self._lanes[ref] = deque()
                self._queue.put_nowait(pending)
            else:  # wait for the object's earlier events
                lane.append(pending)
                self._held += 1
        except Exception:  # never let an event break its caller
            log.exception("recording event %s failed", reason)

    async def run(self) -> None:
        """Write queued events until cancelled or stopped."""
        self._workers = [
            asyncio.create_task(self._work(), name=f"events-{self.component}-{i}")
            for i in range(self._max_in_flight)
        ]
        ended = asyncio.create_task(self._ended.wait())
        try:
            await asyncio.wait([ended, *self._workers], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (ended, *self._workers):
                task.cancel()
            await asyncio.gather(ended, *self._workers, return_exceptions=True)
            self._workers = []
            self._abandon()

    async def flush(self) -> None:
        """Wait until every queued event (and every repeat) is written or dropped."""
        await self._queue.join()

    async def stop(self, grace: float = 5.0) -> None:
        """Write what is queued, for at most ``grace`` seconds, then end :meth:`run`;
        events fired afterwards are dropped."""
        self._stopped = True
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(grace):
                await self.flush()
        self._ended.set()
        if not self._workers:  # run() is not running (else it does this as it ends)
            self._abandon()

    def _abandon(self) -> None:
        """Count what was never written as dropped and empty the queue."""
        lost = sum(p.fired - p.done for p in self._pending.values())
        if lost:
            self.dropped += lost
            log.info("%s: %d events not written before stopping", self.component, lost)
        self._pending.clear()
        self._lanes.clear()
        self._held = 0
        while not self._queue.empty():
            self._queue.get_nowait()
            self._queue.task_done()

    async def _work(self) -> None:
        while True:
            pending = await self._queue.get()
            try:
                await self._write(pending)
            except Exception:
                log.exception("writing event %s failed", pending.key[2])
                self.dropped += pending.fired - pending.done
                pending.done = pending.fired
            finally:
                self._next_of_object(pending)
                self._queue.task_done()

    def _next_of_object(self, pending: _Pending) -> None:
        """``pending`` is written (or dropped): queue its object's next event, if any."""
        ref = pending.key[0]
        lane = self._lanes.get(ref)
        if pending.fired > pending.done and not self._stopped:
            # Repeats came in meanwhile: written again after the object's later events.
            if lane is None:
                self._queue.put_nowait(pending)
                return
            lane.append(pending)
            self._held += 1
        elif self._pending.get(pending.key) is pending:
            del self._pending[pending.key]
        if lane is None:
            return  # abandoned meanwhile
        if lane:
            self._held -= 1
            self._queue.put_nowait(lane.popleft())
        else:
            del self._lanes[ref]

    async def _write(self, pending: _Pending) -> None:
        key = pending.key
        ref, _, reason, _ = key
        fired = pending.fired
        count = fired - pending.done
        last = _Clock.timestamp(pending.last_ns)
        created: int | None = None  # the create_ns of a create sent and not answered
        for attempt in range(_WRITE_ATTEMPTS):
            now = time.monotonic()
            aggregate = self._seen.get(key)
            if aggregate is not None and now - aggregate.last_seen > _AGGREGATION_WINDOW:
                aggregate = None
            try:
                if aggregate is not None:
                    await self._api.request(
                        "PATCH",
                        EVENTS,
                        aggregate.name,
                        namespace=aggregate.namespace,
                        content=_encode(_CountPatch(aggregate.count + count, last)),
                        content_type=_MERGE_PATCH,
                    )
                    aggregate.count += count
                    aggregate.last_seen = now
                    self._seen.move_to_end(key)
                else:
                    if not pending.create_ns:
                        pending.create_ns = _Clock.unique_ns()
                    created = pending.create_ns
                    namespace, name = await self._create(key, count, last, created)
                    pending.create_ns = 0
                    self._remember(key, _Aggregate(namespace, name, count, now))
                pending.done = fired
                self.written += count
                return
            except ApiError as exc:
                if aggregate is not None and exc.not_found:
                    del self._seen[key]  # the event expired (TTL): start a new one
                    continue
                if aggregate is None and exc.already_exists:
                    if created is not None and attempt > 0:
                        # An earlier attempt made it; only its answer was lost.
                        namespace, name = _event_name(ref, created)
                        pending.create_ns = 0
                        self._remember(key, _Aggregate(namespace, name, count, now))
                        pending.done = fired
                        self.written += count
                        return
                    pending.create_ns = 0  # someone else's name: take another
                elif _refused(exc):
                    self._refused(pending, fired, count, exc)
                    return
                log.warning("writing event %s failed (attempt %d): %s", reason, attempt + 1, exc)
            except Exception as exc:
                log.warning("writing event %s failed (attempt %d): %s", reason, attempt + 1, exc)
            await asyncio.sleep(0.2 * 2**attempt)
        log.error(
            "dropping event %s for %s/%s after %d attempts",
            reason,
            ref.kind,
            ref.name,
            _WRITE_ATTEMPTS,
        )
        pending.done = fired
        self.dropped += count

    def _refused(self, pending: _Pending, fired: int, count: int, exc: ApiError) -> None:
        """The server refused the write for good: drop the event without a retry."""
        ref, _, reason, _ = pending.key
        pending.done = fired
        self.dropped += count
        if wk.CAUSE_NAMESPACE_TERMINATING in exc.causes:
            # Expected while a namespace goes (a Service's last Events as it is
            # deleted with its namespace); client-go logs it at V(5).
            log.debug(
                "not writing event %s for %s %s/%s: its namespace is being deleted",
                reason,
                ref.kind,
                ref.namespace,
                ref.name,
            )
            return
        log.warning(
            "dropping event %s for %s %s: the API server refused it (%s); not retried, "
            "check kube-ccm's RBAC for events if this is a 403",
            reason,
            ref.kind,
            f"{ref.namespace}/{ref.name}" if ref.namespace else ref.name,
            exc,
        )

    def _remember(self, key: _Key, aggregate: _Aggregate) -> None:
        self._seen[key] = aggregate
        self._seen.move_to_end(key)
        while len(self._seen) > _CACHE_SIZE:
            self._seen.popitem(last=False)

    async def _create(self, key: _Key, count: int, last: str, created_ns: int) -> tuple[str, str]:
        """Create the Event; its namespace and name."""
        ref, event_type, reason, message = key
        namespace, name = _event_name(ref, created_ns)
        body = _EventBody(
            metadata=_Metadata(name, namespace),
            involved_object=ref.to_dict(),
            reason=reason,
            message=message,
            type=event_type,
            source=self._source,
            first_timestamp=_Clock.timestamp(created_ns),
            last_timestamp=last,
            count=count,
            reporting_component=self.component,
            reporting_instance=self.instance,
        )
        await self._api.request(
            "POST",
            EVENTS,
            namespace=namespace,
            content=_encode(body),
            content_type="application/json",
        )
        return namespace, name


def _refused(exc: ApiError) -> bool:
    """An answer no retry of the same write can change (client-go drops an Event on
    any ``StatusError``; its REST client has already retried 429 and 5xx, which we
    retry here)."""
    return 400 <= exc.status < 500 and exc.status != 429


def _event_name(ref: ObjectReference, created_ns: int) -> tuple[str, str]:
    """The namespace and name of the Event about ``ref`` created at ``created_ns``."""
    return ref.namespace or "default", f"{ref.name}.{created_ns:x}"


__all__ = [
    "MAX_IN_FLIGHT",
    "MAX_MESSAGE_LENGTH",
    "ApiEventRecorder",
    "Event",
    "EventRecorder",
    "EventType",
    "ObjectReference",
]
