"""A typed client: resource descriptors in, compact structs out.

Controllers name *what* they read or write (``NODES``, ``SERVICES``, ``LEASES``)
and get back the msgspec structs of :mod:`kube_ccm.api.objects`; no controller
builds an API path by hand or walks a response dict. The URL comes from the
resource's group, version, plural and namespaced-ness, the namespace, the name
and the subresource, as lightkube's ``prepare_request`` derives it::

    api = TypedClient(kube_client)
    node = await api.get(NODES, "node-a")                      # GET /api/v1/nodes/node-a
    page = await api.list(SERVICES, namespace="default", label_selector="app=web")
    await api.patch(                                           # PATCH .../services/web/status
        SERVICES, "web", {"status": {...}}, namespace="default", subresource="status"
    )
    lease = await api.get(LEASES, "ccm", namespace="kube-system")
    # GET /apis/coordination.k8s.io/v1/namespaces/kube-system/leases/ccm

Request bodies may be plain JSON values, msgspec structs, or both mixed
(``{"spec": {"taints": node.spec.taints}}``); they leave as JSON with the API's
field names (structs omit their defaults). Responses are decoded once, straight
into the descriptor's struct; an answer that does not fit raises
:class:`ResponseDecodeError` naming the request. API errors are the client's
:class:`~kube_ccm.runtime.client.ApiError`.

Structs here are *trimmed* views: never PUT one back unless its struct keeps every
field of the kind (the :class:`Lease` below does); patch instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar
from urllib.parse import quote

import msgspec

from kube_ccm.api.objects import Model, Node, ObjectMeta, PersistentVolume, Service, to_dict
from kube_ccm.runtime import codec
from kube_ccm.runtime.client import PATCH_CONTENT_TYPES, PatchType
from kube_ccm.runtime.k8spb import certificates_v1_pb2

__all__ = [
    "CERTIFICATE_SIGNING_REQUESTS",
    "CILIUM_LOAD_BALANCER_IP_POOLS",
    "CONFIG_MAPS",
    "EVENTS",
    "IP_ADDRESSES",
    "LEASES",
    "LOAD_BALANCER_POOLS",
    "METALLB_IP_ADDRESS_POOLS",
    "NAMESPACES",
    "NODES",
    "PATCH_CONTENT_TYPES",
    "PERSISTENT_VOLUMES",
    "PODS",
    "SERVICES",
    "SERVICE_ACCOUNTS",
    "SUBJECT_ACCESS_REVIEWS",
    "TOKEN_REVIEWS",
    "CertificateSigningRequest",
    "CertificateSigningRequestCondition",
    "CertificateSigningRequestSpec",
    "CertificateSigningRequestStatus",
    "Lease",
    "LeaseMeta",
    "LeaseSpec",
    "ListMeta",
    "ObjectList",
    "PatchType",
    "RawObject",
    "RequestClient",
    "Resource",
    "ResponseDecodeError",
    "TypedClient",
]

T = TypeVar("T")


# ---------------------------------------------------------------------------
# structs this module adds: lists and the Lease
# ---------------------------------------------------------------------------


class ListMeta(Model, frozen=True, kw_only=True):
    resource_version: str = ""
    continue_: str = msgspec.field(default="", name="continue")
    """Token for the next page (``limit``); empty on the last."""


class ObjectList(Model, Generic[T], frozen=True, kw_only=True):
    """One page of a list: ``items`` and the list's ``metadata``."""

    metadata: ListMeta = msgspec.field(default_factory=ListMeta)
    items: tuple[T, ...] = ()


class LeaseMeta(Model, frozen=True, kw_only=True):
    """A Lease's metadata: every field a client may set, so a PUT of a read Lease
    keeps them (``managedFields``, left out, the API server keeps by itself)."""

    name: str = ""
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""
    generation: int = 0
    creation_timestamp: str | None = None
    labels: Mapping[str, str] | None = None
    annotations: Mapping[str, str] | None = None
    owner_references: tuple[Mapping[str, Any], ...] | None = None
    finalizers: tuple[str, ...] | None = None


class LeaseSpec(Model, frozen=True, kw_only=True):
    """``coordination.k8s.io/v1`` LeaseSpec, every field (the leader-election record)."""

    holder_identity: str | None = None
    lease_duration_seconds: int | None = None
    acquire_time: str | None = None
    """MicroTime, RFC 3339 with microseconds."""
    renew_time: str | None = None
    lease_transitions: int | None = None
    strategy: str | None = None
    preferred_holder: str | None = None


class Lease(Model, frozen=True, kw_only=True):
    """A whole ``coordination.k8s.io/v1`` Lease (safe to PUT back)."""

    api_version: str = ""
    """``coordination.k8s.io/v1`` as read; set it when creating (:meth:`Lease.new`)."""
    kind: str = ""
    metadata: LeaseMeta = msgspec.field(default_factory=LeaseMeta)
    spec: LeaseSpec = msgspec.field(default_factory=LeaseSpec)

    @classmethod
    def new(cls, name: str, namespace: str, spec: LeaseSpec) -> Lease:
        """A Lease to create, with its apiVersion and kind."""
        return cls(
            api_version="coordination.k8s.io/v1",
            kind="Lease",
            metadata=LeaseMeta(name=name, namespace=namespace),
            spec=spec,
        )


class CertificateSigningRequestSpec(Model, frozen=True, kw_only=True):
    """``certificates.k8s.io/v1`` CSR spec: the request and who asked (set by the API
    server from the requester's credentials, never by the requester)."""

    request: bytes = b""
    """The PEM-encoded PKCS#10 request (base64 in JSON)."""
    signer_name: str = ""
    usages: tuple[str, ...] = ()
    username: str = ""
    uid: str = ""
    groups: tuple[str, ...] = ()
    expiration_seconds: int | None = None


class CertificateSigningRequestCondition(Model, frozen=True, kw_only=True):
    """``Approved``, ``Denied`` or ``Failed``."""

    type: str
    status: str = ""
    reason: str = ""
    message: str = ""


class CertificateSigningRequestStatus(Model, frozen=True, kw_only=True):
    conditions: tuple[CertificateSigningRequestCondition, ...] = ()
    certificate: bytes = b""
    """Set by the signer once the CSR is approved."""


class CertificateSigningRequest(Model, frozen=True, kw_only=True):
    """A ``certificates.k8s.io/v1`` CertificateSigningRequest, trimmed to what the
    kubelet serving certificate approver reads (never PUT back: the approval is written
    on the object as read whole, see ``controllers/servingcerts.py``)."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: CertificateSigningRequestSpec = msgspec.field(
        default_factory=CertificateSigningRequestSpec
    )
    status: CertificateSigningRequestStatus = msgspec.field(
        default_factory=CertificateSigningRequestStatus
    )


def _csr_from_protobuf(m: Any) -> CertificateSigningRequest:
    spec = m.spec
    return CertificateSigningRequest(
        metadata=codec.meta(m.metadata),
        spec=CertificateSigningRequestSpec(
            request=spec.request,
            signer_name=spec.signerName,
            usages=codec.strings(spec.usages),
            username=spec.username,
            uid=spec.uid,
            groups=codec.strings(spec.groups),
            expiration_seconds=codec.optional(spec, "expirationSeconds"),
        ),
        status=CertificateSigningRequestStatus(
            conditions=tuple(
                CertificateSigningRequestCondition(
                    type=c.type, status=c.status, reason=c.reason, message=c.message
                )
                for c in m.status.conditions
            ),
            certificate=m.status.certificate,
        ),
    )


codec.register(
    CertificateSigningRequest,
    codec.Kind(
        "CertificateSigningRequest",
        certificates_v1_pb2.CertificateSigningRequest,
        certificates_v1_pb2.CertificateSigningRequestList,
        _csr_from_protobuf,
    ),
)


# ---------------------------------------------------------------------------
# descriptors and paths
# ---------------------------------------------------------------------------


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
LOAD_BALANCER_POOLS: Resource[RawObject] = _resource(
    "ippool.kube-ccm.io/v1alpha1", "loadbalancerpools", dict, namespaced=False
)
"""The ippool provider's pools (``deploy/crd-loadbalancerpools.yaml``); ``status``
is written by kube-ccm."""
METALLB_IP_ADDRESS_POOLS: Resource[RawObject] = _resource(
    "metallb.io/v1beta1", "ipaddresspools", dict, namespaced=True
)
"""MetalLB's pools: never read by kube-ccm; only whether the API serves them (the group
version's discovery document), to point a migrating user at the guide."""
CILIUM_LOAD_BALANCER_IP_POOLS: tuple[Resource[RawObject], ...] = tuple(
    _resource(f"cilium.io/{version}", "ciliumloadbalancerippools", dict, namespaced=False)
    for version in ("v2", "v2alpha1")
)
"""Cilium LB-IPAM's pools (``cilium.io/v2`` since Cilium 1.18, ``v2alpha1`` before):
as :data:`METALLB_IP_ADDRESS_POOLS`, never read."""


# ---------------------------------------------------------------------------
# the client
# ---------------------------------------------------------------------------


class ResponseDecodeError(Exception):
    """The API server's answer does not decode into the resource's struct."""


_decoders: dict[Any, msgspec.json.Decoder[Any]] = {}


def _decode(type_: Any, data: bytes, what: str) -> Any:
    decoder = _decoders.get(type_)
    if decoder is None:
        decoder = _decoders[type_] = msgspec.json.Decoder(type_)
    try:
        return decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise ResponseDecodeError(
            f"{what}: the answer is not a valid {_name(type_)}: {exc}"
        ) from exc


def _name(type_: Any) -> str:
    return getattr(type_, "__name__", None) or str(type_)


def _json(body: Any) -> Any:
    """A body (JSON values and structs, mixed) as plain JSON values with API names.

    Plain values, not bytes, so the client's dry run can show the body it refuses."""
    return to_dict(body)


class RequestClient(Protocol):
    """What :class:`TypedClient` needs of a client: the raw request (a
    :class:`~kube_ccm.runtime.client.KubeClient`, or a provider's
    ``KubernetesClient``, which extends this protocol)."""

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str | int] | None = None,
        body: Any = None,
        content: bytes | None = None,
        content_type: str | None = None,
        request_timeout: float | None = None,
    ) -> bytes:
        """One request, the answer's raw bytes; HTTP errors raise
        :class:`~kube_ccm.runtime.client.ApiError`."""
        ...


class TypedClient:
    """``get``/``list``/``create``/``replace``/``patch``/``delete`` by resource descriptor.

    Wraps a :class:`~kube_ccm.runtime.client.KubeClient` or any :class:`RequestClient`
    (a KubeClient's rate limits, fencing,
    dry run and metrics apply unchanged).
    """

    def __init__(self, client: RequestClient) -> None:
        self.client = client

    async def request(
        self,
        method: str,
        resource: Resource[Any],
        name: str | None = None,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        params: Mapping[str, str | int] | None = None,
        content: bytes | None = None,
        content_type: str | None = None,
    ) -> bytes:
        """Any request on a resource, with a body already encoded (``content``): the
        undecoded answer. The path is the descriptor's, as lightkube's
        ``prepare_request`` derives it; for callers that send pre-encoded bodies
        (the event recorder) or do not need the answer decoded."""
        path = resource.path(name, namespace=namespace, subresource=subresource)
        return await self.client.request(
            method, path, params=params, content=content, content_type=content_type
        )

    async def get(
        self,
        resource: Resource[T],
        name: str,
        *,
        namespace: str | None = None,
        resource_version: str | None = None,
    ) -> T:
        """One object. ``resource_version="0"`` lets the API server answer from its cache."""
        path = resource.path(name, namespace=namespace)
        params = {"resourceVersion": resource_version} if resource_version is not None else None
        raw = await self.client.request("GET", path, params=params)
        return _decode(resource.type, raw, f"GET {path}")  # type: ignore[no-any-return]

    async def list(
        self,
        resource: Resource[T],
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_: str | None = None,
        resource_version: str | None = None,
        params: Mapping[str, str | int] | None = None,
    ) -> ObjectList[T]:
        """One page of objects (all of them unless ``limit``); a namespaced resource
        without ``namespace`` is listed across all namespaces."""
        path = resource.path(namespace=namespace)
        query: dict[str, str | int] = dict(params or {})
        for key, value in (
            ("labelSelector", label_selector),
            ("fieldSelector", field_selector),
            ("limit", limit),
            ("continue", continue_),
            ("resourceVersion", resource_version),
        ):
            if value is not None:
                query[key] = value
        raw = await self.client.request("GET", path, params=query or None)
        return _decode(  # type: ignore[no-any-return]
            ObjectList[resource.type],  # type: ignore[name-defined]
            raw,
            f"GET {path}",
        )

    async def create(
        self,
        resource: Resource[T],
        body: Any,
        *,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
    ) -> T:
        """POST ``body`` to the collection; the created object. With ``name`` and
        ``subresource``, POST to that subresource of the object (a ServiceAccount's
        ``token``); the answer then decodes as the resource's type too."""
        path = resource.path(name, namespace=namespace, subresource=subresource)
        raw = await self.client.request("POST", path, body=_json(body))
        return _decode(resource.type, raw, f"POST {path}")  # type: ignore[no-any-return]

    async def replace(
        self, resource: Resource[T], name: str, body: Any, *, namespace: str | None = None
    ) -> T:
        """PUT ``body`` (a whole object, with the resourceVersion it was read at)."""
        path = resource.path(name, namespace=namespace)
        raw = await self.client.request("PUT", path, body=_json(body))
        return _decode(resource.type, raw, f"PUT {path}")  # type: ignore[no-any-return]

    async def patch(
        self,
        resource: Resource[T],
        name: str,
        body: Any,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        patch_type: PatchType = "strategic",
        field_manager: str | None = None,
        force: bool = False,
    ) -> T:
        """PATCH one object (or its ``status``); strategic merge unless ``patch_type``
        says ``merge``, ``json`` (a list of operations) or ``apply`` (which needs
        ``field_manager``)."""
        path = resource.path(name, namespace=namespace, subresource=subresource)
        params: dict[str, str | int] = {}
        if field_manager is not None:
            params["fieldManager"] = field_manager
        if force:
            if patch_type != "apply":
                raise ValueError("force applies to server-side apply patches only")
            params["force"] = "true"
        if patch_type == "apply" and field_manager is None:
            raise ValueError("a server-side apply patch needs a field manager")
        raw = await self.client.request(
            "PATCH",
            path,
            params=params or None,
            body=_json(body),
            content_type=PATCH_CONTENT_TYPES[patch_type],
        )
        return _decode(resource.type, raw, f"PATCH {path}")  # type: ignore[no-any-return]

    async def delete(
        self,
        resource: Resource[Any],
        name: str,
        *,
        namespace: str | None = None,
        body: Any = None,
    ) -> None:
        """DELETE one object; ``body`` is optional DeleteOptions (preconditions,
        propagationPolicy). The answer (the object or a Status) is not decoded."""
        path = resource.path(name, namespace=namespace)
        await self.client.request("DELETE", path, body=None if body is None else _json(body))
