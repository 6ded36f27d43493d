"""What the controllers share: their client, Events, Node scope and queues.

Each controller keeps its own constructor (its dependencies, as keyword arguments)
and its own ``run``; :class:`ControllerBase` holds what they would otherwise each
repeat: the typed API client, the Event recorder and the Nodes this CCM manages, the
work queues (run until cancelled, shut down however ``run`` ends, drained on
shutdown), and the stop flag a periodic loop watches.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from kube_ccm.api.objects import Node
from kube_ccm.controllers.nodescope import EVERY_NODE, NodeScope
from kube_ccm.runtime.client import KubeClient
from kube_ccm.runtime.events import EventRecorder, EventType, ObjectReference
from kube_ccm.runtime.metrics import Metrics
from kube_ccm.runtime.ratelimit import RateLimiter
from kube_ccm.runtime.shard import WHOLE, Shard
from kube_ccm.runtime.typedclient import TypedClient
from kube_ccm.runtime.workqueue import RateLimitingQueue

C = TypeVar("C")


def supported(capability: C | None, what: str) -> C:
    """A provider's capability (``cloud.routes()`` and its like), or ``ValueError``
    ``the cloud provider does not support <what>``: the manager then skips the
    controller with that line, as upstream does."""
    if capability is None:
        raise ValueError(f"the cloud provider does not support {what}")
    return capability


def node_ref(node: Node) -> ObjectReference:
    """The reference of an Event about ``node``."""
    return ObjectReference(kind="Node", name=node.metadata.name, uid=node.metadata.uid)


class ControllerBase:
    """The state and the running of a controller that works on the API server.

    * ``self._api``: the typed client; ``self._recorder``: its Events;
      ``self._scope``: the Nodes this CCM manages.
    * Queues made by :meth:`_new_queue` are served by :meth:`_serve`, which shuts
      them down however it ends, and drained by :meth:`shutdown`.
    * ``self._stopping``: set by :meth:`shutdown`, for a periodic loop to end on.
    """

    name: str

    def __init__(
        self, *, client: KubeClient, recorder: EventRecorder, scope: NodeScope = EVERY_NODE
    ) -> None:
        self._api = TypedClient(client)
        self._recorder = recorder
        self._scope = scope
        self._queues: list[RateLimitingQueue[str]] = []
        self._stopping = False

    def _new_queue(
        self, name: str, limiter: RateLimiter, metrics: Metrics, shard: Shard = WHOLE
    ) -> RateLimitingQueue[str]:
        """A queue served by :meth:`_serve`; with a ``shard``, it takes only that shard's keys."""
        owns = None if shard == WHOLE else shard.owns
        queue: RateLimitingQueue[str] = RateLimitingQueue(name, limiter, metrics, owns=owns)
        self._queues.append(queue)
        return queue

    async def _serve(self, *work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` (the queues' workers, and any loop beside them) until cancelled;
        the queues are shut down however it ends."""
        try:
            async with asyncio.TaskGroup() as group:
                for job in work:
                    group.create_task(job)
        finally:
            for queue in self._queues:
                queue.shut_down()

    async def shutdown(self) -> None:
        """Stop taking work and wait for in-flight syncs to finish."""
        self._stopping = True
        await asyncio.gather(*(queue.shut_down_with_drain() for queue in self._queues))

    def _node_event(self, node: Node, event_type: EventType, reason: str, message: str) -> None:
        self._recorder.event(node_ref(node), event_type, reason, message)


__all__ = ["ControllerBase", "node_ref", "supported"]
