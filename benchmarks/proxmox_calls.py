"""PVE API calls the proxmox provider makes per Node, with 1,000 VMs in 3 clusters
(issue 23).

    PYTHONPATH=. .venv/bin/python benchmarks/proxmox_calls.py [--vms 1000] [--clusters 3]

Three fakepve clusters (a fake of the PVE API, on loopback threads of this process)
hold ``--vms`` VMs between them, each with a guest agent. The provider (default
cloud-config: ``cacheTTL: 5s``) is called as the node controllers call it, all
Nodes of a pass at once (a wave, as a burst of kubelets registering or the
periodic address refresh makes it):

* **init**: ``instance_metadata`` of each Node by name (no providerID yet);
* **refresh**: ``instance_metadata`` of each Node by its providerID;
* **exists**: ``instance_exists`` of each Node by its providerID (the lifecycle
  controller's pass).

Printed: API requests per pass, by path kind, and per Node. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections import Counter
from pathlib import Path

import msgspec
import yaml

from kube_ccm.api.objects import Node
from kube_ccm.providers.proxmox import factory
from kube_ccm.providers.proxmox.fakepve import FakePveServer, agent_interfaces


def node(name: str, provider_id: str = "") -> Node:
    spec = {"providerID": provider_id} if provider_id else {}
    return msgspec.convert({"metadata": {"name": name}, "spec": spec}, Node)


def kind(path: str) -> str:
    if path.endswith("/cluster/resources"):
        return "resources"
    return path.rsplit("/", 1)[-1]


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--vms", type=int, default=1000)
    parser.add_argument("--clusters", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        servers = [
            FakePveServer(Path(workdir) / f"c{i}", region=f"cluster-{i + 1}").start()
            for i in range(args.clusters)
        ]
        try:
            for i in range(args.vms):
                server = servers[i % args.clusters]
                address = f"10.{i // 250}.{i % 250}.{1 + i % 3}"
                server.add_vm(
                    100 + i, f"node-{i}", node=f"pve{i % 4}", agent=agent_interfaces(address)
                )
            config = {"clusters": [s.cluster_config() for s in servers]}
            provider = factory(yaml.safe_dump(config).encode())
            instances = provider.instances_v2()
            assert instances is not None
            names = [f"node-{i}" for i in range(args.vms)]

            def seen() -> Counter[str]:
                return Counter(kind(p) for s in servers for _, p, _ in list(s.pve.requests))

            before = seen()
            start = time.monotonic()
            metas = await asyncio.gather(*(instances.instance_metadata(node(n)) for n in names))
            report("init", seen() - before, args.vms, time.monotonic() - start)
            ids = {n: m.provider_id for n, m in zip(names, metas, strict=True) if m}
            await asyncio.sleep(5.1)  # past cacheTTL: the next pass lists again
            before = seen()
            start = time.monotonic()
            await asyncio.gather(*(instances.instance_metadata(node(n, ids[n])) for n in names))
            report("refresh", seen() - before, args.vms, time.monotonic() - start)
            await asyncio.sleep(5.1)
            before = seen()
            start = time.monotonic()
            await asyncio.gather(*(instances.instance_exists(node(n, ids[n])) for n in names))
            report("exists", seen() - before, args.vms, time.monotonic() - start)
            await provider.aclose()
        finally:
            for server in servers:
                server.stop()


def report(what: str, counts: Counter[str], nodes: int, seconds: float) -> None:
    total = sum(counts.values())
    detail = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    print(f"| {what} | {total} | {total / nodes:.2f} | {detail} | {seconds:.1f} s |")


if __name__ == "__main__":
    asyncio.run(main())
