"""Defects an operator moving off kube-vip-cloud-provider found (issue 28, item 6),
each pinned here: no .0/.255 handed out, a bad pool stops only the Services it
serves, a sharing key that cannot share says why, addresses left outside a shrunk
pool are flagged, ``allow-share-<ns>`` works without a pool of the namespace's own,
and a refused request says that kube-vip still announces it."""

from __future__ import annotations

import asyncio
import ipaddress
import logging

import pytest

from kube_ccm.api.objects import ObjectMeta, Service, ServicePort, ServiceSpec
from kube_ccm.controllers.cloudcalls import CloudCalls, guard
from kube_ccm.controllers.service import needs_update
from kube_ccm.providers.ippool import (
    ADDRESSES_ANNOTATION,
    SHARING_KEY_ANNOTATION,
    IPPoolError,
    IPPoolProvider,
    factory,
    load_config,
)
from kube_ccm.providers.ippool.annotations import ALLOCATED_ANNOTATION
from kube_ccm.providers.ippool.kubevip import pools_from_kubevip
from kube_ccm.providers.ippool.loadbalancer import count, describe_pools
from kube_ccm.providers.ippool.pools import FreeIndex
from kube_ccm.runtime.metrics import Metrics
from kube_ccm.runtime.transport import Request, Response
from kube_ccm.testing.events import FakeEventRecorder
from kube_ccm.testing.fakeapi import FakeApiServer, FakeClientBuilder

WHERE = "ConfigMap kube-system/kubevip"


def configmap(fake: FakeApiServer, data: dict[str, str]) -> None:
    fake.put_object(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "kubevip", "namespace": "kube-system"},
            "data": dict(data),
        }
    )


async def provider(fake: FakeApiServer) -> tuple[IPPoolProvider, FakeEventRecorder]:
    p = factory(None)
    await p.initialize(FakeClientBuilder(fake), asyncio.Event())
    recorder = FakeEventRecorder()
    p.recorder = recorder
    return p, recorder


def service(
    fake: FakeApiServer,
    name: str,
    namespace: str = "default",
    *,
    ports: tuple[tuple[str, int], ...] = (("TCP", 80),),
    annotations: dict[str, str] | None = None,
    load_balancer_ip: str = "",
) -> Service:
    uid = f"uid-{namespace}-{name}"
    fake.put_object(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": uid,
                "annotations": annotations or {},
            },
            "spec": {"type": "LoadBalancer"},
        }
    )
    return Service(
        metadata=ObjectMeta(name=name, namespace=namespace, uid=uid, annotations=annotations or {}),
        spec=ServiceSpec(
            type="LoadBalancer",
            ports=tuple(ServicePort(protocol=p, port=n) for p, n in ports),
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


# -- network and broadcast addresses -------------------------------------------------


@pytest.mark.parametrize(
    ("data", "taken", "expected"),
    [
        # kube-vip-cloud-provider's pkg/ipam/ipam_test.go, TestFindAvailableHostFromCIDR:
        # "simple cidr, cidr contains .0 and .255" (and its reverse order).
        ({"cidr-global": "192.168.0.10/24"}, set(), "192.168.0.1"),
        ({"cidr-global": "192.168.0.10/24", "search-order": "desc"}, set(), "192.168.0.254"),
        # TestFindAvailableHostFromRange, "single range, across third octet" (both orders).
        (
            {"range-global": "192.168.0.253-192.168.1.2"},
            {"192.168.0.253", "192.168.0.254"},
            "192.168.1.1",
        ),
        (
            {"range-global": "192.168.0.253-192.168.1.2", "search-order": "desc"},
            {"192.168.1.1", "192.168.1.2"},
            "192.168.0.254",
        ),
        # The operator's trial: a range across .255/.0 gave .2.0, then .1.255.
        ({"range-global": "192.168.1.254-192.168.2.1"}, {"192.168.1.254"}, "192.168.2.1"),
        # IPv6 has no such addresses: fe80::ff00-style ends are ordinary.
        ({"range-global": "2001:db8::ff-2001:db8::100"}, set(), "2001:db8::ff"),
    ],
)
def test_no_ipv4_address_ending_in_0_or_255_is_handed_out_as_kube_vip(
    data: dict[str, str], taken: set[str], expected: str
) -> None:
    [pool] = pools_from_kubevip(data, WHERE)
    family = "IPv6" if ":" in expected else "IPv4"
    assert str(pool.free(family, lambda a: str(a) in taken)) == expected


async def test_a_range_across_a_dot_255_is_exhausted_without_dot_0_or_dot_255() -> None:
    fake = FakeApiServer()
    configmap(fake, {"range-global": "192.168.1.254-192.168.2.1"})
    p, _ = await provider(fake)
    got = [await ip(p, service(fake, f"s{i}")) for i in range(2)]
    assert got == ["192.168.1.254", "192.168.2.1"]
    message = await refusal(p, service(fake, "third"))
    assert "no free IPv4 address" in message


async def test_a_requested_dot_0_address_is_still_honoured() -> None:
    fake = FakeApiServer()
    configmap(fake, {"range-global": "192.168.1.254-192.168.2.1"})
    p, _ = await provider(fake)
    svc = service(fake, "asks", annotations={ADDRESSES_ANNOTATION: "192.168.2.0"})
    assert await ip(p, svc) == "192.168.2.0"


# -- one bad pool stops only itself --------------------------------------------------


async def test_one_namespaces_malformed_key_stops_only_that_namespace() -> None:
    fake = FakeApiServer()
    configmap(
        fake,
        {
            "range-team-e": "10.50.0.1O-10.50.0.20",  # a letter O, as in the trial
            "range-team-a": "10.10.0.1-10.10.0.9",
            "range-global": "10.90.0.1-10.90.0.9",
        },
    )
    p, _ = await provider(fake)
    assert await ip(p, service(fake, "web", "team-a")) == "10.10.0.1"
    assert await ip(p, service(fake, "web", "default")) == "10.90.0.1"
    message = await refusal(p, service(fake, "web", "team-e"))
    assert "range-team-e" in message
    assert "10.50.0.1O" in message


async def test_a_namespace_pool_overlapping_the_global_one_stops_that_namespace_only() -> None:
    fake = FakeApiServer()
    configmap(fake, {"range-global": "192.0.2.10-192.0.2.20", "range-a": "192.0.2.15-192.0.2.16"})
    p, _ = await provider(fake)
    assert await ip(p, service(fake, "web", "default")) == "192.0.2.10"
    assert "pools overlap" in await refusal(p, service(fake, "web", "a"))


async def test_a_malformed_global_pool_stops_the_namespaces_without_a_pool_of_their_own() -> None:
    fake = FakeApiServer()
    configmap(fake, {"cidr-global": "10.90.0.0/33", "range-team-a": "10.10.0.1-10.10.0.9"})
    p, _ = await provider(fake)
    assert await ip(p, service(fake, "web", "team-a")) == "10.10.0.1"
    assert "cidr-global" in await refusal(p, service(fake, "web", "default"))


# -- sharing keys that cannot share ---------------------------------------------------


async def test_a_sharing_key_collision_is_a_warning_saying_why() -> None:
    fake = FakeApiServer()
    configmap(fake, {"range-global": "192.0.2.10-192.0.2.20"})
    p, recorder = await provider(fake)
    key = {SHARING_KEY_ANNOTATION: "web"}
    first = await ip(p, service(fake, "a", annotations=key))
    second = await ip(p, service(fake, "b", annotations=key))
    assert first != second  # both on TCP/80: they cannot share
    [event] = recorder.events
    assert (event.ref.name, event.type) == ("b", "Warning")
    assert "TCP/80" in event.message
    assert "default/a" in event.message
    assert "web" not in event.message.replace("default/a", "")  # the key itself stays secret
    # A third with another port joins the first address, with no Warning.
    third = await ip(p, service(fake, "c", annotations=key, ports=(("TCP", 443),)))
    assert third == first
    assert len(recorder.events) == 1


async def test_a_collision_with_another_namespace_names_nothing_of_it() -> None:
    fake = FakeApiServer()
    configmap(fake, {"range-global": "192.0.2.10-192.0.2.20"})
    p, recorder = await provider(fake)
    cross = {SHARING_KEY_ANNOTATION: "web", "ippool.kube-ccm.io/sharing-cross-namespace": "*"}
    await ip(p, service(fake, "secret-svc", "team-b", annotations=cross))
    await ip(p, service(fake, "a", "team-a", annotations=cross))
    [event] = recorder.events
    assert event.ref.namespace == "team-a"
    assert "team-b" not in event.message
    assert "secret-svc" not in event.message


# -- a pool shrunk under addresses in use ---------------------------------------------


async def test_addresses_left_outside_a_shrunk_pool_are_kept_and_each_flagged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = FakeApiServer()
    configmap(fake, {"range-global": "192.0.2.10-192.0.2.20"})
    p, recorder = await provider(fake)
    services = [service(fake, f"s{i}") for i in range(3)]
    # One asks for its address (as a Service moved from kube-vip-cloud-provider does).
    services.append(service(fake, "s3", annotations={ADDRESSES_ANNOTATION: "192.0.2.13"}))
    got = [await ip(p, s) for s in services]
    assert got == ["192.0.2.10", "192.0.2.11", "192.0.2.12", "192.0.2.13"]
    configmap(fake, {"range-global": "192.0.2.10-192.0.2.11,192.0.2.30-192.0.2.31"})
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="kube_ccm.providers.ippool"):
        newcomer = await ip(p, service(fake, "new"))
        again = [await ip(p, s) for s in services]  # resyncs keep the addresses
    logged = [r.getMessage() for r in caplog.records]
    assert newcomer == "192.0.2.30"
    assert again == got
    flagged = {e.ref.name: e.message for e in recorder.events if e.type == "Warning"}
    assert sorted(flagged) == ["s2", "s3"]
    assert "192.0.2.12" in flagged["s2"]
    assert "outside every pool" in flagged["s2"]
    assert sum("192.0.2.12" in m and "outside every pool" in m for m in logged) == 1
    assert sum("192.0.2.13" in m and "outside every pool" in m for m in logged) == 1


# -- allow-share for a namespace without a pool ---------------------------------------


async def test_allow_share_for_a_namespace_on_the_global_pool_shares_as_kube_vip() -> None:
    fake = FakeApiServer()
    configmap(fake, {"range-global": "192.0.2.10-192.0.2.20", "allow-share-team-x": "true"})
    p, _ = await provider(fake)
    got = [
        await ip(p, service(fake, f"s{i}", "team-x", ports=(("TCP", 8000 + i),))) for i in range(3)
    ]
    assert got == ["192.0.2.10"] * 3
    # Other namespaces on the global pool do not share (allow-share-global is unset),
    # and never join team-x's address.
    other = [
        await ip(p, service(fake, f"s{i}", "team-y", ports=(("TCP", 9000 + i),))) for i in range(2)
    ]
    assert other == ["192.0.2.11", "192.0.2.12"]


# -- a refused request stays where kube-vip reads it ----------------------------------


async def test_a_refused_request_says_kube_vip_still_announces_it_and_what_to_change() -> None:
    fake = FakeApiServer()
    configmap(fake, {"range-global": "10.30.0.10-10.30.0.20"})
    p, _ = await provider(fake)
    await ip(p, service(fake, "first", annotations={ADDRESSES_ANNOTATION: "10.30.0.10"}))
    message = await refusal(
        p, service(fake, "second", annotations={ADDRESSES_ANNOTATION: "10.30.0.10"})
    )
    assert "kube-vip still announces 10.30.0.10" in message
    assert f"remove {ADDRESSES_ANNOTATION}" in message
    outside = await refusal(p, service(fake, "third", load_balancer_ip="10.99.0.1"))
    assert "kube-vip still announces 10.99.0.1" in outside
    assert "spec.loadBalancerIP" in outside


# -- one sync per Service (issue 28, item 4) ------------------------------------------


def test_the_providers_own_annotation_write_needs_no_second_sync() -> None:
    def svc(annotations: dict[str, str], ip: str = "") -> Service:
        return Service(
            metadata=ObjectMeta(name="s", namespace="default", uid="u", annotations=annotations),
            spec=ServiceSpec(type="LoadBalancer", load_balancer_ip=ip),
        )

    # As the daemon sees it: through the cloud-call boundary, which forwards only the
    # LoadBalancer contract.
    guarded = guard(IPPoolProvider(load_config(None)), CloudCalls("ippool", Metrics()))
    balancer = guarded.load_balancer()
    assert balancer is not None
    own = balancer.own_annotation_write
    written = {ADDRESSES_ANNOTATION: "192.0.2.10", ALLOCATED_ANNOTATION: "192.0.2.10"}
    assert not needs_update(svc({}), svc(written), own_write=own)
    assert needs_update(svc({}), svc(written))  # upstream's rule, for other providers
    # A request, recorded as given: still only the provider's write.
    asked = {ADDRESSES_ANNOTATION: "192.0.2.10"}
    assert not needs_update(svc(asked), svc(written), own_write=own)
    # The user's edits, an eviction (both removed), or any other annotation: a sync.
    moved = {**written, ADDRESSES_ANNOTATION: "192.0.2.11"}
    assert needs_update(svc(written), svc(moved), own_write=own)
    assert needs_update(svc(written), svc({}), own_write=own)
    assert needs_update(svc(written), svc({**written, "x": "y"}), own_write=own)
    assert needs_update(svc(written), svc(written, "192.0.2.12"), own_write=own)


class SlowApiServer(FakeApiServer):
    """Each request takes a moment, as on the wire: concurrent syncs interleave."""

    async def send(self, request: Request) -> Response:
        await asyncio.sleep(0.001)
        return await super().send(request)


async def test_services_of_one_key_created_at_once_still_share_without_a_global_lock() -> None:
    fake = SlowApiServer()
    configmap(fake, {"range-global": "192.0.2.10-192.0.2.20"})
    p, _ = await provider(fake)
    key = {SHARING_KEY_ANNOTATION: "dns"}
    tcp = service(fake, "dns-tcp", annotations=key, ports=(("TCP", 53),))
    udp = service(fake, "dns-udp", annotations=key, ports=(("UDP", 53),))
    others = [service(fake, f"other-{i}") for i in range(6)]
    got = await asyncio.gather(ip(p, tcp), ip(p, udp), *(ip(p, s) for s in others))
    assert got[0] == got[1]
    assert len(set(got)) == 7  # the six others: an address each, none twice


@pytest.mark.parametrize("order", ["asc", "desc"])
def test_the_free_index_agrees_with_a_scan_through_claims_and_releases(order: str) -> None:
    data = {"range-global": "10.0.0.250-10.0.1.5,10.0.3.0-10.0.3.3", "search-order": order}
    [pool] = pools_from_kubevip(data, WHERE)
    index = FreeIndex(pool, "IPv4")
    taken: set[str] = set()

    def is_taken(address: object) -> bool:
        return str(address) in taken

    for step in range(40):
        expected = pool.free("IPv4", is_taken)
        assert index.next_free(is_taken) == expected
        if expected is None:
            break
        taken.add(str(expected))
        if step % 3 == 2:  # release one taken earlier: it comes back first
            back = sorted(taken)[len(taken) // 2]
            taken.discard(back)
            index.release(ipaddress.ip_address(back))
    assert index.next_free(is_taken) is None


# -- messages a migrating user reads (issue 39 items 7 and 8) ----------------------------


async def test_an_address_left_out_by_skip_end_ips_in_cidr_is_told_so() -> None:
    """Not "outside every pool": inside a CIDR, but its first or last address."""
    fake = FakeApiServer()
    configmap(fake, {"cidr-global": "192.0.2.0/29"})
    p, recorder = await provider(fake)
    asked = service(fake, "edge", annotations={ADDRESSES_ANNOTATION: "192.0.2.7"})
    assert await ip(p, asked) == "192.0.2.7"
    configmap(fake, {"cidr-global": "192.0.2.0/29", "skip-end-ips-in-cidr": "true"})
    assert await ip(p, service(fake, "other")) == "192.0.2.1"
    [message] = [e.message for e in recorder.events if e.reason == "AddressOutsidePools"]
    assert message.startswith(
        "its address 192.0.2.7 is in 192.0.2.0/29 of ConfigMap kube-system/kubevip key "
        "cidr-global, but as the first or last address of that CIDR it is left out by "
        "skip-end-ips-in-cidr; it keeps it"
    ), message


async def test_0_0_0_0_is_told_as_kube_vip_s_dhcp_mode_not_as_an_announced_address() -> None:
    fake = FakeApiServer()
    configmap(fake, {"range-global": "192.0.2.10-192.0.2.20"})
    p, _ = await provider(fake)
    with pytest.raises(IPPoolError) as error:
        await ip(p, service(fake, "dhcp", load_balancer_ip="0.0.0.0"))
    message = str(error.value)
    assert "0.0.0.0 is kube-vip's DHCP mode: kube-vip still asks a DHCP server" in message
    assert "announces" not in message


def test_pool_sizes_are_told_per_family_and_readably() -> None:
    both = pools_from_kubevip({"cidr-global": "192.0.2.0/24,2001:db8::/64"}, "ConfigMap x")
    assert describe_pools(both) == ("ConfigMap x key cidr-global (256 IPv4, 2^64 IPv6 addresses)")
    assert describe_pools(both, "IPv6") == "ConfigMap x key cidr-global (2^64 addresses)"
    assert count(999_999_999) == "999999999"
    assert count((1 << 64) + 390) == "more than 2^64"
