"""The test bed gives later work what it needs: real API semantics on loopback.

Each scenario exercises one behaviour a cloud controller relies on and that a
fake would only imitate: taints, the status subresources, finalizers holding a
deletion, watch expiry and optimistic concurrency on Leases.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from kube_ccm.runtime.client import ApiError, KubeClient
from kube_ccm.testing.controlplane import ControlPlane
from kube_ccm.testing.pytest_plugin import Cleanup

UNINITIALIZED = "node.cloudprovider.kubernetes.io/uninitialized"
LB_FINALIZER = "service.kubernetes.io/load-balancer-cleanup"


def node_manifest(name: str, taints: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "spec": {"taints": taints or []},
    }


async def test_uninitialized_taint_can_be_set_at_registration_and_removed(
    kube_client: KubeClient, kube_cleanup: Cleanup, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("node")
    kube_cleanup.add(f"/api/v1/nodes/{name}")
    taint = {"key": UNINITIALIZED, "value": "true", "effect": "NoSchedule"}
    other = {"key": "example.com/keep", "effect": "NoExecute"}
    created = await kube_client.create("/api/v1/nodes", node_manifest(name, [taint, other]))
    # The real apiserver adds taints of its own (TaintNodesByCondition adds
    # node.kubernetes.io/not-ready): a fake would not.
    taints = created["spec"]["taints"]
    assert taint in taints
    assert other in taints
    assert "node.kubernetes.io/not-ready" in [t["key"] for t in taints]

    # Node taints have no merge key: a strategic-merge patch replaces the list.
    remaining = [t for t in taints if t["key"] != UNINITIALIZED]
    patched = await kube_client.patch(f"/api/v1/nodes/{name}", {"spec": {"taints": remaining}})

    assert patched["spec"]["taints"] == remaining
    fetched = await kube_client.get(f"/api/v1/nodes/{name}")
    assert UNINITIALIZED not in [t["key"] for t in fetched["spec"]["taints"]]
    assert other in fetched["spec"]["taints"]


async def test_node_addresses_are_written_through_the_status_subresource(
    kube_client: KubeClient, kube_cleanup: Cleanup, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("node")
    kube_cleanup.add(f"/api/v1/nodes/{name}")
    await kube_client.create("/api/v1/nodes", node_manifest(name))
    addresses = [
        {"type": "InternalIP", "address": "10.1.2.3"},
        {"type": "Hostname", "address": name},
    ]

    # On the main resource the status is ignored ...
    await kube_client.patch(f"/api/v1/nodes/{name}", {"status": {"addresses": addresses}})
    assert "addresses" not in (await kube_client.get(f"/api/v1/nodes/{name}"))["status"]

    # ... on nodes/status it is written.
    await kube_client.patch(f"/api/v1/nodes/{name}/status", {"status": {"addresses": addresses}})
    fetched = await kube_client.get(f"/api/v1/nodes/{name}")
    assert fetched["status"]["addresses"] == addresses


async def test_load_balancer_finalizer_and_ingress_go_through_services_status_and_hold_deletion(
    kube_client: KubeClient, kube_namespace: str
) -> None:
    path = f"/api/v1/namespaces/{kube_namespace}/services/web"
    await kube_client.create(
        f"/api/v1/namespaces/{kube_namespace}/services",
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web"},
            "spec": {"type": "LoadBalancer", "ports": [{"port": 80, "protocol": "TCP"}]},
        },
    )
    # What the service controller does: finalizer, then status, both on services/status.
    await kube_client.patch(f"{path}/status", {"metadata": {"finalizers": [LB_FINALIZER]}})
    await kube_client.patch(
        f"{path}/status",
        {"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.10", "ipMode": "VIP"}]}}},
    )
    service = await kube_client.get(path)
    assert service["metadata"]["finalizers"] == [LB_FINALIZER]
    assert service["status"]["loadBalancer"]["ingress"] == [{"ip": "203.0.113.10", "ipMode": "VIP"}]
    assert service["spec"]["ports"][0]["nodePort"] > 0  # allocated by the apiserver itself

    await kube_client.delete(path)
    held = await kube_client.get(path)
    assert held["metadata"]["deletionTimestamp"]
    assert held["metadata"]["finalizers"] == [LB_FINALIZER]

    await kube_client.patch(
        f"{path}/status",
        [{"op": "remove", "path": "/metadata/finalizers/0"}],
        patch_type="json",
    )
    with pytest.raises(ApiError) as gone:
        await kube_client.get(path)
    assert gone.value.not_found


async def test_watch_from_a_resource_version_older_than_the_watch_cache_is_410_gone(
    kube_controlplane: ControlPlane,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
) -> None:
    name = unique_name("node")
    kube_cleanup.add(f"/api/v1/nodes/{name}")
    await kube_client.create("/api/v1/nodes", node_manifest(name))
    old = (await kube_client.get("/api/v1/nodes"))["metadata"]["resourceVersion"]

    # A restarted apiserver's watch cache starts at the current revision, so an
    # informer's remembered resourceVersion is now too old: what informers must
    # survive with a relist.
    kube_controlplane.restart_apiserver()

    async def drain(client: KubeClient) -> None:
        async with asyncio.timeout(30):
            async for _ in client.watch("/api/v1/nodes", resource_version=old):
                pass

    async with KubeClient.from_kubeconfig(kube_controlplane.kubeconfig) as client:
        with pytest.raises(ApiError) as error:
            await drain(client)

    assert error.value.gone, error.value
    assert error.value.reason == "Expired"


async def test_watch_from_the_list_resource_version_streams_changes(
    kube_client: KubeClient, kube_cleanup: Cleanup, unique_name: Callable[[str], str]
) -> None:
    listed = await kube_client.get("/api/v1/nodes")
    name = unique_name("node")
    kube_cleanup.add(f"/api/v1/nodes/{name}")

    async def first_added() -> str:
        async for event in kube_client.watch(
            "/api/v1/nodes", resource_version=listed["metadata"]["resourceVersion"]
        ):
            if event.type == "ADDED":
                return bytes(event.object).decode()
        return ""

    watcher = asyncio.create_task(first_added())
    await kube_client.create("/api/v1/nodes", node_manifest(name))
    async with asyncio.timeout(30):
        raw = await watcher
    assert f'"name":"{name}"' in raw


async def test_lease_update_with_a_stale_resource_version_is_409_conflict(
    kube_client: KubeClient, kube_namespace: str
) -> None:
    base = f"/apis/coordination.k8s.io/v1/namespaces/{kube_namespace}/leases"
    lease = await kube_client.create(
        base,
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "cloud-controller-manager"},
            "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15},
        },
    )
    stale = dict(lease)
    lease["spec"]["holderIdentity"] = "b"
    await kube_client.replace(f"{base}/cloud-controller-manager", lease)

    stale["spec"] = {"holderIdentity": "c", "leaseDurationSeconds": 15}
    with pytest.raises(ApiError) as error:
        await kube_client.replace(f"{base}/cloud-controller-manager", stale)

    assert error.value.conflict
    current = await kube_client.get(f"{base}/cloud-controller-manager")
    assert current["spec"]["holderIdentity"] == "b"
