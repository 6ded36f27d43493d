"""The route controller in the daemon, on the real apiserver, with the simulated cloud."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kube_ccm.runtime.client import KubeClient
from kube_ccm.testing.controlplane import ControlPlane
from kube_ccm.testing.daemon import DaemonProcess
from kube_ccm.testing.pytest_plugin import Cleanup
from kube_ccm.testing.waiting import eventually

ROUTE_DAEMON = (
    "--leader-elect=false",
    "--controllers=route",
    "--cluster-cidr=10.244.0.0/16",
    "--route-reconciliation-period=500ms",
)


def route_daemon(kubeconfig: Path, tmp_path: Path, *extra: str) -> DaemonProcess:
    """The daemon with only the route controller, a pass every 500 ms."""
    return DaemonProcess(
        kubeconfig=kubeconfig, workdir=tmp_path / "daemon", args=[*ROUTE_DAEMON, *extra]
    ).start()


async def add_node(
    ccm: DaemonProcess, client: KubeClient, cleanup: Cleanup, name: str, cidr: str
) -> None:
    """A Node with pod CIDR ``cidr`` and its instance in the simulated cloud."""
    ccm.cloud.add_instance(name, zone="z", region="r", instance_type="t")
    cleanup.add(f"/api/v1/nodes/{name}")
    await client.create(
        "/api/v1/nodes",
        {"metadata": {"name": name}, "spec": {"podCIDR": cidr, "podCIDRs": [cidr]}},
    )


async def test_pod_cidrs_get_routes_and_the_node_network_becomes_available(
    *,
    ccm_kubeconfig: Path,
    kube_controlplane: ControlPlane,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    ccm = route_daemon(ccm_kubeconfig, tmp_path)
    try:
        name = unique_name("node")
        await add_node(ccm, kube_client, kube_cleanup, name, "10.244.3.0/24")

        def route_targets() -> set[tuple[str, str]]:
            return {(r.target_node, r.destination_cidr) for r in ccm.cloud.routes()}

        await eventually(
            lambda: (name, "10.244.3.0/24") in route_targets(), what="a route for the pod CIDR"
        )

        async def network_available() -> bool:
            node: dict[str, Any] = await kube_client.get(f"/api/v1/nodes/{name}")
            return any(
                c["type"] == "NetworkUnavailable"
                and c["status"] == "False"
                and c["reason"] == "RouteCreated"
                for c in node["status"].get("conditions") or []
            )

        await eventually(network_available, what="NetworkUnavailable=False/RouteCreated")

        await kube_client.delete(f"/api/v1/nodes/{name}")
        await eventually(
            lambda: all(target != name for target, _ in route_targets()),
            what="the route removed with its node",
        )
    finally:
        assert ccm.stop() == 0


def test_routes_without_a_cluster_cidr_refuse_to_start(
    ccm_kubeconfig: Path, kube_controlplane: ControlPlane, tmp_path: Path
) -> None:
    ccm = DaemonProcess(
        kubeconfig=ccm_kubeconfig,
        workdir=tmp_path / "daemon",
        args=["--leader-elect=false", "--controllers=route"],
    ).start()
    assert ccm.wait(timeout=60) == 1
    assert "--cluster-cidr is required" in ccm.log()
    assert "--configure-cloud-routes=false" in ccm.log()
    ccm.stop()


async def test_a_ready_nodes_blackhole_route_is_kept_not_churned(
    *,
    ccm_kubeconfig: Path,
    kube_controlplane: ControlPlane,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    """The instance behind a Ready node is terminated: its route becomes a blackhole.
    It must not be deleted and re-created on every pass; one Warning says why."""
    ccm = route_daemon(ccm_kubeconfig, tmp_path)
    try:
        name = unique_name("node")
        cidr = "10.244.4.0/24"
        await add_node(ccm, kube_client, kube_cleanup, name, cidr)
        await eventually(
            lambda: any(r.target_node == name for r in ccm.cloud.routes()), what="the route"
        )
        ccm.cloud.set_instance_state(name, "terminated")

        async def warned() -> bool:
            listed = await kube_client.get(
                "/api/v1/namespaces/default/events",
                {"fieldSelector": f"involvedObject.name={name}"},
            )
            return any(e["reason"] == "RouteBlackholed" for e in listed["items"])

        await eventually(warned, what="a RouteBlackholed warning")
        ccm.cloud.reset_calls()
        await asyncio.sleep(3)  # six passes
        calls = ccm.cloud.calls()
        assert calls["ListRoutes"]["count"] >= 4
        assert "CreateRoute" not in calls
        assert "DeleteRoute" not in calls
        assert [(r.target_node, r.destination_cidr) for r in ccm.cloud.routes()] == [(name, cidr)]
    finally:
        assert ccm.stop() == 0


async def test_watch_based_routes_follow_node_events_at_most_once_per_10s(
    *,
    ccm_kubeconfig: Path,
    kube_controlplane: ControlPlane,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    """The gate on: a pass when a Node comes, none while nothing changes (the periodic
    period does not apply), and one more pass, not six, for six Nodes added at once."""
    ccm = route_daemon(
        ccm_kubeconfig,
        tmp_path,
        "--feature-gates=CloudControllerManagerWatchBasedRoutesReconciliation=true",
    )

    def route_targets() -> set[tuple[str, str]]:
        return {(r.target_node, r.destination_cidr) for r in ccm.cloud.routes()}

    def passes() -> int:
        return int(ccm.cloud.calls().get("ListRoutes", {}).get("count", 0))

    try:
        first = unique_name("node")
        await add_node(ccm, kube_client, kube_cleanup, first, "10.244.20.0/24")
        await eventually(
            lambda: (first, "10.244.20.0/24") in route_targets(),
            what="a route for the first node",
        )
        await asyncio.sleep(10)  # the bucket is full again: the next event runs at once
        ccm.cloud.reset_calls()
        await asyncio.sleep(12)  # 24 periods of 500 ms, and more than the 10 s pace
        assert passes() == 0, "no pass while no Node changes"

        names = [unique_name("burst") for _ in range(6)]
        for i, name in enumerate(names):
            await add_node(ccm, kube_client, kube_cleanup, name, f"10.244.{30 + i}.0/24")
            await asyncio.sleep(0.4)
        wanted = {(name, f"10.244.{30 + i}.0/24") for i, name in enumerate(names)}
        await eventually(lambda: wanted <= route_targets(), what="routes for the six nodes")
        await asyncio.sleep(2)
        assert passes() == 2, "one pass at the first add, one for the rest of the burst"
    finally:
        assert ccm.stop() == 0


async def test_a_refused_pod_cidr_is_one_event_with_a_count_and_one_log_warning(
    *,
    ccm_kubeconfig: Path,
    kube_controlplane: ControlPlane,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    """Issue 38: a refusal was logged as a warning on every pass. Now its Event is
    recorded every pass (one Event object, its count growing, as upstream's repeated
    FailedToCreateRoute), its warning logged once per change of the refusal."""
    ccm = route_daemon(ccm_kubeconfig, tmp_path)
    try:
        name = unique_name("node")
        outside = "192.168.77.0/24"
        await add_node(ccm, kube_client, kube_cleanup, name, outside)

        async def refusals() -> list[dict[str, Any]]:
            listed = await kube_client.get(
                "/api/v1/namespaces/default/events",
                {"fieldSelector": f"involvedObject.name={name},reason=FailedToCreateRoute"},
            )
            items: list[dict[str, Any]] = listed["items"]
            return items

        async def ten_passes() -> bool:
            return sum(int(e.get("count", 1)) for e in await refusals()) >= 10

        await eventually(ten_passes, within=120, what="the refusal recorded on ten passes")
        [event] = await refusals()
        assert f"pod CIDR {outside} of node {name} is outside" in event["message"]

        def warned(cidr: str, node: str = name) -> list[str]:
            return [
                line
                for line in ccm.log().splitlines()
                if line.startswith("W") and f"pod CIDR {cidr} of node {node}" in line
            ]

        assert len(warned(outside)) == 1, warned(outside)

        # Another Node's refusal is its own: logged once too (spec.podCIDRs cannot change).
        second = unique_name("node")
        again = "192.168.78.0/24"
        await add_node(ccm, kube_client, kube_cleanup, second, again)

        async def new_refusal_passes() -> bool:
            listed = await kube_client.get(
                "/api/v1/namespaces/default/events",
                {"fieldSelector": f"involvedObject.name={second},reason=FailedToCreateRoute"},
            )
            return sum(int(e.get("count", 1)) for e in listed["items"]) >= 5

        await eventually(new_refusal_passes, within=120, what="the new refusal on five passes")
        assert len(warned(again, second)) == 1, warned(again, second)
        assert len(warned(outside)) == 1
        assert ccm.cloud.routes() == []
    finally:
        assert ccm.stop() == 0
