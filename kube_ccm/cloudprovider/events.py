"""Kubernetes Events from a provider, written as the daemon's controllers write theirs.

A provider tells users about what it found on an object it was asked about (a Service
whose address cannot be given, a Node whose VM is ambiguous) with a Warning Event on
that object, the way the service and node controllers do. Take a recorder in
:meth:`~kube_ccm.cloudprovider.CloudProvider.initialize`, over a client from the
client builder, and close it in :meth:`~kube_ccm.cloudprovider.CloudProvider.aclose`::

    async def initialize(self, client_builder: ClientBuilder, stop: asyncio.Event) -> None:
        self.events = start_event_recorder(client_builder.client("mycloud"), "mycloud")

    async def aclose(self) -> None:
        if self.events is not None:
            await self.events.aclose()

    self.events.event(object_reference(service), "Warning", "NoAddressLeft", message)

:meth:`EventRecorder.event` never blocks and never raises. The Events are written in
the background as client-go's recorder writes them: ``source.component`` and
``reportingComponent`` are the component named here; a repeat of one event (same
object, type, reason and message) within ten minutes raises the ``count`` of the
Event already written instead of creating another; Events of cluster-scoped objects
(Nodes) go to the ``default`` namespace; a message is cut to 1,024 characters; when
1,000 distinct events are waiting the newest is dropped with a log line. The client's
identity needs ``create`` and ``patch`` on ``events`` (core/v1) in the namespaces of the
objects it reports on.

Hold the recorder as an :class:`EventRecorder` (the protocol) where a test may hand
the provider one that only remembers what it was told.
"""

from __future__ import annotations

import asyncio

from kube_ccm.api.objects import Node, Service
from kube_ccm.cloudprovider._interface import KubernetesClient
from kube_ccm.runtime.events import ApiEventRecorder, EventRecorder, EventType, ObjectReference

STOP_GRACE = 2.0
"""Seconds :meth:`ProviderEventRecorder.aclose` waits by default for queued Events."""


class ProviderEventRecorder:
    """A provider's Event recorder and the task that writes its Events.

    Made by :func:`start_event_recorder`; an :class:`EventRecorder`.
    """

    def __init__(self, client: KubernetesClient, component: str) -> None:
        self._recorder = ApiEventRecorder(client, component)
        self._task: asyncio.Task[None] | None = asyncio.get_running_loop().create_task(
            self._recorder.run(), name=f"{component}-events"
        )

    @property
    def component(self) -> str:
        return self._recorder.component

    @property
    def written(self) -> int:
        """Events written so far (a repeat folded into a count counts too)."""
        return self._recorder.written

    @property
    def dropped(self) -> int:
        """Events not written: the queue was full, every attempt failed, or closed."""
        return self._recorder.dropped

    def event(self, ref: ObjectReference, event_type: EventType, reason: str, message: str) -> None:
        """Record an Event about ``ref`` (never blocks, never raises)."""
        self._recorder.event(ref, event_type, reason, message)

    async def flush(self) -> None:
        """Wait until every Event recorded so far is written or dropped."""
        await self._recorder.flush()

    async def aclose(self, grace: float = STOP_GRACE) -> None:
        """Write what is queued, for at most ``grace`` seconds, then stop; Events
        recorded afterwards are dropped. Safe to call more than once."""
        task, self._task = self._task, None
        if task is None:
            return
        await self._recorder.stop(grace=grace)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def start_event_recorder(client: KubernetesClient, component: str) -> ProviderEventRecorder:
    """An Event recorder writing through ``client`` (one of the client builder's) as
    ``component``, already writing: call it with the event loop running (in
    ``initialize``), and :meth:`~ProviderEventRecorder.aclose` it in ``aclose``."""
    return ProviderEventRecorder(client, component)


def object_reference(obj: Node | Service) -> ObjectReference:
    """The reference to a Node or a Service that an Event is about."""
    meta = obj.metadata
    kind = "Node" if isinstance(obj, Node) else "Service"
    return ObjectReference(kind=kind, name=meta.name, namespace=meta.namespace, uid=meta.uid)


__all__ = [
    "STOP_GRACE",
    "EventRecorder",
    "EventType",
    "ObjectReference",
    "ProviderEventRecorder",
    "object_reference",
    "start_event_recorder",
]
