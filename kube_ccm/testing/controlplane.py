"""A real kube-apiserver and etcd on loopback, for tests and the local sandbox.

The Python counterpart of controller-runtime's envtest::

    with ControlPlane() as cp:
        print(cp.kubeconfig)       # admin (system:masters) kubeconfig
        ...

Both processes run in their own session (process group) with a parent-death
signal, so they die with the process that started them even when it is killed
with SIGKILL; ``stop()`` also runs at interpreter exit and on SIGTERM/SIGHUP.
Start it from the main thread: the parent-death signal is tied to the thread
that forks.

Run ``python -m kube_ccm.testing.controlplane build`` to build or check the
binaries, ``... up`` to run one until Ctrl-C.
"""

from __future__ import annotations

import argparse
import atexit
import base64
import contextlib
import ctypes
import datetime
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import yaml

from kube_ccm.testing._lifecycle import Started
from kube_ccm.testing.binaries import (
    Binaries,
    ControlPlaneBinariesError,
    ensure_binaries,
    ensure_node_binaries,
)
from kube_ccm.testing.pki import CertificateAuthority, KeyPair, signing_key_pair

__all__ = ["ControlPlane", "ControlPlaneError", "ControlPlaneOptions"]

_PR_SET_PDEATHSIG = 1
_READY_TIMEOUT = 90.0
_STOP_TIMEOUT = 10.0


class ControlPlaneError(RuntimeError):
    """The local control plane could not start; the message names the piece that failed."""


@dataclass(frozen=True)
class ControlPlaneOptions:
    """Knobs for the local control plane. Defaults suit tests."""

    extra_apiserver_args: tuple[str, ...] = ()
    """Appended to kube-apiserver's arguments (later flags override earlier ones)."""
    extra_etcd_args: tuple[str, ...] = ()
    service_cluster_ip_range: str = "10.0.0.0/24"
    data_dir: Path | None = None
    """Where certificates, etcd data and logs go; a fresh temporary directory if None."""
    keep_data_dir: bool = False
    ready_timeout: float = _READY_TIMEOUT
    audit_users: tuple[str, ...] = ()
    """Users whose requests kube-apiserver writes to :attr:`ControlPlane.audit_log`
    (JSON lines, level Metadata, one line per finished request); none by default."""
    real_nodes: bool = False
    """Serve real kubelets (:mod:`kube_ccm.testbed.nodes`) as a cluster does: the Node
    authorizer before RBAC and the NodeRestriction admission plugin, and a client
    certificate for kube-apiserver's calls to kubelets (logs, exec), which go to a Node's
    InternalIP first (``--kubelet-preferred-address-types=InternalIP,Hostname``)."""


REQUIRE_ENV = "KUBE_CCM_REQUIRE_CONTROLPLANE"


def controlplane_required() -> bool:
    """True where tests that need the control plane must fail, not skip, without it (CI)."""
    truthy = {"1", "true", "yes"}
    return (
        os.environ.get("CI", "").lower() in truthy
        or os.environ.get(REQUIRE_ENV, "").lower() in truthy
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def die_with_parent(parent_pid: int, signum: int = signal.SIGKILL) -> Callable[[], None]:
    """A preexec hook: ``signum`` to this child when its parent dies, however it dies.

    Linux sends it when the *thread* that forked the child ends: spawn from the main
    thread (or a thread that lives as long as the child should)."""

    def hook() -> None:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signum)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)

    return hook


def _rss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


_live: weakref.WeakSet[ControlPlane] = weakref.WeakSet()
_handlers_installed: list[bool] = []


def _stop_all() -> None:
    for plane in list(_live):
        plane.stop()


def _install_exit_handlers() -> None:
    """Stop every control plane at exit and on SIGTERM/SIGHUP (once per process)."""
    if _handlers_installed:
        return
    _handlers_installed.append(True)
    atexit.register(_stop_all)
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in (signal.SIGTERM, signal.SIGHUP):
        previous = signal.getsignal(signum)
        if previous not in (signal.SIG_DFL, None):
            continue  # someone else owns this signal; atexit still covers a clean exit

        def handler(received: int, frame: FrameType | None, _sig: int = signum) -> None:
            _stop_all()
            signal.signal(_sig, signal.SIG_DFL)
            os.kill(os.getpid(), _sig)

        signal.signal(signum, handler)


@dataclass
class _Process:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.strip().splitlines()[-lines:])


@dataclass
class StartupTimings:
    """Seconds spent in each phase of the last start()."""

    binaries: float = 0.0
    etcd: float = 0.0
    apiserver_ready: float = 0.0
    total: float = 0.0
    extra: dict[str, float] = field(default_factory=dict)


class ControlPlane(Started):
    """etcd + kube-apiserver on free loopback ports, with an admin kubeconfig."""

    def __init__(
        self,
        options: ControlPlaneOptions | None = None,
        *,
        binaries: Binaries | None = None,
    ) -> None:
        self.options = options or ControlPlaneOptions()
        self._binaries = binaries
        self._processes: list[_Process] = []
        self._owns_data_dir = False
        self.data_dir: Path = Path()
        self.etcd_url = ""
        self.server = ""
        self.secure_port = 0
        self.timings = StartupTimings()
        self._lock = threading.Lock()
        self.restarts: list[tuple[str, str]] = []
        """(stopped, ready) per :meth:`restart_apiserver`, as audit-event timestamps."""
        self._serving_ips: tuple[str, ...] = ()
        self.advertise_address = "127.0.0.1"
        """Where kube-apiserver tells clients it is (the ``kubernetes`` Service's endpoint):
        loopback, or the address given to :meth:`serve_also_on`."""

    # -- public surface -------------------------------------------------------

    @property
    def kubeconfig(self) -> Path:
        """Admin kubeconfig (user in group ``system:masters``)."""
        return self.data_dir / "kubeconfig"

    @property
    def audit_log(self) -> Path:
        """The audit log of ``options.audit_users``' requests (JSON lines)."""
        return self.data_dir / "audit.log"

    def audit_events(self) -> list[dict[str, Any]]:
        """Every audit event written so far (see ``ControlPlaneOptions.audit_users``)."""
        if not self.audit_log.is_file():
            return []
        with self.audit_log.open() as lines:
            return [json.loads(line) for line in lines if line.strip()]

    @property
    def ca_file(self) -> Path:
        return self.data_dir / "pki" / "ca.crt"

    @property
    def certificate_authority(self) -> CertificateAuthority:
        """The CA kube-apiserver trusts for clients (and that signed its serving
        certificate): issue certificates for kubelets and controllers with it."""
        if not hasattr(self, "_ca"):
            raise ControlPlaneError("the control plane has not been started")
        return self._ca

    def write_client_kubeconfig(
        self, path: Path, user: str, groups: tuple[str, ...] = (), *, server: str = ""
    ) -> Path:
        """A kubeconfig at ``path`` for ``user`` in ``groups``, by a client certificate
        from :attr:`certificate_authority` (as kubeadm writes kubelet.conf,
        controller-manager.conf and scheduler.conf); ``server`` instead of
        :attr:`server`, e.g. ``https://<address given to serve_also_on>:<port>``."""
        pair = self.certificate_authority.issue(user, organizations=groups, client=True)
        _write_kubeconfig_file(path, server or self.server, self._ca_pem, user, pair)
        return path

    def serve_also_on(self, address: str) -> None:
        """Serve on ``address`` too, and advertise it: for clients in other network
        namespaces (real nodes with :attr:`~kube_ccm.testbed.nodes.NodeOptions.netns`),
        to which loopback is their own. The serving certificate is issued again with
        ``address`` added, and kube-apiserver restarted on the same port, bound to every
        address (it binds one, or all) and advertising ``address``, which the
        ``kubernetes`` Service's endpoints then hold; :attr:`server` stays loopback."""
        pki = self.data_dir / "pki"
        self._serving_ips = (*self._serving_ips, address)
        self._issue_serving_certificate(pki)
        self.advertise_address = address
        for process in [p for p in self._processes if p.name == "kube-apiserver"]:
            self._terminate(process.popen)
            self._processes.remove(process)
        self._start_apiserver(port=self.secure_port)

    @property
    def running(self) -> bool:
        return bool(self._processes) and all(p.popen.poll() is None for p in self._processes)

    @property
    def binaries(self) -> Binaries:
        if self._binaries is None:
            raise ControlPlaneError("the control plane has not been started")
        return self._binaries

    def pids(self) -> dict[str, int]:
        return {p.name: p.popen.pid for p in self._processes}

    def rss_bytes(self) -> dict[str, int]:
        """Resident memory of each process, from /proc."""
        return {p.name: _rss_bytes(p.popen.pid) for p in self._processes}

    def start(self) -> ControlPlane:
        """Start etcd then kube-apiserver and wait until ``/readyz`` answers ok."""
        started = time.monotonic()
        _install_exit_handlers()
        try:
            if self._binaries is None:
                self._binaries = ensure_binaries()
        except ControlPlaneBinariesError as exc:
            raise ControlPlaneError(str(exc)) from exc
        self.timings = StartupTimings(binaries=time.monotonic() - started)
        self._prepare_data_dir()
        _live.add(self)
        try:
            self._start_etcd()
            self.timings.etcd = time.monotonic() - started - self.timings.binaries
            self._start_apiserver()
        except BaseException:
            self.stop()
            raise
        self.timings.total = time.monotonic() - started
        self.timings.apiserver_ready = self.timings.total - self.timings.etcd
        return self

    def stop(self) -> None:
        """Stop both processes (SIGTERM, then SIGKILL) and remove the data dir. Idempotent."""
        with self._lock:
            for process in reversed(self._processes):
                self._terminate(process.popen)
            self._processes.clear()
            _live.discard(self)
            if self._owns_data_dir and not self.options.keep_data_dir and self.data_dir.exists():
                shutil.rmtree(self.data_dir, ignore_errors=True)

    def restart_apiserver(self) -> None:
        """Stop and start kube-apiserver on the same port and etcd (to test watch recovery)."""
        began = _audit_now()
        apiservers = [p for p in self._processes if p.name == "kube-apiserver"]
        for process in apiservers:
            self._terminate(process.popen)
            self._processes.remove(process)
        self._start_apiserver(port=self.secure_port)
        # A restarted apiserver serves before its RBAC authorizer has synced its
        # informers, so requests right after the start can be refused; /readyz covers
        # that, so the window ends a moment after it answers.
        time.sleep(1.0)
        self.restarts.append((began, _audit_now()))

    def server_version(self) -> dict[str, Any]:
        version: dict[str, Any] = json.loads(self._get("/version"))
        return version

    def request(
        self, method: str, path: str, body: Any = None, *, timeout: float = 10
    ) -> dict[str, Any]:
        """One API request with the admin credentials, synchronously, for harness code
        outside an event loop (tests use :class:`~kube_ccm.runtime.client.KubeClient`);
        the decoded answer. Raises :class:`urllib.error.HTTPError` on an error status."""
        data = None if body is None else json.dumps(body).encode()
        # A PATCH is a JSON merge patch; everything else sends the object.
        content_type = "application/merge-patch+json" if method == "PATCH" else "application/json"
        request = urllib.request.Request(
            f"{self.server}{path}",
            data=data,
            method=method,
            headers={"Content-Type": content_type, "Accept": "application/json"},
        )
        with urllib.request.urlopen(
            request, timeout=timeout, context=self._ssl_context()
        ) as response:
            answer: dict[str, Any] = json.loads(response.read() or b"{}")
            return answer

    # -- internals ------------------------------------------------------------

    def _prepare_data_dir(self) -> None:
        if self.options.data_dir is not None:
            self.data_dir = self.options.data_dir
            self.data_dir.mkdir(parents=True, exist_ok=True)
        else:
            self.data_dir = Path(tempfile.mkdtemp(prefix="kube-ccm-controlplane-"))
            self._owns_data_dir = True
        pki = self.data_dir / "pki"
        pki.mkdir(exist_ok=True)
        ca = CertificateAuthority()
        self._ca = ca
        self.ca_file.write_bytes(ca.cert_pem)
        self._serving_ips = ("127.0.0.1", "10.0.0.1")
        self.advertise_address = "127.0.0.1"
        self._issue_serving_certificate(pki)
        admin = ca.issue("kube-ccm-admin", organizations=("system:masters",), client=True)
        admin.write(pki / "admin.crt", pki / "admin.key")
        ca.issue(
            "kube-apiserver-kubelet-client", organizations=("system:masters",), client=True
        ).write(pki / "kubelet-client.crt", pki / "kubelet-client.key")
        signing_key_pair().write(pki / "sa.pub", pki / "sa.key")
        self._admin = admin
        self._ca_pem = ca.cert_pem

    def _issue_serving_certificate(self, pki: Path) -> None:
        self._ca.issue(
            "kube-apiserver",
            dns_names=("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"),
            ip_addresses=self._serving_ips,
            server=True,
        ).write(pki / "apiserver.crt", pki / "apiserver.key")

    def _spawn(self, name: str, argv: Sequence[str]) -> _Process:
        log_path = self.data_dir / f"{name}.log"
        with log_path.open("wb") as log:
            popen = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                # The only way to set PR_SET_PDEATHSIG; we fork from the main thread.
                preexec_fn=die_with_parent(os.getpid()),  # noqa: PLW1509
                close_fds=True,
            )
        process = _Process(name, popen, log_path)
        self._processes.append(process)
        return process

    def _start_etcd(self) -> None:
        client_port, peer_port = _free_port(), _free_port()
        self.etcd_url = f"http://127.0.0.1:{client_port}"
        peer = f"http://127.0.0.1:{peer_port}"
        process = self._spawn(
            "etcd",
            [
                str(self.binaries.etcd),
                "--name=default",
                f"--data-dir={self.data_dir / 'etcd'}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=default={peer}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
                *self.options.extra_etcd_args,
            ],
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if process.popen.poll() is not None:
                raise ControlPlaneError(
                    f"etcd exited with status {process.popen.returncode} before it was healthy "
                    f"(binary {self.binaries.etcd}); its log ends with:\n{process.log_tail()}"
                )
            try:
                with urllib.request.urlopen(f"{self.etcd_url}/health", timeout=2) as response:
                    if json.loads(response.read()).get("health") == "true":
                        return
            except (OSError, ValueError):
                pass
            time.sleep(0.05)
        raise ControlPlaneError(
            f"etcd did not become healthy within 30 s; its log ends with:\n{process.log_tail()}"
        )

    def _apiserver_argv(self, port: int) -> list[str]:
        pki = self.data_dir / "pki"
        return [
            str(self.binaries.kube_apiserver),
            f"--etcd-servers={self.etcd_url}",
            # One address or all: all once another must be served (serve_also_on).
            f"--bind-address={'127.0.0.1' if self.advertise_address == '127.0.0.1' else '0.0.0.0'}",
            f"--advertise-address={self.advertise_address}",
            f"--secure-port={port}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-cluster-ip-range={self.options.service_cluster_ip_range}",
            # A list flag: given twice, the modes add up (and a repeated one is refused).
            f"--authorization-mode={'Node,RBAC' if self.options.real_nodes else 'RBAC'}",
            "--allow-privileged=true",
            "--profiling=false",
            f"--cert-dir={pki}",
            *self._audit_args(),
            *(self._real_node_args() if self.options.real_nodes else ()),
            *self.options.extra_apiserver_args,
        ]

    def _real_node_args(self) -> list[str]:
        pki = self.data_dir / "pki"
        return [
            "--enable-admission-plugins=NodeRestriction",
            "--kubelet-preferred-address-types=InternalIP,Hostname",
            f"--kubelet-client-certificate={pki / 'kubelet-client.crt'}",
            f"--kubelet-client-key={pki / 'kubelet-client.key'}",
        ]

    def _audit_args(self) -> list[str]:
        if not self.options.audit_users:
            return []
        policy = self.data_dir / "audit-policy.yaml"
        rules = [
            {"level": "Metadata", "users": list(self.options.audit_users)},
            {"level": "None"},
        ]
        policy.write_text(
            json.dumps(
                {
                    "apiVersion": "audit.k8s.io/v1",
                    "kind": "Policy",
                    "omitStages": ["RequestReceived"],
                    "rules": rules,
                }
            )
        )
        return [
            f"--audit-policy-file={policy}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json",
            "--audit-log-mode=blocking",
            "--audit-log-maxsize=0",
        ]

    def _start_apiserver(self, port: int | None = None) -> None:
        attempts = 1 if port else 3
        for attempt in range(attempts):
            self.secure_port = port or _free_port()
            self.server = f"https://127.0.0.1:{self.secure_port}"
            process = self._spawn("kube-apiserver", self._apiserver_argv(self.secure_port))
            self._write_kubeconfig()
            try:
                self._wait_ready(process)
                return
            except ControlPlaneError:
                port_taken = "address already in use" in process.log_tail(200)
                if not port_taken or attempt == attempts - 1:
                    raise
                self._terminate(process.popen)
                self._processes.remove(process)

    def _ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cadata=self._ca_pem.decode())
        pki = self.data_dir / "pki"
        context.load_cert_chain(pki / "admin.crt", pki / "admin.key")
        return context

    def _get(self, path: str, timeout: float = 5) -> bytes:
        with urllib.request.urlopen(
            f"{self.server}{path}", timeout=timeout, context=self._ssl_context()
        ) as response:
            body: bytes = response.read()
            return body

    def _wait_ready(self, process: _Process) -> None:
        deadline = time.monotonic() + self.options.ready_timeout
        last_error = ""
        while time.monotonic() < deadline:
            if process.popen.poll() is not None:
                raise ControlPlaneError(
                    f"kube-apiserver exited with status {process.popen.returncode} "
                    f"(binary {self.binaries.kube_apiserver}); its log ends with:\n"
                    f"{process.log_tail()}"
                )
            try:
                if self._get("/readyz", timeout=2) == b"ok":
                    return
            except urllib.error.HTTPError as exc:
                last_error = f"/readyz answered {exc.code}"
            except (OSError, ssl.SSLError) as exc:
                last_error = str(exc)
            time.sleep(0.1)
        raise ControlPlaneError(
            f"kube-apiserver was not ready within {self.options.ready_timeout:.0f} s "
            f"({last_error}); its log ends with:\n{process.log_tail()}"
        )

    def _write_kubeconfig(self) -> None:
        _write_kubeconfig_file(self.kubeconfig, self.server, self._ca_pem, "admin", self._admin)

    @staticmethod
    def _terminate(popen: subprocess.Popen[bytes]) -> None:
        if popen.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(popen.pid, signal.SIGTERM)
        try:
            popen.wait(timeout=_STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(popen.pid, signal.SIGKILL)
            popen.wait()


def _write_kubeconfig_file(
    path: Path, server: str, ca_pem: bytes, user: str, pair: KeyPair
) -> None:
    """Write a kubeconfig for ``user`` with ``pair`` as its client certificate, atomically."""

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "kube-ccm-local",
                "cluster": {"server": server, "certificate-authority-data": b64(ca_pem)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": b64(pair.cert_pem),
                    "client-key-data": b64(pair.key_pem),
                },
            }
        ],
        "contexts": [
            {"name": "kube-ccm-local", "context": {"cluster": "kube-ccm-local", "user": user}}
        ],
        "current-context": "kube-ccm-local",
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(config, sort_keys=False))
    tmp.chmod(0o600)
    tmp.replace(path)


# -- command line ---------------------------------------------------------------


def run_up(duration: float | None, data_dir: Path | None = None, out: Any = None) -> int:
    """Start a control plane, print where to reach it, and hold it until Ctrl-C or ``duration``."""
    out = out or sys.stdout
    options = ControlPlaneOptions(data_dir=data_dir, keep_data_dir=data_dir is not None)
    plane = ControlPlane(options)
    try:
        plane.start()
    except ControlPlaneError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    try:
        version = plane.server_version()
        rss = sum(plane.rss_bytes().values()) / 2**20
        print(
            f"control plane ready in {plane.timings.total:.1f} s "
            f"(binaries from {plane.binaries.source})\n"
            f"  server:      {plane.server}\n"
            f"  version:     {version.get('gitVersion')} (etcd {plane.binaries.versions.etcd})\n"
            f"  kubeconfig:  {plane.kubeconfig}\n"
            f"  memory:      {rss:.0f} MiB RSS (etcd + kube-apiserver)",
            file=out,
            flush=True,
        )
        if shutil.which("kubectl"):
            print(f"  try:         kubectl --kubeconfig {plane.kubeconfig} get ns", file=out)
        if duration is None:
            print("running until Ctrl-C", file=out, flush=True)
        else:
            print(f"running for {duration:.0f} s (then stopping cleanly)", file=out, flush=True)
        try:
            deadline = None if duration is None else time.monotonic() + duration
            while deadline is None or time.monotonic() < deadline:
                if not plane.running:
                    print("error: the control plane exited unexpectedly", file=sys.stderr)
                    return 1
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
    finally:
        plane.stop()
    print("control plane stopped", file=out, flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kube_ccm.testing.controlplane",
        description="Build the local control-plane binaries, or run a control plane.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser(
        "build", help="build (or find cached) kube-apiserver and etcd; print paths"
    )
    build.add_argument(
        "--nodes",
        action="store_true",
        help="also kubelet, kube-controller-manager and kube-scheduler (for real nodes)",
    )
    up = sub.add_parser("up", help="run etcd + kube-apiserver until Ctrl-C")
    up.add_argument("--duration", type=float, default=None, help="seconds")
    up.add_argument("--data-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.command == "build":
        try:
            found = ensure_binaries()
            print(
                f"kube-apiserver {found.versions.kubernetes}: {found.kube_apiserver}\n"
                f"etcd {found.versions.etcd}: {found.etcd}\n(source: {found.source})"
            )
            if args.nodes:
                node = ensure_node_binaries()
                print(
                    f"kubelet: {node.kubelet}\n"
                    f"kube-controller-manager: {node.kube_controller_manager}\n"
                    f"kube-scheduler: {node.kube_scheduler}\n(source: {node.source})"
                )
        except ControlPlaneBinariesError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        return 0
    return run_up(args.duration, args.data_dir)


if __name__ == "__main__":
    sys.exit(main())


def _audit_now() -> str:
    """Now, formatted as audit events' ``requestReceivedTimestamp`` (comparable as text)."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
