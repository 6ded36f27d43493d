"""The ``simulated`` cloud: kube-ccm's embedded default provider.

Registered through the ``kube_ccm.cloud_providers`` entry point as
``simulated``; see :mod:`.config` for its cloud-config and :mod:`.provider`
for what it simulates.
"""

from __future__ import annotations

import logging

from kube_ccm.providers.simulated.config import SimulatedConfig, SimulatedConfigError, load_config
from kube_ccm.providers.simulated.provider import PROVIDER_NAME, SimulatedAuthError, SimulatedCloud

__all__ = [
    "PROVIDER_NAME",
    "SimulatedAuthError",
    "SimulatedCloud",
    "SimulatedConfig",
    "SimulatedConfigError",
    "factory",
]

log = logging.getLogger(__name__)


def factory(config: bytes | None) -> SimulatedCloud:
    """Build the simulated cloud from its cloud-config (``None``: a private in-memory cloud)."""
    if config is None:
        log.warning(
            "no --cloud-config for the simulated provider: using a private in-memory cloud "
            "that creates an instance for every node (give a cloud-config with `state: PATH` "
            "to inspect it with `kube-ccm simcloud`)"
        )
        return SimulatedCloud(SimulatedConfig(state=":memory:"))
    return SimulatedCloud(load_config(config))
