"""When the control plane cannot start, the error names the missing piece."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from kube_ccm.testing import binaries
from kube_ccm.testing.binaries import Binaries, ControlPlaneBinariesError, Versions
from kube_ccm.testing.controlplane import ControlPlane, ControlPlaneError, controlplane_required


def _script(path: Path, body: str) -> Path:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_versions_are_read_from_the_single_pin_in_go_mod() -> None:
    versions = binaries.pinned_versions()
    assert versions.kubernetes.startswith("v1.")
    assert versions.etcd.startswith(("v3.5.", "v3.6."))


def test_cache_dir_is_keyed_by_both_versions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(binaries.CACHE_ENV, str(tmp_path))
    versions = binaries.pinned_versions()
    directory = binaries.cache_dir()
    assert directory.is_relative_to(tmp_path)
    assert versions.kubernetes in directory.name
    assert versions.etcd in directory.name


def test_bin_env_pointing_at_an_incomplete_directory_names_what_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _script(tmp_path / "etcd", "exit 0")
    monkeypatch.setenv(binaries.BIN_ENV, str(tmp_path))
    with pytest.raises(ControlPlaneBinariesError, match="no executable kube-apiserver"):
        binaries.find_binaries()


def test_without_go_and_without_a_cache_the_error_says_to_install_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(binaries.BIN_ENV, raising=False)
    monkeypatch.delenv(binaries.GO_ENV, raising=False)
    monkeypatch.setenv(binaries.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ControlPlaneError, match=r"install Go >= 1\.26"):
        ControlPlane().start()


def test_an_etcd_that_exits_is_reported_with_its_log(tmp_path: Path) -> None:
    etcd = _script(tmp_path / "etcd", "echo 'bad flag --foo' >&2; exit 3")
    apiserver = _script(tmp_path / "kube-apiserver", "exit 0")
    fake = Binaries(apiserver, etcd, Versions("v1.0.0", "v3.6.0"), "env")
    plane = ControlPlane(binaries=fake)
    with pytest.raises(ControlPlaneError, match=r"etcd exited with status 3(.|\n)*bad flag --foo"):
        plane.start()
    assert not plane.running
    assert not plane.data_dir.exists()


def test_ci_requires_the_control_plane(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBE_CCM_REQUIRE_CONTROLPLANE", raising=False)
    monkeypatch.setenv("CI", "true")
    assert controlplane_required()
    monkeypatch.setenv("CI", "")
    assert not controlplane_required()
