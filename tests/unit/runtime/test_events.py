"""Event recorder: aggregation by count, expiry, failures retried, a full queue drops."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kube_ccm.runtime.events import ApiEventRecorder, ObjectReference
from kube_ccm.testing.fakeapi import FakeApiServer

REF = ObjectReference(kind="Node", name="n1", uid="uid-1")


@pytest.fixture
def api() -> FakeApiServer:
    return FakeApiServer()


async def record(api: FakeApiServer, *events: tuple[str, str, str]) -> ApiEventRecorder:
    client = api.client()
    recorder = ApiEventRecorder(client, "cloud-node-controller", host="h1")
    sink = asyncio.create_task(recorder.run())
    try:
        for event_type, reason, message in events:
            recorder.event(REF, event_type, reason, message)  # type: ignore[arg-type]
        async with asyncio.timeout(10):
            await recorder.flush()
    finally:
        sink.cancel()
        await asyncio.gather(sink, return_exceptions=True)
        await client.aclose()
    return recorder


def stored(api: FakeApiServer) -> dict[str, dict[str, Any]]:
    return {e["reason"]: e for e in api.objects("/api/v1/namespaces/default/events")}


async def test_repeats_become_one_event_with_a_count(api: FakeApiServer) -> None:
    await record(
        api,
        ("Normal", "Synced", "Node synced successfully"),
        ("Normal", "Synced", "Node synced successfully"),
        ("Normal", "Synced", "Node synced successfully"),
        ("Warning", "DeletingNodeFailed", "Failed deleting node n1: boom"),
    )
    events = stored(api)
    assert events["Synced"]["count"] == 3
    assert events["DeletingNodeFailed"]["count"] == 1
    assert api.count("POST", "/api/v1/namespaces/default/events") == 2
    assert api.count("PATCH", "/api/v1/namespaces/default/events") == 2
    synced = events["Synced"]
    assert synced["source"] == {"component": "cloud-node-controller", "host": "h1"}
    assert synced["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Node",
        "name": "n1",
        "uid": "uid-1",
    }
    assert synced["reportingComponent"] == "cloud-node-controller"


async def test_an_expired_event_is_created_again(api: FakeApiServer) -> None:
    client = api.client()
    recorder = ApiEventRecorder(client, "c")
    sink = asyncio.create_task(recorder.run())
    try:
        recorder.event(REF, "Normal", "Synced", "m")
        await recorder.flush()
        for event in api.objects("/api/v1/namespaces/default/events"):
            api.delete_object(f"/api/v1/namespaces/default/events/{event['metadata']['name']}")
        recorder.event(REF, "Normal", "Synced", "m")
        await asyncio.wait_for(recorder.flush(), 10)
    finally:
        sink.cancel()
        await client.aclose()
    events = api.objects("/api/v1/namespaces/default/events")
    assert len(events) == 1
    assert events[0]["count"] == 1


async def test_a_failed_write_is_retried(api: FakeApiServer) -> None:
    api.fail_next("POST", "/api/v1/namespaces/default/events", status=500, count=2)
    recorder = await record(api, ("Normal", "Synced", "m"))
    assert recorder.written == 1
    assert len(api.objects("/api/v1/namespaces/default/events")) == 1


async def test_a_full_queue_drops_instead_of_blocking_the_controller() -> None:
    api = FakeApiServer()
    client = api.client()
    recorder = ApiEventRecorder(client, "c")
    for i in range(5000):
        recorder.event(REF, "Normal", "Synced", f"m{i}")
    assert recorder.dropped > 0
    await client.aclose()
