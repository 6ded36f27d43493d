"""The ``ippool`` provider: LoadBalancer addresses from pools, state in the Kubernetes API.

See :mod:`kube_ccm.providers.ippool.provider` for what it does and
:mod:`kube_ccm.providers.ippool.config` for its cloud-config.
"""

from __future__ import annotations

from kube_ccm.providers.ippool.annotations import (
    ADDRESSES_ANNOTATION,
    SHARING_KEY_ANNOTATION,
    IPPoolError,
)
from kube_ccm.providers.ippool.config import IPPoolConfig, IPPoolConfigError, load_config
from kube_ccm.providers.ippool.provider import PROVIDER_NAME, IPPoolProvider


def factory(config: bytes | None) -> IPPoolProvider:
    """The ``ippool`` entry point: parse the cloud-config, touch no network."""
    return IPPoolProvider(load_config(config))


__all__ = [
    "ADDRESSES_ANNOTATION",
    "PROVIDER_NAME",
    "SHARING_KEY_ANNOTATION",
    "IPPoolConfig",
    "IPPoolConfigError",
    "IPPoolError",
    "IPPoolProvider",
    "factory",
    "load_config",
]
