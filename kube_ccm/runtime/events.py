"""Kubernetes Events, recorded the way client-go's event recorder does.

Controllers call :meth:`EventRecorder.event` (never blocks, never raises); a
sink task writes ``core/v1`` Events. A repeat of the same event (same involved
object, type, reason, message and source) within ten minutes does not create a
new object: the existing one is patched with ``count + 1`` and a new
``lastTimestamp``, which is what ``kubectl describe`` shows as ``(x5 over 3m)``.
Events of cluster-scoped objects (Nodes) go to the ``default`` namespace, as
upstream's do.

A full queue (1,000 pending, client-go's size) drops the newest event with a
log line rather than slowing a controller down; a write that fails is retried a
few times with backoff and then dropped.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import secrets
import socket
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from kube_ccm.runtime.client import ApiError, KubeClient

log = logging.getLogger(__name__)

EventType = Literal["Normal", "Warning"]

_AGGREGATION_WINDOW = 600.0  # seconds; client-go's correlator keeps ten minutes
_QUEUE_SIZE = 1000
_CACHE_SIZE = 4096
_WRITE_ATTEMPTS = 3


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


@dataclass
class FakeEventRecorder:
    """Keeps events in memory, for unit tests (ours and provider authors')."""

    events: list[Event] = field(default_factory=list)

    def event(self, ref: ObjectReference, event_type: EventType, reason: str, message: str) -> None:
        self.events.append(Event(ref, event_type, reason, message))

    def reasons(self) -> list[str]:
        return [e.reason for e in self.events]


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class _Aggregate:
    namespace: str
    name: str
    count: int
    last_seen: float


class ApiEventRecorder:
    """Writes Events through the API for one component (``source.component``)."""

    def __init__(
        self,
        client: KubeClient,
        component: str,
        *,
        host: str | None = None,
        instance: str | None = None,
    ) -> None:
        self._client = client
        self.component = component
        self.host = host if host is not None else socket.gethostname()
        self.instance = instance or self.host
        self._queue: asyncio.Queue[Event] = asyncio.Queue(maxsize=_QUEUE_SIZE)
        self._seen: OrderedDict[tuple[Any, ...], _Aggregate] = OrderedDict()
        self.dropped = 0
        self.written = 0

    def event(self, ref: ObjectReference, event_type: EventType, reason: str, message: str) -> None:
        try:
            self._queue.put_nowait(Event(ref, event_type, reason, message))
        except asyncio.QueueFull:
            self.dropped += 1
            log.warning(
                "event queue full; dropping %s event %s for %s/%s",
                event_type,
                reason,
                ref.kind,
                ref.name,
            )

    async def run(self) -> None:
        """Write queued events until cancelled."""
        while True:
            item = await self._queue.get()
            try:
                await self._write(item)
            finally:
                self._queue.task_done()

    async def flush(self) -> None:
        """Wait until every queued event has been written or dropped."""
        await self._queue.join()

    async def _write(self, item: Event) -> None:
        key = (item.ref, item.type, item.reason, item.message)
        now = time.monotonic()
        aggregate = self._seen.get(key)
        if aggregate is not None and now - aggregate.last_seen > _AGGREGATION_WINDOW:
            aggregate = None
        for attempt in range(_WRITE_ATTEMPTS):
            try:
                if aggregate is not None:
                    aggregate.count += 1
                    await self._client.patch(
                        f"/api/v1/namespaces/{aggregate.namespace}/events/{aggregate.name}",
                        {"count": aggregate.count, "lastTimestamp": _now()},
                        patch_type="merge",
                    )
                    aggregate.last_seen = now
                    self._seen.move_to_end(key)
                else:
                    self._seen[key] = await self._create(item, now)
                    while len(self._seen) > _CACHE_SIZE:
                        self._seen.popitem(last=False)
                self.written += 1
                return
            except ApiError as exc:
                if aggregate is not None and exc.not_found:
                    aggregate = None  # the event expired (TTL): start a new one
                    continue
                log.warning(
                    "writing event %s failed (attempt %d): %s", item.reason, attempt + 1, exc
                )
            except Exception as exc:
                log.warning(
                    "writing event %s failed (attempt %d): %s", item.reason, attempt + 1, exc
                )
            await asyncio.sleep(0.2 * 2**attempt)
        log.error(
            "dropping event %s for %s/%s after %d attempts",
            item.reason,
            item.ref.kind,
            item.ref.name,
            _WRITE_ATTEMPTS,
        )

    async def _create(self, item: Event, now: float) -> _Aggregate:
        namespace = item.ref.namespace or "default"
        name = f"{item.ref.name}.{secrets.token_hex(8)}"
        timestamp = _now()
        await self._client.create(
            f"/api/v1/namespaces/{namespace}/events",
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": name, "namespace": namespace},
                "involvedObject": item.ref.to_dict(),
                "reason": item.reason,
                "message": item.message,
                "type": item.type,
                "source": {"component": self.component, "host": self.host},
                "firstTimestamp": timestamp,
                "lastTimestamp": timestamp,
                "count": 1,
                "reportingComponent": self.component,
                "reportingInstance": self.instance,
            },
        )
        return _Aggregate(namespace, name, 1, now)
