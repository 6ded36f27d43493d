"""The controller table: one descriptor per controller, everything else derived from it."""

from __future__ import annotations

from kube_ccm.api import wellknown as wk
from kube_ccm.app.descriptors import (
    BY_NAME,
    CONTROLLER_IDENTITIES,
    CONTROLLERS,
    DISABLED_BY_DEFAULT,
)


def test_each_controller_has_one_descriptor_with_unique_names_and_aliases() -> None:
    names = [c.name for c in CONTROLLERS]
    aliases = [c.alias for c in CONTROLLERS]
    assert len(set(names)) == len(names) == len(BY_NAME)
    assert len(set(aliases)) == len(aliases)
    assert not set(names) & set(aliases)


def test_upstreams_four_come_first_and_run_with_star() -> None:
    assert [c.names for c in CONTROLLERS[:4]] == list(wk.CONTROLLERS)
    assert all(c.enabled_by_default for c in CONTROLLERS[:4])


def test_kube_ccms_own_controllers_and_node_ipam_are_off_unless_named() -> None:
    assert {
        wk.CONTROLLER_PV_LABEL,
        wk.CONTROLLER_LB_GC,
        wk.CONTROLLER_NODE_IPAM,
        wk.CONTROLLER_KUBELET_SERVING_CERT_APPROVER,
    } == DISABLED_BY_DEFAULT


def test_the_service_accounts_are_the_controllers_identities() -> None:
    assert {
        wk.IDENTITY_NODE_CONTROLLER,
        wk.IDENTITY_SERVICE_CONTROLLER,
        wk.IDENTITY_ROUTE_CONTROLLER,
        wk.IDENTITY_PVL_CONTROLLER,
        wk.IDENTITY_KUBELET_SERVING_CERT_APPROVER,
    } == CONTROLLER_IDENTITIES


def test_running_managed_controllers_is_labelled_with_the_alias() -> None:
    assert {c.name: c.metric_name for c in CONTROLLERS} == {c.name: c.alias for c in CONTROLLERS}
