"""The ippool provider in the daemon, on the real apiserver: unique addresses under 16
workers and a kill -9, sharing, exhaustion, loadBalancerClass, and composition."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest_asyncio
import yaml

from kube_ccm.runtime.client import ApiError, KubeClient
from kube_ccm.testbed.services import delete_load_balancer_services as _delete_services
from kube_ccm.testbed.services import event_messages as events
from kube_ccm.testbed.services import ingress_addresses as addresses
from kube_ccm.testbed.services import service_daemon as daemon
from kube_ccm.testing.controlplane import ControlPlane, ControlPlaneOptions
from kube_ccm.testing.daemon import DaemonProcess
from kube_ccm.testing.manifests import service_manifest
from kube_ccm.testing.waiting import eventually

CM = "/api/v1/namespaces/kube-system/configmaps"
ADDRESSES = "kube-vip.io/loadbalancerIPs"
FINALIZER = "service.kubernetes.io/load-balancer-cleanup"
IPPOOL_CLASS = "kube-ccm.io/ippool"
NAMESPACES = ("pool-a", "pool-b", "pool-c")


@pytest_asyncio.fixture
async def pools(kube_client: KubeClient) -> AsyncIterator[dict[str, str]]:
    """The kube-vip ConfigMap: a pool for pool-a, the global pool for the rest."""
    data = {
        "cidr-pool-a": "172.20.1.0/24",
        "range-global": "172.20.2.1-172.20.2.250",
    }
    for namespace in NAMESPACES:
        with contextlib.suppress(ApiError):
            await kube_client.create("/api/v1/namespaces", {"metadata": {"name": namespace}})
    # The session's service CIDR (a /24) cannot give 300 Services a ClusterIP: add one.
    with contextlib.suppress(ApiError):
        await kube_client.create(
            "/apis/networking.k8s.io/v1/servicecidrs",
            {"metadata": {"name": "ippool-tests"}, "spec": {"cidrs": ["10.0.8.0/22"]}},
        )
    await kube_client.create(CM, {"metadata": {"name": "kubevip"}, "data": data})
    yield data
    await _delete_services(kube_client)
    await kube_client.delete(f"{CM}/kubevip")


async def test_300_services_get_unique_addresses_that_survive_kill_9(
    ccm_kubeconfig: Path, kube_client: KubeClient, pools: dict[str, str], tmp_path: Path
) -> None:
    # Every LoadBalancer Service of the cluster is counted below: one left by an earlier
    # test of the session would never be served (or take an address) and this test
    # would time out without saying why.
    leftovers = sorted(await addresses(kube_client))
    assert not leftovers, f"LoadBalancer Services left by earlier tests: {leftovers}"
    names = [(NAMESPACES[i % 3], f"svc-{i:03d}") for i in range(300)]
    gate = asyncio.Semaphore(32)

    async def create(namespace: str, name: str) -> None:
        async with gate:
            await kube_client.create(
                f"/api/v1/namespaces/{namespace}/services", service_manifest(name)
            )

    async def some_done() -> bool:
        return sum(1 for ips in (await addresses(kube_client)).values() if ips) >= 60

    first = daemon(ccm_kubeconfig, tmp_path / "first", "--concurrent-service-syncs=16")
    try:
        await asyncio.gather(*(create(ns, n) for ns, n in names))
        await eventually(some_done, within=120, what="a fifth of the Services served")
        first.signal(signal.SIGKILL)
        first.wait(10)
    finally:
        first.stop()
    before = {k: v for k, v in (await addresses(kube_client)).items() if v}

    second = daemon(ccm_kubeconfig, tmp_path / "second", "--concurrent-service-syncs=16")
    try:

        async def all_done() -> bool:
            return all((await addresses(kube_client)).values())

        await eventually(all_done, within=240, what="all 300 Services served after the restart")
        after = await addresses(kube_client)
        flat = [ip for ips in after.values() for ip in ips]
        assert len(after) == 300
        assert len(flat) == len(set(flat)) == 300, "no address given twice"
        assert {k: after[k] for k in before} == before, "no address changed across kill -9"
        for key, (ip,) in after.items():
            namespace = key.split("/")[0]
            expected = "172.20.1." if namespace == "pool-a" else "172.20.2."
            assert ip.startswith(expected), f"{key} got {ip}, not from its namespace's pool"
        claims = await kube_client.get(
            "/apis/networking.k8s.io/v1/ipaddresses",
            {"labelSelector": "ipaddress.kubernetes.io/managed-by=ippool.kube-ccm.io"},
        )
        assert sorted(c["metadata"]["name"] for c in claims["items"]) == sorted(flat)
        service = await kube_client.get("/api/v1/namespaces/pool-b/services/svc-001")
        ip = service["status"]["loadBalancer"]["ingress"][0]
        assert ip["ipMode"] == "VIP"
        assert service["metadata"]["annotations"]["kube-vip.io/loadbalancerIPs"] == ip["ip"]
        await _delete_services(kube_client)
        claims = await kube_client.get(
            "/apis/networking.k8s.io/v1/ipaddresses",
            {"labelSelector": "ipaddress.kubernetes.io/managed-by=ippool.kube-ccm.io"},
        )
        assert claims["items"] == [], "every address released with its Service"
    finally:
        await _delete_services(kube_client)
        assert second.stop() == 0


async def test_sharing_collisions_requests_and_exhaustion_are_events_not_crashes(
    ccm_kubeconfig: Path, kube_client: KubeClient, pools: dict[str, str], tmp_path: Path
) -> None:
    """A global pool of three addresses: the DNS pair shares one, two more Services
    take the rest, the third finds it exhausted."""
    await kube_client.replace(
        f"{CM}/kubevip",
        {"metadata": {"name": "kubevip"}, "data": {"range-global": "172.20.2.1-172.20.2.3"}},
    )
    ccm = daemon(ccm_kubeconfig, tmp_path / "ccm", "--concurrent-service-syncs=4")
    base = "/api/v1/namespaces"
    try:
        key = {"ippool.kube-ccm.io/sharing-key": "dns"}
        await kube_client.create(
            f"{base}/pool-c/services",
            service_manifest("dns-tcp", ports=[{"port": 53}], annotations=key),
        )
        await kube_client.create(
            f"{base}/pool-c/services",
            service_manifest("dns-udp", ports=[{"port": 53, "protocol": "UDP"}], annotations=key),
        )

        async def shared() -> bool:
            now = await addresses(kube_client)
            return bool(now.get("pool-c/dns-tcp")) and now.get("pool-c/dns-tcp") == now.get(
                "pool-c/dns-udp"
            )

        await eventually(shared, within=60, what="TCP and UDP on port 53 share one address")
        ip = (await addresses(kube_client))["pool-c/dns-tcp"][0]

        await kube_client.create(
            f"{base}/pool-c/services",
            service_manifest(
                "dns-clash",
                ports=[{"port": 53}],
                annotations={**key, "kube-vip.io/loadbalancerIPs": ip},
            ),
        )
        await kube_client.create(
            f"{base}/pool-c/services", service_manifest("outside", loadBalancerIP="203.0.113.7")
        )
        for name in ("full-1", "full-2", "full-3"):
            await kube_client.create(f"{base}/pool-b/services", service_manifest(name))

        async def refused(namespace: str, name: str, text: str) -> bool:
            found = await events(kube_client, namespace, name, "SyncLoadBalancerFailed")
            return any(text in m for m in found)

        await eventually(
            lambda: refused("pool-c", "dns-clash", "port collision with TCP/53 (pool-c/dns-tcp)"),
            within=60,
            what="SyncLoadBalancerFailed for the port collision",
        )
        await eventually(
            lambda: refused(
                "pool-c",
                "outside",
                "203.0.113.7 cannot be used: it is not in a pool serving Service pool-c/",
            ),
            within=60,
            what="SyncLoadBalancerFailed for an address outside every pool",
        )

        async def two_full() -> bool:
            now = await addresses(kube_client)
            return sum(1 for n in ("full-1", "full-2", "full-3") if now.get(f"pool-b/{n}")) == 2

        await eventually(two_full, within=60, what="two of three Services served")
        now = await addresses(kube_client)
        starved = next(n for n in ("full-1", "full-2", "full-3") if not now[f"pool-b/{n}"])
        await eventually(
            lambda: refused(
                "pool-b",
                starved,
                "ConfigMap kube-system/kubevip key range-global (3 addresses) all in use",
            ),
            within=60,
            what="SyncLoadBalancerFailed naming the exhausted pools and their sizes",
        )
        assert ccm.poll() is None, "the CCM keeps running"
    finally:
        await _delete_services(kube_client)
        assert ccm.stop() == 0


async def test_only_the_configured_classes_are_served_and_composition_works_in_the_daemon(
    ccm_kubeconfig: Path, kube_client: KubeClient, pools: dict[str, str], tmp_path: Path
) -> None:
    """simulated serves instances, ippool load balancers; only ippool's class is ours."""
    config = {
        "providers": {
            "simulated": {
                "capabilities": ["instances"],
                "config": {"state": str(tmp_path / "sim.db")},
            },
            "ippool": {"capabilities": ["loadBalancer"]},
        }
    }
    ccm = daemon(
        ccm_kubeconfig,
        tmp_path / "ccm",
        f"--load-balancer-class={IPPOOL_CLASS}",
        "--serve-unclassed-load-balancers=false",
        provider="composite",
        config=config,
    )
    base = "/api/v1/namespaces/pool-c/services"
    try:
        ccm.wait_for_log("Started service-lb-controller")
        assert "composite cloud provider: instances from simulated, loadBalancer from ippool" in (
            ccm.log()
        )
        await kube_client.create(base, service_manifest("ours", loadBalancerClass=IPPOOL_CLASS))
        await kube_client.create(
            base, service_manifest("metallbs", loadBalancerClass="metallb.io/metallb")
        )
        await kube_client.create(base, service_manifest("unclassed"))

        async def ours_served() -> bool:
            return bool((await addresses(kube_client)).get("pool-c/ours"))

        await eventually(ours_served, within=60, what="the ippool-class Service served")
        await asyncio.sleep(3)
        for name in ("metallbs", "unclassed"):
            service = await kube_client.get(f"{base}/{name}")
            assert not service["metadata"].get("finalizers"), f"{name} was touched"
            assert not service.get("status", {}).get("loadBalancer", {}).get("ingress")
            assert "kube-vip.io/loadbalancerIPs" not in (
                service["metadata"].get("annotations") or {}
            )
    finally:
        await _delete_services(kube_client)
        assert ccm.stop() == 0


async def test_a_dual_stack_service_gets_one_address_per_family(tmp_path: Path) -> None:
    """On a dual-stack control plane of its own (the session's is IPv4-only)."""
    plane = ControlPlane(
        ControlPlaneOptions(
            data_dir=tmp_path / "plane", service_cluster_ip_range="10.0.0.0/24,fd00:10::/108"
        )
    )
    await asyncio.to_thread(plane.start)
    client = KubeClient.from_kubeconfig(plane.kubeconfig)
    ccm = daemon(
        plane.kubeconfig,
        tmp_path / "ccm",
        config={"configMap": "", "pools": {"cidr-global": "172.20.9.0/28,fd00:20::/124"}},
    )
    try:
        services = "/api/v1/namespaces/default/services"
        await client.create(services, service_manifest("both", ipFamilyPolicy="RequireDualStack"))
        await client.create(
            services,
            service_manifest(
                "v6-first", ipFamilyPolicy="PreferDualStack", ipFamilies=["IPv6", "IPv4"]
            ),
        )
        await client.create(services, service_manifest("v6", ipFamilies=["IPv6"]))
        await client.create(services, service_manifest("v4"))

        async def all_served() -> bool:
            return all(len(ips) >= 1 for ips in (await addresses(client)).values())

        await eventually(all_served, within=60, what="every Service served")
        got = await addresses(client)
        families = {
            name: [ipaddress.ip_address(ip).version for ip in ips] for name, ips in got.items()
        }
        assert families == {
            "default/both": [4, 6],
            "default/v6-first": [6, 4],
            "default/v6": [6],
            "default/v4": [4],
        }, got
        every = [ip for ips in got.values() for ip in ips]
        assert len(every) == len(set(every)), got
        assert all(
            ipaddress.ip_address(ip) in ipaddress.ip_network("172.20.9.0/28")
            or ipaddress.ip_address(ip) in ipaddress.ip_network("fd00:20::/124")
            for ip in every
        ), got
        claims = await client.get("/apis/networking.k8s.io/v1/ipaddresses")
        claimed = {c["metadata"]["name"] for c in claims["items"]}
        assert set(every) <= claimed
        both = await client.get(f"{services}/both")
        assert both["metadata"]["annotations"][ADDRESSES] == ",".join(got["default/both"])
    finally:
        ccm.stop()
        await client.aclose()
        await asyncio.to_thread(plane.stop)


LEASE = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/cloud-controller-manager"
ELECTION = (
    "--leader-elect=true",
    "--leader-elect-lease-duration=4s",
    "--leader-elect-renew-deadline=3s",
    "--leader-elect-retry-period=1s",
    "--concurrent-service-syncs=16",
)


async def test_no_address_changes_or_doubles_across_a_failover_between_two_replicas(
    ccm_kubeconfig: Path, kube_client: KubeClient, pools: dict[str, str], tmp_path: Path
) -> None:
    names = [(NAMESPACES[i % 3], f"ha-{i:03d}") for i in range(150)]
    gate = asyncio.Semaphore(32)

    async def create(namespace: str, name: str) -> None:
        async with gate:
            await kube_client.create(
                f"/api/v1/namespaces/{namespace}/services", service_manifest(name)
            )

    async def holder() -> str:
        with contextlib.suppress(ApiError):
            lease = await kube_client.get(LEASE)
            return str(lease["spec"].get("holderIdentity") or "")
        return ""

    first = daemon(ccm_kubeconfig, tmp_path / "first", *ELECTION)
    second: DaemonProcess | None = None
    try:

        async def first_leads() -> bool:  # (a Lease left by an earlier test expires first)
            return "successfully acquired lease" in first.log_path.read_text()

        await eventually(first_leads, within=60, what="the first replica holding the Lease")
        leader_identity = await holder()
        assert leader_identity in first.log_path.read_text()
        second = daemon(ccm_kubeconfig, tmp_path / "second", *ELECTION)
        await asyncio.sleep(2)  # the standby is up and trying the Lease
        assert await holder() == leader_identity, "the standby must not take a held Lease"

        await asyncio.gather(*(create(ns, n) for ns, n in names))

        async def some_done() -> bool:
            return sum(1 for ips in (await addresses(kube_client)).values() if ips) >= 30

        await eventually(some_done, within=120, what="a fifth of the Services served")
        first.signal(signal.SIGKILL)
        first.wait(10)
        before = {k: v for k, v in (await addresses(kube_client)).items() if v}

        async def taken_over() -> bool:
            now = await holder()
            return bool(now) and now != leader_identity

        await eventually(taken_over, within=30, what="the standby taking the Lease")

        async def all_done() -> bool:
            return all((await addresses(kube_client)).values())

        await eventually(all_done, within=240, what="all 150 Services served after failover")
        after = await addresses(kube_client)
        flat = [ip for ips in after.values() for ip in ips]
        assert len(after) == 150
        assert len(flat) == len(set(flat)) == 150, "no address given twice"
        assert {k: after[k] for k in before} == before, "no address changed across failover"
        claims = await kube_client.get(
            "/apis/networking.k8s.io/v1/ipaddresses",
            {"labelSelector": "ipaddress.kubernetes.io/managed-by=ippool.kube-ccm.io"},
        )
        assert sorted(c["metadata"]["name"] for c in claims["items"]) == sorted(flat)
        await _delete_services(kube_client)
    finally:
        first.stop()
        if second is not None:
            second.stop()


# kube-vip.io/docs/usage/cloud-provider/ (kube-vip/website, content/docs/usage/cloud-provider.md),
# the example ConfigMap, applied as it is written, comments included.
KUBE_VIP_DOCS_EXAMPLE = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: kubevip
  namespace: kube-system
data:
  cidr-default: 192.168.0.200/29                      # CIDR-based IP range for use in the default Namespace
  range-development: 192.168.0.210-192.168.0.219      # Range-based IP range for use in the development Namespace
  cidr-finance: 192.168.0.220/29,192.168.0.230/29     # Multiple CIDR-based ranges for use in the finance Namespace
  cidr-global: 192.168.0.240/29                       # CIDR-based range which can be used in any Namespace
"""  # noqa: E501


async def test_the_kube_vip_documentations_example_configmap_works_unchanged(
    ccm_kubeconfig: Path, kube_client: KubeClient, tmp_path: Path
) -> None:
    manifest = yaml.safe_load(KUBE_VIP_DOCS_EXAMPLE)
    for namespace in ("development", "finance", "marketing"):
        with contextlib.suppress(ApiError):
            await kube_client.create("/api/v1/namespaces", {"metadata": {"name": namespace}})
    await kube_client.create(CM, manifest)
    ccm = daemon(ccm_kubeconfig, tmp_path / "ccm", "--concurrent-service-syncs=4")
    try:
        for namespace in ("default", "development", "finance", "marketing"):
            await kube_client.create(
                f"/api/v1/namespaces/{namespace}/services", service_manifest("docs")
            )

        async def served() -> bool:
            got = await addresses(kube_client)
            return all(
                got.get(f"{ns}/docs") for ns in ("default", "development", "finance", "marketing")
            )

        await eventually(served, within=60, what="the docs example's four Services served")
        got = await addresses(kube_client)
        assert got["default/docs"] == ["192.168.0.200"]  # cidr-default's first address
        assert got["development/docs"] == ["192.168.0.210"]  # range-development
        assert got["finance/docs"] == ["192.168.0.216"]  # 192.168.0.220/29 is .216-.223
        assert got["marketing/docs"] == ["192.168.0.240"]  # no pool of its own: cidr-global
    finally:
        await _delete_services(kube_client)
        ccm.stop()
        await kube_client.delete(f"{CM}/kubevip")


async def test_the_status_announcer_writes_no_annotation_and_refusals_are_allocation_failed(
    ccm_kubeconfig: Path, kube_client: KubeClient, pools: dict[str, str], tmp_path: Path
) -> None:
    """``announcer: status`` (MetalLB's speaker or Cilium announcing): one sync and five
    writes per Service, no annotation; a guest evicted from another namespace's address
    is marked, synced again and moved; a refusal is also MetalLB's ``AllocationFailed``."""
    await kube_client.replace(
        f"{CM}/kubevip",
        {"metadata": {"name": "kubevip"}, "data": {"range-global": "172.20.2.1-172.20.2.3"}},
    )
    ccm = daemon(
        ccm_kubeconfig,
        tmp_path / "ccm",
        "--concurrent-service-syncs=4",
        config={"announcer": "status"},
    )
    base = "/api/v1/namespaces"
    allocated = "ippool.kube-ccm.io/allocated"  # empty: the mark of an evicted guest

    async def service(namespace: str, name: str) -> dict[str, Any]:
        found: dict[str, Any] = await kube_client.get(f"{base}/{namespace}/services/{name}")
        return found

    async def annotations(namespace: str, name: str) -> dict[str, str]:
        return dict((await service(namespace, name))["metadata"].get("annotations") or {})

    try:
        key = {"ippool.kube-ccm.io/sharing-key": "web"}
        owner = {**key, "ippool.kube-ccm.io/sharing-cross-namespace": "pool-c"}
        guest = {**key, "ippool.kube-ccm.io/sharing-cross-namespace": "pool-b"}
        await kube_client.create(
            f"{base}/pool-b/services",
            service_manifest("owner", ports=[{"name": "https", "port": 443}], annotations=owner),
        )

        async def served(*keys: str) -> bool:
            now = await addresses(kube_client)
            return all(now.get(k) for k in keys)

        await eventually(lambda: served("pool-b/owner"), within=60, what="the owner served")
        await kube_client.create(
            f"{base}/pool-c/services",
            service_manifest("guest", ports=[{"name": "http", "port": 80}], annotations=guest),
        )
        await eventually(lambda: served("pool-c/guest"), within=60, what="the guest served")
        now = await addresses(kube_client)
        assert now["pool-c/guest"] == now["pool-b/owner"] == ["172.20.2.1"]
        assert await annotations("pool-b", "owner") == owner  # nothing written
        assert await annotations("pool-c", "guest") == guest

        # The owner takes port 80 too: the guest gives way, is synced again (its
        # status showed the shared address) and moves to an address of its own.
        await kube_client.patch(
            f"{base}/pool-b/services/owner",
            {"spec": {"ports": [{"name": "https", "port": 443}, {"name": "http", "port": 80}]}},
            patch_type="merge",
        )

        async def moved() -> bool:
            return (await addresses(kube_client)).get("pool-c/guest") == ["172.20.2.2"]

        await eventually(moved, within=60, what="the evicted guest moved")

        async def unmarked() -> bool:
            return allocated not in await annotations("pool-c", "guest")

        await eventually(unmarked, within=30, what="the eviction mark removed")
        assert (await addresses(kube_client))["pool-b/owner"] == ["172.20.2.1"]

        await kube_client.create(f"{base}/pool-b/services", service_manifest("last"))
        await eventually(lambda: served("pool-b/last"), within=60, what="the last address")
        await kube_client.create(f"{base}/pool-b/services", service_manifest("none-left"))

        async def refused(reason: str, start: str) -> bool:
            found = await events(kube_client, "pool-b", "none-left", reason)
            return any(m.startswith(start) for m in found)

        await eventually(
            lambda: refused(
                "AllocationFailed",
                'Failed to allocate IP for "pool-b/none-left": no free IPv4 address',
            ),
            within=60,
            what="MetalLB's AllocationFailed for an exhausted pool",
        )
        await eventually(
            lambda: refused(
                "SyncLoadBalancerFailed",
                "Error syncing load balancer: failed to ensure load balancer: no free IPv4",
            ),
            within=60,
            what="the service controller's own Event too",
        )
        # One sync for a Service the provider served at once: upstream's two Events.
        for reason in ("EnsuringLoadBalancer", "EnsuredLoadBalancer"):
            listed = await kube_client.get(
                f"{base}/pool-b/events",
                {"fieldSelector": f"involvedObject.name=last,reason={reason}"},
            )
            assert [e.get("count", 1) for e in listed["items"]] == [1], reason
        assert await annotations("pool-b", "last") == {}
        assert ccm.poll() is None, "the CCM keeps running"
    finally:
        await _delete_services(kube_client)
        assert ccm.stop() == 0
