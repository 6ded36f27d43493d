"""Regenerate the protobuf modules of ``kube_ccm/runtime/k8spb`` from Kubernetes' .proto files.

    go mod download k8s.io/api@v0.36.3 k8s.io/apimachinery@v0.36.3   # the Go module proxy
    .venv/bin/python tools/regenerate_k8spb.py [--api-version v0.36.3]

A developer tool, kept out of the package (the daemon needs only the generated modules).

The .proto files come from the two modules' zips as the Go module proxy serves them
(``go mod download -json`` names the unpacked directory in the module cache). Their
import paths (``k8s.io/api/core/v1/generated.proto``) are not Python package names,
so each file is copied under the package's path with a short name
(``core_v1.proto``) and its imports rewritten; the messages keep their full names
(``k8s.io.api.core.v1.Node``). ``protoc`` is grpcio-tools' (a development tool only:
the daemon needs the ``protobuf`` runtime, no compiler). VERSIONS.txt records what
was used.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

PACKAGE = "kube_ccm/runtime/k8spb"
HERE = Path(__file__).resolve().parent.parent / PACKAGE

# (module, path of the .proto in the module) -> the short name it gets here.
PROTOS: dict[tuple[str, str], str] = {
    ("k8s.io/apimachinery", "pkg/runtime/generated.proto"): "runtime",
    ("k8s.io/apimachinery", "pkg/runtime/schema/generated.proto"): "runtime_schema",
    ("k8s.io/apimachinery", "pkg/apis/meta/v1/generated.proto"): "meta_v1",
    ("k8s.io/apimachinery", "pkg/api/resource/generated.proto"): "resource",
    ("k8s.io/apimachinery", "pkg/util/intstr/generated.proto"): "intstr",
    ("k8s.io/api", "core/v1/generated.proto"): "core_v1",
    ("k8s.io/api", "coordination/v1/generated.proto"): "coordination_v1",
    ("k8s.io/api", "certificates/v1/generated.proto"): "certificates_v1",
}


def module_dir(module: str, version: str) -> Path:
    out = subprocess.run(
        ["go", "mod", "download", "-json", f"{module}@{version}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(json.loads(out.stdout)["Dir"])


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--api-version", default="v0.36.3", help="k8s.io/api and apimachinery")
    args = parser.parse_args()
    from grpc_tools import protoc  # noqa: PLC0415 (a development tool, not a dependency)

    dirs = {m: module_dir(m, args.api_version) for m in {m for m, _ in PROTOS}}
    renames = {f"{m}/{p}": f"{PACKAGE}/{short}.proto" for (m, p), short in PROTOS.items()}
    with tempfile.TemporaryDirectory() as tmp:
        stage = Path(tmp)
        (stage / PACKAGE).mkdir(parents=True)
        for (module, path), short in PROTOS.items():
            text = (dirs[module] / path).read_text()

            def rename(match: re.Match[str]) -> str:
                return f'import "{renames[match.group(1)]}";'

            text = re.sub(r'import "([^"]+)";', rename, text)
            (stage / PACKAGE / f"{short}.proto").write_text(text)
        for short in PROTOS.values():
            for old in HERE.glob(f"{short}_pb2.py*"):
                old.unlink()
        code = protoc.main(
            [
                "protoc",
                f"-I{stage}",
                f"--python_out={stage}",
                *(f"{PACKAGE}/{short}.proto" for short in PROTOS.values()),
            ]
        )
        if code != 0:
            sys.exit(f"protoc failed ({code})")
        for short in PROTOS.values():
            shutil.copy(stage / PACKAGE / f"{short}_pb2.py", HERE / f"{short}_pb2.py")
    protoc_version = subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", "--version"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (HERE / "VERSIONS.txt").write_text(
        f"k8s.io/api {args.api_version}\nk8s.io/apimachinery {args.api_version}\n"
        f"grpcio-tools {version('grpcio-tools')} ({protoc_version})\n"
    )


if __name__ == "__main__":
    main()
