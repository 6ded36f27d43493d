"""``kube-ccm sandbox``: the whole system on one machine, no cloud account needed.

Starts the test bed's real kube-apiserver + etcd, registers N Nodes the way a
kubelet with ``--cloud-provider=external`` does (the uninitialised taint, a
Hostname address, Ready), runs ``kube-ccm run`` with the simulated cloud as a
subprocess, shows progress while the nodes are initialised and M LoadBalancer
Services get their ingress IPs, then a summary: times, cloud calls by method,
API requests by verb and resource. It keeps
running (kubectl works with the printed kubeconfig) until Ctrl-C or
``--duration``.

Simulated kubelets that keep their Ready condition fresh and can be told to die
come with the sandbox issue.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from kube_ccm.api import wellknown as wk
from kube_ccm.api.objects import Node
from kube_ccm.runtime.client import KubeClient
from kube_ccm.runtime.informer import Informer

if TYPE_CHECKING:
    from kube_ccm.testing.daemon import DaemonProcess


@dataclass(frozen=True)
class SandboxOptions:
    nodes: int = 20
    services: int = 5
    duration: float | None = None
    latency: float = 0.0
    failure_rate: float = 0.0
    concurrent_node_syncs: int = 4
    provider: str = "simulated"
    data_dir: Path | None = None


def node_manifest(name: str) -> dict[str, Any]:
    """A Node as a kubelet with ``--cloud-provider=external`` registers it."""
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


async def register_nodes(client: KubeClient, names: list[str], parallel: int = 32) -> None:
    gate = asyncio.Semaphore(parallel)

    async def one(name: str) -> None:
        async with gate:
            await client.create("/api/v1/nodes", node_manifest(name))

    await asyncio.gather(*(one(n) for n in names))


def initialised(node: Node) -> bool:
    return not any(t.key == wk.TAINT_UNINITIALIZED for t in node.spec.taints)


async def _watch_progress(
    label: str, count: Callable[[], Awaitable[int]], total: int, out: TextIO, started: float
) -> float:
    """Print a progress line until ``count()`` reaches ``total``; the time it took."""
    interactive = out.isatty()
    last = -1
    while True:
        done = await count()
        if done != last:
            bar = "#" * (30 * done // max(total, 1))
            line = f"  {label} [{bar:<30}] {done}/{total}"
            print(("\r" + line) if interactive else line, end="" if interactive else "\n", file=out)
            out.flush()
            last = done
        if done >= total:
            if interactive:
                print(file=out)
            return time.monotonic() - started
        await asyncio.sleep(0.2)


async def _request_counts(client: KubeClient) -> Counter[str]:
    from prometheus_client.parser import text_string_to_metric_families  # noqa: PLC0415

    counts: Counter[str] = Counter()
    text = (await client.request("GET", "/metrics")).decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "apiserver_request_total" and sample.labels.get("resource") in (
                "nodes",
                "services",
                "events",
                "leases",
            ):
                key = f"{sample.labels['verb']} {sample.labels['resource']}"
                counts[key] += int(sample.value)
    return counts


async def run_sandbox(options: SandboxOptions, out: TextIO = sys.stdout) -> int:
    # Imported here: the daemon itself never needs the test bed.
    from kube_ccm.testing.controlplane import (  # noqa: PLC0415
        ControlPlane,
        ControlPlaneError,
        ControlPlaneOptions,
    )
    from kube_ccm.testing.daemon import DaemonProcess  # noqa: PLC0415

    workdir = options.data_dir or Path(tempfile.mkdtemp(prefix="kube-ccm-sandbox-"))
    plane = ControlPlane(ControlPlaneOptions(data_dir=workdir / "controlplane", keep_data_dir=True))
    print("starting kube-apiserver and etcd ...", file=out, flush=True)
    try:
        await asyncio.to_thread(plane.start)
    except ControlPlaneError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    daemon: DaemonProcess | None = None
    client = KubeClient.from_kubeconfig(plane.kubeconfig)
    try:
        print(
            f"control plane ready in {plane.timings.total:.1f} s; kubeconfig: {plane.kubeconfig}",
            file=out,
            flush=True,
        )
        names = [f"sandbox-node-{i:04d}" for i in range(options.nodes)]
        await register_nodes(client, names)
        print(f"registered {len(names)} nodes with the uninitialised taint", file=out)
        informer: Informer[Node] = Informer(client, "/api/v1/nodes", Node)
        watching = asyncio.create_task(informer.run())
        await informer.wait_synced()
        before = await _request_counts(client)
        cloud_config: dict[str, Any] = {"unknownNodes": "create"}
        if options.latency:
            cloud_config["latency"] = f"{options.latency * 1000:g}ms"
        if options.failure_rate:
            cloud_config["failureRate"] = options.failure_rate
        daemon = DaemonProcess(
            kubeconfig=plane.kubeconfig,
            workdir=workdir / "ccm",
            cloud_config=cloud_config,
            provider=options.provider,
            args=[
                "--leader-elect=false",
                "--cluster-cidr=10.244.0.0/16",
                f"--concurrent-node-syncs={options.concurrent_node_syncs}",
                "--kube-api-qps=100",
                "--kube-api-burst=200",
            ],
        )
        started = time.monotonic()
        daemon.start()
        print(
            f"started kube-ccm run --cloud-provider={options.provider} (log: {daemon.log_path})",
            file=out,
            flush=True,
        )

        async def nodes_done() -> int:
            return sum(1 for n in informer.list() if initialised(n))

        took = await _while_alive(
            daemon, _watch_progress("initialising nodes", nodes_done, len(names), out, started)
        )
        if took is None:
            return 1
        lb_took = 0.0
        if options.services:
            services = "/api/v1/namespaces/default/services"
            lb_started = time.monotonic()
            for i in range(options.services):
                await client.create(
                    services,
                    {
                        "metadata": {"name": f"sandbox-lb-{i:03d}"},
                        "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
                    },
                )

            async def services_done() -> int:
                listed = await client.get(services)
                return sum(
                    1
                    for s in listed["items"]
                    if s.get("status", {}).get("loadBalancer", {}).get("ingress")
                )

            waited = await _while_alive(
                daemon,
                _watch_progress(
                    "provisioning load balancers",
                    services_done,
                    options.services,
                    out,
                    lb_started,
                ),
            )
            if waited is None:
                return 1
            lb_took = waited
        await asyncio.sleep(0.5)
        after = await _request_counts(client)
        _summary(
            out,
            nodes=len(names),
            took=took,
            services=options.services,
            lb_took=lb_took,
            calls=daemon.cloud.calls(),
            requests=after - before,
            state=daemon.state_path,
        )
        watching.cancel()
        print(
            f"\ntry: kubectl --kubeconfig {plane.kubeconfig} get nodes "
            "-L topology.kubernetes.io/zone,node.kubernetes.io/instance-type",
            file=out,
        )
        if options.duration is None:
            print("running until Ctrl-C", file=out, flush=True)
            await asyncio.Event().wait()
        else:
            print(f"running for {options.duration:g} s more", file=out, flush=True)
            await asyncio.sleep(options.duration)
        return 0
    finally:
        if daemon is not None:
            status = await asyncio.to_thread(daemon.stop)
            print(f"kube-ccm stopped (exit status {status})", file=out)
        await client.aclose()
        await asyncio.to_thread(plane.stop)
        if options.data_dir is None:
            shutil.rmtree(workdir, ignore_errors=True)
        print("control plane stopped", file=out, flush=True)


async def _while_alive(daemon: DaemonProcess, work: Awaitable[float]) -> float | None:
    """Await ``work`` unless the daemon dies first (then print its log; None)."""
    task = asyncio.ensure_future(work)
    while not task.done():
        if daemon.poll() is not None:
            task.cancel()
            print(f"error: the daemon exited; its log:\n{daemon.log()[-3000:]}", file=sys.stderr)
            return None
        await asyncio.sleep(0.2)
    return task.result()


def _summary(
    out: TextIO,
    *,
    nodes: int,
    took: float,
    services: int,
    lb_took: float,
    calls: dict[str, dict[str, int]],
    requests: Counter[str],
    state: Path,
) -> None:
    print(f"\nall {nodes} nodes initialised in {took:.2f} s (including daemon start-up)", file=out)
    if services:
        print(f"all {services} load balancers got an ingress IP in {lb_took:.2f} s", file=out)
    print("cloud calls:", file=out)
    for method, count in sorted(calls.items()):
        print(f"  {method:<28} {count['count']:>6}  ({count['errors']} failed)", file=out)
    print("API requests during the run:", file=out)
    for key, requested in sorted(requests.items()):
        if requested:
            print(f"  {key:<28} {requested:>6}", file=out)
    print(f"simulated cloud state: {state} (inspect with kube-ccm simcloud --state ...)", file=out)


def main(options: SandboxOptions) -> int:
    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(run_sandbox(options))
    return 0
