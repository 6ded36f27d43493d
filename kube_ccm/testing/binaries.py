"""Find, or build from the Go module proxy, the Kubernetes binaries the test bed runs.

Two sets, built from the same wrapper module and cached in the same directory:

- the control plane, kube-apiserver and etcd (:func:`ensure_binaries`);
- the node set, kubelet, kube-controller-manager and kube-scheduler
  (:func:`ensure_node_binaries`), built on first use only, so a test run or a
  sandbox that needs no real node never pays for them;
- kube-proxy (:func:`ensure_kube_proxy`), for a test bed that asks for it
  (:attr:`kube_ccm.testbed.nodes.NodeOptions.kube_proxy`), built on its first use.

The versions are pinned once, in the ``require`` block of ``gobuild/go.mod``
beside this file (a wrapper module that requires ``k8s.io/kubernetes`` and
replaces its staging modules with their published twins). Built binaries are
cached under the user cache directory, keyed by those versions and a hash of
the wrapper module, so only the first run pays for the build.

Lookup order: ``$KUBE_CCM_CONTROLPLANE_BIN`` (a directory holding a whole set),
then the cache, then a build (needs Go on ``PATH`` or ``$KUBE_CCM_GO``).

kubelet v1.36 still runs on the containerd 1.6 that Debian 12 ships (it falls
back to its configured cgroup driver and logs that support for containerd 1.x
ends in v1.37): moving the pin to v1.37 means a newer containerd for the test
bed's nodes (:mod:`kube_ccm.testbed.nodes`).

Internal: the machinery of :class:`~kube_ccm.testing.ControlPlane` (and of the test
bed's real nodes), not itself part of the :mod:`kube_ccm.testing` face.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TypeVar

import platformdirs

BIN_ENV = "KUBE_CCM_CONTROLPLANE_BIN"
GO_ENV = "KUBE_CCM_GO"
CACHE_ENV = "KUBE_CCM_CACHE_DIR"
BINARIES = ("kube-apiserver", "etcd")
NODE_BINARIES = ("kubelet", "kube-controller-manager", "kube-scheduler", "pause")
PROXY_BINARIES = ("kube-proxy",)

_PACKAGES = {
    "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
    "etcd": "./etcd",
    "kubelet": "k8s.io/kubernetes/cmd/kubelet",
    "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
    "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
    "kube-proxy": "k8s.io/kubernetes/cmd/kube-proxy",
    "pause": "./pause",
}
_STATIC = frozenset({"pause"})
"""Built with ``CGO_ENABLED=0``: the pause image holds this one file and nothing else."""

_GOBUILD_FILES = ("go.mod", "go.sum", "tools.go", "etcd/main.go", "pause/main.go")


class ControlPlaneBinariesError(RuntimeError):
    """The control-plane binaries are missing and cannot be built; the message says why."""


@dataclass(frozen=True)
class Versions:
    kubernetes: str
    etcd: str


@dataclass(frozen=True)
class Binaries:
    kube_apiserver: Path
    etcd: Path
    versions: Versions
    source: str
    """Where they came from: ``env``, ``cache`` or ``built``."""

    @classmethod
    def _in(cls, directory: Path, versions: Versions, source: str) -> Binaries:
        return cls(directory / "kube-apiserver", directory / "etcd", versions, source)


@dataclass(frozen=True)
class NodeBinaries:
    """What a real node and the controllers beside it run (see :mod:`kube_ccm.testbed.nodes`)."""

    kubelet: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    pause: Path
    """A static pause program (``gobuild/pause``), the pod sandbox image's one file."""
    versions: Versions
    source: str
    """Where they came from: ``env``, ``cache`` or ``built``."""

    @classmethod
    def _in(cls, directory: Path, versions: Versions, source: str) -> NodeBinaries:
        return cls(
            directory / "kubelet",
            directory / "kube-controller-manager",
            directory / "kube-scheduler",
            directory / "pause",
            versions,
            source,
        )


def _gobuild_dir() -> Path:
    return Path(str(resources.files("kube_ccm.testing") / "gobuild"))


def pinned_versions(go_mod: Path | None = None) -> Versions:
    """Read the pinned versions from the wrapper module's go.mod."""
    text = (go_mod or _gobuild_dir() / "go.mod").read_text()
    k8s = re.search(r"^\s*k8s\.io/kubernetes\s+(v\S+)", text, re.MULTILINE)
    etcd = re.search(r"^\s*go\.etcd\.io/etcd/server/v3\s+(v\S+)", text, re.MULTILINE)
    if not k8s or not etcd:
        raise ControlPlaneBinariesError(f"cannot find the pinned versions in {go_mod}")
    return Versions(kubernetes=k8s.group(1), etcd=etcd.group(1))


def cache_root() -> Path:
    override = os.environ.get(CACHE_ENV)
    return Path(override) if override else Path(platformdirs.user_cache_dir("kube-ccm"))


def cache_dir(versions: Versions | None = None) -> Path:
    """The directory the binaries of the pinned versions live in."""
    versions = versions or pinned_versions()
    digest = gobuild_digest(_gobuild_dir(), _GOBUILD_FILES)
    key = f"k8s-{versions.kubernetes}_etcd-{versions.etcd}_{digest}"
    return cache_root() / "controlplane" / key


def gobuild_digest(directory: Path, names: tuple[str, ...]) -> str:
    """A short digest of a wrapper module's files ``names``: a cache directory named
    with it is left behind when any of them changes."""
    digest = hashlib.sha256()
    for name in names:
        digest.update((directory / name).read_bytes())
    return digest.hexdigest()[:12]


def _complete(directory: Path, names: tuple[str, ...] = BINARIES) -> bool:
    return all(os.access(directory / name, os.X_OK) for name in names)


def find_binaries() -> Binaries | None:
    """Binaries from ``$KUBE_CCM_CONTROLPLANE_BIN`` or the cache, without building."""
    versions = pinned_versions()
    env_dir = os.environ.get(BIN_ENV)
    if env_dir:
        directory = Path(env_dir)
        missing = [name for name in BINARIES if not os.access(directory / name, os.X_OK)]
        if missing:
            raise ControlPlaneBinariesError(
                f"${BIN_ENV}={env_dir} has no executable {' or '.join(missing)}: point it at a "
                "directory holding both kube-apiserver and etcd, or unset it to build them"
            )
        return Binaries._in(directory, versions, "env")
    directory = cache_dir(versions)
    if _complete(directory):
        return Binaries._in(directory, versions, "cache")
    return None


def ensure_binaries(*, log: bool = True) -> Binaries:
    """Find the binaries, building them (once, under a lock) when none are cached."""
    return find_binaries() or _build_once(BINARIES, Binaries._in, log=log)


_T = TypeVar("_T")


def _build_once(
    names: tuple[str, ...], make: Callable[[Path, Versions, str], _T], *, log: bool
) -> _T:
    """Build ``names`` into the cache under the build lock, unless another process
    built them while this one waited."""
    versions = pinned_versions()
    target = cache_dir(versions)
    target.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(target.parent / ".build.lock"):
        if _complete(target, names):
            return make(target, versions, "cache")
        _build(versions, target, names, log=log)
    return make(target, versions, "built")


def find_node_binaries() -> NodeBinaries | None:
    """The node set from ``$KUBE_CCM_CONTROLPLANE_BIN`` (when it holds all three) or the
    cache, without building."""
    versions = pinned_versions()
    env_dir = os.environ.get(BIN_ENV)
    if env_dir and _complete(Path(env_dir), NODE_BINARIES):
        return NodeBinaries._in(Path(env_dir), versions, "env")
    directory = cache_dir(versions)
    if _complete(directory, NODE_BINARIES):
        return NodeBinaries._in(directory, versions, "cache")
    return None


def ensure_node_binaries(*, log: bool = True) -> NodeBinaries:
    """kubelet, kube-controller-manager, kube-scheduler and pause, built (once, under the
    same lock as the control plane) when none are cached; about a minute and a half when
    the control plane was built before, since most packages are shared."""
    return find_node_binaries() or _build_once(NODE_BINARIES, NodeBinaries._in, log=log)


def _kube_proxy_in(directory: Path, _versions: Versions, _source: str) -> Path:
    return directory / "kube-proxy"


def ensure_kube_proxy(*, log: bool = True) -> Path:
    """kube-proxy of the pinned version: from ``$KUBE_CCM_CONTROLPLANE_BIN`` when it holds
    one, else the cache, else built (once, under the same lock; about a minute when the
    node set was built before, since most packages are shared)."""
    env_dir = os.environ.get(BIN_ENV)
    if env_dir and _complete(Path(env_dir), PROXY_BINARIES):
        return Path(env_dir) / "kube-proxy"
    directory = cache_dir()
    if _complete(directory, PROXY_BINARIES):
        return directory / "kube-proxy"
    return _build_once(PROXY_BINARIES, _kube_proxy_in, log=log)


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created): one build at a time across
    processes (the binaries, helm, the image)."""
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _go() -> str:
    go = os.environ.get(GO_ENV) or shutil.which("go")
    if not go:
        raise ControlPlaneBinariesError(
            "the Go toolchain is needed to build kube-apiserver and etcd, and `go` is not on "
            f"PATH: install Go >= 1.26 (or set ${GO_ENV}), or set ${BIN_ENV} to a directory "
            "that already holds kube-apiserver and etcd"
        )
    return go


def _ldflags(versions: Versions) -> str:
    """Stamp the version the way kubernetes' own build does, so /version tells the truth."""
    match = re.match(r"v(\d+)\.(\d+)", versions.kubernetes)
    major, minor = match.groups() if match else ("0", "0")
    pkg = "k8s.io/component-base/version"
    stamps = {
        "gitVersion": versions.kubernetes,
        "gitMajor": major,
        "gitMinor": minor,
        "gitTreeState": "clean",
        "buildDate": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    return " ".join(["-s", "-w", *(f"-X {pkg}.{k}={v}" for k, v in stamps.items())])


def _build(versions: Versions, target: Path, names: tuple[str, ...], *, log: bool) -> None:
    """Build ``names`` into ``target``, each moved in whole once all of them built, so
    the directory never holds a half-written binary and may hold the other set."""
    go = _go()
    source = _gobuild_dir()
    env = dict(os.environ)
    # Never let go.mod's `go` line trigger a toolchain download: say it plainly instead.
    env.setdefault("GOTOOLCHAIN", "local")
    env.setdefault("GOFLAGS", "-mod=readonly")
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-") as tmp:
        # Build from a private copy so a read-only install location works too.
        work = Path(tmp) / "src"
        shutil.copytree(source, work)
        out = Path(tmp) / "bin"
        out.mkdir()
        what = " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)
        if log:
            print(
                f"kube-ccm: building {what} ({versions.kubernetes}, etcd {versions.etcd}) "
                "from the Go module proxy (first time only, a few minutes)...",
                flush=True,
            )
        started = time.monotonic()
        dynamic = [name for name in names if name not in _STATIC]
        static = [name for name in names if name in _STATIC]
        for group, extra_env in ((dynamic, {}), (static, {"CGO_ENABLED": "0"})):
            if not group:
                continue
            command = [
                go,
                "build",
                "-trimpath",
                "-ldflags",
                _ldflags(versions),
                "-o",
                str(out) + os.sep,
                *(_PACKAGES[name] for name in group),
            ]
            result = subprocess.run(
                command,
                cwd=work,
                env={**env, **extra_env},
                capture_output=True,
                text=True,
                check=False,
            )
            if result.returncode != 0:
                tail = "\n".join(result.stderr.strip().splitlines()[-25:])
                raise ControlPlaneBinariesError(
                    f"building {what} failed (`{' '.join(command)}` in {source}):\n{tail}\n"
                    "Check that Go >= 1.26 is installed and the Go module proxy is reachable, "
                    f"or set ${BIN_ENV} to a directory holding {what}"
                )
        target.mkdir(exist_ok=True)
        for name in names:
            (out / name).replace(target / name)
        if log:
            print(
                f"kube-ccm: built in {time.monotonic() - started:.0f} s into {target}",
                flush=True,
            )
