"""``kube-ccm simcloud``: drive and inspect the simulated cloud while the daemon runs.

kube-ccm simcloud --state cloud.db instances add node-1 --zone sim-zone-a
kube-ccm simcloud --cloud-config cloud.yaml instances shutdown node-1
kube-ccm simcloud --state cloud.db load-balancers list --output json
kube-ccm simcloud --state cloud.db calls
kube-ccm simcloud --state cloud.db faults set EnsureLoadBalancer retry --retry-after 5s
kube-ccm simcloud --state cloud.db credentials set --from-file token.txt

Credentials are shown by fingerprint only (``sha256:`` and 8 hex digits), never by value.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from kube_ccm.providers.simulated.config import (
    SimulatedConfig,
    SimulatedConfigError,
    load_config_file,
    parse_duration,
)
from kube_ccm.providers.simulated.state import CloudState, StateError


def _duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _address(text: str) -> tuple[str, str]:
    kind, sep, address = text.partition("=")
    if not sep or not address:
        raise argparse.ArgumentTypeError(
            f"invalid address {text!r}: write TYPE=ADDRESS, e.g. InternalIP=10.0.0.5"
        )
    return kind, address


def _label(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"invalid label {text!r}: write KEY=VALUE")
    return key, value


def add_parser(subparsers: Any) -> None:
    """Register ``simcloud`` on the ``kube-ccm`` command's subparsers."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "simcloud",
        help="drive and inspect the simulated cloud",
        description="Drive and inspect the simulated cloud's state file, also while it runs.",
    )
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--state", type=Path, help="the simulated cloud's SQLite state file")
    where.add_argument(
        "--cloud-config", type=Path, help="the simulated cloud-config (its `state` is used)"
    )
    parser.add_argument(
        "--output", "-o", choices=("table", "json"), default="table", help="default: table"
    )
    sub = parser.add_subparsers(dest="area", required=True, metavar="AREA")

    instances = sub.add_parser("instances", help="list, add and change instances")
    isub = instances.add_subparsers(dest="action", required=True, metavar="ACTION")
    isub.add_parser("list", help="list instances")
    add = isub.add_parser("add", help="create a running instance for a node name")
    add.add_argument("node_name")
    add.add_argument("--id", dest="instance_id", default=None, help="default: generated")
    add.add_argument("--zone", default=None, help="default: the config's first zone")
    add.add_argument("--region", default=None, help="default: the config's region")
    add.add_argument("--type", dest="instance_type", default=None, help="instance type")
    add.add_argument(
        "--address",
        type=_address,
        action="append",
        default=None,
        help="TYPE=ADDRESS, repeatable (default: a generated InternalIP and the Hostname)",
    )
    add.add_argument("--label", type=_label, action="append", default=[], help="KEY=VALUE")
    add.add_argument(
        "--state", dest="initial_state", choices=("running", "shutdown"), default="running"
    )
    for action, help_text in (
        ("shutdown", "shut an instance down (it still exists)"),
        ("start", "start a shut-down instance"),
        ("terminate", "terminate an instance (it no longer exists for the CCM)"),
        ("delete", "remove an instance record entirely"),
    ):
        change = isub.add_parser(action, help=help_text)
        change.add_argument("ref", help="instance id or node name")

    lbs = sub.add_parser("load-balancers", help="inspect load balancers")
    lbsub = lbs.add_subparsers(dest="action", required=True, metavar="ACTION")
    lbsub.add_parser("list", help="list load balancers")

    routes = sub.add_parser("routes", help="inspect routes")
    rsub = routes.add_subparsers(dest="action", required=True, metavar="ACTION")
    rsub.add_parser("list", help="list routes")

    volumes = sub.add_parser("volumes", help="list and add volumes")
    vsub = volumes.add_subparsers(dest="action", required=True, metavar="ACTION")
    vsub.add_parser("list", help="list volumes")
    vadd = vsub.add_parser("add", help="create a volume in a zone")
    vadd.add_argument("volume_id")
    vadd.add_argument("--zone", required=True)
    vadd.add_argument("--region", default=None)
    vadd.add_argument("--size", type=int, default=1, help="GiB, default 1")

    calls = sub.add_parser("calls", help="cloud API calls by method")
    calls.add_argument("--reset", action="store_true", help="zero the counters afterwards")

    faults = sub.add_parser("faults", help="inject failures into cloud calls")
    fsub = faults.add_subparsers(dest="action", required=True, metavar="ACTION")
    fsub.add_parser("list", help="list injected faults")
    fset = fsub.add_parser("set", help="make calls of METHOD (or '*') fail")
    fset.add_argument("method", help="contract method, e.g. EnsureLoadBalancer, or '*'")
    fset.add_argument("mode", choices=("error", "retry", "hang"))
    fset.add_argument("--retry-after", type=_duration, default=0.0, help="for mode retry")
    fset.add_argument("--count", type=int, default=None, help="only the next N calls")
    fclear = fsub.add_parser("clear", help="remove injected faults")
    fclear.add_argument("method", nargs="?", default=None)

    creds = sub.add_parser(
        "credentials",
        help="the credentials the cloud accepts (none: it accepts any call)",
        description="The credentials the cloud accepts. While it accepts some, every call "
        "must present one of them (the cloud-config's `credentials:`). Only salted hashes "
        "are stored; listings show sha256 fingerprints, never values.",
    )
    csub = creds.add_subparsers(dest="action", required=True, metavar="ACTION")
    csub.add_parser("list", help="fingerprints of the accepted credentials")
    for action, help_text in (
        ("set", "accept only this credential from now on (rotation)"),
        ("add", "accept this credential too (overlapping rotation)"),
    ):
        cset = csub.add_parser(action, help=help_text)
        value = cset.add_mutually_exclusive_group(required=True)
        value.add_argument(
            "value",
            nargs="?",
            default=None,
            help="the credential (visible to `ps` and shell history: prefer --from-file)",
        )
        value.add_argument(
            "--from-file",
            type=Path,
            default=None,
            help="read the credential from this file (stripped; '-' reads standard input)",
        )
    csub.add_parser("clear", help="accept any call again")

    blind = sub.add_parser(
        "blind",
        help="make the cloud see no instance (as under a wrong identity), or see again",
        description="on: every instance lookup answers 'not found', as a real cloud does "
        "when asked with a token short of a read privilege, another account's key or "
        "another region; off: the cloud sees its instances again.",
    )
    blind.add_argument("action", choices=("on", "off", "status"))

    pool = sub.add_parser("ip-pool", help="add addresses to the load-balancer IP pool")
    psub = pool.add_subparsers(dest="action", required=True, metavar="ACTION")
    padd = psub.add_parser("add", help="add a CIDR's host addresses")
    padd.add_argument("cidr")

    parser.set_defaults(handler=run)


def _table(rows: list[dict[str, Any]], columns: Sequence[str], out: TextIO) -> None:
    def cell(value: Any) -> str:
        if isinstance(value, list):
            return ",".join(
                f"{v['type']}={v['address']}"
                if isinstance(v, dict) and "address" in v
                else (json.dumps(v, separators=(",", ":")) if isinstance(v, dict) else str(v))
                for v in value
            )
        if isinstance(value, dict):
            return ",".join(f"{k}={v}" for k, v in value.items())
        return "" if value is None else str(value)

    table = [[c.upper() for c in columns]] + [[cell(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(columns))]
    for row in table:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip(), file=out)


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    config: SimulatedConfig | None = None
    try:
        if args.cloud_config is not None:
            config = load_config_file(args.cloud_config)
            state_path = config.state
        else:
            state_path = str(args.state)
        if state_path == ":memory:":
            print(
                "error: the cloud-config's state is :memory:, nothing to inspect", file=sys.stderr
            )
            return 1
        state = CloudState(state_path)
    except (SimulatedConfigError, StateError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    try:
        result, columns = _dispatch(args, state, config)
    except StateError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        state.close()
    if args.output == "json":
        print(json.dumps(result, indent=2), file=out)
    elif isinstance(result, list):
        _table(result, columns, out)
    else:
        _table([result], columns, out)
    return 0


def _dispatch(
    args: argparse.Namespace, state: CloudState, config: SimulatedConfig | None
) -> tuple[Any, Sequence[str]]:
    zones = config.zones if config else ("sim-zone-a",)
    region = config.region if config else "sim-region-1"
    instance_type = config.instance_type if config else "sim.standard-2"
    instance_columns = ("id", "nodeName", "state", "zone", "region", "instanceType", "addresses")
    area, action = args.area, getattr(args, "action", None)
    handlers: dict[tuple[str, str | None], Callable[[], tuple[Any, Sequence[str]]]] = {
        ("instances", "list"): lambda: (
            [i.to_json() for i in state.instances()],
            instance_columns,
        ),
        ("instances", "add"): lambda: (
            state.add_instance(
                args.node_name,
                zone=args.zone or zones[0],
                region=args.region or region,
                instance_type=args.instance_type or instance_type,
                addresses=args.address,
                instance_id=args.instance_id,
                state=args.initial_state,
                labels=dict(args.label),
            ).to_json(),
            instance_columns,
        ),
        ("instances", "shutdown"): lambda: (
            state.set_instance_state(args.ref, "shutdown").to_json(),
            instance_columns,
        ),
        ("instances", "start"): lambda: (
            state.set_instance_state(args.ref, "running").to_json(),
            instance_columns,
        ),
        ("instances", "terminate"): lambda: (
            state.set_instance_state(args.ref, "terminated").to_json(),
            instance_columns,
        ),
        ("instances", "delete"): lambda: (_delete_instance(state, args.ref), ("deleted",)),
        ("load-balancers", "list"): lambda: (
            [lb.to_json() for lb in state.load_balancers()],
            ("name", "service", "ip", "hostname", "ports", "nodes"),
        ),
        ("routes", "list"): lambda: (
            [r.to_json() for r in state.routes()],
            ("name", "cluster", "targetNode", "destinationCIDR"),
        ),
        ("volumes", "list"): lambda: (
            [v.to_json() for v in state.volumes()],
            ("id", "zone", "region", "sizeGiB"),
        ),
        ("volumes", "add"): lambda: (
            _add_volume(state, args, region),
            ("id", "zone", "region", "sizeGiB"),
        ),
        ("calls", None): lambda: (_calls(state, args.reset), ("method", "count", "errors")),
        ("faults", "list"): lambda: (
            [f.to_json() for f in state.faults()],
            ("method", "mode", "retryAfter", "remaining"),
        ),
        ("faults", "set"): lambda: (_set_fault(state, args), ("method", "mode")),
        ("faults", "clear"): lambda: (_clear_faults(state, args.method), ("cleared",)),
        ("credentials", "list"): lambda: (
            [c.to_json() for c in state.credentials()],
            ("fingerprint", "created"),
        ),
        ("credentials", "set"): lambda: (
            [c.to_json() for c in state.set_credentials(_credential_value(args))],
            ("fingerprint", "created"),
        ),
        ("credentials", "add"): lambda: (
            [c.to_json() for c in state.add_credential(_credential_value(args))],
            ("fingerprint", "created"),
        ),
        ("credentials", "clear"): lambda: (_clear_credentials(state), ("cleared",)),
        ("blind", "on"): lambda: (_set_blind(state, True), ("blind",)),
        ("blind", "off"): lambda: (_set_blind(state, False), ("blind",)),
        ("blind", "status"): lambda: ({"blind": state.blind()}, ("blind",)),
        ("ip-pool", "add"): lambda: ({"size": state.seed_ip_pool([args.cidr])}, ("size",)),
    }
    return handlers[(area, action)]()


def _delete_instance(state: CloudState, ref: str) -> dict[str, Any]:
    if not state.delete_instance(ref):
        raise StateError(f"no instance with id or node name {ref!r}")
    return {"deleted": ref}


def _add_volume(state: CloudState, args: argparse.Namespace, region: str) -> dict[str, Any]:
    state.add_volume(
        args.volume_id, zone=args.zone, region=args.region or region, size_gib=args.size
    )
    volume = state.volume(args.volume_id)
    assert volume is not None
    return volume.to_json()


def _calls(state: CloudState, reset: bool) -> list[dict[str, Any]]:
    rows = [{"method": m, **c} for m, c in state.calls().items()]
    if reset:
        state.reset_calls()
    return rows


def _set_blind(state: CloudState, blind: bool) -> dict[str, Any]:
    state.set_blind(blind)
    return {"blind": blind}


def _set_fault(state: CloudState, args: argparse.Namespace) -> dict[str, Any]:
    state.set_fault(args.method, args.mode, retry_after=args.retry_after, remaining=args.count)
    return {"method": args.method, "mode": args.mode}


def _clear_faults(state: CloudState, method: str | None) -> dict[str, Any]:
    state.clear_faults(method)
    return {"cleared": method or "*"}


def _credential_value(args: argparse.Namespace) -> str:
    if args.from_file is None:
        value: str = args.value.strip()
        where = "the VALUE argument"
    elif str(args.from_file) == "-":
        value = sys.stdin.read().strip()
        where = "standard input"
    else:
        try:
            value = args.from_file.read_text().strip()
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
            raise StateError(f"cannot read --from-file {args.from_file}: {reason}") from None
        where = f"--from-file {args.from_file}"
    if not value:
        raise StateError(f"{where} is empty: give the credential the cloud should accept")
    return value


def _clear_credentials(state: CloudState) -> dict[str, Any]:
    state.clear_credentials()
    return {"cleared": "credentials: the cloud accepts any call"}
