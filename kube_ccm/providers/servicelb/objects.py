"""The objects ServiceLB reads, trimmed as the informers keep them, and their resources.

DaemonSets and pods are read in ServiceLB's one namespace only (:class:`InNamespace`),
so their RBAC is a Role there; EndpointSlices (for ``externalTrafficPolicy: Local``)
across the cluster, as k3s does. The ``kubernetes`` Service in ``default`` (its
ClusterIPs) and its EndpointSlices (kube-apiserver's own addresses) are addresses
never published as a Node's (:mod:`~kube_ccm.providers.servicelb.status`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import msgspec

from kube_ccm.api.objects import Model, ObjectMeta, Service
from kube_ccm.cloudprovider import RawObject, Resource

T = TypeVar("T")


class ContainerPort(Model, frozen=True, kw_only=True):
    container_port: int = 0
    host_port: int = 0
    protocol: str = "TCP"


class Container(Model, frozen=True, kw_only=True):
    name: str = ""
    ports: tuple[ContainerPort, ...] = ()


class PodSpec(Model, frozen=True, kw_only=True):
    node_name: str = ""
    node_selector: Mapping[str, str] = msgspec.field(default_factory=dict)
    containers: tuple[Container, ...] = ()
    affinity: Any = None
    """Raw: a DaemonSet's pod names its node in a ``matchFields`` term."""


class PodCondition(Model, frozen=True, kw_only=True):
    type: str
    status: str = ""
    reason: str = ""
    message: str = ""


class PodStatus(Model, frozen=True, kw_only=True):
    pod_ip: str = msgspec.field(default="", name="podIP")
    conditions: tuple[PodCondition, ...] = ()


class Pod(Model, frozen=True, kw_only=True):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PodSpec = msgspec.field(default_factory=PodSpec)
    status: PodStatus = msgspec.field(default_factory=PodStatus)

    def condition(self, kind: str) -> PodCondition | None:
        return next((c for c in self.status.conditions if c.type == kind), None)

    @property
    def ready(self) -> bool:
        found = self.condition("Ready")
        return found is not None and found.status == "True"

    @property
    def target_node(self) -> str:
        """The node a DaemonSet's pod is for: ``spec.nodeName`` once bound, else the
        node its DaemonSet controller wrote in the required node affinity."""
        if self.spec.node_name:
            return self.spec.node_name
        try:
            terms = self.spec.affinity["nodeAffinity"][
                "requiredDuringSchedulingIgnoredDuringExecution"
            ]["nodeSelectorTerms"]
            for term in terms:
                for field in term.get("matchFields") or ():
                    if field.get("key") == "metadata.name" and field.get("values"):
                        return str(field["values"][0])
        except (KeyError, TypeError):
            pass
        return ""


class PodTemplate(Model, frozen=True, kw_only=True):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PodSpec = msgspec.field(default_factory=PodSpec)


class DaemonSetSpec(Model, frozen=True, kw_only=True):
    template: PodTemplate = msgspec.field(default_factory=PodTemplate)


class DaemonSet(Model, frozen=True, kw_only=True):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: DaemonSetSpec = msgspec.field(default_factory=DaemonSetSpec)


class ObjectRef(Model, frozen=True, kw_only=True):
    kind: str = ""
    name: str = ""


class EndpointConditions(Model, frozen=True, kw_only=True):
    ready: bool | None = None


class Endpoint(Model, frozen=True, kw_only=True):
    addresses: tuple[str, ...] = ()
    node_name: str | None = None
    conditions: EndpointConditions = msgspec.field(default_factory=EndpointConditions)
    target_ref: ObjectRef | None = None


class EndpointSlice(Model, frozen=True, kw_only=True):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    endpoints: tuple[Endpoint, ...] | None = None
    """``null`` from the API server for a slice without endpoints (a Service whose
    selector matches no pod yet)."""


@dataclass(frozen=True)
class InNamespace(Resource[T]):
    """A namespaced resource whose collection is one namespace's: an informer on it
    lists and watches ``/namespaces/<namespace>/...`` (a Role's worth of RBAC)."""

    namespace: str = ""

    def path(
        self,
        name: str | None = None,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> str:
        return super().path(name, namespace=namespace or self.namespace, subresource=subresource)


def daemon_sets(namespace: str) -> InNamespace[DaemonSet]:
    return InNamespace(
        "apps", "v1", "daemonsets", True, DaemonSet, frozenset({"status"}), namespace
    )


def daemon_set_bodies(namespace: str) -> InNamespace[RawObject]:
    """The same DaemonSets, written and read back as whole JSON objects."""
    return InNamespace("apps", "v1", "daemonsets", True, dict, frozenset({"status"}), namespace)


def pods(namespace: str) -> InNamespace[Pod]:
    return InNamespace("", "v1", "pods", True, Pod, frozenset({"status"}), namespace)


ENDPOINT_SLICES: Resource[EndpointSlice] = Resource(
    "discovery.k8s.io", "v1", "endpointslices", True, EndpointSlice, frozenset()
)
PRIORITY_CLASSES: Resource[RawObject] = Resource(
    "scheduling.k8s.io", "v1", "priorityclasses", False, dict, frozenset()
)
KUBERNETES_NAMESPACE = "default"
KUBERNETES_SERVICE = "kubernetes"
"""kube-apiserver's own Service (``default/kubernetes``), which it writes with its
EndpointSlice (labelled ``kubernetes.io/service-name: kubernetes``)."""
DEFAULT_SERVICES: InNamespace[Service] = InNamespace(
    "", "v1", "services", True, Service, frozenset({"status"}), KUBERNETES_NAMESPACE
)
"""Services in ``default``: watched with a field selector, the ``kubernetes`` one only
(deploy/rbac.yaml's ``list``/``watch`` on Services)."""

__all__ = [
    "DEFAULT_SERVICES",
    "ENDPOINT_SLICES",
    "KUBERNETES_NAMESPACE",
    "KUBERNETES_SERVICE",
    "PRIORITY_CLASSES",
    "Container",
    "ContainerPort",
    "DaemonSet",
    "Endpoint",
    "EndpointSlice",
    "InNamespace",
    "Pod",
    "daemon_set_bodies",
    "daemon_sets",
    "pods",
]
