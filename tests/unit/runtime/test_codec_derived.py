"""The derived protobuf conversion gives what msgspec decodes from the same object's
JSON: for every kind, on bytes a real kube-apiserver answered (recorded by
``tools/record_codec_fixtures.py``: one object with every kept field, others with as
few as the API allows), and on empty messages, where only Go's defaults speak."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from google.protobuf import descriptor_pool

from kube_ccm.api.objects import (
    CertificateSigningRequest,
    Lease,
    Model,
    Node,
    ObjectList,
    PersistentVolume,
    Service,
)
from kube_ccm.runtime import codec
from kube_ccm.runtime.k8spb import certificates_v1_pb2, coordination_v1_pb2, core_v1_pb2

FIXTURES = json.loads((Path(__file__).parent / "codec_fixtures.json").read_text())
TYPES: dict[str, type[Any]] = {
    "Node": Node,
    "Service": Service,
    "PersistentVolume": PersistentVolume,
    "CertificateSigningRequest": CertificateSigningRequest,
    "Lease": Lease,
}


def kind_of(name: str) -> codec.Kind[Any]:
    kind = codec.protobuf_kind(TYPES[name])
    assert kind is not None
    return kind


@pytest.mark.parametrize("name", TYPES)
def test_a_recorded_list_decodes_as_its_json_does(name: str) -> None:
    recorded = FIXTURES[name]["list"]
    items, version, continue_ = kind_of(name).decode_list(base64.b64decode(recorded["protobuf"]))
    list_type: Any = ObjectList[TYPES[name]]  # type: ignore[valid-type]
    from_json = msgspec.json.decode(json.dumps(recorded["json"]), type=list_type)
    assert len(items) >= 2  # the fat object and a sparse one, at least
    assert items == list(from_json.items)
    assert (version, continue_) == (from_json.metadata.resource_version, "")


@pytest.mark.parametrize("name", TYPES)
def test_a_recorded_object_decodes_as_its_json_does(name: str) -> None:
    recorded = FIXTURES[name]["object"]
    decoded, version = kind_of(name).decode_object(base64.b64decode(recorded["protobuf"]))
    from_json = msgspec.json.decode(json.dumps(recorded["json"]), type=TYPES[name])
    assert decoded == from_json
    assert version == recorded["json"]["metadata"]["resourceVersion"]


def test_the_recorded_objects_hold_what_they_are_meant_to_prove() -> None:
    """The fixtures are not vacuous: the fat objects carry the fields whose conversion
    is not a plain read, and the sparse ones leave them to Go's defaults."""
    nodes = {
        n.metadata.name: n
        for n in kind_of("Node").decode_list(
            base64.b64decode(FIXTURES["Node"]["list"]["protobuf"])
        )[0]
    }
    assert nodes["fat"].spec.taints[1].time_added is not None
    endpoints = nodes["fat"].status.daemon_endpoints
    assert endpoints is not None
    assert endpoints.kubelet_endpoint is not None
    assert endpoints.kubelet_endpoint.port == 10250
    assert nodes["sparse"].status.conditions == ()
    services = {
        s.metadata.name: s
        for s in kind_of("Service").decode_list(
            base64.b64decode(FIXTURES["Service"]["list"]["protobuf"])
        )[0]
    }
    fat = services["fat"].spec
    assert (fat.ports[0].target_port, fat.ports[1].target_port) == ("web", 5353)
    assert fat.session_affinity_config is not None
    assert fat.allocate_load_balancer_node_ports is False
    assert services["external"].spec.ports == ()
    assert services["fat"].status.load_balancer.ingress[0].ip_mode == "Proxy"
    volumes = {
        v.metadata.name: v
        for v in kind_of("PersistentVolume").decode_list(
            base64.b64decode(FIXTURES["PersistentVolume"]["list"]["protobuf"])
        )[0]
    }
    assert volumes["fat"].spec.capacity == {"storage": "10Gi"}
    assert volumes["fat"].spec.node_affinity is not None
    assert volumes["gce"].spec.volume_source == (
        "gcePersistentDisk",
        {"pdName": "disk-1", "fsType": "ext4", "partition": 1},
    )
    assert volumes["sparse"].spec.node_affinity is None
    leases = {
        x.metadata.name: x
        for x in kind_of("Lease").decode_list(
            base64.b64decode(FIXTURES["Lease"]["list"]["protobuf"])
        )[0]
    }
    assert leases["fat"].spec.acquire_time == "2026-11-26T20:05:07.123456Z"
    assert leases["fat"].metadata.owner_references is not None
    assert leases["sparse"].spec.holder_identity is None
    assert leases["sparse"].metadata.labels is None
    lease, _ = kind_of("Lease").decode_object(
        base64.b64decode(FIXTURES["Lease"]["object"]["protobuf"])
    )
    assert (lease.api_version, lease.kind) == ("coordination.k8s.io/v1", "Lease")
    csrs = {
        c.metadata.name: c
        for c in kind_of("CertificateSigningRequest").decode_list(
            base64.b64decode(FIXTURES["CertificateSigningRequest"]["list"]["protobuf"])
        )[0]
    }
    assert csrs["fat"].spec.expiration_seconds == 3600
    assert csrs["fat"].status.conditions[0].type == "Approved"
    assert csrs["sparse"].spec.expiration_seconds is None
    assert csrs["fat"].spec.request.startswith(b"-----BEGIN CERTIFICATE REQUEST-----")


# What Go's encoding/json writes for each kind's zero object (fields kube-ccm does not
# keep left out): a value struct is written with its zeros, a zero metav1.Time as null,
# everything with omitempty or behind a pointer not at all.
GO_ZERO_JSON: dict[str, tuple[Any, dict[str, Any]]] = {
    "Node": (
        core_v1_pb2.Node(),
        {
            "metadata": {"creationTimestamp": None},
            "spec": {},
            "status": {
                "nodeInfo": {"machineID": "", "systemUUID": ""},
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
            },
        },
    ),
    "Service": (
        core_v1_pb2.Service(),
        {"metadata": {"creationTimestamp": None}, "spec": {}, "status": {"loadBalancer": {}}},
    ),
    "PersistentVolume": (
        core_v1_pb2.PersistentVolume(),
        {"metadata": {"creationTimestamp": None}, "spec": {}, "status": {}},
    ),
    "CertificateSigningRequest": (
        certificates_v1_pb2.CertificateSigningRequest(),
        # ``request`` has no omitempty: Go writes a nil slice as null, which a struct
        # field of bytes cannot hold; the API never serves a CSR without one.
        {"metadata": {"creationTimestamp": None}, "spec": {"signerName": ""}, "status": {}},
    ),
    "Lease": (
        coordination_v1_pb2.Lease(),
        {"metadata": {"creationTimestamp": None}, "spec": {}},
    ),
}


@pytest.mark.parametrize("name", TYPES)
def test_an_empty_message_decodes_as_gos_json_of_the_zero_object(name: str) -> None:
    message, go_json = GO_ZERO_JSON[name]
    expected = msgspec.json.decode(json.dumps(go_json), type=TYPES[name])
    assert kind_of(name).convert(message) == expected


def test_the_tables_name_fields_that_exist() -> None:
    """A renamed or removed field in a table would silently stop applying."""
    pool = descriptor_pool.Default()
    for full_name in codec._GO_VALUES:
        message, _, field = full_name.rpartition(".")
        assert field in pool.FindMessageTypeByName(message).fields_by_name, full_name
    for message, field in codec._INLINE.items():
        assert field in pool.FindMessageTypeByName(message).fields_by_name
    for message in codec._SCALAR_MESSAGES:
        pool.FindMessageTypeByName(message)


def test_a_struct_field_without_a_message_field_fails_when_derived() -> None:
    class Renamed(Model, frozen=True, kw_only=True):
        provider: str = ""  # NodeSpec's is providerID

    with pytest.raises(
        TypeError,
        match=r"Renamed\.provider: k8s\.io\.api\.core\.v1\.NodeSpec has no field provider",
    ):
        codec.derive(Renamed, core_v1_pb2.NodeSpec)


def test_each_kind_is_derived_once() -> None:
    assert codec.protobuf_kind(Node) is codec.protobuf_kind(Node)
    assert "def convert_Node(m):" in (kind_of("Node").convert.__doc__ or "")
