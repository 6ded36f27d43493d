"""Events as kubectl shows them: written once, repeats aggregated by count; Events into
a namespace being deleted are dropped at once, as client-go drops them."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable
from typing import Any, cast

import pytest

from kube_ccm.runtime.client import KubeClient
from kube_ccm.runtime.events import ApiEventRecorder, ObjectReference
from kube_ccm.testing.pytest_plugin import Cleanup
from kube_ccm.testing.waiting import eventually


async def events_for(client: KubeClient, name: str) -> list[dict[str, Any]]:
    listed = await client.get(
        "/api/v1/namespaces/default/events",
        {"fieldSelector": f"involvedObject.name={name}"},
    )
    items: list[dict[str, Any]] = listed["items"]
    return items


async def test_repeated_event_is_one_object_with_a_count_and_others_are_separate(
    kube_client: KubeClient, kube_cleanup: Cleanup, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("node")
    node = await kube_client.create("/api/v1/nodes", {"metadata": {"name": name}})
    kube_cleanup.add(f"/api/v1/nodes/{name}")
    ref = ObjectReference(kind="Node", name=name, uid=node["metadata"]["uid"])
    recorder = ApiEventRecorder(kube_client, "cloud-node-controller", host="test-host")
    sink = asyncio.create_task(recorder.run())
    try:
        for _ in range(3):
            recorder.event(ref, "Normal", "Synced", "Node synced successfully")
        recorder.event(ref, "Warning", "DeletingNodeFailed", f"Failed deleting node {name}: boom")
        async with asyncio.timeout(30):
            await recorder.flush()
    finally:
        sink.cancel()

    events = {e["reason"]: e for e in await events_for(kube_client, name)}
    assert set(events) == {"Synced", "DeletingNodeFailed"}
    synced = events["Synced"]
    assert synced["count"] == 3
    assert synced["type"] == "Normal"
    assert synced["message"] == "Node synced successfully"
    assert synced["source"] == {"component": "cloud-node-controller", "host": "test-host"}
    assert synced["involvedObject"]["kind"] == "Node"
    assert synced["involvedObject"]["uid"] == node["metadata"]["uid"]
    assert events["DeletingNodeFailed"]["type"] == "Warning"
    assert events["DeletingNodeFailed"]["count"] == 1


class FirstWriteSlow:
    """The real apiserver, with the first request held back ``delay`` seconds."""

    def __init__(self, inner: KubeClient, delay: float) -> None:
        self.inner, self.delay = inner, delay

    async def request(self, method: str, path: str, **kwargs: Any) -> Any:
        delay, self.delay = self.delay, 0.0
        await asyncio.sleep(delay)
        return await self.inner.request(method, path, **kwargs)


async def test_events_of_one_object_are_created_in_the_order_fired(
    kube_client: KubeClient, unique_name: Callable[[str], str]
) -> None:
    """``kubectl describe`` sorts by second-precision timestamps, then the order
    listed (creation order): an ``EnsuredLoadBalancer`` created before its
    ``EnsuringLoadBalancer`` would show first."""
    name = unique_name("svc")
    ref = ObjectReference(kind="Service", name=name, namespace="default", uid=f"uid-{name}")
    client = cast(KubeClient, FirstWriteSlow(kube_client, delay=0.5))
    recorder = ApiEventRecorder(client, "service-controller", host="test-host")
    sink = asyncio.create_task(recorder.run())
    try:
        recorder.event(ref, "Normal", "EnsuringLoadBalancer", "Ensuring load balancer")
        recorder.event(ref, "Normal", "EnsuredLoadBalancer", "Ensured load balancer")
        async with asyncio.timeout(30):
            await recorder.flush()
    finally:
        sink.cancel()

    events = await events_for(kube_client, name)
    by_creation = sorted(events, key=lambda e: int(e["metadata"]["resourceVersion"]))
    assert [e["reason"] for e in by_creation] == ["EnsuringLoadBalancer", "EnsuredLoadBalancer"]


class CountingClient:
    """The real apiserver, counting the Event creates sent into each namespace."""

    def __init__(self, inner: KubeClient) -> None:
        self.inner = inner
        self.creates: Counter[str] = Counter()

    async def request(self, method: str, path: str, **kwargs: Any) -> Any:
        if method == "POST" and path.endswith("/events"):
            self.creates[path.split("/")[4]] += 1
        return await self.inner.request(method, path, **kwargs)


async def test_events_into_a_terminating_namespace_are_dropped_at_once_and_others_flow(
    kube_client: KubeClient,
    kube_namespace: str,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The apiserver's NamespaceLifecycle admission refuses every create into a
    namespace being deleted (403, cause NamespaceTerminating); no retry can succeed.
    A ConfigMap with a finalizer holds the namespace in Terminating, as a Service with
    the load-balancer cleanup finalizer does while its load balancer goes."""
    doomed = unique_name("doomed")
    await kube_client.create("/api/v1/namespaces", {"metadata": {"name": doomed}})
    kube_cleanup.add(f"/api/v1/namespaces/{doomed}")
    await kube_client.create(
        f"/api/v1/namespaces/{doomed}/configmaps",
        {"metadata": {"name": "held", "finalizers": ["kube-ccm.io/test-hold"]}},
    )
    kube_cleanup.add(f"/api/v1/namespaces/{doomed}/configmaps/held")
    await kube_client.delete(f"/api/v1/namespaces/{doomed}")

    async def terminating() -> bool:
        namespace = await kube_client.get(f"/api/v1/namespaces/{doomed}")
        return bool(namespace["status"].get("phase") == "Terminating")

    await eventually(terminating, within=30, what=f"namespace {doomed} Terminating")

    client = CountingClient(kube_client)
    recorder = ApiEventRecorder(cast(KubeClient, client), "service-controller", host="h")
    caplog.set_level(logging.DEBUG, logger="kube_ccm.runtime.events")
    sink = asyncio.create_task(recorder.run())
    try:
        for i in range(5):
            for namespace in (doomed, kube_namespace):
                ref = ObjectReference(kind="Service", name="web", namespace=namespace, uid="u")
                recorder.event(ref, "Warning", "SyncLoadBalancerFailed", f"attempt {i}")
        async with asyncio.timeout(60):
            await recorder.flush()
    finally:
        sink.cancel()
        await asyncio.gather(sink, return_exceptions=True)

    assert client.creates == {doomed: 5, kube_namespace: 5}, "one create each, no retry"
    assert recorder.dropped == 5
    assert recorder.written == 5
    listed = await kube_client.get(f"/api/v1/namespaces/{kube_namespace}/events")
    assert sorted(e["message"] for e in listed["items"]) == [f"attempt {i}" for i in range(5)]
    logged = [r for r in caplog.records if r.name == "kube_ccm.runtime.events"]
    assert [r.levelno for r in logged] == [logging.DEBUG] * 5, [r.getMessage() for r in logged]
    assert all("being deleted" in r.getMessage() for r in logged)
