"""Compact, immutable, typed views of the Kubernetes objects the CCM reads.

Why this shape
    The CCM caches every Node (5,000 or more) and every Service. Decoding API JSON
    straight into :mod:`msgspec` Structs that hold only the fields a controller
    reads costs a fraction of the time and memory of full generated models or plain
    dicts (measured in docs/benchmarks.md, "The client's design decisions, measured").
    Unknown fields (``managedFields``, ``images``, ``nodeInfo``, ...) are skipped by
    the decoder and never allocated.

What is promised
    * Every struct is ``frozen``: attributes cannot be reassigned; derive a changed
      copy with :func:`msgspec.structs.replace`.
    * Lists are tuples. Maps (``labels``, ``annotations``, ``capacity``, volume sources)
      are plain dicts underneath, because msgspec cannot freeze them, but they are
      annotated :class:`~collections.abc.Mapping` so mypy rejects mutation. Treat them
      as read-only: a cached object is shared by every controller.
    * Absent API fields decode to the field's default (empty string, ``0``, empty tuple
      or mapping, ``None``) so callers never test for presence.
    * JSON names are the API's. ``rename="camel"`` covers most fields; the ones camel
      casing gets wrong (``podCIDR``, ``providerID``, ``loadBalancerIP``, ``clusterIPs``,
      ``externalIPs``, ``clientIP``, ``scaleIO``) are renamed explicitly, and the tests
      decode realistic kube-apiserver payloads to prove each one.
    * Structs are created with ``gc=False``: decoded API data cannot contain reference
      cycles, and skipping GC tracking saves memory and collector time on large caches.
      Do not build cycles through their mappings.

Writes
    These are *trimmed* objects: never PUT one back, that would drop every field not
    kept here (the :class:`Lease`, kept whole, is the exception). Build patches instead,
    from small pieces (a taint tuple, an address tuple, a ``LoadBalancerStatus``)
    turned into JSON-able values with :func:`to_dict`;
    where a full object must be replaced (the node controller's single initialization
    PUT) fetch it fresh as a dict.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Generic, TypeVar

import msgspec

__all__ = [
    "CertificateSigningRequest",
    "CertificateSigningRequestCondition",
    "CertificateSigningRequestSpec",
    "CertificateSigningRequestStatus",
    "ClientIPConfig",
    "DaemonEndpoint",
    "Lease",
    "LeaseMeta",
    "LeaseSpec",
    "ListMeta",
    "LoadBalancerIngress",
    "LoadBalancerStatus",
    "Model",
    "Node",
    "NodeAddress",
    "NodeCondition",
    "NodeDaemonEndpoints",
    "NodeSelector",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "NodeSpec",
    "NodeStatus",
    "NodeSystemInfo",
    "ObjectList",
    "ObjectMeta",
    "PersistentVolume",
    "PersistentVolumeSpec",
    "PortStatus",
    "Service",
    "ServicePort",
    "ServiceSpec",
    "ServiceStatus",
    "SessionAffinityConfig",
    "Taint",
    "VolumeNodeAffinity",
    "decode",
    "decode_node",
    "decode_persistent_volume",
    "decode_service",
    "encode",
    "to_dict",
]


T = TypeVar("T")


class Model(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    rename="camel",
    omit_defaults=True,
    gc=False,
):
    """Base of every API struct: immutable, keyword-only, camelCase JSON, compact."""


# ---------------------------------------------------------------------------
# metadata
# ---------------------------------------------------------------------------


class ObjectMeta(Model, frozen=True, kw_only=True):
    """The metadata fields controllers use: identity, labels, annotations, finalizers."""

    name: str = ""
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""
    generation: int = 0
    labels: Mapping[str, str] = msgspec.field(default_factory=dict)
    annotations: Mapping[str, str] = msgspec.field(default_factory=dict)
    finalizers: tuple[str, ...] = ()
    creation_timestamp: str | None = None
    """RFC 3339 string as sent by the API server (parse only where arithmetic needs it)."""
    deletion_timestamp: str | None = None
    """Set once deletion has been requested; the object may linger for finalizers."""


# ---------------------------------------------------------------------------
# Node
# ---------------------------------------------------------------------------


class Taint(Model, frozen=True, kw_only=True):
    """A node taint. Two taints *match* when key and effect are equal."""

    key: str
    value: str = ""
    effect: str
    time_added: str | None = None


class NodeAddress(Model, frozen=True, kw_only=True):
    """One entry of ``status.addresses``: ``type`` is ``InternalIP``, ``Hostname``, ..."""

    type: str
    address: str


class NodeCondition(Model, frozen=True, kw_only=True):
    """One entry of ``status.conditions``; ``status`` is ``True``/``False``/``Unknown``."""

    type: str
    status: str
    reason: str = ""
    message: str = ""
    last_heartbeat_time: str | None = None
    last_transition_time: str | None = None


class NodeSpec(Model, frozen=True, kw_only=True):
    provider_id: str = msgspec.field(default="", name="providerID")
    pod_cidr: str = msgspec.field(default="", name="podCIDR")
    pod_cidrs: tuple[str, ...] = msgspec.field(default=(), name="podCIDRs")
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False


class NodeSystemInfo(Model, frozen=True, kw_only=True):
    """``status.nodeInfo``, trimmed to what providers map Nodes by."""

    system_uuid: str = msgspec.field(default="", name="systemUUID")
    machine_id: str = msgspec.field(default="", name="machineID")


class DaemonEndpoint(Model, frozen=True, kw_only=True):
    port: int = msgspec.field(default=0, name="Port")
    """Upstream's JSON name is ``Port``, capitalised."""


class NodeDaemonEndpoints(Model, frozen=True, kw_only=True):
    """``status.daemonEndpoints``: the ports the node's kubelet reports (written by the
    node itself, so a claim, never a grant)."""

    kubelet_endpoint: DaemonEndpoint | None = None


class NodeStatus(Model, frozen=True, kw_only=True):
    addresses: tuple[NodeAddress, ...] = ()
    conditions: tuple[NodeCondition, ...] = ()
    node_info: NodeSystemInfo | None = None
    daemon_endpoints: NodeDaemonEndpoints | None = None


class Node(Model, frozen=True, kw_only=True):
    """A core/v1 Node, trimmed to what the node, lifecycle, service and route controllers read."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: NodeSpec = msgspec.field(default_factory=NodeSpec)
    status: NodeStatus = msgspec.field(default_factory=NodeStatus)


# ---------------------------------------------------------------------------
# Service
# ---------------------------------------------------------------------------


class ServicePort(Model, frozen=True, kw_only=True):
    name: str = ""
    protocol: str = "TCP"
    port: int
    node_port: int = 0
    target_port: int | str | None = None
    """A port number or a named container port; ``None`` when the API omitted it."""
    app_protocol: str | None = None


class ClientIPConfig(Model, frozen=True, kw_only=True):
    timeout_seconds: int | None = None


class SessionAffinityConfig(Model, frozen=True, kw_only=True):
    client_ip: ClientIPConfig | None = msgspec.field(default=None, name="clientIP")


class PortStatus(Model, frozen=True, kw_only=True):
    port: int
    protocol: str
    error: str | None = None


class LoadBalancerIngress(Model, frozen=True, kw_only=True):
    """One load-balancer endpoint: an IP and/or a hostname, as providers report them."""

    ip: str = ""
    hostname: str = ""
    ip_mode: str | None = None
    """``VIP`` or ``Proxy`` (API name ``ipMode``); ``None`` lets the API server default it."""
    ports: tuple[PortStatus, ...] = ()


class LoadBalancerStatus(Model, frozen=True, kw_only=True):
    """``status.loadBalancer`` of a Service, and what ``ensure_load_balancer`` returns."""

    ingress: tuple[LoadBalancerIngress, ...] = ()


class ServiceSpec(Model, frozen=True, kw_only=True):
    type: str = "ClusterIP"
    load_balancer_class: str | None = None
    ports: tuple[ServicePort, ...] = ()
    session_affinity: str = "None"
    session_affinity_config: SessionAffinityConfig | None = None
    load_balancer_ip: str = msgspec.field(default="", name="loadBalancerIP")
    external_ips: tuple[str, ...] = msgspec.field(default=(), name="externalIPs")
    external_traffic_policy: str = ""
    health_check_node_port: int = 0
    ip_families: tuple[str, ...] = ()
    ip_family_policy: str | None = None
    load_balancer_source_ranges: tuple[str, ...] = ()
    cluster_ip: str = msgspec.field(default="", name="clusterIP")
    cluster_ips: tuple[str, ...] = msgspec.field(default=(), name="clusterIPs")
    allocate_load_balancer_node_ports: bool | None = None


class ServiceStatus(Model, frozen=True, kw_only=True):
    load_balancer: LoadBalancerStatus = msgspec.field(default_factory=LoadBalancerStatus)


class Service(Model, frozen=True, kw_only=True):
    """A core/v1 Service, trimmed to what the service controller and LB providers read."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: ServiceSpec = msgspec.field(default_factory=ServiceSpec)
    status: ServiceStatus = msgspec.field(default_factory=ServiceStatus)


# ---------------------------------------------------------------------------
# PersistentVolume
# ---------------------------------------------------------------------------


class NodeSelectorRequirement(Model, frozen=True, kw_only=True):
    key: str
    operator: str
    values: tuple[str, ...] = ()


class NodeSelectorTerm(Model, frozen=True, kw_only=True):
    match_expressions: tuple[NodeSelectorRequirement, ...] = ()
    match_fields: tuple[NodeSelectorRequirement, ...] = ()


class NodeSelector(Model, frozen=True, kw_only=True):
    node_selector_terms: tuple[NodeSelectorTerm, ...] = ()


class VolumeNodeAffinity(Model, frozen=True, kw_only=True):
    required: NodeSelector | None = None


_Source = Mapping[str, Any] | None


class PersistentVolumeSpec(Model, frozen=True, kw_only=True):
    """What PV labelling needs: a typed subset, plus each volume source kept raw.

    The typed fields are the ones the labeller reads or writes. The volume
    source is whichever of the API's mutually exclusive source fields is set; each
    is kept as its raw JSON mapping (read-only) so a provider can inspect its own
    volume type (``pv.spec.csi["driver"]``, ``pv.spec.aws_elastic_block_store["volumeID"]``)
    without this module modelling twenty source types. :attr:`volume_source` returns
    the one that is set. Source types added to the API later are not kept until
    they are listed here.
    """

    capacity: Mapping[str, str] = msgspec.field(default_factory=dict)
    access_modes: tuple[str, ...] = ()
    storage_class_name: str = ""
    volume_mode: str | None = None
    node_affinity: VolumeNodeAffinity | None = None

    # Volume sources (exactly one is set on a valid PV).
    aws_elastic_block_store: _Source = None
    azure_disk: _Source = None
    azure_file: _Source = None
    cephfs: _Source = None
    cinder: _Source = None
    csi: _Source = None
    fc: _Source = None
    flex_volume: _Source = None
    flocker: _Source = None
    gce_persistent_disk: _Source = None
    glusterfs: _Source = None
    host_path: _Source = None
    iscsi: _Source = None
    local: _Source = None
    nfs: _Source = None
    photon_persistent_disk: _Source = None
    portworx_volume: _Source = None
    quobyte: _Source = None
    rbd: _Source = None
    scale_io: _Source = msgspec.field(default=None, name="scaleIO")
    storageos: _Source = None
    vsphere_volume: _Source = None

    @property
    def volume_source(self) -> tuple[str, Mapping[str, Any]] | None:
        """``(API field name, raw source)`` of the source that is set, e.g.
        ``("gcePersistentDisk", {"pdName": "disk-1", ...})``; ``None`` if none is."""
        for info in msgspec.structs.fields(self):
            if info.name in _SOURCE_FIELDS:
                value = getattr(self, info.name)
                if value is not None:
                    return info.encode_name, value
        return None


_SOURCE_FIELDS = frozenset(
    f.name
    for f in msgspec.structs.fields(PersistentVolumeSpec)
    if f.name
    not in {"capacity", "access_modes", "storage_class_name", "volume_mode", "node_affinity"}
)


class PersistentVolume(Model, frozen=True, kw_only=True):
    """A core/v1 PersistentVolume, trimmed to what PV labelling reads."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PersistentVolumeSpec = msgspec.field(default_factory=PersistentVolumeSpec)


# ---------------------------------------------------------------------------
# Lease (coordination.k8s.io/v1): the leader-election record, whole
# ---------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------
# CertificateSigningRequest (certificates.k8s.io/v1)
# ---------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------
# lists
# ---------------------------------------------------------------------------


class ListMeta(Model, frozen=True, kw_only=True):
    resource_version: str = ""
    continue_: str = msgspec.field(default="", name="continue")
    """Token for the next page (``limit``); empty on the last."""


class ObjectList(Model, Generic[T], frozen=True, kw_only=True):
    """One page of a list: ``items`` and the list's ``metadata``."""

    metadata: ListMeta = msgspec.field(default_factory=ListMeta)
    items: tuple[T, ...] = ()


# ---------------------------------------------------------------------------
# decoding and encoding
# ---------------------------------------------------------------------------

_decoders: dict[type[Any], msgspec.json.Decoder[Any]] = {}
_encoder = msgspec.json.Encoder()


def decode(type_: type[T], data: bytes | str) -> T:
    """Decode one API object (JSON) into ``type_``, ignoring fields the struct does not keep.

    Decoders are built once per type and reused. Raises :class:`msgspec.ValidationError`
    (a :class:`msgspec.DecodeError`) when a kept field has the wrong JSON type.
    """
    decoder = _decoders.get(type_)
    if decoder is None:
        decoder = _decoders[type_] = msgspec.json.Decoder(type_)
    result: T = decoder.decode(data)
    return result


def decode_node(data: bytes | str) -> Node:
    return decode(Node, data)


def decode_service(data: bytes | str) -> Service:
    return decode(Service, data)


def decode_persistent_volume(data: bytes | str) -> PersistentVolume:
    return decode(PersistentVolume, data)


def to_dict(value: Any) -> Any:
    """A struct (or tuple of structs) as plain JSON values, with API field names.

    Tuples become lists and defaults are omitted, so the result can go straight into
    a patch body: ``{"spec": {"taints": to_dict(new_taints)}}``.
    """
    return msgspec.json.decode(_encoder.encode(value))


def encode(value: Any) -> bytes:
    """A struct (or any JSON-able value holding structs) as JSON bytes with API field names."""
    return _encoder.encode(value)
