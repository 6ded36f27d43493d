"""``kube-ccm forward`` on real kubelets: TCP and UDP to a node IP reach a backend pod.

The data path of issue 24's ServiceLB, proven on the test bed with what it can model
(:mod:`kube_ccm.testbed.nodes`): two real kubelets sharing the host's network
namespace, one kube-proxy (``NodeOptions.kube_proxy``) for the ClusterIPs, the
kube-ccm image built from this checkout and imported into both containerds.

The forwarder runs as the svclb DaemonSet's containers would, one per Service port,
on klipper-lb's environment (``SRC_PORT``, ``SRC_RANGES``, ``DEST_PROTO``,
``DEST_PORT``, ``DEST_IPS`` = the ClusterIP), in userspace mode with no capability at
all. One difference, because every "node" here shares one network namespace: the pods
are host-network and bind their own node's IP (``LISTEN_IPS`` from
``status.hostIP``), where the servicelb provider's pods hold a hostPort; a hostPort
without a hostIP would match every node IP here (the CNI portmap plugin's DNAT is for
any local address), so a node whose pod is gone would keep answering. The Service is a
ClusterIP Service with no load-balancer status: with an ingress IP in its status,
kube-proxy would serve that IP itself and the forwarder would not be on the path.

Needs root, containerd, runc, the CNI plugins, nft, buildah and debootstrap
(``make sysdeps``), and the node binaries and kube-proxy (built on first use);
skipped with the reason otherwise, except under ``CI=true``, where a skip fails the
run. The host is checked after the module.
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from kube_ccm.runtime.client import KubeClient
from kube_ccm.testbed.echo import ECHO_PORT, ECHO_SCRIPT, tcp_answer, udp_answer
from kube_ccm.testbed.image import ImageBuildError, ensure_image, image_unavailable
from kube_ccm.testbed.nodes import (
    NodeOptions,
    RealNodes,
    assert_host_restored,
    host_snapshot,
    real_nodes_unavailable,
)
from kube_ccm.testing.binaries import (
    ControlPlaneBinariesError,
    ensure_kube_proxy,
    ensure_node_binaries,
)
from kube_ccm.testing.controlplane import ControlPlane, ControlPlaneError, ControlPlaneOptions
from kube_ccm.testing.pytest_plugin import unavailable
from kube_ccm.testing.waiting import eventually

PORT = ECHO_PORT
LABEL = "forward-test.kube-ccm.io/enabled"
NAMESPACE_PATH = "/api/v1/namespaces/default"
DAEMONSET = "/apis/apps/v1/namespaces/default/daemonsets/svclb-web"


@pytest.fixture(scope="module")
def bed() -> Iterator[tuple[ControlPlane, RealNodes]]:
    reason = real_nodes_unavailable() or image_unavailable()
    if reason:
        unavailable(reason)
    try:
        binaries = ensure_node_binaries()
        ensure_kube_proxy()
        image = ensure_image()
    except (ControlPlaneBinariesError, ImageBuildError) as exc:
        unavailable(f"a piece of the test bed could not be built: {exc}")
        raise
    before = host_snapshot()
    plane = ControlPlane(ControlPlaneOptions(real_nodes=True))
    try:
        plane.start()
    except ControlPlaneError as exc:
        unavailable(f"the real control plane could not start: {exc}")
    nodes = RealNodes(
        plane,
        NodeOptions(count=2, kube_proxy=True, images=(image.archive,)),
        binaries=binaries,
    )
    try:
        nodes.start()
        yield plane, nodes
    finally:
        nodes.stop()
        plane.stop()
    assert_host_restored(before, nodes)


def backend_pod(node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "backend", "labels": {"app": "backend"}},
        "spec": {
            "nodeName": node,
            "tolerations": [{"operator": "Exists"}],
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "echo",
                    "image": "kube-ccm:latest",
                    "imagePullPolicy": "Never",
                    "command": ["python", "-c", ECHO_SCRIPT],
                }
            ],
        },
    }


def forwarder(protocol: str, cluster_ip: str) -> dict[str, Any]:
    """One Service port's container, as the servicelb provider writes it (klipper-lb's
    environment), bound to its node's IP."""
    env = {
        "SRC_PORT": str(PORT),
        "SRC_RANGES": "0.0.0.0/0",
        "DEST_PROTO": protocol,
        "DEST_PORT": str(PORT),
        "DEST_IPS": cluster_ip,
    }
    return {
        "name": f"lb-{protocol.lower()}-{PORT}",
        "image": "kube-ccm:latest",
        "imagePullPolicy": "Never",
        "command": ["kube-ccm", "forward", "--ready-file", "/tmp/ready"],
        "env": [
            *({"name": k, "value": v} for k, v in env.items()),
            {"name": "LISTEN_IPS", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
        ],
        "readinessProbe": {
            "exec": {"command": ["test", "-e", "/tmp/ready"]},
            "periodSeconds": 1,
        },
        "securityContext": {
            "runAsNonRoot": True,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        },
    }


def daemonset(cluster_ip: str) -> dict[str, Any]:
    labels = {"app": "svclb-web"}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "svclb-web"},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "hostNetwork": True,
                    "nodeSelector": {LABEL: "true"},
                    "tolerations": [{"operator": "Exists"}],
                    "terminationGracePeriodSeconds": 1,
                    "automountServiceAccountToken": False,
                    "containers": [forwarder("TCP", cluster_ip), forwarder("UDP", cluster_ip)],
                },
            },
        },
    }


async def label(client: KubeClient, node: str, value: str) -> None:
    await client.patch(
        f"/api/v1/nodes/{node}", {"metadata": {"labels": {LABEL: value}}}, patch_type="merge"
    )


async def test_tcp_and_udp_to_a_node_ip_reach_the_backend_and_a_node_labelled_out_stops_answering(
    bed: tuple[ControlPlane, RealNodes],
) -> None:
    plane, nodes = bed
    first, second = nodes.nodes
    async with KubeClient.from_kubeconfig(plane.kubeconfig) as client:
        for node in nodes.nodes:
            await label(client, node.name, "true")
        await client.create(f"{NAMESPACE_PATH}/pods", backend_pod(second.name))
        service = await client.create(
            f"{NAMESPACE_PATH}/services",
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "web"},
                "spec": {
                    "selector": {"app": "backend"},
                    "ports": [
                        {"name": "tcp", "protocol": "TCP", "port": PORT},
                        {"name": "udp", "protocol": "UDP", "port": PORT},
                    ],
                },
            },
        )
        cluster_ip = service["spec"]["clusterIP"]
        await client.create("/apis/apps/v1/namespaces/default/daemonsets", daemonset(cluster_ip))

        async def both_forwarders_ready() -> bool:
            status = (await client.get(DAEMONSET)).get("status", {})
            return bool(status.get("numberReady") == 2)

        await eventually(both_forwarders_ready, within=120, what="both forwarder pods Ready")

        # Through each node's forwarder, the ClusterIP (kube-proxy), to the backend on
        # the second node: from either node IP, TCP and UDP.
        answers: list[str] = []

        async def answered() -> bool:
            answers[:] = [
                f(node.ip, PORT) for node in nodes.nodes for f in (tcp_answer, udp_answer)
            ]
            return answers == ["tcp backend", "udp backend"] * 2

        try:
            await eventually(answered, within=60, interval=0.5)
        except AssertionError:
            proxy = nodes.process("kube-proxy").log()
            pod = await client.get(f"{NAMESPACE_PATH}/pods/backend")
            pod_ip = pod["status"].get("podIP", "")
            direct = [f(ip, PORT) for ip in (cluster_ip, pod_ip) for f in (tcp_answer, udp_answer)]
            nat = await asyncio.to_thread(
                subprocess.run,
                ["iptables-save", "-t", "nat"],
                capture_output=True,
                text=True,
                check=False,
            )
            pytest.fail(
                f"TCP and UDP via both node IPs answered {answers}; the ClusterIP and the pod "
                f"IP {pod_ip} directly: {direct}\n"
                + "\n".join(line for line in nat.stdout.splitlines() if "8080" in line)
                + "\nforwarders:\n"
                + "\n".join(_forwarder_lines(nodes)[-20:])
                + "\nkube-proxy:\n"
                + "\n".join(proxy.splitlines()[-20:])
            )

        # The second node labelled out: its pod goes and its IP stops answering; the
        # first node's still does.
        await label(client, second.name, "false")

        async def second_silent() -> bool:
            return tcp_answer(second.ip, PORT).startswith("error") and udp_answer(
                second.ip, PORT
            ).startswith("error")

        await eventually(
            second_silent, within=60, interval=0.5, what="the labelled-out node silent"
        )
        assert tcp_answer(first.ip, PORT) == "tcp backend"
        assert udp_answer(first.ip, PORT) == "udp backend"
        logs = [
            line
            for line in (await asyncio.to_thread(_forwarder_lines, nodes))
            if "forwarding" in line
        ]
        assert logs, "no forwarder logged what it forwards"


def _forwarder_lines(nodes: RealNodes) -> list[str]:
    lines: list[str] = []
    for node in nodes.nodes:
        for path in node.pod_logs.rglob("*.log"):
            if "svclb-web" in str(path):
                lines += path.read_text(errors="replace").splitlines()
    return lines
