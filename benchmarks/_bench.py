"""Shared pieces of the benchmark scripts (not a benchmark itself).

The scripts run as ``.venv/bin/python benchmarks/<name>.py``, so this module is
imported as ``_bench`` (the script's directory is on ``sys.path``).

* measuring: the apiserver's ``apiserver_request_total`` by (verb, resource),
  the daemon's own ``rest_client_requests_total`` from its secure port, CPU
  seconds and RSS of a process from ``/proc``, the 1-minute load average;
* setting up: Nodes as a kubelet with ``--cloud-provider=external`` registers
  them, LoadBalancer Services, a daemon that brings both to a converged state;
* the raw-write baseline: the node controller's two writes per node in a plain
  asyncio loop, no informer, no cloud;
* reporting: a header naming the machine and versions, Markdown tables.
"""

from __future__ import annotations

import asyncio
import compileall
import contextlib
import datetime
import json
import os
import platform
import secrets
import socket
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
from prometheus_client.parser import text_string_to_metric_families

from kube_ccm.api import wellknown as wk
from kube_ccm.api.objects import Node
from kube_ccm.runtime.client import KubeClient
from kube_ccm.runtime.informer import Informer
from kube_ccm.runtime.ratelimit import AsyncTokenBucket
from kube_ccm.runtime.resources import NODES
from kube_ccm.sandbox import node_manifest
from kube_ccm.testing.binaries import Binaries
from kube_ccm.testing.daemon import DaemonProcess

WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "DELETE", "CREATE", "UPDATE", "APPLY"})
NAMESPACE = "default"
SERVICES_PATH = f"/api/v1/namespaces/{NAMESPACE}/services"
RAISED_QPS = 1000.0
RAISED_BURST = 2000
REPO = Path(__file__).resolve().parent.parent


# -- machine and process measurements -------------------------------------------------


def load_average() -> float:
    """The 1-minute load average (the machine is shared: read it before each scenario)."""
    return round(os.getloadavg()[0], 2)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (all its threads), from /proc/<pid>/stat."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return ticks / os.sysconf("SC_CLK_TCK")


def thread_cpu_seconds(pid: int, name: str) -> float:
    """User + system CPU seconds of the process's threads whose OS name is ``name``."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            if (task / "comm").read_text().strip() != name:
                continue
            stat = (task / "stat").read_text()
        except OSError:
            continue  # the thread ended meanwhile
        fields = stat[stat.rindex(")") + 2 :].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def tree_pids(pid: int) -> list[int]:
    """``pid`` and its descendants alive now (``/proc/<pid>/task/*/children``)."""
    found, pending = [], [pid]
    while pending:
        current = pending.pop()
        found.append(current)
        try:
            for task in Path(f"/proc/{current}/task").iterdir():
                pending += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue  # gone meanwhile
    return found


def tree_cpu_seconds(pid: int) -> float:
    """:func:`cpu_seconds` summed over ``pid`` and its live descendants (a daemon's
    worker processes, ``--worker-processes``); the same as it for one process."""
    total = 0.0
    for each in tree_pids(pid):
        with contextlib.suppress(OSError):
            total += cpu_seconds(each)
    return total


def tree_memory_mib(pid: int) -> dict[str, float]:
    """:func:`memory_mib` summed over ``pid`` and its live descendants (``VmHWM``: the
    sum of each one's peak, an upper bound of the tree's)."""
    total: Counter[str] = Counter()
    for each in tree_pids(pid):
        with contextlib.suppress(OSError):
            total.update(memory_mib(each))
    return {key: round(value, 1) for key, value in total.items()}


async def watch_count(client: KubeClient) -> int:
    """Watches the apiserver serves now (``apiserver_longrunning_requests``, verb WATCH)."""
    text = (await client.request("GET", "/metrics")).decode()
    return int(
        sum(
            sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == "apiserver_longrunning_requests"
            and sample.labels.get("verb") == "WATCH"
        )
    )


def memory_mib(pid: int) -> dict[str, float]:
    """``VmRSS`` (now) and ``VmHWM`` (peak RSS so far) of a process, in MiB."""
    found: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = round(int(value.split()[0]) / 1024, 1)
    return found


def rss_mib(pid: int) -> float:
    return memory_mib(pid).get("VmRSS", 0.0)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def compile_bytecode() -> bool:
    """Compile kube-ccm's modules to ``__pycache__``, as ``pip install`` does for an
    installed package. A checkout installed in editable mode on a machine that sets
    ``PYTHONDONTWRITEBYTECODE=1`` (this one does) otherwise compiles every module from
    source at each daemon start, ~0.07 s of CPU that no user's install spends."""
    return bool(compileall.compile_dir(REPO / "kube_ccm", quiet=1))


def header(binaries: Binaries) -> dict[str, Any]:
    """Where and with what a result was measured; compiles kube-ccm's bytecode first
    (:func:`compile_bytecode`), so the daemons started afterwards import as installed."""
    bytecode = compile_bytecode()
    try:
        commit = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
    except OSError:
        commit = ""
    mem_kib = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem_kib = int(line.split()[1])
    return {
        "date": datetime.date.today().isoformat(),
        "machine": platform.machine(),
        "cores": os.cpu_count(),
        "memory_gib": round(mem_kib / 2**20, 1),
        "python": platform.python_version(),
        "kube_apiserver": binaries.versions.kubernetes,
        "etcd": binaries.versions.etcd,
        "commit": commit,
        "bytecode_compiled": bytecode,
    }


def header_line(info: dict[str, Any]) -> str:
    return (
        f"{info['date']} — {info['machine']}, {info['cores']} cores, "
        f"kube-apiserver {info['kube_apiserver']}, etcd {info['etcd']}, "
        f"Python {info['python']}, commit {info['commit'] or '?'}"
    )


# -- API request counts ---------------------------------------------------------------


async def request_counts(client: KubeClient) -> Counter[tuple[str, str]]:
    """(verb, resource) → requests so far, from the apiserver's own metrics.

    These count every client: the daemon, the benchmark driver (this scrape
    included, as ``GET`` with no resource) and the apiserver's own loops.
    """
    text = (await client.request("GET", "/metrics")).decode()
    counts: Counter[tuple[str, str]] = Counter()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "apiserver_request_total":
                key = (sample.labels.get("verb", ""), sample.labels.get("resource", ""))
                counts[key] += int(sample.value)
    return counts


def writes(delta: Counter[tuple[str, str]], resource: str) -> int:
    return sum(v for (verb, res), v in delta.items() if res == resource and verb in WRITE_VERBS)


def reads(delta: Counter[tuple[str, str]], resource: str) -> int:
    """GETs and LISTs of ``resource`` (a watch re-opened after its timeout is no read)."""
    return sum(
        v
        for (verb, res), v in delta.items()
        if res == resource and verb not in WRITE_VERBS and verb != "WATCH"
    )


def by_verb_resource(delta: Counter[tuple[str, str]]) -> dict[str, int]:
    return {f"{verb} {res or '-'}": v for (verb, res), v in sorted(delta.items()) if v}


@dataclass
class SecurePort:
    """The daemon's secure port, with ``/metrics`` opened to anonymous scrapes."""

    port: int

    @classmethod
    def args(cls, port: int) -> list[str]:
        return [
            f"--secure-port={port}",
            "--bind-address=127.0.0.1",
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
        ]

    async def get(self, path: str, limit: float = 5.0) -> httpx2.Response:
        async with httpx2.AsyncClient(verify=False, timeout=limit) as http:
            return await http.get(f"https://127.0.0.1:{self.port}{path}")

    async def ready(self) -> bool:
        try:
            return (await self.get("/readyz", limit=2.0)).status_code == 200
        except httpx2.HTTPError:
            return False

    async def client_requests(self) -> Counter[str]:
        """The daemon's own ``rest_client_requests_total``, by method (watches count once)."""
        text = (await self.get("/metrics")).text
        counts: Counter[str] = Counter()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "rest_client_requests_total":
                    counts[sample.labels.get("method", "")] += int(sample.value)
        return counts


# -- setting up -----------------------------------------------------------------------


async def gather_limited(coros: Iterable[Coroutine[Any, Any, Any]], limit: int = 32) -> list[Any]:
    gate = asyncio.Semaphore(limit)

    async def one(coro: Coroutine[Any, Any, Any]) -> Any:
        async with gate:
            return await coro

    return await asyncio.gather(*(one(c) for c in coros))


async def wait_until(
    predicate: Callable[[], Awaitable[bool]],
    limit: float,
    interval: float = 0.2,
    what: str = "benchmark condition",
    daemon: DaemonProcess | None = None,
) -> float:
    """Poll until ``predicate()``; the monotonic time it became true."""
    started = time.monotonic()
    while not await predicate():
        if daemon is not None and daemon.poll() is not None:
            raise RuntimeError(
                f"the daemon exited while waiting for {what}:\n{daemon.log()[-3000:]}"
            )
        if time.monotonic() - started > limit:
            raise TimeoutError(f"{what} not reached within {limit:g} s")
        await asyncio.sleep(interval)
    return time.monotonic()


async def register_nodes(client: KubeClient, names: Sequence[str]) -> dict[str, str]:
    """Create Nodes as a kubelet with ``--cloud-provider=external`` does; name → resourceVersion."""

    async def one(name: str) -> tuple[str, str]:
        created = await client.create("/api/v1/nodes", node_manifest(name))
        return name, created["metadata"]["resourceVersion"]

    return dict(await gather_limited(one(n) for n in names))


def service_manifest(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
    }


async def create_services(client: KubeClient, names: Sequence[str]) -> None:
    await gather_limited(client.create(SERVICES_PATH, service_manifest(n)) for n in names)


async def count_ingress(client: KubeClient) -> int:
    listed = await client.get(SERVICES_PATH)
    return sum(
        1 for s in listed["items"] if s.get("status", {}).get("loadBalancer", {}).get("ingress")
    )


def is_initialised(node: Node) -> bool:
    return bool(node.spec.provider_id) and not any(
        t.key == wk.TAINT_UNINITIALIZED for t in node.spec.taints
    )


class NodeWatch:
    """A node informer in the driver: when each node was first seen initialised."""

    def __init__(self, client: KubeClient) -> None:
        self.informer: Informer[Node] = Informer(client, NODES)
        self.done_at: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None

        def observe(node: Node) -> None:
            if node.metadata.name not in self.done_at and is_initialised(node):
                self.done_at[node.metadata.name] = time.monotonic()

        self.informer.add_handler(on_add=observe, on_update=lambda _old, new: observe(new))

    async def start(self) -> NodeWatch:
        self._task = asyncio.create_task(self.informer.run())
        await self.informer.wait_synced()
        return self

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    def initialised(self) -> int:
        return len(self.done_at)


def daemon_args(
    *, controllers: str, node_workers: int = 16, service_workers: int = 16, qps: float, burst: int
) -> list[str]:
    return [
        "--leader-elect=false",
        f"--controllers={controllers}",
        f"--concurrent-node-syncs={node_workers}",
        f"--concurrent-service-syncs={service_workers}",
        f"--kube-api-qps={qps:g}",
        f"--kube-api-burst={burst}",
    ]


CLOUD_CONFIG: dict[str, Any] = {
    "unknownNodes": "create",
    "loadBalancer": {"ipPool": ["10.200.0.0/16"]},
}


async def populate(
    client: KubeClient,
    kubeconfig: Path,
    workdir: Path,
    *,
    nodes: int,
    services: int,
    log: Callable[[str], None],
) -> None:
    """N initialised Nodes and M provisioned LoadBalancer Services, by running the daemon.

    The simulated cloud's state stays in ``workdir / "cloud.db"``, so a later
    daemon with the same ``workdir`` finds the instances and load balancers.
    """
    started = time.monotonic()
    await register_nodes(client, [f"node-{i:05d}" for i in range(nodes)])
    log(f"registered {nodes} nodes in {time.monotonic() - started:.0f} s")
    daemon = DaemonProcess(
        kubeconfig=kubeconfig,
        workdir=workdir,
        cloud_config=CLOUD_CONFIG,
        args=daemon_args(controllers="cloud-node,service", qps=RAISED_QPS, burst=RAISED_BURST),
    )
    watch = await NodeWatch(client).start()
    daemon.start()
    try:

        async def nodes_done() -> bool:
            return watch.initialised() == nodes

        await wait_until(nodes_done, 1800, 1.0, "every node initialised", daemon)
        log(f"initialised {nodes} nodes at {time.monotonic() - started:.0f} s")
        await create_services(client, [f"lb-{i:05d}" for i in range(services)])

        async def services_done() -> bool:
            return await count_ingress(client) == services

        await wait_until(services_done, 1800, 2.0, "every service provisioned", daemon)
        log(f"provisioned {services} services at {time.monotonic() - started:.0f} s")
        await asyncio.sleep(2.0)  # trailing events
    finally:
        watch.stop()
        daemon.stop()


def full_node_manifest(name: str, images: int = 40) -> dict[str, Any]:
    """A Node the size a kubelet writes once it runs (≈ 9 KiB of JSON with 40 images):
    the registration's taint, labels, annotations, capacity and allocatable, five
    conditions, nodeInfo, daemonEndpoints and ``images`` container images. What the
    paged-LIST and write-cost benchmarks use where the scale benchmark's lean Nodes
    would understate a body."""
    node = node_manifest(name)
    now = node["status"]["conditions"][0]["lastHeartbeatTime"]
    node["metadata"]["labels"] |= {
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": "amd64",
        "node-role.example.com/worker": "",
        "example.com/pool": "general-purpose-pool-a",
    }
    node["metadata"]["annotations"] = {
        "node.alpha.kubernetes.io/ttl": "0",
        "volumes.kubernetes.io/controller-managed-attach-detach": "true",
        "csi.volume.kubernetes.io/nodeid": json.dumps({"ebs.csi.example.com": name}),
    }
    resources = {
        "cpu": "8",
        "ephemeral-storage": "101430960Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "memory": "32617404Ki",
        "pods": "110",
    }
    conditions = [
        (kind, "False", f"KubeletHas{reason}", f"kubelet has {message}")
        for kind, reason, message in (
            ("MemoryPressure", "SufficientMemory", "sufficient memory available"),
            ("DiskPressure", "NoDiskPressure", "no disk pressure"),
            ("PIDPressure", "SufficientPID", "sufficient PID available"),
            ("NetworkUnavailable", "RouteCreated", "a route"),
        )
    ]
    node["status"] |= {
        "capacity": resources,
        "allocatable": resources,
        "conditions": [
            *(
                {
                    "type": kind,
                    "status": status,
                    "reason": reason,
                    "message": message,
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
                for kind, status, reason, message in conditions
            ),
            *node["status"]["conditions"],
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {
            "machineID": secrets.token_hex(16),
            "systemUUID": str(uuid.uuid4()),
            "bootID": str(uuid.uuid4()),
            "kernelVersion": "6.8.0-1019-aws",
            "osImage": "Ubuntu 24.04.1 LTS",
            "containerRuntimeVersion": "containerd://1.7.24",
            "kubeletVersion": "v1.36.3",
            "kubeProxyVersion": "",
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
        "images": [
            {
                "names": [
                    f"registry.example.com/team-{i % 7}/service-{i}@sha256:{secrets.token_hex(32)}",
                    f"registry.example.com/team-{i % 7}/service-{i}:v1.{i}.0",
                ],
                "sizeBytes": 10_000_000 + 7_919 * i,
            }
            for i in range(images)
        ],
    }
    return node


# -- the raw-write baseline -------------------------------------------------------------


def initialisation_patch(name: str, resource_version: str, index: int) -> dict[str, Any]:
    """The node controller's single initialisation write, as the simulated cloud makes it.

    Same shape as ``CloudNodeController._patch_initialization``: the
    resourceVersion precondition, providerID, the GA and beta zone, region and
    instance-type labels, and the taints without the uninitialised one.
    """
    labels = {
        wk.LABEL_INSTANCE_TYPE: "sim-standard-2",
        wk.LABEL_INSTANCE_TYPE_BETA: "sim-standard-2",
        wk.LABEL_ZONE: "sim-zone-a",
        wk.LABEL_ZONE_BETA: "sim-zone-a",
        wk.LABEL_REGION: "sim-region-1",
        wk.LABEL_REGION_BETA: "sim-region-1",
    }
    return {
        "metadata": {"resourceVersion": resource_version, "labels": labels},
        "spec": {"taints": [], "providerID": f"simulated://i-{index:016x}"},
    }


def addresses_patch(name: str, index: int) -> dict[str, Any]:
    """The node controller's addresses write on ``nodes/status`` (InternalIP + Hostname)."""
    internal = f"10.{128 + (index >> 16) % 128}.{(index >> 8) & 255}.{index & 255}"
    return {
        "status": {
            "addresses": [
                {"$patch": "replace"},
                {"type": "InternalIP", "address": internal},
                {"type": "Hostname", "address": name},
            ]
        }
    }


async def raw_node_writes(
    kubeconfig: Path,
    versions: dict[str, str],
    *,
    workers: int,
    qps: float,
    burst: int,
    events: bool = False,
) -> float:
    """Seconds for ``workers`` tasks to make the two writes per node, as the controller does.

    The same client (lightkube's configuration, httpx) with the same client-side
    QPS/burst bucket as the daemon's node-controller client; the requests go out
    exactly as the controller sends them (strategic-merge patches, the first with
    the resourceVersion precondition); responses are not decoded. With ``events``,
    each node's ``Synced`` Event is also created, as the daemon's recorder does: by
    its own client, without the worker waiting for it (the time counts until the
    last one is written).
    """
    bucket = AsyncTokenBucket(qps, burst)
    client = KubeClient.from_kubeconfig(kubeconfig, rate_limiter=bucket.acquire)
    recorder = KubeClient.from_kubeconfig(
        kubeconfig, rate_limiter=AsyncTokenBucket(qps, burst).acquire
    )
    queue: asyncio.Queue[tuple[int, str, str]] = asyncio.Queue()
    for index, (name, version) in enumerate(versions.items()):
        queue.put_nowait((index, name, version))
    strategic = "application/strategic-merge-patch+json"
    pending: list[asyncio.Task[Any]] = []

    async def worker() -> None:
        while not queue.empty():
            index, name, version = queue.get_nowait()
            await client.request(
                "PATCH",
                f"/api/v1/nodes/{name}",
                body=initialisation_patch(name, version, index),
                content_type=strategic,
            )
            await client.request(
                "PATCH",
                f"/api/v1/nodes/{name}/status",
                body=addresses_patch(name, index),
                content_type=strategic,
            )
            if events:
                pending.append(
                    asyncio.create_task(
                        recorder.create("/api/v1/namespaces/default/events", synced_event(name))
                    )
                )

    try:
        started = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(workers)))
        await asyncio.gather(*pending)
        return time.monotonic() - started
    finally:
        await client.aclose()
        await recorder.aclose()


def synced_event(node: str) -> dict[str, Any]:
    """The cloud node controller's ``Synced`` Event for ``node``, as its recorder writes it."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{node}.{secrets.token_hex(8)}", "namespace": "default"},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node},
        "reason": wk.REASON_SYNCED,
        "message": wk.MESSAGE_SYNCED,
        "type": "Normal",
        "source": {"component": "cloud-node-controller", "host": "bench"},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
        "reportingComponent": "cloud-node-controller",
        "reportingInstance": "bench",
    }


# -- reporting --------------------------------------------------------------------------


def emit(result: dict[str, Any]) -> None:
    print(json.dumps(result), flush=True)


def markdown_table(title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    lines = [
        f"\n### {title}\n",
        "| " + " | ".join(columns) + " |",
        "|:---|" + "|".join("---:" for _ in columns[1:]) + "|",
    ]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def append_markdown(path: Path | None, text: str) -> None:
    if path is None:
        return
    with path.open("a") as out:
        out.write(text)
    print(f"appended to {path}", flush=True)


# -- a daemon over a populated cluster ---------------------------------------------------


def measured_daemon(
    kubeconfig: Path,
    workdir: Path,
    port: int,
    *,
    workers: int,
    qps: float,
    burst: int,
    leader_elect: bool,
) -> DaemonProcess:
    """``kube-ccm run`` with node, lifecycle and service controllers over ``populate``'s cloud."""
    args = daemon_args(
        controllers="cloud-node,cloud-node-lifecycle,service",
        node_workers=workers,
        service_workers=workers,
        qps=qps,
        burst=burst,
    )
    if leader_elect:
        # A Lease of its own: a stopped predecessor's Lease would hold it back until expiry.
        args = [
            *(a for a in args if not a.startswith("--leader-elect")),
            f"--leader-elect-resource-name=kube-ccm-bench-{port}",
        ]
    return DaemonProcess(
        kubeconfig=kubeconfig,
        workdir=workdir,
        cloud_config=CLOUD_CONFIG,
        args=[*args, *SecurePort.args(port)],
    )


@dataclass
class FirstSync:
    """Seconds from process start to each start-up milestone."""

    readyz: float
    services_ensured: float
    nodes_checked: float
    rss_mib: dict[str, float]
    """VmRSS when each milestone was seen (``readyz``, ``services``, ``nodes``)."""

    @property
    def complete(self) -> float:
        return max(self.services_ensured, self.nodes_checked)


async def wait_first_sync(
    daemon: DaemonProcess, port: SecurePort, started: float, *, nodes: int, services: int
) -> FirstSync:
    """Wait for /readyz, then for the first complete sync.

    /readyz turns 200 when the informers have synced (``Daemon._mark_synced``).
    The first complete sync is observable in the simulated cloud's counters:
    the service controller has ensured every load balancer once
    (``EnsureLoadBalancer`` = Services) and the node controller's first address
    pass has asked about every node (``InstanceMetadata`` >= Nodes).
    """
    marks: dict[str, float] = {}
    rss: dict[str, float] = {}

    def count(method: str) -> int:
        return daemon.cloud.calls().get(method, {}).get("count", 0)

    def mark(name: str) -> None:
        marks[name] = time.monotonic() - started
        rss[name] = rss_mib(daemon.pid)

    async def progressed() -> bool:
        if "readyz" not in marks and await port.ready():
            mark("readyz")
        if "services" not in marks and count("EnsureLoadBalancer") >= services:
            mark("services")
        if "nodes" not in marks and count("InstanceMetadata") >= nodes:
            mark("nodes")
        return len(marks) == 3

    await wait_until(progressed, 1800, 0.05, "the first complete sync", daemon)
    return FirstSync(marks["readyz"], marks["services"], marks["nodes"], rss)


async def wait_quiet(port: SecurePort, quiet: float, limit: float) -> float:
    """Wait until the daemon's own API request count stays put for ``quiet`` seconds.

    Only POST, PATCH and DELETE count as activity: leader election's GET and PUT
    of its Lease never stop.
    Returns the seconds waited.
    """
    started = time.monotonic()
    last = -1
    since = started

    async def settled() -> bool:
        nonlocal last, since
        counts = await port.client_requests()
        total = sum(v for m, v in counts.items() if m in ("POST", "PATCH", "DELETE"))
        if total != last:
            last, since = total, time.monotonic()
        return time.monotonic() - since >= quiet

    await wait_until(settled, limit, 1.0, "the daemon going quiet")
    return time.monotonic() - started
