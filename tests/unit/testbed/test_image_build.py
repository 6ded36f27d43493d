"""The image build's bookkeeping: what its cache key follows, how the stand-in base is
named, and the one host directory buildah writes outside its own storage.
(tests/integration/test_image.py builds the image for real.)"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from kube_ccm.testbed import image
from kube_ccm.testbed.image import (
    BASE_REPOSITORY,
    ImageBuildError,
    StandIn,
    dockerfile_base_image,
    input_digest,
)


def _context(root: Path) -> Path:
    (root / "kube_ccm" / "app").mkdir(parents=True)
    (root / "kube_ccm" / "app" / "cli.py").write_text("print('hello')\n")
    (root / "Dockerfile").write_text("ARG BASE_IMAGE=python:3.11-slim-bookworm\n")
    (root / "pyproject.toml").write_text("[project]\n")
    (root / "README.md").write_text("# kube-ccm\n")
    return root


def test_the_cache_key_follows_what_the_dockerfile_copies_and_nothing_else(
    tmp_path: Path,
) -> None:
    context = _context(tmp_path)
    key = input_digest(context)
    # Bytecode and files the Dockerfile does not copy leave the key alone.
    (context / "kube_ccm" / "app" / "__pycache__").mkdir()
    (context / "kube_ccm" / "app" / "__pycache__" / "cli.cpython-311.pyc").write_bytes(b"x")
    (context / "tests").mkdir()
    (context / "tests" / "test_cli.py").write_text("")
    assert input_digest(context) == key
    # A source, the Dockerfile, or a new module each make a new image.
    for path, text in (
        ("kube_ccm/app/cli.py", "print('bye')\n"),
        ("Dockerfile", "ARG BASE_IMAGE=other\n"),
        ("kube_ccm/app/new.py", ""),
        (".dockerignore", "tests\n"),
    ):
        (context / path).write_text(text)
        changed = input_digest(context)
        assert changed != key, path
        key = changed


def test_the_base_image_default_is_read_from_the_dockerfile(tmp_path: Path) -> None:
    dockerfile = _context(tmp_path) / "Dockerfile"
    assert dockerfile_base_image(dockerfile) == "python:3.11-slim-bookworm"
    dockerfile.write_text("FROM python:3.11-slim-bookworm\n")
    with pytest.raises(ImageBuildError, match="ARG BASE_IMAGE"):
        dockerfile_base_image(dockerfile)


def test_a_stand_in_is_named_by_its_recipe() -> None:
    recipe = StandIn()
    assert recipe.name.startswith(f"{BASE_REPOSITORY}:bookworm-")
    assert StandIn().name == recipe.name
    assert StandIn(packages=(*recipe.packages, "tzdata")).name != recipe.name
    assert StandIn(revision=recipe.revision + 1).name != recipe.name
    # Later apt-get installs (libvirt0 in the runtime stage) stay trimmed too.
    excludes = recipe.dpkg_excludes().splitlines()
    assert "path-exclude=/usr/share/doc/*" in excludes
    assert "path-include=/usr/share/doc/*/copyright" in excludes


@pytest.mark.parametrize(
    ("existed", "left_by_buildah", "kept"),
    [
        (False, ["cache/blob-info-cache-v1.boltdb"], False),
        (False, ["cache/blob-info-cache-v1.boltdb", "storage/vfs"], True),
        (True, ["cache/blob-info-cache-v1.boltdb"], True),
    ],
)
def test_buildahs_blob_info_cache_is_removed_only_when_we_made_the_directory(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    existed: bool,
    left_by_buildah: list[str],
    kept: bool,
) -> None:
    system = tmp_path / "var-lib-containers"
    monkeypatch.setattr(image, "_SYSTEM_STORAGE", system)
    if existed:
        system.mkdir()
    with image._system_blob_cache_removed():
        for name in left_by_buildah:
            (system / name).parent.mkdir(parents=True, exist_ok=True)
            (system / name).touch()
    assert system.exists() == kept


def test_an_archive_another_run_used_recently_is_not_removed_as_stale(tmp_path: Path) -> None:
    """Two checkouts building at once: the second build must not delete the archive the
    first is still importing into containerd (it did, and the first run failed)."""
    keep = tmp_path / "kube-ccm-latest-aaaa.tar"
    recent = tmp_path / "kube-ccm-latest-bbbb.tar"
    old = tmp_path / "kube-ccm-latest-cccc.tar"
    other_variant = tmp_path / "kube-ccm-aws-dddd.tar"
    for path in (keep, recent, old, other_variant):
        path.write_bytes(b"tar")
    hours_ago = time.time() - 2 * image.STALE_ARCHIVE_AGE
    os.utime(old, (hours_ago, hours_ago))
    os.utime(other_variant, (hours_ago, hours_ago))
    os.utime(keep, (hours_ago, hours_ago))

    removed = image.remove_stale_archives(tmp_path, "latest", keep)

    assert removed == [old]
    assert keep.exists()
    assert recent.exists()
    assert other_variant.exists()
    assert not old.exists()
