"""A scriptable cloud provider, for unit tests of controllers and of code that calls
providers (ours and provider authors')::

    fake = FakeProvider(capabilities={"instances_v2", "zones"})
    fake.answer("instance_exists", False)                    # a value
    fake.answer("instance_metadata", lambda node: meta(node)) # or a function of the arguments
    fake.fail("get_zone_by_provider_id", RuntimeError("down")) # raised on every call
    fake.delay("instance_shutdown", 10)                      # hangs (for timeouts)
    ...
    assert fake.called() == ["instance_exists", "instance_metadata"]
    assert fake.calls_to("instance_exists")[0] == (node,)

A capability not in ``capabilities`` is ``None`` (the provider does not offer it); a
method asked but not scripted raises :class:`NotScriptedError`, so a test states every
answer it relies on. Capabilities: ``load_balancer``, ``instances``, ``instances_v2``,
``zones``, ``clusters`` and ``routes``; method names are the contract's
(:mod:`kube_ccm.cloudprovider`). :class:`FakeLabelingProvider` also labels volumes
(``get_labels_for_volume``, the :class:`~kube_ccm.cloudprovider.PVLabeler` mix-in).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kube_ccm.api.objects import LoadBalancerStatus, Node, NodeAddress, PersistentVolume, Service
from kube_ccm.cloudprovider import (
    CloudProvider,
    Clusters,
    InstanceMetadata,
    Instances,
    InstancesV2,
    LoadBalancer,
    PVLabeler,
    Route,
    Routes,
    Zone,
    Zones,
)

CAPABILITIES = frozenset(
    {"load_balancer", "instances", "instances_v2", "zones", "clusters", "routes"}
)


class NotScriptedError(AssertionError):
    """The code under test called a method the test gave no answer for."""


@dataclass(frozen=True)
class Call:
    """One call the provider received: the capability, the method and its positional
    arguments."""

    capability: str
    method: str
    args: tuple[Any, ...]


class FakeProvider(CloudProvider):
    """A provider whose every answer the test scripts; it records every call."""

    def __init__(
        self,
        *,
        name: str = "fake",
        capabilities: Iterable[str] = (),
        answers: Mapping[str, Any] | None = None,
        cluster_id: bool = True,
    ) -> None:
        self._capabilities = frozenset(capabilities)
        unknown = self._capabilities - CAPABILITIES
        if unknown:
            raise ValueError(
                f"unknown capabilities {sorted(unknown)}; known: {sorted(CAPABILITIES)}"
            )
        self._name = name
        self._cluster_id = cluster_id
        self._answers: dict[str, Any] = dict(answers or {})
        self._delays: dict[str, float] = {}
        self.calls: list[Call] = []
        self._load_balancer = _FakeLoadBalancer(self)
        self._instances = _FakeInstances(self)
        self._instances_v2 = _FakeInstancesV2(self)
        self._zones = _FakeZones(self)
        self._clusters = _FakeClusters(self)
        self._routes = _FakeRoutes(self)

    # -- scripting --------------------------------------------------------------

    def answer(self, method: str, answer: Any) -> None:
        """What ``method`` answers from now on: a value, an exception (raised), or a
        function of the call's arguments (sync or async) returning either."""
        self._answers[method] = answer

    def fail(self, method: str, error: BaseException) -> None:
        """``method`` raises ``error`` from now on."""
        self._answers[method] = error

    def delay(self, method: str, seconds: float) -> None:
        """``method`` sleeps ``seconds`` before it answers (0 removes the delay)."""
        self._delays[method] = seconds

    def called(self, capability: str | None = None) -> list[str]:
        """The methods called (of ``capability``, or of all), in order."""
        return [c.method for c in self.calls if capability in (None, c.capability)]

    def calls_to(self, method: str) -> list[tuple[Any, ...]]:
        """The arguments of each call to ``method``, in order."""
        return [call.args for call in self.calls if call.method == method]

    async def _call(self, capability: str, method: str, *args: Any) -> Any:
        self.calls.append(Call(capability, method, args))
        seconds = self._delays.get(method, 0.0)
        if seconds:
            await asyncio.sleep(seconds)
        result = self._resolve(method, args)
        if inspect.isawaitable(result):
            result = await result
        if isinstance(result, BaseException):
            raise result
        return result

    def _call_sync(self, capability: str, method: str, *args: Any) -> Any:
        self.calls.append(Call(capability, method, args))
        result = self._resolve(method, args)
        if isinstance(result, BaseException):
            raise result
        return result

    def _resolve(self, method: str, args: tuple[Any, ...]) -> Any:
        if method not in self._answers:
            raise NotScriptedError(f"FakeProvider: no answer scripted for {method}{args!r}")
        answer = self._answers[method]
        if isinstance(answer, BaseException):
            raise answer
        if callable(answer):
            return answer(*args)
        return answer

    # -- the provider -----------------------------------------------------------

    def provider_name(self) -> str:
        return self._name

    def has_cluster_id(self) -> bool:
        return self._cluster_id

    def load_balancer(self) -> LoadBalancer | None:
        return self._load_balancer if "load_balancer" in self._capabilities else None

    def instances(self) -> Instances | None:
        return self._instances if "instances" in self._capabilities else None

    def instances_v2(self) -> InstancesV2 | None:
        return self._instances_v2 if "instances_v2" in self._capabilities else None

    def zones(self) -> Zones | None:
        return self._zones if "zones" in self._capabilities else None

    def clusters(self) -> Clusters | None:
        return self._clusters if "clusters" in self._capabilities else None

    def routes(self) -> Routes | None:
        return self._routes if "routes" in self._capabilities else None


class FakeLabelingProvider(FakeProvider, PVLabeler):
    """A :class:`FakeProvider` that also labels volumes (the :class:`PVLabeler`
    mix-in): script ``get_labels_for_volume`` like any other method."""

    async def get_labels_for_volume(self, pv: PersistentVolume) -> Mapping[str, str]:
        labels: Mapping[str, str] = await self._call("pv_labeler", "get_labels_for_volume", pv)
        return labels


class _Part:
    def __init__(self, fake: FakeProvider) -> None:
        self._fake = fake


class _FakeLoadBalancer(_Part, LoadBalancer):
    async def get_load_balancer(
        self, cluster_name: str, service: Service
    ) -> LoadBalancerStatus | None:
        result: LoadBalancerStatus | None = await self._fake._call(
            "load_balancer", "get_load_balancer", cluster_name, service
        )
        return result

    def get_load_balancer_name(self, cluster_name: str, service: Service) -> str:
        return str(
            self._fake._call_sync("load_balancer", "get_load_balancer_name", cluster_name, service)
        )

    async def ensure_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> LoadBalancerStatus:
        result: LoadBalancerStatus = await self._fake._call(
            "load_balancer", "ensure_load_balancer", cluster_name, service, nodes
        )
        return result

    async def update_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> None:
        await self._fake._call(
            "load_balancer", "update_load_balancer", cluster_name, service, nodes
        )

    async def ensure_load_balancer_deleted(self, cluster_name: str, service: Service) -> None:
        await self._fake._call(
            "load_balancer", "ensure_load_balancer_deleted", cluster_name, service
        )


class _FakeInstances(_Part, Instances):
    async def node_addresses(self, node_name: str) -> tuple[NodeAddress, ...]:
        return tuple(await self._fake._call("instances", "node_addresses", node_name))

    async def node_addresses_by_provider_id(self, provider_id: str) -> tuple[NodeAddress, ...]:
        return tuple(
            await self._fake._call("instances", "node_addresses_by_provider_id", provider_id)
        )

    async def instance_id(self, node_name: str) -> str:
        return str(await self._fake._call("instances", "instance_id", node_name))

    async def instance_type(self, node_name: str) -> str:
        return str(await self._fake._call("instances", "instance_type", node_name))

    async def instance_type_by_provider_id(self, provider_id: str) -> str:
        return str(await self._fake._call("instances", "instance_type_by_provider_id", provider_id))

    async def instance_exists_by_provider_id(self, provider_id: str) -> bool:
        return bool(
            await self._fake._call("instances", "instance_exists_by_provider_id", provider_id)
        )

    async def instance_shutdown_by_provider_id(self, provider_id: str) -> bool:
        return bool(
            await self._fake._call("instances", "instance_shutdown_by_provider_id", provider_id)
        )

    async def add_ssh_key_to_all_instances(self, user: str, key: bytes) -> None:
        await self._fake._call("instances", "add_ssh_key_to_all_instances", user, key)

    async def current_node_name(self, hostname: str) -> str:
        return str(await self._fake._call("instances", "current_node_name", hostname))


class _FakeInstancesV2(_Part, InstancesV2):
    async def instance_exists(self, node: Node) -> bool:
        return bool(await self._fake._call("instances_v2", "instance_exists", node))

    async def instance_shutdown(self, node: Node) -> bool:
        return bool(await self._fake._call("instances_v2", "instance_shutdown", node))

    async def instance_metadata(self, node: Node) -> InstanceMetadata | None:
        result: InstanceMetadata | None = await self._fake._call(
            "instances_v2", "instance_metadata", node
        )
        return result


class _FakeZones(_Part, Zones):
    async def get_zone(self) -> Zone:
        result: Zone = await self._fake._call("zones", "get_zone")
        return result

    async def get_zone_by_provider_id(self, provider_id: str) -> Zone:
        result: Zone = await self._fake._call("zones", "get_zone_by_provider_id", provider_id)
        return result

    async def get_zone_by_node_name(self, node_name: str) -> Zone:
        result: Zone = await self._fake._call("zones", "get_zone_by_node_name", node_name)
        return result


class _FakeClusters(_Part, Clusters):
    async def list_clusters(self) -> Sequence[str]:
        result: Sequence[str] = await self._fake._call("clusters", "list_clusters")
        return result

    async def master(self, cluster_name: str) -> str:
        return str(await self._fake._call("clusters", "master", cluster_name))


class _FakeRoutes(_Part, Routes):
    async def list_routes(self, cluster_name: str) -> Sequence[Route]:
        result: Sequence[Route] = await self._fake._call("routes", "list_routes", cluster_name)
        return result

    async def create_route(self, cluster_name: str, name_hint: str, route: Route) -> None:
        await self._fake._call("routes", "create_route", cluster_name, name_hint, route)

    async def delete_route(self, cluster_name: str, route: Route) -> None:
        await self._fake._call("routes", "delete_route", cluster_name, route)


__all__ = ["CAPABILITIES", "Call", "FakeLabelingProvider", "FakeProvider", "NotScriptedError"]
