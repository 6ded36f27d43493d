"""The ``libvirt`` provider: Node metadata from libvirt domains (KVM/QEMU hosts).

See :mod:`kube_ccm.providers.libvirt.provider` for what it reports and
:mod:`kube_ccm.providers.libvirt.config` for its cloud-config. Needs libvirt's Python
bindings: ``pip install 'kube-ccm[libvirt]'``.
"""

from __future__ import annotations

from kube_ccm.providers.libvirt.config import LibvirtConfig, LibvirtConfigError, load_config
from kube_ccm.providers.libvirt.provider import (
    METADATA_NAMESPACE,
    PROVIDER_NAME,
    LibvirtError,
    LibvirtProvider,
    LibvirtUnavailableError,
    parse_provider_id,
)


def factory(config: bytes | None) -> LibvirtProvider:
    """The ``libvirt`` entry point: parse the cloud-config and import the bindings;
    connections are opened in ``initialize``."""
    return LibvirtProvider(load_config(config))


__all__ = [
    "METADATA_NAMESPACE",
    "PROVIDER_NAME",
    "LibvirtConfig",
    "LibvirtConfigError",
    "LibvirtError",
    "LibvirtProvider",
    "LibvirtUnavailableError",
    "factory",
    "load_config",
    "parse_provider_id",
]
