"""The conformance kit against the k3s provider, at contract level and without a driver.

The kit's instance checks make, stop and delete instances through a driver and then
ask about a Node that carries nothing but its name. A k3s "instance" is the Node
itself (its ``k3s.io/*`` annotations), which k3s says always exists and is never
shut down: no driver can make those checks hold without contradicting k3s, so they
skip, and ``tests/unit/providers/test_k3s.py`` covers that behaviour case by case. The
daemon, on a real apiserver, is in ``tests/integration/test_daemon_k3s.py``.
"""

from __future__ import annotations

import pytest

from kube_ccm.providers.k3s import factory, rke2_factory
from kube_ccm.testing.conformance import ConformanceTarget, ContractChecks


class TestK3sConformance(ContractChecks):
    @pytest.fixture
    def conformance_provider(self) -> ConformanceTarget:
        return ConformanceTarget(provider=lambda: factory(None))


class TestRke2Conformance(ContractChecks):
    @pytest.fixture
    def conformance_provider(self) -> ConformanceTarget:
        return ConformanceTarget(provider=lambda: rke2_factory(None))
