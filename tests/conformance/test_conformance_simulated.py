"""The conformance kit against the simulated provider, kube-ccm's embedded default.

Its cloud is a SQLite file: the driver changes it directly, the provider under test
and the daemon read it through the same cloud-config.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kube_ccm.providers.simulated import factory
from kube_ccm.providers.simulated.state import CloudState
from kube_ccm.testing.conformance import (
    ConformanceSuite,
    ConformanceTarget,
    DaemonSettings,
    InstanceDriver,
)


class SimulatedDriver(InstanceDriver):
    """Instances in the simulated cloud's state file; an outage is an injected fault."""

    def __init__(self, state: Path) -> None:
        self.state = CloudState(state)

    async def create_instance(self, name: str) -> None:
        await asyncio.to_thread(
            self.state.add_instance,
            name,
            zone="sim-zone-a",
            region="sim-region-1",
            instance_type="sim.standard-2",
        )

    async def stop_instance(self, name: str) -> None:
        await asyncio.to_thread(self.state.set_instance_state, name, "shutdown")

    async def start_instance(self, name: str) -> None:
        await asyncio.to_thread(self.state.set_instance_state, name, "running")

    async def delete_instance(self, name: str) -> None:
        await asyncio.to_thread(self.state.delete_instance, name)

    @contextlib.asynccontextmanager
    async def api_errors(self) -> AsyncIterator[None]:
        await asyncio.to_thread(self.state.set_fault, "*", "error")
        try:
            yield
        finally:
            await asyncio.to_thread(self.state.clear_faults, "*")


@pytest.fixture
def simulated(tmp_path: Path) -> Iterator[Callable[..., ConformanceTarget]]:
    """A target over a fresh simulated cloud; keyword arguments are cloud-config fields."""
    drivers: list[SimulatedDriver] = []

    def target(**fields: Any) -> ConformanceTarget:
        state = tmp_path / "cloud.db"
        config = tmp_path / "simcloud.yaml"
        # notFound: a Node without an instance has none (the default creates one).
        document = {"state": str(state), "unknownNodes": "notFound", **fields}
        config.write_text(yaml.safe_dump(document))
        drivers.append(SimulatedDriver(state))
        return ConformanceTarget(
            provider=lambda: factory(config.read_bytes()),
            driver=drivers[-1],
            daemon=DaemonSettings(cloud_provider="simulated", cloud_config=config),
        )

    yield target
    for driver in drivers:
        driver.state.close()


class TestSimulatedConformance(ConformanceSuite):
    @pytest.fixture
    def conformance_provider(
        self, simulated: Callable[..., ConformanceTarget]
    ) -> ConformanceTarget:
        return simulated()

    @pytest.fixture
    def conformance_kubeconfig(self, ccm_kubeconfig: Path) -> Path:
        """The daemon runs with exactly the shipped RBAC."""
        return ccm_kubeconfig


class TestSimulatedV1Conformance(TestSimulatedConformance):
    """The same cloud through the V1 instance API (``instancesApi: v1``): the node
    controllers take the V1 path (instance IDs, existence by providerID)."""

    @pytest.fixture
    def conformance_provider(
        self, simulated: Callable[..., ConformanceTarget]
    ) -> ConformanceTarget:
        return simulated(instancesApi="v1")
