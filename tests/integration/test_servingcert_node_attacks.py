"""Nodes as attackers on the kubelet serving certificate approver, as a node would
attack: through its own identity, on a real kube-apiserver with the Node authorizer
and NodeRestriction, with kube-ccm under the shipped RBAC.

Each node is a client certificate for ``system:node:<name>`` in ``system:nodes`` (what
a kubelet holds, and what a bootstrap token gets a new node); it registers its own
Node, writes what NodeRestriction lets it write, and asks for a serving certificate
for another node's name and IP:

* a Node whose own providerID (set by itself while it was empty) names another node's
  instance: its CSR is **denied** (the cloud says the instance is not its);
* a new identity that registers a Node with another node's providerID: **denied**;
* two Nodes with one providerID: **neither** is approved (both left pending, with a
  Warning Event naming the other) until the impostor's Node is deleted; then the
  rightful node's CSR is approved;
* the ``k3s`` provider, whose instance data is the Node's own annotations, alone or as
  a composite's ``instances``: the daemon refuses to start ``servingcert``.

Approval only: nothing signs these CSRs (test_real_kubelet_serving_certs.py proves the
signed path with a real kubelet). The waits hold under load: a decision within 120 s
of the CSR (the daemon's start included), the rightful CSR's approval within 330 s of
the impostor's deletion (a pending CSR's retry backs off up to 5 min).
"""

from __future__ import annotations

import asyncio
import base64
import ipaddress
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from kube_ccm.runtime.client import KubeClient
from kube_ccm.testbed.nodeidentity import node_identity_client
from kube_ccm.testbed.rbac import AUDITED_USERS, forbidden, install_service_account
from kube_ccm.testing.controlplane import ControlPlane, ControlPlaneError, ControlPlaneOptions
from kube_ccm.testing.daemon import DaemonProcess
from kube_ccm.testing.pytest_plugin import unavailable
from kube_ccm.testing.waiting import eventually

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
CSRS = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
NODES = "/api/v1/nodes"
N2_IP = "10.78.0.2"


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlane]:
    """kube-apiserver as a cluster runs it for real kubelets: ``--authorization-mode=
    Node,RBAC`` and ``--enable-admission-plugins=NodeRestriction``."""
    control = ControlPlane(ControlPlaneOptions(real_nodes=True, audit_users=AUDITED_USERS))
    try:
        control.start()
    except ControlPlaneError as exc:
        unavailable(f"the real control plane could not start: {exc}")
    try:
        yield control
        refused = [r for user in AUDITED_USERS for r in forbidden(control, user)]
        assert not refused, "the daemon was refused:\n" + "\n".join(refused)
    finally:
        control.stop()


@pytest.fixture(scope="module")
def ccm_kubeconfig(plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return asyncio.run(
        install_service_account(
            plane,
            [
                doc
                for name in ("rbac.yaml", "rbac-nodes.yaml", "rbac-kubelet-serving-certs.yaml")
                for doc in yaml.safe_load_all((DEPLOY / name).read_text())
                if doc
            ],
            "kube-system",
            "cloud-controller-manager",
            kubeconfig=tmp_path_factory.mktemp("ccm") / "ccm.kubeconfig",
        )
    )


@pytest_asyncio.fixture
async def admin(plane: ControlPlane) -> AsyncIterator[KubeClient]:
    async with KubeClient.from_kubeconfig(plane.kubeconfig) as client:
        yield client


class Kubelets:
    """Node identities: each a client certificate ``system:node:<name>``."""

    def __init__(self, plane: ControlPlane, where: Path) -> None:
        self._plane = plane
        self._where = where
        self._clients: list[KubeClient] = []

    def __call__(self, name: str) -> KubeClient:
        client = node_identity_client(self._plane, name, self._where)
        self._clients.append(client)
        return client

    async def aclose(self) -> None:
        for client in self._clients:
            await client.aclose()


@pytest_asyncio.fixture
async def kubelets(plane: ControlPlane, tmp_path: Path) -> AsyncIterator[Kubelets]:
    made = Kubelets(plane, tmp_path)
    try:
        yield made
    finally:
        await made.aclose()


def approver(ccm_kubeconfig: Path, workdir: Path, selector: str) -> DaemonProcess:
    return DaemonProcess(
        kubeconfig=ccm_kubeconfig,
        workdir=workdir,
        cloud_config={"unknownNodes": "notFound"},
        args=[
            "--leader-elect=false",
            "--controllers=servingcert",
            f"--node-selector=attack={selector}",
        ],
    )


def request_pem(node: str, dns: Sequence[str], ips: Sequence[str]) -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    names += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    pem = (
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
    return base64.b64encode(pem).decode()


async def ask(
    kubelet: KubeClient, csr: str, node: str, dns: Sequence[str], ips: Sequence[str]
) -> None:
    """The kubelet of ``node`` asks, as a kubelet does, for a serving certificate."""
    await kubelet.create(
        CSRS,
        {
            "metadata": {"name": csr},
            "spec": {
                "request": request_pem(node, dns, ips),
                "signerName": "kubernetes.io/kubelet-serving",
                "usages": ["digital signature", "server auth"],
            },
        },
    )


async def register(kubelet: KubeClient, name: str, selector: str, provider_id: str = "") -> None:
    """The node registers its own Node (NodeRestriction allows it its own name only)."""
    spec = {"providerID": provider_id} if provider_id else {}
    await kubelet.create(
        NODES, {"metadata": {"name": name, "labels": {"attack": selector}}, "spec": spec}
    )


async def conditions(client: KubeClient, name: str) -> dict[str, dict[str, Any]]:
    csr: dict[str, Any] = await client.get(f"{CSRS}/{name}")
    return {c["type"]: c for c in csr.get("status", {}).get("conditions") or []}


async def warnings(client: KubeClient, name: str) -> list[str]:
    listed = await client.get(
        "/api/v1/namespaces/default/events", {"fieldSelector": f"involvedObject.name={name}"}
    )
    return [
        e["message"]
        for e in listed["items"]
        if e["type"] == "Warning" and e["reason"] == "KubeletServingCertPending"
    ]


async def denied(client: KubeClient, csr: str) -> dict[str, Any]:
    async def decided() -> bool:
        return bool(await conditions(client, csr))

    await eventually(decided, within=120, what=f"a decision on CSR {csr}")
    found = await conditions(client, csr)
    assert "Approved" not in found, found
    return found["Denied"]


async def test_a_node_that_sets_its_empty_provider_id_to_another_instance_is_denied(
    plane: ControlPlane,
    ccm_kubeconfig: Path,
    admin: KubeClient,
    kubelets: Kubelets,
    tmp_path: Path,
) -> None:
    ccm = approver(ccm_kubeconfig, tmp_path / "ccm", "own-provider-id")
    theirs = ccm.cloud.add_instance(
        "b-n2",
        zone="z",
        region="r",
        instance_type="t",
        addresses=[("InternalIP", N2_IP), ("Hostname", "b-n2")],
    )
    ccm.cloud.add_instance(
        "b-n1", zone="z", region="r", instance_type="t", addresses=[("InternalIP", "10.78.0.1")]
    )
    ccm.start()
    try:
        n1 = kubelets("b-n1")
        await register(n1, "b-n1", "own-provider-id")
        # NodeRestriction lets a node set its own providerID while it is empty.
        await n1.patch(f"{NODES}/b-n1", {"spec": {"providerID": f"simulated://{theirs.id}"}})
        await ask(n1, "b-steal", "b-n1", ["b-n2"], [N2_IP])

        denial = await denied(admin, "b-steal")
        assert f"simulated://{theirs.id}" in denial["message"]
        assert "is not b-n1" in denial["message"]
    finally:
        assert ccm.stop() == 0


async def test_a_new_identity_registering_with_another_instances_provider_id_is_denied(
    plane: ControlPlane,
    ccm_kubeconfig: Path,
    admin: KubeClient,
    kubelets: Kubelets,
    tmp_path: Path,
) -> None:
    ccm = approver(ccm_kubeconfig, tmp_path / "ccm", "new-identity")
    theirs = ccm.cloud.add_instance(
        "c-n2",
        zone="z",
        region="r",
        instance_type="t",
        addresses=[("InternalIP", N2_IP), ("Hostname", "c-n2")],
    )
    ccm.start()
    try:
        evil = kubelets("c-evil")  # as a bootstrap token gets a new node
        await register(evil, "c-evil", "new-identity", f"simulated://{theirs.id}")
        await ask(evil, "c-steal", "c-evil", ["c-n2"], [N2_IP])

        denial = await denied(admin, "c-steal")
        assert f"simulated://{theirs.id}" in denial["message"]
    finally:
        assert ccm.stop() == 0


async def test_two_nodes_with_one_provider_id_get_nothing_until_the_impostor_goes(
    plane: ControlPlane,
    ccm_kubeconfig: Path,
    admin: KubeClient,
    kubelets: Kubelets,
    tmp_path: Path,
) -> None:
    ccm = approver(ccm_kubeconfig, tmp_path / "ccm", "duplicate")
    theirs = ccm.cloud.add_instance(
        "d-n2",
        zone="z",
        region="r",
        instance_type="t",
        addresses=[("InternalIP", N2_IP), ("Hostname", "d-n2")],
    )
    provider_id = f"simulated://{theirs.id}"
    ccm.start()
    try:
        n2, evil = kubelets("d-n2"), kubelets("d-evil")
        await register(n2, "d-n2", "duplicate", provider_id)  # as --provider-id does
        await register(evil, "d-evil", "duplicate", provider_id)
        await ask(n2, "d-rightful", "d-n2", ["d-n2"], [N2_IP])
        await ask(evil, "d-steal", "d-evil", ["d-n2"], [N2_IP])

        for csr, other in (("d-rightful", "d-evil"), ("d-steal", "d-n2")):

            async def warned(csr: str = csr, other: str = other) -> bool:
                return any(other in message for message in await warnings(admin, csr))

            await eventually(warned, within=120, what=f"a Warning on {csr} naming {other}")
            assert await conditions(admin, csr) == {}

        # The admin deletes the impostor: the rightful node's CSR is approved at its next
        # try (a pending CSR is retried with backoff, 5 s doubling up to 5 min).
        await admin.delete(f"{NODES}/d-evil")

        async def approved() -> bool:
            return "Approved" in await conditions(admin, "d-rightful")

        await eventually(approved, within=330, what="the rightful node's CSR approved")
        assert "Approved" not in await conditions(admin, "d-steal")
    finally:
        assert ccm.stop() == 0


K3S_CONFIGS: dict[str, tuple[str, Any]] = {
    "k3s": ("k3s", {}),
    "rke2": ("rke2", {}),
    "composite": (
        "composite",
        {
            "providers": {
                "k3s": {"capabilities": ["instances"]},
                "ippool": {
                    "capabilities": ["loadBalancer"],
                    "config": {"pools": {"range-global": "192.0.2.10-192.0.2.20"}},
                },
            }
        },
    ),
}


@pytest.mark.parametrize("setup", sorted(K3S_CONFIGS))
def test_the_daemon_refuses_servingcert_on_instances_the_nodes_write(
    setup: str, ccm_kubeconfig: Path, tmp_path: Path
) -> None:
    provider, config = K3S_CONFIGS[setup]
    config_file = tmp_path / "cloud.yaml"
    config_file.write_text(yaml.safe_dump(config))
    ccm = DaemonProcess(
        kubeconfig=ccm_kubeconfig,
        workdir=tmp_path / "ccm",
        provider=provider,
        cloud_config_file=config_file,
        args=["--leader-elect=false", "--controllers=cloud-node,servingcert"],
    ).start()
    try:
        code = ccm.wait(timeout=120)
    finally:
        ccm.stop()
    assert code != 0
    log = ccm.log()
    assert "are not authoritative" in log
    assert "Remove servingcert from --controllers" in log
