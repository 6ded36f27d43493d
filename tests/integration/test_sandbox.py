"""The README's main command: ``kube-ccm sandbox`` initialises its nodes (with routes for
their pod CIDRs), provisions its load balancers, deletes a node whose kubelet and
instance died, taints one whose instance shut down, and exits 0."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from kube_ccm.testing.controlplane import ControlPlane
from kube_ccm.testing.libvirtd import libvirtd_path


def sandbox(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kube_ccm", "sandbox", *args],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def count(output: str, label: str) -> int:
    found = re.search(rf"^\s+{re.escape(label)}\s+(\d+)", output, re.MULTILINE)
    assert found, f"{label!r} not in the summary:\n{output}"
    return int(found.group(1))


def test_sandbox_runs_the_whole_story_and_stops_cleanly(kube_controlplane: ControlPlane) -> None:
    # kube_controlplane ensures the binaries are built (or the test is skipped outside CI).
    del kube_controlplane
    result = sandbox(
        *("--nodes", "6", "--services", "3", "--kill", "1", "--shutdown", "1"),
        *("--node-monitor-grace-period", "2s", "--duration", "0s"),
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "all 6 nodes initialised" in out
    assert "all 3 load balancers got an ingress IP" in out
    assert "all 1 dead nodes deleted" in out
    assert "all 1 shut-down nodes tainted" in out
    # Exactly one metadata call and two writes per node, one route per pod CIDR.
    assert count(out, "InstanceMetadata") == 6
    assert count(out, "CreateRoute") == 6
    assert count(out, "EnsureLoadBalancer") == 3
    # The dead node went out of every load balancer: one update per LB at least.
    assert count(out, "UpdateLoadBalancer") >= 3
    # kube-ccm's own writes, the kubelets' Lease renewals and status reports left out:
    # 2 per node initialised, NetworkUnavailable per node, the lifecycle delete.
    assert count(out, "DELETE nodes") == 1
    assert "PATCH leases" not in out  # those are the kubelets', not kube-ccm's
    assert "kube-ccm stopped (exit status 0)" in out


def test_sandbox_refuses_impossible_options_with_what_to_do() -> None:
    result = sandbox("--nodes", "2", "--kill", "3")
    assert result.returncode == 2
    assert "--kill 3 plus --shutdown 0 is more than the 2 nodes" in result.stderr


def test_the_on_prem_sandbox_composes_libvirt_instances_and_ippool_addresses(
    kube_controlplane: ControlPlane,
) -> None:
    del kube_controlplane
    if libvirtd_path() is None and os.environ.get("CI", "").lower() not in ("1", "true", "yes"):
        pytest.skip("libvirtd is not installed (make sysdeps)")
    result = sandbox(
        *("--on-prem", "--nodes", "5", "--services", "3", "--kill", "1", "--shutdown", "1"),
        *("--node-monitor-grace-period", "2s", "--duration", "0s"),
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "kube-ccm takes instances from libvirt" in out
    assert "started kube-ccm run --cloud-provider=composite" in out
    assert "all 5 nodes initialised" in out
    assert "all 3 load balancers got an ingress IP" in out
    assert "all 1 dead nodes deleted" in out  # its domain undefined
    assert "all 1 shut-down nodes tainted" in out  # its domain shut off
    assert count(out, "DELETE nodes") == 1
    assert "get ipaddresses" in out
    assert "kube-ccm stopped (exit status 0)" in out


def test_the_on_prem_sandbox_chooses_its_own_providers() -> None:
    result = sandbox("--on-prem", "--provider", "ippool")
    assert result.returncode == 2
    assert "--on-prem chooses its providers" in result.stderr
