"""The secure port of a running daemon: health, readiness, metrics, configz."""

from __future__ import annotations

import socket
from pathlib import Path

import httpx2

from kube_ccm.testing.controlplane import ControlPlane
from kube_ccm.testing.daemon import DaemonProcess
from kube_ccm.testing.waiting import eventually


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def test_health_readiness_and_metrics_on_the_secure_port(
    kube_controlplane: ControlPlane, tmp_path: Path
) -> None:
    port = free_port()
    ccm = DaemonProcess(
        kubeconfig=kube_controlplane.kubeconfig,
        workdir=tmp_path / "daemon",
        args=[
            f"--secure-port={port}",
            "--bind-address=127.0.0.1",
            f"--cert-dir={tmp_path / 'certs'}",
            "--controllers=cloud-node,cloud-node-lifecycle",
            "--leader-elect-lease-duration=2s",
            "--leader-elect-renew-deadline=1s",
            "--leader-elect-retry-period=500ms",
            f"--leader-elect-resource-name=ccm-{port}",
        ],
    ).start()
    base = f"https://127.0.0.1:{port}"
    try:
        ccm.wait_for_log("serving securely")
        # A self-signed certificate for loopback: trust is not what this test checks.
        async with httpx2.AsyncClient(verify=False) as client:

            async def ready() -> bool:
                return (await client.get(f"{base}/readyz")).status_code == 200

            await eventually(ready, within=60, what="/readyz ok")

            async def leading() -> bool:
                # A standby is ready too; the controllers' checks appear once it leads.
                verbose = await client.get(f"{base}/healthz", params={"verbose": "1"})
                return "cloud-node-controller" in verbose.text

            await eventually(leading, within=60, what="the controllers' health checks")
            health = await client.get(f"{base}/healthz", params={"verbose": "1"})
            assert health.status_code == 200
            assert "[+]leaderElection ok" in health.text
            assert "[+]cloud-node-controller ok" in health.text
            assert "[+]cloud-node-lifecycle-controller ok" in health.text
            one = await client.get(f"{base}/healthz/cloud-node-controller")
            assert one.text == "ok"
            assert (await client.get(f"{base}/healthz/nope")).status_code == 404
            assert (await client.get(f"{base}/livez")).text == "ok"
            metrics = (await client.get(f"{base}/metrics")).text
            labels = '{manager="cloud-controller-manager",name="cloud-node"}'
            assert f"running_managed_controllers{labels} 1.0" in metrics
            assert 'workqueue_depth{name="Nodes"}' in metrics
            assert "leader_election_master_status" in metrics
            configz = (await client.get(f"{base}/configz")).json()
            assert configz["kind"] == "CloudControllerManagerConfiguration"
            assert configz["config"]["secure_port"] == port
    finally:
        assert ccm.stop() == 0


def test_a_busy_secure_port_is_a_clear_startup_error(
    kube_controlplane: ControlPlane, tmp_path: Path
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ccm = DaemonProcess(
            kubeconfig=kube_controlplane.kubeconfig,
            workdir=tmp_path / "daemon",
            args=[f"--secure-port={port}", "--bind-address=127.0.0.1", "--leader-elect=false"],
        ).start()
        assert ccm.wait(timeout=60) == 1
    assert f"cannot serve on 127.0.0.1:{port}" in ccm.log()
    assert "--secure-port=0 turns serving off" in ccm.log()
    ccm.stop()
