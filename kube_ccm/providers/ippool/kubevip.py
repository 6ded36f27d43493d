"""kube-vip-cloud-provider's ConfigMap format, read as it is, so users switch unchanged.

Sources: the README of https://github.com/kube-vip/kube-vip-cloud-provider, the page
https://kube-vip.io/docs/usage/cloud-provider/, and the Go code that reads the
ConfigMap: ``pkg/provider/loadBalancer.go`` (``getConfig``, ``discoverPool``,
``discoverInterface``), ``pkg/ipam/addressbuilder.go`` (``parseCidrs``,
``buildHostsFromCidr``, ``buildAddressesFromRange``), ``pkg/config/config.go``
(``search-order``, ``skip-end-ips-in-cidr``) and ``pkg/provider/provider.go`` (the
default ConfigMap ``kube-system/kubevip``).

Grammar (every value a string, as in any ConfigMap)::

    cidr-<ns>:     CIDR[,CIDR...]     e.g. 192.168.0.200/29,2001::10/127
    range-<ns>:    FIRST-LAST[,...]   e.g. 192.168.0.10-192.168.0.13,2001::10-2001::14
    allow-share-<ns>: Go strconv.ParseBool: 1 t T TRUE true True / 0 f F FALSE false False
    interface-<ns>:   a network interface (kube-vip.io/serviceInterface): NOT supported
    search-order:     "desc" gives the highest free address first (default: lowest)
    skip-end-ips-in-cidr: "true" leaves out the first and last address of each IPv4
                          CIDR wider than /31

``<ns>`` is a namespace, or ``global`` for every namespace. A value lists IPv4 and
IPv6 items, comma-separated; items may overlap (their union is the pool, as in
kube-vip's netipx IPSet) and are given out in address order. kube-vip reads a
namespace's ``cidr-<ns>`` before its ``range-<ns>``: with both, ``range-<ns>`` is
ignored (logged). ``allow-share-<ns>`` overrides ``allow-share-global``.

Where ippool differs:

- A namespace with a pool of its own uses it first, then the global pool (kube-vip
  never falls back); kube-vip's code also reads ``cidr-global`` before
  ``range-<ns>``, while its docs (followed here) say a namespace's pool wins.
- (Not a difference: ``skip-end-ips-in-cidr`` defaults to false, as in kube-vip
  since its PR #155, 2024: a pool's CIDR is usually a block inside a larger
  subnet, so its first and last addresses are ordinary hosts. Whatever it says,
  kube-vip's ``FindFreeAddress`` never hands out an IPv4 address ending in .0 or
  .255, from CIDRs and ranges alike, and neither does ippool:
  :func:`~kube_ccm.providers.ippool.pools.skipped`.)
- A namespace's pool may not overlap the global one (kube-vip accepts it and can
  give one address to two namespaces). Two namespaces' pools may overlap.
- ``allow-share-<ns>`` is honoured per pool: the Services of one namespace that
  a pool with it serves share an address whenever their ports do not collide (TCP
  and UDP on one port number do not collide), IPv6 included; Services of two
  namespaces only when both opt in (see :mod:`.provider`); a Service with its own
  sharing-key annotation shares by that key instead. ``allow-share-<ns>`` counts
  for a namespace served by the global pool too, as kube-vip's ``discoverPool``
  reads it (there kube-vip also shares with other namespaces' Services; ippool
  does not unless both opt in).
- A pool may not hold loopback, link-local, multicast or reserved addresses.
- ``interface-<ns>`` is ignored (logged); ``0.0.0.0/32`` (kube-vip's DHCP mode) is
  refused. Whitespace around items, single addresses and mixing CIDRs with ranges
  in one value are accepted (kube-vip refuses them). Unknown keys are logged.
- Malformed values are errors naming the key, where kube-vip silently reads a bad
  ``allow-share``/``search-order``/``skip-end-ips-in-cidr`` as false/ascending.
  Read from a ConfigMap (``strict=False``), a malformed pool key stops only that
  pool; a malformed ``search-order``/``skip-end-ips-in-cidr`` stops them all.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from kube_ccm.providers.ippool.pools import GLOBAL, Pool, PoolError, Span, parse_span

log = logging.getLogger(__name__)

SEARCH_ORDER = "search-order"
SKIP_END_IPS = "skip-end-ips-in-cidr"
_POOL_PREFIXES = ("cidr-", "range-")
"""In kube-vip's lookup order: a namespace's cidr- key before its range- key."""
_SHARE_PREFIX = "allow-share-"
_INTERFACE_PREFIX = "interface-"
_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})
_KEYS_HELP = (
    "kube-vip-cloud-provider's keys are cidr-<namespace>, range-<namespace>, "
    "allow-share-<namespace>, interface-<namespace> (<namespace> or global), "
    f"{SEARCH_ORDER} and {SKIP_END_IPS}"
)
_logged: set[str] = set()


@dataclass(frozen=True)
class KubeVipConfig:
    """What one ConfigMap (or the cloud-config's ``pools``) says."""

    pools: tuple[Pool, ...]
    share: Mapping[str, bool] = field(default_factory=dict)
    """``allow-share-<name>`` by name (``global`` included)."""
    warnings: tuple[str, ...] = ()
    """Keys read but not acted on, one message each."""
    broken: Mapping[str, str] = field(default_factory=dict)
    """Pools (by name) whose keys are malformed, with the error naming the key; only
    when parsed with ``strict=False``."""

    def sharing_allowed(self, namespace: str) -> bool:
        """kube-vip's rule: ``allow-share-<namespace>``, else ``allow-share-global``."""
        if namespace in self.share:
            return self.share[namespace]
        return self.share.get(GLOBAL, False)


def _text(value: object) -> str:
    """A ConfigMap value is a string; a YAML boolean (``allow-share-x: true``, as in
    kube-vip's README, which the apiserver itself would refuse) reads as one."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _parse_bool(value: str, label: str) -> bool:
    text = value.strip()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise PoolError(
        f"{label}: {value!r} is not a boolean; write true or false "
        "(kube-vip-cloud-provider reads anything else as false)"
    )


def _skip_end_ips(data: Mapping[str, str], where: str) -> bool:
    value = data.get(SKIP_END_IPS)
    if value is None:
        return False  # kube-vip's default since its PR #155: every address of a CIDR
    text = value.strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise PoolError(f'{where} key {SKIP_END_IPS}: {value!r}; write "true" or "false"')


def _descending(data: Mapping[str, str], where: str) -> bool:
    text = data.get(SEARCH_ORDER, "").strip().lower()
    if text in ("", "asc", "desc"):
        return text == "desc"
    raise PoolError(
        f'{where} key {SEARCH_ORDER}: {data[SEARCH_ORDER]!r}; write "desc" (highest '
        'address first) or "asc" (lowest first, the default)'
    )


def _merge(spans: list[Span]) -> tuple[Span, ...]:
    """The union of ``spans``, in address order (IPv4 first), overlapping and
    adjacent spans joined."""
    merged: list[list[Span]] = []
    for span in sorted(spans, key=lambda s: (s.first.version, int(s.first))):
        last = merged[-1][-1] if merged else None
        if (
            last is not None
            and last.first.version == span.first.version
            and int(span.first) <= max(int(s.last) for s in merged[-1]) + 1
        ):
            merged[-1].append(span)
        else:
            merged.append([span])
    result: list[Span] = []
    for group in merged:
        if len(group) == 1:
            result.append(group[0])
            continue
        first = group[0].first
        last_address = max((s.last for s in group), key=int)
        result.append(Span(first, last_address, f"{first}-{last_address}"))
    return tuple(result)


def parse_value(value: str, label: str, *, skip_cidr_ends: bool = True) -> tuple[Span, ...]:
    """A ``cidr-``/``range-`` value: CIDRs and ranges, comma-separated, as one set.

    CIDRs are first joined into the fewest CIDRs that hold the same addresses (as
    kube-vip's IPSet does) and only then lose their ends when ``skip_cidr_ends``:
    ``10.0.0.0/25,10.0.0.128/25`` is one /24 without .0 and .255."""
    parts = [p for p in (v.strip() for v in value.split(",")) if p]
    if not parts:
        raise PoolError(f"{label} is empty; give CIDRs or ranges, comma-separated")
    spans: list[Span] = []
    v4: list[ipaddress.IPv4Network] = []
    v6: list[ipaddress.IPv6Network] = []
    for part in parts:
        span = parse_span(part, label, skip_cidr_ends=False)  # checks, with the key named
        if "/" not in part:
            spans.append(span)
            continue
        network = ipaddress.ip_network(part, strict=False)
        if network == ipaddress.IPv4Network("0.0.0.0/32"):
            raise PoolError(
                f"{label}: 0.0.0.0/32 is kube-vip's DHCP mode (the announcer asks a DHCP "
                "server for the address), which ippool does not support; give the "
                "addresses to hand out"
            )
        if isinstance(network, ipaddress.IPv4Network):
            v4.append(network)
        else:
            v6.append(network)
    joined = [str(n) for n in ipaddress.collapse_addresses(v4)]
    joined += [str(n) for n in ipaddress.collapse_addresses(v6)]
    spans.extend(parse_span(cidr, label, skip_cidr_ends=skip_cidr_ends) for cidr in joined)
    return _merge(spans)


def parse_kubevip(data: Mapping[str, object], where: str, *, strict: bool = True) -> KubeVipConfig:
    """Read ``data`` (a ConfigMap's ``data``); raises :class:`PoolError` naming the
    key for a malformed value. With ``strict=False`` a malformed pool or
    ``allow-share-<name>`` key only marks that name's pool broken
    (:attr:`KubeVipConfig.broken`); a malformed ``search-order`` or
    ``skip-end-ips-in-cidr``, which every pool of ``data`` follows, still raises."""
    text = {str(k): _text(v) for k, v in data.items()}
    skip_ends = _skip_end_ips(text, where)
    descending = _descending(text, where)
    warnings: list[str] = []
    share: dict[str, bool] = {}
    broken: dict[str, str] = {}
    keys: dict[str, dict[str, str]] = {}  # name -> {"cidr-": key, "range-": key}
    for key in sorted(text):
        if key in (SEARCH_ORDER, SKIP_END_IPS):
            continue
        prefix = next(
            (p for p in (*_POOL_PREFIXES, _SHARE_PREFIX, _INTERFACE_PREFIX) if key.startswith(p)),
            None,
        )
        if prefix is None:
            hint = (
                f" (did you mean {_SHARE_PREFIX}{key.removeprefix('allow-shared-')}?)"
                if key.startswith("allow-shared-")
                else ""
            )
            warnings.append(f"{where} key {key} is ignored{hint}: {_KEYS_HELP}")
            continue
        name = key.removeprefix(prefix)
        if not name:
            message = (
                f"{where}: key {key!r} names no namespace; write {prefix}<namespace> "
                f"or {prefix}{GLOBAL}"
            )
            if strict:
                raise PoolError(message)
            warnings.append(f"{message} (ignored)")
            continue
        if prefix == _SHARE_PREFIX:
            try:
                share[name] = _parse_bool(text[key], f"{where} key {key}")
            except PoolError as exc:
                if strict:
                    raise
                broken.setdefault(name, str(exc))
        elif prefix == _INTERFACE_PREFIX:
            warnings.append(
                f"{where} key {key} is ignored: ippool does not write kube-vip's "
                "kube-vip.io/serviceInterface annotation; set it on the Services, or "
                "kube-vip's vip_servicesinterface, instead"
            )
        else:
            keys.setdefault(name, {})[prefix] = key
    pools: list[Pool] = []
    for name, found in sorted(keys.items()):
        key = found.get("cidr-") or found["range-"]
        if len(found) > 1:
            warnings.append(
                f"{where} key {found['range-']} is ignored: {found['cidr-']} is read "
                "first, as kube-vip-cloud-provider does; merge them into one key"
            )
        label = f"{where} key {key}"
        try:
            spans = parse_value(text[key], label, skip_cidr_ends=skip_ends)
        except PoolError as exc:
            if strict:
                raise
            broken.setdefault(name, str(exc))
            continue
        if name in broken:
            continue  # its allow-share key is malformed
        pools.append(
            Pool(
                name,
                label,
                spans,
                allow_share=share.get(name, share.get(GLOBAL, False)),
                descending=descending,
            )
        )
    return KubeVipConfig(tuple(pools), share, tuple(warnings), broken)


def pools_from_kubevip(data: Mapping[str, object], where: str) -> list[Pool]:
    """The pools ``data`` defines; what it says that ippool does not act on is
    logged, once per message."""
    return list(read_kubevip(data, where).pools)


def read_kubevip(data: Mapping[str, object], where: str, *, strict: bool = True) -> KubeVipConfig:
    """:func:`parse_kubevip`, with the warnings and broken pools logged once per
    message (the ConfigMap is read again whenever it changes)."""
    config = parse_kubevip(data, where, strict=strict)
    for message in (*config.warnings, *config.broken.values()):
        if message not in _logged:
            _logged.add(message)
            log.warning("%s", message)
    return config


__all__ = [
    "GLOBAL",
    "SEARCH_ORDER",
    "SKIP_END_IPS",
    "KubeVipConfig",
    "parse_kubevip",
    "parse_value",
    "pools_from_kubevip",
    "read_kubevip",
]
