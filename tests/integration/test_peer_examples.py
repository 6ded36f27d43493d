"""The migration guides as executable examples (issue 39, What to build 2): each peer's
documented examples, as written in that peer's documentation (source and version
recorded with each), converted only by the guide's own steps, here ``kube-ccm migrate
pools`` (its mechanical step, run as a user would), applied on the real apiserver, and
the addresses, sharing, pool choice and Events checked against what the peer gives.

Where a documented Service names an address or pool that the peer's documentation
defines nowhere, the test adds a LoadBalancerPool holding it ("glue", marked so):
that is the user's own pool, not part of the example.

kube-vip-cloud-provider's documented ConfigMap is applied unchanged in
tests/integration/test_daemon_ippool.py; k3s's tolerations annotation in
tests/integration/test_daemon_servicelb.py; the Go Proxmox CCM's documented config in
tests/integration/test_daemon_proxmox.py and tests/unit/app/test_migrate.py.
"""

from __future__ import annotations

import contextlib
import ipaddress
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml

from kube_ccm.runtime.client import ApiError, KubeClient
from kube_ccm.testbed.services import delete_load_balancer_services as _delete_services
from kube_ccm.testbed.services import event_messages as events
from kube_ccm.testbed.services import ingress_addresses as addresses
from kube_ccm.testbed.services import service_daemon as daemon
from kube_ccm.testing.waiting import eventually

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
POOLS = "/apis/ippool.kube-ccm.io/v1alpha1/loadbalancerpools"


@pytest_asyncio.fixture
async def crd(kube_client: KubeClient) -> AsyncIterator[None]:
    """The LoadBalancerPool CRD of deploy/, established; Services and pools removed
    after (as in test_ippool_pools.py)."""
    manifest = yaml.safe_load((DEPLOY / "crd-loadbalancerpools.yaml").read_text())
    with contextlib.suppress(ApiError):
        await kube_client.create(CRDS, manifest)

    async def established() -> bool:
        found = await kube_client.get(f"{CRDS}/{manifest['metadata']['name']}")
        conditions = found.get("status", {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    await eventually(established, within=30, what="the LoadBalancerPool CRD established")
    yield
    await _delete_services(kube_client)
    for item in (await kube_client.get(POOLS))["items"]:
        await kube_client.delete(f"{POOLS}/{item['metadata']['name']}")


pytestmark = pytest.mark.usefixtures("crd")


def lbpool(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "ippool.kube-ccm.io/v1alpha1",
        "kind": "LoadBalancerPool",
        "metadata": {"name": name},
        "spec": spec,
    }


async def pool_events(client: KubeClient, name: str, reason: str) -> list[str]:
    listed = await client.get(
        "/api/v1/namespaces/default/events",
        {"fieldSelector": f"involvedObject.name={name},reason={reason}"},
    )
    return [e["message"] for e in listed["items"]]


METALLB_SOURCE = (
    "https://github.com/metallb/metallb/tree/7938d3f89b8bd808dae2e42d97d6ae7e18e9ed54/"
    "website/content (metallb-chart-0.16.1-19-g7938d3f89, 2026-07-19)"
)
METALLB_POOLS = """\
# configuration/_index.md, "Defining the IPs to assign to the Load Balancer Services"
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata:
  name: first-pool
  namespace: metallb-system
spec:
  addresses:
  - 192.168.10.0/24
  - 192.168.9.1-192.168.9.5
  - fc00:f853:0ccd:e799::/124
---
# configuration/_advanced_ipaddresspool_configuration.md, "Controlling automatic
# address allocation" (its first pool, cheap, has first-pool's CIDR: applied after
# it, it conflicts, as MetalLB's webhook refuses an overlap)
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata:
  name: expensive
  namespace: metallb-system
spec:
  addresses:
  - 42.176.25.64/30
  autoAssign: false
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata:
  name: cheap
  namespace: metallb-system
spec:
  addresses:
  - 192.168.10.0/24
---
# _advanced_ipaddresspool_configuration.md, "Reduce scope of address allocation to
# specific Namespace and Service"
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata:
  name: ippool-ns-service-alloc-sample
  namespace: metallb-system
spec:
  addresses:
    - 192.168.20.0/24
  avoidBuggyIPs: true
  serviceAllocation:
    priority: 50
    namespaces:
      - namespace-a
      - namespace-b
    namespaceSelectors:
      - matchLabels:
          foo: bar
    serviceSelectors:
      - matchExpressions:
          - {key: app, operator: In, values: [bar]}
---
# configuration/_index.md: kept for MetalLB's speaker, not converted
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata:
  name: example
  namespace: metallb-system
"""
METALLB_SERVICES = """\
# usage/_index.md, "Requesting specific IPs"
apiVersion: v1
kind: Service
metadata:
  name: nginx
  annotations:
    metallb.io/loadBalancerIPs: 192.168.1.100
spec:
  ports:
  - port: 80
    targetPort: 80
  selector:
    app: nginx
  type: LoadBalancer
---
# usage/_index.md, the pool annotation (applied in namespace mlb-pool: same name)
apiVersion: v1
kind: Service
metadata:
  name: nginx
  annotations:
    metallb.io/address-pool: production-public-ips
spec:
  ports:
  - port: 80
    targetPort: 80
  selector:
    app: nginx
  type: LoadBalancer
---
# usage/_index.md, "IP Address Sharing"
apiVersion: v1
kind: Service
metadata:
  name: dns-service-tcp
  namespace: default
  annotations:
    metallb.io/allow-shared-ip: "key-to-share-1.2.3.4"
spec:
  type: LoadBalancer
  loadBalancerIP: 1.2.3.4
  ports:
    - name: dnstcp
      protocol: TCP
      port: 53
      targetPort: 53
  selector:
    app: dns
---
apiVersion: v1
kind: Service
metadata:
  name: dns-service-udp
  namespace: default
  annotations:
    metallb.io/allow-shared-ip: "key-to-share-1.2.3.4"
spec:
  type: LoadBalancer
  loadBalancerIP: 1.2.3.4
  ports:
    - name: dnsudp
      protocol: UDP
      port: 53
      targetPort: 53
  selector:
    app: dns
"""

CILIUM_SOURCE = (
    "https://github.com/cilium/cilium/blob/09b44458f5c5401bdb2acbcc800265541b4c4b66/"
    "Documentation/network/lb-ipam.rst (docs.cilium.io, LB IPAM)"
)
CILIUM_POOLS = """\
# "Pools": the basic pool
apiVersion: "cilium.io/v2alpha1"
kind: CiliumLoadBalancerIPPool
metadata:
  name: "blue-pool"
spec:
  blocks:
  - cidr: "10.0.10.0/24"
  - cidr: "2004::0/64"
  - start: "20.0.20.100"
    stop: "20.0.20.200"
  - start: "1.2.3.4"
---
# "Disabling a Pool" (renamed from blue-pool: the same name as above)
apiVersion: "cilium.io/v2alpha1"
kind: CiliumLoadBalancerIPPool
metadata:
  name: "blue-pool-disabled"
spec:
  blocks:
  - cidr: "20.0.10.0/24"
  disabled: true
"""
CILIUM_SERVICES = """\
# "Services"
apiVersion: v1
kind: Service
metadata:
  name: service-red
  namespace: example
  labels:
    color: red
spec:
  type: LoadBalancer
  ports:
  - port: 1234
---
# "Requesting IPs": two IPv4 addresses (applied as service-blue-ips: names collide)
apiVersion: v1
kind: Service
metadata:
  name: service-blue-ips
  namespace: example
  labels:
    color: blue
  annotations:
    "lbipam.cilium.io/ips": "20.0.10.100,20.0.10.200"
spec:
  type: LoadBalancer
  ports:
  - port: 1234
---
# "Sharing Keys"
apiVersion: v1
kind: Service
metadata:
  name: service-blue
  namespace: example
  labels:
    color: blue
  annotations:
    "lbipam.cilium.io/sharing-key": "1234"
spec:
  type: LoadBalancer
  ports:
  - port: 1234
---
apiVersion: v1
kind: Service
metadata:
  name: service-red-shared
  namespace: example
  labels:
    color: red
  annotations:
    "lbipam.cilium.io/sharing-key": "1234"
spec:
  type: LoadBalancer
  ports:
  - port: 2345
"""


def in_blocks(address: str, blocks: list[str]) -> bool:
    """Whether ``address`` is in one of a LoadBalancerPool's ``addresses``."""
    ip = ipaddress.ip_address(address)
    for block in blocks:
        low, _, high = block.partition("-")
        if "/" in block:
            if ip in ipaddress.ip_network(block, strict=False):
                return True
        elif ipaddress.ip_address(low).version == ip.version and (
            int(ipaddress.ip_address(low)) <= int(ip) <= int(ipaddress.ip_address(high or low))
        ):
            return True
    return False


def migrate_pools(text: str) -> tuple[list[dict[str, Any]], str, int]:
    """``kube-ccm migrate pools -`` on ``text``, as a user runs it."""
    done = subprocess.run(
        [sys.executable, "-m", "kube_ccm", "migrate", "pools", "-"],
        input=text,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    return [d for d in yaml.safe_load_all(done.stdout) if d], done.stderr, done.returncode


async def namespace(client: KubeClient, name: str, labels: dict[str, str] | None = None) -> None:
    with contextlib.suppress(ApiError):
        await client.create(
            "/api/v1/namespaces", {"metadata": {"name": name, "labels": labels or {}}}
        )


async def apply_services(client: KubeClient, text: str, default_namespace: str) -> None:
    for doc in yaml.safe_load_all(text):
        ns = doc["metadata"].get("namespace", default_namespace)
        await client.create(f"/api/v1/namespaces/{ns}/services", doc)


async def test_metallbs_documented_examples_after_the_guides_conversion(
    ccm_kubeconfig: Path, kube_client: KubeClient, tmp_path: Path
) -> None:
    """MetalLB (``METALLB_SOURCE``): 4 IPAddressPools converted by ``kube-ccm migrate
    pools`` (3 serve, ``cheap`` conflicts with ``first-pool`` as MetalLB refuses an
    overlap), its L2Advertisement named as kept; 4 Services applied unchanged, plus a
    plain one and one the scoped pool serves."""
    pools, notes, status = migrate_pools(METALLB_POOLS)
    assert status == 3, notes  # the L2Advertisement is named, not converted
    assert notes.strip().splitlines() == [
        "not carried over: L2Advertisement metallb-system/example: not converted; keep "
        "it for MetalLB's speaker, which announces what ippool allocates (announcer: status)"
    ]
    assert [p["metadata"]["name"] for p in pools] == [
        "first-pool",
        "expensive",
        "cheap",
        "ippool-ns-service-alloc-sample",
    ]
    for pool in pools:
        await kube_client.create(POOLS, pool)
    # Glue: the pools the documented Services name but the documentation defines nowhere.
    await kube_client.create(
        POOLS,
        lbpool("glue-pinned", addresses=["192.168.1.100/32", "1.2.3.4/32"], autoAssign=False),
    )
    await kube_client.create(
        POOLS, lbpool("production-public-ips", addresses=["203.0.113.8/29"], autoAssign=False)
    )
    for ns in ("mlb-pool", "namespace-a"):
        await namespace(kube_client, ns)
    ccm = daemon(ccm_kubeconfig, tmp_path / "ccm", config={"configMap": "", "announcer": "status"})
    try:
        docs = METALLB_SERVICES.split("---\n")
        await apply_services(kube_client, docs[0], "default")
        await apply_services(kube_client, docs[1], "mlb-pool")
        await apply_services(kube_client, "---\n".join(docs[2:]), "default")
        await kube_client.create(
            "/api/v1/namespaces/default/services",
            {
                "metadata": {"name": "plain"},
                "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
            },
        )
        await kube_client.create(
            "/api/v1/namespaces/namespace-a/services",
            {
                "metadata": {"name": "bar", "labels": {"app": "bar"}},
                "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
            },
        )
        names = (
            "default/nginx",
            "mlb-pool/nginx",
            "default/dns-service-tcp",
            "default/dns-service-udp",
            "default/plain",
            "namespace-a/bar",
        )

        async def served() -> bool:
            now = await addresses(kube_client)
            return all(now.get(n) for n in names)

        await eventually(served, within=90, what=f"MetalLB's documented Services: {names}")
        now = await addresses(kube_client)
        assert now["default/nginx"] == ["192.168.1.100"]
        assert ipaddress.ip_address(now["mlb-pool/nginx"][0]) in ipaddress.ip_network(
            "203.0.113.8/29"
        )
        assert now["default/dns-service-tcp"] == now["default/dns-service-udp"] == ["1.2.3.4"]
        # first-pool (priority 0, autoAssign; expensive is not, cheap conflicts); .0 is
        # given, as MetalLB gives it (avoidBuggyIPs false, allowFirstLastIPs true).
        plain = ipaddress.IPv4Address(now["default/plain"][0])
        assert plain in ipaddress.IPv4Network("192.168.10.0/24") or (
            ipaddress.IPv4Address("192.168.9.1") <= plain <= ipaddress.IPv4Address("192.168.9.5")
        )
        assert now["namespace-a/bar"] == ["192.168.20.1"]  # priority 50; avoidBuggyIPs

        async def conflicting() -> bool:
            return bool(await pool_events(kube_client, "cheap", "PoolConflict"))

        await eventually(conflicting, within=60, what="cheap told it overlaps first-pool")
        assert ccm.poll() is None
    finally:
        await _delete_services(kube_client)
        assert ccm.stop() == 0


async def test_ciliums_documented_examples_after_the_guides_conversion(
    ccm_kubeconfig: Path, kube_client: KubeClient, tmp_path: Path
) -> None:
    """Cilium LB-IPAM (``CILIUM_SOURCE``): 2 pools converted by ``kube-ccm migrate
    pools`` (one disabled), 4 Services applied unchanged: a plain one served from the
    pool, the sharing-key pair sharing one address on two ports (Cilium's rule), and
    the two-address request refused with what to change."""
    pools, notes, status = migrate_pools(CILIUM_POOLS)
    assert (status, notes) == (0, "")
    assert pools[0]["spec"]["addresses"] == [
        "10.0.10.0/24",
        "2004::0/64",
        "20.0.20.100-20.0.20.200",
        "1.2.3.4",
    ]
    assert pools[1]["spec"]["disabled"] is True
    for pool in pools:
        await kube_client.create(POOLS, pool)
    await namespace(kube_client, "example")
    ccm = daemon(ccm_kubeconfig, tmp_path / "ccm", config={"configMap": "", "announcer": "status"})
    try:
        await apply_services(kube_client, CILIUM_SERVICES, "example")
        names = ("example/service-red", "example/service-blue", "example/service-red-shared")

        async def served() -> bool:
            now = await addresses(kube_client)
            return all(now.get(n) for n in names)

        await eventually(served, within=90, what=f"Cilium's documented Services: {names}")
        now = await addresses(kube_client)
        # blue-pool's blocks (which one first is LB-IPAM's own choice; ippool takes the
        # lowest address, here 1.2.3.4 then 10.0.10.1).
        for name in names:
            assert in_blocks(now[name][0], pools[0]["spec"]["addresses"]), (name, now[name])
        assert now["example/service-blue"] == now["example/service-red-shared"]
        assert now["example/service-red"] != now["example/service-blue"]

        async def told() -> bool:
            found = await events(kube_client, "example", "service-blue-ips", "AllocationFailed")
            return any("asks for 2 IPv4 addresses" in m for m in found)

        await eventually(told, within=60, what="the two-address request refused, saying so")
        assert not now.get("example/service-blue-ips")
        assert ccm.poll() is None
    finally:
        await _delete_services(kube_client)
        assert ccm.stop() == 0


CILIUM_SELECTOR_POOLS = """\
# "Service Selectors" (red-pool has blue-pool's CIDR: "Conflicts" says the later one
# is marked Conflicting and gives out nothing)
apiVersion: "cilium.io/v2alpha1"
kind: CiliumLoadBalancerIPPool
metadata:
  name: "blue-pool"
spec:
  blocks:
  - cidr: "20.0.10.0/24"
  serviceSelector:
    matchExpressions:
      - {key: color, operator: In, values: [blue, cyan]}
---
apiVersion: "cilium.io/v2alpha1"
kind: CiliumLoadBalancerIPPool
metadata:
  name: "red-pool"
spec:
  blocks:
  - cidr: "20.0.10.0/24"
  serviceSelector:
    matchLabels:
      color: red
"""


async def test_ciliums_documented_selectors_and_conflict_after_the_guides_conversion(
    ccm_kubeconfig: Path, kube_client: KubeClient, tmp_path: Path
) -> None:
    """Cilium LB-IPAM (``CILIUM_SOURCE``), "Service Selectors" and "Conflicts": 2 pools
    converted; red-pool, applied after blue-pool, conflicts and gives out nothing (as
    LB-IPAM marks it Conflicting); the documented service-red (color red) gets no
    address and is told why, a blue Service gets blue-pool's first address."""
    pools, notes, status = migrate_pools(CILIUM_SELECTOR_POOLS)
    assert (status, notes) == (0, "")
    assert pools[0]["spec"]["serviceAllocation"] == {
        "serviceSelectors": [
            {"matchExpressions": [{"key": "color", "operator": "In", "values": ["blue", "cyan"]}]}
        ]
    }
    for pool in pools:
        await kube_client.create(POOLS, pool)
    await namespace(kube_client, "example")
    ccm = daemon(ccm_kubeconfig, tmp_path / "ccm", config={"configMap": "", "announcer": "status"})
    try:
        await apply_services(kube_client, CILIUM_SERVICES.split("---\n", maxsplit=1)[0], "example")
        await kube_client.create(
            "/api/v1/namespaces/example/services",
            {
                "metadata": {"name": "service-cyan", "labels": {"color": "cyan"}},
                "spec": {"type": "LoadBalancer", "ports": [{"port": 1234}]},
            },
        )

        async def served() -> bool:
            return bool((await addresses(kube_client)).get("example/service-cyan"))

        await eventually(served, within=90, what="the cyan Service served by blue-pool")
        assert (await addresses(kube_client))["example/service-cyan"] == ["20.0.10.1"]

        async def told() -> bool:
            found = await events(kube_client, "example", "service-red", "AllocationFailed")
            return any("red-pool" in m and "blue-pool" in m for m in found)

        await eventually(told, within=60, what="service-red told red-pool conflicts")
        assert not (await addresses(kube_client)).get("example/service-red")

        async def conflicting() -> bool:
            return bool(await pool_events(kube_client, "red-pool", "PoolConflict"))

        await eventually(conflicting, within=60, what="red-pool's PoolConflict Event")
        assert ccm.poll() is None
    finally:
        await _delete_services(kube_client)
        assert ccm.stop() == 0
