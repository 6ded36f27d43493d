"""The shipped Dockerfile, built for real with buildah, and its image run.

:func:`kube_ccm.testbed.image.ensure_image` builds the Dockerfile of this checkout on
``python:3.11-slim-bookworm``, or on a stand-in assembled from Debian's packages when
that cannot be pulled (it cannot here: no Docker Hub), caches it by the hash of its
inputs, and exports it as a docker-archive for containerd. The checks run the image's
root file system with ``buildah run`` (chroot), as the image's own user.

Needs root, buildah and debootstrap (``make sysdeps``); skipped with the reason
otherwise, except under ``CI=true``, where a skip fails the run. Cold, as in CI (an
empty cache): about a minute for the stand-in base, half a minute for the image and
as much for the libvirt variant; cached, seconds.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kube_ccm import __version__
from kube_ccm.testbed.image import (
    IMAGE_USER,
    Container,
    Image,
    ImageBuildError,
    ensure_image,
    image_unavailable,
)
from kube_ccm.testing.pytest_plugin import unavailable

SITE_PACKAGES = Path("opt/kube-ccm/lib/python3.11/site-packages")
MAX_SIZE = 250e6
"""The image's layers, uncompressed: Python, kube-ccm and its dependencies."""


def _build(extras: str = "") -> Image:
    reason = image_unavailable()
    if reason:
        unavailable(reason)
    try:
        return ensure_image(extras)
    except ImageBuildError as exc:
        unavailable(f"the image could not be built: {exc}")
        raise


@pytest.fixture(scope="module")
def image() -> Image:
    return _build()


@pytest.fixture(scope="module")
def container(image: Image) -> Iterator[Container]:
    with image.buildah.container(image.name) as running:
        yield running


def test_the_image_runs_as_the_non_root_user_of_the_manifests(
    image: Image, container: Container
) -> None:
    assert image.config()["User"] == IMAGE_USER
    ran = container.run("python", "-c", "import os; print(os.getuid(), os.getgid())")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == IMAGE_USER.split(":")
    # ... who cannot change what is installed.
    wrote = container.run("sh", "-c", "touch /opt/kube-ccm/bin/x")
    assert wrote.returncode != 0
    assert "Permission denied" in wrote.stderr


def test_the_entrypoint_prints_the_daemons_flags(image: Image, container: Container) -> None:
    config = image.config()
    assert config["Entrypoint"] == ["cloud-controller-manager"]
    assert config["Cmd"] == ["--help"]
    ran = container.run(*config["Entrypoint"], *config["Cmd"])
    assert ran.returncode == 0, ran.stderr
    for flag in ("--cloud-provider", "--leader-elect", "--secure-port", "--controllers"):
        assert flag in ran.stdout


def test_both_commands_report_the_version_of_the_checkout(container: Container) -> None:
    for argv in (
        ("kube-ccm", "version"),
        ("kube-ccm", "--version"),
        ("cloud-controller-manager", "--version"),
    ):
        ran = container.run(*argv)
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.strip() == f"kube-ccm {__version__}"


def test_nothing_of_the_build_is_left_in_the_image(image: Image, container: Container) -> None:
    root = container.rootfs()
    package = root / SITE_PACKAGES / "kube_ccm"
    assert (package / "app" / "cli.py").is_file()
    assert not (package / "testing" / "gobuild").exists()
    assert not (package / "testbed" / "gobuild-helm").exists()
    assert not list((root / "opt/kube-ccm").rglob("__pycache__"))
    assert not (root / "src").exists(), "the build stage's sources stay in the build stage"
    assert not (root / "usr/bin/gcc").exists()
    # The host's CA bundle is mounted over the base's during the build's RUN steps
    # only: the image has the base's own.
    with image.buildah.container(image.base) as base:
        bundle = Path("etc/ssl/certs/ca-certificates.crt")
        assert _sha256(root / bundle) == _sha256(base.rootfs() / bundle)


def test_the_image_is_reasonably_small(
    image: Image, record_property: Callable[[str, object], None]
) -> None:
    record_property("image_size_bytes", image.size)
    record_property("image_seconds", round(image.seconds, 1))
    assert image.size < MAX_SIZE, f"{image.name} is {image.size / 1e6:.0f} MB"


def test_a_second_build_is_a_cache_hit(image: Image) -> None:
    again = ensure_image()
    assert again.source == "cache"
    assert (again.name, again.id, again.archive) == (image.name, image.id, image.archive)
    # Its time is not asserted (it took 25 s at load 17): "cache" says no build ran.


def test_containerd_imports_the_archive_under_the_manifests_name(
    image: Image, tmp_path: Path
) -> None:
    if shutil.which("containerd") is None or shutil.which("ctr") is None:
        unavailable("importing the image needs containerd and ctr: run `make sysdeps`")
    with _containerd(tmp_path) as ctr:
        imported = ctr("images", "import", str(image.archive))
        assert imported.returncode == 0, imported.stderr
        listed = ctr("images", "ls", "--quiet").stdout.split()
    assert f"docker.io/library/{image.reference}" in listed  # deploy/*.yaml: kube-ccm:latest
    assert image.name in listed  # the build's own name, exact to its inputs


def test_the_libvirt_extra_builds_and_its_bindings_load() -> None:
    libvirt = _build("libvirt")
    assert libvirt.reference == "kube-ccm:libvirt"
    with libvirt.buildah.container(libvirt.name) as running:
        ran = running.run("python", "-c", "import libvirt; print(libvirt.getVersion() > 0)")
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.strip() == "True"
        assert not (running.rootfs() / "usr/bin/gcc").exists()


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@contextlib.contextmanager
def _containerd(directory: Path) -> Iterator[Callable[..., subprocess.CompletedProcess[str]]]:
    """A containerd of this test's own (no CRI, its own root, state and socket), and a
    ``ctr`` on it in the kubelet's namespace; stopped at the end."""
    socket = directory / "containerd.sock"
    config = directory / "config.toml"
    disabled = ["io.containerd.grpc.v1.cri"] + [
        f"io.containerd.snapshotter.v1.{name}" for name in ("aufs", "btrfs", "devmapper", "zfs")
    ]
    config.write_text(
        "\n".join(
            [
                "version = 2",
                f"root = {json.dumps(str(directory / 'root'))}",
                f"state = {json.dumps(str(directory / 'state'))}",
                f"disabled_plugins = {json.dumps(disabled)}",
                "[grpc]",
                f"  address = {json.dumps(str(socket))}",
                '[plugins."io.containerd.internal.v1.opt"]',
                f"  path = {json.dumps(str(directory / 'opt'))}",
                "",
            ]
        )
    )

    def ctr(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ctr", f"--address={socket}", "--namespace=k8s.io", *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    with (directory / "containerd.log").open("w") as log:
        process = subprocess.Popen(
            ["containerd", f"--config={config}"], stdout=log, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 20
        while ctr("version").returncode != 0:
            assert process.poll() is None, (directory / "containerd.log").read_text()
            assert time.monotonic() < deadline, "containerd did not answer within 20 s"
            time.sleep(0.2)
        yield ctr
    finally:
        process.terminate()
        process.wait(timeout=20)
