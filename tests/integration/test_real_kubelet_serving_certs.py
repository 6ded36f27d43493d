"""A real kubelet's serving certificate, approved by kube-ccm and signed by
kube-controller-manager: then a TLS client verifies the kubelet's port.

The test bed's kubelet runs with ``serverTLSBootstrap: true`` and asks for its
certificate with a ``kubernetes.io/kubelet-serving`` CSR (the Node authorizer lets it);
kube-controller-manager's csrsigning controller signs approved ones with the test
bed's kubelet-serving CA. kube-ccm runs the cloud node controller and the approver
with the simulated cloud, which knows the node's instance by its IP, under the
shipped RBAC (deploy/rbac-kubelet-serving-certs.yaml).

Needs what tests/integration/test_real_nodes.py needs; skipped with the reason
otherwise (a failure under ``CI=true``). Slow: a minute or two.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kube_ccm.runtime.client import KubeClient
from kube_ccm.testbed.nodes import (
    NodeOptions,
    RealNode,
    RealNodes,
    assert_host_restored,
    host_snapshot,
    real_nodes_unavailable,
)
from kube_ccm.testbed.rbac import AUDITED_USERS, forbidden, install_service_account
from kube_ccm.testing.binaries import ControlPlaneBinariesError, ensure_node_binaries
from kube_ccm.testing.controlplane import ControlPlane, ControlPlaneError, ControlPlaneOptions
from kube_ccm.testing.daemon import DaemonProcess
from kube_ccm.testing.pytest_plugin import unavailable
from kube_ccm.testing.waiting import eventually

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
CSRS = "/apis/certificates.k8s.io/v1/certificatesigningrequests"


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[ControlPlane, RealNodes]]:
    reason = real_nodes_unavailable()
    if reason:
        unavailable(reason)
    try:
        binaries = ensure_node_binaries()
    except ControlPlaneBinariesError as exc:
        unavailable(f"the node binaries are missing: {exc}")
    before = host_snapshot()
    plane = ControlPlane(ControlPlaneOptions(real_nodes=True, audit_users=AUDITED_USERS))
    try:
        plane.start()
    except ControlPlaneError as exc:
        unavailable(f"the real control plane could not start: {exc}")
    nodes = RealNodes(plane, NodeOptions(count=1, server_tls_bootstrap=True), binaries=binaries)
    try:
        nodes.start()
        yield plane, nodes
    finally:
        nodes.stop()
        plane.stop()
    assert_host_restored(before, nodes)


def kubelet_csrs(listed: dict[str, Any], node: RealNode) -> list[dict[str, Any]]:
    return [
        c
        for c in listed["items"]
        if c["spec"]["signerName"] == "kubernetes.io/kubelet-serving"
        and c["spec"]["username"] == f"system:node:{node.name}"
    ]


async def healthz(node: RealNode, context: ssl.SSLContext) -> bytes:
    """GET /healthz on the kubelet's TLS port, the server verified against ``context``
    (its certificate must name the node's IP)."""
    reader, writer = await asyncio.open_connection(
        node.ip, node.kubelet_port, ssl=context, server_hostname=node.ip
    )
    try:
        writer.write(
            f"GET /healthz HTTP/1.1\r\nHost: {node.ip}\r\nConnection: close\r\n\r\n".encode()
        )
        await writer.drain()
        return await reader.read()
    finally:
        writer.close()


async def test_a_real_kubelet_gets_its_serving_certificate_through_kube_ccm(
    cluster: tuple[ControlPlane, RealNodes], tmp_path: Path
) -> None:
    plane, nodes = cluster
    node = nodes.nodes[0]
    kubeconfig = await install_service_account(
        plane,
        [
            doc
            for name in ("rbac.yaml", "rbac-nodes.yaml", "rbac-kubelet-serving-certs.yaml")
            for doc in yaml.safe_load_all((DEPLOY / name).read_text())
            if doc
        ],
        "kube-system",
        "cloud-controller-manager",
        kubeconfig=tmp_path / "ccm.kubeconfig",
    )
    client_pair = plane.certificate_authority.issue(
        "kubelet-test-client", organizations=("system:masters",), client=True
    )
    client_pair.write(tmp_path / "client.crt", tmp_path / "client.key")
    context = ssl.create_default_context(cafile=str(nodes.kubelet_serving_ca))
    context.load_cert_chain(tmp_path / "client.crt", tmp_path / "client.key")

    # No approver yet: the kubelet's CSR waits, and its port serves no TLS.
    async with KubeClient.from_kubeconfig(plane.kubeconfig) as client:

        async def asked() -> bool:
            return bool(kubelet_csrs(await client.get(CSRS), node))

        await eventually(asked, within=60, what="the kubelet's serving CSR")
        with pytest.raises((ssl.SSLError, OSError)):
            await healthz(node, context)

        ccm = DaemonProcess(
            kubeconfig=kubeconfig,
            workdir=tmp_path / "ccm",
            cloud_config={"unknownNodes": "notFound"},
            args=[
                "--leader-elect=false",
                "--controllers=cloud-node,servingcert",
                "--cloud-call-timeout=2s",
            ],
        )
        ccm.cloud.add_instance(
            node.name,
            zone="zone-a",
            region="region-1",
            instance_type="sim.small",
            addresses=[("InternalIP", node.ip)],
        )
        ccm.start()
        try:

            async def signed() -> bool:
                csrs = kubelet_csrs(await client.get(CSRS), node)
                return any(
                    any(
                        c["type"] == "Approved" and c["reason"] == "KubeletServingCertApproved"
                        for c in csr["status"].get("conditions") or []
                    )
                    and csr["status"].get("certificate")
                    for csr in csrs
                )

            await eventually(signed, within=90, what="a serving CSR approved and signed")

            async def verified() -> bool:
                try:
                    answer = await healthz(node, context)
                except (ssl.SSLError, OSError):
                    return False
                return answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"ok")

            await eventually(
                verified, within=60, what="the kubelet's port verified against the signer's CA"
            )
            csrs = kubelet_csrs(await client.get(CSRS), node)
            assert not [
                c
                for csr in csrs
                for c in csr["status"].get("conditions") or []
                if c["type"] == "Denied"
            ]
        finally:
            assert ccm.stop() == 0
    refused = [r for user in AUDITED_USERS for r in forbidden(plane, user)]
    assert not refused, "the daemon was refused:\n" + "\n".join(refused)
