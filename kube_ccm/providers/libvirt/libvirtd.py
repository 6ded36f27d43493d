"""A real libvirtd on a private socket, serving libvirt's test driver (an in-memory
hypervisor), for tests and the sandbox: no qemu, no root-owned state, no network.

    with LibvirtdServer(tmp_path / "libvirtd") as server:
        conn = server.connection()        # keeps the hypervisor's state alive
        conn.defineXML(server.domain_xml("node-a")).create()
        ...  # a CCM with `hosts: [{uri: server.uri}]` sees node-a

The test driver's state (``test:///default``) lives while at least one connection to
it is open, so the server holds one (:meth:`connection`) from start to stop; a
:meth:`kill` loses every domain, as a crashed hypervisor would lose its runtime
state. libvirtd is started with an empty driver directory, so it loads no
hypervisor drivers (qemu would want root-owned directories): only the test driver
built into libvirt answers.

A test tool beside the provider it fakes, never imported by the provider itself:
only tests and the sandbox import it (its dependencies are dev ones).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
import uuid as uuidlib
from pathlib import Path
from typing import Any

from kube_ccm.providers.libvirt.provider import LibvirtUnavailableError, load_libvirt
from kube_ccm.testing._lifecycle import Started
from kube_ccm.testing.controlplane import die_with_parent

__all__ = ["LibvirtdServer", "LibvirtdUnavailableError", "libvirtd_path"]


class LibvirtdUnavailableError(RuntimeError):
    """libvirtd or libvirt's Python bindings are not installed here."""


def libvirtd_path() -> str | None:
    return shutil.which("libvirtd") or (
        "/usr/sbin/libvirtd" if os.access("/usr/sbin/libvirtd", os.X_OK) else None
    )


class LibvirtdServer(Started):
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.socket_dir = workdir / "run"
        self.socket = self.socket_dir / "libvirt-sock"
        self.uri = f"test+unix:///default?socket={self.socket}"
        self.log_path = workdir / "libvirtd.log"
        self._process: subprocess.Popen[bytes] | None = None
        self._keeper: Any = None
        self._log: Any = None

    # -- lifecycle ----------------------------------------------------------------

    def start(self, timeout: float = 20.0) -> LibvirtdServer:
        binary = libvirtd_path()
        if binary is None:
            raise LibvirtdUnavailableError(
                "libvirtd is not installed: apt-get install libvirt-daemon (make sysdeps)"
            )
        libvirt = self.libvirt()
        self.socket_dir.mkdir(parents=True, exist_ok=True)
        drivers = self.workdir / "no-drivers"
        drivers.mkdir(exist_ok=True)
        config = self.workdir / "libvirtd.conf"
        config.write_text(
            f'unix_sock_dir = "{self.socket_dir}"\n'
            'unix_sock_rw_perms = "0770"\n'
            'auth_unix_rw = "none"\n'
            'auth_unix_ro = "none"\n'
            "listen_tcp = 0\n"
            "listen_tls = 0\n"
            f'log_outputs = "3:file:{self.workdir / "libvirtd-internal.log"}"\n'
        )
        with contextlib.suppress(FileNotFoundError):
            self.socket.unlink()
        self._log = self.log_path.open("ab")
        env = {**os.environ, "LIBVIRT_DRIVER_DIR": str(drivers)}
        self._process = subprocess.Popen(
            [binary, "--config", str(config), "--pid-file", str(self.workdir / "libvirtd.pid")],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=die_with_parent(os.getpid()),  # noqa: PLW1509
        )
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise LibvirtdUnavailableError(
                    f"libvirtd exited with {self._process.returncode}; see {self.log_path}"
                )
            if self.socket.exists():
                try:
                    self._keeper = libvirt.open(self.uri)
                    return self
                except libvirt.libvirtError as exc:
                    last = exc
            time.sleep(0.1)
        self.stop()
        raise LibvirtdUnavailableError(f"libvirtd did not answer on {self.socket}: {last}")

    def stop(self) -> None:
        if self._keeper is not None:
            with contextlib.suppress(Exception):
                self._keeper.close()
            self._keeper = None
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGCONT)
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
        if self._log is not None:
            self._log.close()
            self._log = None

    def kill(self) -> None:
        """``kill -9``: the hypervisor and all its domains are gone."""
        assert self._process is not None
        self._process.kill()
        self._process.wait(10)
        self._keeper = None
        self._process = None

    def pause(self) -> None:
        """SIGSTOP: libvirtd hangs, its connections stay open and answer nothing."""
        assert self._process is not None
        os.kill(self._process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self._process is not None
        os.kill(self._process.pid, signal.SIGCONT)

    # -- using it -----------------------------------------------------------------

    @staticmethod
    def libvirt() -> Any:
        """The bindings, as the libvirt provider loads them."""
        try:
            return load_libvirt()
        except LibvirtUnavailableError as exc:
            raise LibvirtdUnavailableError(str(exc)) from exc

    def connection(self) -> Any:
        """The connection this server keeps open (do not close it)."""
        if self._keeper is None:
            raise RuntimeError("libvirtd is not running")
        return self._keeper

    @staticmethod
    def domain_xml(
        name: str, *, uuid: str | None = None, vcpus: int = 2, memory_mib: int = 2048
    ) -> str:
        """A test-driver domain with one NIC on libvirt's default network."""
        return (
            f"<domain type='test'><name>{name}</name><uuid>{uuid or uuidlib.uuid4()}</uuid>"
            f"<memory unit='MiB'>{memory_mib}</memory><vcpu>{vcpus}</vcpu>"
            "<os><type>hvm</type></os><devices><interface type='network'>"
            "<source network='default'/></interface></devices></domain>"
        )
