"""Run the kube-ccm daemon as a subprocess against a control plane, as users do.

For integration tests (ours and provider authors'): the daemon gets a
simulated cloud in a temporary SQLite file, which the test drives and inspects
through :attr:`DaemonProcess.cloud` while the daemon runs.

:class:`ManagedProcess` is the process handling underneath (start with a
parent-death signal, poll, log file, SIGTERM then SIGKILL); the benchmarks run
the upstream Go CCM with it too (``benchmarks/goccm.py``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Self

import yaml

from kube_ccm.providers.simulated.state import CloudState
from kube_ccm.testing.controlplane import die_with_parent

__all__ = ["DaemonProcess"]


class ManagedProcess:
    """A subprocess with its stdout and stderr appended to a log file.

    It runs in a session of its own and gets SIGTERM when the process that
    started it dies (``PR_SET_PDEATHSIG``), so it never outlives a killed test
    run or benchmark; :meth:`stop` sends SIGTERM, then SIGKILL.
    """

    what = "process"
    """What the process is called in error messages."""

    def __init__(
        self, argv: Sequence[str], log_path: Path, *, env: dict[str, str] | None = None
    ) -> None:
        """``env`` is added to this process's environment."""
        self.argv = list(argv)
        self.log_path = log_path
        self._env = {**os.environ, **(env or {})}
        self._popen: subprocess.Popen[bytes] | None = None

    def start(self) -> Self:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self._popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self._env,
                start_new_session=True,
                # The process must not outlive whatever started it (a sandbox killed by
                # SIGTERM or SIGKILL, a test run): SIGTERM lets it shut down cleanly.
                preexec_fn=die_with_parent(os.getpid(), signal.SIGTERM),  # noqa: PLW1509
            )
        return self

    @property
    def pid(self) -> int:
        assert self._popen is not None
        return self._popen.pid

    def poll(self) -> int | None:
        assert self._popen is not None
        return self._popen.poll()

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def signal(self, signum: int) -> None:
        assert self._popen is not None
        with contextlib.suppress(ProcessLookupError):
            os.kill(self._popen.pid, signum)

    def wait(self, timeout: float) -> int:
        assert self._popen is not None
        return self._popen.wait(timeout=timeout)

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout``; the exit status (None: never started)."""
        if self._popen is None:
            return None
        if self._popen.poll() is None:
            self.signal(signal.SIGTERM)
            try:
                self._popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGKILL)
                self._popen.wait()
        return self._popen.returncode

    def wait_for_log(self, text: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.log():
                return
            if self.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"{self.what} log never showed {text!r}; log:\n{self.log()[-3000:]}")


class DaemonProcess(ManagedProcess):
    """A running ``kube-ccm run`` with its log file and simulated cloud."""

    what = "daemon"

    def __init__(
        self,
        *,
        kubeconfig: Path,
        workdir: Path,
        cloud_config: dict[str, Any] | None = None,
        args: Sequence[str] = (),
        provider: str = "simulated",
        env: dict[str, str] | None = None,
        cloud_config_file: Path | None = None,
    ) -> None:
        """``cloud_config`` is merged into a simulated-cloud config written to ``workdir``
        (with its ``state`` file there); ``cloud_config_file`` is passed as it is
        instead, for other providers."""
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.state_path = workdir / "cloud.db"
        config = {"state": str(self.state_path), **(cloud_config or {})}
        if cloud_config_file is None:
            self.cloud_config_path = workdir / "cloud.yaml"
            self.cloud_config_path.write_text(yaml.safe_dump(config))
        else:
            self.cloud_config_path = cloud_config_file
        argv = [
            sys.executable,
            "-m",
            "kube_ccm",
            "run",
            f"--cloud-provider={provider}",
            f"--cloud-config={self.cloud_config_path}",
            f"--kubeconfig={kubeconfig}",
            # Tests run daemons side by side: no fixed port unless a test asks for one.
            *(() if any(a.startswith("--secure-port") for a in args) else ("--secure-port=0",)),
            *args,
        ]
        super().__init__(argv, workdir / "daemon.log", env=env)
        # Opened now when the daemon's config names it (before the daemon does); a daemon
        # given its own cloud-config never uses it, so it is opened on first use only.
        self._cloud = CloudState(self.state_path) if cloud_config_file is None else None

    @property
    def cloud(self) -> CloudState:
        """The simulated cloud's state (``state_path``, which a generated cloud-config
        names); with ``cloud_config_file`` opened on first use only, so that another
        provider's daemon leaves no unused ``cloud.db`` behind."""
        if self._cloud is None:
            self._cloud = CloudState(self.state_path)
        return self._cloud

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout``; returns the exit status.

        The simulated cloud's state is closed once the daemon has exited; :attr:`cloud`
        opens it again if it is read afterwards (a benchmark reading the counts a
        stopped daemon left).
        """
        if self._popen is None:
            return None
        code = super().stop(timeout)
        if self._cloud is not None:
            self._cloud.close()
            self._cloud = None
        return code
