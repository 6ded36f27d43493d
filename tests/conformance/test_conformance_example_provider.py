"""The conformance kit against the example provider (examples/minimal-provider, the
output of ``kube-ccm new-provider example``), as an out-of-tree package runs it: its
fake cloud is a state file the driver and the daemon share. The daemon is the
package's own command (its main.py registers the provider), with exactly the shipped
RBAC. (The package's own ``tests/test_conformance.py`` runs the kit too, with the
control plane's admin credentials; ``tests/integration/test_new_provider.py`` runs it.)
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kube_ccm_example.fake import FakeCloud
from kube_ccm_example.provider import factory

from kube_ccm.testing.conformance import (
    ConformanceSuite,
    ConformanceTarget,
    DaemonSettings,
    InstanceDriver,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "minimal-provider"


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


class TestExampleProviderConformance(ConformanceSuite):
    @pytest.fixture
    def conformance_provider(self, tmp_path: Path) -> ConformanceTarget:
        state = tmp_path / "cloud.json"
        config = tmp_path / "cloud.yaml"
        config.write_text(f"endpoint: fake:{state}\n")
        path = os.pathsep.join(p for p in (str(EXAMPLE), os.environ.get("PYTHONPATH")) if p)
        return ConformanceTarget(
            provider=lambda: factory(config.read_bytes()),
            driver=FakeDriver(FakeCloud(state)),
            daemon=DaemonSettings(
                cloud_provider="example",
                cloud_config=config,
                command=(sys.executable, "-m", "kube_ccm_example.main"),
                env={"PYTHONPATH": path},
            ),
        )

    @pytest.fixture
    def conformance_kubeconfig(self, ccm_kubeconfig: Path) -> Path:
        """The daemon runs with exactly the shipped RBAC."""
        return ccm_kubeconfig
