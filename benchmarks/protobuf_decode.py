"""The informers' decoding cost per object: JSON (msgspec) against protobuf (upb + conversion).

    .venv/bin/python benchmarks/protobuf_decode.py [--nodes 1000] [--services 300]
        [--rounds 5] [--markdown docs/benchmarks.md]

On a real kube-apiserver, ``--nodes`` Nodes in two shapes are created: *lean*, as the
side-by-side benchmark registers them (``node_manifest``: one condition, one
address), and *kubelet-like*, with what a kubelet reports besides (five conditions,
nodeInfo, capacity, allocatable, ten images, daemonEndpoints); and ``--services``
LoadBalancer Services. Each list is fetched once in each encoding and then decoded
``--rounds`` times into ``ObjectList[Node]`` / ``[Service]`` (JSON) and through
``kube_ccm.runtime.codec`` (protobuf): the process CPU per object, best of the rounds,
and the body's bytes per object. The apiserver's CPU to serve each list (median of
``--rounds`` GETs) is reported too. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
from _bench import (
    append_markdown,
    cpu_seconds,
    emit,
    gather_limited,
    header,
    header_line,
    load_average,
    markdown_table,
)

from kube_ccm.api.objects import Node, ObjectList, Service
from kube_ccm.runtime import codec
from kube_ccm.runtime.client import KubeClient
from kube_ccm.sandbox.kubelets import node_manifest
from kube_ccm.testing.binaries import ensure_binaries
from kube_ccm.testing.controlplane import ControlPlane, ControlPlaneOptions

NOW = "2026-11-26T20:00:00Z"


def kubelet_status(name: str, index: int) -> dict[str, Any]:
    conditions = [
        {
            "type": kind,
            "status": "False",
            "reason": f"KubeletHas{kind}",
            "message": f"kubelet has no {kind}",
            "lastHeartbeatTime": NOW,
            "lastTransitionTime": NOW,
        }
        for kind in ("MemoryPressure", "DiskPressure", "PIDPressure")
    ]
    conditions.append(
        {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "message": "kubelet is posting ready status",
            "lastHeartbeatTime": NOW,
            "lastTransitionTime": NOW,
        }
    )
    return {
        "status": {
            "addresses": [
                {"type": "InternalIP", "address": f"10.1.{index // 250}.{index % 250 + 1}"},
                {"type": "Hostname", "address": name},
            ],
            "conditions": conditions,
            "nodeInfo": {
                "machineID": f"{index:032x}",
                "systemUUID": f"ec2{index:05x}-0000-0000-0000-000000000000",
                "bootID": f"{index:08x}-1111-2222-3333-444444444444",
                "kernelVersion": "6.1.0-28-cloud-amd64",
                "osImage": "Debian GNU/Linux 12 (bookworm)",
                "containerRuntimeVersion": "containerd://1.7.24",
                "kubeletVersion": "v1.36.3",
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
            "capacity": {"cpu": "8", "memory": "32847184Ki", "pods": "110"},
            "allocatable": {"cpu": "7910m", "memory": "31695184Ki", "pods": "110"},
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "images": [
                {
                    "names": [
                        f"registry.k8s.io/image-{i}@sha256:{i:064x}",
                        f"registry.k8s.io/image-{i}:v1.{i}.0",
                    ],
                    "sizeBytes": 10_000_000 * (i + 1),
                }
                for i in range(10)
            ],
        }
    }


async def populate(client: KubeClient, nodes: int, services: int) -> None:
    async def node(index: int, shape: str) -> None:
        name = f"{shape}-{index:05d}"
        manifest = node_manifest(name)
        manifest["metadata"]["labels"]["shape"] = shape
        await client.create("/api/v1/nodes", manifest)
        if shape == "kubelet":
            await client.patch(f"/api/v1/nodes/{name}/status", kubelet_status(name, index))

    await gather_limited(node(i, s) for s in ("lean", "kubelet") for i in range(nodes))

    async def service(index: int) -> None:
        await client.create(
            "/api/v1/namespaces/default/services",
            {
                "metadata": {"name": f"lb-{index:05d}", "labels": {"shape": "lb"}},
                "spec": {
                    "type": "LoadBalancer",
                    "ports": [{"name": "http", "port": 80, "targetPort": 8080}],
                    "selector": {"app": f"app-{index}"},
                },
            },
        )

    await gather_limited(service(i) for i in range(services))


def best_cpu(decode: Callable[[], int], rounds: int) -> tuple[float, int]:
    """(best CPU seconds of ``rounds`` calls, objects decoded)."""
    best = float("inf")
    count = 0
    for _ in range(rounds):
        started = time.process_time()
        count = decode()
        best = min(best, time.process_time() - started)
    return best, count


async def measure(
    client: KubeClient, plane: ControlPlane, *, path: str, selector: str, type_: Any, rounds: int
) -> dict[str, Any]:
    params = {"labelSelector": selector}
    apiserver = plane.pids()["kube-apiserver"]
    bodies: dict[str, bytes] = {}
    served: dict[str, float] = {}
    for name, accept in (("json", codec.JSON), ("protobuf", codec.PROTOBUF_ACCEPT)):
        spent = []
        for _ in range(rounds):
            before = cpu_seconds(apiserver)
            bodies[name] = await client.request("GET", path, params=params, accept=accept)
            spent.append(cpu_seconds(apiserver) - before)
        served[name] = statistics.median(spent)
    decoder = msgspec.json.Decoder(ObjectList[type_])
    kind = codec.protobuf_kind(type_)
    assert kind is not None
    json_cpu, count = best_cpu(lambda: len(decoder.decode(bodies["json"]).items), rounds)
    proto_cpu, proto_count = best_cpu(lambda: len(kind.decode_list(bodies["protobuf"])[0]), rounds)
    assert count == proto_count, (count, proto_count)
    return {
        "objects": count,
        "json_bytes_per_object": round(len(bodies["json"]) / count),
        "protobuf_bytes_per_object": round(len(bodies["protobuf"]) / count),
        "json_decode_us_per_object": round(1e6 * json_cpu / count, 2),
        "protobuf_decode_us_per_object": round(1e6 * proto_cpu / count, 2),
        "apiserver_json_us_per_object": round(1e6 * served["json"] / count, 1),
        "apiserver_protobuf_us_per_object": round(1e6 * served["protobuf"] / count, 1),
    }


async def run(plane: ControlPlane, args: argparse.Namespace) -> list[dict[str, Any]]:
    client = KubeClient.from_kubeconfig(plane.kubeconfig)
    try:
        await populate(client, args.nodes, args.services)
        results = []
        for label, path, selector, type_ in (
            ("Node, lean", "/api/v1/nodes", "shape=lean", Node),
            ("Node, kubelet-like", "/api/v1/nodes", "shape=kubelet", Node),
            ("Service, LoadBalancer", "/api/v1/services", "shape=lb", Service),
        ):
            result = {
                "benchmark": "protobuf_decode",
                "what": label,
                **await measure(
                    client, plane, path=path, selector=selector, type_=type_, rounds=args.rounds
                ),
                "load_average_1m": load_average(),
            }
            emit(result)
            results.append(result)
        return results
    finally:
        await client.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000, help="of each shape")
    parser.add_argument("--services", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--markdown", type=Path, default=None)
    args = parser.parse_args()
    binaries = ensure_binaries()
    info = header(binaries)
    emit({"benchmark": "protobuf_decode", "header": info})
    plane = ControlPlane(
        ControlPlaneOptions(service_cluster_ip_range="10.96.0.0/16"), binaries=binaries
    ).start()
    try:
        results = asyncio.run(run(plane, args))
    finally:
        plane.stop()
    append_markdown(
        args.markdown,
        markdown_table(
            f"List decoding, JSON against protobuf — best of {args.rounds} — {header_line(info)}",
            [
                "list (objects)",
                "bytes/object JSON",
                "bytes/object protobuf",
                "decode µs/object JSON",
                "decode µs/object protobuf",
                "apiserver µs/object JSON",
                "apiserver µs/object protobuf",
                "load avg (1 m)",
            ],
            [
                (
                    f"{r['what']} ({r['objects']})",
                    r["json_bytes_per_object"],
                    r["protobuf_bytes_per_object"],
                    r["json_decode_us_per_object"],
                    r["protobuf_decode_us_per_object"],
                    r["apiserver_json_us_per_object"],
                    r["apiserver_protobuf_us_per_object"],
                    r["load_average_1m"],
                )
                for r in results
            ],
        ),
    )


if __name__ == "__main__":
    main()
