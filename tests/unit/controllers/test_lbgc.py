"""Leaked load balancers: the rule, and the sweep's two-sighting confirmation."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from kube_ccm.api import wellknown as wk
from kube_ccm.api.objects import ObjectMeta, Service, ServiceSpec
from kube_ccm.cloudprovider import OwnedLoadBalancer, default_load_balancer_name
from kube_ccm.controllers.lbgc import LoadBalancerGCController, find_leaks, inventory_of
from kube_ccm.runtime.informer import Informer
from kube_ccm.runtime.resources import SERVICES
from kube_ccm.testing import FakeProvider
from kube_ccm.testing.world import World


def svc(name: str, uid: str, finalizers: tuple[str, ...] = (), **spec: object) -> Service:
    return Service(
        metadata=ObjectMeta(name=name, namespace="ns", uid=uid, finalizers=finalizers),
        spec=ServiceSpec(**{"type": "LoadBalancer", **spec}),  # type: ignore[arg-type]
    )


def owned(name: str, uid: str) -> OwnedLoadBalancer:
    return OwnedLoadBalancer(name=f"lb-{uid}", namespace="ns", service_name=name, service_uid=uid)


def test_which_load_balancers_are_leaked() -> None:
    services = [
        svc("kept", "u1"),
        svc("recreated", "u2-new"),
        svc("retyped", "u3", type="ClusterIP"),
        svc(
            "retyped-cleaning",
            "u4",
            finalizers=(wk.FINALIZER_LOAD_BALANCER_CLEANUP,),
            type="NodePort",
        ),
        svc("classed", "u5", load_balancer_class="example.com/other"),
    ]
    lbs = [
        owned("kept", "u1"),
        owned("recreated", "u2-old"),
        owned("retyped", "u3"),
        owned("cleaning", "u4"),
        owned("classed", "u5"),
        owned("deleted", "u6"),
    ]

    leaks = {leak.name: leak.reason for leak in find_leaks(lbs, services)}

    assert leaks == {
        "lb-u2-old": (
            "Service ns/recreated was deleted (a Service of that name now has another UID)"
        ),
        "lb-u3": "Service ns/retyped is of type ClusterIP now",
        "lb-u5": "Service ns/classed has loadBalancerClass 'example.com/other'",
        "lb-u6": "Service ns/deleted no longer exists",
    }


def test_a_provider_without_an_inventory_is_refused_with_the_reason() -> None:
    with pytest.raises(ValueError, match="does not support external load balancers"):
        inventory_of(FakeProvider(name="bare"))


@pytest.fixture
async def services(world: World) -> AsyncIterator[Informer[Service]]:
    informer: Informer[Service] = Informer(world.client, SERVICES)
    running = asyncio.create_task(informer.run())
    await informer.wait_synced()
    yield informer
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)


async def test_the_sweep_deletes_only_what_two_sweeps_in_a_row_found_leaked(
    world: World, services: Informer[Service]
) -> None:
    state = world.state
    common = {"cluster": "kubernetes", "ports": [], "nodes": [], "source_ranges": []}
    name = default_load_balancer_name(svc("gone", "u1"))
    state.upsert_load_balancer(name=name, service="ns/gone", service_uid="u1", **common)  # type: ignore[arg-type]
    state.upsert_load_balancer(name="odd-name", service="ns/odd", service_uid="u2", **common)  # type: ignore[arg-type]
    sweeper = LoadBalancerGCController(services=services, cloud=world.cloud, metrics=world.metrics)

    await sweeper.sweep()
    assert state.load_balancer(name) is not None, "one sighting is not enough"
    await sweeper.sweep()
    assert state.load_balancer(name) is None
    assert state.load_balancer("odd-name") is not None, "a name it cannot derive: left alone"
    assert world.metrics.sample("kube_ccm_leaked_load_balancer_deletions_failed_total") == 1
    assert world.metrics.sample("kube_ccm_leaked_load_balancers_deleted_total") == 1
