"""deploy/admission-policies.yaml on the real apiserver: what RBAC lets the CCM's
identity do and the policies refuse, what they still allow, and that nobody else is
affected. (That the daemon works with them in force is
tests/integration/test_rbac_combinations.py.)

The CCM here is a ServiceAccount of its own bound by deploy/rbac.yaml and
deploy/rbac-ippool.yaml (renamed, as the chart's ``name`` renames them), so that
RBAC grants every request below and only the policies can refuse it.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml

from kube_ccm.runtime.client import ApiError, KubeClient
from kube_ccm.testing.controlplane import ControlPlane
from kube_ccm.testing.pytest_plugin import Cleanup
from kube_ccm.testing.rbac import install_policies, install_service_account, renamed
from kube_ccm.testing.waiting import eventually

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
ACCOUNT = "ccm-policies"
IPADDRESSES = "/apis/networking.k8s.io/v1/ipaddresses"
MANAGED_BY = "ipaddress.kubernetes.io/managed-by"
FINALIZER = "service.kubernetes.io/load-balancer-cleanup"
SPEC = "kube-ccm may not change a Service's spec"
ANNOTATIONS = (
    "kube-ccm may change only the annotations kube-vip.io/loadbalancerIPs and "
    "ippool.kube-ccm.io/allocated of a Service"
)
FINALIZERS = (
    "kube-ccm may add or remove only the finalizer "
    "service.kubernetes.io/load-balancer-cleanup of a Service"
)
LABELS = "kube-ccm may not change a Service's labels or owner references"
CREATE_IPADDRESS = (
    "kube-ccm may create and update only IPAddress objects labelled "
    "ipaddress.kubernetes.io/managed-by=ippool.kube-ccm.io"
)
CHANGE_IPADDRESS = (
    "kube-ccm may update and delete only IPAddress objects labelled "
    "ipaddress.kubernetes.io/managed-by=ippool.kube-ccm.io"
)


def documents(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def ipaddress_object(address: str, namespace: str, manager: str | None) -> dict[str, Any]:
    labels = {MANAGED_BY: manager} if manager else {}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "IPAddress",
        "metadata": {"name": address, "labels": labels},
        "spec": {
            "parentRef": {"group": "", "resource": "services", "namespace": namespace, "name": "x"}
        },
    }


async def refused(call: Awaitable[Any], message: str) -> None:
    """``call`` fails with 403 and the policy's message."""
    with pytest.raises(ApiError) as caught:
        await call
    assert caught.value.status == 403, caught.value
    assert "ValidatingAdmissionPolicy" in caught.value.message, caught.value
    assert message in caught.value.message, caught.value


@dataclass
class Cluster:
    admin: KubeClient
    ccm: KubeClient
    tenant: KubeClient
    namespace: str
    cleanup: Cleanup

    @property
    def services(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/services"


@pytest_asyncio.fixture
async def cluster(
    kube_controlplane: ControlPlane,
    kube_client: KubeClient,
    kube_namespace: str,
    kube_cleanup: Cleanup,
    tmp_path: Path,
) -> AsyncIterator[Cluster]:
    """The policies installed and enforced; clients for the CCM's identity and for a
    tenant that may edit Services in its namespace."""
    rbac = renamed(documents("rbac.yaml") + documents("rbac-ippool.yaml"), ACCOUNT)
    ccm_config = await install_service_account(
        kube_controlplane, rbac, "kube-system", ACCOUNT, kubeconfig=tmp_path / "ccm"
    )
    tenant_rbac: list[dict[str, Any]] = [
        {"kind": "ServiceAccount", "metadata": {"name": "tenant", "namespace": kube_namespace}},
        {
            "kind": "Role",
            "metadata": {"name": "services", "namespace": kube_namespace},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["services", "services/status"],
                    "verbs": ["get", "update", "patch"],
                }
            ],
        },
        {
            "kind": "RoleBinding",
            "metadata": {"name": "services", "namespace": kube_namespace},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "services",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": kube_namespace}],
        },
    ]
    tenant_config = await install_service_account(
        kube_controlplane, tenant_rbac, kube_namespace, "tenant", kubeconfig=tmp_path / "tenant"
    )
    for path in await install_policies(
        kube_client, renamed(documents("admission-policies.yaml"), ACCOUNT)
    ):
        kube_cleanup.add(path)
    async with (
        KubeClient.from_kubeconfig(ccm_config) as ccm,
        KubeClient.from_kubeconfig(tenant_config) as tenant,
    ):
        world = Cluster(kube_client, ccm, tenant, kube_namespace, kube_cleanup)
        await wait_until_enforced(world)
        yield world


async def wait_until_enforced(cluster: Cluster) -> None:
    """Both policies refuse the CCM (the admission plugin loads them asynchronously)."""
    await cluster.admin.create(
        cluster.services, {"metadata": {"name": "probe"}, "spec": {"ports": [{"port": 80}]}}
    )
    attempt = itertools.count()

    async def labels_refused() -> bool:
        try:
            await cluster.ccm.patch(
                f"{cluster.services}/probe/status",
                {"metadata": {"labels": {"probe": str(next(attempt))}}},
                patch_type="merge",
            )
        except ApiError as exc:
            if exc.status != 403 or LABELS not in exc.message:
                raise
            return True
        return False

    async def ipaddress_refused() -> bool:
        body = ipaddress_object("198.51.100.250", cluster.namespace, None)
        try:
            await cluster.ccm.create(IPADDRESSES, body)
        except ApiError as exc:
            if exc.status != 403 or CREATE_IPADDRESS not in exc.message:
                raise
            return True
        await cluster.admin.delete(f"{IPADDRESSES}/198.51.100.250")
        return False

    await eventually(labels_refused, within=30, what="the Service policy enforced")
    await eventually(ipaddress_refused, within=30, what="the IPAddress policy enforced")
    await cluster.admin.delete(f"{cluster.services}/probe")


async def web_service(cluster: Cluster) -> dict[str, Any]:
    # Deleted after the test: its namespace stays Terminating without
    # kube-controller-manager, and a LoadBalancer Service showing an address
    # would be there for later tests (`kube-ccm doctor` probes them).
    cluster.cleanup.add(f"{cluster.services}/web")
    service: dict[str, Any] = await cluster.admin.create(
        cluster.services,
        {
            "metadata": {
                "name": "web",
                "labels": {"app": "web"},
                "annotations": {"example.com/owner": "team-a"},
            },
            "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
        },
    )
    return service


async def test_the_ccm_may_not_change_a_service_beyond_its_annotations_finalizer_and_status(
    cluster: Cluster,
) -> None:
    await web_service(cluster)
    web = f"{cluster.services}/web"

    def merge(path: str, body: dict[str, Any]) -> Awaitable[Any]:
        return cluster.ccm.patch(path, body, patch_type="merge")

    # Refused, on the Service and on its status (whose strategy keeps the spec but
    # lets metadata through).
    await refused(merge(web, {"spec": {"ports": [{"port": 81}]}}), SPEC)
    await refused(merge(web, {"spec": {"externalIPs": ["203.0.113.9"]}}), SPEC)
    for path in (web, f"{web}/status"):
        await refused(
            merge(path, {"metadata": {"annotations": {"example.com/owner": "ccm"}}}), ANNOTATIONS
        )
        await refused(
            merge(path, {"metadata": {"annotations": {"example.com/owner": None}}}), ANNOTATIONS
        )
        await refused(
            merge(path, {"metadata": {"annotations": {"kube-vip.io/other": "x"}}}), ANNOTATIONS
        )
        await refused(merge(path, {"metadata": {"labels": {"app": "other"}}}), LABELS)
        await refused(merge(path, {"metadata": {"finalizers": ["example.com/keep"]}}), FINALIZERS)
    current = (await cluster.admin.get(web))["metadata"]["resourceVersion"]
    # Allowed: ippool's annotations, the cleanup finalizer, the status.
    addresses = {
        "kube-vip.io/loadbalancerIPs": "192.0.2.7",
        "ippool.kube-ccm.io/allocated": "192.0.2.7",
    }
    await merge(web, {"metadata": {"annotations": addresses}})
    await merge(f"{web}/status", {"metadata": {"finalizers": [FINALIZER]}})
    await merge(f"{web}/status", {"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.7"}]}}})
    await merge(web, {"metadata": {"annotations": dict.fromkeys(addresses)}})
    await merge(f"{web}/status", {"metadata": {"finalizers": None}})
    # A Service without annotations or finalizers gets them, and loses them again.
    cluster.cleanup.add(f"{cluster.services}/bare")
    await cluster.admin.create(
        cluster.services, {"metadata": {"name": "bare"}, "spec": {"ports": [{"port": 80}]}}
    )
    bare = f"{cluster.services}/bare"
    await merge(bare, {"metadata": {"annotations": addresses}})
    await merge(bare, {"metadata": {"annotations": dict.fromkeys(addresses)}})
    await merge(f"{bare}/status", {"metadata": {"finalizers": [FINALIZER]}})
    await merge(f"{bare}/status", {"metadata": {"finalizers": None}})
    assert not (await cluster.admin.get(bare))["metadata"].get("annotations")
    got = await cluster.admin.get(web)
    assert got["metadata"]["resourceVersion"] != current
    assert got["metadata"]["labels"] == {"app": "web"}
    assert got["metadata"]["annotations"] == {"example.com/owner": "team-a"}
    assert got["spec"]["ports"][0]["port"] == 80
    assert [i["ip"] for i in got["status"]["loadBalancer"]["ingress"]] == ["192.0.2.7"]


async def test_a_tenant_and_the_admin_are_not_affected(cluster: Cluster) -> None:
    await web_service(cluster)
    web = f"{cluster.services}/web"
    await cluster.tenant.patch(
        web,
        {
            "metadata": {"labels": {"app": "v2"}, "annotations": {"example.com/owner": "b"}},
            "spec": {"ports": [{"port": 8080}]},
        },
        patch_type="merge",
    )
    await cluster.tenant.patch(
        f"{web}/status", {"metadata": {"finalizers": ["example.com/keep"]}}, patch_type="merge"
    )
    got = await cluster.admin.get(web)
    assert got["spec"]["ports"][0]["port"] == 8080
    assert got["metadata"]["finalizers"] == ["example.com/keep"]
    await cluster.tenant.patch(
        f"{web}/status", {"metadata": {"finalizers": None}}, patch_type="merge"
    )
    address = "198.51.100.251"
    cluster.cleanup.add(f"{IPADDRESSES}/{address}")
    await cluster.admin.create(IPADDRESSES, ipaddress_object(address, cluster.namespace, None))
    await cluster.admin.delete(f"{IPADDRESSES}/{address}")


async def test_the_ccm_may_write_only_ipaddresses_labelled_as_ippool_s(
    cluster: Cluster,
) -> None:
    service = await web_service(cluster)
    # The apiserver's own IPAddress of the Service's ClusterIP.
    cluster_ip = f"{IPADDRESSES}/{service['spec']['clusterIP']}"
    own = await cluster.admin.get(cluster_ip)
    assert own["metadata"]["labels"][MANAGED_BY] == "ipallocator.k8s.io"
    await refused(cluster.ccm.delete(cluster_ip), CHANGE_IPADDRESS)
    relabelled = {
        **own,
        "metadata": {**own["metadata"], "labels": {MANAGED_BY: "ippool.kube-ccm.io"}},
    }
    await refused(cluster.ccm.replace(cluster_ip, relabelled), CHANGE_IPADDRESS)
    address = "198.51.100.252"
    path = cluster.cleanup.add(f"{IPADDRESSES}/{address}")
    for manager in (None, "other.example.com"):
        await refused(
            cluster.ccm.create(IPADDRESSES, ipaddress_object(address, cluster.namespace, manager)),
            CREATE_IPADDRESS,
        )
    # Another manager's claim: neither taken over nor deleted.
    await cluster.admin.create(
        IPADDRESSES, ipaddress_object(address, cluster.namespace, "other.example.com")
    )
    other = await cluster.ccm.get(path)
    taken = {
        **other,
        "metadata": {**other["metadata"], "labels": {MANAGED_BY: "ippool.kube-ccm.io"}},
    }
    await refused(cluster.ccm.replace(path, taken), CHANGE_IPADDRESS)
    await refused(cluster.ccm.delete(path), CHANGE_IPADDRESS)
    await cluster.admin.delete(path)
    # Its own: created, updated (holders), deleted.
    created = await cluster.ccm.create(
        IPADDRESSES, ipaddress_object(address, cluster.namespace, "ippool.kube-ccm.io")
    )
    created["metadata"]["annotations"] = {"ippool.kube-ccm.io/holders": "[]"}
    await cluster.ccm.replace(path, created)
    refused_relabel = await cluster.ccm.get(path)
    refused_relabel["metadata"]["labels"] = {MANAGED_BY: "other.example.com"}
    await refused(cluster.ccm.replace(path, refused_relabel), CREATE_IPADDRESS)
    await cluster.ccm.delete(path)
    with pytest.raises(ApiError) as gone:
        await cluster.admin.get(path)
    assert gone.value.not_found
