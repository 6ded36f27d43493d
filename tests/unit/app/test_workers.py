"""--worker-processes: which worker runs what, shards of keys, merged metrics, the flag."""

from __future__ import annotations

import asyncio
import pickle

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kube_ccm.api import wellknown as wk
from kube_ccm.app.options.buildconfig import parse_options
from kube_ccm.app.options.config import DaemonConfig
from kube_ccm.app.options.pflag import OptionsError
from kube_ccm.app.workers import WorkerExitedError, WorkerPool, guard_readiness, plan_workers
from kube_ccm.runtime.metrics import Metrics, merge_families
from kube_ccm.runtime.ratelimit import ItemExponentialFailureRateLimiter
from kube_ccm.runtime.shard import WHOLE, Shard
from kube_ccm.runtime.workqueue import RateLimitingQueue

NODE, LIFECYCLE, SERVICE, ROUTE = (
    wk.CONTROLLER_CLOUD_NODE,
    wk.CONTROLLER_CLOUD_NODE_LIFECYCLE,
    wk.CONTROLLER_SERVICE_LB,
    wk.CONTROLLER_NODE_ROUTE,
)
KEYS = [f"node-{i:05d}" for i in range(1000)] + [f"default/lb-{i}" for i in range(500)]


def config(**changes: object) -> DaemonConfig:
    return DaemonConfig(cloud_provider="simulated", **changes)  # type: ignore[arg-type]


# -- shards -----------------------------------------------------------------------------


@pytest.mark.parametrize("count", [1, 2, 3, 16])
def test_every_key_belongs_to_exactly_one_shard(count: int) -> None:
    shards = [Shard(i, count) for i in range(count)]

    for key in KEYS:
        assert sum(shard.owns(key) for shard in shards) == 1


def test_shards_split_keys_evenly_enough_and_the_same_in_every_process() -> None:
    # CRC-32, not Python's per-process salted hash(): a pickled shard (as a worker
    # receives it) owns the same keys.
    halves = [sum(Shard(i, 2).owns(k) for k in KEYS) for i in range(2)]
    copy = pickle.loads(pickle.dumps(Shard(1, 2)))

    assert min(halves) > 0.4 * len(KEYS)
    assert [copy.owns(k) for k in KEYS] == [Shard(1, 2).owns(k) for k in KEYS]
    assert Shard(0, 2).owns("node-00000") is not Shard(1, 2).owns("node-00000")


def test_the_whole_owns_every_key_and_a_shard_must_exist() -> None:
    assert all(WHOLE.owns(k) for k in KEYS)
    with pytest.raises(ValueError, match="shard 2 of 2"):
        Shard(2, 2)


# -- the queue takes only its shard's keys ------------------------------------------------


async def test_a_sharded_queue_ignores_other_shards_keys_and_does_not_count_them() -> None:
    metrics = Metrics()
    shard = Shard(0, 2)
    queue: RateLimitingQueue[str] = RateLimitingQueue(
        "Nodes", ItemExponentialFailureRateLimiter(0.01, 0.08), metrics, owns=shard.owns
    )
    ours = [k for k in KEYS[:50] if shard.owns(k)]
    theirs = [k for k in KEYS[:50] if not shard.owns(k)]

    for key in KEYS[:50]:
        queue.add(key)
    for key in theirs:
        queue.add_after(key, 0.01)

    assert len(queue) == len(ours)
    assert metrics.sample("workqueue_adds_total", {"name": "Nodes"}) == len(ours)
    assert [await queue.get() for _ in ours] == ours
    assert not queue._waiting  # no timer for another shard's key


# -- which worker runs what ---------------------------------------------------------------


def test_sharded_controllers_split_their_syncs_and_the_rest_run_in_the_first_worker() -> None:
    plans = plan_workers(
        config(
            controllers=frozenset({NODE, LIFECYCLE, SERVICE, ROUTE}),
            concurrent_node_syncs=16,
            concurrent_service_syncs=5,
        ),
        2,
    )

    assert [p.index for p in plans] == [0, 1]
    assert plans[0].controllers == {NODE, LIFECYCLE, SERVICE, ROUTE}
    assert plans[1].controllers == {NODE, SERVICE}
    assert plans[0].shards == {NODE: Shard(0, 2), SERVICE: Shard(0, 2)}
    assert plans[1].shards == {NODE: Shard(1, 2), SERVICE: Shard(1, 2)}
    first, second = (
        p.config(config(concurrent_node_syncs=16, concurrent_service_syncs=5)) for p in plans
    )
    assert (first.concurrent_node_syncs, second.concurrent_node_syncs) == (8, 8)
    assert (first.concurrent_service_syncs, second.concurrent_service_syncs) == (3, 2)


def test_a_controller_gets_no_more_shards_than_syncs_and_an_idle_worker_is_not_started() -> None:
    # --concurrent-node-syncs=1 means one sync at a time in the whole daemon: one shard.
    plans = plan_workers(config(concurrent_node_syncs=1), 4)

    assert len(plans) == 1
    assert plans[0].controllers == {NODE, LIFECYCLE}
    assert plans[0].shards == {NODE: Shard(0, 1)}


def test_status_update_workers_are_split_with_the_shards() -> None:
    parent = config(concurrent_node_syncs=4, concurrent_node_status_updates=6)
    plans = plan_workers(parent, 3)

    assert [p.config(parent).concurrent_node_status_updates for p in plans] == [2, 2, 2]
    assert [p.config(parent).concurrent_node_syncs for p in plans] == [2, 1, 1]


def test_a_worker_runs_without_a_lease_a_port_or_webhooks_of_its_own() -> None:
    parent = config(
        concurrent_node_syncs=2,
        worker_processes=2,
        secure_port=10258,
        webhooks=frozenset({"x"}),
    )

    for plan in plan_workers(parent, 2):
        worker = plan.config(parent)
        assert not worker.leader_elect
        assert worker.secure_port == 0
        assert worker.webhooks == frozenset()
        assert worker.worker_processes == 1
        assert worker.kubeconfig == parent.kubeconfig


# -- one daemon on /metrics ---------------------------------------------------------------


def registry_with(adds: float, depth: float, created_offset: float = 0.0) -> Metrics:
    metrics = Metrics()
    metrics.counter("workqueue_adds_total", "adds", ("name",)).labels(name="Nodes").inc(adds)
    metrics.gauge("workqueue_depth", "depth", ("name",)).labels(name="Nodes").set(depth)
    metrics.histogram("workqueue_work_duration_seconds", "work", (0.1, 1.0), ("name",)).labels(
        name="Nodes"
    ).observe(0.5)
    return metrics


def samples(text: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text.decode())
        for s in family.samples
    }


async def test_the_parent_serves_its_own_and_its_workers_metrics_added_up() -> None:
    parent = Metrics()
    parent.counter("rest_client_requests_total", "requests", ("code",)).labels(code="200").inc(3)
    workers = [registry_with(600, 2), registry_with(400, 1)]
    for worker in workers:
        worker.counter("rest_client_requests_total", "requests", ("code",)).labels(code="200").inc(
            10
        )

    async def others() -> list[list[object]]:
        # As they cross the socket: pickled.
        return [pickle.loads(pickle.dumps(list(w.registry.collect()))) for w in workers]

    parent.others = others  # type: ignore[assignment]
    served = samples(await parent.served())

    for worker in workers:
        worker.gauge("running_managed_controllers", "runs", ("name",)).labels(name="x").set(1)
    served = samples(await parent.served())
    nodes = (("name", "Nodes"),)
    assert served["running_managed_controllers", (("name", "x"),)] == 1
    assert served["workqueue_adds_total", nodes] == 1000
    assert served["workqueue_depth", nodes] == 3
    assert served["workqueue_work_duration_seconds_count", nodes] == 2
    assert served["workqueue_work_duration_seconds_bucket", (("le", "1.0"), *nodes)] == 2
    assert served["rest_client_requests_total", (("code", "200"),)] == 23
    created = [
        v
        for (name, labels), v in samples(workers[0].exposition()).items()
        if name == "workqueue_adds_created"
    ]
    assert served["workqueue_adds_created", nodes] <= created[0]


def test_merging_keeps_each_family_once_and_the_earliest_created_time() -> None:
    first, second = registry_with(1, 0), registry_with(2, 0)
    merged = merge_families([list(first.registry.collect()), list(second.registry.collect())])

    names = [family.name for family in merged]
    assert len(names) == len(set(names))
    adds = next(f for f in merged if f.name == "workqueue_adds")
    created = [s.value for s in adds.samples if s.name.endswith("_created")]
    firsts = [
        s.value
        for m in (first, second)
        for f in m.registry.collect()
        if f.name == "workqueue_adds"
        for s in f.samples
        if s.name.endswith("_created")
    ]
    assert created == [min(firsts)]


async def test_without_workers_the_parent_serves_exactly_its_own_exposition() -> None:
    metrics = registry_with(5, 1)

    assert await metrics.served() == metrics.exposition()


# -- the flag -----------------------------------------------------------------------------


def test_the_flag_defaults_to_one_process_and_is_checked() -> None:
    base = ["--cloud-provider=simulated"]

    assert parse_options(base).worker_processes == 1
    assert parse_options([*base, "--worker-processes=3"]).worker_processes == 3
    with pytest.raises(OptionsError, match="--worker-processes must be 1"):
        parse_options([*base, "--worker-processes=0"])
    with pytest.raises(OptionsError, match="does not combine with --dry-run"):
        parse_options([*base, "--worker-processes=2", "--dry-run"])


async def test_with_no_controller_to_run_no_worker_starts_and_the_pool_is_ready() -> None:
    pool = WorkerPool(config(controllers=frozenset(), worker_processes=2), lambda: 0.0)
    task = asyncio.create_task(pool.run())
    await asyncio.wait_for(pool.synced.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert pool.plans == []


async def test_a_worker_dead_before_it_reads_its_start_ends_the_pool_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker killed while the parent still hands it its configuration (CI once
    killed one that early) is an exited worker, not a lost connection."""
    spawn = asyncio.create_subprocess_exec

    async def dies_at_once(*_: object, **kwargs: object) -> asyncio.subprocess.Process:
        process = await spawn("true", **kwargs)  # type: ignore[arg-type]
        await process.wait()
        return process

    monkeypatch.setattr("kube_ccm.app.workers.asyncio.create_subprocess_exec", dies_at_once)
    pool = WorkerPool(config(worker_processes=2), lambda: 0.0)
    with pytest.raises(WorkerExitedError, match=r"worker process 0 \(pid \d+, .*status 0"):
        await asyncio.wait_for(pool.run(), 10)


def test_the_deletion_guard_on_readyz_is_read_from_the_workers_metrics() -> None:
    """With --worker-processes the lifecycle controller runs in a worker: the parent's
    /readyz?verbose reads the guard's gauge from the workers' metric families."""
    idle, holding = Metrics(), Metrics()
    idle.gauge(wk.METRIC_NODE_DELETION_GUARD_HELD, "held").set(0)
    holding.gauge(wk.METRIC_NODE_DELETION_GUARD_HELD, "held").set(4)
    assert guard_readiness([list(idle.registry.collect())]) == (True, "")
    assert guard_readiness([[], list(holding.registry.collect())]) == (
        False,
        "tripped: 4 Node deletions held",
    )
