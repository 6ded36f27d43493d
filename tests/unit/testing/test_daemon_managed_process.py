"""ManagedProcess: the process handling under DaemonProcess and the benchmarks' GoCCMProcess."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

from kube_ccm.testing.daemon import DaemonProcess, ManagedProcess

SLEEPER = "import os, sys, time; print(os.environ['GREETING'], flush=True); time.sleep(60)"
STUBBORN = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('ready', flush=True); time.sleep(60)"
)


def test_logs_and_stops_with_sigterm(tmp_path: Path) -> None:
    process = ManagedProcess(
        [sys.executable, "-c", SLEEPER], tmp_path / "logs" / "p.log", env={"GREETING": "hello"}
    )
    assert process.stop() is None  # never started
    assert process.start() is process
    process.wait_for_log("hello", timeout=20)
    assert process.poll() is None
    assert process.pid > 0
    assert process.stop() == -signal.SIGTERM
    assert "hello" in process.log()


def test_sigkill_after_the_timeout(tmp_path: Path) -> None:
    process = ManagedProcess([sys.executable, "-c", STUBBORN], tmp_path / "p.log").start()
    process.wait_for_log("ready", timeout=20)
    assert process.stop(timeout=0.5) == -signal.SIGKILL


def test_wait_for_log_names_the_process(tmp_path: Path) -> None:
    process = ManagedProcess([sys.executable, "-c", "pass"], tmp_path / "p.log").start()
    process.wait(timeout=20)
    with pytest.raises(AssertionError, match="process log never showed"):
        process.wait_for_log("never", timeout=1)


def test_daemon_process_keeps_its_surface(tmp_path: Path) -> None:
    daemon = DaemonProcess(
        kubeconfig=tmp_path / "kubeconfig", workdir=tmp_path / "d", args=["--leader-elect=false"]
    )
    assert isinstance(daemon, ManagedProcess)
    assert daemon.log_path == tmp_path / "d" / "daemon.log"
    assert daemon.state_path == tmp_path / "d" / "cloud.db"
    assert daemon.cloud_config_path.exists()
    assert daemon.argv[1:4] == ["-m", "kube_ccm", "run"]
    assert "--secure-port=0" in daemon.argv
    assert daemon.stop() is None  # never started: nothing to stop
    daemon.cloud.close()


def test_a_stopped_daemons_cloud_can_still_be_read(tmp_path: Path) -> None:
    """The restarts of side_by_side.py read the call counts a stopped daemon left."""
    daemon = DaemonProcess(kubeconfig=tmp_path / "missing", workdir=tmp_path / "d").start()
    daemon.cloud.record_call("InstanceMetadata")
    daemon.cloud.flush_calls()
    daemon.wait(timeout=60)  # no kubeconfig: it exits at once
    daemon.stop()
    assert daemon.cloud.calls()["InstanceMetadata"]["count"] == 1
    daemon.cloud.close()
