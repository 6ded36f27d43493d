"""What a Node initialisation's two writes cost, by the kind of write (issue 26 item 4).

    .venv/bin/python benchmarks/write_cost.py [--nodes 500] [--rounds 3] [--workers 16]
        [--markdown docs/benchmarks.md]

The cloud node controller writes twice per Node: the initialisation (providerID, the
zone/region/instance-type labels, the taints without the uninitialised one) and the
addresses on ``nodes/status``. Four ways of making those writes, on one real
kube-apiserver + etcd, each over ``--nodes`` fresh kubelet-sized Nodes
(:func:`_bench.full_node_manifest`) per round, the variants' order rotated from round
to round:

* ``strategic`` (kube-ccm today): a strategic-merge patch carrying
  ``metadata.resourceVersion`` as its precondition, then a strategic-merge patch of
  ``status.addresses`` with ``$patch: replace``;
* ``merge``: the same two bodies as JSON merge patches (RFC 7386: a list is replaced
  whole, which is what the ``$patch: replace`` directive asks for; ``spec.taints``
  has no patch strategy, so it is replaced by both);
* ``upstream`` (the Go CCM's cloud node controller): ``PUT`` of the whole Node, from
  the copy its informer holds (here: the create's response), then the strategic-merge
  patch of status that ``nodeutil.PatchNodeStatus`` makes (the same body as ours);
* ``get+put``: what a ``PUT`` would take in kube-ccm, whose cache keeps trimmed Nodes
  and so cannot send a whole one: a ``GET``, then the ``PUT``, then the status patch.

Measured over the writes only (creating the Nodes is not): kube-apiserver's and etcd's
CPU seconds (``/proc``), the driver's own CPU (``process_time``: encoding the request,
reading the response; it stands for the daemon's side, responses are decoded into the
daemon's ``Node`` struct as the controller does), and the wall time, with ``--workers``
writers. Every variant's result is read back and compared with ``strategic``'s (spec,
labels, taints, addresses): ``identical`` says whether the stored Node is the same.
Medians over the rounds; the load average is printed beside them.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec
from _bench import (
    addresses_patch,
    append_markdown,
    cpu_seconds,
    emit,
    full_node_manifest,
    gather_limited,
    header,
    header_line,
    initialisation_patch,
    load_average,
    markdown_table,
)

from kube_ccm.api.objects import Node
from kube_ccm.runtime.client import PATCH_CONTENT_TYPES, KubeClient, PatchType
from kube_ccm.testing.binaries import ensure_binaries
from kube_ccm.testing.controlplane import ControlPlane

VARIANTS = ("strategic", "merge", "upstream", "get+put")
_node_decoder = msgspec.json.Decoder(Node)


def merge_addresses(name: str, index: int) -> dict[str, Any]:
    """The addresses write as a JSON merge patch: the list without the directive."""
    addresses = addresses_patch(name, index)["status"]["addresses"]
    return {"status": {"addresses": [a for a in addresses if "$patch" not in a]}}


def initialised(node: dict[str, Any], index: int) -> dict[str, Any]:
    """What ``PUT`` sends: the whole Node with the initialisation applied."""
    patch = initialisation_patch(node["metadata"]["name"], "", index)
    body = copy.deepcopy(node)
    body["metadata"]["labels"] = {
        **body["metadata"].get("labels", {}),
        **patch["metadata"]["labels"],
    }
    body["spec"]["taints"] = patch["spec"]["taints"]
    body["spec"]["providerID"] = patch["spec"]["providerID"]
    return body


Write = Callable[[KubeClient, int, dict[str, Any]], Awaitable[None]]


async def _patch(client: KubeClient, path: str, body: Any, kind: PatchType) -> bytes:
    return await client.request("PATCH", path, body=body, content_type=PATCH_CONTENT_TYPES[kind])


async def write_strategic(client: KubeClient, index: int, node: dict[str, Any]) -> None:
    name, version = node["metadata"]["name"], node["metadata"]["resourceVersion"]
    path = f"/api/v1/nodes/{name}"
    _node_decoder.decode(
        await _patch(client, path, initialisation_patch(name, version, index), "strategic")
    )
    await _patch(client, f"{path}/status", addresses_patch(name, index), "strategic")


async def write_merge(client: KubeClient, index: int, node: dict[str, Any]) -> None:
    name, version = node["metadata"]["name"], node["metadata"]["resourceVersion"]
    path = f"/api/v1/nodes/{name}"
    _node_decoder.decode(
        await _patch(client, path, initialisation_patch(name, version, index), "merge")
    )
    await _patch(client, f"{path}/status", merge_addresses(name, index), "merge")


async def write_upstream(client: KubeClient, index: int, node: dict[str, Any]) -> None:
    name = node["metadata"]["name"]
    path = f"/api/v1/nodes/{name}"
    _node_decoder.decode(await client.request("PUT", path, body=initialised(node, index)))
    await _patch(client, f"{path}/status", addresses_patch(name, index), "strategic")


async def write_get_put(client: KubeClient, index: int, node: dict[str, Any]) -> None:
    name = node["metadata"]["name"]
    path = f"/api/v1/nodes/{name}"
    current = json.loads(await client.request("GET", path))
    _node_decoder.decode(await client.request("PUT", path, body=initialised(current, index)))
    await _patch(client, f"{path}/status", addresses_patch(name, index), "strategic")


WRITES: dict[str, Write] = {
    "strategic": write_strategic,
    "merge": write_merge,
    "upstream": write_upstream,
    "get+put": write_get_put,
}


def stored(node: dict[str, Any]) -> dict[str, Any]:
    """What the comparison looks at: a Node's spec, labels and addresses, its name and
    index taken out (each variant writes other Nodes)."""
    name = node["metadata"]["name"]
    text = json.dumps(
        {
            "labels": node["metadata"].get("labels", {}),
            "annotations": node["metadata"].get("annotations", {}),
            "spec": node["spec"],
            "addresses": node["status"].get("addresses"),
            "conditions": [c["type"] for c in node["status"].get("conditions", [])],
        },
        sort_keys=True,
    )
    found: dict[str, Any] = json.loads(text.replace(name, "NAME"))
    return found


async def one(
    client: KubeClient, plane: ControlPlane, variant: str, names: Sequence[str], workers: int
) -> dict[str, Any]:
    created: list[dict[str, Any]] = await gather_limited(
        (client.create("/api/v1/nodes", full_node_manifest(n)) for n in names), 32
    )
    await asyncio.sleep(1.0)
    pids = plane.pids()
    write = WRITES[variant]
    queue = list(enumerate(created))
    load = load_average()
    api0, etcd0 = cpu_seconds(pids["kube-apiserver"]), cpu_seconds(pids["etcd"])
    own0, began = time.process_time(), time.monotonic()

    async def worker() -> None:
        while queue:
            position, node = queue.pop()
            await write(client, position, node)

    await asyncio.gather(*(worker() for _ in range(workers)))
    wall, own = time.monotonic() - began, time.process_time() - own0
    api, etcd = cpu_seconds(pids["kube-apiserver"]) - api0, cpu_seconds(pids["etcd"]) - etcd0
    sample = json.loads(await client.request("GET", f"/api/v1/nodes/{names[0]}"))
    n = len(names)
    return {
        "variant": variant,
        "load_average_1m": load,
        "wall_ms_per_node": round(1000 * wall / n, 3),
        "apiserver_cpu_ms_per_node": round(1000 * api / n, 3),
        "etcd_cpu_ms_per_node": round(1000 * etcd / n, 3),
        "client_cpu_ms_per_node": round(1000 * own / n, 3),
        "stored": stored(sample),
    }


async def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    binaries = ensure_binaries()
    info = header(binaries)
    results: list[dict[str, Any]] = []
    with ControlPlane(binaries=binaries) as plane:
        client = KubeClient.from_kubeconfig(plane.kubeconfig)
        try:
            await one(client, plane, "strategic", [f"warm-{i}" for i in range(50)], args.workers)
            for r in range(args.rounds):
                order = VARIANTS[r % len(VARIANTS) :] + VARIANTS[: r % len(VARIANTS)]
                for variant in order:
                    slug = variant.replace("+", "")
                    names = [f"w{r}-{slug}-{i:05d}" for i in range(args.nodes)]
                    result = await one(client, plane, variant, names, args.workers)
                    result["round"] = r
                    results.append(result)
                    emit({k: v for k, v in result.items() if k != "stored"})
        finally:
            await client.aclose()
    summary = summarise(results, args)
    emit(summary | {"header": info})
    append_markdown(args.markdown, markdown(summary, info, args))
    return results


def summarise(results: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    reference = next(r["stored"] for r in results if r["variant"] == "strategic")
    out: dict[str, Any] = {"benchmark": "write_cost", "nodes": args.nodes, "rounds": args.rounds}
    for variant in VARIANTS:
        mine = [r for r in results if r["variant"] == variant]
        row: dict[str, Any] = {
            key: round(statistics.median(r[key] for r in mine), 3)
            for key in (
                "apiserver_cpu_ms_per_node",
                "etcd_cpu_ms_per_node",
                "client_cpu_ms_per_node",
                "wall_ms_per_node",
            )
        }
        row["identical"] = all(r["stored"] == reference for r in mine)
        row["load_average_1m"] = [r["load_average_1m"] for r in mine]
        out[variant] = row
    return out


def markdown(summary: dict[str, Any], info: dict[str, Any], args: argparse.Namespace) -> str:
    base = summary["strategic"]["apiserver_cpu_ms_per_node"]
    rows = [
        (
            f"`{v}`",
            summary[v]["apiserver_cpu_ms_per_node"],
            round(summary[v]["apiserver_cpu_ms_per_node"] / base, 2) if base else "—",
            summary[v]["etcd_cpu_ms_per_node"],
            summary[v]["client_cpu_ms_per_node"],
            summary[v]["wall_ms_per_node"],
            "yes" if summary[v]["identical"] else "**no**",
            ", ".join(f"{x:g}" for x in summary[v]["load_average_1m"]),
        )
        for v in VARIANTS
    ]
    return markdown_table(
        f"Write cost per Node initialisation — median of {args.rounds} rounds of {args.nodes} "
        f"Nodes, {args.workers} writers — {header_line(info)}",
        [
            "writes",
            "apiserver CPU ms/Node",
            "vs strategic",
            "etcd CPU ms/Node",
            "client CPU ms/Node",
            "wall ms/Node",
            "stored Node identical",
            "load avg (1 m) per round",
        ],
        rows,
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--markdown", type=Path, default=None)
    asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
