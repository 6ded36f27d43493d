"""The ``kube-ccm`` command: one entry point, a subcommand per job.

``kube-ccm controlplane``  run a local kube-apiserver + etcd (the test bed)
``kube-ccm simcloud``      drive and inspect the simulated cloud
``kube-ccm version``       print the version
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from kube_ccm import __version__
from kube_ccm.providers.simulated import cli as simcloud


def _controlplane(args: argparse.Namespace) -> int:
    # Imported lazily: the daemon must not pay for the test bed's imports.
    from kube_ccm.testing.controlplane import run_up  # noqa: PLC0415

    return run_up(args.duration, args.data_dir)


def _parse_duration(text: str) -> float:
    """Go-style durations (``90s``, ``5m``, ``1h``) or plain seconds."""
    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    try:
        for suffix in ("ms", "s", "m", "h"):
            if text.endswith(suffix):
                return float(text[: -len(suffix)]) * units[suffix]
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid duration {text!r}: use a number of seconds or e.g. 30s, 5m, 1h"
        ) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kube-ccm", description="The Kubernetes cloud-controller-manager, in Python."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    cp = sub.add_parser(
        "controlplane",
        help="run a local kube-apiserver + etcd and print its kubeconfig",
        description=(
            "Start a real kube-apiserver and etcd on loopback (built from the Go module proxy "
            "on first use), print where its admin kubeconfig is and the server version, and "
            "keep it running until Ctrl-C or --duration."
        ),
    )
    cp.add_argument(
        "--duration",
        type=_parse_duration,
        default=None,
        help="stop after this long (e.g. 20s, 5m); default: run until Ctrl-C",
    )
    cp.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="keep certificates, etcd data and logs here (default: a temporary directory, removed)",
    )
    cp.set_defaults(handler=_controlplane)

    simcloud.add_parser(sub)

    version = sub.add_parser("version", help="print the version")
    version.set_defaults(handler=lambda _args: print(f"kube-ccm {__version__}") or 0)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result: int = args.handler(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
