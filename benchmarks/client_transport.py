"""The API client's cost per request over each transport, on a real kube-apiserver.

    .venv/bin/python benchmarks/client_transport.py [--requests 2000] [--concurrency 16]
        [--rounds 3] [--transports aiohttp curl httpx2] [--markdown docs/benchmarks.md]

``KubeClient`` talks HTTP through a transport (``kube_ccm/runtime/transport.py``).
This runs the same work through the production transport (aiohttp), the libcurl
one (``--kube-api-transport=curl``, HTTP/2) and an httpx2 transport configured by
lightkube, as the client was built before issue 14 (kept here, in the benchmark,
to show what the change bought): each
round PATCHes ``nodes/status`` ``--requests`` times with ``--concurrency`` in
flight over 200 Nodes, then LISTs the 200 Nodes five times. The process's CPU
time per request (everything the client does: encoding, HTTP, TLS, decoding)
and requests per second are reported per transport; the two alternate round by
round, and the medians are printed. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import httpx2
from _bench import append_markdown, emit, header, header_line, load_average, markdown_table
from lightkube.config import client_adapter

from kube_ccm.runtime.aiohttptransport import AiohttpTransport
from kube_ccm.runtime.client import KubeClient
from kube_ccm.runtime.kubeconfig import load_config
from kube_ccm.runtime.transport import (
    Request,
    Response,
    StreamResponse,
    Transport,
    TransportError,
)
from kube_ccm.testing.binaries import ensure_binaries
from kube_ccm.testing.controlplane import ControlPlane

NODES = 200
TRANSPORTS = ("aiohttp", "curl", "httpx2")


class _HttpxStream:
    def __init__(self, response: httpx2.Response) -> None:
        self._response = response

    @property
    def status(self) -> int:
        return self._response.status_code

    async def read(self) -> bytes:
        return await self._response.aread()

    async def chunks(self) -> AsyncIterator[bytes]:
        async for chunk in self._response.aiter_bytes():
            yield chunk


class HttpxTransport:
    """The client of before issue 14: lightkube's configured httpx2.AsyncClient."""

    def __init__(self, kubeconfig: Path) -> None:
        config = load_config(kubeconfig)
        params = client_adapter.ConnectionParams(timeout=httpx2.Timeout(30.0), trust_env=False)
        self._http = client_adapter.AsyncClient(config, params)
        self.server = str(config.cluster.server)

    async def send(self, request: Request) -> Response:
        try:
            response = await self._http.request(
                request.method,
                request.path,
                params=request.params,
                content=request.content,
                headers=dict(request.headers),
            )
        except httpx2.HTTPError as exc:
            raise TransportError(str(exc)) from exc
        return Response(response.status_code, response.headers, response.content)

    def stream(
        self, request: Request, *, read_timeout: float
    ) -> AbstractAsyncContextManager[StreamResponse]:
        return self._stream(request)

    @asynccontextmanager
    async def _stream(self, request: Request) -> AsyncIterator[StreamResponse]:
        async with self._http.stream(
            request.method, request.path, params=request.params, headers=dict(request.headers)
        ) as response:
            yield _HttpxStream(response)

    async def aclose(self) -> None:
        await self._http.aclose()


def make_transport(name: str, kubeconfig: Path) -> Transport:
    if name == "aiohttp":
        return AiohttpTransport.from_config(load_config(kubeconfig))
    if name == "curl":
        from kube_ccm.runtime.curltransport import CurlTransport  # noqa: PLC0415 (an extra)

        return CurlTransport.from_config(load_config(kubeconfig))
    return HttpxTransport(kubeconfig)


async def one_round(client: KubeClient, requests: int, concurrency: int) -> dict[str, float]:
    gate = asyncio.Semaphore(concurrency)

    async def patch(i: int) -> None:
        async with gate:
            await client.patch(
                f"/api/v1/nodes/bench-{i % NODES}/status",
                {"status": {"addresses": [{"type": "InternalIP", "address": f"10.0.0.{i % 250}"}]}},
            )

    cpu, wall = time.process_time(), time.monotonic()
    await asyncio.gather(*(patch(i) for i in range(requests)))
    patch_cpu, patch_wall = time.process_time() - cpu, time.monotonic() - wall
    cpu = time.process_time()
    for _ in range(5):
        await client.request("GET", "/api/v1/nodes")
    list_cpu = time.process_time() - cpu
    return {
        "patch_cpu_ms_per_request": round(1e3 * patch_cpu / requests, 3),
        "patches_per_second": round(requests / patch_wall, 1),
        "list_200_nodes_cpu_ms": round(1e3 * list_cpu / 5, 3),
    }


async def run(kubeconfig: Path, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    setup = KubeClient.from_kubeconfig(kubeconfig)
    for i in range(NODES):
        await setup.create("/api/v1/nodes", {"metadata": {"name": f"bench-{i}"}})
    await setup.aclose()
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in args.transports}
    for _ in range(args.rounds):
        for name, runs in samples.items():
            transport = make_transport(name, kubeconfig)
            client = KubeClient(transport)
            try:
                await one_round(client, 50, args.concurrency)  # connections warm
                runs.append(await one_round(client, args.requests, args.concurrency))
            finally:
                await client.aclose()
    return {
        name: {key: statistics.median(s[key] for s in runs) for key in runs[0]}
        for name, runs in samples.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--transports", nargs="+", choices=TRANSPORTS, default=list(TRANSPORTS))
    parser.add_argument("--markdown", type=Path, default=None)
    args = parser.parse_args()
    binaries = ensure_binaries()
    load = load_average()
    with ControlPlane(binaries=binaries) as plane:
        results = asyncio.run(run(plane.kubeconfig, args))
    info = header(binaries)
    for name, values in results.items():
        emit({"benchmark": "client_transport", "transport": name, **values, "header": info})
    base = results[args.transports[0]]["patch_cpu_ms_per_request"]
    title = (
        f"Client transport, {args.requests} PATCHes x {args.rounds} rounds, "
        f"{args.concurrency} in flight, load avg {load:.2f} — {header_line(info)}"
    )
    columns = [
        "transport",
        "CPU/PATCH",
        "PATCHes/s",
        "CPU/LIST of 200 Nodes",
        f"CPU vs {args.transports[0]}",
    ]
    rows = [
        [
            name,
            f"{v['patch_cpu_ms_per_request']:.3f} ms",
            f"{v['patches_per_second']:.0f}",
            f"{v['list_200_nodes_cpu_ms']:.2f} ms",
            f"{v['patch_cpu_ms_per_request'] / base:.2f}",
        ]
        for name, v in results.items()
    ]
    append_markdown(args.markdown, markdown_table(title, columns, rows))


if __name__ == "__main__":
    main()
