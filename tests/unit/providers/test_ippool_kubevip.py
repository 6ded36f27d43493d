"""kube-vip-cloud-provider's ConfigMap format: its documentation's own examples, read
verbatim, give the pools it describes; namespace and global pools; sharing; and a
malformed value is an error naming the key.

Sources quoted below:
- README: https://github.com/kube-vip/kube-vip-cloud-provider/blob/main/README.md
- docs: https://kube-vip.io/docs/usage/cloud-provider/ (kube-vip/website,
  content/docs/usage/cloud-provider.md)
- kube-vip-cloud-provider's own tests, pkg/ipam/addressbuilder_test.go
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
import yaml

from kube_ccm.api.objects import ObjectMeta, Service, ServicePort, ServiceSpec
from kube_ccm.providers.ippool import (
    IPPoolConfigError,
    IPPoolProvider,
    factory,
    kubevip,
    load_config,
)
from kube_ccm.providers.ippool.kubevip import parse_kubevip, parse_value, pools_from_kubevip
from kube_ccm.providers.ippool.pools import Pool, PoolError, Pools
from kube_ccm.testing.fakeapi import FakeApiServer, FakeClientBuilder

WHERE = "ConfigMap kube-system/kubevip"

# README, "Namespace pool" (output of `kubectl get configmap -n kube-system kubevip -o yaml`).
README_NAMESPACE_POOLS = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: kubevip
  namespace: kube-system
data:
  cidr-default: 192.168.0.200/29
  cidr-development: 192.168.0.210/29
  cidr-finance: 192.168.0.220/29
  cidr-testing: 192.168.0.230/29
  cidr-ipv6: 2001::10/127
"""

# README, "Allow multiple IPv4 services to share a VIP".
README_ALLOW_SHARE = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: kubevip
  namespace: kube-system
data:
  cidr-default: 192.168.0.200/29
  cidr-development: 192.168.0.210/29
  allow-share-development: true
"""

# README, "Namespace pool" for kube-vip 0.8.0's serviceInterface (its duplicate
# interface-default key is the README's own).
README_INTERFACE = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: kubevip
  namespace: kube-system
data:
  cidr-default: 192.168.0.200/29
  interface-default: eth3
  cidr-development: 172.16.0.0/29
  interface-default: eth5
"""

# kube-vip.io/docs/usage/cloud-provider/, "The Kube-Vip Cloud Provider ConfigMap".
DOCS_EXAMPLE = """\
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


def data_of(manifest: str) -> dict[str, Any]:
    loaded = yaml.safe_load(manifest)
    assert loaded["kind"] == "ConfigMap"
    data: dict[str, Any] = loaded["data"]
    return data


def spans(pool: Pool) -> list[tuple[str, str]]:
    return [(s.first.compressed, s.last.compressed) for s in pool.spans]


def by_name(pools: list[Pool] | tuple[Pool, ...]) -> dict[str, list[tuple[str, str]]]:
    return {p.name: spans(p) for p in pools}


def value(text: str, *, skip: bool = True) -> list[tuple[str, str]]:
    return [
        (s.first.compressed, s.last.compressed)
        for s in parse_value(text, "key", skip_cidr_ends=skip)
    ]


# -- the documentation's examples -------------------------------------------------------


def test_the_readme_namespace_pools() -> None:
    data = data_of(README_NAMESPACE_POOLS)
    config = parse_kubevip(data, WHERE)
    # Every address of each CIDR (kube-vip's default since its PR #155); the host
    # bits of 192.168.0.210/29 are dropped, as netip/netipx do.
    assert by_name(config.pools) == {
        "default": [("192.168.0.200", "192.168.0.207")],
        "development": [("192.168.0.208", "192.168.0.215")],
        "finance": [("192.168.0.216", "192.168.0.223")],
        "ipv6": [("2001::10", "2001::11")],
        "testing": [("192.168.0.224", "192.168.0.231")],
    }
    assert config.warnings == ()
    pools = Pools.of(config.pools)
    assert [p.key for p in pools.for_namespace("finance")] == [f"{WHERE} key cidr-finance"]
    assert pools.for_namespace("elsewhere") == ()

    # skip-end-ips-in-cidr: "true" leaves out the first and last IPv4 addresses.
    skipped = parse_kubevip({**data, "skip-end-ips-in-cidr": "true"}, WHERE)
    assert by_name(skipped.pools)["default"] == [("192.168.0.201", "192.168.0.206")]
    assert by_name(skipped.pools)["ipv6"] == [("2001::10", "2001::11")]
    assert parse_kubevip({**data, "skip-end-ips-in-cidr": "false"}, WHERE) == config


def test_the_docs_example_with_overlapping_namespace_pools_is_accepted() -> None:
    config = parse_kubevip(data_of(DOCS_EXAMPLE), WHERE)
    assert by_name(config.pools) == {
        "default": [("192.168.0.200", "192.168.0.207")],
        "development": [("192.168.0.210", "192.168.0.219")],
        # 192.168.0.220/29 is .216-.223: it overlaps development's range, as written;
        # with 192.168.0.224/29 it joins into one span.
        "finance": [("192.168.0.216", "192.168.0.231")],
        "global": [("192.168.0.240", "192.168.0.247")],
    }
    pools = Pools.of(config.pools)  # two namespaces' pools may overlap
    assert [p.name for p in pools.for_namespace("development")] == ["development", "global"]
    assert [p.name for p in pools.for_namespace("kube-system")] == ["global"]


def test_the_readme_allow_share_example() -> None:
    config = parse_kubevip(data_of(README_ALLOW_SHARE), WHERE)
    assert config.share == {"development": True}
    assert config.sharing_allowed("development")
    assert not config.sharing_allowed("default")
    assert {p.name: p.allow_share for p in config.pools} == {
        "default": False,
        "development": True,
    }
    assert config.warnings == ()


def _service(
    fake: FakeApiServer, name: str, namespace: str, ports: list[tuple[str, int]]
) -> Service:
    uid = f"uid-{namespace}-{name}"
    fake.put_object(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "spec": {"type": "LoadBalancer"},
        }
    )
    return Service(
        metadata=ObjectMeta(name=name, namespace=namespace, uid=uid),
        spec=ServiceSpec(
            type="LoadBalancer",
            ports=tuple(ServicePort(protocol=proto, port=port) for proto, port in ports),
        ),
    )


async def test_allow_share_makes_a_namespaces_services_share_when_ports_allow() -> None:
    # The README's allow-share example, used as it is: development's Services share an
    # address while their ports do not collide; default's never share.
    fake = FakeApiServer()
    configmap(fake, data_of(README_ALLOW_SHARE))
    p = await provider(fake)
    balancer = p.load_balancer()

    async def ip(service: Service) -> str:
        status = await balancer.ensure_load_balancer("kubernetes", service, [])
        return status.ingress[0].ip

    web = await ip(_service(fake, "web", "development", [("TCP", 80)]))
    api = await ip(_service(fake, "api", "development", [("TCP", 443)]))
    dns = await ip(_service(fake, "dns", "development", [("UDP", 80)]))  # UDP/80 is free
    clash = await ip(_service(fake, "web2", "development", [("TCP", 80)]))
    assert web == api == dns == "192.168.0.208"
    assert clash == "192.168.0.209"  # TCP/80 is taken there: the next address
    first = await ip(_service(fake, "a", "default", [("TCP", 80)]))
    second = await ip(_service(fake, "b", "default", [("TCP", 443)]))
    assert (first, second) == ("192.168.0.200", "192.168.0.201")


def test_the_readme_interface_example_is_read_and_interfaces_ignored() -> None:
    config = parse_kubevip(data_of(README_INTERFACE), WHERE)
    assert by_name(config.pools) == {
        "default": [("192.168.0.200", "192.168.0.207")],
        "development": [("172.16.0.0", "172.16.0.7")],
    }
    assert len(config.warnings) == 1
    assert "key interface-default is ignored" in config.warnings[0]
    assert "kube-vip.io/serviceInterface" in config.warnings[0]


@pytest.mark.parametrize(
    ("text", "skipped", "every"),
    [
        # README, "Multiple pools or ranges"; the expected addresses are those of
        # kube-vip-cloud-provider's pkg/ipam/addressbuilder_test.go.
        (
            "192.168.0.200/30,192.168.0.200/29",
            [("192.168.0.201", "192.168.0.206")],
            [("192.168.0.200", "192.168.0.207")],
        ),
        ("2001::12/127,2001::10/127", [("2001::10", "2001::13")], [("2001::10", "2001::13")]),
        (
            "192.168.0.10-192.168.0.11,192.168.0.10-192.168.0.13",
            [("192.168.0.10", "192.168.0.13")],
            [("192.168.0.10", "192.168.0.13")],
        ),
        (
            "2001::10-2001::14,2001::20-2001::24",
            [("2001::10", "2001::14"), ("2001::20", "2001::24")],
            [("2001::10", "2001::14"), ("2001::20", "2001::24")],
        ),
        (
            "192.168.0.200/30,2001::10/127",
            [("192.168.0.201", "192.168.0.202"), ("2001::10", "2001::11")],
            [("192.168.0.200", "192.168.0.203"), ("2001::10", "2001::11")],
        ),
        # addressbuilder_test.go: /31 and /32 keep every address even when skipping.
        ("192.168.0.200/31", [("192.168.0.200", "192.168.0.201")], None),
        ("192.168.0.200/32", [("192.168.0.200", "192.168.0.200")], None),
        ("192.168.0.253-192.168.1.2", [("192.168.0.253", "192.168.1.2")], None),
        # CIDRs are joined before their ends go, as kube-vip's IPSet does: one /24.
        ("10.0.0.0/25,10.0.0.128/25", [("10.0.0.1", "10.0.0.254")], None),
        # written out of order: given out in address order.
        (
            "192.168.1.0-192.168.1.1,192.168.0.0-192.168.0.1",
            [("192.168.0.0", "192.168.0.1"), ("192.168.1.0", "192.168.1.1")],
            None,
        ),
    ],
)
def test_multiple_pools_or_ranges_in_one_value(
    text: str, skipped: list[tuple[str, str]], every: list[tuple[str, str]] | None
) -> None:
    assert value(text) == skipped
    if every is not None:
        assert value(text, skip=False) == every


# -- allocation through the provider ----------------------------------------------------


def configmap(fake: FakeApiServer, data: dict[str, str]) -> None:
    fake.put_object(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "kubevip", "namespace": "kube-system"},
            "data": dict(data),
        }
    )


async def provider(fake: FakeApiServer) -> IPPoolProvider:
    p = factory(None)
    await p.initialize(FakeClientBuilder(fake), asyncio.Event())
    return p


async def allocate(
    p: IPPoolProvider,
    fake: FakeApiServer,
    name: str,
    namespace: str = "default",
    *,
    families: tuple[str, ...] = ("IPv4",),
    policy: str = "SingleStack",
) -> list[str]:
    uid = f"uid-{namespace}-{name}"
    fake.put_object(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "spec": {"type": "LoadBalancer"},
        }
    )
    svc = Service(
        metadata=ObjectMeta(name=name, namespace=namespace, uid=uid),
        spec=ServiceSpec(
            type="LoadBalancer",
            ports=(ServicePort(protocol="TCP", port=80),),
            ip_families=families,
            ip_family_policy=policy,
        ),
    )
    status = await p.load_balancer().ensure_load_balancer("kubernetes", svc, [])
    return [i.ip for i in status.ingress]


@pytest.mark.parametrize(
    ("literals", "first", "second"),
    [
        # README: `kubectl create configmap --namespace kube-system kubevip
        #   --from-literal range-global=192.168.0.200-192.168.0.202`
        ({"range-global": "192.168.0.200-192.168.0.202"}, "192.168.0.200", "192.168.0.201"),
        # ... `--from-literal range-global=192.168.0.200-192.168.0.202
        #   --from-literal search-order=desc`
        (
            {"range-global": "192.168.0.200-192.168.0.202", "search-order": "desc"},
            "192.168.0.202",
            "192.168.0.201",
        ),
        # ... `--from-literal cidr-global=192.168.0.220/29`: .216-.223, every address
        # (kube-vip's default since its PR #155; its older README text skipped the ends).
        ({"cidr-global": "192.168.0.220/29"}, "192.168.0.216", "192.168.0.217"),
        # ... `--from-literal cidr-global=192.168.0.220/29 --from-literal search-order=desc`
        (
            {"cidr-global": "192.168.0.220/29", "search-order": "desc"},
            "192.168.0.223",
            "192.168.0.222",
        ),
        # skip-end-ips-in-cidr: "true": the CIDR's first and last addresses are left out.
        (
            {"cidr-global": "192.168.0.220/29", "skip-end-ips-in-cidr": "true"},
            "192.168.0.217",
            "192.168.0.218",
        ),
    ],
)
async def test_the_readme_kubectl_create_examples_allocate_in_order(
    literals: dict[str, str], first: str, second: str
) -> None:
    fake = FakeApiServer()
    configmap(fake, literals)
    p = await provider(fake)
    assert await allocate(p, fake, "a", "anywhere") == [first]
    assert await allocate(p, fake, "b", "else") == [second]


def test_search_order_desc_starts_from_the_highest_address_of_the_whole_pool() -> None:
    data = {"range-global": "192.0.2.10-192.0.2.11,192.0.2.1-192.0.2.2,2001:db8::1-2001:db8::2"}
    [ascending] = pools_from_kubevip(data, WHERE)
    [descending] = pools_from_kubevip({**data, "search-order": "desc"}, WHERE)
    taken = {"192.0.2.11", "2001:db8::2"}

    def is_taken(address: object) -> bool:
        return str(address) in taken

    assert str(ascending.free("IPv4", is_taken)) == "192.0.2.1"
    assert str(descending.free("IPv4", is_taken)) == "192.0.2.10"
    assert str(descending.free("IPv6", is_taken)) == "2001:db8::1"


async def test_the_readme_dual_stack_example() -> None:
    # README, "Dualstack Services": `range-default: 192.168.0.10-192.168.0.11,2001::10-2001::11`
    # and a PreferDualStack Service with IPv6 first gets "2001::10,192.168.0.10".
    fake = FakeApiServer()
    configmap(fake, {"range-default": "192.168.0.10-192.168.0.11,2001::10-2001::11"})
    p = await provider(fake)
    got = await allocate(p, fake, "my-service", families=("IPv6", "IPv4"), policy="PreferDualStack")
    assert got == ["2001::10", "192.168.0.10"]


async def test_a_namespace_takes_its_own_pool_before_the_global_one() -> None:
    fake = FakeApiServer()
    configmap(fake, {"cidr-global": "192.0.2.4/30", "range-team-a": "198.51.100.7-198.51.100.7"})
    p = await provider(fake)
    # kube-vip's code would read cidr-global before range-team-a; its docs, followed
    # here, give a namespace its own pool.
    assert await allocate(p, fake, "t1", "team-a") == ["198.51.100.7"]
    assert await allocate(p, fake, "o1", "other") == ["192.0.2.4"]
    # ippool lets an exhausted namespace pool overflow into the global one.
    assert await allocate(p, fake, "t2", "team-a") == ["192.0.2.5"]


# -- precedence ----------------------------------------------------------------------


def test_cidr_is_read_before_range_for_one_name_and_the_range_is_reported() -> None:
    config = parse_kubevip(
        {
            "cidr-global": "192.0.2.0/30",
            "range-global": "203.0.113.1-203.0.113.9",
            "range-team-a": "198.51.100.1-198.51.100.2",
        },
        WHERE,
    )
    assert by_name(config.pools) == {
        "global": [("192.0.2.0", "192.0.2.3")],
        "team-a": [("198.51.100.1", "198.51.100.2")],
    }
    assert config.pools[0].key == f"{WHERE} key cidr-global"
    assert [w for w in config.warnings if "range-global is ignored" in w]
    assert not [w for w in config.warnings if "range-team-a" in w]
    Pools.of(config.pools)


def test_a_namespace_pool_comes_before_the_global_one() -> None:
    pools = Pools.of(
        pools_from_kubevip(
            {"range-global": "192.0.2.10-192.0.2.11", "cidr-team-a": "198.51.100.0/30"}, WHERE
        )
    )
    assert [p.name for p in pools.for_namespace("team-a")] == ["team-a", "global"]
    assert [p.name for p in pools.for_namespace("team-b")] == ["global"]


def test_allow_share_for_a_namespace_overrides_the_global_one_both_ways() -> None:
    config = parse_kubevip(
        {
            "range-global": "192.0.2.10-192.0.2.11",
            "range-team-a": "192.0.2.20-192.0.2.21",
            "range-team-b": "192.0.2.30-192.0.2.31",
            "allow-share-global": "True",
            "allow-share-team-a": "0",
        },
        WHERE,
    )
    assert not config.sharing_allowed("team-a")
    assert config.sharing_allowed("team-b")  # no key of its own: the global one
    assert config.sharing_allowed("anyone")
    assert {p.name: p.allow_share for p in config.pools} == {
        "global": True,
        "team-a": False,
        "team-b": True,
    }
    assert not parse_kubevip({"allow-share-team-a": "true"}, WHERE).sharing_allowed("team-b")


@pytest.mark.parametrize("spelling", ["1", "t", "T", "TRUE", "true", "True"])
def test_allow_share_takes_gos_parsebool_spellings(spelling: str) -> None:
    assert parse_kubevip({"allow-share-global": spelling}, WHERE).sharing_allowed("x")


def test_unknown_keys_are_reported_with_a_hint() -> None:
    config = parse_kubevip(
        {"range-global": "192.0.2.1-192.0.2.2", "allow-shared-dev": "true", "cdir-x": "1"}, WHERE
    )
    assert len(config.pools) == 1
    assert any(
        "allow-shared-dev is ignored (did you mean allow-share-dev?)" in w for w in config.warnings
    )
    assert any("cdir-x is ignored" in w for w in config.warnings)


def test_what_is_not_acted_on_is_logged_once(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kubevip, "_logged", set())
    data = {"range-global": "192.0.2.1-192.0.2.2", "interface-global": "eth1"}
    with caplog.at_level(logging.WARNING, logger=kubevip.__name__):
        pools_from_kubevip(data, WHERE)
        pools_from_kubevip(data, WHERE)
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1
    assert "interface-global is ignored" in messages[0]


# -- malformed values --------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"cidr-global": "192.168.0.0/33"}, "key cidr-global: '192.168.0.0/33' is neither"),
        ({"range-dev": "192.168.0.20-192.168.0.10"}, "key range-dev: range .* ends before"),
        ({"range-dev": "192.168.0.10-2001::1"}, "key range-dev: range .* mixes IPv4 and IPv6"),
        ({"range-dev": "192.168.0.10-nonsense"}, "key range-dev: .* is neither a CIDR"),
        ({"cidr-global": " , "}, "key cidr-global is empty"),
        ({"cidr-": "192.0.2.0/24"}, "key 'cidr-' names no namespace"),
        ({"cidr-global": "0.0.0.0/32"}, "key cidr-global: 0.0.0.0/32 is kube-vip's DHCP mode"),
        ({"allow-share-dev": "yes"}, "key allow-share-dev: 'yes' is not a boolean"),
        ({"search-order": "descending"}, "key search-order: 'descending'"),
        ({"skip-end-ips-in-cidr": "yes"}, "key skip-end-ips-in-cidr: 'yes'"),
    ],
)
def test_a_malformed_value_is_an_error_naming_the_key(data: dict[str, str], message: str) -> None:
    with pytest.raises(PoolError, match=message):
        parse_kubevip(data, WHERE)


def test_a_namespace_pool_may_not_overlap_the_global_one() -> None:
    pools = pools_from_kubevip(
        {"cidr-global": "192.0.2.0/28", "range-team-a": "192.0.2.5-192.0.2.6"}, WHERE
    )
    with pytest.raises(PoolError, match=r"pools overlap: .*key cidr-global .*range-team-a"):
        Pools.of(pools)


def test_the_cloud_config_pools_are_checked_the_same_way_at_start_up() -> None:
    with pytest.raises(IPPoolConfigError, match="key search-order: 'up'"):
        load_config("pools: {range-global: 192.0.2.1-192.0.2.9, search-order: up}")
    with pytest.raises(IPPoolConfigError, match="key allow-share-global: 'maybe'"):
        load_config("pools: {range-global: 192.0.2.1-192.0.2.9, allow-share-global: maybe}")
    config = load_config(
        "pools: {cidr-global: 192.0.2.0/30, skip-end-ips-in-cidr: false, search-order: desc}"
    )
    [pool] = pools_from_kubevip(config.pools, "cloud-config `pools`")
    assert spans(pool) == [("192.0.2.0", "192.0.2.3")]
    assert pool.descending
