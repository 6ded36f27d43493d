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

* **A pod CIDR a Node brings counts only when it is one of this allocator's node
  CIDRs and no other Node holds it.** A Node writes its own ``spec.podCIDR`` when it
  registers (kubelet ``--pod-cidr``, or any node identity under NodeRestriction), so
  what it brings is not trusted: it counts as the Node's only when it lies in the
  cluster CIDR of its position, has the node mask size, and no other Node held it
  first (the older Node, at a restart). Anything else is counted for nobody and
  flagged with one Warning on the Node, ``PodCIDRNotInClusterCIDR`` (outside, or of
  another size, such as the whole cluster CIDR) or ``PodCIDRDuplicate`` (another
  Node's); the Node is left as it is and gets no other CIDR, as upstream leaves it.
  Upstream counts whatever lies in the range, a whole ``/16`` included, and refuses
  to start on a CIDR outside it (for a Node added later it logs ``failed to mark
  cidr[...] at idx [0] as occupied for node`` and goes on).
* **A reservation is kept until the Node shows it.** Upstream hands a Node new
  CIDRs when the cache has not caught up with its own patch yet (the patch then
  fails, the CIDRs are released); and after a patch whose outcome is unknown (a
  timeout) it keeps the CIDRs reserved until a restart. Here a Node's reserved
  CIDRs are the ones it is given again on a retry, and they are released only when
  the API server refused the patch, the Node shows other CIDRs, or it is deleted.
* **A full range is retried as soon as a CIDR is freed**, not only on the backoff.
* **A dual-stack allocation that fails on the second family gives back the first**
  (upstream keeps it until a restart).
* **A CIDR is freed only when the Node it counts for goes and no other Node holds
  it** (then it counts for that one). A Node that brought another Node's CIDR, or the
  whole cluster CIDR, frees nothing when it goes; upstream frees whatever the deleted
  Node showed, another Node's CIDR included, and hands it out again.
* **Nodes outside this CCM's scope** (``--node-selector``, another provider's
  providerID) get no CIDR here, but the CIDRs they hold are marked in use.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from kube_ccm.api import wellknown as wk
from kube_ccm.api.objects import Node
from kube_ccm.controllers._base import ControllerBase
from kube_ccm.controllers.cidrset import CIDROutOfRangeError, CIDRRangeFullError, CIDRSet, IPNetwork
from kube_ccm.controllers.errors import ApiCallError, SyncError
from kube_ccm.controllers.nodescope import EVERY_NODE, NodeScope
from kube_ccm.controllers.podcidrholders import HELD, PENDING, Standing
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


@dataclass(frozen=True)
class NodeIpamOptions:
    """The node IPAM settings, checked (``kube_ccm.app.options.validation.parse_node_ipam``);
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
        self._holders: dict[IPNetwork, str] = {}
        """Each node CIDR counted as in use (bar the Service range), and the one Node it
        is counted for: the Node it was reserved for, or the first Node seen holding it."""
        self._waiting: set[str] = set()
        """Nodes that found the range full: retried as soon as a CIDR is freed."""
        self._flagged = _Flagged()
        self._occupied_all = False
        self.queue = self._new_queue(wk.QUEUE_NODE_IPAM, default_controller_rate_limiter(), metrics)
        self._claimants: dict[IPNetwork, set[str]] = {}
        """Every cached Node showing a node CIDR, by CIDR (kept by the event handlers,
        so a Node is here before it is synced): who inherits a CIDR whose holder goes."""
        nodes.add_handler(
            on_add=self._on_add,
            on_update=lambda _old, new: self._on_add(new),
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
        for node in sorted(self._nodes.list(), key=_age):  # the older Node holds a duplicate
            if node.metadata.deletion_timestamp is None:
                self._occupy(node)
        self._occupied_all = True

    # -- events ------------------------------------------------------------------

    def _on_add(self, node: Node) -> None:
        for _, cidr in self._check(node)[0]:
            self._claimants.setdefault(cidr, set()).add(node.metadata.name)
        self.queue.add(node.metadata.name)

    def _on_delete(self, node: Node) -> None:
        name = node.metadata.name
        for _, cidr in self._check(node)[0]:
            claimants = self._claimants.get(cidr)
            if claimants is not None:
                claimants.discard(name)
                if not claimants:
                    del self._claimants[cidr]
        self._reserved.pop(name, None)
        self._flagged.seen.pop(name, None)
        self._waiting.discard(name)
        if self._release_all(name):
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
            self._reserved.pop(name, None)
            if self._release_all(name):
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
                self._release(reservation.cidrs, node=name)
            reservation = _Reservation(node.metadata.uid, self._allocate(node))
            self._reserved[name] = reservation
        await self._write(node, reservation)

    def _settled(self, node: Node) -> None:
        """The Node shows pod CIDRs: any other reservation for it goes back."""
        name = node.metadata.name
        reservation = self._reserved.pop(name, None)
        self._waiting.discard(name)
        if reservation is not None:
            shown = {c for _, c in self._check(node)[0]}
            unused = [c for c in reservation.cidrs if c not in shown]
            if unused and self._release(unused, node=name):
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
                raise SyncError(
                    f"failed to allocate a pod CIDR for node {node.metadata.name}: {exc}", exc
                ) from exc
        for cidr in allocated:
            self._holders[cidr] = node.metadata.name
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
                self._release(reservation.cidrs, node=name)
            raise ApiCallError(
                f"failed to update node {name} PodCIDR to {cidrs}: {error}", error
            ) from error

    # -- the CIDR sets -------------------------------------------------------------

    def _check(self, node: Node) -> tuple[list[tuple[int, IPNetwork]], list[str]]:
        """The Node's pod CIDRs that are node CIDRs of this allocator (in the cluster
        CIDR of their position, of its mask size), and what is wrong with the others."""
        valid: list[tuple[int, IPNetwork]] = []
        problems: list[str] = []
        for index, text in enumerate(node.spec.pod_cidrs):
            judged = self._judge(index, text)
            if isinstance(judged, str):
                problems.append(judged)
            else:
                valid.append((index, judged))
        return valid, problems

    def _judge(self, index: int, text: str) -> IPNetwork | str:
        """Pod CIDR ``text`` at ``index`` of a Node's list: a node CIDR of this
        allocator, or what is wrong with it."""
        try:
            cidr = ipaddress.ip_network(text, strict=False)
        except ValueError:
            return f"pod CIDR {text!r} is not a CIDR"
        if index >= len(self.sets):
            return (
                f"pod CIDR {text} is one more than --cluster-cidr has "
                f"({len(self.sets)}: the cluster went from dual-stack to single-stack?)"
            )
        cidr_set = self.sets[index]
        if cidr_set.contains(cidr):
            return cidr
        if cidr.version == cidr_set.cluster_cidr.version and cidr.overlaps(cidr_set.cluster_cidr):
            return (
                f"pod CIDR {text} is a /{cidr.prefixlen}, not one /{cidr_set.node_mask} "
                f"of cluster CIDR {cidr_set.cluster_cidr}"
            )
        return f"pod CIDR {text} is outside cluster CIDR {cidr_set.cluster_cidr}"

    def standing(self, node: Node) -> dict[str, Standing]:
        """Each of the Node's pod CIDRs: held (counted as this Node's), refused (with
        the reason its Warning gives), or pending (not judged yet: before the start-up
        count, or before this Node's sync). The route controller's
        :class:`~kube_ccm.controllers.podcidrholders.PodCIDRHolders`."""
        name = node.metadata.name
        result: dict[str, Standing] = {}
        for index, text in enumerate(node.spec.pod_cidrs):
            judged = self._judge(index, text)
            if isinstance(judged, str):
                result[text] = Standing(held=False, refusal=judged)
                continue
            holder = self._holders.get(judged) if self._occupied_all else None
            if holder == name:
                result[text] = HELD
            elif holder is not None:
                result[text] = Standing(
                    held=False, refusal=f"pod CIDR {judged} is already Node {holder}'s"
                )
            else:
                result[text] = PENDING
        return result

    def _occupy(self, node: Node) -> None:
        """Count the Node's pod CIDRs as in use: each one that is a node CIDR of this
        allocator and no other Node holds. Any other is counted for nobody, and a Node
        in scope gets one Warning for it (upstream counts whatever a Node brings: a
        Node registered with the whole cluster CIDR would fill the range, and free it,
        other Nodes' CIDRs included, when it goes)."""
        name = node.metadata.name
        valid, problems = self._check(node)
        duplicate = False
        for index, cidr in valid:
            holder = self._holders.get(cidr)
            if holder is None:
                self.sets[index].occupy(cidr)
                self._holders[cidr] = name
            elif holder != name:
                duplicate = True
                problems.append(f"pod CIDR {cidr} is already Node {holder}'s")
        if not problems or not self._scope.manages(node) or not self._flagged.first_time(node):
            return
        if duplicate:
            reason = wk.REASON_POD_CIDR_DUPLICATE
            fix = (
                "two Nodes with one pod CIDR get each other's pod traffic: delete this "
                "Node and let it register without spec.podCIDR (kubelet --pod-cidr), so "
                "kube-ccm gives it one of its own"
            )
        else:
            reason = wk.REASON_POD_CIDR_NOT_IN_CLUSTER_CIDR
            fix = (
                "if it was set by hand (kubelet --pod-cidr), re-register the Node without "
                "it (spec.podCIDRs cannot be changed), or fix --cluster-cidr and "
                "--node-cidr-mask-size"
            )
        message = (
            f"Node {name}: {'; '.join(problems)}. The Node is left as it is, and kube-ccm "
            f"does not count that CIDR as its own (nothing is reserved or freed for it): {fix}"
        )
        log.warning("%s", message)
        self._node_event(node, "Warning", reason, message)

    def _release(self, cidrs: Iterable[IPNetwork], *, node: str) -> bool:
        """Free each of ``cidrs`` that is counted as ``node``'s, unless another Node
        holds it too (then it is counted as that Node's); whether anything was freed.
        A CIDR counted for another Node, or for none, is left alone: a Node that brought
        someone else's CIDR, or the whole cluster CIDR, frees nothing when it goes."""
        freed = False
        for cidr in set(cidrs):
            if self._holders.get(cidr) != node:
                continue
            heir = self._heir(cidr, node)
            if heir is not None:
                self._holders[cidr] = heir
                log.info("CIDR %s of node %s stays in use: node %s holds it too", cidr, node, heir)
                continue
            del self._holders[cidr]
            if any(cidr.overlaps(s) for s in self.options.service_cidrs):
                continue  # kept out for the Services
            for cidr_set in self.sets:
                if cidr_set.contains(cidr):
                    cidr_set.release(cidr)
                    freed = True
                    log.info("Released CIDR %s of node %s", cidr, node)
        return freed

    def _release_all(self, node: str) -> bool:
        """Free every CIDR counted as ``node``'s (its own and those reserved for it)."""
        return self._release([c for c, h in self._holders.items() if h == node], node=node)

    def _heir(self, cidr: IPNetwork, node: str) -> str | None:
        """The oldest other cached Node (not being deleted) holding ``cidr`` as a node CIDR."""
        heirs = []
        for name in self._claimants.get(cidr, ()):
            other = self._nodes.get(name) if name != node else None
            if other is not None and other.metadata.deletion_timestamp is None:
                heirs.append(other)
        return min(heirs, key=_age).metadata.name if heirs else None

    def _status_event(self, node: Node, reason: str) -> None:
        message = wk.MESSAGE_NODE_STATUS_CHANGE.format(node=node.metadata.name, status=reason)
        self._node_event(node, "Warning", reason, message)


def _age(node: Node) -> tuple[str, str]:
    """Oldest first (RFC 3339 times in UTC sort as strings), then by name."""
    return (node.metadata.creation_timestamp or "", node.metadata.name)


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
    "NodeIpamController",
    "NodeIpamOptions",
    "patch_pod_cidrs",
]
