# ruff: noqa: E501  (messages read best on one line)
"""The checks of the flags' values: every problem at once, each saying what to write instead.

Upstream's checks first (the cloud-controller-manager's ``Validate`` and
client-go's leader-election rules), then kube-ccm's own (floors on periods, the
load-balancer classes, the cloud-call policy). Values are keyed by flag name, as
parsed (:class:`~kube_ccm.app.options.pflag.ParsedFlags`), so a message can name the flag
the user wrote.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Mapping
from importlib.util import find_spec
from typing import Any, Final

from kube_ccm.api import wellknown as wk
from kube_ccm.api.selectors import SelectorError, parse_selector
from kube_ccm.app.options.flags import BY_NAME
from kube_ccm.app.options.pflag import format_float, format_go_duration
from kube_ccm.controllers.cidrset import CIDRSet, CIDRSetError
from kube_ccm.controllers.nodeipam import NodeIpamOptions
from kube_ccm.controllers.route import IPNetwork
from kube_ccm.runtime.clientbuilder import TRANSPORTS
from kube_ccm.runtime.codec import CONTENT_TYPES
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
    if values["kube-api-content-type"] not in CONTENT_TYPES:
        problems.append(
            f"--kube-api-content-type must be one of {', '.join(CONTENT_TYPES)}, not {values['kube-api-content-type']!r}"
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
    if values["worker-processes"] <= 0:
        problems.append(
            f"--worker-processes must be 1 (no worker processes) or more, not {values['worker-processes']}"
        )
    if values["worker-processes"] > 1 and (values["dry-run"] or values["enable-leader-migration"]):
        problems.append(
            "--worker-processes runs the controllers in one set of worker processes under one "
            "lease; it does not combine with --dry-run or --enable-leader-migration: drop one"
        )
    if values["kube-api-burst"] <= 0:
        problems.append(
            f"--kube-api-burst must be a positive number, not {values['kube-api-burst']}"
        )
    problems.extend(_transport_problems(values["kube-api-transport"]))
    problems.extend(_guard_problems(values))
    return problems


def _guard_problems(values: Mapping[str, Any]) -> list[str]:
    problems: list[str] = []
    if values["node-deletion-guard"] not in ("on", "off"):
        problems.append(
            f"--node-deletion-guard must be on or off, not {values['node-deletion-guard']!r}"
        )
    threshold = values["node-deletion-guard-threshold"]
    if not 0 < threshold <= 1:
        problems.append(
            f"--node-deletion-guard-threshold must be a share above 0 and at most 1 (e.g. 0.3 for 30 %), not {format_float(threshold)}"
        )
    if values["node-deletion-guard-min-nodes"] < 1:
        problems.append(
            f"--node-deletion-guard-min-nodes must be 1 or more (default 3), not {values['node-deletion-guard-min-nodes']}"
        )
    return problems


def _transport_problems(transport: str) -> list[str]:
    if transport not in TRANSPORTS:
        return [f"--kube-api-transport must be one of {', '.join(TRANSPORTS)}, not {transport!r}"]
    if transport == "curl" and find_spec("pycurl") is None:
        return [
            "--kube-api-transport=curl needs pycurl, which is not installed: "
            "pip install 'kube-ccm[curl]', or use --kube-api-transport=aiohttp"
        ]
    return []


_POSITIVE_DURATIONS: Final = ("node-monitor-period", "node-status-update-frequency", "route-reconciliation-period", "cloud-call-timeout", "load-balancer-gc-period", "node-deletion-guard-window")  # fmt: skip
_NON_NEGATIVE_DURATIONS: Final = ("shutdown-grace-period", "min-resync-period", "controller-start-interval", "node-sync-window", "node-sync-max-delay")  # fmt: skip


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


def _networks(flag: str, parts: list[str], error: type[Exception]) -> list[IPNetwork]:
    """Each of ``parts`` (a comma list's items) as a network; else ``error`` naming ``flag``
    and the item."""
    networks: list[IPNetwork] = []
    for part in parts:
        try:
            networks.append(ipaddress.ip_network(part, strict=False))
        except ValueError as exc:
            raise error(f"{flag}: {part!r} is not a valid CIDR: {exc}") from exc
    return networks


def parse_cluster_cidrs(text: str) -> tuple[IPNetwork, ...]:
    """``--cluster-cidr``: one CIDR, or a dual-stack pair (one IPv4, one IPv6)."""
    parts = [p.strip() for p in text.split(",")]
    if not text.strip() or not all(parts):
        raise ClusterCIDRError(
            "--cluster-cidr is required when routes are configured: give the pod network, "
            "e.g. --cluster-cidr=10.244.0.0/16, or pass --configure-cloud-routes=false"
        )
    networks = _networks("--cluster-cidr", parts, ClusterCIDRError)
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


# -- node IPAM: checked only where node-ipam-controller will run ---------------------


DEFAULT_NODE_CIDR_MASK_IPV4: Final = 24
DEFAULT_NODE_CIDR_MASK_IPV6: Final = 64
"""Upstream's defaults (``defaultNodeMaskCIDRIPv4``/``IPv6`` of the sample CCM)."""


class NodeIpamConfigError(Exception):
    """The node IPAM flags are unusable; the daemon must not start the controller."""


def parse_node_ipam(
    *,
    cluster_cidr: str,
    service_cluster_ip_range: str = "",
    node_cidr_mask_size: int = 0,
    node_cidr_mask_size_ipv4: int = 0,
    node_cidr_mask_size_ipv6: int = 0,
    cidr_allocator_type: str = wk.CIDR_ALLOCATOR_RANGE,
) -> NodeIpamOptions:
    """The node IPAM settings from its flags. The cloud allocator needs none of the
    range flags. The range allocator's are checked as upstream's sample CCM checks
    them (``startNodeIpamController``, ``setNodeCIDRMaskSizes``) and more: a node mask
    that does not fit its cluster CIDR, and a Service range that covers a whole
    cluster CIDR, are refused here rather than when the controller starts."""
    if cidr_allocator_type == wk.CIDR_ALLOCATOR_CLOUD:
        # The cloud gives the CIDRs: the range flags play no part (upstream's sample
        # still parses --cluster-cidr; here it is checked only when given, for routes).
        given: tuple[IPNetwork, ...] = ()
        if cluster_cidr.strip():
            try:
                given = parse_cluster_cidrs(cluster_cidr)
            except ClusterCIDRError as exc:
                raise NodeIpamConfigError(str(exc)) from exc
        return NodeIpamOptions(
            cluster_cidrs=given, node_mask_sizes=(), allocator=wk.CIDR_ALLOCATOR_CLOUD
        )
    if cidr_allocator_type != wk.CIDR_ALLOCATOR_RANGE:
        raise NodeIpamConfigError(
            f"invalid CIDR allocator type: {cidr_allocator_type}: use "
            f"--cidr-allocator-type={wk.CIDR_ALLOCATOR_RANGE} (kube-ccm cuts the pod CIDRs "
            f"from --cluster-cidr) or {wk.CIDR_ALLOCATOR_CLOUD} (the cloud provider gives them)"
        )
    if not cluster_cidr.strip():
        raise NodeIpamConfigError(
            "--cluster-cidr is required with --allocate-node-cidrs: give the pod network to "
            "cut the Nodes' pod CIDRs from, e.g. --cluster-cidr=10.244.0.0/16"
        )
    try:
        cluster = parse_cluster_cidrs(cluster_cidr)
    except ClusterCIDRError as exc:
        raise NodeIpamConfigError(str(exc)) from exc
    masks = _node_mask_sizes(
        cluster, node_cidr_mask_size, node_cidr_mask_size_ipv4, node_cidr_mask_size_ipv6
    )
    for network, mask in zip(cluster, masks, strict=True):
        flag = _mask_flag(network, dual_stack=len(cluster) > 1, single=node_cidr_mask_size)
        if mask < network.prefixlen:
            raise NodeIpamConfigError(
                f"--cluster-cidr {network} is smaller than the node CIDRs: {flag}={mask} would "
                f"give each Node a /{mask}; the mask size must be at least {network.prefixlen} "
                f"(default {_default_mask(network)})"
            )
        if mask > network.max_prefixlen:
            raise NodeIpamConfigError(
                f"{flag}={mask} is not a mask size of IPv{network.version}: at most "
                f"{network.max_prefixlen}"
            )
        try:
            CIDRSet(network, mask)
        except CIDRSetError as exc:
            raise NodeIpamConfigError(f"{flag}={mask}: {exc}") from exc
    services = _service_cidrs(service_cluster_ip_range)
    for service in services:
        for network in cluster:
            if network.version == service.version and network.subnet_of(service):  # type: ignore[arg-type]
                raise NodeIpamConfigError(
                    f"--service-cluster-ip-range {service} covers all of --cluster-cidr "
                    f"{network}: no pod CIDR would be left for the Nodes; the two ranges "
                    "must not overlap (a Service range inside the cluster CIDR is kept out "
                    "of the allocation)"
                )
    return NodeIpamOptions(cluster_cidrs=cluster, node_mask_sizes=masks, service_cidrs=services)


def _default_mask(network: IPNetwork) -> int:
    return DEFAULT_NODE_CIDR_MASK_IPV4 if network.version == 4 else DEFAULT_NODE_CIDR_MASK_IPV6


def _mask_flag(network: IPNetwork, *, dual_stack: bool, single: int) -> str:
    if single and not dual_stack:
        return "--node-cidr-mask-size"
    return f"--node-cidr-mask-size-ipv{network.version}"


def _node_mask_sizes(
    cluster: tuple[IPNetwork, ...], mask: int, mask_v4: int, mask_v6: int
) -> tuple[int, ...]:
    """Upstream's ``setNodeCIDRMaskSizes``: one mask size per cluster CIDR."""
    for flag, value in (
        ("--node-cidr-mask-size", mask),
        ("--node-cidr-mask-size-ipv4", mask_v4),
        ("--node-cidr-mask-size-ipv6", mask_v6),
    ):
        if value < 0:
            raise NodeIpamConfigError(f"{flag} cannot be negative (0 uses the default)")
    ipv4, ipv6 = DEFAULT_NODE_CIDR_MASK_IPV4, DEFAULT_NODE_CIDR_MASK_IPV6
    if len(cluster) > 1:
        if mask:
            raise NodeIpamConfigError(
                "usage of --node-cidr-mask-size is not allowed with dual-stack clusters: "
                "use --node-cidr-mask-size-ipv4 and --node-cidr-mask-size-ipv6"
            )
        ipv4, ipv6 = mask_v4 or ipv4, mask_v6 or ipv6
    elif mask:
        if mask_v4 or mask_v6:
            raise NodeIpamConfigError(
                "usage of --node-cidr-mask-size-ipv4 and --node-cidr-mask-size-ipv6 is not "
                "allowed if --node-cidr-mask-size is set. For dual-stack clusters please unset "
                "it and use IPFamily specific flags"
            )
        ipv4 = ipv6 = mask
    else:
        single_stack_ipv6 = cluster[0].version == 6
        if mask_v4 and single_stack_ipv6:
            raise NodeIpamConfigError(
                "usage of --node-cidr-mask-size-ipv4 is not allowed for a single-stack IPv6 "
                "cluster: use --node-cidr-mask-size-ipv6"
            )
        if mask_v6 and not single_stack_ipv6:
            raise NodeIpamConfigError(
                "usage of --node-cidr-mask-size-ipv6 is not allowed for a single-stack IPv4 "
                "cluster: use --node-cidr-mask-size-ipv4"
            )
        ipv4, ipv6 = mask_v4 or ipv4, mask_v6 or ipv6
    return tuple(ipv4 if network.version == 4 else ipv6 for network in cluster)


def _service_cidrs(text: str) -> tuple[IPNetwork, ...]:
    """``--service-cluster-ip-range``: empty, one CIDR, or a dual-stack pair."""
    if not text.strip():
        return ()
    parts = [p.strip() for p in text.split(",")]
    if len(parts) > 2:
        raise NodeIpamConfigError(
            "--service-cluster-ip-range can not contain more than two entries"
        )
    networks = _networks("--service-cluster-ip-range", parts, NodeIpamConfigError)
    if len(networks) == 2 and networks[0].version == networks[1].version:
        raise NodeIpamConfigError(
            "serviceCIDR and secondaryServiceCIDR are not dualstack (from different IPfamiles): "
            f"--service-cluster-ip-range {text!r} needs one IPv4 and one IPv6 CIDR"
        )
    return tuple(networks)
