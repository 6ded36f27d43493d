"""Load-balancer churn when many nodes join at once, with and without coalescing.

    .venv/bin/python benchmarks/node_burst.py [--services 20] [--nodes 50] [--spread 2]
        [--windows 1 0] [--markdown docs/benchmarks.md]

For each ``--node-sync-window`` value, on a fresh control plane with
``kube-ccm run --controllers=service`` over the simulated cloud:

1. create ``--services`` LoadBalancer Services and wait for every ingress;
2. create ``--nodes`` Nodes evenly over ``--spread`` seconds (an autoscaler's
   scale-up);
3. wait until every load balancer has every new node, and count the
   ``UpdateLoadBalancer`` calls per load balancer. Without coalescing upstream
   makes up to one per node per load balancer.

Prints one JSON object per window; ``--markdown`` appends a table.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

from lb_provisioning import wait_until

from kube_ccm.runtime.client import KubeClient
from kube_ccm.testing.binaries import ensure_binaries
from kube_ccm.testing.controlplane import ControlPlane, ControlPlaneOptions
from kube_ccm.testing.daemon import DaemonProcess

NAMESPACE = "default"


async def scenario(
    plane: ControlPlane, window: float, *, services: int, nodes: int, spread: float, workdir: Path
) -> dict[str, Any]:
    client = KubeClient.from_kubeconfig(plane.kubeconfig)
    daemon = DaemonProcess(
        kubeconfig=plane.kubeconfig,
        workdir=workdir,
        args=[
            "--leader-elect=false",
            "--controllers=service",
            "--concurrent-service-syncs=16",
            f"--node-sync-window={window:g}s",
            "--kube-api-qps=1000",
            "--kube-api-burst=2000",
        ],
    ).start()
    try:
        daemon.wait_for_log("Started service-lb-controller")
        base = f"/api/v1/namespaces/{NAMESPACE}/services"
        for i in range(services):
            await client.create(
                base,
                {
                    "metadata": {"name": f"burst-{i}"},
                    "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
                },
            )

        def lbs() -> list[Any]:
            return [b for b in daemon.cloud.load_balancers() if "/burst-" in b.service]

        async def all_ensured() -> bool:
            return len(lbs()) == services

        await wait_until(all_ensured, 120)
        daemon.cloud.reset_calls()
        names = [f"burst-node-{i}" for i in range(nodes)]
        started = time.monotonic()
        for index, name in enumerate(names):
            await asyncio.sleep(max(0.0, started + index * spread / nodes - time.monotonic()))
            await client.create("/api/v1/nodes", {"metadata": {"name": name}})
        created = time.monotonic() - started

        async def all_current() -> bool:
            return all(set(names) <= set(b.nodes) for b in lbs())

        converged = await wait_until(all_current, 120, interval=0.05) - started
        await asyncio.sleep(max(2.0, 2 * window))  # any late pass would show here
        updates = daemon.cloud.calls().get("UpdateLoadBalancer", {}).get("count", 0)
        for name in names:
            await client.delete(f"/api/v1/nodes/{name}")
        for i in range(services):
            await client.delete(f"{base}/burst-{i}")

        async def all_deleted() -> bool:
            return not lbs()

        await wait_until(all_deleted, 120)
        return {
            "scenario": "node_burst",
            "node_sync_window_s": window,
            "services": services,
            "nodes": nodes,
            "nodes_created_within_s": round(created, 2),
            "update_calls": updates,
            "update_calls_per_lb": round(updates / services, 2),
            "uncoalesced_bound_per_lb": nodes,
            "converged_after_first_node_s": round(converged, 2),
        }
    finally:
        daemon.stop()
        await client.aclose()


def markdown(results: list[dict[str, Any]]) -> str:
    rows = [
        "| --node-sync-window | Services | nodes joining (s) | UpdateLoadBalancer per LB "
        "| upstream's bound per LB | all LBs current after (s) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    rows += [
        f"| {r['node_sync_window_s']:g} s | {r['services']} | {r['nodes']} in "
        f"{r['nodes_created_within_s']} | {r['update_calls_per_lb']} | "
        f"{r['uncoalesced_bound_per_lb']} | {r['converged_after_first_node_s']} |"
        for r in results
    ]
    return "\n".join(rows) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--services", type=int, default=20)
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--spread", type=float, default=2.0)
    parser.add_argument("--windows", type=float, nargs="+", default=[1.0, 0.0])
    parser.add_argument("--markdown", type=Path, default=None)
    args = parser.parse_args()
    ensure_binaries()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for index, window in enumerate(args.windows):
            plane = ControlPlane(ControlPlaneOptions())
            plane.start()
            try:
                result = asyncio.run(
                    scenario(
                        plane,
                        window,
                        services=args.services,
                        nodes=args.nodes,
                        spread=args.spread,
                        workdir=Path(tmp) / f"daemon-{index}",
                    )
                )
            finally:
                plane.stop()
            result["date"] = datetime.date.today().isoformat()
            result["host"] = platform.node()
            print(json.dumps(result), flush=True)
            results.append(result)
    if args.markdown is not None:
        with args.markdown.open("a") as out:
            out.write("\n" + markdown(results))


if __name__ == "__main__":
    main()
