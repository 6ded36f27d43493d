"""Kubernetes' protobuf encoding, decoded into the structs the JSON path produces.

``--kube-api-content-type=application/vnd.kubernetes.protobuf`` (upstream's flag) makes
the informers ask for protobuf lists and watch streams of the kinds this module can
convert: Nodes, Services, PersistentVolumes, CertificateSigningRequests and Leases. Every
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
    Derived, not written per kind: :func:`derive` walks a struct's msgspec fields
    (:mod:`kube_ccm.api.objects`) beside its message's descriptor, matching each field
    by its JSON name (``encode_name``), and writes the function a hand-written
    conversion would be, compiled once per kind on first use. A decoded object equals the
    one msgspec decodes from the same object's JSON (``tests/unit/runtime/
    test_codec_derived.py`` on bytes recorded from a real kube-apiserver;
    ``tests/integration/test_codec_real.py`` live). Go's JSON rules decide each field,
    and the few that protobuf's zero value does not tell are in the tables below:

    * a pointer field (``loadBalancerClass``, ``ipMode``, ``deletionTimestamp``) is
      ``None`` unless present; a field Go declares as a value (``nodeInfo``,
      ``creationTimestamp``) that the struct keeps optional is always read
      (:data:`_GO_VALUES`);
    * ``metav1.Time``/``MicroTime``, ``Quantity`` and ``IntOrString`` are strings or
      numbers in JSON (:data:`_SCALAR_MESSAGES`); a zero time is ``null``;
    * a string with ``omitempty`` whose struct default is not empty
      (``ServiceSpec.type``, ``ServicePort.protocol``) takes the default when empty;
      an empty list or map takes the struct's default (``()``, ``{}`` or ``None``);
    * an embedded Go struct (``json:",inline"``: a PersistentVolume's source) is a
      nested message (:data:`_INLINE`); ``apiVersion``/``kind`` are in the envelope;
    * a field typed as a raw mapping (a PersistentVolume's source, a Lease's owner
      references) is kept as the dict its JSON would give, except that a field Go
      always writes (no ``omitempty``) is left out when it holds its zero value
      (``iscsi.lun: 0``): protobuf cannot tell the two apart, and no such field is
      one kube-ccm reads.

    A struct field with no message field of its JSON name fails when its kind is derived
    (the unit tests derive every kind).
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Iterator
from typing import Any, Final, Generic, TypeVar

import msgspec
import msgspec.inspect as mi
from google.protobuf.message import DecodeError

from kube_ccm.api.objects import CertificateSigningRequest, Lease, Node, PersistentVolume, Service
from kube_ccm.runtime.k8spb import (
    certificates_v1_pb2,
    coordination_v1_pb2,
    core_v1_pb2,
    meta_v1_pb2,
    runtime_pb2,
)

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


def _envelope(data: bytes | memoryview) -> Any:
    if data[:4] != MAGIC:
        raise ProtobufDecodeError("not a Kubernetes protobuf body (no k8s\\x00 prefix)")
    return _parse(runtime_pb2.Unknown, memoryview(data)[4:])


def unwrap(data: bytes | memoryview) -> tuple[str, bytes]:
    """``(kind, raw)`` of a protobuf body (magic + ``runtime.Unknown``)."""
    envelope = _envelope(data)
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


# -- Go's JSON where protobuf's zero value says something else -----------------------------
#
# Everything else is derived from the struct's msgspec fields and the message's descriptor.

_TIME: Final = "k8s.io.apimachinery.pkg.apis.meta.v1.Time"
_MICRO_TIME: Final = "k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime"
_QUANTITY: Final = "k8s.io.apimachinery.pkg.api.resource.Quantity"
_INT_OR_STRING: Final = "k8s.io.apimachinery.pkg.util.intstr.IntOrString"

_SCALAR_MESSAGES: Final = {
    _TIME: "_time({})",
    _MICRO_TIME: "_micro_time({})",
    _QUANTITY: "{}.string",
    _INT_OR_STRING: "_int_or_string({})",
}
"""Messages whose JSON is a string or number (each type's ``MarshalJSON``): a zero
``metav1.Time`` is ``null``, a ``Quantity`` its string, an ``IntOrString`` either."""

_GO_VALUES: Final = frozenset(
    {
        "k8s.io.apimachinery.pkg.apis.meta.v1.ObjectMeta.creationTimestamp",
        "k8s.io.api.core.v1.NodeCondition.lastHeartbeatTime",
        "k8s.io.api.core.v1.NodeCondition.lastTransitionTime",
        "k8s.io.api.core.v1.NodeStatus.nodeInfo",
        "k8s.io.api.core.v1.NodeStatus.daemonEndpoints",
        "k8s.io.api.core.v1.NodeDaemonEndpoints.kubeletEndpoint",
    }
)
"""Message fields Go declares as values, not pointers, that the struct keeps optional:
Go's JSON always writes them (a zero time as ``null``, a struct with its zeros), so
they are read as they are, present or not. Every other optional field is a Go
pointer: ``None`` unless present (its presence tested first, which is also cheaper
than reading an absent message)."""

_INLINE: Final = {"k8s.io.api.core.v1.PersistentVolumeSpec": "persistentVolumeSource"}
"""Go structs embedded with ``json:",inline"``: their fields are the outer object's in
JSON and a nested message in protobuf."""

_TYPE_META: Final = frozenset({"apiVersion", "kind"})
"""``TypeMeta``, which protobuf carries in the envelope, not in the message: a
converted object has the struct's defaults, as a list's items in JSON do
(:meth:`Kind.decode_object` fills them in, as one object's JSON has them)."""


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


def _micro_time(value: Any) -> str | None:
    """A ``metav1.MicroTime`` as its JSON string (RFC 3339, six fraction digits)."""
    seconds: int = value.seconds
    nanos: int = value.nanos
    if seconds == 0 and nanos == 0:
        return None
    day = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
    return f"{day}.{nanos // 1000:06d}Z"


def _int_or_string(value: Any) -> int | str:
    result: int | str = value.strVal if value.type == 1 else value.intVal  # 1: intstr.String
    return result


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


# -- one converter per struct, derived -------------------------------------------------------
#
# A generic walk per object would look at descriptors and read fields by name for every
# object; here the walk happens once per struct: it writes the Python a hand-written
# conversion would be (attribute reads, one constructor call per struct, lists built by
# comprehension, empty containers tested first) and compiles it.


def _fields(cls: type[Any]) -> tuple[mi.Field, ...]:
    info = mi.type_info(cls)
    if not isinstance(info, mi.StructType):
        raise TypeError(f"{cls!r} is not a msgspec struct")
    return info.fields


class _Writer:
    """The source of one kind's conversion function: top-level locals, then one
    expression that builds the struct."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.names: dict[str, Any] = {
            "_time": _time,
            "_micro_time": _micro_time,
            "_int_or_string": _int_or_string,
            "_plain": _plain,
        }
        self._count = 0

    def local(self, value: str) -> str:
        """Bind ``value`` to a new local of the function (top level only)."""
        self._count += 1
        name = f"_m{self._count}"
        self.lines.append(f"    {name} = {value}")
        return name

    def variable(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}{self._count}"

    def struct(self, cls: type[Any], descriptor: Any, source: str, *, top: bool) -> str:
        """An expression building ``cls`` from the message ``source`` holds."""
        name = cls.__name__
        if self.names.setdefault(name, cls) is not cls:
            raise TypeError(f"two structs named {name}")
        fields = _fields(cls)
        if top and len(fields) > 1 and not source.isidentifier():
            source = self.local(source)  # read more than once: a local, as by hand
        inline = _INLINE.get(descriptor.full_name)
        inline_source = ""
        if inline is not None:
            inline_source = f"{source}.{inline}"
            if top:
                inline_source = self.local(inline_source)
            inline_descriptor = descriptor.fields_by_name[inline].message_type
        arguments = []
        for info in fields:
            field = descriptor.fields_by_name.get(info.encode_name)
            owner = source
            if field is None and inline is not None:
                field = inline_descriptor.fields_by_name.get(info.encode_name)
                owner = inline_source
            if field is None:
                if info.encode_name in _TYPE_META and not info.required:
                    continue  # the struct's default
                raise TypeError(
                    f"{name}.{info.name}: {descriptor.full_name} has no field {info.encode_name}"
                )
            arguments.append(f"{info.name}={self.field(info, field, owner, top=top)}")
        return f"{name}({', '.join(arguments)})"

    def field(self, info: Any, field: Any, owner: str, *, top: bool) -> str:
        """An expression reading ``field`` of the message ``owner`` as ``info`` declares it."""
        value = f"{owner}.{field.name}"
        type_ = info.type
        optional = isinstance(type_, mi.UnionType) and any(
            isinstance(t, mi.NoneType) for t in type_.types
        )
        if optional:
            rest = [t for t in type_.types if not isinstance(t, mi.NoneType)]
            type_ = rest[0] if len(rest) == 1 else mi.UnionType(tuple(rest))
            if info.default is not None:
                raise TypeError(f"{info.name}: an optional field's default must be None")
        wire = field.message_type.full_name if field.message_type is not None else None
        if field.is_repeated:  # a list or a map: empty is JSON's omitted, the default
            empty = (
                "None"
                if optional
                else repr(
                    info.default_factory() if info.default is msgspec.NODEFAULT else info.default
                )
            )
            if top:  # read once, into a local
                read, value = f"({self.variable('_v')} := {value})", f"_v{self._count}"
            else:
                read = value
            return f"({self.container(type_, field, value)} if {read} else {empty})"
        pointer = optional and field.full_name not in _GO_VALUES
        if wire in _SCALAR_MESSAGES:
            converted = _SCALAR_MESSAGES[wire].format(value)
        elif isinstance(type_, mi.StructType):
            converted = self.struct(type_.cls, field.message_type, value, top=top and not pointer)
        elif isinstance(type_, mi.DictType) and wire is not None:
            converted = f"_plain({value})"
        elif wire is None:
            converted = value
            default = info.default
            if not optional and default not in (msgspec.NODEFAULT, "", 0, False, b""):
                # Go's omitempty drops the empty value; the struct's default is the API's.
                converted = f"({value} or {default!r})"
        else:
            raise TypeError(f"{info.name}: no conversion of {wire} to {type_}")
        if pointer:
            return f"({converted} if {owner}.HasField({field.name!r}) else None)"
        return converted

    def container(self, type_: Any, field: Any, value: str) -> str:
        """The non-empty list or map ``value`` as ``type_``."""
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            if not isinstance(type_, mi.DictType):
                raise TypeError(f"{field.full_name}: a map, kept as {type_}")
            item = field.message_type.fields_by_name["value"]
            if item.message_type is None:
                return f"dict({value}.items())"
            template = _SCALAR_MESSAGES[item.message_type.full_name]
            return f"{{_k: {template.format('_v')} for _k, _v in {value}.items()}}"
        if not isinstance(type_, mi.VarTupleType):
            raise TypeError(f"{field.full_name}: a list, kept as {type_}")
        item_type = type_.item_type
        if field.message_type is None:
            return f"tuple({value})"
        variable = self.variable("_i")
        if isinstance(item_type, mi.StructType):
            item = self.struct(item_type.cls, field.message_type, variable, top=False)
        elif isinstance(item_type, mi.DictType):
            item = f"_plain({variable})"
        else:
            raise TypeError(f"{field.full_name}: no conversion to {item_type}")
        return f"tuple([{item} for {variable} in {value}])"


def derive(cls: type[T], message: Any) -> Callable[[Any], T]:
    """The conversion of ``message`` (a generated class) into ``cls``: each field of
    ``cls`` read from the message field of its JSON name, as Go's JSON would give it."""
    writer = _Writer()
    body = writer.struct(cls, message.DESCRIPTOR, "m", top=True)
    source = "\n".join([f"def convert_{cls.__name__}(m):", *writer.lines, f"    return {body}", ""])
    namespace = dict(writer.names)
    exec(compile(source, f"<codec: {cls.__name__}>", "exec"), namespace)
    convert: Callable[[Any], T] = namespace[f"convert_{cls.__name__}"]
    convert.__doc__ = source
    return convert


# -- per struct: the messages and the conversion ---------------------------------------------


class Kind(Generic[T]):
    """How one struct is read from protobuf: its object and list messages, the conversion."""

    def __init__(self, type_: type[T], messages: Any) -> None:
        """``type_`` read as the message of its name in ``messages`` (a generated module),
        lists as ``<name>List``."""
        self.kind = kind = type_.__name__
        self.message = message = getattr(messages, kind)
        self.list_message = getattr(messages, f"{kind}List")
        self.convert: Callable[[Any], T] = derive(type_, message)
        fields = {f.encode_name for f in _fields(type_)}
        self._type_meta = fields >= _TYPE_META and _TYPE_META.isdisjoint(
            message.DESCRIPTOR.fields_by_name
        )

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
        envelope = _envelope(data)
        kind = envelope.typeMeta.kind
        if kind != self.kind:
            raise ProtobufDecodeError(f"expected a {self.kind}, got {kind or 'nothing'}")
        message = _parse(self.message, envelope.raw)
        converted = self.convert(message)
        if self._type_meta:  # one object's JSON has its apiVersion and kind
            converted = msgspec.structs.replace(
                converted,  # type: ignore[type-var]
                api_version=envelope.typeMeta.apiVersion,
                kind=kind,
            )
        return converted, message.metadata.resourceVersion

    def resource_version(self, data: bytes | memoryview) -> str:
        """A bookmark's resourceVersion (the object holds nothing else)."""
        _kind, raw = unwrap(data)
        return str(_parse(self.message, raw).metadata.resourceVersion)


_MESSAGES: Final[dict[type[Any], Any]] = {
    Node: core_v1_pb2,
    Service: core_v1_pb2,
    PersistentVolume: core_v1_pb2,
    CertificateSigningRequest: certificates_v1_pb2,
    Lease: coordination_v1_pb2,
}
"""The structs read from protobuf, each beside the generated module of its messages."""
_kinds: dict[type[Any], Kind[Any]] = {}


def protobuf_kind(type_: type[T]) -> Kind[T] | None:
    """How ``type_`` is read from protobuf, or ``None``: the kind stays JSON. Derived on
    first use (a few ms a kind) and kept: a daemon reading JSON never pays for it."""
    found: Kind[T] | None = _kinds.get(type_)
    if found is None and type_ in _MESSAGES:
        found = _kinds[type_] = Kind(type_, _MESSAGES[type_])
    return found
