"""The node deletion guard on the real apiserver: a cloud that goes blind deletes nothing.

Five NotReady Nodes with running instances; the simulated cloud then sees no instance
at all (``simcloud blind on``, what a token short of a read privilege, another
account's key or another region produce). The daemon must delete none of them, put a
Warning ``NodeDeletionGuarded`` on each, show the held Nodes on ``/metrics`` and the
guard on ``/readyz?verbose`` (still ready), and log one line saying what to check.
When the cloud sees again, nothing is deleted; a real mass termination then trips the
guard again, and once an operator confirms it the Nodes go one per pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import itertools
import re
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from prometheus_client.parser import text_string_to_metric_families

from kube_ccm.api import wellknown as wk
from kube_ccm.runtime.client import ApiError, KubeClient
from kube_ccm.testbed.nodeidentity import node_identity_client
from kube_ccm.testing.controlplane import ControlPlane, ControlPlaneOptions
from kube_ccm.testing.daemon import DaemonProcess
from kube_ccm.testing.manifests import find_node, node_manifest, set_node_ready
from kube_ccm.testing.pytest_plugin import Cleanup
from kube_ccm.testing.waiting import eventually

FLEET = 5


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def events(client: KubeClient, reason: str) -> list[dict[str, Any]]:
    listed = await client.get(
        "/api/v1/namespaces/default/events", {"fieldSelector": f"reason={reason}"}
    )
    items: list[dict[str, Any]] = listed["items"]
    return items


async def present(client: KubeClient, label: str) -> list[str]:
    listed = await client.get("/api/v1/nodes", {"labelSelector": f"guard-test={label}"})
    return sorted(n["metadata"]["name"] for n in listed["items"])


def log_times(log: str, marker: str) -> list[datetime.datetime]:
    """The klog timestamps (``I1128 13:05:02.123456``) of the lines holding ``marker``."""
    times = []
    for line in log.splitlines():
        if marker in line:
            stamp = re.search(r"\d{4} (\d\d:\d\d:\d\d\.\d+)", line)
            assert stamp is not None, line
            times.append(datetime.datetime.strptime(stamp.group(1), "%H:%M:%S.%f"))
    return times


async def test_a_blind_cloud_deletes_no_node_until_its_identity_is_back_or_an_operator_confirms(
    ccm_kubeconfig: Path,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    label = unique_name("guard")
    names = [f"{label}-{i}" for i in range(FLEET)]
    port = free_port()
    ccm = DaemonProcess(
        kubeconfig=ccm_kubeconfig,
        workdir=tmp_path / "daemon",
        args=[
            "--leader-elect=false",
            "--controllers=cloud-node-lifecycle",
            "--node-monitor-period=500ms",
            "--cloud-call-timeout=2s",
            f"--node-selector=guard-test={label}",  # other tests' Nodes are not ours
            f"--secure-port={port}",
            "--bind-address=127.0.0.1",
            f"--cert-dir={tmp_path / 'certs'}",
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
        ],
    )
    for name in names:
        ccm.cloud.add_instance(name, zone="z", region="r", instance_type="t")
        manifest = node_manifest(name, tainted=False)
        manifest["metadata"]["labels"] = {"guard-test": label}
        kube_cleanup.add(f"/api/v1/nodes/{name}")
        await kube_client.create("/api/v1/nodes", manifest)
        await set_node_ready(kube_client, name, "False")
    ccm.start()
    base = f"https://127.0.0.1:{port}"
    try:
        async with httpx2.AsyncClient(verify=False) as http:

            async def get(path: str) -> httpx2.Response:
                return await http.get(f"{base}{path}")

            async def metric(name: str, labels: dict[str, str] | None = None) -> float | None:
                text = (await get("/metrics")).text
                for family in text_string_to_metric_families(text):
                    for sample in family.samples:
                        if sample.name == name and sample.labels == (labels or {}):
                            return sample.value
                return None

            async def ready() -> bool:
                try:
                    return (await get("/readyz")).status_code == 200
                except httpx2.HTTPError:
                    return False

            await eventually(ready, within=60, what="/readyz ok")
            ccm.cloud.set_blind(True)

            async def all_warned() -> bool:
                warned = {
                    e["involvedObject"]["name"]
                    for e in await events(kube_client, "NodeDeletionGuarded")
                }
                return warned >= set(names)

            await eventually(all_warned, within=60, what="a NodeDeletionGuarded Warning per Node")
            assert await metric(wk.METRIC_NODE_DELETION_GUARD_HELD) == FLEET
            assert (
                await metric(wk.METRIC_NODE_DELETION_GUARD_TRIPS + "_total", {"rule": "share"}) == 1
            )
            verbose = await get("/readyz?verbose")
            assert verbose.status_code == 200, "the daemon stays ready"
            assert (
                f"[-]node-deletion-guard tripped (share): {FLEET} Node deletions held "
                "(not counted for readiness)"
            ) in verbose.text
            ccm.wait_for_log("deletion guard", timeout=5)
            await _passes(ccm, 4)
            assert await present(kube_client, label) == names
            deleting = await events(kube_client, "DeletingNode")
            assert not [e for e in deleting if e["involvedObject"]["name"] in names]
            trips = [line for line in ccm.log().splitlines() if "guard tripped" in line]
            assert len(trips) == 1, "one log line per trip"
            for words in ("credentials", "account", "region", "permissions", "kubectl label"):
                assert words in trips[0]
            warning = next(
                e
                for e in await events(kube_client, "NodeDeletionGuarded")
                if e["involvedObject"]["name"] == names[0]
            )
            assert warning["type"] == "Warning"
            assert warning["source"]["component"] == "cloud-node-lifecycle-controller"

            # The identity is back: nothing deleted, the guard lets go.
            ccm.cloud.set_blind(False)
            ccm.wait_for_log("its identity is back", timeout=30)
            await _passes(ccm, 4)
            assert await present(kube_client, label) == names
            assert await metric(wk.METRIC_NODE_DELETION_GUARD_HELD) == 0
            assert "[+]node-deletion-guard ok" in (await get("/readyz?verbose")).text

            # A real mass termination: the guard trips again; the operator confirms.
            for name in names:
                ccm.cloud.set_instance_state(name, "terminated")

            async def tripped_again() -> bool:
                return ccm.log().count("guard tripped") == 2

            await eventually(tripped_again, within=60, what="the guard tripped again")
            trip_id = re.findall(rf"{re.escape(wk.LABEL_CONFIRM_NODE_DELETION)}=(\S+)", ccm.log())[
                -1
            ]
            await _passes(ccm, 2)
            assert await present(kube_client, label) == names
            for name in names:
                await kube_client.patch(
                    f"/api/v1/nodes/{name}",
                    {"metadata": {"labels": {wk.LABEL_CONFIRM_NODE_DELETION: trip_id}}},
                )

            async def all_gone() -> bool:
                return await present(kube_client, label) == []

            await eventually(all_gone, within=60, what="the confirmed Nodes deleted")
            held_after = [
                int(m)
                for m in re.findall(r"confirmed by its label \S+ \((\d+) more held\)", ccm.log())
            ]
            assert held_after == [4, 3, 2, 1, 0], "one Node at a time"
            deleted_at = log_times(ccm.log(), "confirmed by its label")
            gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(deleted_at)]
            assert all(gap >= 0.45 for gap in gaps), f"one per monitor period: {gaps}"
    finally:
        ccm.stop()


async def _passes(ccm: DaemonProcess, count: int) -> None:
    """Give the daemon time for at least ``count`` more lifecycle passes (500 ms apart)."""
    await asyncio.sleep(0.5 * count)


@pytest.fixture(scope="module")
def restricted_plane() -> Iterator[ControlPlane]:
    """A control plane of its own as clusters run: the Node authorizer before RBAC and
    the NodeRestriction admission plugin (the shared one is RBAC only)."""
    plane = ControlPlane(ControlPlaneOptions(real_nodes=True))
    plane.start()
    try:
        yield plane
    finally:
        plane.stop()


async def test_no_node_can_confirm_a_deletion_not_even_its_own(
    restricted_plane: ControlPlane, tmp_path: Path
) -> None:
    """The confirmation label, written by a kubelet's identity under NodeRestriction:
    refused on another Node and on its own, at registration as on update. (A kubelet
    may not delete its Node either: a node that could have itself deleted could register
    again without the taints an admin gave it.)"""
    own, other = "guard-own", "guard-other"
    admin = KubeClient.from_kubeconfig(restricted_plane.kubeconfig)
    node = node_identity_client(restricted_plane, own, tmp_path)
    confirm = {"metadata": {"labels": {wk.LABEL_CONFIRM_NODE_DELETION: "20261128T130000Z"}}}
    try:
        await admin.create("/api/v1/nodes", node_manifest(other, tainted=False))
        registering = node_manifest(own, tainted=False)
        registering["metadata"]["labels"] = dict(confirm["metadata"]["labels"])
        with pytest.raises(ApiError) as refused:
            await node.create("/api/v1/nodes", registering)
        assert refused.value.status == 403
        assert "is not allowed to set the following labels" in str(refused.value)
        await node.create("/api/v1/nodes", node_manifest(own, tainted=False))
        for name in (own, other):
            with pytest.raises(ApiError) as refused:
                await node.patch(f"/api/v1/nodes/{name}", confirm)
            assert refused.value.status == 403, name
        with pytest.raises(ApiError) as refused:
            await node.delete(f"/api/v1/nodes/{own}")
        assert refused.value.status == 403
        for name in (own, other):
            found = await find_node(admin, name)
            assert found is not None
            assert wk.LABEL_CONFIRM_NODE_DELETION not in (found["metadata"].get("labels") or {})
        # An admin can.
        await admin.patch(f"/api/v1/nodes/{own}", confirm)
    finally:
        for name in (own, other):
            with contextlib.suppress(ApiError):
                await admin.delete(f"/api/v1/nodes/{name}")
        await node.aclose()
        await admin.aclose()


async def test_a_dry_run_reports_held_deletions_as_held_not_as_would_delete(
    ccm_kubeconfig: Path,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    label = unique_name("guard-dry")
    names = [f"{label}-{i}" for i in range(3)]
    ccm = DaemonProcess(
        kubeconfig=ccm_kubeconfig,
        workdir=tmp_path / "daemon",
        args=[
            "--dry-run",
            "--controllers=cloud-node-lifecycle",
            "--node-monitor-period=500ms",
            "--cloud-call-timeout=2s",
            f"--node-selector=guard-test={label}",
        ],
    )
    for name in names:
        ccm.cloud.add_instance(name, zone="z", region="r", instance_type="t")
        manifest = node_manifest(name, tainted=False)
        manifest["metadata"]["labels"] = {"guard-test": label}
        kube_cleanup.add(f"/api/v1/nodes/{name}")
        await kube_client.create("/api/v1/nodes", manifest)
        await set_node_ready(kube_client, name, "False")
    ccm.cloud.set_blind(True)
    ccm.start()
    try:
        ccm.wait_for_log("node deletion guard tripped", timeout=60)
        await _passes(ccm, 4)
        log = ccm.log()
        assert (
            f"not deleting 3 Nodes whose instances the cloud reports gone ({' '.join(names)})"
            in log
        )
        assert not [n for n in names if f"would DELETE /api/v1/nodes/{n}" in log]
        assert await present(kube_client, label) == names
    finally:
        ccm.stop()


async def test_with_worker_processes_readyz_still_names_the_guard(
    ccm_kubeconfig: Path,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    """--worker-processes: the lifecycle controller runs in a worker, the parent serves
    /readyz and reads the guard's gauge from the workers."""
    label = unique_name("guard-w")
    names = [f"{label}-{i}" for i in range(3)]
    port = free_port()
    ccm = DaemonProcess(
        kubeconfig=ccm_kubeconfig,
        workdir=tmp_path / "daemon",
        args=[
            "--leader-elect=false",
            "--worker-processes=2",
            "--controllers=cloud-node-lifecycle",
            "--node-monitor-period=500ms",
            "--cloud-call-timeout=2s",
            f"--node-selector=guard-test={label}",
            f"--secure-port={port}",
            "--bind-address=127.0.0.1",
            f"--cert-dir={tmp_path / 'certs'}",
        ],
    )
    for name in names:
        ccm.cloud.add_instance(name, zone="z", region="r", instance_type="t")
        manifest = node_manifest(name, tainted=False)
        manifest["metadata"]["labels"] = {"guard-test": label}
        kube_cleanup.add(f"/api/v1/nodes/{name}")
        await kube_client.create("/api/v1/nodes", manifest)
        await set_node_ready(kube_client, name, "False")
    ccm.cloud.set_blind(True)
    ccm.start()
    try:
        async with httpx2.AsyncClient(verify=False) as http:

            async def guard_shown() -> bool:
                try:
                    answer = await http.get(f"https://127.0.0.1:{port}/readyz?verbose")
                except httpx2.HTTPError:
                    return False
                return answer.status_code == 200 and (
                    "[-]node-deletion-guard tripped: 3 Node deletions held "
                    "(not counted for readiness)" in answer.text
                )

            await eventually(guard_shown, within=60, what="the guard on the parent's /readyz")
        assert await present(kube_client, label) == names
    finally:
        ccm.stop()
