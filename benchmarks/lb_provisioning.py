"""Load-balancer provisioning and node churn with many LoadBalancer Services.

    .venv/bin/python benchmarks/lb_provisioning.py [--services 500] [--latency 0 0.05]
        [--workers 1 16] [--kube-api-qps 20 --kube-api-burst 30] [--markdown docs/benchmarks.md]

For each (latency, workers) pair, on a fresh control plane with 3 nodes and
``kube-ccm run --controllers=service`` over the simulated cloud:

1. create N LoadBalancer Services (before the daemon starts) and measure the
   time from daemon start until every one has an ingress IP; cloud calls and API
   writes per Service (``apiserver_request_total`` for ``services``);
2. add one Node and measure the ``UpdateLoadBalancer`` calls and the time until
   every load balancer has the new node as a backend.

Prints one JSON object per scenario; ``--markdown`` appends a table.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import platform
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from _bench import load_average
from prometheus_client.parser import text_string_to_metric_families

from kube_ccm.runtime.client import KubeClient
from kube_ccm.testing.binaries import ensure_binaries
from kube_ccm.testing.controlplane import ControlPlane, ControlPlaneOptions
from kube_ccm.testing.daemon import DaemonProcess

WRITE_VERBS = {"POST", "PUT", "PATCH", "DELETE", "CREATE", "UPDATE", "APPLY"}
NAMESPACE = "default"


async def request_counts(client: KubeClient) -> Counter[tuple[str, str]]:
    text = (await client.request("GET", "/metrics")).decode()
    counts: Counter[tuple[str, str]] = Counter()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "apiserver_request_total":
                key = (sample.labels.get("verb", ""), sample.labels.get("resource", ""))
                counts[key] += int(sample.value)
    return counts


async def gather_limited(coros: list[Any], limit: int = 32) -> None:
    gate = asyncio.Semaphore(limit)

    async def one(coro: Any) -> None:
        async with gate:
            await coro

    await asyncio.gather(*(one(c) for c in coros))


async def wait_until(predicate: Any, limit: float, interval: float = 0.2) -> float:
    started = time.monotonic()
    while not await predicate():
        if time.monotonic() - started > limit:
            raise TimeoutError("benchmark condition not reached")
        await asyncio.sleep(interval)
    return time.monotonic()


async def scenario(
    plane: ControlPlane,
    workdir: Path,
    *,
    services: int,
    latency: float,
    workers: int,
    qps: float,
    burst: int,
) -> dict[str, Any]:
    load = load_average()
    client = KubeClient.from_kubeconfig(plane.kubeconfig)
    try:
        await gather_limited(
            [client.create("/api/v1/nodes", {"metadata": {"name": f"node-{i}"}}) for i in range(3)]
        )
        base = f"/api/v1/namespaces/{NAMESPACE}/services"
        await gather_limited(
            [
                client.create(
                    base,
                    {
                        "metadata": {"name": f"lb-{i:04d}"},
                        "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
                    },
                )
                for i in range(services)
            ]
        )
        before = await request_counts(client)
        daemon = DaemonProcess(
            kubeconfig=plane.kubeconfig,
            workdir=workdir,
            cloud_config={
                "latency": f"{latency * 1000:g}ms",
                "loadBalancer": {"ipPool": ["10.200.0.0/16"]},
            },
            args=[
                "--leader-elect=false",
                "--controllers=service",
                f"--concurrent-service-syncs={workers}",
                f"--kube-api-qps={qps:g}",
                f"--kube-api-burst={burst}",
            ],
        )
        started = time.monotonic()
        daemon.start()
        try:

            async def all_ingress() -> bool:
                listed = await client.get(base)
                done = sum(
                    1
                    for s in listed["items"]
                    if s.get("status", {}).get("loadBalancer", {}).get("ingress")
                )
                return done == services

            provisioned = await wait_until(all_ingress, limit=3600, interval=0.5)
            await asyncio.sleep(1.0)
            after = await request_counts(client)
            calls = daemon.cloud.calls()
            rss = _rss_mib(daemon.pid)
            daemon.cloud.reset_calls()

            await client.create("/api/v1/nodes", {"metadata": {"name": "node-new"}})
            added = time.monotonic()

            async def backends_updated() -> bool:
                return all("node-new" in lb.nodes for lb in daemon.cloud.load_balancers())

            updated = await wait_until(backends_updated, limit=3600, interval=0.2)
            await asyncio.sleep(1.0)
            churn_calls = daemon.cloud.calls()
        finally:
            daemon.stop()
    finally:
        await client.aclose()

    delta = after - before
    service_writes = sum(
        v for (verb, res), v in delta.items() if res == "services" and verb in WRITE_VERBS
    )
    event_writes = sum(
        v for (verb, res), v in delta.items() if res == "events" and verb in WRITE_VERBS
    )
    return {
        "benchmark": "lb_provisioning",
        "load_average_1m": load,
        "services": services,
        "cloud_latency_ms": latency * 1000,
        "concurrent_service_syncs": workers,
        "kube_api_qps": qps,
        "kube_api_burst": burst,
        "seconds_to_all_ingress": round(provisioned - started, 2),
        "services_per_second": round(services / (provisioned - started), 1),
        "cloud_calls_per_service": round(sum(c["count"] for c in calls.values()) / services, 3),
        "cloud_calls": {m: c["count"] for m, c in calls.items()},
        "api_writes_per_service": round(service_writes / services, 3),
        "event_writes_per_service": round(event_writes / services, 3),
        "node_add_update_calls": churn_calls.get("UpdateLoadBalancer", {}).get("count", 0),
        "node_add_ensure_calls": churn_calls.get("EnsureLoadBalancer", {}).get("count", 0),
        "node_add_seconds": round(updated - added, 2),
        "daemon_rss_mib": rss,
    }


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def markdown_rows(results: list[dict[str, Any]], versions: str) -> str:
    head = (
        f"\n### LB provisioning — {datetime.date.today()} — {platform.machine()}, {versions}, "
        f"Python {platform.python_version()}\n\n"
        "| services | cloud latency | --concurrent-service-syncs | QPS/burst | load avg (1 m) "
        "| s to all ingress "
        "| services/s | cloud calls/service | API writes/service | Event writes/service "
        "| node add: UpdateLoadBalancer calls | node add: Ensure calls | node add: s | RSS |\n"
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    )
    rows = "".join(
        f"| {r['services']} | {r['cloud_latency_ms']:g} ms | {r['concurrent_service_syncs']} "
        f"| {r['kube_api_qps']:g}/{r['kube_api_burst']} | {r['load_average_1m']} "
        f"| {r['seconds_to_all_ingress']} "
        f"| {r['services_per_second']} | {r['cloud_calls_per_service']} "
        f"| {r['api_writes_per_service']} | {r['event_writes_per_service']} "
        f"| {r['node_add_update_calls']} | {r['node_add_ensure_calls']} "
        f"| {r['node_add_seconds']} | {r['daemon_rss_mib']} MiB |\n"
        for r in results
    )
    return head + rows


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--services", type=int, default=500)
    parser.add_argument("--latency", type=float, nargs="+", default=[0.0, 0.05])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--kube-api-qps", type=float, default=20.0)
    parser.add_argument("--kube-api-burst", type=int, default=30)
    parser.add_argument("--markdown", type=Path, default=None)
    args = parser.parse_args()
    binaries = ensure_binaries()
    results = []
    for latency in args.latency:
        for workers in args.workers:
            with tempfile.TemporaryDirectory(prefix="kube-ccm-bench-") as tmp:
                options = ControlPlaneOptions(service_cluster_ip_range="10.96.0.0/16")
                plane = ControlPlane(options, binaries=binaries).start()
                try:
                    result = asyncio.run(
                        scenario(
                            plane,
                            Path(tmp),
                            services=args.services,
                            latency=latency,
                            workers=workers,
                            qps=args.kube_api_qps,
                            burst=args.kube_api_burst,
                        )
                    )
                finally:
                    plane.stop()
            print(json.dumps(result), flush=True)
            results.append(result)
    if args.markdown:
        versions = f"kube-apiserver {binaries.versions.kubernetes}, etcd {binaries.versions.etcd}"
        with args.markdown.open("a") as out:
            out.write(markdown_rows(results, versions))
        print(f"appended to {args.markdown}", file=sys.stderr)


if __name__ == "__main__":
    main()
