"""A client transport that answers with a function, for unit tests of client code.

Like httpx's ``MockTransport``: ``handler(request)`` returns the
:class:`~kube_ccm.runtime.transport.Response` (or raises, e.g.
:class:`~kube_ccm.runtime.transport.TransportError` for a refused connection)::

    transport = MockTransport(lambda request: json_response(200, {"kind": "NodeList"}))
    client = KubeClient(transport)

For a whole API server in memory, use :class:`kube_ccm.testing.fakeapi.FakeApiServer`,
which is a transport too.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

from kube_ccm.runtime.transport import Request, Response, StreamResponse

__all__ = ["MockTransport", "json_response", "text_response"]

Handler = Callable[[Request], Response | Awaitable[Response]]

_JSON: Mapping[str, str] = {"Content-Type": "application/json"}


def json_response(status: int, body: Any = None) -> Response:
    """An answer whose body is ``body`` as JSON (``{}`` when None)."""
    return Response(status, _JSON, json.dumps({} if body is None else body).encode())


def text_response(status: int, text: str = "") -> Response:
    return Response(status, {"Content-Type": "text/plain"}, text.encode())


class WholeBody:
    """A plain answer read as a stream (:class:`~kube_ccm.runtime.transport.StreamResponse`):
    its whole content in one chunk."""

    def __init__(self, response: Response) -> None:
        self.status = response.status
        self._content = response.content

    async def read(self) -> bytes:
        return self._content

    async def chunks(self) -> AsyncIterator[bytes]:
        if self._content:
            yield self._content


class MockTransport:
    """Answers every request with ``handler``; keeps the requests in ``requests``."""

    def __init__(self, handler: Handler, *, server: str = "https://api.test") -> None:
        self._handler = handler
        self.server = server
        self.requests: list[Request] = []
        self.closed = False

    async def send(self, request: Request) -> Response:
        request.check()  # the fence at the last moment, as the real transports ask it
        self.requests.append(request)
        answer = self._handler(request)
        if inspect.isawaitable(answer):
            return await answer
        return answer

    @asynccontextmanager
    async def stream(
        self, request: Request, *, read_timeout: float
    ) -> AsyncIterator[StreamResponse]:
        yield WholeBody(await self.send(request))

    async def aclose(self) -> None:
        self.closed = True
