"""Which of the addresses a Node reports (and so wrote itself) servicelb publishes as a
Service's ingress: never one that can be some other host's, and with
``nodeAddressCIDRs`` only those in the operator's networks."""

from __future__ import annotations

import ipaddress

import pytest

from kube_ccm.api.objects import (
    Node,
    NodeAddress,
    NodeStatus,
    ObjectMeta,
    Service,
    ServicePort,
    ServiceSpec,
)
from kube_ccm.providers.servicelb import ServiceLBConfigError, load_config
from kube_ccm.providers.servicelb.config import node_networks
from kube_ccm.providers.servicelb.status import (
    AddressRules,
    ingress,
    node_addresses,
)

KUBERNETES_CLUSTER_IP = ipaddress.ip_address("10.43.0.1")
APISERVER = ipaddress.ip_address("192.0.2.10")
RULES = AddressRules(
    cluster_ips=frozenset({KUBERNETES_CLUSTER_IP}), endpoints=frozenset({APISERVER})
)


def _node(name: str, *addresses: tuple[str, str], labels: dict[str, str] | None = None) -> Node:
    return Node(
        metadata=ObjectMeta(name=name, labels=labels or {}),
        status=NodeStatus(addresses=tuple(NodeAddress(type=t, address=a) for t, a in addresses)),
    )


def _service(*families: str) -> Service:
    return Service(
        metadata=ObjectMeta(name="web", namespace="default"),
        spec=ServiceSpec(
            type="LoadBalancer",
            ports=(ServicePort(protocol="TCP", port=80, node_port=30080),),
            ip_families=families or ("IPv4",),
        ),
    )


def _published(nodes: list[Node], rules: AddressRules = RULES) -> dict[str, set[str]]:
    found = node_addresses(nodes, rules)
    return {name: {a for _, a in pairs} for name, pairs in found.published.items()}


def _refused(nodes: list[Node], rules: AddressRules = RULES) -> dict[str, str]:
    return {r.address: r.why for r in node_addresses(nodes, rules).refused}


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("0.0.0.0", "unspecified"),
        ("0.1.2.3", "unspecified"),
        ("::", "unspecified"),
        ("127.0.0.1", "loopback"),
        ("127.10.0.5", "loopback"),
        ("::1", "loopback"),
        ("169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("224.0.0.251", "multicast"),
        ("ff02::1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "reserved"),
        ("::ffff:10.0.0.9", "IPv4-mapped"),
        ("fe80::1%eth0", "not an IP address"),
        ("node-1.example", "not an IP address"),
    ],
)
def test_an_address_that_is_no_one_node_s_is_never_published(address: str, why: str) -> None:
    for kind in ("ExternalIP", "InternalIP"):
        nodes = [_node("n1", ("InternalIP", "10.0.0.1"), (kind, address))]
        assert _published(nodes) == {"n1": {"10.0.0.1"}}
        refused = _refused(nodes)
        # What is not an address is told quoted (the node wrote it).
        shown = repr(address) if why == "not an IP address" else address
        assert why in refused[shown]


def test_the_kubernetes_service_s_cluster_ip_is_never_published() -> None:
    control_plane = {"node-role.kubernetes.io/control-plane": ""}
    nodes = [
        _node("n1", ("InternalIP", "10.0.0.1"), ("ExternalIP", "10.43.0.1")),
        _node("cp", ("InternalIP", "10.0.0.2"), ("InternalIP", "10.43.0.1"), labels=control_plane),
    ]
    # (Two Nodes report it too: each alone is refused for the ClusterIP first.)
    assert _published(nodes) == {"n1": {"10.0.0.1"}, "cp": {"10.0.0.2"}}
    assert "ClusterIP of the kubernetes Service" in _refused(nodes)["10.43.0.1"]
    lone = [_node("n1", ("InternalIP", "10.43.0.1"))]
    assert _published(lone) == {}
    assert "ClusterIP" in _refused(lone)["10.43.0.1"]


def test_kube_apiserver_s_address_is_published_only_for_a_control_plane_node() -> None:
    worker = [_node("n1", ("InternalIP", "10.0.0.1"), ("ExternalIP", "192.0.2.10"))]
    assert _published(worker) == {"n1": {"10.0.0.1"}}
    assert "endpoint of the kubernetes Service" in _refused(worker)["192.0.2.10"]
    # A node cannot label itself node-role.kubernetes.io/* (NodeRestriction): an admin
    # did, and there kube-apiserver's address is the node's own (k3s server, kubeadm).
    for label in ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master"):
        server = [_node("cp", ("InternalIP", "192.0.2.10"), labels={label: "true"})]
        assert _published(server) == {"cp": {"192.0.2.10"}}


def test_an_address_two_nodes_report_is_published_for_neither() -> None:
    nodes = [
        _node("n1", ("InternalIP", "10.0.0.1"), ("InternalIP", "fd00::1")),
        # n2 claims n1's addresses, as an ExternalIP and in another spelling.
        _node(
            "n2",
            ("InternalIP", "10.0.0.2"),
            ("ExternalIP", "10.0.0.1"),
            ("InternalIP", "fd00:0::1"),
        ),
        _node("n3", ("InternalIP", "10.0.0.3")),
    ]
    assert _published(nodes) == {"n2": {"10.0.0.2"}, "n3": {"10.0.0.3"}}
    refused = node_addresses(nodes, RULES).refused
    assert {(r.node, r.address) for r in refused} == {
        ("n1", "10.0.0.1"),
        ("n1", "fd00::1"),
        ("n2", "10.0.0.1"),
        ("n2", "fd00:0::1"),
    }
    assert {r.why for r in refused if r.node == "n1"} == {"Node n2 reports it too"}
    # One node reporting one address as both types is not a duplicate (k3s does that).
    same = [_node("n1", ("InternalIP", "10.0.0.1"), ("ExternalIP", "10.0.0.1"))]
    assert _published(same) == {"n1": {"10.0.0.1"}}


def test_with_node_address_cidrs_only_addresses_inside_are_published() -> None:
    networks = node_networks(load_config("nodeAddressCIDRs: [10.0.0.0/24, 'fd00::/64']\n"))
    rules = AddressRules(networks=networks, cluster_ips=RULES.cluster_ips)
    nodes = [
        _node(
            "n1",
            ("InternalIP", "10.0.0.1"),
            ("InternalIP", "fd00::1"),
            ("ExternalIP", "203.0.113.7"),
        ),
        _node("n2", ("InternalIP", "10.0.1.2")),
    ]
    assert _published(nodes, rules) == {"n1": {"10.0.0.1", "fd00::1"}}
    refused = _refused(nodes, rules)
    assert set(refused) == {"203.0.113.7", "10.0.1.2"}
    assert "outside nodeAddressCIDRs (10.0.0.0/24, fd00::/64)" in refused["10.0.1.2"]
    # Without the key, any network (as k3s) but for the refusals above.
    assert _published(nodes) == {
        "n1": {"10.0.0.1", "fd00::1", "203.0.113.7"},
        "n2": {"10.0.1.2"},
    }


def test_a_refused_external_ip_does_not_turn_the_service_to_external_addresses() -> None:
    nodes = [
        _node("n1", ("InternalIP", "10.0.0.1")),
        _node("n2", ("InternalIP", "10.0.0.2"), ("ExternalIP", "192.0.2.10")),
    ]
    status = ingress(_service(), node_addresses(nodes, RULES), {"n1", "n2"})
    assert [i.ip for i in status.ingress] == ["10.0.0.1", "10.0.0.2"]
    # Before the fix the node's ExternalIP alone was the Service's address.
    allowed = ingress(_service(), node_addresses(nodes), {"n1", "n2"})
    assert [i.ip for i in allowed.ingress] == ["192.0.2.10"]


@pytest.mark.parametrize(
    "value", ["[10.0.0.1/24]", "[10.0.0.0]", "[nodes]", "['fe80::/64%eth0']", "[10.0.0.0/33]"]
)
def test_a_bad_node_address_cidr_is_a_config_error_naming_the_key(value: str) -> None:
    with pytest.raises(ServiceLBConfigError, match=r"`nodeAddressCIDRs` has .*CIDR notation"):
        load_config(f"nodeAddressCIDRs: {value}\n")


def test_node_address_cidrs_default_to_none() -> None:
    assert load_config(None).node_address_cidrs == ()
    assert node_networks(load_config(None)) == ()
