"""`kube-ccm controlplane`, the README's main command for now, as a user runs it."""

from __future__ import annotations

import subprocess
import sys

from kube_ccm.testing.controlplane import ControlPlane


def test_controlplane_command_prints_kubeconfig_and_server_version_then_stops(
    kube_controlplane: ControlPlane,
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "kube_ccm", "controlplane", "--duration", "1s"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    assert "kubeconfig:" in result.stdout
    assert f"version:     {kube_controlplane.binaries.versions.kubernetes}" in result.stdout
    assert result.stdout.rstrip().endswith("control plane stopped")
