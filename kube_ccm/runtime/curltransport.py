"""A transport whose HTTP and TLS work happens in libcurl: HTTP/2, one connection.

:class:`CurlTransport` is the second implementation of
:class:`~kube_ccm.runtime.transport.Transport`, selected with
``--kube-api-transport=curl`` (``pip install kube-ccm[curl]``: pycurl, whose
wheels carry libcurl with OpenSSL and nghttp2). Its transfers run on pycurl's
``AsyncCurlMulti``: libcurl's multi-socket API driven by the asyncio loop's
readers and timers, no thread. Over TLS it speaks HTTP/2 and multiplexes every
request and watch of the transports that share one :class:`CurlPool` over one
connection (``PIPEWAIT``: concurrent first requests wait for it instead of each
opening their own), as client-go shares one HTTP/2 connection between the rest
clients of one TLS configuration; over plain HTTP, HTTP/1.1 with keep-alive.

The contract is the aiohttp transport's: the kubeconfig's CA, client
certificate (files or inline data, as PEM) and ``insecure-skip-tls-verify``;
its credentials (the same token, token-file, exec and basic sources, applied
per request, refreshed on a 401); a timeout per request; a watch whose reads
each wait at most ``read_timeout`` (libcurl's low-speed limit: below one byte a
second for that long ends the transfer). libcurl sends a request again by itself
when a reused connection turns out closed before any answer; the body of a
write is handed over through a read callback that cannot rewind, so a write
whose body went out is never sent twice (Go's transport does the same). A
write's :attr:`Request.guard` (the lease) is asked in libcurl's pre-request
callback, right before the request is written. See docs/design.md, "Kubernetes
client" and "fencing".
"""

from __future__ import annotations

import asyncio
import base64
import math
import ssl
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pycurl
from lightkube.config.kubeconfig import SingleConfig
from lightkube.config.models import User
from pycurl.async_multi import AsyncCurlMulti

from kube_ccm.runtime.credentials import CredentialSource, NoCredentials, credential_source
from kube_ccm.runtime.transport import (
    ClientFencedError,
    Request,
    Response,
    StreamResponse,
    TransportError,
)

_IDLE_HANDLES = 64  # easy handles kept for reuse (their options and buffers)


class _Headers(Mapping[str, str]):
    """The header lines libcurl handed over, parsed on first look (most answers
    are never looked at), case-insensitive as HTTP header names are."""

    __slots__ = ("_lines", "_parsed")

    def __init__(self, lines: list[bytes]) -> None:
        self._lines = lines
        self._parsed: dict[str, str] | None = None

    def _map(self) -> dict[str, str]:
        if self._parsed is None:
            parsed: dict[str, str] = {}
            for raw in self._lines:
                name, colon, value = raw.decode("latin-1").partition(":")
                if colon:
                    parsed[name.strip().lower()] = value.strip()
            self._parsed = parsed
        return self._parsed

    def __getitem__(self, name: str) -> str:
        return self._map()[name.lower()]

    def __iter__(self) -> Iterator[str]:
        return iter(self._map())

    def __len__(self) -> int:
        return len(self._map())


class _Body:
    """A write's body for libcurl's read callback; it cannot rewind (see the module)."""

    __slots__ = ("_data",)

    def __init__(self, data: bytes) -> None:
        self._data: bytes | None = data

    def read(self, _size: int) -> bytes:
        data, self._data = self._data, None
        return data or b""


def _status_lines(lines: list[bytes]) -> None:
    """Keep only the last response's header lines (a 100 Continue goes first)."""
    for index in range(len(lines) - 1, 0, -1):
        if lines[index].startswith(b"HTTP/"):
            del lines[:index]
            return


def _pem(data: str | None, path: str | None, config: SingleConfig) -> bytes | None:
    if data:
        return base64.b64decode(data)
    if path:
        return Path(str(config.abs_file(path))).read_bytes()
    return None


class _Prereq:
    """libcurl's pre-request callback asks :attr:`Request.guard`: called once the
    transfer has its connection (a new one connected and shaken hands, or its
    stream of the shared HTTP/2 connection) and right before libcurl writes the
    request, within the same call into libcurl, on every attempt (libcurl's own
    resend on a closed connection included). A refusal aborts the transfer with
    nothing written."""

    __slots__ = ("refused", "request")

    def __init__(self, request: Request) -> None:
        self.request = request
        self.refused: ClientFencedError | None = None

    def __call__(self, *_: object) -> int:
        try:
            self.request.check()
        except ClientFencedError as exc:
            self.refused = exc
            return int(pycurl.PREREQFUNC_ABORT)
        return int(pycurl.PREREQFUNC_OK)


class CurlPool:
    """One libcurl multi handle: its connection cache (one HTTP/2 connection per
    server and TLS identity) and the easy handles it reuses. Shared by the transports
    of one client builder; bound to the event loop of its first transfer."""

    def __init__(self, *, max_host_connections: int = 100) -> None:
        self._multi: AsyncCurlMulti | None = None
        self._max_host_connections = max_host_connections
        self._idle: list[pycurl.Curl] = []

    def multi(self) -> AsyncCurlMulti:
        if self._multi is None:
            multi = AsyncCurlMulti()
            multi.setopt(pycurl.M_PIPELINING, pycurl.PIPE_MULTIPLEX)
            # HTTP/1.1 (plain http): at most this many connections, as aiohttp's limit
            multi.setopt(pycurl.M_MAX_HOST_CONNECTIONS, self._max_host_connections)
            multi.setopt(pycurl.M_MAXCONNECTS, self._max_host_connections)
            self._multi = multi
        return self._multi

    def handle(self) -> pycurl.Curl:
        return self._idle.pop() if self._idle else pycurl.Curl()

    def release(self, curl: pycurl.Curl) -> None:
        if len(self._idle) < _IDLE_HANDLES:
            curl.reset()
            self._idle.append(curl)
        else:
            curl.close()

    async def aclose(self) -> None:
        if self._multi is not None:
            await self._multi.aclose()
            self._multi = None
        for curl in self._idle:
            curl.close()
        self._idle.clear()


class _CurlStream:
    """A watch: the body arrives through libcurl's write callback into a buffer."""

    def __init__(self, curl: pycurl.Curl, describe: str) -> None:
        self._curl = curl
        self._describe = describe
        self._chunks: list[bytes] = []
        self._waiter: asyncio.Future[None] | None = None
        self._done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.headers_seen: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.header_lines: list[bytes] = []
        self._status = 0
        curl.setopt(pycurl.WRITEFUNCTION, self.on_body)
        curl.setopt(pycurl.HEADERFUNCTION, self.on_header)

    def started(self, done: asyncio.Future[Any]) -> None:
        self._done = done
        done.add_done_callback(self._wake)

    @property
    def status(self) -> int:
        return self._status

    def on_header(self, line: bytes) -> None:
        # (libcurl's getinfo cannot be asked while the transfer runs: the status line)
        if line.startswith(b"HTTP/"):
            self._status = int(line.split()[1])
            self.header_lines.clear()
        elif line in (b"\r\n", b"\n"):
            if not 100 <= self._status < 200 and not self.headers_seen.done():
                self.headers_seen.set_result(None)
        else:
            self.header_lines.append(line)

    def on_body(self, chunk: bytes) -> None:
        self._chunks.append(chunk)
        self._wake(None)

    def _wake(self, _: object) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _failure(self) -> TransportError | None:
        if self._done.done() and not self._done.cancelled() and self._done.exception():
            exc = self._done.exception()
            return TransportError(f"{self._describe}: {_describe_curl(exc)}")
        return None

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self.chunks()])

    async def chunks(self) -> AsyncIterator[bytes]:
        while True:
            if self._chunks:
                chunks, self._chunks = self._chunks, []
                yield chunks[0] if len(chunks) == 1 else b"".join(chunks)
                continue
            if self._done.done():
                if (failure := self._failure()) is not None:
                    raise failure
                return
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None


def _describe_curl(exc: BaseException | None) -> str:
    if isinstance(exc, pycurl.error) and len(exc.args) == 2:
        code, message = exc.args
        return f"curl error {code}: {message}"
    return f"{type(exc).__name__}: {exc}"


class CurlTransport:
    """libcurl through pycurl: HTTP/2 over TLS, one connection per :class:`CurlPool`."""

    def __init__(
        self,
        server: str,
        *,
        ca: bytes | None = None,
        client_cert: tuple[bytes, bytes] | None = None,
        insecure: bool = False,
        credentials: CredentialSource | None = None,
        timeout: float = 30.0,
        pool: CurlPool | None = None,
    ) -> None:
        """``ca``, ``client_cert`` (certificate, key): PEM. ``pool``: shared with other
        transports (closed by its owner); without one the transport has its own."""
        self._server = server.rstrip("/")
        self._ca = ca
        self._client_cert = client_cert
        self._insecure = insecure
        self._credentials = credentials or NoCredentials()
        self._timeout_ms = round(timeout * 1000)
        self._own_pool = pool is None
        self._pool = pool if pool is not None else CurlPool()
        self._default_cafile = ssl.get_default_verify_paths().cafile

    @classmethod
    def from_config(
        cls, config: SingleConfig, *, timeout: float = 30.0, pool: CurlPool | None = None
    ) -> CurlTransport:
        """The transport a resolved kubeconfig (``kubeconfig.load_config``) describes."""
        cluster, user = config.cluster, config.user or User()
        cert = _pem(user.client_cert_data, user.client_cert, config)
        key = _pem(user.client_key_data, user.client_key, config)
        return cls(
            str(cluster.server),
            ca=_pem(cluster.certificate_auth_data, cluster.certificate_auth, config),
            client_cert=(cert, key) if cert is not None and key is not None else None,
            insecure=cluster.insecure,
            credentials=credential_source(config.user),
            timeout=timeout,
            pool=pool,
        )

    @property
    def server(self) -> str:
        return self._server

    def _prepare(self, request: Request, headers: Mapping[str, str]) -> pycurl.Curl:
        curl = self._pool.handle()
        url = self._server + request.path
        if request.params:
            url += "?" + urlencode(request.params)
        curl.setopt(pycurl.URL, url)
        curl.setopt(pycurl.NOSIGNAL, 1)
        curl.setopt(pycurl.PIPEWAIT, 1)
        curl.setopt(pycurl.HTTP_VERSION, pycurl.CURL_HTTP_VERSION_2TLS)
        # large answers (a LIST) gzipped, as Go's transport and aiohttp ask; inflated in C
        curl.setopt(pycurl.ACCEPT_ENCODING, "gzip")
        if self._server.startswith("https:"):
            if self._insecure:
                curl.setopt(pycurl.SSL_VERIFYPEER, 0)
                curl.setopt(pycurl.SSL_VERIFYHOST, 0)
            elif self._ca is not None:
                curl.setopt(pycurl.CAINFO_BLOB, self._ca)
            elif self._default_cafile:
                curl.setopt(pycurl.CAINFO, self._default_cafile)
            if self._client_cert is not None:
                curl.setopt(pycurl.SSLCERT_BLOB, self._client_cert[0])
                curl.setopt(pycurl.SSLKEY_BLOB, self._client_cert[1])
        method = request.method.upper()
        if request.content is not None:
            curl.setopt(pycurl.UPLOAD, 1)
            curl.setopt(pycurl.INFILESIZE_LARGE, len(request.content))
            curl.setopt(pycurl.READFUNCTION, _Body(request.content).read)
            curl.setopt(pycurl.CUSTOMREQUEST, method)
        elif method == "HEAD":
            curl.setopt(pycurl.NOBODY, 1)
        elif method != "GET":
            curl.setopt(pycurl.CUSTOMREQUEST, method)
        lines = [f"{name}: {value}" for name, value in headers.items()]
        lines.append("Expect:")  # no 100-continue round trip for large bodies
        curl.setopt(pycurl.HTTPHEADER, lines)
        return curl

    async def _headers(self, request: Request) -> dict[str, str]:
        headers = dict(request.headers)
        if "Authorization" not in headers and (auth := await self._credentials.header()):
            headers["Authorization"] = auth
        return headers

    def _describe(self, request: Request) -> str:
        return f"{request.method} {self._server}{request.path}"

    async def send(self, request: Request) -> Response:
        multi = self._pool.multi()
        timeout = self._timeout_ms if request.timeout is None else round(request.timeout * 1000)
        for attempt in (1, 2):
            curl = self._prepare(request, await self._headers(request))
            prereq = _Prereq(request) if request.guard is not None else None
            if prereq is not None:
                curl.setopt(pycurl.PREREQFUNCTION, prereq)
            body: list[bytes] = []
            header_lines: list[bytes] = []
            curl.setopt(pycurl.WRITEFUNCTION, body.append)
            curl.setopt(pycurl.HEADERFUNCTION, header_lines.append)
            curl.setopt(pycurl.TIMEOUT_MS, timeout)
            try:
                await multi.perform(curl)
            except pycurl.error as exc:
                curl.close()
                if prereq is not None and prereq.refused is not None:
                    raise prereq.refused from None
                raise TransportError(f"{self._describe(request)}: {_describe_curl(exc)}") from exc
            except BaseException:
                curl.close()  # the multi removes it when the cancelled future is done
                raise
            status = int(curl.getinfo(pycurl.RESPONSE_CODE))
            self._pool.release(curl)
            if (
                status == 401
                and attempt == 1
                and "Authorization" not in request.headers
                and await self._credentials.refused()
            ):
                continue
            break
        _status_lines(header_lines)
        content = body[0] if len(body) == 1 else b"".join(body)
        return Response(status, _Headers(header_lines[1:]), content)

    @asynccontextmanager
    async def _open(self, request: Request, read_timeout: float) -> AsyncIterator[StreamResponse]:
        multi = self._pool.multi()
        curl = self._prepare(request, await self._headers(request))
        curl.setopt(pycurl.CONNECTTIMEOUT, 30)
        curl.setopt(pycurl.LOW_SPEED_LIMIT, 1)
        curl.setopt(pycurl.LOW_SPEED_TIME, max(1, math.ceil(read_timeout)))
        stream = _CurlStream(curl, self._describe(request))
        done = multi.add_handle(curl)
        stream.started(done)
        try:
            await asyncio.wait((stream.headers_seen, done), return_when=asyncio.FIRST_COMPLETED)
            if not stream.headers_seen.done():
                if (failure := stream._failure()) is not None:
                    raise failure
                raise TransportError(f"{self._describe(request)}: no response headers")
            if stream.status == 401 and "Authorization" not in request.headers:
                await self._credentials.refused()  # the next watch carries the new one
            yield stream
        finally:
            stream.headers_seen.cancel()
            if not done.done():
                with suppress(RuntimeError, pycurl.error):
                    multi.remove_handle(curl)  # resets the HTTP/2 stream, not the connection
            curl.close()

    def stream(
        self, request: Request, *, read_timeout: float
    ) -> AbstractAsyncContextManager[StreamResponse]:
        return self._open(request, read_timeout)

    async def aclose(self) -> None:
        if self._own_pool:
            await self._pool.aclose()
