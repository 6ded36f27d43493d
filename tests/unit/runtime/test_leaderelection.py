"""Lease renewal cost: client-go's optimistic renew (one update, no read) and its fallback."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import pytest

from kube_ccm.runtime.leaderelection import LeaderElectionConfig, LeaderElector
from kube_ccm.testing.fakeapi import FakeApiServer

LEASE = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/cloud-controller-manager"
CONFIG = LeaderElectionConfig(
    identity="me", lease_duration=1.0, renew_deadline=0.8, retry_period=0.05
)


async def lead_for(elector: LeaderElector, seconds: float) -> None:
    await elector.run(lambda: asyncio.sleep(seconds))


async def test_a_leader_renews_with_one_update_and_no_read() -> None:
    fake = FakeApiServer()
    await lead_for(LeaderElector(fake.client(), CONFIG), 0.6)
    renewals = fake.count("PUT", LEASE)
    assert renewals >= 5, "renewed every retry period"
    # One GET to find the lease missing at the start, none afterwards.
    assert fake.count("GET", LEASE) == 1
    lease = fake.object(LEASE)
    assert lease is not None
    assert lease["spec"]["holderIdentity"] == "me"


async def test_a_conflicting_renew_falls_back_to_reading_the_lease_and_keeps_leading() -> None:
    fake = FakeApiServer()
    elector = LeaderElector(fake.client(), CONFIG)
    leading = asyncio.create_task(lead_for(elector, 0.8))
    while not elector.is_leader:
        await asyncio.sleep(0.01)
    reads_before = fake.count("GET", LEASE)
    fake.conflict_next_write(LEASE)
    await leading  # returns normally: leadership was never lost
    assert fake.count("GET", LEASE) == reads_before + 1, "one read after the conflict"
    lease = fake.object(LEASE)
    assert lease is not None
    assert lease["spec"]["holderIdentity"] == "me"


async def test_a_lease_taken_over_is_not_renewed_blindly() -> None:
    """Another holder wrote the Lease: the optimistic update conflicts, the read shows
    the other holder, and this elector stops leading instead of overwriting it."""
    fake = FakeApiServer()
    elector = LeaderElector(fake.client(), CONFIG)
    leading = asyncio.create_task(lead_for(elector, 5.0))
    while not elector.is_leader:
        await asyncio.sleep(0.01)
    client = fake.client()
    lease = await client.get(LEASE)
    lease["spec"]["holderIdentity"] = "other"
    await client.replace(LEASE, lease)
    results = await asyncio.gather(leading, return_exceptions=True)
    assert isinstance(results[0], Exception), "leadership lost"
    final = fake.object(LEASE)
    assert final is not None
    assert final["spec"]["holderIdentity"] == "other"


async def test_the_lease_is_in_doubt_once_a_renewal_is_older_than_the_renew_deadline() -> None:
    """A leader stopped (SIGSTOP, a blocked loop) for longer than the renew deadline
    wakes up with its lease in doubt before its renew loop has run again."""
    fake = FakeApiServer()
    elector = LeaderElector(fake.client(), CONFIG)
    assert elector.lease_in_doubt() == "this replica does not hold the leader lease"
    leading = asyncio.create_task(lead_for(elector, 5.0))
    while not elector.is_leader:
        await asyncio.sleep(0.01)
    assert elector.lease_in_doubt() is None
    assert elector.lease_collection_path == LEASE.rsplit("/", 1)[0]

    time.sleep(CONFIG.renew_deadline + 0.05)  # noqa: ASYNC251 (the whole process stops)

    reason = elector.lease_in_doubt()
    assert reason is not None
    assert "more than the renew deadline (0.8 s)" in reason
    leading.cancel()
    await asyncio.gather(leading, return_exceptions=True)


async def test_an_expired_lease_of_another_holder_is_taken_over_keeping_its_other_fields() -> None:
    """The takeover is a PUT of the Lease as read: labels, annotations, owner references
    and spec fields outside the record (strategy) survive it and every renewal."""
    fake = FakeApiServer()
    fake.put_object(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": "cloud-controller-manager",
                "namespace": "kube-system",
                "labels": {"team": "infra"},
                "annotations": {"note": "keep"},
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Namespace", "name": "kube-system", "uid": "u"}
                ],
            },
            "spec": {
                "holderIdentity": "old",
                "leaseDurationSeconds": 1,
                "acquireTime": "2020-01-01T00:00:00.000000Z",
                "renewTime": "2020-01-01T00:00:00.000000Z",
                "leaseTransitions": 3,
                "strategy": "OldestEmulationVersion",
            },
        }
    )
    await lead_for(LeaderElector(fake.client(), CONFIG), 0.3)  # waits out the old holder
    lease = fake.object(LEASE)
    assert lease is not None
    assert lease["spec"]["holderIdentity"] == "me"
    assert lease["spec"]["leaseTransitions"] == 4
    assert lease["spec"]["strategy"] == "OldestEmulationVersion"
    assert lease["metadata"]["labels"] == {"team": "infra"}
    assert lease["metadata"]["annotations"] == {"note": "keep"}
    assert lease["metadata"]["ownerReferences"][0]["name"] == "kube-system"
    assert fake.count("PUT", LEASE) >= 2, "taken over, then renewed"


async def test_a_refused_lease_says_which_rbac_to_apply(caplog: pytest.LogCaptureFixture) -> None:
    """A CCM without its RBAC waits for the lease, logging what to grant; nothing else runs."""
    fake = FakeApiServer()
    fake.fail_next("*", LEASE, status=403, reason="Forbidden", count=1000)
    elector = LeaderElector(fake.client(), CONFIG)
    worked = False

    async def work() -> None:
        nonlocal worked
        worked = True

    with caplog.at_level(logging.WARNING, logger="kube_ccm.runtime.leaderelection"):
        running = asyncio.create_task(elector.run(work))
        await asyncio.sleep(0.3)
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
    assert not worked
    assert not elector.is_leader
    messages = [r.getMessage() for r in caplog.records]
    assert messages, "the refusal was logged"
    assert all("403" in m for m in messages), messages
    assert "leases.coordination.k8s.io in kube-system" in messages[0]
    assert "deploy/rbac.yaml" in messages[0]
    assert "rbac.create=true" in messages[0]
