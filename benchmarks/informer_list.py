"""The informer's first LIST, paged or in one body: peak memory and CPU (issue 26 item 3).

    .venv/bin/python benchmarks/informer_list.py [--nodes 15000] [--rounds 3]
        [--page-size 500] [--markdown docs/benchmarks.md]

One real kube-apiserver + etcd is seeded with ``--nodes`` kubelet-sized Nodes
(:func:`_bench.full_node_manifest`, ≈ 10 KiB of JSON each: the body a 100,000-Node
LIST is made of). Then, ``--rounds`` times and alternating which goes first, a fresh
process runs the daemon's Node informer (``Informer(client, NODES)``, the struct the
daemon's cache keeps) until it has synced, once paged (``page_size`` 500: ``limit`` and
``continue``, consistent reads) and once unpaged (``page_size`` 0: one request at
``resourceVersion=0`` from the watch cache, what kube-ccm did before). Each reports
its peak RSS (VmHWM) and its RSS before the informer started (interpreter and
imports), its CPU seconds and the seconds until synced, and the list requests it
made; kube-apiserver's and etcd's CPU seconds over the same time are read from
``/proc`` (etcd's shows whether the paged, consistent list was served by etcd or by
the apiserver's watch cache).
Medians over the rounds, the load average beside them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from _bench import (
    append_markdown,
    cpu_seconds,
    emit,
    full_node_manifest,
    gather_limited,
    header,
    header_line,
    load_average,
    markdown_table,
    memory_mib,
)

from kube_ccm.runtime.client import KubeClient
from kube_ccm.runtime.informer import Informer
from kube_ccm.runtime.resources import NODES
from kube_ccm.testing.binaries import ensure_binaries
from kube_ccm.testing.controlplane import ControlPlane, ControlPlaneOptions

MODES = {"paged": 500, "unpaged": 0}


class Counting:
    """The client, counting list requests and the bytes they returned."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self.watch = client.watch
        self.lists = 0
        self.largest = 0

    async def request(
        self, method: str, path: str, *, params: Mapping[str, str | int] | None = None
    ) -> bytes:
        body = await self.client.request(method, path, params=params)
        self.lists += 1
        self.largest = max(self.largest, len(body))
        return body


async def child(kubeconfig: Path, page_size: int) -> dict[str, Any]:
    """One informer until synced, in this (fresh) process."""
    before = memory_mib(os.getpid())
    client = KubeClient.from_kubeconfig(kubeconfig)
    counting = Counting(client)
    informer = Informer(counting, NODES, page_size=page_size)
    cpu0, began = time.process_time(), time.monotonic()
    task = asyncio.create_task(informer.run())
    try:
        await informer.wait_synced()
        synced = time.monotonic() - began
        cpu = time.process_time() - cpu0
        after = memory_mib(os.getpid())
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.aclose()
    return {
        "nodes_cached": len(informer),
        "list_requests": counting.lists,
        "largest_body_mib": round(counting.largest / 2**20, 1),
        "rss_mib_before": before.get("VmRSS", 0.0),
        "peak_rss_mib": after.get("VmHWM", 0.0),
        "rss_mib_synced": after.get("VmRSS", 0.0),
        "cpu_seconds": round(cpu, 2),
        "synced_seconds": round(synced, 2),
    }


async def seed(client: KubeClient, nodes: int) -> float:
    began = time.monotonic()
    await gather_limited(
        (client.create("/api/v1/nodes", full_node_manifest(f"full-{i:06d}")) for i in range(nodes)),
        64,
    )
    return time.monotonic() - began


def measure(plane: ControlPlane, mode: str) -> dict[str, Any]:
    api, etcd = plane.pids()["kube-apiserver"], plane.pids()["etcd"]
    load = load_average()
    api0, etcd0 = cpu_seconds(api), cpu_seconds(etcd)
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            "--kubeconfig",
            str(plane.kubeconfig),
            "--page-size",
            str(MODES[mode]),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result | {
        "mode": mode,
        "apiserver_cpu_seconds": round(cpu_seconds(api) - api0, 2),
        "etcd_cpu_seconds": round(cpu_seconds(etcd) - etcd0, 2),
        "load_average_1m": load,
    }


async def run(args: argparse.Namespace) -> None:
    binaries = ensure_binaries()
    info = header(binaries)
    results: list[dict[str, Any]] = []
    options = ControlPlaneOptions(extra_etcd_args=("--quota-backend-bytes=8589934592",))
    with ControlPlane(options, binaries=binaries) as plane:
        client = KubeClient.from_kubeconfig(plane.kubeconfig)
        try:
            seeded = await seed(client, args.nodes)
        finally:
            await client.aclose()
        emit({"seeded_nodes": args.nodes, "seed_seconds": round(seeded, 1)})
        MODES["paged"] = args.page_size
        for r in range(args.rounds):
            order = ["paged", "unpaged"] if r % 2 == 0 else ["unpaged", "paged"]
            for mode in order:
                result = measure(plane, mode) | {"round": r}
                results.append(result)
                emit(result)
    summary: dict[str, Any] = {"benchmark": "informer_list", "nodes": args.nodes}
    for mode in MODES:
        mine = [r for r in results if r["mode"] == mode]
        summary[mode] = {
            key: statistics.median(r[key] for r in mine)
            for key in (
                "peak_rss_mib",
                "rss_mib_before",
                "rss_mib_synced",
                "largest_body_mib",
                "list_requests",
                "cpu_seconds",
                "synced_seconds",
                "apiserver_cpu_seconds",
                "etcd_cpu_seconds",
            )
        } | {"load_average_1m": [r["load_average_1m"] for r in mine]}
    emit(summary | {"header": info})
    append_markdown(args.markdown, markdown(summary, info, args))


def markdown(summary: dict[str, Any], info: dict[str, Any], args: argparse.Namespace) -> str:
    keys = [
        ("peak RSS (VmHWM)", "peak_rss_mib", " MiB"),
        ("RSS before the informer (imports)", "rss_mib_before", " MiB"),
        ("RSS once synced", "rss_mib_synced", " MiB"),
        ("largest response body", "largest_body_mib", " MiB"),
        ("list requests", "list_requests", ""),
        ("informer CPU until synced", "cpu_seconds", " s"),
        ("seconds until synced", "synced_seconds", " s"),
        ("kube-apiserver CPU meanwhile", "apiserver_cpu_seconds", " s"),
        ("etcd CPU meanwhile", "etcd_cpu_seconds", " s"),
    ]
    paged, unpaged = summary["paged"], summary["unpaged"]
    rows = [
        (
            label,
            f"{unpaged[key]:g}{unit}",
            f"{paged[key]:g}{unit}",
            round(paged[key] / unpaged[key], 2) if unpaged[key] else "—",
        )
        for label, key, unit in keys
    ]
    rows.append(
        (
            "load avg (1 m) per round",
            ", ".join(f"{x:g}" for x in unpaged["load_average_1m"]),
            ", ".join(f"{x:g}" for x in paged["load_average_1m"]),
            "",
        )
    )
    return markdown_table(
        f"Informer first LIST, {args.nodes:,} kubelet-sized Nodes — median of {args.rounds} "
        f"runs each — {header_line(info)}",
        ["", "one body (before)", f"pages of {args.page_size} (after)", "after/before"],
        rows,
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=15_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--page-size", type=int, default=500)
    parser.add_argument("--markdown", type=Path, default=None)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--kubeconfig", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(asyncio.run(child(args.kubeconfig, args.page_size))), flush=True)
        return
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
