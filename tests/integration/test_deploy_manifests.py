"""deploy/: the manifests are valid for the real apiserver, and the RBAC is enough.

The daemon runs with the ServiceAccount's own token (TokenRequest), bound only by
``deploy/rbac.yaml``: leader election, node initialisation, a load balancer and
a route all work, and nothing is forbidden.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from kube_ccm.runtime.client import KubeClient
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
PATHS = {
    "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
    "ConfigMap": "/api/v1/namespaces/{ns}/configmaps",
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
    "Deployment": "/apis/apps/v1/namespaces/{ns}/deployments",
    "DaemonSet": "/apis/apps/v1/namespaces/{ns}/daemonsets",
    "Service": "/api/v1/namespaces/{ns}/services",
    "MutatingWebhookConfiguration": (
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
    ),
}


def documents(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def collection(obj: dict[str, Any]) -> str:
    return PATHS[obj["kind"]].format(ns=obj["metadata"].get("namespace", ""))


async def test_every_manifest_passes_server_side_validation(kube_client: KubeClient) -> None:
    names = ["rbac.yaml", "rbac-pv-labels.yaml", "deployment.yaml", "daemonset.yaml"]
    names.append("webhook/mutatingwebhookconfiguration.yaml")
    checked = 0
    for name in names:
        for obj in documents(name):
            await kube_client.request("POST", collection(obj), params={"dryRun": "All"}, body=obj)
            checked += 1
    assert checked >= 10


async def test_the_daemon_works_with_exactly_the_shipped_rbac(
    *,
    kube_controlplane: ControlPlane,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
    kube_namespace: str,
    tmp_path: Path,
) -> None:
    for obj in documents("rbac.yaml"):
        path = collection(obj)
        kube_cleanup.add(f"{path}/{obj['metadata']['name']}")
        await kube_client.create(path, obj)
    token_request = await kube_client.create(
        "/api/v1/namespaces/kube-system/serviceaccounts/cloud-controller-manager/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    admin = yaml.safe_load(kube_controlplane.kubeconfig.read_text())
    cluster = admin["clusters"][0]["cluster"]
    kubeconfig = tmp_path / "ccm.kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": cluster}],
                "users": [{"name": "ccm", "user": {"token": token_request["status"]["token"]}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "ccm"}}],
                "current-context": "c",
            }
        )
    )
    ccm = DaemonProcess(
        kubeconfig=kubeconfig,
        workdir=tmp_path / "daemon",
        args=[
            "--cluster-cidr=10.244.0.0/16",
            "--route-reconciliation-period=1s",
            "--leader-elect-lease-duration=3s",
            "--leader-elect-renew-deadline=2s",
            "--leader-elect-retry-period=500ms",
        ],
    ).start()
    try:
        node = unique_name("node")
        kube_cleanup.add(f"/api/v1/nodes/{node}")
        await kube_client.create(
            "/api/v1/nodes",
            {
                "metadata": {"name": node},
                "spec": {
                    "taints": [UNINITIALIZED],
                    "podCIDR": "10.244.9.0/24",
                    "podCIDRs": ["10.244.9.0/24"],
                },
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

        async def initialised() -> bool:
            got = await kube_client.get(f"/api/v1/nodes/{node}")
            taints = [t["key"] for t in got["spec"].get("taints") or []]
            return bool(got["spec"].get("providerID")) and UNINITIALIZED["key"] not in taints

        async def has_ingress() -> bool:
            svc = await kube_client.get(f"{services}/web")
            return bool(svc.get("status", {}).get("loadBalancer", {}).get("ingress"))

        await eventually(initialised, within=60, what="the node initialised under the SA")
        await eventually(has_ingress, within=60, what="an LB under the SA")
        await eventually(
            lambda: any(r.target_node == node for r in ccm.cloud.routes()),
            within=60,
            what="a route under the SA",
        )
        lease = await kube_client.get(
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/cloud-controller-manager"
        )
        assert lease["spec"]["holderIdentity"]
        await kube_client.delete(f"{services}/web")  # released by the daemon (finalizer)

        async def service_gone() -> bool:
            listed = await kube_client.get(services)
            return not listed["items"]

        await eventually(service_gone, within=60, what="the LB service released")
        assert "forbidden" not in ccm.log().lower(), ccm.log()[-3000:]
    finally:
        assert ccm.stop() == 0
