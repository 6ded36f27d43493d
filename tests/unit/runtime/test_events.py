"""Event recorder: aggregation by count, expiry, failures retried, a full queue drops."""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from typing import Any, cast

import pytest

from kube_ccm.api import wellknown as wk
from kube_ccm.runtime.client import ApiError, KubeClient
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


async def test_repeats_fired_together_become_one_event_with_a_count(api: FakeApiServer) -> None:
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
    # Repeats fired before the first write went out are in its count.
    assert api.count("POST", "/api/v1/namespaces/default/events") == 2
    assert api.count("PATCH", "/api/v1/namespaces/default/events") == 0
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


# -- concurrency, drops, retries, shutdown ------------------------------------------


class SlowClient:
    """The fake apiserver behind a delay, watching what is in flight at once."""

    def __init__(self, api: FakeApiServer, delay: float = 0.01) -> None:
        self.inner = api.client()
        self.delay = delay
        self.in_flight: Counter[str] = Counter()
        self.most_at_once = 0
        self.overlaps = 0
        self.lose_answers = 0
        self.delays: dict[str, float] = {}

    @staticmethod
    def object_name(method: str, path: str, content: bytes | None) -> str:
        if method == "POST":
            return str(json.loads(content or b"{}")["involvedObject"]["name"])
        return path.rsplit("/", 1)[1].rsplit(".", 1)[0]

    async def request(self, method: str, path: str, **kwargs: Any) -> bytes:
        name = self.object_name(method, path, kwargs.get("content"))
        if self.in_flight[name]:
            self.overlaps += 1
        self.in_flight[name] += 1
        self.most_at_once = max(self.most_at_once, sum(self.in_flight.values()))
        try:
            await asyncio.sleep(self.delays.get(name, self.delay))
            answer = await self.inner.request(method, path, **kwargs)
            if self.lose_answers:
                self.lose_answers -= 1
                raise ConnectionError("connection reset (the write was made)")
            return answer
        finally:
            self.in_flight[name] -= 1

    async def aclose(self) -> None:
        await self.inner.aclose()


def recorder_for(client: SlowClient, **kwargs: Any) -> ApiEventRecorder:
    return ApiEventRecorder(cast(KubeClient, client), "c", host="h1", **kwargs)


async def test_repeats_fired_while_one_is_written_become_one_event(api: FakeApiServer) -> None:
    client = SlowClient(api, delay=0.02)
    recorder = recorder_for(client)
    sink = asyncio.create_task(recorder.run())
    try:
        for i in range(60):
            recorder.event(REF, "Normal", "Synced", "m")
            if i % 7 == 0:
                await asyncio.sleep(0.005)  # some land while a write is in flight
        async with asyncio.timeout(10):
            await recorder.flush()
    finally:
        sink.cancel()
        await client.aclose()
    [event] = api.objects("/api/v1/namespaces/default/events")
    assert event["count"] == 60
    assert client.overlaps == 0, "two writes of one event at once"
    assert api.count("POST", "/api/v1/namespaces/default/events") == 1
    assert recorder.written == 60
    assert recorder.dropped == 0


async def test_different_events_are_written_concurrently_each_aggregated(
    api: FakeApiServer,
) -> None:
    client = SlowClient(api, delay=0.01)
    recorder = recorder_for(client, max_in_flight=4)
    refs = [
        ObjectReference(kind="Service", name=f"s{i}", namespace="ns", uid=f"u{i}")
        for i in range(40)
    ]
    sink = asyncio.create_task(recorder.run())
    try:
        for round_ in range(5):
            for ref in refs:
                recorder.event(ref, "Normal", "EnsuringLoadBalancer", "Ensuring load balancer")
            await asyncio.sleep(0.003 * round_)
        async with asyncio.timeout(10):
            await recorder.flush()
    finally:
        sink.cancel()
        await client.aclose()
    events = api.objects("/api/v1/namespaces/ns/events")
    assert sorted(e["involvedObject"]["name"] for e in events) == sorted(r.name for r in refs)
    assert {e["count"] for e in events} == {5}
    assert client.overlaps == 0
    assert client.most_at_once == 4
    assert recorder.written == 200


async def test_events_are_named_and_stamped_when_fired_not_when_written(
    api: FakeApiServer,
) -> None:
    client = SlowClient(api, delay=0.0)
    client.delays["first"] = 0.1  # written last
    recorder = recorder_for(client)
    sink = asyncio.create_task(recorder.run())
    try:
        for name in ("first", "second", "third"):
            recorder.event(ObjectReference(kind="Node", name=name), "Normal", "Synced", "m")
        async with asyncio.timeout(10):
            await recorder.flush()
    finally:
        sink.cancel()
        await client.aclose()
    names = [
        e["metadata"]["name"]
        for e in sorted(
            api.objects("/api/v1/namespaces/default/events"),
            key=lambda e: int(e["metadata"]["name"].rsplit(".", 1)[1], 16),
        )
    ]
    assert [n.split(".")[0] for n in names] == ["first", "second", "third"]
    assert api.requests[-1].path.endswith("/events")  # "first" was written last


async def test_namespaced_objects_get_their_events_in_their_namespace(api: FakeApiServer) -> None:
    client = api.client()
    recorder = ApiEventRecorder(client, "c")
    sink = asyncio.create_task(recorder.run())
    try:
        recorder.event(
            ObjectReference(kind="Service", name="web", namespace="shop"), "Normal", "X", "m"
        )
        recorder.event(ObjectReference(kind="Node", name="n1"), "Normal", "X", "m")
        await asyncio.wait_for(recorder.flush(), 10)
    finally:
        sink.cancel()
        await client.aclose()
    assert [e["involvedObject"]["name"] for e in api.objects("/api/v1/namespaces/shop/events")] == [
        "web"
    ]
    assert [
        e["involvedObject"]["name"] for e in api.objects("/api/v1/namespaces/default/events")
    ] == ["n1"]


async def test_a_full_queue_drops_new_events_but_repeats_still_count(api: FakeApiServer) -> None:
    client = api.client()
    recorder = ApiEventRecorder(client, "c", queue_size=10)
    for i in range(25):
        recorder.event(REF, "Normal", "Synced", f"m{i}")
    recorder.event(REF, "Normal", "Synced", "m0")  # queued already: folds in, not dropped
    assert recorder.dropped == 15
    sink = asyncio.create_task(recorder.run())
    try:
        await asyncio.wait_for(recorder.flush(), 10)
    finally:
        sink.cancel()
        await client.aclose()
    events = {e["message"]: e["count"] for e in api.objects("/api/v1/namespaces/default/events")}
    assert events == {f"m{i}": 2 if i == 0 else 1 for i in range(10)}
    assert recorder.written == 11
    assert recorder.dropped == 15


async def test_a_write_failing_every_attempt_is_dropped_and_the_next_one_goes_out(
    api: FakeApiServer,
) -> None:
    api.fail_next("POST", "/api/v1/namespaces/default/events", status=500, count=3)
    client = api.client()
    recorder = ApiEventRecorder(client, "c")
    sink = asyncio.create_task(recorder.run())
    try:
        recorder.event(REF, "Normal", "Synced", "m")
        await asyncio.wait_for(recorder.flush(), 10)
        assert recorder.dropped == 1
        assert recorder.written == 0
        assert api.objects("/api/v1/namespaces/default/events") == []
        recorder.event(REF, "Normal", "Synced", "m")
        await asyncio.wait_for(recorder.flush(), 10)
    finally:
        sink.cancel()
        await client.aclose()
    assert api.count("POST", "/api/v1/namespaces/default/events") == 4
    [event] = api.objects("/api/v1/namespaces/default/events")
    assert event["count"] == 1
    assert recorder.written == 1


async def test_a_create_whose_answer_was_lost_is_not_made_twice(api: FakeApiServer) -> None:
    client = SlowClient(api, delay=0.0)
    client.lose_answers = 1
    recorder = recorder_for(client)
    sink = asyncio.create_task(recorder.run())
    try:
        recorder.event(REF, "Normal", "Synced", "m")
        await asyncio.wait_for(recorder.flush(), 10)
        recorder.event(REF, "Normal", "Synced", "m")
        await asyncio.wait_for(recorder.flush(), 10)
    finally:
        sink.cancel()
        await client.aclose()
    [event] = api.objects("/api/v1/namespaces/default/events")
    assert event["count"] == 2
    assert recorder.written == 2
    assert api.count("PATCH", "/api/v1/namespaces/default/events") == 1


async def test_stop_writes_what_is_queued_then_ends_the_sink(api: FakeApiServer) -> None:
    client = SlowClient(api, delay=0.01)
    recorder = recorder_for(client, max_in_flight=2)
    sink = asyncio.create_task(recorder.run())
    for i in range(10):
        recorder.event(REF, "Normal", "Synced", f"m{i}")
    await recorder.stop(grace=10)
    await asyncio.wait_for(sink, 1)  # ended, not cancelled
    recorder.event(REF, "Normal", "Synced", "late")
    await client.aclose()
    assert len(api.objects("/api/v1/namespaces/default/events")) == 10
    assert recorder.written == 10
    assert recorder.dropped == 1


async def test_cancelling_the_sink_mid_write_ends_it_and_counts_the_rest_dropped(
    api: FakeApiServer,
) -> None:
    client = SlowClient(api, delay=10)
    recorder = recorder_for(client, max_in_flight=2)
    sink = asyncio.create_task(recorder.run())
    for i in range(5):
        recorder.event(REF, "Normal", "Synced", f"m{i}")
    await asyncio.sleep(0.01)
    sink.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(sink, 1)
    assert client.in_flight.total() == 0
    assert recorder.dropped == 5
    await asyncio.wait_for(recorder.flush(), 1)  # nothing left to wait for
    await client.aclose()


async def test_a_repeat_after_the_write_patches_count_and_last_timestamp(
    api: FakeApiServer,
) -> None:
    client = api.client()
    recorder = ApiEventRecorder(client, "c")
    sink = asyncio.create_task(recorder.run())
    try:
        recorder.event(REF, "Normal", "Synced", "m")
        await asyncio.wait_for(recorder.flush(), 10)
        [first] = api.objects("/api/v1/namespaces/default/events")
        await asyncio.sleep(1.1)  # timestamps are in seconds
        recorder.event(REF, "Normal", "Synced", "m")
        await asyncio.wait_for(recorder.flush(), 10)
    finally:
        sink.cancel()
        await client.aclose()
    [event] = api.objects("/api/v1/namespaces/default/events")
    assert event["metadata"]["name"] == first["metadata"]["name"]
    assert event["count"] == 2
    assert event["firstTimestamp"] == first["firstTimestamp"]
    assert event["lastTimestamp"] > first["lastTimestamp"]
    assert api.count("PATCH", "/api/v1/namespaces/default/events") == 1


async def test_a_long_message_is_cut_to_the_events_api_limit(api: FakeApiServer) -> None:
    await record(api, ("Warning", "SyncLoadBalancerFailed", "x" * 300_000))
    message = stored(api)["SyncLoadBalancerFailed"]["message"]
    assert len(message) == 1024
    assert message.endswith("x...")


class FirstWriteSlow(SlowClient):
    """The first write waits ``first_delay``; every other one goes out at once."""

    def __init__(self, api: FakeApiServer, first_delay: float) -> None:
        super().__init__(api, delay=0.0)
        self.first_delay: float | None = first_delay

    async def request(self, method: str, path: str, **kwargs: Any) -> bytes:
        name = self.object_name(method, path, kwargs.get("content"))
        if self.first_delay is not None:
            self.delays[name], self.first_delay = self.first_delay, None
        elif name in self.delays:
            del self.delays[name]
        return await super().request(method, path, **kwargs)


async def test_events_of_one_object_are_written_in_the_order_fired(api: FakeApiServer) -> None:
    client = FirstWriteSlow(api, first_delay=0.1)
    recorder = recorder_for(client)
    web = ObjectReference(kind="Service", name="web", namespace="shop", uid="u-web")
    db = ObjectReference(kind="Service", name="db", namespace="shop", uid="u-db")
    sink = asyncio.create_task(recorder.run())
    try:
        recorder.event(web, "Normal", "EnsuringLoadBalancer", "Ensuring load balancer")
        recorder.event(web, "Normal", "EnsuredLoadBalancer", "Ensured load balancer")
        recorder.event(db, "Normal", "EnsuringLoadBalancer", "Ensuring load balancer")
        await asyncio.sleep(0.02)  # web's first write is in flight
        recorder.event(web, "Normal", "EnsuringLoadBalancer", "Ensuring load balancer")
        async with asyncio.timeout(10):
            await recorder.flush()
    finally:
        sink.cancel()
        await client.aclose()
    writes = [
        (r.method, cast(dict[str, Any], r.body).get("involvedObject", {}).get("name"), r.body)
        for r in api.requests
        if "/events" in r.path
    ]
    assert [(m, n) for m, n, _ in writes] == [
        ("POST", "db"),  # another object's event is not held up by web's slow write
        ("POST", "web"),
        ("POST", "web"),
        ("PATCH", None),
    ]
    web_bodies = [cast(dict[str, Any], b) for m, n, b in writes if n == "web"]
    assert [b["reason"] for b in web_bodies] == ["EnsuringLoadBalancer", "EnsuredLoadBalancer"]
    assert client.most_at_once == 2
    assert client.overlaps == 0
    events = {
        (e["involvedObject"]["name"], e["reason"]): e["count"]
        for e in api.objects("/api/v1/namespaces/shop/events")
    }
    assert events == {
        ("web", "EnsuringLoadBalancer"): 2,  # the repeat still aggregates
        ("web", "EnsuredLoadBalancer"): 1,
        ("db", "EnsuringLoadBalancer"): 1,
    }
    assert recorder.written == 4
    assert recorder.dropped == 0


class RefusingClient(SlowClient):
    """The fake apiserver, except that creates into ``refused`` namespaces get ``error``."""

    def __init__(self, api: FakeApiServer, refused: str, error: ApiError) -> None:
        super().__init__(api, delay=0.0)
        self.refused = refused
        self.error = error
        self.refusals = 0

    async def request(self, method: str, path: str, **kwargs: Any) -> bytes:
        if method == "POST" and path.startswith(f"/api/v1/namespaces/{self.refused}/"):
            self.refusals += 1
            raise self.error
        return await super().request(method, path, **kwargs)


TERMINATING = ApiError(
    403,
    "Forbidden",
    'events "svc.1" is forbidden: unable to create new content in namespace gone '
    "because it is being terminated",
    (wk.CAUSE_NAMESPACE_TERMINATING,),
)


@pytest.mark.parametrize(
    ("error", "level"),
    [
        (TERMINATING, logging.DEBUG),
        (ApiError(403, "Forbidden", 'User "x" cannot create resource "events"'), logging.WARNING),
        (ApiError(404, "NotFound", 'namespaces "gone" not found'), logging.WARNING),
        (ApiError(422, "Invalid", "Event is invalid"), logging.WARNING),
    ],
)
async def test_an_event_the_server_refuses_for_good_is_dropped_at_once_and_others_flow(
    api: FakeApiServer, caplog: pytest.LogCaptureFixture, error: ApiError, level: int
) -> None:
    client = RefusingClient(api, "gone", error)
    recorder = recorder_for(client)
    sink = asyncio.create_task(recorder.run())
    caplog.set_level(logging.DEBUG, logger="kube_ccm.runtime.events")
    doomed = ObjectReference(kind="Service", name="svc", namespace="gone")
    alive = ObjectReference(kind="Service", name="svc", namespace="alive")
    try:
        for message in ("m1", "m2", "m3"):
            recorder.event(doomed, "Warning", "SyncLoadBalancerFailed", message)
            recorder.event(alive, "Warning", "SyncLoadBalancerFailed", message)
        await asyncio.wait_for(recorder.flush(), 10)
    finally:
        sink.cancel()
        await client.aclose()
    assert client.refusals == 3, "each event tried once, never again"
    assert recorder.dropped == 3
    assert recorder.written == 3
    assert sorted(e["message"] for e in api.objects("/api/v1/namespaces/alive/events")) == [
        "m1",
        "m2",
        "m3",
    ]
    logged = [r for r in caplog.records if r.name == "kube_ccm.runtime.events"]
    assert [r.levelno for r in logged] == [level] * 3, [r.getMessage() for r in logged]


async def test_a_server_error_on_an_event_is_still_retried(api: FakeApiServer) -> None:
    api.fail_next("POST", "/api/v1/namespaces/default/events", status=429, reason="TooMany")
    recorder = await record(api, ("Normal", "Synced", "m"))
    assert recorder.written == 1
    assert api.count("POST", "/api/v1/namespaces/default/events") == 2
