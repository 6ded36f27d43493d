"""The CIDR set of one cluster CIDR (upstream's ``cidrset``): allocate, occupy, release."""

from __future__ import annotations

import ipaddress

import pytest

from kube_ccm.api import wellknown as wk
from kube_ccm.controllers.cidrset import (
    CIDROutOfRangeError,
    CIDRRangeFullError,
    CIDRSet,
    CIDRSetError,
    IPNetwork,
)
from kube_ccm.runtime.metrics import Metrics


def net(text: str) -> IPNetwork:
    return ipaddress.ip_network(text)


def test_allocations_go_up_from_the_bottom_of_the_range() -> None:
    cidrs = CIDRSet(net("10.244.0.0/16"), 24)

    assert [str(cidrs.allocate_next()) for _ in range(3)] == [
        "10.244.0.0/24",
        "10.244.1.0/24",
        "10.244.2.0/24",
    ]
    assert cidrs.max_cidrs == 256


def test_ipv6_node_cidrs() -> None:
    cidrs = CIDRSet(net("fd00:10:244::/56"), 64)

    assert [str(cidrs.allocate_next()) for _ in range(2)] == [
        "fd00:10:244::/64",
        "fd00:10:244:1::/64",
    ]


def test_ipv6_node_cidrs_below_the_64_bit_boundary() -> None:
    cidrs = CIDRSet(net("fd00::/120"), 124)

    assert [str(cidrs.allocate_next()) for _ in range(2)] == ["fd00::/124", "fd00::10/124"]


def test_a_full_range_refuses_the_next_allocation() -> None:
    cidrs = CIDRSet(net("10.0.0.0/23"), 24)
    cidrs.allocate_next()
    cidrs.allocate_next()

    with pytest.raises(CIDRRangeFullError, match="no remaining CIDRs left to allocate"):
        cidrs.allocate_next()


def test_occupied_cidrs_are_skipped() -> None:
    cidrs = CIDRSet(net("10.0.0.0/16"), 24)
    cidrs.occupy(net("10.0.0.0/24"))
    cidrs.occupy(net("10.0.1.0/24"))

    assert str(cidrs.allocate_next()) == "10.0.2.0/24"


def test_a_larger_cidr_occupies_every_node_cidr_it_covers() -> None:
    cidrs = CIDRSet(net("10.0.0.0/16"), 24)
    cidrs.occupy(net("10.0.0.0/22"))

    assert cidrs.allocated == 4
    assert str(cidrs.allocate_next()) == "10.0.4.0/24"


def test_a_smaller_cidr_occupies_the_node_cidr_it_lies_in() -> None:
    cidrs = CIDRSet(net("10.0.0.0/16"), 24)
    cidrs.occupy(net("10.0.0.128/25"))

    assert cidrs.allocated == 1
    assert str(cidrs.allocate_next()) == "10.0.1.0/24"


def test_a_cidr_covering_the_cluster_occupies_all_of_it() -> None:
    cidrs = CIDRSet(net("10.0.0.0/16"), 24)
    cidrs.occupy(net("10.0.0.0/8"))

    with pytest.raises(CIDRRangeFullError):
        cidrs.allocate_next()


def test_a_released_cidr_is_handed_out_again_after_the_others() -> None:
    cidrs = CIDRSet(net("10.0.0.0/22"), 24)
    first = cidrs.allocate_next()
    cidrs.allocate_next()
    cidrs.release(first)

    assert [str(cidrs.allocate_next()) for _ in range(3)] == [
        "10.0.2.0/24",
        "10.0.3.0/24",
        "10.0.0.0/24",
    ]


def test_occupy_and_release_twice_are_harmless() -> None:
    cidrs = CIDRSet(net("10.0.0.0/16"), 24)
    cidrs.occupy(net("10.0.5.0/24"))
    cidrs.occupy(net("10.0.5.0/24"))
    assert cidrs.allocated == 1
    cidrs.release(net("10.0.5.0/24"))
    cidrs.release(net("10.0.5.0/24"))
    assert cidrs.allocated == 0


@pytest.mark.parametrize("outside", ["10.1.0.0/24", "fd00::/64", "192.168.0.0/16"])
def test_a_cidr_outside_the_range_is_refused(outside: str) -> None:
    cidrs = CIDRSet(net("10.0.0.0/16"), 24)

    with pytest.raises(CIDROutOfRangeError, match="out the range"):
        cidrs.occupy(net(outside))
    with pytest.raises(CIDROutOfRangeError):
        cidrs.release(net(outside))


def test_contains_means_one_of_its_node_cidrs() -> None:
    cidrs = CIDRSet(net("10.0.0.0/16"), 24)

    assert cidrs.contains(net("10.0.7.0/24"))
    assert not cidrs.contains(net("10.0.7.0/25"))
    assert not cidrs.contains(net("10.1.7.0/24"))


@pytest.mark.parametrize(
    ("cluster", "mask", "message"),
    [
        ("10.0.0.0/16", 8, "between 16 and 32"),
        ("10.0.0.0/16", 33, "between 16 and 32"),
        ("fd00::/48", 65, "too big"),
    ],
)
def test_a_node_mask_that_does_not_fit_is_refused(cluster: str, mask: int, message: str) -> None:
    with pytest.raises(CIDRSetError, match=message):
        CIDRSet(net(cluster), mask)


def test_ipv6_allows_sixteen_bits_more_and_ipv4_any() -> None:
    assert CIDRSet(net("fd00::/48"), 64).max_cidrs == 1 << 16
    assert CIDRSet(net("10.0.0.0/8"), 30).max_cidrs == 1 << 22


def test_the_metrics_are_upstreams() -> None:
    metrics = Metrics()
    cidrs = CIDRSet(net("10.0.0.0/22"), 24, metrics)
    cidrs.occupy(net("10.0.0.0/24"))
    second = cidrs.allocate_next()
    cidrs.release(second)

    label = {"clusterCIDR": "10.0.0.0/22"}
    assert metrics.sample(wk.METRIC_NODE_IPAM_CIDRSET_MAX_CIDRS, label) == 4
    assert metrics.sample(wk.METRIC_NODE_IPAM_CIDRSET_ALLOCATIONS, label) == 2
    assert metrics.sample(wk.METRIC_NODE_IPAM_CIDRSET_RELEASES, label) == 1
    assert metrics.sample(wk.METRIC_NODE_IPAM_CIDRSET_USAGE, label) == 0.25
    tries = wk.METRIC_NODE_IPAM_CIDRSET_ALLOCATION_TRIES
    assert metrics.sample(f"{tries}_count", label) == 1
    assert metrics.sample(f"{tries}_sum", label) == 1, "one occupied candidate skipped"
    exposed = metrics.exposition().decode()
    assert "node_ipam_controller_cirdset_max_cidrs{" in exposed  # upstream's spelling
    assert "node_ipam_controller_cidrset_cidrs_allocations_total{" in exposed
