"""Several providers in one daemon: each capability from the provider chosen for it.

``--cloud-provider=composite`` with a cloud-config that says which registered
provider serves which capability, for example instances from libvirt and load
balancers from an IP pool::

    providers:
      libvirt:
        capabilities: [instances]
        cloudConfig: /etc/kube-ccm/libvirt.yaml   # that provider's own cloud-config file
      ippool:
        capabilities: [loadBalancer]
        config:                                   # ... or its cloud-config inline
          pools: {range-global: 192.0.2.10-192.0.2.99}

Capabilities: ``instances`` (InstancesV2, or Instances where that is all a provider
has), ``zones``, ``loadBalancer``, ``routes``, ``clusters``, ``volumeLabels`` (a
PVLabeler) and ``podCIDRs`` (NodePodCIDRs, for the cloud CIDR allocator).
Any registered provider can take part, installed packages included; a composite
cannot contain another. Everything is checked when the daemon starts, before any
network call: an unknown provider, an unknown capability, a capability the chosen
provider does not offer, a capability claimed twice, a provider serving nothing.
Each is one line that says what to change.

The composite's name (the providerID scheme of its Nodes) is the name of the provider
serving ``instances``, else of the one serving ``loadBalancer``, else ``composite``.
Its cloud calls are metered and logged under the member serving each capability
(:attr:`CompositeProvider.serving`, which the daemon hands the cloud-call boundary):
``cloudprovider_<member>_api_request_errors{request}``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import yaml

from kube_ccm.api.objects import PersistentVolume
from kube_ccm.cloudprovider import (
    ClientBuilder,
    CloudProvider,
    Clusters,
    InformerUser,
    Instances,
    InstancesV2,
    InvalidCloudConfigError,
    LoadBalancer,
    Node,
    NodePodCIDRs,
    PVLabeler,
    Registry,
    Routes,
    Zones,
    default_registry,
)
from kube_ccm.cloudprovider.config import DuplicateKeyError, convert_config, parse_yaml

__all__ = [
    "CAPABILITIES",
    "COMPOSITE",
    "CompositeConfigError",
    "CompositeProvider",
    "build_composite",
    "factory",
]

COMPOSITE = "composite"

CAPABILITIES = (
    "instances",
    "zones",
    "loadBalancer",
    "routes",
    "clusters",
    "volumeLabels",
    "podCIDRs",
)


log = logging.getLogger(__name__)


class CompositeConfigError(InvalidCloudConfigError):
    """The composite cloud-config is invalid; the message says what to change."""


class _Member(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    capabilities: list[str]
    cloud_config: str | None = None
    config: Any = None


class _Config(msgspec.Struct, forbid_unknown_fields=True):
    providers: dict[str, _Member]


def offers(provider: CloudProvider) -> tuple[str, ...]:
    """The capabilities ``provider`` offers, in :data:`CAPABILITIES` order."""
    has = {
        "instances": provider.instances_v2() is not None or provider.instances() is not None,
        "zones": provider.zones() is not None,
        "loadBalancer": provider.load_balancer() is not None,
        "routes": provider.routes() is not None,
        "clusters": provider.clusters() is not None,
        "volumeLabels": isinstance(provider, PVLabeler),
        "podCIDRs": isinstance(provider, NodePodCIDRs),
    }
    return tuple(c for c in CAPABILITIES if has[c])


@dataclass(frozen=True)
class _Built:
    name: str
    provider: CloudProvider


def _member_config(name: str, member: _Member, base_dir: Path | None) -> bytes | None:
    if member.cloud_config is not None and member.config is not None:
        raise CompositeConfigError(
            f"providers.{name} gives both `cloudConfig` (a file) and `config` (inline); keep one"
        )
    if member.cloud_config is not None:
        path = Path(member.cloud_config)
        if base_dir is not None and not path.is_absolute():
            path = base_dir / path
        try:
            return path.read_bytes()
        except OSError as exc:
            raise CompositeConfigError(
                f"providers.{name}.cloudConfig: cannot read {str(path)!r}: "
                f"{exc.strerror or exc}; check the path and that this process may read it"
            ) from exc
    if member.config is not None:
        return yaml.safe_dump(member.config).encode()
    return None


def build_composite(
    data: bytes | None,
    *,
    registry: Registry = default_registry,
    base_dir: Path | None = None,
) -> CompositeProvider:
    """Parse the composite cloud-config and build each member with its own factory.

    ``base_dir``: where relative ``cloudConfig`` paths start (default: the working
    directory, as for ``--cloud-config`` itself)."""
    if not data or not data.strip():
        raise CompositeConfigError(
            "--cloud-provider=composite needs a --cloud-config naming its providers, e.g. "
            "`providers: {simulated: {capabilities: [instances, loadBalancer]}}`"
        )
    try:
        raw = parse_yaml(data, provider=COMPOSITE, error=CompositeConfigError, unique_keys=True)
    except DuplicateKeyError as exc:
        raise CompositeConfigError(
            f"`{exc.key}` is given twice in one mapping (line {exc.line}); "
            "give each provider and each key once"
        ) from None
    config = convert_config(
        raw,
        _Config,
        provider=COMPOSITE,
        error=CompositeConfigError,
        see="; expected `providers:` mapping each provider name to `capabilities: [...]` "
        "and optionally `cloudConfig` or `config`",
    )
    if not config.providers:
        raise CompositeConfigError("`providers` is empty; name at least one provider")
    claimed: dict[str, str] = {}
    built: list[_Built] = []
    for name, member in config.providers.items():
        if name == COMPOSITE:
            raise CompositeConfigError(
                "a composite cannot contain another composite; list its providers directly"
            )
        if not member.capabilities:
            raise CompositeConfigError(
                f"providers.{name} serves no capability; list some under "
                f"`capabilities` ({', '.join(CAPABILITIES)}) or remove it"
            )
        for capability in member.capabilities:
            if capability not in CAPABILITIES:
                raise CompositeConfigError(
                    f"providers.{name}.capabilities names {capability!r}; the capabilities "
                    f"are {', '.join(CAPABILITIES)}"
                )
            if capability in claimed:
                raise CompositeConfigError(
                    f"{capability} is claimed by both {claimed[capability]!r} and {name!r}; "
                    "list it under one provider only"
                )
            claimed[capability] = name
        factory_ = registry.factory(name)
        if factory_ is None:
            known = ", ".join(n for n in registry.names() if n != COMPOSITE) or "none"
            raise CompositeConfigError(
                f"providers.{name}: no provider of that name is installed (known: {known}); "
                "fix the name or install its package"
            )
        try:
            provider = factory_(_member_config(name, member, base_dir))
        except CompositeConfigError:
            raise
        except Exception as exc:
            raise CompositeConfigError(f"providers.{name}: {exc}") from exc
        offered = offers(provider)
        for capability in member.capabilities:
            if capability not in offered:
                raise CompositeConfigError(
                    f"provider {name!r} does not offer {capability} (it offers: "
                    f"{', '.join(offered) or 'nothing'}); serve {capability} from another "
                    f"provider or remove it from providers.{name}.capabilities"
                )
        built.append(_Built(name, provider))
    providers = {b.name: b.provider for b in built}
    serving = {
        capability: claimed[capability] for capability in CAPABILITIES if capability in claimed
    }
    return _COMPOSITES["volumeLabels" in serving, "podCIDRs" in serving](providers, serving)


def factory(config: bytes | None) -> CompositeProvider:
    """The ``composite`` entry point."""
    return build_composite(config)


class CompositeProvider(CloudProvider, InformerUser):
    """A provider whose capabilities come from several providers (see the module)."""

    def __init__(self, providers: Mapping[str, CloudProvider], serving: Mapping[str, str]) -> None:
        self.providers = dict(providers)
        self.serving = dict(serving)
        """Capability → the name of the provider serving it."""

    def _of(self, capability: str) -> CloudProvider | None:
        name = self.serving.get(capability)
        return None if name is None else self.providers[name]

    def describe(self) -> dict[str, str]:
        """Which provider serves what (``/configz``, ``kube-ccm doctor``)."""
        return dict(self.serving)

    async def initialize(self, client_builder: ClientBuilder, stop: asyncio.Event) -> None:
        for provider in self.providers.values():
            await provider.initialize(client_builder, stop)

    async def aclose(self) -> None:
        results = await asyncio.gather(
            *(provider.aclose() for provider in self.providers.values()), return_exceptions=True
        )
        for name, result in zip(self.providers, results, strict=True):
            if isinstance(result, BaseException):
                log.warning("closing provider %s failed: %s", name, result)

    def set_informers(self, informers: Any) -> None:
        for provider in self.providers.values():
            if isinstance(provider, InformerUser):
                provider.set_informers(informers)

    def instances(self) -> Instances | None:
        provider = self._of("instances")
        return None if provider is None else provider.instances()

    def instances_v2(self) -> InstancesV2 | None:
        provider = self._of("instances")
        return None if provider is None else provider.instances_v2()

    def zones(self) -> Zones | None:
        provider = self._of("zones")
        return None if provider is None else provider.zones()

    def load_balancer(self) -> LoadBalancer | None:
        provider = self._of("loadBalancer")
        return None if provider is None else provider.load_balancer()

    def routes(self) -> Routes | None:
        provider = self._of("routes")
        return None if provider is None else provider.routes()

    def clusters(self) -> Clusters | None:
        provider = self._of("clusters")
        return None if provider is None else provider.clusters()

    def provider_name(self) -> str:
        for capability in ("instances", "loadBalancer"):
            if capability in self.serving:
                return self.serving[capability]
        return COMPOSITE

    def has_cluster_id(self) -> bool:
        return all(p.has_cluster_id() for p in self.providers.values())

    def members(self) -> Sequence[str]:
        return tuple(self.providers)


# A mix-in capability is the composite's own type, so there is a class for each
# combination of the mix-ins served.


class _LabelingComposite(CompositeProvider, PVLabeler):
    async def get_labels_for_volume(self, pv: PersistentVolume) -> Mapping[str, str]:
        labeler: object = self._of("volumeLabels")
        assert isinstance(labeler, PVLabeler)
        return await labeler.get_labels_for_volume(pv)


class _AllocatingComposite(CompositeProvider, NodePodCIDRs):
    async def node_pod_cidrs(self, node: Node) -> Sequence[str]:
        allocator: object = self._of("podCIDRs")
        assert isinstance(allocator, NodePodCIDRs)
        return await allocator.node_pod_cidrs(node)


class _LabelingAllocatingComposite(_LabelingComposite, _AllocatingComposite):
    pass


_COMPOSITES: Mapping[tuple[bool, bool], type[CompositeProvider]] = {
    (False, False): CompositeProvider,
    (True, False): _LabelingComposite,
    (False, True): _AllocatingComposite,
    (True, True): _LabelingAllocatingComposite,
}
"""(serves volumeLabels, serves podCIDRs) → the composite's class."""
