"""Nodes and Services as a real API server takes them (dicts), for integration tests::

    await create_node(client, cleanup, "n1")             # tainted uninitialized, as a
                                                         # kubelet with an external cloud
    await set_node_ready(client, "n1", "Unknown")        # the kubelet stopped reporting
    assert UNINITIALIZED_TAINT["key"] not in taint_keys(await find_node(client, "n1"))
    await client.create("/api/v1/namespaces/default/services", service_manifest("web"))

The typed counterparts for unit tests are :func:`kube_ccm.testing.world.node_object`
and :func:`~kube_ccm.testing.world.service_object`.
"""

from __future__ import annotations

from typing import Any

from kube_ccm.api import wellknown as wk
from kube_ccm.cloudprovider import KubernetesClient
from kube_ccm.testing.cleanup import Cleanup

UNINITIALIZED_TAINT: dict[str, str] = {
    "key": wk.TAINT_UNINITIALIZED,
    "value": "true",
    "effect": "NoSchedule",
}
"""The taint a kubelet started with ``--cloud-provider=external`` registers its Node with."""


def node_manifest(
    name: str,
    *,
    tainted: bool = True,
    annotations: dict[str, str] | None = None,
    addresses: list[dict[str, str]] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A Node named ``name``; ``spec`` fields in the API's spelling (``providerID=...``).
    ``addresses`` go in with the Node, as a kubelet registers (a later status patch
    could land after a CCM initialised it)."""
    taints = [dict(UNINITIALIZED_TAINT)] if tainted else []
    node: dict[str, Any] = {"metadata": {"name": name}, "spec": {"taints": taints, **spec}}
    if annotations:
        node["metadata"]["annotations"] = dict(annotations)
    if addresses is not None:
        node["status"] = {"addresses": list(addresses)}
    return node


def service_manifest(
    name: str,
    *,
    ports: list[dict[str, Any]] | None = None,
    annotations: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A Service of type LoadBalancer (``type=...`` says otherwise) on port 80 unless
    ``ports`` says otherwise; other ``spec`` fields in the API's spelling."""
    return {
        "metadata": {"name": name, "annotations": dict(annotations or {})},
        "spec": {
            "type": "LoadBalancer",
            "ports": [{"port": 80}] if ports is None else ports,
            **spec,
        },
    }


async def create_node(
    client: KubernetesClient,
    cleanup: Cleanup,
    name: str,
    *,
    tainted: bool = True,
    annotations: dict[str, str] | None = None,
    addresses: list[dict[str, str]] | None = None,
    **spec: Any,
) -> None:
    """Create :func:`node_manifest`'s Node, deleted when the test ends."""
    cleanup.add(f"/api/v1/nodes/{name}")
    manifest = node_manifest(
        name, tainted=tainted, annotations=annotations, addresses=addresses, **spec
    )
    await client.create("/api/v1/nodes", manifest)


async def set_node_ready(client: KubernetesClient, name: str, status: str) -> None:
    """Set the Node's Ready condition (``"True"``, ``"False"``, ``"Unknown"``)."""
    await client.patch(
        f"/api/v1/nodes/{name}/status",
        {"status": {"conditions": [{"type": "Ready", "status": status, "reason": "Test"}]}},
    )


async def find_node(client: KubernetesClient, name: str) -> dict[str, Any] | None:
    """The Node, or None if there is none of that name (no 404 to catch)."""
    listed = await client.get("/api/v1/nodes", {"fieldSelector": f"metadata.name={name}"})
    items: list[dict[str, Any]] = listed["items"]
    return items[0] if items else None


def taint_keys(node: dict[str, Any] | None) -> list[str]:
    """The keys of the Node's taints (none for a missing Node)."""
    return [t["key"] for t in ((node or {}).get("spec", {}).get("taints") or [])]


__all__ = [
    "UNINITIALIZED_TAINT",
    "create_node",
    "find_node",
    "node_manifest",
    "service_manifest",
    "set_node_ready",
    "taint_keys",
]
