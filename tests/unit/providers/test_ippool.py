"""The ippool provider on the in-memory API server: allocation, requests, sharing,
dual-stack, exhaustion, release, and no address given twice under concurrency."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from kube_ccm.api.objects import ObjectMeta, Service, ServicePort, ServiceSpec
from kube_ccm.cloudprovider.annotations import problems
from kube_ccm.providers.ippool import (
    ADDRESSES_ANNOTATION,
    SHARING_KEY_ANNOTATION,
    IPPoolConfigError,
    IPPoolError,
    IPPoolProvider,
    factory,
    load_config,
)
from kube_ccm.providers.ippool.annotations import ALLOCATED_ANNOTATION
from kube_ccm.providers.ippool.claims import HOLDERS_ANNOTATION
from kube_ccm.runtime.resources import IP_ADDRESSES
from kube_ccm.testing.fakeapi import FakeApiServer, FakeClientBuilder

CM = "/api/v1/namespaces/kube-system/configmaps/kubevip"
IPADDRESSES = IP_ADDRESSES.path()


def configmap(fake: FakeApiServer, **data: str) -> None:
    fake.put_object(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "kubevip", "namespace": "kube-system"},
            "data": {k.replace("_", "-"): v for k, v in data.items()},
        }
    )


async def provider(fake: FakeApiServer, config: str = "") -> IPPoolProvider:
    p = factory(config.encode() or None)
    await p.initialize(FakeClientBuilder(fake), asyncio.Event())
    return p


def service(
    fake: FakeApiServer,
    name: str,
    namespace: str = "default",
    *,
    ports: tuple[tuple[str, int], ...] = (("TCP", 80),),
    annotations: dict[str, str] | None = None,
    families: tuple[str, ...] = ("IPv4",),
    policy: str = "SingleStack",
    load_balancer_ip: str = "",
) -> Service:
    svc = Service(
        metadata=ObjectMeta(
            name=name,
            namespace=namespace,
            uid=f"uid-{namespace}-{name}",
            annotations=annotations or {},
        ),
        spec=ServiceSpec(
            type="LoadBalancer",
            ports=tuple(ServicePort(protocol=p, port=n) for p, n in ports),
            ip_families=families,
            ip_family_policy=policy,
            load_balancer_ip=load_balancer_ip,
        ),
    )
    fake.put_object(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": svc.metadata.uid,
                "annotations": annotations or {},
            },
            "spec": {"type": "LoadBalancer"},
        }
    )
    return svc


async def ips(p: IPPoolProvider, svc: Service) -> list[str]:
    status = await p.load_balancer().ensure_load_balancer("kubernetes", svc, [])
    assert all(i.ip_mode == "VIP" for i in status.ingress)
    return [i.ip for i in status.ingress]


def claims(fake: FakeApiServer) -> dict[str, list[str]]:
    return {
        o["metadata"]["name"]: [
            f"{h['namespace']}/{h['name']}"
            for h in json.loads(o["metadata"]["annotations"][HOLDERS_ANNOTATION])
        ]
        for o in fake.objects(IPADDRESSES)
    }


def put_claim(fake: FakeApiServer, address: str, holders: list[dict[str, Any]]) -> None:
    """A claim as an earlier kube-ccm wrote it, holders in its JSON."""
    fake.put_object(
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "IPAddress",
            "metadata": {
                "name": address,
                "labels": {"ipaddress.kubernetes.io/managed-by": "ippool.kube-ccm.io"},
                "annotations": {HOLDERS_ANNOTATION: json.dumps(holders)},
            },
            "spec": {
                "parentRef": {"group": "ippool.kube-ccm.io", "resource": "pools", "name": "global"}
            },
        }
    )


async def test_addresses_come_lowest_first_from_the_namespaces_pool_then_the_global_one() -> None:
    fake = FakeApiServer()
    configmap(fake, range_global="192.0.2.10-192.0.2.11", cidr_team_a="198.51.100.2/31")
    p = await provider(fake)

    assert await ips(p, service(fake, "a")) == ["192.0.2.10"]
    assert await ips(p, service(fake, "b")) == ["192.0.2.11"]
    # Every address of a CIDR, as kube-vip gives them (skip-end-ips-in-cidr: false).
    assert await ips(p, service(fake, "t1", "team-a")) == ["198.51.100.2"]
    assert await ips(p, service(fake, "t2", "team-a")) == ["198.51.100.3"]
    # The /31 has two addresses, the global range two: both are used up.
    with pytest.raises(IPPoolError) as error:
        await ips(p, service(fake, "t3", "team-a"))
    message = str(error.value)
    assert "no free IPv4 address for team-a/t3" in message
    assert "ConfigMap kube-system/kubevip key cidr-team-a (2 addresses)" in message
    assert "range-global (2 addresses) all in use" in message


async def test_ensure_is_idempotent_and_writes_the_address_for_the_announcer() -> None:
    fake = FakeApiServer()
    configmap(fake, range_global="192.0.2.10-192.0.2.20")
    p = await provider(fake)
    svc = service(fake, "web")

    first = await ips(p, svc)
    again = await ips(p, svc)

    assert first == again == ["192.0.2.10"]
    assert claims(fake) == {"192.0.2.10": ["default/web"]}
    web = fake.object("/api/v1/namespaces/default/services/web")
    assert web is not None
    annotations = web["metadata"]["annotations"]
    assert annotations[ADDRESSES_ANNOTATION] == "192.0.2.10"
    status = await p.load_balancer().get_load_balancer("kubernetes", svc)
    assert status is not None
    assert [i.ip for i in status.ingress] == ["192.0.2.10"]


async def test_a_restarted_provider_finds_every_claim_in_the_api() -> None:
    fake = FakeApiServer()
    configmap(fake, range_global="192.0.2.10-192.0.2.20")
    before = await provider(fake)
    services = [service(fake, f"s{i}") for i in range(5)]
    given = [await ips(before, s) for s in services]

    after = await provider(fake)  # a new process: nothing in memory
    assert [await ips(after, s) for s in reversed(services)] == list(reversed(given))
    assert await ips(after, service(fake, "new")) == ["192.0.2.15"]


async def test_a_requested_address_is_honoured_or_refused_with_the_reason() -> None:
    fake = FakeApiServer()
    configmap(fake, range_global="192.0.2.10-192.0.2.20", range_team_a="192.0.2.30-192.0.2.31")
    p = await provider(fake)

    assert await ips(p, service(fake, "a", annotations={ADDRESSES_ANNOTATION: "192.0.2.15"})) == [
        "192.0.2.15"
    ]
    assert await ips(p, service(fake, "b", load_balancer_ip="192.0.2.16")) == ["192.0.2.16"]
    with pytest.raises(IPPoolError, match=r"192.0.2.15 is taken: held by default/a"):
        await ips(p, service(fake, "c", annotations={ADDRESSES_ANNOTATION: "192.0.2.15"}))
    # In no pool, or in another namespace's: the same answer (which pools other
    # namespaces have is theirs to know).
    for name, address in (("d", "203.0.113.5"), ("e", "192.0.2.30")):
        with pytest.raises(IPPoolError) as error:
            await ips(p, service(fake, name, load_balancer_ip=address))
        assert str(error.value) == (
            f"requested address {address} cannot be used: it is not in a pool serving "
            f"Service default/{name} (pools serve by namespace, and LoadBalancerPools also "
            "by spec.serviceAllocation); pools serving it: ConfigMap kube-system/kubevip "
            f"key range-global (11 addresses); kube-vip still announces {address} for this "
            "Service, from its spec.loadBalancerIP (kube-vip reads "
            "kube-vip.io/loadbalancerIPs first, then spec.loadBalancerIP): remove "
            "spec.loadBalancerIP, or change it to a free address of a pool serving "
            "namespace 'default'"
        )
    with pytest.raises(IPPoolError, match=r"'nonsense' is not an IP address"):
        await ips(p, service(fake, "f", annotations={ADDRESSES_ANNOTATION: "nonsense"}))


async def test_a_changed_request_moves_the_service_and_frees_the_old_address() -> None:
    fake = FakeApiServer()
    configmap(fake, range_global="192.0.2.10-192.0.2.20")
    p = await provider(fake)
    assert await ips(p, service(fake, "a")) == ["192.0.2.10"]
    moved = service(fake, "a", annotations={ADDRESSES_ANNOTATION: "192.0.2.19"})
    assert await ips(p, moved) == ["192.0.2.19"]
    assert claims(fake) == {"192.0.2.19": ["default/a"]}


async def test_services_with_one_sharing_key_share_an_address_unless_ports_collide() -> None:
    fake = FakeApiServer()
    configmap(fake, range_global="192.0.2.10-192.0.2.20")
    p = await provider(fake)
    key = {SHARING_KEY_ANNOTATION: "dns"}

    tcp = await ips(p, service(fake, "dns-tcp", ports=(("TCP", 53),), annotations=key))
    udp = await ips(p, service(fake, "dns-udp", ports=(("UDP", 53),), annotations=key))
    assert tcp == udp == ["192.0.2.10"], "TCP and UDP may share one port number"
    assert claims(fake) == {"192.0.2.10": ["default/dns-tcp", "default/dns-udp"]}

    clash = service(
        fake,
        "dns-tcp-2",
        ports=(("TCP", 53),),
        annotations={**key, ADDRESSES_ANNOTATION: "192.0.2.10"},
    )
    with pytest.raises(IPPoolError, match=r"port collision with TCP/53 \(default/dns-tcp\)"):
        await ips(p, clash)
    # Without the explicit request, a colliding key-mate gets an address of its own.
    alone = service(fake, "dns-tcp-3", ports=(("TCP", 53),), annotations=key)
    assert await ips(p, alone) == ["192.0.2.11"]
    stranger = service(fake, "x", annotations={ADDRESSES_ANNOTATION: "192.0.2.10"})
    with pytest.raises(IPPoolError, match=r"give both the same ippool\.kube-ccm\.io/sharing-key"):
        await ips(p, stranger)

    await p.load_balancer().ensure_load_balancer_deleted("kubernetes", clash)
    await p.load_balancer().ensure_load_balancer_deleted(
        "kubernetes", service(fake, "dns-tcp", ports=(("TCP", 53),), annotations=key)
    )
    assert claims(fake)["192.0.2.10"] == ["default/dns-udp"], "the last holder keeps it"


async def test_dual_stack_services_get_one_address_per_family() -> None:
    fake = FakeApiServer()
    configmap(fake, range_global="192.0.2.10-192.0.2.20,2001:db8::10-2001:db8::20")
    p = await provider(fake)
    both = service(fake, "ds", families=("IPv6", "IPv4"), policy="RequireDualStack")
    # The primary family (first of spec.ipFamilies) first, as in spec.clusterIPs.
    assert await ips(p, both) == ["2001:db8::10", "192.0.2.10"]
    v6 = service(fake, "v6", families=("IPv6",))
    assert await ips(p, v6) == ["2001:db8::11"]

    fake4 = FakeApiServer()
    configmap(fake4, range_global="192.0.2.10-192.0.2.20")
    p4 = await provider(fake4)
    prefer = service(fake4, "p", families=("IPv4", "IPv6"), policy="PreferDualStack")
    assert await ips(p4, prefer) == ["192.0.2.10"]
    require = service(fake4, "r", families=("IPv4", "IPv6"), policy="RequireDualStack")
    with pytest.raises(
        IPPoolError, match=r"no pool serving Service default/r \(by its namespace .*\) has IPv6"
    ):
        await ips(p4, require)


async def test_deleting_releases_the_address_for_the_next_service() -> None:
    fake = FakeApiServer()
    configmap(fake, range_global="192.0.2.10-192.0.2.10")
    p = await provider(fake)
    first = service(fake, "first")
    assert await ips(p, first) == ["192.0.2.10"]
    await p.load_balancer().ensure_load_balancer_deleted("kubernetes", first)
    await p.load_balancer().ensure_load_balancer_deleted("kubernetes", first)  # idempotent
    assert claims(fake) == {}
    assert await p.load_balancer().get_load_balancer("kubernetes", first) is None
    stored = fake.object("/api/v1/namespaces/default/services/first")
    assert stored is not None
    annotations = stored["metadata"].get("annotations") or {}
    assert ADDRESSES_ANNOTATION not in annotations
    assert await ips(p, service(fake, "second")) == ["192.0.2.10"]
    owned = await p.load_balancer().list_load_balancers("kubernetes")
    assert [(o.namespace, o.service_name) for o in owned] == [("default", "second")]
    assert await p.load_balancer().list_load_balancers("other-cluster") == ()


async def test_a_claim_from_before_cluster_names_counts_as_the_default_clusters() -> None:
    fake = FakeApiServer()
    configmap(fake, range_global="192.0.2.10-192.0.2.20")
    legacy = {"namespace": "default", "name": "old", "uid": "uid-old", "ports": ["TCP/80"]}
    put_claim(fake, "192.0.2.15", [legacy])
    p = await provider(fake)
    owned = await p.load_balancer().list_load_balancers("kubernetes")
    assert [o.service_name for o in owned] == ["old"]
    assert await p.load_balancer().list_load_balancers("blue") == ()


async def test_two_replicas_and_sixteen_workers_never_give_one_address_twice() -> None:
    fake = FakeApiServer()
    configmap(fake, range_global="192.0.2.0/26")
    replicas = [await provider(fake), await provider(fake)]
    services = [service(fake, f"s{i:02d}") for i in range(60)]
    gate = asyncio.Semaphore(16)

    async def one(i: int, svc: Service) -> list[str]:
        async with gate:
            return await ips(replicas[i % 2], svc)

    given = await asyncio.gather(*(one(i, s) for i, s in enumerate(services)))
    flat = [a for addresses in given for a in addresses]
    assert len(flat) == len(set(flat)) == 60
    assert all(len(h) == 1 for h in claims(fake).values())


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("pools: {range-global: 192.0.2.20-192.0.2.10}", "ends before it starts"),
        ("pools: {cidr-global: 192.0.2.0/33}", "neither a CIDR"),
        ("pools: {range-global: ''}", "is empty"),
        (
            "pools: {cidr-global: 192.0.2.0/28, range-a: 192.0.2.5-192.0.2.6}",
            "pools overlap",
        ),
        ("configMap: kubevip", "`configMap` must be namespace/name"),
        ("pool: {}", "invalid ippool cloud-config"),
    ],
)
def test_bad_pools_are_a_start_up_error_that_names_the_key(text: str, message: str) -> None:
    with pytest.raises(IPPoolConfigError, match=message):
        load_config(text)


async def test_pools_broken_in_the_configmap_are_an_error_for_the_service_not_a_crash() -> None:
    fake = FakeApiServer()
    configmap(fake, range_global="192.0.2.10-192.0.2.20", range_a="192.0.2.15-192.0.2.16")
    p = await provider(fake)
    # The namespace's pool overlaps the global one: it stops, the global one serves on.
    invalid = "the pool serving namespace 'a' is invalid: pools overlap"
    with pytest.raises(IPPoolError, match=invalid):
        await ips(p, service(fake, "web", "a"))
    assert await ips(p, service(fake, "web")) == ["192.0.2.10"]

    empty = await provider(FakeApiServer())
    with pytest.raises(
        IPPoolError,
        match=r"no address pools: create a LoadBalancerPool \(ippool.kube-ccm.io/v1alpha1\), "
        "or the ConfigMap kube-system/",
    ):
        await ips(empty, service(FakeApiServer(), "web"))


# -- tenants: one namespace never reaches another's address (issue 29) ------------------

WEB = {SHARING_KEY_ANNOTATION: "web"}


def holders_text(fake: FakeApiServer) -> str:
    return " ".join(
        o["metadata"]["annotations"][HOLDERS_ANNOTATION] for o in fake.objects(IPADDRESSES)
    )


async def refusal(p: IPPoolProvider, svc: Service) -> str:
    with pytest.raises(IPPoolError) as error:
        await ips(p, svc)
    return str(error.value)


def assert_discloses_nothing_of_team_b(message: str) -> None:
    for secret in ("team-b", "b1", "b2", "443", "8443", "web", "range-team-b", "allow-share"):
        assert secret not in message, (secret, message)


async def test_a_guessed_sharing_key_does_not_join_another_namespaces_address() -> None:
    fake = FakeApiServer()
    configmap(fake, range_global="192.0.2.10-192.0.2.20")
    p = await provider(fake)
    assert await ips(p, service(fake, "b1", "team-b", ports=(("TCP", 443),), annotations=WEB)) == [
        "192.0.2.10"
    ]

    # The key alone: team-a gets an address of its own.
    assert await ips(p, service(fake, "a1", "team-a", annotations=WEB)) == ["192.0.2.11"]
    # The key with spec.loadBalancerIP, and MetalLB's key with the address annotation.
    with_ip = service(fake, "a2", "team-a", annotations=WEB, load_balancer_ip="192.0.2.10")
    assert_discloses_nothing_of_team_b(await refusal(p, with_ip))
    metallb = service(
        fake,
        "a3",
        "team-a",
        annotations={
            "metallb.universe.tf/allow-shared-ip": "web",
            ADDRESSES_ANNOTATION: "192.0.2.10",
        },
    )
    message = await refusal(p, metallb)
    assert "192.0.2.10 is taken" in message
    assert_discloses_nothing_of_team_b(message)
    assert claims(fake)["192.0.2.10"] == ["team-b/b1"]


async def test_a_metallb_key_refused_across_namespaces_is_told_metallb_s_rule_and_the_opt_in() -> (
    None
):
    """Issue 39 item 5: MetalLB shares by key alone, ippool across namespaces only with
    both sides' opt-in; the refusal says so and names the annotation, and reads the
    same whether the holder has that key or not (it confirms no key)."""
    fake = FakeApiServer()
    configmap(fake, range_global="192.0.2.10-192.0.2.20")
    p = await provider(fake)
    metallb = {"metallb.universe.tf/allow-shared-ip": "web"}
    b1 = service(fake, "b1", "team-b", ports=(("TCP", 443),), annotations=metallb)
    assert await ips(p, b1) == ["192.0.2.10"]
    assert await ips(p, service(fake, "b2", "team-b", ports=(("TCP", 444),))) == ["192.0.2.11"]
    messages = []
    for name, address in (("a1", "192.0.2.10"), ("a2", "192.0.2.11")):
        asking = service(
            fake, name, "team-a", annotations={**metallb, ADDRESSES_ANNOTATION: address}
        )
        message = await refusal(p, asking)
        assert_discloses_nothing_of_team_b(message)
        assert "MetalLB shares an address by sharing key alone" in message
        assert "ippool.kube-ccm.io/sharing-cross-namespace: if a Service of another" in message
        messages.append(message.replace(address, "X"))
    assert messages[0] == messages[1]
    # No key, no hint: nothing to opt in to.
    plain = service(fake, "a3", "team-a", annotations={ADDRESSES_ANNOTATION: "192.0.2.10"})
    assert "sharing-cross-namespace" not in await refusal(p, plain)


async def test_the_implicit_allow_share_key_cannot_be_spoofed_by_an_annotation() -> None:
    fake = FakeApiServer()
    configmap(
        fake,
        range_global="192.0.2.10-192.0.2.20",
        range_team_b="198.51.100.1-198.51.100.1",
        allow_share_team_b="true",
    )
    p = await provider(fake)
    https = (("TCP", 443),)
    assert await ips(p, service(fake, "b0", "team-b", ports=https)) == ["198.51.100.1"]
    # team-b's pool is full for port 443: b1 gets a global address, shared by pool rule.
    assert await ips(p, service(fake, "b1", "team-b", ports=https)) == ["192.0.2.10"]
    spoof = {SHARING_KEY_ANNOTATION: "kube-vip allow-share team-b"}
    assert await ips(p, service(fake, "a1", "team-a", annotations=spoof)) == ["192.0.2.11"]
    requested = service(
        fake, "a2", "team-a", annotations={**spoof, ADDRESSES_ANNOTATION: "192.0.2.10"}
    )
    assert_discloses_nothing_of_team_b(await refusal(p, requested))
    # team-b's own Services still share under the pool's rule.
    b2 = service(
        fake,
        "b2",
        "team-b",
        ports=(("TCP", 8443),),
        annotations={ADDRESSES_ANNOTATION: "192.0.2.10"},
    )
    assert await ips(p, b2) == ["192.0.2.10"]
    assert claims(fake)["192.0.2.10"] == ["team-b/b1", "team-b/b2"]


async def test_a_released_address_goes_back_to_its_namespace_not_to_a_joiner() -> None:
    fake = FakeApiServer()
    configmap(fake, range_global="192.0.2.10-192.0.2.20")
    p = await provider(fake)
    b1 = service(fake, "b1", "team-b", ports=(("TCP", 443),), annotations=WEB)
    assert await ips(p, b1) == ["192.0.2.10"]
    for i in range(3):  # tries to join, and is given other addresses
        assert await ips(p, service(fake, f"a{i}", "team-a", annotations=WEB)) != ["192.0.2.10"]

    await p.load_balancer().ensure_load_balancer_deleted("kubernetes", b1)
    b2 = service(fake, "b2", "team-b", ports=(("TCP", 443),), load_balancer_ip="192.0.2.10")
    assert await ips(p, b2) == ["192.0.2.10"]
    assert claims(fake)["192.0.2.10"] == ["team-b/b2"]


async def test_cross_namespace_sharing_needs_both_sides_to_name_each_other() -> None:
    fake = FakeApiServer()
    configmap(fake, range_global="192.0.2.10-192.0.2.20")
    p = await provider(fake)
    ours = "ippool.kube-ccm.io/sharing-cross-namespace"
    cilium = "lbipam.cilium.io/sharing-cross-namespace"
    b1 = service(fake, "b1", "team-b", ports=(("TCP", 443),), annotations={**WEB, ours: "team-a"})
    assert await ips(p, b1) == ["192.0.2.10"]
    # team-c is not named by team-b: no join, even with its own wildcard.
    c1 = service(fake, "c1", "team-c", annotations={**WEB, ours: "*"})
    assert await ips(p, c1) == ["192.0.2.11"]
    # team-a names team-b (Cilium's annotation, a list): joins.
    a1 = service(fake, "a1", "team-a", annotations={**WEB, cilium: "team-x, team-b"})
    assert await ips(p, a1) == ["192.0.2.10"]
    assert claims(fake)["192.0.2.10"] == ["team-b/b1", "team-a/a1"]

    # The owner's last Service leaves: the guest loses the address and its annotation,
    # so the announcer stops announcing it for team-a and a1 is synced again.
    await p.load_balancer().ensure_load_balancer_deleted("kubernetes", b1)
    assert "192.0.2.10" not in claims(fake)
    stored = fake.object("/api/v1/namespaces/team-a/services/a1")
    assert stored is not None
    assert ADDRESSES_ANNOTATION not in (stored["metadata"].get("annotations") or {})
    assert await p.load_balancer().get_load_balancer("kubernetes", a1) is None


async def test_the_owning_namespace_takes_a_port_a_guest_holds_on_its_address() -> None:
    fake = FakeApiServer()
    configmap(fake, range_global="192.0.2.10-192.0.2.20")
    p = await provider(fake)
    ours = "ippool.kube-ccm.io/sharing-cross-namespace"
    b1 = service(fake, "b1", "team-b", ports=(("TCP", 443),), annotations={**WEB, ours: "team-a"})
    assert await ips(p, b1) == ["192.0.2.10"]
    a1 = service(fake, "a1", "team-a", ports=(("TCP", 80),), annotations={**WEB, ours: "team-b"})
    assert await ips(p, a1) == ["192.0.2.10"]
    # team-b adds port 80: the guest squatting on it gives way.
    grown = service(
        fake, "b1", "team-b", ports=(("TCP", 443), ("TCP", 80)), annotations={**WEB, ours: "team-a"}
    )
    assert await ips(p, grown) == ["192.0.2.10"]
    assert claims(fake)["192.0.2.10"] == ["team-b/b1"]
    # A guest cannot take the owner's port, and is told no more than "taken".
    a2 = service(
        fake,
        "a2",
        "team-a",
        ports=(("TCP", 443),),
        annotations={**WEB, ours: "team-b", ADDRESSES_ANNOTATION: "192.0.2.10"},
    )
    assert_discloses_nothing_of_team_b(await refusal(p, a2))


async def test_claims_do_not_show_sharing_keys_and_old_claims_are_scrubbed() -> None:
    fake = FakeApiServer()
    configmap(fake, range_global="192.0.2.10-192.0.2.20")
    owner = {
        "namespace": "team-b",
        "name": "old",
        "uid": "uid-team-b-old",
        "ports": ["TCP/443"],
        "sharingKey": "s3cret-key",
    }
    # Joined by key alone before namespaces counted: loses it on upgrade.
    intruder = {**owner, "namespace": "team-a", "name": "in", "uid": "uid-team-a-in", "ports": []}
    written = {ADDRESSES_ANNOTATION: "192.0.2.15", ALLOCATED_ANNOTATION: "192.0.2.15"}
    service(fake, "in", "team-a", annotations=written)
    legacy = [owner, intruder]
    put_claim(fake, "192.0.2.15", legacy)
    p = await provider(fake)
    key = {SHARING_KEY_ANNOTATION: "s3cret-key"}
    assert await p.load_balancer().list_load_balancers("kubernetes")  # loads the index
    assert claims(fake) == {"192.0.2.15": ["team-b/old"]}
    assert "s3cret" not in holders_text(fake)
    evicted = fake.object("/api/v1/namespaces/team-a/services/in")
    assert evicted is not None
    assert ADDRESSES_ANNOTATION not in evicted["metadata"]["annotations"]
    mate = service(fake, "new", "team-b", annotations={**key, ADDRESSES_ANNOTATION: "192.0.2.15"})
    assert await ips(p, mate) == ["192.0.2.15"], "an old claim's key still matches"
    other = service(fake, "other", "team-b", ports=(("TCP", 81),), annotations=key)
    assert await ips(p, other) == ["192.0.2.15"]
    assert "s3cret" not in holders_text(fake)


async def test_a_huge_annotation_is_refused_without_being_echoed() -> None:
    fake = FakeApiServer()
    configmap(fake, range_global="192.0.2.10-192.0.2.20")
    p = await provider(fake)
    huge = "x" * 200_000
    for given in (
        {SHARING_KEY_ANNOTATION: huge},
        {ADDRESSES_ANNOTATION: huge},
        {"ippool.kube-ccm.io/sharing-cross-namespace": huge},
    ):
        key = next(iter(given))
        message = await refusal(p, service(fake, "big", annotations=given))
        assert len(message) < 400, message
        assert key in message
        assert "limit" in message
    message = await refusal(
        p, service(fake, "bad", annotations={ADDRESSES_ANNOTATION: "1.2.3.4," + "\x1b" * 5000})
    )
    assert len(message) < 400
    assert "\x1b" not in message


async def test_a_namespace_cap_limits_new_addresses_not_sharing() -> None:
    fake = FakeApiServer()
    configmap(fake, range_global="192.0.2.10-192.0.2.50")
    p = await provider(fake, "namespaceLimit: 2\nnamespaceLimits: {team-big: 3}")
    assert await ips(p, service(fake, "a1", "team-a", annotations=WEB)) == ["192.0.2.10"]
    assert await ips(p, service(fake, "a2", "team-a")) == ["192.0.2.11"]
    message = await refusal(p, service(fake, "a3", "team-a"))
    assert "namespace 'team-a' already holds 2" in message
    assert "namespaceLimit" in message
    # Joining an address the namespace holds costs nothing; other namespaces go on.
    assert await ips(p, service(fake, "a4", "team-a", ports=(("TCP", 81),), annotations=WEB)) == [
        "192.0.2.10"
    ]
    assert await ips(p, service(fake, "b1", "team-b")) == ["192.0.2.12"]
    for i in range(3):
        await ips(p, service(fake, f"big{i}", "team-big"))
    assert "holds 3" in await refusal(p, service(fake, "big3", "team-big"))


@pytest.mark.parametrize(
    "pool",
    ["127.0.0.1/32", "169.254.169.250-169.254.169.255", "224.0.0.1", "0.0.0.0/7", "fe80::/64"],
)
def test_a_pool_may_not_hold_loopback_link_local_or_multicast(pool: str) -> None:
    with pytest.raises(IPPoolConfigError, match="which no load balancer may use"):
        load_config(
            f"pools: {{cidr-global: '{pool}'}}"
            if "/" in pool
            else f"pools: {{range-global: '{pool}'}}"
        )


async def test_another_managers_ipaddress_is_taken_and_never_written() -> None:
    fake = FakeApiServer()
    configmap(fake, range_global="192.0.2.10-192.0.2.11")
    labels = {"ipaddress.kubernetes.io/managed-by": "ipallocator.k8s.io"}
    cluster_ip: dict[str, Any] = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "IPAddress",
        "metadata": {
            "name": "192.0.2.10",
            "labels": labels,
        },
        "spec": {
            "parentRef": {"group": "", "resource": "services", "namespace": "team-b", "name": "db"}
        },
    }
    fake.put_object(cluster_ip)
    p = await provider(fake)
    message = await refusal(p, service(fake, "a1", "team-a", load_balancer_ip="192.0.2.10"))
    assert message == (
        "requested address 192.0.2.10 is taken; kube-vip still announces 192.0.2.10 for "
        "this Service, from its spec.loadBalancerIP (kube-vip reads "
        "kube-vip.io/loadbalancerIPs first, then spec.loadBalancerIP): remove "
        "spec.loadBalancerIP, or change it to a free address of a pool serving "
        "namespace 'team-a'"
    )
    assert await ips(p, service(fake, "a2", "team-a", annotations=WEB)) == ["192.0.2.11"]
    stored = fake.object(f"{IPADDRESSES}/192.0.2.10")
    assert stored is not None
    assert stored["metadata"]["labels"] == labels
    assert HOLDERS_ANNOTATION not in (stored["metadata"].get("annotations") or {})


def test_the_annotations_ippool_reads_are_declared_for_the_webhook() -> None:
    declared = IPPoolProvider(load_config(None)).load_balancer().service_annotations
    good = {
        ADDRESSES_ANNOTATION: "192.0.2.10,2001:db8::1",
        SHARING_KEY_ANNOTATION: "web",
        "ippool.kube-ccm.io/sharing-cross-namespace": "team-a, team-b",
        "lbipam.cilium.io/sharing-cross-namespace": "*",
    }
    assert problems(declared, good) == []
    bad = {
        ADDRESSES_ANNOTATION: "192.0.2.10,192.0.2.11",
        SHARING_KEY_ANNOTATION: "k" * 254,
        "ippool.kube-ccm.io/sharing-cross-namespace": "Team_A",
        "metallb.universe.tf/allow-shared-ip": "m" * 300_000,
    }
    found = problems(declared, bad)
    assert len(found) == 4
    assert all(len(p) < 300 for p in found), found
    assert any("asks for 2 IPv4 addresses" in p for p in found)
    assert any("'Team_A' is not a namespace name" in p for p in found)


async def test_a_service_at_its_namespaces_cap_can_still_move() -> None:
    fake = FakeApiServer()
    configmap(fake, range_global="192.0.2.10-192.0.2.50")
    p = await provider(fake, "namespaceLimit: 1")
    assert await ips(p, service(fake, "a1", "team-a")) == ["192.0.2.10"]
    moved = service(fake, "a1", "team-a", annotations={ADDRESSES_ANNOTATION: "192.0.2.40"})
    assert await ips(p, moved) == ["192.0.2.40"]
    assert claims(fake) == {"192.0.2.40": ["team-a/a1"]}
    assert "already holds 1" in await refusal(p, service(fake, "a2", "team-a"))
    await p.load_balancer().ensure_load_balancer_deleted("kubernetes", moved)
    assert await ips(p, service(fake, "a2", "team-a")) == ["192.0.2.10"]
