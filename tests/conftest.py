"""Shared test configuration.

Integration tests (``tests/integration``) run against a real kube-apiserver and
etcd started once per session. Locally they skip, with the reason, when the
binaries cannot be built; under CI (``CI=true``) a skipped or missing
integration test fails the run, so green CI always means "proven on the real
thing".
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kube_ccm.testing.controlplane import controlplane_required

pytest_plugins = ["kube_ccm.testing.pytest_plugin"]

_INTEGRATION = Path(__file__).parent / "integration"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.path)).is_relative_to(_INTEGRATION):
            item.add_marker(pytest.mark.integration)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not controlplane_required():
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    collected_integration = any(
        Path(str(item.path)).is_relative_to(_INTEGRATION) for item in session.items
    )
    if not collected_integration:
        return  # e.g. `pytest tests/unit`: integration tests were not asked for
    skipped = [
        report.nodeid
        for report in reporter.stats.get("skipped", [])
        if "integration" in getattr(report, "keywords", {})
    ]
    passed = [
        report.nodeid
        for report in reporter.stats.get("passed", [])
        if "integration" in getattr(report, "keywords", {})
    ]
    if skipped or not passed:
        reporter.write_line(
            f"FAILED: CI requires the integration tests to run on the real control plane; "
            f"{len(skipped)} skipped, {len(passed)} passed",
            red=True,
        )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
