"""The in-memory API server, exercised through the real KubeClient and Informer."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kube_ccm.runtime import resources
from kube_ccm.runtime.client import ApiError, KubeClient, WatchEvent
from kube_ccm.runtime.informer import Backoff, Informer
from kube_ccm.runtime.transport import Request
from kube_ccm.testing.fakeapi import FakeApiServer
from kube_ccm.testing.waiting import eventually

NODES = "/api/v1/nodes"
EVENTS = "/api/v1/namespaces/default/events"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"


def node(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


@pytest.fixture
def fake() -> FakeApiServer:
    return FakeApiServer()


@pytest.fixture
async def client(fake: FakeApiServer) -> AsyncIterator[KubeClient]:
    async with fake.client() as kube:
        yield kube


async def api_error(call: Any) -> ApiError:
    with pytest.raises(ApiError) as info:
        await call
    return info.value


# -- CRUD and errors -----------------------------------------------------------


async def test_create_get_replace_delete_with_metadata_and_status_bodies(
    fake: FakeApiServer, client: KubeClient
) -> None:
    created = await client.create(f"{LEASES}", {"metadata": {"name": "l"}, "spec": {"a": 1}})
    meta = created["metadata"]
    assert (created["kind"], created["apiVersion"]) == ("Lease", "coordination.k8s.io/v1")
    assert meta["namespace"] == "kube-system"
    assert meta["uid"]
    assert meta["creationTimestamp"]
    assert meta["resourceVersion"] == fake.resource_version
    assert meta["generation"] == 1

    got = await client.get(f"{LEASES}/l")
    got["spec"]["a"] = 2
    replaced = await client.replace(f"{LEASES}/l", got)
    assert int(replaced["metadata"]["resourceVersion"]) > int(meta["resourceVersion"])
    assert replaced["metadata"]["generation"] == 2
    assert replaced["metadata"]["uid"] == meta["uid"]

    stale = await api_error(client.replace(f"{LEASES}/l", got))
    assert stale.conflict
    assert not stale.already_exists
    assert stale.message == (
        'Operation cannot be fulfilled on leases.coordination.k8s.io "l": the object has been '
        "modified; please apply your changes to the latest version and try again"
    )
    exists = await api_error(client.create(LEASES, {"metadata": {"name": "l"}}))
    assert exists.already_exists
    assert exists.reason == "AlreadyExists"

    deleted = await client.delete(f"{LEASES}/l")
    assert deleted["status"] == "Success"
    assert fake.object(f"{LEASES}/l") is None
    missing = await api_error(client.get(f"{LEASES}/l"))
    assert missing.not_found
    assert missing.reason == "NotFound"
    assert missing.message == 'leases.coordination.k8s.io "l" not found'
    assert (await api_error(client.delete(f"{NODES}/nope"))).message == 'nodes "nope" not found'


async def test_error_body_is_a_kubernetes_status(fake: FakeApiServer, client: KubeClient) -> None:
    raw = await fake.send(Request("GET", f"{NODES}/x"))
    assert raw.status == 404
    assert json.loads(raw.content) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'nodes "x" not found',
        "reason": "NotFound",
        "code": 404,
    }
    assert (await api_error(client.get("/api/v1/widgets"))).not_found


async def test_generate_name_and_namespace_from_the_path(client: KubeClient) -> None:
    first = await client.create(EVENTS, {"metadata": {"generateName": "ev-"}, "reason": "R"})
    second = await client.create(EVENTS, {"metadata": {"generateName": "ev-"}, "reason": "R"})
    assert first["metadata"]["name"].startswith("ev-")
    assert len(first["metadata"]["name"]) == 8
    assert first["metadata"]["name"] != second["metadata"]["name"]
    assert first["metadata"]["namespace"] == "default"
    assert (await api_error(client.create(EVENTS, {"metadata": {}}))).status == 422


async def test_apply_patches_are_refused(client: KubeClient, fake: FakeApiServer) -> None:
    fake.put_object(node("n1"))
    refused = await api_error(client.patch(f"{NODES}/n1", {}, patch_type="apply"))
    assert refused.status == 415


# -- list ----------------------------------------------------------------------


async def test_list_pages_with_limit_and_continue(fake: FakeApiServer, client: KubeClient) -> None:
    for i in range(5):
        fake.put_object(node(f"n{i}"))
    first = await client.get(NODES, {"limit": 2})
    assert first["kind"] == "NodeList"
    assert first["metadata"]["remainingItemCount"] == 3
    assert [o["metadata"]["name"] for o in first["items"]] == ["n0", "n1"]
    assert "kind" not in first["items"][0]
    fake.put_object(node("n9"))  # later pages show the current state
    second = await client.get(NODES, {"limit": 2, "continue": first["metadata"]["continue"]})
    third = await client.get(NODES, {"limit": 2, "continue": second["metadata"]["continue"]})
    names = [o["metadata"]["name"] for page in (second, third) for o in page["items"]]
    assert names == ["n2", "n3", "n4", "n9"]
    assert "continue" not in third["metadata"]
    assert third["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    assert (await api_error(client.get(NODES, {"continue": "garbage"}))).status == 400


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("role=web", ["a"]),
        ("role==web", ["a"]),
        ("role!=web", ["b", "c"]),
        ("role", ["a", "b"]),
        ("!role", ["c"]),
        ("role,zone=z1", ["b"]),
        # The whole grammar, as the daemon parses it (kube_ccm.api.selectors):
        ("role in (web,db)", ["a", "b"]),
        ("zone notin (z1)", ["a"]),
        ("role notin (web),zone", ["b", "c"]),
    ],
)
async def test_label_selectors(
    fake: FakeApiServer, client: KubeClient, selector: str, expected: list[str]
) -> None:
    fake.put_object(node("a", role="web"))
    fake.put_object(node("b", role="db", zone="z1"))
    fake.put_object(node("c", zone="z1"))
    listed = await client.get(NODES, {"labelSelector": selector})
    assert [o["metadata"]["name"] for o in listed["items"]] == expected


@pytest.mark.parametrize(
    ("parameter", "selector"),
    [
        ("labelSelector", "role=(web"),
        ("labelSelector", "role in web"),
        ("fieldSelector", "metadata.name in (a,b)"),
        ("fieldSelector", "metadata.name"),
        ("fieldSelector", "!metadata.name"),
    ],
)
async def test_a_selector_the_apiserver_refuses_is_a_bad_request(
    fake: FakeApiServer, client: KubeClient, parameter: str, selector: str
) -> None:
    fake.put_object(node("a", role="web"))
    assert (await api_error(client.get(NODES, {parameter: selector}))).status == 400


async def test_field_selector_and_namespaces(fake: FakeApiServer, client: KubeClient) -> None:
    fake.put_object(node("a"))
    fake.put_object(node("b"))
    by_name = await client.get(NODES, {"fieldSelector": "metadata.name=b"})
    assert [o["metadata"]["name"] for o in by_name["items"]] == ["b"]
    await client.create(EVENTS, {"metadata": {"name": "e1"}})
    await client.create("/api/v1/namespaces/other/events", {"metadata": {"name": "e2"}})
    assert len((await client.get(EVENTS))["items"]) == 1
    assert len((await client.get("/api/v1/events"))["items"]) == 2
    assert len(fake.objects("/api/v1/events")) == 2
    assert fake.objects("/apis/events.k8s.io/v1/events") == []


# -- patches -------------------------------------------------------------------


async def test_strategic_merge_of_labels_and_taints_with_resource_version_precondition(
    fake: FakeApiServer, client: KubeClient
) -> None:
    stored = fake.put_object(
        {
            **node("n1", keep="1", drop="2"),
            "spec": {"taints": [{"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "X"}]},
        }
    )
    rv = stored["metadata"]["resourceVersion"]
    patch = {
        "metadata": {"resourceVersion": rv, "labels": {"drop": None, "new": "3"}},
        "spec": {"taints": [{"key": "b", "effect": "X"}], "providerID": "sim://n1"},
    }
    patched = await client.patch(f"{NODES}/n1", patch)
    assert patched["metadata"]["labels"] == {"keep": "1", "new": "3"}
    assert patched["spec"] == {"taints": [{"key": "b", "effect": "X"}], "providerID": "sim://n1"}
    assert patched["metadata"]["resourceVersion"] != rv

    stale = await api_error(client.patch(f"{NODES}/n1", patch))  # same (now old) rv
    assert stale.conflict
    assert fake.object(f"{NODES}/n1") == patched


async def test_conflict_next_write_simulates_a_concurrent_update(
    fake: FakeApiServer, client: KubeClient
) -> None:
    rv = fake.put_object(node("n1"))["metadata"]["resourceVersion"]
    fake.conflict_next_write(f"{NODES}/n1")
    patch = {"metadata": {"resourceVersion": rv, "labels": {"a": "b"}}}
    assert (await api_error(client.patch(f"{NODES}/n1", patch))).conflict
    assert fake.object(f"{NODES}/n1")["metadata"]["labels"] == {}  # type: ignore[index]
    fresh = fake.object(f"{NODES}/n1")["metadata"]["resourceVersion"]  # type: ignore[index]
    patch["metadata"]["resourceVersion"] = fresh
    assert (await client.patch(f"{NODES}/n1", patch))["metadata"]["labels"] == {"a": "b"}


async def test_addresses_merge_by_type_unless_replaced(
    fake: FakeApiServer, client: KubeClient
) -> None:
    fake.put_object(
        {
            **node("n1"),
            "status": {
                "addresses": [
                    {"type": "InternalIP", "address": "10.0.0.1"},
                    {"type": "Hostname", "address": "n1"},
                ]
            },
        }
    )
    merged = await client.patch(
        f"{NODES}/n1/status", {"status": {"addresses": [{"type": "InternalIP", "address": "1.1"}]}}
    )
    assert merged["status"]["addresses"] == [
        {"type": "InternalIP", "address": "1.1"},
        {"type": "Hostname", "address": "n1"},
    ]
    replaced = await client.patch(
        f"{NODES}/n1/status",
        {"status": {"addresses": [{"$patch": "replace"}, {"type": "ExternalIP", "address": "2"}]}},
    )
    assert replaced["status"]["addresses"] == [{"type": "ExternalIP", "address": "2"}]
    deleted = await client.patch(
        f"{NODES}/n1/status",
        {"status": {"addresses": [{"$patch": "delete", "type": "ExternalIP"}]}},
    )
    assert deleted["status"]["addresses"] == []


async def test_conditions_merge_by_type_and_nulls_delete_nested_fields(
    fake: FakeApiServer, client: KubeClient
) -> None:
    conditions = [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]
    fake.put_object({**node("n1"), "status": {"conditions": conditions}})
    patched = await client.patch(
        f"{NODES}/n1/status",
        {
            "status": {
                "conditions": [
                    {"type": "Ready", "status": "False", "reason": None},
                    {"type": "DiskPressure", "status": "False"},
                ]
            }
        },
    )
    assert patched["status"]["conditions"] == [
        {"type": "Ready", "status": "False"},
        {"type": "DiskPressure", "status": "False"},
    ]


async def test_finalizers_merge_as_a_set_and_delete_from_primitive_list(
    fake: FakeApiServer, client: KubeClient
) -> None:
    svc = "/api/v1/namespaces/default/services/s"
    await client.create(
        "/api/v1/namespaces/default/services",
        {"metadata": {"name": "s", "finalizers": ["foo"]}, "spec": {"ports": [{"port": 80}]}},
    )
    added = await client.patch(
        f"{svc}/status",
        {"metadata": {"$setElementOrder/finalizers": ["foo", "bar"], "finalizers": ["bar", "foo"]}},
    )
    assert added["metadata"]["finalizers"] == ["foo", "bar"]
    removed = await client.patch(
        f"{svc}/status", {"metadata": {"$deleteFromPrimitiveList/finalizers": ["foo"]}}
    )
    assert removed["metadata"]["finalizers"] == ["bar"]
    ports = await client.patch(svc, {"spec": {"ports": [{"port": 443, "name": "https"}]}})
    assert ports["spec"]["ports"] == [{"port": 80}, {"port": 443, "name": "https"}]


async def test_merge_patch_null_deletes_and_lists_replace(
    fake: FakeApiServer, client: KubeClient
) -> None:
    await client.create(EVENTS, {"metadata": {"name": "e"}, "count": 1, "note": "x", "l": [1, 2]})
    patched = await client.patch(
        f"{EVENTS}/e", {"count": 2, "note": None, "l": [3]}, patch_type="merge"
    )
    assert (patched["count"], "note" in patched, patched["l"]) == (2, False, [3])
    assert fake.object(f"{EVENTS}/e") == patched


async def test_json_patch_operations(fake: FakeApiServer, client: KubeClient) -> None:
    fake.put_object({**node("n1", a="1"), "spec": {"taints": [{"key": "t1"}, {"key": "t2"}]}})
    ops = [
        {"op": "test", "path": "/metadata/labels/a", "value": "1"},
        {"op": "add", "path": "/metadata/labels/b~1c", "value": "2"},
        {"op": "replace", "path": "/metadata/labels/a", "value": "9"},
        {"op": "remove", "path": "/spec/taints/0"},
        {"op": "add", "path": "/spec/taints/-", "value": {"key": "t3"}},
    ]
    patched = await client.patch(f"{NODES}/n1", ops, patch_type="json")
    assert patched["metadata"]["labels"] == {"a": "9", "b/c": "2"}
    assert patched["spec"]["taints"] == [{"key": "t2"}, {"key": "t3"}]
    test = [{"op": "test", "path": "/metadata/labels/a", "value": "1"}]
    failed = await api_error(client.patch(f"{NODES}/n1", test, patch_type="json"))
    assert failed.status == 422
    assert fake.object(f"{NODES}/n1")["metadata"]["labels"]["a"] == "9"  # type: ignore[index]


async def test_status_subresource_separation(fake: FakeApiServer, client: KubeClient) -> None:
    fake.put_object({**node("n1"), "spec": {"podCIDR": "a"}, "status": {"phase": "old"}})
    main = await client.patch(
        f"{NODES}/n1", {"spec": {"podCIDR": "b"}, "status": {"phase": "ignored"}}
    )
    assert (main["spec"]["podCIDR"], main["status"]["phase"]) == ("b", "old")
    status = await client.patch(
        f"{NODES}/n1/status",
        {"metadata": {"labels": {"l": "v"}}, "spec": {"podCIDR": "c"}, "status": {"phase": "new"}},
    )
    assert status["spec"]["podCIDR"] == "b"
    assert (status["status"]["phase"], status["metadata"]["labels"]) == ("new", {"l": "v"})
    assert (await api_error(client.patch(f"{EVENTS}/x/status", {}))).not_found


async def test_noop_write_keeps_the_resource_version(
    fake: FakeApiServer, client: KubeClient
) -> None:
    rv = fake.put_object(node("n1", a="b"))["metadata"]["resourceVersion"]
    patched = await client.patch(f"{NODES}/n1", {"metadata": {"labels": {"a": "b"}}})
    assert patched["metadata"]["resourceVersion"] == rv == fake.resource_version


# -- deletion ------------------------------------------------------------------


async def test_delete_with_finalizers_waits_for_the_last_one(
    fake: FakeApiServer, client: KubeClient
) -> None:
    fake.put_object({**node("n1"), "metadata": {"name": "n1", "finalizers": ["a", "b"]}})
    marked = await client.delete(f"{NODES}/n1")
    assert marked["metadata"]["deletionTimestamp"]
    assert marked["metadata"]["deletionGracePeriodSeconds"] == 0
    again = await client.delete(f"{NODES}/n1")
    assert again["metadata"]["resourceVersion"] == marked["metadata"]["resourceVersion"]
    await client.patch(f"{NODES}/n1", {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}})
    assert fake.object(f"{NODES}/n1") is not None
    await client.patch(f"{NODES}/n1", {"metadata": {"finalizers": None}})
    assert fake.object(f"{NODES}/n1") is None


async def test_delete_preconditions(fake: FakeApiServer, client: KubeClient) -> None:
    fake.put_object(node("n1"))
    body = {"preconditions": {"resourceVersion": "1"}}
    assert (await api_error(client.delete(f"{NODES}/n1", body))).conflict
    assert fake.object(f"{NODES}/n1") is not None


# -- fault injection and the request log -----------------------------------------


async def test_fail_next_and_request_log(fake: FakeApiServer, client: KubeClient) -> None:
    fake.put_object(node("n1"))
    fake.fail_next("GET", f"{NODES}/n1", status=503, reason="ServiceUnavailable", count=2)
    for _ in range(2):
        error = await api_error(client.get(f"{NODES}/n1"))
        assert (error.status, error.reason) == (503, "ServiceUnavailable")
    assert (await client.get(f"{NODES}/n1"))["metadata"]["name"] == "n1"
    await client.patch(f"{NODES}/n1", {"metadata": {"labels": {"x": "y"}}}, params={"a": "b"})
    assert fake.count("GET", f"{NODES}/n1") == 3
    [write] = fake.writes()
    assert (write.method, write.path, write.params) == ("PATCH", f"{NODES}/n1", {"a": "b"})
    assert write.body == {"metadata": {"labels": {"x": "y"}}}
    assert write.content_type == "application/strategic-merge-patch+json"


# -- watch ---------------------------------------------------------------------


@contextlib.asynccontextmanager
async def watching(
    client: KubeClient, resource_version: str, **kwargs: Any
) -> AsyncIterator[AsyncIterator[WatchEvent]]:
    stream = client.watch(NODES, resource_version=resource_version, **kwargs)
    try:
        yield stream
    finally:
        await stream.aclose()  # type: ignore[attr-defined]


async def collect(
    stream: AsyncIterator[WatchEvent], count: int
) -> list[tuple[str, str, dict[str, Any]]]:
    seen = []
    async with asyncio.timeout(5):
        async for event in stream:
            obj = json.loads(bytes(event.object))
            seen.append((event.type, obj["metadata"].get("name", ""), obj))
            if len(seen) == count:
                break
    return seen


async def test_watch_replays_history_then_streams_live_events(
    fake: FakeApiServer, client: KubeClient
) -> None:
    start = fake.put_object(node("a"))["metadata"]["resourceVersion"]
    fake.put_object(node("b"))
    fake.put_object(node("a", x="1"))
    async with watching(client, start, timeout_seconds=30) as stream:
        replayed = await collect(stream, 2)
        assert [(t, n) for t, n, _ in replayed] == [("ADDED", "b"), ("MODIFIED", "a")]
        assert fake.open_watches == 1
        fake.delete_object(f"{NODES}/b")
        fake.send_bookmarks()
        live = await collect(stream, 2)
    assert [(t, n) for t, n, _ in live] == [("DELETED", "b"), ("BOOKMARK", "")]
    assert live[1][2]["metadata"]["resourceVersion"] == fake.resource_version
    assert fake.open_watches == 0


async def test_watch_with_selector_sees_objects_enter_and_leave(
    fake: FakeApiServer, client: KubeClient
) -> None:
    rv = fake.put_object(node("a"))["metadata"]["resourceVersion"]
    fake.put_object(node("b", role="db"))
    fake.put_object(node("a", role="web"))
    fake.put_object(node("a", role="db"))
    web = {"labelSelector": "role=web"}
    async with watching(client, rv, params=web) as stream:
        events = await collect(stream, 2)
    assert [(t, n) for t, n, _ in events] == [("ADDED", "a"), ("DELETED", "a")]
    db = {"labelSelector": "role=db"}
    async with watching(client, "0", params=db) as stream:
        current = await collect(stream, 2)
    assert [(t, n) for t, n, _ in current] == [("ADDED", "a"), ("ADDED", "b")]


async def test_watch_ends_on_timeout_and_on_close(fake: FakeApiServer, client: KubeClient) -> None:
    async with asyncio.timeout(5):
        assert [e async for e in client.watch(NODES, resource_version="1", timeout_seconds=1)] == []

    async def close_soon() -> None:
        await eventually(lambda: fake.open_watches == 1)
        fake.close_watches()

    task = asyncio.create_task(close_soon())
    async with asyncio.timeout(5):
        assert [e async for e in client.watch(NODES, resource_version="1")] == []
    await task


async def test_watch_from_a_too_old_resource_version_is_gone() -> None:
    fake = FakeApiServer(history_size=2)
    async with fake.client() as kube:
        first = fake.put_object(node("a"))["metadata"]["resourceVersion"]
        for name in ("b", "c", "d"):
            fake.put_object(node(name))
        async with watching(kube, first) as stream:
            gone = await api_error(collect(stream, 1))
        assert gone.gone
        assert gone.reason == "Expired"
        assert gone.message == f"too old resource version: {first} ({int(first) + 1})"
        recent = str(int(fake.resource_version) - 2)
        async with watching(kube, recent) as stream:
            events = await collect(stream, 2)
        assert [n for _, n, _ in events] == ["c", "d"]


# -- a real informer -------------------------------------------------------------


async def test_informer_syncs_follows_and_relists(fake: FakeApiServer, client: KubeClient) -> None:
    fake.put_object(node("n1"))
    fake.put_object(node("n2"))
    informer = Informer(
        client, resources.NODES, page_size=1, backoff=Backoff(initial=0.01, maximum=0.02)
    )
    deleted: list[str] = []
    informer.add_handler(on_delete=lambda n: deleted.append(n.metadata.name))
    task = asyncio.create_task(informer.run())
    try:
        async with asyncio.timeout(10):
            await informer.wait_synced()
            assert sorted(informer.keys()) == ["n1", "n2"]
            await eventually(lambda: fake.open_watches == 1)

            await client.patch(f"{NODES}/n1", {"metadata": {"labels": {"a": "b"}}})
            await client.delete(f"{NODES}/n2")
            await eventually(lambda: informer.keys() == ["n1"] and deleted == ["n2"])
            n1 = informer.get("n1")
            assert n1 is not None
            assert n1.metadata.labels == {"a": "b"}

            fake.close_watches()  # a dropped connection: the watch resumes, no relist
            await eventually(lambda: fake.open_watches == 1 and informer.watch_restarts >= 1)
            fake.put_object(node("n3"))
            await eventually(lambda: informer.get("n3") is not None)
            assert informer.relists == 1

            fake.close_watches(expire=True)  # an apiserver restart: 410, then a relist
            fake.delete_object(f"{NODES}/n3")
            await eventually(lambda: informer.relists == 2 and informer.keys() == ["n1"])
            assert deleted == ["n2", "n3"]
            assert informer.resource_version == fake.resource_version
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
