"""The conformance kit against the ippool provider: load balancers only, state in the
Kubernetes API (an in-memory API server at contract level, the real one for the daemon).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kube_ccm.providers.ippool import factory
from kube_ccm.testing.conformance import ConformanceSuite, ConformanceTarget, DaemonSettings


class TestIPPoolConformance(ConformanceSuite):
    @pytest.fixture
    def conformance_provider(self, tmp_path: Path) -> ConformanceTarget:
        config = tmp_path / "ippool.yaml"
        # A pool of its own: claims of other tests' daemons in the shared cluster stay apart.
        config.write_text(
            yaml.safe_dump({"configMap": "", "pools": {"cidr-global": "172.20.40.0/24"}})
        )
        return ConformanceTarget(
            provider=lambda: factory(config.read_bytes()),
            daemon=DaemonSettings(cloud_provider="ippool", cloud_config=config),
        )

    @pytest.fixture
    def conformance_kubeconfig(self, ccm_kubeconfig: Path) -> Path:
        """The daemon runs with exactly the shipped RBAC (rbac-ippool.yaml included)."""
        return ccm_kubeconfig
