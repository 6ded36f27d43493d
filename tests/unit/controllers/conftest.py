"""Controller unit tests run in a :mod:`kube_ccm.testing.world`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from kube_ccm.testing.world import World, controller_world


@pytest.fixture
def cloud_config() -> dict[str, Any]:
    """Override (or parametrize) to configure the simulated cloud."""
    return {}


@pytest.fixture
async def world(cloud_config: dict[str, Any]) -> AsyncIterator[World]:
    async with controller_world(**cloud_config) as built:
        yield built
