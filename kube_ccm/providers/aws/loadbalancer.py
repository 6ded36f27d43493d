"""Network Load Balancers (ELBv2) for Services of ``type: LoadBalancer``.

One NLB per Service, named ``k8s-`` and the first 28 hex digits of the Service's UID
(NLB names have at most 32 characters); one target group per Service port (target type
``instance``, on the NodePort, TCP or UDP) with the eligible Nodes' instances (from their
providerIDs) registered; one listener per port forwarding to it. Health checks: HTTP on
``spec.healthCheckNodePort`` path ``/healthz`` with ``externalTrafficPolicy: Local``,
else TCP on the NodePort.

Everything made carries the tags ``kubernetes.io/cluster/<cluster name>=owned``,
``kubernetes.io/service-name=<namespace>/<name>`` (cloud-provider-aws's) and
``kube-ccm.io/service-uid=<uid>``; nothing without them is touched: an NLB of the
same name without them is refused, never adopted.

Syncs change only what differs: listeners, target groups and targets are compared with
what ELBv2 reports. Calls for one Service are serialised and finish even when the
caller is cancelled (the daemon's deadline), so a delete that follows a cancelled
ensure sees everything that ensure made.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from kube_ccm.api.objects import LoadBalancerIngress, LoadBalancerStatus, Node, Service
from kube_ccm.cloudprovider import (
    LoadBalancer,
    LoadBalancerInventory,
    OwnedLoadBalancer,
    TransientCloudError,
)
from kube_ccm.cloudprovider.annotations import ServiceAnnotation, integer
from kube_ccm.providers.aws.api import AwsApi, AwsError, parse_provider_id
from kube_ccm.providers.aws.config import CLUSTER_TAG_PREFIX

log = logging.getLogger(__name__)

T = TypeVar("T")

ANNOTATION_PREFIX = "service.beta.kubernetes.io/aws-load-balancer-"
ANNOTATION_INTERNAL = f"{ANNOTATION_PREFIX}internal"
ANNOTATION_ADDITIONAL_TAGS = f"{ANNOTATION_PREFIX}additional-resource-tags"
ANNOTATION_HC_INTERVAL = f"{ANNOTATION_PREFIX}healthcheck-interval"
ANNOTATION_HC_HEALTHY = f"{ANNOTATION_PREFIX}healthcheck-healthy-threshold"
ANNOTATION_HC_UNHEALTHY = f"{ANNOTATION_PREFIX}healthcheck-unhealthy-threshold"
SERVICE_NAME_TAG = "kubernetes.io/service-name"
SERVICE_UID_TAG = "kube-ccm.io/service-uid"
NAME_PREFIX = "k8s-"
DEFAULT_INTERVAL = 10
DEFAULT_HEALTHY = 2
DEFAULT_UNHEALTHY = 2
HEALTHZ = "/healthz"
TAGS_PER_CALL = 20
ELB_ROLE_TAG = "kubernetes.io/role/elb"
INTERNAL_ELB_ROLE_TAG = "kubernetes.io/role/internal-elb"
_TAG_KEY = re.compile(r"^[\w.:/=+\-@ ]{1,128}$")


# -- annotations -----------------------------------------------------------------------


def _check_internal(value: str) -> None:
    if value.strip().lower() not in ("true", "false", "0.0.0.0/0", ""):
        raise ValueError("use true or false (0.0.0.0/0, the legacy value, means true)")


def parse_internal(value: str | None) -> bool:
    return value is not None and value.strip().lower() in ("true", "0.0.0.0/0")


def parse_tags(value: str) -> dict[str, str]:
    """``k=v,k2=v2`` (a key without ``=`` has an empty value); ValueError says why not."""
    tags: dict[str, str] = {}
    for part in value.split(","):
        text = part.strip()
        if not text:
            continue
        key, _, tag_value = text.partition("=")
        key, tag_value = key.strip(), tag_value.strip()
        if not _TAG_KEY.match(key):
            raise ValueError(
                f"{key!r} is not a tag key (1 to 128 letters, digits, spaces and _.:/=+-@): "
                "write k=v,k2=v2"
            )
        if key.lower().startswith("aws:"):
            raise ValueError(f"{key!r}: tag keys starting with aws: are AWS's own")
        if key.startswith(CLUSTER_TAG_PREFIX) or key in (SERVICE_NAME_TAG, SERVICE_UID_TAG):
            raise ValueError(f"{key!r} is a tag kube-ccm sets itself (ownership)")
        if len(tag_value) > 256:
            raise ValueError(f"the value of {key!r} is longer than 256 characters")
        tags[key] = tag_value
    return tags


def _check_tags(value: str) -> None:
    parse_tags(value)


SERVICE_ANNOTATIONS: tuple[ServiceAnnotation, ...] = (
    ServiceAnnotation(
        ANNOTATION_INTERNAL,
        "true: an internal NLB (scheme internal), reachable from the VPC only; it "
        "cannot change on an existing NLB",
        _check_internal,
    ),
    ServiceAnnotation(
        ANNOTATION_ADDITIONAL_TAGS,
        "more tags for the NLB and its target groups: k=v,k2=v2",
        _check_tags,
    ),
    integer(
        ANNOTATION_HC_INTERVAL,
        f"seconds between health checks of a target (default {DEFAULT_INTERVAL})",
        minimum=5,
        maximum=300,
    ),
    integer(
        ANNOTATION_HC_HEALTHY,
        f"consecutive successes before a target is healthy (default {DEFAULT_HEALTHY})",
        minimum=2,
        maximum=10,
    ),
    integer(
        ANNOTATION_HC_UNHEALTHY,
        f"consecutive failures before a target is unhealthy (default {DEFAULT_UNHEALTHY})",
        minimum=2,
        maximum=10,
    ),
)


# -- what a Service asks for -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HealthCheck:
    protocol: str
    port: str
    path: str
    interval: int
    healthy: int
    unhealthy: int

    def request(self) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "HealthCheckProtocol": self.protocol,
            "HealthCheckPort": self.port,
            "HealthCheckIntervalSeconds": self.interval,
            "HealthyThresholdCount": self.healthy,
            "UnhealthyThresholdCount": self.unhealthy,
        }
        if self.path:
            fields["HealthCheckPath"] = self.path
        return fields

    def differs(self, group: Mapping[str, Any]) -> bool:
        return (
            group.get("HealthCheckProtocol") != self.protocol
            or str(group.get("HealthCheckPort")) != self.port
            or (bool(self.path) and group.get("HealthCheckPath") != self.path)
            or group.get("HealthCheckIntervalSeconds") != self.interval
            or group.get("HealthyThresholdCount") != self.healthy
            or group.get("UnhealthyThresholdCount") != self.unhealthy
        )


@dataclass(frozen=True, slots=True)
class PortSpec:
    protocol: str
    port: int
    node_port: int
    group_name: str


@dataclass(frozen=True, slots=True)
class NlbSpec:
    name: str
    internal: bool
    tags: dict[str, str]
    ports: tuple[PortSpec, ...]
    health: HealthCheck


def uid_hex(service: Service) -> str:
    return service.metadata.uid.replace("-", "").lower()


def nlb_name(service: Service) -> str:
    """``k8s-`` and the first 28 hex digits of the Service's UID (32 characters)."""
    return f"{NAME_PREFIX}{uid_hex(service)[:28]}"


def group_name(service: Service, protocol: str, node_port: int) -> str:
    """``k8s-<12 hex of the UID>-<tcp|udp><NodePort>``: at most 26 characters."""
    return f"{NAME_PREFIX}{uid_hex(service)[:12]}-{protocol.lower()}{node_port}"


def cluster_tag(cluster_name: str) -> str:
    return f"{CLUSTER_TAG_PREFIX}{cluster_name}"


def ownership_tags(cluster_name: str, service: Service) -> dict[str, str]:
    meta = service.metadata
    return {
        cluster_tag(cluster_name): "owned",
        SERVICE_NAME_TAG: f"{meta.namespace}/{meta.name}",
        SERVICE_UID_TAG: meta.uid,
    }


def _annotation_int(service: Service, annotation: ServiceAnnotation, default: int) -> int:
    value = service.metadata.annotations.get(annotation.key)
    if value is None:
        return default
    return int(value, 10)


def nlb_spec(cluster_name: str, service: Service) -> NlbSpec:
    """What the Service asks for; :class:`AwsError` names a bad annotation or port."""
    meta = service.metadata
    where = f"Service {meta.namespace}/{meta.name}"
    annotations = meta.annotations
    for annotation in SERVICE_ANNOTATIONS:
        value = annotations.get(annotation.key)
        if value is not None and (problem := annotation.problem(value)) is not None:
            raise AwsError(f"{where}: {problem}")
    ports: list[PortSpec] = []
    for port in service.spec.ports:
        protocol = (port.protocol or "TCP").upper()
        if protocol not in ("TCP", "UDP"):
            raise AwsError(
                f"{where}: port {port.port}/{protocol}: a Network Load Balancer forwards TCP "
                "and UDP only"
            )
        if not port.node_port:
            raise AwsError(
                f"{where}: port {port.port}/{protocol} has no NodePort (the NLB's targets are "
                "the Nodes' NodePorts): leave spec.allocateLoadBalancerNodePorts true"
            )
        ports.append(
            PortSpec(
                protocol, port.port, port.node_port, group_name(service, protocol, port.node_port)
            )
        )
    seen = Counter(p.port for p in ports)
    if [p for p, n in seen.items() if n > 1]:
        raise AwsError(
            f"{where}: a port is both TCP and UDP; one NLB listener per port (TCP_UDP) is "
            "not supported by kube-ccm yet"
        )
    local = service.spec.external_traffic_policy == "Local" and service.spec.health_check_node_port
    health = HealthCheck(
        protocol="HTTP" if local else "TCP",
        port=str(service.spec.health_check_node_port) if local else "traffic-port",
        path=HEALTHZ if local else "",
        interval=_annotation_int(service, SERVICE_ANNOTATIONS[2], DEFAULT_INTERVAL),
        healthy=_annotation_int(service, SERVICE_ANNOTATIONS[3], DEFAULT_HEALTHY),
        unhealthy=_annotation_int(service, SERVICE_ANNOTATIONS[4], DEFAULT_UNHEALTHY),
    )
    tags = {
        **parse_tags(annotations.get(ANNOTATION_ADDITIONAL_TAGS, "")),
        **ownership_tags(cluster_name, service),
    }
    return NlbSpec(
        name=nlb_name(service),
        internal=parse_internal(annotations.get(ANNOTATION_INTERNAL)),
        tags=tags,
        ports=tuple(ports),
        health=health,
    )


def instance_ids(nodes: Sequence[Node]) -> set[str]:
    """The instances of the Nodes that have an aws providerID (others are skipped)."""
    found: set[str] = set()
    for node in nodes:
        if not node.spec.provider_id:
            continue
        try:
            _zone, instance_id = parse_provider_id(node.spec.provider_id)
        except ValueError as exc:
            log.debug("Node %s is no NLB target: %s", node.metadata.name, exc)
            continue
        found.add(instance_id)
    return found


def _tag_list(tags: Mapping[str, str]) -> list[dict[str, str]]:
    return [{"Key": k, "Value": v} for k, v in sorted(tags.items())]


def _status(lb: Mapping[str, Any]) -> LoadBalancerStatus:
    dns = str(lb.get("DNSName", ""))
    if not dns:
        return LoadBalancerStatus()
    return LoadBalancerStatus(ingress=(LoadBalancerIngress(hostname=dns),))


# -- serialising calls per NLB --------------------------------------------------------


class _PerKey:
    """Runs one coroutine at a time per key, to completion even when its caller is
    cancelled (the next call for that key waits for it)."""

    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}
        self._users: Counter[str] = Counter()
        self._tasks: set[asyncio.Task[Any]] = set()

    async def run(self, key: str, fn: Callable[[], Awaitable[T]]) -> T:
        task = asyncio.ensure_future(self._locked(key, fn))
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return await asyncio.shield(task)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: a cancelled caller's failure is not "never retrieved"

    async def _locked(self, key: str, fn: Callable[[], Awaitable[T]]) -> T:
        lock = self._locks.setdefault(key, asyncio.Lock())
        self._users[key] += 1
        try:
            async with lock:
                return await fn()
        finally:
            self._users[key] -= 1
            if not self._users[key]:
                del self._users[key]
                self._locks.pop(key, None)

    async def aclose(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


# -- the capability --------------------------------------------------------------------


class AwsLoadBalancer(LoadBalancer, LoadBalancerInventory):
    service_annotations = SERVICE_ANNOTATIONS

    def __init__(self, provider: AwsApi) -> None:
        self._p = provider
        self._serial = _PerKey()

    async def aclose(self) -> None:
        await self._serial.aclose()

    # -- calls ---------------------------------------------------------------------

    async def _op(self, operation: str, **request: Any) -> Any:
        """The ELBv2 API call ``operation`` (``DescribeTags``: ``describe_tags``)."""
        method = re.sub(r"(?<!^)(?=[A-Z])", "_", operation).lower()
        return await self._p.elb_call(operation, lambda c: getattr(c, method)(**request))

    async def _described(
        self, operation: str, items: str, not_found: str, **request: Any
    ) -> list[dict[str, Any]]:
        """The ``items`` of the answer to ``operation``; none when ELBv2 answers with the
        error ``not_found`` (what it says of a name or ARN it does not know)."""
        try:
            page = await self._op(operation, **request)
        except AwsError as exc:
            if exc.code != not_found:
                raise
            return []
        return [dict(item) for item in page.get(items, [])]

    async def _find(self, name: str) -> dict[str, Any] | None:
        found = await self._described(
            "DescribeLoadBalancers", "LoadBalancers", "LoadBalancerNotFound", Names=[name]
        )
        return found[0] if found else None

    async def _tags(self, arns: Sequence[str]) -> dict[str, dict[str, str]]:
        tags: dict[str, dict[str, str]] = {}
        for start in range(0, len(arns), TAGS_PER_CALL):
            chunk = list(arns[start : start + TAGS_PER_CALL])
            page = await self._op("DescribeTags", ResourceArns=chunk)
            for description in page.get("TagDescriptions", []):
                tags[description["ResourceArn"]] = {
                    t["Key"]: t.get("Value", "") for t in description.get("Tags", [])
                }
        return tags

    async def _groups_of(
        self, lb_arn: str, listeners: Sequence[Mapping[str, Any]]
    ) -> list[dict[str, Any]]:
        """The NLB's target groups: those ELBv2 associates with it, and those its
        listeners forward to (ELBv2 may not associate a group a listener was just
        modified to forward to yet)."""
        found = await self._target_groups(LoadBalancerArn=lb_arn)
        known = {g["TargetGroupArn"] for g in found}
        missing = sorted({_forwards_to(x) for x in listeners} - known - {""})
        if missing:
            found += await self._target_groups(TargetGroupArns=missing)
        return found

    async def _group_named(self, name: str) -> dict[str, Any] | None:
        found = await self._target_groups(Names=[name])
        return found[0] if found else None

    async def _target_groups(self, **request: Any) -> list[dict[str, Any]]:
        return await self._described(
            "DescribeTargetGroups", "TargetGroups", "TargetGroupNotFound", **request
        )

    async def _listeners_of(self, lb_arn: str) -> list[dict[str, Any]]:
        page = await self._op("DescribeListeners", LoadBalancerArn=lb_arn)
        return [dict(listener) for listener in page.get("Listeners", [])]

    # -- ownership ------------------------------------------------------------------

    @staticmethod
    def _not_ours(what: str, tags: Mapping[str, str], cluster_name: str, service: Service) -> str:
        """Why the object is not this Service's ("" when it is)."""
        key = cluster_tag(cluster_name)
        if tags.get(key) != "owned":
            other = sorted(k for k in tags if k.startswith(CLUSTER_TAG_PREFIX))
            whose = f"it is tagged {', '.join(other)}" if other else "it has no cluster tag"
            return (
                f"{what} exists but is not this cluster's ({whose}, not {key}=owned); "
                "kube-ccm never adopts or changes it: delete or rename it"
            )
        uid = tags.get(SERVICE_UID_TAG)
        if uid is not None and uid != service.metadata.uid:
            return (
                f"{what} belongs to another Service (tag {SERVICE_UID_TAG}={uid}, "
                f"{tags.get(SERVICE_NAME_TAG, '?')}); kube-ccm does not change it"
            )
        return ""

    # -- the contract ---------------------------------------------------------------

    def get_load_balancer_name(self, cluster_name: str, service: Service) -> str:
        return nlb_name(service)

    async def get_load_balancer(
        self, cluster_name: str, service: Service
    ) -> LoadBalancerStatus | None:
        lb = await self._find(nlb_name(service))
        if lb is None:
            return None
        tags = (await self._tags([lb["LoadBalancerArn"]])).get(lb["LoadBalancerArn"], {})
        if self._not_ours("", tags, cluster_name, service):
            return None
        return _status(lb)

    async def ensure_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> LoadBalancerStatus:
        spec = nlb_spec(cluster_name, service)
        targets = instance_ids(nodes)
        return await self._serial.run(
            spec.name, lambda: self._ensure(cluster_name, service, spec, targets)
        )

    async def update_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> None:
        targets = instance_ids(nodes)
        name = nlb_name(service)
        await self._serial.run(name, lambda: self._update(cluster_name, service, name, targets))

    async def ensure_load_balancer_deleted(self, cluster_name: str, service: Service) -> None:
        name = nlb_name(service)
        await self._serial.run(name, lambda: self._delete(cluster_name, service, name))

    async def list_load_balancers(self, cluster_name: str) -> Sequence[OwnedLoadBalancer]:
        candidates: dict[str, str] = {}
        marker = ""
        while True:
            if marker:
                page = await self._op("DescribeLoadBalancers", PageSize=400, Marker=marker)
            else:
                page = await self._op("DescribeLoadBalancers", PageSize=400)
            candidates.update(
                (lb["LoadBalancerArn"], str(lb.get("LoadBalancerName", "")))
                for lb in page.get("LoadBalancers", [])
                if lb.get("Type") == "network"
                and str(lb.get("LoadBalancerName", "")).startswith(NAME_PREFIX)
            )
            marker = page.get("NextMarker", "")
            if not marker:
                break
        owned: list[OwnedLoadBalancer] = []
        key = cluster_tag(cluster_name)
        for arn, tags in (await self._tags(list(candidates))).items():
            namespace, _, name = tags.get(SERVICE_NAME_TAG, "").partition("/")
            uid = tags.get(SERVICE_UID_TAG, "")
            if tags.get(key) != "owned" or not name or not uid:
                continue
            owned.append(
                OwnedLoadBalancer(
                    name=candidates.get(arn, ""),
                    namespace=namespace,
                    service_name=name,
                    service_uid=uid,
                )
            )
        return owned

    # -- ensure ---------------------------------------------------------------------

    async def _ensure(
        self, cluster_name: str, service: Service, spec: NlbSpec, targets: set[str]
    ) -> LoadBalancerStatus:
        lb = await self._find(spec.name)
        scheme = "internal" if spec.internal else "internet-facing"
        if lb is None:
            subnets = await self._subnets(cluster_name, spec.internal)
            made = await self._op(
                "CreateLoadBalancer",
                Name=spec.name,
                Type="network",
                Scheme=scheme,
                Subnets=subnets,
                IpAddressType="ipv4",
                Tags=_tag_list(spec.tags),
            )
            lb = dict(made["LoadBalancers"][0])
            log.info(
                "Created the NLB %s (%s) for Service %s/%s",
                spec.name,
                lb.get("DNSName", ""),
                service.metadata.namespace,
                service.metadata.name,
            )
            listeners: list[dict[str, Any]] = []
            groups: list[dict[str, Any]] = []
            tags: dict[str, dict[str, str]] = {lb["LoadBalancerArn"]: dict(spec.tags)}
        else:
            arn = lb["LoadBalancerArn"]
            listeners = await self._listeners_of(arn)
            groups = await self._groups_of(arn, listeners)
            tags = await self._tags([arn, *(g["TargetGroupArn"] for g in groups)])
            problem = self._not_ours(
                f"The NLB {spec.name}", tags.get(arn, {}), cluster_name, service
            )
            if problem:
                raise AwsError(problem)
            if lb.get("Scheme") != scheme:
                raise AwsError(
                    f"The NLB {spec.name} is {lb.get('Scheme')}, the Service asks for {scheme} "
                    f"({ANNOTATION_INTERNAL}): an NLB's scheme cannot change; delete and "
                    "recreate the Service (its address changes)"
                )
            await self._retag(arn, tags.get(arn, {}), spec.tags)
        await self._sync(
            cluster_name=cluster_name,
            service=service,
            spec=spec,
            lb=lb,
            listeners=listeners,
            groups=groups,
            tags=tags,
            targets=targets,
        )
        return _status(lb)

    async def _retag(self, arn: str, have: Mapping[str, str], want: Mapping[str, str]) -> None:
        missing = {k: v for k, v in want.items() if have.get(k) != v}
        if missing:
            await self._op("AddTags", ResourceArns=[arn], Tags=_tag_list(missing))

    async def _sync(
        self,
        *,
        cluster_name: str,
        service: Service,
        spec: NlbSpec,
        lb: Mapping[str, Any],
        listeners: list[dict[str, Any]],
        groups: list[dict[str, Any]],
        tags: dict[str, dict[str, str]],
        targets: set[str],
    ) -> None:
        lb_arn = lb["LoadBalancerArn"]
        by_name = {g["TargetGroupName"]: g for g in groups}
        for group in groups:
            problem = self._not_ours(
                f"The target group {group['TargetGroupName']} of the NLB {spec.name}",
                tags.get(group["TargetGroupArn"], {}),
                cluster_name,
                service,
            )
            if problem:
                raise AwsError(problem)
        wanted_arn: dict[tuple[str, int], str] = {}
        for port in spec.ports:
            found = by_name.get(port.group_name)
            if found is None:
                group, fresh = await self._create_group(cluster_name, service, spec, lb, port)
                by_name[port.group_name] = group
            else:
                group, fresh = found, False
                await self._retag(
                    group["TargetGroupArn"], tags.get(group["TargetGroupArn"], {}), spec.tags
                )
            if not fresh and spec.health.differs(group):
                await self._op(
                    "ModifyTargetGroup",
                    TargetGroupArn=group["TargetGroupArn"],
                    **spec.health.request(),
                )
            await self._sync_targets(group["TargetGroupArn"], targets, fresh=fresh)
            wanted_arn[(port.protocol, port.port)] = group["TargetGroupArn"]
        have: dict[tuple[str, int], dict[str, Any]] = {
            (str(listener.get("Protocol")), int(listener.get("Port", 0))): listener
            for listener in listeners
        }
        for key, group_arn in wanted_arn.items():
            listener = have.get(key)
            action = [{"Type": "forward", "TargetGroupArn": group_arn}]
            if listener is None:
                await self._op(
                    "CreateListener",
                    LoadBalancerArn=lb_arn,
                    Protocol=key[0],
                    Port=key[1],
                    DefaultActions=action,
                )
            elif _forwards_to(listener) != group_arn:
                await self._op(
                    "ModifyListener", ListenerArn=listener["ListenerArn"], DefaultActions=action
                )
        for key, listener in have.items():
            if key not in wanted_arn:
                await self._op("DeleteListener", ListenerArn=listener["ListenerArn"])
        wanted_groups = set(wanted_arn.values())
        for group in groups:
            if group["TargetGroupArn"] not in wanted_groups:
                await self._delete_group(group["TargetGroupArn"])

    async def _create_group(
        self,
        cluster_name: str,
        service: Service,
        spec: NlbSpec,
        lb: Mapping[str, Any],
        port: PortSpec,
    ) -> tuple[dict[str, Any], bool]:
        """The port's target group, made now (``True``) or found by name (a sync that
        ended between making it and its listener)."""
        try:
            made = await self._op(
                "CreateTargetGroup",
                Name=port.group_name,
                Protocol=port.protocol,
                Port=port.node_port,
                VpcId=lb["VpcId"],
                TargetType="instance",
                Tags=_tag_list(spec.tags),
                **spec.health.request(),
            )
            return dict(made["TargetGroups"][0]), True
        except AwsError as exc:
            if exc.code != "DuplicateTargetGroupName":
                raise
        group = await self._group_named(port.group_name)
        if group is None:
            raise TransientCloudError(
                f"the target group {port.group_name} exists and does not: retrying"
            )
        arn = group["TargetGroupArn"]
        problem = self._not_ours(
            f"The target group {port.group_name}",
            (await self._tags([arn])).get(arn, {}),
            cluster_name,
            service,
        )
        if problem:
            raise AwsError(problem)
        return group, False

    async def _sync_targets(self, group_arn: str, targets: set[str], *, fresh: bool) -> None:
        registered: set[str] = set()
        if not fresh:
            page = await self._op("DescribeTargetHealth", TargetGroupArn=group_arn)
            registered = {
                d["Target"]["Id"]
                for d in page.get("TargetHealthDescriptions", [])
                if d.get("TargetHealth", {}).get("State") != "draining"
            }
        add = sorted(targets - registered)
        remove = sorted(registered - targets)
        if add:
            await self._op(
                "RegisterTargets", TargetGroupArn=group_arn, Targets=[{"Id": i} for i in add]
            )
        if remove:
            await self._op(
                "DeregisterTargets", TargetGroupArn=group_arn, Targets=[{"Id": i} for i in remove]
            )

    async def _subnets(self, cluster_name: str, internal: bool) -> list[str]:
        """``subnetIds``, else one subnet per zone among the VPC's subnets tagged for the
        cluster (those with the ELB role tag first, then by ID)."""
        config = self._p.config
        if config.subnet_ids:
            return list(config.subnet_ids)
        tag = config.cluster_tag or cluster_tag(cluster_name)
        filters: list[Any] = [{"Name": "tag-key", "Values": [tag]}]
        if config.vpc_id:
            filters.append({"Name": "vpc-id", "Values": [config.vpc_id]})
        page = await self._p.ec2_call(
            "DescribeSubnets", lambda c: c.describe_subnets(Filters=filters)
        )
        role = INTERNAL_ELB_ROLE_TAG if internal else ELB_ROLE_TAG
        by_zone: dict[str, tuple[bool, str]] = {}
        for subnet in page.get("Subnets", []):
            subnet_tags = {t.get("Key", ""): t.get("Value", "") for t in subnet.get("Tags", [])}
            rank = (role not in subnet_tags, subnet.get("SubnetId", ""))
            zone = subnet.get("AvailabilityZone", "")
            if zone not in by_zone or rank < by_zone[zone]:
                by_zone[zone] = rank
        if not by_zone:
            where = f" in VPC {config.vpc_id}" if config.vpc_id else ""
            raise AwsError(
                f"no subnet{where} is tagged {tag}: tag the subnets for load balancers, or "
                "list them in the cloud-config's `subnetIds`"
            )
        return [by_zone[zone][1] for zone in sorted(by_zone)]

    # -- update ---------------------------------------------------------------------

    async def _update(
        self, cluster_name: str, service: Service, name: str, targets: set[str]
    ) -> None:
        lb = await self._find(name)
        if lb is None:
            raise AwsError(
                f"the NLB {name} of Service {service.metadata.namespace}/"
                f"{service.metadata.name} does not exist (yet)"
            )
        arn = lb["LoadBalancerArn"]
        # The groups its listeners forward to: no need to describe them.
        group_arns = sorted({_forwards_to(x) for x in await self._listeners_of(arn)} - {""})
        tags = await self._tags([arn, *group_arns])
        for what, resource in [(f"The NLB {name}", arn)] + [
            (f"The target group {g}", g) for g in group_arns
        ]:
            problem = self._not_ours(what, tags.get(resource, {}), cluster_name, service)
            if problem:
                raise AwsError(problem)
        for group_arn in group_arns:
            await self._sync_targets(group_arn, targets, fresh=False)

    # -- delete ---------------------------------------------------------------------

    async def _delete(self, cluster_name: str, service: Service, name: str) -> None:
        lb = await self._find(name)
        if lb is None:
            await self._delete_orphan_groups(cluster_name, service)
            return
        arn = lb["LoadBalancerArn"]
        listeners = await self._listeners_of(arn)
        groups = await self._groups_of(arn, listeners)
        tags = await self._tags([arn, *(g["TargetGroupArn"] for g in groups)])
        problem = self._not_ours(f"The NLB {name}", tags.get(arn, {}), cluster_name, service)
        if problem:
            log.warning("Not deleting: %s", problem)
            return
        for listener in listeners:
            try:
                await self._op("DeleteListener", ListenerArn=listener["ListenerArn"])
            except AwsError as exc:
                if exc.code != "ListenerNotFound":
                    raise
        await self._op("DeleteLoadBalancer", LoadBalancerArn=arn)
        log.info(
            "Deleted the NLB %s of Service %s/%s",
            name,
            service.metadata.namespace,
            service.metadata.name,
        )
        for group in groups:
            group_arn = group["TargetGroupArn"]
            if self._not_ours("", tags.get(group_arn, {}), cluster_name, service):
                continue
            await self._delete_group(group_arn)

    async def _delete_orphan_groups(self, cluster_name: str, service: Service) -> None:
        """Without its NLB, the Service's target groups by name (a delete that ended
        after the NLB went)."""
        for port in service.spec.ports:
            protocol = (port.protocol or "TCP").upper()
            if not port.node_port or protocol not in ("TCP", "UDP"):
                continue
            group = await self._group_named(group_name(service, protocol, port.node_port))
            if group is None:
                continue
            arn = group["TargetGroupArn"]
            if self._not_ours("", (await self._tags([arn])).get(arn, {}), cluster_name, service):
                continue
            await self._delete_group(arn)

    async def _delete_group(self, arn: str) -> None:
        try:
            await self._op("DeleteTargetGroup", TargetGroupArn=arn)
        except AwsError as exc:
            if exc.code == "TargetGroupNotFound":
                return
            if exc.code == "ResourceInUse":
                raise TransientCloudError(
                    f"{exc}: the target group is still in use (a listener is going away)"
                ) from None
            raise


def _forwards_to(listener: Mapping[str, Any]) -> str:
    for action in listener.get("DefaultActions", []):
        if action.get("Type") == "forward":
            return str(action.get("TargetGroupArn", ""))
    return ""


__all__ = [
    "ANNOTATION_ADDITIONAL_TAGS",
    "ANNOTATION_HC_HEALTHY",
    "ANNOTATION_HC_INTERVAL",
    "ANNOTATION_HC_UNHEALTHY",
    "ANNOTATION_INTERNAL",
    "SERVICE_ANNOTATIONS",
    "SERVICE_NAME_TAG",
    "SERVICE_UID_TAG",
    "AwsLoadBalancer",
    "group_name",
    "nlb_name",
    "nlb_spec",
    "parse_tags",
]
