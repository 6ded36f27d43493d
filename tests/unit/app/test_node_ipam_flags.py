"""The node IPAM flags: upstream's mask-size rules, the Service range, bad input at start."""

from __future__ import annotations

import ipaddress
import logging

import pytest

from kube_ccm.api import wellknown as wk
from kube_ccm.app.descriptors import BY_NAME, StartupError
from kube_ccm.app.manager import node_ipam_before_leading
from kube_ccm.app.options.buildconfig import parse_options
from kube_ccm.app.options.config import DaemonConfig
from kube_ccm.app.options.validation import NodeIpamConfigError, parse_node_ipam

V4 = "10.244.0.0/16"
V6 = "fd00:10:244::/56"


def masks(cluster_cidr: str, **flags: int) -> tuple[int, ...]:
    return parse_node_ipam(cluster_cidr=cluster_cidr, **flags).node_mask_sizes  # type: ignore[arg-type]


def refused(**flags: object) -> str:
    with pytest.raises(NodeIpamConfigError) as raised:
        parse_node_ipam(**flags)  # type: ignore[arg-type]
    return str(raised.value)


@pytest.mark.parametrize(
    ("cluster", "flags", "expected"),
    [
        (V4, {}, (24,)),
        (V6, {}, (64,)),
        (f"{V4},{V6}", {}, (24, 64)),
        (f"{V6},{V4}", {}, (64, 24)),
        (V4, {"node_cidr_mask_size": 26}, (26,)),
        (V6, {"node_cidr_mask_size": 70}, (70,)),
        (V4, {"node_cidr_mask_size_ipv4": 25}, (25,)),
        (V6, {"node_cidr_mask_size_ipv6": 72}, (72,)),
        (f"{V4},{V6}", {"node_cidr_mask_size_ipv4": 20, "node_cidr_mask_size_ipv6": 60}, (20, 60)),
    ],
)
def test_mask_sizes_as_upstream_sets_them(
    cluster: str, flags: dict[str, int], expected: tuple[int, ...]
) -> None:
    assert masks(cluster, **flags) == expected


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            {"cluster_cidr": f"{V4},{V6}", "node_cidr_mask_size": 24},
            "usage of --node-cidr-mask-size is not allowed with dual-stack clusters",
        ),
        (
            {"cluster_cidr": V4, "node_cidr_mask_size": 24, "node_cidr_mask_size_ipv4": 24},
            "is not allowed if --node-cidr-mask-size is set",
        ),
        (
            {"cluster_cidr": V6, "node_cidr_mask_size_ipv4": 24},
            "--node-cidr-mask-size-ipv4 is not allowed for a single-stack IPv6 cluster",
        ),
        (
            {"cluster_cidr": V4, "node_cidr_mask_size_ipv6": 64},
            "--node-cidr-mask-size-ipv6 is not allowed for a single-stack IPv4 cluster",
        ),
        ({"cluster_cidr": V4, "node_cidr_mask_size": -1}, "cannot be negative"),
        (
            {"cluster_cidr": "10.244.0.0/20", "node_cidr_mask_size": 16},
            "--node-cidr-mask-size=16 would give each Node a /16; the mask size must be at "
            "least 20",
        ),
        (
            {"cluster_cidr": "10.244.0.0/25"},
            "--node-cidr-mask-size-ipv4=24 would give each Node a /24",
        ),
        ({"cluster_cidr": V4, "node_cidr_mask_size": 33}, "at most 32"),
        ({"cluster_cidr": "fd00::/40"}, "the node CIDR size is too big"),
        ({"cluster_cidr": ""}, "--cluster-cidr is required with --allocate-node-cidrs"),
        ({"cluster_cidr": "10.0.0.0/8,10.1.0.0/16"}, "dual-stack pair"),
        ({"cluster_cidr": "nonsense"}, "is not a valid CIDR"),
        (
            {"cluster_cidr": V4, "service_cluster_ip_range": "10.0.0.0/8"},
            "covers all of --cluster-cidr 10.244.0.0/16: no pod CIDR would be left",
        ),
        (
            {"cluster_cidr": V4, "service_cluster_ip_range": "10.96.0.0/12,fd00::/108,10.1.0.0/16"},
            "can not contain more than two entries",
        ),
        (
            {"cluster_cidr": V4, "service_cluster_ip_range": "10.96.0.0/12,10.1.0.0/16"},
            "not dualstack",
        ),
        ({"cluster_cidr": V4, "service_cluster_ip_range": "10.96.0.0/33"}, "not a valid CIDR"),
        (
            {"cluster_cidr": V4, "cidr_allocator_type": "Bogus"},
            "invalid CIDR allocator type: Bogus: use --cidr-allocator-type=RangeAllocator",
        ),
        (
            {"cluster_cidr": V4, "cidr_allocator_type": "Bogus"},
            "or CloudAllocator (the cloud provider gives them)",
        ),
        (
            {"cluster_cidr": "banana", "cidr_allocator_type": "CloudAllocator"},
            "'banana' is not a valid CIDR",
        ),
    ],
)
def test_bad_input_is_refused_with_what_to_change(flags: dict[str, object], message: str) -> None:
    assert message in refused(**flags)


def test_the_cloud_allocator_needs_none_of_the_range_flags() -> None:
    options = parse_node_ipam(cluster_cidr="", cidr_allocator_type="CloudAllocator")
    assert options.allocator == wk.CIDR_ALLOCATOR_CLOUD
    assert (options.cluster_cidrs, options.node_mask_sizes) == ((), ())
    with_cidr = parse_node_ipam(
        cluster_cidr=V4, node_cidr_mask_size=40, cidr_allocator_type="CloudAllocator"
    )
    assert with_cidr.cluster_cidrs == (ipaddress.ip_network(V4),)


def test_a_service_range_inside_the_cluster_cidr_is_accepted_and_kept() -> None:
    options = parse_node_ipam(
        cluster_cidr=f"{V4},{V6}", service_cluster_ip_range="10.244.255.0/24,fd00:10:244:ff::/108"
    )

    assert options.service_cidrs == (
        ipaddress.ip_network("10.244.255.0/24"),
        ipaddress.ip_network("fd00:10:244:ff::/108"),
    )


def test_the_flags_reach_the_daemon_config() -> None:
    config = parse_options(
        [
            "--cloud-provider=simulated",
            "--allocate-node-cidrs",
            "--cidr-allocator-type=RangeAllocator",
            "--node-cidr-mask-size-ipv4=25",
            "--node-cidr-mask-size-ipv6=72",
            "--node-cidr-mask-size=0",
            "--service-cluster-ip-range=10.96.0.0/12",
        ]
    )

    assert config.allocate_node_cidrs
    assert (config.node_cidr_mask_size_ipv4, config.node_cidr_mask_size_ipv6) == (25, 72)
    assert config.service_cluster_ip_range == "10.96.0.0/12"
    assert "allocate-node-cidrs" not in config.extra_flags, "acting now"


def test_node_ipam_is_off_unless_named_and_runs_by_its_alias() -> None:
    base = ["--cloud-provider=simulated"]
    assert wk.CONTROLLER_NODE_IPAM not in parse_options(base).controllers
    assert wk.CONTROLLER_NODE_IPAM in parse_options([*base, "--controllers=*,nodeipam"]).controllers
    assert BY_NAME[wk.CONTROLLER_NODE_IPAM].identity == "node-controller"


def ipam_config(**kwargs: object) -> DaemonConfig:
    settings: dict[str, object] = {
        "cloud_provider": "simulated",
        "controllers": frozenset({wk.CONTROLLER_NODE_IPAM}),
        "allocate_node_cidrs": True,
        "cluster_cidr": V4,
    }
    settings.update(kwargs)
    return DaemonConfig(**settings)  # type: ignore[arg-type]


def test_the_settings_are_checked_before_leading_where_it_runs() -> None:
    options = node_ipam_before_leading(ipam_config())
    assert options is not None
    assert options.cluster_cidrs == (ipaddress.ip_network(V4),)

    assert node_ipam_before_leading(ipam_config(allocate_node_cidrs=False)) is None
    assert node_ipam_before_leading(ipam_config(controllers=frozenset(), cluster_cidr="")) is None
    with pytest.raises(StartupError, match="--cluster-cidr is required"):
        node_ipam_before_leading(ipam_config(cluster_cidr=""))


def test_allocate_node_cidrs_without_the_controller_says_how_to_run_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        assert node_ipam_before_leading(ipam_config(controllers=frozenset())) is None

    assert "--controllers=*,nodeipam" in caplog.text
