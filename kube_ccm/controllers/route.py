"""Route controller (``node-route-controller``): cloud routes for nodes' pod CIDRs.

Every ``--route-reconciliation-period`` (default 10 s, measured from the start of
each pass) the controller lists the cloud's routes and the cached nodes, then:

* creates a route for every entry of a node's ``spec.podCIDRs`` that has none
  (name hint: the node's UID), and re-creates one whose target addresses are
  stale; a pod CIDR outside the cluster CIDRs gets no route but a Warning
  ``FailedToCreateRoute`` (kube-ccm's choice: upstream creates it, and then can
  never delete it, since it only deletes inside the cluster CIDRs);
* routes a pod CIDR only when it is trustworthy (see "Which pod CIDRs are routed"
  below): a refused one gets no route, its route if it had one is deleted, and a
  Warning ``FailedToCreateRoute`` says why (recorded every pass, so its count grows
  as upstream's does for a create that keeps failing; logged at warning level once
  per refusal and again when its reason changes, at debug level on the other passes);
* deletes the routes it is *responsible* for — destination inside a cluster
  CIDR (``--cluster-cidr``) — that are blackholes, point at unknown nodes, or
  carry a CIDR the node no longer has; routes outside the cluster CIDRs are
  never touched;
* except a blackhole route that a Node still in the cluster should have (its
  pod CIDR, its name): upstream deletes it and creates it again on the next pass,
  forever, for as long as such a Node exists (a Ready Node whose instance is
  gone). Here it is kept, and a Warning ``RouteBlackholed`` is logged and
  recorded once per Node, until the route is healthy again or the Node is gone;
  the lifecycle controller deletes the Node once its instance is confirmed gone;
* at most 200 create/delete calls in flight; a failed create is a Warning
  ``FailedToCreateRoute`` on the Node and is retried next pass;
* sets the Node condition ``NetworkUnavailable``: ``False``/``RouteCreated``
  when all its routes exist, ``True``/``NoRouteCreated`` otherwise.

Which pod CIDRs are routed, a deliberate difference from upstream. A route is a
grant: the cloud sends the CIDR's traffic to the Node. Upstream routes whatever a Node
shows in ``spec.podCIDRs``, but a Node writes that itself when it registers (kubelet
``--pod-cidr``, or any client with a node identity under NodeRestriction), so a node
could take another Node's pod traffic (a second route for the same CIDR, where the
cloud keeps one of the two), every Node's (the whole cluster CIDR) or a block nobody
was given. Here:

* **node IPAM's range allocator in this daemon** (``--allocate-node-cidrs`` and
  ``node-ipam-controller`` enabled): only a CIDR the allocator counts as the Node's
  (it gave it, or took it in as the Node's: one node CIDR of the range no other Node
  held first) is routed, read through
  :class:`~kube_ccm.controllers.podcidrholders.PodCIDRHolders`. A CIDR it refused gets
  the Warning with the allocator's reason. One it has not judged yet (at start, before
  its first count; a Node it has not synced) waits: no route is created or deleted
  for it and the Node's condition is left alone; the watch-based mode asks for
  another pass itself, as counting changes no Node.
* **node IPAM elsewhere** (kube-controller-manager, a CNI, the cloud allocator): the
  CIDR must lie in ``--cluster-cidr``, have the node mask size where
  ``--node-cidr-mask-size*`` gives it, and must not equal or overlap an older Node's
  CIDR (older by ``creationTimestamp``, then name; every Node counts, this CCM's or
  not). The later Node gets no route; the older one keeps its route. Residual risk:
  a node that registers first with a free block (or, with no mask size given, a wide
  one) holds it; the IPAM mode closes that.

No switch brings upstream's rule back: the only clusters that need overlapping pod
CIDRs routed are misconfigured ones (docs/operations.md, "Which pod CIDRs get a
route").

The event-driven mode behind ``CloudControllerManagerWatchBasedRoutesReconciliation``
runs the same reconcile from a single-key queue ``Routes``: a Node added or deleted,
a change of its ``spec.podCIDRs`` or ``status.addresses``, and the informer's resync
(``--min-resync-period``, 12-24 h) each ask for a pass; nothing else does. Every
request goes through a token bucket of one pass per 10 s whose wait is capped at
10 s, so a burst of events makes a pass at once and at most one more within 10 s;
a failed pass is retried the same way. ``route_controller_route_sync_total``
counts passes (attempts, failed ones too) in both modes, as upstream. One deviation:
the first pass runs at start even with no Node (upstream waits for a Node event or
the resync), so routes of Nodes deleted while no leader ran are cleaned up at once.
"""

from __future__ import annotations

import asyncio
import bisect
import datetime
import functools
import ipaddress
import itertools
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from kube_ccm.api import wellknown as wk
from kube_ccm.api.helpers import get_node_condition
from kube_ccm.api.objects import Node
from kube_ccm.cloudprovider import CloudProvider, Route, Routes
from kube_ccm.controllers._base import ControllerBase, supported
from kube_ccm.controllers.errors import CloudCallError
from kube_ccm.controllers.nodescope import EVERY_NODE, NodeScope
from kube_ccm.controllers.podcidrholders import PodCIDRHolders
from kube_ccm.runtime.client import KubeClient
from kube_ccm.runtime.events import EventRecorder
from kube_ccm.runtime.informer import Informer
from kube_ccm.runtime.metrics import Metrics
from kube_ccm.runtime.ratelimit import BucketRateLimiter, MaxWaitRateLimiter
from kube_ccm.runtime.resources import NODES
from kube_ccm.runtime.workqueue import RateLimitingQueue, run_workers

log = logging.getLogger(__name__)

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
MAX_CONCURRENT_CALLS = 200
MIN_ROUTE_SYNC_INTERVAL = 10.0
"""Upstream's ``minRouteResyncInterval`` (KEP 5237): in the watch-based mode, a burst
of Node events makes at most one reconcile per 10 s, the default period's pace."""


@dataclass(frozen=True)
class RouteControllerOptions:
    cluster_name: str = "kubernetes"
    cluster_cidrs: tuple[IPNetwork, ...] = ()
    node_mask_sizes: tuple[int | None, ...] = ()
    """Without node IPAM here: the node CIDR mask size of each cluster CIDR (same order)
    where ``--node-cidr-mask-size*`` gives it, else None (any size inside is routed)."""
    reconciliation_period: float = 10.0
    watch_based: bool = False
    """The ``CloudControllerManagerWatchBasedRoutesReconciliation`` feature gate."""
    min_sync_interval: float = MIN_ROUTE_SYNC_INTERVAL
    """Watch-based mode: at most one pass per this many seconds (tests shorten it)."""
    resync_period: float | None = None
    """Watch-based mode: the Node informer's resync for this controller (upstream's
    ``--min-resync-period`` jittered, 12-24 h): a pass when nothing changed, to clean up."""


Action = Literal["keep", "add", "update", "wait"]
"""``wait``: node IPAM has not judged the CIDR yet; its route is neither made nor
deleted, and the Node's condition is left as it is, until a later pass."""


RefusalsOrWait = tuple[dict[tuple[str, str], str], set[tuple[str, str]]]
_FIX = (
    "delete this Node and let it register without spec.podCIDR (kubelet --pod-cidr), so "
    "that the pod CIDR allocator gives it one of its own"
)


@functools.lru_cache(maxsize=1 << 16)
def _span(cidr: str) -> tuple[int, int, int, int] | None:
    """``cidr`` as (IP version, first address, last address, prefix length), or None
    when it does not parse (cached: the same few thousand texts come every pass)."""
    try:
        return _network_span(ipaddress.ip_network(cidr, strict=False))
    except ValueError:
        return None


def _network_span(network: IPNetwork) -> tuple[int, int, int, int]:
    first = int(network.network_address)
    size = network.max_prefixlen - network.prefixlen
    return network.version, first, first | ((1 << size) - 1), network.prefixlen


def _age(node: Node) -> tuple[str, str]:
    """Oldest first (RFC 3339 times in UTC sort as strings), then by name."""
    return (node.metadata.creation_timestamp or "", node.metadata.name)


def _addresses_equal(route: Route, node: Node) -> bool:
    wanted = {(a.type, a.address) for a in node.status.addresses}
    have = {(a.type, a.address) for a in route.target_node_addresses}
    return len(route.target_node_addresses) == len(node.status.addresses) and wanted == have


class RouteController(ControllerBase):
    name = wk.CONTROLLER_NODE_ROUTE

    def __init__(
        self,
        *,
        client: KubeClient,
        nodes: Informer[Node],
        cloud: CloudProvider,
        recorder: EventRecorder,
        metrics: Metrics,
        options: RouteControllerOptions,
        scope: NodeScope = EVERY_NODE,
        holders: PodCIDRHolders | None = None,
    ) -> None:
        super().__init__(client=client, recorder=recorder, scope=scope)
        self._holders = holders
        """Node IPAM's holders where this daemon runs the range allocator: then only a
        CIDR it counts as the Node's is routed. None: the checks of :meth:`_judge_all`."""
        self._routes: Routes = supported(cloud.routes(), "routes")
        if not options.cluster_cidrs:
            raise ValueError("--cluster-cidr is required when routes are configured")
        self._nodes = nodes
        self.options = options
        self._cluster_spans = [(_network_span(c), c) for c in options.cluster_cidrs]
        self._sync_total = metrics.counter(
            wk.METRIC_ROUTE_SYNC_TOTAL,
            "A metric counting the amount of times routes have been synced with the cloud "
            "provider.",
        )
        self._blackholed: set[str] = set()
        """Nodes warned about a blackhole route (once each)."""
        self._refusals_logged: dict[tuple[str, str], str] = {}
        """(node, pod CIDR) → the refusal last logged at warning level: a refusal is
        logged once per change, its Event is recorded every pass (see :meth:`_refuse`)."""
        self.queue: RateLimitingQueue[str] | None = None
        if options.watch_based:
            # A bucket of one pass per interval, its wait capped at the interval: under a
            # stream of Node events a pass runs at once or within the interval, never
            # more than once per interval (upstream's New, KEP 5237).
            interval = options.min_sync_interval
            limiter = MaxWaitRateLimiter(BucketRateLimiter(1 / interval, 1), interval)
            self.queue = self._new_queue(wk.QUEUE_ROUTES, limiter, metrics)
            nodes.add_handler(
                on_add=lambda _n: self._enqueue(),
                on_update=self._on_node_update,
                on_delete=lambda _n: self._enqueue(),
                resync_period=options.resync_period,
            )

    def _enqueue(self) -> None:
        """Ask for a pass, through the bucket (every request takes a token)."""
        if self.queue is not None:
            self.queue.add_rate_limited(wk.ROUTES_QUEUE_KEY)

    def _on_node_update(self, old: Node, new: Node) -> None:
        # An unchanged resourceVersion is the informer's periodic resync: upstream's
        # cleanup pass (a route deleted behind our back, a stale one).
        if (
            old.spec.pod_cidrs != new.spec.pod_cidrs
            or old.status.addresses != new.status.addresses
            or old.metadata.resource_version == new.metadata.resource_version
        ):
            self._enqueue()

    async def run(self) -> None:
        await self._nodes.wait_synced()
        if self.queue is not None:
            queue = self.queue
            if not len(queue):  # no Node's add asked for the first pass: ask for it
                self._enqueue()

            async def reconcile_key(_key: str) -> None:
                # A pass per request, and none after it: the next one comes from a Node
                # event or the resync. A failed pass is retried through the bucket.
                await self.reconcile()

            await self._serve(run_workers(queue, reconcile_key, 1))
            return
        while not self._stopping:
            started = time.monotonic()
            try:
                await self.reconcile()
            except Exception as exc:
                log.error("route reconciliation failed: %s", exc)
            elapsed = time.monotonic() - started
            await asyncio.sleep(max(0.0, self.options.reconciliation_period - elapsed))

    # -- reconcile -------------------------------------------------------------------

    def _inside_cluster(self, cidr: str) -> bool:
        span = _span(cidr)
        return span is not None and any(
            s[0] == span[0] and s[1] <= span[1] and span[2] <= s[2] for s, _ in self._cluster_spans
        )

    def _outside_message(self, node: Node, cidr: str) -> str:
        cluster = ",".join(str(c) for c in self.options.cluster_cidrs)
        return (
            f"pod CIDR {cidr} of node {node.metadata.name} is outside --cluster-cidr {cluster}: "
            "not creating a route (it could never be cleaned up); fix the node's podCIDRs "
            "or --cluster-cidr"
        )

    def _refusals(self, nodes: Sequence[Node], every_node: Sequence[Node]) -> RefusalsOrWait:
        """The pod CIDRs of the managed ``nodes`` that get no route, each with the Warning
        that says why, and those that wait for node IPAM's verdict (see the module
        docstring: a route rests on what kube-ccm or an admin wrote, not on the Node)."""
        refused: dict[tuple[str, str], str] = {}
        waiting: set[tuple[str, str]] = set()
        for node in nodes:
            for cidr in node.spec.pod_cidrs:
                if not self._inside_cluster(cidr):
                    refused[(node.metadata.name, cidr)] = self._outside_message(node, cidr)
        if self._holders is not None:
            for node in nodes:
                for cidr, standing in self._holders.standing(node).items():
                    key = (node.metadata.name, cidr)
                    if key in refused or standing.held:
                        continue
                    if standing.pending:
                        waiting.add(key)
                        continue
                    refused[key] = (
                        f"pod CIDR {cidr} of node {node.metadata.name} is not the Node's in "
                        f"node IPAM: {standing.refusal}: not creating a route. A Node "
                        "writes its own spec.podCIDRs when it registers, and only a CIDR "
                        f"kube-ccm gave it (or took in as its own) is routed; {_FIX}"
                    )
            return refused, waiting
        managed = {n.metadata.name for n in nodes}
        for node, cidr, problem in self._judge_all(every_node):
            key = (node.metadata.name, cidr)
            if node.metadata.name in managed and key not in refused:
                refused[key] = (
                    f"pod CIDR {cidr} of node {node.metadata.name} {problem}: not creating a "
                    "route. A Node writes its own spec.podCIDRs when it registers, so a "
                    "route that would take another Node's pod traffic, or more than one "
                    f"node CIDR, is refused; {_FIX}"
                )
        return refused, waiting

    def _judge_all(self, every_node: Sequence[Node]) -> list[tuple[Node, str, str]]:
        """Without node IPAM here (kube-controller-manager allocates, or a CNI): each
        pod CIDR of the wrong mask size (where ``--node-cidr-mask-size*`` gives it), and
        each that equals or overlaps an older Node's (by creationTimestamp, then name;
        every Node counts, this CCM's or not), with what is wrong with it. The older
        Node keeps its route: it was there first, and had its route first."""
        problems: list[tuple[Node, str, str]] = []
        taken: dict[int, list[tuple[int, int, str, str]]] = {4: [], 6: []}
        """Per IP version, the accepted CIDRs as sorted (first, last, node, cidr): they
        never overlap one another, so one bisection finds an overlap."""
        clusters = self._cluster_spans
        masks = self.options.node_mask_sizes
        for node in sorted(every_node, key=_age):
            for cidr in node.spec.pod_cidrs:
                span = _span(cidr)
                if span is None:
                    continue  # unparsable: refused as outside the cluster CIDR
                version, first, last, prefixlen = span
                index, cluster = next(
                    (
                        (i, c)
                        for i, (s, c) in enumerate(clusters)
                        if s[0] == version and s[1] <= first and last <= s[2]
                    ),
                    (-1, None),
                )
                if cluster is None:
                    continue  # outside the cluster CIDR: refused as such
                mask = masks[index] if index < len(masks) else None
                if mask is not None and prefixlen != mask:
                    problems.append(
                        (
                            node,
                            cidr,
                            f"is a /{prefixlen}, not one /{mask} of cluster CIDR "
                            f"{cluster} (--node-cidr-mask-size)",
                        )
                    )
                    continue
                intervals = taken[version]
                at = bisect.bisect_left(intervals, (first,))
                clash = intervals[at - 1 : at] if at and intervals[at - 1][1] >= first else []
                for later in itertools.islice(intervals, at, None):  # a wider one: several
                    if later[0] > last or (clash and clash[-1][2] != node.metadata.name):
                        break
                    clash.append(later)
                other = next((c for c in clash if c[2] != node.metadata.name), None)
                if other is not None:
                    relation = "is" if other[:2] == (first, last) else "overlaps"
                    problems.append(
                        (
                            node,
                            cidr,
                            f"{relation} Node {other[2]}'s pod CIDR {other[3]} (Node "
                            f"{other[2]} registered first)",
                        )
                    )
                    continue
                if clash:
                    continue  # the Node's own CIDRs overlap each other: nothing to guard
                bisect.insort(intervals, (first, last, node.metadata.name, cidr))
        return problems

    def _warn(self, node: Node, reason: str, message: str) -> None:
        """``message`` as a warning in the log and as a Warning Event on ``node``."""
        log.warning("%s", message)
        self._node_event(node, "Warning", reason, message)

    def _refuse(self, node: Node, cidr: str, message: str) -> None:
        """A refused pod CIDR, on every pass: the Warning Event each time (the recorder
        folds the repeats into one Event's count, as upstream's repeated
        ``FailedToCreateRoute``), the log line at warning level only when the refusal
        is new or says something new, else at debug level."""
        key = (node.metadata.name, cidr)
        if self._refusals_logged.get(key) != message:
            self._refusals_logged[key] = message
            log.warning("%s", message)
        else:
            log.debug("%s", message)
        self._node_event(node, "Warning", wk.REASON_FAILED_TO_CREATE_ROUTE, message)

    def _responsible(self, route: Route) -> bool:
        try:
            network = ipaddress.ip_network(route.destination_cidr, strict=False)
        except ValueError:
            log.warning(
                "ignoring route %r: unparsable destination %r", route.name, route.destination_cidr
            )
            return False
        return any(
            network.version == cidr.version
            and (network.network_address in cidr or network.broadcast_address in cidr)
            for cidr in self.options.cluster_cidrs
        )

    def _wanted_blackholes(self, listed: Sequence[Route], nodes: Sequence[Node]) -> list[Route]:
        """Blackhole routes that a Node in the cluster should have: kept, and warned
        about once per Node (see the module docstring)."""
        pod_cidrs = {n.metadata.name: (n, n.spec.pod_cidrs) for n in nodes}
        wanted = []
        for route in listed:
            node, cidrs = pod_cidrs.get(route.target_node, (None, ()))
            if node is None or not route.blackhole or route.destination_cidr not in cidrs:
                continue
            wanted.append(route)
            if node.metadata.name in self._blackholed:
                continue
            self._blackholed.add(node.metadata.name)
            message = (
                f"route {route.name} for pod CIDR {route.destination_cidr} of node "
                f"{node.metadata.name} is a blackhole: the cloud has no running instance "
                "behind it. Keeping the route rather than deleting and re-creating it on "
                "every pass; it is deleted with the Node once the instance is confirmed gone"
            )
            self._warn(node, wk.REASON_ROUTE_BLACKHOLED, message)
        # Forget Nodes whose routes recovered or that left, so a new blackhole warns again.
        self._blackholed &= {r.target_node for r in wanted}
        return wanted

    async def reconcile(self) -> None:
        self._sync_total.inc()
        cluster = self.options.cluster_name
        try:
            listed = await self._routes.list_routes(cluster)
        except Exception as exc:
            raise CloudCallError(f"error listing routes: {exc}", exc) from exc
        nodes, unmanaged = [], set()
        for node in self._nodes.list():
            if self._scope.manages(node):
                nodes.append(node)
            else:  # another CCM's node: its routes are neither made nor deleted here
                unmanaged.add(node.metadata.name)
        by_node: dict[str, dict[str, Route]] = {}
        for route in listed:
            if route.target_node:
                by_node.setdefault(route.target_node, {})[route.destination_cidr] = route
        actions: dict[str, dict[str, Action]] = {}
        refused, waiting = self._refusals(nodes, self._nodes.list())
        for node in nodes:
            existing = by_node.get(node.metadata.name, {})
            node_actions = (
                actions.setdefault(node.metadata.name, {})
                if (node.spec.pod_cidrs or existing)
                else None
            )
            if node_actions is None:
                continue
            for cidr in node.spec.pod_cidrs:
                key = (node.metadata.name, cidr)
                if key in refused:
                    # No route, and any route it has for that CIDR goes (when it lies
                    # in the cluster CIDR, so is ours to delete): refuse it loudly.
                    self._refuse(node, cidr, refused[key])
                    node_actions[cidr] = "add"
                    continue
                if key in waiting:
                    node_actions[cidr] = "wait"
                    continue
                current = existing.get(cidr)
                if current is None:
                    node_actions[cidr] = "add"
                elif not current.enable_node_addresses or _addresses_equal(current, node):
                    node_actions[cidr] = "keep"
                else:
                    node_actions[cidr] = "update"
        # Forget refusals that ended, so that one coming back is logged again.
        for key in self._refusals_logged.keys() - refused.keys():
            del self._refusals_logged[key]
        if waiting:
            log.info(
                "%d pod CIDR(s) wait for node IPAM to count them (e.g. %s of node %s): "
                "no route yet",
                len(waiting),
                *min(waiting)[::-1],
            )

        gate = asyncio.Semaphore(MAX_CONCURRENT_CALLS)

        async def delete(route: Route) -> None:
            async with gate:
                try:
                    await self._routes.delete_route(cluster, route)
                    log.info("deleted route %s %s", route.name, route.destination_cidr)
                except Exception as exc:
                    log.error(
                        "could not delete route %s %s: %s", route.name, route.destination_cidr, exc
                    )

        wanted_blackholes = [
            r
            for r in self._wanted_blackholes(listed, nodes)
            if (r.target_node, r.destination_cidr) not in refused
        ]
        deletes = [
            delete(route)
            for route in listed
            if self._responsible(route)
            and route.target_node not in unmanaged
            and route not in wanted_blackholes
            and (
                route.blackhole
                or actions.get(route.target_node, {}).get(route.destination_cidr, "add")
                not in ("keep", "wait")
            )
        ]
        deleting = asyncio.gather(*deletes)
        if listed and listed[0].enable_node_addresses:
            await deleting

        node_by_name = {n.metadata.name: n for n in nodes}

        async def create(node: Node, cidr: str) -> None:
            async with gate:
                started = time.monotonic()
                route = Route(
                    target_node=node.metadata.name,
                    destination_cidr=cidr,
                    target_node_addresses=node.status.addresses,
                )
                try:
                    await self._routes.create_route(cluster, node.metadata.uid, route)
                except Exception as exc:
                    message = wk.MESSAGE_FAILED_TO_CREATE_ROUTE.format(
                        name_hint=node.metadata.uid,
                        cidr=cidr,
                        node=node.metadata.name,
                        duration=f"{time.monotonic() - started:.3f}s",
                        error=exc,
                    )
                    self._warn(node, wk.REASON_FAILED_TO_CREATE_ROUTE, message)
                    return
                actions[node.metadata.name][cidr] = "keep"

        await asyncio.gather(
            *(
                create(node_by_name[name], cidr)
                for name, node_actions in actions.items()
                for cidr, action in node_actions.items()
                if action not in ("keep", "wait") and (name, cidr) not in refused
            )
        )
        await deleting
        await asyncio.gather(
            *(
                self._set_network_unavailable(
                    node_by_name[name],
                    created=bool(node_actions) and all(a == "keep" for a in node_actions.values()),
                )
                for name, node_actions in actions.items()
                if "wait" not in node_actions.values()
            )
        )
        if waiting and self.queue is not None:
            self._enqueue()  # node IPAM changes no Node when it counts a CIDR: ask again

    async def _set_network_unavailable(self, node: Node, *, created: bool) -> None:
        status = wk.CONDITION_FALSE if created else wk.CONDITION_TRUE
        reason = wk.REASON_ROUTE_CREATED if created else wk.REASON_NO_ROUTE_CREATED
        message = wk.MESSAGE_ROUTE_CREATED if created else wk.MESSAGE_NO_ROUTE_CREATED
        current = get_node_condition(node, wk.NODE_CONDITION_NETWORK_UNAVAILABLE)
        if current is not None and current.status == status and current.reason == reason:
            return
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        condition: dict[str, Any] = {
            "type": wk.NODE_CONDITION_NETWORK_UNAVAILABLE,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": now,
            "lastHeartbeatTime": now,
        }
        try:
            await self._api.patch(
                NODES,
                node.metadata.name,
                {"status": {"conditions": [condition]}},
                subresource="status",
            )
        except Exception as exc:
            log.error("node %s: updating NetworkUnavailable failed: %s", node.metadata.name, exc)


__all__ = [
    "IPNetwork",
    "RouteController",
    "RouteControllerOptions",
]
