"""The fence at the last moment: each transport (aiohttp, libcurl) asks a write's guard
once the request has its connection, right before its bytes reach the socket, so a
write that waited (for a free connection, a TLS handshake, a stream) while the lease
was lost is dropped with nothing sent. Against a real HTTP server on loopback."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web

from kube_ccm.runtime.aiohttptransport import AiohttpTransport
from kube_ccm.runtime.client import ClientFencedError, KubeClient
from kube_ccm.runtime.transport import Request, Transport

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def one_connection(kind: str, server: str) -> Transport:
    """A transport with a single connection to ``server`` (plain HTTP/1.1), so a second
    request waits for the first to finish."""
    if kind == "curl":
        from kube_ccm.runtime.curltransport import CurlPool, CurlTransport  # noqa: PLC0415

        return CurlTransport(server, pool=CurlPool(max_host_connections=1))
    return AiohttpTransport(server, connection_limit=1)


@pytest.fixture(params=["aiohttp", "curl"])
def kind(request: pytest.FixtureRequest) -> str:
    if request.param == "curl":
        pytest.importorskip("pycurl", reason="the curl transport's extra (kube-ccm[curl])")
    return str(request.param)


@pytest.fixture
async def server() -> AsyncIterator[tuple[str, list[str], asyncio.Event]]:
    """``(url, paths the server received, an event that releases /hold)``."""
    seen: list[str] = []
    release = asyncio.Event()

    async def handle(request: web.Request) -> web.Response:
        seen.append(f"{request.method} {request.path}")
        await request.read()
        if request.path == "/hold":
            await release.wait()
        return web.json_response({})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}", seen, release
    finally:
        release.set()
        await runner.cleanup()


async def _until(done: Callable[[], bool]) -> None:
    async with asyncio.timeout(30):
        while not done():
            await asyncio.sleep(0.01)


async def test_a_write_waiting_for_a_connection_when_the_lease_goes_is_never_sent(
    kind: str, server: tuple[str, list[str], asyncio.Event]
) -> None:
    """The client's own checks pass while the lease is held; the write then waits for
    the only connection; the lease goes; the connection frees: nothing is sent."""
    url, seen, release = server
    lease: dict[str, str | None] = {"reason": None}
    asked: list[str] = []

    def guard(method: str, path: str) -> str | None:
        asked.append(path)
        return lease["reason"]

    client = KubeClient(one_connection(kind, url))
    client.set_write_guard(guard)
    try:
        holding = asyncio.create_task(client.request("GET", "/hold"))
        await _until(lambda: seen == ["GET /hold"])
        write = asyncio.create_task(client.patch("/api/v1/nodes/n1", {"spec": {}}))
        await _until(lambda: len(asked) >= 2)  # both of the client's checks passed
        await asyncio.sleep(0.2)  # (the write now waits inside the transport)
        lease["reason"] = "the leader lease was last renewed 9.0 s ago"
        release.set()
        await holding
        with pytest.raises(ClientFencedError, match="refused before it was sent: the leader"):
            await write
        # The transport is still usable, and the refused write never reached the server.
        await client.request("GET", "/after")
    finally:
        await client.aclose()
    assert seen == ["GET /hold", "GET /after"]


@pytest.mark.parametrize("method", ["PATCH", "DELETE"])
async def test_a_refusal_at_the_socket_sends_nothing_and_leaves_the_transport_usable(
    kind: str, server: tuple[str, list[str], asyncio.Event], method: str
) -> None:
    """With a body (written by a task of its own in aiohttp) and without."""
    url, seen, _ = server
    transport = one_connection(kind, url)
    content = b'{"spec": {}}' if method == "PATCH" else None
    try:
        await transport.send(Request("GET", "/warm"))  # a kept-alive connection to reuse
        with pytest.raises(ClientFencedError, match=f"{method} /w refused before it was sent"):
            await transport.send(Request(method, "/w", content=content, guard=lambda: "lost"))
        answer = await transport.send(Request(method, "/w", content=content, guard=lambda: None))
    finally:
        await transport.aclose()
    assert answer.status == 200
    assert seen == ["GET /warm", f"{method} /w"]


async def test_aiohttp_asks_again_when_it_writes_the_body() -> None:
    """Before Python 3.12 aiohttp writes a request's head and body in a task of its
    own, a turn of the event loop after the request got its connection: the guard is
    asked there too, the last moment before the bytes leave."""
    seen: list[str] = []

    async def handle(request: web.Request) -> web.Response:
        seen.append(request.path)
        return web.json_response({})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    transport = AiohttpTransport(f"http://127.0.0.1:{port}", connection_limit=1)
    answers = iter([None, "lost meanwhile"])
    try:
        await transport.send(Request("GET", "/warm"))  # a kept-alive connection to reuse
        with pytest.raises(ClientFencedError, match="lost meanwhile"):
            await transport.send(
                Request("PUT", "/w", content=b"{}", guard=lambda: next(answers, "lost"))
            )
        # The refused head never reaches the server, not even ahead of the next request.
        answer = await transport.send(Request("PUT", "/next", content=b"{}"))
    finally:
        await transport.aclose()
        await runner.cleanup()
    assert answer.status == 200
    assert seen == ["/warm", "/next"]
