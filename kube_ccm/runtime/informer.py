"""Informers: a local cache of one resource kept current by list-then-watch.

The Python counterpart of client-go's reflector + shared informer, reduced to
what a CCM needs:

* list (paginated), then watch from the list's resourceVersion, remembering the
  newest resourceVersion seen (events and bookmarks);
* a watch that ends normally (server timeout) is resumed from that version;
* a watch that fails with ``410 Gone`` (the version was compacted, or the
  apiserver restarted) triggers a fresh consistent list; objects that vanished
  meanwhile are reported to delete handlers, changed ones to update handlers;
* connection errors retry with exponential backoff (0.8 s doubling to 30 s,
  jittered), resuming from the remembered version;
* payloads are decoded once, at the edge, into the struct type the informer is
  built with; that type *is* the transform deciding what the cache keeps
  (see kube_ccm.api.objects), and an optional ``transform`` can trim further;
  with a :class:`~kube_ccm.runtime.client.KubeClient` whose ``content_type`` is
  protobuf, lists and watches of the kinds :mod:`kube_ccm.runtime.codec` converts
  are read as protobuf into the same structs (what the server answers in is
  decoded: JSON stays JSON);
* handlers are plain callables run in the informer's task, in registration
  order: they must be quick (enqueue a key) and must not raise;
* per-handler periodic resync replays every cached object as an update with
  identical old and new objects, as client-go does.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import random
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import msgspec

from kube_ccm.api.objects import ObjectList
from kube_ccm.runtime import codec
from kube_ccm.runtime.client import ApiError, KubeClient, WatchEvent
from kube_ccm.runtime.resources import Resource
from kube_ccm.runtime.transport import TransportError

log = logging.getLogger(__name__)

T = TypeVar("T")


class _ObjectMeta(msgspec.Struct):
    resourceVersion: str = ""  # noqa: N815 (API field name)


class _Object(msgspec.Struct):
    metadata: _ObjectMeta = msgspec.field(default_factory=_ObjectMeta)


_meta_decoder = msgspec.json.Decoder(_Object)


class ListWatchClient(Protocol):
    """What an informer needs of a client (KubeClient, or a scripted fake in tests)."""

    async def request(
        self, method: str, path: str, *, params: Mapping[str, str | int] | None = None
    ) -> bytes: ...

    def watch(
        self,
        path: str,
        *,
        resource_version: str,
        timeout_seconds: int = 300,
        allow_bookmarks: bool = True,
        params: Mapping[str, str | int] | None = None,
    ) -> AsyncIterator[WatchEvent]: ...


def object_key(obj: object) -> str:
    """``namespace/name`` for namespaced objects, ``name`` otherwise (client-go's
    MetaNamespaceKeyFunc); works on any struct with ``metadata.name``/``namespace``."""
    meta = getattr(obj, "metadata", None)
    name: str = getattr(meta, "name", "") or ""
    namespace: str = getattr(meta, "namespace", "") or ""
    return f"{namespace}/{name}" if namespace else name


AddHandler = Callable[[T], None]
UpdateHandler = Callable[[T, T], None]
DeleteHandler = Callable[[T], None]


@dataclass
class _Registration(Generic[T]):
    on_add: Callable[[T], None] | None
    on_update: Callable[[T, T], None] | None
    on_delete: Callable[[T], None] | None
    resync_period: float | None


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with jitter for watch/list retries (client-go reflector defaults)."""

    initial: float = 0.8
    maximum: float = 30.0
    factor: float = 2.0
    jitter: float = 1.0
    reset_after: float = 120.0

    def delays(self) -> Iterator[float]:
        delay = self.initial
        while True:
            yield delay * (1 + random.random() * self.jitter)
            delay = min(delay * self.factor, self.maximum)


class Informer(Generic[T]):
    """A watch-backed cache of one resource collection.

    ``resource`` names the collection (:data:`~kube_ccm.runtime.resources.NODES`): its
    path is the descriptor's, across all namespaces for a namespaced resource, and its
    ``type`` the struct payloads decode into. Start it with :meth:`run` (a task you own),
    wait for :meth:`wait_synced`, then read with :meth:`get` / :meth:`list`.
    """

    def __init__(
        self,
        client: ListWatchClient,
        resource: Resource[T],
        *,
        name: str | None = None,
        transform: Callable[[T], T] | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 500,
        watch_timeout: tuple[int, int] = (300, 600),
        backoff: Backoff | None = None,
    ) -> None:
        self._client = client
        self.resource = resource
        self._path = path = resource.path()
        self.name = name or path
        item_type = resource.type
        self._item_type = item_type
        self._transform = transform
        self._list_decoder = msgspec.json.Decoder(ObjectList[item_type])  # type: ignore[valid-type]
        self._item_decoder = msgspec.json.Decoder(item_type)
        self._protobuf: codec.Kind[T] | None = None
        self._accept: str | None = None
        self._watch_accept: str | None = None
        if isinstance(client, KubeClient) and client.content_type == codec.PROTOBUF:
            self._protobuf = codec.protobuf_kind(item_type)
        if self._protobuf is not None:
            self._accept, self._watch_accept = codec.PROTOBUF_ACCEPT, codec.PROTOBUF_WATCH_ACCEPT
        self._selectors: dict[str, str] = {}
        if label_selector:
            self._selectors["labelSelector"] = label_selector
        if field_selector:
            self._selectors["fieldSelector"] = field_selector
        self._page_size = page_size
        self._watch_timeout = watch_timeout
        self._backoff = backoff or Backoff()
        self._store: dict[str, T] = {}
        self._handlers: list[_Registration[T]] = []
        self._synced = asyncio.Event()
        self.resource_version = ""
        self.relists = 0
        """How many times the cache was rebuilt by a list (the first list counts)."""
        self.watch_restarts = 0

    # -- reading --------------------------------------------------------------

    def get(self, key: str) -> T | None:
        return self._store.get(key)

    def list(self) -> builtins.list[T]:
        return builtins.list(self._store.values())

    def keys(self) -> builtins.list[str]:
        return builtins.list(self._store)

    def __len__(self) -> int:
        return len(self._store)

    @property
    def has_synced(self) -> bool:
        return self._synced.is_set()

    async def wait_synced(self) -> None:
        await self._synced.wait()

    # -- handlers -------------------------------------------------------------

    def add_handler(
        self,
        *,
        on_add: Callable[[T], None] | None = None,
        on_update: Callable[[T, T], None] | None = None,
        on_delete: Callable[[T], None] | None = None,
        resync_period: float | None = None,
    ) -> None:
        """Register callbacks. Objects already cached are delivered as adds at once."""
        registration = _Registration(on_add, on_update, on_delete, resync_period)
        self._handlers.append(registration)
        if on_add is not None:
            for obj in list(self._store.values()):
                self._call(on_add, obj)

    def _call(self, handler: Callable[..., None], *args: Any) -> None:
        try:
            handler(*args)
        except Exception:
            log.exception("informer %s: event handler %r failed", self.name, handler)

    def _emit_add(self, obj: T) -> None:
        for h in self._handlers:
            if h.on_add is not None:
                self._call(h.on_add, obj)

    def _emit_update(self, old: T, new: T) -> None:
        for h in self._handlers:
            if h.on_update is not None:
                self._call(h.on_update, old, new)

    def _emit_delete(self, obj: T) -> None:
        for h in self._handlers:
            if h.on_delete is not None:
                self._call(h.on_delete, obj)

    # -- the loop -------------------------------------------------------------

    async def run(self) -> None:
        """List and watch until cancelled."""
        async with asyncio.TaskGroup() as group:
            for registration in self._handlers:
                if registration.resync_period:
                    group.create_task(self._resync_loop(registration))
            group.create_task(self._list_and_watch())

    async def _list_and_watch(self) -> None:
        need_list = True
        consistent = False  # unpaged, the first list may come from the watch cache (rv=0)
        delays = self._backoff.delays()
        healthy_since = asyncio.get_running_loop().time()
        while True:
            try:
                if need_list:
                    await self._relist(consistent=consistent)
                    need_list = False
                    self._synced.set()
                await self._watch()
                self.watch_restarts += 1
            except ApiError as exc:
                if exc.gone:
                    log.info("informer %s: %s; relisting", self.name, exc.message)
                    need_list, consistent = True, True
                    self.watch_restarts += 1
                    continue
                await self._sleep_backoff(exc, delays)
            except (TransportError, OSError, msgspec.DecodeError, codec.ProtobufDecodeError) as exc:
                await self._sleep_backoff(exc, delays)
            else:
                now = asyncio.get_running_loop().time()
                if now - healthy_since > self._backoff.reset_after:
                    delays = self._backoff.delays()
                healthy_since = now

    async def _sleep_backoff(self, exc: BaseException, delays: Iterator[float]) -> None:
        delay = next(delays)
        log.warning(
            "informer %s: list/watch failed (%s: %s); retrying in %.1f s",
            self.name,
            type(exc).__name__,
            exc,
            delay,
        )
        await asyncio.sleep(delay)

    async def _relist(self, *, consistent: bool) -> None:
        """Rebuild the cache from a list in pages of ``page_size`` objects (``limit`` and
        ``continue``, as client-go's pager), so that a large collection never arrives as
        one body. Paged lists are consistent reads: the watch cache ignores ``limit`` at
        ``resourceVersion=0``. A continue token that expires mid-list (410 Gone) gives
        one full list instead, as client-go's pager does (``FullListIfExpired``). A page
        size of 0 lists in one request, the first one from the watch cache
        (``resourceVersion=0``) unless ``consistent``."""
        fresh: dict[str, T] = {}
        params: dict[str, str | int] = dict(self._selectors)
        if self._page_size > 0:
            params["limit"] = self._page_size
        elif not consistent:
            params["resourceVersion"] = "0"  # served from the watch cache, as client-go does
        resource_version = ""
        while True:
            try:
                items, resource_version, continue_ = await self._list_page(params)
            except ApiError as exc:
                if not (exc.gone and "continue" in params):
                    raise
                log.info("informer %s: %s while paging; one full list", self.name, exc.message)
                fresh.clear()
                params = dict(self._selectors)
                continue
            for item in items:
                obj = self._transform(item) if self._transform else item
                fresh[self._key(obj)] = obj
            if not continue_ or "limit" not in params:
                break
            params = {**self._selectors, "limit": self._page_size}
            params["continue"] = continue_
        self.relists += 1
        self._replace(fresh)
        self.resource_version = resource_version

    async def _list_page(self, params: Mapping[str, str | int]) -> tuple[Iterable[T], str, str]:
        """One page: its items, resourceVersion and continue token."""
        if self._accept is not None and isinstance(self._client, KubeClient):
            body = await self._client.request("GET", self._path, params=params, accept=self._accept)
            if self._protobuf is not None and codec.is_protobuf(body):
                return self._protobuf.decode_list(body)
        else:
            body = await self._client.request("GET", self._path, params=params)
        page = self._list_decoder.decode(body)
        return page.items, page.metadata.resource_version, page.metadata.continue_

    def _replace(self, fresh: Mapping[str, T]) -> None:
        old_store = self._store
        self._store = dict(fresh)
        for key, obj in old_store.items():
            if key not in fresh:
                self._emit_delete(obj)
        for key, obj in fresh.items():
            previous = old_store.get(key)
            if previous is None:
                self._emit_add(obj)
            elif previous != obj:
                self._emit_update(previous, obj)

    async def _watch(self) -> None:
        timeout = random.randint(*self._watch_timeout)
        if self._watch_accept is not None and isinstance(self._client, KubeClient):
            events = self._client.watch(
                self._path,
                resource_version=self.resource_version,
                timeout_seconds=timeout,
                params=self._selectors,
                accept=self._watch_accept,
            )
        else:
            events = self._client.watch(
                self._path,
                resource_version=self.resource_version,
                timeout_seconds=timeout,
                params=self._selectors,
            )
        protobuf = self._protobuf
        async for event in events:
            if protobuf is not None and codec.is_protobuf(raw := memoryview(event.object)):
                if event.type == "BOOKMARK":
                    version = protobuf.resource_version(raw)
                    self.resource_version = version or self.resource_version
                    continue
                item, version = protobuf.decode_object(raw)
            else:
                if event.type == "BOOKMARK":
                    meta = _meta_decoder.decode(event.object).metadata
                    self.resource_version = meta.resourceVersion or self.resource_version
                    continue
                item = self._item_decoder.decode(event.object)
                version = _meta_decoder.decode(event.object).metadata.resourceVersion
            obj = self._transform(item) if self._transform else item
            key = self._key(obj)
            if event.type in ("ADDED", "MODIFIED"):
                previous = self._store.get(key)
                self._store[key] = obj
                if previous is None:
                    self._emit_add(obj)
                else:
                    self._emit_update(previous, obj)
            elif event.type == "DELETED":
                previous = self._store.pop(key, None)
                self._emit_delete(previous if previous is not None else obj)
            self.resource_version = version or self.resource_version

    @staticmethod
    def _key(obj: T) -> str:
        return object_key(obj)

    async def _resync_loop(self, registration: _Registration[T]) -> None:
        assert registration.resync_period
        await self._synced.wait()
        while True:
            await asyncio.sleep(registration.resync_period)
            if registration.on_update is None:
                continue
            for obj in list(self._store.values()):
                self._call(registration.on_update, obj, obj)


class InformerFactory:
    """One shared informer per resource (path and type): controllers that watch the same
    resource share one cache and one watch, as with client-go's factory."""

    def __init__(self, client: ListWatchClient) -> None:
        self._client = client
        self._informers: dict[tuple[str, type[Any]], Informer[Any]] = {}

    def informer(self, resource: Resource[T], **kwargs: Any) -> Informer[T]:
        key = (resource.path(), resource.type)
        existing = self._informers.get(key)
        if existing is None:
            existing = Informer(self._client, resource, **kwargs)
            self._informers[key] = existing
        informer: Informer[T] = existing
        return informer

    def all(self) -> list[Informer[Any]]:
        return list(self._informers.values())

    async def run(self) -> None:
        """Run every informer created so far until cancelled."""
        async with asyncio.TaskGroup() as group:
            for informer in self._informers.values():
                group.create_task(informer.run())

    async def wait_synced(self) -> None:
        await asyncio.gather(*(i.wait_synced() for i in self._informers.values()))
