"""The seam between the Kubernetes client and HTTP: what a transport is.

:class:`KubeClient <kube_ccm.runtime.client.KubeClient>` speaks to the API
server only through a :class:`Transport`: send a request and get its status,
headers and body bytes, or open a response whose body arrives in chunks (a
watch). httpx's ``AsyncBaseTransport`` is the model: a test double is itself a
transport (the in-memory API server of ``kube_ccm.testing.fakeapi`` is one), not
a patched client. A write's :attr:`Request.guard` (the lease) is asked by every
transport at the last moment before its bytes reach the socket.

The transports we ship: :mod:`kube_ccm.runtime.aiohttptransport` (the default) and
:mod:`kube_ccm.runtime.curltransport`; both take the kubeconfig's credentials from
:mod:`kube_ccm.runtime.credentials`. See docs/design.md, "Kubernetes client" and
"fencing".
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Protocol

Params = Mapping[str, str | int]


class TransportError(ConnectionError):
    """The request did not get an answer: connection refused or reset, TLS, timeout.

    An ``OSError`` (a ``ConnectionError``), so code that retries on network errors
    catches it without knowing the transport.
    """


class CredentialError(TransportError):
    """The credentials of the kubeconfig could not be obtained (token file, exec plugin;
    :mod:`kube_ccm.runtime.credentials`)."""


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
