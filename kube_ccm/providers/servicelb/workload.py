"""What ServiceLB deploys for a Service: the DaemonSet ``svclb-<name>-<uid8>``, as k3s
builds it (``pkg/cloudprovider/servicelb.go``, ``newDaemonSet``), running kube-ccm's
own forwarder (``kube-ccm forward``) with klipper-lb's environment contract.

Pure functions of the Service and the configuration; nothing here talks to the API.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from kube_ccm.api.objects import Service
from kube_ccm.cloudprovider import get_load_balancer_source_ranges, requests_only_local_traffic
from kube_ccm.providers.servicelb.config import ServiceLBConfig

SPEC_HASH_ANNOTATION = "servicelb.kube-ccm.io/spec-hash"
"""On each DaemonSet: the hash of what kube-ccm last wrote, so an unchanged Service
costs no write (the API server's defaults make a field-by-field comparison useless)."""
FORWARD_COMMAND = ("kube-ccm", "forward")
"""The forwarder, in kube-ccm's own image: klipper-lb's env contract (see :func:`container`)."""

# The node-role taints k3s's svclb pods tolerate (util.MasterRoleLabelKey and
# ControlPlaneRoleLabelKey), and CriticalAddonsOnly.
_TOLERATIONS = (
    {"key": "node-role.kubernetes.io/master", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "CriticalAddonsOnly", "operator": "Exists"},
)


class ServiceLBInputError(ValueError):
    """The Service asks for something ServiceLB cannot build; the message says what to fix."""

    reason = "NoPorts"
    """The Warning Event's reason."""


class TolerationsError(ServiceLBInputError):
    """The Service's tolerations annotation is refused (bad, or not allowed)."""

    reason = "InvalidTolerations"


@dataclass(frozen=True)
class Names:
    """The labels and annotations honoured, under one domain (k3s: ``svccontroller.<program>
    .cattle.io``, where the program is ``k3s`` or ``rke2``)."""

    domain: str

    @property
    def svc_name(self) -> str:
        """On DaemonSets and pods: the Service's name."""
        return f"{self.domain}/svcname"

    @property
    def svc_namespace(self) -> str:
        """On DaemonSets and pods: the Service's namespace."""
        return f"{self.domain}/svcnamespace"

    @property
    def enable_lb(self) -> str:
        """On Nodes: once any Node has it, only Nodes with ``true`` run svclb pods."""
        return f"{self.domain}/enablelb"

    @property
    def lb_pool(self) -> str:
        """On Nodes and Services (a label on both): a Service labelled with a pool runs on
        the Nodes of that pool (only while the enable label is in use, as in k3s)."""
        return f"{self.domain}/lbpool"

    @property
    def node_selector(self) -> str:
        """On DaemonSets: ``true`` while they select Nodes by the enable label."""
        return f"{self.domain}/nodeselector"

    @property
    def priority_class(self) -> str:
        """On Services (annotation): the svclb pods' priority class."""
        return f"{self.domain}/priorityclassname"

    @property
    def tolerations(self) -> str:
        """On Services (annotation): tolerations added to the svclb pods' (a JSON or
        YAML list of Kubernetes tolerations)."""
        return f"{self.domain}/tolerations"


def daemon_set_name(service: Service) -> str:
    """k3s's ``generateName``: ``svclb-<name>-<first 8 of the uid>``, the name cut at 48
    characters and never at a trailing hyphen."""
    name = service.metadata.name
    if len(name) > 48:
        cut = 48
        while name[cut - 1] == "-":
            cut -= 1
        name = name[:cut]
    return f"svclb-{name}-{service.metadata.uid[:8]}"


def source_ranges(service: Service) -> str:
    """``SRC_RANGES``: upstream's source ranges (the spec's, else the annotation's, else
    ``0.0.0.0/0``; :class:`~kube_ccm.cloudprovider.InvalidSourceRangeError` for a bad
    entry), sorted and comma-joined; ``::/0`` added to the default for a Service with
    IPv6, as k3s does (upstream's default covers IPv4 only)."""
    joined = ",".join(sorted(str(n) for n in get_load_balancer_source_ranges(service)))
    if joined == "0.0.0.0/0" and "IPv6" in service.spec.ip_families:
        joined += ",::/0"
    return joined


READY_FILE = "/tmp/ready"
"""Where each forwarder container reports ready (``--ready-file``) for its exec probe:
a ``tcpSocket`` probe proves nothing in userspace mode (the forwarder itself
completes the handshake)."""
UNPRIVILEGED_PORT_SYSCTL = "net.ipv4.ip_unprivileged_port_start"
"""A namespaced, "safe" sysctl (every kubelet allows it; it covers IPv6 too)."""


@dataclass(frozen=True)
class Privileges:
    """The security-relevant parts of the svclb pod spec."""

    pod_security_context: Mapping[str, Any] = field(default_factory=dict)
    container_security_context: Mapping[str, Any] = field(default_factory=dict)
    host_network: bool = False


def forwarder_privileges(
    ip_families: Sequence[str],
    *,
    mode: str = "userspace",
    host_network: bool = False,
    low_port: bool = False,
) -> Privileges:
    """What the forwarder's pods may do, the least its ``mode`` needs (``low_port``: a
    Service port below 1024).

    ``userspace`` (the default): no capability, non-root (the image's uid 65532), no
    privilege escalation, the runtime's seccomp profile. To bind a port below 1024 it
    needs, on the pod network, the safe sysctl ``net.ipv4.ip_unprivileged_port_start=0``
    (its own namespace only); on the host network (where a pod cannot set net sysctls)
    ``NET_BIND_SERVICE``, and then uid 0: Kubernetes has no ambient capabilities, so a
    non-root process loses an added capability at exec.

    ``iptables``: k3s's: IP forwarding switched on in the pod's network namespace per
    family (sysctls the kubelet must allow, ``--allowed-unsafe-sysctls``) and
    ``NET_ADMIN`` for the DNAT, as root (klipper-lb's image runs as root; kube-ccm's
    is uid 65532, and iptables needs root). Pod network only (the configuration
    refuses it with ``hostNetwork``)."""
    seccomp = {"type": "RuntimeDefault"}
    if mode == "iptables":
        sysctls = []
        for family in ip_families:
            if family == "IPv4":
                sysctls.append({"name": "net.ipv4.ip_forward", "value": "1"})
            elif family == "IPv6":
                sysctls.append({"name": "net.ipv6.conf.all.forwarding", "value": "1"})
        pod: dict[str, Any] = {"runAsUser": 0}
        if sysctls:
            pod["sysctls"] = sysctls
        return Privileges(
            pod_security_context=pod,
            container_security_context={"capabilities": {"add": ["NET_ADMIN"]}},
            host_network=host_network,
        )
    capabilities: dict[str, list[str]] = {"drop": ["ALL"]}
    pod = {"runAsNonRoot": True, "seccompProfile": seccomp}
    if low_port and host_network:
        capabilities["add"] = ["NET_BIND_SERVICE"]
        pod = {"runAsUser": 0, "seccompProfile": seccomp}
    elif low_port:
        pod["sysctls"] = [{"name": UNPRIVILEGED_PORT_SYSCTL, "value": "0"}]
    return Privileges(
        pod_security_context=pod,
        container_security_context={
            "allowPrivilegeEscalation": False,
            "capabilities": capabilities,
        },
        host_network=host_network,
    )


def container_name(protocol: str, port: int) -> str:
    """k3s's ``lb-<protocol>-<port>``: the container's and its port's name."""
    return f"lb-{protocol.lower()}-{port}"


def container(
    service: Service, port: Any, config: ServiceLBConfig, ranges: str, privileges: Privileges
) -> dict[str, Any]:
    """One forwarder per Service port (as k3s; ``kube-ccm forward`` serves one port, and
    ``maxPortsPerService`` bounds the containers per pod), with the configured
    ``resources``, holding the port as a hostPort (on the host
    network too, where it must equal the containerPort: the scheduler counts it either
    way). klipper-lb's env: ``SRC_PORT`` (the port listened on), ``SRC_RANGES`` (who may
    connect), ``DEST_PROTO``, and where to: the ClusterIPs at the Service port, or, with
    ``externalTrafficPolicy: Local``, the node's own IPs (``status.hostIPs``) at the
    node port. ``FORWARD_MODE=iptables`` in that mode; on the host network
    ``LISTEN_IPS``, the node's IP (both, for a dual-stack Service), so the forwarder
    takes only the node's address and not every address of the host."""
    name = container_name(port.protocol, port.port)
    env: list[dict[str, Any]] = [
        {"name": "SRC_PORT", "value": str(port.port)},
        {"name": "SRC_RANGES", "value": ranges},
        {"name": "DEST_PROTO", "value": port.protocol},
    ]
    if requests_only_local_traffic(service):
        env += [
            {"name": "DEST_PORT", "value": str(port.node_port)},
            {"name": "DEST_IPS", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIPs"}}},
        ]
    else:
        cluster_ips = service.spec.cluster_ips or (
            (service.spec.cluster_ip,) if service.spec.cluster_ip else ()
        )
        env += [
            {"name": "DEST_PORT", "value": str(port.port)},
            {"name": "DEST_IPS", "value": ",".join(cluster_ips)},
        ]
    if config.forward_mode != "userspace":
        env.append({"name": "FORWARD_MODE", "value": config.forward_mode})
    if privileges.host_network:
        field_path = "status.hostIPs" if len(service.spec.ip_families) > 1 else "status.hostIP"
        env.append({"name": "LISTEN_IPS", "valueFrom": {"fieldRef": {"fieldPath": field_path}}})
    body: dict[str, Any] = {
        "name": name,
        "image": config.image,
        "imagePullPolicy": config.image_pull_policy,
        "command": [*FORWARD_COMMAND, "--ready-file", READY_FILE],
        "ports": [
            {
                "name": name,
                "containerPort": port.port,
                "hostPort": port.port,
                "protocol": port.protocol,
            }
        ],
        "env": env,
        "readinessProbe": {
            "exec": {"command": ["test", "-e", READY_FILE]},
            "periodSeconds": 2,
        },
    }
    if privileges.container_security_context:
        body["securityContext"] = dict(privileges.container_security_context)
    resources = {
        kind: {name: str(quantity) for name, quantity in values.items()}
        for kind, values in config.resources.items()
        if values
    }
    if resources:
        body["resources"] = resources
    return body


def selects_by_label(node_labels: Sequence[Mapping[str, str]], names: Names) -> bool:
    """k3s's ``nodeHasDaemonSetLabel``: any Node carries the enable label (any value)."""
    return any(names.enable_lb in labels for labels in node_labels)


def node_selector(service: Service, names: Names, *, by_label: bool) -> dict[str, str]:
    """The svclb pods' nodeSelector: none while no Node has the enable label; else the
    label ``true``, and the Service's pool label when it has one."""
    if not by_label:
        return {}
    selector = {names.enable_lb: "true"}
    pool = service.metadata.labels.get(names.lb_pool, "")
    if pool:
        selector[names.lb_pool] = pool
    return selector


def priority_class(service: Service, config: ServiceLBConfig, names: Names) -> str:
    """The Service's priority-class annotation when present (even empty, as k3s), else
    the configured default (none unless the operator set one). Whether the Service may
    choose that class is the provider's check (``allowedPriorityClasses``)."""
    return service.metadata.annotations.get(names.priority_class, config.priority_class_name)


TOLERATIONS_LIMIT = 16384
"""The longest tolerations annotation read."""
_TOLERATION_KEYS = frozenset({"key", "operator", "value", "effect", "tolerationSeconds"})
_TOLERATION_EFFECTS = ("", "NoSchedule", "PreferNoSchedule", "NoExecute")


def service_tolerations(service: Service, config: ServiceLBConfig, names: Names) -> list[Any]:
    """The tolerations the Service's annotation adds to the svclb pods, as k3s's
    ``getTolerations`` reads them: a JSON list, else a YAML one, of Kubernetes
    tolerations; ``operator`` defaults to ``Equal``, an empty key needs ``Exists``,
    and ``Exists`` takes no value. They let the Service's host ports onto nodes tainted
    to keep workloads off, so they are honoured only when a cluster admin allowed it
    (the cloud-config's ``serviceTolerations: true``). :class:`TolerationsError` says
    what to change."""
    key = names.tolerations
    text = service.metadata.annotations.get(key)
    if text is None:
        return []
    if not config.service_tolerations:
        raise TolerationsError(
            f"annotation {key} is honoured only when a cluster admin allows it "
            "(serviceTolerations: true in the servicelb cloud-config): it lets this "
            "Service's host ports onto nodes tainted to keep workloads off; ask a cluster "
            "admin to set it, or remove the annotation"
        )
    if len(text) > TOLERATIONS_LIMIT:
        raise TolerationsError(
            f"annotation {key} is {len(text)} characters long, over the limit of "
            f"{TOLERATIONS_LIMIT}"
        )
    try:
        parsed = json.loads(text)
    except ValueError:
        try:
            parsed = yaml.safe_load(text)
        except yaml.YAMLError:
            parsed = None
    if not isinstance(parsed, list) or not all(isinstance(t, dict) for t in parsed):
        raise TolerationsError(
            f"annotation {key} is not a list of tolerations; write JSON (or YAML) such as "
            '[{"key": "dedicated", "operator": "Equal", "value": "lb", "effect": "NoSchedule"}]'
        )
    tolerations: list[Any] = []
    for i, given in enumerate(parsed):
        toleration = dict(given)
        unknown = sorted(str(k) for k in toleration if k not in _TOLERATION_KEYS)
        problem = ""
        toleration.setdefault("operator", "Equal")
        operator = toleration["operator"]
        if unknown:
            problem = f"unknown field {unknown[0][:40]!r}; a toleration has " + ", ".join(
                sorted(_TOLERATION_KEYS)
            )
        elif not all(
            isinstance(toleration.get(f, ""), str) for f in ("key", "operator", "value", "effect")
        ):
            problem = "key, operator, value and effect are strings"
        elif operator not in ("Equal", "Exists"):
            problem = f"operator {str(operator)[:20]!r} is not Equal or Exists"
        elif not toleration.get("key") and operator != "Exists":
            problem = "a toleration with an empty key must have operator 'Exists'"
        elif operator == "Exists" and toleration.get("value"):
            problem = "a toleration with operator 'Exists' must have an empty value"
        elif toleration.get("effect", "") not in _TOLERATION_EFFECTS:
            problem = f"effect {str(toleration['effect'])[:20]!r} is not one of " + ", ".join(
                e for e in _TOLERATION_EFFECTS if e
            )
        elif "tolerationSeconds" in toleration and (
            type(toleration["tolerationSeconds"]) is not int
            or toleration.get("effect") != "NoExecute"
        ):
            problem = "tolerationSeconds is a whole number, with effect NoExecute only"
        if problem:
            raise TolerationsError(f"annotation {key}, toleration {i}: {problem}")
        tolerations.append(toleration)
    return tolerations


def daemon_set(
    service: Service, config: ServiceLBConfig, names: Names, *, by_label: bool
) -> dict[str, Any]:
    """The DaemonSet for ``service`` (see the module), with :data:`SPEC_HASH_ANNOTATION`.
    :class:`ServiceLBInputError` for a Service without ports or with a bad source range."""
    if not service.spec.ports:
        raise ServiceLBInputError(
            "the Service has no ports; ServiceLB forwards each Service port from the same "
            "port on the nodes: list at least one under spec.ports"
        )
    name = daemon_set_name(service)
    ranges = source_ranges(service)
    privileges = forwarder_privileges(
        service.spec.ip_families,
        mode=config.forward_mode,
        host_network=config.host_network,
        low_port=any(port.port < 1024 for port in service.spec.ports),
    )
    selector = node_selector(service, names, by_label=by_label)
    pod_spec: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "securityContext": dict(privileges.pod_security_context),
        "tolerations": [
            *(dict(t) for t in _TOLERATIONS),
            *service_tolerations(service, config, names),
        ],
        "containers": [
            container(service, port, config, ranges, privileges) for port in service.spec.ports
        ],
    }
    chosen_class = priority_class(service, config, names)
    if chosen_class:
        pod_spec["priorityClassName"] = chosen_class
    if config.service_account_name:
        pod_spec["serviceAccountName"] = config.service_account_name
    if privileges.host_network:
        pod_spec["hostNetwork"] = True
        pod_spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    if selector:
        pod_spec["nodeSelector"] = selector
    labels = {
        names.node_selector: "true" if selector else "false",
        names.svc_name: service.metadata.name,
        names.svc_namespace: service.metadata.namespace,
    }
    body: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": config.namespace, "labels": labels},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {
                    "labels": {
                        "app": name,
                        names.svc_name: service.metadata.name,
                        names.svc_namespace: service.metadata.namespace,
                    }
                },
                "spec": pod_spec,
            },
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
        },
    }
    body["metadata"]["annotations"] = {SPEC_HASH_ANNOTATION: spec_hash(body)}
    return body


def spec_hash(body: Mapping[str, Any]) -> str:
    """A short hash of a DaemonSet's labels and spec as kube-ccm writes them."""
    content = {"labels": body["metadata"]["labels"], "spec": body["spec"]}
    digest = hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()
    return digest[:16]


def host_ports(body: Mapping[str, Any]) -> frozenset[tuple[str, int]]:
    """(protocol, hostPort) of each container port of a DaemonSet body."""
    return frozenset(
        (p.get("protocol", "TCP"), int(p["hostPort"]))
        for c in body["spec"]["template"]["spec"]["containers"]
        for p in c.get("ports") or ()
        if p.get("hostPort")
    )


__all__ = [
    "FORWARD_COMMAND",
    "READY_FILE",
    "SPEC_HASH_ANNOTATION",
    "UNPRIVILEGED_PORT_SYSCTL",
    "Names",
    "Privileges",
    "ServiceLBInputError",
    "TolerationsError",
    "container_name",
    "daemon_set",
    "daemon_set_name",
    "forwarder_privileges",
    "host_ports",
    "node_selector",
    "priority_class",
    "selects_by_label",
    "service_tolerations",
    "source_ranges",
]
