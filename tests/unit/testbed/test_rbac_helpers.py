"""The least-privilege helpers read audit events and RBAC rules correctly."""

from __future__ import annotations

from typing import Any

from kube_ccm.testbed.rbac import (
    granted_permissions,
    granted_rules,
    rule_matches,
    unused_permissions,
    unused_rules,
)

LEASES = {
    "apiGroups": ["coordination.k8s.io"],
    "resources": ["leases"],
    "resourceNames": ["cloud-controller-manager"],
    "verbs": ["get", "update"],
}
NODE_STATUS = {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]}


def event(verb: str, resource: str, name: str = "", group: str = "", sub: str = "") -> Any:
    ref = {"resource": resource, "apiGroup": group, "name": name, "subresource": sub}
    return {"verb": verb, "objectRef": {k: v for k, v in ref.items() if v}}


def test_resource_names_subresources_and_verbs_must_all_match() -> None:
    assert rule_matches(
        LEASES, event("get", "leases", "cloud-controller-manager", "coordination.k8s.io")
    )
    assert not rule_matches(LEASES, event("get", "leases", "other", "coordination.k8s.io"))
    assert not rule_matches(
        LEASES, event("delete", "leases", "cloud-controller-manager", "coordination.k8s.io")
    )
    assert rule_matches(NODE_STATUS, event("patch", "nodes", "n1", sub="status"))
    assert not rule_matches(NODE_STATUS, event("patch", "nodes", "n1"))


def test_only_rules_bound_to_the_account_count_and_builtin_roles_expand() -> None:
    docs: list[dict[str, Any]] = [
        {"kind": "ClusterRole", "metadata": {"name": "ccm"}, "rules": [LEASES, NODE_STATUS]},
        {"kind": "ClusterRole", "metadata": {"name": "unbound"}, "rules": [NODE_STATUS]},
        {
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "b"},
            "roleRef": {"kind": "ClusterRole", "name": "ccm"},
            "subjects": [{"kind": "ServiceAccount", "name": "ccm", "namespace": "kube-system"}],
        },
        {
            "kind": "RoleBinding",
            "metadata": {"name": "r", "namespace": "kube-system"},
            "roleRef": {"kind": "Role", "name": "extension-apiserver-authentication-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "ccm", "namespace": "kube-system"}],
        },
    ]
    rules = granted_rules(docs, "ccm")
    assert [role for role, _ in rules] == [
        "ccm",
        "ccm",
        "extension-apiserver-authentication-reader",
    ]
    used = [event("patch", "nodes", "n1", sub="status")]
    unused = unused_rules(rules, used)
    assert len(unused) == 2
    assert unused[0].startswith("ccm: ")
    assert "leases" in unused[0]


def test_permissions_are_one_verb_on_one_resource_and_name_in_the_binding_s_namespace() -> None:
    docs: list[dict[str, Any]] = [
        {"kind": "ClusterRole", "metadata": {"name": "ccm"}, "rules": [NODE_STATUS]},
        {
            "kind": "Role",
            "metadata": {"name": "le", "namespace": "kube-system"},
            "rules": [{**LEASES, "resourceNames": ["ccm", "migration"]}],
        },
        {"kind": "Role", "metadata": {"name": "le", "namespace": "elsewhere"}, "rules": [LEASES]},
        {
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "b"},
            "roleRef": {"kind": "ClusterRole", "name": "ccm"},
            "subjects": [{"kind": "ServiceAccount", "name": "ccm", "namespace": "kube-system"}],
        },
        {
            "kind": "RoleBinding",
            "metadata": {"name": "le", "namespace": "kube-system"},
            "roleRef": {"kind": "Role", "name": "le"},
            "subjects": [{"kind": "ServiceAccount", "name": "ccm", "namespace": "kube-system"}],
        },
        {
            "kind": "RoleBinding",
            "metadata": {"name": "r", "namespace": "kube-system"},
            "roleRef": {"kind": "Role", "name": "extension-apiserver-authentication-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "ccm", "namespace": "kube-system"}],
        },
    ]
    granted = granted_permissions(docs, "ccm")
    assert [str(p) for p in granted] == [
        "ccm: patch nodes/status",
        "le: get coordination.k8s.io/leases ccm in kube-system",
        "le: get coordination.k8s.io/leases migration in kube-system",
        "le: update coordination.k8s.io/leases ccm in kube-system",
        "le: update coordination.k8s.io/leases migration in kube-system",
    ]
    in_kube_system = {**event("get", "leases", "ccm", "coordination.k8s.io")}
    in_kube_system["objectRef"]["namespace"] = "kube-system"
    elsewhere = {**event("update", "leases", "ccm", "coordination.k8s.io")}
    elsewhere["objectRef"]["namespace"] = "default"
    used = [in_kube_system, elsewhere, event("patch", "nodes", "n1", sub="status")]
    assert unused_permissions(granted, used) == [
        "le: get coordination.k8s.io/leases migration in kube-system",
        "le: update coordination.k8s.io/leases ccm in kube-system",
        "le: update coordination.k8s.io/leases migration in kube-system",
    ]


def test_a_non_resource_permission_matches_the_path_without_query() -> None:
    docs: list[dict[str, Any]] = [
        {
            "kind": "ClusterRole",
            "metadata": {"name": "reader"},
            "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}],
        },
        {
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "reader"},
            "roleRef": {"kind": "ClusterRole", "name": "reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "p", "namespace": "monitoring"}],
        },
    ]
    (permission,) = granted_permissions(docs, "p")
    assert permission.allows({"verb": "get", "requestURI": "/metrics?x=1"})
    assert not permission.allows({"verb": "get", "requestURI": "/healthz"})
    assert not permission.allows({**event("get", "nodes"), "requestURI": "/metrics"})
