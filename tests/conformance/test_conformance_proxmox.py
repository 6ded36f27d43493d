"""The conformance kit against the proxmox provider: instances only, on fakepve (a fake
of the whole PVE API) served on loopback by this test process; the driver adds, stops,
starts and destroys VMs, and an outage is every request answered 503."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import yaml

from kube_ccm.providers.proxmox import factory
from kube_ccm.providers.proxmox.fakepve import (
    FakePveServer,
    FakePveUnavailableError,
    agent_interfaces,
)
from kube_ccm.testing.conformance import (
    ConformanceSuite,
    ConformanceTarget,
    DaemonSettings,
    InstanceDriver,
)


@pytest.fixture(scope="module")
def pve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakePveServer]:
    server = FakePveServer(tmp_path_factory.mktemp("fakepve"))
    try:
        server.start()
    except FakePveUnavailableError as exc:
        pytest.skip(str(exc))
    yield server
    server.stop()


class FakePveDriver(InstanceDriver):
    """VMs named as the Nodes, each with a guest agent reporting one address."""

    def __init__(self, server: FakePveServer) -> None:
        self.server = server
        self._ids = itertools.count(100)
        self._vmids: dict[str, int] = {}

    async def create_instance(self, name: str) -> None:
        vmid = next(self._ids)
        self._vmids[name] = vmid
        address = f"10.0.{vmid // 250}.{vmid % 250 + 1}"
        await asyncio.to_thread(self.server.add_vm, vmid, name, agent=agent_interfaces(address))

    async def stop_instance(self, name: str) -> None:
        await asyncio.to_thread(self.server.set_status, self._vmids[name], "stopped")

    async def start_instance(self, name: str) -> None:
        await asyncio.to_thread(self.server.set_status, self._vmids[name], "running")

    async def delete_instance(self, name: str) -> None:
        vmid = self._vmids.pop(name, None)
        if vmid is not None and self.server.vm(vmid) is not None:
            await asyncio.to_thread(self.server.remove_vm, vmid)

    @contextlib.asynccontextmanager
    async def api_errors(self) -> AsyncIterator[None]:
        pve = self.server.pve
        await self.server.acall(lambda: pve.fail("GET", "", 503, "proxy: upstream unavailable"))
        try:
            yield
        finally:
            await self.server.acall(pve.failures.clear)


class TestProxmoxConformance(ConformanceSuite):
    @pytest.fixture
    def conformance_provider(self, pve: FakePveServer, tmp_path: Path) -> ConformanceTarget:
        config = tmp_path / "proxmox.yaml"
        config.write_text(yaml.safe_dump({"clusters": [pve.cluster_config()], "cacheTTL": "0s"}))
        return ConformanceTarget(
            provider=lambda: factory(config.read_bytes()),
            driver=FakePveDriver(pve),
            daemon=DaemonSettings(cloud_provider="proxmox", cloud_config=config),
        )

    @pytest.fixture
    def conformance_kubeconfig(self, ccm_kubeconfig: Path) -> Path:
        """The daemon runs with exactly the shipped RBAC."""
        return ccm_kubeconfig
