"""The simulated cloud's cloud-config (the file given with ``--cloud-config``).

Example, with every field and its default::

    state: simcloud.db          # required; relative paths are from the working directory;
                                # ":memory:" = a private in-memory cloud
    region: sim-region-1
    zones: [sim-zone-a, sim-zone-b, sim-zone-c]
    instanceType: sim.standard-2
    unknownNodes: create        # create: any node name gets an instance; notFound
    instancesApi: v2            # v2 (InstancesV2) or v1 (Instances + Zones)
    latency: 0ms                # added to every call (Go-style duration)
    failureRate: 0.0            # share of calls failing at random, 0..1
    failureKind: error          # error: a plain failure the controllers retry with
                                # backoff; transient: a 5xx/throttle-like failure the
                                # daemon's cloud-call boundary retries at once
    randomSeed: null            # an integer makes the random failures repeatable
    maxFailureStreak: 0         # at most this many random failures of one method in a
                                # row (the next call of it goes through); 0 = no limit
    rateLimit: {qps: 0, burst: 0}   # the cloud API quota; 0 = unlimited
    loadBalancer:
      ipPool: [203.0.113.0/24]
      hostnameMode: false       # true: ingress gets a hostname, no IP
      hostnameSuffix: lb.simulated.example
      ipMode: VIP               # of an IP ingress: VIP, Proxy, or "" (none: left to
                                # the API server's default, VIP)
    podCIDRs:                   # the cloud's own pod CIDRs per instance (NodePodCIDRs, for
      ranges: []                # --cidr-allocator-type=CloudAllocator): none, one range, or
      maskSizeIPv4: 24          # an IPv4 and an IPv6 one; the instance created n-th gets
      maskSizeIPv6: 64          # the n-th CIDR of each (none once a range is used up)
    credentials:                # optional; absent = present no credentials
      file: /etc/simcloud/token # or `env: SIMCLOUD_TOKEN`; relative paths as for `state`
      reloadInterval: 10s       # how often the file is read again (Go-style duration)
    callCountsFlushInterval: 100ms  # per-method call counters are counted in memory and
                                # written to the state file at most this often (and on
                                # exit); 0 = on every call. `kube-ccm simcloud calls`
                                # and CloudState.calls() wait for pending counts.

With ``credentials``, every call presents the value to the simulated cloud, which
rejects it when it accepts other credentials (``kube-ccm simcloud credentials set``).
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Any, Literal

import msgspec

from kube_ccm.cloudprovider import (
    CredentialsError,
    CredentialsSource,
    InvalidCloudConfigError,
)
from kube_ccm.cloudprovider.config import convert_config, parse_yaml
from kube_ccm.cloudprovider.credentials import DEFAULT_RELOAD_INTERVAL
from kube_ccm.providers.simulated.state import CALL_COUNTS_FLUSH_INTERVAL

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class SimulatedConfigError(InvalidCloudConfigError):
    """The cloud-config is invalid; the message names the field and what to write,
    on one line whatever the document held."""


_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)(h|ms|us|µs|ns|m|s))+$")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def parse_duration(text: str | float | int) -> float:
    """Go-style duration (``1m30s``, ``50ms``) or a number of seconds → seconds."""
    if isinstance(text, int | float):
        return float(text)
    text = text.strip()
    if text in ("0", ""):
        return 0.0
    if not _DURATION.match(text):
        raise ValueError(f"invalid duration {text!r}: write e.g. 50ms, 2s, 1m30s")
    return sum(
        float(number) * _UNIT_SECONDS[unit]
        for number, unit in re.findall(r"(\d+(?:\.\d+)?)(h|ms|us|µs|ns|m|s)", text)
    )


class RateLimit(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    qps: float = 0.0
    burst: int = 0


class LoadBalancerConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True, rename="camel"):
    ip_pool: tuple[str, ...] = ("203.0.113.0/24",)
    hostname_mode: bool = False
    hostname_suffix: str = "lb.simulated.example"
    ip_mode: Literal["VIP", "Proxy", ""] = "VIP"
    """``ipMode`` of an IP ingress; ``""``: none, left to the API server's default
    (``VIP``), as many providers do."""
    backend_names: bool = True
    """False: a load balancer's ``nodes`` is one summary, ``"<count> nodes, sha256
    <digest>"``, not the names (the scale benchmark: 10,000 load balancers of 100,000
    names each would be 12 GB of state; the Go benchmark cloud keeps the same)."""


class PodCIDRsConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    ranges: tuple[str, ...] = ()
    mask_size_ipv4: int = msgspec.field(default=24, name="maskSizeIPv4")
    mask_size_ipv6: int = msgspec.field(default=64, name="maskSizeIPv6")

    def networks(self) -> tuple[tuple[IPNetwork, int], ...]:
        """Each range with the mask size of its family (the config is checked)."""
        parsed = (ipaddress.ip_network(r, strict=False) for r in self.ranges)
        return tuple(
            (n, self.mask_size_ipv4 if n.version == 4 else self.mask_size_ipv6) for n in parsed
        )


class _Settings(msgspec.Struct, frozen=True, rename="camel"):
    """The keys the document and :class:`SimulatedConfig` share, with their defaults."""

    state: str
    region: str = "sim-region-1"
    zones: tuple[str, ...] = ("sim-zone-a", "sim-zone-b", "sim-zone-c")
    instance_type: str = "sim.standard-2"
    unknown_nodes: Literal["create", "notFound"] = "create"
    instances_api: Literal["v1", "v2"] = "v2"
    failure_rate: float = 0.0
    failure_kind: Literal["error", "transient"] = "error"
    random_seed: int | None = None
    max_failure_streak: int = 0
    rate_limit: RateLimit = RateLimit()
    load_balancer: LoadBalancerConfig = LoadBalancerConfig()
    pod_cidrs: PodCIDRsConfig = msgspec.field(default=PodCIDRsConfig(), name="podCIDRs")


class _RawConfig(_Settings, forbid_unknown_fields=True, frozen=True):
    """The document as written: durations as text or seconds, credentials unchecked."""

    latency: str | float = 0.0
    credentials: Any = None  # checked by CredentialsSource.from_config
    call_counts_flush_interval: str | float = CALL_COUNTS_FLUSH_INTERVAL


class SimulatedConfig(_Settings, frozen=True):
    """The validated configuration; ``state`` is an absolute path or ``:memory:``.

    ``latency`` is in seconds; ``credentials`` says where the credentials presented to
    the cloud are (``None``: none are presented); ``credentials_reload_interval`` is how
    often a credentials file is read again, in seconds; ``call_counts_flush_interval``
    how often the call counters are written to the state file, in seconds (0: on every
    call).
    """

    latency: float = 0.0
    credentials: CredentialsSource | None = None
    credentials_reload_interval: float = DEFAULT_RELOAD_INTERVAL
    call_counts_flush_interval: float = CALL_COUNTS_FLUSH_INTERVAL


def _credentials(raw: object, base_dir: Path | None) -> tuple[CredentialsSource | None, float]:
    if raw is None:
        return None, DEFAULT_RELOAD_INTERVAL
    rest = dict(raw) if isinstance(raw, dict) else raw
    interval: object = (
        rest.pop("reloadInterval", DEFAULT_RELOAD_INTERVAL)
        if isinstance(rest, dict)
        else DEFAULT_RELOAD_INTERVAL
    )
    try:
        source = CredentialsSource.from_config(rest, field="credentials", base_dir=base_dir)
    except CredentialsError as exc:
        raise SimulatedConfigError(
            f"invalid simulated cloud-config: {exc} (and optionally `reloadInterval: 10s`)"
        ) from None
    if not isinstance(interval, str | int | float) or isinstance(interval, bool):
        raise SimulatedConfigError(
            "`credentials.reloadInterval` must be a duration: write e.g. 10s or 500ms"
        )
    try:
        seconds = parse_duration(interval)
    except ValueError as exc:
        raise SimulatedConfigError(f"invalid `credentials.reloadInterval`: {exc}") from None
    if seconds <= 0:
        raise SimulatedConfigError(
            "`credentials.reloadInterval` must be more than 0: write e.g. 10s or 500ms"
        )
    if source.env and isinstance(raw, dict) and "reloadInterval" in raw:
        raise SimulatedConfigError(
            "`credentials.reloadInterval` applies to `credentials.file` only: an environment "
            "variable is read once; remove reloadInterval or use a file"
        )
    return source, seconds


def _check_pod_cidrs(config: PodCIDRsConfig) -> None:
    example = "write e.g. `podCIDRs: {ranges: [10.100.0.0/16, fd00:100::/48]}`"
    networks: list[IPNetwork] = []
    for text in config.ranges:
        try:
            networks.append(ipaddress.ip_network(text, strict=False))
        except ValueError:
            raise SimulatedConfigError(
                f"`podCIDRs.ranges` entry {text!r} is not a CIDR: {example}"
            ) from None
    if len(networks) > 2 or len({n.version for n in networks}) < len(networks):
        raise SimulatedConfigError(
            f"`podCIDRs.ranges` holds one range, or an IPv4 and an IPv6 one: {example}"
        )
    for network in networks:
        flag = f"podCIDRs.maskSizeIPv{network.version}"
        mask = config.mask_size_ipv4 if network.version == 4 else config.mask_size_ipv6
        if not network.prefixlen <= mask <= network.max_prefixlen:
            raise SimulatedConfigError(
                f"`{flag}` is {mask}: it must be from {network.prefixlen} (the range's own "
                f"size) to {network.max_prefixlen}"
            )


def load_config(data: bytes | str, *, base_dir: Path | None = None) -> SimulatedConfig:
    """Parse and validate a cloud-config document."""
    document = parse_yaml(data, provider="simulated", error=SimulatedConfigError)
    if not isinstance(document, dict):
        raise SimulatedConfigError(
            "the simulated cloud-config must be a YAML mapping with at least `state: PATH`"
        )
    raw = convert_config(
        document,
        _RawConfig,
        provider="simulated",
        error=SimulatedConfigError,
        see=" (see the example in kube_ccm/providers/simulated/config.py or docs/providers.md)",
    )
    try:
        latency = parse_duration(raw.latency)
    except ValueError as exc:
        raise SimulatedConfigError(f"invalid `latency`: {exc}") from exc
    if not 0.0 <= raw.failure_rate <= 1.0:
        raise SimulatedConfigError(f"`failureRate` must be between 0 and 1, got {raw.failure_rate}")
    if raw.max_failure_streak < 0:
        raise SimulatedConfigError(
            f"`maxFailureStreak` must be 0 (no limit) or more, got {raw.max_failure_streak}"
        )
    if not raw.zones:
        raise SimulatedConfigError("`zones` must name at least one zone")
    if raw.rate_limit.qps < 0 or raw.rate_limit.burst < 0:
        raise SimulatedConfigError("`rateLimit.qps` and `rateLimit.burst` must not be negative")
    for cidr in raw.load_balancer.ip_pool:
        try:
            ipaddress.ip_network(cidr, strict=False)
        except ValueError as exc:
            raise SimulatedConfigError(
                f"`loadBalancer.ipPool` entry {cidr!r} is not a CIDR: write e.g. 203.0.113.0/24"
            ) from exc
    _check_pod_cidrs(raw.pod_cidrs)
    credentials, reload_interval = _credentials(raw.credentials, base_dir)
    try:
        flush_interval = parse_duration(raw.call_counts_flush_interval)
    except ValueError as exc:
        raise SimulatedConfigError(f"invalid `callCountsFlushInterval`: {exc}") from exc
    if flush_interval < 0:
        raise SimulatedConfigError(
            "`callCountsFlushInterval` must not be negative: write e.g. 100ms, or 0 to write "
            "the call counters on every call"
        )
    state = raw.state
    if state != ":memory:" and not Path(state).is_absolute():
        state = str((base_dir or Path.cwd()) / state)
    # The keys as written, but for those checked or converted above.
    return SimulatedConfig(
        **msgspec.structs.asdict(raw)
        | {
            "state": state,
            "latency": latency,
            "credentials": credentials,
            "credentials_reload_interval": reload_interval,
            "call_counts_flush_interval": flush_interval,
        }
    )


def load_config_file(path: str | Path) -> SimulatedConfig:
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SimulatedConfigError(f"cannot read cloud-config {path}: {exc.strerror}") from exc
    return load_config(data)
