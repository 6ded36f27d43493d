"""The example provider, installed with pip as users install it, runs under kube-ccm.

``examples/minimal-provider`` is what ``kube-ccm new-provider example`` writes: a
provider over a fake cloud that several processes share through a state file, which
this test (importing ``kube_ccm_example.fake`` from the source tree) fills with
instances while the daemon answers for them. A copy of it is installed once into a private target
directory (``--no-deps``: kube-ccm itself is already importable). Each daemon is a
subprocess that sees the package only through ``PYTHONPATH=<target>``, so the
provider is found the way users' installs find it: through the entry point in the
installed metadata (``kube-ccm run``), or registered by the package's own
``example-cloud-controller-manager`` script.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kube_ccm_example.fake import FakeCloud

from kube_ccm.runtime.client import KubeClient
from kube_ccm.testing.controlplane import ControlPlane
from kube_ccm.testing.pytest_plugin import Cleanup
from kube_ccm.testing.waiting import eventually

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "minimal-provider"
UNINITIALIZED = {
    "key": "node.cloudprovider.kubernetes.io/uninitialized",
    "value": "true",
    "effect": "NoSchedule",
}


def _build_isolation() -> list[str]:
    """``--no-build-isolation`` when this environment can build the wheel by itself
    (setuptools >= 70.1, or an older one with ``wheel``), so the install works
    offline; otherwise pip fetches setuptools into an isolated build environment."""
    try:
        version = importlib.metadata.version("setuptools")
    except importlib.metadata.PackageNotFoundError:
        return []
    major, minor = (int(part) for part in re.findall(r"\d+", version)[:2])
    has_wheel = importlib.util.find_spec("wheel") is not None
    if (major, minor) >= (70, 1) or (major >= 64 and has_wheel):
        return ["--no-build-isolation"]
    return []


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example installed with pip into a target directory; its scripts land in ``bin/``."""
    # Build from a copy: pip builds in the source tree, which is the checkout otherwise.
    source = tmp_path_factory.mktemp("src") / "minimal-provider"
    shutil.copytree(
        EXAMPLE, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__")
    )
    target = tmp_path_factory.mktemp("site")
    command = [
        *(sys.executable, "-m", "pip", "install", "--quiet", "--no-deps"),
        *_build_isolation(),
        *("--target", str(target), str(source)),
    ]
    installed = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert installed.returncode == 0, (
        f"{' '.join(command)} failed:\n{installed.stdout}{installed.stderr}"
    )
    return target


class Daemon:
    """One daemon subprocess and its log."""

    def __init__(self, argv: list[str], env: dict[str, str], workdir: Path) -> None:
        self.argv = argv
        self.log_path = workdir / "daemon.log"
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                argv,
                env=env,
                cwd=workdir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait(self, timeout: float = 30) -> int:
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.argv[0]} still running after {timeout:g} s; log:\n{self.log()[-3000:]}"
            ) from None

    def terminate(self) -> int:
        """SIGTERM, as the kubelet stops a container; the exit status."""
        self.process.send_signal(signal.SIGTERM)
        return self.wait()


Launch = Callable[..., Daemon]


@pytest.fixture
def launch(kube_controlplane: ControlPlane, site: Path, tmp_path: Path) -> Iterator[Launch]:
    """Start ``command`` with the daemon flags, a cloud-config and only ``site`` importable."""
    started: list[Daemon] = []

    def start(command: list[str], cloud_config: str, *flags: str) -> Daemon:
        workdir = tmp_path / f"daemon-{len(started)}"
        workdir.mkdir()
        config = workdir / "cloud.yaml"
        config.write_text(cloud_config)
        argv = [
            *command,
            "--cloud-provider=example",
            f"--cloud-config={config}",
            f"--kubeconfig={kube_controlplane.kubeconfig}",
            "--leader-elect=false",
            "--secure-port=0",  # no HTTPS port: daemons of other tests may run side by side
            *flags,
        ]
        # Only the pip target: the example's source tree must not be importable.
        daemon = Daemon(argv, {**os.environ, "PYTHONPATH": str(site)}, workdir)
        started.append(daemon)
        return daemon

    yield start
    for daemon in started:
        if daemon.process.poll() is None:
            daemon.process.kill()
            daemon.process.wait()


def cloud_with(node: str, state: Path) -> str:
    """The cloud-config of a fake cloud (in ``state``) holding one instance, ``node``."""
    FakeCloud(state).add_instance(node, zone="example-zone-1", type="example.large")
    return f"endpoint: fake:{state}\nregion: example-region\n"


def own_main(site: Path) -> list[str]:
    """The package's console script as pip installed it, else its module."""
    script = site / "bin" / "example-cloud-controller-manager"
    return [str(script)] if script.exists() else [sys.executable, "-m", "kube_ccm_example.main"]


async def assert_node_initialised(
    client: KubeClient, cleanup: Cleanup, name: str, daemon: Daemon
) -> None:
    cleanup.add(f"/api/v1/nodes/{name}")
    await client.create(
        "/api/v1/nodes", {"metadata": {"name": name}, "spec": {"taints": [UNINITIALIZED]}}
    )
    node: dict[str, Any] = {}

    async def initialised() -> bool:
        assert daemon.process.poll() is None, f"the daemon exited:\n{daemon.log()[-3000:]}"
        node.update(await client.get(f"/api/v1/nodes/{name}"))
        taints = [t["key"] for t in node["spec"].get("taints") or []]
        return UNINITIALIZED["key"] not in taints and bool(node["status"].get("addresses"))

    try:
        await eventually(initialised, within=60, what="the example provider initialises the node")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\ndaemon log:\n{daemon.log()[-3000:]}") from None
    labels = node["metadata"]["labels"]
    assert node["spec"]["providerID"] == "example://example-zone-1/i-000001"
    assert labels["node.kubernetes.io/instance-type"] == "example.large"
    assert labels["topology.kubernetes.io/zone"] == "example-zone-1"
    assert labels["topology.kubernetes.io/region"] == "example-region"
    assert node["status"]["addresses"] == [{"type": "InternalIP", "address": "10.0.0.1"}]


async def test_kube_ccm_run_finds_the_installed_provider_through_its_entry_point(
    launch: Launch,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    name = unique_name("node")
    daemon = launch(
        [sys.executable, "-m", "kube_ccm", "run"], cloud_with(name, tmp_path / "cloud.json")
    )

    await assert_node_initialised(kube_client, kube_cleanup, name, daemon)

    assert daemon.terminate() == 0
    assert "shut down cleanly" in daemon.log()


async def test_the_packages_own_command_runs_the_same_daemon(
    launch: Launch,
    site: Path,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
    *,
    tmp_path: Path,
) -> None:
    name = unique_name("node")
    daemon = launch(own_main(site), cloud_with(name, tmp_path / "cloud.json"))

    await assert_node_initialised(kube_client, kube_cleanup, name, daemon)

    assert daemon.terminate() == 0


def test_the_packages_own_command_prints_the_daemons_flags_under_its_name(
    site: Path,
) -> None:
    shown = subprocess.run(
        [*own_main(site), "--help"],
        env={**os.environ, "PYTHONPATH": str(site)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("Usage: example-cloud-controller-manager")
    assert "--cloud-provider" in shown.stdout


def test_a_misspelt_cloud_config_key_stops_the_daemon_with_the_providers_message(
    launch: Launch,
) -> None:
    daemon = launch([sys.executable, "-m", "kube_ccm", "run"], "regoin: r2\n")

    assert daemon.wait() == 1
    assert (
        'could not init cloud provider "example": invalid example cloud-config: '
        "unknown field `regoin`" in daemon.log()
    )
