"""The simulated cloud's state file: seeded, changed and inspected from outside."""

from __future__ import annotations

from pathlib import Path

import pytest

from kube_ccm.providers.simulated.state import AsyncCloudState, CloudState, StateError


def test_state_survives_reopening_the_file(tmp_path: Path) -> None:
    path = tmp_path / "cloud.db"
    first = CloudState(path)
    created = first.add_instance("node-a", zone="z1", region="r1", instance_type="sim.small")
    first.close()

    again = CloudState(path)
    assert again.instance_by_node("node-a") == created
    assert created.addresses[0][0] == "InternalIP"
    assert ("Hostname", "node-a") in created.addresses


def test_instance_state_changes_by_id_or_node_name() -> None:
    state = CloudState(":memory:")
    inst = state.add_instance("node-a", zone="z", region="r", instance_type="t")
    assert state.set_instance_state("node-a", "shutdown").state == "shutdown"
    assert state.set_instance_state(inst.id, "terminated").state == "terminated"
    with pytest.raises(StateError, match="no instance"):
        state.set_instance_state("nope", "running")


def test_instance_addresses_are_replaced_in_the_order_given() -> None:
    state = CloudState(":memory:")
    inst = state.add_instance("node-a", zone="z", region="r", instance_type="t")
    wanted = (("InternalIP", "fd00::a"), ("InternalIP", "10.0.0.1"), ("Hostname", "node-a"))
    assert state.set_instance_addresses("node-a", wanted).addresses == wanted
    assert state.instance_by_id(inst.id) == state.instance_by_node("node-a")
    assert state.set_instance_addresses(inst.id, ()).addresses == ()
    with pytest.raises(StateError, match="no instance"):
        state.set_instance_addresses("nope", wanted)


def test_duplicate_node_name_is_a_clear_error() -> None:
    state = CloudState(":memory:")
    state.add_instance("node-a", zone="z", region="r", instance_type="t")
    with pytest.raises(StateError, match="already exists"):
        state.add_instance("node-a", zone="z", region="r", instance_type="t")


def test_a_new_instance_never_gets_the_internal_ip_of_one_still_there() -> None:
    state = CloudState(":memory:")
    a, b, c = (
        state.add_instance(n, zone="z", region="r", instance_type="t", labels={"k": n})
        for n in ("a", "b", "c")
    )
    assert [i.addresses[0][1] for i in (a, b, c)] == ["10.128.0.10", "10.128.0.11", "10.128.0.12"]
    assert state.instance_by_node("a") == a  # what add_instance returns is what is stored
    state.delete_instance("a")
    d = state.add_instance("d", zone="z", region="r", instance_type="t")
    assert d.addresses[0][1] not in {b.addresses[0][1], c.addresses[0][1]}


def test_an_ip_pool_cidr_is_seeded_once_and_a_new_one_is_added(tmp_path: Path) -> None:
    path = tmp_path / "cloud.db"
    first = CloudState(path)
    assert first.seed_ip_pool(["198.51.100.0/29"]) == 6
    first.close()
    again = CloudState(path)
    assert again.seed_ip_pool(["198.51.100.0/29"]) == 6
    assert again.seed_ip_pool(["198.51.100.0/29", "203.0.113.0/30"]) == 8


def test_load_balancers_take_ips_from_the_pool_and_give_them_back() -> None:
    state = CloudState(":memory:")
    assert state.seed_ip_pool(["203.0.113.0/30"]) == 2  # two usable hosts
    common = {"cluster": "k", "ports": [], "nodes": [], "source_ranges": []}
    one = state.upsert_load_balancer(name="lb1", service="ns/a", service_uid="u1", **common)  # type: ignore[arg-type]
    two = state.upsert_load_balancer(name="lb2", service="ns/b", service_uid="u2", **common)  # type: ignore[arg-type]
    assert {one.ip, two.ip} == {"203.0.113.1", "203.0.113.2"}

    with pytest.raises(StateError, match="IP pool is exhausted"):
        state.upsert_load_balancer(name="lb3", service="ns/c", service_uid="u3", **common)  # type: ignore[arg-type]
    assert state.load_balancer("lb3") is None  # nothing half-created

    state.delete_load_balancer("lb1")
    three = state.upsert_load_balancer(name="lb3", service="ns/c", service_uid="u3", **common)  # type: ignore[arg-type]
    assert three.ip == one.ip


def test_updating_a_load_balancer_keeps_its_ip() -> None:
    state = CloudState(":memory:")
    state.seed_ip_pool(["198.51.100.0/29"])
    kwargs = {"cluster": "k", "service": "ns/a", "service_uid": "u", "source_ranges": []}
    first = state.upsert_load_balancer(name="lb", ports=[], nodes=["a"], **kwargs)  # type: ignore[arg-type]
    second = state.upsert_load_balancer(
        name="lb",
        ports=[{"port": 80}],
        nodes=["a", "b"],
        **kwargs,  # type: ignore[arg-type]
    )
    assert second.ip == first.ip
    assert second.nodes == ("a", "b")


def test_a_requested_ip_is_honoured_when_free_in_the_pool_and_refused_otherwise() -> None:
    state = CloudState(":memory:")
    state.seed_ip_pool(["198.51.100.0/29"])  # .1 to .6

    def upsert(name: str, ip: str | None) -> str | None:
        return state.upsert_load_balancer(
            name=name,
            cluster="k",
            service=f"ns/{name}",
            service_uid=name,
            ports=[],
            nodes=[],
            source_ranges=[],
            requested_ip=ip,
        ).ip

    assert upsert("a", "198.51.100.5") == "198.51.100.5"
    with pytest.raises(StateError, match=r"198\.51\.100\.5 is already used by load balancer a"):
        upsert("b", "198.51.100.5")
    with pytest.raises(StateError, match=r"10\.0\.0\.1 is not in the simulated cloud's IP pool"):
        upsert("b", "10.0.0.1")
    assert state.load_balancer("b") is None, "nothing half-created"
    assert upsert("b", None) == "198.51.100.1"

    assert upsert("a", "198.51.100.6") == "198.51.100.6", "moved to the new request"
    assert upsert("c", "198.51.100.5") == "198.51.100.5", "the old address was released"
    assert upsert("a", None) == "198.51.100.6", "no request: the address stays"


def test_counted_faults_are_consumed_and_star_matches_any_method() -> None:
    state = CloudState(":memory:")
    state.set_fault("EnsureLoadBalancer", "retry", retry_after=2.5, remaining=2)
    state.set_fault("*", "error")
    first = state.take_fault("EnsureLoadBalancer")
    assert first is not None
    assert first.mode == "retry"
    assert first.retry_after == 2.5
    assert state.take_fault("EnsureLoadBalancer") is not None
    fallback = state.take_fault("EnsureLoadBalancer")
    assert fallback is not None
    assert fallback.method == "*"  # the counted fault is used up
    state.clear_faults()
    assert state.take_fault("InstanceMetadata") is None


def test_calls_are_counted_by_method() -> None:
    state = CloudState(":memory:")
    state.record_call("InstanceMetadata")
    state.record_call("InstanceMetadata", error=True)
    assert state.calls() == {"InstanceMetadata": {"count": 2, "errors": 1}}


async def test_async_access_runs_off_the_event_loop(tmp_path: Path) -> None:
    state = AsyncCloudState(tmp_path / "cloud.db")
    try:
        created = await state.run(
            lambda s: s.add_instance("n", zone="z", region="r", instance_type="t")
        )
        assert await state.run(lambda s: s.instance_by_id(created.id)) == created
    finally:
        state.close()
