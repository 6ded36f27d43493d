"""Idle steady state: a daemon over 5,000 initialised Nodes and 2,000 provisioned LB Services.

    .venv/bin/python benchmarks/idle.py [--nodes 5000] [--services 2000] [--duration 300]
        [--phases quiet heartbeats] [--heartbeat-period 300] [--workers 16]
        [--kube-api-qps 1000 --kube-api-burst 2000] [--no-leader-elect]
        [--profile docs/img/idle-profile.svg] [--plot docs/img/idle.png]
        [--markdown docs/benchmarks.md]

On a fresh control plane the Nodes are registered (as a kubelet with
``--cloud-provider=external`` does) and initialised, and the Services
provisioned, by a first daemon (``_bench.populate``). Then the measured daemon
starts over the same simulated cloud (node, lifecycle and service controllers;
leader election on, as deployed) and, once it has made its first complete sync
and its own API writes have stopped for 15 s (the start-up events drained), each
phase runs for ``--duration`` seconds:

* ``quiet``: nothing changes in the cluster;
* ``heartbeats``: the driver plays the kubelets' node-status reports: every
  Node's Ready condition gets a new ``lastHeartbeatTime`` once per
  ``--heartbeat-period`` (the kubelet's ``nodeStatusReportFrequency``, 5 min,
  with node leases on), spread evenly: 5,000 / 300 s = 16.7 status patches/s,
  each a watch event the daemon's informer decodes and its handlers see.

Per phase: the daemon's CPU seconds (``/proc/<pid>/stat`` utime + stime) and CPU
% of one core, and the part of it spent in the simulated cloud's database thread
(``simcloud-db``, from ``/proc/<pid>/task``: SQLite work a real provider would do
in its cloud, not in the CCM); RSS at the phase's start and end (``VmRSS``) and the peak since
the process started (``VmHWM``); API requests per minute made by the daemon
(its own ``rest_client_requests_total``, from its secure port) and the
apiserver's ``apiserver_request_total`` deltas per minute (every client: the
heartbeats, this driver's scrapes, the apiserver's own lease and endpoint
loops); cloud calls per minute (the simulated cloud's counters). The node
controller's address refresh (``--node-status-update-frequency``, 5 min) asks the
cloud about every node, so a 5-minute window sees one pass of 5,000 calls.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from _bench import (
    SecurePort,
    append_markdown,
    by_verb_resource,
    cpu_seconds,
    emit,
    free_port,
    header,
    header_line,
    load_average,
    markdown_table,
    measured_daemon,
    memory_mib,
    populate,
    request_counts,
    thread_cpu_seconds,
    wait_first_sync,
    wait_quiet,
)

from kube_ccm.runtime.client import KubeClient
from kube_ccm.testing.binaries import ensure_binaries
from kube_ccm.testing.controlplane import ControlPlane, ControlPlaneOptions
from kube_ccm.testing.daemon import DaemonProcess

PY_SPY = Path(__file__).resolve().parent.parent / ".venv" / "bin" / "py-spy"


async def heartbeats(client: KubeClient, names: list[str], period: float) -> int:
    """Patch each node's Ready condition once per ``period``, evenly spread; until cancelled."""
    interval = period / len(names)
    sent = 0
    next_at = time.monotonic()
    index = 0
    try:
        while True:
            now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            name = names[index % len(names)]
            await client.patch(
                f"/api/v1/nodes/{name}/status",
                {"status": {"conditions": [{"type": "Ready", "lastHeartbeatTime": now}]}},
            )
            sent += 1
            index += 1
            next_at += interval
            delay = next_at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
    except asyncio.CancelledError:
        return sent


async def phase(
    name: str,
    client: KubeClient,
    daemon: DaemonProcess,
    port: SecurePort,
    *,
    duration: float,
    nodes: list[str],
    heartbeat_period: float,
    profile: Path | None,
) -> dict[str, Any]:
    load = load_average()
    pid = daemon.pid
    daemon.cloud.reset_calls()
    api_before = await request_counts(client)
    own_before = await port.client_requests()
    cpu_before = cpu_seconds(pid)
    cloud_cpu_before = thread_cpu_seconds(pid, "simcloud-db")
    memory_before = memory_mib(pid)
    started = time.monotonic()
    beating = (
        asyncio.create_task(heartbeats(client, nodes, heartbeat_period))
        if name == "heartbeats"
        else None
    )
    spy = None
    if profile is not None:  # nonblocking: py-spy never pauses the daemon
        spy = await asyncio.create_subprocess_exec(
            *(str(PY_SPY), "record", "--pid", str(pid), "--duration", f"{duration:.0f}"),
            *("--rate", "20", "--nonblocking", "-o", str(profile)),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.STDOUT,
        )
    samples: list[dict[str, float]] = []
    last_cpu, last_at = cpu_before, started
    while (elapsed := time.monotonic() - started) < duration:
        await asyncio.sleep(min(10.0, duration - elapsed))
        now_cpu, now_at = cpu_seconds(pid), time.monotonic()
        samples.append(
            {
                "t": round(now_at - started, 1),
                "cpu_percent": round(100 * (now_cpu - last_cpu) / (now_at - last_at), 2),
                "rss_mib": memory_mib(pid).get("VmRSS", 0.0),
            }
        )
        last_cpu, last_at = now_cpu, now_at
    sent = 0
    if beating is not None:
        beating.cancel()
        sent = await beating
    cpu_after = cpu_seconds(pid)
    cloud_cpu = thread_cpu_seconds(pid, "simcloud-db") - cloud_cpu_before
    wall = time.monotonic() - started
    memory_after = memory_mib(pid)
    own_after = await port.client_requests()
    api_after = await request_counts(client)
    calls = daemon.cloud.calls()
    if spy is not None:
        await asyncio.wait_for(spy.wait(), 120)
    minutes = wall / 60
    own: Counter[str] = own_after - own_before
    api = api_after - api_before
    cpu = cpu_after - cpu_before
    return {
        "benchmark": "idle",
        "phase": name,
        "load_average_1m": load,
        "seconds": round(wall, 1),
        "heartbeat_patches": sent,
        "cpu_seconds": round(cpu, 2),
        "cpu_percent_of_core": round(100 * cpu / wall, 2),
        "simulated_cloud_cpu_seconds": round(cloud_cpu, 2),
        "cpu_percent_of_core_without_simulated_cloud": round(100 * (cpu - cloud_cpu) / wall, 2),
        "rss_mib_start": memory_before.get("VmRSS"),
        "rss_mib_end": memory_after.get("VmRSS"),
        "peak_rss_mib_since_start": memory_after.get("VmHWM"),
        "daemon_requests_per_minute": round(sum(own.values()) / minutes, 1),
        "daemon_requests_by_method": dict(sorted(own.items())),
        "apiserver_requests_per_minute": round(sum(api.values()) / minutes, 1),
        "apiserver_requests": by_verb_resource(api),
        "cloud_calls_per_minute": round(sum(c["count"] for c in calls.values()) / minutes, 1),
        "cloud_calls": {m: c["count"] for m, c in calls.items()},
        "samples": samples,
    }


async def run(
    plane: ControlPlane,
    workdir: Path,
    *,
    nodes: int,
    services: int,
    phases: list[str],
    duration: float,
    heartbeat_period: float,
    workers: int,
    qps: float,
    burst: int,
    leader_elect: bool,
    profile: Path | None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    client = KubeClient.from_kubeconfig(plane.kubeconfig)
    setup_started = time.monotonic()
    try:
        await populate(
            client,
            plane.kubeconfig,
            workdir,
            nodes=nodes,
            services=services,
            log=lambda line: print(f"# setup: {line}", flush=True),
        )
        setup_seconds = time.monotonic() - setup_started
        port = SecurePort(free_port())
        daemon = measured_daemon(
            plane.kubeconfig,
            workdir,
            port.port,
            workers=workers,
            qps=qps,
            burst=burst,
            leader_elect=leader_elect,
        )
        daemon.cloud.reset_calls()  # populate's calls are in the same state file
        started = time.monotonic()
        daemon.start()
        try:
            first = await wait_first_sync(daemon, port, started, nodes=nodes, services=services)
            settled = await wait_quiet(port, quiet=15.0, limit=900.0)
            start = {
                "setup_seconds": round(setup_seconds, 1),
                "readyz_seconds": round(first.readyz, 2),
                "first_sync_seconds": round(first.complete, 2),
                "quiet_after_seconds": round(time.monotonic() - started, 1),
                "settle_wait_seconds": round(settled, 1),
                "memory_mib_after_start": memory_mib(daemon.pid),
            }
            print(f"# measured daemon started: {start}", flush=True)
            names = [f"node-{i:05d}" for i in range(nodes)]
            results = []
            for name in phases:
                result = await phase(
                    name,
                    client,
                    daemon,
                    port,
                    duration=duration,
                    nodes=names,
                    heartbeat_period=heartbeat_period,
                    profile=(
                        profile.with_name(f"{profile.stem}-{name}{profile.suffix}")
                        if profile
                        else None
                    ),
                )
                result.update(
                    nodes=nodes,
                    services=services,
                    leader_elect=leader_elect,
                    workers=workers,
                    heartbeat_period=heartbeat_period if name == "heartbeats" else None,
                )
                emit(result)
                results.append(result)
        finally:
            daemon.stop()
    finally:
        await client.aclose()
    return start, results


COLUMNS = (
    "phase",
    "load avg (1 m)",
    "s",
    "CPU s",
    "CPU % of a core",
    "of which the simulated cloud's thread",
    "CPU % without it",
    "RSS start → end",
    "peak RSS (VmHWM)",
    "daemon API requests/min",
    "apiserver requests/min (all clients)",
    "cloud calls/min",
)


def row(r: dict[str, Any]) -> list[Any]:
    return [
        r["phase"]
        + (f" (1 per node per {r['heartbeat_period']:g} s)" if r["heartbeat_period"] else ""),
        r["load_average_1m"],
        r["seconds"],
        r["cpu_seconds"],
        r["cpu_percent_of_core"],
        f"{r.get('simulated_cloud_cpu_seconds', '—')} s",
        r.get("cpu_percent_of_core_without_simulated_cloud", "—"),
        f"{r['rss_mib_start']} → {r['rss_mib_end']} MiB",
        f"{r['peak_rss_mib_since_start']} MiB",
        r["daemon_requests_per_minute"],
        r["apiserver_requests_per_minute"],
        r["cloud_calls_per_minute"],
    ]


def plot(results: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib  # noqa: PLC0415  (the bench extra; only needed for --plot)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, (cpu_ax, rss_ax) = plt.subplots(2, 1, figsize=(8, 6), dpi=110, sharex=True)
    offset = 0.0
    for r in results:
        t = [offset + s["t"] for s in r["samples"]]
        cpu_ax.plot(t, [s["cpu_percent"] for s in r["samples"]], marker=".", label=r["phase"])
        rss_ax.plot(t, [s["rss_mib"] for s in r["samples"]], marker=".", label=r["phase"])
        offset += r["seconds"]
    cpu_ax.axhline(1.0, color="red", linestyle="--", linewidth=1, label="target 1 %")
    cpu_ax.set_ylabel("daemon CPU, % of a core (10 s)")
    rss_ax.axhline(150.0, color="red", linestyle="--", linewidth=1, label="target 150 MiB")
    rss_ax.set_ylabel("daemon RSS, MiB")
    rss_ax.set_xlabel("seconds into the idle phases")
    for ax in (cpu_ax, rss_ax):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    cpu_ax.set_title(title, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    print(f"plot written to {path}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--services", type=int, default=2000)
    parser.add_argument("--duration", type=float, default=300.0, help="seconds per phase")
    parser.add_argument(
        "--phases", nargs="+", choices=("quiet", "heartbeats"), default=["quiet", "heartbeats"]
    )
    parser.add_argument("--heartbeat-period", type=float, default=300.0)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--kube-api-qps", type=float, default=1000.0)
    parser.add_argument("--kube-api-burst", type=int, default=2000)
    parser.add_argument("--no-leader-elect", action="store_true")
    parser.add_argument("--profile", type=Path, default=None, help="py-spy SVG per phase")
    parser.add_argument("--plot", type=Path, default=None)
    parser.add_argument("--markdown", type=Path, default=None)
    args = parser.parse_args()
    if args.nodes < 1 or args.duration <= 0 or args.heartbeat_period <= 0:
        parser.error("--nodes, --duration and --heartbeat-period must be positive")
    binaries = ensure_binaries()
    info = header(binaries)
    load = load_average()
    with tempfile.TemporaryDirectory(prefix="kube-ccm-bench-") as tmp:
        plane = ControlPlane(
            ControlPlaneOptions(service_cluster_ip_range="10.96.0.0/16"), binaries=binaries
        ).start()
        try:
            start, results = asyncio.run(
                run(
                    plane,
                    Path(tmp),
                    nodes=args.nodes,
                    services=args.services,
                    phases=args.phases,
                    duration=args.duration,
                    heartbeat_period=args.heartbeat_period,
                    workers=args.workers,
                    qps=args.kube_api_qps,
                    burst=args.kube_api_burst,
                    leader_elect=not args.no_leader_elect,
                    profile=args.profile,
                )
            )
        finally:
            plane.stop()
    emit({"benchmark": "idle-start", "load_average_1m_before_setup": load, **start})
    title = (
        f"Idle — {args.nodes} nodes, {args.services} LB Services, "
        f"leader election {'off' if args.no_leader_elect else 'on'} — {header_line(info)}"
    )
    append_markdown(args.markdown, markdown_table(title, COLUMNS, (row(r) for r in results)))
    if args.plot:
        plot(results, args.plot, title.replace(" — ", "\n", 1))


if __name__ == "__main__":
    main()
