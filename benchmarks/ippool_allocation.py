"""Address allocation by the ippool provider for many LoadBalancer Services.

    .venv/bin/python benchmarks/ippool_allocation.py [--services 2000] [--workers 16 1]
        [--namespaces 3] [--kube-api-qps 1000 --kube-api-burst 2000]
        [--announcer kube-vip status]
        [--claims 1000 10000] [--cpu-services 300] [--markdown docs/benchmarks.md]

For each ``--workers`` value, on a fresh control plane (kube-apiserver + etcd, a
/16 service CIDR so that every Service gets a ClusterIP):

1. the RBAC of deploy/rbac.yaml and deploy/rbac-ippool.yaml is installed and the
   daemon runs as its ServiceAccount (least privilege, as in
   tests/integration/test_daemon_ippool.py); the pools are the ConfigMap
   ``kube-system/kubevip`` (the provider's default), one ``cidr-<namespace>`` key
   per namespace, at least a /20 each;
2. 3 Nodes (as lb_provisioning) and N LoadBalancer Services, round-robin over the
   namespaces, are created before the daemon starts;
3. ``kube-ccm run --cloud-provider=ippool --controllers=service
   --concurrent-service-syncs=W`` starts, with the cloud-config's ``announcer`` of
   ``--announcer`` (each value is a scenario; ``status`` writes no annotation, and
   an older tree that does not know the key is run with the defaults); measured:
   seconds from daemon start until every Service has an ingress IP (the driver
   watches the Services; it listed them every 0.5 s before 2026-11-26, which cost
   the apiserver more at 10,000), and the CPU seconds the daemon,
   kube-apiserver, etcd and the driver itself spent in that window;
4. once the daemon's own writes stop for 5 s: API writes per Service, in total and
   by resource (deltas of the apiserver's ``apiserver_request_total``; ``leases``
   and ``endpoints`` are the apiserver's own and are left out of the total), the daemon's
   own requests (its ``rest_client_requests_total``), where its time went (the
   service queue's wait and work seconds, the client's request and rate-limiter
   seconds), its peak RSS (``VmHWM``) and CPU seconds; then every address is
   checked: one per Service, unique, inside its namespace's pool, in
   ``kube-vip.io/loadbalancerIPs`` when kube-vip announces (and absent when the
   status does) and backed by an IPAddress claim. A failed check fails the benchmark.

Then, for each ``--claims N`` (default 1000 and 10000; ``--claims`` alone skips
it; ``--workers`` alone skips the daemon runs), it measures in process on the
in-memory API server (no control plane, so only the provider's own work) the CPU
seconds per Service of allocating ``--cpu-services`` more Services
(round-robin over the namespaces, one /16 pool each, first free address) when N
claims already exist: flat across N means no cost that grows with the claims. The
provider is driven through its public entry points only, so the same script
measures an older tree (``PYTHONPATH=<old tree>``) for a before/after.

Prints one JSON object per scenario; ``--markdown`` appends a table.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import json
import math
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import yaml
from _bench import (
    WRITE_VERBS,
    SecurePort,
    append_markdown,
    cpu_seconds,
    emit,
    free_port,
    gather_limited,
    header,
    header_line,
    load_average,
    markdown_table,
    memory_mib,
    wait_quiet,
)
from prometheus_client.parser import text_string_to_metric_families

from kube_ccm.api.objects import ObjectMeta, Service, ServicePort, ServiceSpec
from kube_ccm.providers.ippool import factory
from kube_ccm.runtime.client import KubeClient
from kube_ccm.testbed.rbac import install_service_account
from kube_ccm.testing.binaries import ensure_binaries
from kube_ccm.testing.controlplane import ControlPlane, ControlPlaneOptions
from kube_ccm.testing.daemon import DaemonProcess
from kube_ccm.testing.fakeapi import FakeApiServer

REPO = Path(__file__).resolve().parent.parent
RBAC_FILES = ("rbac.yaml", "rbac-ippool.yaml")
CONFIG_MAP = "/api/v1/namespaces/kube-system/configmaps"
IPADDRESSES = "/apis/networking.k8s.io/v1/ipaddresses"
ADDRESSES_ANNOTATION = "kube-vip.io/loadbalancerIPs"
MANAGED_BY = "ipaddress.kubernetes.io/managed-by=ippool.kube-ccm.io"
POOL_SPACE = ipaddress.ip_network("172.16.0.0/12")
"""Where the pools are cut from: outside the service CIDR below."""
SERVICE_CIDR = "10.96.0.0/16"
NODE_PORTS = "20000-40000"
"""For more than 2,500 Services (the default range, 30000-32767, has 2,768 ports)."""
NODES = 3
"""As in lb_provisioning: ippool ignores them, but the service controller warns
(``UnAvailableLoadBalancer``) on every sync when there is no eligible node."""
NOT_THE_DAEMON = frozenset({"leases", "endpoints"})
"""Written by the apiserver itself (its identity Lease, the kubernetes Service's
Endpoints), not by the daemon."""


# -- measuring --------------------------------------------------------------------------


async def request_counts(client: KubeClient) -> Counter[tuple[str, str]]:
    """(verb, resource[/subresource]) → requests so far, from the apiserver's /metrics.

    Unlike ``_bench.request_counts`` the subresource is kept: the service controller
    writes ``services/status``, the provider ``services``.
    """
    text = (await client.request("GET", "/metrics")).decode()
    counts: Counter[tuple[str, str]] = Counter()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "apiserver_request_total":
                labels = sample.labels
                resource = labels.get("resource", "")
                if labels.get("subresource"):
                    resource = f"{resource}/{labels['subresource']}"
                counts[(labels.get("verb", ""), resource)] += int(sample.value)
    return counts


def by_resource(delta: Counter[tuple[str, str]], *, write: bool) -> dict[str, int]:
    found: Counter[str] = Counter()
    for (verb, resource), value in delta.items():
        if value and (verb in WRITE_VERBS) == write and verb != "WATCH" and resource:
            found[resource] += value
    return dict(sorted(found.items()))


async def client_requests(port: SecurePort) -> dict[str, int]:
    """The daemon's own ``rest_client_requests_total`` by ``METHOD code``."""
    text = (await port.get("/metrics")).text
    counts: Counter[str] = Counter()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "rest_client_requests_total":
                key = f"{sample.labels.get('method', '')} {sample.labels.get('code', '')}"
                counts[key] += int(sample.value)
    return dict(sorted(counts.items()))


WAITS = {
    "workqueue_queue_duration_seconds": "service queue wait",
    "workqueue_work_duration_seconds": "service sync",
    "rest_client_request_duration_seconds": "API request",
    "rest_client_rate_limiter_duration_seconds": "client rate limiter",
}
"""The daemon's histograms that say where its time went (sum and count of each)."""


async def daemon_waits(port: SecurePort) -> dict[str, dict[str, float]]:
    """Seconds in total, count and mean ms of each of :data:`WAITS` (the workqueue's
    for the ``service`` queue only)."""
    text = (await port.get("/metrics")).text
    sums: dict[str, float] = dict.fromkeys(WAITS, 0.0)
    counts: dict[str, float] = dict.fromkeys(WAITS, 0.0)
    for family in text_string_to_metric_families(text):
        if family.name not in WAITS:
            continue
        for sample in family.samples:
            if family.name.startswith("workqueue_") and sample.labels.get("name") != "service":
                continue
            if sample.name.endswith("_sum"):
                sums[family.name] += sample.value
            elif sample.name.endswith("_count"):
                counts[family.name] += sample.value
    return {
        what: {
            "seconds": round(sums[name], 2),
            "count": int(counts[name]),
            "mean_ms": round(1000 * sums[name] / counts[name], 2) if counts[name] else 0.0,
        }
        for name, what in WAITS.items()
    }


def own_cpu_seconds() -> float:
    """This driver's CPU seconds (it shares the machine with what it measures)."""
    return cpu_seconds(os.getpid())


# -- setting up -------------------------------------------------------------------------


def namespaces(count: int) -> list[str]:
    return [f"ippool-{i}" for i in range(count)]


def pools(names: list[str], per_namespace: int) -> dict[str, ipaddress.IPv4Network]:
    """A CIDR per namespace, at least a /20 and big enough for its Services."""
    bits = max(12, math.ceil(math.log2(per_namespace + 2)))
    prefix = 32 - bits
    subnets = POOL_SPACE.subnets(new_prefix=prefix)
    chosen: dict[str, ipaddress.IPv4Network] = {}
    for name in names:
        network = next(subnets, None)
        if not isinstance(network, ipaddress.IPv4Network):
            raise SystemExit(f"{len(names)} pools of /{prefix} do not fit in {POOL_SPACE}")
        chosen[name] = network
    return chosen


def rbac_docs() -> list[dict[str, Any]]:
    return [
        doc
        for name in RBAC_FILES
        for doc in yaml.safe_load_all((REPO / "deploy" / name).read_text())
        if doc
    ]


def service_manifest(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
    }


async def load_balancers(client: KubeClient) -> list[dict[str, Any]]:
    listed = await client.get("/api/v1/services")
    return [s for s in listed["items"] if s["spec"].get("type") == "LoadBalancer"]


def ingress_ips(service: dict[str, Any]) -> list[str]:
    ingress = service.get("status", {}).get("loadBalancer", {}).get("ingress") or []
    return [str(i.get("ip", "")) for i in ingress]


class IngressWatch:
    """Which Services have an ingress address, from a watch. (Listing every Service
    twice a second, as this driver did before, cost kube-apiserver and the driver
    more CPU than the daemon at 10,000 Services, on the machine they share.)"""

    def __init__(self, client: KubeClient, expected: int) -> None:
        self.client = client
        self.expected = expected
        self.served: set[str] = set()
        self.first: float | None = None
        self.done_at: float | None = None
        self.done = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        listed = await self.client.get("/api/v1/services", {"limit": 1})
        version = str(listed["metadata"]["resourceVersion"])
        self._task = asyncio.get_running_loop().create_task(self._run(version))

    async def _run(self, version: str) -> None:
        while True:
            async for event in self.client.watch(
                "/api/v1/services", resource_version=version, timeout_seconds=1800
            ):
                item = json.loads(bytes(event.object))
                if event.type == "ERROR":
                    raise RuntimeError(f"the Services' watch failed: {item}")
                meta = item.get("metadata") or {}
                version = str(meta.get("resourceVersion") or version)
                if event.type == "BOOKMARK":
                    continue
                key = f"{meta.get('namespace')}/{meta.get('name')}"
                wanted = (item.get("spec") or {}).get("type") == "LoadBalancer"
                if event.type != "DELETED" and wanted and ingress_ips(item):
                    self.served.add(key)
                    if self.first is None:
                        self.first = time.monotonic()
                else:
                    self.served.discard(key)
                if len(self.served) >= self.expected and not self.done.is_set():
                    self.done_at = time.monotonic()
                    self.done.set()

    async def wait(self, daemon: DaemonProcess, limit: float) -> float:
        """The monotonic time every Service had an address (the daemon must live)."""
        started = time.monotonic()
        while not self.done.is_set():
            if daemon.poll() is not None:
                raise RuntimeError(f"the daemon exited early:\n{daemon.log()[-3000:]}")
            if self._task is not None and self._task.done():
                self._task.result()  # the watch failed: say why
            if time.monotonic() - started > limit:
                raise TimeoutError(f"not every Service had an address within {limit:g} s")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.5):
                    await self.done.wait()
        assert self.done_at is not None
        return self.done_at

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


# -- checking ---------------------------------------------------------------------------


async def verify(
    client: KubeClient,
    expected: int,
    pool_of: dict[str, ipaddress.IPv4Network],
    *,
    announced: bool = True,
) -> list[str]:
    """Every problem with the allocation (an empty list when it is right)."""
    problems: list[str] = []
    services = await load_balancers(client)
    if len(services) != expected:
        problems.append(f"{len(services)} LoadBalancer Services, expected {expected}")
    seen: dict[str, str] = {}
    for service in services:
        meta = service["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        ips = ingress_ips(service)
        if len(ips) != 1:
            problems.append(f"{key}: {len(ips)} ingress addresses {ips}, expected 1")
            continue
        ip = ips[0]
        if ip in seen:
            problems.append(f"{key}: {ip} given twice (also to {seen[ip]})")
        seen[ip] = key
        pool = pool_of[meta["namespace"]]
        if ipaddress.ip_address(ip) not in pool:
            problems.append(f"{key}: {ip} is not in its namespace's pool {pool}")
        written = (meta.get("annotations") or {}).get(ADDRESSES_ANNOTATION)
        if written != (ip if announced else None):
            problems.append(f"{key}: {ADDRESSES_ANNOTATION}={written!r}, ingress {ip}")
        mode = service["status"]["loadBalancer"]["ingress"][0].get("ipMode")
        if mode != "VIP":
            problems.append(f"{key}: ipMode {mode!r}, expected VIP")
    claims = await client.get(IPADDRESSES, {"labelSelector": MANAGED_BY})
    claimed = {c["metadata"]["name"] for c in claims["items"]}
    if claimed != set(seen):
        problems.append(
            f"IPAddress claims and ingress addresses differ: {len(claimed - set(seen))} "
            f"claims without a Service (e.g. {sorted(claimed - set(seen))[:3]}), "
            f"{len(set(seen) - claimed)} addresses without a claim "
            f"(e.g. {sorted(set(seen) - claimed)[:3]})"
        )
    return problems


async def events_by_reason(client: KubeClient) -> dict[str, int]:
    """Occurrences (``count``, aggregated Events included) by reason, every namespace."""
    listed = await client.get("/api/v1/events")
    found: Counter[str] = Counter()
    for event in listed["items"]:
        found[str(event.get("reason", ""))] += int(event.get("count") or 1)
    return dict(sorted(found.items()))


# -- the scenario -----------------------------------------------------------------------


async def scenario(
    plane: ControlPlane,
    workdir: Path,
    *,
    services: int,
    namespace_count: int,
    workers: int,
    qps: float,
    burst: int,
    announcer: str,
) -> dict[str, Any]:
    load = load_average()
    names = namespaces(namespace_count)
    pool_of = pools(names, math.ceil(services / namespace_count))
    client = KubeClient.from_kubeconfig(plane.kubeconfig)
    try:
        kubeconfig = await install_service_account(
            plane,
            rbac_docs(),
            "kube-system",
            "cloud-controller-manager",
            kubeconfig=workdir / "ccm.kubeconfig",
        )
        for name in names:
            await client.create("/api/v1/namespaces", {"metadata": {"name": name}})
        for i in range(NODES):  # without eligible nodes every sync adds a Warning Event
            await client.create("/api/v1/nodes", {"metadata": {"name": f"node-{i}"}})
        await client.create(
            CONFIG_MAP,
            {
                "metadata": {"name": "kubevip"},
                "data": {f"cidr-{ns}": str(net) for ns, net in pool_of.items()},
            },
        )
        await gather_limited(
            client.create(
                f"/api/v1/namespaces/{names[i % namespace_count]}/services",
                service_manifest(f"lb-{i:05d}"),
            )
            for i in range(services)
        )
        config_file = workdir / "cloud.yaml"
        # The defaults (pools from kube-system/kubevip, kube-vip announcing) but for
        # the announcer; a tree that does not know the key is only run with them.
        config = {} if announcer == "kube-vip" else {"announcer": announcer}
        config_file.write_text(yaml.safe_dump(config))
        port = SecurePort(free_port())
        daemon = DaemonProcess(
            kubeconfig=kubeconfig,
            workdir=workdir,
            provider="ippool",
            cloud_config_file=config_file,
            args=[
                "--leader-elect=false",
                "--controllers=service",
                f"--concurrent-service-syncs={workers}",
                f"--kube-api-qps={qps:g}",
                f"--kube-api-burst={burst}",
                *SecurePort.args(port.port),
            ],
        )
        watch = IngressWatch(client, services)
        await watch.start()
        before = await request_counts(client)
        plane_before = {name: cpu_seconds(pid) for name, pid in plane.pids().items()}
        own_before = own_cpu_seconds()
        started = time.monotonic()
        daemon.start()
        try:
            provisioned = await watch.wait(daemon, 3600)
            first = watch.first
            window_cpu = {
                name: cpu_seconds(pid) - plane_before[name] for name, pid in plane.pids().items()
            }
            window_cpu["daemon"] = cpu_seconds(daemon.pid)
            window_cpu["driver"] = own_cpu_seconds() - own_before
            at_ingress = await request_counts(client)
            memory_at_ingress = memory_mib(daemon.pid)
            quiet = await wait_quiet(port, quiet=5.0, limit=600)
            after = await request_counts(client)
            own = await client_requests(port)
            waits = await daemon_waits(port)
            memory = memory_mib(daemon.pid)  # VmHWM: the peak so far
            cpu = cpu_seconds(daemon.pid)
            plane_cpu = {name: cpu_seconds(pid) for name, pid in plane.pids().items()}
            problems = await verify(client, services, pool_of, announced=announcer == "kube-vip")
            reasons = await events_by_reason(client)
        finally:
            await watch.stop()
            exit_code = daemon.stop()
        log = daemon.log()
    finally:
        await client.aclose()

    if problems:
        print(
            f"ippool allocation check FAILED ({len(problems)} problems):\n  "
            + "\n  ".join(problems[:50]),
            file=sys.stderr,
        )
        raise SystemExit(1)
    delta = after - before
    written = by_resource(delta, write=True)
    read = by_resource(delta, write=False)
    total_writes = sum(v for r, v in written.items() if r not in NOT_THE_DAEMON)
    writes_at_ingress = sum(
        v
        for r, v in by_resource(at_ingress - before, write=True).items()
        if r not in NOT_THE_DAEMON
    )
    own_writes = sum(
        v for key, v in own.items() if key.split()[0] in {"POST", "PUT", "PATCH", "DELETE"}
    )
    seconds = provisioned - started
    return {
        "benchmark": "ippool_allocation",
        "load_average_1m": load,
        "load_average_1m_after": load_average(),
        "services": services,
        "namespaces": namespace_count,
        "pools": {ns: str(net) for ns, net in pool_of.items()},
        "concurrent_service_syncs": workers,
        "announcer": announcer,
        "kube_api_qps": qps,
        "kube_api_burst": burst,
        "seconds_to_first_ingress": round((first or provisioned) - started, 2),
        "seconds_to_all_ingress": round(seconds, 2),
        "services_per_second": round(services / seconds, 1),
        "seconds_to_quiet_after_ingress": round(quiet, 1),
        "api_writes_per_service": round(total_writes / services, 3),
        "api_writes_per_service_at_all_ingress": round(writes_at_ingress / services, 3),
        "api_writes_per_service_by_resource": {
            r: round(v / services, 3) for r, v in written.items()
        },
        "api_reads_per_service_by_resource": {r: round(v / services, 3) for r, v in read.items()},
        "api_writes": written,
        "api_reads": read,
        "daemon_requests": own,
        "daemon_writes_per_service": round(own_writes / services, 3),
        "events_by_reason": reasons,
        "daemon_peak_rss_mib": memory.get("VmHWM", 0.0),
        "daemon_rss_mib_at_all_ingress": memory_at_ingress.get("VmRSS", 0.0),
        "daemon_rss_mib_end": memory.get("VmRSS", 0.0),
        "daemon_cpu_seconds": round(cpu, 1),
        "controlplane_cpu_seconds": {k: round(v, 1) for k, v in plane_cpu.items()},
        "cpu_seconds_start_to_all_ingress": {k: round(v, 1) for k, v in window_cpu.items()},
        "daemon_waits": waits,
        "daemon_exit_code": exit_code,
        "daemon_log_errors": sum(
            1 for line in log.splitlines() if " ERROR " in line or "Traceback" in line
        ),
        "events_dropped_queue_full": log.count("event queue full; dropping"),
        "allocation_checked": True,
    }


# -- CPU per Service against the number of claims (in process) ----------------------


async def claims_cpu(claims: int, services: int, namespace_count: int) -> dict[str, Any]:
    """CPU seconds per Service allocated when ``claims`` claims already exist."""
    fake = FakeApiServer()
    names = namespaces(namespace_count)
    space = ipaddress.IPv4Network("10.0.0.0/8").subnets(new_prefix=16)
    pool_of = {ns: next(space) for ns in names}
    fake.put_object(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "kubevip", "namespace": "kube-system"},
            "data": {f"cidr-{ns}": str(net) for ns, net in pool_of.items()},
        }
    )
    hosts = {ns: net.hosts() for ns, net in pool_of.items()}

    def next_host(ns: str) -> str:
        while True:
            address = next(hosts[ns])
            if int(address) & 0xFF not in (0, 0xFF):
                return str(address)

    for i in range(claims):  # the first free addresses of each pool, taken
        ns = names[i % namespace_count]
        holder = {"namespace": ns, "name": f"old-{i}", "uid": f"old-{i}", "ports": ["TCP/80"]}
        fake.put_object(
            {
                "apiVersion": "networking.k8s.io/v1",
                "kind": "IPAddress",
                "metadata": {
                    "name": next_host(ns),
                    "labels": {"ipaddress.kubernetes.io/managed-by": "ippool.kube-ccm.io"},
                    "annotations": {"ippool.kube-ccm.io/holders": json.dumps([holder])},
                },
                "spec": {
                    "parentRef": {"group": "ippool.kube-ccm.io", "resource": "pools", "name": ns}
                },
            }
        )

    class Builder:
        def client(self, name: str) -> Any:
            return fake.client()

        def config(self, name: str) -> Any:
            raise NotImplementedError

    provider = factory(None)
    await provider.initialize(Builder(), asyncio.Event())
    balancer = provider.load_balancer()

    def service(i: int) -> Service:
        ns, name = names[i % namespace_count], f"new-{i}"
        fake.put_object(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": name, "namespace": ns, "uid": f"new-{i}"},
                "spec": {"type": "LoadBalancer"},
            }
        )
        return Service(
            metadata=ObjectMeta(name=name, namespace=ns, uid=f"new-{i}"),
            spec=ServiceSpec(type="LoadBalancer", ports=(ServicePort(protocol="TCP", port=80),)),
        )

    for warm in range(1, namespace_count + 1):  # loads the claims, finds each pool's end
        await balancer.ensure_load_balancer("kubernetes", service(-warm), [])
    batch = [service(i) for i in range(services)]
    started_cpu, started = time.process_time(), time.perf_counter()
    for svc in batch:
        await balancer.ensure_load_balancer("kubernetes", svc, [])
    cpu, wall = time.process_time() - started_cpu, time.perf_counter() - started
    await provider.aclose()
    return {
        "benchmark": "ippool_allocation_claims_cpu",
        "load_average_1m": load_average(),
        "existing_claims": claims,
        "services": services,
        "namespaces": namespace_count,
        "cpu_ms_per_service": round(cpu * 1000 / services, 3),
        "wall_ms_per_service": round(wall * 1000 / services, 3),
    }


CPU_COLUMNS = ("existing claims", "services allocated", "CPU ms/service", "wall ms/service")


def cpu_row(r: dict[str, Any]) -> list[Any]:
    return [
        r["existing_claims"],
        r["services"],
        r["cpu_ms_per_service"],
        r["wall_ms_per_service"],
    ]


# -- reporting --------------------------------------------------------------------------

COLUMNS = (
    "services",
    "namespaces",
    "--concurrent-service-syncs",
    "announcer",
    "QPS/burst",
    "load avg (1 m) before/after",
    "s to all ingress",
    "services/s",
    "API writes/service",
    "of which services",
    "services/status",
    "ipaddresses",
    "events",
    "peak RSS",
    "CPU s to all ingress: kube-apiserver / etcd / daemon / driver",
)


def row(r: dict[str, Any]) -> list[Any]:
    per = r["api_writes_per_service_by_resource"]
    return [
        r["services"],
        r["namespaces"],
        r["concurrent_service_syncs"],
        r["announcer"],
        f"{r['kube_api_qps']:g}/{r['kube_api_burst']}",
        f"{r['load_average_1m']} / {r['load_average_1m_after']}",
        r["seconds_to_all_ingress"],
        r["services_per_second"],
        r["api_writes_per_service"],
        per.get("services", 0),
        per.get("services/status", 0),
        per.get("ipaddresses", 0),
        per.get("events", 0),
        f"{r['daemon_peak_rss_mib']} MiB",
        " / ".join(
            str(r["cpu_seconds_start_to_all_ingress"].get(k, "?"))
            for k in ("kube-apiserver", "etcd", "daemon", "driver")
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--services", type=int, default=2000)
    parser.add_argument("--workers", type=int, nargs="*", default=[16, 1])
    parser.add_argument("--namespaces", type=int, default=3)
    parser.add_argument("--kube-api-qps", type=float, default=1000.0)
    parser.add_argument("--kube-api-burst", type=int, default=2000)
    parser.add_argument("--markdown", type=Path, default=None)
    parser.add_argument(
        "--announcer",
        nargs="+",
        choices=("kube-vip", "status"),
        default=["kube-vip"],
        help="the cloud-config's announcer; each value is a scenario per --workers",
    )
    parser.add_argument(
        "--claims",
        type=int,
        nargs="*",
        default=[1000, 10000],
        help="then CPU per Service, in process, at these numbers of existing claims (none: skip)",
    )
    parser.add_argument("--cpu-services", type=int, default=300)
    args = parser.parse_args()
    if args.services < 1 or args.namespaces < 1:
        parser.error("--services and --namespaces must be at least 1")
    binaries = ensure_binaries()
    info = header(binaries)
    results = []
    for workers, announcer in [(w, a) for a in args.announcer for w in args.workers]:
        with tempfile.TemporaryDirectory(prefix="kube-ccm-bench-") as tmp:
            options = ControlPlaneOptions(
                service_cluster_ip_range=SERVICE_CIDR,
                # Each Service takes a node port; the default range has 2,768.
                extra_apiserver_args=(f"--service-node-port-range={NODE_PORTS}",)
                if args.services > 2500
                else (),
            )
            plane = ControlPlane(options, binaries=binaries).start()
            try:
                result = asyncio.run(
                    scenario(
                        plane,
                        Path(tmp),
                        services=args.services,
                        namespace_count=args.namespaces,
                        workers=workers,
                        qps=args.kube_api_qps,
                        burst=args.kube_api_burst,
                        announcer=announcer,
                    )
                )
            finally:
                plane.stop()
        emit({**result, "header": info})
        results.append(result)
    if results:
        title = f"ippool allocation — {header_line(info)}"
        append_markdown(args.markdown, markdown_table(title, COLUMNS, (row(r) for r in results)))
    found = [asyncio.run(claims_cpu(n, args.cpu_services, args.namespaces)) for n in args.claims]
    for result in found:
        emit({**result, "header": info})
    if found:
        title = f"ippool CPU per Service against existing claims, in process — {header_line(info)}"
        append_markdown(args.markdown, markdown_table(title, CPU_COLUMNS, map(cpu_row, found)))


if __name__ == "__main__":
    main()
