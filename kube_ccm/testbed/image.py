"""The shipped image, built for real: the Dockerfile, built with buildah, exported for
containerd::

    image = ensure_image()              # localhost/kube-ccm:latest-<key>, cached by its inputs
    image.archive                       # a docker-archive of kube-ccm:latest, for
                                        # `ctr -n k8s.io images import`
    ensure_image(extras="libvirt")      # the libvirt extra: kube-ccm:libvirt

What runs (Debian's ``buildah`` and ``debootstrap``, ``make sysdeps``; as root):

- buildah, always on a storage of the test bed's own under the user cache
  (``<cache>/image/storage``, ``--storage-driver vfs``), so the host's
  ``/var/lib/containers`` storage is never read or written, and with
  ``--isolation chroot`` (no runc or user namespaces needed);
- the base: the Dockerfile's ``BASE_IMAGE`` default (``python:3.11-slim-bookworm``)
  when it is in that storage or can be pulled; otherwise a stand-in assembled from
  Debian's packages (:class:`StandIn`): ``debootstrap --variant=minbase bookworm``,
  Python 3.11 with venv and its headers, ``python`` on ``PATH`` (Debian's
  ``python-is-python3``), CA certificates, bookworm-updates and security applied, and
  trimmed as Debian's slim images are (no documentation, man pages or translations),
  committed as ``localhost/kube-ccm-base:bookworm-<hash of the recipe>``.
  ``$KUBE_CCM_IMAGE_BASE`` names another base, or ``stand-in`` forces the stand-in;
- ``buildah bud --build-arg BASE_IMAGE=<base> [--build-arg EXTRAS=libvirt]`` of the
  source checkout (the Dockerfile is not in the wheel, so this needs the checkout),
  tagged by a hash of its inputs (the Dockerfile, ``.dockerignore``,
  ``pyproject.toml``, ``README.md``, the ``kube_ccm`` sources, the base image's ID and
  the extras): a second run is a lookup, seconds; older builds of the same variant are
  removed, and so are stand-ins of older recipes;
- the export: a docker-archive tarball (``<cache>/image/kube-ccm-<variant>-<key>.tar``)
  of the image named ``kube-ccm:latest`` (``kube-ccm:libvirt`` for the extra), the name
  ``deploy/*.yaml`` and the Helm chart use, and ``localhost/kube-ccm:<variant>-<key>``,
  which ``ctr images import`` takes as is. Another variant key's archive is removed only
  once no run has used it for an hour: a run from another checkout may be importing it.

Host changes, and their undo:

- debootstrap and the ``apt-get upgrade`` after it run in a private mount namespace
  (``unshare --mount``): the ``/proc`` and ``/sys`` they mount in the new root vanish
  with them, even when they are killed;
- containers/image keeps a blob-info cache at ``/var/lib/containers/cache`` for root,
  whatever ``--root`` says: removed after each buildah command when
  ``/var/lib/containers`` did not exist before (and holds nothing else);
- buildah's temporary files go to ``<cache>/image/tmp`` (``TMPDIR``), not ``/var/tmp``;
- during the build's RUN steps the host's CA bundle is bind-mounted, read-only, over
  the base image's own (``/etc/ssl/certs/ca-certificates.crt``; both bases have it, so
  no mount point is left in a layer): pip and apt inside the build trust what the host
  trusts, which matters on a network that inspects TLS with a CA of its own. Nothing of
  it is committed (the integration test compares the image's bundle with the base's).

buildah builds OCI images by default and then ignores ``SHELL``: the Dockerfile's RUN
steps are plain POSIX sh for that reason.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kube_ccm.testing.binaries import cache_root, file_lock

SOURCE_ROOT = Path(__file__).resolve().parents[2]
"""The checkout the image is built from (the build context)."""
BASE_ENV = "KUBE_CCM_IMAGE_BASE"
STAND_IN = "stand-in"
IMAGE_REPOSITORY = "localhost/kube-ccm"
BASE_REPOSITORY = "localhost/kube-ccm-base"
EXPORTED_REPOSITORY = "kube-ccm"
"""What the exported archive calls the image: ``kube-ccm:latest`` as in ``deploy/*.yaml``
(containerd reads it as ``docker.io/library/kube-ccm:latest``)."""
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
IMAGE_USER = "65532:65532"
"""The Dockerfile's ``USER`` (nonroot, as in distroless images)."""
_SYSTEM_STORAGE = Path("/var/lib/containers")
_BLOB_INFO_CACHE = "blob-info-cache-v1.boltdb"
_INPUTS = ("Dockerfile", ".dockerignore", "pyproject.toml", "README.md")
_SKIPPED_PARTS = frozenset({"__pycache__"})
_BASE_CONTAINER = "kube-ccm-base-"


class ImageBuildError(RuntimeError):
    """The image cannot be built here; the message says why and what to do."""


@dataclass(frozen=True)
class StandIn:
    """The recipe of the stand-in for ``python:3.11-slim-bookworm``: what a Dockerfile
    written for the official image needs of it, from Debian's own packages.

    The official image has CPython in ``/usr/local`` (``python`` and ``python3`` on
    ``PATH``, venv and pip, the headers) on ``debian:bookworm-slim``, and no compiler or
    C library headers. Here: Debian's Python 3.11; ``python`` from
    ``python-is-python3``; ``python3-distutils`` listed because debootstrap does not
    resolve the virtual package ``python3.11-venv`` needs; and Python's own headers
    unpacked from ``libpython3.11-dev`` (:attr:`headers_from`) without installing it,
    since its dependencies (``libc6-dev`` and more) would hide a build dependency the
    Dockerfile forgot.
    Changing anything here changes :meth:`digest`, which names a new base and so
    rebuilds the images on it.
    """

    suite: str = "bookworm"
    mirror: str = "http://deb.debian.org/debian"
    security_mirror: str = "http://deb.debian.org/debian-security"
    packages: tuple[str, ...] = (
        "python3",
        "python3-venv",
        "python3-distutils",
        "python-is-python3",
        "ca-certificates",
        "netbase",
    )
    trimmed: tuple[str, ...] = (
        "usr/share/doc",
        "usr/share/man",
        "usr/share/info",
        "usr/share/locale",
        "usr/share/lintian",
    )
    headers_from: str = "libpython3.11-dev"
    """Its ``/usr/include`` is unpacked (the version of the installed Python); none if
    empty (another recipe's base, e.g. :mod:`kube_ccm.testbed.e2e`'s agnhost image)."""
    removed: tuple[str, ...] = ("etc/resolv.conf", "etc/hostname")
    """debootstrap copies them from the host; a container runtime provides its own."""
    env: tuple[str, ...] = (
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "LANG=C.UTF-8",
    )
    revision: int = 1
    """Bumped when :func:`build_stand_in` changes what it does with the fields above."""

    def digest(self) -> str:
        return hashlib.sha256(repr(self).encode()).hexdigest()[:12]

    @property
    def name(self) -> str:
        return f"{BASE_REPOSITORY}:{self.suite}-{self.digest()}"

    def sources_list(self) -> str:
        """bookworm, its updates and its security archive, as the official image has."""
        return (
            f"deb {self.mirror} {self.suite} main\n"
            f"deb {self.mirror} {self.suite}-updates main\n"
            f"deb {self.security_mirror} {self.suite}-security main\n"
        )

    def dpkg_excludes(self) -> str:
        """Keep later ``apt-get install`` steps (libvirt0) trimmed too."""
        lines = [f"path-exclude=/{path}/*" for path in self.trimmed]
        lines.insert(1, "path-include=/usr/share/doc/*/copyright")
        return "\n".join(lines) + "\n"


STAND_IN_RECIPE = StandIn()


@dataclass
class Buildah:
    """buildah on the test bed's own storage: every command this module runs goes
    through :meth:`run`, never on the host's ``/var/lib/containers``."""

    directory: Path
    root: Path = field(init=False)
    runroot: Path = field(init=False)
    tmp: Path = field(init=False)

    def __post_init__(self) -> None:
        self.root = self.directory / "storage"
        self.runroot = self.directory / "run"
        self.tmp = self.directory / "tmp"

    def argv(self, *args: str) -> list[str]:
        return [
            "buildah",
            f"--root={self.root}",
            f"--runroot={self.runroot}",
            "--storage-driver=vfs",
            *args,
        ]

    def run(
        self,
        *args: str,
        check: bool = True,
        timeout: float | None = 600,
        log: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``buildah <args>``; with ``log``, its output goes to that file (and the
        error quotes its tail)."""
        self.tmp.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "TMPDIR": str(self.tmp)}
        argv = self.argv(*args)
        with _system_blob_cache_removed():
            if log is None:
                result = subprocess.run(
                    argv, capture_output=True, text=True, env=env, timeout=timeout, check=False
                )
            else:
                with log.open("w") as out:
                    result = subprocess.run(
                        argv,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        text=True,
                        env=env,
                        timeout=timeout,
                        check=False,
                    )
                result.stdout = log.read_text()
        if check and result.returncode != 0:
            output = ((result.stdout or "") + (result.stderr or "")).strip().splitlines()
            tail = "\n".join(output[-30:])
            where = f" (the whole log: {log})" if log else ""
            raise ImageBuildError(f"`buildah {' '.join(args)}` failed{where}:\n{tail}")
        return result

    def image_id(self, name: str) -> str | None:
        """The ID of the image ``name`` in this storage, or None."""
        result = self.run("inspect", "--type=image", "--format={{.FromImageID}}", name, check=False)
        if result.returncode != 0:
            return None
        return result.stdout.strip() or None

    def inspect(self, name: str) -> dict[str, Any]:
        found: dict[str, Any] = json.loads(self.run("inspect", "--type=image", name).stdout)
        return found

    def images(self, repository: str) -> list[str]:
        """The names (``repository:tag``) of the images of ``repository`` here."""
        listed = json.loads(self.run("images", "--json").stdout or "null") or []
        return [
            name
            for image in listed
            for name in image.get("names") or ()
            if name.rpartition(":")[0] == repository
        ]

    def containers(self, prefix: str) -> list[str]:
        """The names of the working containers here that start with ``prefix``."""
        listed = json.loads(self.run("containers", "--json").stdout or "null") or []
        return [c["containername"] for c in listed if c["containername"].startswith(prefix)]

    @contextlib.contextmanager
    def container(self, image: str) -> Iterator[Container]:
        """A working container of ``image`` (a copy of its root file system), removed
        at the end."""
        name = f"kube-ccm-check-{os.getpid()}-{time.monotonic_ns()}"
        self.run("from", "--pull=never", f"--name={name}", image)
        try:
            yield Container(self, name)
        finally:
            self.run("rm", name, check=False)


@dataclass(frozen=True)
class Container:
    """A buildah working container: run commands in it, or read its root file system."""

    buildah: Buildah
    name: str

    def run(
        self, *argv: str, user: str | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` in the container, as the image's ``USER`` unless ``user`` says
        otherwise (``buildah run`` takes the image's user, environment and working
        directory, not its entrypoint)."""
        options = [f"--user={user}"] if user else []
        return self.buildah.run(
            "run", "--isolation=chroot", *options, self.name, "--", *argv,
            check=False, timeout=timeout,
        )  # fmt: skip

    def rootfs(self) -> Path:
        """The container's root file system, mounted (vfs: a plain directory)."""
        return Path(self.buildah.run("mount", self.name).stdout.strip())


@dataclass(frozen=True)
class Image:
    """The kube-ccm image, built from the shipped Dockerfile and exported."""

    name: str
    """In the test bed's buildah storage: ``localhost/kube-ccm:<variant>-<key>``."""
    id: str
    extras: str
    base: str
    """The ``BASE_IMAGE`` it was built on."""
    archive: Path
    """A docker-archive tarball for ``ctr images import``."""
    reference: str
    """The name the archive gives the image: ``kube-ccm:latest`` or ``kube-ccm:<extras>``."""
    size: int
    """Bytes, the layers uncompressed."""
    source: str
    """``built`` or ``cache``."""
    seconds: float
    """What :func:`ensure_image` took, the base included."""
    buildah: Buildah

    def config(self) -> dict[str, Any]:
        """The image's OCI config (``User``, ``Entrypoint``, ``Cmd``, ``Env``, ...)."""
        config: dict[str, Any] = self.buildah.inspect(self.name)["OCIv1"]["config"]
        return config


def image_directory() -> Path:
    return cache_root() / "image"


def image_unavailable(*, stand_in: bool = True) -> str | None:
    """Why the image cannot be built on this machine, or None when it can."""
    if os.geteuid() != 0:
        return "building the image needs root (buildah with --isolation chroot mounts and chroots)"
    needed = ["buildah", *(["debootstrap", "unshare"] if stand_in else [])]
    missing = [name for name in needed if shutil.which(name) is None]
    if missing:
        return (
            f"building the image needs {' and '.join(missing)}: run `make sysdeps` "
            "(Debian's buildah and debootstrap)"
        )
    if not (SOURCE_ROOT / "Dockerfile").is_file():
        return f"the Dockerfile is not in {SOURCE_ROOT}: the image is built from a checkout"
    return None


def dockerfile_base_image(dockerfile: Path | None = None) -> str:
    """The Dockerfile's ``ARG BASE_IMAGE=`` default."""
    for line in (dockerfile or SOURCE_ROOT / "Dockerfile").read_text().splitlines():
        keyword, _, rest = line.strip().partition(" ")
        if keyword.upper() == "ARG" and rest.startswith("BASE_IMAGE="):
            return rest.partition("=")[2].strip().strip("\"'")
    raise ImageBuildError("the Dockerfile declares no `ARG BASE_IMAGE=<default>`")


def input_digest(context: Path = SOURCE_ROOT) -> str:
    """A hash of what the Dockerfile copies and says: a change to any of it is a new
    image."""
    digest = hashlib.sha256()
    sources = sorted(
        path
        for path in (context / "kube_ccm").rglob("*")
        if path.is_file() and not _SKIPPED_PARTS & set(path.parts) and path.suffix != ".pyc"
    )
    for path in [*(context / name for name in _INPUTS), *sources]:
        digest.update(str(path.relative_to(context)).encode() + b"\0")
        digest.update(path.read_bytes() if path.exists() else b"<absent>")
        digest.update(b"\0")
    return digest.hexdigest()


def ensure_image(
    extras: str = "",
    *,
    base: str | None = None,
    context: Path = SOURCE_ROOT,
    log: bool = True,
) -> Image:
    """The image of ``context``'s Dockerfile with ``extras``: from the cache when its
    inputs have not changed, built (once, under a lock) otherwise, and exported."""
    started = time.monotonic()
    unavailable = image_unavailable(stand_in=False)
    if unavailable:
        raise ImageBuildError(unavailable)
    directory = image_directory()
    directory.mkdir(parents=True, exist_ok=True)
    buildah = Buildah(directory)
    with file_lock(directory / ".lock"):
        base_name = _ensure_base(buildah, base, log=log)
        base_id = buildah.image_id(base_name)
        assert base_id is not None, base_name
        variant = extras.replace(",", "-") or "latest"
        key = hashlib.sha256(f"{input_digest(context)}\0{base_id}\0{extras}".encode()).hexdigest()[
            :16
        ]
        name = f"{IMAGE_REPOSITORY}:{variant}-{key}"
        source = "cache"
        if buildah.image_id(name) is None:
            _build(buildah, name, base_name, extras, context, log=log)
            source = "built"
        reference = f"{EXPORTED_REPOSITORY}:{variant}"
        archive = directory / f"kube-ccm-{variant}-{key}.tar"
        if not archive.exists():
            _export(buildah, name, reference, archive, log=log)
        archive.touch()  # in use: another run must not remove it as stale (see below)
        _prune(buildah, f"{IMAGE_REPOSITORY}:{variant}-", name)
        remove_stale_archives(directory, variant, archive)
        inspected = buildah.inspect(name)
        size = sum(layer["size"] for layer in json.loads(inspected["Manifest"])["layers"])
        image_id = inspected["FromImageID"]
    seconds = time.monotonic() - started
    if log and source == "built":
        _say(f"built {name} ({size / 1e6:.0f} MB) on {base_name} in {seconds:.0f} s: {archive}")
    return Image(
        name=name,
        id=image_id,
        extras=extras,
        base=base_name,
        archive=archive,
        reference=reference,
        size=size,
        source=source,
        seconds=seconds,
        buildah=buildah,
    )


def _ensure_base(buildah: Buildah, requested: str | None, *, log: bool) -> str:
    """The base to build on, in ``buildah``'s storage: the requested one, or the
    Dockerfile's default, or (when that cannot be pulled) the stand-in."""
    wanted = requested or os.environ.get(BASE_ENV) or ""
    if wanted == STAND_IN:
        return ensure_stand_in(buildah, log=log)
    default = dockerfile_base_image()
    name = wanted or default
    if buildah.image_id(name) is not None:
        return name
    pulled = buildah.run("pull", "--retry=0", "--quiet", name, check=False)
    if pulled.returncode == 0:
        return name
    reason = (pulled.stderr.strip().splitlines() or ["(no output)"])[-1]
    if wanted:
        raise ImageBuildError(
            f"the base image {name} (from {'$' + BASE_ENV if requested is None else 'the caller'})"
            f" cannot be pulled: {reason}"
        )
    if log and buildah.image_id(STAND_IN_RECIPE.name) is None:
        _say(f"{name} cannot be pulled ({reason}); building on a stand-in from Debian's packages")
    return ensure_stand_in(buildah, log=log)


def ensure_stand_in(
    buildah: Buildah, recipe: StandIn = STAND_IN_RECIPE, *, log: bool = True
) -> str:
    """The stand-in base of ``recipe`` in ``buildah``'s storage, assembled when missing
    (about a minute); stand-ins of other recipes are removed."""
    if buildah.image_id(recipe.name) is None:
        build_stand_in(buildah, recipe, log=log)
    _prune(buildah, f"{BASE_REPOSITORY}:", recipe.name)
    return recipe.name


def build_stand_in(
    buildah: Buildah, recipe: StandIn = STAND_IN_RECIPE, *, log: bool = True
) -> None:
    """debootstrap ``recipe`` straight into a scratch container's root and commit it."""
    unavailable = image_unavailable(stand_in=True)
    if unavailable:
        raise ImageBuildError(unavailable)
    started = time.monotonic()
    if log:
        _say(f"assembling {recipe.name} from Debian's packages (first time only, about a minute)")
    logs = buildah.directory / "logs"
    logs.mkdir(exist_ok=True)
    for leftover in buildah.containers(_BASE_CONTAINER):  # of a run that was killed
        buildah.run("rm", leftover, check=False)
    container = f"{_BASE_CONTAINER}{os.getpid()}"
    buildah.run("from", f"--name={container}", "scratch")
    try:
        root = Path(buildah.run("mount", container).stdout.strip())
        _private_mounts(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(recipe.packages)}",
                recipe.suite,
                str(root),
                recipe.mirror,
            ],
            log=logs / "debootstrap.log",
        )
        (root / "etc/apt/sources.list").write_text(recipe.sources_list())
        (root / "etc/dpkg/dpkg.cfg.d/kube-ccm-slim").write_text(recipe.dpkg_excludes())
        shutil.copyfile("/etc/resolv.conf", root / "etc/resolv.conf")
        _private_mounts(
            [
                "chroot",
                str(root),
                "/bin/sh",
                "-c",
                "set -e; apt-get update -qq"
                "; DEBIAN_FRONTEND=noninteractive apt-get upgrade -y -qq"
                + (
                    f"; cd /tmp; apt-get download -qq {recipe.headers_from}"
                    f"; dpkg-deb --fsys-tarfile {recipe.headers_from}_*.deb"
                    " | tar -x -C / ./usr/include"
                    f"; rm {recipe.headers_from}_*.deb"
                    if recipe.headers_from
                    else ""
                )
                + "; apt-get clean; rm -rf /var/lib/apt/lists/*",
            ],
            log=logs / "upgrade.log",
        )
        for path in recipe.trimmed:
            for entry in (root / path).glob("*"):
                if path == "usr/share/doc" and entry.is_dir():
                    for inner in entry.iterdir():
                        if inner.name != "copyright":
                            _remove(inner)
                else:
                    _remove(entry)
        for path in recipe.removed:
            (root / path).unlink(missing_ok=True)
        for entry in (root / "dev").iterdir():  # the runtime provides /dev
            _remove(entry)
        buildah.run("umount", container)
        buildah.run(
            "config",
            *(f"--env={item}" for item in recipe.env),
            "--cmd=python3",
            f"--label=org.opencontainers.image.description=a stand-in for "
            f"{dockerfile_base_image()} from Debian's packages (kube_ccm.testbed.image)",
            container,
        )
        buildah.run("commit", "--quiet", "--rm", container, recipe.name)
    except BaseException:
        buildah.run("rm", container, check=False)
        raise
    if log:
        _say(f"assembled {recipe.name} in {time.monotonic() - started:.0f} s")


def _build(
    buildah: Buildah, name: str, base: str, extras: str, context: Path, *, log: bool
) -> None:
    what = f"{name} (extras: {extras})" if extras else name
    if log:
        _say(f"building {what} from {context / 'Dockerfile'} on {base}")
    logs = buildah.directory / "logs"
    logs.mkdir(exist_ok=True)
    trust = [f"--volume={HOST_CA_BUNDLE}:{HOST_CA_BUNDLE}:ro"] if HOST_CA_BUNDLE.is_file() else []
    buildah.run(
        "bud",
        "--isolation=chroot",
        "--pull=never",
        f"--build-arg=BASE_IMAGE={base}",
        f"--build-arg=EXTRAS={extras}",
        *trust,
        f"--file={context / 'Dockerfile'}",
        f"--tag={name}",
        str(context),
        timeout=1800,
        log=logs / f"build-{name.rpartition(':')[2]}.log",
    )


def _export(buildah: Buildah, name: str, reference: str, archive: Path, *, log: bool) -> None:
    """A docker-archive of ``name`` called ``reference``, written whole or not at all."""
    partial = archive.with_suffix(".tar.partial")
    partial.unlink(missing_ok=True)
    buildah.run("push", "--quiet", name, f"docker-archive:{partial}:{reference}")
    partial.replace(archive)
    if log:
        _say(f"exported {reference} to {archive} ({archive.stat().st_size / 1e6:.0f} MB)")


STALE_ARCHIVE_AGE = 3600.0
"""Seconds since an exported archive was last handed out before another build removes it."""


def remove_stale_archives(directory: Path, variant: str, keep: Path) -> list[Path]:
    """Remove ``variant``'s exported archives other than ``keep`` that no run has used
    for :data:`STALE_ARCHIVE_AGE`; return the ones removed. Another checkout's run may
    be importing its own archive right now (after :func:`ensure_image` released the
    lock), so a recently used one stays."""
    removed = []
    for stale in directory.glob(f"kube-ccm-{variant}-*.tar"):
        try:
            age = time.time() - stale.stat().st_mtime
        except FileNotFoundError:
            continue
        if stale != keep and age > STALE_ARCHIVE_AGE:
            stale.unlink(missing_ok=True)
            removed.append(stale)
    return removed


def _prune(buildah: Buildah, prefix: str, keep: str) -> None:
    repository = prefix.rpartition(":")[0]
    for stale in buildah.images(repository):
        if stale.startswith(prefix) and stale != keep:
            buildah.run("rmi", stale, check=False)


def _private_mounts(argv: list[str], *, log: Path) -> None:
    """Run ``argv`` in a mount namespace of its own: what it mounts goes with it."""
    command = ["unshare", "--mount", "--propagation=private", *argv]
    with log.open("w") as out:
        result = subprocess.run(
            command, stdout=out, stderr=subprocess.STDOUT, timeout=1200, check=False
        )
    if result.returncode != 0:
        tail = "\n".join(log.read_text().strip().splitlines()[-20:])
        raise ImageBuildError(
            f"`{' '.join(argv[:3])} ...` failed (log: {log}):\n{tail}\n"
            "Check that deb.debian.org is reachable"
        )


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


@contextlib.contextmanager
def _system_blob_cache_removed() -> Iterator[None]:
    """Undo containers/image's blob-info cache in ``/var/lib/containers`` when that
    directory did not exist before and holds nothing else afterwards."""
    existed = _SYSTEM_STORAGE.exists()
    try:
        yield
    finally:
        cache = _SYSTEM_STORAGE / "cache"
        if not existed and _SYSTEM_STORAGE.is_dir():
            entries = {entry.name for entry in _SYSTEM_STORAGE.iterdir()}
            cached = {entry.name for entry in cache.iterdir()} if cache.is_dir() else set()
            if entries <= {"cache"} and cached <= {_BLOB_INFO_CACHE}:
                shutil.rmtree(_SYSTEM_STORAGE, ignore_errors=True)


def _say(message: str) -> None:
    print(f"kube-ccm: {message}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kube_ccm.testbed.image",
        description="Build (or find cached) the kube-ccm image from the shipped Dockerfile "
        "with buildah, and export it for `ctr images import`.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build or find the image; print its archive")
    build.add_argument("--extras", default="", help='e.g. "libvirt"')
    build.add_argument(
        "--base",
        default=None,
        help=f"the BASE_IMAGE ({STAND_IN!r} for the one assembled from Debian's packages; "
        "default: the Dockerfile's, or the stand-in when it cannot be pulled)",
    )
    args = parser.parse_args(argv)
    reason = image_unavailable()
    if reason:
        print(f"error: {reason}", file=sys.stderr)
        return 1
    try:
        image = ensure_image(args.extras, base=args.base)
    except ImageBuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(
        f"{image.name} ({image.source}, {image.size / 1e6:.0f} MB, on {image.base})\n"
        f"archive: {image.archive} ({image.reference}; "
        f"`ctr -n k8s.io images import {image.archive}`)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
