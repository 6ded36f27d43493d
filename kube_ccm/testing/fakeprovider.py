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

``FakeProvider(..., authoritative=True)`` makes its instances declare themselves the
cloud's own record (the kubelet serving certificate approver needs it; the contract's
default is False).

A capability not in ``capabilities`` is ``None`` (the provider does not offer it); a
method asked but not scripted raises :class:`NotScriptedError`, so a test states every
answer it relies on. Capabilities: ``load_balancer``, ``instances``, ``instances_v2``,
``zones``, ``clusters`` and ``routes``; method names are the contract's
(:mod:`kube_ccm.cloudprovider`). The optional hooks ``initialize`` and ``aclose`` are
recorded too (capability ``provider``) but do nothing unless scripted, as the
contract's defaults.

The mix-ins are subclasses, so that ``isinstance`` sees them as the daemon does:
:class:`FakeLabelingProvider` also labels volumes (``get_labels_for_volume``, the
:class:`~kube_ccm.cloudprovider.PVLabeler` mix-in), :class:`FakeInformerUser` also
takes the daemon's informers (``set_informers``, the
:class:`~kube_ccm.cloudprovider.InformerUser` mix-in; it does nothing unless scripted).

The configuration comes first and positionally, so the class is itself a provider
factory for a :class:`~kube_ccm.cloudprovider.Registry`, and remembers what it was
given in :attr:`FakeProvider.config`::

    registry.register("mycloud", FakeProvider)
    registry.register("labels", functools.partial(FakeLabelingProvider, name="labels"))
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from kube_ccm.api.objects import LoadBalancerStatus, Node, NodeAddress, PersistentVolume, Service
from kube_ccm.cloudprovider import (
    ClientBuilder,
    CloudProvider,
    Clusters,
    InformerUser,
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

_HOOKS = frozenset({"initialize", "aclose", "set_informers"})
"""The optional hooks: recorded, and answered with ``None`` unless scripted."""

_P = TypeVar("_P", bound="_Part")


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
        config: bytes | None = None,
        *,
        name: str = "fake",
        capabilities: Iterable[str] = (),
        answers: Mapping[str, Any] | None = None,
        cluster_id: bool = True,
        authoritative: bool = False,
    ) -> None:
        self._capabilities = frozenset(capabilities)
        unknown = self._capabilities - CAPABILITIES
        if unknown:
            raise ValueError(
                f"unknown capabilities {sorted(unknown)}; known: {sorted(CAPABILITIES)}"
            )
        self.config = config
        """The cloud-config the provider was built with (a registry's factory passes it)."""
        self._name = name
        self._cluster_id = cluster_id
        self.authoritative = authoritative
        """What the instances capabilities declare as ``authoritative`` (the contract's
        default, False, unless given)."""
        self._answers: dict[str, Any] = dict.fromkeys(_HOOKS) | dict(answers or {})
        self._delays: dict[str, float] = {}
        self.calls: list[Call] = []
        self._parts = [part(self) for part in _PARTS if part.capability in self._capabilities]

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

    async def initialize(self, client_builder: ClientBuilder, stop: asyncio.Event) -> None:
        await self._call("provider", "initialize", client_builder, stop)

    async def aclose(self) -> None:
        await self._call("provider", "aclose")

    def _offered(self, part: type[_P]) -> _P | None:
        """The ``part`` if its capability is offered, else ``None``."""
        return next((p for p in self._parts if isinstance(p, part)), None)

    def load_balancer(self) -> LoadBalancer | None:
        return self._offered(_FakeLoadBalancer)

    def instances(self) -> Instances | None:
        return self._offered(_FakeInstances)

    def instances_v2(self) -> InstancesV2 | None:
        return self._offered(_FakeInstancesV2)

    def zones(self) -> Zones | None:
        return self._offered(_FakeZones)

    def clusters(self) -> Clusters | None:
        return self._offered(_FakeClusters)

    def routes(self) -> Routes | None:
        return self._offered(_FakeRoutes)


class FakeLabelingProvider(FakeProvider, PVLabeler):
    """A :class:`FakeProvider` that also labels volumes (the :class:`PVLabeler`
    mix-in): script ``get_labels_for_volume`` like any other method."""

    async def get_labels_for_volume(self, pv: PersistentVolume) -> Mapping[str, str]:
        labels: Mapping[str, str] = await self._call("pv_labeler", "get_labels_for_volume", pv)
        return labels


class FakeInformerUser(FakeProvider, InformerUser):
    """A :class:`FakeProvider` that also takes the daemon's shared informers (the
    :class:`InformerUser` mix-in): ``set_informers`` is recorded, does nothing unless
    scripted, and raises what it is scripted to (``fake.fail("set_informers", ...)``)."""

    def set_informers(self, informers: Any) -> None:
        self._call_sync("informers", "set_informers", informers)


class _Part:
    capability = ""
    """The capability's name in :data:`CAPABILITIES`."""
    authoritative: bool = False

    def __init__(self, fake: FakeProvider) -> None:
        self._fake = fake
        self.authoritative = fake.authoritative

    async def _call(self, method: str, *args: Any) -> Any:
        return await self._fake._call(self.capability, method, *args)

    def _call_sync(self, method: str, *args: Any) -> Any:
        return self._fake._call_sync(self.capability, method, *args)


class _FakeLoadBalancer(_Part, LoadBalancer):
    capability = "load_balancer"

    async def get_load_balancer(
        self, cluster_name: str, service: Service
    ) -> LoadBalancerStatus | None:
        result: LoadBalancerStatus | None = await self._call(
            "get_load_balancer", cluster_name, service
        )
        return result

    def get_load_balancer_name(self, cluster_name: str, service: Service) -> str:
        return str(self._call_sync("get_load_balancer_name", cluster_name, service))

    async def ensure_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> LoadBalancerStatus:
        result: LoadBalancerStatus = await self._call(
            "ensure_load_balancer", cluster_name, service, nodes
        )
        return result

    async def update_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> None:
        await self._call("update_load_balancer", cluster_name, service, nodes)

    async def ensure_load_balancer_deleted(self, cluster_name: str, service: Service) -> None:
        await self._call("ensure_load_balancer_deleted", cluster_name, service)


class _FakeInstances(_Part, Instances):
    capability = "instances"

    async def node_addresses(self, node_name: str) -> tuple[NodeAddress, ...]:
        return tuple(await self._call("node_addresses", node_name))

    async def node_addresses_by_provider_id(self, provider_id: str) -> tuple[NodeAddress, ...]:
        return tuple(await self._call("node_addresses_by_provider_id", provider_id))

    async def instance_id(self, node_name: str) -> str:
        return str(await self._call("instance_id", node_name))

    async def instance_type(self, node_name: str) -> str:
        return str(await self._call("instance_type", node_name))

    async def instance_type_by_provider_id(self, provider_id: str) -> str:
        return str(await self._call("instance_type_by_provider_id", provider_id))

    async def instance_exists_by_provider_id(self, provider_id: str) -> bool:
        return bool(await self._call("instance_exists_by_provider_id", provider_id))

    async def instance_shutdown_by_provider_id(self, provider_id: str) -> bool:
        return bool(await self._call("instance_shutdown_by_provider_id", provider_id))

    async def add_ssh_key_to_all_instances(self, user: str, key: bytes) -> None:
        await self._call("add_ssh_key_to_all_instances", user, key)

    async def current_node_name(self, hostname: str) -> str:
        return str(await self._call("current_node_name", hostname))

    async def instance_belongs_to(self, node_name: str, metadata: InstanceMetadata) -> bool:
        return bool(await self._call("instance_belongs_to", node_name, metadata))


class _FakeInstancesV2(_Part, InstancesV2):
    capability = "instances_v2"

    async def instance_exists(self, node: Node) -> bool:
        return bool(await self._call("instance_exists", node))

    async def instance_shutdown(self, node: Node) -> bool:
        return bool(await self._call("instance_shutdown", node))

    async def instance_metadata(self, node: Node) -> InstanceMetadata | None:
        result: InstanceMetadata | None = await self._call("instance_metadata", node)
        return result

    async def instance_belongs_to(self, node_name: str, metadata: InstanceMetadata) -> bool:
        return bool(await self._call("instance_belongs_to", node_name, metadata))


class _FakeZones(_Part, Zones):
    capability = "zones"

    async def get_zone(self) -> Zone:
        result: Zone = await self._call("get_zone")
        return result

    async def get_zone_by_provider_id(self, provider_id: str) -> Zone:
        result: Zone = await self._call("get_zone_by_provider_id", provider_id)
        return result

    async def get_zone_by_node_name(self, node_name: str) -> Zone:
        result: Zone = await self._call("get_zone_by_node_name", node_name)
        return result


class _FakeClusters(_Part, Clusters):
    capability = "clusters"

    async def list_clusters(self) -> Sequence[str]:
        result: Sequence[str] = await self._call("list_clusters")
        return result

    async def master(self, cluster_name: str) -> str:
        return str(await self._call("master", cluster_name))


class _FakeRoutes(_Part, Routes):
    capability = "routes"

    async def list_routes(self, cluster_name: str) -> Sequence[Route]:
        result: Sequence[Route] = await self._call("list_routes", cluster_name)
        return result

    async def create_route(self, cluster_name: str, name_hint: str, route: Route) -> None:
        await self._call("create_route", cluster_name, name_hint, route)

    async def delete_route(self, cluster_name: str, route: Route) -> None:
        await self._call("delete_route", cluster_name, route)


_PARTS: tuple[type[_Part], ...] = (
    _FakeLoadBalancer,
    _FakeInstances,
    _FakeInstancesV2,
    _FakeZones,
    _FakeClusters,
    _FakeRoutes,
)
CAPABILITIES = frozenset(part.capability for part in _PARTS)
"""The capabilities a :class:`FakeProvider` can offer, by the contract's accessor names."""

__all__ = ["FakeInformerUser", "FakeLabelingProvider", "FakeProvider"]
