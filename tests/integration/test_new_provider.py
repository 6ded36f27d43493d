"""``kube-ccm new-provider``: the package it writes installs with pip, is found by
``kube-ccm run`` through its entry point, passes its own tests and kube-ccm's
conformance kit (the daemon checks on the real control plane included), and is typed
and clean (mypy strict, ruff) out of the box."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import time
import zipfile
from pathlib import Path

import pytest

from kube_ccm.app.tools.newprovider import NewProviderError, write_package
from kube_ccm.testing.controlplane import ControlPlane

CHECKOUT = Path(__file__).resolve().parents[2]


def run(
    *argv: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(argv), cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
    )


def with_site(site: Path) -> str:
    """PYTHONPATH with the installed package first, keeping the caller's (a checkout
    run from another directory than the venv's editable kube-ccm)."""
    return os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)


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
    assert "wrote 13 files" in made.stdout
    return directory


@pytest.fixture(scope="module")
def site(package: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package installed with pip, as its README says (into a target directory)."""
    target = tmp_path_factory.mktemp("site")
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
        cwd=target,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    # its own command (main.py), the counterpart of upstream's template main.go
    assert (target / "bin" / "acme-cloud-cloud-controller-manager").is_file()
    return target


def test_the_package_passes_its_tests_and_the_conformance_kit(
    package: Path, site: Path, kube_controlplane: ControlPlane
) -> None:
    del kube_controlplane  # the binaries are there (or the test is skipped outside CI)
    env = {**os.environ, "PYTHONPATH": with_site(site)}
    tests = run(
        sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", cwd=package, env=env
    )
    assert tests.returncode == 0, tests.stdout[-4000:] + tests.stderr[-2000:]
    passed = [line for line in tests.stdout.splitlines() if line.startswith("PASSED")]
    for check in (
        "test_provider.py::test_load_balancers_are_idempotent_and_deleted",
        "test_provider.py::test_a_node_registered_before_its_instance_is_retried",
        "test_provider.py::test_load_balancers_never_share_an_address",
        "test_provider.py::test_a_refused_token_stops_the_daemon_at_start_up",
        "TestConformance::test_a_deleted_instance_does_not_exist",
        "TestConformance::test_an_api_error_is_raised_not_reported_as_a_missing_instance",
        "TestConformance::test_daemon_initialises_the_node_of_a_new_instance",
        "TestConformance::test_daemon_deletes_a_not_ready_node_whose_instance_is_gone",
        "TestConformance::test_daemon_creates_updates_and_deletes_a_load_balancer",
    ):
        assert any(check in line for line in passed), (
            f"{check} did not pass:\n{tests.stdout[-4000:]}"
        )
    assert "FAILED" not in tests.stdout
    # pytest used to warn on every run that it could not rewrite kube_ccm's plugin.
    assert "Module already imported" not in tests.stdout + tests.stderr


@pytest.fixture(scope="module")
def editable_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtualenv with kube-ccm installed editable from this checkout, as `make` and
    an author's `pip install -e` do (the editable wheel setuptools builds, unpacked);
    its other packages (mypy, kube-ccm's dependencies) are this environment's."""
    root = tmp_path_factory.mktemp("venv")
    made = run(sys.executable, "-m", "venv", "--without-pip", str(root), cwd=root)
    assert made.returncode == 0, made.stderr
    python = root / "bin" / "python"
    site = Path(
        run(
            str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))", cwd=root
        ).stdout.strip()
    )
    wheels = tmp_path_factory.mktemp("editable")
    built = run(
        sys.executable,
        "-c",
        "import sys; from setuptools import build_meta; build_meta.build_editable(sys.argv[1])",
        str(wheels),
        cwd=CHECKOUT,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = wheels.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    (site / "zz-this-environment.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return python


def test_the_package_is_typed_and_clean(package: Path, editable_python: Path) -> None:
    """mypy --strict out of the box, kube-ccm installed editable and no MYPYPATH: the
    test used to need MYPYPATH, setuptools' import-hook finder hid kube_ccm from mypy."""
    env = {k: v for k, v in os.environ.items() if k not in ("MYPYPATH", "PYTHONPATH")}
    typed = run(
        str(editable_python),
        "-m",
        "mypy",
        "--cache-dir",
        str(package / ".mypy_cache"),
        "kube_ccm_acme_cloud",
        "tests",
        "conftest.py",
        cwd=package,
        env=env,
    )
    assert typed.returncode == 0, typed.stdout
    lint = run(
        sys.executable, "-m", "ruff", "check", "--select", "E,F,W,I,B,UP,SIM,RUF", ".", cwd=package
    )
    assert lint.returncode == 0, lint.stdout
    formatted = run(sys.executable, "-m", "ruff", "format", "--check", ".", cwd=package)
    assert formatted.returncode == 0, formatted.stdout


def test_it_installs_and_kube_ccm_run_finds_it(
    site: Path, kube_controlplane: ControlPlane, tmp_path: Path
) -> None:
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
            env={**os.environ, "PYTHONPATH": with_site(site)},
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
