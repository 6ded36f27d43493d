"""Kubernetes' protobuf encoding, decoded into the structs the JSON path produces.

``--kube-api-content-type=application/vnd.kubernetes.protobuf`` (upstream's flag) makes
the informers ask for protobuf lists and watch streams of the kinds this module can
convert: Nodes, Services, PersistentVolumes and CertificateSigningRequests. Every
other read, custom resources and plain dicts, stays JSON, as upstream's client falls
back for types without protobuf; request bodies (patches, PUTs) stay JSON as
upstream's do. The answer is told apart by its first bytes, not by the request: a
server (or a test double) that answers JSON is decoded as JSON.

The wire format
    A protobuf body is the magic ``k8s\\x00`` and a ``runtime.Unknown`` envelope: the
    ``apiVersion``/``kind`` and the object's own bytes (``raw``). A watch stream
    (``Accept: application/vnd.kubernetes.protobuf;stream=watch``) is a sequence of
    frames, each a 4-byte big-endian length and a ``meta.v1.WatchEvent`` whose
    ``object.raw`` is again magic + envelope. The message classes are generated from
    k8s.io/api and k8s.io/apimachinery's .proto files (``kube_ccm.runtime.k8spb``);
    parsing is the ``protobuf`` package's upb C backend.

The conversion
    Hand-written per struct, field by field, so a decoded object equals the one msgspec
    decodes from the same object's JSON (``tests/integration/test_codec_real.py``
    fetches both from a real kube-apiserver and compares them). Go's JSON rules decide
    each field: a pointer field (``loadBalancerClass``, ``ipMode``) is ``None`` unless
    present; a zero ``metav1.Time`` is JSON ``null``; a string with ``omitempty``
    whose struct default is not empty (``ServiceSpec.type``, ``ServicePort.protocol``)
    takes the default when empty. A PersistentVolume's source is kept as the dict its
    JSON would give, except that a field Go always writes (no ``omitempty``) is left
    out when it holds its zero value (``iscsi.lun: 0``): protobuf cannot tell the two
    apart, and no source field kube-ccm reads is such.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Iterator
from typing import Any, Final, Generic, TypeVar

import msgspec
from google.protobuf.message import DecodeError

from kube_ccm.api.objects import (
    ClientIPConfig,
    DaemonEndpoint,
    LoadBalancerIngress,
    LoadBalancerStatus,
    Node,
    NodeAddress,
    NodeCondition,
    NodeDaemonEndpoints,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    NodeSpec,
    NodeStatus,
    NodeSystemInfo,
    ObjectMeta,
    PersistentVolume,
    PersistentVolumeSpec,
    PortStatus,
    Service,
    ServicePort,
    ServiceSpec,
    ServiceStatus,
    SessionAffinityConfig,
    Taint,
    VolumeNodeAffinity,
)
from kube_ccm.runtime.k8spb import core_v1_pb2, meta_v1_pb2, runtime_pb2

T = TypeVar("T")

JSON: Final = "application/json"
PROTOBUF: Final = "application/vnd.kubernetes.protobuf"
CONTENT_TYPES: Final = (PROTOBUF, JSON)
"""What ``--kube-api-content-type`` accepts."""
PROTOBUF_ACCEPT: Final = f"{PROTOBUF}, {JSON}"
"""A list's Accept header: protobuf, JSON where the kind has none (upstream's)."""
PROTOBUF_WATCH_ACCEPT: Final = f"{PROTOBUF};stream=watch"
MAGIC: Final = b"k8s\x00"


class ProtobufDecodeError(ValueError):
    """A protobuf answer that does not hold what was asked for."""


def is_protobuf(data: bytes | memoryview) -> bool:
    return bytes(data[:4]) == MAGIC


def _parse(message: Any, data: bytes | memoryview) -> Any:
    try:
        return message.FromString(data)
    except DecodeError as exc:
        raise ProtobufDecodeError(f"not a valid {message.DESCRIPTOR.name}: {exc}") from exc


def unwrap(data: bytes | memoryview) -> tuple[str, bytes]:
    """``(kind, raw)`` of a protobuf body (magic + ``runtime.Unknown``)."""
    if data[:4] != MAGIC:
        raise ProtobufDecodeError("not a Kubernetes protobuf body (no k8s\\x00 prefix)")
    envelope = _parse(runtime_pb2.Unknown, memoryview(data)[4:])
    return envelope.typeMeta.kind, envelope.raw


def decode_status(data: bytes | memoryview) -> tuple[int, str, str] | None:
    """``(code, reason, message)`` of a protobuf ``Status``; ``None`` if ``data`` is not one."""
    try:
        kind, raw = unwrap(data)
        if kind != "Status":
            return None
        status = _parse(meta_v1_pb2.Status, raw)
    except ProtobufDecodeError:
        return None
    return status.code, status.reason, status.message


def decode_status_causes(data: bytes | memoryview) -> tuple[str, ...]:
    """The types of a protobuf ``Status``'s ``details.causes`` (``NamespaceTerminating``);
    empty if ``data`` is not a Status or has none."""
    try:
        kind, raw = unwrap(data)
        if kind != "Status":
            return ()
        status = _parse(meta_v1_pb2.Status, raw)
    except ProtobufDecodeError:
        return ()
    return tuple(cause.reason for cause in status.details.causes)


_FRAME = struct.Struct(">I")


def watch_frames(buffer: bytearray) -> Iterator[tuple[str, bytes]]:
    """Take every whole frame off the front of ``buffer``: ``(type, object bytes)`` each,
    the object still magic + envelope. What remains is the start of the next frame."""
    offset = 0
    size = len(buffer)
    while size - offset >= 4:
        (length,) = _FRAME.unpack_from(buffer, offset)
        end = offset + 4 + length
        if end > size:
            break
        event = _parse(meta_v1_pb2.WatchEvent, memoryview(buffer)[offset + 4 : end])
        offset = end
        yield event.type, event.object.raw
    del buffer[:offset]


# -- field conversions ----------------------------------------------------------------------

_times: dict[int, str] = {}


def _time(value: Any) -> str | None:
    """A ``metav1.Time`` as its JSON string (RFC 3339, seconds); zero is JSON ``null``."""
    seconds: int = value.seconds
    if seconds == 0 and value.nanos == 0:
        return None
    text = _times.get(seconds)
    if text is None:
        if len(_times) > 4096:  # heartbeat times repeat across Nodes; keep a few
            _times.clear()
        text = _times[seconds] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))
    return text


# upb's containers are slow to iterate through the collections ABCs: empty ones, the
# common case, are tested first; maps go through ``items()``.


def strings(value: Any) -> tuple[str, ...]:
    return tuple(value) if value else ()


def meta(m: Any) -> ObjectMeta:
    return ObjectMeta(
        name=m.name,
        namespace=m.namespace,
        uid=m.uid,
        resource_version=m.resourceVersion,
        generation=m.generation,
        labels=dict(m.labels.items()) if m.labels else {},
        annotations=dict(m.annotations.items()) if m.annotations else {},
        finalizers=tuple(m.finalizers) if m.finalizers else (),
        creation_timestamp=_time(m.creationTimestamp),
        deletion_timestamp=_time(m.deletionTimestamp) if m.HasField("deletionTimestamp") else None,
    )


def optional(message: Any, field: str) -> Any:
    """A pointer field: its value when present, ``None`` otherwise."""
    return getattr(message, field) if message.HasField(field) else None


def node(m: Any) -> Node:
    spec = m.spec
    status = m.status
    info = status.nodeInfo
    return Node(
        metadata=meta(m.metadata),
        spec=NodeSpec(
            provider_id=spec.providerID,
            pod_cidr=spec.podCIDR,
            pod_cidrs=tuple(spec.podCIDRs) if spec.podCIDRs else (),
            taints=tuple(
                Taint(
                    key=t.key,
                    value=t.value,
                    effect=t.effect,
                    time_added=_time(t.timeAdded) if t.HasField("timeAdded") else None,
                )
                for t in spec.taints
            )
            if spec.taints
            else (),
            unschedulable=spec.unschedulable,
        ),
        status=NodeStatus(
            addresses=tuple(NodeAddress(type=a.type, address=a.address) for a in status.addresses)
            if status.addresses
            else (),
            conditions=tuple(
                NodeCondition(
                    type=c.type,
                    status=c.status,
                    reason=c.reason,
                    message=c.message,
                    last_heartbeat_time=_time(c.lastHeartbeatTime),
                    last_transition_time=_time(c.lastTransitionTime),
                )
                for c in status.conditions
            )
            if status.conditions
            else (),
            node_info=NodeSystemInfo(system_uuid=info.systemUUID, machine_id=info.machineID),
            daemon_endpoints=NodeDaemonEndpoints(
                kubelet_endpoint=DaemonEndpoint(port=status.daemonEndpoints.kubeletEndpoint.Port)
            ),
        ),
    )


def _target_port(port: Any) -> int | str | None:
    if not port.HasField("targetPort"):
        return None
    target = port.targetPort
    value: int | str = target.strVal if target.type == 1 else target.intVal  # 1: intstr.String
    return value


def _service_spec(spec: Any) -> ServiceSpec:
    affinity = None
    if spec.HasField("sessionAffinityConfig"):
        config = spec.sessionAffinityConfig
        affinity = SessionAffinityConfig(
            client_ip=ClientIPConfig(timeout_seconds=optional(config.clientIP, "timeoutSeconds"))
            if config.HasField("clientIP")
            else None
        )
    return ServiceSpec(
        type=spec.type or "ClusterIP",
        load_balancer_class=optional(spec, "loadBalancerClass"),
        ports=tuple(
            ServicePort(
                name=p.name,
                protocol=p.protocol or "TCP",
                port=p.port,
                node_port=p.nodePort,
                target_port=_target_port(p),
                app_protocol=optional(p, "appProtocol"),
            )
            for p in spec.ports
        )
        if spec.ports
        else (),
        session_affinity=spec.sessionAffinity or "None",
        session_affinity_config=affinity,
        load_balancer_ip=spec.loadBalancerIP,
        external_ips=strings(spec.externalIPs),
        external_traffic_policy=spec.externalTrafficPolicy,
        health_check_node_port=spec.healthCheckNodePort,
        ip_families=strings(spec.ipFamilies),
        ip_family_policy=optional(spec, "ipFamilyPolicy"),
        load_balancer_source_ranges=strings(spec.loadBalancerSourceRanges),
        cluster_ip=spec.clusterIP,
        cluster_ips=strings(spec.clusterIPs),
        allocate_load_balancer_node_ports=optional(spec, "allocateLoadBalancerNodePorts"),
    )


def service(m: Any) -> Service:
    return Service(
        metadata=meta(m.metadata),
        spec=_service_spec(m.spec),
        status=ServiceStatus(
            load_balancer=LoadBalancerStatus(
                ingress=tuple(
                    LoadBalancerIngress(
                        ip=i.ip,
                        hostname=i.hostname,
                        ip_mode=optional(i, "ipMode"),
                        ports=tuple(
                            PortStatus(port=p.port, protocol=p.protocol, error=optional(p, "error"))
                            for p in i.ports
                        ),
                    )
                    for i in m.status.loadBalancer.ingress
                )
                if m.status.loadBalancer.ingress
                else ()
            )
        ),
    )


def _plain(message: Any) -> dict[str, Any]:
    """A message as the dict its JSON would decode to (zero values left out)."""
    out: dict[str, Any] = {}
    for field, value in message.ListFields():
        if field.message_type is not None:
            if field.message_type.GetOptions().map_entry:
                if value:
                    out[field.name] = dict(value)
                continue
            if field.is_repeated:
                if value:
                    out[field.name] = [_plain(v) for v in value]
                continue
            out[field.name] = _plain(value)
        elif field.is_repeated:
            if value:
                out[field.name] = list(value)
        elif value:
            out[field.name] = value
    return out


def _requirements(items: Any) -> tuple[NodeSelectorRequirement, ...]:
    return tuple(
        NodeSelectorRequirement(key=r.key, operator=r.operator, values=tuple(r.values))
        for r in items
    )


_SOURCES: Final = tuple(
    (info.name, info.encode_name)
    for info in msgspec.structs.fields(PersistentVolumeSpec)
    if info.name
    not in {"capacity", "access_modes", "storage_class_name", "volume_mode", "node_affinity"}
)


def persistent_volume(m: Any) -> PersistentVolume:
    spec = m.spec
    affinity = None
    if spec.HasField("nodeAffinity"):
        required = None
        if spec.nodeAffinity.HasField("required"):
            required = NodeSelector(
                node_selector_terms=tuple(
                    NodeSelectorTerm(
                        match_expressions=_requirements(t.matchExpressions),
                        match_fields=_requirements(t.matchFields),
                    )
                    for t in spec.nodeAffinity.required.nodeSelectorTerms
                )
            )
        affinity = VolumeNodeAffinity(required=required)
    source = spec.persistentVolumeSource
    sources = {
        name: _plain(getattr(source, api_name))
        for name, api_name in _SOURCES
        if source.HasField(api_name)
    }
    return PersistentVolume(
        metadata=meta(m.metadata),
        spec=PersistentVolumeSpec(
            capacity={k: v.string for k, v in spec.capacity.items()},
            access_modes=strings(spec.accessModes),
            storage_class_name=spec.storageClassName,
            volume_mode=optional(spec, "volumeMode"),
            node_affinity=affinity,
            **sources,
        ),
    )


# -- per struct: the messages and the conversion ---------------------------------------------


class Kind(Generic[T]):
    """How one struct is read from protobuf: its object and list messages, the conversion."""

    def __init__(
        self, kind: str, message: Any, list_message: Any, convert: Callable[[Any], T]
    ) -> None:
        self.kind = kind
        self.message = message
        self.list_message = list_message
        self.convert = convert

    def decode_list(self, body: bytes | memoryview) -> tuple[list[T], str, str]:
        """``(items, resourceVersion, continue)`` of a protobuf list."""
        kind, raw = unwrap(body)
        if kind != f"{self.kind}List":
            raise ProtobufDecodeError(f"expected a {self.kind}List, got {kind or 'nothing'}")
        page = _parse(self.list_message, raw)
        convert = self.convert
        return (
            [convert(item) for item in page.items],
            page.metadata.resourceVersion,
            getattr(page.metadata, "continue"),
        )

    def decode_object(self, data: bytes | memoryview) -> tuple[T, str]:
        """``(object, resourceVersion)`` of one protobuf object (a watch event's)."""
        kind, raw = unwrap(data)
        if kind != self.kind:
            raise ProtobufDecodeError(f"expected a {self.kind}, got {kind or 'nothing'}")
        message = _parse(self.message, raw)
        return self.convert(message), message.metadata.resourceVersion

    def resource_version(self, data: bytes | memoryview) -> str:
        """A bookmark's resourceVersion (the object holds nothing else)."""
        _kind, raw = unwrap(data)
        return str(_parse(self.message, raw).metadata.resourceVersion)


_KINDS: dict[type[Any], Kind[Any]] = {
    Node: Kind("Node", core_v1_pb2.Node, core_v1_pb2.NodeList, node),
    Service: Kind("Service", core_v1_pb2.Service, core_v1_pb2.ServiceList, service),
    PersistentVolume: Kind(
        "PersistentVolume",
        core_v1_pb2.PersistentVolume,
        core_v1_pb2.PersistentVolumeList,
        persistent_volume,
    ),
}


def register(type_: type[T], kind: Kind[T]) -> None:
    """Read ``type_`` from protobuf as ``kind`` says (a struct defined elsewhere: the
    CertificateSigningRequest of :mod:`kube_ccm.runtime.resources`)."""
    _KINDS[type_] = kind


def protobuf_kind(type_: type[T]) -> Kind[T] | None:
    """How ``type_`` is read from protobuf, or ``None``: the kind stays JSON."""
    found: Kind[T] | None = _KINDS.get(type_)
    return found
