"""The conformance kit against the libvirt provider: instances only, on a real libvirtd
serving libvirt's test driver; the driver defines, starts, shuts off and undefines
domains, and an outage is libvirtd stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kube_ccm.providers.libvirt import factory
from kube_ccm.providers.libvirt.libvirtd import LibvirtdServer, LibvirtdUnavailableError
from kube_ccm.testing.conformance import (
    ConformanceSuite,
    ConformanceTarget,
    DaemonSettings,
    InstanceDriver,
)

VIR_ERR_NO_DOMAIN = 42


@pytest.fixture(scope="module")
def libvirtd() -> Iterator[LibvirtdServer]:
    # A short path: a unix socket's path is limited to 107 bytes.
    workdir = Path(f"/tmp/kc-conformance-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    server = LibvirtdServer(workdir)
    try:
        server.start()
    except LibvirtdUnavailableError as exc:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI needs libvirtd and the libvirt extra (make test installs them): {exc}")
        pytest.skip(str(exc))
    yield server
    server.stop()
    shutil.rmtree(workdir, ignore_errors=True)


class LibvirtDriver(InstanceDriver):
    """Domains on the test driver behind libvirtd, through the server's own connection."""

    def __init__(self, server: LibvirtdServer) -> None:
        self.server = server

    def _domain(self, name: str) -> Any:
        return self.server.connection().lookupByName(name)

    async def create_instance(self, name: str) -> None:
        def create() -> None:
            self.server.connection().defineXML(LibvirtdServer.domain_xml(name)).create()

        await asyncio.to_thread(create)

    async def stop_instance(self, name: str) -> None:
        await asyncio.to_thread(lambda: self._domain(name).destroy())

    async def start_instance(self, name: str) -> None:
        await asyncio.to_thread(lambda: self._domain(name).create())

    async def delete_instance(self, name: str) -> None:
        libvirt = LibvirtdServer.libvirt()

        def delete() -> None:
            try:
                domain = self._domain(name)
                if domain.isActive():
                    domain.destroy()
                domain.undefine()
            except libvirt.libvirtError as exc:
                if exc.get_error_code() != VIR_ERR_NO_DOMAIN:
                    raise

        await asyncio.to_thread(delete)

    @contextlib.asynccontextmanager
    async def api_errors(self) -> AsyncIterator[None]:
        """libvirtd stopped (its domains are lost with it, as the test driver's state
        lives in the daemon), started again afterwards."""
        await asyncio.to_thread(self.server.stop)
        try:
            yield
        finally:
            await asyncio.to_thread(self.server.start)


class TestLibvirtConformance(ConformanceSuite):
    @pytest.fixture
    def conformance_provider(self, libvirtd: LibvirtdServer, tmp_path: Path) -> ConformanceTarget:
        config = tmp_path / "libvirt.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "hosts": [{"uri": libvirtd.uri, "name": "hv1", "zone": "rack-1"}],
                    "addressSources": ["agent", "lease"],
                }
            )
        )
        return ConformanceTarget(
            provider=lambda: factory(config.read_bytes()),
            driver=LibvirtDriver(libvirtd),
            daemon=DaemonSettings(cloud_provider="libvirt", cloud_config=config),
        )

    @pytest.fixture
    def conformance_kubeconfig(self, ccm_kubeconfig: Path) -> Path:
        """The daemon runs with exactly the shipped RBAC."""
        return ccm_kubeconfig
