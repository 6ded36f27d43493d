"""The conformance kit against the example provider (examples/minimal-provider), as an
out-of-tree package would run it: its cloud is the inventory in its cloud-config, which
the driver rewrites. The provider reads it once, so the driver is not live: the kit
builds the provider again, and restarts the daemon, after each change. The daemon is
the package's own command (its main.py registers the provider).
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_ccm_example.provider import factory

from kube_ccm.testing.conformance import (
    ConformanceSuite,
    ConformanceTarget,
    DaemonSettings,
    InstanceDriver,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "minimal-provider"


class InventoryDriver(InstanceDriver):
    """Instances are entries of the inventory file; deleting one removes its entry."""

    live = False

    def __init__(self, path: Path) -> None:
        self.path = path
        self.instances: dict[str, dict[str, Any]] = {}
        self._write()

    def _write(self) -> None:
        document = {"clusterID": "conformance", "instances": list(self.instances.values())}
        self.path.write_text(yaml.safe_dump(document))

    async def _change(self, name: str, entry: dict[str, Any] | None) -> None:
        if entry is None:
            self.instances.pop(name, None)
        else:
            self.instances[name] = entry
        await asyncio.to_thread(self._write)

    async def create_instance(self, name: str) -> None:
        number = len(self.instances) + 10
        await self._change(
            name,
            {
                "name": name,
                "providerID": f"example://i-{name}",
                "type": "m1.small",
                "zone": "zone-a",
                "region": "region-1",
                "addresses": [{"type": "InternalIP", "address": f"10.0.0.{number}"}],
            },
        )

    async def stop_instance(self, name: str) -> None:
        await self._change(name, {**self.instances[name], "state": "shutdown"})

    async def start_instance(self, name: str) -> None:
        await self._change(name, {**self.instances[name], "state": "running"})

    async def delete_instance(self, name: str) -> None:
        await self._change(name, None)


class TestExampleProviderConformance(ConformanceSuite):
    @pytest.fixture
    def conformance_provider(self, tmp_path: Path) -> ConformanceTarget:
        inventory = tmp_path / "inventory.yaml"
        path = os.pathsep.join(p for p in (str(EXAMPLE), os.environ.get("PYTHONPATH")) if p)
        return ConformanceTarget(
            provider=lambda: factory(inventory.read_bytes()),
            driver=InventoryDriver(inventory),
            daemon=DaemonSettings(
                cloud_provider="example",
                cloud_config=inventory,
                command=(sys.executable, "-m", "kube_ccm_example.main"),
                env={"PYTHONPATH": path},
            ),
        )

    @pytest.fixture
    def conformance_kubeconfig(self, ccm_kubeconfig: Path) -> Path:
        """The daemon runs with exactly the shipped RBAC."""
        return ccm_kubeconfig
