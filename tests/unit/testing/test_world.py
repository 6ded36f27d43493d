"""The controller world: a provider author's own provider, Nodes and Services in it."""

from __future__ import annotations

from kube_ccm.controllers.service import wants_load_balancer
from kube_ccm.testing import FakeProvider
from kube_ccm.testing.world import controller_world, node_object, service_object


async def test_a_world_runs_the_authors_provider_as_its_docstring_shows() -> None:
    mine = FakeProvider(name="mine")
    async with controller_world(provider=mine) as world:
        assert world.provider is mine
        await world.add(node_object("n1"))
        await world.add_service(service_object("web", namespace="shop"))
        cached = world.services.get("shop/web")
        assert cached is not None
        assert cached.spec.type == "LoadBalancer"
        assert wants_load_balancer(cached)
        assert world.nodes.get("n1") is not None


async def test_without_a_provider_the_simulated_cloud_serves() -> None:
    async with controller_world(latency=0.0) as world:
        assert world.provider is world.cloud
        await world.add_service(service_object("plain", type="ClusterIP"))
        cached = world.services.get("default/plain")
        assert cached is not None
        assert cached.spec.type == "ClusterIP"
