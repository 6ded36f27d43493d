"""Protobuf lists and watches: the envelope, the frames, Go's JSON rules, the client and
informer paths. (tests/integration/test_codec_real.py compares both encodings of the
same objects from a real kube-apiserver.)"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import msgspec
import pytest

from kube_ccm.api.objects import Node, Service
from kube_ccm.runtime import codec
from kube_ccm.runtime.client import ApiError, KubeClient, WatchEvent
from kube_ccm.runtime.informer import Backoff, Informer
from kube_ccm.runtime.k8spb import core_v1_pb2, meta_v1_pb2, runtime_pb2
from kube_ccm.runtime.resources import NODES, ObjectList
from kube_ccm.runtime.transport import Request, Response, StreamResponse
from kube_ccm.testing.transport import MockTransport, json_response

T0 = 1_790_000_000  # 2026-09-21T14:13:20Z


def envelope(kind: str, message: Any) -> bytes:
    unknown = runtime_pb2.Unknown(
        typeMeta=runtime_pb2.TypeMeta(apiVersion="v1", kind=kind),
        raw=message.SerializeToString(),
        contentType=codec.PROTOBUF,
    )
    return codec.MAGIC + bytes(unknown.SerializeToString())


def frame(type_: str, obj: bytes) -> bytes:
    event = meta_v1_pb2.WatchEvent(type=type_, object=runtime_pb2.RawExtension(raw=obj))
    data = bytes(event.SerializeToString())
    return struct.pack(">I", len(data)) + data


def proto_node(name: str, rv: str, *, label: str = "") -> Any:
    node = core_v1_pb2.Node()
    node.metadata.name = name
    node.metadata.resourceVersion = rv
    node.metadata.uid = f"uid-{name}"
    node.metadata.creationTimestamp.seconds = T0
    node.metadata.creationTimestamp.SetInParent()
    if label:
        node.metadata.labels["l"] = label
    node.spec.providerID = f"sim://{name}"
    taint = node.spec.taints.add(key="a", effect="NoSchedule")
    taint.timeAdded.seconds = T0 + 7
    node.spec.taints.add(key="b", value="v", effect="NoExecute")
    node.status.addresses.add(type="InternalIP", address="10.0.0.1")
    condition = node.status.conditions.add(type="Ready", status="True", reason="KubeletReady")
    condition.lastHeartbeatTime.seconds = T0
    condition.lastTransitionTime.SetInParent()  # a zero Time: JSON null
    node.status.nodeInfo.systemUUID = "uuid"
    return node


JSON_NODE = {
    "metadata": {
        "name": "n1",
        "uid": "uid-n1",
        "resourceVersion": "7",
        "creationTimestamp": "2026-09-21T14:13:20Z",
        "labels": {"l": "x"},
    },
    "spec": {
        "providerID": "sim://n1",
        "taints": [
            {"key": "a", "effect": "NoSchedule", "timeAdded": "2026-09-21T14:13:27Z"},
            {"key": "b", "value": "v", "effect": "NoExecute"},
        ],
    },
    "status": {
        "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "lastHeartbeatTime": "2026-09-21T14:13:20Z",
                "lastTransitionTime": None,
            }
        ],
        "nodeInfo": {"systemUUID": "uuid", "machineID": ""},
        # Go always writes it (a struct, not a pointer): Port 0 when the kubelet set none.
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
    },
}


def test_a_node_list_decodes_as_its_json_does() -> None:
    kind = codec.protobuf_kind(Node)
    assert kind is not None
    listed = core_v1_pb2.NodeList()
    listed.metadata.resourceVersion = "9"
    setattr(listed.metadata, "continue", "next-page")
    listed.items.append(proto_node("n1", "7", label="x"))
    items, version, continue_ = kind.decode_list(envelope("NodeList", listed))
    assert (version, continue_) == ("9", "next-page")
    assert items == [msgspec.json.decode(msgspec.json.encode(JSON_NODE), type=Node)]


def test_go_json_rules_for_services() -> None:
    service = core_v1_pb2.Service()
    service.metadata.name = "s"
    service.spec.ports.add(port=80, targetPort={"type": 1, "strVal": "http"})
    service.spec.ports.add(port=53, protocol="UDP", targetPort={"type": 0, "intVal": 5353})
    service.spec.ports.add(port=8080, appProtocol="")  # a pointer set to "": kept
    service.spec.loadBalancerClass = "example.com/lb"
    ingress = service.status.loadBalancer.ingress.add(ip="192.0.2.1")
    ingress.ports.add(port=80, protocol="TCP")
    kind = codec.protobuf_kind(Service)
    assert kind is not None
    decoded, _ = kind.decode_object(envelope("Service", service))
    # An empty type, affinity and protocol are omitted by Go's JSON: the defaults apply.
    assert (decoded.spec.type, decoded.spec.session_affinity) == ("ClusterIP", "None")
    ports = decoded.spec.ports
    assert [(p.protocol, p.target_port, p.app_protocol) for p in ports] == [
        ("TCP", "http", None),
        ("UDP", 5353, None),
        ("TCP", None, ""),
    ]
    assert decoded.spec.load_balancer_class == "example.com/lb"
    assert decoded.spec.ip_family_policy is None
    assert decoded.spec.allocate_load_balancer_node_ports is None
    assert decoded.spec.session_affinity_config is None
    (found,) = decoded.status.load_balancer.ingress
    assert (found.ip, found.ip_mode, found.ports[0].error) == ("192.0.2.1", None, None)


def test_a_body_of_another_kind_or_not_protobuf_is_refused() -> None:
    kind = codec.protobuf_kind(Node)
    assert kind is not None
    with pytest.raises(codec.ProtobufDecodeError, match="expected a NodeList, got ServiceList"):
        kind.decode_list(envelope("ServiceList", core_v1_pb2.ServiceList()))
    with pytest.raises(codec.ProtobufDecodeError, match="no k8s"):
        kind.decode_list(b'{"items": []}')
    with pytest.raises(codec.ProtobufDecodeError, match="not a valid"):
        kind.decode_list(codec.MAGIC + b"\xff\xff\xff")
    assert codec.protobuf_kind(dict) is None  # plain dicts stay JSON


def status_body(code: int, reason: str, message: str) -> bytes:
    return envelope("Status", meta_v1_pb2.Status(code=code, reason=reason, message=message))


def test_watch_frames_split_anywhere() -> None:
    node = envelope("Node", proto_node("n1", "7"))
    stream = frame("ADDED", node) + frame("BOOKMARK", envelope("Node", core_v1_pb2.Node()))
    buffer = bytearray()
    seen: list[tuple[str, bytes]] = []
    for start in range(0, len(stream), 5):
        buffer += stream[start : start + 5]
        seen += codec.watch_frames(buffer)
    assert [t for t, _ in seen] == ["ADDED", "BOOKMARK"]
    assert seen[0][1] == node
    assert not buffer
    assert codec.decode_status(status_body(410, "Expired", "too old")) == (
        410,
        "Expired",
        "too old",
    )
    assert codec.decode_status(node) is None


class ChunkedTransport(MockTransport):
    """Streams answer in 7-byte chunks, as a network may cut them."""

    @asynccontextmanager
    async def stream(
        self, request: Request, *, read_timeout: float
    ) -> AsyncIterator[StreamResponse]:
        response = await self.send(request)
        yield Chunked(response)


class Chunked:
    def __init__(self, response: Response) -> None:
        self.status = response.status
        self._content = response.content

    async def read(self) -> bytes:
        return self._content

    async def chunks(self) -> AsyncIterator[bytes]:
        for start in range(0, len(self._content), 7):
            yield self._content[start : start + 7]


async def test_a_protobuf_watch_stream_and_its_error_event() -> None:
    node = envelope("Node", proto_node("n1", "7"))
    body = frame("MODIFIED", node) + frame("ERROR", status_body(410, "Expired", "too old"))
    transport = ChunkedTransport(lambda _: Response(200, {}, body))
    client = KubeClient(transport, content_type=codec.PROTOBUF)
    events: list[WatchEvent] = []

    async def follow() -> None:
        async for event in client.watch(
            "/api/v1/nodes", resource_version="1", accept=codec.PROTOBUF_WATCH_ACCEPT
        ):
            events.append(event)

    with pytest.raises(ApiError) as raised:
        await follow()
    assert raised.value.gone
    assert raised.value.reason == "Expired"
    assert [(e.type, bytes(e.object)) for e in events] == [("MODIFIED", node)]
    assert transport.requests[0].headers["Accept"] == codec.PROTOBUF_WATCH_ACCEPT


async def test_a_json_answer_to_a_protobuf_watch_is_read_as_json() -> None:
    body = b'{"type":"ADDED","object":{"metadata":{"name":"n"}}}\n'
    client = KubeClient(ChunkedTransport(lambda _: Response(200, {}, body)))
    events = [
        e
        async for e in client.watch(
            "/api/v1/nodes", resource_version="1", accept=codec.PROTOBUF_WATCH_ACCEPT
        )
    ]
    assert [(e.type, bytes(e.object)) for e in events] == [("ADDED", body[25:-2])]


async def test_a_protobuf_status_error_keeps_its_reason() -> None:
    client = KubeClient(
        MockTransport(lambda _: Response(409, {}, status_body(409, "Conflict", "x")))
    )
    with pytest.raises(ApiError) as raised:
        await client.request("GET", "/api/v1/nodes", accept=codec.PROTOBUF_ACCEPT)
    assert raised.value.conflict
    assert raised.value.message == "x"


async def test_a_protobuf_status_error_keeps_its_causes() -> None:
    status = meta_v1_pb2.Status(
        code=403,
        reason="Forbidden",
        message="being terminated",
        details=meta_v1_pb2.StatusDetails(
            causes=[meta_v1_pb2.StatusCause(reason="NamespaceTerminating")]
        ),
    )
    client = KubeClient(MockTransport(lambda _: Response(403, {}, envelope("Status", status))))
    with pytest.raises(ApiError) as raised:
        await client.request("POST", "/api/v1/namespaces/ns/events", content=b"{}")
    assert raised.value.causes == ("NamespaceTerminating",)
    assert raised.value.message == "being terminated"


def test_an_unknown_content_type_is_refused() -> None:
    with pytest.raises(ValueError, match="text/plain"):
        KubeClient(MockTransport(lambda _: json_response(200)), content_type="text/plain")


async def run_informer(client: KubeClient) -> Informer[Node]:
    informer = Informer(client, NODES, backoff=Backoff(initial=0.001, maximum=0.002))
    task = asyncio.create_task(informer.run())
    try:
        async with asyncio.timeout(5):
            await informer.wait_synced()
            while informer.resource_version != "12":
                await asyncio.sleep(0.001)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    return informer


async def test_an_informer_over_a_protobuf_client_lists_and_watches_in_protobuf() -> None:
    listed = core_v1_pb2.NodeList()
    listed.metadata.resourceVersion = "10"
    listed.items.append(proto_node("n1", "7"))
    listed.items.append(proto_node("n2", "8"))
    watch = (
        frame("MODIFIED", envelope("Node", proto_node("n1", "11", label="new")))
        + frame("DELETED", envelope("Node", proto_node("n2", "11")))
        + frame("BOOKMARK", envelope("Node", core_v1_pb2.Node(metadata={"resourceVersion": "12"})))
    )
    watched = asyncio.Event()

    async def answer(request: Request) -> Response:
        if (request.params or {}).get("watch") != "true":
            return Response(200, {}, envelope("NodeList", listed))
        if watched.is_set():
            await asyncio.Event().wait()  # an idle watch
        watched.set()
        return Response(200, {}, watch)

    transport = ChunkedTransport(answer)
    informer = await run_informer(KubeClient(transport, content_type=codec.PROTOBUF))
    assert informer.keys() == ["n1"]
    n1 = informer.get("n1")
    assert n1 is not None
    assert n1.metadata.labels == {"l": "new"}
    assert n1.metadata.resource_version == "11"
    accepts = [r.headers["Accept"] for r in transport.requests]
    assert accepts[:2] == [codec.PROTOBUF_ACCEPT, codec.PROTOBUF_WATCH_ACCEPT]


async def test_an_informer_over_a_json_client_asks_for_json() -> None:
    listed = {"metadata": {"resourceVersion": "12"}, "items": [JSON_NODE]}

    async def answer(request: Request) -> Response:
        if (request.params or {}).get("watch") == "true":
            await asyncio.Event().wait()  # an idle watch
        return json_response(200, listed)

    transport = MockTransport(answer)
    informer = await run_informer(KubeClient(transport))
    assert informer.list() == list(
        msgspec.json.decode(msgspec.json.encode(listed), type=ObjectList[Node]).items
    )
    assert {r.headers["Accept"] for r in transport.requests} == {"application/json"}
