"""The control plane never outlives the process that started it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kube_ccm.testing.controlplane import ControlPlane

_CHILD = """
import json, sys, time
from kube_ccm.testing.controlplane import ControlPlane
plane = ControlPlane().start()
print(json.dumps({"pids": plane.pids(), "data_dir": str(plane.data_dir)}), flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes: it holds no ports and no memory.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _wait_gone(pids: list[int], timeout: float = 20) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = [pid for pid in pids if _alive(pid)]
        if not alive:
            return []
        time.sleep(0.1)
    return [pid for pid in pids if _alive(pid)]


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_control_plane_processes_die_with_the_process_that_started_them(
    kube_controlplane: ControlPlane, signum: signal.Signals
) -> None:
    # kube_controlplane guarantees the binaries exist; this test starts its own.
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert child.stdout is not None
        started = json.loads(child.stdout.readline())
        pids = list(started["pids"].values())
        assert len(pids) == 2
        assert all(_alive(pid) for pid in pids)

        child.send_signal(signum)
        child.wait(timeout=30)

        assert _wait_gone(pids) == [], f"orphans left after {signum.name}"
        if signum == signal.SIGTERM:  # a clean stop also removes its data dir
            assert not Path(started["data_dir"]).exists()
    finally:
        if child.poll() is None:
            child.kill()


def test_stop_is_clean_and_idempotent(kube_controlplane: ControlPlane) -> None:
    plane = ControlPlane(binaries=kube_controlplane.binaries).start()
    pids = list(plane.pids().values())
    data_dir = plane.data_dir
    assert plane.server_version()["gitVersion"] == kube_controlplane.binaries.versions.kubernetes

    plane.stop()
    plane.stop()

    assert not plane.running
    assert _wait_gone(pids, timeout=1) == []
    assert not data_dir.exists()
