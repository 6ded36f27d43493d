"""Taint, condition, address and zone helpers (upstream-behaviour.md §7)."""

from __future__ import annotations

import pytest

from kube_ccm.api.helpers import (
    add_or_update_taint,
    find_taint,
    get_node_condition,
    has_taint,
    merge_addresses,
    node_ready_status,
    parse_zones,
    remove_taint,
    taint_matches,
    zones_from_label_value,
    zones_to_label_value,
)
from kube_ccm.api.objects import Node, NodeAddress, NodeCondition, NodeSpec, NodeStatus, Taint
from kube_ccm.api.wellknown import TAINT_UNINITIALIZED

UNINIT = Taint(key=TAINT_UNINITIALIZED, value="true", effect="NoSchedule")
NOT_READY = Taint(key="node.kubernetes.io/not-ready", effect="NoExecute")


def _node(*conditions: NodeCondition, taints: tuple[Taint, ...] = ()) -> Node:
    return Node(spec=NodeSpec(taints=taints), status=NodeStatus(conditions=conditions))


# -- taints -------------------------------------------------------------------


def test_taints_match_on_key_and_effect_regardless_of_value() -> None:
    assert taint_matches(UNINIT, Taint(key=TAINT_UNINITIALIZED, value="x", effect="NoSchedule"))
    assert not taint_matches(UNINIT, Taint(key=TAINT_UNINITIALIZED, effect="NoExecute"))
    assert not taint_matches(UNINIT, Taint(key="other", effect="NoSchedule"))


def test_adding_a_new_taint_appends_it() -> None:
    taints, changed = add_or_update_taint((NOT_READY,), UNINIT)
    assert changed
    assert taints == (NOT_READY, UNINIT)


def test_adding_an_identical_taint_changes_nothing() -> None:
    taints, changed = add_or_update_taint((UNINIT, NOT_READY), UNINIT)
    assert not changed
    assert taints == (UNINIT, NOT_READY)


def test_adding_a_taint_with_a_new_value_replaces_it_in_place() -> None:
    updated = Taint(key=TAINT_UNINITIALIZED, value="false", effect="NoSchedule")
    taints, changed = add_or_update_taint((UNINIT, NOT_READY), updated)
    assert changed
    assert taints == (updated, NOT_READY)


def test_adding_a_taint_with_a_new_time_counts_as_a_change() -> None:
    stamped = Taint(key=NOT_READY.key, effect="NoExecute", time_added="2026-11-20T09:14:05Z")
    taints, changed = add_or_update_taint((NOT_READY,), stamped)
    assert changed
    assert taints == (stamped,)


def test_removing_a_taint_drops_every_key_and_effect_match() -> None:
    duplicate = Taint(key=TAINT_UNINITIALIZED, value="other", effect="NoSchedule")
    taints, changed = remove_taint((UNINIT, NOT_READY, duplicate), UNINIT)
    assert changed
    assert taints == (NOT_READY,)


def test_removing_an_absent_taint_reports_no_change() -> None:
    taints, changed = remove_taint((NOT_READY,), UNINIT)
    assert not changed
    assert taints == (NOT_READY,)


def test_find_taint_by_key_with_and_without_effect() -> None:
    node = _node(taints=(NOT_READY, UNINIT))
    assert find_taint(node.spec.taints, TAINT_UNINITIALIZED) == UNINIT
    assert find_taint(node.spec.taints, TAINT_UNINITIALIZED, "NoExecute") is None
    assert has_taint(node, "node.kubernetes.io/not-ready", "NoExecute")
    assert not has_taint(node, "ToBeDeletedByClusterAutoscaler")


# -- conditions ---------------------------------------------------------------


@pytest.mark.parametrize("status", ["True", "False", "Unknown"])
def test_ready_status_is_the_ready_conditions_status(status: str) -> None:
    node = _node(
        NodeCondition(type="MemoryPressure", status="False"),
        NodeCondition(type="Ready", status=status),
    )
    assert node_ready_status(node) == status


def test_node_without_ready_condition_counts_as_unknown() -> None:
    assert node_ready_status(_node(NodeCondition(type="DiskPressure", status="False"))) == (
        "Unknown"
    )
    assert node_ready_status(Node()) == "Unknown"


def test_get_node_condition_returns_the_condition_or_none() -> None:
    condition = NodeCondition(type="NetworkUnavailable", status="False", reason="RouteCreated")
    node = _node(condition)
    assert get_node_condition(node, "NetworkUnavailable") == condition
    assert get_node_condition(node, "Ready") is None


# -- addresses ----------------------------------------------------------------


def test_address_union_appends_only_new_type_address_pairs_in_order() -> None:
    internal = NodeAddress(type="InternalIP", address="10.0.0.1")
    hostname = NodeAddress(type="Hostname", address="n1")
    external_same_ip = NodeAddress(type="ExternalIP", address="10.0.0.1")
    merged = merge_addresses((internal, hostname), (hostname, external_same_ip, external_same_ip))
    assert merged == (internal, hostname, external_same_ip)


# -- zones --------------------------------------------------------------------


def test_comma_separated_zones_become_a_set_with_spaces_trimmed() -> None:
    assert parse_zones("a, b ,a") == frozenset({"a", "b"})


@pytest.mark.parametrize("value", ["", "a,", "a,,b", " , "])
def test_zone_list_with_an_empty_element_is_an_error(value: str) -> None:
    with pytest.raises(ValueError, match="empty zone"):
        parse_zones(value)


def test_multi_zone_label_value_splits_on_double_underscore() -> None:
    assert zones_from_label_value("1__2__3") == frozenset({"1", "2", "3"})
    assert zones_from_label_value("us-east-1a") == frozenset({"us-east-1a"})


@pytest.mark.parametrize("value", ["", "a__", "a____b"])
def test_multi_zone_label_value_with_an_empty_element_is_an_error(value: str) -> None:
    with pytest.raises(ValueError, match="empty zone"):
        zones_from_label_value(value)


def test_zones_join_sorted_into_a_label_value() -> None:
    assert zones_to_label_value({"b", "a", "c"}) == "a__b__c"
