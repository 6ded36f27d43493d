"""The README's main command: ``kube-ccm sandbox`` initialises its nodes (with routes for
their pod CIDRs), provisions its load balancers, deletes a node whose kubelet and
instance died, taints one whose instance shut down, and exits 0."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from kube_ccm.providers.aws.moto import moto_missing
from kube_ccm.providers.aws.sandbox import NAME_TAG
from kube_ccm.providers.libvirt.libvirtd import libvirtd_path
from kube_ccm.providers.proxmox.fakepve import fakepve_missing
from kube_ccm.testbed.cluster import chart_cluster_unavailable
from kube_ccm.testbed.nodes import host_changes, host_snapshot
from kube_ccm.testing.controlplane import REQUIRE_ENV, ControlPlane, controlplane_required


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
    # The apiserver allocates each Service's ClusterIP itself (an IPAddress): not kube-ccm.
    assert "POST ipaddresses" not in out
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


def test_the_aws_sandbox_runs_the_provider_against_its_own_moto(
    kube_controlplane: ControlPlane,
) -> None:
    del kube_controlplane
    missing = moto_missing()
    if missing and os.environ.get("CI", "").lower() not in ("1", "true", "yes"):
        pytest.skip(missing)
    result = sandbox(
        *("--provider", "aws", "--nodes", "3", "--services", "2", "--kill", "1"),
        *("--shutdown", "1", "--node-monitor-grace-period", "2s", "--duration", "0s"),
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "3 instances named after the nodes" in out
    assert "started kube-ccm run --cloud-provider=aws" in out
    assert "all 3 nodes initialised" in out  # by private DNS name, no providerID given
    assert "all 2 load balancers got an ingress hostname" in out  # the NLBs' DNS names
    assert "all 1 dead nodes deleted" in out  # its instance terminated
    assert "all 1 shut-down nodes tainted" in out  # its instance stopped
    # kube-ccm's EC2 and ELBv2 calls, counted by the proxy in front of moto.
    assert count(out, "CreateLoadBalancer") == 2
    assert count(out, "CreateRoute") == 3
    assert count(out, "DescribeInstances") >= 1
    assert re.findall(r"\((\d+) failed\)", out) == ["0"] * len(re.findall("failed", out))
    assert count(out, "DELETE nodes") == 1
    assert "ec2 describe-instances" in out  # the hints
    # The clean-up: the Services' NLBs, then the Nodes' routes, gone from moto.
    assert "deleted the 2 load balancers the sandbox created" in out
    assert "moto holds 0 load balancers and 0 pod routes" in out
    assert "kube-ccm stopped (exit status 0)" in out


def test_the_proxmox_sandbox_runs_the_provider_against_its_own_fakepve(
    kube_controlplane: ControlPlane,
) -> None:
    del kube_controlplane
    missing = fakepve_missing()
    if missing and os.environ.get("CI", "").lower() not in ("1", "true", "yes"):
        pytest.skip(missing)
    result = sandbox(
        *("--provider", "proxmox", "--nodes", "4", "--services", "2", "--kill", "1"),
        *("--shutdown", "1", "--node-monitor-grace-period", "2s", "--duration", "0s"),
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "runs 4 VMs named after the nodes" in out
    assert "started kube-ccm run --cloud-provider=composite" in out
    assert "all 4 nodes initialised" in out  # by VM name, through the guest agents
    assert "all 2 load balancers got an ingress IP" in out  # from ippool
    assert "all 1 dead nodes deleted" in out  # its VM destroyed
    assert "all 1 shut-down nodes tainted" in out  # its VM stopped
    # kube-ccm's PVE calls, as fakepve saw them: one listing serves many lookups.
    assert count(out, "GET /nodes/{node}/qemu/{vmid}/config") >= 4
    assert count(out, "GET /cluster/resources") >= 1
    assert re.findall(r"\((\d+) failed\)", out) == ["0"] * len(re.findall("failed", out))
    assert count(out, "DELETE nodes") == 1
    assert "kube-ccm stopped (exit status 0)" in out


def _alive_children(pid: int) -> dict[int, str]:
    """The live (not zombie) children of ``pid``: their command lines."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            state, ppid = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:2]
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError):
            continue
        if int(ppid) == pid and state != "Z":
            found[int(entry.name)] = cmdline
    return found


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_the_aws_sandbox_s_moto_dies_with_it(
    kube_controlplane: ControlPlane, tmp_path: Path
) -> None:
    del kube_controlplane
    missing = moto_missing()
    if missing and os.environ.get("CI", "").lower() not in ("1", "true", "yes"):
        pytest.skip(missing)
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "kube_ccm", "sandbox", "--provider", "aws", "--nodes", "2"),
            *("--services", "0", "--data-dir", str(tmp_path / "sandbox")),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    children: dict[int, str] = {}
    try:
        assert process.stdout is not None
        for line in process.stdout:
            if "running until Ctrl-C" in line:
                break
        else:
            pytest.fail("the sandbox never got to running")
        children = _alive_children(process.pid)
        assert any(NAME_TAG in cmdline for cmdline in children.values()), children  # moto
        process.kill()  # SIGKILL: no clean-up of its own
        process.wait(30)
        deadline = time.monotonic() + 30
        while any(_alive(pid) for pid in children) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert [c for pid, c in children.items() if _alive(pid)] == [], "outlived the sandbox"
    finally:
        if process.poll() is None:
            process.kill()
        for pid in children:
            if _alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def test_the_aws_sandbox_without_moto_says_what_to_install() -> None:
    # moto unimportable in the sandbox's process: it stops before starting anything.
    code = (
        "import sys; sys.modules['moto'] = None; from kube_ccm.app.cli import main; "
        "sys.exit(main(['sandbox', '--provider', 'aws']))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "pip install 'kube-ccm[dev,aws]'" in result.stderr
    assert "starting kube-apiserver" not in result.stdout


def test_the_on_prem_sandbox_chooses_its_own_providers() -> None:
    result = sandbox("--on-prem", "--provider", "ippool")
    assert result.returncode == 2
    assert "--on-prem chooses its providers" in result.stderr


def _processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().split()[2]
        except OSError:
            continue
        if text in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_kube_ccm_and_the_control_plane_die_with_the_sandbox(
    kube_controlplane: ControlPlane, tmp_path: Path, signum: signal.Signals
) -> None:
    del kube_controlplane
    data = tmp_path / "sandbox"
    sandbox_process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kube_ccm",
            "sandbox",
            "--nodes",
            "2",
            "--services",
            "0",
            "--data-dir",
            str(data),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert sandbox_process.stdout is not None
        for line in sandbox_process.stdout:
            if "running until Ctrl-C" in line:
                break
        else:
            pytest.fail("the sandbox never got to running")
        children = _processes_mentioning(str(data))
        assert len(children) >= 3, children  # kube-ccm run, kube-apiserver, etcd
        sandbox_process.send_signal(signum)
        sandbox_process.wait(60)
        deadline = time.monotonic() + 30
        while _processes_mentioning(str(data)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _processes_mentioning(str(data)) == [], "orphans outlived the sandbox"
        if signum == signal.SIGTERM:
            assert sandbox_process.returncode == 0
    finally:
        if sandbox_process.poll() is None:
            sandbox_process.kill()
        for pid in _processes_mentioning(str(data)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_a_stalled_sandbox_says_why_and_which_node_names_it_expects(
    kube_controlplane: ControlPlane, tmp_path: Path
) -> None:
    del kube_controlplane
    config = tmp_path / "ippool.yaml"
    config.write_text("configMap: ''\npools: {cidr-global: 198.18.4.0/28}\n")
    # ippool serves no instances: no Node can be initialised.
    result = sandbox(
        *("--provider", "ippool", "--cloud-config", str(config), "--nodes", "2"),
        *("--stall-timeout", "3s", "--duration", "0s"),
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "initialising nodes: stuck at 0/2 for 3 s" in result.stderr
    assert "kube-ccm's last errors" in result.stderr
    assert "sandbox-node-0000 ... sandbox-node-0001" in result.stderr
    assert "--provision-command" in result.stderr


def test_with_another_provider_the_sandbox_takes_back_its_load_balancers(
    kube_controlplane: ControlPlane, tmp_path: Path
) -> None:
    del kube_controlplane
    marker = tmp_path / "provisioned"
    config = tmp_path / "composite.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "providers": {
                    "simulated": {
                        "capabilities": ["instances"],
                        "config": {"state": str(tmp_path / "sim.db"), "unknownNodes": "create"},
                    },
                    "ippool": {
                        "capabilities": ["loadBalancer"],
                        "config": {"configMap": "", "pools": {"cidr-global": "198.18.8.0/28"}},
                    },
                }
            }
        )
    )
    result = sandbox(
        *("--provider", "composite", "--cloud-config", str(config), "--nodes", "2"),
        *("--services", "2", "--duration", "0s"),
        *("--provision-command", f"{sys.executable} -c " + shlex.quote(_TOUCH.format(str(marker)))),
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert marker.read_text().split() == ["sandbox-node-0000", "sandbox-node-0001"]
    assert "all 2 load balancers got an ingress IP" in out
    assert "deleted the 2 load balancers the sandbox created" in out
    assert "deleted the sandbox's Nodes" in out


_TOUCH = "import sys, pathlib; pathlib.Path({!r}).write_text(' '.join(sys.argv[1:]))"


def test_the_sandbox_on_a_real_node_installs_the_chart_and_leaves_the_host_as_it_was() -> None:
    """``--real-nodes 1``: one real kubelet (the control plane), the image of this checkout
    installed by the Helm chart with one replica; the node initialised, a load balancer,
    the summary, and every host change undone."""
    reason = chart_cluster_unavailable()
    if reason:
        if controlplane_required():
            pytest.fail(f"{reason}\n(required because CI=true or {REQUIRE_ENV}=1)")
        pytest.skip(reason)
    before = host_snapshot()
    result = subprocess.run(
        [
            *(sys.executable, "-m", "kube_ccm", "sandbox"),
            *("--real-nodes", "1", "--services", "1", "--duration", "0s"),
        ],
        capture_output=True,
        text=True,
        # A cold image build takes minutes; from the cache the run is well under one.
        timeout=900,
        check=False,
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "helm install kube-ccm deploy/helm/kube-ccm" in out
    assert "1 replica with leader election" in out
    assert "all 1 nodes initialised" in out
    assert "all 1 load balancers got an ingress IP" in out
    assert count(out, "InstanceMetadata") >= 1
    assert count(out, "EnsureLoadBalancer") == 1
    # kube-ccm's requests, from the audit log of its ServiceAccount: the Node initialised,
    # the Service's finalizer and status written, the lease taken (leader election).
    assert count(out, "PATCH nodes") >= 1
    assert count(out, "PATCH services") == 2
    assert count(out, "POST leases") == 1
    assert "real nodes and control plane stopped, host restored" in out
    changed = host_changes(before, host_snapshot())
    assert not changed, f"the sandbox left the host changed: {changed}"


def test_the_servicelb_sandbox_answers_on_a_node_ip_from_one_command() -> None:
    """``--real-nodes 1 --provider servicelb``: kube-ccm from its chart with ServiceLB load
    balancers (host-network forwarders, kube-proxy on the node); an echo backend and a
    LoadBalancer Service answering a TCP connection on the node's IP; the host left as
    it was."""
    reason = chart_cluster_unavailable()
    if reason:
        if controlplane_required():
            pytest.fail(f"{reason}\n(required because CI=true or {REQUIRE_ENV}=1)")
        pytest.skip(reason)
    before = host_snapshot()
    result = subprocess.run(
        [
            *(sys.executable, "-m", "kube_ccm", "sandbox"),
            *("--real-nodes", "1", "--provider", "servicelb"),
            *("--services", "1", "--duration", "0s"),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "load balancers from servicelb" in out
    assert "all 1 nodes initialised" in out
    answered = re.search(
        r"sandbox-lb-000: status (\S+); TCP to (\S+):8080 answered 'tcp backend'", out
    )
    assert answered, out
    assert "real nodes and control plane stopped, host restored" in out
    changed = host_changes(before, host_snapshot())
    assert not changed, f"the sandbox left the host changed: {changed}"
