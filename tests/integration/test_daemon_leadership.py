"""High availability on the real apiserver: two daemons, one Lease, one writer (§8.5).

Each daemon has its own ServiceAccount token (so the apiserver's audit log tells
their requests apart by credential ID) and its own simulated cloud (so its call
counters show whether it ever worked). The leader is killed with SIGKILL: the
standby must take the Lease within lease duration + retry period, and at no time
may both have written.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from kube_ccm.runtime.client import ApiError, KubeClient
from kube_ccm.testbed.rbac import (
    CCM_SERVICE_ACCOUNT_USER,
    install_service_account,
    now_timestamp,
    requests,
)
from kube_ccm.testing.controlplane import ControlPlane
from kube_ccm.testing.daemon import DaemonProcess
from kube_ccm.testing.pytest_plugin import Cleanup
from kube_ccm.testing.waiting import eventually

LEASE = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/cloud-controller-manager"
MIGRATION_LEASE = (
    "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/cloud-provider-extraction-migration"
)
LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 4.0, 3.0, 1.0
ELECTION = (
    f"--leader-elect-lease-duration={LEASE_DURATION:g}s",
    f"--leader-elect-renew-deadline={RENEW_DEADLINE:g}s",
    f"--leader-elect-retry-period={RETRY_PERIOD:g}s",
)
UNINITIALIZED = {
    "key": "node.cloudprovider.kubernetes.io/uninitialized",
    "value": "true",
    "effect": "NoSchedule",
}
WRITES = {"create", "update", "patch", "delete"}


def credential_id(kubeconfig: Path) -> str:
    """The audit log's ``authentication.kubernetes.io/credential-id`` of a token."""
    import base64  # noqa: PLC0415
    import json  # noqa: PLC0415

    token = yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]["token"]
    payload = token.split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return f"JTI={claims['jti']}"


def writer_of(event: dict[str, Any]) -> str:
    extra = event["user"].get("extra") or {}
    return str((extra.get("authentication.kubernetes.io/credential-id") or [""])[0])


def controller_write(event: dict[str, Any]) -> bool:
    """A write made by a controller (not the Lease, not an Event)."""
    resource = (event.get("objectRef") or {}).get("resource", "")
    return event["verb"] in WRITES and resource not in ("leases", "events")


async def holder(client: KubeClient, path: str = LEASE) -> str:
    try:
        lease = await client.get(path)
    except ApiError as exc:
        if exc.not_found:
            return ""
        raise
    return str(lease["spec"].get("holderIdentity") or "")


async def create_tainted_node(client: KubeClient, cleanup: Cleanup, name: str) -> None:
    cleanup.add(f"/api/v1/nodes/{name}")
    await client.create(
        "/api/v1/nodes", {"metadata": {"name": name}, "spec": {"taints": [UNINITIALIZED]}}
    )


async def initialised(client: KubeClient, name: str) -> bool:
    node = await client.get(f"/api/v1/nodes/{name}")
    return UNINITIALIZED["key"] not in [t["key"] for t in node["spec"].get("taints") or []]


async def test_one_active_daemon_and_the_standby_takes_over_after_kill_9(
    *,
    kube_controlplane: ControlPlane,
    ccm_kubeconfig: Path,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    del ccm_kubeconfig  # installs the shipped RBAC; each daemon gets its own token below
    with contextlib.suppress(ApiError):
        await kube_client.delete(LEASE)  # not held by an earlier test's daemon
    since = now_timestamp()
    daemons: dict[str, DaemonProcess] = {}
    credentials: dict[str, str] = {}
    for name in ("a", "b"):
        kubeconfig = await install_service_account(
            kube_controlplane,
            [],
            "kube-system",
            "cloud-controller-manager",
            kubeconfig=tmp_path / f"{name}.kubeconfig",
        )
        credentials[name] = credential_id(kubeconfig)
        daemons[name] = DaemonProcess(
            kubeconfig=kubeconfig,
            workdir=tmp_path / name,
            args=[*ELECTION, "--controllers=cloud-node", "--cluster-cidr=10.244.0.0/16"],
        ).start()
    try:

        async def has_leader() -> bool:
            return bool(await holder(kube_client))

        await eventually(has_leader, within=60, what="a leader")
        identity = await holder(kube_client)

        def leaders() -> list[str]:
            return [n for n, d in daemons.items() if f"as {identity}" in d.log()]

        # The Lease can be written before the winner's log line is flushed (a loaded CI).
        await eventually(lambda: bool(leaders()), within=10, what=f"a log line naming {identity}")
        [leader] = leaders()
        standby = "b" if leader == "a" else "a"
        first = unique_name("node")
        await create_tainted_node(kube_client, kube_cleanup, first)
        await eventually(lambda: initialised(kube_client, first), within=60, what="leader works")
        await asyncio.sleep(2 * RETRY_PERIOD)  # the standby keeps trying meanwhile
        assert daemons[standby].cloud.calls() == {}, "the standby called the cloud"
        assert await holder(kube_client) == identity

        loop = asyncio.get_running_loop()
        daemons[leader].signal(signal.SIGKILL)
        killed_at = loop.time()
        daemons[leader].wait(timeout=10)
        after = unique_name("node")
        await create_tainted_node(kube_client, kube_cleanup, after)

        async def taken_over() -> bool:
            return (await holder(kube_client)) not in ("", identity)

        await eventually(taken_over, within=60, interval=0.05, what="the standby takes over")
        takeover = loop.time() - killed_at
        # The protocol's bound (the lease must expire, then one retry), plus slack for
        # two processes and an apiserver sharing 2 cores: a correctness check, not speed.
        assert takeover <= LEASE_DURATION + RETRY_PERIOD + 3.0, takeover
        await eventually(lambda: initialised(kube_client, after), within=60, what="new leader")
        assert daemons[standby].cloud.calls()["InstanceMetadata"]["count"] >= 1
    finally:
        for daemon in daemons.values():
            daemon.stop()
    writes = [
        e
        for e in requests(kube_controlplane, CCM_SERVICE_ACCOUNT_USER, since)
        if controller_write(e)
    ]
    by_leader = [
        e["requestReceivedTimestamp"] for e in writes if writer_of(e) == credentials[leader]
    ]
    by_standby = [
        e["requestReceivedTimestamp"] for e in writes if writer_of(e) == credentials[standby]
    ]
    assert by_leader, "the first leader wrote nothing"
    assert by_standby, "the new leader wrote nothing"
    assert max(by_leader) < min(by_standby), "two daemons wrote at the same time"
    assert {writer_of(e) for e in writes} <= set(credentials.values())


async def test_leader_migration_runs_migrated_controllers_under_the_second_lease(
    *,
    ccm_kubeconfig: Path,
    kube_client: KubeClient,
    tmp_path: Path,
) -> None:
    for path in (LEASE, MIGRATION_LEASE):
        with contextlib.suppress(ApiError):
            await kube_client.delete(path)
    config = tmp_path / "migration.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "controllermanager.config.k8s.io/v1",
                "kind": "LeaderMigrationConfiguration",
                "leaderName": "cloud-provider-extraction-migration",
                "resourceLock": "leases",
                "controllerLeaders": [
                    {"name": "cloud-node-lifecycle-controller", "component": "*"},
                    {"name": "node-route-controller", "component": "kube-controller-manager"},
                ],
            }
        )
    )
    ccm = DaemonProcess(
        kubeconfig=ccm_kubeconfig,
        workdir=tmp_path / "daemon",
        args=[
            *ELECTION,
            "--controllers=cloud-node,cloud-node-lifecycle,route",
            "--cluster-cidr=10.244.0.0/16",
            "--enable-leader-migration",
            f"--leader-migration-config={config}",
        ],
    ).start()
    try:
        ccm.wait_for_log("Started cloud-node-lifecycle-controller", timeout=60)
        main, migration = await holder(kube_client), await holder(kube_client, MIGRATION_LEASE)
        assert main
        assert migration == main, "one identity holds both locks"
        log = ccm.log()
        # The route controller belongs to kube-controller-manager during the migration.
        assert "Started node-route-controller" not in log
        assert "node-route-controller is run by kube-controller-manager" in log
        # Main-lock controllers start first, the migrated one after the second lock.
        assert log.index("Started cloud-node-controller") < log.index(
            "successfully acquired lease kube-system/cloud-provider-extraction-migration"
        )
    finally:
        assert ccm.stop() == 0


async def test_losing_the_lease_is_one_clear_line_and_exit_1_not_a_crash(
    *,
    ccm_kubeconfig: Path,
    kube_controlplane: ControlPlane,
    kube_client: KubeClient,
    tmp_path: Path,
) -> None:
    """Another holder takes the Lease: the daemon stops renewing within the renew
    deadline, logs upstream's "leaderelection lost" once, and exits 1, with no
    traceback (every failover would otherwise fire crash alerts)."""
    path = LEASE  # the shipped RBAC grants this Lease name only
    ccm = DaemonProcess(
        kubeconfig=ccm_kubeconfig,
        workdir=tmp_path / "daemon",
        args=[*ELECTION, "--controllers=cloud-node"],
    ).start()
    try:
        ccm.wait_for_log("Started cloud-node-controller")
        lease = await kube_client.get(path)
        lease["spec"].update(holderIdentity="someone-else", leaseDurationSeconds=60)
        lease["spec"]["renewTime"] = lease["spec"]["acquireTime"] = now_micro()
        await kube_client.replace(path, lease)
        assert ccm.wait(timeout=30) == 1
    finally:
        ccm.stop()
        with contextlib.suppress(ApiError):  # a stolen Lease would hold off later tests
            await kube_client.delete(path)
    log = ccm.log()
    assert "leaderelection lost" in log
    assert "closed the cloud provider" in log  # aclose() on leader loss too
    assert "Traceback" not in log
    errors = [line for line in log.splitlines() if line.startswith("E")]
    assert len(errors) <= 2, errors  # the elector's line and the exit reason


def now_micro() -> str:
    import datetime  # noqa: PLC0415

    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
