"""The README's main command: ``kube-ccm sandbox`` initialises its nodes, provisions its
load balancers and exits 0."""

from __future__ import annotations

import subprocess
import sys

from kube_ccm.testing.controlplane import ControlPlane


def test_sandbox_initialises_every_node_and_stops_cleanly(kube_controlplane: ControlPlane) -> None:
    # kube_controlplane ensures the binaries are built (or the test is skipped outside CI).
    del kube_controlplane
    result = subprocess.run(
        [
            *(sys.executable, "-m", "kube_ccm", "sandbox"),
            *("--nodes", "5", "--services", "3", "--duration", "0s"),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "all 5 nodes initialised" in result.stdout
    assert "InstanceMetadata                  5" in result.stdout
    assert "PATCH nodes                      10" in result.stdout
    assert "all 3 load balancers got an ingress IP" in result.stdout
    assert "EnsureLoadBalancer                3" in result.stdout
    assert "kube-ccm stopped (exit status 0)" in result.stdout
