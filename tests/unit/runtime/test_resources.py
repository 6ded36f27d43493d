"""The typed client: paths from resource descriptors, bodies out, structs back."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import msgspec
import pytest

from kube_ccm.api.objects import Lease, LeaseSpec, Node, NodeAddress, Service, Taint
from kube_ccm.runtime.client import ApiError, KubeClient
from kube_ccm.runtime.resources import (
    IP_ADDRESSES,
    LEASES,
    NODES,
    PERSISTENT_VOLUMES,
    SERVICES,
    Resource,
)
from kube_ccm.runtime.typedclient import ResponseDecodeError, TypedClient
from kube_ccm.testing.fakeapi import FakeApiServer

DEPLOYMENTS: Resource[Any] = Resource(
    group="apps", version="v1", plural="deployments", namespaced=True, type=dict
)

# -- paths -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("resource", "name", "namespace", "subresource", "path"),
    [
        (NODES, None, None, None, "/api/v1/nodes"),
        (NODES, "n1", None, None, "/api/v1/nodes/n1"),
        (NODES, "n1", None, "status", "/api/v1/nodes/n1/status"),
        (PERSISTENT_VOLUMES, "pv-1", None, None, "/api/v1/persistentvolumes/pv-1"),
        (SERVICES, None, None, None, "/api/v1/services"),
        (SERVICES, None, "default", None, "/api/v1/namespaces/default/services"),
        (SERVICES, "web", "default", None, "/api/v1/namespaces/default/services/web"),
        (
            SERVICES,
            "web",
            "default",
            "status",
            "/api/v1/namespaces/default/services/web/status",
        ),
        (
            LEASES,
            "ccm",
            "kube-system",
            None,
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/ccm",
        ),
        (
            LEASES,
            None,
            "kube-system",
            None,
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases",
        ),
        (DEPLOYMENTS, None, None, None, "/apis/apps/v1/deployments"),
        (DEPLOYMENTS, "d", "ns", "status", "/apis/apps/v1/namespaces/ns/deployments/d/status"),
    ],
)
def test_paths_follow_group_version_scope_name_and_subresource(
    resource: Resource[Any],
    name: str | None,
    namespace: str | None,
    subresource: str | None,
    path: str,
) -> None:
    assert resource.path(name, namespace=namespace, subresource=subresource) == path


def test_api_version_and_prefix() -> None:
    assert (NODES.api_version, NODES.prefix) == ("v1", "/api/v1")
    assert (LEASES.api_version, LEASES.prefix) == (
        "coordination.k8s.io/v1",
        "/apis/coordination.k8s.io/v1",
    )


def test_names_and_namespaces_are_url_escaped() -> None:
    assert NODES.path("a b/c?d") == "/api/v1/nodes/a%20b%2Fc%3Fd"
    assert SERVICES.path("x#y", namespace="n s") == "/api/v1/namespaces/n%20s/services/x%23y"
    assert NODES.path("node-1.example.com") == "/api/v1/nodes/node-1.example.com"
    # ":" is a path character: an IPv6 IPAddress's name leaves as the API names it
    assert IP_ADDRESSES.path("2001:db8::a") == "/apis/networking.k8s.io/v1/ipaddresses/2001:db8::a"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: NODES.path("n1", namespace="default"), "cluster-scoped"),
        (lambda: SERVICES.path("web"), "namespaced: 'web' needs a namespace"),
        (lambda: SERVICES.path(namespace=""), "namespace is empty"),
        (lambda: NODES.path(""), "name is empty"),
        (lambda: NODES.path(subresource="status"), "a subresource needs a name"),
        (lambda: NODES.path("n1", subresource="scale"), "no subresource 'scale'"),
        (lambda: LEASES.path("l", namespace="ns", subresource="status"), "no subresource"),
    ],
)
def test_impossible_paths_are_refused(call: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


# -- requests, with a recording stand-in for the client ----------------------------


@dataclass
class Sent:
    method: str
    path: str
    params: Mapping[str, str | int] | None
    body: Any
    content_type: str | None


@dataclass
class Recorder:
    answer: bytes = b"{}"
    sent: list[Sent] = field(default_factory=list)

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
        assert content is None, "bodies go as JSON values"
        # What goes on the wire must be plain JSON (json.dumps or msgspec alike).
        msgspec.json.encode(body)
        self.sent.append(Sent(method, path, params, body, content_type))
        return self.answer


def typed(recorder: Recorder) -> TypedClient:
    return TypedClient(cast(KubeClient, recorder))


NODE_JSON = (
    b'{"kind":"Node","apiVersion":"v1","metadata":{"name":"n1","resourceVersion":"7",'
    b'"managedFields":[{"manager":"kubelet"}]},"spec":{"providerID":"p://1"},'
    b'"status":{"addresses":[{"type":"InternalIP","address":"10.0.0.1"}]}}'
)


async def test_get_decodes_into_the_struct_and_can_read_from_the_cache() -> None:
    recorder = Recorder(NODE_JSON)
    node = await typed(recorder).get(NODES, "n1", resource_version="0")
    assert isinstance(node, Node)
    assert (node.metadata.resource_version, node.spec.provider_id) == ("7", "p://1")
    assert node.status.addresses == (NodeAddress(type="InternalIP", address="10.0.0.1"),)
    assert recorder.sent == [Sent("GET", "/api/v1/nodes/n1", {"resourceVersion": "0"}, None, None)]
    await typed(recorder).get(NODES, "n1")
    assert recorder.sent[-1].params is None


async def test_list_sends_selectors_and_params_and_decodes_the_page() -> None:
    recorder = Recorder(
        b'{"kind":"ServiceList","metadata":{"resourceVersion":"42","continue":"next"},'
        b'"items":[{"metadata":{"name":"a","namespace":"ns"}},'
        b'{"metadata":{"name":"b","namespace":"ns"},"spec":{"type":"LoadBalancer"}}]}'
    )
    page = await typed(recorder).list(
        SERVICES,
        namespace="ns",
        label_selector="app=web,tier!=db",
        field_selector="spec.type=LoadBalancer",
        limit=2,
        continue_="tok",
        params={"timeoutSeconds": 5},
    )
    assert [s.metadata.name for s in page.items] == ["a", "b"]
    assert all(isinstance(s, Service) for s in page.items)
    assert page.items[1].spec.type == "LoadBalancer"
    assert (page.metadata.resource_version, page.metadata.continue_) == ("42", "next")
    assert recorder.sent == [
        Sent(
            "GET",
            "/api/v1/namespaces/ns/services",
            {
                "timeoutSeconds": 5,
                "labelSelector": "app=web,tier!=db",
                "fieldSelector": "spec.type=LoadBalancer",
                "limit": 2,
                "continue": "tok",
            },
            None,
            None,
        )
    ]


async def test_list_without_anything_sends_no_params_and_spans_all_namespaces() -> None:
    recorder = Recorder(b'{"items":[]}')
    page = await typed(recorder).list(SERVICES)
    assert page.items == ()
    assert recorder.sent[0].path == "/api/v1/services"
    assert recorder.sent[0].params is None


@pytest.mark.parametrize(
    ("patch_type", "content_type"),
    [
        ("strategic", "application/strategic-merge-patch+json"),
        ("merge", "application/merge-patch+json"),
        ("json", "application/json-patch+json"),
    ],
)
async def test_patch_sends_the_patch_type(patch_type: Any, content_type: str) -> None:
    recorder = Recorder(NODE_JSON)
    await typed(recorder).patch(NODES, "n1", {"x": 1}, patch_type=patch_type)
    assert recorder.sent[0].content_type == content_type


async def test_patch_bodies_mix_structs_and_json_values_with_api_names() -> None:
    recorder = Recorder(b'{"metadata":{"name":"web","namespace":"ns"}}')
    taints = (Taint(key="k", effect="NoSchedule"), Taint(key="t", value="v", effect="NoExecute"))
    service = await typed(recorder).patch(
        SERVICES,
        "web",
        {"metadata": {"resourceVersion": "3"}, "spec": {"taints": taints}},
        namespace="ns",
        subresource="status",
    )
    assert service.metadata.name == "web"
    assert recorder.sent == [
        Sent(
            "PATCH",
            "/api/v1/namespaces/ns/services/web/status",
            None,
            {
                "metadata": {"resourceVersion": "3"},
                "spec": {
                    "taints": [
                        {"key": "k", "effect": "NoSchedule"},
                        {"key": "t", "value": "v", "effect": "NoExecute"},
                    ]
                },
            },
            "application/strategic-merge-patch+json",
        )
    ]


async def test_apply_patches_need_a_field_manager() -> None:
    recorder = Recorder(NODE_JSON)
    with pytest.raises(ValueError, match="field manager"):
        await typed(recorder).patch(NODES, "n1", {}, patch_type="apply")
    with pytest.raises(ValueError, match="server-side apply"):
        await typed(recorder).patch(NODES, "n1", {}, force=True)
    await typed(recorder).patch(NODES, "n1", {}, patch_type="apply", field_manager="m", force=True)
    assert recorder.sent[-1].params == {"fieldManager": "m", "force": "true"}
    assert recorder.sent[-1].content_type == "application/apply-patch+yaml"


async def test_create_replace_and_delete() -> None:
    lease_json = (
        b'{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"l",'
        b'"namespace":"ns","resourceVersion":"1","labels":{"a":"b"},'
        b'"ownerReferences":[{"kind":"Pod","name":"p","uid":"u","apiVersion":"v1"}]},'
        b'"spec":{"holderIdentity":"me","leaseDurationSeconds":15,"leaseTransitions":0,'
        b'"strategy":"OldestEmulationVersion"}}'
    )
    recorder = Recorder(lease_json)
    api = typed(recorder)
    created = await api.create(
        LEASES, Lease.new("l", "ns", LeaseSpec(holder_identity="me")), namespace="ns"
    )
    assert recorder.sent[0].body == {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "l", "namespace": "ns"},
        "spec": {"holderIdentity": "me"},
    }
    assert recorder.sent[0].path == "/apis/coordination.k8s.io/v1/namespaces/ns/leases"
    await api.replace(LEASES, "l", created, namespace="ns")
    put = recorder.sent[1]
    assert (put.method, put.path) == ("PUT", "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l")
    assert put.body == msgspec.json.decode(lease_json), "a read Lease goes back whole"
    await api.delete(NODES, "n1")
    await api.delete(NODES, "n2", body={"preconditions": {"uid": "u"}})
    assert [(s.method, s.path, s.body) for s in recorder.sent[2:]] == [
        ("DELETE", "/api/v1/nodes/n1", None),
        ("DELETE", "/api/v1/nodes/n2", {"preconditions": {"uid": "u"}}),
    ]


# -- decoding errors ---------------------------------------------------------------


@pytest.mark.parametrize(
    "answer",
    [
        b"not json",
        b'{"metadata":{"name":7}}',
        b'{"spec":{"taints":"none"}}',
        b"[]",
    ],
)
async def test_an_answer_that_does_not_fit_names_the_request(answer: bytes) -> None:
    with pytest.raises(ResponseDecodeError, match=r"GET /api/v1/nodes/n1: .* valid Node"):
        await typed(Recorder(answer)).get(NODES, "n1")


async def test_a_list_answer_that_does_not_fit_is_a_decode_error() -> None:
    with pytest.raises(ResponseDecodeError, match="GET /api/v1/nodes: "):
        await typed(Recorder(b'{"items":{}}')).list(NODES)


# -- against the in-memory API server ------------------------------------------------


async def test_round_trip_on_the_fake_api_server() -> None:
    fake = FakeApiServer()
    fake.put_object(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "n1", "labels": {"a": "1"}},
            "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
        }
    )
    api = TypedClient(fake.client())
    node = await api.get(NODES, "n1")
    patched = await api.patch(
        NODES,
        "n1",
        {
            "metadata": {"resourceVersion": node.metadata.resource_version},
            "spec": {"taints": []},
        },
    )
    assert patched.spec.taints == ()
    assert patched.metadata.labels == {"a": "1"}
    page = await api.list(NODES, label_selector="a=1")
    assert [n.metadata.name for n in page.items] == ["n1"]
    assert (await api.list(NODES, label_selector="a=2")).items == ()
    with pytest.raises(ApiError) as stale:
        await api.patch(
            NODES, "n1", {"metadata": {"resourceVersion": node.metadata.resource_version}}
        )
    assert stale.value.conflict
    await api.delete(NODES, "n1")
    with pytest.raises(ApiError) as missing:
        await api.get(NODES, "n1")
    assert missing.value.not_found
