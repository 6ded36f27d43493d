"""Protobuf and JSON from a real kube-apiserver decode into the same structs.

For each kind the informers watch (Nodes, Services, PersistentVolumes,
CertificateSigningRequests), objects with every field kube-ccm keeps are created, then
listed in both encodings and compared; then an informer over a protobuf client and one
over a JSON client follow the same changes (watch events, bookmarks) and must hold the
same cache.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from kube_ccm.api.objects import CertificateSigningRequest, Lease, Node, PersistentVolume, Service
from kube_ccm.runtime import codec
from kube_ccm.runtime.client import ClientOptions, KubeClient
from kube_ccm.runtime.informer import Backoff, Informer
from kube_ccm.runtime.resources import (
    CERTIFICATE_SIGNING_REQUESTS,
    LEASES,
    NODES,
    PERSISTENT_VOLUMES,
    SERVICES,
    Resource,
)
from kube_ccm.runtime.typedclient import TypedClient
from kube_ccm.testing.controlplane import ControlPlane
from kube_ccm.testing.pytest_plugin import Cleanup
from kube_ccm.testing.waiting import eventually

NOW = "2026-11-26T20:00:00Z"
LATER = "2026-11-26T20:05:07Z"


def fat_node(name: str, label: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": {**label, "topology.kubernetes.io/zone": "z1"},
            "annotations": {"a": "1", "node.alpha.kubernetes.io/ttl": "0"},
            "finalizers": ["example.com/keep"],
        },
        "spec": {
            "providerID": "sim://i-1",
            "podCIDR": "10.244.1.0/24",
            "podCIDRs": ["10.244.1.0/24", "fd00::/64"],
            "taints": [
                {"key": "a", "value": "b", "effect": "NoSchedule"},
                {"key": "c", "effect": "NoExecute", "timeAdded": NOW},
            ],
            "unschedulable": True,
        },
    }


def fat_node_status() -> dict[str, Any]:
    return {
        "status": {
            "addresses": [
                {"type": "InternalIP", "address": "10.0.0.5"},
                {"type": "Hostname", "address": "h"},
            ],
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "ok",
                    "lastHeartbeatTime": LATER,
                    "lastTransitionTime": NOW,
                },
                {"type": "MemoryPressure", "status": "False", "lastHeartbeatTime": NOW},
            ],
            "nodeInfo": {
                "systemUUID": "uuid-1",
                "machineID": "m-1",
                "bootID": "b",
                "kernelVersion": "6.1",
                "osImage": "Debian",
                "containerRuntimeVersion": "containerd://1.7",
                "kubeletVersion": "v1.36.3",
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
            "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
            "allocatable": {"cpu": "3800m", "memory": "15Gi", "pods": "110"},
            "images": [{"names": ["registry.k8s.io/pause:3.10"], "sizeBytes": 320000}],
        }
    }


def services(label: dict[str, str], prefix: str) -> list[dict[str, Any]]:
    return [
        {
            "metadata": {"name": f"{prefix}-lb", "labels": label, "annotations": {"x": "y"}},
            "spec": {
                "type": "LoadBalancer",
                "loadBalancerClass": "example.com/lb",
                "ports": [
                    {"name": "http", "port": 80, "targetPort": "web", "appProtocol": "http"},
                    {"name": "dns", "protocol": "UDP", "port": 53, "targetPort": 5353},
                ],
                "sessionAffinity": "ClientIP",
                "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 600}},
                "externalIPs": ["192.0.2.9"],
                "externalTrafficPolicy": "Local",
                "loadBalancerSourceRanges": ["192.0.2.0/24"],
                "allocateLoadBalancerNodePorts": False,
                "selector": {"app": "web"},
            },
        },
        {
            "metadata": {"name": f"{prefix}-plain", "labels": label},
            "spec": {"ports": [{"port": 443}], "clusterIP": "None"},
        },
        {
            "metadata": {"name": f"{prefix}-external", "labels": label},
            "spec": {"type": "ExternalName", "externalName": "example.com"},
        },
    ]


def volumes(label: dict[str, str], prefix: str) -> Iterator[dict[str, Any]]:
    sources: dict[str, dict[str, Any]] = {
        "csi": {
            "driver": "ebs.csi.aws.com",
            "volumeHandle": "vol-1",
            "fsType": "ext4",
            "readOnly": True,
            "volumeAttributes": {"a": "b"},
        },
        "hostPath": {"path": "/data", "type": "DirectoryOrCreate"},
        "nfs": {"server": "nfs.example.com", "path": "/export"},
        "gcePersistentDisk": {"pdName": "disk-1", "fsType": "ext4", "partition": 1},
        "awsElasticBlockStore": {"volumeID": "aws://z1/vol-2"},
        "local": {"path": "/mnt/disk"},
    }
    for index, (kind, source) in enumerate(sources.items()):
        spec: dict[str, Any] = {
            "capacity": {"storage": "10Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "fast" if index % 2 else "",
            kind: source,
        }
        if kind in ("local", "csi"):
            spec["volumeMode"] = "Block"
            spec["nodeAffinity"] = {
                "required": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "zone", "operator": "In", "values": ["z1", "z2"]}
                            ]
                        },
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": ["n"]}
                            ]
                        },
                    ]
                }
            }
        yield {"metadata": {"name": f"{prefix}-{index}", "labels": label}, "spec": spec}


def csr_pem() -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, "system:node:n"),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
        ]
    )
    request = (
        x509.CertificateSigningRequestBuilder().subject_name(subject).sign(key, hashes.SHA256())
    )
    return base64.b64encode(request.public_bytes(serialization.Encoding.PEM)).decode()


async def populate(
    client: KubeClient, cleanup: Cleanup, unique_name: Callable[[str], str]
) -> dict[str, str]:
    """Every kind's objects, labelled with the selector returned."""
    label = {"codec-test": unique_name("run")[-40:].strip("-")}
    nodes = [unique_name("fat"), unique_name("lean")]
    for name in nodes:
        cleanup.add(f"/api/v1/nodes/{name}")
    await client.create("/api/v1/nodes", fat_node(nodes[0], label))
    await client.patch(f"/api/v1/nodes/{nodes[0]}/status", fat_node_status())
    await client.create("/api/v1/nodes", {"metadata": {"name": nodes[1], "labels": label}})
    prefix = unique_name("svc")
    for body in services(label, prefix):
        name = body["metadata"]["name"]
        cleanup.add(f"/api/v1/namespaces/default/services/{name}")
        await client.create("/api/v1/namespaces/default/services", body)
    await client.patch(
        f"/api/v1/namespaces/default/services/{prefix}-lb/status",
        {
            "status": {
                "loadBalancer": {
                    "ingress": [
                        {
                            "ip": "203.0.113.7",
                            "ipMode": "Proxy",
                            "ports": [{"port": 80, "protocol": "TCP", "error": "Pending"}],
                        },
                        {"hostname": "lb.example.com"},
                    ]
                }
            }
        },
        patch_type="merge",
    )
    for body in volumes(label, unique_name("pv")):
        cleanup.add(f"/api/v1/persistentvolumes/{body['metadata']['name']}")
        await client.create("/api/v1/persistentvolumes", body)
    path = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
    for approved in (True, False):
        csr = unique_name("csr")
        cleanup.add(f"{path}/{csr}")
        spec: dict[str, Any] = {
            "request": csr_pem(),
            "signerName": "example.com/signer",
            "usages": ["digital signature", "server auth"],
        }
        if approved:
            spec["expirationSeconds"] = 3600
        await client.create(path, {"metadata": {"name": csr, "labels": label}, "spec": spec})
        if not approved:
            continue
        current = await client.get(f"{path}/{csr}")
        current["status"] = {
            "conditions": [
                {"type": "Approved", "status": "True", "reason": "Test", "message": "approved"}
            ]
        }
        await client.replace(f"{path}/{csr}/approval", current)
    return label


KINDS: list[Resource[Any]] = [NODES, SERVICES, PERSISTENT_VOLUMES, CERTIFICATE_SIGNING_REQUESTS]


async def release_finalizers(client: KubeClient, selector: str) -> None:
    listed = await client.get("/api/v1/nodes", params={"labelSelector": selector})
    for item in listed["items"]:
        await client.patch(
            f"/api/v1/nodes/{item['metadata']['name']}",
            {"metadata": {"finalizers": None}},
            patch_type="merge",
        )


@pytest.mark.parametrize("resource", KINDS, ids=lambda r: r.plural)
async def test_a_list_decodes_to_the_same_structs_from_protobuf_and_json(
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
    resource: Resource[Any],
) -> None:
    label = await populate(kube_client, kube_cleanup, unique_name)
    selector = ",".join(f"{k}={v}" for k, v in label.items())
    try:
        params = {"labelSelector": selector}
        from_json = (await TypedClient(kube_client).list(resource, label_selector=selector)).items
        body = await kube_client.request(
            "GET", resource.path(), params=params, accept=codec.PROTOBUF_ACCEPT
        )
        assert codec.is_protobuf(body)
        kind = codec.protobuf_kind(resource.type)
        assert kind is not None
        from_protobuf, version, _ = kind.decode_list(body)
        assert version
        assert len(from_json) >= 2
        assert list(from_json) == from_protobuf
    finally:
        await release_finalizers(kube_client, selector)


async def test_informers_over_protobuf_and_json_hold_the_same_objects(
    kube_controlplane: ControlPlane,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    label = await populate(kube_client, kube_cleanup, unique_name)
    selector = ",".join(f"{k}={v}" for k, v in label.items())
    decoded: list[str] = []
    for type_ in (Node, Service, PersistentVolume, CertificateSigningRequest):
        kind = codec.protobuf_kind(type_)
        assert kind is not None

        def counted(message: Any, convert: Any = kind.convert, name: str = kind.kind) -> Any:
            decoded.append(name)
            return convert(message)

        monkeypatch.setattr(kind, "convert", counted)
    proto_client = KubeClient.from_kubeconfig(
        kube_controlplane.kubeconfig, options=ClientOptions(content_type=codec.PROTOBUF)
    )
    fast = Backoff(initial=0.1, maximum=0.5)
    pairs = [
        (
            Informer(proto_client, r, label_selector=selector, backoff=fast),
            Informer(kube_client, r, label_selector=selector, backoff=fast),
        )
        for r in KINDS
    ]
    tasks = [asyncio.create_task(i.run()) for pair in pairs for i in pair]
    try:
        async with asyncio.timeout(30):
            for pair in pairs:
                for informer in pair:
                    await informer.wait_synced()
        listed = len(decoded)
        assert {"Node", "Service", "PersistentVolume", "CertificateSigningRequest"} <= set(decoded)
        # Changes arrive as watch events, in both encodings.
        nodes = await kube_client.get("/api/v1/nodes", params={"labelSelector": selector})
        for item in nodes["items"]:
            await kube_client.patch(
                f"/api/v1/nodes/{item['metadata']['name']}",
                {"metadata": {"labels": {"changed": "yes"}}, "spec": {"unschedulable": False}},
            )
        await kube_client.patch(
            "/api/v1/namespaces/default/services/"
            + next(
                s["metadata"]["name"]
                for s in (
                    await kube_client.get(
                        "/api/v1/namespaces/default/services", params={"labelSelector": selector}
                    )
                )["items"]
                if s["spec"]["type"] == "LoadBalancer"
            )
            + "/status",
            {"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.8"}]}}},
            patch_type="merge",
        )

        def same() -> bool:
            return all(
                sorted(p.list(), key=repr) == sorted(j.list(), key=repr) for p, j in pairs
            ) and all(n.metadata.labels.get("changed") == "yes" for n in pairs[0][0].list())

        await eventually(same)
        assert len(decoded) > listed  # the events, too, came as protobuf
        assert all(len(p) == len(j) and len(p) >= 2 for p, j in pairs)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await proto_client.aclose()
        await release_finalizers(kube_client, selector)


async def test_leases_decode_to_the_same_structs_from_protobuf_and_json(
    kube_controlplane: ControlPlane,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
) -> None:
    """Leases (every field kept, so a read Lease can be PUT back): a list, one object
    (which carries its apiVersion and kind, in protobuf in the envelope) and the
    watch events of an informer, in both encodings."""
    label = {"codec-test": unique_name("lease")[-40:].strip("-")}
    selector = ",".join(f"{k}={v}" for k, v in label.items())
    names = [unique_name("fat"), unique_name("sparse")]
    path = LEASES.path(namespace="default")
    for name in names:
        kube_cleanup.add(LEASES.path(name, namespace="default"))
    await kube_client.create(
        path,
        {
            "metadata": {
                "name": names[0],
                "labels": label,
                "annotations": {"a": "b"},
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Node",
                        "name": "n",
                        "uid": "8f0c0c53-6f7a-4b8e-9e0a-2f8e1b7d3a11",
                        "controller": True,
                    }
                ],
            },
            "spec": {
                "holderIdentity": "ccm-1",
                "leaseDurationSeconds": 15,
                "acquireTime": "2026-11-26T20:05:07.123456Z",
                "renewTime": "2026-11-26T20:05:08.000000Z",
                "leaseTransitions": 2,
            },
        },
    )
    await kube_client.create(path, {"metadata": {"name": names[1], "labels": label}})
    kind = codec.protobuf_kind(Lease)
    assert kind is not None
    api = TypedClient(kube_client)
    from_json = (await api.list(LEASES, namespace="default", label_selector=selector)).items
    body = await kube_client.request(
        "GET", path, params={"labelSelector": selector}, accept=codec.PROTOBUF_ACCEPT
    )
    from_protobuf, _, _ = kind.decode_list(body)
    assert len(from_json) == 2
    assert list(from_json) == from_protobuf
    one = await kube_client.request(
        "GET", LEASES.path(names[0], namespace="default"), accept=codec.PROTOBUF_ACCEPT
    )
    decoded, _ = kind.decode_object(one)
    assert decoded == await api.get(LEASES, names[0], namespace="default")
    assert (decoded.api_version, decoded.kind) == ("coordination.k8s.io/v1", "Lease")

    proto_client = KubeClient.from_kubeconfig(
        kube_controlplane.kubeconfig, options=ClientOptions(content_type=codec.PROTOBUF)
    )
    fast = Backoff(initial=0.1, maximum=0.5)
    pair = [
        Informer(client, LEASES, label_selector=selector, backoff=fast)
        for client in (proto_client, kube_client)
    ]
    tasks = [asyncio.create_task(i.run()) for i in pair]
    try:
        async with asyncio.timeout(30):
            for informer in pair:
                await informer.wait_synced()
        await kube_client.patch(
            LEASES.path(names[1], namespace="default"),
            {"spec": {"holderIdentity": "ccm-2", "renewTime": "2026-11-26T20:06:00.500000Z"}},
            patch_type="merge",
        )

        def same() -> bool:
            leases = [sorted(i.list(), key=repr) for i in pair]
            return leases[0] == leases[1] and any(
                x.spec.holder_identity == "ccm-2" for x in leases[0]
            )

        await eventually(same)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await proto_client.aclose()
