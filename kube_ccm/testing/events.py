"""An event recorder that remembers, for unit tests (ours and provider authors').

The runtime's recorder (:class:`~kube_ccm.runtime.events.ApiEventRecorder`) posts to
the API server; this one keeps the events in a list::

    recorder = FakeEventRecorder()
    controller = CloudNodeController(..., recorder=recorder)
    ...
    assert recorder.reasons() == ["SyncLoadBalancerFailed"]
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kube_ccm.runtime.events import Event, EventType, ObjectReference


@dataclass
class FakeEventRecorder:
    """Keeps events in memory; an :class:`~kube_ccm.runtime.events.EventRecorder`."""

    events: list[Event] = field(default_factory=list)

    def event(self, ref: ObjectReference, event_type: EventType, reason: str, message: str) -> None:
        self.events.append(Event(ref, event_type, reason, message))

    def reasons(self) -> list[str]:
        return [e.reason for e in self.events]


__all__ = ["FakeEventRecorder"]
