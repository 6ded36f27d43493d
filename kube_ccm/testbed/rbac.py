"""Least-privilege checks for a CCM's RBAC against the real control plane.

Install RBAC manifests, get a kubeconfig for their ServiceAccount (a
TokenRequest token), run the daemon with it, then read the API server's audit
log (``ControlPlaneOptions(audit_users=...)``) to find what was forbidden and
which granted rules were never used::

    kubeconfig = await install_service_account(plane, docs, "kube-system", "my-ccm")
    ...  # run the daemon with kubeconfig
    assert not forbidden(plane, user, since)
    assert not unused_rules(granted_rules(docs, "my-ccm"), requests(plane, user, since))

:func:`unused_permissions` is the finer check: every verb on every resource (and every
name a rule lists) of every role ``docs`` bind, each used by some request.
:func:`refused_by_admission` finds requests a ValidatingAdmissionPolicy denied.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kube_ccm.runtime.client import ApiError, KubeClient
from kube_ccm.testing.controlplane import ControlPlane

CCM_SERVICE_ACCOUNT_USER = "system:serviceaccount:kube-system:cloud-controller-manager"
"""The user of deploy/'s ServiceAccount (the test control plane audits its requests)."""

CONTROLLER_SERVICE_ACCOUNT_USERS = tuple(
    f"system:serviceaccount:kube-system:{name}"
    for name in (
        "node-controller",
        "service-controller",
        "route-controller",
        "pvl-controller",
        "kubelet-serving-cert-approver",
    )
)
"""The controllers' identities with ``--use-service-account-credentials``."""
LEAST_PRIVILEGE_ACCOUNTS = (
    "ccm-simulated",
    "ccm-sa-credentials",
    "ccm-ippool",
    "ccm-servicelb",
    "ccm-composite",
)
"""ServiceAccounts in kube-system that tests/integration/test_rbac_combinations.py binds
with one controller/provider combination's shipped RBAC each (deploy/'s, renamed), so
that no other test's rules are mixed in; audited like deploy/'s own."""
AUDITED_USERS = (
    CCM_SERVICE_ACCOUNT_USER,
    *CONTROLLER_SERVICE_ACCOUNT_USERS,
    *(f"system:serviceaccount:kube-system:{name}" for name in LEAST_PRIVILEGE_ACCOUNTS),
)

_ADMISSION = "/apis/admissionregistration.k8s.io/v1"
POLICY_COLLECTIONS = {
    "ValidatingAdmissionPolicy": f"{_ADMISSION}/validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": f"{_ADMISSION}/validatingadmissionpolicybindings",
}
"""Where the admission policies of deploy/admission-policies.yaml are created."""

_COLLECTIONS = {
    "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    "Role": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
    "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
}

BUILTIN_ROLES: dict[str, list[dict[str, Any]]] = {
    # Every API server creates this Role in kube-system (the client-CA ConfigMap).
    "extension-apiserver-authentication-reader": [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": ["extension-apiserver-authentication"],
            "verbs": ["get", "list", "watch"],
        }
    ],
}


def renamed(value: Any, account: str, shipped: str = "cloud-controller-manager") -> Any:
    """``value`` (manifests, or any YAML value) with deploy/'s name ``shipped`` replaced
    by ``account`` in every string: the ServiceAccount, the roles and bindings, the
    Lease and the admission policies' user, as the chart's ``name`` value renames
    them. So a test binds exactly the shipped rules to an account of its own."""
    if isinstance(value, str):
        return value.replace(shipped, account)
    if isinstance(value, list):
        return [renamed(v, account, shipped) for v in value]
    if isinstance(value, dict):
        return {k: renamed(v, account, shipped) for k, v in value.items()}
    return value


def service_account_user(namespace: str, name: str) -> str:
    return f"system:serviceaccount:{namespace}:{name}"


def now_timestamp() -> str:
    """A timestamp comparable with audit events' ``requestReceivedTimestamp``."""
    # Microseconds, as the audit log writes them: a second's resolution would count the
    # last requests of a daemon stopped within the same second.
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


async def install_service_account(
    plane: ControlPlane,
    docs: Iterable[dict[str, Any]],
    namespace: str,
    name: str,
    *,
    kubeconfig: Path,
    token_seconds: int = 6 * 3600,
) -> Path:
    """Create ``docs`` (existing objects are kept), wait until the apiserver's
    authorizer grants what they bind, then write a kubeconfig for the ServiceAccount
    ``namespace/name`` with a TokenRequest token to ``kubeconfig``."""
    docs = list(docs)
    async with KubeClient.from_kubeconfig(plane.kubeconfig) as admin:
        for obj in docs:
            path = _COLLECTIONS[obj["kind"]].format(ns=obj["metadata"].get("namespace", ""))
            try:
                await admin.create(path, obj)
            except ApiError as exc:
                if not exc.already_exists:
                    raise
        await wait_until_granted(admin, docs, namespace, name)
        request = await admin.create(
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": token_seconds},
            },
        )
    _write_kubeconfig(plane, kubeconfig, name, request["status"]["token"])
    return kubeconfig


async def wait_until_granted(
    admin: KubeClient,
    docs: Sequence[dict[str, Any]],
    namespace: str,
    name: str,
    within: float = 30.0,
) -> None:
    """Poll SubjectAccessReviews until every rule ``docs`` bind to the ServiceAccount is
    granted: the RBAC authorizer reads roles and bindings from its own informers, so a
    request made right after creating them can still be refused."""
    role_namespaces = {
        doc["metadata"]["name"]: doc["metadata"].get("namespace", "")
        for doc in docs
        if doc["kind"] == "Role"
    }
    user = service_account_user(namespace, name)
    groups = ["system:serviceaccounts", f"system:serviceaccounts:{namespace}"]
    reviews = []
    for role, rule in granted_rules(docs, name):
        verb = rule["verbs"][0]
        if "nonResourceURLs" in rule:
            reviews.append(
                {"nonResourceAttributes": {"path": rule["nonResourceURLs"][0], "verb": verb}}
            )
            continue
        resource, _, subresource = rule["resources"][0].partition("/")
        attributes = {"group": rule["apiGroups"][0], "resource": resource, "verb": verb}
        if subresource:
            attributes["subresource"] = subresource
        if rule.get("resourceNames"):
            attributes["name"] = rule["resourceNames"][0]
        ns = role_namespaces.get(role) or ("kube-system" if role in BUILTIN_ROLES else "")
        if ns:
            attributes["namespace"] = ns
        reviews.append({"resourceAttributes": attributes})
    deadline = asyncio.get_running_loop().time() + within
    for attributes in reviews:
        while True:
            review = await admin.create(
                "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                {
                    "apiVersion": "authorization.k8s.io/v1",
                    "kind": "SubjectAccessReview",
                    "spec": {"user": user, "groups": groups, **attributes},
                },
            )
            if review.get("status", {}).get("allowed"):
                break
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"{user} still not granted {attributes} after {within:g} s")
            await asyncio.sleep(0.05)


def _write_kubeconfig(plane: ControlPlane, kubeconfig: Path, name: str, token: str) -> None:
    admin_config = yaml.safe_load(plane.kubeconfig.read_text())
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "local", "cluster": admin_config["clusters"][0]["cluster"]}],
                "users": [{"name": name, "user": {"token": token}}],
                "contexts": [{"name": name, "context": {"cluster": "local", "user": name}}],
                "current-context": name,
            }
        )
    )


def requests(plane: ControlPlane, user: str, since: str = "") -> list[dict[str, Any]]:
    """The audit events of ``user``'s requests received at or after ``since``."""
    return [
        event
        for event in plane.audit_events()
        if event["user"]["username"] == user and event["requestReceivedTimestamp"] >= since
    ]


def forbidden(plane: ControlPlane, user: str, since: str = "") -> list[str]:
    """``user``'s requests the authorizer refused (RBAC), readable.

    Other 403s are not permission problems and are left out: admission refusing
    new objects in a terminating namespace, for one, which is how events for a
    test's namespace end when the test deletes it; and refusals while a restarted
    apiserver's authorizer was still loading roles (:attr:`ControlPlane.restarts`).
    """
    return [
        f"{event.get('requestReceivedTimestamp', '')} {event['user']['username']} "
        f"{event['verb']} {event['requestURI']} ({event.get('userAgent', '')}): "
        f"{(event.get('annotations') or {}).get('authorization.k8s.io/reason', '')}"
        for event in requests(plane, user, since)
        if (event.get("annotations") or {}).get("authorization.k8s.io/decision") == "forbid"
        and not any(
            began <= event.get("requestReceivedTimestamp", "") <= ready
            for began, ready in plane.restarts
        )
    ]


def granted_rules(docs: Sequence[dict[str, Any]], account: str) -> list[tuple[str, dict[str, Any]]]:
    """(role name, rule) for every rule the bindings in ``docs`` give the ServiceAccount
    named ``account``; built-in Roles (:data:`BUILTIN_ROLES`) are expanded."""
    bound = {
        doc["roleRef"]["name"]
        for doc in docs
        if doc["kind"] in ("ClusterRoleBinding", "RoleBinding")
        and any(
            subject.get("kind") == "ServiceAccount" and subject.get("name") == account
            for subject in doc.get("subjects") or ()
        )
    }
    rules = [
        (doc["metadata"]["name"], rule)
        for doc in docs
        if doc["kind"] in ("ClusterRole", "Role") and doc["metadata"]["name"] in bound
        for rule in doc.get("rules") or ()
    ]
    rules += [(name, rule) for name in bound & BUILTIN_ROLES.keys() for rule in BUILTIN_ROLES[name]]
    return rules


def rule_matches(rule: dict[str, Any], event: dict[str, Any]) -> bool:
    """Whether the audited request is one the rule allows."""
    ref = event.get("objectRef") or {}
    if not ref:
        path = event.get("requestURI", "").split("?")[0]
        return path in rule.get("nonResourceURLs", ()) and event["verb"] in rule["verbs"]
    resource = ref.get("resource", "")
    if ref.get("subresource"):
        resource += "/" + ref["subresource"]
    names = rule.get("resourceNames")
    return (
        ref.get("apiGroup", "") in rule.get("apiGroups", ())
        and resource in rule.get("resources", ())
        and event["verb"] in rule["verbs"]
        and (not names or ref.get("name") in names)
    )


def unused_rules(
    rules: Iterable[tuple[str, dict[str, Any]]], events: Sequence[dict[str, Any]]
) -> list[str]:
    """Rules no audited request used, readable."""
    return [
        f"{role}: {rule}"
        for role, rule in rules
        if not any(rule_matches(rule, event) for event in events)
    ]


@dataclass(frozen=True, order=True)
class Permission:
    """One verb on one resource (or non-resource URL), and on one name when the rule
    lists names, granted by one role; ``namespace`` is "" cluster-wide."""

    role: str
    namespace: str
    group: str
    resource: str
    """``nodes``, ``nodes/status``; a non-resource URL starts with ``/``."""
    verb: str
    name: str = ""

    def allows(self, event: dict[str, Any]) -> bool:
        """Whether the audited request is one this permission allows."""
        if event["verb"] != self.verb:
            return False
        ref = event.get("objectRef") or {}
        if self.resource.startswith("/"):
            return not ref and event.get("requestURI", "").split("?")[0] == self.resource
        resource = ref.get("resource", "")
        if ref.get("subresource"):
            resource += "/" + ref["subresource"]
        return (
            ref.get("apiGroup", "") == self.group
            and resource == self.resource
            and (not self.namespace or ref.get("namespace", "") == self.namespace)
            and (not self.name or ref.get("name") == self.name)
        )

    def __str__(self) -> str:
        group = f"{self.group}/" if self.group else ""
        name = f" {self.name}" if self.name else ""
        where = f" in {self.namespace}" if self.namespace else ""
        return f"{self.role}: {self.verb} {group}{self.resource}{name}{where}"


def granted_permissions(docs: Sequence[dict[str, Any]], account: str) -> list[Permission]:
    """Every :class:`Permission` the bindings in ``docs`` give the ServiceAccount named
    ``account``, a RoleBinding's in its namespace. Built-in roles are left out: they
    are the cluster's, not ours to narrow (:func:`unused_rules` checks that their
    bindings are used)."""
    roles = {
        (doc["kind"], doc["metadata"].get("namespace", ""), doc["metadata"]["name"]): doc
        for doc in docs
        if doc["kind"] in ("ClusterRole", "Role")
    }
    found: list[Permission] = []
    for binding in docs:
        if binding["kind"] not in ("ClusterRoleBinding", "RoleBinding") or not any(
            subject.get("kind") == "ServiceAccount" and subject.get("name") == account
            for subject in binding.get("subjects") or ()
        ):
            continue
        namespace = binding["metadata"].get("namespace", "")
        ref = binding["roleRef"]
        role = roles.get((ref["kind"], namespace if ref["kind"] == "Role" else "", ref["name"]))
        for rule in (role or {}).get("rules") or ():
            found += [
                Permission(ref["name"], namespace, group, resource, verb, name)
                for group in rule.get("apiGroups") or [""]
                for resource in rule.get("resources") or rule.get("nonResourceURLs") or ()
                for verb in rule["verbs"]
                for name in rule.get("resourceNames") or [""]
            ]
    return sorted(set(found))


def unused_permissions(
    permissions: Iterable[Permission], events: Sequence[dict[str, Any]]
) -> list[str]:
    """Permissions no audited request used, readable."""
    return [str(p) for p in permissions if not any(p.allows(event) for event in events)]


def refused_by_admission(plane: ControlPlane, user: str, since: str = "") -> list[str]:
    """``user``'s requests that a ValidatingAdmissionPolicy denied, readable."""
    return [
        f"{event.get('requestReceivedTimestamp', '')} {event['user']['username']} "
        f"{event['verb']} {event['requestURI']}: {event['responseStatus'].get('message', '')}"
        for event in requests(plane, user, since)
        if event.get("responseStatus", {}).get("code", 0) >= 400
        and "ValidatingAdmissionPolicy" in event["responseStatus"].get("message", "")
    ]


async def install_policies(admin: KubeClient, docs: Iterable[dict[str, Any]]) -> list[str]:
    """Create (or re-create) the ValidatingAdmissionPolicies and bindings among ``docs``;
    the paths of the objects, to delete them afterwards. The apiserver enforces them
    shortly after (its admission plugin loads them from an informer): wait for a
    request of yours to be refused before relying on them. Their status (type
    checking) is written by kube-controller-manager, which the test control plane
    does not run."""
    paths = []
    for doc in docs:
        if doc["kind"] not in POLICY_COLLECTIONS:
            continue
        collection = POLICY_COLLECTIONS[doc["kind"]]
        path = f"{collection}/{doc['metadata']['name']}"
        try:
            await admin.delete(path)
        except ApiError as exc:
            if not exc.not_found:
                raise
        await admin.create(collection, doc)
        paths.append(path)
    return paths
