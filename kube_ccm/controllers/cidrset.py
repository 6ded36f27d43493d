"""The pod CIDRs of one cluster CIDR: upstream's ``nodeipam/ipam/cidrset.CidrSet``.

A cluster CIDR (``10.244.0.0/16``) cut into node CIDRs of one mask size (``/24``),
numbered 0 … ``max_cidrs - 1`` from the bottom. :meth:`CIDRSet.allocate_next` hands
out the first free one at or after the last one handed out (wrapping round, as
upstream, so a released CIDR is not reused at once); :meth:`CIDRSet.occupy` marks
a CIDR that is already in use (a Node's, the Service range) and
:meth:`CIDRSet.release` frees one. A CIDR of another size covers every node CIDR it
overlaps (a ``/23`` two ``/24``s, a ``/25`` the ``/24`` it lies in).

The used indices are a set, not upstream's bitmap: memory grows with the CIDRs in
use, not with the range, so an IPv4 range of any size costs nothing up front.
Upstream's limit for IPv6 (a node mask at most 16 bits longer than the cluster's,
``ErrCIDRSetSubNetTooBig``) is kept, so a configuration accepted here is accepted by
upstream's controller too.

Metrics, as upstream's ``cidrset/metrics.go`` (label ``clusterCIDR``): allocations
and releases (counters), the maximum and the fraction in use (gauges), and the
candidates tried per allocation (histogram). The maximum's name keeps upstream's
misspelling, ``cirdset``.
"""

from __future__ import annotations

import ipaddress

from kube_ccm.api import wellknown as wk
from kube_ccm.runtime.metrics import Metrics, exponential_buckets

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

CLUSTER_SUBNET_MAX_DIFF = 16
"""Upstream's ``clusterSubnetMaxDiff``: an IPv6 node mask at most this many bits
longer than the cluster CIDR's."""


class CIDRSetError(ValueError):
    """A CIDR set cannot be made (a node mask that does not fit the cluster CIDR)."""


class CIDRRangeFullError(Exception):
    """Every node CIDR of the range is in use (upstream's ``ErrCIDRRangeNoCIDRsRemaining``)."""

    def __init__(self, cluster_cidr: IPNetwork) -> None:
        super().__init__(
            "CIDR allocation failed; there are no remaining CIDRs left to allocate in the "
            f"accepted range {cluster_cidr}"
        )
        self.cluster_cidr = cluster_cidr


class CIDROutOfRangeError(ValueError):
    """A CIDR that does not overlap the cluster CIDR (or is of the other IP family)."""


class CIDRSet:
    """The node CIDRs of ``cluster_cidr`` with mask size ``node_mask``."""

    def __init__(
        self, cluster_cidr: IPNetwork, node_mask: int, metrics: Metrics | None = None
    ) -> None:
        bits = cluster_cidr.max_prefixlen
        if not cluster_cidr.prefixlen <= node_mask <= bits:
            raise CIDRSetError(
                f"node CIDR mask size /{node_mask} does not fit cluster CIDR {cluster_cidr}: "
                f"it must be between {cluster_cidr.prefixlen} and {bits}"
            )
        if (
            cluster_cidr.version == 6
            and node_mask - cluster_cidr.prefixlen > CLUSTER_SUBNET_MAX_DIFF
        ):
            raise CIDRSetError(
                "New CIDR set failed; the node CIDR size is too big: an IPv6 node mask may be "
                f"at most {CLUSTER_SUBNET_MAX_DIFF} bits longer than the cluster CIDR's "
                f"({cluster_cidr} allows up to /{cluster_cidr.prefixlen + CLUSTER_SUBNET_MAX_DIFF}"
                f", not /{node_mask})"
            )
        self.cluster_cidr = cluster_cidr
        self.node_mask = node_mask
        self.max_cidrs = 1 << (node_mask - cluster_cidr.prefixlen)
        self.label = str(cluster_cidr)
        self._shift = bits - node_mask
        self._base = int(cluster_cidr.network_address)
        self._used: set[int] = set()
        self._next_candidate = 0
        metrics = metrics or Metrics()
        labels = ("clusterCIDR",)
        self._allocations = metrics.counter(
            wk.METRIC_NODE_IPAM_CIDRSET_ALLOCATIONS,
            "Counter measuring total number of CIDR allocations.",
            labels,
        ).labels(self.label)
        self._releases = metrics.counter(
            wk.METRIC_NODE_IPAM_CIDRSET_RELEASES,
            "Counter measuring total number of CIDR releases.",
            labels,
        ).labels(self.label)
        self._usage = metrics.gauge(
            wk.METRIC_NODE_IPAM_CIDRSET_USAGE,
            "Gauge measuring percentage of allocated CIDRs.",
            labels,
        ).labels(self.label)
        self._tries = metrics.histogram(
            wk.METRIC_NODE_IPAM_CIDRSET_ALLOCATION_TRIES,
            "Number of endpoints added on each Service sync",  # sic, upstream's help text
            exponential_buckets(1, 5, 5),
            labels,
        ).labels(self.label)
        metrics.gauge(
            wk.METRIC_NODE_IPAM_CIDRSET_MAX_CIDRS,
            "Maximum number of CIDRs that can be allocated.",
            labels,
        ).labels(self.label).set(self.max_cidrs)
        self._usage.set(0)

    @property
    def allocated(self) -> int:
        """How many node CIDRs are in use."""
        return len(self._used)

    def _block(self, index: int) -> IPNetwork:
        return ipaddress.ip_network((self._base | (index << self._shift), self.node_mask))

    def allocate_next(self) -> IPNetwork:
        """The next free node CIDR, now in use; :class:`CIDRRangeFullError` when none is."""
        if len(self._used) >= self.max_cidrs:
            raise CIDRRangeFullError(self.cluster_cidr)
        candidate = self._next_candidate
        tries = 0
        while candidate in self._used:
            candidate = (candidate + 1) % self.max_cidrs
            tries += 1
        self._next_candidate = (candidate + 1) % self.max_cidrs
        self._used.add(candidate)
        self._allocations.inc()
        self._tries.observe(tries)
        self._update_usage()
        return self._block(candidate)

    def indices(self, cidr: IPNetwork) -> range:
        """The node CIDRs ``cidr`` overlaps; :class:`CIDROutOfRangeError` when none."""
        cluster = self.cluster_cidr
        if cidr.version != cluster.version or not cidr.overlaps(cluster):
            raise CIDROutOfRangeError(f"cidr {cidr} is out the range of cluster cidr {cluster}")
        if cidr.prefixlen <= cluster.prefixlen:  # it holds the whole cluster CIDR
            return range(self.max_cidrs)
        first = (int(cidr.network_address) - self._base) >> self._shift
        last = (int(cidr.broadcast_address) - self._base) >> self._shift
        return range(first, last + 1)

    def contains(self, cidr: IPNetwork) -> bool:
        """Whether ``cidr`` is one of this set's node CIDRs (right size, inside the range)."""
        return (
            cidr.version == self.cluster_cidr.version
            and cidr.prefixlen == self.node_mask
            and cidr.subnet_of(self.cluster_cidr)  # type: ignore[arg-type]
        )

    def is_used(self, cidr: IPNetwork) -> bool:
        """Whether every node CIDR ``cidr`` overlaps is in use."""
        return all(i in self._used for i in self.indices(cidr))

    def occupy(self, cidr: IPNetwork) -> None:
        """Mark ``cidr`` in use (again is fine); :class:`CIDROutOfRangeError` if outside."""
        for index in self.indices(cidr):
            if index not in self._used:
                self._used.add(index)
                self._allocations.inc()
        self._update_usage()

    def release(self, cidr: IPNetwork) -> None:
        """Mark ``cidr`` free (again is fine); :class:`CIDROutOfRangeError` if outside."""
        for index in self.indices(cidr):
            if index in self._used:
                self._used.discard(index)
                self._releases.inc()
        self._update_usage()

    def _update_usage(self) -> None:
        self._usage.set(len(self._used) / self.max_cidrs)


__all__ = [
    "CIDROutOfRangeError",
    "CIDRRangeFullError",
    "CIDRSet",
    "CIDRSetError",
    "IPNetwork",
]
