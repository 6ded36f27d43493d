"""The kubelet serving certificate approver on the real apiserver, with crafted CSRs.

A node's client (a certificate for ``system:node:<name>`` in ``system:nodes``, so the
API server itself sets the requester) asks for serving certificates: one naming the
addresses the simulated cloud reports is approved; a forged one naming an IP the
cloud does not report is denied and never approved; one whose instance the cloud
does not know yet stays pending (with a Warning Event) until the instance appears.
The daemon runs with deploy/rbac-kubelet-serving-certs.yaml only (the session's
ServiceAccount, ``ccm_kubeconfig``), so a missing grant fails the session.
"""

from __future__ import annotations

import base64
import ipaddress
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from kube_ccm.runtime.client import KubeClient
from kube_ccm.testing.controlplane import ControlPlane
from kube_ccm.testing.daemon import DaemonProcess
from kube_ccm.testing.pytest_plugin import Cleanup
from kube_ccm.testing.waiting import eventually

CSRS = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
BINDINGS = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"


def request_pem(node: str, dns: Sequence[str], ips: Sequence[str]) -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    names += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    return (
        x509.CertificateSigningRequestBuilder()
        .subject_name(
            x509.Name(
                [
                    x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{node}"),
                    x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
                ]
            )
        )
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(key, hashes.SHA256())
        .public_bytes(serialization.Encoding.PEM)
    )


async def ask(client: KubeClient, cleanup: Cleanup, name: str, pem: bytes) -> None:
    cleanup.add(f"{CSRS}/{name}")
    await client.create(
        CSRS,
        {
            "metadata": {"name": name},
            "spec": {
                "request": base64.b64encode(pem).decode(),
                "signerName": "kubernetes.io/kubelet-serving",
                "usages": ["digital signature", "server auth"],
            },
        },
    )


async def conditions(client: KubeClient, name: str) -> dict[str, dict[str, Any]]:
    csr: dict[str, Any] = await client.get(f"{CSRS}/{name}")
    return {c["type"]: c for c in csr.get("status", {}).get("conditions") or []}


async def events_of(client: KubeClient, name: str) -> list[dict[str, Any]]:
    listed = await client.get(
        "/api/v1/namespaces/default/events", {"fieldSelector": f"involvedObject.name={name}"}
    )
    items: list[dict[str, Any]] = listed["items"]
    return items


async def node_client(
    plane: ControlPlane, client: KubeClient, cleanup: Cleanup, node: str, tmp_path: Path
) -> KubeClient:
    """A client as the kubelet of ``node``, allowed to create CSRs (the RBAC-only test
    control plane has no Node authorizer)."""
    binding = f"csr-test-{node}"
    cleanup.add(f"{BINDINGS}/{binding}")
    await client.create(
        BINDINGS,
        {
            "metadata": {"name": binding},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "system:node-bootstrapper",
            },
            "subjects": [
                {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "User",
                    "name": f"system:node:{node}",
                }
            ],
        },
    )
    kubeconfig = plane.write_client_kubeconfig(
        tmp_path / f"{node}.kubeconfig", f"system:node:{node}", ("system:nodes",)
    )
    return KubeClient.from_kubeconfig(kubeconfig)


async def test_the_cloud_decides_which_serving_certificates_kubelets_get(
    *,
    ccm_kubeconfig: Path,
    kube_controlplane: ControlPlane,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    label = unique_name("csr")
    known, later = unique_name("node"), unique_name("node")
    ccm = DaemonProcess(
        kubeconfig=ccm_kubeconfig,
        workdir=tmp_path / "daemon",
        cloud_config={"unknownNodes": "notFound"},
        args=[
            "--leader-elect=false",
            "--controllers=servingcert",
            f"--node-selector=csr-test={label}",
        ],
    ).start()
    kubelets: list[KubeClient] = []
    try:
        ccm.cloud.add_instance(
            known,
            zone="z",
            region="r",
            instance_type="t",
            addresses=[("InternalIP", "10.77.0.5"), ("Hostname", known)],
        )
        for node in (known, later):
            kube_cleanup.add(f"/api/v1/nodes/{node}")
            await kube_client.create(
                "/api/v1/nodes", {"metadata": {"name": node, "labels": {"csr-test": label}}}
            )
        kubelet = await node_client(kube_controlplane, kube_client, kube_cleanup, known, tmp_path)
        kubelets.append(kubelet)
        good, forged = unique_name("good"), unique_name("forged")
        await ask(kubelet, kube_cleanup, good, request_pem(known, [known], ["10.77.0.5"]))
        await ask(
            kubelet, kube_cleanup, forged, request_pem(known, [known], ["10.77.0.5", "10.77.0.66"])
        )

        async def decided(name: str, condition: str) -> bool:
            return condition in await conditions(kube_client, name)

        await eventually(lambda: decided(good, "Approved"), what="the good CSR approved")
        await eventually(lambda: decided(forged, "Denied"), what="the forged CSR denied")
        denial = (await conditions(kube_client, forged))["Denied"]
        assert "10.77.0.66" in denial["message"]
        assert "Approved" not in await conditions(kube_client, forged)

        # The cloud does not know the second node's instance yet: pending, with a Warning.
        other = await node_client(kube_controlplane, kube_client, kube_cleanup, later, tmp_path)
        kubelets.append(other)
        waiting = unique_name("waiting")
        await ask(other, kube_cleanup, waiting, request_pem(later, [later], ["10.77.0.9"]))

        async def warned() -> bool:
            return any(
                e["type"] == "Warning" and e["reason"] == "KubeletServingCertPending"
                for e in await events_of(kube_client, waiting)
            )

        await eventually(warned, what="a Warning Event on the pending CSR")
        assert await conditions(kube_client, waiting) == {}
        ccm.cloud.add_instance(
            later, zone="z", region="r", instance_type="t", addresses=[("InternalIP", "10.77.0.9")]
        )
        await eventually(
            lambda: decided(waiting, "Approved"), within=60, what="approved once the cloud knows"
        )
    finally:
        for client in kubelets:
            await client.aclose()
        assert ccm.stop() == 0
