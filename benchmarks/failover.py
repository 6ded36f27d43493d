"""Failover time of two daemons on one Lease, with upstream's default timings.

    .venv/bin/python benchmarks/failover.py [--runs 5] [--markdown docs/benchmarks.md]

Two ``kube-ccm run`` daemons (cloud-node controller, the simulated cloud)
against the real control plane with ``--leader-elect-lease-duration=15s``,
``--leader-elect-renew-deadline=10s``, ``--leader-elect-retry-period=2s``. Per
run: wait for a leader, SIGKILL it, then measure (a) until the Lease names the
other daemon and (b) until a node created right after the kill is initialised
by it. The killed daemon is restarted as the next run's standby. Prints JSON;
with ``--markdown`` appends a table.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import signal
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from kube_ccm.runtime.client import ApiError, KubeClient
from kube_ccm.testing.binaries import ensure_binaries
from kube_ccm.testing.controlplane import ControlPlane
from kube_ccm.testing.daemon import DaemonProcess

LEASE = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/cloud-controller-manager"
TAINT = {"key": "node.cloudprovider.kubernetes.io/uninitialized", "effect": "NoSchedule"}
ARGS = (
    "--controllers=cloud-node",
    "--cluster-cidr=10.244.0.0/16",
    "--leader-elect-lease-duration=15s",
    "--leader-elect-renew-deadline=10s",
    "--leader-elect-retry-period=2s",
)


async def _holder(client: KubeClient) -> str:
    try:
        lease = await client.get(LEASE)
    except ApiError:
        return ""
    return str(lease["spec"].get("holderIdentity") or "")


async def _initialised(client: KubeClient, name: str) -> bool:
    node = await client.get(f"/api/v1/nodes/{name}")
    return TAINT["key"] not in [t["key"] for t in node["spec"].get("taints") or []]


async def _until(predicate: Callable[[], Awaitable[bool]], within: float = 120.0) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if await predicate():
            return
        await asyncio.sleep(0.02)
    raise TimeoutError("the cluster did not converge")


async def measure(plane: ControlPlane, runs: int, workdir: Path) -> list[dict[str, float]]:
    results = []
    async with KubeClient.from_kubeconfig(plane.kubeconfig) as client:
        daemons = [
            DaemonProcess(kubeconfig=plane.kubeconfig, workdir=workdir / f"d{i}", args=ARGS).start()
            for i in range(2)
        ]
        try:
            for run in range(runs):

                async def has_leader() -> bool:
                    return bool(await _holder(client))

                await _until(has_leader)
                identity = await _holder(client)
                leader = next(d for d in daemons if f"as {identity}" in d.log())
                await asyncio.sleep(3)  # the standby is in its retry loop, as in production
                leader.signal(signal.SIGKILL)
                killed = time.monotonic()
                leader.wait(timeout=10)
                node = f"failover-{run}-{int(time.time())}"
                await client.create(
                    "/api/v1/nodes", {"metadata": {"name": node}, "spec": {"taints": [TAINT]}}
                )

                async def taken_over(previous: str = identity) -> bool:
                    return (await _holder(client)) not in ("", previous)

                await _until(taken_over)
                lease_s = time.monotonic() - killed

                async def served(name: str = node) -> bool:
                    return await _initialised(client, name)

                await _until(served)
                results.append(
                    {"lease_s": round(lease_s, 2), "work_s": round(time.monotonic() - killed, 2)}
                )
                with contextlib.suppress(ApiError):
                    await client.delete(f"/api/v1/nodes/{node}")
                index = daemons.index(leader)
                daemons[index] = DaemonProcess(
                    kubeconfig=plane.kubeconfig, workdir=workdir / f"d{index}-{run}", args=ARGS
                ).start()
        finally:
            for daemon in daemons:
                daemon.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--markdown", type=Path, default=None)
    args = parser.parse_args()
    binaries = ensure_binaries()
    with ControlPlane(binaries=binaries) as plane, tempfile.TemporaryDirectory() as tmp:
        results = asyncio.run(measure(plane, args.runs, Path(tmp)))
    lease = [r["lease_s"] for r in results]
    work = [r["work_s"] for r in results]
    summary = {
        "benchmark": "failover",
        "runs": args.runs,
        "lease_duration_s": 15,
        "retry_period_s": 2,
        "lease_taken_s_median": statistics.median(lease),
        "lease_taken_s_all": lease,
        "node_initialised_s_median": statistics.median(work),
        "node_initialised_s_all": work,
        "kubernetes": binaries.versions.kubernetes,
    }
    print(json.dumps(summary, indent=2))
    if args.markdown is not None:
        today = datetime.date.today().isoformat()
        with args.markdown.open("a") as out:
            out.write(
                f"\n### Failover — {today} — lease 15 s / renew 10 s / retry 2 s\n\n"
                "| runs | kill → Lease taken (median) | all runs | kill → new node "
                "initialised by the new leader (median) | all runs |\n"
                "|---:|---:|---|---:|---|\n"
                f"| {args.runs} | {statistics.median(lease):.1f} s | "
                f"{', '.join(f'{v:.1f}' for v in lease)} | {statistics.median(work):.1f} s | "
                f"{', '.join(f'{v:.1f}' for v in work)} |\n"
            )


if __name__ == "__main__":
    main()
