"""Node IPAM controller (``node-ipam-controller``, alias ``nodeipam``): pod CIDRs for Nodes.

The controller upstream's sample ``cmd/cloud-controller-manager`` adds to the
library's four, with its range allocator (``nodeipam/ipam/range_allocator.go``).
It runs with ``--allocate-node-cidrs`` (off by default) and gives each Node one
CIDR of each ``--cluster-cidr`` (two for dual-stack), of the size
``--node-cidr-mask-size-ipv4``/``-ipv6`` say (default /24 and /64):

* At start, once the Node cache is synced and before anything is allocated, every
  Node's ``spec.podCIDRs`` are marked in use, so a restart or a failover never gives
  a CIDR twice. ``--service-cluster-ip-range`` is marked in use too where it lies in
  a cluster CIDR.
* A Node without pod CIDRs gets the next free one of each cluster CIDR, written
  with one strategic-merge patch of ``spec.podCIDR`` (the first) and
  ``spec.podCIDRs``, tried three times.
* No CIDR left: a Warning ``CIDRNotAvailable`` on the Node (``Node <name> status is
  now: CIDRNotAvailable``, source ``cidrAllocator``) and a rate-limited retry. A
  patch that keeps failing: a Warning ``CIDRAssignmentFailed`` and a retry.
* A deleted Node's CIDRs are free again (also when it is only being deleted).

With ``--cidr-allocator-type=CloudAllocator`` the controller is the cloud allocator
instead (:mod:`kube_ccm.controllers.nodeipam_cloud`): the cloud's own CIDRs, nothing
cut from ``--cluster-cidr``.

Where kube-ccm differs, on purpose:

* **A Node's CIDR outside the cluster CIDRs is kept and flagged**, not fatal:
  upstream refuses to start (and, for a Node that gets one later, retries for
  ever). Such a CIDR was set by hand or by another allocator; it is left as it is,
  with one Warning ``PodCIDRNotInClusterCIDR`` on the Node saying what to fix.
* **A reservation is kept until the Node shows it.** Upstream hands a Node new
  CIDRs when the cache has not caught up with its own patch yet (the patch then
  fails, the CIDRs are released); and after a patch whose outcome is unknown (a
  timeout) it keeps the CIDRs reserved until a restart. Here a Node's reserved
  CIDRs are the ones it is given again on a retry, and they are released only when
  the API server refused the patch, the Node shows other CIDRs, or it is deleted.
* **A full range is retried as soon as a CIDR is freed**, not only on the backoff.
* **A dual-stack allocation that fails on the second family gives back the first**
  (upstream keeps it until a restart).
* **A CIDR is freed only when no other Node holds it** (two Nodes given the same
  CIDR by hand: deleting one does not free it for a third).
* **Nodes outside this CCM's scope** (``--node-selector``, another provider's
  providerID) get no CIDR here, but the CIDRs they hold are marked in use.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from kube_ccm.api import wellknown as wk
from kube_ccm.api.objects import Node
from kube_ccm.controllers._base import ControllerBase
from kube_ccm.controllers.cidrset import CIDROutOfRangeError, CIDRRangeFullError, CIDRSet, IPNetwork
from kube_ccm.controllers.nodescope import EVERY_NODE, NodeScope
from kube_ccm.runtime.client import ApiError, KubeClient
from kube_ccm.runtime.events import EventRecorder
from kube_ccm.runtime.informer import Informer
from kube_ccm.runtime.metrics import Metrics
from kube_ccm.runtime.ratelimit import default_controller_rate_limiter
from kube_ccm.runtime.resources import NODES, TypedClient
from kube_ccm.runtime.workqueue import run_workers

log = logging.getLogger(__name__)

CIDR_UPDATE_WORKERS = 30
"""Upstream's ``cidrUpdateWorkers``."""
CIDR_UPDATE_RETRIES = 3
"""Upstream's ``cidrUpdateRetries``: tries of one Node patch."""
REASON_POD_CIDR_NOT_IN_CLUSTER_CIDR = "PodCIDRNotInClusterCIDR"
"""kube-ccm's Warning: a Node holds a pod CIDR this allocator cannot account for."""


@dataclass(frozen=True)
class NodeIpamOptions:
    """The node IPAM settings, checked (``kube_ccm.app.validation.parse_node_ipam``);
    the cloud allocator (:mod:`kube_ccm.controllers.nodeipam_cloud`) uses only
    ``allocator`` and ``workers``."""

    cluster_cidrs: tuple[IPNetwork, ...]
    node_mask_sizes: tuple[int, ...]
    """One per cluster CIDR, in the same order."""
    service_cidrs: tuple[IPNetwork, ...] = ()
    """``--service-cluster-ip-range``: kept out of the allocation."""
    workers: int = CIDR_UPDATE_WORKERS
    allocator: str = wk.CIDR_ALLOCATOR_RANGE
    """``--cidr-allocator-type``: ``RangeAllocator`` (this module) or ``CloudAllocator``."""


@dataclass(frozen=True)
class _Reservation:
    uid: str
    cidrs: tuple[IPNetwork, ...]


@dataclass
class _Flagged:
    """Nodes warned about (once each, for as long as their pod CIDRs stay the same)."""

    seen: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def first_time(self, node: Node) -> bool:
        cidrs = node.spec.pod_cidrs
        if self.seen.get(node.metadata.name) == cidrs:
            return False
        self.seen[node.metadata.name] = cidrs
        return True


class NodeIpamController(ControllerBase):
    name = wk.CONTROLLER_NODE_IPAM

    def __init__(
        self,
        *,
        client: KubeClient,
        nodes: Informer[Node],
        recorder: EventRecorder,
        metrics: Metrics,
        options: NodeIpamOptions,
        scope: NodeScope = EVERY_NODE,
    ) -> None:
        super().__init__(client=client, recorder=recorder, scope=scope)
        if not options.cluster_cidrs or len(options.cluster_cidrs) != len(options.node_mask_sizes):
            raise ValueError("node IPAM needs a node mask size for each cluster CIDR")
        self.options = options
        self._nodes = nodes
        self.sets = tuple(
            CIDRSet(cidr, mask, metrics)
            for cidr, mask in zip(options.cluster_cidrs, options.node_mask_sizes, strict=True)
        )
        for service in options.service_cidrs:
            self._filter_out_service_range(service)
        self._reserved: dict[str, _Reservation] = {}
        """CIDRs allocated to a Node that its cached copy does not show yet."""
        self._waiting: set[str] = set()
        """Nodes that found the range full: retried as soon as a CIDR is freed."""
        self._flagged = _Flagged()
        self._occupied_all = False
        self.queue = self._new_queue(wk.QUEUE_NODE_IPAM, default_controller_rate_limiter(), metrics)
        nodes.add_handler(
            on_add=lambda n: self.queue.add(n.metadata.name),
            on_update=lambda _old, new: self.queue.add(new.metadata.name),
            on_delete=self._on_delete,
        )

    def _filter_out_service_range(self, service: IPNetwork) -> None:
        for cidr_set in self.sets:
            try:
                cidr_set.occupy(service)
            except CIDROutOfRangeError:
                continue  # another family, or no overlap
            log.info(
                "service CIDR %s is inside cluster CIDR %s: kept out of the node CIDRs",
                service,
                cidr_set.cluster_cidr,
            )

    async def run(self) -> None:
        await self._nodes.wait_synced()
        self.occupy_existing()
        log.info("Starting range CIDR allocator")
        await self._serve(run_workers(self.queue, self.sync, self.options.workers))

    def occupy_existing(self) -> None:
        """Mark every cached Node's pod CIDRs in use: before the first allocation, so no
        CIDR a Node holds is handed out again after a restart or a failover."""
        for node in self._nodes.list():
            if node.metadata.deletion_timestamp is None:
                self._occupy(node)
        self._occupied_all = True

    # -- events ------------------------------------------------------------------

    def _on_delete(self, node: Node) -> None:
        name = node.metadata.name
        reservation = self._reserved.pop(name, None)
        self._flagged.seen.pop(name, None)
        self._waiting.discard(name)
        freed = self._release(node.spec.pod_cidrs, exclude=name)
        if reservation is not None:
            freed |= self._release([str(c) for c in reservation.cidrs], exclude=name)
        if freed:
            self._wake_waiting()

    def _wake_waiting(self) -> None:
        for name in sorted(self._waiting):
            self.queue.add(name)
        self._waiting.clear()

    # -- sync --------------------------------------------------------------------

    async def sync(self, name: str) -> None:
        """Give the Node its pod CIDRs, or account for the ones it has."""
        assert self._occupied_all, "sync before occupy_existing"
        node = self._nodes.get(name)
        if node is None:
            return  # deleted: _on_delete released its CIDRs
        if node.metadata.deletion_timestamp is not None:
            reservation = self._reserved.pop(name, None)
            reserved = reservation.cidrs if reservation is not None else ()
            cidrs = [*node.spec.pod_cidrs, *(str(c) for c in reserved)]
            if self._release(cidrs, exclude=name):
                self._wake_waiting()
            return
        if node.spec.pod_cidrs:
            self._settled(node)
            return
        if not self._scope.manages(node):
            return
        reservation = self._reserved.get(name)
        if reservation is None or reservation.uid != node.metadata.uid:
            if reservation is not None:  # a Node of that name from before, never written
                self._release([str(c) for c in reservation.cidrs], exclude=name)
            reservation = _Reservation(node.metadata.uid, self._allocate(node))
            self._reserved[name] = reservation
        await self._write(node, reservation)

    def _settled(self, node: Node) -> None:
        """The Node shows pod CIDRs: any other reservation for it goes back."""
        name = node.metadata.name
        reservation = self._reserved.pop(name, None)
        self._waiting.discard(name)
        if reservation is not None:
            shown = set(node.spec.pod_cidrs)
            unused = [str(c) for c in reservation.cidrs if str(c) not in shown]
            if unused and self._release(unused, exclude=name):
                self._wake_waiting()
        self._occupy(node)

    def _allocate(self, node: Node) -> tuple[IPNetwork, ...]:
        allocated: list[IPNetwork] = []
        for cidr_set in self.sets:
            try:
                allocated.append(cidr_set.allocate_next())
            except CIDRRangeFullError as exc:
                for done, cidr in zip(self.sets, allocated, strict=False):
                    done.release(cidr)
                self._waiting.add(node.metadata.name)
                self._status_event(node, wk.REASON_CIDR_NOT_AVAILABLE)
                raise RuntimeError(
                    f"failed to allocate a pod CIDR for node {node.metadata.name}: {exc}"
                ) from exc
        return tuple(allocated)

    async def _write(self, node: Node, reservation: _Reservation) -> None:
        name = node.metadata.name
        cidrs = [str(c) for c in reservation.cidrs]
        try:
            await patch_pod_cidrs(self._api, name, cidrs)  # gone: _on_delete frees them
        except Exception as error:
            self._status_event(node, wk.REASON_CIDR_ASSIGNMENT_FAILED)
            # Refused: the Node is unchanged, so the CIDRs are free again. After a
            # timeout or a 5xx the patch may have landed: they stay reserved for it.
            refused = isinstance(error, ApiError) and _refused(error)
            if refused and self._reserved.get(name) is reservation:
                del self._reserved[name]
                self._release(cidrs, exclude=name)
            raise RuntimeError(
                f"failed to update node {name} PodCIDR to {cidrs}: {error}"
            ) from error

    # -- the CIDR sets -------------------------------------------------------------

    def _parsed(self, node: Node) -> list[IPNetwork] | None:
        """The Node's pod CIDRs, each in the cluster CIDR of its position; None (and
        a Warning, for a Node in scope) when one is not."""
        problem = None
        parsed: list[IPNetwork] = []
        for index, text in enumerate(node.spec.pod_cidrs):
            try:
                cidr = ipaddress.ip_network(text, strict=False)
            except ValueError:
                problem = f"pod CIDR {text!r} is not a CIDR"
                break
            if index >= len(self.sets):
                problem = (
                    f"pod CIDR {text} is one more than --cluster-cidr has "
                    f"({len(self.sets)}: the cluster went from dual-stack to single-stack?)"
                )
                break
            try:
                self.sets[index].indices(cidr)
            except CIDROutOfRangeError:
                problem = f"pod CIDR {text} is outside cluster CIDR {self.sets[index].cluster_cidr}"
                break
            parsed.append(cidr)
        if problem is None:
            return parsed
        if self._scope.manages(node) and self._flagged.first_time(node):
            message = (
                f"Node {node.metadata.name}: {problem}. It is kept as it is, and the range "
                "allocator cannot keep other Nodes' CIDRs apart from it: if it was set by "
                "hand, re-register the Node without it (spec.podCIDRs cannot be changed), "
                "or fix --cluster-cidr"
            )
            log.warning("%s", message)
            self._node_event(node, "Warning", REASON_POD_CIDR_NOT_IN_CLUSTER_CIDR, message)
        return None

    def _occupy(self, node: Node) -> None:
        parsed = self._parsed(node)
        for cidr_set, cidr in zip(self.sets, parsed or (), strict=False):
            cidr_set.occupy(cidr)

    def _release(self, texts: Sequence[str], *, exclude: str) -> bool:
        """Free ``texts`` (a Node's CIDRs) where they are in range and no other cached
        Node holds them; whether anything was freed."""
        wanted = set(texts)
        if not wanted:
            return False
        held = {
            c for n in self._nodes.list() if n.metadata.name != exclude for c in n.spec.pod_cidrs
        } | {str(c) for other, r in self._reserved.items() if other != exclude for c in r.cidrs}
        freed = False
        for text in wanted - held:
            try:
                cidr = ipaddress.ip_network(text, strict=False)
            except ValueError:
                continue
            for cidr_set in self.sets:
                try:
                    before = cidr_set.allocated
                    cidr_set.release(cidr)
                except CIDROutOfRangeError:
                    continue
                if cidr_set.allocated < before:
                    freed = True
                    log.info("Released CIDR %s of node %s", cidr, exclude)
        return freed

    def _status_event(self, node: Node, reason: str) -> None:
        message = wk.MESSAGE_NODE_STATUS_CHANGE.format(node=node.metadata.name, status=reason)
        self._node_event(node, "Warning", reason, message)


async def patch_pod_cidrs(api: TypedClient, name: str, cidrs: Sequence[str]) -> bool:
    """Write ``cidrs`` to the Node's ``spec.podCIDR`` (the first) and ``spec.podCIDRs``
    with one strategic-merge patch, tried :data:`CIDR_UPDATE_RETRIES` times (not again
    once the API server refused it). True: written; False: the Node is gone; else the
    last error is raised."""
    patch = {"spec": {"podCIDR": cidrs[0], "podCIDRs": list(cidrs)}}
    error: Exception | None = None
    for _ in range(CIDR_UPDATE_RETRIES):
        try:
            await api.patch(NODES, name, patch)
        except ApiError as exc:
            if exc.not_found:
                return False
            error = exc
            if _refused(exc):
                break  # the same patch would be refused again
            continue
        except Exception as exc:
            error = exc
            continue
        log.info("Set node %s PodCIDR to %s", name, list(cidrs))
        return True
    assert error is not None
    raise error


def _refused(error: ApiError) -> bool:
    """The API server answered and did not apply the patch (not a timeout, a 5xx, a
    conflict or throttling, after which it may have, or may on a retry)."""
    return 400 <= error.status < 500 and error.status not in (408, 409, 429)


__all__ = [
    "CIDR_UPDATE_RETRIES",
    "CIDR_UPDATE_WORKERS",
    "REASON_POD_CIDR_NOT_IN_CLUSTER_CIDR",
    "NodeIpamController",
    "NodeIpamOptions",
    "patch_pod_cidrs",
]
