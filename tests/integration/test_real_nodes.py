"""A real kubelet's Node, initialised by ``kube-ccm run`` (the deployment recipe, for real).

The control plane serves real nodes (Node authorizer, NodeRestriction), and the test
bed (:mod:`kube_ccm.testbed.nodes`) runs kube-controller-manager with
``--cloud-provider=external``, kube-scheduler and one kubelet with
``--cloud-provider=external`` and ``--node-ip`` on its own containerd. kube-ccm runs
as a process with the simulated cloud, under the shipped RBAC.

Needs root, containerd, runc, the CNI plugins and nft (``make sysdeps``) and the node
binaries (built on first use, or ``make node-binaries``); skipped with the reason
otherwise, except under ``CI=true``, where a skip fails the run. The test bed must
leave the host as it found it: checked after the module.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kube_ccm.runtime.client import KubeClient
from kube_ccm.testbed.nodes import (
    NodeOptions,
    RealNodes,
    assert_host_restored,
    host_snapshot,
    pause_deployment,
    real_nodes_unavailable,
)
from kube_ccm.testbed.rbac import AUDITED_USERS, forbidden, install_service_account
from kube_ccm.testing.binaries import ControlPlaneBinariesError, ensure_node_binaries
from kube_ccm.testing.controlplane import (
    ControlPlane,
    ControlPlaneError,
    ControlPlaneOptions,
)
from kube_ccm.testing.daemon import DaemonProcess
from kube_ccm.testing.manifests import taint_keys
from kube_ccm.testing.pytest_plugin import unavailable
from kube_ccm.testing.waiting import eventually

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
UNINITIALIZED = "node.cloudprovider.kubernetes.io/uninitialized"
PROVIDED_NODE_IP = "alpha.kubernetes.io/provided-node-ip"
CCM_ARGS = (
    "--leader-elect=false",
    "--node-monitor-period=1s",
    # The daemon's own address refresh stays out of the way: whatever changes the
    # addresses after initialisation is the kubelet.
    "--node-status-update-frequency=5m",
    "--cloud-call-timeout=2s",
    "--controllers=cloud-node,cloud-node-lifecycle",
)


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[ControlPlane, RealNodes]]:
    """A control plane for real nodes, with one real node; the host is checked after."""
    reason = real_nodes_unavailable()
    if reason:
        unavailable(reason)
    try:
        binaries = ensure_node_binaries()
    except ControlPlaneBinariesError as exc:
        unavailable(f"the node binaries are missing: {exc}")
    before = host_snapshot()
    plane = ControlPlane(ControlPlaneOptions(real_nodes=True, audit_users=AUDITED_USERS))
    try:
        plane.start()
    except ControlPlaneError as exc:
        unavailable(f"the real control plane could not start: {exc}")
    nodes = RealNodes(plane, NodeOptions(count=1), binaries=binaries)
    try:
        nodes.start()  # on a machine that has everything, a failure here is a failure
        yield plane, nodes
    finally:
        nodes.stop()
        plane.stop()
    assert_host_restored(before, nodes)


@pytest.fixture(scope="module")
def real_ccm_kubeconfig(
    cluster: tuple[ControlPlane, RealNodes], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """The daemon's kubeconfig: the shipped RBAC's ServiceAccount, never refused."""
    plane, _ = cluster
    kubeconfig = asyncio.run(
        install_service_account(
            plane,
            [
                doc
                for name in ("rbac.yaml", "rbac-nodes.yaml", "rbac-pv-labels.yaml")
                for doc in yaml.safe_load_all((DEPLOY / name).read_text())
                if doc
            ],
            "kube-system",
            "cloud-controller-manager",
            kubeconfig=tmp_path_factory.mktemp("ccm") / "ccm.kubeconfig",
        )
    )
    yield kubeconfig
    refused = [r for user in AUDITED_USERS for r in forbidden(plane, user)]
    assert not refused, "the daemon was refused:\n" + "\n".join(refused)


def _ready_heartbeat(node: dict[str, Any]) -> str:
    for condition in node["status"].get("conditions") or []:
        if condition["type"] == "Ready" and condition["status"] == "True":
            heartbeat: str = condition["lastHeartbeatTime"]
            return heartbeat
    return ""


async def test_a_real_kubelets_node_is_initialised_and_the_pod_that_waited_for_it_runs(
    cluster: tuple[ControlPlane, RealNodes], real_ccm_kubeconfig: Path, tmp_path: Path
) -> None:
    plane, nodes = cluster
    node = nodes.nodes[0]
    path = f"/api/v1/nodes/{node.name}"
    # kube-controller-manager with --cloud-provider=external leaves the cloud to the CCM.
    kcm_log = nodes.process("kube-controller-manager").log()
    for cloud_loop in ("cloud-node-lifecycle-controller", "service-lb-controller"):
        assert f'"Skipping a cloud provider controller" controller="{cloud_loop}"' in kcm_log
    async with KubeClient.from_kubeconfig(plane.kubeconfig) as client:
        # Registered as --cloud-provider=external and --node-ip make a kubelet register.
        registered = await client.get(path)
        assert UNINITIALIZED in taint_keys(registered)
        assert registered["metadata"]["annotations"][PROVIDED_NODE_IP] == node.ip
        assert "providerID" not in registered["spec"]
        assert registered["status"]["addresses"] == [
            {"type": "InternalIP", "address": node.ip},
            {"type": "Hostname", "address": node.name},
        ]

        async def ready_with_only_the_cloud_taint() -> bool:
            found = await client.get(path)
            return _ready_heartbeat(found) != "" and taint_keys(found) == [UNINITIALIZED]

        await eventually(
            ready_with_only_the_cloud_taint,
            what="the node Ready, tainted only as uninitialised (not-ready taint gone)",
        )

        # A Deployment that does not tolerate the taint waits for the CCM.
        namespace = f"real-{nodes.id}"
        await client.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        )
        await client.create(
            f"/apis/apps/v1/namespaces/{namespace}/deployments", pause_deployment("w")
        )

        async def pod() -> dict[str, Any] | None:
            listed = await client.get(f"/api/v1/namespaces/{namespace}/pods")
            items: list[dict[str, Any]] = listed["items"]
            return items[0] if items else None

        async def unschedulable_for_the_taint() -> bool:
            found = await pod()
            conditions = (found or {}).get("status", {}).get("conditions") or []
            return any(
                c["type"] == "PodScheduled"
                and c.get("reason") == "Unschedulable"
                # v1.36's scheduler does not name the taint; the node has only that one.
                and "untolerated taint" in c.get("message", "")
                for c in conditions
            )

        await eventually(
            unschedulable_for_the_taint, what="the pod unschedulable for the uninitialised taint"
        )
        assert taint_keys(await client.get(path)) == [UNINITIALIZED]
        await asyncio.sleep(2)  # still waiting a while later
        waiting = await pod()
        assert waiting is not None
        assert waiting["status"]["phase"] == "Pending"
        assert "nodeName" not in waiting["spec"]

        # kube-ccm initialises the node from the cloud, which knows it by its name.
        ccm = DaemonProcess(kubeconfig=real_ccm_kubeconfig, workdir=tmp_path / "ccm", args=CCM_ARGS)
        instance = ccm.cloud.add_instance(
            node.name,
            zone="zone-a",
            region="region-1",
            instance_type="sim.small",
            addresses=[("InternalIP", node.ip), ("ExternalIP", "203.0.113.10")],
        )
        ccm.start()
        try:
            expected_addresses = [
                {"type": "InternalIP", "address": node.ip},
                {"type": "ExternalIP", "address": "203.0.113.10"},
                {"type": "Hostname", "address": node.name},
            ]

            async def initialised() -> bool:
                # The addresses are a second write, right after the taint's (as upstream's).
                found = await client.get(path)
                return (
                    UNINITIALIZED not in taint_keys(found)
                    and bool(found["spec"].get("providerID"))
                    and found["status"]["addresses"] == expected_addresses
                )

            await eventually(initialised, within=60, what="the node initialised by kube-ccm")
            done = await client.get(path)
            assert done["spec"]["providerID"] == f"simulated://{instance.id}"
            assert done["metadata"]["labels"]["topology.kubernetes.io/zone"] == "zone-a"
            assert done["metadata"]["labels"]["node.kubernetes.io/instance-type"] == "sim.small"
            assert done["status"]["addresses"] == expected_addresses

            # The pod that waited is scheduled and runs.
            async def running() -> bool:
                found = await pod() or {"spec": {}, "status": {}}
                return bool(
                    found["spec"].get("nodeName") == node.name
                    and found["status"].get("phase") == "Running"
                )

            await eventually(running, within=60, what="the waiting pod running on the node")

            # The kubelet's later status updates (every 2 s here) keep what kube-ccm wrote.
            first = _ready_heartbeat(await client.get(path))
            beats = {first}

            async def three_more_status_updates() -> bool:
                found = await client.get(path)
                assert found["status"]["addresses"] == expected_addresses
                assert found["spec"]["providerID"] == f"simulated://{instance.id}"
                assert UNINITIALIZED not in taint_keys(found)
                beats.add(_ready_heartbeat(found))
                return len(beats) >= 4

            await eventually(
                three_more_status_updates, within=30, what="three more kubelet status updates"
            )
            assert ccm.poll() is None, ccm.log()[-3000:]
        finally:
            ccm.stop()
