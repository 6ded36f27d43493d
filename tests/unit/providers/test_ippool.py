"""The ippool provider on the in-memory API server: allocation, requests, sharing,
dual-stack, exhaustion, release, and no address given twice under concurrency."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from kube_ccm.api.objects import ObjectMeta, Service, ServicePort, ServiceSpec
from kube_ccm.providers.ippool import (
    ADDRESSES_ANNOTATION,
    SHARING_KEY_ANNOTATION,
    IPPoolConfigError,
    IPPoolError,
    IPPoolProvider,
    factory,
    load_config,
)
from kube_ccm.providers.ippool.claims import HOLDERS_ANNOTATION, IPADDRESSES
from kube_ccm.testing.fakeapi import FakeApiServer

CM = "/api/v1/namespaces/kube-system/configmaps/kubevip"


class Builder:
    def __init__(self, fake: FakeApiServer) -> None:
        self.fake = fake

    def client(self, name: str) -> Any:
        return self.fake.client()

    def config(self, name: str) -> Any:
        raise NotImplementedError


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
    await p.initialize(Builder(fake), asyncio.Event())
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


async def test_addresses_come_lowest_first_from_the_namespaces_pool_then_the_global_one() -> None:
    fake = FakeApiServer()
    configmap(fake, range_global="192.0.2.10-192.0.2.11", cidr_team_a="198.51.100.0/31")
    p = await provider(fake)

    assert await ips(p, service(fake, "a")) == ["192.0.2.10"]
    assert await ips(p, service(fake, "b")) == ["192.0.2.11"]
    # Every address of a CIDR, as kube-vip gives them (skip-end-ips-in-cidr: false).
    assert await ips(p, service(fake, "t1", "team-a")) == ["198.51.100.0"]
    assert await ips(p, service(fake, "t2", "team-a")) == ["198.51.100.1"]
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
    with pytest.raises(IPPoolError, match=r"203.0.113.5 cannot be used: it is in no pool"):
        await ips(p, service(fake, "d", load_balancer_ip="203.0.113.5"))
    with pytest.raises(IPPoolError, match=r"belongs to .*range-team-a, which does not serve"):
        await ips(p, service(fake, "e", load_balancer_ip="192.0.2.30"))
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
    with pytest.raises(IPPoolError, match="no pool serving namespace 'default' has IPv6"):
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
    fake.put_object(
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "IPAddress",
            "metadata": {
                "name": "192.0.2.15",
                "labels": {"ipaddress.kubernetes.io/managed-by": "ippool.kube-ccm.io"},
                "annotations": {HOLDERS_ANNOTATION: json.dumps([legacy])},
            },
            "spec": {
                "parentRef": {"group": "ippool.kube-ccm.io", "resource": "pools", "name": "global"}
            },
        }
    )
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
    with pytest.raises(IPPoolError, match="the pools are invalid: pools overlap"):
        await ips(p, service(fake, "web"))

    empty = await provider(FakeApiServer())
    with pytest.raises(IPPoolError, match="no address pools: create the ConfigMap kube-system/"):
        await ips(empty, service(FakeApiServer(), "web"))
