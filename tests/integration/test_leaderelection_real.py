"""Leader election on a real Lease: one leader at a time, takeover, and loss."""

from __future__ import annotations

import asyncio
import re

import pytest

from kube_ccm.runtime.client import KubeClient
from kube_ccm.runtime.leaderelection import (
    LeaderElectionConfig,
    LeaderElector,
    LeadershipLostError,
)
from kube_ccm.testing.controlplane import ControlPlane
from kube_ccm.testing.waiting import eventually

LEASE, RETRY = 2.0, 0.25


def fast(namespace: str, identity: str) -> LeaderElectionConfig:
    return LeaderElectionConfig(
        namespace=namespace,
        identity=identity,
        lease_duration=LEASE,
        renew_deadline=1.5,
        retry_period=RETRY,
    )


def elector(client: KubeClient, namespace: str, identity: str) -> LeaderElector:
    return LeaderElector(client, fast(namespace, identity))


async def test_one_leader_at_a_time_and_the_standby_takes_over_after_the_lease_expires(
    kube_controlplane: ControlPlane, kube_client: KubeClient, kube_namespace: str
) -> None:
    async with KubeClient.from_kubeconfig(kube_controlplane.kubeconfig) as other_client:
        a = elector(kube_client, kube_namespace, "host-a_1")
        b = elector(other_client, kube_namespace, "host-b_2")
        working: list[str] = []

        async def work(name: str) -> None:
            working.append(name)
            await asyncio.Event().wait()

        task_a = asyncio.create_task(a.run(lambda: work("a")))
        await eventually(lambda: working == ["a"], what="a leads")
        task_b = asyncio.create_task(b.run(lambda: work("b")))
        await asyncio.sleep(3 * LEASE)
        assert working == ["a"], "b must not lead while a renews"

        lease_path = (
            f"/apis/coordination.k8s.io/v1/namespaces/{kube_namespace}/leases/"
            "cloud-controller-manager"
        )
        lease = await kube_client.get(lease_path)
        assert lease["spec"]["holderIdentity"] == "host-a_1"
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", lease["spec"]["renewTime"])

        task_a.cancel()  # a dies without releasing (no voluntary release, as upstream)
        loop = asyncio.get_running_loop()
        stopped = loop.time()
        await eventually(lambda: working == ["a", "b"], within=10, what="b takes over")
        takeover = loop.time() - stopped
        assert takeover <= LEASE + 2 * RETRY + 1.0

        lease = await kube_client.get(lease_path)
        assert lease["spec"]["holderIdentity"] == "host-b_2"
        assert lease["spec"]["leaseTransitions"] == 1
        task_b.cancel()
        await asyncio.gather(task_a, task_b, return_exceptions=True)


async def test_a_leader_that_cannot_renew_stops_its_work_and_raises(
    kube_client: KubeClient, kube_namespace: str
) -> None:
    changes: list[bool] = []
    a = LeaderElector(
        kube_client,
        fast(kube_namespace, "host-a_1"),
        on_leader_change=changes.append,
    )
    cancelled = asyncio.Event()

    async def work() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()

    task = asyncio.create_task(a.run(work))
    await eventually(lambda: a.is_leader, what="a leads")

    # Someone else takes the lease over (e.g. after a long pause of this process).
    path = (
        f"/apis/coordination.k8s.io/v1/namespaces/{kube_namespace}/leases/cloud-controller-manager"
    )
    lease = await kube_client.get(path)
    lease["spec"]["holderIdentity"] = "intruder"
    await kube_client.replace(path, lease)

    with pytest.raises(LeadershipLostError, match="leaderelection lost"):
        async with asyncio.timeout(10):
            await task
    assert cancelled.is_set()
    assert changes == [True, False]
    assert not a.is_leader
