"""The ``k3s`` provider: Node metadata from the Nodes themselves, as k3s's embedded CCM.

k3s and rke2 run no cloud API; their agent writes what a CCM would ask a cloud for
onto the Node, and the CCM built into them copies it into place. This provider
answers as that CCM does (k3s ``pkg/cloudprovider/instances.go``), so it can replace
it without a Node changing:

* **addresses**, in this order: ``InternalIP`` from the annotation
  ``<prefix>/internal-ip`` (a comma list: one IP, or an IPv4,IPv6 pair), else from the
  label of that name; ``ExternalIP`` from ``<prefix>/external-ip`` likewise;
  ``InternalDNS`` and ``ExternalDNS`` from the annotations ``<prefix>/internal-dns``
  and ``<prefix>/external-dns`` (comma lists; no labels); ``Hostname`` from the
  annotation ``<prefix>/hostname``, else its label. ``<prefix>`` is ``k3s.io``, or
  ``rke2.io`` as the ``rke2`` provider (the cloud-config's ``annotationPrefix`` sets
  another);
* a Node with neither an ``internal-ip`` annotation nor such a label has **no metadata
  yet**: an error, retried, as in k3s ("address annotations not yet set"); k3s's
  agent sets them when the node registers;
* **providerID** the Node's own when it has one, else ``k3s://<node name>``
  (``rke2://`` for rke2);
* **instance type** the Node's ``node.kubernetes.io/instance-type`` label when set,
  else ``k3s`` (``rke2``); **zone** and **region** the Node's
  ``topology.kubernetes.io/zone`` and ``/region`` labels when set, else none;
* **every instance exists, and none is shut down**: a Node is never deleted for its
  instance, nor tainted as shut down.

A Node that k3s already initialised so stays as it is: its providerID, labels and
addresses come back unchanged.

Not **authoritative**: what it reports is what the node wrote, so the kubelet serving
certificate approver (``servingcert``) refuses to start with it; a node could otherwise
name another node's IP or ``kubernetes.default.svc`` in its own certificate.

Where it differs from k3s, deliberately: an address that is not an IP in an
``-ip`` annotation or label, or an empty item in a list, is an error naming the Node,
the annotation and the value (k3s copies any string into ``status.addresses``); the
Node keeps its taint, or its current addresses, until the value is fixed. Spaces
around list items are dropped. ``has_cluster_id()`` is true (k3s says false and runs
its CCM with ``--allow-untagged-cloud``): this provider makes nothing that a cluster
tag would mark.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from kube_ccm.api import wellknown as wk
from kube_ccm.api.objects import Node, NodeAddress
from kube_ccm.cloudprovider import (
    CloudProvider,
    CloudProviderError,
    InstanceMetadata,
    InstancesV2,
)
from kube_ccm.providers.k3s.config import K3sConfig

log = logging.getLogger(__name__)

K3S = "k3s"
RKE2 = "rke2"

INTERNAL_IP = "internal-ip"
EXTERNAL_IP = "external-ip"
INTERNAL_DNS = "internal-dns"
EXTERNAL_DNS = "external-dns"
HOSTNAME = "hostname"


class K3sAddressError(CloudProviderError):
    """A Node's address annotations are missing or unusable; the message names the Node,
    the annotation and what to write. Retried with backoff, and when the Node changes."""


@dataclass(frozen=True, slots=True)
class _Source:
    """One kind of address: where k3s reads it and how."""

    suffix: str
    type: str
    listed: bool
    """The annotation is a comma list (labels never are: a label value has no commas)."""
    labels: bool
    """A label of the same key is the fallback."""
    ip: bool
    """Each item must be an IP address."""


_SOURCES = (
    _Source(INTERNAL_IP, wk.NODE_ADDRESS_INTERNAL_IP, listed=True, labels=True, ip=True),
    _Source(EXTERNAL_IP, wk.NODE_ADDRESS_EXTERNAL_IP, listed=True, labels=True, ip=True),
    _Source(INTERNAL_DNS, wk.NODE_ADDRESS_INTERNAL_DNS, listed=True, labels=False, ip=False),
    _Source(EXTERNAL_DNS, wk.NODE_ADDRESS_EXTERNAL_DNS, listed=True, labels=False, ip=False),
    _Source(HOSTNAME, wk.NODE_ADDRESS_HOSTNAME, listed=False, labels=True, ip=False),
)


def _quoted(value: str, limit: int = 64) -> str:
    """``value`` quoted for a message, cut at ``limit`` characters."""
    return repr(value) if len(value) <= limit else repr(value[:limit]) + "..."


def node_addresses(node: Node, prefix: str) -> tuple[NodeAddress, ...]:
    """The addresses k3s's CCM gives ``node`` (see the module), read from the
    annotations and labels under ``prefix``; :class:`K3sAddressError` for a missing
    ``internal-ip`` or an unusable value."""
    name = node.metadata.name
    annotations: Mapping[str, str] = node.metadata.annotations
    labels: Mapping[str, str] = node.metadata.labels
    internal = f"{prefix}/{INTERNAL_IP}"
    if not annotations.get(internal) and not labels.get(internal):
        raise K3sAddressError(
            f"Node {name} has no {internal} annotation or label yet (k3s's agent writes it "
            "when the node registers, unless the embedded cloud controller is disabled); the "
            f"Node stays uninitialised until it has one: kubectl annotate node {name} "
            f"{internal}=<IP>[,<IPv6>]"
        )
    found: list[NodeAddress] = []
    for source in _SOURCES:
        key = f"{prefix}/{source.suffix}"
        if value := annotations.get(key, ""):
            where = f"annotation {key}"
            items = value.split(",") if source.listed else [value]
        elif source.labels and (value := labels.get(key, "")):
            where = f"label {key}"
            items = [value]
        else:
            if source.suffix == HOSTNAME:
                log.debug("node %s has no %s annotation or label", name, key)
            continue
        for item in items:
            address = item.strip()
            _check(name, where, value, address, source)
            found.append(NodeAddress(type=source.type, address=address))
    return tuple(found)


def _check(node: str, where: str, value: str, address: str, source: _Source) -> None:
    what = (
        "IP addresses separated by commas, e.g. 10.0.0.5 or 10.0.0.5,fd00::5"
        if source.ip
        else ("names separated by commas" if source.listed else "the node's host name")
    )
    if not address:
        raise K3sAddressError(
            f"Node {node}: {where} is {_quoted(value)}, which has an empty item; write {what}"
        )
    if source.ip:
        try:
            ipaddress.ip_address(address)
        except ValueError:
            raise K3sAddressError(
                f"Node {node}: {where} is {_quoted(value)}, and {_quoted(address)} in it is "
                f"not an IP address; write {what}"
            ) from None


class K3sInstances(InstancesV2):
    """The Nodes' own word about themselves (see the module)."""

    authoritative = False
    """Said outright (it is the contract's default): every answer is read from the Node,
    which its kubelet writes, so the kubelet serving certificate approver refuses to
    start with this provider, alone or as a composite's ``instances``."""

    def __init__(self, name: str, prefix: str) -> None:
        self.name = name
        self.prefix = prefix

    async def instance_exists(self, node: Node) -> bool:
        return True  # k3s: "K3s nodes always exist."

    async def instance_shutdown(self, node: Node) -> bool:
        return False  # k3s: "K3s nodes are never shutdown."

    async def instance_metadata(self, node: Node) -> InstanceMetadata:
        addresses = node_addresses(node, self.prefix)
        labels = node.metadata.labels
        return InstanceMetadata(
            provider_id=node.spec.provider_id or f"{self.name}://{node.metadata.name}",
            instance_type=labels.get(wk.LABEL_INSTANCE_TYPE) or self.name,
            node_addresses=addresses,
            zone=labels.get(wk.LABEL_ZONE, ""),
            region=labels.get(wk.LABEL_REGION, ""),
        )


class K3sProvider(CloudProvider):
    """Instances only; ``name`` is the distribution (``k3s`` or ``rke2``): the providerID
    scheme, the default instance type and the default annotation prefix."""

    def __init__(self, config: K3sConfig | None = None, *, name: str = K3S) -> None:
        self.config = config or K3sConfig()
        self.name = name
        self.prefix = self.config.annotation_prefix or f"{name}.io"
        self._instances = K3sInstances(name, self.prefix)

    def provider_name(self) -> str:
        return self.name

    def has_cluster_id(self) -> bool:
        return True  # it makes no cloud resources that would need a cluster tag

    def instances_v2(self) -> InstancesV2 | None:
        return self._instances


__all__ = [
    "EXTERNAL_DNS",
    "EXTERNAL_IP",
    "HOSTNAME",
    "INTERNAL_DNS",
    "INTERNAL_IP",
    "K3S",
    "RKE2",
    "K3sAddressError",
    "K3sInstances",
    "K3sProvider",
    "node_addresses",
]
