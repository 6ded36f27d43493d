"""LoadBalancerPool objects on the real apiserver (issue 28, item 1): the CRD as
shipped in deploy/, the daemon as the shipped ServiceAccount, pools by priority and
namespace, the status it writes, and the bad input: overlapping pools, a selector
that does not parse, an address outside every pool, a pool deleted while in use."""

from __future__ import annotations

import asyncio
import contextlib
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
from kube_ccm.testing.manifests import service_manifest
from kube_ccm.testing.waiting import eventually

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
CRD_NAME = "loadbalancerpools.ippool.kube-ccm.io"
POOLS = "/apis/ippool.kube-ccm.io/v1alpha1/loadbalancerpools"
NAMESPACES = ("lbpool-a", "lbpool-b")
FINALIZER = "service.kubernetes.io/load-balancer-cleanup"


@pytest_asyncio.fixture
async def crd(kube_client: KubeClient) -> AsyncIterator[None]:
    """The CRD of deploy/, installed and established; the pools removed after."""
    manifest = yaml.safe_load((DEPLOY / "crd-loadbalancerpools.yaml").read_text())
    with contextlib.suppress(ApiError):
        await kube_client.create(CRDS, manifest)
    shipped = (DEPLOY / "helm/kube-ccm/crds/loadbalancerpools.yaml").read_text()
    assert yaml.safe_load(shipped) == manifest, "the chart ships the CRD of deploy/"

    async def established() -> bool:
        found = await kube_client.get(f"{CRDS}/{CRD_NAME}")
        conditions = found.get("status", {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    await eventually(established, within=30, what="the LoadBalancerPool CRD established")
    for namespace in NAMESPACES:
        with contextlib.suppress(ApiError):
            await kube_client.create("/api/v1/namespaces", {"metadata": {"name": namespace}})
    yield
    await _delete_services(kube_client)
    listed = await kube_client.get(POOLS)
    for item in listed["items"]:
        await kube_client.delete(f"{POOLS}/{item['metadata']['name']}")


def lbpool(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "ippool.kube-ccm.io/v1alpha1",
        "kind": "LoadBalancerPool",
        "metadata": {"name": name},
        "spec": spec,
    }


async def status(client: KubeClient, name: str) -> dict[str, Any]:
    found = await client.get(f"{POOLS}/{name}")
    result: dict[str, Any] = found.get("status") or {}
    return result


async def pool_events(client: KubeClient, name: str, reason: str) -> list[str]:
    listed = await client.get(
        "/api/v1/namespaces/default/events",
        {"fieldSelector": f"involvedObject.name={name},reason={reason}"},
    )
    return [e["message"] for e in listed["items"]]


async def test_pools_serve_by_priority_and_namespace_and_report_their_status(
    ccm_kubeconfig: Path, kube_client: KubeClient, crd: None, tmp_path: Path
) -> None:
    await kube_client.create(POOLS, lbpool("lb-main", addresses=["172.21.1.0/29"]))
    await kube_client.create(
        POOLS,
        lbpool(
            "lb-team",
            addresses=["172.21.2.0/29", "fd00:21:2::/125"],
            serviceAllocation={"priority": 1, "namespaces": ["lbpool-b"]},
        ),
    )
    ccm = daemon(
        ccm_kubeconfig, tmp_path / "ccm", "--concurrent-service-syncs=4", config={"configMap": ""}
    )
    base = "/api/v1/namespaces"
    try:
        await kube_client.create(f"{base}/lbpool-a/services", service_manifest("web"))
        await kube_client.create(f"{base}/lbpool-b/services", service_manifest("web"))
        await kube_client.create(
            f"{base}/lbpool-b/services",
            service_manifest("dual", ipFamilyPolicy="PreferDualStack", ipFamilies=["IPv4"]),
        )

        async def served() -> bool:
            now = await addresses(kube_client)
            return bool(now.get("lbpool-a/web")) and bool(now.get("lbpool-b/web"))

        await eventually(served, within=60, what="both Services served")
        now = await addresses(kube_client)
        assert now["lbpool-a/web"] == ["172.21.1.1"]  # not .0: the CIDR's first is skipped
        assert now["lbpool-b/web"][0].startswith("172.21.2.")  # priority 1, its namespace

        async def counted() -> bool:
            main, team = await status(kube_client, "lb-main"), await status(kube_client, "lb-team")
            return bool(
                main.get("ipv4", {}).get("used") == 1 and team.get("ipv4", {}).get("used") == 2
            )

        await eventually(counted, within=30, what="the pools' status counts their addresses")
        main = await status(kube_client, "lb-main")
        assert main["ipv4"] == {"size": 6, "used": 1, "free": 5}
        assert main["serving"] is True
        assert main["conflicts"] == []
        team = await status(kube_client, "lb-team")
        assert team["ipv6"]["size"] == 6
        assert ccm.poll() is None
    finally:
        await _delete_services(kube_client)
        assert ccm.stop() == 0


async def test_overlap_bad_selector_outside_address_and_deleted_pool_are_told(
    ccm_kubeconfig: Path, kube_client: KubeClient, crd: None, tmp_path: Path
) -> None:
    await kube_client.create(POOLS, lbpool("lb-old", addresses=["172.21.5.1-172.21.5.3"]))
    await asyncio.sleep(1.1)  # creationTimestamp has seconds: lb-old is older by one
    await kube_client.create(POOLS, lbpool("lb-new", addresses=["172.21.5.2-172.21.5.9"]))
    await kube_client.create(
        POOLS,
        lbpool(
            "lb-bad",
            addresses=["172.21.6.0/29"],
            serviceAllocation={
                "serviceSelectors": [
                    {"matchExpressions": [{"key": "app", "operator": "Equals", "values": ["x"]}]}
                ]
            },
        ),
    )
    await kube_client.create(
        POOLS,
        lbpool(
            "lb-gone",
            addresses=["172.21.7.1-172.21.7.2"],
            autoAssign=False,
            serviceAllocation={"namespaces": ["lbpool-b"]},
        ),
    )
    ccm = daemon(
        ccm_kubeconfig, tmp_path / "ccm", "--concurrent-service-syncs=4", config={"configMap": ""}
    )
    base = "/api/v1/namespaces"
    try:
        for name in ("s1", "s2", "s3", "s4"):
            await kube_client.create(f"{base}/lbpool-a/services", service_manifest(name))
        await kube_client.create(
            f"{base}/lbpool-a/services", service_manifest("outside", loadBalancerIP="203.0.113.9")
        )
        await kube_client.create(
            f"{base}/lbpool-b/services",
            service_manifest("kept", annotations={"ippool.kube-ccm.io/pool": "lb-gone"}),
        )

        async def three() -> bool:
            now = await addresses(kube_client)
            return sum(1 for n in ("s1", "s2", "s3", "s4") if now.get(f"lbpool-a/{n}")) == 3

        await eventually(three, within=60, what="three Services served from the older pool")
        now = await addresses(kube_client)
        given = [ip for n in ("s1", "s2", "s3", "s4") for ip in now[f"lbpool-a/{n}"]]
        assert sorted(given) == ["172.21.5.1", "172.21.5.2", "172.21.5.3"]  # none twice
        starved = next(n for n in ("s1", "s2", "s3", "s4") if not now[f"lbpool-a/{n}"])

        async def refused(namespace: str, name: str, *texts: str) -> bool:
            found = await events(kube_client, namespace, name, "SyncLoadBalancerFailed")
            return any(all(t in m for t in texts) for m in found)

        await eventually(
            lambda: refused(
                "lbpool-a",
                starved,
                "LoadBalancerPool lb-old (3 addresses) all in use",
                "LoadBalancerPool lb-new overlaps LoadBalancerPool lb-old",
                "LoadBalancerPool lb-bad is invalid (see its status)",
            ),
            within=60,
            what="the starved Service's Event names the overlap and the invalid pool",
        )
        await eventually(
            lambda: refused(
                "lbpool-a", "outside", "203.0.113.9 cannot be used: it is not in a pool serving"
            ),
            within=60,
            what="an address outside every pool refused",
        )

        async def told() -> bool:
            old, new = await status(kube_client, "lb-old"), await status(kube_client, "lb-new")
            bad = await status(kube_client, "lb-bad")
            return (
                any("lb-new" in c for c in old.get("conflicts") or [])
                and any("lb-old" in c for c in new.get("conflicts") or [])
                and new.get("serving") is False
                and "operator 'Equals'" in (bad.get("problem") or "")
                and bool(await pool_events(kube_client, "lb-old", "PoolConflict"))
                and bool(await pool_events(kube_client, "lb-new", "PoolConflict"))
                and bool(await pool_events(kube_client, "lb-bad", "PoolInvalid"))
            )

        await eventually(told, within=30, what="conflicts and the bad selector on the pools")

        async def kept_served() -> bool:
            return (await addresses(kube_client)).get("lbpool-b/kept") == ["172.21.7.1"]

        await eventually(kept_served, within=60, what="a Service served by the named pool")
        await kube_client.delete(f"{POOLS}/lb-gone")
        # The next sync of any Service looks at the pools again.
        await kube_client.create(f"{base}/lbpool-a/services", service_manifest("nudge"))

        async def flagged() -> bool:
            found = await events(kube_client, "lbpool-b", "kept", "AddressOutsidePools")
            return any("172.21.7.1 is outside every pool now" in m for m in found)

        await eventually(flagged, within=60, what="the deleted pool's address flagged")
        assert (await addresses(kube_client))["lbpool-b/kept"] == ["172.21.7.1"]
        assert ccm.poll() is None
    finally:
        await _delete_services(kube_client)
        assert ccm.stop() == 0


async def test_metallb_and_cilium_annotations_are_aliases_with_their_sharing_rules(
    ccm_kubeconfig: Path, kube_client: KubeClient, crd: None, tmp_path: Path
) -> None:
    await kube_client.create(POOLS, lbpool("lb-alias", addresses=["172.21.9.0/28"]))
    await kube_client.create(
        POOLS, lbpool("lb-named", addresses=["172.21.10.1-172.21.10.2"], autoAssign=False)
    )
    ccm = daemon(
        ccm_kubeconfig, tmp_path / "ccm", "--concurrent-service-syncs=4", config={"configMap": ""}
    )
    base = "/api/v1/namespaces"
    key = {"lbipam.cilium.io/sharing-key": "k"}
    try:
        await kube_client.create(
            f"{base}/lbpool-a/services",
            service_manifest("metallb", annotations={"metallb.io/loadBalancerIPs": "172.21.9.5"}),
        )
        await kube_client.create(
            f"{base}/lbpool-a/services",
            service_manifest("named", annotations={"metallb.io/address-pool": "lb-named"}),
        )
        for name, port, policy in (
            ("c1", 80, "Cluster"),
            ("c2", 81, "Cluster"),
            ("c3", 82, "Local"),
        ):
            await kube_client.create(
                f"{base}/lbpool-a/services",
                service_manifest(
                    name,
                    ports=[{"port": port}],
                    annotations=key,
                    externalTrafficPolicy=policy,
                ),
            )
        await kube_client.create(
            f"{base}/lbpool-b/services",
            service_manifest("c4", ports=[{"port": 83}], annotations=key),
        )
        await kube_client.create(
            f"{base}/lbpool-a/services",
            service_manifest(
                "both",
                annotations={
                    "metallb.io/loadBalancerIPs": "172.21.9.6",
                    "lbipam.cilium.io/ips": "172.21.9.7",
                },
            ),
        )
        names = [f"lbpool-a/{n}" for n in ("metallb", "named", "c1", "c2", "c3")]
        names.append("lbpool-b/c4")

        async def served() -> bool:
            now = await addresses(kube_client)
            return all(now.get(n) for n in names)

        await eventually(served, within=60, what="every Service but the contradicting one")
        now = await addresses(kube_client)
        assert now["lbpool-a/metallb"] == ["172.21.9.5"]
        assert now["lbpool-a/named"] == ["172.21.10.1"]
        assert now["lbpool-a/c1"] == now["lbpool-a/c2"]  # ports apart, same policy
        assert now["lbpool-a/c3"] != now["lbpool-a/c1"]  # Local: Cilium's rule
        assert now["lbpool-b/c4"] != now["lbpool-a/c1"]  # no cross-namespace unless asked
        assert not now["lbpool-a/both"]

        async def said(namespace: str, name: str, reason: str, *texts: str) -> bool:
            found = await events(kube_client, namespace, name, reason)
            return any(all(t in m for t in texts) for m in found)

        await eventually(
            lambda: said(
                "lbpool-a",
                "both",
                "SyncLoadBalancerFailed",
                "contradicting requests",
                "metallb.io/loadBalancerIPs",
                "lbipam.cilium.io/ips",
            ),
            within=60,
            what="the contradicting Service told, both annotations named",
        )

        async def told_why() -> bool:
            # Whichever of the Local and the Cluster Services came second is told.
            for name in ("c1", "c2", "c3"):
                if await said("lbpool-a", name, "AddressNotShared", "Cilium's rule"):
                    return True
            return False

        await eventually(told_why, within=60, what="told why Local and Cluster do not share")
        assert ccm.poll() is None
    finally:
        await _delete_services(kube_client)
        assert ccm.stop() == 0


async def test_a_scoped_ipv6_address_is_refused_at_parse_never_sent_to_the_apiserver(
    ccm_kubeconfig: Path, kube_client: KubeClient, crd: None, tmp_path: Path
) -> None:
    """``2001:db8::11%eth0`` parses in Python and gets a 422 from kube-apiserver: before,
    ippool claimed it and retried the 422 for ever. Now the request, and a pool with a
    zone, are refused at parse, with the Event saying what to change."""
    await kube_client.create(POOLS, lbpool("lb-v6", addresses=["172.21.9.0/29", "fd00:21:9::/125"]))
    await kube_client.create(POOLS, lbpool("lb-zoned", addresses=["fd00:21:10::%eth0/125"]))
    ccm = daemon(ccm_kubeconfig, tmp_path / "ccm", config={"configMap": ""})
    base = "/api/v1/namespaces/lbpool-a/services"
    scoped = "fd00:21:9::3%eth0"
    try:
        for name, annotations, ip in (
            ("zoned-annotation", {"lbipam.cilium.io/ips": scoped}, ""),
            ("zoned-ip", {}, scoped),
        ):
            manifest = service_manifest(name, annotations=annotations)
            if ip:
                manifest["spec"]["loadBalancerIP"] = ip
            await kube_client.create(base, manifest)

            async def refused(name: str = name) -> bool:
                found = await events(kube_client, "lbpool-a", name, "SyncLoadBalancerFailed")
                return any("is a scoped IPv6 address" in m for m in found)

            await eventually(refused, within=60, what=f"{name}: the scoped address refused")
            found = await events(kube_client, "lbpool-a", name, "SyncLoadBalancerFailed")
            assert all("without the %zone" in m for m in found), found

        async def told() -> bool:
            return "is a scoped IPv6 address" in (
                (await status(kube_client, "lb-zoned")).get("problem") or ""
            )

        await eventually(told, within=60, what="the zoned pool's status says why")
        listed = await kube_client.get(
            "/apis/networking.k8s.io/v1/ipaddresses",
            {"labelSelector": "ipaddress.kubernetes.io/managed-by=ippool.kube-ccm.io"},
        )
        assert not [i for i in listed["items"] if "fd00:21:9" in i["metadata"]["name"]]
        # Never sent: kube-apiserver's refusal (`IPAddress... "fd00:21:9::3%eth0" is
        # invalid`, a 422) is in no log line.
        refusals = [
            line
            for line in ccm.log().splitlines()
            if "IPAddress" in line and "fd00:21:9::3" in line and "invalid" in line
        ]
        assert not refusals, refusals
        assert ccm.poll() is None
    finally:
        await _delete_services(kube_client)
        assert ccm.stop() == 0


async def test_cilium_s_older_io_cilium_annotations_pin_and_share_as_in_cilium(
    ccm_kubeconfig: Path, kube_client: KubeClient, crd: None, tmp_path: Path
) -> None:
    """Issue 39 item 1: a Service pinned with ``io.cilium/lb-ipam-ips`` keeps its
    address, and ``io.cilium/lb-ipam-sharing-key`` mates share it with a Service of the
    newer key; where both forms are written the newer wins (Cilium's
    ``annotation.Get``)."""
    await kube_client.create(POOLS, lbpool("lb-old-cilium", addresses=["172.21.11.0/28"]))
    ccm = daemon(ccm_kubeconfig, tmp_path / "ccm", config={"configMap": ""})
    base = "/api/v1/namespaces/lbpool-a/services"
    try:
        await kube_client.create(
            base,
            service_manifest(
                "old",
                ports=[{"port": 80}],
                annotations={
                    "io.cilium/lb-ipam-ips": "172.21.11.9",
                    "io.cilium/lb-ipam-sharing-key": "k",
                },
            ),
        )
        await kube_client.create(
            base,
            service_manifest(
                "new",
                ports=[{"port": 81}],
                annotations={
                    "lbipam.cilium.io/ips": "172.21.11.9",
                    "lbipam.cilium.io/sharing-key": "k",
                },
            ),
        )
        await kube_client.create(
            base,
            service_manifest(
                "both",
                ports=[{"port": 82}],
                annotations={
                    "lbipam.cilium.io/ips": "172.21.11.10",
                    "io.cilium/lb-ipam-ips": "172.21.11.11",
                },
            ),
        )
        want = {
            "lbpool-a/old": ["172.21.11.9"],
            "lbpool-a/new": ["172.21.11.9"],
            "lbpool-a/both": ["172.21.11.10"],
        }

        async def served() -> bool:
            now = await addresses(kube_client)
            return all(now.get(k) == v for k, v in want.items())

        await eventually(served, within=60, what=f"served as {want}")
        assert ccm.poll() is None
    finally:
        await _delete_services(kube_client)
        assert ccm.stop() == 0


async def test_cilium_s_documented_two_address_request_is_refused_saying_what_to_change(
    ccm_kubeconfig: Path, kube_client: KubeClient, crd: None, tmp_path: Path
) -> None:
    """Issue 39 item 4: Cilium's own "Requesting IPs" example (docs.cilium.io LB IPAM,
    Documentation/network/lb-ipam.rst, Cilium 1.16), two IPv4 addresses that LB-IPAM
    both gives: ippool gives one address per family, so the Service is refused with
    Events that say so and what to change, and nothing is claimed."""
    await kube_client.create(POOLS, lbpool("lb-blue", addresses=["172.21.12.0/24"]))
    ccm = daemon(ccm_kubeconfig, tmp_path / "ccm", config={"configMap": ""})
    try:
        await kube_client.create(
            "/api/v1/namespaces/lbpool-a/services",
            service_manifest(
                "service-blue",
                ports=[{"port": 1234}],
                annotations={"lbipam.cilium.io/ips": "172.21.12.100,172.21.12.200"},
            ),
        )
        texts = (
            "lbipam.cilium.io/ips '172.21.12.100,172.21.12.200' asks for 2 IPv4 addresses",
            "Cilium LB-IPAM gives a Service every address listed",
            "ask for each other in a Service of its own",
        )
        for reason in ("SyncLoadBalancerFailed", "AllocationFailed"):

            async def told(reason: str = reason) -> bool:
                found = await events(kube_client, "lbpool-a", "service-blue", reason)
                return any(all(t in m for t in texts) for m in found)

            await eventually(told, within=60, what=f"{reason} saying what to change")
        assert not (await addresses(kube_client)).get("lbpool-a/service-blue")
        claims = await kube_client.get("/apis/networking.k8s.io/v1/ipaddresses")
        assert not [c for c in claims["items"] if c["metadata"]["name"].startswith("172.21.12.")]
        assert ccm.poll() is None
    finally:
        await _delete_services(kube_client)
        assert ccm.stop() == 0


async def test_metallb_key_only_sharing_across_namespaces_is_refused_naming_the_opt_in(
    ccm_kubeconfig: Path, kube_client: KubeClient, crd: None, tmp_path: Path
) -> None:
    """Issue 39 item 5: MetalLB shares an address by its key alone, across namespaces;
    ippool needs both sides' opt-in. The Service of the second namespace is refused,
    told MetalLB's rule and the annotation to add; with it on both, it shares."""
    await kube_client.create(POOLS, lbpool("lb-key", addresses=["172.21.13.0/28"]))
    ccm = daemon(ccm_kubeconfig, tmp_path / "ccm", config={"configMap": ""})
    base = "/api/v1/namespaces"
    key = {"metallb.io/allow-shared-ip": "shared", "metallb.io/loadBalancerIPs": "172.21.13.5"}
    try:
        await kube_client.create(
            f"{base}/lbpool-a/services", service_manifest("first", annotations=key)
        )
        await eventually(
            lambda: _served_as(kube_client, "lbpool-a/first", ["172.21.13.5"]),
            within=60,
            what="the first Service served",
        )
        await kube_client.create(
            f"{base}/lbpool-b/services",
            service_manifest("second", ports=[{"port": 81}], annotations=key),
        )
        texts = (
            "requested address 172.21.13.5 is taken",
            "MetalLB shares an address by sharing key alone, across namespaces",
            "ippool.kube-ccm.io/sharing-cross-namespace",
        )

        async def told() -> bool:
            found = await events(kube_client, "lbpool-b", "second", "AllocationFailed")
            return any(all(t in m for t in texts) for m in found)

        await eventually(told, within=60, what="told MetalLB's rule and the opt-in")
        for namespace, name, other in (
            ("lbpool-a", "first", "lbpool-b"),
            ("lbpool-b", "second", "lbpool-a"),
        ):
            await kube_client.patch(
                f"{base}/{namespace}/services/{name}",
                {
                    "metadata": {
                        "annotations": {"ippool.kube-ccm.io/sharing-cross-namespace": other}
                    }
                },
            )
        await eventually(
            lambda: _served_as(kube_client, "lbpool-b/second", ["172.21.13.5"]),
            within=60,
            what="shared once both opt in",
        )
        assert ccm.poll() is None
    finally:
        await _delete_services(kube_client)
        assert ccm.stop() == 0


async def _served_as(client: KubeClient, key: str, want: list[str]) -> bool:
    return (await addresses(client)).get(key) == want


def peer_crd(group: str, version: str, kind: str, plural: str, scope: str) -> dict[str, Any]:
    """A stand-in for a peer's CRD: its group, version, kind and plural as the peer
    ships them, any content accepted (kube-ccm only asks whether the API serves it)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": scope,
            "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


async def test_metallb_s_and_cilium_s_pool_kinds_installed_are_named_when_no_pool_serves(
    ccm_kubeconfig: Path, kube_client: KubeClient, crd: None, tmp_path: Path
) -> None:
    """Issue 39 (What to build 4, item 8): with MetalLB's IPAddressPool and Cilium's
    CiliumLoadBalancerIPPool kinds served (their CRDs installed) and no kube-ccm pool,
    the Service's Event names LoadBalancerPool, both peers' kinds, and the guide; found
    by the API's discovery documents, which the shipped RBAC needs nothing for."""
    peers = [
        peer_crd("metallb.io", "v1beta1", "IPAddressPool", "ipaddresspools", "Namespaced"),
        peer_crd(
            "cilium.io",
            "v2alpha1",
            "CiliumLoadBalancerIPPool",
            "ciliumloadbalancerippools",
            "Cluster",
        ),
    ]
    for manifest in peers:
        await kube_client.create(CRDS, manifest)
    ccm = daemon(ccm_kubeconfig, tmp_path / "ccm", config={"configMap": ""})
    try:

        async def served() -> bool:
            for manifest in peers:
                group, version = manifest["spec"]["group"], manifest["spec"]["versions"][0]["name"]
                try:
                    found = await kube_client.get(f"/apis/{group}/{version}")
                except ApiError:
                    return False
                if not found.get("resources"):
                    return False
            return True

        await eventually(served, within=30, what="the peers' kinds served")
        await kube_client.create(
            "/api/v1/namespaces/lbpool-a/services", service_manifest("no-pool")
        )
        texts = (
            "no address pools: create a LoadBalancerPool (ippool.kube-ccm.io/v1alpha1)",
            "MetalLB's IPAddressPool (metallb.io) is installed in this cluster, but ippool "
            "does not read its pools: write one LoadBalancerPool per IPAddressPool "
            "(docs/on-prem.md, Migrating from MetalLB)",
            "Cilium's CiliumLoadBalancerIPPool (cilium.io) is installed in this cluster",
            "Migrating from Cilium LB-IPAM",
        )

        async def told() -> bool:
            found = await events(kube_client, "lbpool-a", "no-pool", "SyncLoadBalancerFailed")
            return any(all(t in m for t in texts) for m in found)

        await eventually(told, within=60, what="the Event naming both peers and the guide")
        assert ccm.poll() is None
    finally:
        await _delete_services(kube_client)
        assert ccm.stop() == 0
        for manifest in peers:
            await kube_client.delete(f"{CRDS}/{manifest['metadata']['name']}")


def doc_example(name: str) -> list[dict[str, Any]]:
    """The YAML block after ``<!-- example: name -->`` in docs/on-prem.md."""
    text = (DEPLOY.parent / "docs" / "on-prem.md").read_text()
    after = text.split(f"<!-- example: {name} -->\n", 1)[1]
    block = after.split("```yaml\n", 1)[1].split("```", 1)[0]
    return [d for d in yaml.safe_load_all(block) if d]


async def apply(client: KubeClient, docs: list[dict[str, Any]]) -> None:
    for doc in docs:
        if doc["kind"] == "LoadBalancerPool":
            await client.create(POOLS, doc)
        else:
            assert doc["kind"] == "Service"
            namespace = doc["metadata"]["namespace"]
            await client.create(f"/api/v1/namespaces/{namespace}/services", doc)


async def test_the_migration_guides_examples_work_unchanged(
    ccm_kubeconfig: Path, kube_client: KubeClient, crd: None, tmp_path: Path
) -> None:
    with contextlib.suppress(ApiError):
        await kube_client.create("/api/v1/namespaces", {"metadata": {"name": "shop"}})
    await apply(kube_client, doc_example("metallb"))
    await apply(kube_client, doc_example("cilium"))
    ccm = daemon(ccm_kubeconfig, tmp_path / "ccm", config={"configMap": ""})
    expected = {
        "shop/web": ["192.0.2.70"],
        "shop/web-tls": ["192.0.2.70"],
        "shop/api": ["192.0.2.64"],
        "shop/service-blue": ["192.0.2.100"],
        "shop/service-blue-metrics": ["192.0.2.100"],
    }
    try:

        async def served() -> bool:
            now = await addresses(kube_client)
            return all(now.get(k) == v for k, v in expected.items())

        await eventually(served, within=60, what=f"the guides' Services served as {expected}")
        assert ccm.poll() is None
    finally:
        await _delete_services(kube_client)
        assert ccm.stop() == 0
