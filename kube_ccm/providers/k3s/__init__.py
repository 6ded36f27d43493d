"""The ``k3s`` and ``rke2`` providers: instances from the Nodes themselves, as the CCM
embedded in k3s and rke2.

See :mod:`kube_ccm.providers.k3s.provider` for what they answer and
:mod:`kube_ccm.providers.k3s.config` for their (optional) cloud-config.
"""

from __future__ import annotations

from kube_ccm.providers.k3s.config import K3sConfig, K3sConfigError, load_config
from kube_ccm.providers.k3s.provider import (
    K3S,
    RKE2,
    K3sAddressError,
    K3sInstances,
    K3sProvider,
    node_addresses,
)


def factory(config: bytes | None) -> K3sProvider:
    """The ``k3s`` entry point: addresses from ``k3s.io/*``, providerIDs ``k3s://<node>``."""
    return K3sProvider(load_config(config, provider=K3S), name=K3S)


def rke2_factory(config: bytes | None) -> K3sProvider:
    """The ``rke2`` entry point: addresses from ``rke2.io/*``, providerIDs ``rke2://<node>``."""
    return K3sProvider(load_config(config, provider=RKE2), name=RKE2)


__all__ = [
    "K3S",
    "RKE2",
    "K3sAddressError",
    "K3sConfig",
    "K3sConfigError",
    "K3sInstances",
    "K3sProvider",
    "factory",
    "load_config",
    "node_addresses",
    "rke2_factory",
]
