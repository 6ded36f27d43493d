"""Build and run the upstream Go cloud-controller-manager with its in-memory cloud, ``gosim``.

    .venv/bin/python benchmarks/goccm.py            # build (or find) it and print where it is
    .venv/bin/python benchmarks/goccm.py --rebuild  # build it again

The Go module is ``benchmarks/goccm`` (``k8s.io/cloud-provider`` v0.36.3 and the
library's sample main, with the ``gosim`` provider of ``gosim.go``). It is built
with ``go build -trimpath -ldflags="-s -w"`` into the kube-ccm cache directory
(``~/.cache/kube-ccm/goccm/<key>/goccm``, or under ``$KUBE_CCM_CACHE_DIR``),
keyed by a hash of ``go.sum`` and of the module's other files, so only the first
run pays for the build (about 4 min of CPU cold; seconds with a warm Go build
cache). Go comes from ``$KUBE_CCM_GO`` or ``PATH``; modules from the Go module
proxy.

:class:`GoCCMProcess` starts it with the flags kube-ccm's daemon gets in the
benchmarks; :func:`gosim_state` reads its per-method cloud call counters and its load
balancers' backend count from its ``/metrics``.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx2
from prometheus_client.parser import text_string_to_metric_families

from kube_ccm.testing.binaries import GO_ENV, cache_root
from kube_ccm.testing.daemon import ManagedProcess

SOURCE = Path(__file__).resolve().parent / "goccm"
BINARY_NAME = "goccm"
PROVIDER = "gosim"


class GoCCMBuildError(RuntimeError):
    """The Go CCM could not be built; the message says why."""


def source_files() -> list[Path]:
    """The files the build depends on (go.mod, go.sum and the Go sources)."""
    return sorted(
        p
        for p in SOURCE.iterdir()
        if p.is_file() and (p.name in ("go.mod", "go.sum") or p.suffix == ".go")
    )


def cache_key() -> str:
    """``<go.sum hash>-<hash of go.mod and the sources>`` (12 hex digits each)."""
    gosum = hashlib.sha256((SOURCE / "go.sum").read_bytes()).hexdigest()[:12]
    rest = hashlib.sha256()
    for path in source_files():
        if path.name != "go.sum":
            rest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return f"{gosum}-{rest.hexdigest()[:12]}"


def binary_path() -> Path:
    return cache_root() / "goccm" / cache_key() / BINARY_NAME


@contextmanager
def _lock(path: Path) -> Iterator[None]:
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _go() -> str:
    go = os.environ.get(GO_ENV) or shutil.which("go")
    if not go:
        raise GoCCMBuildError(f"building the Go CCM needs Go >= 1.26 on PATH (or ${GO_ENV})")
    return go


def ensure_goccm(*, rebuild: bool = False, log: bool = True) -> Path:
    """The built binary: from the cache, or built now (once, under a lock). Prints where."""
    target = binary_path()
    if not rebuild and os.access(target, os.X_OK):
        if log:
            print(f"goccm: using {target}", flush=True)
        return target
    target.parent.parent.mkdir(parents=True, exist_ok=True)
    with _lock(target.parent.parent / ".build.lock"):
        if not rebuild and os.access(target, os.X_OK):  # built by another process meanwhile
            if log:
                print(f"goccm: using {target}", flush=True)
            return target
        _build(target, log=log)
    return target


def kubernetes_version() -> str:
    """The Kubernetes release of the required ``k8s.io/cloud-provider`` (v0.36.3 → v1.36.3)."""
    text = (SOURCE / "go.mod").read_text()
    found = re.search(r"^\s*k8s\.io/cloud-provider\s+v0\.(\d+)\.(\d+)", text, re.MULTILINE)
    if not found:
        raise GoCCMBuildError(f"no k8s.io/cloud-provider v0.X.Y in {SOURCE / 'go.mod'}")
    return f"v1.{found.group(1)}.{found.group(2)}"


def _ldflags() -> str:
    """``-s -w``, and the version stamped as kubernetes' own build does (``--version``)."""
    version = kubernetes_version()
    minor = version.split(".")[1]
    pkg = "k8s.io/component-base/version"
    stamps = {"gitVersion": version, "gitMajor": "1", "gitMinor": minor, "gitTreeState": "clean"}
    return " ".join(["-s", "-w", *(f"-X {pkg}.{k}={v}" for k, v in stamps.items())])


def _build(target: Path, *, log: bool) -> None:
    go = _go()
    env = dict(os.environ)
    env.setdefault("GOTOOLCHAIN", "local")  # never download a toolchain behind the user's back
    env["GOFLAGS"] = "-mod=readonly"  # go.mod and go.sum are committed: never rewrite them
    command = [go, "build", "-trimpath", f"-ldflags={_ldflags()}", "-o"]
    if log:
        print(
            f"goccm: building the Go CCM from {SOURCE} (first time: about 4 min of CPU)...",
            flush=True,
        )
    started = time.monotonic()
    with tempfile.TemporaryDirectory(dir=target.parent.parent, prefix=".build-") as tmp:
        out = Path(tmp) / BINARY_NAME
        result = subprocess.run(
            [*command, str(out), "."],
            cwd=SOURCE,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            tail = "\n".join(result.stderr.strip().splitlines()[-25:])
            raise GoCCMBuildError(
                f"`{' '.join(command)} {out} .` in {SOURCE} failed:\n{tail}\n"
                "Check that Go >= 1.26 is installed and the Go module proxy is reachable."
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        out.replace(target)
    if log:
        size = target.stat().st_size / 2**20
        print(
            f"goccm: built in {time.monotonic() - started:.0f} s into {target} ({size:.0f} MiB)",
            flush=True,
        )


def goccm_args(
    *,
    kubeconfig: Path,
    port: int,
    controllers: str,
    node_workers: int = 16,
    service_workers: int = 16,
    qps: float,
    burst: int,
    extra: Sequence[str] = (),
) -> list[str]:
    """The flags kube-ccm's daemon gets in the benchmarks, for the Go CCM."""
    return [
        f"--cloud-provider={PROVIDER}",
        f"--kubeconfig={kubeconfig}",
        "--leader-elect=false",
        f"--controllers={controllers}",
        f"--concurrent-node-syncs={node_workers}",
        f"--concurrent-service-syncs={service_workers}",
        f"--kube-api-qps={qps:g}",
        f"--kube-api-burst={burst}",
        f"--secure-port={port}",
        "--bind-address=127.0.0.1",
        "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
        *extra,
    ]


class GoCCMProcess(ManagedProcess):
    """A running Go CCM (gosim) with its log file: ``DaemonProcess``'s process handling.

    On SIGTERM gosim logs its call counts and exits (``main.go``).
    """

    what = "Go CCM"

    def __init__(
        self,
        binary: Path,
        args: Sequence[str],
        workdir: Path,
        *,
        latency: float = 0.0,
        env: dict[str, str] | None = None,
    ) -> None:
        """``latency`` (seconds) is gosim's per-call latency (``$GOSIM_LATENCY``)."""
        workdir.mkdir(parents=True, exist_ok=True)
        super().__init__(
            [str(binary), *args],
            workdir / "goccm.log",
            env={"GOSIM_LATENCY": f"{latency * 1000:g}ms", **(env or {})},
        )


@dataclass
class GosimState:
    """What the Go CCM's ``/metrics`` says about its gosim cloud."""

    calls: Counter[str]
    """``gosim_cloud_calls_total`` by method."""
    load_balancers: int
    backends: int
    """Backend nodes summed over the load balancers."""


def gosim_calls(text: str) -> Counter[str]:
    """``gosim_cloud_calls_total`` by method, from a ``/metrics`` text."""
    return parse_gosim(text).calls


def parse_gosim(text: str) -> GosimState:
    """What a Go CCM's ``/metrics`` text says about its gosim cloud."""
    counts: Counter[str] = Counter()
    gauges: dict[str, int] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "gosim_cloud_calls_total":
                counts[sample.labels.get("method", "")] += int(sample.value)
            elif sample.name in ("gosim_load_balancers", "gosim_load_balancer_backends"):
                gauges[sample.name] = int(sample.value)
    return GosimState(
        counts, gauges.get("gosim_load_balancers", 0), gauges.get("gosim_load_balancer_backends", 0)
    )


async def gosim_state(port: int) -> GosimState:
    """Scrape the Go CCM's ``/metrics`` on its secure port on 127.0.0.1."""
    async with httpx2.AsyncClient(verify=False, timeout=5.0) as http:
        return parse_gosim((await http.get(f"https://127.0.0.1:{port}/metrics")).text)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rebuild", action="store_true", help="build even if cached")
    args = parser.parse_args()
    print(ensure_goccm(rebuild=args.rebuild, log=True))


if __name__ == "__main__":
    main()
