"""Least privilege per controller/provider combination, proven with the audit log.

Each combination runs the daemon as a ServiceAccount of its own bound by exactly the
deploy/ manifests that combination needs (renamed for that account, as the chart's
``name`` value renames them), with deploy/admission-policies.yaml in force, and does
the work that needs each permission. Then the apiserver's audit log must show:

* no request the authorizer refused, and none a ValidatingAdmissionPolicy denied;
* every permission used: each verb on each resource (and each name a rule lists) of
  every role the manifests bind, so a grant nobody needs cannot creep in and
  removing a needed one fails here.

Combinations: the simulated cloud with every controller (PV labels and the kubelet
serving certificate approver too) and leader migration; the same with
``--use-service-account-credentials``; ``ippool`` alone (no instances: without
deploy/rbac-nodes.yaml); ``servicelb`` alone (likewise); and ``composite`` (simulated
instances and routes, ippool load balancers).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import functools
import ipaddress
import socket
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import pytest
import pytest_asyncio
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from kube_ccm.api.wellknown import TAINT_SHUTDOWN, TAINT_UNINITIALIZED
from kube_ccm.runtime.client import ApiError, KubeClient
from kube_ccm.testbed.helm import Helm
from kube_ccm.testbed.rbac import (
    POLICY_COLLECTIONS,
    forbidden,
    granted_permissions,
    granted_rules,
    install_policies,
    install_service_account,
    now_timestamp,
    refused_by_admission,
    renamed,
    requests,
    service_account_user,
    unused_permissions,
    unused_rules,
)
from kube_ccm.testing.controlplane import ControlPlane
from kube_ccm.testing.daemon import DaemonProcess
from kube_ccm.testing.manifests import create_node, set_node_ready, taint_keys
from kube_ccm.testing.pytest_plugin import Cleanup
from kube_ccm.testing.waiting import eventually

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
CHART = DEPLOY / "helm" / "kube-ccm"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"
MIGRATION_LEASE = "cloud-provider-extraction-migration"
SERVICE_ACCOUNTS = "/api/v1/namespaces/kube-system/serviceaccounts"
CONFIG_MAPS = "/api/v1/namespaces/kube-system/configmaps"
IPADDRESSES = "/apis/networking.k8s.io/v1/ipaddresses"
CSRS = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
BINDINGS = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
LB_CLASS = "kube-ccm.io/least-privilege"
"""The only Services these daemons serve: not the ones other tests left behind in
their (never deleted) namespaces, which ippool would otherwise give pool addresses."""
FAST = (
    f"--load-balancer-class={LB_CLASS}",
    "--serve-unclassed-load-balancers=false",
    "--leader-elect-lease-duration=3s",
    "--leader-elect-renew-deadline=2s",
    "--leader-elect-retry-period=500ms",
    "--route-reconciliation-period=1s",
    "--node-monitor-period=1s",
    "--bind-address=127.0.0.1",
)
POOL = "198.51.100.200-198.51.100.209"
"""ippool's range here (TEST-NET-2): no other test's pool or Service CIDR."""
OBJECT_POOL = "198.51.100.220-198.51.100.221"
"""A LoadBalancerPool's range here (autoAssign: false, so POOL serves the Services)."""
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
LB_POOLS = "/apis/ippool.kube-ccm.io/v1alpha1/loadbalancerpools"


def documents(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class World:
    """What a combination's scenario works with."""

    client: KubeClient
    cleanup: Cleanup
    namespace: str
    unique_name: Callable[[str], str]
    daemon: DaemonProcess
    port: int
    token: str
    plane: ControlPlane

    @property
    def services(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/services"

    async def create_service(self, body: dict[str, Any]) -> None:
        """Created, and deleted after the test whatever happens: the namespace stays
        Terminating without kube-controller-manager, and a Service showing an address
        would be there for later tests (`kube-ccm doctor` probes them)."""
        self.cleanup.add(f"{self.services}/{body['metadata']['name']}")
        await self.client.create(self.services, body)


Scenario = Callable[[World], Awaitable[None]]


@dataclass(frozen=True)
class Combination:
    account: str
    manifests: tuple[str, ...]
    """deploy/ files bound to the account, admission-policies.yaml included."""
    provider: str
    args: tuple[str, ...]
    scenario: Scenario
    controller_accounts: tuple[str, ...] = ()
    """--use-service-account-credentials: the controllers' ServiceAccounts (their
    bootstrap roles are the cluster's; what deploy/ binds to them is checked)."""
    cloud_config: dict[str, Any] = field(default_factory=dict)
    chart_values: dict[str, Any] | None = None
    """Render the Helm chart with these values instead of using ``manifests``: where
    deploy/'s static files cannot be exact (--use-service-account-credentials)."""
    main: str | None = None
    """Python source run instead of ``-m kube_ccm run``: one that registers the provider
    itself, so the combination does not depend on the installed entry points."""


# -- the scenarios -------------------------------------------------------------------


async def add_node(world: World, cidr: str) -> str:
    """A new Node, uninitialized, with the pod CIDR ``cidr``; its name."""
    name = world.unique_name("node")
    await create_node(world.client, world.cleanup, name, podCIDR=cidr, podCIDRs=[cidr])
    return name


async def initialised(world: World, name: str) -> bool:
    got = await world.client.get(f"/api/v1/nodes/{name}")
    return bool(got["spec"].get("providerID")) and TAINT_UNINITIALIZED not in taint_keys(got)


async def ingress(world: World, name: str) -> list[str]:
    svc = await world.client.get(f"{world.services}/{name}")
    return [
        i.get("ip", "") for i in svc.get("status", {}).get("loadBalancer", {}).get("ingress") or []
    ]


async def has_ingress(world: World, name: str) -> bool:
    return bool(await ingress(world, name))


async def gone(client: KubeClient, path: str) -> bool:
    try:
        await client.get(path)
    except ApiError as exc:
        return exc.not_found
    return False


def load_balancer(name: str, port: int = 80, **annotations: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"type": "LoadBalancer", "loadBalancerClass": LB_CLASS, "ports": [{"port": port}]},
    }


async def secure_port(world: World) -> None:
    """A bearer token (TokenReview) and an anonymous request (SubjectAccessReview)."""
    async with httpx2.AsyncClient(verify=False) as client:
        base = f"https://127.0.0.1:{world.port}"

        async def anonymous_refused() -> bool:
            return (await client.get(f"{base}/metrics")).status_code == 403

        await eventually(anonymous_refused, within=30, what="a SubjectAccessReview")
        response = await client.get(
            f"{base}/metrics", headers={"Authorization": f"Bearer {world.token}"}
        )
        assert response.status_code == 403  # authenticated, but not a metrics reader


async def node_lifecycle(world: World) -> None:
    """Nodes initialised (patch, status patch), a route (status patch), a shut-down
    instance's Node tainted (get, patch), a terminated instance's Node deleted."""
    node = await add_node(world, "10.244.9.0/24")
    stopped = await add_node(world, "10.244.10.0/24")
    dead = await add_node(world, "10.244.11.0/24")
    for name in (node, stopped, dead):
        await eventually(functools.partial(initialised, world, name), within=60, what=name)
    await eventually(
        lambda: any(r.target_node == node for r in world.daemon.cloud.routes()),
        within=60,
        what="a route",
    )
    world.daemon.cloud.set_instance_state(stopped, "shutdown")
    world.daemon.cloud.set_instance_state(dead, "terminated")
    for name in (stopped, dead):
        await set_node_ready(world.client, name, "Unknown")

    async def tainted() -> bool:
        return TAINT_SHUTDOWN in taint_keys(await world.client.get(f"/api/v1/nodes/{stopped}"))

    await eventually(tainted, within=60, what="the shut-down node tainted")
    await eventually(
        functools.partial(gone, world.client, f"/api/v1/nodes/{dead}"),
        within=60,
        what="the terminated node deleted",
    )


async def repeated_event(world: World, name: str, reason: str) -> None:
    """Wait until an Event of ``name`` with ``reason`` counts two (a patch of the first)."""

    async def repeated() -> bool:
        listed = await world.client.get(
            f"/api/v1/namespaces/{world.namespace}/events",
            {"fieldSelector": f"involvedObject.name={name},reason={reason}"},
        )
        return any(e.get("count", 1) >= 2 for e in listed["items"])

    await eventually(repeated, within=60, what=f"a repeated {reason} Event of {name}")


async def kubelet_serving_cert(world: World) -> None:
    """A kubelet's serving CSR approved (list, watch, get, approval update, approve on
    the signer): the kubelet of a Node initialised from the cloud asks for a certificate
    naming its Node and the InternalIP the cloud reported."""
    node = await add_node(world, "10.244.12.0/24")
    await eventually(functools.partial(initialised, world, node), within=60, what=node)

    async def internal_ips() -> list[str]:
        got = await world.client.get(f"/api/v1/nodes/{node}")
        addresses = got.get("status", {}).get("addresses") or []
        return [a["address"] for a in addresses if a["type"] == "InternalIP"]

    # status.addresses follows the taint's removal in a second write (as upstream).
    async def addressed() -> bool:
        return bool(await internal_ips())

    await eventually(addressed, within=30, what=f"the cloud's InternalIP on {node}")
    ip = (await internal_ips())[0]
    binding = f"{BINDINGS}/{node}-csr"
    world.cleanup.add(binding)
    await world.client.create(
        BINDINGS,
        {
            "metadata": {"name": f"{node}-csr"},
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
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{node}"),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
        ]
    )
    names = [x509.DNSName(node), x509.IPAddress(ipaddress.ip_address(ip))]
    pem = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(subject)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(key, hashes.SHA256())
        .public_bytes(serialization.Encoding.PEM)
    )
    kubeconfig = world.plane.write_client_kubeconfig(
        world.daemon.workdir / "kubelet.kubeconfig", f"system:node:{node}", ("system:nodes",)
    )
    world.cleanup.add(f"{CSRS}/{node}")
    async with KubeClient.from_kubeconfig(kubeconfig) as kubelet:
        await kubelet.create(
            CSRS,
            {
                "metadata": {"name": node},
                "spec": {
                    "request": base64.b64encode(pem).decode(),
                    "signerName": "kubernetes.io/kubelet-serving",
                    "usages": ["digital signature", "server auth"],
                },
            },
        )

    async def approved() -> bool:
        csr = await world.client.get(f"{CSRS}/{node}")
        return any(c["type"] == "Approved" for c in csr.get("status", {}).get("conditions") or [])

    await eventually(approved, within=60, what="the kubelet's serving CSR approved")


async def simulated_everything(world: World) -> None:
    """The node controllers' work, a load balancer ensured twice (its Event repeats),
    a PV labelled, the secure port, the load balancer released."""
    await simulated(world, kubelet_certs=False)


async def simulated_everything_and_kubelet_certs(world: World) -> None:
    """As :func:`simulated_everything`, and a kubelet serving CSR approved."""
    await simulated(world, kubelet_certs=True)


async def simulated(world: World, *, kubelet_certs: bool) -> None:
    await world.create_service(load_balancer("web"))
    volume = world.unique_name("pv")
    world.daemon.cloud.add_volume(f"vol-{volume}", zone="sim-zone-a", region="sim-region-1")
    world.cleanup.add(f"/api/v1/persistentvolumes/{volume}")
    await world.client.create(
        "/api/v1/persistentvolumes",
        {
            "metadata": {"name": volume},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "csi": {"driver": "simulated.csi.kube-ccm.io", "volumeHandle": f"vol-{volume}"},
            },
        },
    )

    async def labelled() -> bool:
        pv = await world.client.get(f"/api/v1/persistentvolumes/{volume}")
        return bool(pv["metadata"].get("labels"))

    await node_lifecycle(world)
    await eventually(functools.partial(has_ingress, world, "web"), within=60, what="an LB")
    await world.client.patch(
        f"{world.services}/web", {"spec": {"ports": [{"port": 8080}]}}, patch_type="merge"
    )
    await repeated_event(world, "web", "EnsuringLoadBalancer")
    await eventually(labelled, within=60, what="PV labels")
    if kubelet_certs:
        await kubelet_serving_cert(world)
    await secure_port(world)
    await world.client.delete(f"{world.services}/web")
    await eventually(
        functools.partial(gone, world.client, f"{world.services}/web"),
        within=60,
        what="the LB released (finalizer removed)",
    )


async def ippool_load_balancers(world: World) -> None:
    """Two Services sharing an address (its IPAddress created, then updated); every
    other address of the pool taken by someone else behind ippool's back, so that a
    third Service's claims conflict (each read back: get) and fail (the failure Event
    repeats: patch); the secure port; all released (updated, then deleted)."""
    # A LoadBalancerPool: watched, its status written, the namespace's labels read.
    pool = f"least-privilege-{world.namespace}"
    world.cleanup.add(f"{LB_POOLS}/{pool}")
    await world.client.create(
        LB_POOLS,
        {
            "apiVersion": "ippool.kube-ccm.io/v1alpha1",
            "kind": "LoadBalancerPool",
            "metadata": {"name": pool},
            "spec": {
                "addresses": [OBJECT_POOL],
                "autoAssign": False,
                "serviceAllocation": {
                    "namespaceSelectors": [
                        {"matchLabels": {"kubernetes.io/metadata.name": world.namespace}}
                    ]
                },
            },
        },
    )

    async def pool_status() -> bool:
        found = await world.client.get(f"{LB_POOLS}/{pool}")
        return bool((found.get("status") or {}).get("serving"))

    await eventually(pool_status, within=60, what="the LoadBalancerPool's status written")
    key = {"ippool.kube-ccm.io/sharing-key": "web"}
    await world.create_service(load_balancer("a", 80, **key))
    await eventually(functools.partial(has_ingress, world, "a"), within=60, what="a's address")
    await world.create_service(load_balancer("b", 81, **key))
    await eventually(functools.partial(has_ingress, world, "b"), within=60, what="b's address")
    (address,) = await ingress(world, "a")
    assert await ingress(world, "b") == [address]
    first, last = (ipaddress.ip_address(a) for a in POOL.split("-"))
    for n in range(int(first), int(last) + 1):
        other = str(ipaddress.ip_address(n))
        if other != address:
            world.cleanup.add(f"{IPADDRESSES}/{other}")
            try:
                await world.client.create(IPADDRESSES, foreign_claim(other, world.namespace))
            except ApiError as exc:  # taken already (a run that failed midway): as good
                if not exc.already_exists:
                    raise
    await world.create_service(load_balancer("c", 80))
    await repeated_event(world, "c", "SyncLoadBalancerFailed")
    assert not await ingress(world, "c")
    await secure_port(world)
    for name in ("b", "a", "c"):
        await world.client.delete(f"{world.services}/{name}")
        await eventually(
            functools.partial(gone, world.client, f"{world.services}/{name}"),
            within=60,
            what=f"{name} released",
        )
    assert await gone(world.client, f"{IPADDRESSES}/{address}")


SERVICELB_MAIN = (
    "import sys\n"
    "from kube_ccm.app.cli import run\n"
    "from kube_ccm.cloudprovider import register_cloud_provider\n"
    "from kube_ccm.providers.servicelb import factory\n"
    "register_cloud_provider('servicelb', factory)\n"
    "sys.exit(run())\n"
)
SYSTEM_PODS = "/api/v1/namespaces/kube-system/pods"
SVCLB_DAEMON_SETS = "/apis/apps/v1/namespaces/kube-system/daemonsets"
SVCLB_NODE_IP = "198.51.100.250"


async def servicelb_load_balancers(world: World) -> None:
    """A Service's DaemonSet made (its pods and the EndpointSlices watched) and let
    through by the shipped DaemonSet policy, its ready pod's node the ingress, a port
    change (the DaemonSet read and replaced), a Service whose (allowed) PriorityClass
    is missing refused (the class read) until its Event repeats, the secure port, and
    the DaemonSet deleted with its Service."""
    node = world.unique_name("node")
    world.cleanup.add(f"/api/v1/nodes/{node}")
    await world.client.create(
        "/api/v1/nodes",
        {
            "metadata": {"name": node},
            "status": {"addresses": [{"type": "InternalIP", "address": SVCLB_NODE_IP}]},
        },
    )
    with contextlib.suppress(ApiError):  # pods need it; no controller makes it here
        await world.client.create(
            "/api/v1/namespaces/kube-system/serviceaccounts", {"metadata": {"name": "default"}}
        )
    annotation = "svccontroller.k3s.cattle.io/priorityclassname"
    # No priority class: the DaemonSet passes the shipped DaemonSet policy as built.
    await world.create_service(load_balancer("a", 80))
    svc = await world.client.get(f"{world.services}/a")
    ds_path = f"{SVCLB_DAEMON_SETS}/svclb-a-{svc['metadata']['uid'][:8]}"
    world.cleanup.add(ds_path)

    async def made() -> bool:
        return not await gone(world.client, ds_path)

    await eventually(made, within=60, what="a's DaemonSet")
    ds = await world.client.get(ds_path)
    pod = f"{ds['metadata']['name']}-{node}"[:63]
    world.cleanup.add(f"{SYSTEM_PODS}/{pod}")
    await world.client.create(
        SYSTEM_PODS,
        {
            "metadata": {"name": pod, "labels": ds["spec"]["template"]["metadata"]["labels"]},
            "spec": {
                "nodeName": node,
                "automountServiceAccountToken": False,
                "containers": [{"name": "lb", "image": "pause"}],
            },
        },
    )
    await world.client.patch(
        f"{SYSTEM_PODS}/{pod}/status",
        {
            "status": {
                "podIP": "10.42.0.9",
                "podIPs": [{"ip": "10.42.0.9"}],
                "conditions": [{"type": "Ready", "status": "True"}],
            }
        },
    )

    async def served() -> bool:
        return await ingress(world, "a") == [SVCLB_NODE_IP]

    await eventually(served, within=60, what="a's ingress: the node of its ready pod")
    generation = ds["metadata"]["generation"]
    await world.client.patch(
        f"{world.services}/a", {"spec": {"ports": [{"port": 8080}]}}, patch_type="merge"
    )

    async def replaced() -> bool:
        found: dict[str, Any] = await world.client.get(ds_path)
        return bool(found["metadata"]["generation"] > generation)

    await eventually(replaced, within=60, what="a's DaemonSet replaced for port 8080")
    await world.create_service(load_balancer("b", 81, **{annotation: "no-such-class"}))
    await repeated_event(world, "b", "SyncLoadBalancerFailed")
    await secure_port(world)
    for name in ("a", "b"):
        await world.client.delete(f"{world.services}/{name}")
        await eventually(
            functools.partial(gone, world.client, f"{world.services}/{name}"),
            within=60,
            what=f"{name} deleted",
        )
    assert await gone(world.client, ds_path)


def foreign_claim(address: str, namespace: str) -> dict[str, Any]:
    """An IPAddress of another manager's."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "IPAddress",
        "metadata": {
            "name": address,
            "labels": {"ipaddress.kubernetes.io/managed-by": "test.example.com"},
        },
        "spec": {
            "parentRef": {"group": "", "resource": "services", "namespace": namespace, "name": "x"}
        },
    }


async def composite_nodes_and_load_balancers(world: World) -> None:
    """Nodes from the simulated cloud, load balancers from ippool."""
    await node_lifecycle(world)
    await ippool_load_balancers(world)


COMBINATIONS = {
    "simulated": Combination(
        account="ccm-simulated",
        manifests=(
            "rbac.yaml",
            "rbac-nodes.yaml",
            "rbac-pv-labels.yaml",
            "rbac-kubelet-serving-certs.yaml",
            "admission-policies.yaml",
        ),
        provider="simulated",
        args=(
            "--controllers=*,pvl,servingcert",
            "--cluster-cidr=10.244.0.0/16",
            "--enable-leader-migration",
        ),
        scenario=simulated_everything_and_kubelet_certs,
    ),
    "sa-credentials": Combination(
        account="ccm-sa-credentials",
        manifests=(),
        chart_values={
            "useServiceAccountCredentials": True,
            "pvLabels": {"enabled": True},
            "kubeletServingCertApprover": {"enabled": True},
        },
        provider="simulated",
        args=(
            "--controllers=*,pvl,servingcert",
            "--cluster-cidr=10.244.0.0/16",
            "--use-service-account-credentials",
        ),
        scenario=simulated_everything_and_kubelet_certs,
        controller_accounts=(
            "node-controller",
            "service-controller",
            "route-controller",
            "pvl-controller",
            "kubelet-serving-cert-approver",
        ),
    ),
    "ippool": Combination(
        account="ccm-ippool",
        manifests=("rbac.yaml", "rbac-ippool.yaml", "admission-policies.yaml"),
        provider="ippool",
        args=(),
        scenario=ippool_load_balancers,
        cloud_config={"configMap": "kube-system/kubevip"},
    ),
    "servicelb": Combination(
        account="ccm-servicelb",
        manifests=("rbac.yaml", "rbac-servicelb.yaml", "admission-policies.yaml"),
        provider="servicelb",
        args=(),
        scenario=servicelb_load_balancers,
        main=SERVICELB_MAIN,
        cloud_config={"allowedPriorityClasses": ["no-such-class"]},
    ),
    "composite": Combination(
        account="ccm-composite",
        manifests=("rbac.yaml", "rbac-nodes.yaml", "rbac-ippool.yaml", "admission-policies.yaml"),
        provider="composite",
        args=("--cluster-cidr=10.244.0.0/16",),
        scenario=composite_nodes_and_load_balancers,
        cloud_config={
            "providers": {
                "simulated": {"capabilities": ["instances", "routes"], "config": {"state": ""}},
                "ippool": {
                    "capabilities": ["loadBalancer"],
                    "config": {"configMap": "kube-system/kubevip"},
                },
            }
        },
    ),
}


# -- the run ---------------------------------------------------------------------------


@pytest_asyncio.fixture
async def pools(kube_client: KubeClient) -> AsyncIterator[None]:
    """ippool's ConfigMap kube-system/kubevip with one global range, and the
    LoadBalancerPool CRD of deploy/ (installed before any daemon looks for it)."""
    crd = documents("crd-loadbalancerpools.yaml")[0]
    with contextlib.suppress(ApiError):
        await kube_client.create(CRDS, crd)

    async def established() -> bool:
        found = await kube_client.get(f"{CRDS}/{crd['metadata']['name']}")
        conditions = (found.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    await eventually(established, within=30, what="the LoadBalancerPool CRD established")
    body = {"metadata": {"name": "kubevip"}, "data": {"range-global": POOL}}
    with contextlib.suppress(ApiError):
        await kube_client.delete(f"{CONFIG_MAPS}/kubevip")
    await eventually(lambda: gone(kube_client, f"{CONFIG_MAPS}/kubevip"), what="kubevip deleted")
    await kube_client.create(CONFIG_MAPS, body)
    yield
    with contextlib.suppress(ApiError):
        await kube_client.delete(f"{CONFIG_MAPS}/kubevip")


def chart(helm: Helm, tmp_path: Path, account: str, values: dict[str, Any]) -> list[dict[str, Any]]:
    """The chart's objects for ``values``, named for ``account`` (Lease included)."""
    values = {**values, "name": account, "leaderElection": {"resourceName": account}}
    values_file = tmp_path / "values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    result = subprocess.run(
        [str(helm.path), "template", account, str(CHART), "-f", str(values_file)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


async def policies_enforced(
    client: KubeClient, kubeconfig: Path, namespace: str, unique_name: Callable[[str], str]
) -> None:
    """Wait until the Service policy refuses the account (it may patch Service status,
    so RBAC lets the request through to admission): changing a label through the
    status subresource, which the status strategy would otherwise allow."""
    probe = unique_name("probe")
    services = f"/api/v1/namespaces/{namespace}/services"
    await client.create(services, {"metadata": {"name": probe}, "spec": {"ports": [{"port": 80}]}})
    attempts = iter(range(10**6))
    async with KubeClient.from_kubeconfig(kubeconfig) as account:

        async def refused() -> bool:
            try:
                await account.patch(
                    f"{services}/{probe}/status",
                    {"metadata": {"labels": {"probe": str(next(attempts))}}},
                    patch_type="merge",
                )
            except ApiError as exc:
                if exc.status != 403 or "ValidatingAdmissionPolicy" not in exc.message:
                    raise
                return True
            return False

        await eventually(refused, within=30, what="the Service policy enforced")
    await client.delete(f"{services}/{probe}")


def on_signers(rule: dict[str, Any]) -> bool:
    return rule.get("resources") == ["signers"]


async def fresh(client: KubeClient, path: str) -> None:
    """Delete ``path`` if it exists (left by earlier tests), and wait until it is gone."""
    with contextlib.suppress(ApiError):
        await client.delete(path)
    await eventually(lambda: gone(client, path), what=f"{path} deleted")


@pytest.mark.usefixtures("pools")
@pytest.mark.parametrize("combination", list(COMBINATIONS))
async def test_least_privilege(
    *,
    combination: str,
    kube_controlplane: ControlPlane,
    ccm_kubeconfig: Path,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    kube_namespace: str,
    unique_name: Callable[[str], str],
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    del ccm_kubeconfig  # the session's check for forbidden requests covers these accounts
    combo = COMBINATIONS[combination]
    if combo.chart_values is None:
        docs = renamed([d for name in combo.manifests for d in documents(name)], combo.account)
    else:
        docs = await asyncio.to_thread(
            chart, request.getfixturevalue("helm"), tmp_path, combo.account, combo.chart_values
        )
    rbac = [d for d in docs if d["kind"] in RBAC_KINDS]
    kubeconfig = await install_service_account(
        kube_controlplane, rbac, "kube-system", combo.account, kubeconfig=tmp_path / "kubeconfig"
    )
    policies = [d for d in docs if d["kind"] in POLICY_COLLECTIONS]
    assert len(policies) == 6, "the policies are on by default"
    for path in await install_policies(kube_client, policies):
        kube_cleanup.add(path)
    granted = granted_permissions(rbac, combo.account)
    if any(p.resource == "services/status" and p.verb == "patch" for p in granted):
        await policies_enforced(kube_client, kubeconfig, kube_namespace, unique_name)
    # This daemon creates the Leases and the controllers' ServiceAccounts itself.
    for lease in (combo.account, MIGRATION_LEASE):
        await fresh(kube_client, f"{LEASES}/{lease}")
    for account in combo.controller_accounts:
        await fresh(kube_client, f"{SERVICE_ACCOUNTS}/{account}")
    config = copy.deepcopy(combo.cloud_config)
    for member in config.get("providers", {}).values():
        if "state" in member["config"]:
            # The simulated member keeps its state where DaemonProcess.cloud reads it.
            member["config"]["state"] = str(tmp_path / "daemon" / "cloud.db")
    config_file = tmp_path / "cloud.yaml"
    config_file.write_text(yaml.safe_dump(config))
    port = free_port()
    since = now_timestamp()
    daemon = DaemonProcess(
        kubeconfig=kubeconfig,
        workdir=tmp_path / "daemon",
        provider=combo.provider,
        cloud_config={} if combo.provider == "simulated" else None,
        cloud_config_file=None if combo.provider == "simulated" else config_file,
        args=[
            *FAST,
            f"--leader-elect-resource-name={combo.account}",
            f"--secure-port={port}",
            *combo.args,
        ],
    )
    if combo.main is not None:
        assert daemon.argv[1:4] == ["-m", "kube_ccm", "run"], daemon.argv
        daemon.argv[1:4] = ["-c", combo.main]
    daemon.start()
    token = yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]["token"]
    world = World(
        kube_client,
        kube_cleanup,
        kube_namespace,
        unique_name,
        daemon,
        port,
        token,
        kube_controlplane,
    )
    try:
        await combo.scenario(world)
    finally:
        status = daemon.stop()
    assert status == 0, daemon.log()[-3000:]
    users = [
        service_account_user("kube-system", name)
        for name in (combo.account, *combo.controller_accounts)
    ]
    refused = [r for user in users for r in forbidden(kube_controlplane, user, since)]
    refused += [r for user in users for r in refused_by_admission(kube_controlplane, user, since)]
    assert not refused, "\n".join(refused)
    unused = []
    for name in (combo.account, *combo.controller_accounts):
        events = requests(kube_controlplane, service_account_user("kube-system", name), since)
        unused += unused_rules(
            [(role, rule) for role, rule in granted_rules(rbac, name) if not on_signers(rule)],
            events,
        )
        # `approve` on a signer is asked by the CertificateApproval admission plugin
        # during the approval update, not by a request of its own, so the audit log never
        # shows it; the scenario's CSR approved (403 without it) proves it is used.
        permissions = [p for p in granted_permissions(rbac, name) if p.resource != "signers"]
        if "--enable-leader-migration" not in combo.args:
            # Used only while a leader migration lasts (the simulated combination runs one).
            permissions = [p for p in permissions if p.name != MIGRATION_LEASE]
        unused += unused_permissions(permissions, events)
    assert not unused, "granted but never used (least privilege: drop or test them):\n" + (
        "\n".join(unused)
    )
