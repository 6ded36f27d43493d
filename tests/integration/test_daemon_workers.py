"""--worker-processes on the real apiserver: one lease, Nodes sharded across workers.

The daemon runs ``--worker-processes=2`` with four node syncs, so the cloud node
controller runs as two shards, one per worker, each with two syncs. Every Node
must be initialised exactly once (one ``InstanceMetadata`` call and one ``Synced``
Event per Node), ``/metrics`` must read as one daemon's, and no worker may outlive
the lease or its parent: losing the lease kills them and exits 1, a killed worker
ends the daemon with status 1, a killed parent takes its workers with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import httpx2
from prometheus_client.parser import text_string_to_metric_families

from kube_ccm.runtime.client import ApiError, KubeClient
from kube_ccm.testing.daemon import DaemonProcess
from kube_ccm.testing.manifests import UNINITIALIZED_TAINT, node_manifest, taint_keys
from kube_ccm.testing.pytest_plugin import Cleanup
from kube_ccm.testing.waiting import eventually

LEASE = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/cloud-controller-manager"
ELECTION = (
    "--leader-elect-lease-duration=4s",
    "--leader-elect-renew-deadline=3s",
    "--leader-elect-retry-period=1s",
)
NODES = 24


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def alive(pid: int) -> bool:
    """Running (not gone, not a zombie waiting to be reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def start(tmp_path: Path, kubeconfig: Path, label: str, *args: str) -> DaemonProcess:
    return DaemonProcess(
        kubeconfig=kubeconfig,
        workdir=tmp_path / "daemon",
        args=[
            *ELECTION,
            "--worker-processes=2",
            "--concurrent-node-syncs=4",
            "--controllers=cloud-node,cloud-node-lifecycle",
            "--node-status-update-frequency=1h",
            f"--node-selector=workers-test={label}",
            *args,
        ],
    ).start()


async def workers_of(ccm: DaemonProcess, count: int = 2) -> list[int]:
    async def started() -> bool:
        return len(children(ccm.pid)) == count

    await eventually(started, within=60, what=f"{count} worker processes")
    return children(ccm.pid)


async def create_nodes(client: KubeClient, cleanup: Cleanup, names: list[str], label: str) -> None:
    for name in names:
        manifest = node_manifest(name)
        manifest["metadata"]["labels"] = {"workers-test": label}
        cleanup.add(f"/api/v1/nodes/{name}")
        await client.create("/api/v1/nodes", manifest)


async def steal_lease(client: KubeClient) -> None:
    import datetime  # noqa: PLC0415

    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    lease = await client.get(LEASE)
    lease["spec"].update(
        holderIdentity="someone-else", leaseDurationSeconds=60, renewTime=now, acquireTime=now
    )
    await client.replace(LEASE, lease)


async def release_lease(client: KubeClient) -> None:
    with contextlib.suppress(ApiError):  # a stolen Lease would hold off later tests
        await client.delete(LEASE)


async def test_two_workers_initialise_every_node_exactly_once_and_serve_as_one_daemon(
    ccm_kubeconfig: Path,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    label = unique_name("w")
    names = [f"{label}-{i:02d}" for i in range(NODES)]
    port = free_port()
    ccm = start(
        tmp_path,
        ccm_kubeconfig,
        label,
        f"--secure-port={port}",
        "--bind-address=127.0.0.1",
        f"--cert-dir={tmp_path / 'certs'}",
        "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
    )
    try:
        workers = await workers_of(ccm)
        await create_nodes(kube_client, kube_cleanup, names, label)

        async def all_initialised() -> bool:
            listed = await kube_client.get(
                "/api/v1/nodes", {"labelSelector": f"workers-test={label}"}
            )
            return len(listed["items"]) == NODES and all(
                n["spec"].get("providerID") and UNINITIALIZED_TAINT["key"] not in taint_keys(n)
                for n in listed["items"]
            )

        await eventually(all_initialised, within=90, what="every Node initialised")
        await asyncio.sleep(2.0)  # nothing more may follow
        # One cloud call per Node: no Node was initialised by both workers.
        assert ccm.cloud.calls()["InstanceMetadata"]["count"] == NODES
        synced = await synced_events(kube_client, names)
        assert synced == Counter(dict.fromkeys(names, 1))
        # Both shards worked, and /metrics reads as one daemon's.
        async with httpx2.AsyncClient(verify=False) as http:
            base = f"https://127.0.0.1:{port}"

            async def ready() -> bool:
                return (await http.get(f"{base}/readyz")).status_code == 200

            await eventually(ready, within=30, what="/readyz ok once both workers synced")
            text = (await http.get(f"{base}/metrics")).text
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }
        nodes_queue = (("name", "Nodes"),)
        assert samples["workqueue_adds_total", nodes_queue] >= NODES
        assert samples["workqueue_depth", nodes_queue] == 0
        assert samples["workqueue_work_duration_seconds_count", nodes_queue] >= NODES
        assert samples["leader_election_master_status", (("name", "cloud-controller-manager"),)]
        assert any(name == "rest_client_requests_total" for name, _ in samples)
        running = samples[
            "running_managed_controllers",
            (("manager", "cloud-controller-manager"), ("name", "cloud-node")),
        ]
        assert running == 1  # it runs (one shard in each worker), not "twice"
        log = ccm.log()
        assert "started worker process 0" in log
        assert "started worker process 1" in log
        assert "(shard 1 of 2)" in log
        assert "(shard 2 of 2)" in log
    finally:
        code = ccm.stop()
        await release_lease(kube_client)
    assert code == 0  # SIGTERM: the workers drained and exited, then the parent
    assert not any(alive(pid) for pid in workers)
    assert "Traceback" not in ccm.log()


async def synced_events(client: KubeClient, names: list[str]) -> Counter[str]:
    listed = await client.get("/api/v1/namespaces/default/events")
    wanted = set(names)
    counts: Counter[str] = Counter()
    for event in listed["items"]:
        name = event["involvedObject"].get("name", "")
        if name in wanted and event["reason"] == "Synced":
            counts[name] += int(event.get("count") or 1)
    return counts


async def test_losing_the_lease_kills_the_workers_and_exits_1(
    ccm_kubeconfig: Path,
    kube_client: KubeClient,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    ccm = start(tmp_path, ccm_kubeconfig, unique_name("w"))
    try:
        workers = await workers_of(ccm)
        await steal_lease(kube_client)
        assert ccm.wait(timeout=30) == 1
    finally:
        ccm.stop()
        await release_lease(kube_client)

    async def gone() -> bool:
        return not any(alive(pid) for pid in workers)

    await eventually(gone, within=5, what="no worker outlives the lease")
    log = ccm.log()
    assert "leaderelection lost" in log
    assert "Traceback" not in log


async def test_a_killed_worker_ends_the_daemon_with_status_1(
    ccm_kubeconfig: Path,
    kube_client: KubeClient,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    ccm = start(tmp_path, ccm_kubeconfig, unique_name("w"))
    try:
        workers = await workers_of(ccm)
        os.kill(workers[1], signal.SIGKILL)
        assert ccm.wait(timeout=30) == 1
    finally:
        ccm.stop()
        await release_lease(kube_client)
    assert not alive(workers[0])
    log = ccm.log()
    assert "worker process 1" in log
    assert "exited with status -9" in log
    assert "Traceback" not in log


async def test_a_killed_parent_takes_its_workers_with_it(
    ccm_kubeconfig: Path,
    kube_client: KubeClient,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    ccm = start(tmp_path, ccm_kubeconfig, unique_name("w"))
    try:
        workers = await workers_of(ccm)
        ccm.signal(signal.SIGKILL)
        ccm.wait(timeout=10)

        async def gone() -> bool:
            return not any(alive(pid) for pid in workers)

        await eventually(gone, within=5, what="PR_SET_PDEATHSIG ended the workers")
    finally:
        ccm.stop()
        await release_lease(kube_client)
