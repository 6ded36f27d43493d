"""Cloud credentials on the real apiserver: a Secret-style file, rotated under a running daemon.

The daemon runs as a subprocess with the simulated provider; its cloud-config names
a credentials file laid out as the kubelet projects a Secret volume (``token`` ->
``..data/token``, ``..data`` -> a versioned directory swapped atomically), and the
test decides which credentials the simulated cloud accepts (``daemon.cloud``).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from kube_ccm.runtime.client import KubeClient
from kube_ccm.testing.controlplane import ControlPlane
from kube_ccm.testing.daemon import DaemonProcess
from kube_ccm.testing.manifests import UNINITIALIZED_TAINT, create_node
from kube_ccm.testing.pytest_plugin import Cleanup
from kube_ccm.testing.waiting import eventually

FAST = (
    "--leader-elect=false",
    "--controllers=cloud-node",
    "--node-status-update-frequency=5m",
    "--cloud-call-timeout=5s",
)
OLD = "sim-old-key-4c7e19d2"
NEW = "sim-new-key-93ab5f60"
WRONG = "sim-wrong-key-0d8e77a1"

DaemonFactory = Callable[..., DaemonProcess]


class SecretVolume:
    """A directory updated the way the kubelet's AtomicWriter updates a Secret volume."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / "token"
        directory.mkdir(parents=True)
        self._version = 0

    def write(self, value: str) -> None:
        self._version += 1
        version = self.directory / f"..2025_01_01_00_00_00.{self._version:06d}"
        version.mkdir()
        (version / "token").write_text(value + "\n")
        data = self.directory / "..data"
        old = data.resolve() if data.is_symlink() else None
        tmp = self.directory / "..data_tmp"
        tmp.symlink_to(version.name)
        os.replace(tmp, data)
        if not self.path.is_symlink():
            self.path.symlink_to("..data/token")
        if old is not None:
            shutil.rmtree(old)


@pytest.fixture
def daemon(ccm_kubeconfig: Path, tmp_path: Path) -> Iterator[DaemonFactory]:
    started: list[DaemonProcess] = []

    def start(
        *args: str,
        credentials: dict[str, Any],
        accepted: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ) -> DaemonProcess:
        process = DaemonProcess(
            kubeconfig=ccm_kubeconfig,
            workdir=tmp_path / f"daemon-{len(started)}",
            cloud_config={"credentials": credentials},
            args=[*FAST, *args],
            env=env,
        )
        if accepted:
            process.cloud.set_credentials(*accepted)
        started.append(process.start())
        return process

    yield start
    for process in started:
        process.stop()


async def initialised(client: KubeClient, name: str) -> bool:
    node = await client.get(f"/api/v1/nodes/{name}")
    taints = [t["key"] for t in node["spec"].get("taints") or []]
    return UNINITIALIZED_TAINT["key"] not in taints and bool(node["spec"].get("providerID"))


def simcloud_json(state: Path, *argv: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "kube_ccm", "simcloud", "--state", str(state), "-o", "json", *argv],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    json.loads(done.stdout)
    return done.stdout


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def test_a_rotated_secret_is_used_without_a_restart(
    daemon: DaemonFactory,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    volume = SecretVolume(tmp_path / "secret")
    volume.write(OLD)
    ccm = daemon(credentials={"file": str(volume.path), "reloadInterval": "200ms"}, accepted=(OLD,))
    before = unique_name("node")
    await create_node(kube_client, kube_cleanup, before)
    await eventually(
        lambda: initialised(kube_client, before), within=60, what="initialised with OLD"
    )

    ccm.cloud.set_credentials(NEW)  # the cloud revokes OLD and accepts only NEW...
    volume.write(NEW)  # ...and the Secret is updated: the kubelet swaps ..data
    after = unique_name("node")
    await create_node(kube_client, kube_cleanup, after)

    await eventually(
        lambda: initialised(kube_client, after), within=60, what="initialised with NEW"
    )
    assert ccm.poll() is None  # the same process: no restart
    ccm.wait_for_log("changed (sha256")
    log = ccm.log()
    assert OLD not in log
    assert NEW not in log


async def test_credentials_from_the_environment_initialise_nodes(
    daemon: DaemonFactory,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
) -> None:
    ccm = daemon(
        credentials={"env": "SIMCLOUD_TEST_KEY"}, accepted=(NEW,), env={"SIMCLOUD_TEST_KEY": NEW}
    )
    name = unique_name("node")
    await create_node(kube_client, kube_cleanup, name)

    await eventually(lambda: initialised(kube_client, name), within=60, what="initialised")
    assert NEW not in ccm.log()


async def test_wrong_credentials_keep_the_node_tainted_and_never_show(
    *,
    daemon: DaemonFactory,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    kube_controlplane: ControlPlane,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    volume = SecretVolume(tmp_path / "secret")
    volume.write(WRONG)
    port = free_port()
    ccm = daemon(
        f"--secure-port={port}",
        "--bind-address=127.0.0.1",
        f"--cert-dir={tmp_path / 'certs'}",
        credentials={"file": str(volume.path), "reloadInterval": "200ms"},
        accepted=(NEW,),
    )
    name = unique_name("node")
    await create_node(kube_client, kube_cleanup, name)

    ccm.wait_for_log("authentication failed", timeout=60)
    assert not await initialised(kube_client, name)
    log = ccm.log()
    assert f'rejected the credentials from file "{volume.path}"' in log
    calls = json.loads(simcloud_json(ccm.state_path, "calls"))
    assert any(c["errors"] > 0 for c in calls)

    pki = kube_controlplane.data_dir / "pki"
    admin = ssl.create_default_context()
    admin.check_hostname, admin.verify_mode = False, ssl.CERT_NONE
    admin.load_cert_chain(pki / "admin.crt", pki / "admin.key")
    async with httpx2.AsyncClient(verify=admin) as client:
        configz = (await client.get(f"https://127.0.0.1:{port}/configz")).text
    assert "CloudControllerManagerConfiguration" in configz

    shown = [log, configz, simcloud_json(ccm.state_path, "credentials", "list")]
    shown.append(simcloud_json(ccm.state_path, "instances", "list"))
    for text in shown:
        assert WRONG not in text
        assert NEW not in text


def test_a_missing_credentials_file_at_start_exits_1_naming_it(
    daemon: DaemonFactory, tmp_path: Path
) -> None:
    missing = tmp_path / "secret" / "token"
    ccm = daemon(credentials={"file": str(missing)})

    assert ccm.wait(timeout=60) == 1
    log = ccm.log()
    assert f'the credentials file "{missing}"' in log
    assert "does not exist" in log
