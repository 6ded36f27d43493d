"""The ``ippool`` cloud-config (``--cloud-config``; every key optional)::

    configMap: kube-system/kubevip   # pools in kube-vip-cloud-provider's ConfigMap format,
                                     # read at each allocation; "" reads no ConfigMap
    pools:                           # more pools, in the same format, e.g.
      range-global: 192.0.2.10-192.0.2.50
      cidr-team-a: 198.51.100.0/28
    namespaceLimit: 0                # the most pool addresses one namespace may own
                                     # (0: no cap); shared addresses count once,
                                     # for the namespace that took them
    namespaceLimits:                 # per-namespace caps that replace namespaceLimit
      team-a: 20
    announcer: kube-vip              # who announces the addresses: kube-vip (reads the
                                     # kube-vip.io/loadbalancerIPs annotation ippool
                                     # writes), or status: MetalLB's speaker, Cilium's
                                     # L2 announcements or BGP (they read
                                     # status.loadBalancer.ingress; no annotation written)

No file at all means the defaults: pools from ``kube-system/kubevip`` only, announced
by kube-vip.
"""

from __future__ import annotations

import re

import msgspec
import yaml

from kube_ccm.cloudprovider import InvalidCloudConfigError
from kube_ccm.cloudprovider.config import convert_config
from kube_ccm.providers.ippool.kubevip import pools_from_kubevip
from kube_ccm.providers.ippool.pools import PoolError, Pools

DEFAULT_CONFIG_MAP = "kube-system/kubevip"
ANNOUNCER_KUBE_VIP = "kube-vip"
"""The announcer reads ``kube-vip.io/loadbalancerIPs``: ippool writes it (the default,
as kube-vip-cloud-provider does)."""
ANNOUNCER_STATUS = "status"
"""The announcer reads ``status.loadBalancer.ingress`` (MetalLB's speaker, Cilium): no
annotation is written, one API write per Service fewer."""
ANNOUNCERS = (ANNOUNCER_KUBE_VIP, ANNOUNCER_STATUS)
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


class IPPoolConfigError(InvalidCloudConfigError):
    """The cloud-config is invalid; one line naming the key and what to write."""


class IPPoolConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True, rename="camel"):
    config_map: str = DEFAULT_CONFIG_MAP
    pools: dict[str, str] = msgspec.field(default_factory=dict)
    namespace_limit: int = 0
    namespace_limits: dict[str, int] = msgspec.field(default_factory=dict)
    announcer: str = ANNOUNCER_KUBE_VIP

    @property
    def writes_annotation(self) -> bool:
        """Whether the announcer reads the address annotation ippool writes."""
        return self.announcer == ANNOUNCER_KUBE_VIP

    def limit_for(self, namespace: str) -> int:
        """The cap on the addresses ``namespace`` owns; 0 for none."""
        return self.namespace_limits.get(namespace, self.namespace_limit)


def load_config(data: bytes | str | None) -> IPPoolConfig:
    if data is None or not str(data if isinstance(data, str) else data.decode()).strip():
        return IPPoolConfig()
    try:
        raw = yaml.safe_load(data)
    except yaml.YAMLError as exc:
        raise IPPoolConfigError(f"the ippool cloud-config is not valid YAML: {exc}") from exc
    if isinstance(raw, dict) and isinstance(raw.get("pools"), dict):
        raw["pools"] = {str(k): str(v) for k, v in raw["pools"].items()}
    config = convert_config(
        raw,
        IPPoolConfig,
        provider="ippool",
        error=IPPoolConfigError,
        see="; the keys are `configMap` (namespace/name), `pools` (kube-vip keys such as "
        "range-global), `namespaceLimit` (a number), `namespaceLimits` (namespace: number) "
        f"and `announcer` ({' or '.join(ANNOUNCERS)})",
    )
    if config.announcer not in ANNOUNCERS:
        raise IPPoolConfigError(
            f"`announcer` is {config.announcer!r}; write {ANNOUNCER_KUBE_VIP} (kube-vip reads "
            f"the kube-vip.io/loadbalancerIPs annotation ippool writes) or {ANNOUNCER_STATUS} "
            "(MetalLB's speaker, Cilium: they read status.loadBalancer.ingress)"
        )
    for where, limit in [
        ("namespaceLimit", config.namespace_limit),
        *((f"namespaceLimits.{ns}", n) for ns, n in config.namespace_limits.items()),
    ]:
        if limit < 0:
            raise IPPoolConfigError(f"`{where}` is {limit}; write 0 (no cap) or more")
    for namespace in config.namespace_limits:
        if not _NAME.match(namespace) or len(namespace) > 63:
            raise IPPoolConfigError(f"`namespaceLimits` key {namespace!r} is not a namespace name")
    if config.config_map:
        namespace, slash, name = config.config_map.partition("/")
        if not slash or not _NAME.match(namespace) or not _NAME.match(name):
            raise IPPoolConfigError(
                f"`configMap` must be namespace/name (e.g. {DEFAULT_CONFIG_MAP}), "
                f"not {config.config_map!r}"
            )
    try:
        Pools.of(pools_from_kubevip(config.pools, "cloud-config `pools`"))
    except PoolError as exc:
        raise IPPoolConfigError(str(exc)) from exc
    return config
