"""kube-ccm beside the upstream Go cloud-controller-manager, on one control plane.

    .venv/bin/python benchmarks/side_by_side.py [--scenarios node_init lb]
        [--nodes 1000] [--services 500] [--latency 0 0.05] [--workers 1 16]
        [--lb-workers 16] [--kube-api-qps 1000 --kube-api-burst 2000] [--runs 1]
        [--impls py go] [--markdown docs/benchmarks.md]

One kube-apiserver + etcd (Service CIDR /16) for the whole run. For every cell
and run, kube-ccm (``kube-ccm run``, simulated cloud) and the Go CCM
(``benchmarks/goccm``: k8s.io/cloud-provider v0.36.3 with the in-memory ``gosim``
cloud, built and cached by ``benchmarks/goccm.py``) run one after the other, with
the same flags (``--leader-elect=false``, ``--controllers``, ``--concurrent-*-syncs``,
``--kube-api-qps/burst``, a secure port on 127.0.0.1 with ``/metrics`` open) and
the same per-call cloud latency; which one goes first alternates from cell to
cell and run to run.

* ``node_init``: the cluster's Nodes are deleted, N Nodes are registered as a
  kubelet with ``--cloud-provider=external`` does (the uninitialised taint), then
  the daemon runs ``cloud-node,cloud-node-lifecycle`` (with
  ``--node-status-update-frequency=1h``, as ``node_init.py``) until a watch in the
  driver has seen every node with a providerID and without the taint. Measured:
  nodes/s from the first to the last initialised node and from daemon start;
  daemon CPU per node (``/proc/<pid>/stat`` utime+stime, start-up included, and
  from the first initialised node to the last); kube-apiserver CPU per node;
  RSS (VmRSS ``--settle`` seconds after the last node, and VmHWM); the
  apiserver's write counts per node (nodes, events); cloud calls per node.
* ``lb``: the cluster's Nodes are replaced by 3 initialised ones (each with a
  providerID of the running side's scheme: kube-ccm leaves other providers'
  Nodes out of its load balancers), M LoadBalancer Services are created, then
  the daemon runs ``service`` until a watch in the driver has seen an ingress IP
  on every Service. Measured: Services/s from the first to the last ingress and
  from daemon start, daemon CPU per Service, kube-apiserver CPU per Service,
  RSS, writes per Service (services, events), cloud calls per Service, backend
  nodes per load balancer. The Services are then deleted (finalizers stripped:
  no daemon is running).

Prints one JSON object per daemon run and one per cell with the Py/Go ratios;
``--markdown`` appends a table (medians over the runs) with a Py/Go column.
Nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from _bench import (
    SERVICES_PATH,
    NodeWatch,
    SecurePort,
    append_markdown,
    by_verb_resource,
    count_ingress,
    cpu_seconds,
    create_services,
    daemon_args,
    emit,
    free_port,
    gather_limited,
    header,
    header_line,
    load_average,
    memory_mib,
    register_nodes,
    request_counts,
    writes,
)
from goccm import GoCCMProcess, ensure_goccm, goccm_args, gosim_state

from kube_ccm.api.objects import Service
from kube_ccm.runtime.client import ApiError, KubeClient
from kube_ccm.runtime.informer import Informer
from kube_ccm.sandbox.kubelets import node_manifest
from kube_ccm.testing.binaries import ensure_binaries
from kube_ccm.testing.controlplane import ControlPlane, ControlPlaneOptions
from kube_ccm.testing.daemon import DaemonProcess

IMPLS = ("py", "go")
IMPL_NAMES = {"py": "kube-ccm", "go": "Go CCM"}
SCENARIOS = ("node_init", "lb")
LB_POOL = "10.200.0.0/16"
SERVICE_CIDR = "10.96.0.0/16"  # 500+ Services do not fit the test bed's default /24
LB_NODES = 3


class Daemon(Protocol):
    @property
    def pid(self) -> int: ...

    def poll(self) -> int | None: ...

    def log(self) -> str: ...

    def stop(self, timeout: float = 20.0) -> int | None: ...


@dataclass
class Running:
    """A started daemon of either side, with a way to read its cloud call counts."""

    impl: str
    daemon: Daemon
    calls: Callable[[], Awaitable[Counter[str]]]
    backends: Callable[[], Awaitable[tuple[int, int]]]
    """(load balancers, backend nodes summed over them) in the cloud."""


@dataclass
class Bed:
    """What every run shares: the control plane, the Go binary, a scratch directory."""

    plane: ControlPlane
    goccm: Path
    scratch: Path
    qps: float
    burst: int
    settle: float = 5.0
    """Seconds from the last node or ingress to the steady RSS, CPU and request counts."""
    serial: int = 0

    def workdir(self, impl: str) -> Path:
        self.serial += 1
        return self.scratch / f"{self.serial:03d}-{impl}"


def start_daemon(
    bed: Bed,
    impl: str,
    *,
    controllers: str,
    workers: int,
    latency: float,
    extra: Sequence[str] = (),
) -> Running:
    port = free_port()
    workdir = bed.workdir(impl)
    if impl == "py":
        daemon = DaemonProcess(
            kubeconfig=bed.plane.kubeconfig,
            workdir=workdir,
            cloud_config={
                "unknownNodes": "create",
                "latency": f"{latency * 1000:g}ms",
                "loadBalancer": {"ipPool": [LB_POOL]},
            },
            args=[
                *daemon_args(
                    controllers=controllers,
                    node_workers=workers,
                    service_workers=workers,
                    qps=bed.qps,
                    burst=bed.burst,
                ),
                *SecurePort.args(port),
                *extra,
            ],
        ).start()
        state = daemon.cloud

        async def py_calls() -> Counter[str]:
            return Counter({m: c["count"] for m, c in state.calls().items()})

        async def py_backends() -> tuple[int, int]:
            lbs = state.load_balancers()
            return len(lbs), sum(len(lb.nodes) for lb in lbs)

        return Running(impl, daemon, py_calls, py_backends)
    go = GoCCMProcess(
        bed.goccm,
        goccm_args(
            kubeconfig=bed.plane.kubeconfig,
            port=port,
            controllers=controllers,
            node_workers=workers,
            service_workers=workers,
            qps=bed.qps,
            burst=bed.burst,
            extra=extra,
        ),
        workdir,
        latency=latency,
        env={"GOSIM_IP_POOL": LB_POOL},
    ).start()

    async def go_calls() -> Counter[str]:
        return (await gosim_state(port)).calls

    async def go_backends() -> tuple[int, int]:
        found = await gosim_state(port)
        return found.load_balancers, found.backends

    return Running(impl, go, go_calls, go_backends)


async def wait_for(
    predicate: Callable[[], Awaitable[bool]],
    limit: float,
    interval: float,
    what: str,
    daemon: Daemon,
) -> float:
    """Poll until ``predicate()`` (the monotonic time it became true); fail if the daemon exits."""
    started = time.monotonic()
    while not await predicate():
        if daemon.poll() is not None:
            raise RuntimeError(
                f"the daemon exited while waiting for {what}:\n{daemon.log()[-3000:]}"
            )
        if time.monotonic() - started > limit:
            raise TimeoutError(f"{what} not reached within {limit:g} s:\n{daemon.log()[-2000:]}")
        await asyncio.sleep(interval)
    return time.monotonic()


def apiserver_cpu(plane: ControlPlane) -> float:
    return cpu_seconds(plane.pids()["kube-apiserver"])


# -- cluster set-up ---------------------------------------------------------------------


async def clear_nodes(client: KubeClient) -> None:
    await client.request("DELETE", "/api/v1/nodes")
    deadline = time.monotonic() + 120
    while (await client.get("/api/v1/nodes", params={"limit": 1}))["items"]:
        if time.monotonic() > deadline:
            raise TimeoutError("the Nodes were not deleted within 120 s")
        await asyncio.sleep(0.5)


PROVIDER_IDS = {"py": "simulated://i-{index:016x}", "go": "gosim://sim-zone-a/{name}"}


def initialised_node(impl: str, name: str, index: int) -> dict[str, Any]:
    """A Node as ``impl``'s cloud controller leaves it: its providerID, no uninitialised taint.

    The providerID's scheme must be the provider's: kube-ccm leaves Nodes of another
    provider alone, and keeps them out of its load balancers (``NodeScope``).
    """
    manifest = node_manifest(name)
    provider_id = PROVIDER_IDS[impl].format(name=name, index=index)
    manifest["spec"] = {"providerID": provider_id, "taints": []}
    manifest["status"]["addresses"] = [
        {"type": "InternalIP", "address": f"10.128.0.{index + 1}"},
        {"type": "Hostname", "address": name},
    ]
    return manifest


EVENTS_PATH = "/api/v1/namespaces/default/events"


async def clear_events(client: KubeClient) -> None:
    """Delete the Events in ``default`` (the Nodes' and Services' Events go there)."""
    await client.request("DELETE", EVENTS_PATH)


async def event_reasons(client: KubeClient) -> dict[str, int]:
    """Events in ``default`` by reason (``count`` summed): what the daemon reported."""
    reasons: Counter[str] = Counter()
    for event in (await client.get(EVENTS_PATH))["items"]:
        reasons[event.get("reason", "")] += int(event.get("count") or 1)
    return dict(sorted(reasons.items()))


async def clear_services(client: KubeClient) -> None:
    """Delete every LoadBalancer Service, stripping the cleanup finalizer (no daemon runs)."""
    listed = await client.get(SERVICES_PATH)
    names = [
        s["metadata"]["name"] for s in listed["items"] if s["spec"].get("type") == "LoadBalancer"
    ]

    async def one(name: str) -> None:
        path = f"{SERVICES_PATH}/{name}"
        with contextlib.suppress(ApiError):
            await client.patch(path, {"metadata": {"finalizers": None}}, patch_type="merge")
        with contextlib.suppress(ApiError):
            await client.delete(path)

    await gather_limited(one(n) for n in names)
    deadline = time.monotonic() + 120
    while any(
        s["spec"].get("type") == "LoadBalancer" for s in (await client.get(SERVICES_PATH))["items"]
    ):
        if time.monotonic() > deadline:
            raise TimeoutError("the Services were not deleted within 120 s")
        await asyncio.sleep(0.5)


class IngressWatch:
    """A Service informer in the driver: when each Service was first seen with an ingress."""

    def __init__(self, client: KubeClient) -> None:
        self.informer: Informer[Service] = Informer(client, SERVICES_PATH, Service)
        self.done_at: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None

        def observe(service: Service) -> None:
            name = service.metadata.name
            if name not in self.done_at and service.status.load_balancer.ingress:
                self.done_at[name] = time.monotonic()

        self.informer.add_handler(on_add=observe, on_update=lambda _old, new: observe(new))

    async def start(self) -> IngressWatch:
        self._task = asyncio.create_task(self.informer.run())
        await self.informer.wait_synced()
        return self

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()


# -- scenarios ----------------------------------------------------------------------------


async def node_init_run(
    bed: Bed, impl: str, *, nodes: int, latency: float, workers: int
) -> dict[str, Any]:
    client = KubeClient.from_kubeconfig(bed.plane.kubeconfig)
    watch: NodeWatch | None = None
    try:
        await clear_nodes(client)
        await clear_events(client)
        await register_nodes(client, [f"sbs-{i:05d}" for i in range(nodes)])
        watch = await NodeWatch(client).start()
        await asyncio.sleep(1.0)
        load = load_average()
        before = await request_counts(client)
        api_cpu_before = apiserver_cpu(bed.plane)
        started = time.monotonic()
        running = start_daemon(
            bed,
            impl,
            controllers="cloud-node,cloud-node-lifecycle",
            workers=workers,
            latency=latency,
            extra=["--node-status-update-frequency=1h"],
        )
        daemon = running.daemon
        try:
            observed = watch
            at_first: list[tuple[float, int]] = []  # (daemon CPU, nodes done) when first seen

            async def all_done() -> bool:
                done = observed.initialised()
                if done and not at_first:
                    at_first.append((cpu_seconds(daemon.pid), done))
                return done == nodes

            limit = max(600.0, nodes * (latency + 0.05) * 4)
            finished = await wait_for(all_done, limit, 0.05, "every node initialised", daemon)
            first = min(watch.done_at.values())
            cpu_done = cpu_seconds(daemon.pid)
            await asyncio.sleep(bed.settle)  # trailing status patches and events
            memory = memory_mib(daemon.pid)
            cpu = cpu_seconds(daemon.pid)
            api_cpu = apiserver_cpu(bed.plane) - api_cpu_before
            after = await request_counts(client)
            calls = await running.calls()
        finally:
            daemon.stop()
        reasons = await event_reasons(client)
    finally:
        if watch is not None:
            watch.stop()
        await client.aclose()
    delta = after - before
    cpu_first, done_first = at_first[0]
    return {
        "benchmark": "side_by_side",
        "scenario": "node_init",
        "impl": impl,
        "load_average_1m": load,
        "nodes": nodes,
        "cloud_latency_ms": latency * 1000,
        "workers": workers,
        "kube_api_qps": bed.qps,
        "kube_api_burst": bed.burst,
        "nodes_per_second": round(nodes / max(finished - first, 1e-9), 1),
        "nodes_per_second_from_start": round(nodes / (finished - started), 1),
        "seconds_from_start": round(finished - started, 2),
        "daemon_cpu_ms_per_node": round(1000 * cpu / nodes, 2),
        "daemon_cpu_ms_per_node_after_first": round(
            1000 * (cpu_done - cpu_first) / max(nodes - done_first, 1), 2
        ),
        "apiserver_cpu_ms_per_node": round(1000 * api_cpu / nodes, 2),
        "rss_mib": memory.get("VmRSS", 0.0),
        "peak_rss_mib": memory.get("VmHWM", 0.0),
        "node_writes_per_node": round(writes(delta, "nodes") / nodes, 3),
        "event_writes_per_node": round(writes(delta, "events") / nodes, 3),
        "cloud_calls_per_node": round(sum(calls.values()) / nodes, 3),
        "cloud_calls": dict(calls),
        "event_reasons": reasons,
        "requests": by_verb_resource(delta),
    }


async def lb_run(
    bed: Bed, impl: str, *, services: int, latency: float, workers: int
) -> dict[str, Any]:
    client = KubeClient.from_kubeconfig(bed.plane.kubeconfig)
    try:
        await clear_services(client)
        await clear_nodes(client)
        await gather_limited(
            client.create("/api/v1/nodes", initialised_node(impl, f"lbnode-{i}", i))
            for i in range(LB_NODES)
        )
        await clear_events(client)
        await create_services(client, [f"lb-{i:05d}" for i in range(services)])
        watch = await IngressWatch(client).start()
        await asyncio.sleep(1.0)
        load = load_average()
        before = await request_counts(client)
        api_cpu_before = apiserver_cpu(bed.plane)
        started = time.monotonic()
        running = start_daemon(bed, impl, controllers="service", workers=workers, latency=latency)
        daemon = running.daemon
        try:
            observed = watch

            async def all_ingress() -> bool:
                return len(observed.done_at) == services

            limit = max(600.0, services * (latency + 0.05) * 4)
            finished = await wait_for(all_ingress, limit, 0.05, "every Service's ingress", daemon)
            first = min(watch.done_at.values())
            listed = await count_ingress(client)  # the watch's verdict, checked by a LIST
            await asyncio.sleep(bed.settle)  # trailing events
            memory = memory_mib(daemon.pid)
            cpu = cpu_seconds(daemon.pid)
            api_cpu = apiserver_cpu(bed.plane) - api_cpu_before
            after = await request_counts(client)
            calls = await running.calls()
            load_balancers, backends = await running.backends()
        finally:
            daemon.stop()
        reasons = await event_reasons(client)
        watch.stop()
        await clear_services(client)
    finally:
        await client.aclose()
    delta = after - before
    return {
        "benchmark": "side_by_side",
        "scenario": "lb",
        "impl": impl,
        "load_average_1m": load,
        "services": services,
        "cloud_latency_ms": latency * 1000,
        "workers": workers,
        "kube_api_qps": bed.qps,
        "kube_api_burst": bed.burst,
        "services_per_second": round(services / max(finished - first, 1e-9), 1),
        "services_per_second_from_start": round(services / (finished - started), 1),
        "services_with_ingress_listed": listed,
        "seconds_from_start": round(finished - started, 2),
        "daemon_cpu_ms_per_service": round(1000 * cpu / services, 2),
        "apiserver_cpu_ms_per_service": round(1000 * api_cpu / services, 2),
        "rss_mib": memory.get("VmRSS", 0.0),
        "peak_rss_mib": memory.get("VmHWM", 0.0),
        "service_writes_per_service": round(writes(delta, "services") / services, 3),
        "event_writes_per_service": round(writes(delta, "events") / services, 3),
        "cloud_calls_per_service": round(sum(calls.values()) / services, 3),
        "load_balancers": load_balancers,
        "backends_per_load_balancer": round(backends / max(load_balancers, 1), 3),
        "cloud_calls": dict(calls),
        "event_reasons": reasons,
        "requests": by_verb_resource(delta),
    }


# -- cells, ratios, the table ---------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    scenario: str
    size: int
    latency: float
    workers: int

    def describe(self, qps: float, burst: int) -> str:
        what = "nodes" if self.scenario == "node_init" else "LB Services"
        return (
            f"{self.size} {what}, {self.latency * 1000:g} ms, {self.workers} w, QPS {qps:g}/{burst}"
        )


# (result key, label, unit) per scenario; the Py/Go ratio is taken for each.
METRICS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "node_init": (
        ("nodes_per_second", "nodes/s (first→last)", ""),
        ("nodes_per_second_from_start", "nodes/s (from daemon start)", ""),
        ("daemon_cpu_ms_per_node", "daemon CPU/node (start-up included)", " ms"),
        ("daemon_cpu_ms_per_node_after_first", "daemon CPU/node (after the first node)", " ms"),
        ("apiserver_cpu_ms_per_node", "kube-apiserver CPU/node", " ms"),
        ("rss_mib", "RSS steady", " MiB"),
        ("peak_rss_mib", "RSS peak", " MiB"),
        ("node_writes_per_node", "Node writes/node", ""),
        ("event_writes_per_node", "Event writes/node", ""),
        ("cloud_calls_per_node", "cloud calls/node", ""),
        ("load_average_1m", "load avg (1 m) at start", ""),
    ),
    "lb": (
        ("services_per_second", "Services/s (first→last ingress)", ""),
        ("services_per_second_from_start", "Services/s (from daemon start)", ""),
        ("daemon_cpu_ms_per_service", "daemon CPU/Service (start-up included)", " ms"),
        ("apiserver_cpu_ms_per_service", "kube-apiserver CPU/Service", " ms"),
        ("rss_mib", "RSS steady", " MiB"),
        ("peak_rss_mib", "RSS peak", " MiB"),
        ("service_writes_per_service", "Service writes/Service", ""),
        ("event_writes_per_service", "Event writes/Service", ""),
        ("cloud_calls_per_service", "cloud calls/Service", ""),
        ("backends_per_load_balancer", "backend nodes/LB (of 3)", ""),
        ("load_average_1m", "load avg (1 m) at start", ""),
    ),
}


def median(results: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in results if key in r]
    return round(statistics.median(values), 3) if values else None


def summary(cell: Cell, by_impl: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "benchmark": "side_by_side",
        "summary": cell.scenario,
        "size": cell.size,
        "cloud_latency_ms": cell.latency * 1000,
        "workers": cell.workers,
        "runs": max((len(v) for v in by_impl.values()), default=0),
    }
    for key, _label, _unit in METRICS[cell.scenario]:
        py, go = median(by_impl.get("py", []), key), median(by_impl.get("go", []), key)
        out[key] = {"py": py, "go": go, "py_over_go": round(py / go, 2) if py and go else None}
    return out


def table(title: str, summaries: list[tuple[Cell, dict[str, Any]]], qps: float, burst: int) -> str:
    lines = [
        f"\n### {title}\n",
        "| scenario | metric | kube-ccm (Py) | Go CCM | Py/Go |",
        "|:---|:---|---:|---:|---:|",
    ]
    for cell, result in summaries:
        where = cell.describe(qps, burst)
        for key, label, unit in METRICS[cell.scenario]:
            values = result[key]

            def shown(value: float | None, unit: str = unit) -> str:
                return "—" if value is None else f"{value:g}{unit}"

            ratio = values["py_over_go"]
            lines.append(
                f"| {where} | {label} | {shown(values['py'])} | {shown(values['go'])} | "
                f"{'—' if ratio is None or key == 'load_average_1m' else f'{ratio:.2f}'} |"
            )
    return "\n".join(lines) + "\n"


async def run_all(bed: Bed, args: argparse.Namespace) -> list[tuple[Cell, dict[str, Any]]]:
    cells: list[Cell] = []
    if "node_init" in args.scenarios:
        cells += [
            Cell("node_init", n, lat, w)
            for n in args.nodes
            for lat in args.latency
            for w in args.workers
        ]
    if "lb" in args.scenarios:
        cells += [
            Cell("lb", s, lat, w)
            for s in args.services
            for lat in args.latency
            for w in args.lb_workers
        ]
    results: dict[Cell, dict[str, list[dict[str, Any]]]] = {c: {} for c in cells}
    flip = 0
    for run in range(args.runs):
        for cell in cells:
            order = list(args.impls) if flip % 2 == 0 else list(reversed(args.impls))
            flip += 1
            for impl in order:
                if cell.scenario == "node_init":
                    result = await node_init_run(
                        bed, impl, nodes=cell.size, latency=cell.latency, workers=cell.workers
                    )
                else:
                    result = await lb_run(
                        bed, impl, services=cell.size, latency=cell.latency, workers=cell.workers
                    )
                emit({**result, "run": run})
                results[cell].setdefault(impl, []).append(result)
    summaries = []
    for cell in cells:
        result = summary(cell, results[cell])
        emit(result)
        summaries.append((cell, result))
    return summaries


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--scenarios", nargs="+", choices=SCENARIOS, default=list(SCENARIOS))
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000])
    parser.add_argument("--services", type=int, nargs="+", default=[500])
    parser.add_argument("--latency", type=float, nargs="+", default=[0.0, 0.05], help="seconds")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 16], help="node_init")
    parser.add_argument("--lb-workers", type=int, nargs="+", default=[16], help="lb")
    parser.add_argument("--kube-api-qps", type=float, default=1000.0)
    parser.add_argument("--kube-api-burst", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument(
        "--settle",
        type=float,
        default=5.0,
        help="seconds after the last node/ingress before RSS, CPU and counts are read",
    )
    parser.add_argument("--impls", nargs="+", choices=IMPLS, default=list(IMPLS))
    parser.add_argument("--markdown", type=Path, default=None)
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="keep every daemon's log (and kube-ccm's cloud.db) here; default: a temporary dir",
    )
    args = parser.parse_args()

    binaries = ensure_binaries()
    goccm = ensure_goccm() if "go" in args.impls else Path()
    info = header(binaries)
    info["load_average_1m_at_start"] = load_average()
    emit({"benchmark": "side_by_side", "header": info, "goccm": str(goccm)})
    with tempfile.TemporaryDirectory(prefix="kube-ccm-sbs-") as tmp:
        if args.workdir is not None:
            args.workdir.mkdir(parents=True, exist_ok=True)
        plane = ControlPlane(
            ControlPlaneOptions(service_cluster_ip_range=SERVICE_CIDR), binaries=binaries
        ).start()
        try:
            bed = Bed(
                plane, goccm, args.workdir or Path(tmp), args.kube_api_qps, args.kube_api_burst
            )
            summaries = asyncio.run(run_all(bed, args))
        finally:
            plane.stop()
    runs = f"median of {args.runs} runs" if args.runs > 1 else "1 run"
    title = (
        f"Side by side with the Go CCM — {runs}, load avg (1 m) "
        f"{info['load_average_1m_at_start']} at start, {load_average()} at the end — "
        f"{header_line(info)}"
    )
    append_markdown(args.markdown, table(title, summaries, args.kube_api_qps, args.kube_api_burst))


if __name__ == "__main__":
    main()
