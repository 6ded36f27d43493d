"""aiohttp directly vs proxmoxer on a bounded thread pool, for the proxmox provider
(issue 23).

    PYTHONPATH=. .venv/bin/python benchmarks/proxmox_client_choice.py [--vms 300]
        [--workers 16] [--calls 400] [--rounds 3]

Both clients GET ``/cluster/resources?type=vm`` (the provider's one call per wave,
``--vms`` VMs in the answer) and ``/nodes/pve1/qemu/100/config`` (one VM's config)
with an API token and TLS verified against fakepve's certificate, from ``--workers``
concurrent asyncio tasks:

* **aiohttp**: the provider's own :class:`~kube_ccm.providers.proxmox.api.PveClient`;
* **proxmoxer**: ``ProxmoxAPI(..., backend="https")`` (requests) with token auth,
  its calls on :class:`kube_ccm.cloudprovider.BlockingCalls` with ``--workers``
  threads, as a blocking SDK would run.

fakepve (a fake of the PVE API) runs in a child process, so its CPU is not counted.
Measured: calls/s and this process's CPU per call (user + system, all threads), the
median of the rounds. Calls per Node do not depend on the client: the provider
batches lookups into one listing per wave either way. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import multiprocessing
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from kube_ccm.cloudprovider import BlockingCalls
from kube_ccm.providers.proxmox.api import PveClient
from kube_ccm.providers.proxmox.config import load_config
from kube_ccm.providers.proxmox.fakepve import FakePveServer


def serve(workdir: str, vms: int, ready: Any, stop: Any) -> None:
    with FakePveServer(Path(workdir)) as server:
        for i in range(vms):
            server.add_vm(100 + i, f"node-{i}", node=f"pve{1 + i % 3}")
        ready.put(server.cluster_config())
        stop.wait()


async def run_aiohttp(cluster: dict[str, Any], paths: list[str], workers: int, calls: int) -> float:
    entry = {k: v for k, v in cluster.items() if k != "secret"}
    config = load_config(yaml.safe_dump({"clusters": [entry]}))
    client = PveClient(config.clusters[0], timeout=30)
    queue = iter(range(calls))

    async def worker() -> None:
        for i in queue:
            await client.get(paths[i % len(paths)])

    await client.get(paths[0])  # warm: TLS handshake, session
    start = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(workers)))
    wall = time.monotonic() - start
    await client.aclose()
    return wall


async def run_proxmoxer(
    cluster: dict[str, Any], paths: list[str], workers: int, calls: int
) -> float:
    proxmoxer = importlib.import_module("proxmoxer")
    host, _, port = cluster["url"].removeprefix("https://").partition(":")
    user, _, token = cluster["tokenId"].partition("!")
    api = proxmoxer.ProxmoxAPI(
        host,
        port=int(port),
        user=user,
        token_name=token,
        token_value=cluster["secret"],
        verify_ssl=cluster["caFile"],
        backend="https",
    )
    pool = BlockingCalls("proxmoxer-bench", workers)
    queue = iter(range(calls))

    def get(path: str) -> Any:
        return api(path.lstrip("/")).get()

    async def worker() -> None:
        for i in queue:
            await pool.run(get, paths[i % len(paths)])

    await pool.run(get, paths[0])
    start = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(workers)))
    wall = time.monotonic() - start
    pool.close()
    return wall


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--vms", type=int, default=300)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    ctx = multiprocessing.get_context("spawn")
    ready, stop = ctx.Queue(), ctx.Event()
    with tempfile.TemporaryDirectory() as workdir:
        child = ctx.Process(target=serve, args=(workdir, args.vms, ready, stop), daemon=True)
        child.start()
        cluster = ready.get(timeout=60)
        cluster["secret"] = Path(cluster["tokenSecret"]["file"]).read_text().strip()
        for label, paths in (
            ("/cluster/resources?type=vm", ["/cluster/resources?type=vm"]),
            ("/nodes/{n}/qemu/{id}/config", ["/nodes/pve1/qemu/100/config"]),
        ):
            for name, run in (("aiohttp", run_aiohttp), ("proxmoxer", run_proxmoxer)):
                rates, cpus = [], []
                for _ in range(args.rounds):
                    cpu = time.process_time()
                    wall = asyncio.run(run(cluster, paths, args.workers, args.calls))
                    cpus.append((time.process_time() - cpu) * 1000 / args.calls)
                    rates.append(args.calls / wall)
                print(
                    f"| {label} | {name} | {statistics.median(rates):.0f} | "
                    f"{statistics.median(cpus):.2f} |"
                )
        stop.set()
        child.join(10)


if __name__ == "__main__":
    main()
