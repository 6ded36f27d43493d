"""The ``proxmox`` provider: Node metadata from QEMU VMs in Proxmox VE clusters.

See :mod:`kube_ccm.providers.proxmox.provider` for what it reports and
:mod:`kube_ccm.providers.proxmox.config` for its cloud-config. It talks to PVE's API
with aiohttp (a core dependency), so the ``proxmox`` extra adds nothing today; it is
there so ``pip install 'kube-ccm[proxmox]'`` keeps working if that changes.
"""

from __future__ import annotations

from kube_ccm.providers.proxmox.api import (
    ProxmoxAuthError,
    ProxmoxError,
    ProxmoxLockedError,
    ProxmoxTLSError,
    ProxmoxUnavailableError,
)
from kube_ccm.providers.proxmox.config import (
    PROVIDER_NAME,
    ProxmoxConfig,
    ProxmoxConfigError,
    load_config,
)
from kube_ccm.providers.proxmox.provider import (
    DUPLICATE_REASON,
    ProxmoxProvider,
    parse_provider_id,
)


def factory(config: bytes | None) -> ProxmoxProvider:
    """The ``proxmox`` entry point: parse the cloud-config and read the token secrets;
    connections are opened on first use."""
    return ProxmoxProvider(load_config(config))


__all__ = [
    "DUPLICATE_REASON",
    "PROVIDER_NAME",
    "ProxmoxAuthError",
    "ProxmoxConfig",
    "ProxmoxConfigError",
    "ProxmoxError",
    "ProxmoxLockedError",
    "ProxmoxProvider",
    "ProxmoxTLSError",
    "ProxmoxUnavailableError",
    "factory",
    "load_config",
    "parse_provider_id",
]
