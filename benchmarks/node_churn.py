"""Node churn under many LoadBalancer Services: cloud calls and convergence per change.

    .venv/bin/python benchmarks/node_churn.py [--services 500] [--base-nodes 10]
        [--waves 1 10 50] [--latency 0 0.05] [--workers 16]
        [--kube-api-qps 1000 --kube-api-burst 2000] [--markdown docs/benchmarks.md]

For each cloud latency, on a fresh control plane: ``--base-nodes`` Nodes and
``--services`` LoadBalancer Services are brought to a converged state by
``kube-ccm run --controllers=cloud-node,cloud-node-lifecycle,service`` (the
simulated cloud), then nodes are added and removed in waves: for each wave size
K, K uninitialised Nodes are registered at once (the cloud-node controller
initialises them, which sets their providerID), and when every load balancer
has them, the same K Nodes are deleted at once. Per wave:

* the cloud calls the daemon made (``UpdateLoadBalancer`` should be one per
  Service per node-set change; ``EnsureLoadBalancer`` none) and the node-set
  passes they imply (UpdateLoadBalancer calls / Services);
* seconds from the driver's first write of the wave until every load balancer's
  backend set is the cluster's node set;
* API requests: the daemon's own (its ``rest_client_requests_total`` scraped from
  its secure port), and the apiserver's ``apiserver_request_total`` deltas for
  nodes, services and events (these include the driver's K creations or deletions).

Prints one JSON object per (latency, wave, direction); ``--markdown`` appends a table.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from _bench import (
    CLOUD_CONFIG,
    NodeWatch,
    SecurePort,
    append_markdown,
    by_verb_resource,
    count_ingress,
    create_services,
    daemon_args,
    emit,
    free_port,
    gather_limited,
    header,
    header_line,
    load_average,
    markdown_table,
    register_nodes,
    request_counts,
    rss_mib,
    wait_until,
    writes,
)

from kube_ccm.runtime.client import KubeClient
from kube_ccm.testing.binaries import ensure_binaries
from kube_ccm.testing.controlplane import ControlPlane, ControlPlaneOptions
from kube_ccm.testing.daemon import DaemonProcess


async def run(
    plane: ControlPlane,
    workdir: Path,
    *,
    services: int,
    base_nodes: int,
    waves: list[int],
    latency: float,
    workers: int,
    qps: float,
    burst: int,
) -> list[dict[str, Any]]:
    client = KubeClient.from_kubeconfig(plane.kubeconfig)
    port = SecurePort(free_port())
    daemon = DaemonProcess(
        kubeconfig=plane.kubeconfig,
        workdir=workdir,
        cloud_config={**CLOUD_CONFIG, "latency": f"{latency * 1000:g}ms"},
        args=[
            *daemon_args(
                controllers="cloud-node,cloud-node-lifecycle,service",
                node_workers=workers,
                service_workers=workers,
                qps=qps,
                burst=burst,
            ),
            *SecurePort.args(port.port),
        ],
    )
    watch = await NodeWatch(client).start()
    results: list[dict[str, Any]] = []
    try:
        current = {f"base-{i:04d}" for i in range(base_nodes)}
        await register_nodes(client, sorted(current))
        await create_services(client, [f"lb-{i:04d}" for i in range(services)])
        daemon.start()

        async def provisioned() -> bool:
            return watch.initialised() == base_nodes and await count_ingress(client) == services

        await wait_until(provisioned, 1800, 1.0, "the initial state", daemon)

        def lbs_match() -> bool:
            lbs = daemon.cloud.load_balancers()
            return len(lbs) == services and all(set(lb.nodes) == current for lb in lbs)

        async def converged() -> bool:
            return lbs_match()

        await wait_until(converged, 600, 0.5, "the initial backends", daemon)
        await asyncio.sleep(3.0)
        for wave, size in enumerate(waves):
            names = [f"churn-{wave}-{i:04d}" for i in range(size)]
            for direction in ("add", "remove"):
                load = load_average()
                daemon.cloud.reset_calls()
                before = await request_counts(client)
                daemon_before = await port.client_requests()
                started = time.monotonic()
                if direction == "add":
                    current |= set(names)
                    await register_nodes(client, names)
                else:
                    current -= set(names)
                    await gather_limited(client.delete(f"/api/v1/nodes/{n}") for n in names)
                done = await wait_until(
                    converged, 1800, 0.1, f"backends after wave {wave} ({direction})", daemon
                )
                await asyncio.sleep(3.0)  # passes still queued would show in the counts
                calls = daemon.cloud.calls()
                after = await request_counts(client)
                daemon_after = await port.client_requests()
                delta = after - before
                daemon_delta: Counter[str] = daemon_after - daemon_before
                update = calls.get("UpdateLoadBalancer", {}).get("count", 0)
                result = {
                    "benchmark": "node_churn",
                    "load_average_1m": load,
                    "services": services,
                    "cloud_latency_ms": latency * 1000,
                    "concurrent_syncs": workers,
                    "kube_api_qps": qps,
                    "kube_api_burst": burst,
                    "nodes_before": len(current) + (-size if direction == "add" else size),
                    "wave": size,
                    "direction": direction,
                    "seconds_to_converge": round(done - started, 2),
                    "update_load_balancer_calls": update,
                    "ensure_load_balancer_calls": calls.get("EnsureLoadBalancer", {}).get(
                        "count", 0
                    ),
                    "update_calls_per_service": round(update / services, 2),
                    "update_calls_per_node_changed": round(update / size, 1),
                    "cloud_calls": {m: c["count"] for m, c in calls.items()},
                    "daemon_requests_by_method": dict(sorted(daemon_delta.items())),
                    "daemon_writes": sum(
                        v for m, v in daemon_delta.items() if m not in ("GET", "HEAD")
                    ),
                    "node_writes_apiserver": writes(delta, "nodes"),
                    "service_writes_apiserver": writes(delta, "services"),
                    "event_writes_apiserver": writes(delta, "events"),
                    "requests": by_verb_resource(delta),
                    "daemon_rss_mib": rss_mib(daemon.pid),
                }
                emit(result)
                results.append(result)
    finally:
        watch.stop()
        daemon.stop()
        await client.aclose()
    return results


COLUMNS = (
    "cloud latency",
    "load avg (1 m)",
    "nodes before",
    "change",
    "s to converge",
    "UpdateLoadBalancer calls",
    "per Service",
    "EnsureLoadBalancer calls",
    "daemon API writes",
    "apiserver writes: nodes / services / events",
    "daemon RSS",
)


def row(r: dict[str, Any]) -> list[Any]:
    sign = "+" if r["direction"] == "add" else "-"
    return [
        f"{r['cloud_latency_ms']:g} ms",
        r["load_average_1m"],
        r["nodes_before"],
        f"{sign}{r['wave']} nodes",
        r["seconds_to_converge"],
        r["update_load_balancer_calls"],
        r["update_calls_per_service"],
        r["ensure_load_balancer_calls"],
        r["daemon_writes"],
        f"{r['node_writes_apiserver']} / {r['service_writes_apiserver']} / "
        f"{r['event_writes_apiserver']}",
        f"{r['daemon_rss_mib']} MiB",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--services", type=int, default=500)
    parser.add_argument("--base-nodes", type=int, default=10)
    parser.add_argument("--waves", type=int, nargs="+", default=[1, 10, 50])
    parser.add_argument("--latency", type=float, nargs="+", default=[0.0, 0.05])
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--kube-api-qps", type=float, default=1000.0)
    parser.add_argument("--kube-api-burst", type=int, default=2000)
    parser.add_argument("--markdown", type=Path, default=None)
    args = parser.parse_args()
    if any(w < 1 for w in args.waves):
        parser.error("--waves: every wave size must be at least 1")
    binaries = ensure_binaries()
    info = header(binaries)
    results: list[dict[str, Any]] = []
    for latency in args.latency:
        with tempfile.TemporaryDirectory(prefix="kube-ccm-bench-") as tmp:
            plane = ControlPlane(
                ControlPlaneOptions(service_cluster_ip_range="10.96.0.0/16"), binaries=binaries
            ).start()
            try:
                results += asyncio.run(
                    run(
                        plane,
                        Path(tmp),
                        services=args.services,
                        base_nodes=args.base_nodes,
                        waves=args.waves,
                        latency=latency,
                        workers=args.workers,
                        qps=args.kube_api_qps,
                        burst=args.kube_api_burst,
                    )
                )
            finally:
                plane.stop()
    title = (
        f"Node churn — {args.services} LB Services, {args.workers} workers, "
        f"QPS {args.kube_api_qps:g}/{args.kube_api_burst} — {header_line(info)}"
    )
    append_markdown(args.markdown, markdown_table(title, COLUMNS, (row(r) for r in results)))


if __name__ == "__main__":
    main()
