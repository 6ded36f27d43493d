"""The k3s and rke2 providers: addresses, providerID, type, zone and region as k3s's
embedded CCM gives them (its ``pkg/cloudprovider/instances.go`` and its test), what
differs on purpose (bad values are errors), the cloud-config, and the node
controllers running on it.

The daemon on a real apiserver is in ``tests/integration/test_daemon_k3s.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from kube_ccm.api import wellknown as wk
from kube_ccm.api.objects import Node, NodeAddress, NodeSpec, ObjectMeta
from kube_ccm.cloudprovider import (
    CloudConfigError,
    CloudProviderError,
    InstanceMetadata,
    InvalidCloudConfigError,
    Registry,
)
from kube_ccm.controllers.node import CloudNodeController
from kube_ccm.controllers.nodelifecycle import CloudNodeLifecycleController
from kube_ccm.controllers.nodescope import NodeScope
from kube_ccm.providers.composite import build_composite
from kube_ccm.providers.ippool import factory as ippool_factory
from kube_ccm.providers.k3s import (
    K3sAddressError,
    K3sConfigError,
    K3sProvider,
    factory,
    load_config,
    node_addresses,
    rke2_factory,
)
from kube_ccm.testing.world import World, controller_world, guarded, node_object

INTERNAL = "k3s.io/internal-ip"
EXTERNAL = "k3s.io/external-ip"
HOSTNAME = "k3s.io/hostname"


def node(
    name: str = "test-node",
    *,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    provider_id: str = "",
) -> Node:
    return Node(
        metadata=ObjectMeta(
            name=name, uid=f"uid-{name}", annotations=annotations or {}, labels=labels or {}
        ),
        spec=NodeSpec(provider_id=provider_id),
    )


def addr(kind: str, address: str) -> NodeAddress:
    return NodeAddress(type=kind, address=address)


async def metadata_of(n: Node, provider: K3sProvider | None = None) -> InstanceMetadata:
    v2 = (provider or factory(None)).instances_v2()
    assert v2 is not None
    found = await v2.instance_metadata(n)
    assert found is not None
    return found


# -- k3s's own table (Test_UnitK3sInstanceMetadata), case by case -----------------------


async def test_a_node_without_annotations_has_no_metadata_yet_and_says_which() -> None:
    with pytest.raises(K3sAddressError) as caught:
        await metadata_of(node())
    message = str(caught.value)
    assert "Node test-node has no k3s.io/internal-ip annotation or label yet" in message
    assert "kubectl annotate node test-node k3s.io/internal-ip=<IP>" in message
    assert isinstance(caught.value, CloudProviderError)


async def test_an_internal_ip_alone() -> None:
    got = await metadata_of(node(annotations={INTERNAL: "10.0.0.1"}))
    assert got == InstanceMetadata(
        provider_id="k3s://test-node",
        instance_type="k3s",
        node_addresses=(addr("InternalIP", "10.0.0.1"),),
    )


async def test_internal_external_and_hostname_in_that_order() -> None:
    got = await metadata_of(
        node(
            annotations={
                HOSTNAME: "test-node.example.com",
                EXTERNAL: "1.2.3.4",
                INTERNAL: "10.0.0.1",
            }
        )
    )
    assert got.node_addresses == (
        addr("InternalIP", "10.0.0.1"),
        addr("ExternalIP", "1.2.3.4"),
        addr("Hostname", "test-node.example.com"),
    )


async def test_custom_metadata_from_the_nodes_own_labels_and_providerid() -> None:
    got = await metadata_of(
        node(
            annotations={INTERNAL: "10.0.0.1"},
            labels={
                wk.LABEL_INSTANCE_TYPE: "test.t1",
                wk.LABEL_REGION: "region",
                wk.LABEL_ZONE: "zone",
            },
            provider_id="test://i-abc",
        )
    )
    assert got == InstanceMetadata(
        provider_id="test://i-abc",
        instance_type="test.t1",
        node_addresses=(addr("InternalIP", "10.0.0.1"),),
        region="region",
        zone="zone",
    )


# -- every address case ------------------------------------------------------------------


async def test_dual_stack_comma_lists_keep_their_order() -> None:
    got = node_addresses(
        node(
            annotations={
                INTERNAL: "10.0.0.1,fd00::1",
                EXTERNAL: "2001:db8::7,203.0.113.7",
                HOSTNAME: "h1",
            }
        ),
        "k3s.io",
    )
    assert got == (
        addr("InternalIP", "10.0.0.1"),
        addr("InternalIP", "fd00::1"),
        addr("ExternalIP", "2001:db8::7"),
        addr("ExternalIP", "203.0.113.7"),
        addr("Hostname", "h1"),
    )


async def test_dns_annotations_come_after_the_ips_and_before_the_hostname() -> None:
    got = node_addresses(
        node(
            annotations={
                HOSTNAME: "h1",
                "k3s.io/external-dns": "h1.example.com",
                "k3s.io/internal-dns": "h1.lan,h1.internal",
                INTERNAL: "10.0.0.1",
            }
        ),
        "k3s.io",
    )
    assert got == (
        addr("InternalIP", "10.0.0.1"),
        addr("InternalDNS", "h1.lan"),
        addr("InternalDNS", "h1.internal"),
        addr("ExternalDNS", "h1.example.com"),
        addr("Hostname", "h1"),
    )


async def test_labels_are_the_fallback_of_the_older_k3s_agents() -> None:
    got = node_addresses(
        node(labels={INTERNAL: "10.0.0.2", EXTERNAL: "198.51.100.2", HOSTNAME: "old"}),
        "k3s.io",
    )
    assert got == (
        addr("InternalIP", "10.0.0.2"),
        addr("ExternalIP", "198.51.100.2"),
        addr("Hostname", "old"),
    )


async def test_an_annotation_wins_over_its_label_and_dns_has_no_label_fallback() -> None:
    got = node_addresses(
        node(
            annotations={INTERNAL: "10.0.0.1"},
            labels={
                INTERNAL: "10.9.9.9",
                HOSTNAME: "from-label",
                "k3s.io/internal-dns": "ignored.lan",
            },
        ),
        "k3s.io",
    )
    assert got == (addr("InternalIP", "10.0.0.1"), addr("Hostname", "from-label"))


async def test_missing_external_and_hostname_are_simply_left_out() -> None:
    assert node_addresses(node(labels={INTERNAL: "10.0.0.1"}), "k3s.io") == (
        addr("InternalIP", "10.0.0.1"),
    )


async def test_an_empty_annotation_counts_as_missing_as_in_k3s() -> None:
    got = node_addresses(
        node(annotations={INTERNAL: "", EXTERNAL: ""}, labels={INTERNAL: "10.0.0.3"}), "k3s.io"
    )
    assert got == (addr("InternalIP", "10.0.0.3"),)


async def test_spaces_around_list_items_are_dropped() -> None:
    got = node_addresses(node(annotations={INTERNAL: " 10.0.0.1 , fd00::1"}), "k3s.io")
    assert got == (addr("InternalIP", "10.0.0.1"), addr("InternalIP", "fd00::1"))


@pytest.mark.parametrize(
    ("annotations", "labels", "expected"),
    [
        (
            {INTERNAL: "10.0.0.1,not-an-ip"},
            {},
            "Node test-node: annotation k3s.io/internal-ip is '10.0.0.1,not-an-ip', and "
            "'not-an-ip' in it is not an IP address; write IP addresses separated by commas",
        ),
        (
            {INTERNAL: "10.0.0.1", EXTERNAL: "10.0.0.300"},
            {},
            "annotation k3s.io/external-ip is '10.0.0.300', and '10.0.0.300' in it is not an "
            "IP address",
        ),
        (
            {INTERNAL: "10.0.0.1,"},
            {},
            "annotation k3s.io/internal-ip is '10.0.0.1,', which has an empty item",
        ),
        (
            {},
            {INTERNAL: "node-7"},
            "label k3s.io/internal-ip is 'node-7', and 'node-7' in it is not an IP address",
        ),
        (
            {INTERNAL: "10.0.0.1", HOSTNAME: "   "},
            {},
            "annotation k3s.io/hostname is '   ', which has an empty item; write the node's "
            "host name",
        ),
        (
            {INTERNAL: "10.0.0.1", "k3s.io/internal-dns": "a.lan,,b.lan"},
            {},
            "annotation k3s.io/internal-dns is 'a.lan,,b.lan', which has an empty item; write "
            "names separated by commas",
        ),
    ],
)
async def test_a_bad_value_is_an_error_naming_node_annotation_and_value(
    annotations: dict[str, str], labels: dict[str, str], expected: str
) -> None:
    with pytest.raises(K3sAddressError) as caught:
        await metadata_of(node(annotations=annotations, labels=labels))
    assert expected in str(caught.value)


async def test_a_long_bad_value_is_quoted_only_in_part() -> None:
    with pytest.raises(K3sAddressError) as caught:
        node_addresses(node(annotations={INTERNAL: "x" * 5000}), "k3s.io")
    assert len(str(caught.value)) < 400


# -- rke2, and a prefix of one's own -----------------------------------------------------


async def test_rke2_reads_its_own_prefix_and_names_its_own_scheme_and_type() -> None:
    provider = rke2_factory(None)
    assert provider.provider_name() == "rke2"
    got = await metadata_of(
        node(
            annotations={
                "rke2.io/internal-ip": "10.0.0.1,fd00::1",
                "rke2.io/hostname": "r1",
                INTERNAL: "10.9.9.9",  # k3s's, not read by rke2
            }
        ),
        provider,
    )
    assert got == InstanceMetadata(
        provider_id="rke2://test-node",
        instance_type="rke2",
        node_addresses=(
            addr("InternalIP", "10.0.0.1"),
            addr("InternalIP", "fd00::1"),
            addr("Hostname", "r1"),
        ),
    )
    with pytest.raises(K3sAddressError, match=r"no rke2\.io/internal-ip annotation or label"):
        await metadata_of(node(annotations={INTERNAL: "10.0.0.1"}), provider)


async def test_the_cloud_config_sets_another_annotation_prefix() -> None:
    provider = factory(b"annotationPrefix: rke2.io\n")
    got = await metadata_of(node(annotations={"rke2.io/internal-ip": "10.0.0.1"}), provider)
    assert got.node_addresses == (addr("InternalIP", "10.0.0.1"),)
    assert got.provider_id == "k3s://test-node", "the provider's name sets the scheme"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("annotationPrefix: k3s.io/\n", "write the prefix of the address annotations"),
        ("annotationPrefix: K3S.io\n", "k3s.io (k3s) or rke2.io (rke2)"),
        ("annotationPrefx: k3s.io\n", "unknown field `annotationPrefx`; known fields"),
        ("annotationPrefix: [k3s.io]\n", "`annotationPrefix` must be a string"),
        ("- k3s.io\n", "must be a YAML mapping"),
        ("lbEnabled: false\n", "unknown field `lbEnabled`"),
    ],
)
def test_a_bad_cloud_config_is_one_line_saying_what_to_write(text: str, expected: str) -> None:
    with pytest.raises(InvalidCloudConfigError) as caught:
        load_config(text.encode())
    assert expected in str(caught.value)
    assert "\n" not in str(caught.value)


def test_no_cloud_config_or_an_empty_one_means_the_defaults() -> None:
    for data in (None, b"", b"  \n"):
        assert factory(data).prefix == "k3s.io"
        assert rke2_factory(data).prefix == "rke2.io"


def test_the_config_error_has_the_shared_base() -> None:
    assert issubclass(K3sConfigError, InvalidCloudConfigError)
    assert issubclass(K3sConfigError, CloudConfigError)
    assert issubclass(K3sConfigError, ValueError)


# -- the contract ----------------------------------------------------------------------


async def test_every_instance_exists_and_none_is_shut_down() -> None:
    v2 = factory(None).instances_v2()
    assert v2 is not None
    for n in (node(), node(provider_id="k3s://gone"), node(annotations={INTERNAL: "bad"})):
        assert await v2.instance_exists(n) is True
        assert await v2.instance_shutdown(n) is False


def test_instances_only_the_same_object_every_time_and_no_cluster_tag_needed() -> None:
    provider = factory(None)
    assert provider.instances_v2() is provider.instances_v2()
    assert provider.instances() is None
    assert provider.zones() is None
    assert provider.load_balancer() is None
    assert provider.routes() is None
    assert provider.clusters() is None
    assert provider.has_cluster_id() is True


def test_composed_with_ippool_the_nodes_scheme_is_k3s() -> None:
    registry = Registry(entry_point_group=None)
    registry.register("k3s", factory)
    registry.register("ippool", ippool_factory)
    composite = build_composite(
        b"providers:\n"
        b"  k3s: {capabilities: [instances]}\n"
        b"  ippool: {capabilities: [loadBalancer], config: {configMap: ''}}\n",
        registry=registry,
    )
    assert composite.provider_name() == "k3s"
    assert composite.instances_v2() is composite.providers["k3s"].instances_v2()
    assert composite.load_balancer() is composite.providers["ippool"].load_balancer()


# -- the node controllers on it ----------------------------------------------------------


@pytest.fixture
async def world() -> AsyncIterator[World]:
    async with controller_world(provider=factory(None)) as opened:
        yield opened


def node_controller(world: World) -> CloudNodeController:
    return CloudNodeController(
        client=world.client,
        nodes=world.nodes,
        cloud=world.guarded(),
        recorder=world.recorder,
        metrics=world.metrics,
        scope=NodeScope(provider="k3s"),
    )


async def test_a_tainted_node_is_initialised_from_its_annotations(world: World) -> None:
    await world.add(
        node_object(
            "agent-1",
            annotations={INTERNAL: "10.0.0.11,fd00::11", HOSTNAME: "agent-1.lan"},
            addresses=[{"type": "Hostname", "address": "agent-1"}],
        )
    )
    await node_controller(world).sync("agent-1")
    stored = world.node("agent-1")
    assert wk.TAINT_UNINITIALIZED not in world.taint_keys("agent-1")
    assert stored["spec"]["providerID"] == "k3s://agent-1"
    assert stored["metadata"]["labels"][wk.LABEL_INSTANCE_TYPE] == "k3s"
    assert stored["metadata"]["labels"][wk.LABEL_INSTANCE_TYPE_BETA] == "k3s"
    assert wk.LABEL_ZONE not in stored["metadata"]["labels"]
    assert stored["status"]["addresses"] == [
        {"type": "InternalIP", "address": "10.0.0.11"},
        {"type": "InternalIP", "address": "fd00::11"},
        {"type": "Hostname", "address": "agent-1.lan"},
    ]


async def test_a_node_k3s_already_initialised_is_left_unchanged(world: World) -> None:
    """What the embedded CCM wrote is what this provider answers: no write at all."""
    await world.add(
        node_object(
            "server-1",
            tainted=False,
            provider_id="k3s://server-1",
            labels={wk.LABEL_INSTANCE_TYPE: "k3s", wk.LABEL_INSTANCE_TYPE_BETA: "k3s"},
            annotations={INTERNAL: "10.0.0.1", EXTERNAL: "203.0.113.1", HOSTNAME: "server-1"},
            addresses=[
                {"type": "InternalIP", "address": "10.0.0.1"},
                {"type": "ExternalIP", "address": "203.0.113.1"},
                {"type": "Hostname", "address": "server-1"},
            ],
        )
    )
    before = world.node("server-1")
    ccm = node_controller(world)
    await ccm.sync("server-1")
    await ccm.update_node_status()
    assert world.node_writes() == []
    assert world.node("server-1") == before


async def test_a_bad_annotation_keeps_the_taint_and_is_retried_not_a_crash(
    world: World,
) -> None:
    await world.add(node_object("agent-2", annotations={INTERNAL: "10.0.0.12,oops"}))
    ccm = node_controller(world)
    with pytest.raises(K3sAddressError, match="'oops' in it is not an IP address"):
        await ccm.sync("agent-2")
    assert wk.TAINT_UNINITIALIZED in world.taint_keys("agent-2")
    assert world.node_writes() == []


async def test_the_lifecycle_controller_never_deletes_nor_taints_a_k3s_node(
    world: World,
) -> None:
    await world.add(node_object("down", tainted=False, ready="Unknown", provider_id="k3s://down"))
    ccm = CloudNodeLifecycleController(
        client=world.client,
        nodes=world.nodes,
        cloud=guarded(world.provider, timeout=0.2),
        recorder=world.recorder,
        monitor_period=0.01,
    )
    for _ in range(3):
        await ccm.monitor_nodes()
        await asyncio.sleep(0.01)
    assert world.node("down")["spec"].get("taints") in (None, [])
    assert world.node_writes() == []


async def test_a_k3s_kubelets_dual_stack_node_ip_is_satisfied_by_the_annotations(
    world: World,
) -> None:
    """k3s starts the kubelet with --node-ip set to the same IPs it annotates."""
    await world.add(
        node_object(
            "agent-3",
            annotations={
                wk.ANNOTATION_PROVIDED_NODE_IP: "10.0.0.13,fd00::13",
                INTERNAL: "10.0.0.13,fd00::13",
                EXTERNAL: "203.0.113.13",
                HOSTNAME: "agent-3",
            },
        )
    )
    await node_controller(world).sync("agent-3")
    assert wk.TAINT_UNINITIALIZED not in world.taint_keys("agent-3")
    assert world.node("agent-3")["status"]["addresses"] == [
        {"type": "InternalIP", "address": "10.0.0.13"},
        {"type": "InternalIP", "address": "fd00::13"},
        {"type": "ExternalIP", "address": "203.0.113.13"},
        {"type": "Hostname", "address": "agent-3"},
    ]
