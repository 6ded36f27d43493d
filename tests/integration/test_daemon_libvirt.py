"""The libvirt provider in the daemon, on the real apiserver and a real libvirtd (serving
libvirt's test driver on a private socket): domains defined, started, shut off and
undefined while the daemon runs, and a hypervisor that hangs, dies or never answered.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kube_ccm.providers.libvirt.libvirtd import LibvirtdServer, LibvirtdUnavailableError
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
def libvirtd(tmp_path: Path) -> Iterator[LibvirtdServer]:
    # A short path: a unix socket's path is limited to 107 bytes.
    workdir = Path(f"/tmp/kc-libvirtd-{os.getpid()}-{uuidlib.uuid4().hex[:8]}")
    server = LibvirtdServer(workdir)
    try:
        server.start()
    except LibvirtdUnavailableError as exc:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI needs libvirtd and the libvirt extra (make test installs them): {exc}")
        pytest.skip(str(exc))
    yield server
    server.stop()
    shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def ccm(ccm_kubeconfig: Path, libvirtd: LibvirtdServer, tmp_path: Path) -> Iterator[DaemonProcess]:
    config = {
        "hosts": [
            {"uri": libvirtd.uri, "name": "hv1", "zone": "rack-1", "region": "dc-1"},
            # A hypervisor that never answers: its Nodes must wait, never be deleted.
            {"uri": f"test+unix:///default?socket={libvirtd.workdir}/none", "name": "hv2"},
        ],
        "addressSources": ["agent", "lease"],
    }
    config_file = tmp_path / "libvirt.yaml"
    config_file.write_text(yaml.safe_dump(config))
    process = DaemonProcess(
        kubeconfig=ccm_kubeconfig,
        workdir=tmp_path / "daemon",
        provider="libvirt",
        cloud_config_file=config_file,
        args=list(FAST),
    ).start()
    yield process
    process.stop()


async def initialised(client: KubeClient, name: str) -> dict[str, Any]:
    async def done() -> bool:
        return UNINITIALIZED_TAINT["key"] not in taint_keys(await find_node(client, name))

    await eventually(done, within=60, what=f"Node {name} initialised from its libvirt domain")
    found = await find_node(client, name)
    assert found is not None
    return found


async def test_a_domains_lifecycle_drives_its_node(
    ccm: DaemonProcess, libvirtd: LibvirtdServer, kube_client: KubeClient, kube_cleanup: Cleanup
) -> None:
    conn = libvirtd.connection()
    uuid = str(uuidlib.uuid4())
    dom = conn.defineXML(libvirtd.domain_xml("lv-a", uuid=uuid, vcpus=4, memory_mib=4096))
    dom.create()
    await create_node(kube_client, kube_cleanup, "lv-a")

    await initialised(kube_client, "lv-a")

    async def addressed() -> bool:
        # Initialisation is two writes: the taint goes with the first, the cloud's
        # addresses come with the second (on the status).
        return bool(
            ((await find_node(kube_client, "lv-a")) or {}).get("status", {}).get("addresses")
        )

    await eventually(addressed, within=30, what="lv-a's addresses from its domain")
    obj = await find_node(kube_client, "lv-a")
    assert obj is not None
    labels = obj["metadata"]["labels"]
    assert obj["spec"]["providerID"] == f"libvirt://hv1/{uuid}"
    assert labels["node.kubernetes.io/instance-type"] == "vcpu4-4096mib"
    assert labels["topology.kubernetes.io/zone"] == "rack-1"
    assert labels["topology.kubernetes.io/region"] == "dc-1"
    types = {a["type"] for a in obj["status"]["addresses"]}
    assert types == {"InternalIP", "Hostname"}, obj["status"]["addresses"]

    # Shut off, the kubelet gone quiet: the shutdown taint.
    await set_node_ready(kube_client, "lv-a", "Unknown")
    dom.destroy()

    async def shutdown_tainted() -> bool:
        return SHUTDOWN_KEY in taint_keys(await find_node(kube_client, "lv-a"))

    await eventually(shutdown_tainted, within=30, what="the shutdown taint on a shut-off domain")

    # Undefined: the Node goes.
    dom.undefine()

    async def deleted() -> bool:
        return await find_node(kube_client, "lv-a") is None

    await eventually(deleted, within=30, what="the Node of an undefined domain deleted")


async def test_a_hung_or_dead_hypervisor_never_deletes_a_node(
    ccm: DaemonProcess, libvirtd: LibvirtdServer, kube_client: KubeClient, kube_cleanup: Cleanup
) -> None:
    uuid = str(uuidlib.uuid4())
    libvirtd.connection().defineXML(libvirtd.domain_xml("lv-b", uuid=uuid)).create()
    await create_node(kube_client, kube_cleanup, "lv-b")
    await initialised(kube_client, "lv-b")
    # A Node on the host that never answered, NotReady: checked, never deleted.
    await create_node(
        kube_client, kube_cleanup, "lv-elsewhere", providerID=f"libvirt://hv2/{uuidlib.uuid4()}"
    )
    await set_node_ready(kube_client, "lv-elsewhere", "Unknown")
    await set_node_ready(kube_client, "lv-b", "Unknown")

    async def still_there(seconds: float) -> None:
        deadline = asyncio.get_running_loop().time() + seconds
        while asyncio.get_running_loop().time() < deadline:
            assert await find_node(kube_client, "lv-b") is not None, "lv-b deleted"
            assert await find_node(kube_client, "lv-elsewhere") is not None, "lv-elsewhere deleted"
            await asyncio.sleep(0.5)

    libvirtd.pause()  # SIGSTOP: calls hang; the call deadline and keepalive end them
    try:
        await still_there(8)
    finally:
        libvirtd.resume()
    libvirtd.kill()  # kill -9: the connection drops, every call fails
    await still_there(6)
    assert "cannot connect to libvirt host hv1" in ccm.log_path.read_text()
    assert "libvirt host hv2" in ccm.log_path.read_text()
    assert "unreachable at start-up" in ccm.log_path.read_text()

    # The hypervisor comes back with its domain (a host reboot): the daemon reconnects.
    libvirtd.start()
    dom = libvirtd.connection().defineXML(libvirtd.domain_xml("lv-b", uuid=uuid))
    await still_there(4)
    assert ccm.log_path.read_text().count("connected to libvirt host hv1") >= 2
    # and answers again: the domain, undefined now, is verifiably gone.
    dom.undefine()

    async def deleted() -> bool:
        return await find_node(kube_client, "lv-b") is None

    await eventually(deleted, within=30, what="lv-b deleted once its host says it is gone")
    assert await find_node(kube_client, "lv-elsewhere") is not None


async def test_a_renamed_domain_keeps_its_node_and_is_reported(
    ccm: DaemonProcess, libvirtd: LibvirtdServer, kube_client: KubeClient, kube_cleanup: Cleanup
) -> None:
    conn = libvirtd.connection()
    dom = conn.defineXML(libvirtd.domain_xml("lv-c"))
    await create_node(kube_client, kube_cleanup, "lv-c")
    await initialised(kube_client, "lv-c")
    dom.rename("lv-c-renamed", 0)  # libvirt renames shut-off domains only
    await set_node_ready(kube_client, "lv-c", "Unknown")

    async def reported() -> bool:
        listed = await kube_client.get(
            "/api/v1/namespaces/default/events",
            {"fieldSelector": "involvedObject.name=lv-c,reason=DomainRenamed"},
        )
        return bool(listed["items"])

    await eventually(reported, within=30, what="a DomainRenamed Event for lv-c")
    assert await find_node(kube_client, "lv-c") is not None


async def test_a_uri_that_reaches_another_hypervisor_deletes_no_node(
    ccm_kubeconfig: Path, kube_client: KubeClient, kube_cleanup: Cleanup, tmp_path: Path
) -> None:
    """Issue 42: the host's URI reaches another hypervisor (here: its socket path now
    leads to another libvirtd, as a DNS name or ssh alias moved), which has none of the
    domains. With three Nodes NotReady none is deleted and the log says to check the
    URI; the right hypervisor back, nothing is deleted; a domain undefined then, its
    Node goes (and only it)."""
    base = Path(f"/tmp/kc-lvid-{os.getpid()}-{uuidlib.uuid4().hex[:6]}")
    right, other = LibvirtdServer(base / "a"), LibvirtdServer(base / "b")
    link = base / "sock"
    try:
        try:
            right.start()
            other.start()
        except LibvirtdUnavailableError as exc:
            if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
                pytest.fail(f"CI needs libvirtd: {exc}")
            pytest.skip(str(exc))
        link.symlink_to(right.socket)
        names = [f"lv-id{i}" for i in range(3)]
        uuids = [str(uuidlib.uuid4()) for _ in names]

        def define_all(server: LibvirtdServer) -> list[Any]:
            made = []
            for name, uuid in zip(names, uuids, strict=True):
                dom = server.connection().defineXML(server.domain_xml(name, uuid=uuid))
                dom.create()
                made.append(dom)
            return made

        define_all(right)
        config_file = tmp_path / "libvirt.yaml"
        uri = f"test+unix:///default?socket={link}"
        config_file.write_text(yaml.safe_dump({"hosts": [{"uri": uri, "name": "hv1"}]}))
        process = DaemonProcess(
            kubeconfig=ccm_kubeconfig,
            workdir=tmp_path / "daemon",
            provider="libvirt",
            cloud_config_file=config_file,
            args=list(FAST),
        ).start()
        try:
            for name in names:
                await create_node(kube_client, kube_cleanup, name)
            for name in names:
                await initialised(kube_client, name)
                await set_node_ready(kube_client, name, "Unknown")

            # The URI now reaches the other hypervisor: its socket path moves, and the
            # old connection drops (the right one is gone for a while: its domains are
            # defined again when it comes back).
            link.unlink()
            link.symlink_to(other.socket)
            right.kill()
            hint = f"check that the URI {uri} of host hv1 reaches the cluster's hypervisor"

            async def said() -> bool:
                return process.log().count(hint) >= len(names)

            await eventually(said, within=60, what="the URI named in the log")
            assert "holds none of the 2 domains found there before" in process.log()
            for name in names:
                assert await find_node(kube_client, name) is not None, f"{name} deleted"

            right = LibvirtdServer(base / "a")
            right.start()
            doms = define_all(right)
            link.unlink()
            link.symlink_to(right.socket)
            other.stop()  # the connection drops, and reconnects to the right host
            doms[0].destroy()
            doms[0].undefine()

            async def deleted() -> bool:
                return await find_node(kube_client, names[0]) is None

            await eventually(deleted, within=60, what="the undefined domain's Node deleted")
            for name in names[1:]:
                assert await find_node(kube_client, name) is not None, f"{name} deleted"
        finally:
            process.stop()
    finally:
        right.stop()
        other.stop()
        shutil.rmtree(base, ignore_errors=True)
