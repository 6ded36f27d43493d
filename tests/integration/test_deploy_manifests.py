"""deploy/: the manifests are valid for the real apiserver, and the RBAC is enough.

The daemon runs with the ServiceAccount's own token (TokenRequest), bound only by
``deploy/rbac.yaml``: leader election, node initialisation, a load balancer and
a route all work, and nothing is forbidden.
"""

from __future__ import annotations

import contextlib
import functools
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import yaml

from kube_ccm.runtime.client import ApiError, KubeClient
from kube_ccm.testing.controlplane import ControlPlane
from kube_ccm.testing.daemon import DaemonProcess
from kube_ccm.testing.pytest_plugin import Cleanup
from kube_ccm.testing.rbac import (
    CCM_SERVICE_ACCOUNT_USER,
    forbidden,
    granted_rules,
    now_timestamp,
    requests,
    unused_rules,
)
from kube_ccm.testing.waiting import eventually

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
SHIPPED = ("rbac.yaml", "rbac-pv-labels.yaml")
UNINITIALIZED = {
    "key": "node.cloudprovider.kubernetes.io/uninitialized",
    "value": "true",
    "effect": "NoSchedule",
}
PATHS = {
    "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
    "ConfigMap": "/api/v1/namespaces/{ns}/configmaps",
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    "Role": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
    "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
    "Deployment": "/apis/apps/v1/namespaces/{ns}/deployments",
    "DaemonSet": "/apis/apps/v1/namespaces/{ns}/daemonsets",
    "Service": "/api/v1/namespaces/{ns}/services",
    "MutatingWebhookConfiguration": (
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
    ),
    "ValidatingWebhookConfiguration": (
        "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
    ),
}


def documents(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def name_of(obj: dict[str, Any]) -> str:
    name: str = obj["metadata"]["name"]
    return name.replace(":", "-")


def collection(obj: dict[str, Any]) -> str:
    return PATHS[obj["kind"]].format(ns=obj["metadata"].get("namespace", ""))


async def test_every_manifest_passes_server_side_validation(kube_client: KubeClient) -> None:
    names = ["rbac.yaml", "rbac-pv-labels.yaml", "rbac-ippool.yaml"]
    names.append("rbac-service-account-credentials.yaml")
    names += ["deployment.yaml", "daemonset.yaml"]
    names.append("webhook/mutatingwebhookconfiguration.yaml")
    names.append("webhook/validatingwebhookconfiguration.yaml")
    checked = 0
    for name in names:
        for obj in documents(name):
            # Renamed: the session already installed the RBAC (ccm_kubeconfig).
            renamed = {**obj, "metadata": {**obj["metadata"], "name": "dry-run-" + name_of(obj)}}
            await kube_client.request(
                "POST", collection(renamed), params={"dryRun": "All"}, body=renamed
            )
            checked += 1
    assert checked >= 10


async def test_the_daemon_works_with_exactly_the_shipped_rbac_and_needs_every_rule(
    *,
    kube_controlplane: ControlPlane,
    ccm_kubeconfig: Path,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
    kube_namespace: str,
    tmp_path: Path,
) -> None:
    """The daemon with every controller (PV labels too) and the secure port runs as the
    shipped ServiceAccount: nothing is forbidden (audit log), and every rule of the
    shipped RBAC is used, so removing any one of them fails this test."""
    since = now_timestamp()
    leases = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"
    with contextlib.suppress(ApiError):  # so that this daemon creates the Lease
        await kube_client.delete(f"{leases}/cloud-controller-manager")
    port = free_port()
    ccm = DaemonProcess(
        kubeconfig=ccm_kubeconfig,
        workdir=tmp_path / "daemon",
        args=[
            "--controllers=*,pvl",
            "--cluster-cidr=10.244.0.0/16",
            "--route-reconciliation-period=1s",
            "--node-monitor-period=1s",
            "--leader-elect-lease-duration=3s",
            "--leader-elect-renew-deadline=2s",
            "--leader-elect-retry-period=500ms",
            f"--secure-port={port}",
            "--bind-address=127.0.0.1",
        ],
    ).start()
    try:
        node, gone = unique_name("node"), unique_name("node")
        for name, cidr in ((node, "10.244.9.0/24"), (gone, "10.244.10.0/24")):
            kube_cleanup.add(f"/api/v1/nodes/{name}")
            await kube_client.create(
                "/api/v1/nodes",
                {
                    "metadata": {"name": name},
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
        ccm.cloud.add_volume(f"vol-{volume}", zone="sim-zone-a", region="sim-region-1")
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

        async def initialised(name: str) -> bool:
            got = await kube_client.get(f"/api/v1/nodes/{name}")
            taints = [t["key"] for t in got["spec"].get("taints") or []]
            return bool(got["spec"].get("providerID")) and UNINITIALIZED["key"] not in taints

        async def has_ingress() -> bool:
            svc = await kube_client.get(f"{services}/web")
            return bool(svc.get("status", {}).get("loadBalancer", {}).get("ingress"))

        async def labelled() -> bool:
            pv = await kube_client.get(f"/api/v1/persistentvolumes/{volume}")
            return bool(pv["metadata"].get("labels"))

        for name in (node, gone):
            await eventually(functools.partial(initialised, name), within=60, what=name)
        await eventually(has_ingress, within=60, what="an LB under the SA")
        await eventually(
            lambda: any(r.target_node == node for r in ccm.cloud.routes()),
            within=60,
            what="a route under the SA",
        )
        await eventually(labelled, within=60, what="PV labels under the SA")
        # The lifecycle controller deletes a NotReady node whose instance is gone.
        ccm.cloud.set_instance_state(gone, "terminated")
        await kube_client.patch(
            f"/api/v1/nodes/{gone}/status",
            {"status": {"conditions": [{"type": "Ready", "status": "Unknown", "reason": "T"}]}},
        )

        async def deleted() -> bool:
            try:
                await kube_client.get(f"/api/v1/nodes/{gone}")
            except ApiError as exc:
                return exc.not_found
            return False

        await eventually(deleted, within=60, what="the terminated node deleted under the SA")
        # The secure port: a bearer token (TokenReview) and an anonymous request (SAR).
        async with httpx2.AsyncClient(verify=False) as client:
            base = f"https://127.0.0.1:{port}"

            async def anonymous_refused() -> bool:
                return (await client.get(f"{base}/metrics")).status_code == 403

            await eventually(anonymous_refused, within=30, what="a SubjectAccessReview")
            response = await client.get(
                f"{base}/metrics", headers={"Authorization": f"Bearer {_token(ccm_kubeconfig)}"}
            )
            assert response.status_code == 403  # authenticated, but not a metrics reader
        await kube_client.delete(f"{services}/web")  # released by the daemon (finalizer)

        async def service_gone() -> bool:
            listed = await kube_client.get(services)
            return not listed["items"]

        await eventually(service_gone, within=60, what="the LB service released")
    finally:
        assert ccm.stop() == 0
    refused = forbidden(kube_controlplane, CCM_SERVICE_ACCOUNT_USER, since)
    assert not refused, refused
    shipped = [doc for name in SHIPPED for doc in documents(name)]
    unused = unused_rules(
        granted_rules(shipped, "cloud-controller-manager"),
        requests(kube_controlplane, CCM_SERVICE_ACCOUNT_USER, since),
    )
    assert not unused, "granted but never used (least privilege: drop or test them):\n" + (
        "\n".join(unused)
    )


def _token(kubeconfig: Path) -> str:
    token: str = yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]["token"]
    return token


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
