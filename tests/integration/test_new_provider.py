"""``kube-ccm new-provider``: the package it writes installs with pip, is found by
``kube-ccm run`` through its entry point, passes its own tests, and is typed and
clean (mypy strict, ruff) out of the box."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kube_ccm.app.newprovider import NewProviderError, write_package
from kube_ccm.testing.controlplane import ControlPlane

CHECKOUT = Path(__file__).resolve().parents[2]


def run(
    *argv: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(argv), cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
    )


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("new") / "kube-ccm-acme-cloud"
    made = run(
        sys.executable,
        "-m",
        "kube_ccm",
        "new-provider",
        "acme-cloud",
        "--dir",
        str(directory),
        cwd=CHECKOUT,
    )
    assert made.returncode == 0, made.stderr
    assert "wrote 10 files" in made.stdout
    return directory


def test_the_package_passes_its_own_tests_and_is_typed_and_clean(package: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(package), "MYPYPATH": str(CHECKOUT)}
    tests = run(
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", cwd=package, env=env
    )
    assert tests.returncode == 0, tests.stdout[-3000:] + tests.stderr[-2000:]
    assert "4 passed" in tests.stdout
    typed = run(sys.executable, "-m", "mypy", "kube_ccm_acme_cloud", "tests", cwd=package, env=env)
    assert typed.returncode == 0, typed.stdout
    lint = run(
        sys.executable, "-m", "ruff", "check", "--select", "E,F,W,I,B,UP,SIM,RUF", ".", cwd=package
    )
    assert lint.returncode == 0, lint.stdout
    formatted = run(sys.executable, "-m", "ruff", "format", "--check", ".", cwd=package)
    assert formatted.returncode == 0, formatted.stdout


def test_it_installs_and_kube_ccm_run_finds_it(
    package: Path, kube_controlplane: ControlPlane, tmp_path: Path
) -> None:
    target = tmp_path / "site"
    installed = run(
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--no-deps",
        "--no-build-isolation",
        "--target",
        str(target),
        str(package),
        cwd=tmp_path,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    log = tmp_path / "daemon.log"
    with log.open("wb") as out:
        daemon = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kube_ccm",
                "run",
                "--cloud-provider=acme-cloud",
                f"--kubeconfig={kube_controlplane.kubeconfig}",
                "--leader-elect=false",
                "--secure-port=0",
                "--controllers=cloud-node,service",
            ],
            env={**os.environ, "PYTHONPATH": str(target)},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 30
        while (
            "Started service-lb-controller" not in log.read_text() and time.monotonic() < deadline
        ):
            assert daemon.poll() is None, log.read_text()[-3000:]
            time.sleep(0.2)
        assert "Started cloud-node-controller" in log.read_text(), log.read_text()[-3000:]
        assert "Started service-lb-controller" in log.read_text()
    finally:
        daemon.terminate()
        daemon.wait(30)


def test_bad_names_and_used_directories_are_refused(tmp_path: Path) -> None:
    for bad in ("Acme", "1cloud", "acme_cloud", "acme--cloud", ""):
        with pytest.raises(NewProviderError, match="lowercase letters"):
            write_package(bad, tmp_path / bad)
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "file").write_text("x")
    with pytest.raises(NewProviderError, match="is not empty"):
        write_package("acme", tmp_path / "used")
