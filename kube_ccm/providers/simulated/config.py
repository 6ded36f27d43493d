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
    rateLimit: {qps: 0, burst: 0}   # the cloud API quota; 0 = unlimited
    loadBalancer:
      ipPool: [203.0.113.0/24]
      hostnameMode: false       # true: ingress gets a hostname, no IP
      hostnameSuffix: lb.simulated.example
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Literal

import msgspec
import yaml


class SimulatedConfigError(ValueError):
    """The cloud-config is invalid; the message names the field and what to write."""


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


class _RawConfig(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    state: str
    region: str = "sim-region-1"
    zones: tuple[str, ...] = ("sim-zone-a", "sim-zone-b", "sim-zone-c")
    instance_type: str = "sim.standard-2"
    unknown_nodes: Literal["create", "notFound"] = "create"
    instances_api: Literal["v1", "v2"] = "v2"
    latency: str | float = 0.0
    failure_rate: float = 0.0
    rate_limit: RateLimit = RateLimit()
    load_balancer: LoadBalancerConfig = LoadBalancerConfig()


class SimulatedConfig(msgspec.Struct, frozen=True):
    """The validated configuration; ``state`` is an absolute path or ``:memory:``."""

    state: str
    region: str = "sim-region-1"
    zones: tuple[str, ...] = ("sim-zone-a", "sim-zone-b", "sim-zone-c")
    instance_type: str = "sim.standard-2"
    unknown_nodes: Literal["create", "notFound"] = "create"
    instances_api: Literal["v1", "v2"] = "v2"
    latency: float = 0.0
    failure_rate: float = 0.0
    rate_limit: RateLimit = RateLimit()
    load_balancer: LoadBalancerConfig = LoadBalancerConfig()


def load_config(data: bytes | str, *, base_dir: Path | None = None) -> SimulatedConfig:
    """Parse and validate a cloud-config document."""
    try:
        document = yaml.safe_load(data)
    except yaml.YAMLError as exc:
        raise SimulatedConfigError(f"the simulated cloud-config is not valid YAML: {exc}") from exc
    if not isinstance(document, dict):
        raise SimulatedConfigError(
            "the simulated cloud-config must be a YAML mapping with at least `state: PATH`"
        )
    try:
        raw = msgspec.convert(document, _RawConfig)
    except msgspec.ValidationError as exc:
        raise SimulatedConfigError(
            f"invalid simulated cloud-config: {exc} (see the example in "
            "kube_ccm/providers/simulated/config.py or docs/providers.md)"
        ) from exc
    try:
        latency = parse_duration(raw.latency)
    except ValueError as exc:
        raise SimulatedConfigError(f"invalid `latency`: {exc}") from exc
    if not 0.0 <= raw.failure_rate <= 1.0:
        raise SimulatedConfigError(f"`failureRate` must be between 0 and 1, got {raw.failure_rate}")
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
    state = raw.state
    if state != ":memory:" and not Path(state).is_absolute():
        state = str((base_dir or Path.cwd()) / state)
    return SimulatedConfig(
        state=state,
        region=raw.region,
        zones=raw.zones,
        instance_type=raw.instance_type,
        unknown_nodes=raw.unknown_nodes,
        instances_api=raw.instances_api,
        latency=latency,
        failure_rate=raw.failure_rate,
        rate_limit=raw.rate_limit,
        load_balancer=raw.load_balancer,
    )


def load_config_file(path: str | Path) -> SimulatedConfig:
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SimulatedConfigError(f"cannot read cloud-config {path}: {exc.strerror}") from exc
    return load_config(data)
