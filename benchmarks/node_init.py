"""Node initialisation throughput and cost on the real apiserver, against a raw-write baseline.

    .venv/bin/python benchmarks/node_init.py [--nodes 100 1000 5000] [--latency 0 0.05]
        [--workers 1 16] [--kube-api-qps 1000 --kube-api-burst 2000]
        [--markdown docs/benchmarks.md] [--plot docs/img/node_init.png]

For each (nodes, latency, workers) cell, on a fresh control plane:

1. N Nodes are registered as a kubelet with ``--cloud-provider=external`` does
   (the uninitialised taint, a Hostname address, Ready=True), then
   ``kube-ccm run --controllers=cloud-node,cloud-node-lifecycle`` with the
   simulated cloud (``unknownNodes: create``, the given per-call latency) is
   started as a subprocess. Measured: nodes initialised per second from the
   first to the last taint removal seen by a watch, and from daemon start;
   API writes and reads per node (deltas of the apiserver's
   ``apiserver_request_total`` for ``resource=nodes``, and ``events``); cloud
   calls per node (the simulated cloud's counters); daemon RSS.
2. The daemon is stopped, N more Nodes are registered, and the **raw-write
   baseline** runs on them: the same two writes per node (the initialisation
   strategic-merge patch with its resourceVersion precondition, then the
   addresses patch on ``nodes/status``) from ``workers`` plain asyncio tasks
   through the same client with the same QPS/burst bucket; no informer, no
   cloud, no decoding. ``ratio`` is the daemon's nodes/s over the baseline's.
   Then the same on N more Nodes **with each node's ``Synced`` Event** created
   as the daemon's recorder does (its own client, not awaited by the worker):
   the daemon makes that write too, so this ratio is what the controller
   itself costs. The daemon's CPU time per node (start-up included) is
   reported beside them.

Prints one JSON object per cell; ``--markdown`` appends a table, ``--plot`` draws
nodes/s against node count per (latency, workers) with the baselines.
Nothing here is asserted: the numbers go into docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _bench import (
    NodeWatch,
    append_markdown,
    by_verb_resource,
    cpu_seconds,
    emit,
    header,
    header_line,
    load_average,
    markdown_table,
    raw_node_writes,
    reads,
    register_nodes,
    request_counts,
    rss_mib,
    wait_until,
    writes,
)

from kube_ccm.runtime.client import KubeClient
from kube_ccm.testing.binaries import ensure_binaries
from kube_ccm.testing.controlplane import ControlPlane
from kube_ccm.testing.daemon import DaemonProcess

PY_SPY = Path(__file__).resolve().parent.parent / ".venv" / "bin" / "py-spy"


async def scenario(
    plane: ControlPlane,
    workdir: Path,
    *,
    nodes: int,
    latency: float,
    workers: int,
    qps: float,
    burst: int,
    profile: Path | None = None,
) -> dict[str, Any]:
    load = load_average()
    client = KubeClient.from_kubeconfig(plane.kubeconfig)
    watch: NodeWatch | None = None
    try:
        await register_nodes(client, [f"bench-{i:05d}" for i in range(nodes)])
        watch = await NodeWatch(client).start()
        before = await request_counts(client)
        daemon = DaemonProcess(
            kubeconfig=plane.kubeconfig,
            workdir=workdir,
            cloud_config={"unknownNodes": "create", "latency": f"{latency * 1000:g}ms"},
            args=[
                "--leader-elect=false",
                "--controllers=cloud-node,cloud-node-lifecycle",
                f"--concurrent-node-syncs={workers}",
                # The periodic address refresh (5 min by default) would ask the cloud about
                # nodes already initialised in the longest cells: not initialisation calls.
                "--node-status-update-frequency=1h",
                f"--kube-api-qps={qps:g}",
                f"--kube-api-burst={burst}",
            ],
        )
        started = time.monotonic()
        daemon.start()
        spy = await start_py_spy(daemon.pid, profile) if profile else None
        try:
            observed = watch

            async def all_done() -> bool:
                return observed.initialised() == nodes

            limit = max(600.0, nodes * (latency + 0.05) * 4)
            finished = await wait_until(all_done, limit, 0.05, "every node initialised", daemon)
            first = min(watch.done_at.values())
            await asyncio.sleep(1.0)  # let the trailing status patches and events land
            rss = rss_mib(daemon.pid)
            cpu = cpu_seconds(daemon.pid)
            after = await request_counts(client)
            calls = daemon.cloud.calls()
        finally:
            if spy is not None:
                spy.send_signal(signal.SIGINT)  # py-spy writes its flame graph and exits
                await asyncio.wait_for(spy.wait(), 60)
            daemon.stop()

        # The baseline on as many fresh nodes, same control plane, the driver's watch still on.
        raw_versions = await register_nodes(client, [f"raw-{i:05d}" for i in range(nodes)])
        await asyncio.sleep(1.0)
        raw_seconds = await raw_node_writes(
            plane.kubeconfig, raw_versions, workers=workers, qps=qps, burst=burst
        )
        # And with each node's Synced Event, which the daemon writes too.
        event_versions = await register_nodes(client, [f"rawe-{i:05d}" for i in range(nodes)])
        await asyncio.sleep(1.0)
        event_seconds = await raw_node_writes(
            plane.kubeconfig, event_versions, workers=workers, qps=qps, burst=burst, events=True
        )
    finally:
        if watch is not None:
            watch.stop()
        await client.aclose()

    delta = after - before
    cloud_calls = sum(c["count"] for c in calls.values())
    nodes_per_second = nodes / max(finished - first, 1e-9)
    baseline = nodes / raw_seconds
    baseline_events = nodes / event_seconds
    return {
        "benchmark": "node_init",
        "load_average_1m": load,
        "nodes": nodes,
        "cloud_latency_ms": latency * 1000,
        "concurrent_node_syncs": workers,
        "kube_api_qps": qps,
        "kube_api_burst": burst,
        "nodes_per_second": round(nodes_per_second, 1),
        "nodes_per_second_from_start": round(nodes / (finished - started), 1),
        "seconds_total": round(finished - started, 2),
        "baseline_nodes_per_second": round(baseline, 1),
        "ratio_to_baseline": round(nodes_per_second / baseline, 2),
        "baseline_with_events_nodes_per_second": round(baseline_events, 1),
        "ratio_to_baseline_with_events": round(nodes_per_second / baseline_events, 2),
        "daemon_cpu_ms_per_node": round(1000 * cpu / nodes, 2),
        "api_writes_per_node": round(writes(delta, "nodes") / nodes, 3),
        "api_reads_per_node": round(reads(delta, "nodes") / nodes, 3),
        "event_writes_per_node": round(writes(delta, "events") / nodes, 3),
        "cloud_calls_per_node": round(cloud_calls / nodes, 3),
        "cloud_calls": {m: c["count"] for m, c in calls.items()},
        "requests": by_verb_resource(delta),
        "daemon_rss_mib": rss,
    }


async def start_py_spy(pid: int, output: Path) -> asyncio.subprocess.Process:
    """py-spy sampling the daemon (nonblocking: never pauses it) until SIGINT."""
    await asyncio.sleep(0.3)  # let the interpreter come up before py-spy looks for it
    output.parent.mkdir(parents=True, exist_ok=True)
    return await asyncio.create_subprocess_exec(
        *(str(PY_SPY), "record", "--pid", str(pid), "--rate", "50", "--nonblocking"),
        *("--idle", "-o", str(output)),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.STDOUT,
    )


COLUMNS = (
    "nodes",
    "cloud latency",
    "--concurrent-node-syncs",
    "QPS/burst",
    "load avg (1 m)",
    "nodes/s (first→last)",
    "nodes/s (from start)",
    "raw-write baseline nodes/s",
    "ratio",
    "baseline + Synced Event nodes/s",
    "ratio",
    "daemon CPU/node",
    "API writes/node",
    "API reads/node",
    "Event writes/node",
    "cloud calls/node",
    "daemon RSS",
)


def row(r: dict[str, Any]) -> list[Any]:
    return [
        r["nodes"],
        f"{r['cloud_latency_ms']:g} ms",
        r["concurrent_node_syncs"],
        f"{r['kube_api_qps']:g}/{r['kube_api_burst']}",
        r["load_average_1m"],
        r["nodes_per_second"],
        r["nodes_per_second_from_start"],
        r["baseline_nodes_per_second"],
        f"{r['ratio_to_baseline']:.2f}",
        r.get("baseline_with_events_nodes_per_second", "—"),
        f"{r['ratio_to_baseline_with_events']:.2f}"
        if "ratio_to_baseline_with_events" in r
        else "—",
        f"{r['daemon_cpu_ms_per_node']} ms" if "daemon_cpu_ms_per_node" in r else "—",
        r["api_writes_per_node"],
        r["api_reads_per_node"],
        r["event_writes_per_node"],
        r["cloud_calls_per_node"],
        f"{r['daemon_rss_mib']} MiB",
    ]


def plot(results: list[dict[str, Any]], path: Path, title: str) -> None:
    """nodes/s against node count, one line per (latency, workers), baselines dashed
    (the two patches) and dotted (with the Synced Event)."""
    import matplotlib  # noqa: PLC0415  (the bench extra; only needed for --plot)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, ax = plt.subplots(figsize=(8, 5), dpi=110)
    cells = sorted({(r["cloud_latency_ms"], r["concurrent_node_syncs"]) for r in results})
    for latency, workers in cells:
        points = sorted(
            (r["nodes"], r["nodes_per_second"])
            for r in results
            if (r["cloud_latency_ms"], r["concurrent_node_syncs"]) == (latency, workers)
        )
        ax.plot(*zip(*points, strict=True), marker="o", label=f"{latency:g} ms, {workers} w")
    baselines = (
        ("baseline_nodes_per_second", "--", "raw-write baseline"),
        ("baseline_with_events_nodes_per_second", ":", "same + Synced Event"),
    )
    for key, style, name in baselines:
        for workers in sorted({r["concurrent_node_syncs"] for r in results}):
            by_size: dict[int, list[float]] = {}
            for r in results:
                if r["concurrent_node_syncs"] == workers and key in r:
                    by_size.setdefault(r["nodes"], []).append(r[key])
            if not by_size:
                continue
            points = sorted((n, sum(v) / len(v)) for n, v in by_size.items())
            ax.plot(
                *zip(*points, strict=True),
                linestyle=style,
                color="grey" if workers == 1 else "black",
                label=f"{name}, {workers} w",
            )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("nodes")
    ax.set_ylabel("nodes initialised per second (first→last)")
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    print(f"plot written to {path}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[100, 1000, 5000])
    parser.add_argument("--latency", type=float, nargs="+", default=[0.0, 0.05])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--kube-api-qps", type=float, default=1000.0)
    parser.add_argument("--kube-api-burst", type=int, default=2000)
    parser.add_argument("--markdown", type=Path, default=None)
    parser.add_argument("--plot", type=Path, default=None, help="PNG path for the plot")
    parser.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="directory for a py-spy flame graph (SVG, idle time included) of the daemon per cell",
    )
    args = parser.parse_args()
    binaries = ensure_binaries()
    info = header(binaries)
    results = []
    for nodes in args.nodes:
        for latency in args.latency:
            for workers in args.workers:
                with tempfile.TemporaryDirectory(prefix="kube-ccm-bench-") as tmp:
                    plane = ControlPlane(binaries=binaries).start()
                    try:
                        result = asyncio.run(
                            scenario(
                                plane,
                                Path(tmp),
                                nodes=nodes,
                                latency=latency,
                                workers=workers,
                                qps=args.kube_api_qps,
                                burst=args.kube_api_burst,
                                profile=(
                                    args.profile
                                    / f"node_init-{nodes}-{latency * 1000:g}ms-{workers}w.svg"
                                    if args.profile
                                    else None
                                ),
                            )
                        )
                    finally:
                        plane.stop()
                emit({**result, "header": info})
                results.append(result)
    title = f"Node initialisation — {header_line(info)}"
    append_markdown(args.markdown, markdown_table(title, COLUMNS, (row(r) for r in results)))
    if args.plot:
        plot(results, args.plot, title.replace(" — ", "\n", 1))
    if not results:
        print("nothing to run: give at least one --nodes, --latency and --workers", file=sys.stderr)


if __name__ == "__main__":
    main()
