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
* the CCM's identity has every permission of ``deploy/rbac.yaml`` and, unless
  ``--cloud-provider`` names one that serves neither instances nor routes (``ippool``
  alone), of ``deploy/rbac-nodes.yaml`` (one SubjectAccessReview per rule, as
  ``--as`` with ``--as-group``); the default identity, the shipped ServiceAccount,
  is only checked when it exists;
* with ``--cloud-provider``: which capabilities the provider offers, then (unless
  ``--no-probe``) read-only calls to the cloud: whether every Node's instance is
  found (and its providerID scheme is this provider's), whether every
  LoadBalancer Service with an address has its load balancer, and the routes. A
  cloud that does not answer fails the check. A provider (or a composite's member)
  with a ``doctor_probe`` method (:class:`kube_ccm.cloudprovider.SelfProbing`) adds
  its own lines: the proxmox provider checks each cluster and its token's privileges.
"""

from __future__ import annotations

import asyncio
import datetime
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Literal, TextIO, TypeVar

from kube_ccm.api import wellknown as wk
from kube_ccm.api.objects import LoadBalancerStatus, Node, Service
from kube_ccm.cloudprovider import ClientBuilder, CloudProvider, SelfProbing
from kube_ccm.controllers.nodescope import provider_id_scheme
from kube_ccm.runtime.client import ApiError, KubeClient
from kube_ccm.runtime.resources import (
    NODES,
    PODS,
    SERVICE_ACCOUNTS,
    SERVICES,
    SUBJECT_ACCESS_REVIEWS,
    TypedClient,
)

Status = Literal["PASS", "WARN", "FAIL", "SKIP"]
DEFAULT_IDENTITY = "system:serviceaccount:kube-system:cloud-controller-manager"
STUCK_AFTER = datetime.timedelta(minutes=5)

# (group, resource, subresource, verb, namespace[, name]) the default controllers use:
# deploy/rbac.yaml's, with any provider ...
REQUIRED: tuple[tuple[str, ...], ...] = (
    ("", "events", "", "create", "default"),
    ("", "events", "", "patch", "default"),
    ("coordination.k8s.io", "leases", "", "create", "kube-system"),
    ("coordination.k8s.io", "leases", "", "get", "kube-system", "cloud-controller-manager"),
    ("coordination.k8s.io", "leases", "", "update", "kube-system", "cloud-controller-manager"),
    ("", "nodes", "", "list", ""),
    ("", "nodes", "", "watch", ""),
    ("", "services", "", "list", ""),
    ("", "services", "", "watch", ""),
    ("", "services", "status", "patch", ""),
)
# ... and deploy/rbac-nodes.yaml's, with a provider that serves instances or routes.
NODE_WRITES: tuple[tuple[str, ...], ...] = (
    ("", "nodes", "", "get", ""),
    ("", "nodes", "", "patch", ""),
    ("", "nodes", "", "delete", ""),
    ("", "nodes", "status", "patch", ""),
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
        version = await client.version()
    except Exception as exc:
        return Check("API server", "FAIL", f"not reachable: {exc}", "check --kubeconfig")
    return Check("API server", "PASS", f"reachable, {version.get('gitVersion', '?')}")


async def check_nodes(
    client: KubeClient, now: datetime.datetime, stuck_after: datetime.timedelta = STUCK_AFTER
) -> list[Check]:
    nodes = (await TypedClient(client).list(NODES)).items
    if not nodes:
        return [Check("nodes", "WARN", "no nodes registered yet")]
    tainted = [n for n in nodes if any(t.key == wk.TAINT_UNINITIALIZED for t in n.spec.taints)]
    with_id = [n for n in nodes if n.spec.provider_id]
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
    stuck = [n for n in tainted if _age(n.metadata.creation_timestamp, now) > stuck_after]
    if stuck:
        oldest = int(max(_age(n.metadata.creation_timestamp, now) for n in stuck).total_seconds())
        names = ", ".join(n.metadata.name for n in stuck[:5])
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
        pods = await TypedClient(client).list(
            PODS, namespace="kube-system", label_selector=f"component={component}"
        )
    except ApiError:
        return None
    flags: list[str] = []
    for pod in pods.items:
        for container in pod.get("spec", {}).get("containers", []):
            flags += container.get("command", []) + container.get("args", [])
    return flags if pods.items else None


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


async def check_permissions(
    client: KubeClient,
    identity: str | None,
    groups: Sequence[str] = (),
    *,
    nodes: bool = True,
) -> Check:
    """The identity's permissions; ``None`` means the default ServiceAccount, checked
    only when it exists (a CCM running as someone else, the sandbox's admin for one,
    would otherwise be reported for an account nothing uses). ``nodes``: the Node
    writes of deploy/rbac-nodes.yaml too (false for a provider without instances or
    routes, whose node controllers do not run)."""
    explicit = identity is not None
    user = identity or DEFAULT_IDENTITY
    all_groups = list(groups)
    if user.startswith("system:serviceaccount:"):
        namespace, name = user.split(":")[2:4]
        all_groups += ["system:serviceaccounts", f"system:serviceaccounts:{namespace}"]
        if not explicit:
            try:
                await TypedClient(client).get(SERVICE_ACCOUNTS, name, namespace=namespace)
            except ApiError as exc:
                if not exc.not_found:
                    raise
                return Check(
                    f"permissions of {user}",
                    "SKIP",
                    f"the ServiceAccount {namespace}/{name} does not exist, so kube-ccm does "
                    "not run as it here",
                    "pass --as (and --as-group) with the identity kube-ccm runs as",
                )
    return await _check_rules(client, user, all_groups, nodes=nodes)


async def _check_rules(
    client: KubeClient, identity: str, groups: list[str], *, nodes: bool
) -> Check:
    user = identity
    missing = []
    required = REQUIRED + NODE_WRITES if nodes else REQUIRED
    for group, resource, subresource, verb, namespace, *named in required:
        attributes: dict[str, str] = {"group": group, "resource": resource, "verb": verb}
        if named:
            attributes["name"] = named[0]
        if subresource:
            attributes["subresource"] = subresource
        if namespace:
            attributes["namespace"] = namespace
        review = await TypedClient(client).create(
            SUBJECT_ACCESS_REVIEWS,
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
        files = "-f deploy/rbac.yaml -f deploy/rbac-nodes.yaml" if nodes else "-f deploy/rbac.yaml"
        return Check(
            f"permissions of {identity}",
            "FAIL",
            f"missing {len(missing)}: {', '.join(missing)}",
            f"kubectl apply {files} (or bind the identity to those roles)",
        )
    return Check(f"permissions of {identity}", "PASS", f"all {len(required)} checked rules")


def check_provider(name: str, cloud_config: str | None) -> Check:
    """What the provider offers (building it touches no network)."""
    return _describe_provider(name, cloud_config)[0]


def _describe_provider(name: str, cloud_config: str | None) -> tuple[Check, CloudProvider | None]:
    from kube_ccm.cloudprovider import PVLabeler, init_cloud_provider  # noqa: PLC0415

    try:
        cloud = init_cloud_provider(name, cloud_config)
    except Exception as exc:
        check = Check(f"provider {name}", "FAIL", str(exc), "check --cloud-provider/--cloud-config")
        return check, None
    if cloud is None:
        return Check(f"provider {name}", "FAIL", "not a provider the CCM can run"), None
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
    from kube_ccm.providers.composite import CompositeProvider  # noqa: PLC0415

    if isinstance(cloud, CompositeProvider):
        serving = "; ".join(f"{c} from {p}" for c, p in cloud.describe().items())
        return Check(f"provider {name}", "PASS", f"serves {serving}"), cloud
    return Check(f"provider {name}", "PASS", "offers " + ", ".join(offers)), cloud


PROBE_LIMIT = 200
"""Nodes and Services probed at most (each kind); the rest are counted, not called."""
PROBE_CONCURRENCY = 8
T = TypeVar("T")


async def _bounded(
    calls: Sequence[Callable[[], Awaitable[T]]], call_timeout: float
) -> list[T | BaseException]:
    gate = asyncio.Semaphore(PROBE_CONCURRENCY)

    async def one(call: Callable[[], Awaitable[T]]) -> T | BaseException:
        async with gate:
            try:
                async with asyncio.timeout(call_timeout):
                    return await call()
            except Exception as exc:
                return exc

    return list(await asyncio.gather(*(one(c) for c in calls)))


def _error(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "no answer within the timeout"
    return f"{type(exc).__name__}: {exc}"


async def probe_provider(
    cloud: CloudProvider,
    client: KubeClient,
    builder: ClientBuilder,
    *,
    cluster_name: str = wk.DEFAULT_CLUSTER_NAME,
    call_timeout: float = 10.0,
) -> list[Check]:
    """Read-only calls to the cloud for the cluster's Nodes, LB Services and routes."""
    name = cloud.provider_name()
    stop = asyncio.Event()
    checks: list[Check] = []
    try:
        try:
            async with asyncio.timeout(call_timeout):
                await cloud.initialize(builder, stop)
        except Exception as exc:
            return [
                Check(
                    f"cloud {name}",
                    "FAIL",
                    f"initialize failed: {_error(exc)}",
                    "check the endpoint, network path and credentials in --cloud-config",
                )
            ]
        checks += await _self_probes(cloud, call_timeout)
        v2, v1 = cloud.instances_v2(), cloud.instances()
        if v2 is not None or v1 is not None:
            checks.append(await _probe_nodes(cloud, client, call_timeout))
        if cloud.load_balancer() is not None:
            checks.append(await _probe_services(cloud, client, cluster_name, call_timeout))
        routes = cloud.routes()
        if routes is not None:
            result = (await _bounded([lambda: routes.list_routes(cluster_name)], call_timeout))[0]
            if isinstance(result, BaseException):
                checks.append(
                    Check(f"cloud {name} routes", "FAIL", f"ListRoutes: {_error(result)}")
                )
            else:
                blackholes = sum(1 for r in result if r.blackhole)
                checks.append(
                    Check(
                        f"cloud {name} routes",
                        "WARN" if blackholes else "PASS",
                        f"{len(result)} routes, {blackholes} blackholes",
                    )
                )
        return checks
    finally:
        stop.set()
        try:
            await cloud.aclose()
        except Exception as exc:
            checks.append(Check(f"cloud {name}", "WARN", f"closing the provider failed: {exc}"))


_PROBE_STATUSES: dict[str, Status] = {"PASS": "PASS", "WARN": "WARN", "FAIL": "FAIL"}


async def _self_probes(cloud: CloudProvider, call_timeout: float) -> list[Check]:
    from kube_ccm.providers.composite import CompositeProvider  # noqa: PLC0415

    members = list(cloud.providers.values()) if isinstance(cloud, CompositeProvider) else [cloud]
    checks: list[Check] = []
    for member in members:
        if not isinstance(member, SelfProbing):
            continue
        try:
            async with asyncio.timeout(call_timeout):
                lines = await member.doctor_probe()
        except Exception as exc:
            name = member.provider_name() if isinstance(member, CloudProvider) else "provider"
            checks.append(Check(f"cloud {name}", "FAIL", f"its probe failed: {_error(exc)}"))
            continue
        for line in lines:
            status = _PROBE_STATUSES.get(line.status, "WARN")
            checks.append(Check(line.name, status, line.detail, line.fix))
    return checks


async def _probe_nodes(cloud: CloudProvider, client: KubeClient, call_timeout: float) -> Check:
    name = cloud.provider_name()
    nodes = list((await TypedClient(client).list(NODES)).items)
    foreign = [n for n in nodes if provider_id_scheme(n.spec.provider_id) not in (None, name)]
    ours = [n for n in nodes if n not in foreign][:PROBE_LIMIT]
    v2, v1 = cloud.instances_v2(), cloud.instances()

    def exists(node: Node) -> Callable[[], Awaitable[bool]]:
        if v2 is not None:
            return lambda: v2.instance_exists(node)
        assert v1 is not None
        if node.spec.provider_id:
            return lambda: v1.instance_exists_by_provider_id(node.spec.provider_id)

        async def by_name() -> bool:
            await v1.instance_id(node.metadata.name)
            return True

        return by_name

    results = await _bounded([exists(n) for n in ours], call_timeout)
    from kube_ccm.cloudprovider import InstanceNotFoundError  # noqa: PLC0415

    errors = [
        (n, r)
        for n, r in zip(ours, results, strict=True)
        if isinstance(r, BaseException) and not isinstance(r, InstanceNotFoundError)
    ]
    missing = [
        n.metadata.name
        for n, r in zip(ours, results, strict=True)
        if r is False or isinstance(r, InstanceNotFoundError)
    ]
    title = f"cloud {name} instances"
    if errors:
        node, error = errors[0]
        return Check(
            title,
            "FAIL",
            f"{len(errors)} of {len(ours)} lookups failed, e.g. Node {node.metadata.name}: "
            f"{_error(error)}",
            "check the cloud endpoint, network path and credentials in --cloud-config",
        )
    problems = []
    if missing:
        problems.append(f"no instance for {len(missing)} Nodes: {', '.join(missing[:5])}")
    if foreign:
        problems.append(
            f"{len(foreign)} Nodes have another provider's providerID (left alone), e.g. "
            f"{foreign[0].metadata.name}: {foreign[0].spec.provider_id}"
        )
    probed = f"{len(ours)} Nodes probed" + (
        f" (of {len(nodes) - len(foreign)})" if len(nodes) - len(foreign) > len(ours) else ""
    )
    if problems:
        return Check(title, "WARN", f"{probed}; " + "; ".join(problems))
    return Check(title, "PASS", f"{probed}, every instance found")


async def _probe_services(
    cloud: CloudProvider, client: KubeClient, cluster_name: str, call_timeout: float
) -> Check:
    name = cloud.provider_name()
    balancer = cloud.load_balancer()
    assert balancer is not None
    services = [
        s
        for s in (await TypedClient(client).list(SERVICES)).items
        if s.spec.type == "LoadBalancer" and not s.spec.load_balancer_class
    ][:PROBE_LIMIT]

    def lookup(service: Service) -> Callable[[], Awaitable[LoadBalancerStatus | None]]:
        return lambda: balancer.get_load_balancer(cluster_name, service)

    results = await _bounded([lookup(s) for s in services], call_timeout)
    title = f"cloud {name} load balancers"
    errors = [
        (s, r) for s, r in zip(services, results, strict=True) if isinstance(r, BaseException)
    ]
    if errors:
        service, error = errors[0]
        return Check(
            title,
            "FAIL",
            f"{len(errors)} of {len(services)} lookups failed, e.g. "
            f"{service.metadata.namespace}/{service.metadata.name}: {_error(error)}",
            "check the cloud endpoint, network path and credentials in --cloud-config",
        )
    missing = [
        f"{s.metadata.namespace}/{s.metadata.name}"
        for s, r in zip(services, results, strict=True)
        if r is None and s.status.load_balancer.ingress
    ]
    if missing:
        return Check(
            title,
            "WARN",
            f"{len(missing)} Services show an address but have no load balancer in the "
            f"cloud: {', '.join(missing[:5])}",
        )
    return Check(title, "PASS", f"{len(services)} LoadBalancer Services probed")


async def run_checks(
    client: KubeClient,
    *,
    identity: str | None = None,
    groups: Sequence[str] = (),
    provider: str = "",
    cloud_config: str | None = None,
    stuck_after: datetime.timedelta = STUCK_AFTER,
    builder: ClientBuilder | None = None,
    cluster_name: str = wk.DEFAULT_CLUSTER_NAME,
    call_timeout: float = 10.0,
) -> list[Check]:
    """Every check; with ``provider`` and ``builder``, the cloud is probed too."""
    api = await check_api(client)
    if api.status == "FAIL":
        return [api]
    now = datetime.datetime.now(datetime.UTC)
    checks = [api, *await check_nodes(client, now, stuck_after)]
    checks.append(await check_controller_manager(client))
    checks.append(await check_admission(client))
    described, cloud = _describe_provider(provider, cloud_config) if provider else (None, None)
    # A provider without instances or routes (ippool alone) runs no node controller.
    writes_nodes = cloud is None or any(
        capability is not None
        for capability in (cloud.instances_v2(), cloud.instances(), cloud.routes())
    )
    checks.append(await check_permissions(client, identity, groups, nodes=writes_nodes))
    if described is not None:
        checks.append(described)
        if cloud is not None and builder is not None:
            checks += await probe_provider(
                cloud, client, builder, cluster_name=cluster_name, call_timeout=call_timeout
            )
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
