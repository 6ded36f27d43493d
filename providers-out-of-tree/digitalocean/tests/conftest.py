"""The fake DigitalOcean API on loopback, and the provider pointed at it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from kube_ccm.testing.conformance import KitClientBuilder

from kube_ccm_digitalocean.provider import DigitalOceanCloud, factory
from kube_ccm_digitalocean.testing import FakeDigitalOcean, write_config

pytest_plugins = ["kube_ccm.testing.conformance"]


@pytest.fixture
def fake() -> Iterator[FakeDigitalOcean]:
    with FakeDigitalOcean() as server:
        yield server


@pytest.fixture
async def cloud(fake: FakeDigitalOcean, tmp_path: Path) -> AsyncIterator[DigitalOceanCloud]:
    """The provider on the fake, initialised, its droplet cache off."""
    provider = factory(write_config(fake, tmp_path, dropletCacheTTL="0s").read_bytes())
    await provider.initialize(KitClientBuilder.in_memory(), asyncio.Event())
    yield provider
    await provider.aclose()
