"""The provider against its fake cloud, and kube-ccm's controllers running on it."""

from __future__ import annotations

import asyncio

import pytest
from kube_ccm.cloudprovider import (
    CloudConfigError,
    InstanceNotFoundError,
    InvalidCloudConfigError,
    default_registry,
)
from kube_ccm.testing.conformance import KitClientBuilder
from kube_ccm.testing.world import controller_world, node_object, service_object

from kube_ccm_mycloud import factory
from kube_ccm_mycloud import main as main_module
from kube_ccm_mycloud.client import CloudClient
from kube_ccm_mycloud.config import load
from kube_ccm_mycloud.fake import FakeCloud
from kube_ccm_mycloud.provider import MycloudCloud, build


def cloud() -> tuple[MycloudCloud, FakeCloud]:
    fake = FakeCloud()
    return MycloudCloud(CloudClient(load(None), fake)), fake


async def test_a_node_gets_its_instances_metadata() -> None:
    provider, fake = cloud()
    instance = fake.add_instance("node-1", zone="zone-b", type="large")
    instances = provider.instances_v2()
    assert instances is not None
    async with controller_world(provider=provider) as world:
        node = await world.add(node_object("node-1"))
        meta = await instances.instance_metadata(node)
    assert meta is not None
    assert meta.provider_id == f"mycloud://zone-b/{instance.id}"
    assert (meta.instance_type, meta.zone) == ("large", "zone-b")


async def test_a_node_registered_before_its_instance_is_retried() -> None:
    """Raising (not returning None) keeps the Node tainted and retried until the
    instance appears."""
    provider, fake = cloud()
    instances = provider.instances_v2()
    assert instances is not None
    async with controller_world(provider=provider) as world:
        node = await world.add(node_object("node-3"))
        with pytest.raises(InstanceNotFoundError, match="node-3"):
            await instances.instance_metadata(node)
        fake.add_instance("node-3")
        assert await instances.instance_metadata(node) is not None


async def test_gone_and_stopped_instances() -> None:
    provider, fake = cloud()
    instance = fake.add_instance("node-2")
    provider_id = f"mycloud://zone-a/{instance.id}"
    instances = provider.instances_v2()
    assert instances is not None
    async with controller_world(provider=provider) as world:
        node = await world.add(node_object("node-2", provider_id=provider_id))
        fake.set_state("node-2", "stopped")
        assert await instances.instance_shutdown(node)
        assert await instances.instance_exists(node)
        fake.set_state("node-2", "terminated")
        assert not await instances.instance_exists(node)


async def test_load_balancers_are_idempotent_and_deleted() -> None:
    provider, _fake = cloud()
    balancer = provider.load_balancer()
    assert balancer is not None
    async with controller_world(provider=provider) as world:
        service = await world.add_service(service_object("web"))
        first = await balancer.ensure_load_balancer("kubernetes", service, [])
        assert await balancer.ensure_load_balancer("kubernetes", service, []) == first
        assert await balancer.get_load_balancer("kubernetes", service) == first
        await balancer.ensure_load_balancer_deleted("kubernetes", service)
        await balancer.ensure_load_balancer_deleted("kubernetes", service)
        assert await balancer.get_load_balancer("kubernetes", service) is None


async def test_load_balancers_never_share_an_address() -> None:
    provider, _fake = cloud()
    balancer = provider.load_balancer()
    assert balancer is not None
    async with controller_world(provider=provider) as world:
        services = []
        for name in ("a", "b", "c"):
            services.append(await world.add_service(service_object(name)))
        a, b, c = services
        await balancer.ensure_load_balancer("kubernetes", a, [])
        second = await balancer.ensure_load_balancer("kubernetes", b, [])
        await balancer.ensure_load_balancer_deleted("kubernetes", a)
        third = await balancer.ensure_load_balancer("kubernetes", c, [])
    assert second != third


async def test_a_refused_token_stops_the_daemon_at_start_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeCloud()
    with fake.state() as state:
        state.token = "right"
    config = load(b"credentials: {env: MYCLOUD_TOKEN}\n")
    builder = KitClientBuilder.in_memory()
    monkeypatch.setenv("MYCLOUD_TOKEN", "wrong")
    provider = build(config, fake)
    with pytest.raises(CloudConfigError, match='environment variable "MYCLOUD_TOKEN"'):
        await provider.initialize(builder, asyncio.Event())
    await provider.aclose()
    monkeypatch.setenv("MYCLOUD_TOKEN", "right")
    provider = build(config, fake)
    await provider.initialize(builder, stop := asyncio.Event())
    stop.set()
    await provider.aclose()


def test_the_cloud_config_is_strict() -> None:
    assert factory(b"region: r2\n").client.config.region == "r2"
    with pytest.raises(InvalidCloudConfigError, match="unknown field `regoin`; known fields: endp"):
        factory(b"regoin: r2\n")


def test_its_own_command_registers_the_provider_then_runs_the_daemon(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    programs: list[str] = []

    def run(argv: list[str] | None = None, program: str = "") -> int:
        assert default_registry.factory("mycloud") is factory
        programs.append(program)
        return 0

    monkeypatch.setattr(main_module, "run", run)
    for _ in range(2):  # a second main() in one process is not a duplicate registration
        with pytest.raises(SystemExit) as exited:
            main_module.main()
        assert exited.value.code == 0
    assert programs == ["mycloud-cloud-controller-manager"] * 2
