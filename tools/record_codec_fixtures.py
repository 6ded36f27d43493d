"""Record what a real kube-apiserver answers, in JSON and in protobuf, for the codec's
unit tests (``tests/unit/runtime/codec_fixtures.json``).

    .venv/bin/python tools/record_codec_fixtures.py

Starts the test bed's kube-apiserver and etcd, creates for each kind the protobuf
codec converts (Nodes, Services, PersistentVolumes, CertificateSigningRequests,
Leases) one object with every field kube-ccm keeps and one with as few as the API
allows (where Go's defaults show), and saves each list and one object of each kind as
both encodings return them. Run again after a change of the structs or of the
kube-apiserver version; ``tests/integration/test_codec_real.py`` makes the same
comparison live.
"""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from kube_ccm.runtime import codec
from kube_ccm.runtime.client import KubeClient
from kube_ccm.testing.binaries import ensure_binaries
from kube_ccm.testing.controlplane import ControlPlane

OUT = Path(__file__).resolve().parent.parent / "tests/unit/runtime/codec_fixtures.json"
T1 = "2026-11-26T20:00:00Z"
T2 = "2026-11-26T20:05:07Z"
MICRO = "2026-11-26T20:05:07.123456Z"


def csr_request() -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "system:node:n")])
    request = x509.CertificateSigningRequestBuilder().subject_name(name).sign(key, hashes.SHA256())
    return base64.b64encode(request.public_bytes(serialization.Encoding.PEM)).decode()


def node_status() -> dict[str, Any]:
    condition = {"status": "False", "lastHeartbeatTime": T2, "lastTransitionTime": T1}
    return {
        "addresses": [
            {"type": "InternalIP", "address": "10.0.0.5"},
            {"type": "Hostname", "address": "fat"},
        ],
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ok"}
            | {"lastHeartbeatTime": T2, "lastTransitionTime": T1},
            {"type": "MemoryPressure", **condition},
            {"type": "NetworkUnavailable", "status": "False", "lastHeartbeatTime": T2},
        ],
        "nodeInfo": {"systemUUID": "uuid-1", "machineID": "m-1", "bootID": "b"},
        "capacity": {"cpu": "4", "memory": "16Gi"},
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
    }


KINDS: list[tuple[str, str, list[dict[str, Any]], dict[str, Any]]] = [
    (
        "Node",
        "/api/v1/nodes",
        [
            {
                "metadata": {
                    "name": "fat",
                    "labels": {"topology.kubernetes.io/zone": "z1"},
                    "annotations": {"a": "1"},
                    "finalizers": ["example.com/keep"],
                },
                "spec": {
                    "providerID": "sim://i-1",
                    "podCIDR": "10.244.1.0/24",
                    "podCIDRs": ["10.244.1.0/24", "fd00::/64"],
                    "taints": [
                        {"key": "a", "value": "b", "effect": "NoSchedule"},
                        {"key": "c", "effect": "NoExecute", "timeAdded": T1},
                    ],
                    "unschedulable": True,
                },
            },
            {"metadata": {"name": "sparse"}},
        ],
        {"fat": node_status()},
    ),
    (
        "Service",
        "/api/v1/namespaces/default/services",
        [
            {
                "metadata": {"name": "fat", "annotations": {"x": "y"}},
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
                    "ipFamilyPolicy": "SingleStack",
                },
            },
            {"metadata": {"name": "sparse"}, "spec": {"ports": [{"port": 443}]}},
            {"metadata": {"name": "headless"}, "spec": {"clusterIP": "None"}},
            {
                "metadata": {"name": "external"},
                "spec": {"type": "ExternalName", "externalName": "e.example"},
            },
        ],
        {
            "fat": {
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
    ),
    (
        "PersistentVolume",
        "/api/v1/persistentvolumes",
        [
            {
                "metadata": {"name": "fat"},
                "spec": {
                    "capacity": {"storage": "10Gi"},
                    "accessModes": ["ReadWriteOnce", "ReadOnlyMany"],
                    "storageClassName": "fast",
                    "volumeMode": "Block",
                    "csi": {
                        "driver": "ebs.csi.aws.com",
                        "volumeHandle": "vol-1",
                        "fsType": "ext4",
                        "readOnly": True,
                        "volumeAttributes": {"a": "b"},
                    },
                    "nodeAffinity": {
                        "required": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": "z", "operator": "In", "values": ["1", "2"]}
                                    ]
                                },
                                {
                                    "matchFields": [
                                        {"key": "metadata.name", "operator": "In", "values": ["n"]}
                                    ]
                                },
                                {"matchExpressions": [{"key": "gone", "operator": "DoesNotExist"}]},
                            ]
                        }
                    },
                },
            },
            {
                "metadata": {"name": "sparse"},
                "spec": {
                    "capacity": {"storage": "1Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "hostPath": {"path": "/d", "type": "Directory"},
                },
            },
            {
                "metadata": {"name": "gce"},
                "spec": {
                    "capacity": {"storage": "1Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "gcePersistentDisk": {"pdName": "disk-1", "fsType": "ext4", "partition": 1},
                },
            },
        ],
        {},
    ),
    (
        "CertificateSigningRequest",
        "/apis/certificates.k8s.io/v1/certificatesigningrequests",
        [
            {
                "metadata": {"name": "fat"},
                "spec": {
                    "request": csr_request(),
                    "signerName": "example.com/signer",
                    "usages": ["digital signature", "server auth"],
                    "expirationSeconds": 3600,
                },
            },
            {
                "metadata": {"name": "sparse"},
                "spec": {
                    "request": csr_request(),
                    "signerName": "example.com/signer",
                    "usages": ["client auth"],
                },
            },
        ],
        {},
    ),
    (
        "Lease",
        "/apis/coordination.k8s.io/v1/namespaces/default/leases",
        [
            {
                "metadata": {
                    "name": "fat",
                    "labels": {"a": "b"},
                    "annotations": {"c": "d"},
                    "finalizers": ["example.com/keep"],
                    "ownerReferences": [
                        {
                            "apiVersion": "v1",
                            "kind": "Node",
                            "name": "fat",
                            "uid": "8f0c0c53-6f7a-4b8e-9e0a-2f8e1b7d3a11",
                            "controller": True,
                        }
                    ],
                },
                "spec": {
                    "holderIdentity": "ccm-1",
                    "leaseDurationSeconds": 15,
                    "acquireTime": MICRO,
                    "renewTime": "2026-11-26T20:05:08.000000Z",
                    "leaseTransitions": 3,
                },
            },
            {"metadata": {"name": "sparse"}},
        ],
        {},
    ),
]


async def record(plane: ControlPlane) -> dict[str, Any]:
    client = KubeClient.from_kubeconfig(plane.kubeconfig)
    recorded: dict[str, Any] = {}
    try:
        for kind, path, objects, statuses in KINDS:
            for body in objects:
                await client.create(path, body)
            for name, status in statuses.items():
                await client.patch(f"{path}/{name}/status", {"status": status}, patch_type="merge")
            if kind == "CertificateSigningRequest":
                current = await client.get(f"{path}/fat")
                current["status"] = {
                    "conditions": [
                        {"type": "Approved", "status": "True", "reason": "Test", "message": "ok"}
                    ]
                }
                await client.replace(f"{path}/fat/approval", current)
            entry: dict[str, Any] = {}
            for what, where in (("list", path), ("object", f"{path}/fat")):
                as_json = await client.request("GET", where)
                as_protobuf = await client.request("GET", where, accept=codec.PROTOBUF_ACCEPT)
                assert codec.is_protobuf(as_protobuf), (kind, what)
                entry[what] = {
                    "json": json.loads(as_json),
                    "protobuf": base64.b64encode(as_protobuf).decode(),
                }
            recorded[kind] = entry
    finally:
        await client.aclose()
    return recorded


def main() -> None:
    plane = ControlPlane(binaries=ensure_binaries()).start()
    try:
        recorded = asyncio.run(record(plane))
    finally:
        plane.stop()
    OUT.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
