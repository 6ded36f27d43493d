"""The ``servicelb`` cloud-config (``--cloud-config``; optional, every key too)::

    namespace: kube-system              # where the DaemonSets svclb-<name>-<uid8> live
    image: kube-ccm:latest              # the forwarder's image: kube-ccm's own (it runs
                                        # `kube-ccm forward`); unset, $KUBE_CCM_SERVICELB_IMAGE
                                        # when set (the Helm chart sets it to the image it
                                        # deploys), else kube-ccm:latest
    imagePullPolicy: IfNotPresent
    priorityClassName: system-node-critical  # the pods' priority class unless the Service's
                                        # svccontroller.k3s.cattle.io/priorityclassname says
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

No file means all the defaults, which are k3s's own (but the image).
"""

from __future__ import annotations

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
DEFAULT_PRIORITY_CLASS = "system-node-critical"
DEFAULT_LABEL_DOMAIN = "svccontroller.k3s.cattle.io"

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_PULL_POLICIES = ("Always", "IfNotPresent", "Never")
FORWARD_MODES = ("userspace", "iptables")


class ServiceLBConfigError(InvalidCloudConfigError):
    """The cloud-config is invalid; one line naming the key and what to write."""


class ServiceLBConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True, rename="camel"):
    namespace: str = DEFAULT_NAMESPACE
    image: str = DEFAULT_IMAGE
    image_pull_policy: str = "IfNotPresent"
    priority_class_name: str = DEFAULT_PRIORITY_CLASS
    label_domain: str = DEFAULT_LABEL_DOMAIN
    service_account_name: str = ""
    forward_mode: str = "userspace"
    host_network: bool = False
    service_tolerations: bool = False


def load_config(data: bytes | str | None, *, default_image: str = "") -> ServiceLBConfig:
    """The cloud-config in ``data`` (``None``: no file), checked; ``default_image`` (if
    not empty) is the image when the cloud-config has no ``image`` key."""
    config = load_cloud_config(data, ServiceLBConfig, provider="servicelb")
    if default_image and not _sets_image(data):
        config = msgspec.structs.replace(config, image=default_image)
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
    if not config.priority_class_name or not config.label_domain:
        raise ServiceLBConfigError(
            "`priorityClassName` and `labelDomain` cannot be empty; leave them out for "
            f"the defaults ({DEFAULT_PRIORITY_CLASS}, {DEFAULT_LABEL_DOMAIN})"
        )
    if config.forward_mode not in FORWARD_MODES:
        raise ServiceLBConfigError(
            f"`forwardMode` is {config.forward_mode[:30]!r}; write one of "
            + ", ".join(FORWARD_MODES)
        )
    if config.forward_mode == "iptables" and config.host_network:
        raise ServiceLBConfigError(
            "`forwardMode: iptables` with `hostNetwork: true` would rewrite the node's own "
            "iptables and needs the ip_forward sysctls a host-network pod cannot set; use "
            "forwardMode userspace on the host network, or hostNetwork false for iptables"
        )
    return config


def _sets_image(data: bytes | str | None) -> bool:
    text = data.decode() if isinstance(data, bytes) else data
    if text is None or not text.strip():
        return False
    document = parse_yaml(text, provider="servicelb")
    return isinstance(document, dict) and "image" in document


__all__ = [
    "DEFAULT_IMAGE",
    "DEFAULT_LABEL_DOMAIN",
    "DEFAULT_NAMESPACE",
    "DEFAULT_PRIORITY_CLASS",
    "FORWARD_MODES",
    "IMAGE_ENV",
    "ServiceLBConfig",
    "ServiceLBConfigError",
    "load_config",
]
