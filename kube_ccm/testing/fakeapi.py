"""An in-memory Kubernetes API server, itself a client transport, for fast unit tests.

Controller and provider tests talk to it through a real
:class:`~kube_ccm.runtime.client.KubeClient` (:meth:`FakeApiServer.client`), so
the code under test issues the very requests it issues in production, and
informers list and watch it with live, streamed watch events::

    fake = FakeApiServer()
    fake.put_object({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
    client = fake.client()
    await client.patch("/api/v1/nodes/n1", {"metadata": {"labels": {"a": "b"}}})
    assert fake.object("/api/v1/nodes/n1")["metadata"]["labels"] == {"a": "b"}

It is a pure *storage* API server: it keeps objects, versions them with a
global resourceVersion, answers GET/LIST/WATCH/POST/PUT/PATCH/DELETE with
kube-apiserver's status codes and ``Status`` bodies, and lets tests inject
faults and inspect every request. It does not emulate controllers (no node
taints, no garbage collection, no namespace lifecycle). Differences from a real
apiserver, chosen to keep it small:

* no authentication, admission, validation or defaulting beyond metadata
  (``uid``, ``creationTimestamp``, ``resourceVersion``, ``generation``,
  ``apiVersion``/``kind``); status sent on create is kept; JSON only, no protobuf;
* ``generation`` starts at 1 and grows whenever anything outside ``metadata``
  and ``status`` changes, for every resource;
* reads ignore ``resourceVersion`` (always the latest state); ``continue`` pages
  are served from the current state, not a snapshot (their list
  resourceVersion is the first page's); a watch from a future version just waits;
* label selectors are parsed and matched by :mod:`kube_ccm.api.selectors` (the
  whole grammar), field selectors by the same parser, limited to ``=``, ``==`` and
  ``!=``, over any dotted path compared as a string;
* strategic merge knows only the patch strategies in :data:`MERGE_KEYS`, for
  every resource alike; ``$setElementOrder`` is accepted and ignored;
  server-side apply is refused with 415;
* bookmarks are only sent when a test calls :meth:`FakeApiServer.send_bookmarks`;
  namespaces need not exist, ``deletecollection`` is not served, ``DELETE``
  honours ``preconditions`` but ignores grace periods and propagation.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import random
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NoReturn

from kube_ccm.api.selectors import LabelSelector, SelectorError, parse_selector
from kube_ccm.runtime.client import KubeClient
from kube_ccm.runtime.transport import Request, Response, StreamResponse
from kube_ccm.testing.transport import WholeBody

__all__ = ["FakeApiServer", "RecordedRequest"]

JSON = Any
"""A decoded JSON value."""


@dataclass(frozen=True)
class ResourceType:
    """One served resource; pass more to :class:`FakeApiServer` to serve them too."""

    group_version: str  # "v1", "coordination.k8s.io/v1"
    plural: str
    kind: str
    namespaced: bool
    status: bool = False  # has a ``status`` subresource

    @property
    def prefix(self) -> str:
        """The collection path without namespace: ``/api/v1/nodes``, ``/apis/g/v/leases``."""
        root = "/api/" if self.group_version == "v1" else "/apis/"
        return f"{root}{self.group_version}/{self.plural}"

    @property
    def qualified(self) -> str:
        """The name used in messages: ``nodes``, ``leases.coordination.k8s.io``."""
        group = self.group_version.rpartition("/")[0]
        return f"{self.plural}.{group}" if group else self.plural


DEFAULT_RESOURCES: tuple[ResourceType, ...] = (
    ResourceType("v1", "nodes", "Node", namespaced=False, status=True),
    ResourceType("v1", "services", "Service", namespaced=True, status=True),
    ResourceType("v1", "persistentvolumes", "PersistentVolume", namespaced=False, status=True),
    ResourceType("v1", "namespaces", "Namespace", namespaced=False, status=True),
    ResourceType("v1", "events", "Event", namespaced=True),
    ResourceType("v1", "configmaps", "ConfigMap", namespaced=True),
    ResourceType("v1", "secrets", "Secret", namespaced=True),
    ResourceType("v1", "serviceaccounts", "ServiceAccount", namespaced=True),
    ResourceType("coordination.k8s.io/v1", "leases", "Lease", namespaced=True),
    ResourceType("events.k8s.io/v1", "events", "Event", namespaced=True),
    ResourceType("networking.k8s.io/v1", "ipaddresses", "IPAddress", namespaced=False),
)

MERGE_KEYS: Mapping[str, str | None] = {
    "metadata.finalizers": None,  # None: a primitive list merged as a set
    "metadata.ownerReferences": "uid",
    "status.addresses": "type",
    "status.conditions": "type",
    "spec.ports": "port",
}
"""Strategic-merge patch strategies by field path; any other list is replaced."""

_SYSTEM_META = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds")
_CONFLICT = (
    "the object has been modified; please apply your changes to the latest version and try again"
)
_PATCH_TYPES = {
    "application/strategic-merge-patch+json": "strategic",
    "application/merge-patch+json": "merge",
    "application/json-patch+json": "json",
}


@dataclass(frozen=True)
class RecordedRequest:
    """One request the fake received: ``params`` from the query, ``body`` decoded JSON."""

    method: str
    path: str
    params: Mapping[str, str]
    body: JSON
    content_type: str


class _Error(Exception):
    """Answered as a ``Status`` body with HTTP ``code``."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message

    def status(self) -> dict[str, JSON]:
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }


@dataclass
class _Fault:
    method: str
    prefix: str
    status: int
    reason: str
    count: int


@dataclass(frozen=True)
class _Target:
    resource: ResourceType
    namespace: str | None  # None: all namespaces, or a cluster-scoped resource
    name: str | None = None
    subresource: str = ""

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.resource.prefix, self.namespace or "", self.name or "")

    def matches(self, obj: Mapping[str, JSON]) -> bool:
        meta = obj.get("metadata") or {}
        return self.namespace is None or meta.get("namespace", "") == self.namespace


@dataclass(eq=False)
class _Watcher:
    target: _Target
    labels: LabelSelector
    fields: LabelSelector
    bookmarks: bool
    queue: asyncio.Queue[bytes | None] = field(default_factory=asyncio.Queue)

    def matches(self, obj: Mapping[str, JSON] | None) -> bool:
        return (
            obj is not None
            and self.target.matches(obj)
            and _selected(obj, self.labels, self.fields)
        )

    def send(self, kind: str, obj: JSON) -> None:
        self.queue.put_nowait(json.dumps({"type": kind, "object": obj}).encode() + b"\n")


@dataclass(frozen=True)
class _Change:
    rv: int
    type: str  # ADDED MODIFIED DELETED
    prefix: str
    old: dict[str, JSON] | None
    new: dict[str, JSON]


class _WatchStream:
    """A watch response body: events as they happen, until timeout or close."""

    status = 200

    def __init__(self, server: FakeApiServer, watcher: _Watcher, deadline: float | None) -> None:
        self._server, self._watcher, self._deadline = server, watcher, deadline

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self.chunks()])

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            while True:
                try:
                    async with asyncio.timeout_at(self._deadline):
                        chunk = await self._watcher.queue.get()
                except TimeoutError:
                    return
                if chunk is None:
                    return
                yield chunk
        finally:
            self.close()

    def close(self) -> None:
        self._server._watchers.discard(self._watcher)


class FakeApiServer:
    """An in-memory, storage-only kube-apiserver; see the module docstring."""

    def __init__(
        self, *, resources: Iterable[ResourceType] = DEFAULT_RESOURCES, history_size: int = 1000
    ) -> None:
        self.resources = tuple(resources)
        self.requests: list[RecordedRequest] = []
        self._store: dict[tuple[str, str, str], dict[str, JSON]] = {}
        self._rv = 1
        self._history: deque[_Change] = deque()
        self._history_size = history_size
        self._expired_before = 0  # watching from an older resourceVersion gives 410
        self._watchers: set[_Watcher] = set()
        self._faults: list[_Fault] = []
        self._conflicts: dict[
            tuple[str, str, str], tuple[str, Callable[[dict[str, JSON]], None] | None]
        ] = {}

    # -- wiring ---------------------------------------------------------------

    # The client transport (kube_ccm.runtime.transport.Transport): requests are
    # answered in memory, a watch streams its events as they happen.

    server = "https://fake-apiserver"

    async def send(self, request: Request) -> Response:
        request.check()  # the fence at the last moment, as the real transports ask it
        answer = self._handle(request)
        if isinstance(answer, _WatchStream):
            answer.close()
            raise ValueError("a watch must be opened with stream(), not send()")
        return answer

    @asynccontextmanager
    async def stream(
        self, request: Request, *, read_timeout: float
    ) -> AsyncIterator[StreamResponse]:
        answer = self._handle(request)
        if isinstance(answer, Response):
            yield WholeBody(answer)
            return
        try:
            yield answer
        finally:
            answer.close()

    async def aclose(self) -> None:
        pass

    def transport(self) -> FakeApiServer:
        """The server itself: it is a transport."""
        return self

    def client(self, user_agent: str = "test") -> KubeClient:
        return KubeClient(self, user_agent=user_agent)

    @property
    def resource_version(self) -> str:
        """The newest resourceVersion handed out."""
        return str(self._rv)

    @property
    def open_watches(self) -> int:
        return len(self._watchers)

    # -- fault injection and inspection ---------------------------------------

    def fail_next(
        self,
        method: str,
        path_prefix: str,
        status: int = 500,
        reason: str = "InternalError",
        count: int = 1,
    ) -> None:
        """Answer the next ``count`` requests (``method`` or ``*``) under ``path_prefix``
        with ``status`` and a Status body; watches included."""
        self._faults.append(_Fault(method.upper(), path_prefix, status, reason, count))

    def conflict_next_write(
        self, path: str, change: Callable[[dict[str, JSON]], None] | None = None
    ) -> None:
        """Before the next PUT/PATCH/DELETE of the object at ``path`` (or a subresource;
        a path naming a subresource waits for a write to that one), update it (new
        resourceVersion, MODIFIED event) as another client would, after ``change``
        (given the object, to change in place) if given, so a resourceVersion
        precondition sent with that write fails."""
        target = self._parse(path)
        self._conflicts[target.key] = (target.subresource, change)

    def writes(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.method != "GET"]

    def count(self, method: str, path_prefix: str) -> int:
        return sum(
            1
            for r in self.requests
            if r.method == method.upper() and r.path.startswith(path_prefix)
        )

    # -- direct access (no HTTP, no faults) -----------------------------------

    def put_object(self, obj: Mapping[str, JSON]) -> dict[str, JSON]:
        """Create or overwrite (status included) the object; watchers see it."""
        kinds = {(r.group_version, r.kind): r for r in self.resources}
        resource = kinds.get((obj.get("apiVersion", ""), obj.get("kind", "")))
        if resource is None:
            raise ValueError(f"not a served resource: {obj.get('apiVersion')} {obj.get('kind')}")
        new = copy.deepcopy(dict(obj))
        meta = new.setdefault("metadata", {})
        if not resource.namespaced:
            meta.pop("namespace", None)
        namespace = meta.get("namespace", "")
        key = (resource.prefix, namespace, meta["name"])
        old = self._store.get(key)
        meta.setdefault("uid", (old or {}).get("metadata", {}).get("uid") or str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", _now())
        meta.setdefault("generation", 1)
        return self._save(key, new, "ADDED" if old is None else "MODIFIED")

    def object(self, path: str) -> dict[str, JSON] | None:
        """The stored object at ``path`` (``/api/v1/nodes/n1``), a copy; None if absent."""
        found = self._store.get(self._parse(path).key)
        return copy.deepcopy(found) if found is not None else None

    def objects(self, prefix: str) -> list[dict[str, JSON]]:
        """Every stored object of the collection at ``prefix`` (``/api/v1/nodes``,
        ``/api/v1/namespaces/ns/events``), in (namespace, name) order."""
        return copy.deepcopy(self._select(self._parse(prefix), _EVERYTHING, _EVERYTHING))

    def delete_object(self, path: str) -> dict[str, JSON] | None:
        """Remove the object at once (finalizers ignored); watchers see DELETED."""
        key = self._parse(path).key
        old = self._store.get(key)
        return None if old is None else self._save(key, copy.deepcopy(old), "DELETED")

    def close_watches(self, *, expire: bool = False) -> None:
        """End every open watch stream, as a dropped connection or apiserver restart does.

        With ``expire``, also forget the watch history as a restarted apiserver
        does: resuming from any resourceVersion handed out so far answers
        410 Gone, so informers relist.
        """
        for watcher in list(self._watchers):
            watcher.queue.put_nowait(None)
        self._watchers.clear()
        if expire:
            self._rv += 1
            self._expired_before = self._rv
            self._history.clear()

    def send_bookmarks(self) -> None:
        """Send a BOOKMARK with the current resourceVersion to watches that allow them."""
        for w in self._watchers:
            if w.bookmarks:
                kind = {
                    "kind": w.target.resource.kind,
                    "apiVersion": w.target.resource.group_version,
                }
                w.send("BOOKMARK", {**kind, "metadata": {"resourceVersion": str(self._rv)}})

    # -- storage --------------------------------------------------------------

    def _save(self, key: tuple[str, str, str], obj: dict[str, JSON], kind: str) -> dict[str, JSON]:
        """Store (or, for DELETED, remove) ``obj`` under a new resourceVersion and notify."""
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        old = self._store.get(key)
        if kind == "DELETED":
            self._store.pop(key, None)
        else:
            self._store[key] = obj
        change = _Change(self._rv, kind, key[0], old, obj)
        self._history.append(change)
        while len(self._history) > self._history_size:
            self._expired_before = self._history.popleft().rv
        for watcher in self._watchers:
            self._notify(watcher, change)
        return copy.deepcopy(obj)

    @staticmethod
    def _notify(watcher: _Watcher, change: _Change) -> None:
        if watcher.target.resource.prefix != change.prefix:
            return
        was = change.type != "ADDED" and watcher.matches(change.old)
        now = watcher.matches(change.new)
        if change.type == "DELETED":
            kind = "DELETED" if was or now else ""
        else:  # an object entering or leaving the selection is ADDED or DELETED
            kind = {
                (True, True): change.type,
                (False, True): "ADDED",
                (True, False): "DELETED",
            }.get((was, now), "")
        if kind:
            watcher.send(kind, change.new)

    def _select(
        self, target: _Target, labels: LabelSelector, fields: LabelSelector
    ) -> list[dict[str, JSON]]:
        found = [
            (key, obj)
            for key, obj in self._store.items()
            if key[0] == target.resource.prefix
            and target.matches(obj)
            and _selected(obj, labels, fields)
        ]
        return [obj for _, obj in sorted(found, key=lambda item: item[0])]

    def _parse(self, path: str) -> _Target:
        """Map an API path onto (resource, namespace, name, subresource)."""
        parts = [p for p in path.split("?", 1)[0].split("/") if p]
        size = 2 if parts[:1] == ["api"] else 3
        group_version = "/".join(parts[1:size])
        rest = parts[size:]
        served = {r.plural: r for r in self.resources if r.group_version == group_version}
        namespace: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces" and served.get(rest[2], _NS).namespaced:
            namespace, rest = rest[1], rest[2:]
        resource = served.get(rest[0]) if rest and len(rest) <= 3 else None
        if resource is None or (len(rest) == 3 and not (resource.status and rest[2] == "status")):
            raise _no_such_resource()
        if namespace is None and not resource.namespaced and len(rest) > 1:
            namespace = ""
        name = rest[1] if len(rest) > 1 else None
        if name is not None and resource.namespaced and namespace is None:
            raise _no_such_resource()
        return _Target(resource, namespace, name, rest[2] if len(rest) == 3 else "")

    # -- HTTP -----------------------------------------------------------------

    def _handle(self, request: Request) -> Response | _WatchStream:
        method, path = request.method.upper(), request.path
        params = {k: str(v) for k, v in (request.params or {}).items()}
        content_type = _header(request.headers, "content-type").split(";")[0].strip()
        content = request.content or b""
        try:
            body = json.loads(content) if content else None
        except ValueError:
            body = content.decode(errors="replace")
        self.requests.append(RecordedRequest(method, path, params, body, content_type))
        try:
            for fault in self._faults:
                if fault.method in (method, "*") and path.startswith(fault.prefix):
                    fault.count -= 1
                    if fault.count <= 0:
                        self._faults.remove(fault)
                    raise _Error(fault.status, fault.reason, f"injected failure of {method} {path}")
            if isinstance(body, str):
                if method == "PATCH" and content_type not in _PATCH_TYPES:
                    raise _Error(
                        415, "UnsupportedMediaType", f"unsupported patch type {content_type}"
                    )
                raise _bad("the request body is not JSON")
            target = self._parse(path)
            if target.name is None:
                if method == "GET" and params.get("watch") in ("true", "1"):
                    return self._watch(target, params)
                if method == "GET":
                    return _ok(self._list(target, params))
                if method == "POST" and (
                    target.namespace is not None or not target.resource.namespaced
                ):
                    return _ok(self._create(target, body), 201)
            elif method == "GET":
                return _ok(self._get(target))
            elif method == "PUT":
                return _ok(self._update(target, body))
            elif method == "PATCH":
                return _ok(self._patch(target, body, content_type))
            elif method == "DELETE" and not target.subresource:
                return _ok(self._delete(target, body))
            raise _Error(405, "MethodNotAllowed", f"{method} is not supported on {path}")
        except _Error as failure:
            return _ok(failure.status(), failure.code)

    def _get(self, target: _Target) -> dict[str, JSON]:
        obj = self._store.get(target.key)
        if obj is None:
            raise _Error(404, "NotFound", f'{target.resource.qualified} "{target.name}" not found')
        return copy.deepcopy(obj)

    def _list(self, target: _Target, params: Mapping[str, str]) -> dict[str, JSON]:
        labels = _label_selector(params.get("labelSelector", ""))
        fields = _field_selector(params.get("fieldSelector", ""))
        items = self._select(target, labels, fields)
        list_rv, after = str(self._rv), None
        if token := params.get("continue"):
            try:
                list_rv, *after = json.loads(base64.urlsafe_b64decode(token))
                items = [o for o in items if _sort_key(o) > tuple(after)]
            except (ValueError, TypeError) as exc:
                raise _bad(f"invalid continue token: {exc}") from exc
        meta: dict[str, JSON] = {"resourceVersion": list_rv}
        limit = int(params.get("limit") or 0)
        if 0 < limit < len(items):
            rest = len(items) - limit
            items = items[:limit]
            last = json.dumps([list_rv, *_sort_key(items[-1])]).encode()
            meta["continue"] = base64.urlsafe_b64encode(last).decode()
            if not labels.requirements and not fields.requirements:
                meta["remainingItemCount"] = rest
        stripped = [{k: v for k, v in o.items() if k not in ("apiVersion", "kind")} for o in items]
        return {
            "kind": f"{target.resource.kind}List",
            "apiVersion": target.resource.group_version,
            "metadata": meta,
            "items": copy.deepcopy(stripped),
        }

    def _watch(self, target: _Target, params: Mapping[str, str]) -> _WatchStream:
        watcher = _Watcher(
            target,
            _label_selector(params.get("labelSelector", "")),
            _field_selector(params.get("fieldSelector", "")),
            params.get("allowWatchBookmarks") == "true",
        )
        since = params.get("resourceVersion", "")
        if since in ("", "0"):  # start at the current state: synthetic ADDED events
            for obj in self._select(target, watcher.labels, watcher.fields):
                watcher.send("ADDED", obj)
        elif not since.isdigit():
            raise _bad(f"invalid resourceVersion {since!r}")
        elif int(since) < self._expired_before:
            gone = _Error(
                410, "Expired", f"too old resource version: {since} ({self._expired_before})"
            )
            watcher.send("ERROR", gone.status())
            watcher.queue.put_nowait(None)
        else:
            for change in self._history:
                if change.rv > int(since):
                    self._notify(watcher, change)
        self._watchers.add(watcher)
        deadline = None
        if timeout := int(params.get("timeoutSeconds") or 0):
            deadline = asyncio.get_running_loop().time() + timeout
        return _WatchStream(self, watcher, deadline)

    def _create(self, target: _Target, body: JSON) -> dict[str, JSON]:
        resource = target.resource
        if not isinstance(body, dict) or not isinstance(body.get("metadata", {}), dict):
            raise _bad("the body must be a JSON object")
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if resource.namespaced:
            if meta.get("namespace", target.namespace) != target.namespace:
                raise _bad("the namespace of the object does not match the request")
            meta["namespace"] = target.namespace
        name = meta.get("name") or ""
        while not name and meta.get("generateName"):
            name = meta["generateName"] + "".join(
                random.choices("bcdfghjklmnpqrstvwxz2456789", k=5)
            )
            name = "" if (resource.prefix, target.namespace or "", name) in self._store else name
        if not name:
            raise _invalid(f'{resource.kind} "" is invalid: metadata.name: Required value')
        key = (resource.prefix, target.namespace or "", name)
        if key in self._store:
            raise _Error(409, "AlreadyExists", f'{resource.qualified} "{name}" already exists')
        for system in (*_SYSTEM_META, "resourceVersion"):
            meta.pop(system, None)
        meta.update(name=name, uid=str(uuid.uuid4()), creationTimestamp=_now(), generation=1)
        obj.update(apiVersion=resource.group_version, kind=resource.kind)
        return self._save(key, obj, "ADDED")

    def _current(self, target: _Target) -> dict[str, JSON]:
        """The object a write applies to, after a conflict_next_write bump if one is due."""
        current = self._get(target)
        subresource, change = self._conflicts.get(target.key, ("-", None))
        if subresource in ("", target.subresource):
            del self._conflicts[target.key]
            if change is not None:
                current = copy.deepcopy(current)
                change(current)
            current = self._save(target.key, current, "MODIFIED")
        return current

    def _update(self, target: _Target, body: JSON) -> dict[str, JSON]:
        current = self._current(target)
        if not isinstance(body, dict) or not isinstance(body.get("metadata"), dict):
            raise _bad("the body must be an object with metadata")
        if body["metadata"].get("name", target.name) != target.name:
            raise _bad("the name of the object does not match the URL")
        return self._commit(target, current, copy.deepcopy(body))

    def _patch(self, target: _Target, body: JSON, content_type: str) -> dict[str, JSON]:
        kind = _PATCH_TYPES.get(content_type)
        if kind is None:
            raise _Error(415, "UnsupportedMediaType", f"unsupported patch type {content_type!r}")
        current = self._current(target)
        if kind == "json":
            patched = _json_patch(current, body)
        elif not isinstance(body, dict):
            raise _bad("a merge patch must be a JSON object")
        elif kind == "merge":
            patched = _merge_patch(current, body)
        else:
            patched = _strategic_merge(current, body, "")
        if not isinstance(patched, dict) or not isinstance(patched.get("metadata"), dict):
            raise _invalid("the patched object has no metadata")
        return self._commit(target, current, patched)

    def _commit(
        self, target: _Target, current: dict[str, JSON], new: dict[str, JSON]
    ) -> dict[str, JSON]:
        """Apply an update of ``current`` to ``new``: precondition, subresource split, system
        metadata; no-op updates change nothing; a deletion whose last finalizer went completes."""
        resource, meta = target.resource, new["metadata"]
        wanted = meta.get("resourceVersion")
        if wanted and wanted != current["metadata"]["resourceVersion"]:
            raise _conflict(target, _CONFLICT)
        if target.subresource == "status":  # metadata and status only
            new = {**current, "metadata": meta, "status": new.get("status")}
        elif resource.status:
            new["status"] = current.get("status")
        if new.get("status") is None:
            new.pop("status", None)
        old_meta = current["metadata"]
        for system in (*_SYSTEM_META, "generation", "name", "namespace"):
            if system in old_meta:
                meta[system] = old_meta[system]
            else:
                meta.pop(system, None)
        meta["resourceVersion"] = old_meta["resourceVersion"]
        new.update(apiVersion=resource.group_version, kind=resource.kind)
        if new == current:
            return copy.deepcopy(current)
        if "generation" in meta and _spec(new) != _spec(current):
            meta["generation"] += 1
        done = "deletionTimestamp" in meta and not meta.get("finalizers")
        return self._save(target.key, new, "DELETED" if done else "MODIFIED")

    def _delete(self, target: _Target, body: JSON) -> dict[str, JSON]:
        current = self._current(target)
        preconditions = (body.get("preconditions") if isinstance(body, dict) else None) or {}
        for field_name in ("uid", "resourceVersion"):
            wanted = preconditions.get(field_name)
            if wanted and wanted != current["metadata"].get(field_name):
                raise _conflict(target, f"precondition failed: {field_name} {wanted}")
        meta = current["metadata"]
        if not meta.get("finalizers"):
            self._save(target.key, current, "DELETED")
            details = {"name": target.name, "kind": target.resource.plural, "uid": meta.get("uid")}
            return {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "details": details,
            }
        if "deletionTimestamp" in meta:
            return current
        meta.update(deletionTimestamp=_now(), deletionGracePeriodSeconds=0)
        return self._save(target.key, current, "MODIFIED")


_NS = ResourceType("", "", "", namespaced=False)


_JSON_HEADERS: Mapping[str, str] = {"Content-Type": "application/json"}


def _ok(body: JSON, status: int = 200) -> Response:
    return Response(status, _JSON_HEADERS, json.dumps(body).encode())


def _header(headers: Mapping[str, str], name: str) -> str:
    for key, value in headers.items():
        if key.lower() == name:
            return value
    return ""


def _bad(message: str) -> _Error:
    return _Error(400, "BadRequest", message)


def _invalid(message: str) -> _Error:
    return _Error(422, "Invalid", message)


def _no_such_resource() -> _Error:
    return _Error(404, "NotFound", "the server could not find the requested resource")


def _conflict(target: _Target, detail: str) -> _Error:
    what = f'{target.resource.qualified} "{target.name}"'
    return _Error(409, "Conflict", f"Operation cannot be fulfilled on {what}: {detail}")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _sort_key(obj: Mapping[str, JSON]) -> tuple[str, str]:
    meta = obj["metadata"]
    return (meta.get("namespace", ""), meta["name"])


def _spec(obj: Mapping[str, JSON]) -> dict[str, JSON]:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


# -- selectors ----------------------------------------------------------------


_EVERYTHING = parse_selector("")


def _label_selector(text: str) -> LabelSelector:
    try:
        return parse_selector(text)
    except SelectorError as exc:
        raise _bad(str(exc)) from exc


def _field_selector(text: str) -> LabelSelector:
    """A field selector: the label selector's equality forms, over dotted paths."""
    try:
        selector = parse_selector(text)
    except SelectorError as exc:
        raise _bad(f"invalid field selector {text!r}: {exc}") from exc
    if any(r.operator not in ("=", "!=") for r in selector.requirements):
        raise _bad(f"invalid field selector {text!r}: use path=value or path!=value")
    return selector


def _selected(obj: Mapping[str, JSON], labels: LabelSelector, fields: LabelSelector) -> bool:
    if not labels.matches((obj.get("metadata") or {}).get("labels") or {}):
        return False
    return fields.matches({r.key: _field(obj, r.key) for r in fields.requirements})


def _field(obj: Mapping[str, JSON], path: str) -> str:
    """The value at a dotted path as a field selector compares it ("" when absent)."""
    found: JSON = obj
    for part in path.split("."):
        found = found.get(part) if isinstance(found, dict) else None
    return "" if found is None else str(found).lower() if isinstance(found, bool) else str(found)


# -- patches ------------------------------------------------------------------


def _merge_patch(target: JSON, patch: JSON) -> JSON:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge_patch(result.get(key), value)
    return result


def _strategic_merge(
    original: dict[str, JSON], patch: dict[str, JSON], path: str
) -> dict[str, JSON]:
    """Strategic merge patch with the strategies of MERGE_KEYS (see the module docstring)."""
    if patch.get("$patch") == "replace":
        return _strategic_merge({}, {k: v for k, v in patch.items() if k != "$patch"}, path)
    result = dict(original)
    if isinstance(patch.get("$retainKeys"), list):
        result = {k: v for k, v in result.items() if k in patch["$retainKeys"]}
    for key, value in patch.items():
        if key.startswith("$deleteFromPrimitiveList/"):
            name = key.split("/", 1)[1]
            result[name] = [v for v in result.get(name) or [] if v not in value]
    for key, value in patch.items():
        sub = f"{path}.{key}" if path else key
        if key.startswith("$"):
            continue
        if value is None or (isinstance(value, dict) and value.get("$patch") == "delete"):
            result.pop(key, None)
        elif isinstance(value, dict):
            before = result.get(key)
            result[key] = _strategic_merge(before if isinstance(before, dict) else {}, value, sub)
        elif isinstance(value, list):
            before = result.get(key)
            result[key] = _merge_list(before if isinstance(before, list) else [], value, sub)
        else:
            result[key] = value
    return result


def _merge_list(original: list[JSON], patch: list[JSON], path: str) -> list[JSON]:
    def clean(item: JSON) -> JSON:
        return _strategic_merge({}, item, path) if isinstance(item, dict) else item

    replace = {"$patch": "replace"}
    if replace in patch or path not in MERGE_KEYS:
        return [clean(item) for item in patch if item != replace]
    merge_key = MERGE_KEYS[path]
    if merge_key is None:  # a set of primitives
        merged = list(original)
        merged.extend(v for i, v in enumerate(patch) if v not in merged and v not in patch[:i])
        return merged
    result = list(original)
    for item in patch:
        if not isinstance(item, dict) or merge_key not in item:
            raise _invalid(f"{path}: every element needs the merge key {merge_key}")
        index = next((i for i, o in enumerate(result) if o.get(merge_key) == item[merge_key]), None)
        if item.get("$patch") == "delete":
            result = [o for o in result if o.get(merge_key) != item[merge_key]]
        elif index is None:
            result.append(clean(item))
        else:
            result[index] = _strategic_merge(result[index], item, path)
    return result


def _json_patch(document: JSON, operations: JSON) -> JSON:
    """RFC 6902 JSON patch: add, remove, replace, test, move, copy."""
    if not isinstance(operations, list):
        raise _bad("a JSON patch must be a list of operations")
    doc = copy.deepcopy(document)
    try:
        for operation in operations:
            op, tokens = operation["op"], _pointer(operation["path"])
            if op == "test":
                if _walk(doc, tokens) != operation["value"]:
                    raise _invalid(f"test failed at {operation['path']}")
            elif op == "remove":
                doc = _remove(doc, tokens)
            elif op == "add":
                doc = _add(doc, tokens, copy.deepcopy(operation["value"]))
            elif op == "replace":
                _walk(doc, tokens)
                doc = _add(_remove(doc, tokens), tokens, copy.deepcopy(operation["value"]))
            elif op in ("move", "copy"):
                source = _pointer(operation["from"])
                value = copy.deepcopy(_walk(doc, source))
                doc = _add(_remove(doc, source) if op == "move" else doc, tokens, value)
            else:
                raise _invalid(f"unknown JSON patch operation {op!r}")
    except (KeyError, IndexError, ValueError, TypeError) as exc:
        raise _invalid(f"JSON patch failed: {exc!r}") from exc
    return doc


def _pointer(text: str) -> list[str]:
    if text and not text.startswith("/"):
        raise ValueError(f"invalid JSON pointer {text!r}")
    return [t.replace("~1", "/").replace("~0", "~") for t in text.split("/")[1:]]


def _index(container: list[JSON], token: str, *, end: bool = False) -> int:
    index = len(container) if end and token == "-" else int(token)
    if not 0 <= index <= len(container) - (0 if end else 1):
        raise IndexError(f"index {token} out of range")
    return index


def _walk(doc: JSON, tokens: list[str]) -> JSON:
    for token in tokens:
        doc = doc[_index(doc, token)] if isinstance(doc, list) else doc[token]
    return doc


def _add(doc: JSON, tokens: list[str], value: JSON) -> JSON:
    if not tokens:
        return value
    parent = _walk(doc, tokens[:-1])
    if isinstance(parent, list):
        parent.insert(_index(parent, tokens[-1], end=True), value)
    else:
        parent[tokens[-1]] = value
    return doc


def _remove(doc: JSON, tokens: list[str]) -> JSON:
    if not tokens:
        raise ValueError("cannot remove the whole document")
    parent = _walk(doc, tokens[:-1])
    del parent[_index(parent, tokens[-1]) if isinstance(parent, list) else tokens[-1]]
    return doc


class FakeClientBuilder:
    """A :class:`~kube_ccm.cloudprovider.ClientBuilder` for a provider's ``initialize``
    in unit tests: every identity gets a client of one :class:`FakeApiServer`.

    It has no REST config to give: ``config`` raises.
    """

    def __init__(self, server: FakeApiServer) -> None:
        self.server = server

    def client(self, name: str) -> KubeClient:
        return self.server.client()

    def config(self, name: str) -> NoReturn:
        raise NotImplementedError("FakeClientBuilder gives clients, not REST configs")
