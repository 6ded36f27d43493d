"""kube-ccm's conformance kit against this provider and its fake cloud, shared through
a file with the kube-ccm daemon the kit starts. Run it against your real cloud too:
give a driver that makes instances there, and the cloud-config of a test account."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kube_ccm.testing.conformance import (
    ConformanceSuite,
    ConformanceTarget,
    DaemonSettings,
    InstanceDriver,
)

from kube_ccm_mycloud import factory
from kube_ccm_mycloud.fake import FakeCloud


class FakeDriver(InstanceDriver):
    """Makes and changes instances in the fake cloud, by Node name."""

    def __init__(self, cloud: FakeCloud) -> None:
        self.cloud = cloud

    async def create_instance(self, name: str) -> None:
        self.cloud.add_instance(name)

    async def stop_instance(self, name: str) -> None:
        self.cloud.set_state(name, "stopped")

    async def start_instance(self, name: str) -> None:
        self.cloud.set_state(name, "running")

    async def delete_instance(self, name: str) -> None:
        self.cloud.set_state(name, "terminated")

    @contextlib.asynccontextmanager
    async def api_errors(self) -> AsyncIterator[None]:
        with self.cloud.state() as state:
            state.outage = True
        try:
            yield
        finally:
            with self.cloud.state() as state:
                state.outage = False


@pytest.fixture
def conformance_provider(tmp_path: Path) -> ConformanceTarget:
    state = tmp_path / "cloud.json"
    config = tmp_path / "cloud.yaml"
    config.write_text(f"endpoint: fake:{state}\n")
    return ConformanceTarget(
        provider=lambda: factory(config.read_bytes()),
        driver=FakeDriver(FakeCloud(state)),
        daemon=DaemonSettings(cloud_provider="mycloud", cloud_config=config),
    )


class TestConformance(ConformanceSuite):
    """Every check of the kit; those this provider cannot run are skipped, saying why."""
