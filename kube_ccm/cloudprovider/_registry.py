"""Finding and building the cloud provider named by ``--cloud-provider`` (upstream ``plugins.go``).

Two ways in, one namespace:

* **Explicit registration**: ``register_cloud_provider("mycloud", factory)``, e.g.
  from a custom main before the daemon starts.
* **Installed packages**: a distribution declares an entry point in the group
  ``kube_ccm.cloud_providers``; the entry point's *name* is the provider name and
  its *value* must point at the factory itself (``mycloud.provider:create``), not at
  a module. Entry points are listed on first lookup and a factory is imported only
  when its name is asked for, so installed-but-unused providers cost nothing::

      [project.entry-points."kube_ccm.cloud_providers"]
      mycloud = "mycloud.provider:create"

Registering one name twice, or two distributions declaring one name with
different factories, raises :class:`DuplicateCloudProviderError` (upstream: fatal).
An explicit registration made before the first lookup of its name wins over an
installed entry point of that name, so a custom main can override a package.

The factory receives the **contents** of the ``--cloud-config`` file as ``bytes``,
or ``None`` when no file was given, and returns a :class:`CloudProvider`. It is
synchronous on purpose: it should only parse configuration; network work belongs
in :meth:`CloudProvider.initialize`. Reading the file here, not in the factory,
gives every provider the same error for an unreadable file.

All state lives in a :class:`Registry`; the module-level functions use
:data:`default_registry`. Tests build their own ``Registry`` (optionally with
``entry_point_group=None`` to ignore installed packages).
"""

from __future__ import annotations

import importlib.metadata
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TypeAlias

from kube_ccm.api.wellknown import EXTERNAL_CLOUD_PROVIDER
from kube_ccm.cloudprovider._errors import (
    CloudConfigFileError,
    CloudProviderInitError,
    DuplicateCloudProviderError,
    ProviderEntryPointError,
    UnknownCloudProviderError,
)
from kube_ccm.cloudprovider._interface import CloudProvider

__all__ = [
    "ENTRY_POINT_GROUP",
    "CloudProviderFactory",
    "Registry",
    "default_registry",
    "get_cloud_provider",
    "init_cloud_provider",
    "is_cloud_provider",
    "is_external",
    "register_cloud_provider",
]

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "kube_ccm.cloud_providers"
"""Entry-point group under which installed packages declare provider factories."""

CloudProviderFactory: TypeAlias = Callable[[bytes | None], CloudProvider]
"""Builds a provider from the ``--cloud-config`` file contents (``None``: no file given)."""


def _distribution(entry_point: importlib.metadata.EntryPoint) -> str:
    dist = entry_point.dist
    if dist is None:
        return "an unknown distribution"
    return f"{dist.name} {dist.version}"


class Registry:
    """Provider factories by name: explicit registrations plus installed entry points.

    Thread-safe; lookups of entry points happen at most once per name.
    """

    def __init__(self, *, entry_point_group: str | None = ENTRY_POINT_GROUP) -> None:
        self._group = entry_point_group
        self._lock = threading.RLock()
        self._factories: dict[str, CloudProviderFactory] = {}
        self._entry_points: dict[str, importlib.metadata.EntryPoint] | None = None

    def register(self, name: str, factory: CloudProviderFactory) -> None:
        """Register ``factory`` under ``name``.

        Raises :class:`DuplicateCloudProviderError` (``Cloud provider "<name>" was
        registered twice``) if the name is already registered, or was already
        looked up and loaded from an entry point.
        """
        with self._lock:
            if name in self._factories:
                raise DuplicateCloudProviderError(name)
            self._factories[name] = factory
            log.info("Registered cloud provider %r", name)

    def is_cloud_provider(self, name: str) -> bool:
        """Whether ``name`` is registered or declared by an installed package."""
        with self._lock:
            return name in self._factories or name in self._discover()

    def names(self) -> tuple[str, ...]:
        """Every known provider name, sorted (entry points are listed, not imported)."""
        with self._lock:
            return tuple(sorted(self._factories.keys() | self._discover().keys()))

    def factory(self, name: str) -> CloudProviderFactory | None:
        """The factory for ``name``, importing its entry point if needed; ``None`` if unknown.

        Raises :class:`ProviderEntryPointError` when the declaring package cannot be
        imported or its entry point is not a callable factory.
        """
        with self._lock:
            factory = self._factories.get(name)
            if factory is not None:
                return factory
            entry_point = self._discover().get(name)
            if entry_point is None:
                return None
            factory = self._load(name, entry_point)
            self._factories[name] = factory
            return factory

    def get_cloud_provider(self, name: str, config: bytes | None) -> CloudProvider | None:
        """Build the provider ``name`` from ``config``; ``None`` if no such provider.

        Errors of the factory propagate unchanged.
        """
        factory = self.factory(name)
        if factory is None:
            return None
        return factory(config)

    def init_cloud_provider(self, name: str, config_path: str | None) -> CloudProvider | None:
        """Build the provider for ``--cloud-provider=name --cloud-config=config_path``.

        Upstream's five steps:

        1. empty ``name`` → ``None``;
        2. ``external`` → logs "External cloud provider specified" and returns ``None``;
        3. a non-empty ``config_path`` is read; failure raises :class:`CloudConfigFileError`
           naming the file (upstream exits at once); no path gives the factory ``None``;
        4. a factory error raises :class:`CloudProviderInitError`
           ``could not init cloud provider "<name>": <err>``, chained to the original;
        5. an unknown name raises :class:`UnknownCloudProviderError`
           ``unknown cloud provider "<name>"`` followed by the known names.

        A factory that returns something other than a :class:`CloudProvider` is
        reported as in step 4 (upstream would call the name unknown).
        """
        if not name:
            return None
        if is_external(name):
            log.info("External cloud provider specified")
            return None
        config: bytes | None = None
        if config_path:
            try:
                config = Path(config_path).read_bytes()
            except OSError as exc:
                raise CloudConfigFileError(config_path, exc.strerror or str(exc)) from exc
        factory = self.factory(name)
        if factory is None:
            raise UnknownCloudProviderError(name, self.names())
        try:
            provider = factory(config)
        except Exception as exc:
            raise CloudProviderInitError(name, exc) from exc
        if not isinstance(provider, CloudProvider):
            raise CloudProviderInitError(
                name,
                f"the factory returned {type(provider).__name__}, not a CloudProvider",
            )
        return provider

    def reset(self) -> None:
        """Forget every registration and the entry-point listing (for tests)."""
        with self._lock:
            self._factories.clear()
            self._entry_points = None

    # -- entry points ---------------------------------------------------------

    def _discover(self) -> dict[str, importlib.metadata.EntryPoint]:
        if self._entry_points is None:
            found: dict[str, importlib.metadata.EntryPoint] = {}
            if self._group is not None:
                for entry_point in importlib.metadata.entry_points(group=self._group):
                    other = found.get(entry_point.name)
                    if other is not None and other.value != entry_point.value:
                        raise DuplicateCloudProviderError(
                            entry_point.name,
                            f" (entry points in {_distribution(other)} and "
                            f"{_distribution(entry_point)}); uninstall one of them",
                        )
                    found[entry_point.name] = entry_point
            self._entry_points = found
        return self._entry_points

    def _load(self, name: str, entry_point: importlib.metadata.EntryPoint) -> CloudProviderFactory:
        distribution = _distribution(entry_point)
        try:
            loaded = entry_point.load()
        except Exception as exc:
            raise ProviderEntryPointError(
                f'cloud provider "{name}" from {distribution} could not be loaded '
                f"(entry point {entry_point.value!r}): {type(exc).__name__}: {exc}; "
                "reinstall or fix that package, or choose another --cloud-provider",
                name=name,
                distribution=distribution,
            ) from exc
        if isinstance(loaded, ModuleType) or not callable(loaded):
            raise ProviderEntryPointError(
                f'cloud provider "{name}" from {distribution}: entry point '
                f"{entry_point.value!r} must name a factory callable "
                "(module:function), not a module or other object",
                name=name,
                distribution=distribution,
            )
        factory: CloudProviderFactory = loaded
        return factory


def is_external(name: str) -> bool:
    """Whether ``name`` is the literal ``external`` (the provider runs elsewhere)."""
    return name == EXTERNAL_CLOUD_PROVIDER


default_registry = Registry()
"""The process-wide registry behind the module-level functions."""


def register_cloud_provider(name: str, factory: CloudProviderFactory) -> None:
    """Register ``factory`` under ``name`` in the default registry (:meth:`Registry.register`)."""
    default_registry.register(name, factory)


def is_cloud_provider(name: str) -> bool:
    """Whether ``name`` is known to the default registry."""
    return default_registry.is_cloud_provider(name)


def get_cloud_provider(name: str, config: bytes | None) -> CloudProvider | None:
    """Build provider ``name`` from the default registry; ``None`` if unknown."""
    return default_registry.get_cloud_provider(name, config)


def init_cloud_provider(name: str, config_path: str | None) -> CloudProvider | None:
    """:meth:`Registry.init_cloud_provider` on the default registry."""
    return default_registry.init_cloud_provider(name, config_path)
