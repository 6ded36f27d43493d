"""Node initialisation throughput and cost on the real apiserver.

    .venv/bin/python benchmarks/node_init.py [--nodes 1000] [--latency 0 0.05] [--workers 1 16]
        [--kube-api-qps 20 --kube-api-burst 30] [--markdown docs/benchmarks.md]

For each (latency, workers) pair: a fresh control plane, N Nodes registered as a
kubelet with ``--cloud-provider=external`` does (the uninitialised taint, a
Hostname address, Ready=True), then ``kube-ccm run`` with the simulated cloud
(``unknownNodes: create``, the given per-call latency) is started as a
subprocess. Measured:

* nodes initialised per second: from the first to the last taint removal, and
  from daemon start to the last one (includes start-up and the initial list);
* API writes and reads per node: deltas of the apiserver's
  ``apiserver_request_total`` for ``resource=nodes`` (and ``events``) over the run;
* cloud calls per node: the simulated cloud's per-method counters;
* daemon RSS with every node cached (from /proc).

Prints one JSON object per scenario and, with ``--markdown``, appends a table.
Nothing here is asserted: the numbers go into the docs and the closing note.
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

from prometheus_client.parser import text_string_to_metric_families

from kube_ccm.api import wellknown as wk
from kube_ccm.api.objects import Node
from kube_ccm.runtime.client import KubeClient
from kube_ccm.runtime.informer import Informer
from kube_ccm.testing.binaries import ensure_binaries
from kube_ccm.testing.controlplane import ControlPlane
from kube_ccm.testing.daemon import DaemonProcess

WRITE_VERBS = {"POST", "PUT", "PATCH", "DELETE", "CREATE", "UPDATE", "APPLY"}


def node_manifest(name: str) -> dict[str, Any]:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {
            "taints": [{"key": wk.TAINT_UNINITIALIZED, "value": "true", "effect": "NoSchedule"}]
        },
        "status": {
            "addresses": [{"type": "Hostname", "address": name}],
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
        },
    }


async def request_counts(client: KubeClient) -> Counter[tuple[str, str]]:
    """(verb, resource) → requests so far, from the apiserver's own metrics."""
    text = (await client.request("GET", "/metrics")).decode()
    counts: Counter[tuple[str, str]] = Counter()
    for family in text_string_to_metric_families(text):
        if family.name != "apiserver_request":
            continue
        for sample in family.samples:
            if sample.name != "apiserver_request_total":
                continue
            labels = sample.labels
            counts[(labels.get("verb", ""), labels.get("resource", ""))] += int(sample.value)
    return counts


async def create_nodes(client: KubeClient, names: list[str]) -> None:
    gate = asyncio.Semaphore(32)

    async def one(name: str) -> None:
        async with gate:
            created = await client.create("/api/v1/nodes", node_manifest(name))
            if not created.get("status", {}).get("conditions"):
                await client.patch(
                    f"/api/v1/nodes/{name}/status", {"status": node_manifest(name)["status"]}
                )

    await asyncio.gather(*(one(n) for n in names))


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


async def scenario(
    plane: ControlPlane,
    workdir: Path,
    *,
    nodes: int,
    latency: float,
    workers: int,
    qps: float,
    burst: int,
) -> dict[str, Any]:
    client = KubeClient.from_kubeconfig(plane.kubeconfig)
    names = [f"bench-{i:05d}" for i in range(nodes)]
    await create_nodes(client, names)

    informer: Informer[Node] = Informer(client, "/api/v1/nodes", Node)
    done_at: dict[str, float] = {}
    all_done = asyncio.Event()

    def observe(node: Node) -> None:
        initialised = node.spec.provider_id and not any(
            t.key == wk.TAINT_UNINITIALIZED for t in node.spec.taints
        )
        if initialised and node.metadata.name not in done_at:
            done_at[node.metadata.name] = time.monotonic()
            if len(done_at) == nodes:
                all_done.set()

    informer.add_handler(on_add=observe, on_update=lambda _old, new: observe(new))
    watching = asyncio.create_task(informer.run())
    await informer.wait_synced()

    before = await request_counts(client)
    daemon = DaemonProcess(
        kubeconfig=plane.kubeconfig,
        workdir=workdir,
        cloud_config={"unknownNodes": "create", "latency": f"{latency * 1000:g}ms"},
        args=[
            "--leader-elect=false",
            "--controllers=cloud-node,cloud-node-lifecycle",
            f"--concurrent-node-syncs={workers}",
            f"--kube-api-qps={qps:g}",
            f"--kube-api-burst={burst}",
        ],
    )
    started = time.monotonic()
    daemon.start()
    try:
        await asyncio.wait_for(all_done.wait(), timeout=max(600.0, nodes * (latency + 0.05) * 4))
        finished = time.monotonic()
        await asyncio.sleep(1.0)  # let the trailing status patches and events land
        rss = rss_mib(daemon.pid)
        after = await request_counts(client)
        calls = daemon.cloud.calls()
    finally:
        daemon.stop()
        watching.cancel()
        await client.aclose()

    delta = after - before
    node_writes = sum(
        v for (verb, res), v in delta.items() if res == "nodes" and verb in WRITE_VERBS
    )
    node_reads = sum(
        v for (verb, res), v in delta.items() if res == "nodes" and verb not in WRITE_VERBS
    )
    event_writes = sum(
        v for (verb, res), v in delta.items() if res == "events" and verb in WRITE_VERBS
    )
    cloud_calls = sum(c["count"] for c in calls.values())
    first = min(done_at.values())
    return {
        "benchmark": "node_init",
        "nodes": nodes,
        "cloud_latency_ms": latency * 1000,
        "concurrent_node_syncs": workers,
        "kube_api_qps": qps,
        "kube_api_burst": burst,
        "nodes_per_second": round(nodes / max(finished - first, 1e-9), 1),
        "nodes_per_second_from_start": round(nodes / (finished - started), 1),
        "seconds_total": round(finished - started, 2),
        "api_writes_per_node": round(node_writes / nodes, 3),
        "api_reads_per_node": round(node_reads / nodes, 3),
        "event_writes_per_node": round(event_writes / nodes, 3),
        "cloud_calls_per_node": round(cloud_calls / nodes, 3),
        "cloud_calls": {m: c["count"] for m, c in calls.items()},
        "node_requests_by_verb": {
            verb: v for (verb, res), v in sorted(delta.items()) if res == "nodes" and v
        },
        "daemon_rss_mib": rss,
    }


def markdown_rows(results: list[dict[str, Any]], versions: str) -> str:
    head = (
        f"\n### Node initialisation — {datetime.date.today()} — {platform.machine()}, "
        f"{versions}, Python {platform.python_version()}\n\n"
        "| nodes | cloud latency | --concurrent-node-syncs | QPS/burst | nodes/s (first→last) "
        "| nodes/s (from start) | API writes/node | API reads/node | Event writes/node "
        "| cloud calls/node | daemon RSS |\n"
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    )
    rows = "".join(
        f"| {r['nodes']} | {r['cloud_latency_ms']:g} ms | {r['concurrent_node_syncs']} "
        f"| {r['kube_api_qps']:g}/{r['kube_api_burst']} | {r['nodes_per_second']} "
        f"| {r['nodes_per_second_from_start']} | {r['api_writes_per_node']} "
        f"| {r['api_reads_per_node']} | {r['event_writes_per_node']} "
        f"| {r['cloud_calls_per_node']} | {r['daemon_rss_mib']} MiB |\n"
        for r in results
    )
    return head + rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
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
                plane = ControlPlane(binaries=binaries).start()
                try:
                    result = asyncio.run(
                        scenario(
                            plane,
                            Path(tmp),
                            nodes=args.nodes,
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
