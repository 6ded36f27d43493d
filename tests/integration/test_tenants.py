"""Tenants attack ippool on the real apiserver, and none reaches another's address.

Two tenants, each a ServiceAccount whose Role covers its own namespace only
(Services, Endpoints, ConfigMaps, reading Events), attack the daemon as issue 29's
audit did: ``--cloud-provider=ippool`` with exactly the shipped RBAC, a kube-vip
ConfigMap with a global range and a pool of tenant-b's own (allow-share on). Each
path of the audit has a test: a guessed sharing key (alone, with
``spec.loadBalancerIP``, with MetalLB's key and the address annotation), the pool's
implicit key spoofed, an address taken over after its owner released it, ports
squatted on the owner's address, what a tenant's Events disclose, a 200 KB
annotation, addresses no pool may give, the per-namespace cap, the secure port
as a tenant, and a pool given to tenant-b by a Cilium-style selector
(``io.kubernetes.service.namespace``) that tenant-a labels its way into. The shipped
admission policies are in force, and refuse nothing the daemon does.
``docs/reliability.md`` ("Multi-tenant") has the results.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest_asyncio
import yaml

from kube_ccm.runtime.client import ApiError, KubeClient
from kube_ccm.testbed.rbac import (
    CCM_SERVICE_ACCOUNT_USER,
    install_policies,
    install_service_account,
    now_timestamp,
    refused_by_admission,
)
from kube_ccm.testing.controlplane import ControlPlane
from kube_ccm.testing.daemon import DaemonProcess
from kube_ccm.testing.waiting import eventually

A, B = "tenant-a", "tenant-b"
CM = "/api/v1/namespaces/kube-system/configmaps"
ADDRESSES = "kube-vip.io/loadbalancerIPs"
KEY = "ippool.kube-ccm.io/sharing-key"
CROSS = "ippool.kube-ccm.io/sharing-cross-namespace"
FINALIZER = "service.kubernetes.io/load-balancer-cleanup"
IPADDRESSES = "/apis/networking.k8s.io/v1/ipaddresses"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
LBPOOLS = "/apis/ippool.kube-ccm.io/v1alpha1/loadbalancerpools"
POOL = "ippool.kube-ccm.io/pool"
POOLS = {
    "range-global": "172.21.0.1-172.21.0.20",
    "range-tenant-b": "172.21.1.1-172.21.1.1",
    "allow-share-tenant-b": "true",
}
DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
CAP = 4
SHARED = "172.21.0.15"
"""A global address tenant-b asks for (its own pool would come first otherwise)."""
SECRETS_OF_B = ("tenant-b", "b-web", "443", "8443", "range-tenant-b", "allow-share")
"""What tenant-a's Events must never show of tenant-b."""


def tenant_rbac(namespace: str) -> list[dict[str, Any]]:
    name = "tenant"
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": name, "namespace": namespace},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": name, "namespace": namespace},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["services", "endpoints", "configmaps"],
                    "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
                },
                {"apiGroups": [""], "resources": ["events"], "verbs": ["get", "list"]},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": name, "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        },
    ]


@dataclass
class Tenant:
    namespace: str
    client: KubeClient
    kubeconfig: Path

    @property
    def services(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/services"

    async def create(self, name: str, **spec: Any) -> None:
        ports = spec.pop("ports", [80])
        annotations = spec.pop("annotations", {})
        labels = spec.pop("labels", {})
        await self.client.create(
            self.services,
            {
                "metadata": {"name": name, "annotations": annotations, "labels": labels},
                "spec": {
                    "type": "LoadBalancer",
                    "ports": [{"name": f"p{p}", "port": p} for p in ports],
                    **spec,
                },
            },
        )

    async def ingress(self, name: str) -> list[str]:
        svc = await self.client.get(f"{self.services}/{name}")
        ingress = svc.get("status", {}).get("loadBalancer", {}).get("ingress") or []
        return [i.get("ip", "") for i in ingress]

    async def served(self, name: str) -> list[str]:
        async def has() -> bool:
            return bool(await self.ingress(name))

        await eventually(has, within=60, what=f"{self.namespace}/{name} served")
        return await self.ingress(name)

    async def failures(self, name: str) -> list[str]:
        """The SyncLoadBalancerFailed messages of ``name``, read as the tenant."""
        listed = await self.client.get(
            f"/api/v1/namespaces/{self.namespace}/events",
            {"fieldSelector": f"involvedObject.name={name},reason=SyncLoadBalancerFailed"},
        )
        return [e["message"] for e in listed["items"]]

    async def refused(self, name: str, text: str) -> str:
        async def found() -> bool:
            return any(text in m for m in await self.failures(name))

        await eventually(found, within=60, what=f"{self.namespace}/{name}: {text!r}")
        return next(m for m in await self.failures(name) if text in m)

    async def all_event_text(self) -> str:
        listed = await self.client.get(f"/api/v1/namespaces/{self.namespace}/events")
        return "\n".join(e.get("message", "") for e in listed["items"])


@dataclass
class Attack:
    a: Tenant
    b: Tenant
    admin: KubeClient
    ccm: DaemonProcess
    port: int

    async def holders(self, address: str) -> list[str]:
        try:
            item = await self.admin.get(f"{IPADDRESSES}/{address}")
        except ApiError as exc:
            if exc.not_found:
                return []
            raise
        raw = item["metadata"].get("annotations", {}).get("ippool.kube-ccm.io/holders", "[]")
        return [f"{h['namespace']}/{h['name']}" for h in yaml.safe_load(raw)]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest_asyncio.fixture
async def attack(
    kube_controlplane: ControlPlane,
    ccm_kubeconfig: Path,
    kube_client: KubeClient,
    tmp_path: Path,
) -> AsyncIterator[Attack]:
    tenants: list[Tenant] = []
    for namespace in (A, B):
        with contextlib.suppress(ApiError):
            await kube_client.create("/api/v1/namespaces", {"metadata": {"name": namespace}})
        kubeconfig = await install_service_account(
            kube_controlplane,
            tenant_rbac(namespace),
            namespace,
            "tenant",
            kubeconfig=tmp_path / f"{namespace}.kubeconfig",
        )
        tenants.append(Tenant(namespace, KubeClient.from_kubeconfig(kubeconfig), kubeconfig))
    with contextlib.suppress(ApiError):
        await kube_client.delete(f"{CM}/kubevip")
    await kube_client.create(CM, {"metadata": {"name": "kubevip"}, "data": POOLS})
    # The shipped admission policies too: what ippool does for tenants (evicting a
    # guest rewrites another Service's annotations) stays inside what they allow.
    policies = await install_policies(
        kube_client,
        [d for d in yaml.safe_load_all((DEPLOY / "admission-policies.yaml").read_text()) if d],
    )
    since = now_timestamp()
    config = tmp_path / "ippool.yaml"
    config.write_text(yaml.safe_dump({"namespaceLimit": CAP}))
    port = _free_port()
    ccm = DaemonProcess(
        kubeconfig=ccm_kubeconfig,
        workdir=tmp_path / "ccm",
        provider="ippool",
        cloud_config_file=config,
        args=[
            "--leader-elect=false",
            "--controllers=service",
            "--concurrent-service-syncs=4",
            f"--secure-port={port}",
            "--bind-address=127.0.0.1",
        ],
    ).start()
    try:
        yield Attack(tenants[0], tenants[1], kube_client, ccm, port)
    finally:
        for tenant in tenants:
            listed = await kube_client.get(tenant.services)
            for svc in listed["items"]:
                with contextlib.suppress(ApiError):
                    await kube_client.delete(f"{tenant.services}/{svc['metadata']['name']}")

        async def released() -> bool:
            for tenant in tenants:
                left = await kube_client.get(tenant.services)
                if any(FINALIZER in (s["metadata"].get("finalizers") or []) for s in left["items"]):
                    return False
            return True

        try:
            await eventually(released, within=120, what="the tenants' Services released")
        finally:
            assert ccm.poll() is None, "the CCM kept running under attack"
            assert ccm.stop() == 0
            for tenant in tenants:
                await tenant.client.aclose()
            await kube_client.delete(f"{CM}/kubevip")
            for path in policies:
                await kube_client.delete(path)
    refused = refused_by_admission(kube_controlplane, CCM_SERVICE_ACCOUNT_USER, since)
    assert not refused, refused


async def test_a_guessed_sharing_key_never_joins_another_tenants_address(attack: Attack) -> None:
    a, b = attack.a, attack.b
    await b.create("b-web", ports=[443], annotations={KEY: "web", ADDRESSES: SHARED})
    [taken] = await b.served("b-web")

    await a.create("a-key", annotations={KEY: "web"})
    assert await a.served("a-key") != [taken], "the key alone joined tenant-b's address"
    await a.create("a-key-ip", annotations={KEY: "web"}, loadBalancerIP=taken)
    await a.create(
        "a-metallb",
        annotations={"metallb.universe.tf/allow-shared-ip": "web", ADDRESSES: taken},
    )
    for name in ("a-key-ip", "a-metallb"):
        message = await a.refused(name, f"requested address {taken} is taken")
        assert not any(s in message for s in SECRETS_OF_B), message
        assert await a.ingress(name) == []
    assert await attack.holders(taken) == [f"{B}/b-web"]
    events = await a.all_event_text()
    assert not any(s in events for s in SECRETS_OF_B), events
    # Nothing tells tenant-a that its guessed key is in use elsewhere (a key in use
    # nowhere gives no AddressNotShared either).
    listed = await a.client.get(
        f"/api/v1/namespaces/{A}/events", {"fieldSelector": "reason=AddressNotShared"}
    )
    assert listed["items"] == [], [e["message"] for e in listed["items"]]


async def test_the_pools_implicit_sharing_key_cannot_be_spoofed(attack: Attack) -> None:
    a, b = attack.a, attack.b
    await b.create("b-own", ports=[443])
    assert await b.served("b-own") == ["172.21.1.1"]
    # tenant-b's one address has port 443 taken: the next goes global, shared by rule.
    await b.create("b-global", ports=[443])
    [shared] = await b.served("b-global")
    assert shared.startswith("172.21.0.")

    spoof = {KEY: "kube-vip allow-share tenant-b", ADDRESSES: shared}
    await a.create("a-spoof", annotations=spoof)
    message = await a.refused("a-spoof", f"requested address {shared} is taken")
    assert not any(s in message for s in SECRETS_OF_B), message
    # tenant-b's own next Service still shares it by the pool's rule.
    await b.create("b-more", ports=[8443], annotations={ADDRESSES: shared})
    assert await b.served("b-more") == [shared]
    assert await attack.holders(shared) == [f"{B}/b-global", f"{B}/b-more"]


async def test_a_released_address_goes_back_to_its_tenant(attack: Attack) -> None:
    a, b = attack.a, attack.b
    await b.create("b-web", ports=[443], annotations={KEY: "web", ADDRESSES: SHARED})
    [taken] = await b.served("b-web")
    for i in range(3):
        await a.create(f"a{i}", annotations={KEY: "web"})
        assert await a.served(f"a{i}") != [taken]

    await b.client.delete(f"{b.services}/b-web")

    async def free() -> bool:
        return await attack.holders(taken) == []

    await eventually(free, within=60, what=f"{taken} released with tenant-b's Service")
    await b.create("b-again", ports=[443], loadBalancerIP=taken)
    assert await b.served("b-again") == [taken]


async def test_cross_namespace_sharing_needs_both_sides_and_the_owner_keeps_its_ports(
    attack: Attack,
) -> None:
    a, b = attack.a, attack.b
    await b.create("b-web", ports=[443], annotations={KEY: "web", CROSS: A, ADDRESSES: SHARED})
    [owned] = await b.served("b-web")
    # One side only (tenant-b names tenant-a, tenant-a names someone else) gets nothing.
    await a.create("a-one-sided", annotations={KEY: "web", CROSS: "tenant-x", ADDRESSES: owned})
    await a.refused("a-one-sided", f"requested address {owned} is taken")
    # Both sides: tenant-a's Service shares tenant-b's address on another port.
    await a.create("a-guest", ports=[80], annotations={KEY: "web", CROSS: B})
    assert await a.served("a-guest") == [owned]
    assert await attack.holders(owned) == [f"{B}/b-web", f"{A}/a-guest"]

    # The owner adds the port the guest holds: the guest gives way, loses the
    # announcer's annotation and is given an address of its own.
    await b.client.patch(
        f"{b.services}/b-web",
        {"spec": {"ports": [{"name": "p443", "port": 443}, {"name": "p80", "port": 80}]}},
    )

    async def moved() -> bool:
        now = await a.ingress("a-guest")
        return bool(now) and now != [owned]

    await eventually(moved, within=60, what="the guest moved off the owner's address")
    assert await attack.holders(owned) == [f"{B}/b-web"]
    guest = await a.client.get(f"{a.services}/a-guest")
    assert guest["metadata"]["annotations"].get(ADDRESSES) != owned
    events = await a.all_event_text()
    assert not any(s in events for s in SECRETS_OF_B), events


async def test_huge_and_forbidden_inputs_are_refused_briefly_and_the_cap_holds(
    attack: Attack,
) -> None:
    a, b = attack.a, attack.b
    await a.create("a-huge", annotations={KEY: "k" * 200_000})
    message = await a.refused("a-huge", f"annotation {KEY} is 200000 characters long")
    assert len(message) < 400, message
    assert "k" * 100 not in attack.ccm.log(), "the value was echoed into the log"

    api_service = await attack.admin.get("/api/v1/namespaces/default/services/kubernetes")
    forbidden = [
        "0.0.0.0",
        "127.0.0.1",
        "169.254.169.254",
        "224.0.0.1",
        api_service["spec"]["clusterIP"],
        "fe80::1%eth0",
        "172.21.0.010",
        "172.21.0.5\x1b[2J",
    ]
    for i, address in enumerate(forbidden):
        await a.create(f"a-bad-{i}", annotations={ADDRESSES: address})
    for i in range(len(forbidden)):
        found = await a.refused(f"a-bad-{i}", "")
        assert "\x1b" not in found, found
        assert await a.ingress(f"a-bad-{i}") == []
    listed = await attack.admin.get(
        IPADDRESSES, {"labelSelector": "ipaddress.kubernetes.io/managed-by=ippool.kube-ccm.io"}
    )
    assert all(i["metadata"]["name"].startswith("172.21.") for i in listed["items"])

    # The cap: tenant-a gets CAP addresses, then an Event naming the cap; tenant-b
    # still gets one.
    for i in range(CAP + 2):
        await a.create(f"a-many-{i}")

    async def capped() -> bool:
        served = [n for n in range(CAP + 2) if await a.ingress(f"a-many-{n}")]
        return len(served) == CAP

    await eventually(capped, within=60, what=f"{CAP} of tenant-a's Services served")
    starved = [n for n in range(CAP + 2) if not await a.ingress(f"a-many-{n}")]
    await a.refused(f"a-many-{starved[0]}", f"namespace '{A}' already holds {CAP} pool addresses")
    await b.create("b-still")
    assert await b.served("b-still")


@pytest_asyncio.fixture
async def team_b_pool(kube_client: KubeClient) -> AsyncIterator[str]:
    """A LoadBalancerPool for tenant-b's Services only, its selector carried over from a
    CiliumLoadBalancerIPPool unchanged (Cilium's documented way to give a pool to one
    namespace); installed before the daemon starts (ask for it before ``attack``)."""
    manifest = yaml.safe_load((DEPLOY / "crd-loadbalancerpools.yaml").read_text())
    with contextlib.suppress(ApiError):
        await kube_client.create(CRDS, manifest)

    async def established() -> bool:
        found = await kube_client.get(f"{CRDS}/{manifest['metadata']['name']}")
        conditions = found.get("status", {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    await eventually(established, within=30, what="the LoadBalancerPool CRD established")
    name = "tenants-team-b"
    with contextlib.suppress(ApiError):
        await kube_client.delete(f"{LBPOOLS}/{name}")
    await kube_client.create(
        LBPOOLS,
        {
            "apiVersion": "ippool.kube-ccm.io/v1alpha1",
            "kind": "LoadBalancerPool",
            "metadata": {"name": name},
            "spec": {
                "addresses": ["172.21.3.1-172.21.3.4"],
                "serviceAllocation": {
                    "serviceSelectors": [
                        {"matchLabels": {"io.kubernetes.service.namespace": B}},
                        {"matchLabels": {"io.kubernetes.service.name": "b-named"}},
                    ]
                },
            },
        },
    )
    try:
        yield name
    finally:
        await kube_client.delete(f"{LBPOOLS}/{name}")


async def test_a_tenant_labelling_its_service_as_another_namespace_gets_nothing_of_its_pool(
    team_b_pool: str, attack: Attack
) -> None:
    """Cilium's selector keys name the Service's real namespace and name (issue 37,
    finding 6): tenant-a's labels saying tenant-b, or naming tenant-b's Service, get
    nothing of tenant-b's pool, automatically, by address or by the pool annotation;
    tenant-b's Services are served from it by the selector carried over unchanged."""
    a, b = attack.a, attack.b
    spoof = {"io.kubernetes.service.namespace": B, "io.kubernetes.service.name": "b-named"}
    # tenant-b: by the pool annotation (its own kube-vip pool would come first).
    await b.create("b-pooled", annotations={POOL: team_b_pool})
    assert await b.served("b-pooled") == ["172.21.3.1"]
    await b.create("b-asks", annotations={ADDRESSES: "172.21.3.2"})
    assert await b.served("b-asks") == ["172.21.3.2"]

    # tenant-a, labelled as tenant-b: automatically, a global address (LoadBalancerPools
    # come before the global pool, so a match would have given 172.21.3.x).
    await a.create("a-spoof", labels=spoof)
    [given] = await a.served("a-spoof")
    assert not given.startswith("172.21.3."), given
    await a.create("a-spoof-pool", labels=spoof, annotations={POOL: team_b_pool})
    message = await a.refused("a-spoof-pool", "serves only Services matching its")
    assert "spec.serviceAllocation.serviceSelectors" in message
    await a.create("a-spoof-ip", labels=spoof, annotations={ADDRESSES: "172.21.3.3"})
    message = await a.refused("a-spoof-ip", f"it is not in a pool serving Service {A}/a-spoof-ip")
    assert "namespace 'tenant-a'" not in message.split(";")[0]
    for name in ("a-spoof-pool", "a-spoof-ip"):
        assert await a.ingress(name) == []
    assert await attack.holders("172.21.3.3") == []
    # A Service of tenant-a with the name the other selector names, by its real name:
    # served (Cilium's rule: that selector names no namespace).
    await a.create("b-named", annotations={POOL: team_b_pool})
    [named] = await a.served("b-named")
    assert named.startswith("172.21.3."), named


async def test_the_secure_port_gives_a_tenant_nothing(attack: Attack) -> None:
    token = yaml.safe_load(attack.a.kubeconfig.read_text())["users"][0]["user"]["token"]
    base = f"https://127.0.0.1:{attack.port}"
    async with httpx2.AsyncClient(verify=False) as client:

        async def up() -> bool:
            try:
                return (await client.get(f"{base}/healthz")).status_code == 200
            except httpx2.TransportError:
                return False

        await eventually(up, within=30, what="the secure port")
        for path in ("/metrics", "/configz"):
            for headers in ({}, {"Authorization": f"Bearer {token}"}):
                response = await client.get(base + path, headers=headers)
                assert response.status_code in (401, 403), (path, response.status_code)
                assert token not in response.text
                assert "BEGIN" not in response.text
