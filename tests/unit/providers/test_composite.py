"""Composition: each capability from a chosen provider, checked when the daemon starts."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kube_ccm.api.objects import Node, ObjectMeta, PersistentVolume
from kube_ccm.cloudprovider import (
    LoadBalancer,
    NodePodCIDRs,
    PVLabeler,
    Registry,
    get_cloud_provider,
    is_cloud_provider,
)
from kube_ccm.providers.composite import (
    CompositeConfigError,
    CompositeProvider,
    build_composite,
)
from kube_ccm.providers.simulated import SimulatedCloud
from kube_ccm.providers.simulated import factory as simulated_factory
from kube_ccm.testing.fakeprovider import FakeLabelingProvider


def only_labels(config: bytes | None) -> FakeLabelingProvider:
    """A provider that labels volumes and does nothing else."""
    return FakeLabelingProvider(
        config, name="labels", answers={"get_labels_for_volume": {"from": "labels"}}
    )


def registry() -> Registry:
    reg = Registry(entry_point_group=None)
    reg.register("simulated", simulated_factory)
    reg.register("labels", only_labels)
    return reg


def build(text: str, base_dir: Path | None = None) -> CompositeProvider:
    return build_composite(text.encode(), registry=registry(), base_dir=base_dir)


async def test_each_capability_comes_from_the_provider_chosen_for_it() -> None:
    composite = build(
        """
providers:
  simulated:
    capabilities: [instances, loadBalancer]
    config: {state: ":memory:"}
  labels:
    capabilities: [volumeLabels]
    config: {anything: 1}
"""
    )
    sim = composite.providers["simulated"]
    labels = composite.providers["labels"]
    assert isinstance(sim, SimulatedCloud)
    assert isinstance(labels, FakeLabelingProvider)
    assert labels.config == b"anything: 1\n"
    assert composite.describe() == {
        "instances": "simulated",
        "loadBalancer": "simulated",
        "volumeLabels": "labels",
    }
    assert composite.provider_name() == "simulated"
    assert composite.instances_v2() is sim.instances_v2()
    assert isinstance(composite.load_balancer(), LoadBalancer)
    assert composite.routes() is None, "simulated offers routes, but none were asked of it"
    assert composite.zones() is None
    assert isinstance(composite, PVLabeler)
    assert await composite.get_labels_for_volume(PersistentVolume()) == {"from": "labels"}
    await composite.initialize(object(), asyncio.Event())  # type: ignore[arg-type]
    assert labels.called("provider") == ["initialize"]


def test_without_volume_labels_the_composite_is_no_labeler() -> None:
    composite = build(
        "providers: {simulated: {capabilities: [loadBalancer], config: {state: ':memory:'}}}"
    )
    assert not isinstance(composite, PVLabeler)
    assert composite.instances_v2() is None
    assert composite.provider_name() == "simulated"


async def test_pod_cidrs_come_from_the_provider_chosen_for_them_with_volume_labels_or_not() -> None:
    allocating = build(
        """
providers:
  simulated:
    capabilities: [instances, podCIDRs]
    config: {state: ":memory:", podCIDRs: {ranges: [10.100.0.0/16]}}
"""
    )
    assert isinstance(allocating, NodePodCIDRs)
    assert not isinstance(allocating, PVLabeler)
    assert await allocating.node_pod_cidrs(Node(metadata=ObjectMeta(name="n1"))) == (
        "10.100.0.0/24",
    )
    both = build(
        """
providers:
  simulated:
    capabilities: [podCIDRs]
    config: {state: ":memory:"}
  labels:
    capabilities: [volumeLabels]
"""
    )
    assert isinstance(both, NodePodCIDRs)
    assert isinstance(both, PVLabeler)
    assert both.describe() == {"volumeLabels": "labels", "podCIDRs": "simulated"}
    without = build(
        "providers: {simulated: {capabilities: [instances], config: {state: ':memory:'}}}"
    )
    assert not isinstance(without, NodePodCIDRs)


def test_a_members_cloud_config_file_is_read_relative_to_the_base(tmp_path: Path) -> None:
    (tmp_path / "sim.yaml").write_text("state: ':memory:'\nregion: far-away\n")
    composite = build(
        "providers: {simulated: {capabilities: [instances], cloudConfig: sim.yaml}}", tmp_path
    )
    sim = composite.providers["simulated"]
    assert isinstance(sim, SimulatedCloud)
    assert sim.config.region == "far-away"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "--cloud-provider=composite needs a --cloud-config"),
        ("providers: {}", "`providers` is empty"),
        ("providers: [simulated]", "invalid composite cloud-config"),
        (
            "providers: {nimbus: {capabilities: [instances]}}",
            "providers.nimbus: no provider of that name is installed (known: labels, simulated)",
        ),
        (
            "providers: {labels: {capabilities: [instances]}}",
            "provider 'labels' does not offer instances (it offers: volumeLabels); serve "
            "instances from another provider or remove it from providers.labels.capabilities",
        ),
        (
            "providers: {simulated: {capabilities: [loadbalancer]}}",
            "providers.simulated.capabilities names 'loadbalancer'; the capabilities are",
        ),
        (
            "providers:\n  simulated: {capabilities: [volumeLabels], config: {state: ':memory:'}}\n"
            "  labels: {capabilities: [volumeLabels]}\n",
            "volumeLabels is claimed by both 'simulated' and 'labels'; list it under one",
        ),
        (
            "providers:\n  simulated: {capabilities: [instances]}\n"
            "  simulated: {capabilities: [routes]}\n",
            "`simulated` is given twice in one mapping (line 3)",
        ),
        ("providers: {labels: {capabilities: []}}", "providers.labels serves no capability"),
        (
            "providers: {composite: {capabilities: [instances]}}",
            "a composite cannot contain another composite",
        ),
        (
            "providers: {simulated: {capabilities: [instances], config: {state: 1, bogus: 2}}}",
            "providers.simulated: ",
        ),
        (
            "providers: {simulated: {capabilities: [instances], cloudConfig: /nonexistent/x.yaml}}",
            "providers.simulated.cloudConfig: cannot read '/nonexistent/x.yaml'",
        ),
        (
            "providers: {simulated: {capabilities: [instances], cloudConfig: a, config: {}}}",
            "gives both `cloudConfig` (a file) and `config` (inline); keep one",
        ),
    ],
)
def test_a_bad_composition_is_one_line_that_says_what_to_change(text: str, message: str) -> None:
    with pytest.raises(CompositeConfigError) as error:
        build(text)
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_the_composite_is_an_installed_provider() -> None:
    assert is_cloud_provider("composite")
    provider = get_cloud_provider(
        "composite",
        b"providers: {simulated: {capabilities: [instances], config: {state: ':memory:'}}}",
    )
    assert isinstance(provider, CompositeProvider)
