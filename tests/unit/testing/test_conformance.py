"""The conformance kit's own tests: a small in-memory cloud passes every contract check,
and each deliberately broken variant fails the check for its obligation, saying why.

(The kit against the real providers, daemon level included, is in tests/conformance.)
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import pytest

from kube_ccm.api.objects import LoadBalancerIngress, LoadBalancerStatus, Node, Service
from kube_ccm.cloudprovider import (
    CloudProvider,
    CloudProviderError,
    InstanceMetadata,
    InstanceNotFoundError,
    InstancesV2,
    LoadBalancer,
    LoadBalancerInventory,
    OwnedLoadBalancer,
    Route,
    Routes,
)
from kube_ccm.testing.conformance import (
    ConformanceTarget,
    ContractChecks,
    InstanceDriver,
    open_conformance,
)
from kube_ccm.testing.conformance._contract import cancellation_points


# The kit's subject, kept hand-written on purpose: one small cloud with state and bugs
# to switch on, so each check is seen to fail on the correct cloud with one bug. Not
# FakeProvider (scripted answers keep no state), nor the simulated cloud (no bugs on
# demand; a product provider gets none added for a test); the kit on it is in
# tests/conformance/test_conformance_simulated.py.
@dataclass
class Bugs:
    """What the in-memory cloud gets wrong (nothing by default)."""

    exists_false_on_error: bool = False
    new_address_each_ensure: bool = False
    delete_fails_when_missing: bool = False
    name_from_ports: bool = False
    leaks_when_cancelled: bool = False
    stopped_does_not_exist: bool = False
    lists_every_cluster: bool = False
    no_blackholes: bool = False
    builtin_not_implemented: bool = False
    belongs_to_anyone: bool = False


@dataclass
class Sky:
    """The cloud: instances by Node name (state), load balancers, routes, an outage."""

    instances: dict[str, str] = field(default_factory=dict)
    balancers: dict[str, tuple[str, str, str, str]] = field(default_factory=dict)
    routes: dict[str, tuple[str, Route]] = field(default_factory=dict)
    down: bool = False
    addresses: int = 0

    def check(self) -> None:
        if self.down:
            raise CloudProviderError("sky: 503 Service Unavailable")


class SkyInstances(InstancesV2):
    authoritative = True

    def __init__(self, sky: Sky, bugs: Bugs) -> None:
        self.sky = sky
        self.bugs = bugs

    async def instance_belongs_to(self, node_name: str, metadata: InstanceMetadata) -> bool:
        self.sky.check()
        return self.bugs.belongs_to_anyone or metadata.provider_id == f"sky://{node_name}"

    def _state(self, node: Node) -> str | None:
        name = node.spec.provider_id.removeprefix("sky://") or node.metadata.name
        return self.sky.instances.get(name)

    async def instance_exists(self, node: Node) -> bool:
        try:
            self.sky.check()
        except CloudProviderError:
            if self.bugs.exists_false_on_error:
                return False
            raise
        state = self._state(node)
        if self.bugs.stopped_does_not_exist and state == "stopped":
            return False
        return state is not None

    async def instance_shutdown(self, node: Node) -> bool:
        if self.bugs.builtin_not_implemented:
            raise NotImplementedError
        self.sky.check()
        return self._state(node) == "stopped"

    async def instance_metadata(self, node: Node) -> InstanceMetadata | None:
        self.sky.check()
        if self._state(node) is None:
            raise InstanceNotFoundError(f"no instance for {node.metadata.name}")
        return InstanceMetadata(provider_id=f"sky://{node.metadata.name}")


class SkyLoadBalancer(LoadBalancer, LoadBalancerInventory):
    def __init__(self, sky: Sky, bugs: Bugs) -> None:
        self.sky = sky
        self.bugs = bugs
        self.remembered: dict[str, str] = {}  # uid -> name, what delete and get look at

    def get_load_balancer_name(self, cluster_name: str, service: Service) -> str:
        suffix = (
            "".join(str(p.port) for p in service.spec.ports) if self.bugs.name_from_ports else ""
        )
        return f"lb-{service.metadata.uid}{suffix}"

    async def get_load_balancer(
        self, cluster_name: str, service: Service
    ) -> LoadBalancerStatus | None:
        self.sky.check()
        name = (
            self.remembered.get(service.metadata.uid)
            if self.bugs.leaks_when_cancelled
            else (self.get_load_balancer_name(cluster_name, service))
        )
        found = self.sky.balancers.get(name or "")
        return LoadBalancerStatus(ingress=(LoadBalancerIngress(ip=found[3]),)) if found else None

    async def ensure_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> LoadBalancerStatus:
        self.sky.check()
        name = self.get_load_balancer_name(cluster_name, service)
        found = self.sky.balancers.get(name)
        if found is None or self.bugs.new_address_each_ensure:
            self.sky.addresses += 1
            address = f"192.0.2.{self.sky.addresses}"
        else:
            address = found[3]
        meta = service.metadata
        self.sky.balancers[name] = (cluster_name, meta.namespace, meta.name, address)
        await asyncio.sleep(0)  # the cloud's answer on its way back
        self.remembered[meta.uid] = name
        return LoadBalancerStatus(ingress=(LoadBalancerIngress(ip=address),))

    async def update_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> None:
        self.sky.check()

    async def ensure_load_balancer_deleted(self, cluster_name: str, service: Service) -> None:
        self.sky.check()
        if self.bugs.leaks_when_cancelled:
            name = self.remembered.pop(service.metadata.uid, "")
        else:
            name = self.get_load_balancer_name(cluster_name, service)
        if self.sky.balancers.pop(name, None) is None and self.bugs.delete_fails_when_missing:
            raise CloudProviderError(f"load balancer {name} not found")

    async def list_load_balancers(self, cluster_name: str) -> Sequence[OwnedLoadBalancer]:
        self.sky.check()
        return [
            OwnedLoadBalancer(
                name=name, namespace=ns, service_name=svc, service_uid=name.removeprefix("lb-")
            )
            for name, (cluster, ns, svc, _) in self.sky.balancers.items()
            if cluster == cluster_name or self.bugs.lists_every_cluster
        ]


class SkyRoutes(Routes):
    def __init__(self, sky: Sky, bugs: Bugs) -> None:
        self.sky = sky
        self.bugs = bugs

    async def list_routes(self, cluster_name: str) -> Sequence[Route]:
        self.sky.check()
        return [
            Route(
                name=name,
                target_node=r.target_node,
                destination_cidr=r.destination_cidr,
                blackhole=r.target_node not in self.sky.instances and not self.bugs.no_blackholes,
            )
            for name, (cluster, r) in self.sky.routes.items()
            if cluster == cluster_name
        ]

    async def create_route(self, cluster_name: str, name_hint: str, route: Route) -> None:
        self.sky.check()
        self.sky.routes[f"{name_hint}-{route.destination_cidr}"] = (cluster_name, route)

    async def delete_route(self, cluster_name: str, route: Route) -> None:
        self.sky.check()
        self.sky.routes.pop(route.name, None)


class SkyCloud(CloudProvider):
    def __init__(self, sky: Sky, bugs: Bugs) -> None:
        self._instances = SkyInstances(sky, bugs)
        self._lb = SkyLoadBalancer(sky, bugs)
        self._routes = SkyRoutes(sky, bugs)

    def provider_name(self) -> str:
        return "sky"

    def has_cluster_id(self) -> bool:
        return True

    def instances_v2(self) -> InstancesV2 | None:
        return self._instances

    def load_balancer(self) -> LoadBalancer | None:
        return self._lb

    def routes(self) -> Routes | None:
        return self._routes


class PlainSkyDriver(InstanceDriver):
    """Instances only: it cannot make the sky's API fail."""

    def __init__(self, sky: Sky) -> None:
        self.sky = sky

    async def create_instance(self, name: str) -> None:
        self.sky.instances[name] = "running"

    async def stop_instance(self, name: str) -> None:
        self.sky.instances[name] = "stopped"

    async def start_instance(self, name: str) -> None:
        self.sky.instances[name] = "running"

    async def delete_instance(self, name: str) -> None:
        self.sky.instances.pop(name, None)


class SkyDriver(PlainSkyDriver):
    @contextlib.asynccontextmanager
    async def api_errors(self) -> AsyncIterator[None]:
        self.sky.down = True
        try:
            yield
        finally:
            self.sky.down = False


def sky_target(bugs: Bugs | None = None, *, driver: bool = True) -> ConformanceTarget:
    sky = Sky()
    return ConformanceTarget(
        provider=lambda: SkyCloud(sky, bugs or Bugs()),
        driver=SkyDriver(sky) if driver else None,
    )


CONTRACT_CHECKS = sorted(
    name
    for name, member in inspect.getmembers(ContractChecks)
    if name.startswith("test_") and inspect.iscoroutinefunction(member)
)


async def run_check(target: ConformanceTarget, check: str) -> None:
    async with open_conformance(target) as conformance:
        await getattr(ContractChecks(), check)(conformance)


@pytest.mark.parametrize("check", CONTRACT_CHECKS)
async def test_a_correct_cloud_passes_every_contract_check_or_is_told_why_not(check: str) -> None:
    if check.startswith("test_v1_"):
        with pytest.raises(pytest.skip.Exception, match="no instances\\(\\)"):
            await run_check(sky_target(), check)
    else:
        await run_check(sky_target(), check)


@pytest.mark.parametrize(
    ("bugs", "check", "message"),
    [
        (
            Bugs(exists_false_on_error=True),
            "test_an_api_error_is_raised_not_reported_as_a_missing_instance",
            "returned False while the cloud's API failed",
        ),
        (
            Bugs(stopped_does_not_exist=True),
            "test_a_stopped_instance_still_exists_and_is_shut_down",
            "instance_exists of the stopped instance is False",
        ),
        (
            Bugs(new_address_each_ensure=True),
            "test_ensure_load_balancer_twice_gives_the_same_status",
            "the Service's status would flap",
        ),
        (
            Bugs(delete_fails_when_missing=True),
            "test_ensure_load_balancer_deleted_succeeds_twice_and_when_never_created",
            "of a never-created load balancer raised",
        ),
        (
            Bugs(name_from_ports=True),
            "test_the_load_balancer_name_is_stable",
            "the name changed with the Service's ports",
        ),
        (
            Bugs(leaks_when_cancelled=True),
            "test_a_cancelled_ensure_load_balancer_leaves_nothing_behind",
            "cancelled after 1 of the 2 event-loop turns.*still lists",
        ),
        (
            Bugs(lists_every_cluster=True),
            "test_the_inventory_lists_what_it_made_for_this_cluster_only",
            "lists a load balancer made for cluster 'kubernetes'",
        ),
        (
            Bugs(no_blackholes=True),
            "test_a_route_whose_target_is_gone_is_listed_as_a_blackhole",
            "not a blackhole",
        ),
        (
            Bugs(belongs_to_anyone=True),
            "test_an_authoritative_instance_belongs_to_its_own_node_only",
            "would get a certificate for",
        ),
        (
            Bugs(builtin_not_implemented=True),
            "test_a_running_instance_exists_and_is_not_shut_down",
            "raised Python's NotImplementedError",
        ),
    ],
)
async def test_a_broken_cloud_fails_the_check_of_its_obligation(
    bugs: Bugs, check: str, message: str
) -> None:
    with pytest.raises(AssertionError, match=message):
        await run_check(sky_target(bugs), check)


async def test_without_a_driver_instance_checks_are_skipped_saying_why() -> None:
    with pytest.raises(pytest.skip.Exception, match="no InstanceDriver"):
        await run_check(sky_target(driver=False), "test_a_deleted_instance_does_not_exist")


async def test_a_driver_that_cannot_fail_the_api_skips_the_outage_checks() -> None:
    sky = Sky()
    target = ConformanceTarget(provider=lambda: SkyCloud(sky, Bugs()), driver=PlainSkyDriver(sky))
    with pytest.raises(pytest.skip.Exception, match="cannot make the cloud's API fail"):
        await run_check(target, "test_an_api_error_is_raised_not_reported_as_a_missing_instance")


async def test_a_driver_whose_outage_reaches_nothing_is_reported() -> None:
    class Ineffective(PlainSkyDriver):
        @contextlib.asynccontextmanager
        async def api_errors(self) -> AsyncIterator[None]:
            yield

    sky = Sky()
    target = ConformanceTarget(provider=lambda: SkyCloud(sky, Bugs()), driver=Ineffective(sky))
    with pytest.raises(AssertionError, match="does not reach the provider"):
        await run_check(target, "test_an_api_error_is_raised_not_reported_as_a_missing_instance")


async def test_the_instances_a_check_made_are_deleted_after_it() -> None:
    sky = Sky()
    target = ConformanceTarget(provider=lambda: SkyCloud(sky, Bugs()), driver=SkyDriver(sky))
    await run_check(target, "test_a_running_instance_exists_and_is_not_shut_down")
    assert sky.instances == {}


def test_a_fixture_returning_something_else_than_a_target_is_refused() -> None:
    async def open_it() -> None:
        async with open_conformance(SkyCloud(Sky(), Bugs())):  # type: ignore[arg-type]
            pass

    with pytest.raises(
        TypeError, match=r"return a kube_ccm\.testing\.conformance\.ConformanceTarget"
    ):
        asyncio.run(open_it())


def test_cancellation_points_cover_short_calls_fully_and_long_ones_evenly() -> None:
    assert cancellation_points(3) == [0, 1, 2, 3]
    points = cancellation_points(1100)
    assert points[:4] == [0, 1, 2, 3]
    assert points[-1] == 1100
    assert len(points) <= 16


class TestKnownFailures(ContractChecks):
    """The checks as a provider package collects them, with the fixture on the class. A
    ``known_failures`` entry turns the failing check into a strict xfail; the others
    pass or are skipped as for the correct cloud."""

    known_failures: ClassVar[Mapping[str, str]] = {
        "test_a_stopped_instance_still_exists_and_is_shut_down": "the sky forgets stopped ones",
    }

    @pytest.fixture
    def conformance_provider(self) -> ConformanceTarget:
        return sky_target(Bugs(stopped_does_not_exist=True))
