"""kube-ccm's conformance kit, contract and daemon level, against the provider on the
fake DigitalOcean API (on loopback, served by this test process; the daemon the kit
starts reaches it too). The daemon is the package's own command, which registers the
provider itself, so the kit runs whether or not the package is installed
(``test_entry_point.py`` proves the entry point)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from kube_ccm.testing.conformance import (
    ConformanceSuite,
    ConformanceTarget,
    DaemonSettings,
    InstanceDriver,
)

import kube_ccm_digitalocean
from kube_ccm_digitalocean.provider import factory
from kube_ccm_digitalocean.testing import FakeDigitalOcean, write_config

PACKAGE = Path(kube_ccm_digitalocean.__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def api() -> Iterator[FakeDigitalOcean]:
    with FakeDigitalOcean() as server:
        yield server


class FakeDropletDriver(InstanceDriver):
    """Droplets named as the kit's Nodes; an outage is every request answered 503."""

    def __init__(self, fake: FakeDigitalOcean) -> None:
        self.fake = fake
        self._ids: dict[str, int] = {}

    async def create_instance(self, name: str) -> None:
        self._ids[name] = self.fake.add_droplet(name)["id"]

    async def stop_instance(self, name: str) -> None:
        self.fake.set_droplet_status(self._ids[name], "off")

    async def start_instance(self, name: str) -> None:
        self.fake.set_droplet_status(self._ids[name], "active")

    async def delete_instance(self, name: str) -> None:
        droplet_id = self._ids.pop(name, None)
        if droplet_id is not None:
            self.fake.delete_droplet(droplet_id)

    @contextlib.asynccontextmanager
    async def api_errors(self) -> AsyncIterator[None]:
        with self.fake.failing(503):
            yield


def daemon_env() -> dict[str, str]:
    """The package on the daemon's path, as installed or not."""
    paths = (str(PACKAGE), os.environ.get("PYTHONPATH", ""))
    return {"PYTHONPATH": os.pathsep.join(p for p in paths if p)}


class TestDigitalOceanConformance(ConformanceSuite):
    @pytest.fixture
    def conformance_provider(self, api: FakeDigitalOcean, tmp_path: Path) -> ConformanceTarget:
        # No droplet cache: the kit deletes an instance and asks at once.
        config = write_config(api, tmp_path, dropletCacheTTL="0s")
        return ConformanceTarget(
            provider=lambda: factory(config.read_bytes()),
            driver=FakeDropletDriver(api),
            daemon=DaemonSettings(
                cloud_provider="digitalocean",
                cloud_config=config,
                command=(sys.executable, "-m", "kube_ccm_digitalocean.main"),
                env=daemon_env(),
            ),
        )
