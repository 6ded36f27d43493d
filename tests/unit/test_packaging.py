"""The wheel and sdist users install: built here as a release would be, then checked.

A provider package pins the kube-ccm range it tests against; that range must admit
the version a checkout and a wheel both report (a ``.devN`` version once made
``kube-ccm>=0.1,<0.2`` refuse the only release there was)."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

import kube_ccm
from kube_ccm.app.tools.newprovider import template_files

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    # --no-isolation: the dev extra's setuptools builds it, offline.
    built = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--sdist", "--wheel", "-o", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    return out


def test_the_version_is_a_final_release_both_built_and_checked_out(dist: Path) -> None:
    version = Version(kube_ccm.__version__)
    assert not version.is_devrelease, version
    assert not version.is_prerelease, version
    (wheel,) = dist.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        text = archive.read(metadata).decode()
    assert f"Version: {kube_ccm.__version__}\n" in text
    (sdist,) = dist.glob("*.tar.gz")
    assert sdist.name == f"kube_ccm-{kube_ccm.__version__}.tar.gz"


def test_the_wheel_carries_what_providers_and_the_daemon_need(dist: Path) -> None:
    (wheel,) = dist.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = next(
            archive.read(n).decode() for n in names if n.endswith(".dist-info/entry_points.txt")
        )
        metadata = next(archive.read(n).decode() for n in names if n.endswith("METADATA"))
    assert "kube_ccm/py.typed" in names
    assert "kube_ccm/testing/gobuild/go.mod" in names  # the test control plane's build
    assert "kube_ccm/testbed/gobuild-helm/go.mod" in names  # the sandbox's chart cluster: helm
    assert "kube_ccm/testbed/gobuild-e2e/e2enetwork/e2e_test.go" in names  # upstream's e2e
    assert "kube_ccm/testbed/gobuild-coredns/go.sum" in names
    for provider in (
        "simulated",
        "composite",
        "ippool",
        "libvirt",
        "aws",
        "k3s",
        "rke2",
        "servicelb",
    ):
        assert f"\n{provider} = " in entry_points, provider
    assert "kube-ccm = " in entry_points
    assert "cloud-controller-manager = " in entry_points
    assert "Provides-Extra: libvirt" in metadata
    assert "Provides-Extra: aws" in metadata
    assert not any(n.startswith("tests/") for n in names)


def test_the_wheel_and_sdist_carry_the_whole_new_provider_template(dist: Path) -> None:
    """`kube-ccm new-provider` renders the template from package data: a file the
    package-data globs miss would be missing from every package an installed kube-ccm
    writes."""
    expected = {f"kube_ccm/app/tools/templates/provider/{path}" for path in template_files()}
    assert len(expected) >= 12
    (wheel,) = dist.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        in_wheel = {n for n in archive.namelist() if n.startswith("kube_ccm/app/tools/templates/")}
    assert in_wheel == expected
    (sdist,) = dist.glob("*.tar.gz")
    with tarfile.open(sdist) as archive:
        in_sdist = {n.split("/", 1)[1] for n in archive.getnames() if "/templates/" in n}
    assert expected <= in_sdist


def test_the_sdist_builds_on_its_own(dist: Path) -> None:
    (sdist,) = dist.glob("*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {n.split("/", 1)[1] for n in archive.getnames() if "/" in n}
    for needed in ("pyproject.toml", "README.md", "kube_ccm/__init__.py", "kube_ccm/py.typed"):
        assert needed in names, needed


def test_the_example_providers_pin_admits_this_version() -> None:
    project = tomllib.loads((ROOT / "examples/minimal-provider/pyproject.toml").read_text())
    (pin,) = [
        Requirement(d) for d in project["project"]["dependencies"] if d.startswith("kube-ccm")
    ]
    assert str(pin.specifier), "the example shows a pinned range"
    assert pin.specifier.contains(kube_ccm.__version__), (pin, kube_ccm.__version__)


def test_an_editable_install_is_a_plain_path_entry_without_a_warning(tmp_path: Path) -> None:
    """`make`'s `pip install -e`: setuptools' import-hook finder (its default for this
    layout) hid kube_ccm from mypy, so `mypy --strict` failed on a provider package
    (docs/providers.md), and printed a warning box on every `make`. A .pth of the
    checkout's path is what mypy follows; built as pip does, with the dev extra's
    setuptools."""
    built = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from setuptools import build_meta; "
            "print(build_meta.build_editable(sys.argv[1]))",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    output = built.stdout + built.stderr
    assert "Editable installation" not in output, output[-3000:]
    assert "meta path finder" not in output
    (wheel,) = tmp_path.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        installed = [n for n in archive.namelist() if ".dist-info/" not in n]
        (pth,) = [n for n in installed if n.endswith(".pth")]
        entries = archive.read(pth).decode().split()
    assert installed == [pth], "no finder module: the .pth alone puts kube_ccm on sys.path"
    assert entries == [str(ROOT)], entries  # a path, not an `import` line
