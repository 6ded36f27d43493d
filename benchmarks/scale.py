"""kube-ccm and the Go CCM from 5,000 to 100,000 Nodes: the cost curve, side by side.

    .venv/bin/python benchmarks/scale.py [--short | --smoke] [--sizes 5000 15000 50000 100000]
        [--impls py go] [--status-period 120] [--idle-quiet 30] [--burst 1000]
        [--not-ready 0.01] [--kube-api-qps 1000 --kube-api-burst 2000]
        [--markdown docs/benchmarks.md] [--workdir DIR]

``--short`` is 5,000 Nodes only (minutes); ``--smoke`` a few hundred Nodes with short
periods (the harness check the test suite runs, no figures). Every size has
LoadBalancer Services at 10 % of its Nodes, capped at 10,000.

For each size and each daemon (kube-ccm over the simulated cloud, the Go CCM
over ``gosim``; which goes first alternates from size to size), a **fresh control
plane** (kube-apiserver + etcd, Service CIDR /16, etcd ``--quota-backend-bytes``
8 GiB, raised in-flight limits) is seeded by the driver, not by a daemon. With
``--one-cluster`` (for 50,000 Nodes and more, where seeding takes many minutes) one
control plane per size is seeded once, with kube-ccm's providerIDs, and kube-ccm
runs first, then the Go CCM over the same state: gosim adopts the Nodes'
InternalIPs and the ingress IPs kube-ccm's cloud gave the Services, so the Go CCM's
*cold* step finds the load balancers provisioned (its start-up is comparable, its
cold step is not). Seeding:

* **lean Nodes**, already initialised for the daemon under test (its providerID
  scheme, an InternalIP and a Hostname address, one ``Ready`` condition, nothing
  else), created 64 at a time; ``--not-ready`` of them (1 %) have ``Ready=Unknown``,
  so that each node-lifecycle pass asks the cloud about them (the only work a
  lifecycle pass makes visible from outside);
* the clouds know the instances: kube-ccm's ``cloud.db`` gets one instance per Node
  (same id, zone and addresses), gosim adopts the Node's providerID and InternalIP.
  Neither daemon rewrites an address. Each cloud keeps a count and a digest of a
  load balancer's backends, not the names (kube-ccm's ``backendNames: false``;
  ``--backend-names`` keeps them, at gigabytes of SQLite writes past 15,000 Nodes);
* the LoadBalancer Services, without ingress.

Then, with ``cloud-node,cloud-node-lifecycle,service``, 16 workers for each
controller, ``--kube-api-qps/burst`` 1000/2000, and ``--node-status-update-frequency``
shortened to ``--status-period`` (120 s; upstream's 5 min would make the run
long, and the refresh's cost does not depend on the period):

1. *cold*: a first daemon provisions every load balancer and makes its first
   address pass (seconds, CPU, peak RSS); it is stopped;
2. *start-up*: a second daemon over the synced cluster (the same cloud state),
   milestones as ``side_by_side.py``'s (every Node and Service queued, reconciled
   once, the first address pass over every Node); *first complete sync* is the
   later of the last two, with the daemon CPU until then;
3. *idle*: CPU % over ``--idle-quiet`` s with nothing due (no scrape meanwhile),
   then over the whole status period from the same start, which holds one
   address refresh: its duration (first to last ``InstanceMetadata`` of the pass,
   the cloud's counters sampled each second), its CPU seconds and CPU % of one
   core, the daemon's own API requests per minute;
4. *lifecycle*: one node-lifecycle monitor pass's duration: from the first
   ``InstanceExists`` of a pass to the last ``InstanceShutdown`` (one each per
   not-Ready Node), counters sampled every 0.1 s (so ±0.2 s);
5. *burst*: ``--burst`` Nodes register as kubelets do (uninitialised, 64 at a
   time); the seconds until every load balancer has every Node (the clouds'
   backend counts), then until the daemon is quiet again; ``UpdateLoadBalancer``
   calls per load balancer and daemon CPU seconds; then the same Nodes are
   deleted, measured the same way;
6. *RSS* steady (VmRSS at the end) and peak (VmHWM) of the second daemon.

A size or step that fails (a timeout, the control plane giving up) is reported
with its reason and the run goes on. Prints one JSON object per (size, daemon);
``--markdown`` appends the side-by-side table and the per-Node cost curve.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import itertools
import sqlite3
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _bench import (
    SERVICES_PATH,
    append_markdown,
    by_verb_resource,
    cpu_seconds,
    emit,
    gather_limited,
    header,
    header_line,
    load_average,
    memory_mib,
    request_counts,
    writes,
)
from current_table import over_backlog
from goccm import ensure_goccm, gosim_state
from prometheus_client.parser import text_string_to_metric_families
from side_by_side import (
    CLUSTER_CONTROLLERS,
    IMPL_NAMES,
    IMPLS,
    NODE_QUEUE,
    PROVIDER_IDS,
    SERVICE_CIDR,
    SERVICE_QUEUE,
    Bed,
    IngressWatch,
    Queues,
    Running,
    api_requests,
    first_complete_sync,
    restart_summary,
    scrape,
    start_daemon,
    wait_for,
)

from kube_ccm.providers.simulated.state import CloudState
from kube_ccm.runtime.client import ApiError, KubeClient
from kube_ccm.sandbox.kubelets import node_manifest
from kube_ccm.testing.binaries import ensure_binaries
from kube_ccm.testing.controlplane import ControlPlane, ControlPlaneOptions

FULL_SIZES = (5_000, 15_000, 50_000, 100_000)
MAX_SERVICES = 10_000
ETCD_QUOTA = 8 * 2**30
CONTROL_PLANE = ControlPlaneOptions(
    service_cluster_ip_range=SERVICE_CIDR,
    extra_etcd_args=(f"--quota-backend-bytes={ETCD_QUOTA}",),
    extra_apiserver_args=(
        "--max-requests-inflight=800",
        "--max-mutating-requests-inflight=400",
        # A NodePort per LoadBalancer Service: the default 30000-32767 holds 2,768.
        "--service-node-port-range=30000-42767",
    ),
)
CREATE_CONCURRENCY = 64
ZONE = "sim-zone-a"
FIRST_IP = ipaddress.ip_address("10.128.0.0") + 11
"""The simulated cloud's address for its instance of rowid 1 (``_next_internal_ip``)."""


def services_for(nodes: int) -> int:
    """LoadBalancer Services at 10 % of the Nodes, capped at 10,000."""
    return min(MAX_SERVICES, nodes // 10)


@dataclass(frozen=True)
class Plan:
    """One size: what is seeded and how long each window lasts."""

    nodes: int
    services: int
    not_ready: int
    burst: int
    status_period: float
    idle_quiet: float
    settle: float = 5.0
    rss_cap_mib: float = 12 * 1024
    budget: float | None = None
    """Seconds one daemon's steps may take, seeding excluded (None: no limit)."""
    restarts: int = 3
    """Restarts over the synced cluster, each one's first complete sync reported."""
    startup_cap: float = 600.0
    """Seconds a restart may take to its first complete sync (then: not reached)."""
    quiet_cap: float = 600.0
    """Seconds a burst may take to go quiet (then: not reached, with what is left)."""
    backend_names: bool = False
    """kube-ccm's simulated cloud records each load balancer's node names (else a
    count and a digest, as gosim does)."""

    @classmethod
    def of(cls, nodes: int, args: argparse.Namespace) -> Plan:
        return cls(
            nodes=nodes,
            services=services_for(nodes),
            not_ready=max(3, round(nodes * args.not_ready)),
            burst=min(args.burst, nodes),
            status_period=args.status_period,
            idle_quiet=args.idle_quiet,
            settle=args.settle,
            backend_names=args.backend_names,
            rss_cap_mib=args.rss_cap,
            budget=args.daemon_budget,
            restarts=args.restarts,
            startup_cap=args.startup_cap,
            quiet_cap=args.quiet_cap,
        )


# -- seeding ------------------------------------------------------------------------


def node_ip(index: int) -> str:
    return str(FIRST_IP + index)


def lean_node(impl: str, index: int, *, ready: bool) -> dict[str, Any]:
    """An initialised Node with nothing a cloud controller does not read."""
    name = f"n-{index:06d}"
    return {
        "metadata": {"name": name},
        "spec": {"providerID": PROVIDER_IDS[impl].format(name=name, index=index)},
        "status": {
            "addresses": [
                {"type": "InternalIP", "address": node_ip(index)},
                {"type": "Hostname", "address": name},
            ],
            "conditions": [{"type": "Ready", "status": "True" if ready else "Unknown"}],
        },
    }


def not_ready_indexes(plan: Plan) -> set[int]:
    """Spread evenly over the names, so a pass's first and last check span the pass."""
    step = plan.nodes / plan.not_ready
    return {int(i * step) for i in range(plan.not_ready)}


async def seed_nodes(client: KubeClient, impl: str, plan: Plan) -> None:
    unready = not_ready_indexes(plan)
    await gather_limited(
        (
            client.create("/api/v1/nodes", lean_node(impl, i, ready=i not in unready))
            for i in range(plan.nodes)
        ),
        CREATE_CONCURRENCY,
    )


def seed_cloud(path: Path, nodes: int) -> None:
    """kube-ccm's simulated cloud with an instance behind every seeded Node."""
    path.parent.mkdir(parents=True, exist_ok=True)
    state = CloudState(path)
    try:
        for index in range(nodes):
            state.add_instance(
                f"n-{index:06d}",
                zone=ZONE,
                region="sim-region-1",
                instance_type="sim.standard-2",
                addresses=(("InternalIP", node_ip(index)), ("Hostname", f"n-{index:06d}")),
                instance_id=f"i-{index:016x}",
            )
    finally:
        state.close()


async def seed_services(client: KubeClient, count: int) -> None:
    await gather_limited(
        (
            client.create(
                SERVICES_PATH,
                {
                    "metadata": {"name": f"lb-{i:05d}"},
                    "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
                },
            )
            for i in range(count)
        ),
        CREATE_CONCURRENCY,
    )


# -- reading the clouds -------------------------------------------------------------


async def backends_at(running: Running, workdir: Path, nodes: int) -> int:
    """Load balancers whose backend set has ``nodes`` nodes."""
    if running.impl == "go":
        found = await gosim_state(running.port)
        return found.load_balancers if found.backends == found.load_balancers * nodes else 0
    with contextlib.closing(
        sqlite3.connect(f"file:{workdir / 'cloud.db'}?mode=ro", uri=True)
    ) as db:
        row = db.execute(
            "SELECT COUNT(*) FROM load_balancers WHERE json_array_length(nodes) = ?"
            " OR json_extract(nodes, '$[0]') LIKE ?",
            (nodes, f"{nodes} nodes, sha256 %"),
        ).fetchone()
    return int(row[0])


@dataclass
class Sample:
    at: float
    cpu: float
    calls: Counter[str]
    requests: int
    by_method: Counter[str]
    """The daemon's own API requests by method."""
    queue_adds: Counter[str]
    backlog: dict[str, int]
    """Work queued or in flight, by queue (``Queues.backlog``)."""


def requests_by_method(text: str) -> Counter[str]:
    counts: Counter[str] = Counter()
    for family in text_string_to_metric_families(text):
        for found in family.samples:
            if found.name == "rest_client_requests_total":
                counts[found.labels.get("method", "")] += int(found.value)
    return counts


async def sample(running: Running, base: Counter[str]) -> Sample:
    text = await scrape(running.port)
    queues = Queues.parse(text)
    return Sample(
        time.monotonic(),
        cpu_seconds(running.daemon.pid),
        await running.calls_in(text) - base,
        api_requests(text),
        requests_by_method(text),
        queues.adds,
        queues.backlog(),
    )


# -- a memory guard -----------------------------------------------------------------

MEMORY_FLOOR_MIB = 3 * 1024
"""The machine is shared: a daemon is stopped before less than this is left."""


def available_mib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    return float("inf")


@dataclass
class MemoryGuard:
    """Stops a daemon whose RSS passes ``cap_mib`` or that leaves the machine short;
    ``tripped`` says why (the size is then reported as not fitting, with that reason)."""

    cap_mib: float
    tripped: str = ""

    @contextlib.asynccontextmanager
    async def watching(self, running: Running) -> AsyncIterator[None]:
        async def watch() -> None:
            pid = running.daemon.pid
            while running.daemon.poll() is None:
                rss, available = memory_mib(pid).get("VmRSS", 0.0), available_mib()
                if rss > self.cap_mib or available < MEMORY_FLOOR_MIB:
                    self.tripped = (
                        f"stopped by the memory guard at RSS {rss:.0f} MiB (cap "
                        f"{self.cap_mib:.0f} MiB), {available:.0f} MiB left on the machine"
                    )
                    running.daemon.stop()
                    return
                await asyncio.sleep(1.0)

        task = asyncio.create_task(watch())
        try:
            yield
        finally:
            task.cancel()


# -- the steps ----------------------------------------------------------------------


async def cold_start(
    bed: Bed, impl: str, plan: Plan, workdir: Path, guard: MemoryGuard
) -> dict[str, Any]:
    client = KubeClient.from_kubeconfig(bed.plane.kubeconfig)
    ingress = await IngressWatch(client).start()
    started = time.monotonic()
    first = launch(bed, impl, plan, workdir)
    try:
        async with guard.watching(first):

            async def done() -> bool:
                text = await scrape(first.port)  # "" until the secure port is up
                if not text:
                    return False
                calls = await first.calls_in(text)
                return len(ingress.done_at) >= plan.services and (
                    calls["InstanceMetadata"] >= plan.nodes
                )

            limit = 600 + plan.nodes * 0.02
            finished = await wait_for(done, limit, 1.0, "every LB provisioned", first.daemon)
            memory = memory_mib(first.daemon.pid)
            return {
                "cold_seconds": round(finished - started, 1),
                "cold_cpu_seconds": round(cpu_seconds(first.daemon.pid), 1),
                "cold_peak_rss_mib": memory.get("VmHWM", 0.0),
            }
    finally:
        ingress.stop()
        first.daemon.stop()
        await client.aclose()


def launch(bed: Bed, impl: str, plan: Plan, workdir: Path) -> Running:
    return start_daemon(
        bed,
        impl,
        controllers=CLUSTER_CONTROLLERS,
        workers=16,
        latency=0.0,
        qps=bed.qps,
        burst=bed.burst,
        extra=[f"--node-status-update-frequency={plan.status_period:g}s"],
        workdir=workdir,
        load_balancer={"backendNames": plan.backend_names},
    )


async def idle(running: Running, plan: Plan, base: Counter[str]) -> dict[str, Any]:
    """Quiet CPU, then the whole period with its refresh (first to last InstanceMetadata)."""
    pid = running.daemon.pid
    start = await sample(running, base)
    await asyncio.sleep(plan.idle_quiet)
    quiet_at, quiet_cpu = time.monotonic(), cpu_seconds(pid)
    metadata0 = start.calls["InstanceMetadata"]
    samples = [start]
    deadline = start.at + 2 * plan.status_period + 120 + plan.nodes * 0.01
    while True:
        now = await sample(running, base)
        samples.append(now)
        if now.calls["InstanceMetadata"] - metadata0 >= plan.nodes and (
            now.at - start.at >= plan.status_period
        ):
            break
        if now.at > deadline or running.daemon.poll() is not None:
            raise TimeoutError("no complete address refresh within two status periods")
        await asyncio.sleep(1.0)
    moving = [s for s in samples if s.calls["InstanceMetadata"] > metadata0]
    first = moving[0]
    before = samples[samples.index(first) - 1]
    last = next(s for s in samples if s.calls["InstanceMetadata"] - metadata0 >= plan.nodes)
    end = samples[-1]
    refresh = max(last.at - before.at, 1e-9)
    return {
        "idle_quiet_seconds": round(quiet_at - start.at, 1),
        "idle_cpu_pct_quiet": round(100 * (quiet_cpu - start.cpu) / (quiet_at - start.at), 3),
        "idle_period_seconds": round(end.at - start.at, 1),
        "idle_cpu_pct_period": round(100 * (end.cpu - start.cpu) / (end.at - start.at), 3),
        "refresh_seconds": round(last.at - first.at, 1),
        "refresh_seconds_upper": round(refresh, 1),
        "refresh_cpu_seconds": round(last.cpu - before.cpu, 2),
        "refresh_cpu_pct": round(100 * (last.cpu - before.cpu) / refresh, 1),
        "refresh_calls": last.calls["InstanceMetadata"] - metadata0,
        "idle_api_requests_per_min": round(
            60 * (end.requests - start.requests) / (end.at - start.at), 1
        ),
        "idle_api_requests_by_method": dict(end.by_method - start.by_method),
        "idle_queue_adds": dict(end.queue_adds - start.queue_adds),
        "idle_backlog_at_start": start.backlog,
        "idle_backlog_at_end": end.backlog,
    }


async def lifecycle_pass(
    running: Running, plan: Plan, base: Counter[str], *, fast: Callable[[], Awaitable[Counter[str]]]
) -> dict[str, Any]:
    """One monitor pass: the first InstanceExists to the pass's last InstanceShutdown."""
    calls = await fast()
    while True:  # wait for a quiet gap, then for the next pass to begin
        await asyncio.sleep(0.1)
        now = await fast()
        if now["InstanceExists"] == calls["InstanceExists"]:
            break
        calls = now
    exists0, shutdown0 = calls["InstanceExists"], calls["InstanceShutdown"]
    deadline = time.monotonic() + 120
    while (now := await fast())["InstanceExists"] == exists0:
        if time.monotonic() > deadline:
            raise TimeoutError("no lifecycle pass within 120 s")
        await asyncio.sleep(0.1)
    began, cpu0 = time.monotonic(), cpu_seconds(running.daemon.pid)
    while (now := await fast())["InstanceShutdown"] - shutdown0 < plan.not_ready:
        if time.monotonic() > deadline:
            raise TimeoutError("the lifecycle pass did not finish within 120 s")
        await asyncio.sleep(0.1)
    ended = time.monotonic()
    return {
        "lifecycle_pass_seconds": round(ended - began, 2),
        "lifecycle_pass_cpu_seconds": round(cpu_seconds(running.daemon.pid) - cpu0, 2),
        "lifecycle_checked_nodes": now["InstanceShutdown"] - shutdown0,
    }


async def burst(
    bed: Bed, running: Running, plan: Plan, workdir: Path, base: Counter[str]
) -> dict[str, Any]:
    """``plan.burst`` Nodes join, then leave: convergence, UpdateLoadBalancer per LB, CPU."""
    client = KubeClient.from_kubeconfig(bed.plane.kubeconfig)
    names = [f"burst-{i:05d}" for i in range(plan.burst)]
    out: dict[str, Any] = {}
    try:
        for direction, target in (("join", plan.nodes + plan.burst), ("leave", plan.nodes)):
            before = await sample(running, base)
            started = time.monotonic()
            if direction == "join":
                await gather_limited(
                    (client.create("/api/v1/nodes", node_manifest(n)) for n in names),
                    CREATE_CONCURRENCY,
                )
            else:
                await gather_limited(
                    (client.request("DELETE", f"/api/v1/nodes/{n}") for n in names),
                    CREATE_CONCURRENCY,
                )
            created = time.monotonic() - started

            async def current(target: int = target) -> bool:
                return await backends_at(running, workdir, target) == plan.services

            limit = 600 + plan.services * plan.nodes * 2e-6
            done = await wait_for(
                current, limit, 1.0, f"every LB current ({direction})", running.daemon
            )
            # Later passes (a providerID set on a joined Node) still count: wait for quiet.
            last = await quiet(running, base, cap=plan.quiet_cap)
            updates = last.calls["UpdateLoadBalancer"] - before.calls["UpdateLoadBalancer"]
            out |= {
                f"{direction}_writes_seconds": round(created, 1),
                f"{direction}_current_seconds": round(done - started, 1),
                f"{direction}_update_calls_per_lb": round(updates / max(plan.services, 1), 2),
                f"{direction}_cpu_seconds": round(last.cpu - before.cpu, 2),
                f"{direction}_quiet_seconds": (
                    f"not reached within {plan.quiet_cap:g} s"
                    if last.backlog
                    else round(last.at - started, 1)
                ),
            }
            if last.backlog:
                out[f"{direction}_backlog_left"] = last.backlog
    finally:
        await client.aclose()
    return out


QUIET_FOR = 10.0
"""Seconds without a new ``UpdateLoadBalancer`` (and every queue drained) that make quiet."""


async def quiet(running: Running, base: Counter[str], *, cap: float) -> Sample:
    """The sample at which the daemon went quiet: every queue drained (nothing queued,
    in flight or pending) and no ``UpdateLoadBalancer`` for :data:`QUIET_FOR` s; or,
    after ``cap`` s, the last sample (its ``backlog`` says what was left)."""
    deadline = time.monotonic() + cap
    last = await sample(running, base)
    while True:
        await asyncio.sleep(2.0)
        now = await sample(running, base)
        if now.calls["UpdateLoadBalancer"] != last.calls["UpdateLoadBalancer"] or now.backlog:
            last = now
        elif now.at - last.at >= QUIET_FOR:
            return now
        if now.at > deadline:
            return now


async def remove_burst_nodes(bed: Bed, plan: Plan) -> None:
    client = KubeClient.from_kubeconfig(bed.plane.kubeconfig)

    async def delete(name: str) -> None:
        try:
            await client.request("DELETE", f"/api/v1/nodes/{name}")
        except ApiError as exc:
            if not exc.not_found:
                raise

    try:
        await gather_limited(
            (delete(f"burst-{i:05d}") for i in range(plan.burst)), CREATE_CONCURRENCY
        )
    finally:
        await client.aclose()


# -- one size, one daemon -----------------------------------------------------------


async def seed(bed: Bed, plan: Plan, ids: str) -> dict[str, Any]:
    """Seed the cluster: the Nodes (``ids``: whose providerID scheme), the Services."""
    out: dict[str, Any] = {}
    client = KubeClient.from_kubeconfig(bed.plane.kubeconfig)
    try:
        begun = time.monotonic()
        await seed_nodes(client, ids, plan)
        out["seed_nodes_seconds"] = round(time.monotonic() - begun, 1)
        begun = time.monotonic()
        await seed_services(client, plan.services)
        out["seed_services_seconds"] = round(time.monotonic() - begun, 1)
    finally:
        await client.aclose()
    pid = bed.plane.pids()["kube-apiserver"]
    out["apiserver_rss_mib_seeded"] = memory_mib(pid).get("VmRSS", 0.0)
    return out


async def run_one(
    bed: Bed,
    impl: str,
    plan: Plan,
    seeded: dict[str, Any] | None = None,
    out: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One daemon over ``bed``'s cluster: seeded now (its own providerIDs), or already
    (``seeded``: the seeding's figures; the Nodes have kube-ccm's providerIDs)."""
    out = {} if out is None else out
    out |= {
        "benchmark": "scale",
        "impl": impl,
        "nodes": plan.nodes,
        "services": plan.services,
        "not_ready_nodes": plan.not_ready,
        "burst_nodes": plan.burst,
        "status_period_s": plan.status_period,
        "kube_api_qps": bed.qps,
        "kube_api_burst": bed.burst,
    }
    workdir = bed.workdir(impl)
    client = KubeClient.from_kubeconfig(bed.plane.kubeconfig)
    out["step"] = "seeding"
    guard: MemoryGuard | None = None
    try:
        if impl == "py":
            seed_cloud(workdir / "cloud.db", plan.nodes)
        out |= seeded if seeded is not None else await seed(bed, plan, impl)
        out["shared_cluster"] = seeded is not None

        out["step"] = "cold start"
        out["load_average_1m"] = load_average()
        guard = MemoryGuard(plan.rss_cap_mib)
        out |= await cold_start(bed, impl, plan, workdir, guard)

        out["step"] = "start-up"
        queues = {NODE_QUEUE: plan.nodes, SERVICE_QUEUE: plan.services}
        runs: list[dict[str, Any]] = []
        for attempt in range(plan.restarts):
            await asyncio.sleep(1.0)
            base: Counter[str] = Counter()  # gosim is a new process each time
            if impl == "py":  # kube-ccm's database keeps counting
                base = Counter(
                    {m: c["count"] for m, c in CloudState(workdir / "cloud.db").calls().items()}
                )
            requests_before = await request_counts(client)
            load = load_average()
            started = time.monotonic()
            running = launch(bed, impl, plan, workdir)
            try:
                async with guard.watching(running):
                    run = await first_complete_sync(
                        running, queues, plan.nodes, base, cap=plan.startup_cap, started=started
                    )
                    runs.append(run | {"load_average_1m": load})
                    if attempt < plan.restarts - 1:
                        continue  # the next restart (this one's daemon is stopped below)
                    out |= restart_summary(runs)
                    out["load_average_1m_restart"] = load
                    await asyncio.sleep(plan.settle)
                    delta = await request_counts(client) - requests_before
                    out["startup_node_writes"] = writes(delta, "nodes")
                    out["startup_service_writes"] = writes(delta, "services")
                    out["startup_requests"] = by_verb_resource(delta)

                    out["step"] = "idle"
                    out["load_average_1m_idle"] = load_average()
                    idle_before = await request_counts(client)
                    out |= await idle(running, plan, base)
                    # Every client's requests meanwhile (the daemon's, the driver's scrapes).
                    out["idle_apiserver_requests"] = by_verb_resource(
                        await request_counts(client) - idle_before
                    )

                    out["step"] = "lifecycle pass"

                    async def fast(
                        running: Running = running, base: Counter[str] = base
                    ) -> Counter[str]:
                        return await running.calls() - base

                    out |= await lifecycle_pass(running, plan, base, fast=fast)

                    out["step"] = "burst"
                    out["load_average_1m_burst"] = load_average()
                    out |= await burst(bed, running, plan, workdir, base)
                    memory = memory_mib(running.daemon.pid)
                    out["rss_mib"] = memory.get("VmRSS", 0.0)
                    out["peak_rss_mib"] = memory.get("VmHWM", 0.0)
            finally:
                running.daemon.stop()
    except Exception as exc:  # reported: the size does not fit, and why
        why = (
            guard.tripped if guard is not None and guard.tripped else f"{type(exc).__name__}: {exc}"
        )
        out["error"] = f"{out['step']}: {why}"[-2000:]
    finally:
        await client.aclose()
    return out


def per_node(result: dict[str, Any]) -> dict[str, Any]:
    """The cost curve: CPU and memory per Node."""
    n = result["nodes"]
    out: dict[str, Any] = {}
    if "startup_cpu_seconds" in result:
        out["startup_cpu_ms_per_node"] = round(1000 * result["startup_cpu_seconds"] / n, 3)
    if "refresh_cpu_seconds" in result:
        out["refresh_cpu_ms_per_node"] = round(1000 * result["refresh_cpu_seconds"] / n, 3)
    if "rss_mib" in result:
        out["rss_kib_per_node"] = round(1024 * result["rss_mib"] / n, 2)
        out["peak_rss_kib_per_node"] = round(1024 * result["peak_rss_mib"] / n, 2)
    return out


async def run_size(
    bed_for: Callable[[], Bed], plan: Plan, impls: Sequence[str], *, one_cluster: bool
) -> list[dict[str, Any]]:
    """Each daemon on a fresh control plane, or (``one_cluster``) both on one, seeded once."""
    results = []
    shared = bed_for() if one_cluster else None
    try:
        seeded = None
        if shared is not None:
            try:
                seeded = await seed(shared, plan, "py")
            except Exception as exc:  # reported: the size does not fit, and why
                for impl in impls:
                    failed = {"benchmark": "scale", "impl": impl, "nodes": plan.nodes}
                    failed["error"] = f"seeding: {type(exc).__name__}: {exc}"[-2000:]
                    emit(failed)
                    results.append(failed)
                return results
        for impl in impls:
            bed = shared or bed_for()
            if shared is not None:
                await remove_burst_nodes(shared, plan)  # left by a run cut short
            try:
                started = time.monotonic()
                result: dict[str, Any] = {}
                try:
                    await asyncio.wait_for(run_one(bed, impl, plan, seeded, result), plan.budget)
                except TimeoutError:  # what was measured until then is kept
                    result["error"] = (
                        f"{result.get('step')}: not finished within --daemon-budget "
                        f"{plan.budget:g} s (the session's time on a shared machine)"
                    )
                result.pop("step", None)
                result["wall_seconds"] = round(time.monotonic() - started, 1)
            finally:
                if shared is None:
                    bed.plane.stop()
            result |= per_node(result)
            emit(result)
            results.append(result)
    finally:
        if shared is not None:
            shared.plane.stop()
    return results


# -- the table ----------------------------------------------------------------------

ROWS: tuple[tuple[str, str, str], ...] = (
    ("cold_seconds", "cold: every LB provisioned + first address pass", " s"),
    ("startup_outcomes", "each restart: start-up to first complete sync", ""),
    ("startup_complete_seconds", "start-up to first complete sync (median)", " s"),
    ("startup_cpu_seconds", "daemon CPU until then", " s"),
    ("startup_cpu_ms_per_node", "  per Node", " ms"),
    ("startup_node_writes", "Node writes at start-up", ""),
    ("rss_mib", "RSS steady (end of run)", " MiB"),
    ("peak_rss_mib", "RSS peak", " MiB"),
    ("rss_kib_per_node", "  RSS per Node", " KiB"),
    ("idle_backlog_at_start", "work queued when the idle window starts", ""),
    ("idle_backlog_at_end", "  and when it ends", ""),
    ("idle_cpu_pct_quiet", "idle CPU between refreshes", " %"),
    ("idle_cpu_pct_period", "idle CPU over one status period", " %"),
    ("refresh_seconds", "address refresh: first→last InstanceMetadata", " s"),
    ("refresh_cpu_seconds", "  its CPU", " s"),
    ("refresh_cpu_ms_per_node", "  per Node", " ms"),
    ("refresh_cpu_pct", "  CPU % of one core during it", " %"),
    ("lifecycle_pass_seconds", "lifecycle monitor pass (±0.2 s)", " s"),
    ("join_current_seconds", "burst join: every LB current after", " s"),
    ("join_quiet_seconds", "  every queue drained after", " s"),
    ("join_backlog_left", "  work left at the cap", ""),
    ("join_update_calls_per_lb", "  UpdateLoadBalancer per LB", ""),
    ("join_cpu_seconds", "  daemon CPU", " s"),
    ("leave_current_seconds", "burst leave: every LB current after", " s"),
    ("leave_quiet_seconds", "  every queue drained after", " s"),
    ("leave_backlog_left", "  work left at the cap", ""),
    ("leave_update_calls_per_lb", "  UpdateLoadBalancer per LB", ""),
    ("leave_cpu_seconds", "  daemon CPU", " s"),
    ("idle_api_requests_per_min", "API requests/min at idle", ""),
    ("load_average_1m_restart", "load avg (1 m) at restart", ""),
    ("load_average_1m_idle", "load avg (1 m) at idle", ""),
)


def table(title: str, results: list[dict[str, Any]]) -> str:
    sizes = sorted({r["nodes"] for r in results})
    by = {(r["nodes"], r["impl"]): r for r in results}
    head = "| metric | " + " | ".join(f"{n:,} Py | {n:,} Go | Py/Go" for n in sizes) + " |"
    lines = [f"\n### {title}\n", head, "|:---|" + "---:|" * (3 * len(sizes))]

    def shown(value: Any, unit: str) -> str:
        if isinstance(value, str):
            return value
        if isinstance(value, dict):  # a backlog: {queue: items}
            return ", ".join(f"{q} {v:,}" for q, v in value.items() if v) or "none"
        return "—" if value is None else f"{value:g}{unit}"

    for key, label, unit in ROWS:
        cells = []
        for n in sizes:
            py_result, go_result = by.get((n, "py"), {}), by.get((n, "go"), {})
            py, go = py_result.get(key), go_result.get(key)
            numbers = isinstance(py, float | int) and isinstance(go, float | int)
            comparable = not (over_backlog(py_result, key) or over_backlog(go_result, key))
            ratio = (
                f"{py / go:.2f}"
                if numbers and comparable and py and go and "load_average" not in key
                else "—"
            )
            cells += [shown(py, unit), shown(go, unit), ratio]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    for r in results:
        if "error" in r:
            lines.append(f"\n{IMPL_NAMES[r['impl']]} at {r['nodes']:,} Nodes: **{r['error']}**")
    return "\n".join(lines) + "\n"


# -- main ---------------------------------------------------------------------------

SMOKE = {
    "sizes": [300],
    "status_period": 20.0,
    "idle_quiet": 5.0,
    "burst": 50,
    "settle": 2.0,
    "restarts": 2,
}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    form = parser.add_mutually_exclusive_group()
    form.add_argument("--short", action="store_true", help="5,000 Nodes only")
    form.add_argument("--smoke", action="store_true", help="300 Nodes, short periods (CI)")
    parser.add_argument("--sizes", type=int, nargs="+", default=None)
    parser.add_argument("--impls", nargs="+", choices=IMPLS, default=list(IMPLS))
    parser.add_argument("--status-period", type=float, default=None, help="seconds (120)")
    parser.add_argument("--idle-quiet", type=float, default=None, help="seconds (30)")
    parser.add_argument("--burst", type=int, default=None, help="Nodes joining, then leaving")
    parser.add_argument("--not-ready", type=float, default=0.01, help="fraction of Nodes")
    parser.add_argument("--settle", type=float, default=None)
    parser.add_argument("--kube-api-qps", type=float, default=1000.0)
    parser.add_argument("--kube-api-burst", type=int, default=2000)
    parser.add_argument(
        "--rss-cap",
        type=float,
        default=12 * 1024,
        help="MiB: a daemon is stopped past this RSS (or when the machine has under "
        f"{MEMORY_FLOOR_MIB} MiB left) and its size reported as not fitting",
    )
    parser.add_argument(
        "--daemon-budget",
        type=float,
        default=None,
        help="seconds each daemon's run may take (seeding excluded); past it the step under "
        "way is reported as not finished, with the figures measured until then",
    )
    parser.add_argument(
        "--one-cluster",
        action="store_true",
        help="seed one cluster per size (kube-ccm's providerIDs) and run kube-ccm, then the "
        "Go CCM over it (gosim adopts the InternalIPs and ingress IPs): one seeding, not two",
    )
    parser.add_argument(
        "--backend-names",
        action="store_true",
        help="kube-ccm's simulated cloud stores every LB's node names (default: a count and "
        "a digest, as gosim; the names cost gigabytes of SQLite writes past 15,000 Nodes)",
    )
    parser.add_argument(
        "--restarts",
        type=int,
        default=None,
        help="restarts over the synced cluster per size and daemon, each one's start-up "
        "reported (3; upstream's start-up race is won or lost per restart)",
    )
    parser.add_argument(
        "--startup-cap",
        type=float,
        default=600.0,
        help="seconds a restart may take to its first complete sync (every queue drained) "
        "before it is reported as not reached, with the work still queued",
    )
    parser.add_argument(
        "--quiet-cap",
        type=float,
        default=600.0,
        help="seconds a burst may take to go quiet (every queue drained) before it is "
        "reported as not reached, with the work left",
    )
    parser.add_argument("--markdown", type=Path, default=None)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args(argv)
    defaults: dict[str, Any] = {
        "sizes": [5_000] if args.short else list(FULL_SIZES),
        "status_period": 120.0,
        "idle_quiet": 30.0,
        "burst": 1000,
        "settle": 5.0,
        "restarts": 3,
    }
    if args.smoke:
        defaults |= SMOKE
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    args = parse_args(argv)
    binaries = ensure_binaries()
    goccm = ensure_goccm() if "go" in args.impls else Path()
    info = header(binaries)
    info["load_average_1m_at_start"] = load_average()
    emit({"benchmark": "scale", "header": info})
    results: list[dict[str, Any]] = []
    serial = itertools.count(1)
    with tempfile.TemporaryDirectory(prefix="kube-ccm-scale-") as tmp:
        scratch = args.workdir or Path(tmp)
        scratch.mkdir(parents=True, exist_ok=True)
        for turn, size in enumerate(args.sizes):
            plan = Plan.of(size, args)
            order = list(args.impls) if turn % 2 == 0 else list(reversed(args.impls))
            if args.one_cluster:
                order = sorted(args.impls, key=IMPLS.index)  # kube-ccm provisions the LBs

            def bed_for(plan: Plan = plan, size: int = size) -> Bed:
                plane = ControlPlane(CONTROL_PLANE, binaries=binaries).start()
                return Bed(
                    plane,
                    goccm,
                    scratch / f"{size}-{next(serial)}",
                    args.kube_api_qps,
                    args.kube_api_burst,
                    settle=plan.settle,
                    status_period=plan.status_period,
                    idle_quiet=plan.idle_quiet,
                )

            results += asyncio.run(run_size(bed_for, plan, order, one_cluster=args.one_cluster))
    title = (
        f"Scale, side by side with the Go CCM — load avg (1 m) {info['load_average_1m_at_start']} "
        f"at start, {load_average()} at the end — {header_line(info)}"
    )
    append_markdown(args.markdown, table(title, results))
    return results


if __name__ == "__main__":
    main()
