"""kube_ccm.cloudprovider's Event recorder: what a provider, in tree or out, records."""

from __future__ import annotations

import asyncio

from kube_ccm.api.objects import ObjectMeta
from kube_ccm.cloudprovider import (
    ClientBuilder,
    EventRecorder,
    Node,
    ObjectReference,
    ProviderEventRecorder,
    Service,
    object_reference,
    start_event_recorder,
)
from kube_ccm.testing.fakeapi import FakeApiServer, FakeClientBuilder


def service(name: str = "web", namespace: str = "shop") -> Service:
    return Service(metadata=ObjectMeta(name=name, namespace=namespace, uid=f"uid-{name}"))


def node(name: str = "n1") -> Node:
    return Node(metadata=ObjectMeta(name=name, uid=f"uid-{name}"))


async def test_a_provider_records_events_through_a_client_of_its_client_builder() -> None:
    fake = FakeApiServer()
    builder: ClientBuilder = FakeClientBuilder(fake)
    events = start_event_recorder(builder.client("mycloud"), "mycloud")
    recorder: EventRecorder = events  # the protocol a provider holds it as
    recorder.event(object_reference(service()), "Warning", "NoAddress", "pool exhausted")
    recorder.event(object_reference(node()), "Normal", "Renamed", "now n1-b")
    await events.flush()
    (on_service,) = fake.objects("/api/v1/namespaces/shop/events")
    assert on_service["involvedObject"] == {
        "kind": "Service",
        "name": "web",
        "namespace": "shop",
        "uid": "uid-web",
        "apiVersion": "v1",
    }
    assert (on_service["type"], on_service["reason"], on_service["message"]) == (
        "Warning",
        "NoAddress",
        "pool exhausted",
    )
    assert on_service["source"]["component"] == "mycloud"
    assert on_service["reportingComponent"] == "mycloud"
    (on_node,) = fake.objects("/api/v1/namespaces/default/events")  # cluster-scoped: default
    assert on_node["involvedObject"]["kind"] == "Node"
    assert "namespace" not in on_node["involvedObject"]
    assert events.written == 2
    await events.aclose()


async def test_a_repeat_raises_the_count_of_the_event_already_written() -> None:
    fake = FakeApiServer()
    events = start_event_recorder(FakeClientBuilder(fake).client("mycloud"), "mycloud")
    ref = ObjectReference(kind="Service", name="web", namespace="shop", uid="u")
    events.event(ref, "Warning", "NoAddress", "pool exhausted")
    await events.flush()
    events.event(ref, "Warning", "NoAddress", "pool exhausted")
    await events.flush()
    (written,) = fake.objects("/api/v1/namespaces/shop/events")
    assert written["count"] == 2
    await events.aclose()


async def test_aclose_writes_what_is_queued_then_drops_what_comes_after() -> None:
    fake = FakeApiServer()
    events = start_event_recorder(FakeClientBuilder(fake).client("mycloud"), "mycloud")
    assert isinstance(events, ProviderEventRecorder)
    events.event(object_reference(service()), "Warning", "NoAddress", "first")
    await events.aclose()
    await events.aclose()  # twice is harmless
    events.event(object_reference(service()), "Warning", "NoAddress", "too late")
    await asyncio.sleep(0)
    assert [e["message"] for e in fake.objects("/api/v1/namespaces/shop/events")] == ["first"]
    assert events.dropped == 1
