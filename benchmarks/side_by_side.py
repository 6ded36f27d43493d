"""kube-ccm beside the upstream Go cloud-controller-manager, on one control plane.

    .venv/bin/python benchmarks/side_by_side.py [--quick]
        [--scenarios node_init lb rss startup idle] [--runs 1]
        [--impls py go [py:kube-api-transport=curl]]
        [--nodes 1000] [--latency 0 0.05] [--workers 1 16] [--qps-levels high default]
        [--services 500] [--lb-workers 16]
        [--cluster-nodes 5000] [--cluster-services 2000] [--cluster-workers 16]
        [--status-period 300] [--idle-quiet 60]
        [--kube-api-qps 1000 --kube-api-burst 2000] [--settle 5]
        [--markdown docs/benchmarks.md] [--workdir DIR]

One kube-apiserver + etcd (Service CIDR /16) for the whole run. For every cell
and run, kube-ccm (``kube-ccm run``, simulated cloud) and the Go CCM
(``benchmarks/goccm``: k8s.io/cloud-provider v0.36.3 with the in-memory ``gosim``
cloud, built and cached by ``benchmarks/goccm.py``) run one after the other, with
the same flags (``--leader-elect=false``, ``--controllers``, ``--concurrent-*-syncs``,
``--kube-api-qps/burst``, a secure port on 127.0.0.1 with ``/metrics`` open) and
the same per-call cloud latency; which one goes first alternates from cell to
cell and run to run. ``--impls`` may add kube-ccm with more flags as a side of its
own (``py:kube-api-transport=curl``), with its own columns and ratio to Go.
``--quick`` makes every size small (a few minutes in all).

* ``node_init``: the cluster's Nodes are deleted, N Nodes are registered as a
  kubelet with ``--cloud-provider=external`` does (the uninitialised taint), then
  the daemon runs ``cloud-node,cloud-node-lifecycle`` (with
  ``--node-status-update-frequency=1h``, as ``node_init.py``) until a watch in the
  driver has seen every node with a providerID and without the taint. Cells:
  latency, workers and QPS level (``high``: ``--kube-api-qps/burst``, 1000/2000;
  ``default``: both daemons' defaults, 20/30). Measured: nodes/s from the first
  to the last initialised node and from daemon start; daemon CPU per node
  (``/proc/<pid>/stat`` utime+stime summed over the daemon's process tree,
  start-up included, and from the first initialised node to the last);
  kube-apiserver CPU per node; RSS (VmRSS ``--settle`` seconds after the last
  node, and VmHWM); the apiserver's write counts per node (nodes, events); cloud
  calls per node.
* ``lb``: the cluster's Nodes are replaced by 3 initialised ones (each with a
  providerID of the running side's scheme: kube-ccm leaves other providers'
  Nodes out of its load balancers), M LoadBalancer Services are created, then
  the daemon runs ``service`` until a watch in the driver has seen an ingress IP
  on every Service. Measured: Services/s from the first to the last ingress and
  from daemon start, daemon CPU per Service, kube-apiserver CPU per Service,
  RSS, writes per Service (services, events), cloud calls per Service, backend
  nodes per load balancer. The Services are then deleted (finalizers stripped:
  no daemon is running).
* ``rss``, ``startup``, ``idle``: one large cluster per daemon run, shared by the
  three (any of them selects the run; ``--cluster-nodes`` Nodes,
  ``--cluster-services`` LoadBalancer Services, high QPS, the first
  ``--latency``). The cluster is emptied, the Nodes registered uninitialised, and
  a first daemon (``cloud-node,cloud-node-lifecycle,service``,
  ``--node-status-update-frequency=--status-period``) is started: *cold start*,
  seconds from its start until a driver watch has seen every Node initialised;
  then the Services are created, and the seconds until every one has an ingress.
  ``--settle`` s later its VmRSS (*RSS steady, populating*) and VmHWM (*peak*).
  It is stopped and a second daemon of the same side started over the synced
  cluster (kube-ccm: the same simulated-cloud database; Go: gosim adopts the
  zone, InternalIP and ingress IP each object already shows), which should
  write nothing. *Start-up* milestones, from its process start, polled every
  0.25 s on its own ``/metrics`` (the same names on both sides):

  - *listed*: ``workqueue_adds_total`` of the ``Nodes`` queue (cloud node
    controller) >= Nodes and of the ``service`` queue >= Services: the informers
    have listed every object and handed it to the controllers;
  - *reconciled*: ``workqueue_work_duration_seconds_count`` (items finished)
    >= Nodes and >= Services, and ``workqueue_depth`` 0 on both queues: every
    object's first reconcile has finished (for a Service, its
    ``EnsureLoadBalancer``);
  - *address pass*: ``InstanceMetadata`` cloud calls >= Nodes (the node
    controller's first ``--node-status-update-frequency`` pass, which is no
    work-queue in Go: gosim's ``gosim_cloud_calls_total``, kube-ccm's simulated
    cloud counters);
  - *first complete sync*: the later of the last two; daemon CPU seconds until
    then; Node and Service writes during start-up (the apiserver's counts).

  ``idle``: ``--settle`` s after the first complete sync, the daemon's CPU % of
  one core over ``--idle-quiet`` s (nothing changes, no refresh due) and over one
  whole ``--status-period`` from the same start (until the address refresh it
  contains has asked the cloud about every node), with the refresh's cloud
  calls and the daemon's own API requests per minute
  (``rest_client_requests_total``). *RSS steady, restarted* is the second
  daemon's VmRSS at the end, *peak* its VmHWM.

``--impls`` may add kube-ccm with extra flags as its own side, ``py:FLAG=VALUE``
(``py:worker-processes=2``): it runs in turn with the others and gets its own column
and ratio to Go. Every side's CPU and RSS are summed over its process tree (the
worker processes of ``--worker-processes``), and *API watches held* counts the
watches the apiserver serves while the daemon runs (``apiserver_longrunning_requests``,
verb WATCH, less the driver's own).

Prints one JSON object per daemon run and one per cell with the Py/Go ratios;
``--markdown`` appends a table (medians over the runs) with a Py/Go column.
A daemon run that fails or times out is reported as ``error`` and left out of
the medians. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
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
    register_nodes,
    request_counts,
    tree_cpu_seconds,
    tree_memory_mib,
    watch_count,
    writes,
)
from goccm import GoCCMProcess, ensure_goccm, goccm_args, gosim_calls, gosim_state
from prometheus_client.parser import text_string_to_metric_families

from kube_ccm.api.objects import Service
from kube_ccm.runtime.client import ApiError, KubeClient
from kube_ccm.runtime.informer import Informer
from kube_ccm.runtime.resources import SERVICES
from kube_ccm.sandbox.kubelets import node_manifest
from kube_ccm.testing.binaries import ensure_binaries
from kube_ccm.testing.controlplane import ControlPlane, ControlPlaneOptions
from kube_ccm.testing.daemon import DaemonProcess, ManagedProcess

IMPLS = ("py", "go")
IMPL_NAMES = {"py": "kube-ccm", "go": "Go CCM"}


def impl_arg(text: str) -> str:
    """``py``, ``go``, or ``py:FLAG=VALUE[,FLAG=VALUE]``: kube-ccm with those flags too
    (``py:kube-api-transport=curl``), as a side of its own in the same run."""
    side, _, flags = text.partition(":")
    if side not in IMPLS or (flags and side != "py"):
        raise argparse.ArgumentTypeError(f"{text!r}: py, go or py:FLAG=VALUE[,FLAG=VALUE]")
    return text


def side_of(impl: str) -> str:
    """Which daemon ``impl`` runs: ``py`` (with or without extra flags) or ``go``."""
    return impl.partition(":")[0]


def extra_flags(impl: str) -> list[str]:
    """kube-ccm's extra flags of a ``py:FLAG=VALUE,...`` impl."""
    flags = impl.partition(":")[2]
    return [f"--{flag}" for flag in flags.split(",")] if flags else []


def impl_label(impl: str) -> str:
    return "kube-ccm (Py)" if impl == "py" else f"kube-ccm ({impl.partition(':')[2]})"


CLUSTER_SCENARIOS = ("rss", "startup", "idle")
SCENARIOS = ("node_init", "lb", *CLUSTER_SCENARIOS)
LB_POOL = "10.200.0.0/16"
SERVICE_CIDR = "10.96.0.0/16"  # 500+ Services do not fit the test bed's default /24
LB_NODES = 3
DEFAULT_QPS = (20.0, 30)
"""``--kube-api-qps/burst`` defaults of both daemons (the ``default`` QPS level)."""
NODE_QUEUE = "Nodes"  # the cloud node controller's work queue, on both sides
SERVICE_QUEUE = "service"  # the service controller's


@dataclass
class Running:
    """A started daemon of either side, with a way to read its cloud call counts."""

    impl: str
    daemon: ManagedProcess
    port: int
    calls: Callable[[], Awaitable[Counter[str]]]
    backends: Callable[[], Awaitable[tuple[int, int]]]
    """(load balancers, backend nodes summed over them) in the cloud."""
    calls_in: Callable[[str], Awaitable[Counter[str]]]
    """The cloud call counts, given a ``/metrics`` text just scraped (Go's are in it)."""


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
    status_period: float = 300.0
    idle_quiet: float = 60.0
    restarts: int = 3
    """Restarts of the second daemon over the synced cluster, each one's start-up reported."""
    startup_cap: float = 600.0
    """Seconds a restart may take to its first complete sync before it is reported as
    not reached (the Go CCM's lost start-up race drains for up to hours)."""
    serial: int = 0

    def workdir(self, impl: str) -> Path:
        self.serial += 1
        return self.scratch / f"{self.serial:03d}-{impl.replace(':', '-').replace('=', '-')}"


def start_daemon(
    bed: Bed,
    impl: str,
    *,
    controllers: str,
    workers: int,
    latency: float,
    qps: float,
    burst: int,
    extra: Sequence[str] = (),
    workdir: Path | None = None,
    load_balancer: Mapping[str, Any] | None = None,
) -> Running:
    """Start ``impl``'s daemon; a ``workdir`` given again reuses kube-ccm's cloud database.
    ``load_balancer``: more of kube-ccm's simulated-cloud ``loadBalancer`` settings."""
    port = free_port()
    workdir = workdir or bed.workdir(impl)
    if side_of(impl) == "py":
        daemon = DaemonProcess(
            kubeconfig=bed.plane.kubeconfig,
            workdir=workdir,
            cloud_config={
                "unknownNodes": "create",
                "latency": f"{latency * 1000:g}ms",
                "loadBalancer": {"ipPool": [LB_POOL], **(load_balancer or {})},
            },
            args=[
                *daemon_args(
                    controllers=controllers,
                    node_workers=workers,
                    service_workers=workers,
                    qps=qps,
                    burst=burst,
                ),
                *SecurePort.args(port),
                *extra,
                *extra_flags(impl),
            ],
        ).start()

        async def py_calls() -> Counter[str]:  # also once the daemon has stopped
            return Counter({m: c["count"] for m, c in daemon.cloud.calls().items()})

        async def py_backends() -> tuple[int, int]:
            lbs = daemon.cloud.load_balancers()
            return len(lbs), sum(len(lb.nodes) for lb in lbs)

        async def py_calls_in(_text: str) -> Counter[str]:
            return await py_calls()

        return Running(impl, daemon, port, py_calls, py_backends, py_calls_in)
    go = GoCCMProcess(
        bed.goccm,
        goccm_args(
            kubeconfig=bed.plane.kubeconfig,
            port=port,
            controllers=controllers,
            node_workers=workers,
            service_workers=workers,
            qps=qps,
            burst=burst,
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

    async def go_calls_in(text: str) -> Counter[str]:
        return gosim_calls(text)

    return Running(impl, go, port, go_calls, go_backends, go_calls_in)


async def wait_for(
    predicate: Callable[[], Awaitable[bool]],
    limit: float,
    interval: float,
    what: str,
    daemon: ManagedProcess,
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
    provider_id = PROVIDER_IDS[side_of(impl)].format(name=name, index=index)
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
        self.informer: Informer[Service] = Informer(client, SERVICES)
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
    bed: Bed, impl: str, *, nodes: int, latency: float, workers: int, qps: float, burst: int
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
        watches_before = await watch_count(client)
        api_cpu_before = apiserver_cpu(bed.plane)
        started = time.monotonic()
        running = start_daemon(
            bed,
            impl,
            controllers="cloud-node,cloud-node-lifecycle",
            workers=workers,
            latency=latency,
            qps=qps,
            burst=burst,
            extra=["--node-status-update-frequency=1h"],
        )
        daemon = running.daemon
        try:
            observed = watch
            at_first: list[tuple[float, int]] = []  # (daemon CPU, nodes done) when first seen

            async def all_done() -> bool:
                done = observed.initialised()
                if done and not at_first:
                    at_first.append((tree_cpu_seconds(daemon.pid), done))
                return done == nodes

            # At 20 QPS the node controller's 2 writes per node take 0.1 s a node.
            limit = max(600.0, nodes * (latency + 0.05 + 2 / qps) * 4)
            finished = await wait_for(all_done, limit, 0.05, "every node initialised", daemon)
            first = min(watch.done_at.values())
            cpu_done = tree_cpu_seconds(daemon.pid)
            watches = await watch_count(client) - watches_before
            await asyncio.sleep(bed.settle)  # trailing status patches and events
            memory = tree_memory_mib(daemon.pid)
            cpu = tree_cpu_seconds(daemon.pid)
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
        "kube_api_qps": qps,
        "kube_api_burst": burst,
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
        "api_watches": watches,
        "node_writes_per_node": round(writes(delta, "nodes") / nodes, 3),
        "event_writes_per_node": round(writes(delta, "events") / nodes, 3),
        "cloud_calls_per_node": round(sum(calls.values()) / nodes, 3),
        "cloud_calls": dict(calls),
        "event_reasons": reasons,
        "requests": by_verb_resource(delta),
    }


async def lb_run(
    bed: Bed, impl: str, *, services: int, latency: float, workers: int, qps: float, burst: int
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
        watches_before = await watch_count(client)
        api_cpu_before = apiserver_cpu(bed.plane)
        started = time.monotonic()
        running = start_daemon(
            bed,
            impl,
            controllers="service",
            workers=workers,
            latency=latency,
            qps=qps,
            burst=burst,
        )
        daemon = running.daemon
        try:
            observed = watch

            async def all_ingress() -> bool:
                return len(observed.done_at) == services

            limit = max(600.0, services * (latency + 0.05) * 4)
            finished = await wait_for(all_ingress, limit, 0.05, "every Service's ingress", daemon)
            first = min(watch.done_at.values())
            watches = await watch_count(client) - watches_before
            listed = await count_ingress(client)  # the watch's verdict, checked by a LIST
            await asyncio.sleep(bed.settle)  # trailing events
            memory = tree_memory_mib(daemon.pid)
            cpu = tree_cpu_seconds(daemon.pid)
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
        "kube_api_qps": qps,
        "kube_api_burst": burst,
        "services_per_second": round(services / max(finished - first, 1e-9), 1),
        "services_per_second_from_start": round(services / (finished - started), 1),
        "services_with_ingress_listed": listed,
        "seconds_from_start": round(finished - started, 2),
        "daemon_cpu_ms_per_service": round(1000 * cpu / services, 2),
        "apiserver_cpu_ms_per_service": round(1000 * api_cpu / services, 2),
        "rss_mib": memory.get("VmRSS", 0.0),
        "peak_rss_mib": memory.get("VmHWM", 0.0),
        "api_watches": watches,
        "service_writes_per_service": round(writes(delta, "services") / services, 3),
        "event_writes_per_service": round(writes(delta, "events") / services, 3),
        "cloud_calls_per_service": round(sum(calls.values()) / services, 3),
        "load_balancers": load_balancers,
        "backends_per_load_balancer": round(backends / max(load_balancers, 1), 3),
        "cloud_calls": dict(calls),
        "event_reasons": reasons,
        "requests": by_verb_resource(delta),
    }


# -- the large cluster: RSS, start-up, idle ------------------------------------------------------


async def scrape(port: int) -> str:
    """The daemon's ``/metrics`` text ("" while its secure port is not up yet)."""
    try:
        return (await SecurePort(port).get("/metrics")).text
    except httpx2.HTTPError:
        return ""


PENDING_NODE_PASS = "kube_ccm_service_node_pass_pending"
"""kube-ccm's gauge: 1 while the service controller's debounced node pass waits for its
quiet spell (work no queue shows yet). The Go CCM queues its ``node`` keys at once."""


@dataclass
class Queues:
    """The ``workqueue_*`` samples both daemons export, by queue name, and kube-ccm's
    pending node pass."""

    adds: Counter[str]
    done: Counter[str]
    """``workqueue_work_duration_seconds_count``: items whose processing finished."""
    depth: dict[str, int]
    pending: int = 0
    """:data:`PENDING_NODE_PASS` (0 on the Go side)."""

    @classmethod
    def parse(cls, text: str) -> Queues:
        adds: Counter[str] = Counter()
        done: Counter[str] = Counter()
        depth: dict[str, int] = {}
        pending = 0
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                queue = sample.labels.get("name", "")
                if sample.name == "workqueue_adds_total":
                    adds[queue] += int(sample.value)
                elif sample.name == "workqueue_work_duration_seconds_count":
                    done[queue] += int(sample.value)
                elif sample.name == "workqueue_depth":
                    depth[queue] = depth.get(queue, 0) + int(sample.value)
                elif sample.name == PENDING_NODE_PASS:
                    pending += int(sample.value)
        return cls(adds, done, depth, pending)

    def listed(self, counts: dict[str, int]) -> bool:
        """Every object of each queue has been added (the informers listed them)."""
        return all(self.adds[q] >= n for q, n in counts.items())

    def backlog(self) -> dict[str, int]:
        """The work not finished, by queue: an item added (a queue counts an add only
        when the item was not already waiting) and not yet done is queued or in
        flight, so ``adds - done`` (at least the depth) is what is left; kube-ccm's
        pending node pass counts as one. Every queue the daemon exports is read, not
        only those a milestone names (upstream's ``node`` queue is where a lost
        start-up race shows)."""
        left = {
            queue: count
            for queue in sorted(set(self.adds) | set(self.depth))
            if (count := max(self.depth.get(queue, 0), self.adds[queue] - self.done[queue])) > 0
        }
        if self.pending:
            left["node pass (pending)"] = self.pending
        return left

    def drained(self) -> bool:
        """Nothing queued, nothing in flight, in any queue."""
        return not self.backlog()

    def reconciled(self, counts: dict[str, int]) -> bool:
        """Every object of each named queue processed once, and every queue drained."""
        return all(self.done[q] >= n and q in self.depth for q, n in counts.items()) and (
            self.drained()
        )


async def first_complete_sync(
    running: Running,
    queues: dict[str, int],
    nodes: int,
    base: Counter[str],
    *,
    cap: float,
    started: float,
) -> dict[str, Any]:
    """A (re)started daemon's milestones, in seconds from now: every object of
    ``queues`` added (*listed*); every one processed once with every queue the daemon
    exports drained (*reconciled*); one ``InstanceMetadata`` per Node (*address pass*).
    *First complete sync* is the later of the last two. One not reached within ``cap``
    seconds is reported as such, with the backlog and the CPU at the cap: never a
    figure that reads as a success. ``started``: the monotonic time of the launch."""
    pid = running.daemon.pid
    marks: dict[str, float] = {}
    cpu_at: dict[str, float] = {}
    last = Queues(Counter(), Counter(), {})
    while len(marks) < 3:
        text = await scrape(running.port)
        now = time.monotonic() - started
        if text:
            last = Queues.parse(text)
            calls = await running.calls_in(text) - base
            for name, reached in (
                ("listed", last.listed(queues)),
                ("reconciled", last.reconciled(queues)),
                ("address_pass", calls["InstanceMetadata"] >= nodes),
            ):
                if reached and name not in marks:
                    marks[name] = now
                    cpu_at[name] = tree_cpu_seconds(pid)
        if running.daemon.poll() is not None:
            raise RuntimeError(
                f"the daemon exited before its first complete sync:\n{running.daemon.log()[-3000:]}"
            )
        if len(marks) < 3 and now > cap:
            break
        await asyncio.sleep(0.25)
    out: dict[str, Any] = {
        f"startup_{name}_seconds": round(marks[name], 2)
        for name in ("listed", "reconciled", "address_pass")
        if name in marks
    }
    if len(marks) == 3:
        out["startup_outcome"] = "complete"
        out["startup_complete_seconds"] = round(max(marks["reconciled"], marks["address_pass"]), 2)
        out["startup_cpu_seconds"] = round(max(cpu_at.values()), 2)
    else:
        out["startup_outcome"] = f"not reached within {cap:g} s"
        out["startup_backlog_at_cap"] = last.backlog()
        out["startup_cpu_seconds_to_cap"] = round(tree_cpu_seconds(pid), 2)
    out["startup_rss_mib"] = tree_memory_mib(pid).get("VmRSS", 0.0)
    return out


def restart_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Every restart's outcome, in order (``startup_outcomes``), and the medians of
    the milestones only when every restart reached its first complete sync: a lost
    start-up race leaves the figures out rather than a median that reads as success."""
    complete = [r for r in runs if r["startup_outcome"] == "complete"]
    out: dict[str, Any] = {
        "startup_runs": runs,
        "startup_outcomes": ", ".join(
            f"{r['startup_complete_seconds']:g} s" if r in complete else r["startup_outcome"]
            for r in runs
        ),
    }
    if runs and len(complete) == len(runs):
        for key in (
            "startup_listed_seconds",
            "startup_reconciled_seconds",
            "startup_address_pass_seconds",
            "startup_complete_seconds",
            "startup_cpu_seconds",
        ):
            out[key] = statistics.median(r[key] for r in runs)
    return out


def api_requests(text: str) -> int:
    """The daemon's own ``rest_client_requests_total``, summed (both sides export it)."""
    total = 0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "rest_client_requests_total":
                total += int(sample.value)
    return total


CLUSTER_CONTROLLERS = "cloud-node,cloud-node-lifecycle,service"


async def cluster_run(
    bed: Bed,
    impl: str,
    *,
    nodes: int,
    services: int,
    latency: float,
    workers: int,
    idle: bool,
) -> dict[str, Any]:
    """Populate a cluster with a first daemon, restart it, time its first complete sync, idle."""
    client = KubeClient.from_kubeconfig(bed.plane.kubeconfig)
    workdir = bed.workdir(impl)
    period = bed.status_period

    def launch() -> Running:
        return start_daemon(
            bed,
            impl,
            controllers=CLUSTER_CONTROLLERS,
            workers=workers,
            latency=latency,
            qps=bed.qps,
            burst=bed.burst,
            extra=[f"--node-status-update-frequency={period:g}s"],
            workdir=workdir,  # the second daemon finds kube-ccm's cloud database
        )

    out: dict[str, Any] = {
        "benchmark": "side_by_side",
        "scenario": "cluster",
        "impl": impl,
        "nodes": nodes,
        "services": services,
        "cloud_latency_ms": latency * 1000,
        "workers": workers,
        "kube_api_qps": bed.qps,
        "kube_api_burst": bed.burst,
        "status_period_s": period,
    }
    try:
        await clear_services(client)
        await clear_nodes(client)
        await clear_events(client)
        begun = time.monotonic()
        await register_nodes(client, [f"big-{i:05d}" for i in range(nodes)])
        out["register_seconds"] = round(time.monotonic() - begun, 1)

        # The first daemon: every Node initialised, then every Service provisioned.
        node_watch = await NodeWatch(client).start()
        out["load_average_1m"] = load_average()
        started = time.monotonic()
        first = launch()
        try:
            watched = node_watch

            async def all_nodes() -> bool:
                return watched.initialised() == nodes

            limit = max(900.0, nodes * (latency + 0.05) * 4)
            done = await wait_for(all_nodes, limit, 0.1, "every node initialised", first.daemon)
            node_watch.stop()
            out["cold_nodes_seconds"] = round(done - started, 2)
            created = time.monotonic()
            await create_services(client, [f"big-lb-{i:05d}" for i in range(services)])
            ingress = await IngressWatch(client).start()

            async def all_ingress() -> bool:
                return len(ingress.done_at) == services

            limit = max(900.0, services * (latency + 0.05) * 4)
            done = await wait_for(all_ingress, limit, 0.1, "every Service's ingress", first.daemon)
            ingress.stop()
            out["cold_services_seconds"] = round(done - created, 2)
            await asyncio.sleep(bed.settle)
            memory = tree_memory_mib(first.daemon.pid)
            out["populate_rss_mib"] = memory.get("VmRSS", 0.0)
            out["populate_peak_rss_mib"] = memory.get("VmHWM", 0.0)
        finally:
            first.daemon.stop()

        # The second daemon over the synced cluster, restarted ``bed.restarts`` times:
        # each restart's first complete sync; the last one's writes, idle and memory.
        queues = {NODE_QUEUE: nodes, SERVICE_QUEUE: services}
        runs: list[dict[str, Any]] = []
        for attempt in range(bed.restarts):
            await asyncio.sleep(1.0)
            # kube-ccm's database keeps counting; gosim is a new process each time.
            base_calls = Counter() if side_of(impl) == "go" else await first.calls()
            before = await request_counts(client)
            load = load_average()
            started = time.monotonic()
            second = launch()
            daemon = second.daemon
            try:
                run = await first_complete_sync(
                    second, queues, nodes, base_calls, cap=bed.startup_cap, started=started
                )
                runs.append(run | {"load_average_1m": load})
                if attempt < bed.restarts - 1:
                    continue
                out |= restart_summary(runs)
                out["startup_rss_mib"] = run["startup_rss_mib"]
                await asyncio.sleep(bed.settle)
                delta = await request_counts(client) - before
                out["startup_node_writes"] = writes(delta, "nodes")
                out["startup_service_writes"] = writes(delta, "services")
                startup_calls = await second.calls() - base_calls
                out["startup_ensure_calls"] = startup_calls["EnsureLoadBalancer"]
                out["startup_update_calls"] = startup_calls["UpdateLoadBalancer"]
                out["startup_cloud_calls"] = dict(startup_calls)
                out["startup_requests"] = by_verb_resource(delta)

                if idle:
                    out.update(await idle_window(bed, second, base_calls, nodes=nodes))
                memory = tree_memory_mib(daemon.pid)
                out["restart_rss_mib"] = memory.get("VmRSS", 0.0)
                out["restart_peak_rss_mib"] = memory.get("VmHWM", 0.0)
            finally:
                daemon.stop()
    finally:
        await client.aclose()
    return out


async def idle_window(
    bed: Bed, running: Running, base_calls: Counter[str], *, nodes: int
) -> dict[str, Any]:
    """CPU % over ``idle_quiet`` s, then over a whole status period (one address refresh)."""
    pid = running.daemon.pid
    period = bed.status_period

    async def sample() -> tuple[float, float, Counter[str], int, dict[str, int]]:
        text = await scrape(running.port)
        return (
            time.monotonic(),
            tree_cpu_seconds(pid),
            await running.calls_in(text) - base_calls,
            api_requests(text),
            Queues.parse(text).backlog(),
        )

    t0, cpu0, calls0, requests0, backlog0 = await sample()
    await asyncio.sleep(min(bed.idle_quiet, period))
    t1, cpu1, calls1, _, _ = await sample()
    await asyncio.sleep(max(0.0, t0 + period - time.monotonic()))
    t2, cpu2, calls2, requests2, backlog2 = await sample()
    deadline = t0 + 1.5 * period + 60
    while calls2["InstanceMetadata"] - calls0["InstanceMetadata"] < nodes:
        if time.monotonic() > deadline:
            break  # reported: the refresh calls fall short of the nodes
        if running.daemon.poll() is not None:
            raise RuntimeError(f"the daemon exited while idle:\n{running.daemon.log()[-3000:]}")
        await asyncio.sleep(2.0)
        t2, cpu2, calls2, requests2, backlog2 = await sample()
    return {
        "idle_backlog_at_start": backlog0,
        "idle_backlog_at_end": backlog2,
        "idle_quiet_seconds": round(t1 - t0, 1),
        "idle_cpu_pct_quiet": round(100 * (cpu1 - cpu0) / (t1 - t0), 3),
        "idle_quiet_cloud_calls": sum((calls1 - calls0).values()),
        "idle_period_seconds": round(t2 - t0, 1),
        "idle_cpu_pct_period": round(100 * (cpu2 - cpu0) / (t2 - t0), 3),
        "idle_refresh_calls": calls2["InstanceMetadata"] - calls0["InstanceMetadata"],
        "idle_period_cloud_calls": dict(calls2 - calls0),
        "idle_api_requests_per_min": round(60 * (requests2 - requests0) / (t2 - t0), 1),
    }


# -- cells, ratios, the table ---------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    scenario: str
    """``node_init``, ``lb`` or ``cluster`` (the ``rss``, ``startup`` and ``idle`` runs)."""
    size: int
    latency: float
    workers: int
    qps: float
    burst: int
    services: int = 0
    """``cluster``: the LoadBalancer Services beside the ``size`` Nodes."""

    def describe(self, status_period: float = 300.0) -> str:
        where = f"{self.latency * 1000:g} ms, {self.workers} w, QPS {self.qps:g}/{self.burst}"
        if self.scenario == "cluster":
            return (
                f"{self.size} nodes + {self.services} LB Services, {where}, "
                f"status period {status_period:g} s"
            )
        what = "nodes" if self.scenario == "node_init" else "LB Services"
        return f"{self.size} {what}, {where}"


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
        ("api_watches", "API watches held", ""),
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
        ("api_watches", "API watches held", ""),
        ("service_writes_per_service", "Service writes/Service", ""),
        ("event_writes_per_service", "Event writes/Service", ""),
        ("cloud_calls_per_service", "cloud calls/Service", ""),
        ("backends_per_load_balancer", "backend nodes/LB (of 3)", ""),
        ("load_average_1m", "load avg (1 m) at start", ""),
    ),
    "rss": (
        ("populate_rss_mib", "RSS steady, after initialising every node and Service", " MiB"),
        ("populate_peak_rss_mib", "RSS peak, initialising", " MiB"),
        ("restart_rss_mib", "RSS steady, restarted over the synced cluster", " MiB"),
        ("restart_peak_rss_mib", "RSS peak, restarted", " MiB"),
    ),
    "startup": (
        ("cold_nodes_seconds", "cold start: every Node initialised (from daemon start)", " s"),
        ("cold_services_seconds", "then every Service's ingress (from their creation)", " s"),
        ("startup_listed_seconds", "restart: every Node and Service queued", " s"),
        ("startup_outcomes", "restart: each restart's first complete sync", ""),
        (
            "startup_reconciled_seconds",
            "restart: every Node and Service reconciled once, every queue drained",
            " s",
        ),
        ("startup_address_pass_seconds", "restart: first address pass over every node", " s"),
        ("startup_complete_seconds", "restart: start-up to first complete sync", " s"),
        ("startup_cpu_seconds", "restart: daemon CPU to first complete sync", " s"),
        ("startup_node_writes", "restart: Node writes", ""),
        ("startup_service_writes", "restart: Service writes", ""),
        ("startup_ensure_calls", "restart: EnsureLoadBalancer calls", ""),
        ("startup_update_calls", "restart: UpdateLoadBalancer calls", ""),
    ),
    "idle": (
        ("idle_cpu_pct_quiet", "idle CPU, between address refreshes", " %"),
        ("idle_cpu_pct_period", "idle CPU over one status period (one address refresh)", " %"),
        ("idle_refresh_calls", "InstanceMetadata calls in that period", ""),
        ("idle_api_requests_per_min", "daemon API requests/min over that period", ""),
    ),
}
CLUSTER_LOAD = (("load_average_1m", "load avg (1 m) at start", ""),)


def cell_metrics(cell: Cell, chosen: Sequence[str]) -> tuple[tuple[str, str, str], ...]:
    if cell.scenario != "cluster":
        return METRICS[cell.scenario]
    keys: tuple[tuple[str, str, str], ...] = ()
    for scenario in CLUSTER_SCENARIOS:
        if scenario in chosen:
            keys += METRICS[scenario]
    return keys + CLUSTER_LOAD


def median(results: list[dict[str, Any]], key: str) -> float | str | None:
    """The median of a figure over the runs; text figures (each restart's outcome) are
    listed run by run; a start-up figure is left out if any run's restart did not
    reach its first complete sync (:func:`restart_summary` leaves it out per run)."""
    values = [r[key] for r in results if key in r]
    if values and isinstance(values[0], str):
        return "; ".join(values)
    if key.startswith("startup_") and any(
        "not reached" in r.get("startup_outcomes", "") for r in results
    ):
        return None
    return round(statistics.median(values), 3) if values else None


def summary(
    cell: Cell,
    by_impl: dict[str, list[dict[str, Any]]],
    metrics: Sequence[tuple[str, str, str]],
    impls: Sequence[str] = IMPLS,
) -> dict[str, Any]:
    """Medians per impl and each one's ratio to Go's (``py_over_go``, ``<impl>_over_go``)."""
    out: dict[str, Any] = {
        "benchmark": "side_by_side",
        "summary": cell.scenario,
        "size": cell.size,
        "services": cell.services,
        "cloud_latency_ms": cell.latency * 1000,
        "workers": cell.workers,
        "kube_api_qps": cell.qps,
        "kube_api_burst": cell.burst,
        "runs": max((len(v) for v in by_impl.values()), default=0),
    }
    for key, _label, _unit in metrics:
        go = median(by_impl.get("go", []), key)
        values: dict[str, float | str | None] = {"py": None, "go": go, "py_over_go": None}
        for impl in by_impl.keys() - {"go"} | {"py"}:
            py = median(by_impl.get(impl, []), key)
            values[impl] = py
            both = isinstance(py, float | int) and isinstance(go, float | int)
            values[f"{impl}_over_go"] = (
                round(float(py) / float(go), 2) if both and py and go else None
            )
        out[key] = values
    return out


def _py_go_first(impl: str) -> tuple[int, str]:
    return ({"py": 0, "go": 1}.get(impl, 2), impl)


def table(
    title: str,
    summaries: list[tuple[Cell, dict[str, Any], Sequence[tuple[str, str, str]]]],
    status_period: float,
    impls: Sequence[str] = IMPLS,
) -> str:
    """One column per kube-ccm side, then Go's, then each kube-ccm side over Go."""
    pys = [impl for impl in impls if side_of(impl) == "py"] or ["py"]
    ratios = ["Py/Go" if impl == "py" else f"{impl.partition(':')[2]}/Go" for impl in pys]
    lines = [
        f"\n### {title}\n",
        f"| scenario | metric | {' | '.join(map(impl_label, pys))} | Go CCM | "
        f"{' | '.join(ratios)} |",
        "|:---|:---|" + "---:|" * (2 * len(pys) + 1),
    ]
    for cell, result, metrics in summaries:
        where = cell.describe(status_period)
        for key, label, unit in metrics:
            values = result[key]

            def shown(value: float | str | None, unit: str = unit) -> str:
                if isinstance(value, str):
                    return value
                return "—" if value is None else f"{value:g}{unit}"

            def ratio(impl: str, key: str = key, values: dict[str, Any] = values) -> str:
                value = values.get(f"{impl}_over_go")
                return "—" if value is None or key == "load_average_1m" else f"{value:.2f}"

            mine = " | ".join(shown(values.get(impl)) for impl in pys)
            lines.append(
                f"| {where} | {label} | {mine} | {shown(values['go'])} | "
                f"{' | '.join(ratio(impl) for impl in pys)} |"
            )
    return "\n".join(lines) + "\n"


QPS_LEVELS = ("high", "default")


def cells_of(args: argparse.Namespace) -> list[Cell]:
    levels = {"high": (args.kube_api_qps, args.kube_api_burst), "default": DEFAULT_QPS}
    cells: list[Cell] = []
    if "node_init" in args.scenarios:
        cells += [
            Cell("node_init", n, lat, w, *levels[level])
            for level in args.qps_levels
            for n in args.nodes
            for lat in args.latency
            for w in args.workers
        ]
    if "lb" in args.scenarios:
        cells += [
            Cell("lb", s, lat, w, args.kube_api_qps, args.kube_api_burst)
            for s in args.services
            for lat in args.latency
            for w in args.lb_workers
        ]
    if any(s in args.scenarios for s in CLUSTER_SCENARIOS):
        cells.append(
            Cell(
                "cluster",
                args.cluster_nodes,
                args.latency[0],
                args.cluster_workers,
                args.kube_api_qps,
                args.kube_api_burst,
                services=args.cluster_services,
            )
        )
    return cells


async def one_run(bed: Bed, impl: str, cell: Cell, args: argparse.Namespace) -> dict[str, Any]:
    if cell.scenario == "node_init":
        return await node_init_run(
            bed,
            impl,
            nodes=cell.size,
            latency=cell.latency,
            workers=cell.workers,
            qps=cell.qps,
            burst=cell.burst,
        )
    if cell.scenario == "lb":
        return await lb_run(
            bed,
            impl,
            services=cell.size,
            latency=cell.latency,
            workers=cell.workers,
            qps=cell.qps,
            burst=cell.burst,
        )
    return await cluster_run(
        bed,
        impl,
        nodes=cell.size,
        services=cell.services,
        latency=cell.latency,
        workers=cell.workers,
        idle="idle" in args.scenarios,
    )


async def run_all(
    bed: Bed, args: argparse.Namespace
) -> list[tuple[Cell, dict[str, Any], Sequence[tuple[str, str, str]]]]:
    cells = cells_of(args)
    results: dict[Cell, dict[str, list[dict[str, Any]]]] = {c: {} for c in cells}
    flip = 0
    for run in range(args.runs):
        for cell in cells:
            order = list(args.impls) if flip % 2 == 0 else list(reversed(args.impls))
            flip += 1
            for impl in order:
                started = time.monotonic()
                try:
                    result = await one_run(bed, impl, cell, args)
                except Exception as exc:  # reported, left out of the medians; the run goes on
                    emit(
                        {
                            "benchmark": "side_by_side",
                            "scenario": cell.scenario,
                            "impl": impl,
                            "run": run,
                            "error": f"{type(exc).__name__}: {exc}"[-3000:],
                        }
                    )
                    continue
                result["wall_seconds"] = round(time.monotonic() - started, 1)
                emit({**result, "run": run})
                results[cell].setdefault(impl, []).append(result)
    summaries: list[tuple[Cell, dict[str, Any], Sequence[tuple[str, str, str]]]] = []
    for cell in cells:
        metrics = cell_metrics(cell, args.scenarios)
        result = summary(cell, results[cell], metrics, args.impls)
        emit(result)
        summaries.append((cell, result, metrics))
    return summaries


FULL = {
    "nodes": [1000],
    "services": [500],
    "cluster_nodes": 5000,
    "cluster_services": 2000,
    "status_period": 300.0,
    "idle_quiet": 60.0,
    "settle": 5.0,
}
QUICK = {
    "nodes": [60],
    "services": [30],
    "cluster_nodes": 300,
    "cluster_services": 60,
    "status_period": 30.0,
    "idle_quiet": 10.0,
    "settle": 2.0,
}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="small sizes (a few minutes in all): "
        + ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in QUICK.items()),
    )
    parser.add_argument("--scenarios", nargs="+", choices=SCENARIOS, default=list(SCENARIOS))
    parser.add_argument("--nodes", type=int, nargs="+", default=None, help="node_init")
    parser.add_argument("--services", type=int, nargs="+", default=None, help="lb")
    parser.add_argument("--latency", type=float, nargs="+", default=[0.0, 0.05], help="seconds")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 16], help="node_init")
    parser.add_argument(
        "--qps-levels",
        nargs="+",
        choices=QPS_LEVELS,
        default=list(QPS_LEVELS),
        help="node_init: high (--kube-api-qps/burst) and/or default (20/30, both daemons')",
    )
    parser.add_argument("--lb-workers", type=int, nargs="+", default=[16], help="lb")
    parser.add_argument("--cluster-nodes", type=int, default=None, help="rss, startup, idle")
    parser.add_argument("--cluster-services", type=int, default=None, help="rss, startup, idle")
    parser.add_argument("--cluster-workers", type=int, default=16, help="rss, startup, idle")
    parser.add_argument(
        "--status-period",
        type=float,
        default=None,
        help="seconds: --node-status-update-frequency in rss/startup/idle, and idle's window",
    )
    parser.add_argument(
        "--idle-quiet", type=float, default=None, help="seconds of idle without a refresh"
    )
    parser.add_argument("--kube-api-qps", type=float, default=1000.0)
    parser.add_argument("--kube-api-burst", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument(
        "--restarts",
        type=int,
        default=3,
        help="rss, startup, idle: restarts over the synced cluster, each one's start-up "
        "reported (upstream's start-up race is won or lost per restart)",
    )
    parser.add_argument(
        "--startup-cap",
        type=float,
        default=600.0,
        help="seconds a restart may take to its first complete sync before it is reported "
        "as not reached, with the work still queued",
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=None,
        help="seconds after the last node/ingress before RSS, CPU and counts are read",
    )
    parser.add_argument(
        "--impls",
        nargs="+",
        type=impl_arg,
        default=list(IMPLS),
        help="py, go, and py:FLAG=VALUE[,...] for kube-ccm with more flags "
        "(py:kube-api-transport=curl)",
    )
    parser.add_argument("--markdown", type=Path, default=None)
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="keep every daemon's log (and kube-ccm's cloud.db) here; default: a temporary dir",
    )
    args = parser.parse_args(argv)
    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def main() -> None:
    args = parse_args()
    binaries = ensure_binaries()
    goccm = ensure_goccm() if any(side_of(i) == "go" for i in args.impls) else Path()
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
                plane,
                goccm,
                args.workdir or Path(tmp),
                args.kube_api_qps,
                args.kube_api_burst,
                settle=args.settle,
                status_period=args.status_period,
                idle_quiet=args.idle_quiet,
                restarts=args.restarts,
                startup_cap=args.startup_cap,
            )
            summaries = asyncio.run(run_all(bed, args))
        finally:
            plane.stop()
    runs = f"median of {args.runs} runs" if args.runs > 1 else "1 run"
    quick = "quick form, " if args.quick else ""
    title = (
        f"Side by side with the Go CCM — {quick}{runs}, load avg (1 m) "
        f"{info['load_average_1m_at_start']} at start, {load_average()} at the end — "
        f"{header_line(info)}"
    )
    append_markdown(args.markdown, table(title, summaries, args.status_period, args.impls))


if __name__ == "__main__":
    main()
