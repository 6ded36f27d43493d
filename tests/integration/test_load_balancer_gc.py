"""Leaked load balancers on the real apiserver: ``kube-ccm gc`` and the sweep controller.

A Service deleted while no CCM runs (and without the finalizer's protection, which
someone removed by hand) leaves its load balancer behind: nothing in the cluster
remembers it. Both tools find it from the provider's inventory and delete it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from kube_ccm.providers.simulated.state import CloudState
from kube_ccm.runtime.client import KubeClient
from kube_ccm.testing.controlplane import ControlPlane
from kube_ccm.testing.daemon import DaemonProcess
from kube_ccm.testing.waiting import eventually


def lb_service(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80}], **spec},
    }


async def leak_two_load_balancers(
    client: KubeClient, ccm: DaemonProcess, namespace: str
) -> list[str]:
    """Two Services with load balancers, then (daemon stopped) one deleted with its
    finalizer removed by hand and one turned into a ClusterIP Service the same way;
    a third stays a healthy LoadBalancer Service. Returns the leaked services' keys."""
    base = f"/api/v1/namespaces/{namespace}/services"
    for name in ("gone", "retyped", "healthy"):
        await client.create(base, lb_service(name))

    def ours() -> set[str]:
        return {b.service for b in ccm.cloud.load_balancers() if b.service.startswith(namespace)}

    await eventually(lambda: len(ours()) == 3, what="three load balancers")
    assert ccm.stop() == 0
    for name in ("gone", "retyped"):
        await client.patch(f"{base}/{name}", {"metadata": {"finalizers": None}}, patch_type="merge")
    await client.delete(f"{base}/gone")
    await client.patch(
        f"{base}/retyped",
        {"spec": {"type": "ClusterIP", "ports": [{"port": 80}]}},
        patch_type="merge",
    )
    return [f"{namespace}/gone", f"{namespace}/retyped"]


def gc(ccm: DaemonProcess, kubeconfig: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "kube_ccm",
            "gc",
            "--cloud-provider=simulated",
            f"--cloud-config={ccm.cloud_config_path}",
            f"--kubeconfig={kubeconfig}",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def test_kube_ccm_gc_reports_then_deletes_only_the_leaked_load_balancers(
    *,
    kube_controlplane: ControlPlane,
    ccm_kubeconfig: Path,
    kube_client: KubeClient,
    kube_namespace: str,
    tmp_path: Path,
) -> None:
    ccm = DaemonProcess(
        kubeconfig=ccm_kubeconfig,
        workdir=tmp_path / "daemon",
        args=["--leader-elect=false", "--controllers=service"],
    ).start()
    leaked = await leak_two_load_balancers(kube_client, ccm, kube_namespace)
    cloud = CloudState(ccm.state_path)  # the stopped daemon closed its handle

    report = gc(ccm, kube_controlplane.kubeconfig, "--dry-run")
    assert report.returncode == 1, report.stdout + report.stderr
    assert "2 leaked" in report.stdout
    assert f"Service {leaked[0]} no longer exists" in report.stdout
    assert f"Service {leaked[1]} is of type ClusterIP now" in report.stdout
    assert "nothing deleted" in report.stdout
    assert len([b for b in cloud.load_balancers() if b.service.startswith(kube_namespace)]) == 3

    done = gc(ccm, kube_controlplane.kubeconfig)
    assert done.returncode == 0, done.stdout + done.stderr
    left = {b.service for b in cloud.load_balancers() if b.service.startswith(kube_namespace)}
    assert left == {f"{kube_namespace}/healthy"}
    assert gc(ccm, kube_controlplane.kubeconfig, "--dry-run").returncode == 0


async def test_the_sweep_controller_deletes_leaks_after_two_sweeps(
    *,
    kube_controlplane: ControlPlane,
    ccm_kubeconfig: Path,
    kube_client: KubeClient,
    kube_namespace: str,
    tmp_path: Path,
) -> None:
    first = DaemonProcess(
        kubeconfig=ccm_kubeconfig,
        workdir=tmp_path / "daemon",
        args=["--leader-elect=false", "--controllers=service"],
    ).start()
    await leak_two_load_balancers(kube_client, first, kube_namespace)
    ccm = DaemonProcess(
        kubeconfig=ccm_kubeconfig,
        workdir=tmp_path / "daemon",
        args=[
            "--leader-elect=false",
            "--controllers=service,lb-gc",
            "--load-balancer-gc-period=1s",
        ],
    ).start()
    try:
        ccm.wait_for_log("Started load-balancer-gc-controller")

        def left() -> set[str]:
            return {
                b.service
                for b in ccm.cloud.load_balancers()
                if b.service.startswith(kube_namespace)
            }

        await eventually(lambda: left() == {f"{kube_namespace}/healthy"}, what="leaks swept")
        log = ccm.log()
        assert "looks leaked" in log, "first seen, then confirmed"
        assert "deleted leaked load balancer" in log
    finally:
        assert ccm.stop() == 0
