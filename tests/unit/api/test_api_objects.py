"""Decoding realistic kube-apiserver payloads into the compact API structs."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest

from kube_ccm.api.objects import (
    LoadBalancerIngress,
    LoadBalancerStatus,
    Node,
    NodeAddress,
    PersistentVolume,
    PortStatus,
    Service,
    Taint,
    decode,
    decode_node,
    decode_persistent_volume,
    decode_service,
    encode,
    to_dict,
)

DATA = Path(__file__).parent / "data"


def _payload(name: str) -> bytes:
    return (DATA / name).read_bytes()


@pytest.fixture
def node() -> Node:
    return decode_node(_payload("node.json"))


@pytest.fixture
def service() -> Service:
    return decode_service(_payload("service.json"))


@pytest.fixture
def pv() -> PersistentVolume:
    return decode_persistent_volume(_payload("persistentvolume.json"))


# -- Node ---------------------------------------------------------------------


def test_node_metadata_decodes_identity_labels_and_annotations(node: Node) -> None:
    assert node.metadata.name == "worker-1"
    assert node.metadata.uid == "5c1f3a02-7d4e-4b8a-9f31-2a6c0e8d9b17"
    assert node.metadata.resource_version == "184467"
    assert node.metadata.creation_timestamp == "2026-11-20T09:14:03Z"
    assert node.metadata.deletion_timestamp is None
    assert node.metadata.namespace == ""
    assert node.metadata.labels["topology.kubernetes.io/zone"] == "eu-west-1a"
    assert node.metadata.annotations["alpha.kubernetes.io/provided-node-ip"] == "10.0.1.17"


def test_node_spec_fields_with_irregular_json_names_decode(node: Node) -> None:
    assert node.spec.provider_id == "aws:///eu-west-1a/i-0abc123def4567890"
    assert node.spec.pod_cidr == "10.244.1.0/24"
    assert node.spec.pod_cidrs == ("10.244.1.0/24", "fd00:10:244:1::/64")
    assert node.spec.unschedulable is True


def test_node_taints_decode_with_optional_value_and_time_added(node: Node) -> None:
    assert node.spec.taints == (
        Taint(
            key="node.cloudprovider.kubernetes.io/uninitialized", value="true", effect="NoSchedule"
        ),
        Taint(
            key="node.kubernetes.io/not-ready",
            effect="NoExecute",
            time_added="2026-11-20T09:14:05Z",
        ),
    )


def test_node_status_keeps_addresses_in_order_and_all_condition_fields(node: Node) -> None:
    assert node.status.addresses == (
        NodeAddress(type="InternalIP", address="10.0.1.17"),
        NodeAddress(type="InternalIP", address="fd00:10::17"),
        NodeAddress(type="Hostname", address="worker-1"),
    )
    ready = node.status.conditions[-1]
    assert (ready.type, ready.status, ready.reason) == ("Ready", "True", "KubeletReady")
    assert ready.message == "kubelet is posting ready status"
    assert ready.last_heartbeat_time == "2026-11-20T10:02:41Z"
    assert ready.last_transition_time == "2026-11-20T09:14:25Z"


def test_node_ignores_fields_it_does_not_keep() -> None:
    fields = {f.name for f in msgspec.structs.fields(Node)}
    assert fields == {"metadata", "spec", "status"}
    assert not hasattr(decode_node(_payload("node.json")).status, "images")


def test_minimal_node_decodes_with_empty_defaults() -> None:
    node = decode_node(b'{"metadata": {"name": "bare"}}')
    assert node.metadata.labels == {}
    assert node.spec.provider_id == ""
    assert node.spec.taints == ()
    assert node.status.conditions == ()


def test_node_with_wrong_field_type_is_rejected() -> None:
    with pytest.raises(msgspec.ValidationError, match=re.escape("$.spec.taints")):
        decode_node(b'{"spec": {"taints": "none"}}')


# -- Service ------------------------------------------------------------------


def test_service_spec_fields_with_irregular_json_names_decode(service: Service) -> None:
    spec = service.spec
    assert spec.load_balancer_ip == "203.0.113.10"
    assert spec.external_ips == ("198.51.100.7",)
    assert spec.cluster_ip == "10.96.12.34"
    assert spec.cluster_ips == ("10.96.12.34", "fd00:10:96::1234")
    assert spec.ip_families == ("IPv4", "IPv6")
    assert spec.ip_family_policy == "PreferDualStack"
    assert spec.health_check_node_port == 32456
    assert spec.session_affinity_config is not None
    assert spec.session_affinity_config.client_ip is not None
    assert spec.session_affinity_config.client_ip.timeout_seconds == 10800


def test_service_spec_plain_fields_decode(service: Service) -> None:
    spec = service.spec
    assert spec.type == "LoadBalancer"
    assert spec.load_balancer_class == "example.com/lb"
    assert spec.session_affinity == "ClientIP"
    assert spec.external_traffic_policy == "Local"
    assert spec.load_balancer_source_ranges == ("192.168.0.0/16", "2001:db8::/32")
    assert spec.allocate_load_balancer_node_ports is True


def test_service_ports_keep_numeric_and_named_target_ports(service: Service) -> None:
    http, metrics = service.spec.ports
    assert (http.name, http.protocol, http.port, http.node_port) == ("http", "TCP", 80, 31380)
    assert http.target_port == 8080
    assert http.app_protocol == "http"
    assert metrics.target_port == "metrics"
    assert metrics.app_protocol is None


def test_service_metadata_keeps_namespace_finalizers_generation_and_deletion(
    service: Service,
) -> None:
    meta = service.metadata
    assert (meta.namespace, meta.name) == ("shop", "web")
    assert meta.generation == 3
    assert meta.finalizers == ("service.kubernetes.io/load-balancer-cleanup",)
    assert meta.deletion_timestamp == "2026-11-21T08:30:00Z"


def test_service_status_ingress_decodes_ip_mode_and_port_errors(service: Service) -> None:
    assert service.status.load_balancer == LoadBalancerStatus(
        ingress=(
            LoadBalancerIngress(
                ip="203.0.113.10",
                ip_mode="VIP",
                ports=(
                    PortStatus(port=80, protocol="TCP"),
                    PortStatus(port=9090, protocol="TCP", error="PortUnavailable"),
                ),
            ),
            LoadBalancerIngress(hostname="web.lb.example.com", ip_mode="Proxy"),
        )
    )


def test_service_without_type_defaults_to_cluster_ip() -> None:
    service = decode_service(b'{"metadata": {"name": "s", "namespace": "d"}, "spec": {}}')
    assert service.spec.type == "ClusterIP"
    assert service.spec.load_balancer_class is None
    assert service.status.load_balancer.ingress == ()


# -- PersistentVolume ---------------------------------------------------------


def test_persistent_volume_typed_subset_decodes(pv: PersistentVolume) -> None:
    spec = pv.spec
    assert spec.capacity == {"storage": "20Gi"}
    assert spec.storage_class_name == "gp3"
    assert spec.access_modes == ("ReadWriteOnce",)
    assert spec.volume_mode == "Filesystem"
    assert spec.node_affinity is not None
    assert spec.node_affinity.required is not None
    (term,) = spec.node_affinity.required.node_selector_terms
    (requirement,) = term.match_expressions
    assert requirement.key == "topology.kubernetes.io/zone"
    assert requirement.operator == "In"
    assert requirement.values == ("eu-west-1a", "eu-west-1b")


def test_persistent_volume_exposes_its_raw_volume_source(pv: PersistentVolume) -> None:
    assert pv.spec.csi is not None
    assert pv.spec.csi["driver"] == "ebs.csi.aws.com"
    assert pv.spec.volume_source == (
        "csi",
        {
            "driver": "ebs.csi.aws.com",
            "volumeHandle": "vol-0123456789abcdef0",
            "fsType": "ext4",
            "volumeAttributes": {
                "storage.kubernetes.io/csiProvisionerIdentity": "1732100000000-8081-ebs.csi.aws.com"
            },
        },
    )


@pytest.mark.parametrize(
    ("json_name", "attribute"),
    [
        ("awsElasticBlockStore", "aws_elastic_block_store"),
        ("gcePersistentDisk", "gce_persistent_disk"),
        ("scaleIO", "scale_io"),
        ("vsphereVolume", "vsphere_volume"),
        ("hostPath", "host_path"),
    ],
)
def test_persistent_volume_in_tree_sources_decode_under_their_api_names(
    json_name: str, attribute: str
) -> None:
    body = json.dumps({"spec": {json_name: {"volumeID": "v-1"}}})
    pv = decode_persistent_volume(body)
    assert getattr(pv.spec, attribute) == {"volumeID": "v-1"}
    assert pv.spec.volume_source == (json_name, {"volumeID": "v-1"})


def test_persistent_volume_without_source_reports_none() -> None:
    assert decode_persistent_volume(b'{"spec": {}}').spec.volume_source is None


# -- immutability and encoding ------------------------------------------------


def test_structs_are_frozen(node: Node) -> None:
    with pytest.raises(AttributeError):
        node.metadata.name = "other"  # type: ignore[misc]


def test_changed_copy_leaves_the_original_untouched(node: Node) -> None:
    changed = msgspec.structs.replace(node.spec, provider_id="sim://1")
    assert changed.provider_id == "sim://1"
    assert node.spec.provider_id == "aws:///eu-west-1a/i-0abc123def4567890"


def test_to_dict_gives_api_names_lists_and_omits_defaults() -> None:
    taints = (
        Taint(key="a", effect="NoSchedule"),
        Taint(key="b", value="v", effect="NoExecute", time_added="2026-11-20T09:14:05Z"),
    )
    assert to_dict(taints) == [
        {"key": "a", "effect": "NoSchedule"},
        {"key": "b", "value": "v", "effect": "NoExecute", "timeAdded": "2026-11-20T09:14:05Z"},
    ]
    status = LoadBalancerStatus(ingress=(LoadBalancerIngress(ip="1.2.3.4", ip_mode="VIP"),))
    assert to_dict(status) == {"ingress": [{"ip": "1.2.3.4", "ipMode": "VIP"}]}


def test_encoding_round_trips_every_kept_field(service: Service, node: Node) -> None:
    assert decode_service(encode(service)) == service
    assert decode_node(encode(node)) == node
    spec: dict[str, Any] = to_dict(node.spec)
    assert set(spec) == {"providerID", "podCIDR", "podCIDRs", "taints", "unschedulable"}


def test_generic_decode_accepts_any_struct_type() -> None:
    address = decode(NodeAddress, '{"type": "Hostname", "address": "n1", "extra": 1}')
    assert address == NodeAddress(type="Hostname", address="n1")
