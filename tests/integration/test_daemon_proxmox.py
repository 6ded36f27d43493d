"""The proxmox provider in the daemon (`kube-ccm run`), on the real apiserver and
fakepve (a fake of the whole PVE API) served on loopback by the test: a VM's life
drives its Node (init, migration, shutdown taint, deletion), and the faults fakepve
offers (lost quorum, an offline PVE node, a refused token, 5xx, a VM locked by a
backup, a slow network)
never delete a Node, each leaving the line a user would look for in the log; one
name in two clusters is an Event naming both VMs, and the Node is not initialised.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kube_ccm.providers.proxmox.fakepve import TOKEN_SECRET, FakePveServer, agent_interfaces
from kube_ccm.runtime.client import KubeClient
from kube_ccm.testing.daemon import DaemonProcess
from kube_ccm.testing.manifests import (
    UNINITIALIZED_TAINT,
    create_node,
    find_node,
    set_node_ready,
    taint_keys,
)
from kube_ccm.testing.pytest_plugin import Cleanup
from kube_ccm.testing.waiting import eventually

SHUTDOWN_KEY = "node.cloudprovider.kubernetes.io/shutdown"
FAST = (
    "--leader-elect=false",
    "--controllers=cloud-node,cloud-node-lifecycle",
    "--node-monitor-period=500ms",
    "--node-status-update-frequency=2s",
    "--cloud-call-timeout=2s",
)


@pytest.fixture
def ccm(
    ccm_kubeconfig: Path, fakepve_server: FakePveServer, tmp_path: Path
) -> Iterator[DaemonProcess]:
    config_file = tmp_path / "proxmox.yaml"
    config_file.write_text(
        yaml.safe_dump(
            {
                "clusters": [fakepve_server.cluster_config()],
                "cacheTTL": "0s",
                "requestTimeout": "1s",
            }
        )
    )
    process = DaemonProcess(
        kubeconfig=ccm_kubeconfig,
        workdir=tmp_path / "daemon",
        provider="proxmox",
        cloud_config_file=config_file,
        args=list(FAST),
    ).start()
    yield process
    process.stop()


async def initialised(client: KubeClient, name: str) -> dict[str, Any]:
    async def done() -> bool:
        node = await find_node(client, name)
        return UNINITIALIZED_TAINT["key"] not in taint_keys(node) and bool(
            (node or {}).get("status", {}).get("addresses")
        )

    await eventually(done, within=60, what=f"Node {name} initialised from its Proxmox VM")
    found = await find_node(client, name)
    assert found is not None
    return found


async def test_a_vms_life_drives_its_node(
    ccm: DaemonProcess,
    fakepve_server: FakePveServer,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
) -> None:
    pve = fakepve_server
    await asyncio.to_thread(
        pve.add_vm, 100, "px-a", cores=4, memory_mib=8192, agent=agent_interfaces("10.0.0.5")
    )
    await create_node(kube_client, kube_cleanup, "px-a")

    obj = await initialised(kube_client, "px-a")
    labels = obj["metadata"]["labels"]
    assert obj["spec"]["providerID"] == "proxmox://cluster-1/100"
    assert labels["node.kubernetes.io/instance-type"] == "4VCPU-8GB"
    assert labels["topology.kubernetes.io/region"] == "cluster-1"
    assert labels["topology.kubernetes.io/zone"] == "pve1"
    assert labels["topology.proxmox.sinextra.dev/zone"] == "pve1"
    assert {"type": "InternalIP", "address": "10.0.0.5"} in obj["status"]["addresses"]

    # A live migration: the VM keeps its VMID (so its providerID), its addresses are
    # refreshed; the zone label, written once at initialisation, stays (documented).
    await pve.acall(pve.pve.migrate(100, "pve2"))
    pve.vm(100).agent = {"interfaces": agent_interfaces("10.0.0.6")}

    async def readdressed() -> bool:
        node = await find_node(kube_client, "px-a") or {}
        return {"type": "InternalIP", "address": "10.0.0.6"} in node["status"]["addresses"]

    await eventually(readdressed, within=30, what="px-a's addresses refreshed after migration")
    obj = await find_node(kube_client, "px-a") or {}
    assert obj["spec"]["providerID"] == "proxmox://cluster-1/100"

    # Stopped, the kubelet gone quiet: the shutdown taint.
    await set_node_ready(kube_client, "px-a", "Unknown")
    await asyncio.to_thread(pve.set_status, 100, "stopped")

    async def shutdown_tainted() -> bool:
        return SHUTDOWN_KEY in taint_keys(await find_node(kube_client, "px-a"))

    await eventually(shutdown_tainted, within=30, what="the shutdown taint on a stopped VM")

    # Destroyed: the Node goes.
    await asyncio.to_thread(pve.remove_vm, 100)

    async def deleted() -> bool:
        return await find_node(kube_client, "px-a") is None

    await eventually(deleted, within=30, what="the Node of a destroyed VM deleted")


async def test_faults_never_delete_a_node(
    ccm: DaemonProcess,
    fakepve_server: FakePveServer,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
) -> None:
    pve = fakepve_server
    fake = pve.pve
    await asyncio.to_thread(pve.add_vm, 100, "px-b", node="pve2")
    await create_node(kube_client, kube_cleanup, "px-b")
    await initialised(kube_client, "px-b")
    await set_node_ready(kube_client, "px-b", "Unknown")

    async def still_there(seconds: float) -> None:
        deadline = asyncio.get_running_loop().time() + seconds
        while asyncio.get_running_loop().time() < deadline:
            node = await find_node(kube_client, "px-b")
            assert node is not None, "px-b deleted during a fault"
            assert SHUTDOWN_KEY not in taint_keys(node), "px-b tainted shut down during a fault"
            await asyncio.sleep(0.5)

    def slow(seconds: float) -> None:
        fake.time_scale = 1.0 if seconds else 0
        fake.slow_network(seconds)

    def log() -> str:
        return ccm.log_path.read_text()

    def lock(lock: str | None, qmpstatus: str) -> None:
        if lock:
            fake.snapshot_lock(100, lock)
        else:
            fake.unlock(100)
        fake.vm(100).qmpstatus = qmpstatus

    faults: list[tuple[str, Any, Any, str]] = [
        (
            "lost quorum",
            lambda: fake.fail("GET", "/cluster/resources", 500, "cluster not ready - no quorum?"),
            fake.failures.clear,
            "the cluster lost quorum",
        ),
        (
            "an offline PVE node",
            lambda: fake.set_node_offline("pve2"),
            lambda: fake.set_node_offline("pve2", offline=False),
            "the node is offline or not answering",
        ),
        (
            "a refused token",
            fake.apitokens.clear,
            lambda: fake.apitokens.__setitem__(pve.token_id, TOKEN_SECRET),
            "was refused",
        ),
        (
            "a 5xx on every call",
            lambda: fake.fail("GET", "", 502, "Bad Gateway"),
            fake.failures.clear,
            "Bad Gateway",
        ),
        (
            "a VM locked by a backup, paused",
            lambda: lock("backup", "paused"),
            lambda: lock(None, "running"),
            "is locked (backup) and QEMU reports 'paused'",
        ),
        (
            "a slow network",
            lambda: slow(5.0),
            lambda: slow(0.0),
            "got no answer within 1s",
        ),
    ]
    for what, start, end, line in faults:
        await pve.acall(start)
        try:
            await still_there(5)
        finally:
            await pve.acall(end)
        assert line in log(), f"{what}: no {line!r} in the daemon's log"

    # The daemon was checking all along: once the VM is destroyed, the Node goes.
    await asyncio.to_thread(pve.remove_vm, 100)

    async def deleted() -> bool:
        return await find_node(kube_client, "px-b") is None

    await eventually(deleted, within=30, what="px-b deleted once its VM is verifiably gone")


@pytest.fixture
def ccm_two_clusters(
    ccm_kubeconfig: Path, fakepve_server: FakePveServer, tmp_path: Path
) -> Iterator[tuple[DaemonProcess, FakePveServer]]:
    with FakePveServer(tmp_path / "pve2", region="cluster-2") as second:
        config_file = tmp_path / "two.yaml"
        clusters = [fakepve_server.cluster_config(), second.cluster_config()]
        config_file.write_text(yaml.safe_dump({"clusters": clusters, "cacheTTL": "0s"}))
        process = DaemonProcess(
            kubeconfig=ccm_kubeconfig,
            workdir=tmp_path / "daemon",
            provider="proxmox",
            cloud_config_file=config_file,
            args=list(FAST),
        ).start()
        try:
            yield process, second
        finally:
            process.stop()


async def test_one_name_in_two_clusters_is_an_event_naming_both_and_no_guess(
    ccm_two_clusters: tuple[DaemonProcess, FakePveServer],
    fakepve_server: FakePveServer,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
) -> None:
    _, second_cluster = ccm_two_clusters
    await asyncio.to_thread(fakepve_server.add_vm, 100, "px-twin")
    await asyncio.to_thread(second_cluster.add_vm, 300, "px-twin", node="pve7")
    await create_node(kube_client, kube_cleanup, "px-twin")

    async def events() -> list[dict[str, Any]]:
        listed = await kube_client.get(
            "/api/v1/namespaces/default/events",
            {"fieldSelector": "involvedObject.name=px-twin,reason=DuplicateVMName"},
        )
        return list(listed["items"])

    async def reported() -> bool:
        return bool(await events())

    await eventually(reported, within=30, what="a DuplicateVMName Event on px-twin")
    message = (await events())[0]["message"]
    assert "VM 100 on pve1 in cluster-1" in message
    assert "VM 300 on pve7 in cluster-2" in message
    node = await find_node(kube_client, "px-twin")
    assert node is not None
    assert UNINITIALIZED_TAINT["key"] in taint_keys(node), "initialised from a guess"
    assert not node["spec"].get("providerID")


async def test_a_token_that_loses_vm_audit_deletes_no_node_and_says_which_privilege(
    ccm: DaemonProcess,
    fakepve_server: FakePveServer,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
) -> None:
    """Issue 42: PVE lists no VM to a token without VM.Audit; with three Nodes
    NotReady, that empty answer must delete none of them. The privilege back, nothing
    is deleted; a VM really destroyed then, its Node goes (and only it)."""
    pve = fakepve_server
    names = ["px-c", "px-d", "px-e"]
    for i, name in enumerate(names):
        await asyncio.to_thread(pve.add_vm, 110 + i, name)
        await create_node(kube_client, kube_cleanup, name)
    for name in names:
        await initialised(kube_client, name)
        await set_node_ready(kube_client, name, "Unknown")

    def revoke() -> None:
        pve.pve.acl = {}
        pve.pve.grant(pve.token_id, "/vms", "VM.Monitor")  # something else, not VM.Audit

    hint = "`pveum acl modify /vms --tokens kube-ccm@pve!ccm --roles PVEAuditor`"
    await pve.acall(revoke)

    async def said() -> bool:
        return ccm.log().count(hint) >= len(names)

    await eventually(said, within=60, what="the missing VM.Audit named in the log")
    assert "holds no VM.Audit on /vms" in ccm.log()
    for name in names:
        assert await find_node(kube_client, name) is not None, f"{name} deleted"

    await pve.acall(lambda: setattr(pve.pve, "acl", None))  # every privilege back
    await asyncio.to_thread(pve.remove_vm, 110)

    async def deleted() -> bool:
        return await find_node(kube_client, "px-c") is None

    await eventually(deleted, within=60, what="px-c deleted once its VM is destroyed")
    for name in names[1:]:
        assert await find_node(kube_client, name) is not None, f"{name} deleted"


async def test_the_go_ccms_network_features_converted_by_the_guide_shape_the_node(
    ccm_kubeconfig: Path,
    fakepve_server: FakePveServer,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    tmp_path: Path,
) -> None:
    """Issue 39 item 6: the Go CCM's ``features.network.external_ip_cidrs`` and
    ``ipv6_support_disabled`` (v0.13.1, pkg/config/config.go), and ``token_id_file``,
    written as docs/on-prem.md's table says: the Node's addresses are typed and
    filtered as the Go CCM's would be. Its file as written is refused at start-up,
    every Go key named in one error."""
    pve = fakepve_server
    go_file = tmp_path / "go-config.yaml"
    go_file.write_text(
        yaml.safe_dump(
            {
                "features": {
                    "network": {
                        "external_ip_cidrs": "203.0.113.0/24",
                        "ipv6_support_disabled": True,
                    }
                },
                "clusters": [{**fakepve_server.cluster_config(), "insecure": False}],
            }
        )
    )
    refused = DaemonProcess(
        kubeconfig=ccm_kubeconfig,
        workdir=tmp_path / "refused",
        provider="proxmox",
        cloud_config_file=go_file,
        args=list(FAST),
    ).start()
    assert refused.wait(timeout=60) != 0
    for told in ("`features`", "`externalIPCIDRs`", "`ipv6SupportDisabled`", "`insecure`"):
        assert told in refused.log(), told

    cluster = fakepve_server.cluster_config()
    token_id_file = tmp_path / "token_id"
    token_id_file.write_text(cluster.pop("tokenId") + "\n")
    config_file = tmp_path / "proxmox.yaml"
    config_file.write_text(
        yaml.safe_dump(
            {
                "clusters": [{**cluster, "tokenIdFile": str(token_id_file)}],
                "cacheTTL": "0s",
                "externalIPCIDRs": ["203.0.113.0/24"],
                "ipv6SupportDisabled": True,
            }
        )
    )
    await asyncio.to_thread(
        pve.add_vm, 100, "px-go", agent=agent_interfaces("10.0.0.5", "203.0.113.9", "2001:db8::9")
    )
    await create_node(kube_client, kube_cleanup, "px-go")
    process = DaemonProcess(
        kubeconfig=ccm_kubeconfig,
        workdir=tmp_path / "daemon",
        provider="proxmox",
        cloud_config_file=config_file,
        args=list(FAST),
    ).start()
    try:
        obj = await initialised(kube_client, "px-go")
        assert obj["status"]["addresses"] == [
            {"type": "InternalIP", "address": "10.0.0.5"},
            {"type": "ExternalIP", "address": "203.0.113.9"},
            {"type": "Hostname", "address": "px-go"},
        ]
        assert process.poll() is None
    finally:
        process.stop()
