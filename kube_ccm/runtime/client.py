"""The Kubernetes API client every controller talks through.

It speaks HTTP only through a :class:`~kube_ccm.runtime.transport.Transport`
(``runtime/transport.py``): the production one is aiohttp with the kubeconfig's
TLS and credentials, a test double (the in-memory API server) is a transport
too. What a CCM needs and no library offers as-is stays here, small: raw-bytes
responses (so informers decode straight into compact structs), patches of every
type on any subresource, line-delimited watch streams, API errors as typed
exceptions and client-side QPS/burst limits. lightkube parses the kubeconfig
(:mod:`kube_ccm.runtime.kubeconfig` resolves which one, by the daemon's or kubectl's
rules).
Reads that ask for it (``accept=``, the informers under
``--kube-api-content-type=application/vnd.kubernetes.protobuf``) come back in
Kubernetes' protobuf encoding: :mod:`kube_ccm.runtime.codec`.
See docs/design.md, "Kubernetes client".
"""

from __future__ import annotations

import asyncio
import functools
import http
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal
from urllib.parse import urlsplit

import msgspec
from lightkube.config.kubeconfig import SingleConfig
from prometheus_client import Counter, Histogram

from kube_ccm.runtime import codec
from kube_ccm.runtime.aiohttptransport import AiohttpTransport
from kube_ccm.runtime.dryrun import DryRun, is_change
from kube_ccm.runtime.kubeconfig import load_config
from kube_ccm.runtime.metrics import Metrics
from kube_ccm.runtime.transport import ClientFencedError as ClientFencedError  # noqa: PLC0414 (re-exported: raised here and by the transports)
from kube_ccm.runtime.transport import Request, Transport

PatchType = Literal["strategic", "merge", "json", "apply"]

PATCH_CONTENT_TYPES: Mapping[PatchType, str] = {
    "strategic": "application/strategic-merge-patch+json",
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "apply": "application/apply-patch+yaml",
}

DEFAULT_USER_AGENT = "kube-ccm"

MAX_RETRIES = 10
"""client-go's ``rest.Request`` default: an answer 429 (API Priority and Fairness, a
max-in-flight limit) or 5xx that carries ``Retry-After: <seconds>`` is sent again
after that many seconds, at most this many times, whatever the verb."""

log = logging.getLogger(__name__)


class ApiError(Exception):
    """The API server answered with an error status.

    ``status`` is the HTTP code; ``reason`` the ``Status.reason`` (``NotFound``,
    ``Conflict``, ``Expired``, ...) when the server sent a Status object; ``causes``
    the types of its ``details.causes`` (``NamespaceTerminating``, ``FieldValueInvalid``).
    """

    def __init__(
        self, status: int, reason: str, message: str, causes: tuple[str, ...] = ()
    ) -> None:
        super().__init__(f"{status} {reason}: {message}" if reason else f"{status}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.causes = causes

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409 and self.reason != "AlreadyExists"

    @property
    def already_exists(self) -> bool:
        return self.status == 409 and self.reason == "AlreadyExists"

    @property
    def gone(self) -> bool:
        """410: the resourceVersion asked for is older than the server keeps."""
        return self.status == 410


_READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class _StatusCause(msgspec.Struct, kw_only=True):
    reason: str = ""
    """The cause's type (``StatusCause.Type``, ``reason`` on the wire)."""


class _StatusDetails(msgspec.Struct, kw_only=True):
    causes: list[_StatusCause] | None = None


class _Status(msgspec.Struct, kw_only=True):
    kind: str = ""
    code: int = 0
    reason: str = ""
    message: str = ""
    details: _StatusDetails | None = None

    def causes(self) -> tuple[str, ...]:
        if self.details is None or not self.details.causes:
            return ()
        return tuple(c.reason for c in self.details.causes)


class WatchEvent(msgspec.Struct, frozen=True, kw_only=True):
    """One event of a watch stream; ``object`` stays raw for the caller to decode once
    (JSON, or with a protobuf stream the object's protobuf body: magic + envelope)."""

    type: str
    object: msgspec.Raw


_status_decoder = msgspec.json.Decoder(_Status)
_encoder = msgspec.json.Encoder()
_decode = msgspec.json.decode
_event_decoder = msgspec.json.Decoder(WatchEvent)


def _retry_after(status: int, headers: Mapping[str, str]) -> int | None:
    """client-go's ``checkWait``: the seconds a 429 or 5xx answer asks to wait before
    the same request is sent again, or ``None`` (no retry) when it carries no
    ``Retry-After`` in whole seconds (an HTTP date is not read, as upstream)."""
    if status != 429 and status < 500:
        return None
    value = next((v for k, v in headers.items() if k.lower() == "retry-after"), None)
    if value is None or not value.strip().isdigit():
        return None
    return int(value)


def _error_from_response(status: int, body: bytes) -> ApiError:
    if codec.is_protobuf(body) and (found := codec.decode_status(body)) is not None:
        code, reason, message = found
        return ApiError(code or status, reason, message, codec.decode_status_causes(body))
    try:
        decoded = _status_decoder.decode(body)
        if decoded.kind == "Status":
            return ApiError(
                decoded.code or status, decoded.reason, decoded.message, decoded.causes()
            )
    except msgspec.DecodeError:
        pass
    text = body.decode(errors="replace").strip()
    return ApiError(status, "", text[:500] or _reason_phrase(status))


def _reason_phrase(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return ""


RateLimiter = Callable[[], Awaitable[None]]
"""Awaited before each request: client-side QPS/burst limiting (see runtime.ratelimit)."""


_LATENCY_BUCKETS: Final = (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)


class RestClientMetrics:
    """client-go's request metrics, under their upstream names and labels."""

    def __init__(self, metrics: Metrics) -> None:
        self._requests = metrics.counter(
            "rest_client_requests_total",
            "Number of HTTP requests, partitioned by status code, method, and host.",
            ("code", "method", "host"),
        )
        self._duration = metrics.histogram(
            "rest_client_request_duration_seconds",
            "Request latency in seconds. Broken down by verb, and host.",
            _LATENCY_BUCKETS,
            ("verb", "host"),
        )
        self._rate_limiter = metrics.histogram(
            "rest_client_rate_limiter_duration_seconds",
            "Client side rate limiter latency in seconds. Broken down by verb, and host.",
            _LATENCY_BUCKETS,
            ("verb", "host"),
        )
        self._retries = metrics.counter(
            "rest_client_request_retries_total",
            "Number of request retries, partitioned by status code, verb, and host.",
            ("code", "verb", "host"),
        )

        self._by_request: dict[tuple[str, str, str], tuple[Counter, Histogram]] = {}
        self._by_wait: dict[tuple[str, str], Histogram] = {}
        """The labelled series, looked up once per label set: prometheus_client's
        ``labels()`` validates and locks on every call (about 2 % of the daemon's CPU
        per Node initialised, two requests and a wait each)."""

    def request(self, method: str, host: str, code: str, seconds: float) -> None:
        key = (code, method, host)
        series = self._by_request.get(key)
        if series is None:
            series = self._by_request[key] = (
                self._requests.labels(code, method, host),
                self._duration.labels(method, host),
            )
        series[0].inc()
        series[1].observe(seconds)

    def waited(self, method: str, host: str, seconds: float) -> None:
        key = (method, host)
        series = self._by_wait.get(key)
        if series is None:
            series = self._by_wait[key] = self._rate_limiter.labels(method, host)
        series.observe(seconds)

    def retried(self, method: str, host: str, code: str) -> None:
        self._retries.labels(code, method, host).inc()


@dataclass(frozen=True)
class ClientOptions:
    """How the daemon's client behaves; defaults are upstream's for the CCM."""

    user_agent: str = DEFAULT_USER_AGENT
    timeout: float = 30.0
    content_type: str = codec.JSON
    """``--kube-api-content-type``: :data:`codec.PROTOBUF` lets informers read protobuf."""


WriteGuard = Callable[[str, str], str | None]
"""``(method, path)`` → ``None`` to let a write go, or why it may not."""


class KubeClient:
    """An asyncio client for the Kubernetes API, thin on purpose.

    Paths are API paths (``/api/v1/nodes/n1/status``); bodies go out as JSON and
    come back as bytes or decoded JSON. Errors (HTTP >= 400) raise
    :class:`ApiError`. ``content_type`` (``--kube-api-content-type``) is what the
    informers ask for where the kind has a protobuf form; the client itself asks for
    JSON unless a read says otherwise (``accept=``).
    """

    def __init__(
        self,
        transport: Transport,
        *,
        rate_limiter: RateLimiter | None = None,
        user_agent: str = DEFAULT_USER_AGENT,
        metrics: RestClientMetrics | None = None,
        token_source: Callable[[], Awaitable[str]] | None = None,
        content_type: str = codec.JSON,
    ) -> None:
        """``token_source``: a bearer token per request (rotated credentials)."""
        if content_type not in codec.CONTENT_TYPES:
            raise ValueError(
                f"content type {content_type!r}: not one of {', '.join(codec.CONTENT_TYPES)}"
            )
        self.content_type = content_type
        self._transport = transport
        self._token_source = token_source
        self._rate_limiter = rate_limiter
        self._metrics = metrics
        self.server = transport.server.rstrip("/")
        self._host = urlsplit(self.server).netloc
        self._base_headers: Mapping[str, str] = {
            "Accept": "application/json",
            "User-Agent": user_agent,
        }
        self._fenced: str | None = None
        self._write_guard: WriteGuard | None = None
        self._dry_run: DryRun | None = None

    @property
    def transport(self) -> Transport:
        return self._transport

    def set_dry_run(self, recorder: DryRun | None) -> None:
        """``--dry-run``: every write from now on leaves with ``dryRun=All`` (validated,
        answered, not persisted) and is recorded in ``recorder``."""
        self._dry_run = recorder

    def fence(self, reason: str) -> None:
        """Refuse every write from now on (reads still work); see ClientFencedError."""
        self._fenced = reason

    def set_write_guard(self, guard: WriteGuard | None) -> None:
        """Ask ``guard(method, path)`` before each write leaves; a reason refuses it
        with :class:`ClientFencedError`. Unlike :meth:`fence` the answer may change:
        the daemon refuses writes while its lease is not known to be its own."""
        self._write_guard = guard

    def _write_refusal(self, method: str, path: str) -> str | None:
        """Why a write to ``path`` may not go now (fenced, or the guard says so)."""
        if self._fenced is not None:
            return self._fenced
        if self._write_guard is not None:
            return self._write_guard(method, path)
        return None

    def _check_write(self, method: str, path: str) -> None:
        if method.upper() in _READ_METHODS:
            return
        if reason := self._write_refusal(method, path):
            raise ClientFencedError(f"{method} {path} refused: {reason}")

    @property
    def fenced(self) -> bool:
        return self._fenced is not None

    @classmethod
    def from_kubeconfig(
        cls,
        kubeconfig: str | os.PathLike[str] | None = None,
        *,
        master: str | None = None,
        context: str | None = None,
        options: ClientOptions | None = None,
        rate_limiter: RateLimiter | None = None,
    ) -> KubeClient:
        """Build a client the way upstream does from ``--kubeconfig``/``--master``.

        Both empty: in-cluster configuration (service-account token and CA).
        ``master`` overrides the kubeconfig's server URL.
        """
        config = load_config(kubeconfig, master=master, context=context)
        return cls.from_config(config, options=options, rate_limiter=rate_limiter)

    @classmethod
    def from_config(
        cls,
        config: SingleConfig,
        *,
        options: ClientOptions | None = None,
        rate_limiter: RateLimiter | None = None,
    ) -> KubeClient:
        """Build a client from a resolved configuration
        (:func:`~kube_ccm.runtime.kubeconfig.load_config`,
        :func:`~kube_ccm.runtime.kubeconfig.load_tool_config`)."""
        options = options or ClientOptions()
        transport = AiohttpTransport.from_config(config, timeout=options.timeout)
        return cls(
            transport,
            rate_limiter=rate_limiter,
            user_agent=options.user_agent,
            content_type=options.content_type,
        )

    async def aclose(self) -> None:
        await self._transport.aclose()

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    # -- plain requests -------------------------------------------------------

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str | int] | None = None,
        body: Any = None,
        content: bytes | None = None,
        content_type: str | None = None,
        request_timeout: float | None = None,
        accept: str | None = None,
    ) -> bytes:
        """Send one request and return the response body; raise ApiError on failure.

        A 429 or 5xx answer with ``Retry-After`` is sent again after the seconds it
        asks for, up to :data:`MAX_RETRIES` times (client-go's behaviour), each time
        through the rate limiter and, for a write, the fence.
        ``accept``: the Accept header instead of JSON (:data:`codec.PROTOBUF_ACCEPT`)."""
        self._check_write(method, path)
        # Asked again by the transport at the last moment before the bytes leave, after
        # every wait (rate limiter, Retry-After, a free connection): a process stopped
        # (SIGSTOP, a long pause) meanwhile may have lost its lease since.
        guard = (
            None
            if method.upper() in _READ_METHODS
            else functools.partial(self._write_refusal, method, path)
        )
        if self._dry_run is not None and is_change(method, path):
            params = {**(params or {}), "dryRun": "All"}
            self._dry_run.api_write(method, path, body)
        if body is not None:
            content = _encoder.encode(body)
        retries = 0
        while True:
            await self._wait_for_rate_limiter(method)
            headers = await self._headers()
            if accept is not None:
                headers["Accept"] = accept
            self._check_write(method, path)
            if content is not None:
                headers["Content-Type"] = content_type or "application/json"
            started = time.monotonic()
            code = "<error>"
            try:
                response = await self._transport.send(
                    Request(method, path, params, headers, content, request_timeout, guard)
                )
                code = str(response.status)
            finally:
                if self._metrics is not None:
                    self._metrics.request(
                        method.upper(), self._host, code, time.monotonic() - started
                    )
            if response.status < 400:
                return response.content
            wait = _retry_after(response.status, response.headers)
            if wait is None or retries >= MAX_RETRIES:
                raise _error_from_response(response.status, response.content)
            retries += 1
            if self._metrics is not None:
                self._metrics.retried(method.upper(), self._host, code)
            log.debug(
                "%s %s: %s, Retry-After %d s (retry %d of %d)",
                method,
                path,
                code,
                wait,
                retries,
                MAX_RETRIES,
            )
            await asyncio.sleep(wait)

    async def _headers(self) -> dict[str, str]:
        headers = dict(self._base_headers)
        if self._token_source is not None:
            headers["Authorization"] = f"Bearer {await self._token_source()}"
        return headers

    async def _wait_for_rate_limiter(self, method: str) -> None:
        if self._rate_limiter is None:
            return
        started = time.monotonic()
        await self._rate_limiter()
        if self._metrics is not None:
            self._metrics.waited(method.upper(), self._host, time.monotonic() - started)

    async def get(self, path: str, params: Mapping[str, str | int] | None = None) -> Any:
        return _decode(await self.request("GET", path, params=params))

    async def create(self, path: str, body: Any) -> Any:
        return _decode(await self.request("POST", path, body=body))

    async def replace(self, path: str, body: Any) -> Any:
        return _decode(await self.request("PUT", path, body=body))

    async def patch(
        self,
        path: str,
        body: Any,
        *,
        patch_type: PatchType = "strategic",
        params: Mapping[str, str | int] | None = None,
    ) -> Any:
        return _decode(
            await self.request(
                "PATCH",
                path,
                params=params,
                body=body,
                content_type=PATCH_CONTENT_TYPES[patch_type],
            )
        )

    async def delete(
        self, path: str, body: Any = None, params: Mapping[str, str | int] | None = None
    ) -> Any:
        return _decode(await self.request("DELETE", path, body=body, params=params))

    async def version(self) -> Any:
        """The API server's ``/version`` (``gitVersion``, ``major``, ``minor``, ...)."""
        return await self.get("/version")

    # -- watch ----------------------------------------------------------------

    async def watch(
        self,
        path: str,
        *,
        resource_version: str,
        timeout_seconds: int = 300,
        allow_bookmarks: bool = True,
        params: Mapping[str, str | int] | None = None,
        accept: str | None = None,
    ) -> AsyncIterator[WatchEvent]:
        """Stream watch events from ``resource_version``.

        ``accept``: :data:`codec.PROTOBUF_WATCH_ACCEPT` asks for a protobuf stream; the
        events' objects are then protobuf bodies (whatever the server answers with is
        read: a JSON stream starts with ``{``, a protobuf frame with its length).

        An expired resourceVersion surfaces as ``ApiError`` with ``gone`` true,
        whether the server says so with an HTTP 410 or with an ``ERROR`` event in
        the stream (the watch cache does the latter). The iterator ends when the
        server closes the stream (``timeout_seconds``).
        """
        query: dict[str, str | int] = dict(params or {})
        query.update(
            watch="true",
            resourceVersion=resource_version,
            timeoutSeconds=timeout_seconds,
            allowWatchBookmarks="true" if allow_bookmarks else "false",
        )
        await self._wait_for_rate_limiter("GET")
        headers = await self._headers()
        if accept is not None:
            headers["Accept"] = accept
        request = Request("GET", path, query, headers)
        started = time.monotonic()
        # Each read may wait as long as the server-side timeout, and a little more.
        async with self._transport.stream(request, read_timeout=timeout_seconds + 30.0) as response:
            if self._metrics is not None:  # a watch counts once, when its stream opens
                self._metrics.request(
                    "GET", self._host, str(response.status), time.monotonic() - started
                )
            if response.status >= 400:
                raise _error_from_response(response.status, await response.read())
            chunks = response.chunks()
            first = b""
            async for first in chunks:
                if first:
                    break
            if accept is not None and first and first[:1] != b"{":
                async for event in _protobuf_events(first, chunks):
                    yield event
                return
            # Raw bytes split on newlines (one JSON event per line): decoding text
            # lines costs more than the decoding of the events themselves.
            pending = b""
            async for chunk in _prepend(first, chunks):
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    if line.strip():
                        yield _watch_event(line)
            if pending.strip():
                yield _watch_event(pending)


async def _prepend(first: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    yield first
    async for chunk in rest:
        yield chunk


async def _protobuf_events(first: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[WatchEvent]:
    """The events of a protobuf watch stream (length-prefixed ``WatchEvent`` frames)."""
    buffer = bytearray(first)
    while True:
        for type_, raw in codec.watch_frames(buffer):
            if type_ == "ERROR":
                code, reason, message = codec.decode_status(raw) or (0, "", "")
                raise ApiError(code, reason, message or "watch ERROR event")
            yield WatchEvent(type=type_, object=msgspec.Raw(raw))
        chunk = await anext(rest, None)
        if chunk is None:
            return
        buffer += chunk


def _watch_event(line: bytes) -> WatchEvent:
    event = _event_decoder.decode(line)
    if event.type == "ERROR":
        status = _status_decoder.decode(event.object)
        raise ApiError(status.code, status.reason, status.message)
    return event
