"""The conformance kit against the servicelb provider, at contract level: load balancers
only, its DaemonSets in an in-memory API server that serves them (and pods,
EndpointSlices, PriorityClasses).

The daemon level is left out: its check waits for an ingress, which servicelb gives
only once svclb pods are ready, and no DaemonSet controller or kubelet runs there. The
daemon, with the test playing both, is ``tests/integration/test_daemon_servicelb.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

from kube_ccm.providers.servicelb import factory
from kube_ccm.testing.conformance import ConformanceTarget, ContractChecks
from kube_ccm.testing.fakeapi import DEFAULT_RESOURCES, FakeApiServer, ResourceType

RESOURCES = (
    *DEFAULT_RESOURCES,
    ResourceType("apps/v1", "daemonsets", "DaemonSet", namespaced=True, status=True),
    ResourceType("v1", "pods", "Pod", namespaced=True, status=True),
    ResourceType("discovery.k8s.io/v1", "endpointslices", "EndpointSlice", namespaced=True),
    ResourceType("scheduling.k8s.io/v1", "priorityclasses", "PriorityClass", namespaced=False),
)


class _Builder:
    def __init__(self) -> None:
        self.fake = FakeApiServer(resources=RESOURCES)

    def client(self, name: str) -> Any:
        return self.fake.client()

    def config(self, name: str) -> Any:
        raise NotImplementedError


class TestServiceLBConformance(ContractChecks):
    @pytest.fixture
    def conformance_provider(self) -> ConformanceTarget:
        return ConformanceTarget(provider=lambda: factory(None), client_builder=_Builder())
