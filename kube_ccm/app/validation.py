# ruff: noqa: E501  (messages read best on one line)
"""The checks of the flags' values: every problem at once, each saying what to write instead.

Upstream's checks first (the cloud-controller-manager's ``Validate`` and
client-go's leader-election rules), then kube-ccm's own (floors on periods, the
load-balancer classes, the cloud-call policy). Values are keyed by flag name, as
parsed (:class:`~kube_ccm.app.pflag.ParsedFlags`), so a message can name the flag
the user wrote.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Mapping
from typing import Any, Final

from kube_ccm.api import wellknown as wk
from kube_ccm.api.selectors import SelectorError, parse_selector
from kube_ccm.app.flags import BY_NAME
from kube_ccm.app.pflag import format_float, format_go_duration
from kube_ccm.controllers.route import IPNetwork
from kube_ccm.runtime.leaderelection import JITTER_FACTOR


def problems(values: Mapping[str, Any]) -> list[str]:
    """Every problem of the flags' values, upstream's checks first, then kube-ccm's."""
    problems: list[str] = []
    if not values["cloud-provider"]:
        problems.append(
            "--cloud-provider cannot be empty: name the provider to run, e.g. --cloud-provider=simulated"
        )
    if values["leader-elect"]:
        problems += _leader_election_problems(values)
    problems += _port_problems(values)
    problems += _worker_problems(values)
    problems += _duration_problems(values)
    if values["logging-format"] not in ("text", "json"):
        problems.append(
            f'unsupported logging format "{values["logging-format"]}": use text or json'
        )
    return problems


def _leader_election_problems(values: Mapping[str, Any]) -> list[str]:
    problems: list[str] = []
    if values["leader-elect-resource-lock"] != wk.LEADER_ELECTION_RESOURCE_LOCK:
        problems.append(
            'resourceLock value must be "leases": set --leader-elect-resource-lock=leases'
        )
    lease, renew, retry = (values[f"leader-elect-{n}"] for n in ("lease-duration", "renew-deadline", "retry-period"))  # fmt: skip
    # client-go's own checks (it would refuse them when the election starts).
    if min(lease, renew, retry) <= 0:
        problems.append(
            "--leader-elect-lease-duration, --leader-elect-renew-deadline and --leader-elect-retry-period must be positive"
        )
    elif lease <= renew:
        problems.append(
            f"--leader-elect-lease-duration ({format_go_duration(lease)}) must be greater than --leader-elect-renew-deadline ({format_go_duration(renew)})"
        )
    elif renew <= JITTER_FACTOR * retry:
        problems.append(
            f"--leader-elect-renew-deadline ({format_go_duration(renew)}) must be greater than {JITTER_FACTOR} x --leader-elect-retry-period ({format_go_duration(retry)})"
        )
    return problems


def _port_problems(values: Mapping[str, Any]) -> list[str]:
    problems = [
        f"--{flag} {values[flag]} must be between 0 and 65535 (0 turns it off)"
        for flag in ("secure-port", "webhook-secure-port")
        if not 0 <= values[flag] <= 65535
    ]
    if values["webhook-secure-port"] and values["webhook-secure-port"] == values["secure-port"]:
        problems.append(
            "--webhook-secure-port cannot be the same value as --secure-port: pick another port (default 10260)"
        )
    return problems


def _worker_problems(values: Mapping[str, Any]) -> list[str]:
    problems: list[str] = []
    if values["concurrent-node-syncs"] <= 0:
        problems.append(
            "concurrent-node-syncs must be a positive number: set --concurrent-node-syncs to 1 or more"
        )
    if values["concurrent-node-status-updates"] < 0:
        problems.append(
            "concurrent-node-status-updates cannot be a negative number: set it to 0 (use --concurrent-node-syncs) or more"
        )
    if values["concurrent-service-syncs"] <= 0:
        problems.append(
            "concurrent-service-syncs must be a positive number: set --concurrent-service-syncs to 1 or more"
        )
    if not 0 < values["kube-api-qps"] < math.inf:
        problems.append(
            f"--kube-api-qps must be a positive number, not {format_float(values['kube-api-qps'])}"
        )
    try:
        parse_selector(values["node-selector"])
    except SelectorError as exc:
        problems.append(f"--node-selector: {exc}")
    if not 0 <= values["cloud-api-qps"] < math.inf:
        problems.append(
            f"--cloud-api-qps must be 0 (unlimited) or a positive number, not {format_float(values['cloud-api-qps'])}"
        )
    if values["cloud-api-burst"] <= 0:
        problems.append(
            f"--cloud-api-burst must be a positive number, not {values['cloud-api-burst']}"
        )
    for name in values["load-balancer-class"]:
        if not name or any(c.isspace() for c in name):
            problems.append(
                f"--load-balancer-class {name!r} is not a class name; give the value Services "
                "set in spec.loadBalancerClass, e.g. example.com/internal"
            )
    if not values["load-balancer-class"] and not values["serve-unclassed-load-balancers"]:
        problems.append(
            "--serve-unclassed-load-balancers=false with no --load-balancer-class serves no "
            "Service; name a class, or drop service from --controllers"
        )
    if values["dry-run"] and values["use-service-account-credentials"]:
        problems.append(
            "--dry-run runs with the daemon's own credentials (it would create no "
            "ServiceAccounts): drop --use-service-account-credentials for the dry run"
        )
    if values["cloud-call-attempts"] <= 0:
        problems.append(
            f"--cloud-call-attempts must be 1 (no retries) or more, not {values['cloud-call-attempts']}"
        )
    if values["kube-api-burst"] <= 0:
        problems.append(
            f"--kube-api-burst must be a positive number, not {values['kube-api-burst']}"
        )
    return problems


_POSITIVE_DURATIONS: Final = ("node-monitor-period", "node-status-update-frequency", "route-reconciliation-period", "cloud-call-timeout", "load-balancer-gc-period")  # fmt: skip
_NON_NEGATIVE_DURATIONS: Final = ("shutdown-grace-period", "min-resync-period", "controller-start-interval", "node-sync-window")  # fmt: skip


_MINIMUM_PERIODS: Final = {
    "load-balancer-gc-period": 1.0,
    "node-monitor-period": 0.1,
    "route-reconciliation-period": 0.1,
    "node-status-update-frequency": 1.0,
    "cloud-call-timeout": 0.1,
}
"""kube-ccm's floors (upstream has none): ``--node-monitor-period=1ns`` took 88 % of a
core and made thousands of cloud calls a second. A period below its floor is refused."""


def _duration_problems(values: Mapping[str, Any]) -> list[str]:
    problems = [
        f"--{flag} must be a positive duration, e.g. --{flag}={BY_NAME[flag].default_text()}"
        for flag in _POSITIVE_DURATIONS
        if values[flag] <= 0
    ]
    problems += [
        f"--{flag}={BY_NAME[flag].show(values[flag])} is below the minimum of "
        f"{BY_NAME[flag].show(floor)}: it would spin on the CPU and the cloud's API; the "
        f"default is {BY_NAME[flag].default_text()}"
        for flag, floor in _MINIMUM_PERIODS.items()
        if 0 < values[flag] < floor
    ]
    problems += [
        f"--{flag} cannot be negative" for flag in _NON_NEGATIVE_DURATIONS if values[flag] < 0
    ]
    return problems


# -- --cluster-cidr: checked only where the route controller will run ---------------


class ClusterCIDRError(Exception):
    """``--cluster-cidr`` is unusable; the daemon must not start the route controller."""


def parse_cluster_cidrs(text: str) -> tuple[IPNetwork, ...]:
    """``--cluster-cidr``: one CIDR, or a dual-stack pair (one IPv4, one IPv6)."""
    parts = [p.strip() for p in text.split(",")]
    if not text.strip() or not all(parts):
        raise ClusterCIDRError(
            "--cluster-cidr is required when routes are configured: give the pod network, "
            "e.g. --cluster-cidr=10.244.0.0/16, or pass --configure-cloud-routes=false"
        )
    networks: list[IPNetwork] = []
    for part in parts:
        try:
            networks.append(ipaddress.ip_network(part, strict=False))
        except ValueError as exc:
            raise ClusterCIDRError(f"--cluster-cidr: {part!r} is not a valid CIDR: {exc}") from exc
    if len(networks) > 2:
        raise ClusterCIDRError(
            f"--cluster-cidr: at most two CIDRs (one IPv4, one IPv6), got {len(networks)}"
        )
    if len(networks) == 2 and networks[0].version == networks[1].version:
        raise ClusterCIDRError(
            "--cluster-cidr: two CIDRs must be a dual-stack pair (one IPv4 and one IPv6), "
            f"got {text!r}"
        )
    return tuple(networks)
