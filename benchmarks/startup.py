"""Daemon start-up over a large cluster: process start to /readyz and to the first complete sync.

    .venv/bin/python benchmarks/startup.py [--nodes 5000] [--services 2000 0] [--runs 3]
        [--workers 16] [--kube-api-qps 1000 --kube-api-burst 2000] [--markdown docs/benchmarks.md]

For each ``--services`` value, on a fresh control plane, ``_bench.populate``
registers and initialises the Nodes and provisions the LoadBalancer Services
with a first daemon. Then, ``--runs`` times, ``kube-ccm run`` (node, lifecycle
and service controllers, leader election on, ``--secure-port`` on a free
loopback port with its self-signed certificate) is started over the same
simulated cloud and timed from process start to:

* ``/readyz`` answering 200 (the informers have listed and synced every Node
  and Service: ``Daemon._mark_synced``); the lease is acquired before that;
* the first complete sync: every load balancer ensured once
  (``EnsureLoadBalancer`` = Services, what upstream does after a restart too) and
  the node controller's first address pass done (``InstanceMetadata`` >= Nodes);
* its API writes (the start-up Events) having stopped for 5 s.

RSS (``VmRSS``) is read at each point, and the peak (``VmHWM``) at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from _bench import (
    SecurePort,
    append_markdown,
    emit,
    free_port,
    header,
    header_line,
    load_average,
    markdown_table,
    measured_daemon,
    memory_mib,
    populate,
    wait_first_sync,
    wait_quiet,
)

from kube_ccm.runtime.client import KubeClient
from kube_ccm.testing.binaries import ensure_binaries
from kube_ccm.testing.controlplane import ControlPlane, ControlPlaneOptions


async def run(
    plane: ControlPlane,
    workdir: Path,
    *,
    nodes: int,
    services: int,
    runs: int,
    workers: int,
    qps: float,
    burst: int,
) -> dict[str, Any]:
    client = KubeClient.from_kubeconfig(plane.kubeconfig)
    try:
        await populate(
            client,
            plane.kubeconfig,
            workdir,
            nodes=nodes,
            services=services,
            log=lambda line: print(f"# setup: {line}", flush=True),
        )
    finally:
        await client.aclose()
    samples = []
    for attempt in range(runs):
        load = load_average()
        port = SecurePort(free_port())
        daemon = measured_daemon(
            plane.kubeconfig,
            workdir,
            port.port,
            workers=workers,
            qps=qps,
            burst=burst,
            leader_elect=True,
        )
        daemon.cloud.reset_calls()
        started = time.monotonic()
        daemon.start()
        try:
            first = await wait_first_sync(daemon, port, started, nodes=nodes, services=services)
            await wait_quiet(port, quiet=5.0, limit=900.0)
            quiet = time.monotonic() - started - 5.0
            memory = memory_mib(daemon.pid)
        finally:
            daemon.stop()
        sample: dict[str, float] = {
            "run": attempt + 1,
            "load_average_1m": load,
            "readyz_seconds": round(first.readyz, 2),
            "services_ensured_seconds": round(first.services_ensured, 2),
            "nodes_checked_seconds": round(first.nodes_checked, 2),
            "first_sync_seconds": round(first.complete, 2),
            "writes_quiet_seconds": round(quiet, 2),
            "rss_mib_at_readyz": first.rss_mib["readyz"],
            "rss_mib_at_first_sync": max(first.rss_mib["services"], first.rss_mib["nodes"]),
            "rss_mib_after": memory.get("VmRSS", 0.0),
            "peak_rss_mib": memory.get("VmHWM", 0.0),
        }
        print(f"# run {attempt + 1}: {sample}", flush=True)
        samples.append(sample)

    def median(key: str) -> float:
        return round(statistics.median(float(s[key]) for s in samples), 2)

    return {
        "benchmark": "startup",
        "nodes": nodes,
        "services": services,
        "runs": runs,
        "workers": workers,
        "kube_api_qps": qps,
        "kube_api_burst": burst,
        "load_average_1m": [s["load_average_1m"] for s in samples],
        **{
            f"{key}_median": median(key)
            for key in (
                "readyz_seconds",
                "first_sync_seconds",
                "writes_quiet_seconds",
                "rss_mib_at_readyz",
                "rss_mib_at_first_sync",
                "peak_rss_mib",
            )
        },
        "samples": samples,
    }


COLUMNS = (
    "nodes",
    "LB Services",
    "runs",
    "load avg (1 m)",
    "start → /readyz (median)",
    "start → first complete sync",
    "start → writes quiet",
    "RSS at /readyz",
    "RSS at first sync",
    "peak RSS",
)


def row(r: dict[str, Any]) -> list[Any]:
    return [
        r["nodes"],
        r["services"],
        r["runs"],
        " / ".join(f"{v:g}" for v in r["load_average_1m"]),
        f"{r['readyz_seconds_median']} s",
        f"{r['first_sync_seconds_median']} s",
        f"{r['writes_quiet_seconds_median']} s",
        f"{r['rss_mib_at_readyz_median']} MiB",
        f"{r['rss_mib_at_first_sync_median']} MiB",
        f"{r['peak_rss_mib_median']} MiB",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--services", type=int, nargs="+", default=[2000, 0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--kube-api-qps", type=float, default=1000.0)
    parser.add_argument("--kube-api-burst", type=int, default=2000)
    parser.add_argument("--markdown", type=Path, default=None)
    args = parser.parse_args()
    if args.nodes < 1 or args.runs < 1 or any(s < 0 for s in args.services):
        parser.error("--nodes and --runs must be at least 1, --services at least 0")
    binaries = ensure_binaries()
    info = header(binaries)
    results = []
    for services in args.services:
        with tempfile.TemporaryDirectory(prefix="kube-ccm-bench-") as tmp:
            plane = ControlPlane(
                ControlPlaneOptions(service_cluster_ip_range="10.96.0.0/16"), binaries=binaries
            ).start()
            try:
                result = asyncio.run(
                    run(
                        plane,
                        Path(tmp),
                        nodes=args.nodes,
                        services=services,
                        runs=args.runs,
                        workers=args.workers,
                        qps=args.kube_api_qps,
                        burst=args.kube_api_burst,
                    )
                )
            finally:
                plane.stop()
        emit(result)
        results.append(result)
    title = (
        f"Daemon start-up — {args.workers} workers, QPS {args.kube_api_qps:g}/"
        f"{args.kube_api_burst} — {header_line(info)}"
    )
    append_markdown(args.markdown, markdown_table(title, COLUMNS, (row(r) for r in results)))


if __name__ == "__main__":
    main()
