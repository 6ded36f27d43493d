"""``kube-ccm doctor``: does this cluster have what an external CCM needs?

Checks a live cluster and prints one line per check — ``PASS``, ``WARN``,
``FAIL`` or ``SKIP`` — with the fix for each problem; exit status 1 if any check
fails. What it looks at:

* the API server answers (and its version);
* nodes: registered by kubelets with ``--cloud-provider=external`` (they carry
  the uninitialised taint until a CCM initialises them, then a providerID);
  nodes stuck uninitialised and for how long;
* kube-controller-manager: whether its static pod (if visible) still runs
  cloud loops (``--cloud-provider`` other than ``external``);
* kube-apiserver: the removed ``PersistentVolumeLabel`` admission plugin;
* the CCM's identity has every permission of ``deploy/rbac.yaml``
  (one SubjectAccessReview per rule);
* with ``--cloud-provider``: which capabilities the provider offers.
"""

from __future__ import annotations

import datetime
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, TextIO

from kube_ccm.api import wellknown as wk
from kube_ccm.runtime.client import ApiError, KubeClient

Status = Literal["PASS", "WARN", "FAIL", "SKIP"]
DEFAULT_IDENTITY = "system:serviceaccount:kube-system:cloud-controller-manager"
STUCK_AFTER = datetime.timedelta(minutes=5)

# (group, resource, subresource, verb, namespace[, name]) the default controllers use.
REQUIRED: tuple[tuple[str, ...], ...] = (
    ("", "events", "", "create", "default"),
    ("", "events", "", "patch", "default"),
    ("coordination.k8s.io", "leases", "", "create", "kube-system"),
    ("coordination.k8s.io", "leases", "", "get", "kube-system", "cloud-controller-manager"),
    ("coordination.k8s.io", "leases", "", "update", "kube-system", "cloud-controller-manager"),
    ("", "nodes", "", "list", ""),
    ("", "nodes", "", "watch", ""),
    ("", "nodes", "", "patch", ""),
    ("", "nodes", "", "delete", ""),
    ("", "nodes", "status", "patch", ""),
    ("", "services", "", "list", ""),
    ("", "services", "", "watch", ""),
    ("", "services", "status", "patch", ""),
)


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    fix: str = ""


def _age(timestamp: str | None, now: datetime.datetime) -> datetime.timedelta:
    if not timestamp:
        return datetime.timedelta(0)
    created = datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    return now - created


async def check_api(client: KubeClient) -> Check:
    try:
        version = await client.get("/version")
    except Exception as exc:
        return Check("API server", "FAIL", f"not reachable: {exc}", "check --kubeconfig")
    return Check("API server", "PASS", f"reachable, {version.get('gitVersion', '?')}")


async def check_nodes(
    client: KubeClient, now: datetime.datetime, stuck_after: datetime.timedelta = STUCK_AFTER
) -> list[Check]:
    nodes: list[dict[str, Any]] = (await client.get("/api/v1/nodes"))["items"]
    if not nodes:
        return [Check("nodes", "WARN", "no nodes registered yet")]
    tainted = [
        n
        for n in nodes
        if any(t.get("key") == wk.TAINT_UNINITIALIZED for t in n["spec"].get("taints") or [])
    ]
    with_id = [n for n in nodes if n["spec"].get("providerID")]
    external = len(tainted) + len([n for n in with_id if n not in tainted])
    checks = []
    if external == 0:
        checks.append(
            Check(
                "kubelets use --cloud-provider=external",
                "FAIL",
                f"none of {len(nodes)} nodes has the uninitialised taint or a providerID",
                "start every kubelet with --cloud-provider=external",
            )
        )
    else:
        checks.append(
            Check(
                "kubelets use --cloud-provider=external",
                "PASS",
                f"{len(with_id)} of {len(nodes)} nodes have a providerID, "
                f"{len(tainted)} wait for initialisation",
            )
        )
    stuck = [n for n in tainted if _age(n["metadata"].get("creationTimestamp"), now) > stuck_after]
    if stuck:
        oldest = int(
            max(_age(n["metadata"].get("creationTimestamp"), now) for n in stuck).total_seconds()
        )
        names = ", ".join(n["metadata"]["name"] for n in stuck[:5])
        checks.append(
            Check(
                "nodes initialised",
                "FAIL",
                f"{len(stuck)} stuck uninitialised (oldest {oldest} s): {names}",
                "is a CCM running and leading? see its log and the nodes' events",
            )
        )
    else:
        limit = int(stuck_after.total_seconds())
        checks.append(
            Check("nodes initialised", "PASS", f"no node uninitialised for over {limit} s")
        )
    return checks


async def _static_pod_flags(client: KubeClient, component: str) -> list[str] | None:
    try:
        pods = await client.get(
            "/api/v1/namespaces/kube-system/pods", {"labelSelector": f"component={component}"}
        )
    except ApiError:
        return None
    flags: list[str] = []
    for pod in pods["items"]:
        for container in pod["spec"].get("containers", []):
            flags += container.get("command", []) + container.get("args", [])
    return flags if pods["items"] else None


async def check_controller_manager(client: KubeClient) -> Check:
    flags = await _static_pod_flags(client, "kube-controller-manager")
    name = "kube-controller-manager runs no cloud loops"
    if flags is None:
        return Check(name, "SKIP", "its pod is not visible (not a static pod, or no access)")
    provider = next((f.split("=", 1)[1] for f in flags if f.startswith("--cloud-provider=")), "")
    if provider and provider != "external":
        return Check(
            name,
            "FAIL",
            f"kube-controller-manager has --cloud-provider={provider}",
            "set --cloud-provider=external on kube-controller-manager (or use leader migration)",
        )
    return Check(name, "PASS", "no in-tree cloud provider configured")


async def check_admission(client: KubeClient) -> Check:
    flags = await _static_pod_flags(client, "kube-apiserver")
    name = "no PersistentVolumeLabel admission plugin"
    if flags is None:
        return Check(name, "SKIP", "kube-apiserver's pod is not visible")
    plugins = ",".join(f for f in flags if f.startswith("--enable-admission-plugins="))
    if "PersistentVolumeLabel" in plugins:
        return Check(
            name,
            "FAIL",
            "kube-apiserver enables PersistentVolumeLabel",
            "remove it from --enable-admission-plugins; use the CCM's PV labels instead",
        )
    return Check(name, "PASS", "not enabled")


async def check_permissions(client: KubeClient, identity: str) -> Check:
    user, groups = identity, []
    if identity.startswith("system:serviceaccount:"):
        namespace = identity.split(":")[2]
        groups = ["system:serviceaccounts", f"system:serviceaccounts:{namespace}"]
    missing = []
    for group, resource, subresource, verb, namespace, *named in REQUIRED:
        attributes: dict[str, str] = {"group": group, "resource": resource, "verb": verb}
        if named:
            attributes["name"] = named[0]
        if subresource:
            attributes["subresource"] = subresource
        if namespace:
            attributes["namespace"] = namespace
        review = await client.create(
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {"user": user, "groups": groups, "resourceAttributes": attributes},
            },
        )
        if not review.get("status", {}).get("allowed"):
            what = f"{resource}/{subresource}" if subresource else resource
            missing.append(f"{verb} {what}")
    if missing:
        return Check(
            f"permissions of {identity}",
            "FAIL",
            f"missing {len(missing)}: {', '.join(missing)}",
            "kubectl apply -f deploy/rbac.yaml (or bind the identity to that ClusterRole)",
        )
    return Check(f"permissions of {identity}", "PASS", f"all {len(REQUIRED)} checked rules")


def check_provider(name: str, cloud_config: str | None) -> Check:
    from kube_ccm.cloudprovider import PVLabeler, init_cloud_provider  # noqa: PLC0415

    try:
        cloud = init_cloud_provider(name, cloud_config)
    except Exception as exc:
        return Check(f"provider {name}", "FAIL", str(exc), "check --cloud-provider/--cloud-config")
    if cloud is None:
        return Check(f"provider {name}", "FAIL", "not a provider the CCM can run")
    offers = [
        label
        for label, supported in (
            ("instances v2", cloud.instances_v2() is not None),
            ("instances v1", cloud.instances() is not None),
            ("zones", cloud.zones() is not None),
            ("load balancers", cloud.load_balancer() is not None),
            ("routes", cloud.routes() is not None),
            ("volume labels", isinstance(cloud, PVLabeler)),
        )
        if supported
    ]
    from kube_ccm.cloudprovider.composite import CompositeProvider  # noqa: PLC0415

    if isinstance(cloud, CompositeProvider):
        serving = "; ".join(f"{c} from {p}" for c, p in cloud.describe().items())
        return Check(f"provider {name}", "PASS", f"serves {serving}")
    return Check(f"provider {name}", "PASS", "offers " + ", ".join(offers))


async def run_checks(
    client: KubeClient,
    *,
    identity: str = DEFAULT_IDENTITY,
    provider: str = "",
    cloud_config: str | None = None,
    stuck_after: datetime.timedelta = STUCK_AFTER,
) -> list[Check]:
    api = await check_api(client)
    if api.status == "FAIL":
        return [api]
    now = datetime.datetime.now(datetime.UTC)
    checks = [api, *await check_nodes(client, now, stuck_after)]
    checks.append(await check_controller_manager(client))
    checks.append(await check_admission(client))
    checks.append(await check_permissions(client, identity))
    if provider:
        checks.append(check_provider(provider, cloud_config))
    return checks


def report(checks: Sequence[Check], out: TextIO = sys.stdout) -> int:
    width = max(len(c.name) for c in checks)
    for check in checks:
        print(f"{check.status:<5} {check.name:<{width}}  {check.detail}", file=out)
        if check.fix and check.status in ("FAIL", "WARN"):
            print(f"      {'':<{width}}  fix: {check.fix}", file=out)
    failed = sum(1 for c in checks if c.status == "FAIL")
    print(f"\n{len(checks)} checks, {failed} failed", file=out)
    return 1 if failed else 0
