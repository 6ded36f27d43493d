"""Resource descriptors: what the API calls each kind, and the struct it decodes into.

Controllers name *what* they read or write (``NODES``, ``SERVICES``, ``LEASES``), never
an API path: a descriptor derives the path from the resource's group, version, plural
and namespaced-ness, the namespace, the name and the subresource, as lightkube's
``prepare_request`` does::

    NODES.path("node-a")                                   # /api/v1/nodes/node-a
    SERVICES.path("web", namespace="default", subresource="status")
    LEASES.path("ccm", namespace="kube-system")
    # /apis/coordination.k8s.io/v1/namespaces/kube-system/leases/ccm

:class:`~kube_ccm.runtime.typedclient.TypedClient` takes them; the structs are
:mod:`kube_ccm.api.objects`' (``RawObject``, a dict, for kinds without one).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from urllib.parse import quote

from kube_ccm.api.objects import CertificateSigningRequest, Lease, Node, PersistentVolume, Service

__all__ = [
    "CERTIFICATE_SIGNING_REQUESTS",
    "CONFIG_MAPS",
    "EVENTS",
    "IP_ADDRESSES",
    "LEASES",
    "NAMESPACES",
    "NODES",
    "PERSISTENT_VOLUMES",
    "PODS",
    "SERVICES",
    "SERVICE_ACCOUNTS",
    "SUBJECT_ACCESS_REVIEWS",
    "TOKEN_REVIEWS",
    "RawObject",
    "Resource",
]

T = TypeVar("T")


@dataclass(frozen=True)
class Resource(Generic[T]):
    """What the API calls a resource, and the struct its objects decode into."""

    group: str
    """``""`` for the core group."""
    version: str
    plural: str
    namespaced: bool
    type: type[T]
    subresources: frozenset[str] = frozenset({"status"})

    @property
    def api_version(self) -> str:
        """``v1``, ``coordination.k8s.io/v1``: the objects' ``apiVersion``."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def prefix(self) -> str:
        """``/api/v1`` (core) or ``/apis/<group>/<version>``."""
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    def path(
        self,
        name: str | None = None,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> str:
        """The API path of one object (``name``), of a subresource of it, or of the
        collection (no name). A namespaced resource needs a namespace for one object;
        its collection without one is the list across all namespaces. A
        cluster-scoped resource refuses a namespace. Names are URL-escaped."""
        if namespace is not None and not self.namespaced:
            raise ValueError(f"{self.plural} are cluster-scoped: no namespace ({namespace!r})")
        if namespace == "":
            raise ValueError(f"{self.plural}: the namespace is empty")
        if name is not None and not name:
            raise ValueError(f"{self.plural}: the name is empty")
        if name is not None and self.namespaced and namespace is None:
            raise ValueError(f"{self.plural} are namespaced: {name!r} needs a namespace")
        if subresource is not None:
            if name is None:
                raise ValueError(f"{self.plural}/{subresource}: a subresource needs a name")
            if subresource not in self.subresources:
                raise ValueError(f"{self.plural} have no subresource {subresource!r}")
        parts = [self.prefix]
        if namespace is not None:
            parts.append(f"namespaces/{_escape(namespace)}")
        parts.append(self.plural)
        if name is not None:
            parts.append(_escape(name))
        if subresource is not None:
            parts.append(subresource)
        return "/".join(parts)


def _escape(segment: str) -> str:
    # ":" is a path character (RFC 3986 pchar) and stays: IPv6 IPAddress names.
    return quote(segment, safe=":")


def _resource(
    api_version: str,
    plural: str,
    type_: type[T],
    *,
    namespaced: bool,
    subresources: Iterable[str] = ("status",),
) -> Resource[T]:
    """A descriptor named as a manifest names its kind: by ``apiVersion``
    (``v1``, ``coordination.k8s.io/v1``) and plural."""
    group, _, version = api_version.rpartition("/")
    return Resource(group, version, plural, namespaced, type_, frozenset(subresources))


RawObject = dict[str, Any]
"""An object of a kind this module has no struct for, as decoded JSON."""

NODES: Resource[Node] = _resource("v1", "nodes", Node, namespaced=False)
SERVICES: Resource[Service] = _resource("v1", "services", Service, namespaced=True)
PERSISTENT_VOLUMES: Resource[PersistentVolume] = _resource(
    "v1", "persistentvolumes", PersistentVolume, namespaced=False
)
PODS: Resource[RawObject] = _resource("v1", "pods", dict, namespaced=True)
CONFIG_MAPS: Resource[RawObject] = _resource(
    "v1", "configmaps", dict, namespaced=True, subresources=()
)
EVENTS: Resource[RawObject] = _resource("v1", "events", dict, namespaced=True, subresources=())
SERVICE_ACCOUNTS: Resource[RawObject] = _resource(
    "v1", "serviceaccounts", dict, namespaced=True, subresources=("token",)
)
"""``token``: the TokenRequest subresource (``create(..., name=, subresource="token")``)."""
TOKEN_REVIEWS: Resource[RawObject] = _resource(
    "authentication.k8s.io/v1", "tokenreviews", dict, namespaced=False, subresources=()
)
SUBJECT_ACCESS_REVIEWS: Resource[RawObject] = _resource(
    "authorization.k8s.io/v1", "subjectaccessreviews", dict, namespaced=False, subresources=()
)
IP_ADDRESSES: Resource[RawObject] = _resource(
    "networking.k8s.io/v1", "ipaddresses", dict, namespaced=False, subresources=()
)
LEASES: Resource[Lease] = _resource(
    "coordination.k8s.io/v1", "leases", Lease, namespaced=True, subresources=()
)
CERTIFICATE_SIGNING_REQUESTS: Resource[CertificateSigningRequest] = _resource(
    "certificates.k8s.io/v1",
    "certificatesigningrequests",
    CertificateSigningRequest,
    namespaced=False,
    subresources=("status", "approval"),
)
"""``approval``: where an approver writes its ``Approved``/``Denied`` condition (a PUT
of the whole object; RBAC verb ``update`` on ``certificatesigningrequests/approval``)."""
NAMESPACES: Resource[RawObject] = _resource(
    "v1", "namespaces", dict, namespaced=False, subresources=()
)
