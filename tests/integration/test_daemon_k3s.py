"""The k3s provider in the daemon, on the real apiserver: a tainted Node initialised from
its k3s.io annotations, one that k3s already initialised left as it is, a bad annotation
that keeps its Node tainted without stopping the daemon, and composition with ippool.

The daemon registers the provider itself (``register_cloud_provider`` before ``run``,
as a provider's own main does), so these tests do not depend on the entry points of the
installed distribution.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import yaml

from kube_ccm.runtime.client import ApiError, KubeClient
from kube_ccm.testing.daemon import DaemonProcess
from kube_ccm.testing.manifests import (
    UNINITIALIZED_TAINT,
    create_node,
    find_node,
    service_manifest,
    taint_keys,
)
from kube_ccm.testing.pytest_plugin import Cleanup
from kube_ccm.testing.waiting import eventually

MAIN = (
    "import sys\n"
    "from kube_ccm.app.cli import run\n"
    "from kube_ccm.cloudprovider import register_cloud_provider\n"
    "from kube_ccm.providers.k3s import factory\n"
    "register_cloud_provider('k3s', factory)\n"
    "sys.exit(run())\n"
)
FAST = (
    "--leader-elect=false",
    "--node-monitor-period=500ms",
    "--node-status-update-frequency=1s",
)


def daemon(
    kubeconfig: Path, workdir: Path, *args: str, provider: str = "k3s", config: Any = None
) -> DaemonProcess:
    workdir.mkdir(parents=True, exist_ok=True)
    config_file = workdir / "cloud.yaml"
    config_file.write_text(yaml.safe_dump(config or {}))
    process = DaemonProcess(
        kubeconfig=kubeconfig,
        workdir=workdir,
        provider=provider,
        cloud_config_file=config_file,
        args=[*FAST, *args],
    )
    assert process.argv[1:4] == ["-m", "kube_ccm", "run"], process.argv
    process.argv[1:4] = ["-c", MAIN]
    return process.start()


async def initialised(client: KubeClient, name: str) -> dict[str, Any]:
    async def done() -> bool:
        found = await find_node(client, name)
        return bool(
            found
            and UNINITIALIZED_TAINT["key"] not in taint_keys(found)
            and found.get("status", {}).get("addresses")
        )

    await eventually(done, within=60, what=f"Node {name} initialised from its annotations")
    found = await find_node(client, name)
    assert found is not None
    return found


async def test_the_daemon_initialises_from_annotations_and_leaves_k3s_nodes_alone(
    ccm_kubeconfig: Path, kube_client: KubeClient, kube_cleanup: Cleanup, tmp_path: Path
) -> None:
    # A Node the embedded CCM initialised: what it wrote is what this provider answers.
    kube_cleanup.add("/api/v1/nodes/k3s-done")
    await kube_client.create(
        "/api/v1/nodes",
        {
            "metadata": {
                "name": "k3s-done",
                "labels": {
                    "node.kubernetes.io/instance-type": "k3s",
                    "beta.kubernetes.io/instance-type": "k3s",
                },
                "annotations": {
                    "k3s.io/internal-ip": "10.0.0.1",
                    "k3s.io/external-ip": "203.0.113.1",
                    "k3s.io/hostname": "k3s-done",
                },
            },
            "spec": {"providerID": "k3s://k3s-done"},
            "status": {
                "addresses": [
                    {"type": "InternalIP", "address": "10.0.0.1"},
                    {"type": "ExternalIP", "address": "203.0.113.1"},
                    {"type": "Hostname", "address": "k3s-done"},
                ]
            },
        },
    )
    before = await find_node(kube_client, "k3s-done")
    assert before is not None
    ccm = daemon(ccm_kubeconfig, tmp_path / "ccm", "--controllers=cloud-node,cloud-node-lifecycle")
    try:
        # A new agent: tainted by its kubelet, annotated by k3s's agent (dual-stack).
        await create_node(
            kube_client,
            kube_cleanup,
            "k3s-agent",
            annotations={
                "k3s.io/internal-ip": "10.0.0.21,fd00::21",
                "k3s.io/hostname": "k3s-agent.lan",
            },
            addresses=[{"type": "Hostname", "address": "k3s-agent"}],
        )
        # A hand-edited annotation: an error for that Node only.
        await create_node(
            kube_client,
            kube_cleanup,
            "k3s-typo",
            annotations={"k3s.io/internal-ip": "10.0.0.22,10.0.0.256"},
        )
        found = await initialised(kube_client, "k3s-agent")
        assert found["spec"]["providerID"] == "k3s://k3s-agent"
        assert found["metadata"]["labels"]["node.kubernetes.io/instance-type"] == "k3s"
        wanted = [
            {"type": "InternalIP", "address": "10.0.0.21"},
            {"type": "InternalIP", "address": "fd00::21"},
            {"type": "Hostname", "address": "k3s-agent.lan"},
        ]

        # As upstream, the taint goes first and status.addresses follows in a second write.
        async def addressed() -> bool:
            found = await find_node(kube_client, "k3s-agent")
            return found is not None and found["status"]["addresses"] == wanted

        await eventually(addressed, within=30, what="the annotations' addresses on k3s-agent")

        async def reported() -> bool:
            return "'10.0.0.256' in it is not an IP address" in ccm.log()

        await eventually(reported, within=30, what="the bad annotation named in the log")
        await asyncio.sleep(3)  # three address refreshes, several lifecycle passes
        typo = await find_node(kube_client, "k3s-typo")
        assert typo is not None
        assert UNINITIALIZED_TAINT["key"] in taint_keys(typo), "the bad Node stays tainted"
        after = await find_node(kube_client, "k3s-done")
        assert after is not None
        assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"], (
            "a Node k3s initialised was written to"
        )
        assert ccm.poll() is None, "the daemon keeps running"
    finally:
        assert ccm.stop() == 0


async def test_k3s_instances_compose_with_ippool_load_balancers(
    ccm_kubeconfig: Path, kube_client: KubeClient, kube_cleanup: Cleanup, tmp_path: Path
) -> None:
    config = {
        "providers": {
            "k3s": {"capabilities": ["instances"]},
            "ippool": {
                "capabilities": ["loadBalancer"],
                "config": {"configMap": "", "pools": {"cidr-global": "172.20.44.0/28"}},
            },
        }
    }
    ccm = daemon(
        ccm_kubeconfig,
        tmp_path / "ccm",
        "--controllers=cloud-node,cloud-node-lifecycle,service",
        provider="composite",
        config=config,
    )
    services = "/api/v1/namespaces/default/services"
    try:
        ccm.wait_for_log("Started service-lb-controller")
        assert "composite cloud provider: instances from k3s, loadBalancer from ippool" in (
            ccm.log()
        )
        await create_node(
            kube_client,
            kube_cleanup,
            "k3s-lb-node",
            annotations={"k3s.io/internal-ip": "10.0.0.31"},
        )
        await kube_client.create(services, service_manifest("k3s-web"))
        found = await initialised(kube_client, "k3s-lb-node")
        assert found["spec"]["providerID"] == "k3s://k3s-lb-node"

        async def served() -> bool:
            service = await kube_client.get(f"{services}/k3s-web")
            return bool(service.get("status", {}).get("loadBalancer", {}).get("ingress"))

        await eventually(served, within=60, what="the Service's address from the pool")
        service = await kube_client.get(f"{services}/k3s-web")
        (ingress,) = service["status"]["loadBalancer"]["ingress"]
        assert ingress["ip"].startswith("172.20.44."), ingress
    finally:
        with contextlib.suppress(ApiError):
            await kube_client.delete(f"{services}/k3s-web")

        async def released() -> bool:
            listed = await kube_client.get(services, {"fieldSelector": "metadata.name=k3s-web"})
            return not listed["items"]

        await eventually(released, within=60, what="the Service released by the daemon")
        assert ccm.stop() == 0
