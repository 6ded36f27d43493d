"""Informer semantics against a scripted API: list, watch, resume, relist on 410, backoff."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import msgspec
import pytest

from kube_ccm.runtime.client import ApiError, WatchEvent
from kube_ccm.runtime.informer import Backoff, Informer
from kube_ccm.runtime.resources import Resource
from kube_ccm.runtime.transport import TransportError


class Meta(msgspec.Struct, frozen=True):
    name: str
    namespace: str = ""
    resourceVersion: str = ""  # noqa: N815


class Obj(msgspec.Struct, frozen=True):
    metadata: Meta
    value: int = 0


THINGS = Resource(group="", version="v1", plural="things", namespaced=False, type=Obj)


def obj(name: str, rv: int, value: int = 0) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": str(rv)}, "value": value, "big": "x" * 10}


def event(kind: str, body: dict[str, Any]) -> WatchEvent:
    return WatchEvent(type=kind, object=msgspec.Raw(json.dumps(body).encode()))


Step = list[WatchEvent] | BaseException


class ScriptedApi:
    """Answers lists from ``lists`` (in order) and watches from ``watches`` (in order).

    A watch step is a list of events (the stream then ends, as on a server
    timeout) or an exception raised when the watch starts.
    """

    def __init__(self, lists: list[list[dict[str, Any]] | BaseException], watches: list[Step]):
        self.lists = lists
        self.watches = watches
        self.list_calls: list[dict[str, str | int]] = []
        self.watch_calls: list[str] = []
        self.exhausted = asyncio.Event()

    async def request(
        self, method: str, path: str, *, params: Mapping[str, str | int] | None = None
    ) -> bytes:
        self.list_calls.append(dict(params or {}))
        step = self.lists.pop(0)
        if isinstance(step, BaseException):
            raise step
        rv = max((int(o["metadata"]["resourceVersion"]) for o in step), default=1)
        return json.dumps({"metadata": {"resourceVersion": str(rv)}, "items": step}).encode()

    async def watch(
        self,
        path: str,
        *,
        resource_version: str,
        timeout_seconds: int = 300,
        allow_bookmarks: bool = True,
        params: Mapping[str, str | int] | None = None,
    ) -> AsyncIterator[WatchEvent]:
        self.watch_calls.append(resource_version)
        if not self.watches:
            self.exhausted.set()
            await asyncio.Event().wait()  # hang like an idle watch
        step = self.watches.pop(0)
        if isinstance(step, BaseException):
            raise step
        for item in step:
            yield item


class Recorder:
    def __init__(self, informer: Informer[Obj]) -> None:
        self.events: list[tuple[str, str, int]] = []
        informer.add_handler(
            on_add=lambda o: self.events.append(("add", o.metadata.name, o.value)),
            on_update=lambda old, new: self.events.append(("update", new.metadata.name, new.value)),
            on_delete=lambda o: self.events.append(("delete", o.metadata.name, o.value)),
        )


FAST = Backoff(initial=0.001, maximum=0.004, jitter=0.0)


async def run_until_exhausted(informer: Informer[Obj], api: ScriptedApi) -> None:
    task = asyncio.create_task(informer.run())
    try:
        async with asyncio.timeout(5):
            await api.exhausted.wait()
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_list_then_watch_delivers_adds_updates_deletes_and_tracks_resource_version() -> None:
    api = ScriptedApi(
        lists=[[obj("a", 5), obj("b", 6)]],
        watches=[
            [
                event("ADDED", obj("c", 7)),
                event("MODIFIED", obj("a", 8, value=1)),
                event("DELETED", obj("b", 9)),
                event("BOOKMARK", {"metadata": {"resourceVersion": "12"}}),
            ]
        ],
    )
    informer = Informer(api, THINGS, backoff=FAST)
    recorder = Recorder(informer)

    await run_until_exhausted(informer, api)

    assert recorder.events == [
        ("add", "a", 0),
        ("add", "b", 0),
        ("add", "c", 0),
        ("update", "a", 1),
        ("delete", "b", 0),
    ]
    assert sorted(informer.keys()) == ["a", "c"]
    assert informer.has_synced
    # first watch from the list's version, the resumed one from the bookmark's
    assert api.watch_calls == ["6", "12"]
    # the first list paged too (issue 26): a consistent read, as the cache ignores limit
    assert api.list_calls[0] == {"limit": 500}


async def test_a_410_relists_consistently_and_reports_what_changed_meanwhile() -> None:
    api = ScriptedApi(
        lists=[
            [obj("a", 5), obj("b", 6)],
            [obj("a", 20, value=2), obj("c", 21)],
        ],
        watches=[ApiError(410, "Expired", "too old resource version: 6 (19)")],
    )
    informer = Informer(api, THINGS, backoff=FAST)
    recorder = Recorder(informer)

    await run_until_exhausted(informer, api)

    assert recorder.events[2:] == [("delete", "b", 0), ("update", "a", 2), ("add", "c", 0)]
    assert informer.relists == 2
    assert "resourceVersion" not in api.list_calls[1]  # consistent read, not the cache
    assert api.watch_calls == ["6", "21"]


async def test_connection_loss_backs_off_and_resumes_from_the_last_version_without_relisting() -> (
    None
):
    api = ScriptedApi(
        lists=[[obj("a", 5)]],
        watches=[
            [event("ADDED", obj("b", 7))],
            TransportError("connection refused"),
            TransportError("connection refused"),
            [event("MODIFIED", obj("b", 9, value=3))],
        ],
    )
    informer = Informer(api, THINGS, backoff=FAST)
    recorder = Recorder(informer)

    await run_until_exhausted(informer, api)

    assert informer.relists == 1
    assert api.watch_calls == ["5", "7", "7", "7", "9"]
    assert recorder.events[-1] == ("update", "b", 3)


async def test_a_failing_first_list_is_retried_and_sync_waits_for_it() -> None:
    api = ScriptedApi(
        lists=[ApiError(503, "ServiceUnavailable", "etcd not ready"), [obj("a", 5)]],
        watches=[],
    )
    informer = Informer(api, THINGS, backoff=FAST)

    await run_until_exhausted(informer, api)

    assert len(api.list_calls) == 2
    assert informer.get("a") == Obj(metadata=Meta(name="a", resourceVersion="5"))


async def test_a_handler_that_raises_does_not_stop_the_informer_or_other_handlers() -> None:
    api = ScriptedApi(lists=[[obj("a", 5)]], watches=[[event("ADDED", obj("b", 6))]])
    informer = Informer(api, THINGS, backoff=FAST)

    def explode(_: Obj) -> None:
        raise RuntimeError("bug in a handler")

    informer.add_handler(on_add=explode)
    recorder = Recorder(informer)

    await run_until_exhausted(informer, api)

    assert [e[1] for e in recorder.events] == ["a", "b"]


async def test_transform_decides_what_the_cache_keeps() -> None:
    api = ScriptedApi(lists=[[obj("a", 5, value=7)]], watches=[])
    informer = Informer(
        api,
        THINGS,
        backoff=FAST,
        transform=lambda o: Obj(metadata=Meta(name=o.metadata.name), value=o.value),
    )

    await run_until_exhausted(informer, api)

    assert informer.get("a") == Obj(metadata=Meta(name="a"), value=7)


async def test_resync_replays_cached_objects_as_identical_updates() -> None:
    api = ScriptedApi(lists=[[obj("a", 5)]], watches=[])
    informer = Informer(api, THINGS, backoff=FAST)
    resynced: list[tuple[Obj, Obj]] = []
    informer.add_handler(on_update=lambda o, n: resynced.append((o, n)), resync_period=0.01)

    task = asyncio.create_task(informer.run())
    async with asyncio.timeout(5):
        while len(resynced) < 2:
            await asyncio.sleep(0.005)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert all(old is new for old, new in resynced)


async def test_pagination_follows_continue_tokens() -> None:
    pages = [
        {"metadata": {"continue": "t1", "resourceVersion": "9"}, "items": [obj("a", 1)]},
        {"metadata": {"resourceVersion": "9"}, "items": [obj("b", 2)]},
    ]

    class Paged(ScriptedApi):
        async def request(
            self, method: str, path: str, *, params: Mapping[str, str | int] | None = None
        ) -> bytes:
            self.list_calls.append(dict(params or {}))
            return json.dumps(pages.pop(0)).encode()

    api = Paged(lists=[], watches=[])
    informer = Informer(api, THINGS, backoff=FAST, page_size=1)

    await run_until_exhausted(informer, api)

    assert sorted(informer.keys()) == ["a", "b"]
    assert api.list_calls[1]["continue"] == "t1"
    assert api.watch_calls == ["9"]


async def test_unpaged_the_first_list_comes_from_the_watch_cache_and_a_relist_does_not() -> None:
    api = ScriptedApi(
        lists=[[obj("a", 5)], [obj("a", 20)]],
        watches=[ApiError(410, "Expired", "too old resource version: 5 (19)")],
    )
    informer = Informer(api, THINGS, backoff=FAST, page_size=0)

    await run_until_exhausted(informer, api)

    assert api.list_calls == [{"resourceVersion": "0"}, {}]


async def test_an_expired_continue_token_gives_one_full_list() -> None:
    """As client-go's pager (FullListIfExpired): a 410 on page 2 or later drops the pages
    read so far and lists everything in one request; the watch starts from that list."""

    class Expiring(ScriptedApi):
        async def request(
            self, method: str, path: str, *, params: Mapping[str, str | int] | None = None
        ) -> bytes:
            self.list_calls.append(dict(params or {}))
            if "continue" in (params or {}):
                raise ApiError(410, "Expired", "The provided continue parameter is too old")
            if "limit" in (params or {}):
                page = {
                    "metadata": {"continue": "t1", "resourceVersion": "9"},
                    "items": [obj("a", 1)],
                }
                return json.dumps(page).encode()
            items = [obj("a", 30), obj("b", 31)]
            return json.dumps({"metadata": {"resourceVersion": "31"}, "items": items}).encode()

    api = Expiring(lists=[], watches=[])
    informer = Informer(api, THINGS, backoff=FAST, page_size=1)
    recorder = Recorder(informer)

    await run_until_exhausted(informer, api)

    assert api.list_calls == [{"limit": 1}, {"limit": 1, "continue": "t1"}, {}]
    assert recorder.events == [("add", "a", 0), ("add", "b", 0)]
    assert informer.relists == 1
    assert api.watch_calls == ["31"]
