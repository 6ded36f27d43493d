"""Shared test configuration.

Integration tests (``tests/integration``) run against a real kube-apiserver and
etcd started once per session. Locally they skip, with the reason, when the
binaries cannot be built; under CI (``CI=true``) a skipped or missing
integration test fails the run, so green CI always means "proven on the real
thing".
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kube_ccm.testbed.helm import Helm, HelmBinaryError, ensure_helm
from kube_ccm.testbed.rbac import (
    AUDITED_USERS,
    forbidden,
    install_service_account,
)
from kube_ccm.testing.controlplane import (
    REQUIRE_ENV,
    ControlPlane,
    ControlPlaneOptions,
    controlplane_required,
)

pytest_plugins = ["kube_ccm.testing.pytest_plugin"]

_INTEGRATION = Path(__file__).parent / "integration"
DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
SHIPPED_RBAC = (
    "rbac.yaml",
    "rbac-nodes.yaml",
    "rbac-pv-labels.yaml",
    "rbac-ippool.yaml",
    "rbac-servicelb.yaml",
    "rbac-kubelet-serving-certs.yaml",
)


def shipped_rbac() -> list[dict[str, Any]]:
    """Every object of the shipped RBAC manifests."""
    return [
        doc
        for name in SHIPPED_RBAC
        for doc in yaml.safe_load_all((DEPLOY / name).read_text())
        if doc
    ]


@pytest.fixture(scope="session")
def kube_controlplane_options() -> ControlPlaneOptions:
    """The plugin's control plane, its audit log recording what kube-ccm's own
    ServiceAccounts do (the least-privilege checks read it)."""
    return ControlPlaneOptions(audit_users=AUDITED_USERS)


@pytest.fixture(scope="session")
def ccm_kubeconfig(
    kube_controlplane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """A kubeconfig for the daemon as the ServiceAccount of deploy/rbac.yaml (and
    rbac-pv-labels.yaml), bound exactly as shipped: every integration test runs the
    daemon with least privilege. At the end of the session no request of that identity
    may have been forbidden (the apiserver's audit log is checked)."""
    kubeconfig = asyncio.run(
        install_service_account(
            kube_controlplane,
            shipped_rbac(),
            "kube-system",
            "cloud-controller-manager",
            kubeconfig=tmp_path_factory.mktemp("ccm") / "ccm.kubeconfig",
        )
    )
    yield kubeconfig
    refused = [r for user in AUDITED_USERS for r in forbidden(kube_controlplane, user)]
    assert not refused, (
        "the daemon, running with exactly the shipped RBAC, was refused:\n"
        + "\n".join(refused)
        + "\nadd the missing rule to deploy/rbac.yaml (and the Helm chart)"
    )


@pytest.fixture(scope="session")
def helm() -> Helm:
    """The pinned helm, built once from the Go module proxy (cached between runs)."""
    try:
        return ensure_helm()
    except HelmBinaryError as exc:
        message = f"helm could not be built: {exc}"
        if controlplane_required():
            pytest.fail(f"{message}\n(required because CI=true or {REQUIRE_ENV}=1)")
        pytest.skip(message)


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


# The aws provider's tests: one moto server per session, started on first use.
pytest_plugins += ["kube_ccm.providers.aws.fixtures"]

# The proxmox provider's tests: fakepve on a loopback port, one per test.
pytest_plugins += ["kube_ccm.providers.proxmox.fakepve"]
