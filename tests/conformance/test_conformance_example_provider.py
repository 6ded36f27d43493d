"""The conformance kit against the example provider (examples/minimal-provider, the
output of ``kube-ccm new-provider example``), as an out-of-tree package runs it: its
fake cloud is a state file the driver and the daemon share.

The target (the provider, the driver of the fake cloud, the daemon's settings) is the
package's own, from its ``tests/test_conformance.py``, which runs the kit with the
control plane's admin credentials (``tests/integration/test_example_provider.py``
runs it). Here the daemon is the package's own command (its main.py registers the
provider) with exactly the shipped RBAC.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

from kube_ccm.testing.conformance import ConformanceSuite, ConformanceTarget

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "minimal-provider"


def package_tests() -> ModuleType:
    """The package's ``tests/test_conformance.py`` (not on any import path)."""
    spec = importlib.util.spec_from_file_location(
        "kube_ccm_example_test_conformance", EXAMPLE / "tests" / "test_conformance.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


conformance_provider = package_tests().conformance_provider
"""The package's fixture, here so that the class's below can take it and change it."""


class TestExampleProviderConformance(ConformanceSuite):
    @pytest.fixture
    def conformance_provider(self, conformance_provider: ConformanceTarget) -> ConformanceTarget:
        """The package's target, its daemon run as ``python -m kube_ccm_example.main``."""
        assert conformance_provider.daemon is not None
        path = os.pathsep.join(p for p in (str(EXAMPLE), os.environ.get("PYTHONPATH")) if p)
        daemon = dataclasses.replace(
            conformance_provider.daemon,
            command=(sys.executable, "-m", "kube_ccm_example.main"),
            env={"PYTHONPATH": path},
        )
        return dataclasses.replace(conformance_provider, daemon=daemon)

    @pytest.fixture
    def conformance_kubeconfig(self, ccm_kubeconfig: Path) -> Path:
        """The daemon runs with exactly the shipped RBAC."""
        return ccm_kubeconfig
