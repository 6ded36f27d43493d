"""The ``servicelb`` cloud-config (``--cloud-config``; optional, every key too)::

    namespace: kube-system              # where the DaemonSets svclb-<name>-<uid8> live
    image: kube-ccm:latest              # the forwarder's image: kube-ccm's own (it runs
                                        # `kube-ccm forward`); unset, $KUBE_CCM_SERVICELB_IMAGE
                                        # when set (the Helm chart sets it to the image it
                                        # deploys), else kube-ccm:latest
    imagePullPolicy: IfNotPresent
    priorityClassName: ""               # the pods' priority class; unset,
                                        # $KUBE_CCM_SERVICELB_PRIORITY_CLASS (the Helm
                                        # chart's servicelb.priorityClassName), else ""
                                        # (none: they preempt nobody; k3s:
                                        # system-node-critical)
    allowedPriorityClasses: []          # the classes a Service's
                                        # svccontroller.k3s.cattle.io/priorityclassname
                                        # annotation may choose ("" is always allowed);
                                        # another is refused (PriorityClassNotAllowed)
    labelDomain: svccontroller.k3s.cattle.io  # the prefix of the labels and annotations
                                        # honoured; rke2's: svccontroller.rke2.cattle.io
    serviceAccountName: ""              # the pods' ServiceAccount ("": the namespace's
                                        # default; no token is mounted either way)
    forwardMode: userspace              # the forwarder's mode, and so the pods' privileges:
                                        # userspace: no capability, non-root, the
                                        # unprivileged-port sysctl only for a port below
                                        # 1024; iptables: klipper-lb's DNAT as k3s (root,
                                        # NET_ADMIN, the ip_forward sysctls the kubelet must
                                        # allow, an image with iptables)
    serviceTolerations: false           # true: a Service's svccontroller.k3s.cattle.io/
                                        # tolerations annotation adds to the svclb pods'
                                        # tolerations, as k3s; false: refused with an
                                        # InvalidTolerations Event (it lets a Service's
                                        # host ports onto tainted nodes: an admin's call)
    hostNetwork: false                  # false: a hostPort per Service port, as k3s;
                                        # true: host-network pods bound to their node's
                                        # IPs (status.hostIPs), NET_BIND_SERVICE only for a
                                        # port below 1024; userspace mode only
    reservedPorts: []                   # more ports no Service may take (any protocol),
                                        # beside the system ports below
    reserveSystemPorts: true            # refuse the system ports: WELL_KNOWN_PORTS
                                        # (kubelet, kube-proxy, control plane, etcd) and
                                        # each Node's reported kubelet port; false: any
                                        # port, as k3s (unsafe: a tenant can take them)
    maxPortsPerService: 8               # a Service with more ports is refused
                                        # (TooManyPorts); 0: no cap
    maxServicesPerNamespace: 10         # svclb DaemonSets per Service namespace; a new one
                                        # beyond it is refused (DaemonSetLimitReached); 0:
                                        # no cap
    nodeAddressCIDRs: []                # the networks a Node's reported ExternalIP or
                                        # InternalIP must be in to be published as a
                                        # Service's ingress (e.g. the nodes' subnets);
                                        # empty: any network (as k3s), but never an
                                        # unspecified, loopback, link-local, multicast,
                                        # reserved or IPv4-mapped address, the kubernetes
                                        # Service's ClusterIP or endpoints, or an address
                                        # two Nodes report (NodeAddressNotPublished)
    localTrafficAddresses: allNodes     # the ingress of an externalTrafficPolicy: Local
                                        # Service: allNodes, every node with a ready
                                        # svclb pod, endpoints or not (as upstream's
                                        # service controller publishes an address at
                                        # creation; the status does not follow the
                                        # endpoints); endpointNodes: only those of them
                                        # with a ready endpoint of the Service, as k3s
                                        # (none until a backend is ready)
    resources:                          # each forwarder container's (one per port)
      requests: {cpu: 10m, memory: 64Mi}
      limits: {cpu: "1", memory: 256Mi}

No file means all the defaults, which are k3s's own but for the image, the
priority class, the reserved ports, the caps, the resources, the addresses refused
and a Local Service's addresses (see docs/on-prem.md).
"""

from __future__ import annotations

import ipaddress
import re

import msgspec

from kube_ccm.cloudprovider import InvalidCloudConfigError, load_cloud_config
from kube_ccm.cloudprovider.config import parse_yaml

DEFAULT_NAMESPACE = "kube-system"
DEFAULT_IMAGE = "kube-ccm:latest"
"""The forwarder's image when neither the cloud-config nor :data:`IMAGE_ENV` names one."""
IMAGE_ENV = "KUBE_CCM_SERVICELB_IMAGE"
"""The daemon's environment variable with the default forwarder image: the Helm chart
sets it to its own ``image.repository:tag`` (or ``servicelb.image``)."""
PRIORITY_CLASS_ENV = "KUBE_CCM_SERVICELB_PRIORITY_CLASS"
"""The daemon's environment variable with the default priority class of the svclb pods
(the Helm chart's ``servicelb.priorityClassName``)."""
K3S_PRIORITY_CLASS = "system-node-critical"
"""k3s's default for the svclb pods; not ours (an operator can choose it)."""
DEFAULT_MAX_PORTS_PER_SERVICE = 8
DEFAULT_MAX_SERVICES_PER_NAMESPACE = 10
DEFAULT_RESOURCES: dict[str, dict[str, str]] = {
    "requests": {"cpu": "10m", "memory": "64Mi"},
    "limits": {"cpu": "1", "memory": "256Mi"},
}
"""One forwarder container's: idle it holds about 50 MiB (measured), a busy one more."""
WELL_KNOWN_PORTS: dict[int, str] = {
    2379: "etcd's client port",
    2380: "etcd's peer port",
    2381: "etcd's metrics port (kubeadm)",
    6443: "kube-apiserver's secure port",
    10248: "the kubelet's healthz port",
    10249: "kube-proxy's metrics port",
    10250: "the kubelet's port",
    10255: "the kubelet's read-only port",
    10256: "kube-proxy's healthz port",
    10257: "kube-controller-manager's secure port",
    10258: "the cloud-controller-manager's secure port",
    10259: "kube-scheduler's secure port",
    10260: "the cloud-controller-manager's webhook port",
}
"""The node's and the control plane's own ports (upstream's ``pkg/cluster/ports`` and
kubeadm's constants), refused to every Service while ``reserveSystemPorts``."""
DEFAULT_LABEL_DOMAIN = "svccontroller.k3s.cattle.io"

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_PULL_POLICIES = ("Always", "IfNotPresent", "Never")
FORWARD_MODES = ("userspace", "iptables")
ALL_NODES = "allNodes"
ENDPOINT_NODES = "endpointNodes"
LOCAL_TRAFFIC_ADDRESSES = (ALL_NODES, ENDPOINT_NODES)
"""``localTrafficAddresses``: ours (the default), k3s's."""


class ServiceLBConfigError(InvalidCloudConfigError):
    """The cloud-config is invalid; one line naming the key and what to write."""


class ServiceLBConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True, rename="camel"):
    namespace: str = DEFAULT_NAMESPACE
    image: str = DEFAULT_IMAGE
    image_pull_policy: str = "IfNotPresent"
    priority_class_name: str = ""
    allowed_priority_classes: tuple[str, ...] = ()
    label_domain: str = DEFAULT_LABEL_DOMAIN
    service_account_name: str = ""
    forward_mode: str = "userspace"
    host_network: bool = False
    reserved_ports: tuple[int, ...] = ()
    reserve_system_ports: bool = True
    max_ports_per_service: int = DEFAULT_MAX_PORTS_PER_SERVICE
    max_services_per_namespace: int = DEFAULT_MAX_SERVICES_PER_NAMESPACE
    node_address_cidrs: tuple[str, ...] = msgspec.field(default=(), name="nodeAddressCIDRs")
    resources: dict[str, dict[str, str | int | float]] = msgspec.field(
        default_factory=lambda: {k: dict(v) for k, v in DEFAULT_RESOURCES.items()}
    )
    service_tolerations: bool = False
    local_traffic_addresses: str = ALL_NODES


def load_config(
    data: bytes | str | None, *, default_image: str = "", default_priority_class: str = ""
) -> ServiceLBConfig:
    """The cloud-config in ``data`` (``None``: no file), checked; ``default_image`` and
    ``default_priority_class`` (if not empty) are the image and the priority class when
    the cloud-config has no ``image`` or ``priorityClassName`` key."""
    config = load_cloud_config(data, ServiceLBConfig, provider="servicelb")
    if default_image and not _sets(data, "image"):
        config = msgspec.structs.replace(config, image=default_image)
    if default_priority_class and not _sets(data, "priorityClassName"):
        config = msgspec.structs.replace(config, priority_class_name=default_priority_class)
    if len(config.namespace) > 63 or not _DNS_LABEL.match(config.namespace):
        raise ServiceLBConfigError(
            f"`namespace` is {config.namespace[:70]!r}; write a namespace name such as kube-system"
        )
    if not config.image.strip() or any(c.isspace() for c in config.image):
        raise ServiceLBConfigError(
            f"`image` is {config.image[:70]!r} (from the cloud-config, else ${IMAGE_ENV}); "
            "write an image reference such as registry.example/kube-ccm:0.2.0"
        )
    if config.image_pull_policy not in _PULL_POLICIES:
        raise ServiceLBConfigError(
            f"`imagePullPolicy` is {config.image_pull_policy[:30]!r}; write one of "
            + ", ".join(_PULL_POLICIES)
        )
    for key, value in (
        ("priorityClassName", config.priority_class_name),
        ("labelDomain", config.label_domain),
        ("serviceAccountName", config.service_account_name),
    ):
        if value and (len(value) > 253 or not _SUBDOMAIN.match(value)):
            raise ServiceLBConfigError(
                f"`{key}` is {value[:70]!r}; write a DNS subdomain (lower-case letters, "
                "digits, '-' and '.')"
            )
    for value in config.allowed_priority_classes:
        if len(value) > 253 or not _SUBDOMAIN.match(value):
            raise ServiceLBConfigError(
                f"`allowedPriorityClasses` has {value[:70]!r}; write PriorityClass names"
            )
    if not config.label_domain:
        raise ServiceLBConfigError(
            f"`labelDomain` cannot be empty; leave it out for the default ({DEFAULT_LABEL_DOMAIN})"
        )
    for port in config.reserved_ports:
        if not 1 <= port <= 65535:
            raise ServiceLBConfigError(
                f"`reservedPorts` has {port}; write port numbers from 1 to 65535"
            )
    for key, cap in (
        ("maxPortsPerService", config.max_ports_per_service),
        ("maxServicesPerNamespace", config.max_services_per_namespace),
    ):
        if cap < 0:
            raise ServiceLBConfigError(f"`{key}` is {cap}; write 0 (no cap) or a positive number")
    node_networks(config)
    _check_resources(config.resources)
    if config.forward_mode not in FORWARD_MODES:
        raise ServiceLBConfigError(
            f"`forwardMode` is {config.forward_mode[:30]!r}; write one of "
            + ", ".join(FORWARD_MODES)
        )
    if config.local_traffic_addresses not in LOCAL_TRAFFIC_ADDRESSES:
        raise ServiceLBConfigError(
            f"`localTrafficAddresses` is {config.local_traffic_addresses[:30]!r}; write "
            f"{ALL_NODES} (every node running the Service's svclb pods, the default) or "
            f"{ENDPOINT_NODES} (only those with a ready endpoint, as k3s)"
        )
    if config.forward_mode == "iptables" and config.host_network:
        raise ServiceLBConfigError(
            "`forwardMode: iptables` with `hostNetwork: true` would rewrite the node's own "
            "iptables and needs the ip_forward sysctls a host-network pod cannot set; use "
            "forwardMode userspace on the host network, or hostNetwork false for iptables"
        )
    return config


def node_networks(
    config: ServiceLBConfig,
) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """``nodeAddressCIDRs`` as networks; :class:`ServiceLBConfigError` naming a bad one."""
    networks = []
    for text in config.node_address_cidrs:
        try:
            if "%" in text or "/" not in text:
                raise ValueError(text)
            networks.append(ipaddress.ip_network(text))
        except ValueError:
            raise ServiceLBConfigError(
                f"`nodeAddressCIDRs` has {text[:60]!r}; write networks in CIDR notation "
                "with the host bits zero, such as 10.0.0.0/24 or fd00:10::/64 (the "
                "nodes' subnets)"
            ) from None
    return tuple(networks)


_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")


def _check_resources(resources: dict[str, dict[str, str | int | float]]) -> None:
    for kind, values in resources.items():
        if kind not in ("requests", "limits") or not isinstance(values, dict):
            raise ServiceLBConfigError(
                f"`resources` has {kind[:30]!r}; write `requests` and `limits`, each a map "
                "such as {cpu: 10m, memory: 64Mi}"
            )
        for name, quantity in values.items():
            if name not in ("cpu", "memory", "ephemeral-storage") or not _QUANTITY.match(
                str(quantity)
            ):
                raise ServiceLBConfigError(
                    f"`resources.{kind}.{name[:30]}` is {str(quantity)[:30]!r}; write cpu, "
                    "memory or ephemeral-storage with a quantity such as 10m or 64Mi"
                )


def _sets(data: bytes | str | None, key: str) -> bool:
    text = data.decode() if isinstance(data, bytes) else data
    if text is None or not text.strip():
        return False
    document = parse_yaml(text, provider="servicelb")
    return isinstance(document, dict) and key in document


__all__ = [
    "ALL_NODES",
    "DEFAULT_IMAGE",
    "DEFAULT_LABEL_DOMAIN",
    "DEFAULT_MAX_PORTS_PER_SERVICE",
    "DEFAULT_MAX_SERVICES_PER_NAMESPACE",
    "DEFAULT_NAMESPACE",
    "DEFAULT_RESOURCES",
    "ENDPOINT_NODES",
    "FORWARD_MODES",
    "IMAGE_ENV",
    "K3S_PRIORITY_CLASS",
    "LOCAL_TRAFFIC_ADDRESSES",
    "PRIORITY_CLASS_ENV",
    "WELL_KNOWN_PORTS",
    "ServiceLBConfig",
    "ServiceLBConfigError",
    "load_config",
    "node_networks",
]
