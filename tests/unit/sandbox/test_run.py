"""The sandbox's signals, closing hints and kube-ccm subprocess, without a control plane."""

from __future__ import annotations

import asyncio
import io
import os
import signal
from pathlib import Path

import pytest

from kube_ccm.sandbox import SandboxOptions, run
from kube_ccm.sandbox.summary import hints
from kube_ccm.testing.daemon import DaemonProcess


@pytest.mark.parametrize(
    ("signum", "said"), [(signal.SIGINT, "SIGINT"), (signal.SIGTERM, "SIGTERM")]
)
def test_the_sandbox_says_which_signal_stopped_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], signum: int, said: str
) -> None:
    async def signalled(options: SandboxOptions) -> int:
        del options
        os.kill(os.getpid(), signum)
        await asyncio.sleep(30)
        return 1

    monkeypatch.setattr(run, "run_sandbox", signalled)
    assert run.main(SandboxOptions()) == 0
    assert f"stopped by {said}" in capsys.readouterr().err


def _hints(tmp_path: Path, state: Path | None) -> str:
    out = io.StringIO()
    hints(out, tmp_path / "kubeconfig", "sandbox-node-0000", state=state)
    return out.getvalue()


def test_the_hints_name_simcloud_with_the_simulated_cloud_only(tmp_path: Path) -> None:
    assert "simcloud --state" in _hints(tmp_path, tmp_path / "cloud.db")
    other = _hints(tmp_path, None)  # --provider X with its own cloud-config
    assert " simcloud " not in other
    assert "annotate node sandbox-node-0000" in other


def test_without_kubectl_the_hints_say_how_to_get_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # a fresh machine: no kubectl
    said = _hints(tmp_path, None)
    assert "curl -fsSLo kubectl https://dl.k8s.io/release/v1." in said
    assert f"./kubectl --kubeconfig {tmp_path / 'kubeconfig'} get nodes" in said


def test_with_kubectl_on_path_the_hints_use_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kubectl = tmp_path / "kubectl"
    kubectl.write_text("#!/bin/sh\n")
    kubectl.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    said = _hints(tmp_path, None)
    assert "dl.k8s.io" not in said
    assert f"  kubectl --kubeconfig {tmp_path / 'kubeconfig'} get nodes" in said


def test_another_provider_s_daemon_leaves_no_simulated_cloud_state(tmp_path: Path) -> None:
    config = tmp_path / "ippool.yaml"
    config.write_text("pools: {cidr-global: 198.18.4.0/28}\n")
    daemon = DaemonProcess(
        kubeconfig=tmp_path / "kubeconfig",
        workdir=tmp_path / "ccm",
        provider="ippool",
        cloud_config_file=config,
    )
    assert daemon.stop() is None  # never started
    assert not daemon.state_path.exists()
    simulated = DaemonProcess(kubeconfig=tmp_path / "kubeconfig", workdir=tmp_path / "sim")
    assert simulated.state_path.exists()  # opened before the daemon, as before
    simulated.cloud.close()
