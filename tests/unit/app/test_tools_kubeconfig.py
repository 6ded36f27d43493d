"""``kube-ccm doctor`` and ``kube-ccm gc`` read ``$KUBECONFIG``, as their help says."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """$KUBECONFIG lists a missing file, then a kubeconfig of a server nothing listens
    on; not in a cluster, no ~/.kube/config."""
    path = tmp_path / "config"
    path.write_text(
        json.dumps(
            {
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    environ = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    environ.update(HOME=str(tmp_path), KUBECONFIG=f"{tmp_path / 'missing'}:{path}")
    return environ


def kube_ccm(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kube_ccm", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


def test_doctor_reads_kubeconfig_from_the_environment(env: dict[str, str]) -> None:
    result = kube_ccm(env, "doctor")
    assert result.returncode == 1
    assert "no --kubeconfig" not in result.stderr
    assert "FAIL  API server  not reachable" in result.stdout, result.stdout + result.stderr
    assert "127.0.0.1:9" in result.stdout  # it tried $KUBECONFIG's server


def test_gc_reads_kubeconfig_from_the_environment(env: dict[str, str]) -> None:
    result = kube_ccm(env, "gc", "--cloud-provider=simulated", "--dry-run")
    assert result.returncode == 1
    assert "no --kubeconfig" not in result.stderr
    assert "127.0.0.1:9" in result.stderr  # it tried $KUBECONFIG's server
