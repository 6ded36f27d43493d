"""Find, or build from the Go module proxy, the ``helm`` binary the chart tests use.

helm's version is pinned once, in the ``require`` line of ``helm.sh/helm/v3`` in
``gobuild-helm/go.mod`` beside this file: a wrapper module of its own, so that
helm's dependencies never move the control plane's (``gobuild/``). The binary is
cached under the user cache directory, keyed by that version and a hash of the
wrapper module, so only the first run pays for the build (GitHub release
downloads are not needed, only the module proxy).

Lookup order: ``$KUBE_CCM_HELM`` (a helm binary to use as is), then the cache,
then a build (needs Go on ``PATH`` or ``$KUBE_CCM_GO``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from kube_ccm.testing.binaries import GO_ENV, cache_root, file_lock, gobuild_digest

HELM_ENV = "KUBE_CCM_HELM"
_GOBUILD_FILES = ("go.mod", "go.sum", "tools.go")
_MAIN_PACKAGE = "helm.sh/helm/v3/cmd/helm"


class HelmBinaryError(RuntimeError):
    """helm is missing and cannot be built; the message says why and what to do."""


@dataclass(frozen=True)
class HelmPin:
    """What ``gobuild-helm/go.mod`` pins."""

    helm: str
    """helm's release, e.g. ``v3.22.0``."""
    go: str
    """The lowest Go toolchain the module builds with, e.g. ``1.26.0``."""
    client_go: str
    """The ``k8s.io/client-go`` helm links: its default Kubernetes version follows it."""


@dataclass(frozen=True)
class Helm:
    path: Path
    version: str
    source: str
    """Where it came from: ``env``, ``cache`` or ``built``."""


def gobuild_dir() -> Path:
    """The wrapper module that builds helm."""
    return Path(str(resources.files("kube_ccm.testbed") / "gobuild-helm"))


def pinned(go_mod: Path | None = None) -> HelmPin:
    """Read helm's pinned version (and the Go and client-go versions) from go.mod."""
    path = go_mod or gobuild_dir() / "go.mod"
    text = path.read_text()
    helm = re.search(r"^\s*(?:require\s+)?helm\.sh/helm/v3\s+(v\S+)", text, re.MULTILINE)
    go = re.search(r"^go\s+(\d+\.\d+(?:\.\d+)?)\s*$", text, re.MULTILINE)
    client_go = re.search(r"^\s*k8s\.io/client-go\s+(v\S+)", text, re.MULTILINE)
    if not helm or not go or not client_go:
        raise HelmBinaryError(
            f"cannot find helm.sh/helm/v3, k8s.io/client-go and the go line in {path}: "
            "restore it (git checkout that file) or run `go mod tidy` in its directory"
        )
    return HelmPin(helm=helm.group(1), go=go.group(1), client_go=client_go.group(1))


def cache_dir(pin: HelmPin | None = None) -> Path:
    """The directory the helm binary of the pinned version lives in."""
    pin = pin or pinned()
    digest = gobuild_digest(gobuild_dir(), _GOBUILD_FILES)
    return cache_root() / "helm" / f"helm-{pin.helm}_{digest}"


def find_helm() -> Helm | None:
    """helm from ``$KUBE_CCM_HELM`` or the cache, without building."""
    pin = pinned()
    override = os.environ.get(HELM_ENV)
    if override:
        path = Path(override)
        if not os.access(path, os.X_OK) or path.is_dir():
            raise HelmBinaryError(
                f"${HELM_ENV}={override} is not an executable file: point it at a helm "
                "binary, or unset it to build the pinned helm from the Go module proxy"
            )
        return Helm(path, _reported_version(path), "env")
    path = cache_dir(pin) / "helm"
    if os.access(path, os.X_OK):
        return Helm(path, pin.helm, "cache")
    return None


def ensure_helm(*, log: bool = True) -> Helm:
    """Find helm, building the pinned release (once, under a lock) when none is cached."""
    found = find_helm()
    if found is not None:
        return found
    pin = pinned()
    target = cache_dir(pin)
    target.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(target.parent / ".build.lock"):
        if os.access(target / "helm", os.X_OK):  # another process built it while we waited
            return Helm(target / "helm", pin.helm, "cache")
        _build(pin, target, log=log)
    return Helm(target / "helm", pin.helm, "built")


def _reported_version(path: Path) -> str:
    try:
        result = subprocess.run(
            [str(path), "version", "--short"],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
    except OSError as exc:
        raise HelmBinaryError(f"${HELM_ENV}={path} cannot be run ({exc}): fix or unset it") from exc
    if result.returncode != 0:
        raise HelmBinaryError(
            f"`{path} version` failed ({result.stderr.strip()}): ${HELM_ENV} must name a "
            "working helm v3 binary, or unset it to build one"
        )
    return result.stdout.strip().split("+")[0]


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def go_toolchain(pin: HelmPin | None = None) -> str:
    """The ``go`` command to build with, checked against the module's ``go`` line."""
    pin = pin or pinned()
    go = os.environ.get(GO_ENV) or shutil.which("go")
    if not go:
        raise HelmBinaryError(
            f"the Go toolchain is needed to build helm {pin.helm} and `go` is not on PATH: "
            f"install Go >= {pin.go} (or set ${GO_ENV} to the go command), or set ${HELM_ENV} "
            "to an existing helm v3 binary"
        )
    try:
        result = subprocess.run(
            [go, "version"], capture_output=True, text=True, check=False, timeout=60
        )
    except OSError as exc:
        raise HelmBinaryError(f"cannot run {go} ({exc}): fix ${GO_ENV} or PATH") from exc
    found = re.search(r"\bgo(\d+\.\d+(?:\.\d+)?)", result.stdout)
    if result.returncode != 0 or not found:
        raise HelmBinaryError(
            f"`{go} version` did not report a Go version ({result.stdout.strip()}"
            f"{result.stderr.strip()}): install Go >= {pin.go}"
        )
    if _version_tuple(found.group(1)) < _version_tuple(pin.go):
        raise HelmBinaryError(
            f"helm {pin.helm} needs Go >= {pin.go} but {go} is go{found.group(1)}: install a "
            f"newer Go (or point ${GO_ENV} at one), or set ${HELM_ENV} to a helm v3 binary"
        )
    return go


def _ldflags(pin: HelmPin) -> str:
    """Stamp what helm's own Makefile stamps, so `helm version` and the default
    Kubernetes version of `helm template`/`helm lint` tell the truth."""
    client_go = _version_tuple(pin.client_go)
    kube_major, kube_minor = str(client_go[0] + 1), str(client_go[1])
    stamps = {
        "helm.sh/helm/v3/internal/version.version": pin.helm,
        "helm.sh/helm/v3/internal/version.metadata": "",
        "helm.sh/helm/v3/internal/version.gitTreeState": "clean",
        "helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor": kube_major,
        "helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor": kube_minor,
        "helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor": kube_major,
        "helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor": kube_minor,
    }
    return " ".join(["-s", "-w", *(f"-X {k}={v}" for k, v in stamps.items())])


def _build(pin: HelmPin, target: Path, *, log: bool) -> None:
    go = go_toolchain(pin)
    source = gobuild_dir()
    env = dict(os.environ)
    # Never let go.mod's `go` line trigger a toolchain download (checked above instead).
    env.setdefault("GOTOOLCHAIN", "local")
    env.setdefault("GOFLAGS", "-mod=readonly")
    env.setdefault("CGO_ENABLED", "0")  # as helm's release builds
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-") as tmp:
        # Build from a private copy so a read-only install location works too.
        work = Path(tmp) / "src"
        shutil.copytree(source, work)
        out = Path(tmp) / "bin"
        out.mkdir()
        command = [
            go,
            "build",
            "-trimpath",
            "-ldflags",
            _ldflags(pin),
            "-o",
            str(out / "helm"),
            _MAIN_PACKAGE,
        ]
        if log:
            print(
                f"kube-ccm: building helm {pin.helm} from the Go module proxy "
                "(first time only, a few minutes)...",
                flush=True,
            )
        started = time.monotonic()
        result = subprocess.run(
            command, cwd=work, env=env, capture_output=True, text=True, check=False
        )
        if result.returncode != 0:
            tail = "\n".join(result.stderr.strip().splitlines()[-25:])
            raise HelmBinaryError(
                f"building helm failed (`{' '.join(command)}` in {source}):\n{tail}\n"
                f"Check that Go >= {pin.go} is installed and the Go module proxy is reachable "
                f"(GOPROXY), or set ${HELM_ENV} to an existing helm v3 binary"
            )
        staging = Path(tmp) / "final"
        out.rename(staging)
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
        if log:
            print(
                f"kube-ccm: built helm in {time.monotonic() - started:.0f} s into {target}",
                flush=True,
            )
