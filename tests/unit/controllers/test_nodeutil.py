"""The cloud node controller's pure rules: addresses, node-IP annotation, labels."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from kube_ccm.controllers.nodeutil import (
    NodeIPError,
    additional_labels_to_add,
    addresses_changed,
    check_node_ip,
    desired_addresses,
    ga_label_fixes,
    parse_node_ip_annotation,
)


@dataclass(frozen=True)
class Addr:
    type: str
    address: str


INTERNAL = Addr("InternalIP", "10.0.0.5")
INTERNAL2 = Addr("InternalIP", "10.0.0.6")
EXTERNAL = Addr("ExternalIP", "203.0.113.5")
V6 = Addr("InternalIP", "2600:1f14:0:0:0:0:0:ba3d")
HOST = Addr("Hostname", "node-a")


@pytest.mark.parametrize(
    "value", ["10.0.0.5", "2600::1", "10.0.0.5,2600::1", " 10.0.0.5 , 2600::1"]
)
def test_valid_node_ip_annotations(value: str) -> None:
    assert parse_node_ip_annotation(value)


@pytest.mark.parametrize(
    "value",
    ["garbage", "10.0.0.5,10.0.0.6", "10.0.0.5,2600::1,10.0.0.7", "0.0.0.0", "::", "10.0.0.5,"],
)
def test_invalid_node_ip_annotations_are_errors(value: str) -> None:
    with pytest.raises(NodeIPError):
        parse_node_ip_annotation(value)


def test_node_ip_first_then_other_types_and_secondaries_of_its_type_dropped() -> None:
    result = desired_addresses([INTERNAL, INTERNAL2, EXTERNAL, HOST], [], "10.0.0.6")
    assert result == [INTERNAL2, EXTERNAL, HOST]


def test_node_ip_is_compared_as_an_ip_not_as_text() -> None:
    assert desired_addresses([INTERNAL, V6], [], "2600:1f14::ba3d") == [V6]


def test_node_ip_not_among_the_cloud_addresses_is_an_error() -> None:
    with pytest.raises(NodeIPError, match=r"matches ip: 10\.9\.9\.9"):
        check_node_ip([INTERNAL, EXTERNAL], "10.9.9.9")


def test_kubelet_hostname_is_kept_at_the_end_when_the_cloud_has_none() -> None:
    existing = [Addr("InternalIP", "1.1.1.1"), HOST]
    assert desired_addresses([INTERNAL, EXTERNAL], existing, None) == [INTERNAL, EXTERNAL, HOST]


def test_cloud_hostname_wins_over_the_kubelets() -> None:
    cloud_host = Addr("Hostname", "cloud-name")
    assert desired_addresses([INTERNAL, cloud_host], [HOST], None) == [INTERNAL, cloud_host]


def test_no_cloud_addresses_leaves_the_node_alone() -> None:
    assert desired_addresses([], [INTERNAL], None) is None


def test_change_detection() -> None:
    assert not addresses_changed([INTERNAL, HOST], [INTERNAL, HOST])
    assert addresses_changed([INTERNAL], [INTERNAL, HOST])
    assert addresses_changed([INTERNAL, HOST], [INTERNAL2, HOST])


def test_addresses_in_another_type_order_are_a_change() -> None:
    # A Hostname that ended up before the cloud's addresses is put back after them.
    assert addresses_changed([HOST, INTERNAL], [INTERNAL, HOST])
    assert not addresses_changed([HOST, INTERNAL], [HOST, INTERNAL])


def test_additional_labels_skip_reserved_domains_and_never_overwrite() -> None:
    additional = {
        "kubernetes.io/x": "1",
        "k8s.io/x": "1",
        "topology.kubernetes.io/x": "1",
        "topology.k8s.io/x": "1",
        "k8snio/x": "kept",
        "app.k8snio/x": "kept",
        "example.com/team": "cloud",
        "example.com/new": "yes",
    }
    existing = {"example.com/team": "user"}
    assert additional_labels_to_add(additional, existing) == {
        "k8snio/x": "kept",
        "app.k8snio/x": "kept",
        "example.com/new": "yes",
    }


def test_ga_labels_follow_beta_labels() -> None:
    labels = {
        "failure-domain.beta.kubernetes.io/zone": "z1",
        "topology.kubernetes.io/zone": "old",
        "failure-domain.beta.kubernetes.io/region": "r1",
        "node.kubernetes.io/instance-type": "only-ga",
    }
    assert ga_label_fixes(labels) == {
        "topology.kubernetes.io/zone": "z1",
        "topology.kubernetes.io/region": "r1",
    }
    assert ga_label_fixes({"topology.kubernetes.io/zone": "z"}) == {}
