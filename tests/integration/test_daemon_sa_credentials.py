"""``--use-service-account-credentials`` (§1.9, §8.4) on the real apiserver.

The daemon runs as deploy/'s ServiceAccount plus
deploy/rbac-service-account-credentials.yaml; each controller then writes as its
own ServiceAccount in kube-system (created by the daemon, authorised by the
cluster's bootstrap roles), which the apiserver's audit log shows.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from kube_ccm.runtime.client import ApiError, KubeClient
from kube_ccm.testbed.rbac import (
    CCM_SERVICE_ACCOUNT_USER,
    forbidden,
    granted_rules,
    install_service_account,
    now_timestamp,
    requests,
    unused_rules,
)
from kube_ccm.testing.controlplane import ControlPlane
from kube_ccm.testing.daemon import DaemonProcess
from kube_ccm.testing.pytest_plugin import Cleanup
from kube_ccm.testing.waiting import eventually

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
UNINITIALIZED = {
    "key": "node.cloudprovider.kubernetes.io/uninitialized",
    "value": "true",
    "effect": "NoSchedule",
}


def sa(name: str) -> str:
    return f"system:serviceaccount:kube-system:{name}"


def did(events: list[dict[str, Any]], verb: str, resource: str, subresource: str = "") -> bool:
    return any(
        e["verb"] == verb
        and (e.get("objectRef") or {}).get("resource") == resource
        and (e.get("objectRef") or {}).get("subresource", "") == subresource
        and e.get("responseStatus", {}).get("code", 0) < 300
        for e in events
    )


def sa_credentials_rbac() -> list[dict[str, Any]]:
    text = (DEPLOY / "rbac-service-account-credentials.yaml").read_text()
    return [d for d in yaml.safe_load_all(text) if d]


async def install_with_sa_credentials(
    plane: ControlPlane, extra: list[dict[str, Any]], tmp_path: Path
) -> Path:
    """The daemon's ServiceAccount with deploy/'s RBAC plus the SA-credentials RBAC."""
    return await install_service_account(
        plane,
        extra,
        "kube-system",
        "cloud-controller-manager",
        kubeconfig=tmp_path / "ccm.kubeconfig",
    )


async def test_each_controller_writes_as_its_own_service_account(
    *,
    kube_controlplane: ControlPlane,
    ccm_kubeconfig: Path,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    kube_namespace: str,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    del ccm_kubeconfig  # installs rbac.yaml and rbac-pv-labels.yaml for the session
    extra = sa_credentials_rbac()
    kubeconfig = await install_with_sa_credentials(kube_controlplane, extra, tmp_path)
    since = now_timestamp()
    ccm = DaemonProcess(
        kubeconfig=kubeconfig,
        workdir=tmp_path / "daemon",
        args=[
            "--use-service-account-credentials",
            "--leader-elect=false",
            "--controllers=*,pvl",
            "--cluster-cidr=10.244.0.0/16",
            "--route-reconciliation-period=1s",
        ],
    ).start()
    try:
        node = unique_name("node")
        kube_cleanup.add(f"/api/v1/nodes/{node}")
        cidr = "10.244.77.0/24"
        await kube_client.create(
            "/api/v1/nodes",
            {
                "metadata": {"name": node},
                "spec": {"taints": [UNINITIALIZED], "podCIDR": cidr, "podCIDRs": [cidr]},
            },
        )
        services = f"/api/v1/namespaces/{kube_namespace}/services"
        await kube_client.create(
            services,
            {
                "metadata": {"name": "web"},
                "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
            },
        )
        volume = unique_name("pv")
        ccm.cloud.add_volume(f"vol-{volume}", zone="sim-zone-b", region="sim-region-1")
        kube_cleanup.add(f"/api/v1/persistentvolumes/{volume}")
        await kube_client.create(
            "/api/v1/persistentvolumes",
            {
                "metadata": {"name": volume},
                "spec": {
                    "capacity": {"storage": "1Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "csi": {"driver": "simulated.csi.kube-ccm.io", "volumeHandle": f"vol-{volume}"},
                },
            },
        )

        async def converged() -> bool:
            got = await kube_client.get(f"/api/v1/nodes/{node}")
            svc = await kube_client.get(f"{services}/web")
            pv = await kube_client.get(f"/api/v1/persistentvolumes/{volume}")
            conditions = {c["type"]: c["status"] for c in got["status"].get("conditions") or []}
            return (
                UNINITIALIZED["key"] not in [t["key"] for t in got["spec"].get("taints") or []]
                and bool(svc.get("status", {}).get("loadBalancer", {}).get("ingress"))
                and bool(pv["metadata"].get("labels"))
                and conditions.get("NetworkUnavailable") == "False"
            )

        await eventually(converged, within=90, what="every controller did its work")
        for name in ("node-controller", "service-controller", "route-controller"):
            await kube_client.get(f"/api/v1/namespaces/kube-system/serviceaccounts/{name}")
    finally:
        assert ccm.stop() == 0
    assert did(requests(kube_controlplane, sa("node-controller"), since), "patch", "nodes")
    assert did(
        requests(kube_controlplane, sa("service-controller"), since), "patch", "services", "status"
    )
    assert did(
        requests(kube_controlplane, sa("route-controller"), since), "patch", "nodes", "status"
    )
    assert did(
        requests(kube_controlplane, sa("pvl-controller"), since), "patch", "persistentvolumes"
    )
    # The daemon's own identity did none of the controllers' writes.
    own = requests(kube_controlplane, CCM_SERVICE_ACCOUNT_USER, since)
    assert not did(own, "patch", "nodes")
    assert not did(own, "patch", "services", "status")
    for user in (CCM_SERVICE_ACCOUNT_USER, *(sa(n) for n in ("node-controller", "pvl-controller"))):
        assert not forbidden(kube_controlplane, user, since)
    assert not unused_rules(granted_rules(extra, "cloud-controller-manager"), own)


async def test_each_controllers_service_account_exists_once_it_runs_before_any_write(
    *,
    kube_controlplane: ControlPlane,
    ccm_kubeconfig: Path,
    kube_client: KubeClient,
    tmp_path: Path,
) -> None:
    """Upstream's client builder creates a controller's ServiceAccount when the controller
    starts; with nothing to do (no LoadBalancer Service, no node, no volume) the service,
    route and PV-label controllers never write, and their accounts must exist anyway."""
    del ccm_kubeconfig
    extra = sa_credentials_rbac()
    kubeconfig = await install_with_sa_credentials(kube_controlplane, extra, tmp_path)
    accounts = "/api/v1/namespaces/kube-system/serviceaccounts"
    names = ("service-controller", "route-controller", "pvl-controller")
    for name in names:  # left by earlier tests in the shared cluster
        try:
            await kube_client.delete(f"{accounts}/{name}")
        except ApiError as exc:
            if not exc.not_found:
                raise

    async def absent(name: str) -> bool:
        try:
            await kube_client.get(f"{accounts}/{name}")
        except ApiError as exc:
            return exc.not_found
        return False

    for name in names:
        await eventually(functools.partial(absent, name), what=f"{name} deleted")
    ccm = DaemonProcess(
        kubeconfig=kubeconfig,
        workdir=tmp_path / "daemon",
        args=[
            "--use-service-account-credentials",
            "--leader-elect=false",
            "--controllers=service,route,pvl",
            "--cluster-cidr=10.244.0.0/16",
        ],
    ).start()
    try:
        ccm.wait_for_log("Started service-lb-controller")

        async def all_exist() -> bool:
            return not [n for n in names if await absent(n)]

        await eventually(all_exist, within=30, what="every controller's ServiceAccount")
    finally:
        assert ccm.stop() == 0
