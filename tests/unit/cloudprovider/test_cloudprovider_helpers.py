"""Library helpers: LB name, V1 providerID, source ranges, health checks (§1.11, §4.10)."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping

import pytest

from kube_ccm.api.objects import ObjectMeta, ServiceSpec
from kube_ccm.cloudprovider import (
    CloudProviderError,
    InstanceNotFoundError,
    InvalidSourceRangeError,
    NotImplementedByProviderError,
    Service,
    default_load_balancer_name,
    get_instance_provider_id,
    get_load_balancer_source_ranges,
    get_service_health_check_path_port,
    is_allow_all,
    needs_health_check,
    requests_only_local_traffic,
)
from kube_ccm.testing import FakeProvider

SOURCE_RANGES = "service.beta.kubernetes.io/load-balancer-source-ranges"


def _service(
    *,
    uid: str = "",
    annotations: Mapping[str, str] | None = None,
    ranges: tuple[str, ...] = (),
    type_: str = "LoadBalancer",
    policy: str = "",
    hc_port: int = 0,
) -> Service:
    return Service(
        metadata=ObjectMeta(name="web", namespace="shop", uid=uid, annotations=annotations or {}),
        spec=ServiceSpec(
            type=type_,
            load_balancer_source_ranges=ranges,
            external_traffic_policy=policy,
            health_check_node_port=hc_port,
        ),
    )


def _nets(*cidrs: str) -> frozenset[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    return frozenset(ipaddress.ip_network(c) for c in cidrs)


# -- default load-balancer name -------------------------------------------------


def test_default_lb_name_is_a_plus_uid_without_dashes_cut_to_32_chars() -> None:
    service = _service(uid="8a4f2c1e-9b3d-4e7a-a1c5-0f6d2e8b3a79")
    assert default_load_balancer_name(service) == "a8a4f2c1e9b3d4e7aa1c50f6d2e8b3a7"
    assert len(default_load_balancer_name(service)) == 32


def test_default_lb_name_of_a_short_uid_is_not_padded() -> None:
    assert default_load_balancer_name(_service(uid="ab-cd")) == "aabcd"


# -- V1 providerID helper -------------------------------------------------------


def v1_cloud(instance_id: str | Exception | None) -> FakeProvider:
    """A provider named "sim" whose V1 instance_id answers ``instance_id`` (None: no V1)."""
    if instance_id is None:
        return FakeProvider(name="sim")
    return FakeProvider(
        name="sim", capabilities={"instances"}, answers={"instance_id": instance_id}
    )


async def test_provider_id_is_provider_name_and_instance_id() -> None:
    cloud = v1_cloud("i-123")
    assert await get_instance_provider_id(cloud, "n1") == "sim://i-123"


async def test_empty_instance_id_still_gives_a_provider_id_prefix() -> None:
    assert await get_instance_provider_id(v1_cloud(""), "n1") == "sim://"


async def test_provider_id_without_v1_instances_fails_with_upstreams_message() -> None:
    with pytest.raises(CloudProviderError, match=r"^failed to get instances from cloud provider$"):
        await get_instance_provider_id(v1_cloud(None), "n1")


@pytest.mark.parametrize("error", [InstanceNotFoundError(), NotImplementedByProviderError()])
async def test_provider_id_passes_sentinel_errors_through_unwrapped(
    error: CloudProviderError,
) -> None:
    with pytest.raises(type(error)) as caught:
        await get_instance_provider_id(v1_cloud(error), "n1")
    assert caught.value is error


async def test_provider_id_wraps_other_errors_keeping_the_cause() -> None:
    original = ConnectionError("metadata API down")
    with pytest.raises(CloudProviderError) as caught:
        await get_instance_provider_id(v1_cloud(original), "n1")
    assert str(caught.value) == "failed to get instance ID from cloud provider: metadata API down"
    assert caught.value.__cause__ is original


# -- source ranges --------------------------------------------------------------


def test_no_spec_ranges_and_no_annotation_allows_everything() -> None:
    ranges = get_load_balancer_source_ranges(_service())
    assert ranges == _nets("0.0.0.0/0")
    assert is_allow_all(ranges)


def test_blank_annotation_allows_everything() -> None:
    ranges = get_load_balancer_source_ranges(_service(annotations={SOURCE_RANGES: "  "}))
    assert ranges == _nets("0.0.0.0/0")


def test_annotation_ranges_are_comma_separated_with_spaces_ignored() -> None:
    service = _service(annotations={SOURCE_RANGES: " 10.0.0.0/8, 192.168.2.0/24 ,2001:db8::/32 "})
    assert get_load_balancer_source_ranges(service) == _nets(
        "10.0.0.0/8", "192.168.2.0/24", "2001:db8::/32"
    )


def test_spec_ranges_win_over_the_annotation() -> None:
    service = _service(ranges=("1.2.3.0/24",), annotations={SOURCE_RANGES: "10.0.0.0/8"})
    ranges = get_load_balancer_source_ranges(service)
    assert ranges == _nets("1.2.3.0/24")
    assert not is_allow_all(ranges)


def test_duplicate_ranges_collapse_including_host_bits_set() -> None:
    service = _service(ranges=("10.0.0.0/8", "10.0.0.0/8", "10.1.2.3/8"))
    assert get_load_balancer_source_ranges(service) == _nets("10.0.0.0/8")


@pytest.mark.parametrize("bad", ["10.0.0.1/33", "foo.bar", "*", "10.0.0.1", "10.0.0.0/255.0.0.0"])
def test_invalid_spec_range_names_the_value_and_the_field(bad: str) -> None:
    with pytest.raises(InvalidSourceRangeError) as caught:
        get_load_balancer_source_ranges(_service(ranges=("10.0.0.0/8", bad)))
    assert caught.value.value == bad
    assert caught.value.field == "spec.loadBalancerSourceRanges"
    assert f'"{bad}"' in str(caught.value)
    assert "spec.loadBalancerSourceRanges" in str(caught.value)


@pytest.mark.parametrize("value", ["10.0.0.0/8,", "10.0.0.1/33", "foo.bar", "*", "192.168.1.1"])
def test_invalid_annotation_range_names_the_annotation(value: str) -> None:
    with pytest.raises(InvalidSourceRangeError) as caught:
        get_load_balancer_source_ranges(_service(annotations={SOURCE_RANGES: value}))
    assert caught.value.field == SOURCE_RANGES
    assert str(caught.value).startswith(f"{SOURCE_RANGES}: ")
    assert "for example 10.0.0.0/24,192.168.2.0/24" in str(caught.value)


def test_only_the_ipv4_everything_network_counts_as_allow_all() -> None:
    assert not is_allow_all(_nets("::/0"))
    assert is_allow_all(_nets("::/0", "0.0.0.0/0"))


# -- traffic policy and health checks -------------------------------------------


@pytest.mark.parametrize(
    ("type_", "policy", "local"),
    [
        ("LoadBalancer", "Local", True),
        ("NodePort", "Local", True),
        ("ClusterIP", "Local", False),
        ("LoadBalancer", "Cluster", False),
        ("LoadBalancer", "", False),
    ],
)
def test_requests_only_local_traffic(type_: str, policy: str, local: bool) -> None:
    assert requests_only_local_traffic(_service(type_=type_, policy=policy)) is local


def test_only_local_load_balancers_need_a_health_check() -> None:
    assert needs_health_check(_service(type_="LoadBalancer", policy="Local"))
    assert not needs_health_check(_service(type_="NodePort", policy="Local"))
    assert not needs_health_check(_service(type_="LoadBalancer", policy="Cluster"))


def test_health_check_path_and_port_for_a_local_load_balancer() -> None:
    service = _service(policy="Local", hc_port=32456)
    assert get_service_health_check_path_port(service) == ("/healthz", 32456)


def test_no_health_check_without_local_traffic_or_without_a_port() -> None:
    assert get_service_health_check_path_port(_service(policy="Cluster", hc_port=32456)) == (
        "",
        0,
    )
    assert get_service_health_check_path_port(_service(policy="Local", hc_port=0)) == ("", 0)
