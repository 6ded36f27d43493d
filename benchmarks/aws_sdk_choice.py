"""boto3 on a bounded thread pool vs aiobotocore, for the aws provider (issue 16).

    .venv/bin/python benchmarks/aws_sdk_choice.py [--workers 16] [--calls 1600]
        [--rounds 3] [--instances 40] [--ids-per-call 10] [--markdown FILE]

Both SDKs call ``DescribeInstances`` (an ``instance-id`` filter of ``--ids-per-call``
IDs, as the provider's batched lookups do) against one moto server
(:class:`kube_ccm.providers.aws.moto.MotoServer`, a subprocess on loopback; with
``--auth`` it checks credentials too) from ``--workers`` concurrent asyncio tasks
in this process:

* **boto3** — one client (``max_pool_connections`` = workers, botocore's retries
  off) whose calls run on :class:`kube_ccm.cloudprovider.BlockingCalls` with
  ``workers`` threads, as the provider runs them;
* **aiobotocore** — one ``AioSession`` client with the same pool size and retries,
  awaited on the event loop.

With ``--server replay`` moto only makes the first answer; a minimal threaded HTTP
server (a subprocess) then replays it to every call, after ``--latency`` seconds:
the SDKs' own cost without moto's ~20 ms of CPU per call bounding calls/s, and
with a latency like a real region's.

Rounds alternate (boto3, aiobotocore, boto3, ...) after a warm-up of each; the
median round is reported. Measured per SDK: calls/s (wall clock), this process's
CPU per call (user + system, all threads: what the SDK costs the daemon), the moto
server's CPU per call (the same for both: a check that the server, not the SDK,
bounds calls/s), latency p50/p99, this process's RSS growth and threads.

aiobotocore is imported by name (the ``bench`` extra has it; CI's type check does
not install it). Nothing is asserted: the numbers go into docs/design.md.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import importlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

from kube_ccm.cloudprovider import BlockingCalls
from kube_ccm.providers.aws.moto import MotoServer
from kube_ccm.testing.controlplane import die_with_parent

ZONE = "us-east-1a"


def process_cpu(pid: int) -> float:
    """User + system CPU seconds of a process (all its threads), from /proc."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def drive(
    call: Callable[[], Awaitable[Any]], workers: int, calls: int
) -> tuple[float, list[float]]:
    """``calls`` calls from ``workers`` tasks; wall seconds and each call's latency."""
    latencies: list[float] = []
    remaining = calls

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            started = time.perf_counter()
            await call()
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(workers)))
    return time.perf_counter() - started, latencies


def measure(
    name: str, wall: float, latencies: list[float], cpu: float, server_cpu: float
) -> dict[str, Any]:
    latencies = sorted(latencies)
    n = len(latencies)
    return {
        "sdk": name,
        "calls": n,
        "calls_per_s": round(n / wall, 1),
        "cpu_ms_per_call": round(cpu / n * 1000, 3),
        "server_cpu_ms_per_call": round(server_cpu / n * 1000, 3),
        "p50_ms": round(latencies[n // 2] * 1000, 2),
        "p99_ms": round(latencies[min(n - 1, int(n * 0.99))] * 1000, 2),
    }


class Boto3Runner:
    def __init__(
        self, endpoint: str, server: MotoServer, workers: int, filters: list[dict[str, Any]]
    ) -> None:
        import boto3  # noqa: PLC0415 (the aws extra)
        from botocore.config import Config  # noqa: PLC0415

        self.client = boto3.session.Session().client(
            "ec2",
            endpoint_url=endpoint,
            region_name=server.region,
            aws_access_key_id=server.keys.access_key_id,
            aws_secret_access_key=server.keys.secret_access_key,
            config=Config(max_pool_connections=workers, retries={"total_max_attempts": 1}),
        )
        self.calls = BlockingCalls("bench-boto3", workers)
        self.filters: Any = filters

    async def call(self) -> Any:
        return await self.calls.run(self.client.describe_instances, Filters=self.filters)

    async def aclose(self) -> None:
        self.calls.close()


class AiobotocoreRunner:
    def __init__(self, client_context: Any, filters: list[dict[str, Any]]) -> None:
        self._context = client_context
        self.client: Any = None
        self.filters = filters

    @classmethod
    async def open(
        cls, endpoint: str, server: MotoServer, workers: int, filters: list[dict[str, Any]]
    ) -> AiobotocoreRunner:
        session_module = importlib.import_module("aiobotocore.session")
        config_module = importlib.import_module("aiobotocore.config")
        context = session_module.get_session().create_client(
            "ec2",
            endpoint_url=endpoint,
            region_name=server.region,
            aws_access_key_id=server.keys.access_key_id,
            aws_secret_access_key=server.keys.secret_access_key,
            config=config_module.AioConfig(
                max_pool_connections=workers, retries={"total_max_attempts": 1}
            ),
        )
        runner = cls(context, filters)
        runner.client = await context.__aenter__()
        return runner

    async def call(self) -> Any:
        return await self.client.describe_instances(Filters=self.filters)

    async def aclose(self) -> None:
        await self._context.__aexit__(None, None, None)


REPLAY_SERVER = """
import http.server, socketserver, sys, time
body = open(sys.argv[1], "rb").read()
latency = float(sys.argv[2])
class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if latency:
            time.sleep(latency)
        self.send_response(200)
        self.send_header("Content-Type", "text/xml;charset=UTF-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
server = Server(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


def capture(server: MotoServer, filters: list[dict[str, Any]], path: Path) -> None:
    """Save moto's raw answer to the benchmark's DescribeInstances."""
    client = Boto3Runner(server.url, server, 1, filters).client

    def keep(http_response: Any, **_kwargs: Any) -> None:
        path.write_bytes(http_response.content)

    client.meta.events.register("after-call.ec2.DescribeInstances", keep)
    client.describe_instances(Filters=filters)  # type: ignore[arg-type]


def start_replay(body: Path, latency: float) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, "-c", REPLAY_SERVER, str(body), str(latency)],
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=die_with_parent(os.getpid()),  # noqa: PLW1509
    )
    assert process.stdout is not None
    port = int(process.stdout.readline())
    return process, f"http://127.0.0.1:{port}"


async def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    server = MotoServer(auth=args.auth).start()
    replay: subprocess.Popen[str] | None = None
    try:
        network = server.network([ZONE])
        ids = [server.run_instance(network, ZONE).id for _ in range(args.instances)]
        filters = [{"Name": "instance-id", "Values": ids[: args.ids_per_call]}]
        endpoint, server_pid = server.url, server.pid
        if args.server == "replay":
            with tempfile.TemporaryDirectory() as tmp:
                body = Path(tmp) / "describe.xml"
                capture(server, filters, body)
                server.stop()
                replay, endpoint = start_replay(body, args.latency)
                server_pid = replay.pid
        rss_before = rss_mib()
        threads_before = threading.active_count()
        boto3_runner = Boto3Runner(endpoint, server, args.workers, filters)
        aio_runner = await AiobotocoreRunner.open(endpoint, server, args.workers, filters)
        runners: dict[str, Callable[[], Awaitable[Any]]] = {
            "boto3 + BlockingCalls": boto3_runner.call,
            "aiobotocore": aio_runner.call,
        }
        for call in runners.values():  # warm-up: connections, endpoint resolution, parsers
            await drive(call, args.workers, args.workers * 4)
        rss_after_warmup = rss_mib()
        results: dict[str, list[dict[str, Any]]] = {name: [] for name in runners}
        for _round in range(args.rounds):
            for name, call in runners.items():
                cpu0, server0 = time.process_time(), process_cpu(server_pid)
                wall, latencies = await drive(call, args.workers, args.calls)
                cpu = time.process_time() - cpu0
                server_cpu = process_cpu(server_pid) - server0
                results[name].append(measure(name, wall, latencies, cpu, server_cpu))
                print(json.dumps(results[name][-1]), flush=True)
        threads = threading.active_count() - threads_before
        await boto3_runner.aclose()
        await aio_runner.aclose()
    finally:
        server.stop()
        if replay is not None:
            replay.kill()
            replay.wait()
    report = []
    for rounds in results.values():
        median = sorted(rounds, key=lambda r: r["calls_per_s"])[len(rounds) // 2]
        report.append(
            {
                **median,
                "cpu_ms_per_call_rounds": [r["cpu_ms_per_call"] for r in rounds],
                "calls_per_s_rounds": [r["calls_per_s"] for r in rounds],
            }
        )
    print(
        json.dumps(
            {
                "rss_growth_mib_both_clients": round(rss_after_warmup - rss_before, 1),
                "threads_started": threads,
            }
        )
    )
    return report


def markdown(args: argparse.Namespace, report: list[dict[str, Any]]) -> str:
    today = datetime.date.today().isoformat()
    lines = [
        f"\n{today} — {platform.node()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, boto3 {version('boto3')}, aiobotocore "
        f"{version('aiobotocore')}, botocore {version('botocore')}, moto {version('moto')}; "
        f"{args.workers} workers, DescribeInstances of {args.ids_per_call} IDs, "
        f"{args.calls} calls x {args.rounds} rounds (median round), moto "
        f"{'checking' if args.auth else 'not checking'} credentials; server: {args.server}"
        f"{f', {args.latency * 1000:g} ms latency' if args.server == 'replay' else ''}\n",
        "| SDK | calls/s | client CPU ms/call | server CPU ms/call | p50 ms | p99 ms |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in report:
        lines.append(
            f"| {r['sdk']} | {r['calls_per_s']} | {r['cpu_ms_per_call']} | "
            f"{r['server_cpu_ms_per_call']} | {r['p50_ms']} | {r['p99_ms']} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--calls", type=int, default=1600, help="calls per SDK per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--instances", type=int, default=40)
    parser.add_argument("--ids-per-call", type=int, default=10)
    parser.add_argument(
        "--auth",
        action="store_true",
        help="moto checks credentials (IAM signature and policy: more server CPU per call)",
    )
    parser.add_argument(
        "--server",
        choices=("moto", "replay"),
        default="moto",
        help="moto: the moto server answers; replay: a minimal HTTP server replays "
        "moto's answer (the SDKs' own cost, without moto's)",
    )
    parser.add_argument(
        "--latency", type=float, default=0.0, help="seconds the replay server waits per call"
    )
    parser.add_argument("--markdown", type=Path, help="append the table to this file")
    args = parser.parse_args()
    report = asyncio.run(run(args))
    text = markdown(args, report)
    print(text)
    if args.markdown:
        with args.markdown.open("a") as out:
            out.write(text)


if __name__ == "__main__":
    main()
