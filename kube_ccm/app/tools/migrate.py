"""``kube-ccm migrate``: the migration guides' mechanical steps (docs/on-prem.md) as a
command. It reads the peer's objects or config (files, ``-`` for stdin), prints the
converted YAML on stdout and every key it could not carry over on stderr, all at once;
it touches no cluster. Exit status 0 when everything was carried over, 3 when
something was not (the converted objects are printed either way), 2 for a file that
cannot be read or is not YAML.

- ``kube-ccm migrate pools FILE...``: MetalLB ``IPAddressPool`` and Cilium
  ``CiliumLoadBalancerIPPool`` objects (``kubectl get ipaddresspools -A -o yaml``
  output, a ``List``, works too) as LoadBalancerPools;
- ``kube-ccm migrate proxmox FILE``: the Go Proxmox CCM's ``config.yaml`` as the
  ``proxmox`` provider's cloud-config.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from kube_ccm.providers.ippool import migrate as pools
from kube_ccm.providers.proxmox import migrate as proxmox

NOT_CARRIED = 3
"""Exit status when something could not be carried over."""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    migrate = sub.add_parser(
        "migrate",
        help="convert MetalLB's, Cilium's or the Go Proxmox CCM's configuration",
        description=(
            "Print a peer's configuration converted as docs/on-prem.md's migration guides "
            "say, and on stderr every key that could not be carried over. Touches no "
            f"cluster. Exit status {NOT_CARRIED} when something was not carried over."
        ),
    )
    kinds = migrate.add_subparsers(dest="what", required=True, metavar="WHAT")
    pool = kinds.add_parser(
        "pools",
        help="MetalLB IPAddressPools and Cilium CiliumLoadBalancerIPPools as LoadBalancerPools",
    )
    pool.add_argument("files", nargs="+", help="YAML files of the objects ('-': stdin)")
    pool.set_defaults(handler=_pools)
    px = kinds.add_parser("proxmox", help="the Go Proxmox CCM's config.yaml as proxmox.yaml")
    px.add_argument("file", help="its config.yaml ('-': stdin)")
    px.set_defaults(handler=_proxmox)


def _documents(name: str) -> list[Any]:
    text = sys.stdin.read() if name == "-" else Path(name).read_text()
    found: list[Any] = []
    for doc in yaml.safe_load_all(text):
        if isinstance(doc, dict) and doc.get("kind") == "List":
            found.extend(doc.get("items") or ())
        elif doc is not None:
            found.append(doc)
    return found


def _report(objects: list[Any], notes: list[str]) -> int:
    sys.stdout.write(yaml.safe_dump_all(objects, sort_keys=False) if objects else "")
    for note in notes:
        sys.stderr.write(f"not carried over: {note}\n")
    return NOT_CARRIED if notes else 0


def _read(names: list[str]) -> list[Any] | None:
    try:
        return [doc for name in names for doc in _documents(name)]
    except (OSError, yaml.YAMLError) as exc:
        sys.stderr.write(f"kube-ccm migrate: {exc}\n")
        return None


def _pools(args: argparse.Namespace) -> int:
    documents = _read(args.files)
    if documents is None:
        return 2
    converted = pools.convert(documents)
    return _report(converted.objects, converted.notes)


def _proxmox(args: argparse.Namespace) -> int:
    documents = _read([args.file])
    if documents is None:
        return 2
    config, notes = proxmox.convert(documents[0] if documents else None)
    return _report([config] if config is not None else [], notes)


__all__ = ["NOT_CARRIED", "add_parser"]
