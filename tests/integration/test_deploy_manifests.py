"""deploy/: every manifest is valid for the real apiserver (server-side dry-run).

That the RBAC and admission policies are enough, and no wider than used, for each
controller/provider combination is tests/integration/test_rbac_combinations.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kube_ccm.runtime.client import KubeClient

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
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
    "ValidatingAdmissionPolicy": (
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
    ),
    "ValidatingAdmissionPolicyBinding": (
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"
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
    names = ["rbac.yaml", "rbac-nodes.yaml", "rbac-pv-labels.yaml", "rbac-ippool.yaml"]
    names.append("rbac-kubelet-serving-certs.yaml")
    names.append("rbac-servicelb.yaml")
    names.append("rbac-service-account-credentials.yaml")
    names.append("admission-policies.yaml")
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
