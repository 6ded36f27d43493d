"""FakeProvider: scripted answers, recorded calls, injected errors and delays."""

from __future__ import annotations

import asyncio

import pytest

from kube_ccm.api.objects import Node, ObjectMeta
from kube_ccm.cloudprovider import InformerUser, InstanceMetadata, PVLabeler, Registry, Zone
from kube_ccm.testing import FakeInformerUser, FakeProvider
from kube_ccm.testing.fakeprovider import CAPABILITIES, Call, NotScriptedError


def node(name: str = "n1") -> Node:
    return Node(metadata=ObjectMeta(name=name))


def test_only_the_capabilities_asked_for_are_offered() -> None:
    fake = FakeProvider(capabilities={"instances_v2", "zones"})
    assert fake.instances_v2() is not None
    assert fake.zones() is not None
    assert fake.instances() is None
    assert fake.load_balancer() is None
    assert fake.routes() is None
    assert fake.clusters() is None
    everything = FakeProvider(capabilities=CAPABILITIES)
    assert all(getattr(everything, name)() is not None for name in CAPABILITIES)


def test_an_unknown_capability_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown capabilities \\['instance'\\]"):
        FakeProvider(capabilities={"instance"})


def test_name_and_cluster_id() -> None:
    assert FakeProvider().provider_name() == "fake"
    assert FakeProvider().has_cluster_id()
    fake = FakeProvider(name="mine", cluster_id=False)
    assert (fake.provider_name(), fake.has_cluster_id()) == ("mine", False)


async def test_answers_are_values_or_functions_of_the_arguments() -> None:
    meta = InstanceMetadata(provider_id="fake://n1")
    fake = FakeProvider(capabilities={"instances_v2"}, answers={"instance_exists": True})
    fake.answer("instance_metadata", lambda n: meta if n.metadata.name == "n1" else None)
    v2 = fake.instances_v2()
    assert v2 is not None
    assert await v2.instance_exists(node())
    assert await v2.instance_metadata(node("n1")) is meta
    assert await v2.instance_metadata(node("n2")) is None


async def test_an_async_answer_is_awaited() -> None:
    async def zone(provider_id: str) -> Zone:
        return Zone(failure_domain=provider_id, region="r")

    fake = FakeProvider(capabilities={"zones"}, answers={"get_zone_by_provider_id": zone})
    zones = fake.zones()
    assert zones is not None
    assert await zones.get_zone_by_provider_id("z1") == Zone(failure_domain="z1", region="r")


async def test_calls_are_recorded_in_order_with_their_arguments() -> None:
    fake = FakeProvider(
        capabilities={"instances"},
        answers={"instance_id": "i-1", "instance_exists_by_provider_id": False},
    )
    v1 = fake.instances()
    assert v1 is not None
    assert await v1.instance_id("n1") == "i-1"
    assert not await v1.instance_exists_by_provider_id("fake://i-1")
    assert fake.called() == ["instance_id", "instance_exists_by_provider_id"]
    assert fake.calls_to("instance_id") == [("n1",)]
    assert fake.calls[1] == Call("instances", "instance_exists_by_provider_id", ("fake://i-1",))
    assert fake.called("zones") == []


async def test_an_injected_error_is_raised_and_the_call_still_recorded() -> None:
    fake = FakeProvider(capabilities={"routes"})
    fake.fail("list_routes", RuntimeError("routes down"))
    routes = fake.routes()
    assert routes is not None
    with pytest.raises(RuntimeError, match="routes down"):
        await routes.list_routes("kubernetes")
    assert fake.calls_to("list_routes") == [("kubernetes",)]


async def test_a_function_may_raise_or_return_an_error() -> None:
    fake = FakeProvider(capabilities={"clusters"})

    def missing(name: str) -> LookupError:
        return LookupError(name)

    fake.answer("master", missing)
    clusters = fake.clusters()
    assert clusters is not None
    with pytest.raises(LookupError, match="c1"):
        await clusters.master("c1")


async def test_a_delay_holds_the_answer_back() -> None:
    fake = FakeProvider(capabilities={"instances_v2"}, answers={"instance_shutdown": False})
    fake.delay("instance_shutdown", 10)
    v2 = fake.instances_v2()
    assert v2 is not None
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(v2.instance_shutdown(node()), 0.01)
    fake.delay("instance_shutdown", 0)
    assert not await v2.instance_shutdown(node())


async def test_an_unscripted_method_says_which() -> None:
    fake = FakeProvider(capabilities={"load_balancer"})
    balancer = fake.load_balancer()
    assert balancer is not None
    with pytest.raises(NotScriptedError, match="get_load_balancer_name"):
        balancer.get_load_balancer_name("kubernetes", None)  # type: ignore[arg-type]


async def test_the_hooks_are_recorded_and_do_nothing_unless_scripted() -> None:
    fake = FakeInformerUser()
    stop = asyncio.Event()
    await fake.initialize(None, stop)  # type: ignore[arg-type]
    fake.set_informers("informers")
    await fake.aclose()
    assert fake.called() == ["initialize", "set_informers", "aclose"]
    assert fake.calls_to("initialize") == [(None, stop)]
    assert fake.called("provider") == ["initialize", "aclose"]
    fake.fail("set_informers", RuntimeError("informers refused"))
    with pytest.raises(RuntimeError, match="informers refused"):
        fake.set_informers("informers")
    fake.fail("aclose", RuntimeError("close failed"))
    with pytest.raises(RuntimeError, match="close failed"):
        await fake.aclose()


def test_the_mix_ins_are_subclasses_the_daemon_recognises() -> None:
    assert isinstance(FakeInformerUser(), InformerUser)
    assert not isinstance(FakeInformerUser(), PVLabeler)
    assert not isinstance(FakeProvider(), InformerUser)


def test_the_class_is_a_registry_factory_that_keeps_its_config() -> None:
    registry = Registry(entry_point_group=None)
    registry.register("mycloud", FakeProvider)
    provider = registry.get_cloud_provider("mycloud", b"region: x")
    assert isinstance(provider, FakeProvider)
    assert provider.config == b"region: x"
    assert FakeProvider().config is None
