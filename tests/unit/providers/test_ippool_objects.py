"""LoadBalancerPool objects (issue 28, item 1): parsed and checked, conflicts between
pools, and the provider serving from them on the in-memory API server: priority,
autoAssign, disabled, namespace and Service selectors, the status it writes, and the
bad input (overlap, a selector that does not parse, an address outside every pool, a
pool deleted while in use)."""

from __future__ import annotations

import asyncio
import ipaddress
from typing import Any

import pytest

from kube_ccm.api.objects import ObjectMeta, Service, ServicePort, ServiceSpec
from kube_ccm.cloudprovider import IP_ADDRESSES
from kube_ccm.providers.ippool import IPPoolError, IPPoolProvider, factory
from kube_ccm.providers.ippool.annotations import POOL_ANNOTATION
from kube_ccm.providers.ippool.kubevip import pools_from_kubevip
from kube_ccm.providers.ippool.loadbalancer import OUTSIDE_POOLS_REASON
from kube_ccm.providers.ippool.objects import (
    LOAD_BALANCER_POOLS,
    parse_object,
    parse_selector,
    resolve,
    size_of,
)
from kube_ccm.providers.ippool.pools import PoolError
from kube_ccm.providers.ippool.provider import POOL_CONFLICT_REASON, POOL_INVALID_REASON
from kube_ccm.testing.events import FakeEventRecorder
from kube_ccm.testing.fakeapi import (
    DEFAULT_RESOURCES,
    FakeApiServer,
    FakeClientBuilder,
    ResourceType,
)

POOLS = LOAD_BALANCER_POOLS.path()
SERVED = (
    *DEFAULT_RESOURCES,
    ResourceType(
        "ippool.kube-ccm.io/v1alpha1",
        "loadbalancerpools",
        "LoadBalancerPool",
        namespaced=False,
        status=True,
    ),
)


def lbpool(name: str, created: str = "2026-01-01T00:00:00Z", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "ippool.kube-ccm.io/v1alpha1",
        "kind": "LoadBalancerPool",
        "metadata": {"name": name, "creationTimestamp": created, "generation": 1},
        "spec": spec,
    }


# -- parsing ---------------------------------------------------------------------------


def test_a_pool_reads_metallb_s_and_cilium_s_fields() -> None:
    obj = parse_object(
        lbpool(
            "lan",
            addresses=["192.0.2.0/24", "198.51.100.10-198.51.100.20", "2001:db8::/120"],
            autoAssign=False,
            allowFirstLastIPs="Yes",
            disabled=True,
            serviceAllocation={
                "priority": 5,
                "namespaces": ["team-a"],
                "namespaceSelectors": [{"matchLabels": {"tier": "web"}}],
                "serviceSelectors": [
                    {"matchExpressions": [{"key": "app", "operator": "In", "values": ["a"]}]}
                ],
            },
        )
    )
    assert not obj.problem
    assert (obj.auto_assign, obj.disabled, obj.priority) == (False, True, 5)
    assert obj.namespaces == {"team-a"}
    # allowFirstLastIPs: the /24 keeps .0 and .255 as span ends, avoidBuggyIPs skips them
    assert str(obj.pool.spans[0].first) == "192.0.2.0"
    assert size_of(obj.pool, "IPv4") == 254 + 11
    assert size_of(obj.pool, "IPv6") == 256
    assert obj.why_not_serving("team-a", {}, {"app": "a"}, "svc") == ""
    assert obj.why_not_serving("web", {"tier": "web"}, {"app": "a"}, "svc") == ""
    assert "other namespaces" in obj.why_not_serving("team-b", {}, {"app": "a"}, "svc")
    assert "serviceSelectors" in obj.why_not_serving("team-a", {}, {"app": "b"}, "svc")


def test_cilium_service_keys_match_the_real_namespace_and_name_not_the_labels() -> None:
    """A pool restricted as Cilium users write it (serviceSelector on
    io.kubernetes.service.namespace/name): the Service's real namespace and name count,
    a label of that key on the Service (a tenant writes its labels) does not."""
    obj = parse_object(
        lbpool(
            "team-b",
            addresses=["192.0.2.0/24"],
            serviceAllocation={
                "serviceSelectors": [
                    {"matchLabels": {"io.kubernetes.service.namespace": "team-b"}},
                    {
                        "matchExpressions": [
                            {
                                "key": "io.kubernetes.service.name",
                                "operator": "In",
                                "values": ["shared-gw"],
                            }
                        ]
                    },
                ]
            },
        )
    )
    spoofed = {"io.kubernetes.service.namespace": "team-b", "io.kubernetes.service.name": "x"}
    assert obj.why_not_serving("team-b", {}, {}, "web") == ""
    assert obj.why_not_serving("team-b", {}, {"io.kubernetes.service.namespace": "a"}, "w") == ""
    assert obj.why_not_serving("team-a", {}, {}, "shared-gw") == "", "by its real name"
    assert "serviceSelectors" in obj.why_not_serving("team-a", {}, spoofed, "web")
    assert "serviceSelectors" in obj.why_not_serving(
        "team-a", {}, {"io.kubernetes.service.name": "shared-gw"}, "web"
    )


def test_first_and_last_of_a_cidr_are_skipped_unless_allowed_and_buggy_ips_too() -> None:
    obj = parse_object(lbpool("p", addresses=["10.1.0.0/23", "2001:db8::/126"]))
    assert size_of(obj.pool, "IPv4") == 512 - 4  # .0.0, .0.255, .1.0, .1.255
    assert size_of(obj.pool, "IPv6") == 2
    plain = parse_object(lbpool("p", addresses=["10.1.0.0/23"], avoidBuggyIPs=False))
    assert size_of(plain.pool, "IPv4") == 510
    below = int(ipaddress.ip_address("10.1.0.255"))
    assert str(plain.pool.free("IPv4", lambda a: int(a) < below)) == "10.1.0.255"


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        ({"matchExpressions": [{"key": "a", "operator": "Equals", "values": ["x"]}]}, "Equals"),
        ({"matchExpressions": [{"key": "a", "operator": "In"}]}, "needs values"),
        ({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}, "no values"),
        ({"matchLabels": {"bad key!": "x"}}, "not a label key"),
        ({"matchLabels": {"a": "no spaces"}}, "not a label value"),
        ({"matchLabel": {"a": "b"}}, "matchLabel"),
    ],
)
def test_a_selector_that_does_not_parse_breaks_its_pool_naming_the_term(
    selector: dict[str, Any], message: str
) -> None:
    with pytest.raises(PoolError, match=message):
        parse_selector(selector, "s")
    obj = parse_object(
        lbpool("p", addresses=["10.0.0.0/24"], serviceAllocation={"serviceSelectors": [selector]})
    )
    assert message in obj.problem
    assert "spec.serviceAllocation.serviceSelectors[0]" in obj.problem
    assert not obj.usable


@pytest.mark.parametrize(
    ("addresses", "message"),
    [
        (["10.0.0.0/33"], "neither a CIDR"),
        (["10.0.0.9-10.0.0.1"], "ends before it starts"),
        (["127.0.0.0/24"], "loopback"),
        (["10.0.0.0/24", "10.0.0.128/25"], "overlap"),
        ([], "give CIDRs"),
    ],
)
def test_bad_addresses_break_the_pool(addresses: list[str], message: str) -> None:
    obj = parse_object(lbpool("p", addresses=addresses))
    assert message in obj.problem


def test_overlapping_pools_stop_the_newer_and_both_statuses_name_the_other() -> None:
    old = parse_object(lbpool("old", "2026-01-01T00:00:00Z", addresses=["10.0.0.0/24"]))
    new = parse_object(lbpool("new", "2026-02-01T00:00:00Z", addresses=["10.0.0.128/25"]))
    apart = parse_object(lbpool("apart", addresses=["10.9.0.0/24"]))
    kv = pools_from_kubevip({"range-global": "10.5.0.1-10.5.0.9"}, "cm")
    clash = parse_object(lbpool("clash", addresses=["10.5.0.5"]))
    resolved = {o.name: o for o in resolve([new, old, apart, clash], kv)}
    assert resolved["old"].usable
    assert resolved["apart"].usable
    assert resolved["new"].stopped_by == "LoadBalancerPool old"
    assert any("new" in c for c in resolved["old"].conflicts)
    assert any("old" in c for c in resolved["new"].conflicts)
    assert not resolved["apart"].conflicts
    assert resolved["clash"].stopped_by == "cm key range-global"


def test_pools_are_tried_lowest_priority_first_and_unprioritised_last() -> None:
    pools = [
        parse_object(lbpool("z", addresses=["10.0.1.0/24"])),
        parse_object(lbpool("b", addresses=["10.0.2.0/24"], serviceAllocation={"priority": 2})),
        parse_object(lbpool("a", addresses=["10.0.3.0/24"], serviceAllocation={"priority": 9})),
    ]
    assert [o.name for o in resolve(pools, [])] == ["b", "a", "z"]


# -- the provider ----------------------------------------------------------------------


async def provider(fake: FakeApiServer) -> tuple[IPPoolProvider, FakeEventRecorder]:
    p = factory(b"configMap: ''\n")
    await p.initialize(FakeClientBuilder(fake), asyncio.Event())
    recorder = FakeEventRecorder()
    p.recorder = recorder
    return p, recorder


async def seen(p: IPPoolProvider, name: str, spec: dict[str, Any] | None) -> None:
    """Wait until the provider's informer shows pool ``name`` with ``spec`` (None: gone)."""
    for _ in range(400):
        informer = p._objects
        if informer is not None:
            item = informer.get(name)
            if (item is not None and item.spec == spec) if spec is not None else item is None:
                return
        await asyncio.sleep(0.005)
    raise AssertionError(f"the informer did not see pool {name} as {spec}")


async def put(fake: FakeApiServer, p: IPPoolProvider, item: dict[str, Any]) -> None:
    """Put a pool and wait for the provider's informer to see it."""
    fake.put_object(item)
    await seen(p, item["metadata"]["name"], item["spec"])


async def delete(fake: FakeApiServer, p: IPPoolProvider, name: str) -> None:
    fake.delete_object(f"{POOLS}/{name}")
    await seen(p, name, None)


def service(
    name: str,
    namespace: str = "default",
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    load_balancer_ip: str = "",
) -> Service:
    return Service(
        metadata=ObjectMeta(
            name=name,
            namespace=namespace,
            uid=f"uid-{namespace}-{name}",
            labels=labels or {},
            annotations=annotations or {},
        ),
        spec=ServiceSpec(
            type="LoadBalancer",
            ports=(ServicePort(protocol="TCP", port=80),),
            ip_families=("IPv4",),
            ip_family_policy="SingleStack",
            load_balancer_ip=load_balancer_ip,
        ),
    )


async def ip(p: IPPoolProvider, svc: Service) -> str:
    status = await p.load_balancer().ensure_load_balancer("kubernetes", svc, [])
    return status.ingress[0].ip


async def refusal(p: IPPoolProvider, svc: Service) -> str:
    with pytest.raises(IPPoolError) as caught:
        await p.load_balancer().ensure_load_balancer("kubernetes", svc, [])
    return str(caught.value)


async def test_services_get_addresses_from_pools_by_priority_auto_assign_and_selectors() -> None:
    fake = FakeApiServer(resources=SERVED)
    p, _ = await provider(fake)
    await put(fake, p, lbpool("cheap", addresses=["10.0.1.0/24"]))
    await put(
        fake,
        p,
        lbpool(
            "first",
            addresses=["10.0.2.0/24"],
            serviceAllocation={"priority": 1, "namespaces": ["a"]},
        ),
    )
    await put(fake, p, lbpool("dear", addresses=["10.0.3.5-10.0.3.6"], autoAssign=False))
    await put(
        fake,
        p,
        lbpool(
            "web",
            addresses=["10.0.4.0/24"],
            serviceAllocation={
                "priority": 0,
                "serviceSelectors": [{"matchLabels": {"tier": "web"}}],
            },
        ),
    )
    assert await ip(p, service("s", "a")) == "10.0.2.1"
    assert await ip(p, service("s", "b")) == "10.0.1.1"
    assert await ip(p, service("w", "b", labels={"tier": "web"})) == "10.0.4.1"
    assert await ip(p, service("d", "b", annotations={POOL_ANNOTATION: "dear"})) == "10.0.3.5"
    assert await ip(p, service("r", "b", load_balancer_ip="10.0.3.6")) == "10.0.3.6"
    message = await refusal(p, service("x", "b", annotations={POOL_ANNOTATION: "first"}))
    assert "serves other namespaces" in message
    message = await refusal(p, service("y", "b", annotations={POOL_ANNOTATION: "nope"}))
    assert "no pool of that name" in message
    await p.aclose()


async def test_namespace_selectors_read_the_namespace_s_labels() -> None:
    fake = FakeApiServer(resources=SERVED)
    fake.put_object(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": "shop", "labels": {"t": "1"}},
        }
    )
    p, _ = await provider(fake)
    await put(
        fake,
        p,
        lbpool(
            "tenant",
            addresses=["10.0.7.0/24"],
            serviceAllocation={"namespaceSelectors": [{"matchLabels": {"t": "1"}}]},
        ),
    )
    assert await ip(p, service("s", "shop")) == "10.0.7.1"
    message = await refusal(p, service("s", "other"))
    assert "no pool serving Service other/s (by its namespace 'other'" in message
    await p.aclose()


async def test_a_disabled_pool_keeps_its_addresses_and_refuses_new_ones() -> None:
    fake = FakeApiServer(resources=SERVED)
    p, _ = await provider(fake)
    await put(fake, p, lbpool("p", addresses=["10.0.5.0/24"]))
    kept = service("kept")
    assert await ip(p, kept) == "10.0.5.1"
    await put(fake, p, lbpool("p", addresses=["10.0.5.0/24"], disabled=True))
    assert await ip(p, kept) == "10.0.5.1"
    message = await refusal(p, service("new"))
    assert "LoadBalancerPool p is disabled" in message
    message = await refusal(p, service("asks", load_balancer_ip="10.0.5.9"))
    assert "LoadBalancerPool p is disabled" in message
    await p.aclose()


async def test_overlapping_pools_are_a_conflict_in_both_statuses_and_an_event() -> None:
    fake = FakeApiServer(resources=SERVED)
    p, recorder = await provider(fake)
    await put(fake, p, lbpool("old", "2026-01-01T00:00:00Z", addresses=["10.0.6.1-10.0.6.3"]))
    await put(fake, p, lbpool("new", "2026-02-01T00:00:00Z", addresses=["10.0.6.2-10.0.6.9"]))
    got = {await ip(p, service(f"s{i}")) for i in range(3)}
    assert got == {"10.0.6.1", "10.0.6.2", "10.0.6.3"}  # the old pool only, none twice
    message = await refusal(p, service("more"))
    assert "LoadBalancerPool new overlaps LoadBalancerPool old" in message
    await p.write_statuses()
    old = fake.object(f"{POOLS}/old")
    new = fake.object(f"{POOLS}/new")
    assert old is not None
    assert new is not None
    assert old["status"]["ipv4"] == {"size": 3, "used": 3, "free": 0}
    assert old["status"]["serving"] is True
    assert "overlaps LoadBalancerPool new" in old["status"]["conflicts"][0]
    assert "overlaps LoadBalancerPool old" in new["status"]["conflicts"][0]
    assert new["status"]["serving"] is False
    assert "was there first" in new["status"]["problem"]
    assert recorder.reasons().count(POOL_CONFLICT_REASON) == 2
    await p.aclose()


async def test_a_selector_that_does_not_parse_is_on_the_pool_and_the_service_s_event() -> None:
    fake = FakeApiServer(resources=SERVED)
    p, recorder = await provider(fake)
    bad = {"matchExpressions": [{"key": "app", "operator": "Equal", "values": ["x"]}]}
    await put(
        fake,
        p,
        lbpool("bad", addresses=["10.0.8.0/24"], serviceAllocation={"serviceSelectors": [bad]}),
    )
    message = await refusal(p, service("s"))
    assert "LoadBalancerPool bad is invalid (see its status)" in message
    await p.write_statuses()
    status = fake.object(f"{POOLS}/bad")["status"]  # type: ignore[index]
    assert "operator 'Equal'" in status["problem"]
    assert status["serving"] is False
    assert POOL_INVALID_REASON in recorder.reasons()
    await p.aclose()


async def test_an_address_outside_every_pool_is_refused() -> None:
    fake = FakeApiServer(resources=SERVED)
    p, _ = await provider(fake)
    await put(fake, p, lbpool("p", addresses=["10.0.9.0/24"]))
    message = await refusal(p, service("s", load_balancer_ip="10.99.0.1"))
    assert "not in a pool serving Service default/s " in message
    await p.aclose()


async def test_a_pool_deleted_while_in_use_keeps_its_addresses_and_flags_them() -> None:
    fake = FakeApiServer(resources=SERVED)
    p, recorder = await provider(fake)
    await put(fake, p, lbpool("p", addresses=["10.0.10.0/24"]))
    await put(fake, p, lbpool("q", addresses=["10.0.11.0/24"]))
    svc = service("s", annotations={POOL_ANNOTATION: "p"})
    assert await ip(p, svc) == "10.0.10.1"
    claim = fake.object(IP_ADDRESSES.path("10.0.10.1"))
    assert claim is not None
    assert claim["spec"]["parentRef"]["resource"] == "loadbalancerpools"
    await delete(fake, p, "p")
    other = service("t")
    assert await ip(p, other) == "10.0.11.1"
    assert OUTSIDE_POOLS_REASON in recorder.reasons()
    assert await ip(p, service("s")) == "10.0.10.1"  # kept, no longer naming the pool
    await p.aclose()


async def test_kube_vip_s_configmap_and_pools_serve_side_by_side() -> None:
    fake = FakeApiServer(resources=SERVED)
    fake.put_object(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "kubevip", "namespace": "kube-system"},
            "data": {"cidr-team": "10.1.1.0/24", "range-global": "10.1.2.1-10.1.2.9"},
        }
    )
    p = factory(None)
    await p.initialize(FakeClientBuilder(fake), asyncio.Event())
    p.recorder = FakeEventRecorder()
    await put(fake, p, lbpool("obj", addresses=["10.1.3.0/24"]))
    assert await ip(p, service("s", "team")) == "10.1.1.1"  # the namespace's own first
    assert await ip(p, service("s", "other")) == "10.1.3.1"  # then the objects
    await put(fake, p, lbpool("obj", addresses=["10.1.3.1"], disabled=True))
    assert await ip(p, service("t", "other")) == "10.1.2.1"  # then kube-vip's global
    await p.aclose()


# -- MetalLB's and Cilium's annotations (issue 28, item 2) -------------------------------


def keyed(
    name: str,
    namespace: str = "default",
    *,
    port: int = 80,
    policy: str = "Cluster",
    annotations: dict[str, str] | None = None,
) -> Service:
    svc = service(name, namespace, annotations=annotations)
    return Service(
        metadata=svc.metadata,
        spec=ServiceSpec(
            type="LoadBalancer",
            ports=(ServicePort(protocol="TCP", port=port),),
            ip_families=("IPv4",),
            ip_family_policy="SingleStack",
            external_traffic_policy=policy,
        ),
    )


def put_service(fake: FakeApiServer, svc: Service, selector: dict[str, str]) -> None:
    fake.put_object(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": svc.metadata.name,
                "namespace": svc.metadata.namespace,
                "uid": svc.metadata.uid,
            },
            "spec": {"type": "LoadBalancer", "selector": selector},
        }
    )


@pytest.mark.parametrize(
    "key",
    ["metallb.io/loadBalancerIPs", "metallb.universe.tf/loadBalancerIPs", "lbipam.cilium.io/ips"],
)
async def test_metallb_s_and_cilium_s_requests_are_honoured(key: str) -> None:
    fake = FakeApiServer(resources=SERVED)
    p, _ = await provider(fake)
    await put(fake, p, lbpool("p", addresses=["10.2.0.0/24", "fd00:2::/120"]))
    svc = service("s", annotations={key: "10.2.0.77, fd00:2::9"})
    dual = Service(
        metadata=svc.metadata,
        spec=ServiceSpec(
            type="LoadBalancer",
            ports=svc.spec.ports,
            ip_families=("IPv4", "IPv6"),
            ip_family_policy="RequireDualStack",
        ),
    )
    status = await p.load_balancer().ensure_load_balancer("kubernetes", dual, [])
    assert [i.ip for i in status.ingress] == ["10.2.0.77", "fd00:2::9"]
    await p.aclose()


async def test_metallb_s_pool_annotation_names_the_pool() -> None:
    fake = FakeApiServer(resources=SERVED)
    p, _ = await provider(fake)
    await put(fake, p, lbpool("a", addresses=["10.3.0.0/24"]))
    await put(fake, p, lbpool("b", addresses=["10.3.1.0/24"], autoAssign=False))
    for i, key in enumerate(("metallb.io/address-pool", "metallb.universe.tf/address-pool")):
        assert await ip(p, service(f"s{i}", annotations={key: "b"})) == f"10.3.1.{i + 1}"
    await p.aclose()


@pytest.mark.parametrize(
    ("annotations", "names"),
    [
        (
            {"metallb.io/loadBalancerIPs": "10.4.0.5", "lbipam.cilium.io/ips": "10.4.0.6"},
            ("metallb.io/loadBalancerIPs", "lbipam.cilium.io/ips"),
        ),
        (
            {"kube-vip.io/loadbalancerIPs": "10.4.0.5", "metallb.io/loadBalancerIPs": "10.4.0.6"},
            ("kube-vip.io/loadbalancerIPs", "metallb.io/loadBalancerIPs"),
        ),
        (
            {"metallb.io/allow-shared-ip": "a", "lbipam.cilium.io/sharing-key": "b"},
            ("metallb.io/allow-shared-ip", "lbipam.cilium.io/sharing-key"),
        ),
        (
            {"ippool.kube-ccm.io/pool": "p", "metallb.io/address-pool": "q"},
            ("ippool.kube-ccm.io/pool", "metallb.io/address-pool"),
        ),
        (
            {"metallb.io/address-pool": "p", "lbipam.cilium.io/ips": "10.9.9.9"},
            ("lbipam.cilium.io/ips", "LoadBalancerPool 'p'"),
        ),
    ],
)
async def test_two_contradicting_requests_are_refused_naming_both(
    annotations: dict[str, str], names: tuple[str, str]
) -> None:
    fake = FakeApiServer(resources=SERVED)
    p, _ = await provider(fake)
    await put(fake, p, lbpool("p", addresses=["10.4.0.0/24"]))
    await put(fake, p, lbpool("q", addresses=["10.4.1.0/24"]))
    message = await refusal(p, service("s", annotations=annotations))
    assert "contradicting" in message
    for name in names:
        assert name in message
    await p.aclose()


async def test_the_same_request_in_two_annotations_is_no_contradiction() -> None:
    fake = FakeApiServer(resources=SERVED)
    p, _ = await provider(fake)
    await put(fake, p, lbpool("p", addresses=["10.4.0.0/24"]))
    both = {"metallb.io/loadBalancerIPs": "10.4.0.5", "lbipam.cilium.io/ips": "10.4.0.5"}
    assert await ip(p, service("s", annotations=both, load_balancer_ip="10.4.0.5")) == "10.4.0.5"
    await p.aclose()


@pytest.mark.parametrize(
    "key",
    [
        "metallb.io/allow-shared-ip",
        "metallb.universe.tf/allow-shared-ip",
        "lbipam.cilium.io/sharing-key",
    ],
)
async def test_a_sharing_key_of_either_project_shares_when_ports_differ(key: str) -> None:
    fake = FakeApiServer(resources=SERVED)
    p, recorder = await provider(fake)
    await put(fake, p, lbpool("p", addresses=["10.5.0.0/24"]))
    first = await ip(p, keyed("a", port=80, annotations={key: "k"}))
    assert await ip(p, keyed("b", port=443, annotations={key: "k"})) == first
    assert await ip(p, keyed("c", port=80, annotations={key: "k"})) != first  # port collides
    assert "AddressNotShared" in recorder.reasons()
    await p.aclose()


async def test_a_guessed_key_in_use_elsewhere_reads_as_one_in_use_nowhere() -> None:
    """AddressNotShared never confirms that another namespace uses a key: a tenant
    guessing one sees the same (an address of its own, no Warning) either way."""
    fake = FakeApiServer(resources=SERVED)
    p, recorder = await provider(fake)
    await put(fake, p, lbpool("p", addresses=["10.5.1.0/24"]))
    key = {"metallb.io/allow-shared-ip": "secret-key"}
    theirs = await ip(p, keyed("b", "team-b", port=80, annotations=key))
    guessed = await ip(p, keyed("a", "team-a", port=80, annotations=key))
    unused = await ip(
        p, keyed("c", "team-a", port=80, annotations={"metallb.io/allow-shared-ip": "never-used"})
    )
    assert len({theirs, guessed, unused}) == 3
    assert "AddressNotShared" not in recorder.reasons()
    # Within one namespace the reason is told.
    await ip(p, keyed("d", "team-a", port=80, annotations=key))
    assert "AddressNotShared" in recorder.reasons()
    await p.aclose()


async def test_cilium_shares_only_with_the_same_external_traffic_policy() -> None:
    fake = FakeApiServer(resources=SERVED)
    p, recorder = await provider(fake)
    await put(fake, p, lbpool("p", addresses=["10.6.0.0/24"]))
    key = {"lbipam.cilium.io/sharing-key": "k"}
    first = await ip(p, keyed("a", port=80, annotations=key))
    assert await ip(p, keyed("b", port=81, annotations=key)) == first
    assert await ip(p, keyed("c", port=82, policy="Local", annotations=key)) != first
    assert any("Cilium's rule" in m for m in (e.message for e in recorder.events))
    await p.aclose()


async def test_metallb_shares_a_local_service_only_with_the_same_selector() -> None:
    fake = FakeApiServer(resources=SERVED)
    p, recorder = await provider(fake)
    await put(fake, p, lbpool("p", addresses=["10.7.0.0/24"]))
    key = {"metallb.io/allow-shared-ip": "k"}
    a = keyed("a", port=80, policy="Local", annotations=key)
    b = keyed("b", port=81, policy="Local", annotations=key)
    c = keyed("c", port=82, policy="Local", annotations=key)
    d = keyed("d", port=83, policy="Cluster", annotations=key)
    put_service(fake, a, {"app": "web"})
    put_service(fake, b, {"app": "web"})
    put_service(fake, c, {"app": "other"})
    put_service(fake, d, {"app": "web"})
    first = await ip(p, a)
    assert await ip(p, b) == first
    assert await ip(p, c) != first
    assert await ip(p, d) != first  # Cluster and Local never share in MetalLB
    assert any("same spec.selector" in m for m in (e.message for e in recorder.events))
    await p.aclose()


async def test_cross_namespace_sharing_stays_off_unless_both_ask() -> None:
    fake = FakeApiServer(resources=SERVED)
    p, _ = await provider(fake)
    await put(fake, p, lbpool("p", addresses=["10.8.0.0/24"]))
    key = {"lbipam.cilium.io/sharing-key": "k"}
    first = await ip(p, keyed("a", "one", port=80, annotations=key))
    assert await ip(p, keyed("b", "two", port=81, annotations=key)) != first
    cross = {**key, "lbipam.cilium.io/sharing-cross-namespace": "*"}
    shared = await ip(p, keyed("c", "three", port=80, annotations=cross))
    assert await ip(p, keyed("d", "four", port=81, annotations=cross)) == shared
    await p.aclose()


async def test_cilium_s_older_io_cilium_annotations_are_read_as_cilium_reads_them() -> None:
    """Issue 39 item 1: ``io.cilium/lb-ipam-ips``, ``-sharing-key`` and
    ``-sharing-cross-namespace`` (Cilium's ``annotation.LBIPAM*Alias``) ask as their
    ``lbipam.cilium.io/`` forms do, with Cilium's sharing rule."""
    fake = FakeApiServer(resources=SERVED)
    p, recorder = await provider(fake)
    await put(fake, p, lbpool("p", addresses=["10.10.0.0/24"]))
    assert await ip(p, service("pinned", annotations={"io.cilium/lb-ipam-ips": "10.10.0.9"})) == (
        "10.10.0.9"
    )
    old = {"io.cilium/lb-ipam-sharing-key": "k"}
    new = {"lbipam.cilium.io/sharing-key": "k"}
    first = await ip(p, keyed("a", port=80, annotations=old))
    assert await ip(p, keyed("b", port=81, annotations=new)) == first
    assert await ip(p, keyed("c", port=82, policy="Local", annotations=old)) != first
    assert any("Cilium's rule" in e.message for e in recorder.events)
    cross = {**old, "io.cilium/lb-ipam-sharing-cross-namespace": "*"}
    shared = await ip(p, keyed("d", "three", port=80, annotations=cross))
    assert await ip(p, keyed("e", "four", port=81, annotations=cross)) == shared
    await p.aclose()


async def test_cilium_s_newer_annotation_wins_over_its_older_form_as_in_cilium() -> None:
    """Cilium's ``annotation.Get``: the ``io.cilium/`` form is read only when the
    ``lbipam.cilium.io/`` key is absent, so the two never contradict."""
    fake = FakeApiServer(resources=SERVED)
    p, _ = await provider(fake)
    await put(fake, p, lbpool("p", addresses=["10.11.0.0/24"]))
    both = {"lbipam.cilium.io/ips": "10.11.0.5", "io.cilium/lb-ipam-ips": "10.11.0.6"}
    assert await ip(p, service("s", annotations=both)) == "10.11.0.5"
    keys = {"lbipam.cilium.io/sharing-key": "k", "io.cilium/lb-ipam-sharing-key": "other"}
    first = await ip(p, keyed("a", port=80, annotations=keys))
    assert await ip(p, keyed("b", port=81, annotations={"lbipam.cilium.io/sharing-key": "k"})) == (
        first
    )
    await p.aclose()


@pytest.mark.parametrize("key", ["lbipam.cilium.io/ips", "io.cilium/lb-ipam-ips"])
async def test_cilium_s_documented_two_ipv4_request_is_refused_saying_what_to_change(
    key: str,
) -> None:
    """Issue 39 item 4: Cilium's own example (docs.cilium.io, LB IPAM, "Requesting IPs")
    asks for two IPv4 addresses, which LB-IPAM both gives; ippool gives one per family
    and says what to change."""
    fake = FakeApiServer(resources=SERVED)
    p, _ = await provider(fake)
    await put(fake, p, lbpool("p", addresses=["20.0.10.0/24"]))
    message = await refusal(p, service("s", annotations={key: "20.0.10.100,20.0.10.200"}))
    assert f"{key} '20.0.10.100,20.0.10.200' asks for 2 IPv4 addresses" in message
    assert "Cilium LB-IPAM gives a Service every address listed" in message
    assert "keep one, and ask for each other in a Service of its own" in message


@pytest.mark.parametrize(
    "addresses", [["2001:db8::%eth0/120"], ["2001:db8::1%eth0-2001:db8::9"], ["2001:db8::5%1"]]
)
def test_a_pool_with_a_scoped_ipv6_address_is_invalid_saying_what_to_change(
    addresses: list[str],
) -> None:
    obj = parse_object(lbpool("p", addresses=addresses))
    assert "is a scoped IPv6 address" in obj.problem
    assert "without the %zone" in obj.problem
    with pytest.raises(PoolError, match="scoped IPv6"):
        pools_from_kubevip({"range-global": addresses[0]}, "cm")


@pytest.mark.parametrize(
    "where",
    [
        {"annotations": {"lbipam.cilium.io/ips": "2001:db8::11%eth0"}},
        {"annotations": {"metallb.io/loadBalancerIPs": "192.0.2.1,2001:db8::11%eth0"}},
        {"load_balancer_ip": "2001:db8::11%eth0"},
    ],
)
async def test_a_scoped_ipv6_request_is_refused_before_anything_is_written(
    where: dict[str, Any],
) -> None:
    fake = FakeApiServer(resources=SERVED)
    p, _ = await provider(fake)
    await put(fake, p, lbpool("p", addresses=["192.0.2.0/24", "2001:db8::/120"]))
    message = await refusal(p, service("s", **where))
    assert "'2001:db8::11%eth0' is a scoped IPv6 address" in message
    assert not fake.objects(IP_ADDRESSES.path()), "nothing claimed"
    await p.aclose()
