"""The production transport: aiohttp, one connector with keep-alive per client.

TLS and credentials come from the kubeconfig (lightkube builds the TLS context,
:mod:`kube_ccm.runtime.credentials` the ``Authorization`` header). A write's
:attr:`~kube_ccm.runtime.transport.Request.guard` (the lease) is asked where the
bytes leave, in aiohttp's own request class. See docs/design.md, "Kubernetes client"
and "fencing".
"""

from __future__ import annotations

import contextvars
import errno
import ssl
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import aiohttp
from lightkube.config.client_adapter import verify_cluster
from lightkube.config.kubeconfig import SingleConfig
from lightkube.config.models import User

from kube_ccm.runtime.credentials import CredentialSource, NoCredentials, credential_source
from kube_ccm.runtime.transport import (
    ClientFencedError,
    Request,
    Response,
    StreamResponse,
    TransportError,
)


class _AiohttpStream:
    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response

    @property
    def status(self) -> int:
        return self._response.status

    async def read(self) -> bytes:
        try:
            return await self._response.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise TransportError(_describe(exc)) from exc

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise TransportError(_describe(exc)) from exc


_SENDING: contextvars.ContextVar[Request | None] = contextvars.ContextVar(
    "kube_ccm_sending", default=None
)
"""The :class:`Request` :meth:`AiohttpTransport.send` is sending (for its guard)."""


class _GuardedClientRequest(aiohttp.ClientRequest):
    """aiohttp's request, with :attr:`Request.guard` asked where the bytes leave.

    aiohttp gets a connection first (waiting for a free one, or connecting and
    shaking hands), then :meth:`send` writes the head; a request with a body has
    head and body written by :meth:`write_bytes`, which before Python 3.12 runs as
    a task of its own, one turn of the event loop later. The guard is asked at the
    start of both, in the same step of the event loop as the socket write, so no
    other task runs in between: a process stopped there (SIGSTOP, a paused VM)
    has at most this one request between its last check and the socket.
    """

    async def send(self, conn: aiohttp.connector.Connection) -> aiohttp.ClientResponse:
        if (request := _SENDING.get()) is not None:
            request.check()  # aiohttp closes the connection; nothing was written
        return await super().send(conn)

    async def write_bytes(
        self,
        writer: aiohttp.abc.AbstractStreamWriter,
        conn: aiohttp.connector.Connection,
        content_length: int | None = None,
    ) -> None:
        if (request := _SENDING.get()) is not None:
            try:
                request.check()
            except ClientFencedError as exc:
                # The head waits in the writer's buffer, coalesced with the body: it
                # is dropped with the connection, which reading the answer closes.
                if conn.protocol is not None:
                    conn.protocol.set_exception(exc)
                return
        await super().write_bytes(writer, conn, content_length)


_REPLAYABLE = frozenset({"GET", "HEAD", "OPTIONS"})


def _stale_connection(exc: BaseException, method: str) -> bool:
    """Worth one more try on a fresh connection, as Go's transport does for a reused one.

    A broken pipe means the request was not written: the server had closed the
    kept-alive connection (an API server restart, an idle timeout), so any request
    may be sent again. A connection the server dropped without an answer may have
    been acted on, so only reads are sent again.
    """
    if isinstance(exc, aiohttp.ClientOSError) and exc.errno == errno.EPIPE:
        return True
    return method.upper() in _REPLAYABLE and isinstance(
        exc, aiohttp.ServerDisconnectedError | aiohttp.ClientConnectionResetError
    )


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class AiohttpTransport:
    """The production transport: aiohttp, one connector with keep-alive per client."""

    def __init__(
        self,
        server: str,
        *,
        ssl_context: ssl.SSLContext | None = None,
        credentials: CredentialSource | None = None,
        timeout: float = 30.0,
        connection_limit: int = 100,
    ) -> None:
        self._server = server.rstrip("/")
        self._ssl: ssl.SSLContext | bool = ssl_context if ssl_context is not None else True
        self._credentials = credentials or NoCredentials()
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._limit = connection_limit
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    def from_config(cls, config: SingleConfig, *, timeout: float = 30.0) -> AiohttpTransport:
        """The transport a resolved kubeconfig (``kubeconfig.load_config``) describes."""
        server = str(config.cluster.server)
        context: ssl.SSLContext | None = None
        if server.startswith("https:"):
            context = verify_cluster(
                config.cluster, config.user or User(), config.abs_file, trust_env=False
            )
        return cls(
            server, ssl_context=context, credentials=credential_source(config.user), timeout=timeout
        )

    @property
    def server(self) -> str:
        return self._server

    def _client(self) -> aiohttp.ClientSession:
        # Made on first use, inside the running loop (aiohttp binds sessions to a loop).
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    ssl=self._ssl, limit=self._limit, keepalive_timeout=60.0
                ),
                cookie_jar=aiohttp.DummyCookieJar(),
                timeout=self._timeout,
                raise_for_status=False,
                request_class=_GuardedClientRequest,
            )
        return self._session

    async def _headers(self, request: Request) -> dict[str, str]:
        headers = dict(request.headers)
        if "Authorization" not in headers and (auth := await self._credentials.header()):
            headers["Authorization"] = auth
        return headers

    async def send(self, request: Request) -> Response:
        timeout = (
            aiohttp.ClientTimeout(total=request.timeout) if request.timeout is not None else None
        )
        for attempt in (1, 2):
            headers = await self._headers(request)
            sending = _SENDING.set(request)
            try:
                async with self._client().request(
                    request.method,
                    self._server + request.path,
                    params=request.params,
                    data=request.content,
                    headers=headers,
                    timeout=timeout,
                ) as response:
                    content = await response.read()
            except (aiohttp.ClientError, TimeoutError) as exc:
                if attempt == 1 and _stale_connection(exc, request.method):
                    continue
                raise TransportError(
                    f"{request.method} {self._server}{request.path}: {_describe(exc)}"
                ) from exc
            finally:
                _SENDING.reset(sending)
            if (
                response.status == 401
                and attempt == 1
                and "Authorization" not in request.headers
                and await self._credentials.refused()
            ):
                continue
            break
        return Response(response.status, response.headers, content)

    @asynccontextmanager
    async def _open(self, request: Request, read_timeout: float) -> AsyncIterator[StreamResponse]:
        timeout = aiohttp.ClientTimeout(total=None, connect=30.0, sock_read=read_timeout)
        try:
            response = await self._client().request(
                request.method,
                self._server + request.path,
                params=request.params,
                data=request.content,
                headers=await self._headers(request),
                timeout=timeout,
            )
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise TransportError(
                f"{request.method} {self._server}{request.path}: {_describe(exc)}"
            ) from exc
        try:
            if response.status == 401 and "Authorization" not in request.headers:
                await self._credentials.refused()  # the next watch carries the new one
            yield _AiohttpStream(response)
        finally:
            response.release()  # closes the connection instead if the body was not all read

    def stream(
        self, request: Request, *, read_timeout: float
    ) -> AbstractAsyncContextManager[StreamResponse]:
        return self._open(request, read_timeout)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
