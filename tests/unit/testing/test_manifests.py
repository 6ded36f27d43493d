"""The integration tests' Node and Service builders, against the in-memory API server."""

from __future__ import annotations

from kube_ccm.api import wellknown as wk
from kube_ccm.testing import Cleanup, FakeApiServer
from kube_ccm.testing.manifests import (
    UNINITIALIZED_TAINT,
    create_node,
    find_node,
    node_manifest,
    service_manifest,
    set_node_ready,
    taint_keys,
)


def test_a_node_is_tainted_uninitialized_unless_told_otherwise() -> None:
    assert node_manifest("n1") == {
        "metadata": {"name": "n1"},
        "spec": {"taints": [UNINITIALIZED_TAINT]},
    }
    assert UNINITIALIZED_TAINT["key"] == wk.TAINT_UNINITIALIZED
    plain = node_manifest("n2", tainted=False, providerID="p://2")
    assert plain["spec"] == {"taints": [], "providerID": "p://2"}


def test_a_service_is_a_load_balancer_on_port_80_unless_told_otherwise() -> None:
    assert service_manifest("web") == {
        "metadata": {"name": "web", "annotations": {}},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
    }
    dns = service_manifest(
        "dns", ports=[{"port": 53, "protocol": "UDP"}], annotations={"a": "b"}, type="ClusterIP"
    )
    assert dns["metadata"]["annotations"] == {"a": "b"}
    assert dns["spec"] == {"type": "ClusterIP", "ports": [{"port": 53, "protocol": "UDP"}]}


async def test_create_find_ready_and_clean_up_a_node() -> None:
    fake = FakeApiServer()
    async with fake.client() as client:
        cleanup = Cleanup()
        await create_node(client, cleanup, "n1", providerID="p://1")
        found = await find_node(client, "n1")
        assert found is not None
        assert found["spec"]["providerID"] == "p://1"
        assert taint_keys(found) == [wk.TAINT_UNINITIALIZED]
        await set_node_ready(client, "n1", "Unknown")
        found = await find_node(client, "n1")
        assert found is not None
        assert found["status"]["conditions"][0]["status"] == "Unknown"
        await cleanup.run(client)
        assert await find_node(client, "n1") is None
    assert taint_keys(None) == []
