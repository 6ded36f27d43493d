"""The seam between the Kubernetes client and HTTP: a transport, and the one we ship.

:class:`KubeClient <kube_ccm.runtime.client.KubeClient>` speaks to the API
server only through a :class:`Transport`: send a request and get its status,
headers and body bytes, or open a response whose body arrives in chunks (a
watch). httpx's ``AsyncBaseTransport`` is the model: a test double is itself a
transport (the in-memory API server of ``kube_ccm.testing.fakeapi`` is one), not
a patched client.

:class:`AiohttpTransport` is the production transport: one aiohttp connector
with keep-alive for all of a client's requests, TLS and credentials from the
kubeconfig. lightkube still parses the kubeconfig and builds the TLS context
(CA, client certificate, ``insecure-skip-tls-verify``); credentials are
applied here: a static token, a token file re-read every minute and on a 401
(rotating in-cluster service-account tokens, as client-go does), an exec
credential plugin run again when its token expires or is refused, or basic
auth. A write's :attr:`Request.guard` (the lease) is asked at the last moment
before its bytes reach the socket. See docs/design.md, "Kubernetes client" and
"fencing".
"""

from __future__ import annotations

import asyncio
import base64
import contextvars
import datetime
import errno
import json
import os
import ssl
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import aiohttp
from lightkube.config.client_adapter import verify_cluster
from lightkube.config.kubeconfig import SingleConfig
from lightkube.config.models import User, UserExec

from kube_ccm.runtime.redaction import register_secret

Params = Mapping[str, str | int]


class TransportError(ConnectionError):
    """The request did not get an answer: connection refused or reset, TLS, timeout.

    An ``OSError`` (a ``ConnectionError``), so code that retries on network errors
    catches it without knowing the transport.
    """


class CredentialError(TransportError):
    """The credentials of the kubeconfig could not be obtained (token file, exec plugin)."""


class ClientFencedError(Exception):
    """A write was refused because the client was fenced (shutdown, or leadership lost).

    Fencing is how "stop before any further write" is enforced in one place:
    whatever a controller was doing, its next write fails fast instead of
    reaching the API server. Raised by the client before a request starts and by
    the transports at the last moment before its first byte reaches the socket
    (:attr:`Request.guard`); either way nothing of the request was sent.
    """


Guard = Callable[[], str | None]
"""``None`` to let a request go, or why it may not."""


@dataclass(frozen=True, slots=True)
class Request:
    """One API request. ``path`` is the API path (``/api/v1/nodes``), without query."""

    method: str
    path: str
    params: Params | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    content: bytes | None = None
    timeout: float | None = None
    """Seconds for the whole request; ``None``: the transport's default."""
    guard: Guard | None = None
    """Asked at the last moment before the request's first byte reaches the socket,
    after every wait (for a free connection, a TLS handshake, a stream of a shared
    HTTP/2 connection) and on every attempt: a reason refuses the request with
    :class:`ClientFencedError`, and nothing of it is sent. The client sets it on
    writes (fencing: docs/design.md, "Graceful stop and lost leadership")."""

    def check(self) -> None:
        """Raise :class:`ClientFencedError` if :attr:`guard` refuses the request now."""
        if self.guard is not None and (reason := self.guard()):
            raise ClientFencedError(
                f"{self.method} {self.path} refused before it was sent: {reason}"
            )


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    headers: Mapping[str, str]
    content: bytes


class StreamResponse(Protocol):
    """A response whose body is read as it arrives (a watch)."""

    @property
    def status(self) -> int: ...

    async def read(self) -> bytes:
        """The whole (remaining) body."""
        ...

    def chunks(self) -> AsyncIterator[bytes]:
        """The body in chunks as they arrive; ends when the server closes the stream."""
        ...


class Transport(Protocol):
    """What :class:`~kube_ccm.runtime.client.KubeClient` needs from HTTP."""

    @property
    def server(self) -> str:
        """The API server's base URL, e.g. ``https://10.0.0.1:6443``."""
        ...

    async def send(self, request: Request) -> Response:
        """Send ``request`` and return the whole answer; raise TransportError if none came."""
        ...

    def stream(
        self, request: Request, *, read_timeout: float
    ) -> AbstractAsyncContextManager[StreamResponse]:
        """Open ``request`` for reading as it arrives; ``read_timeout`` bounds each read."""
        ...

    async def aclose(self) -> None: ...


# -- credentials --------------------------------------------------------------

_TOKEN_FILE_REFRESH = 60.0  # client-go's cachingTokenSource re-reads the file every minute
_EXEC_API_VERSIONS = frozenset(
    {
        "client.authentication.k8s.io/v1",
        "client.authentication.k8s.io/v1beta1",
        "client.authentication.k8s.io/v1alpha1",
    }
)


class _Credentials(Protocol):
    async def header(self) -> str | None:
        """The Authorization header value, or None."""
        ...

    async def refused(self) -> bool:
        """The server answered 401: refresh; True if a retry could succeed."""
        ...


class _NoCredentials:
    async def header(self) -> str | None:
        return None

    async def refused(self) -> bool:
        return False


class _Static:
    def __init__(self, value: str) -> None:
        self._value = value

    async def header(self) -> str | None:
        return self._value

    async def refused(self) -> bool:
        return False


class _TokenFile:
    """A bearer token in a file that the kubelet rotates (in-cluster credentials)."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._value = ""
        self._read_at = -_TOKEN_FILE_REFRESH

    def _read(self) -> None:
        try:
            token = Path(self._path).read_text().strip()
        except OSError as exc:
            raise CredentialError(
                f"cannot read the bearer token file {self._path}: {exc}; check the "
                "kubeconfig's tokenFile or the mounted service-account token"
            ) from exc
        register_secret(token)
        self._value, self._read_at = f"Bearer {token}", time.monotonic()

    async def header(self) -> str | None:
        if time.monotonic() - self._read_at >= _TOKEN_FILE_REFRESH:
            self._read()
        return self._value

    async def refused(self) -> bool:
        before = self._value
        self._read()
        return self._value != before


class _Exec:
    """A client-go exec credential plugin: run it, cache its token until it expires."""

    def __init__(self, spec: UserExec) -> None:
        if spec.apiVersion not in _EXEC_API_VERSIONS:
            raise CredentialError(
                f"the kubeconfig's exec plugin {spec.command!r} uses apiVersion "
                f"{spec.apiVersion!r}; supported: {', '.join(sorted(_EXEC_API_VERSIONS))}"
            )
        self._spec = spec
        self._value: str | None = None
        self._expires: float | None = None
        self._lock = asyncio.Lock()

    def _fresh(self) -> bool:
        return self._value is not None and (self._expires is None or time.time() < self._expires)

    async def header(self) -> str | None:
        if not self._fresh():
            async with self._lock:
                if not self._fresh():
                    await self._run()
        return self._value

    async def refused(self) -> bool:
        async with self._lock:
            await self._run()
        return True

    async def _run(self) -> None:
        spec = self._spec
        env = dict(os.environ)
        env.update((var.name, var.value) for var in spec.env or ())
        env["KUBERNETES_EXEC_INFO"] = json.dumps(
            {
                "apiVersion": spec.apiVersion,
                "kind": "ExecCredential",
                "spec": {"interactive": False},
            }
        )
        try:
            proc = await asyncio.create_subprocess_exec(
                spec.command,
                *(spec.args or ()),
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            stdout, stderr = await proc.communicate()
        except OSError as exc:
            raise CredentialError(
                f"cannot run the kubeconfig's exec plugin {spec.command!r}: {exc}"
            ) from exc
        if proc.returncode != 0:
            raise CredentialError(
                f"the kubeconfig's exec plugin {spec.command!r} exited with "
                f"{proc.returncode}: {stderr.decode(errors='replace').strip()[:500]}"
            )
        try:
            status = json.loads(stdout)["status"]
            token = status["token"]
        except (ValueError, KeyError, TypeError) as exc:
            raise CredentialError(
                f"the kubeconfig's exec plugin {spec.command!r} printed no ExecCredential "
                "with status.token (client certificates from exec plugins are not "
                "supported; use a token)"
            ) from exc
        expires = status.get("expirationTimestamp")
        self._expires = (
            datetime.datetime.fromisoformat(expires.replace("Z", "+00:00")).timestamp()
            if expires
            else None
        )
        register_secret(str(token))
        self._value = f"Bearer {token}"


def _credentials(user: User | None) -> _Credentials:
    if user is None:
        return _NoCredentials()
    if user.token_file is not None:
        return _TokenFile(user.token_file)
    if user.token is not None:
        register_secret(user.token)
        return _Static(f"Bearer {user.token}")
    if user.exec is not None:
        return _Exec(user.exec)
    if user.username and user.password:
        basic = base64.b64encode(f"{user.username}:{user.password}".encode()).decode()
        register_secret(user.password)
        register_secret(basic)
        return _Static(f"Basic {basic}")
    if user.auth_provider:
        raise CredentialError(
            "the kubeconfig's user has an auth-provider, which kube-ccm (like current "
            "kubectl) does not support: use an exec credential plugin or a token"
        )
    return _NoCredentials()


# -- aiohttp ------------------------------------------------------------------


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
        credentials: _Credentials | None = None,
        timeout: float = 30.0,
        connection_limit: int = 100,
    ) -> None:
        self._server = server.rstrip("/")
        self._ssl: ssl.SSLContext | bool = ssl_context if ssl_context is not None else True
        self._credentials = credentials or _NoCredentials()
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._limit = connection_limit
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    def from_config(cls, config: SingleConfig, *, timeout: float = 30.0) -> AiohttpTransport:
        """The transport a resolved kubeconfig (``client.load_config``) describes."""
        server = str(config.cluster.server)
        context: ssl.SSLContext | None = None
        if server.startswith("https:"):
            context = verify_cluster(
                config.cluster, config.user or User(), config.abs_file, trust_env=False
            )
        return cls(
            server, ssl_context=context, credentials=_credentials(config.user), timeout=timeout
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
