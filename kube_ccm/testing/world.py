"""A small world for controller unit tests: an in-memory apiserver, real Node and
Service informers over it, the simulated cloud in memory, and an event recorder
that remembers.

Provider authors can run our controllers against their own provider in it::

    async with controller_world(provider=MyCloud(...)) as world:
        await world.add(node_object("n1"))
        await world.add_service(service_object("web"))
        ...  # build a controller with world.provider, world.nodes, world.services

Without ``provider`` the simulated cloud (``world.cloud``, configured by keyword
arguments such as ``latency=0.01``) is the provider.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, TypeVar

from kube_ccm.api import wellknown as wk
from kube_ccm.api.objects import Node, Service
from kube_ccm.cloudprovider import CloudProvider
from kube_ccm.controllers.cloudcalls import CloudCallPolicy, CloudCalls, GuardedProvider, guard
from kube_ccm.providers.simulated import SimulatedCloud, SimulatedConfig
from kube_ccm.providers.simulated.state import CloudState
from kube_ccm.runtime.client import KubeClient
from kube_ccm.runtime.informer import Informer
from kube_ccm.runtime.metrics import Metrics
from kube_ccm.runtime.resources import NODES, SERVICES
from kube_ccm.testing.events import FakeEventRecorder
from kube_ccm.testing.fakeapi import FakeApiServer
from kube_ccm.testing.manifests import taint_keys

UNINITIALIZED = {"key": wk.TAINT_UNINITIALIZED, "value": "true", "effect": "NoSchedule"}


def node_object(
    name: str,
    *,
    tainted: bool = True,
    ready: str | None = None,
    provider_id: str = "",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    addresses: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"taints": [*(taints or []), *([UNINITIALIZED] if tainted else [])]}
    if provider_id:
        spec["providerID"] = provider_id
    status: dict[str, Any] = {"addresses": addresses or [{"type": "Hostname", "address": name}]}
    if ready is not None:
        status["conditions"] = [{"type": "Ready", "status": ready, "reason": "Test"}]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
        "spec": spec,
        "status": status,
    }


def guarded(provider: CloudProvider, *, timeout: float = 1.0) -> GuardedProvider:
    """``provider`` as the daemon hands it to controllers, through the cloud-call
    boundary: here with ``timeout`` as each call's deadline, no retries (a test's fault
    is seen once) and metrics of its own."""
    calls = CloudCalls(
        provider.provider_name(), Metrics(), CloudCallPolicy(attempts=1), timeout=timeout
    )
    return guard(provider, calls)


@dataclass
class World:
    api: FakeApiServer
    client: KubeClient
    nodes: Informer[Node]
    cloud: SimulatedCloud
    """The simulated cloud (the provider unless a test passes its own)."""
    recorder: FakeEventRecorder
    metrics: Metrics
    services: Informer[Service]
    provider: CloudProvider
    """The provider under test: ``controller_world(provider=...)``, else :attr:`cloud`."""

    def guarded(self, *, timeout: float = 1.0) -> GuardedProvider:
        """:attr:`provider` through the cloud-call boundary (see :func:`guarded`)."""
        return guarded(self.provider, timeout=timeout)

    @property
    def state(self) -> CloudState:
        return self.cloud.state.sync

    def node(self, name: str) -> dict[str, Any]:
        found = self.api.object(f"/api/v1/nodes/{name}")
        assert found is not None, f"node {name} is gone"
        return found

    def taint_keys(self, name: str) -> list[str]:
        return taint_keys(self.node(name))

    def cloud_calls(self) -> dict[str, int]:
        return {method: c["count"] for method, c in self.state.calls().items()}

    def node_writes(self) -> list[str]:
        return [f"{r.method} {r.path}" for r in self.api.writes() if "/nodes" in r.path]

    async def add(self, obj: dict[str, Any]) -> Node:
        """Store a node and wait until the informer has it; returns the informer's copy."""
        self.api.put_object(obj)
        node = await self.settle(obj["metadata"]["name"])
        assert node is not None
        return node

    async def add_service(self, obj: dict[str, Any]) -> Service:
        """Store a Service and wait until the informer has it; returns the informer's copy."""
        self.api.put_object(obj)
        meta = obj["metadata"]
        namespace = meta.get("namespace", "default")
        wanted = self.api.object(f"/api/v1/namespaces/{namespace}/services/{meta['name']}")
        service = await _caught_up(self.services, "service", f"{namespace}/{meta['name']}", wanted)
        assert service is not None
        return service

    async def settle(self, name: str) -> Node | None:
        """Wait until the informer has the node as stored (None: it is gone)."""
        return await _caught_up(self.nodes, "node", name, self.api.object(f"/api/v1/nodes/{name}"))


_Object = TypeVar("_Object", Node, Service)


async def _caught_up(
    informer: Informer[_Object], kind: str, key: str, wanted: dict[str, Any] | None
) -> _Object | None:
    """The informer's copy of ``key`` once it is the stored ``wanted`` (None: once it
    has none either); an error after a second."""
    rv = wanted["metadata"]["resourceVersion"] if wanted else None
    for _ in range(200):
        cached = informer.get(key)
        if (cached.metadata.resource_version if cached else None) == rv:
            return cached
        await asyncio.sleep(0.005)
    raise AssertionError(f"informer never caught up with {kind} {key}")


def make_cloud(**config: Any) -> SimulatedCloud:
    return SimulatedCloud(SimulatedConfig(state=":memory:", **config))


def service_object(
    name: str,
    *,
    namespace: str = "default",
    ports: list[dict[str, Any]] | None = None,
    annotations: dict[str, str] | None = None,
    uid: str | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A ``type: LoadBalancer`` Service (``spec`` fields override, e.g. ``type="ClusterIP"``)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or f"uid-{namespace}-{name}",
            "annotations": annotations or {},
        },
        "spec": {
            "type": "LoadBalancer",
            "ports": ports or [{"port": 80, "protocol": "TCP", "nodePort": 30080}],
            **spec,
        },
    }


@contextlib.asynccontextmanager
async def controller_world(
    provider: CloudProvider | None = None, **cloud_config: Any
) -> AsyncIterator[World]:
    """A running world. ``provider`` is the provider under test (default: the
    simulated cloud, whose config fields ``cloud_config`` sets)."""
    api = FakeApiServer()
    client = api.client()
    nodes: Informer[Node] = Informer(client, NODES)
    services: Informer[Service] = Informer(client, SERVICES)
    running = [asyncio.create_task(nodes.run()), asyncio.create_task(services.run())]
    cloud = make_cloud(**cloud_config)
    try:
        await nodes.wait_synced()
        await services.wait_synced()
        yield World(
            api,
            client,
            nodes,
            cloud,
            FakeEventRecorder(),
            Metrics(),
            services,
            provider if provider is not None else cloud,
        )
    finally:
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        await client.aclose()
        cloud.close()


__all__ = ["World", "controller_world", "guarded", "make_cloud", "node_object", "service_object"]
