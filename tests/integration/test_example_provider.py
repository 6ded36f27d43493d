"""An out-of-tree provider, installed with pip as users do, runs under kube-ccm.

The example package is installed into a private target directory (no
dependencies: kube-ccm is already importable), then the daemon is started as a
subprocess that only sees it through ``PYTHONPATH`` — discovery goes through the
``kube_ccm.cloud_providers`` entry point in the installed metadata, or through
the package's own ``main`` that registers it explicitly.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

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


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("site")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--target",
            str(target),
            str(EXAMPLE),
        ],
        check=True,
        timeout=300,
    )
    return target


def inventory(path: Path, node: str) -> Path:
    path.write_text(
        "clusterID: demo\n"
        "instances:\n"
        f"  - name: {node}\n"
        f"    providerID: example://{node}\n"
        "    type: example.large\n"
        "    zone: example-zone-1\n"
        "    region: example-region\n"
        "    addresses: [{type: InternalIP, address: 10.42.0.9}]\n"
    )
    return path


@pytest.fixture
def start(
    kube_controlplane: ControlPlane, site: Path, tmp_path: Path
) -> Iterator[Callable[[list[str], str], subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    # Only the pip target: the example's source tree must not be importable.
    env = {**os.environ, "PYTHONPATH": str(site)}

    def launch(command: list[str], node: str) -> subprocess.Popen[bytes]:
        config = inventory(tmp_path / f"inventory-{len(started)}.yaml", node)
        log = (tmp_path / f"daemon-{len(started)}.log").open("wb")
        process = subprocess.Popen(
            [
                *command,
                "--cloud-provider=example",
                f"--cloud-config={config}",
                f"--kubeconfig={kube_controlplane.kubeconfig}",
                "--leader-elect=false",
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        started.append(process)
        return process

    yield launch
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()


async def assert_initialised(client: KubeClient, cleanup: Cleanup, name: str) -> None:
    cleanup.add(f"/api/v1/nodes/{name}")
    await client.create(
        "/api/v1/nodes", {"metadata": {"name": name}, "spec": {"taints": [UNINITIALIZED]}}
    )

    node: dict[str, Any] = {}

    async def initialised() -> bool:
        node.update(await client.get(f"/api/v1/nodes/{name}"))
        taints = [t["key"] for t in node["spec"].get("taints") or []]
        return UNINITIALIZED["key"] not in taints

    await eventually(initialised, within=60, what="the example provider initialises the node")
    assert node["spec"]["providerID"] == f"example://{name}"
    labels = node["metadata"]["labels"]
    assert labels["node.kubernetes.io/instance-type"] == "example.large"
    assert labels["topology.kubernetes.io/zone"] == "example-zone-1"
    assert labels["topology.kubernetes.io/region"] == "example-region"


async def test_the_installed_provider_is_found_through_its_entry_point(
    start: Callable[[list[str], str], subprocess.Popen[bytes]],
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
) -> None:
    name = unique_name("node")
    daemon = start([sys.executable, "-m", "kube_ccm", "run"], name)
    await assert_initialised(kube_client, kube_cleanup, name)
    daemon.send_signal(signal.SIGTERM)
    assert daemon.wait(timeout=30) == 0


async def test_the_providers_own_main_runs_the_same_daemon(
    start: Callable[[list[str], str], subprocess.Popen[bytes]],
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
) -> None:
    name = unique_name("node")
    daemon = start([sys.executable, "-m", "kube_ccm_example.main"], name)
    await assert_initialised(kube_client, kube_cleanup, name)
    daemon.send_signal(signal.SIGTERM)
    assert daemon.wait(timeout=30) == 0
