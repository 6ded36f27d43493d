"""The provider conformance kit: kube-ccm's checks of the provider contract, run by pytest
in your provider's own test suite.

Enable it in your ``conftest.py`` and say what to test with a ``conformance_provider``
fixture::

    # conftest.py
    import pytest
    from kube_ccm.testing.conformance import ConformanceTarget, DaemonSettings

    pytest_plugins = ["kube_ccm.testing.conformance"]

    @pytest.fixture
    def conformance_provider(tmp_path) -> ConformanceTarget:
        config = tmp_path / "cloud.yaml"
        config.write_text(...)
        return ConformanceTarget(
            provider=lambda: factory(config.read_bytes()),
            driver=MyCloudDriver(...),                    # optional: makes instances
            daemon=DaemonSettings(cloud_provider="mycloud", cloud_config=config),
        )

then collect the checks by subclassing the suite in a test module::

    # test_conformance.py
    from kube_ccm.testing.conformance import ConformanceSuite

    class TestConformance(ConformanceSuite):
        pass

Every check is a test of its own (``TestConformance::test_a_deleted_instance_does_not_exist``);
checks of capabilities the provider does not offer, or that need what the target does
not give (a driver, daemon settings), are skipped with the reason. ``ContractChecks``
alone calls the provider directly (no cluster, fast); ``DaemonChecks`` alone runs
``kube-ccm run`` on a real control plane (the fixtures of
:mod:`kube_ccm.testing.pytest_plugin`, which this plugin loads); ``ConformanceSuite``
is both. The fixture may also be defined in the subclass itself. The checks are marked
``asyncio`` and need ``pytest-asyncio`` (the ``kube-ccm[testing]`` extra). See
``docs/providers.md``, section "Test it".

Every assertion of the kit carries its message, so pytest need not rewrite it
(PYTEST_DONT_REWRITE: no warning when a ``conftest.py`` imports it before loading it).
"""

from __future__ import annotations

from kube_ccm.testing.conformance._contract import ContractChecks
from kube_ccm.testing.conformance._daemon import DaemonChecks, DaemonHarness
from kube_ccm.testing.conformance._harness import Conformance, KitClientBuilder, open_conformance
from kube_ccm.testing.conformance._target import ConformanceTarget, DaemonSettings, InstanceDriver

pytest_plugins = ["kube_ccm.testing.pytest_plugin"]


class ConformanceSuite(ContractChecks, DaemonChecks):
    """Every check: subclass it as ``TestConformance`` in a test module."""


__all__ = [
    "Conformance",
    "ConformanceSuite",
    "ConformanceTarget",
    "ContractChecks",
    "DaemonChecks",
    "DaemonHarness",
    "DaemonSettings",
    "InstanceDriver",
    "KitClientBuilder",
    "open_conformance",
]
