"""The simulated provider honours the contract and simulates a cloud's misbehaviour."""

from __future__ import annotations

import asyncio
import functools

import pytest

from kube_ccm.api.objects import Node, NodeSpec, ObjectMeta, Service, ServicePort, ServiceSpec
from kube_ccm.cloudprovider import (
    InstanceMetadata,
    InstanceNotFoundError,
    RetryError,
    TransientCloudError,
)
from kube_ccm.controllers.cloudcalls import CloudCallPolicy, CloudCalls
from kube_ccm.providers.simulated import SimulatedCloud, SimulatedConfig, factory
from kube_ccm.providers.simulated.config import (
    LoadBalancerConfig,
    RateLimit,
    SimulatedConfigError,
    load_config,
)
from kube_ccm.providers.simulated.provider import SimulatedCloudError
from kube_ccm.runtime.metrics import Metrics


def node(name: str, provider_id: str = "") -> Node:
    return Node(metadata=ObjectMeta(name=name), spec=NodeSpec(provider_id=provider_id))


def cloud(**overrides: object) -> SimulatedCloud:
    return SimulatedCloud(SimulatedConfig(state=":memory:", **overrides))  # type: ignore[arg-type]


async def test_metadata_for_an_unknown_node_creates_an_instance_once() -> None:
    sim = cloud(zones=("za", "zb"), region="r", instance_type="t")
    v2 = sim.instances_v2()
    assert v2 is not None

    first = await v2.instance_metadata(node("n1"))
    second = await v2.instance_metadata(node("n1"))

    assert first is not None
    assert first == second
    assert first.provider_id.startswith("simulated://i-")
    assert first.zone in ("za", "zb")
    assert (first.region, first.instance_type) == ("r", "t")
    assert [a.type for a in first.node_addresses] == ["InternalIP", "Hostname"]
    assert sim.state.sync.calls()["InstanceMetadata"]["count"] == 2


async def test_not_found_mode_reports_unknown_nodes_as_missing() -> None:
    sim = cloud(unknown_nodes="notFound")
    v2 = sim.instances_v2()
    assert v2 is not None
    with pytest.raises(InstanceNotFoundError):
        await v2.instance_metadata(node("ghost"))
    assert await v2.instance_exists(node("ghost")) is False


async def test_shutdown_and_terminated_instances() -> None:
    sim = cloud()
    sim.state.sync.add_instance("n1", zone="z", region="r", instance_type="t")
    v2 = sim.instances_v2()
    assert v2 is not None
    sim.state.sync.set_instance_state("n1", "shutdown")
    assert await v2.instance_exists(node("n1")) is True
    assert await v2.instance_shutdown(node("n1")) is True
    sim.state.sync.set_instance_state("n1", "terminated")
    assert await v2.instance_exists(node("n1")) is False


async def test_provider_id_is_looked_up_before_the_name() -> None:
    sim = cloud(unknown_nodes="notFound")
    inst = sim.state.sync.add_instance("other-name", zone="z", region="r", instance_type="t")
    v2 = sim.instances_v2()
    assert v2 is not None
    metadata = await v2.instance_metadata(node("n1", provider_id=f"simulated://{inst.id}"))
    assert metadata is not None
    assert metadata.provider_id == f"simulated://{inst.id}"


async def test_an_instance_belongs_only_to_the_node_it_was_made_for() -> None:
    """The approver's question: a providerID a Node carries is the node's own word; the
    instance's node name is the cloud's record."""
    sim = cloud(unknown_nodes="notFound")
    inst = sim.state.sync.add_instance("n2", zone="z", region="r", instance_type="t")
    v2 = sim.instances_v2()
    assert v2 is not None
    assert v2.authoritative is True
    metadata = await v2.instance_metadata(node("n1", provider_id=f"simulated://{inst.id}"))
    assert metadata is not None

    assert await v2.instance_belongs_to("n2", metadata) is True
    assert await v2.instance_belongs_to("n1", metadata) is False
    v1 = cloud(instances_api="v1", unknown_nodes="notFound")
    other = v1.state.sync.add_instance("n2", zone="z", region="r", instance_type="t")
    instances = v1.instances()
    assert instances is not None
    assert instances.authoritative is True
    assert await instances.instance_belongs_to(
        "n2", InstanceMetadata(provider_id=f"simulated://{other.id}")
    )
    assert not await instances.instance_belongs_to(
        "n1", InstanceMetadata(provider_id=f"simulated://{other.id}")
    )
    assert not await instances.instance_belongs_to("n2", InstanceMetadata(provider_id="aws:///x"))


async def test_v1_mode_hides_instances_v2_and_serves_v1_and_zones() -> None:
    sim = cloud(instances_api="v1")
    assert sim.instances_v2() is None
    v1, zones = sim.instances(), sim.zones()
    assert v1 is not None
    assert zones is not None
    instance_id = await v1.instance_id("n1")
    zone = await zones.get_zone_by_provider_id(f"simulated://{instance_id}")
    assert zone.region == "sim-region-1"


async def test_injected_faults_error_retry_and_hang() -> None:
    sim = cloud()
    v2 = sim.instances_v2()
    assert v2 is not None
    sim.state.sync.set_fault("InstanceMetadata", "error", remaining=1)
    with pytest.raises(SimulatedCloudError, match="injected"):
        await v2.instance_metadata(node("n1"))
    sim.state.sync.set_fault("InstanceMetadata", "retry", retry_after=7.0, remaining=1)
    with pytest.raises(RetryError) as retry:
        await v2.instance_metadata(node("n1"))
    assert retry.value.retry_after == 7.0
    sim.state.sync.set_fault("InstanceMetadata", "hang", remaining=1)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.2):
            await v2.instance_metadata(node("n1"))
    assert await v2.instance_metadata(node("n1")) is not None
    assert sim.state.sync.calls()["InstanceMetadata"] == {"count": 4, "errors": 2}


def _count_trips(sim: SimulatedCloud) -> list[int]:
    """Count the simulated cloud's trips to its database thread."""
    trips = [0]
    run = sim.state.run

    async def counted(fn):  # type: ignore[no-untyped-def]
        trips[0] += 1
        return await run(fn)

    sim.state.run = counted  # type: ignore[method-assign]
    return trips


async def test_without_latency_a_call_is_answered_without_the_database_thread() -> None:
    sim = cloud()
    v2, lb = sim.instances_v2(), sim.load_balancer()
    assert v2 is not None
    assert lb is not None
    trips = _count_trips(sim)
    await v2.instance_metadata(node("n1"))
    assert await v2.instance_exists(node("n1")) is True
    svc = Service(
        metadata=ObjectMeta(name="s", namespace="ns", uid="u"),
        spec=ServiceSpec(type="LoadBalancer", ports=(ServicePort(port=80, node_port=30080),)),
    )
    await lb.ensure_load_balancer("c", svc, [node("n1")])
    assert trips == [0]
    assert sim.state.sync.calls()["InstanceExists"]["count"] == 1

    slow = cloud(latency=0.001)
    v2 = slow.instances_v2()
    assert v2 is not None
    trips = _count_trips(slow)
    await v2.instance_metadata(node("n1"))
    assert trips == [2], "with latency: counted, then answered after the delay"


async def test_a_refused_or_faulted_call_without_latency_does_not_run_its_step() -> None:
    sim = cloud(unknown_nodes="create")
    v2 = sim.instances_v2()
    assert v2 is not None
    sim.state.sync.set_fault("InstanceMetadata", "error", remaining=1)
    with pytest.raises(SimulatedCloudError, match="injected"):
        await v2.instance_metadata(node("n1"))
    assert sim.state.sync.instance_by_node("n1") is None  # the step (auto-create) never ran
    assert sim.state.sync.calls()["InstanceMetadata"] == {"count": 1, "errors": 1}


async def test_with_latency_a_call_reads_the_cloud_after_the_delay() -> None:
    sim = cloud(latency=0.2, unknown_nodes="notFound")
    v2 = sim.instances_v2()
    assert v2 is not None
    sim.state.sync.add_instance("n1", zone="z", region="r", instance_type="t")
    call = asyncio.ensure_future(v2.instance_shutdown(node("n1")))
    await asyncio.sleep(0.05)
    instance = sim.state.sync.instance_by_node("n1")
    assert instance is not None
    sim.state.sync.set_instance_state(instance.id, "shutdown")
    assert await call is True


async def test_the_cloud_quota_refuses_calls_over_the_rate() -> None:
    sim = cloud(rate_limit=RateLimit(qps=1, burst=2))
    v2 = sim.instances_v2()
    assert v2 is not None
    await v2.instance_exists(node("a"))
    await v2.instance_exists(node("b"))
    with pytest.raises(SimulatedCloudError, match="rate limit exceeded"):
        await v2.instance_exists(node("c"))


async def test_latency_is_added_to_every_call() -> None:
    sim = cloud(latency=0.05)
    v2 = sim.instances_v2()
    assert v2 is not None
    loop = asyncio.get_running_loop()
    started = loop.time()
    await v2.instance_exists(node("a"))
    assert loop.time() - started >= 0.05


async def _outcomes(sim: SimulatedCloud, calls: int) -> list[bool]:
    v2 = sim.instances_v2()
    assert v2 is not None
    outcomes = []
    for i in range(calls):
        try:
            await v2.instance_exists(node(f"n{i}"))
            outcomes.append(True)
        except SimulatedCloudError:
            outcomes.append(False)
    return outcomes


async def test_a_random_seed_makes_the_random_failures_repeatable() -> None:
    first = await _outcomes(cloud(failure_rate=0.5, random_seed=7), 40)
    again = await _outcomes(cloud(failure_rate=0.5, random_seed=7), 40)
    other = await _outcomes(cloud(failure_rate=0.5, random_seed=8), 40)

    assert first == again
    assert first != other
    assert 5 < first.count(False) < 35


def _longest_failure_streak(outcomes: list[bool]) -> int:
    longest = current = 0
    for ok in outcomes:
        current = 0 if ok else current + 1
        longest = max(longest, current)
    return longest


async def test_max_failure_streak_bounds_the_failures_of_a_method_in_a_row() -> None:
    unbounded = await _outcomes(cloud(failure_rate=0.9, random_seed=7), 60)
    bounded = await _outcomes(cloud(failure_rate=0.9, random_seed=7, max_failure_streak=2), 60)

    assert _longest_failure_streak(unbounded) > 2
    assert _longest_failure_streak(bounded) == 2
    assert bounded.count(False) > 30, "still failing at random, most of the time"


def test_max_failure_streak_is_checked() -> None:
    with pytest.raises(SimulatedConfigError, match="maxFailureStreak"):
        load_config("state: ':memory:'\nmaxFailureStreak: -1")
    assert load_config("state: ':memory:'\nmaxFailureStreak: 3").max_failure_streak == 3


async def test_transient_random_failures_are_retried_by_the_cloud_call_boundary() -> None:
    sim = cloud(failure_rate=0.5, failure_kind="transient", random_seed=3)
    v2 = sim.instances_v2()
    assert v2 is not None
    errors: list[BaseException] = []
    for i in range(20):
        try:
            await v2.instance_exists(node(f"n{i}"))
        except TransientCloudError as exc:
            errors.append(exc)
    assert errors
    assert "simulated transient failure" in str(errors[0])

    calls = CloudCalls(
        "simulated", Metrics(), CloudCallPolicy(attempts=8, backoff_base=0.001, backoff_cap=0.001)
    )
    for name in (f"m{i}" for i in range(20)):
        assert await calls.run("InstanceExists", functools.partial(v2.instance_exists, node(name)))
    tried = sim.state.sync.calls()["InstanceExists"]
    assert tried["errors"] > 1


def test_the_failure_kind_is_checked() -> None:
    with pytest.raises(SimulatedConfigError, match="failureKind"):
        load_config('state: ":memory:"\nfailureKind: sometimes\n')


def service(name: str = "web", uid: str = "0f2d-11aa") -> Service:
    return Service(
        metadata=ObjectMeta(name=name, namespace="default", uid=uid),
        spec=ServiceSpec(type="LoadBalancer", ports=(ServicePort(port=80, node_port=30080),)),
    )


async def test_load_balancer_lifecycle_with_ips_from_the_pool() -> None:
    sim = cloud(load_balancer=LoadBalancerConfig(ip_pool=("198.51.100.0/30",)))
    lb = sim.load_balancer()
    assert lb is not None
    assert await lb.get_load_balancer("k", service()) is None

    status = await lb.ensure_load_balancer("k", service(), [node("n1")])
    assert status.ingress[0].ip == "198.51.100.1"
    assert status.ingress[0].ip_mode == "VIP"
    assert await lb.get_load_balancer("k", service()) == status

    await lb.update_load_balancer("k", service(), [node("n1"), node("n2")])
    [record] = sim.state.sync.load_balancers()
    assert record.nodes == ("n1", "n2")

    await lb.ensure_load_balancer_deleted("k", service())
    await lb.ensure_load_balancer_deleted("k", service())  # idempotent
    assert sim.state.sync.load_balancers() == []


async def test_without_backend_names_a_load_balancer_records_a_count_and_a_digest() -> None:
    sim = cloud(load_balancer=LoadBalancerConfig(ip_pool=("198.51.100.0/30",), backend_names=False))
    lb = sim.load_balancer()
    assert lb is not None
    await lb.ensure_load_balancer("k", service(), (node("n2"), node("n1")))
    [first] = sim.state.sync.load_balancers()
    await lb.update_load_balancer("k", service(), (node("n1"), node("n2")))
    [same] = sim.state.sync.load_balancers()
    await lb.update_load_balancer("k", service(), (node("n1"), node("n3")))
    [other] = sim.state.sync.load_balancers()

    assert len(first.nodes) == 1
    assert first.nodes[0].startswith("2 nodes, sha256 ")
    assert same.nodes == first.nodes  # the same set in another order
    assert other.nodes != first.nodes
    assert load_config(
        'state: ":memory:"\nloadBalancer: {backendNames: false}\n'
    ).load_balancer == (LoadBalancerConfig(backend_names=False))


async def test_each_load_balancer_records_the_node_list_it_was_given() -> None:
    """The node names are sorted once per node list the controller passes (the same
    tuple for every Service until the nodes change): a new tuple is seen at once, and
    an ensure that changes nothing leaves the record as it was."""
    sim = cloud(load_balancer=LoadBalancerConfig(ip_pool=("198.51.100.0/28",)))
    lb = sim.load_balancer()
    assert lb is not None
    first = (node("n2"), node("n1"))
    await lb.ensure_load_balancer("k", service("a", "u1"), first)
    await lb.ensure_load_balancer("k", service("b", "u2"), first)
    second = (node("n3"), node("n1"))
    await lb.ensure_load_balancer("k", service("a", "u1"), second)
    mutable = [node("n4")]
    await lb.ensure_load_balancer("k", service("b", "u2"), mutable)
    mutable.append(node("n5"))  # a list may change in place: never remembered
    await lb.update_load_balancer("k", service("b", "u2"), mutable)
    await lb.ensure_load_balancer("k", service("a", "u1"), second)  # unchanged
    nodes = {r.service: r.nodes for r in sim.state.sync.load_balancers()}
    assert nodes == {"default/a": ("n1", "n3"), "default/b": ("n4", "n5")}


async def test_an_exhausted_pool_is_a_clear_error_not_a_crash() -> None:
    sim = cloud(load_balancer=LoadBalancerConfig(ip_pool=("198.51.100.1/32",)))
    lb = sim.load_balancer()
    assert lb is not None
    await lb.ensure_load_balancer("k", service("a", "u1"), [node("n")])
    with pytest.raises(SimulatedCloudError, match="IP pool is exhausted"):
        await lb.ensure_load_balancer("k", service("b", "u2"), [node("n")])


async def test_hostname_mode_gives_a_hostname_and_no_ip() -> None:
    sim = cloud(load_balancer=LoadBalancerConfig(hostname_mode=True))
    lb = sim.load_balancer()
    assert lb is not None
    status = await lb.ensure_load_balancer("k", service(), [node("n")])
    assert status.ingress[0].hostname.endswith(".lb.simulated.example")
    assert status.ingress[0].ip == ""


def test_factory_without_config_gives_an_in_memory_cloud() -> None:
    sim = factory(None)
    assert sim.config.state == ":memory:"
    assert factory(b"state: ':memory:'\nregion: x\n").config.region == "x"
