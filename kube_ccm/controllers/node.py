"""The cloud node controller (``cloud-node-controller``).

Initialises Nodes that a kubelet with ``--cloud-provider=external`` registered
with the ``node.cloudprovider.kubernetes.io/uninitialized`` taint: it asks the
cloud about the instance once, then in **one write** sets ``spec.providerID``,
the zone/region/instance-type labels and the provider's additional labels and
removes the taint, then writes ``status.addresses``. Afterwards it keeps the
addresses current (every ``--node-status-update-frequency``) and the GA
topology labels in step with their beta twins.

Read top to bottom: construction and event handlers, the worker loop, ``sync``,
initialisation, the periodic address loop, then small helpers.

Where we differ from upstream on purpose:

* Upstream re-reads the node from its cache and PUTs the whole object. Our
  cache holds trimmed nodes, so the single initialisation write is a
  strategic-merge patch carrying ``metadata.resourceVersion`` as a
  precondition: the same all-or-nothing write with the same optimistic
  concurrency (a 409 on a stale version), without an extra GET.
* Every cloud call has a deadline (``--cloud-call-timeout``, applied by the guarded
  provider): a provider that hangs costs one worker that long, then the node is
  retried with backoff.
* A ``alpha.kubernetes.io/provided-node-ip`` (the kubelet's ``--node-ip``) that the
  cloud's addresses cannot satisfy is also a Warning Event on the Node
  (``ProvidedNodeIPNotValid``, the same message as the log line, saying what to fix):
  upstream only logs it, and a real kubelet's Node then waits tainted with nothing
  to see in ``kubectl describe node``. Repeats fold into the Event's count.
* The address write carries the Node's resourceVersion (upstream's has none, and
  loses a Hostname the kubelet wrote since the copy it computed from), and a
  kubelet's status update landing after it (whose merge puts the kubelet's Hostname
  first) is put back in the cloud's order at once from the initialisation's answer,
  once, without a cloud call (upstream keeps it so). See docs/design.md.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from kube_ccm.api import wellknown as wk
from kube_ccm.api.helpers import has_taint
from kube_ccm.api.objects import Node, NodeAddress
from kube_ccm.cloudprovider import CloudProvider, InstanceMetadata
from kube_ccm.controllers._base import ControllerBase
from kube_ccm.controllers.instances import CloudInstances
from kube_ccm.controllers.nodescope import EVERY_NODE, NodeScope
from kube_ccm.controllers.nodeutil import (
    NodeIPError,
    additional_labels_to_add,
    addresses_changed,
    check_node_ip,
    desired_addresses,
    ga_label_fixes,
)
from kube_ccm.runtime.client import ApiError, KubeClient
from kube_ccm.runtime.events import EventRecorder
from kube_ccm.runtime.informer import Informer
from kube_ccm.runtime.metrics import Metrics
from kube_ccm.runtime.ratelimit import default_controller_rate_limiter
from kube_ccm.runtime.resources import NODES
from kube_ccm.runtime.shard import WHOLE, Shard
from kube_ccm.runtime.workqueue import run_workers

log = logging.getLogger(__name__)

_DELAY_BUCKETS = (1.0, 4.0, 16.0, 64.0, 256.0, 1024.0)
_ADDRESS_ATTEMPTS = 5
"""Address writes that met a newer Node before the error goes to the caller."""


REFRESH_CPU_SHARE = 0.25
"""The most of one core a periodic address refresh uses while it runs: the process's CPU
time over the pass's wall time, paused for when it gets ahead (issue 26: 100,000 Nodes
took ~95 % of a core for 5.6 s with nothing pacing them)."""
REFRESH_WITHIN = 0.5
"""Pacing never makes a refresh end later than this share of the status period."""
_PACE_EVERY = 0.05
"""Seconds of wall time between two looks at the CPU used."""


class RefreshPacer:
    """Paces one address refresh: whoever takes the next Node first calls :meth:`pace`.

    Every :data:`_PACE_EVERY` seconds it compares the process's CPU time since the pass
    began with ``share`` of the wall time; when ahead, every worker waits until the pass
    is back within its share, or until the pass is exactly on schedule to finish
    within ``within`` times ``period``, whichever comes first (so pacing never makes a Node
    wait longer than that for its refresh). A cloud with real latency keeps the CPU low
    and the pass is not slowed at all; the clocks are parameters so a test can count."""

    def __init__(
        self,
        total: int,
        period: float,
        *,
        share: float = REFRESH_CPU_SHARE,
        within: float = REFRESH_WITHIN,
        cpu: Callable[[], float] = time.process_time,
        now: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._total = max(total, 1)
        self._deadline = period * within
        self._share = share
        self._cpu, self._now, self._sleep = cpu, now, sleep
        self._cpu0, self._t0 = cpu(), now()
        self._next_look = self._t0 + _PACE_EVERY
        self._resume_at = self._t0
        self.taken = 0
        """Nodes handed out so far."""
        self.paused = 0.0
        """Seconds the pass waited in total."""

    async def pace(self) -> None:
        """Before each Node: wait while the pass is ahead of its share of the CPU."""
        self.taken += 1
        now = self._now()
        if now < self._resume_at:
            await self._sleep(self._resume_at - now)
            return
        if now < self._next_look:
            return
        elapsed = now - self._t0
        within_share = (self._cpu() - self._cpu0) / self._share
        on_schedule = self._deadline * (self.taken - 1) / self._total
        resume = self._t0 + min(within_share, on_schedule)
        self._next_look = max(now, resume) + _PACE_EVERY
        if resume - self._t0 > elapsed:
            self._resume_at = resume
            self.paused += resume - now
            await self._sleep(resume - now)


@dataclass(frozen=True)
class NodeControllerOptions:
    workers: int = 1
    """``--concurrent-node-syncs``."""
    status_workers: int = 0
    """``--concurrent-node-status-updates``; 0 means ``workers``."""
    status_update_period: float = 300.0
    """``--node-status-update-frequency``."""


@dataclass(frozen=True)
class _Answered:
    """The cloud's addresses for a Node at its initialisation, and the resourceVersions
    of the Node that the initialisation itself produced."""

    uid: str
    addresses: tuple[NodeAddress, ...]
    seen: frozenset[str]


class _ConflictError(Exception):
    """The initialisation patch met a newer resourceVersion; retry from the cache."""


class CloudNodeController(ControllerBase):
    """Initialises tainted nodes and keeps node addresses current."""

    name = wk.CONTROLLER_CLOUD_NODE

    def __init__(
        self,
        *,
        client: KubeClient,
        nodes: Informer[Node],
        cloud: CloudProvider,
        recorder: EventRecorder,
        metrics: Metrics,
        options: NodeControllerOptions | None = None,
        scope: NodeScope = EVERY_NODE,
        shard: Shard = WHOLE,
    ) -> None:
        super().__init__(client=client, recorder=recorder, scope=scope)
        self.options = options or NodeControllerOptions()
        self._shard = shard
        """The Nodes this process initialises and refreshes (``--worker-processes``)."""
        self._instances = CloudInstances(cloud)
        self._nodes = nodes
        self._said_not_managed: dict[str, str] = {}
        """Node name → UID of the tainted Nodes already reported as left alone."""
        self._answered: dict[str, _Answered] = {}
        """Node name → the cloud's answer of the initialisation, for Nodes initialised
        here since their last refresh: a status update of the kubelet that lands after
        the address write (its strategic-merge patch puts a new Hostname *first*) is put
        back in order from it, without a cloud call (:meth:`_keep_address_order`); once."""
        self.queue = self._new_queue(
            wk.QUEUE_CLOUD_NODE, default_controller_rate_limiter(), metrics, shard
        )
        self._taint_removal_delay = metrics.histogram(
            wk.METRIC_NODE_TAINT_REMOVAL_DELAY,
            "Number of seconds after node creation when the cloud provider taint was removed.",
            _DELAY_BUCKETS,
        )
        self._initial_sync_delay = metrics.histogram(
            wk.METRIC_NODE_INITIAL_SYNC_DELAY,
            "Number of seconds after node creation when the initial node sync completed.",
            _DELAY_BUCKETS,
        )
        nodes.add_handler(
            on_add=lambda node: self.queue.add(node.metadata.name),
            on_update=lambda _old, new: self.queue.add(new.metadata.name),
        )
        nodes.add_handler(on_delete=self._forget_said)

    # -- running --------------------------------------------------------------

    async def run(self) -> None:
        """Wait for the node cache, then run the workers and the address loop until cancelled."""
        await self._nodes.wait_synced()
        await self._serve(
            self._status_loop(), run_workers(self.queue, self.sync, self.options.workers)
        )

    # -- sync -----------------------------------------------------------------

    async def sync(self, name: str) -> None:
        node = self._nodes.get(name)
        if node is None:
            return
        why_not = self._scope.why_not(node)
        if why_not is not None:
            if has_taint(node, wk.TAINT_UNINITIALIZED):
                self._say_not_managed(node, why_not)
            else:
                log.debug("node %s: not managed here: %s", name, why_not)
            return
        self._said_not_managed.pop(name, None)
        if not has_taint(node, wk.TAINT_UNINITIALIZED):
            await self._reconcile_labels(node)
            await self._keep_address_order(node)
            return
        await self._initialize(node)

    def _forget_said(self, node: Node) -> None:
        self._said_not_managed.pop(node.metadata.name, None)
        self._answered.pop(node.metadata.name, None)

    def _say_not_managed(self, node: Node, why_not: str) -> None:
        """Once per Node (and again if it is re-created): a log line at default verbosity
        and an Event on the Node saying why its taint stays."""
        name, uid = node.metadata.name, node.metadata.uid
        if self._said_not_managed.get(name) == uid:
            return
        self._said_not_managed[name] = uid
        message = (
            f"Not initializing node {name}: {why_not}; it keeps the taint "
            f"{wk.TAINT_UNINITIALIZED} until the cloud-controller-manager that manages it "
            "initializes it"
        )
        log.info("%s", message)
        self._node_event(node, "Normal", wk.REASON_NODE_NOT_MANAGED, message)

    async def _reconcile_labels(self, node: Node) -> None:
        fixes = ga_label_fixes(node.metadata.labels)
        if fixes:
            await self._api.patch(NODES, node.metadata.name, {"metadata": {"labels": fixes}})

    # -- initialisation -------------------------------------------------------

    async def _initialize(self, node: Node) -> None:
        started = time.monotonic()
        metadata = await self._instances.instance_metadata(node)
        if metadata is None:
            log.info("skip sync node %s: cloud provider returned nil metadata", node.metadata.name)
            return
        provider_id = metadata.provider_id or node.spec.provider_id
        annotation = node.metadata.annotations.get(wk.ANNOTATION_PROVIDED_NODE_IP)
        try:
            check_node_ip(metadata.node_addresses, annotation)
        except NodeIPError as exc:
            message = (
                f'provided node ip for node "{node.metadata.name}" is not valid: {exc}; '
                f"annotation {wk.ANNOTATION_PROVIDED_NODE_IP}={annotation!r}, the cloud's "
                f"addresses: {_address_list(metadata.node_addresses)}; the Node stays "
                "uninitialised until the kubelet's --node-ip (one IP, or an IPv4,IPv6 pair) "
                "is among the instance's addresses: fix --node-ip or the instance"
            )
            self._node_event(node, "Warning", wk.REASON_PROVIDED_NODE_IP_NOT_VALID, message)
            raise NodeIPError(message) from exc

        updated = await self._write_initialization(node.metadata.name, metadata, provider_id)
        if updated is None:
            return  # the node was deleted meanwhile
        self._taint_removal_delay.observe(_seconds_since(updated.metadata.creation_timestamp))
        seen = {updated.metadata.resource_version}
        try:
            written = await self._update_addresses(updated, metadata.node_addresses)
            if written is not None:
                seen.add(written.metadata.resource_version)
        except Exception as exc:  # upstream only logs; the periodic loop will fix it
            log.warning(
                "node %s: updating addresses after initialisation failed: %s",
                node.metadata.name,
                exc,
            )
        self._answered[updated.metadata.name] = _Answered(
            updated.metadata.uid, metadata.node_addresses, frozenset(seen)
        )
        self._node_event(updated, "Normal", wk.REASON_SYNCED, wk.MESSAGE_SYNCED)
        self._initial_sync_delay.observe(_seconds_since(updated.metadata.creation_timestamp))
        log.info(
            "node %s initialized in %.3f s (providerID %s)",
            node.metadata.name,
            time.monotonic() - started,
            provider_id or "<none>",
        )

    async def _write_initialization(
        self, name: str, metadata: InstanceMetadata, provider_id: str
    ) -> Node | None:
        """The single initialising write, retried on conflict from the cache (no new
        cloud calls)."""
        delay = 0.05
        for attempt in range(20):
            node = self._nodes.get(name)
            if node is None:
                return None
            if not has_taint(node, wk.TAINT_UNINITIALIZED):
                return node  # someone else finished it
            try:
                return await self._patch_initialization(node, metadata, provider_id)
            except _ConflictError:
                log.info(
                    "node %s changed while initialising (attempt %d); retrying", name, attempt + 1
                )
                await asyncio.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 2.0)
        raise RuntimeError(f"node {name}: initialisation kept conflicting; will retry")

    async def _patch_initialization(
        self, node: Node, metadata: InstanceMetadata, provider_id: str
    ) -> Node | None:
        labels: dict[str, str] = {}
        if metadata.instance_type:
            labels[wk.LABEL_INSTANCE_TYPE] = metadata.instance_type
            labels[wk.LABEL_INSTANCE_TYPE_BETA] = metadata.instance_type
        if metadata.zone:
            labels[wk.LABEL_ZONE] = metadata.zone
            labels[wk.LABEL_ZONE_BETA] = metadata.zone
        if metadata.region:
            labels[wk.LABEL_REGION] = metadata.region
            labels[wk.LABEL_REGION_BETA] = metadata.region
        labels.update(
            additional_labels_to_add(
                metadata.additional_labels,
                {**node.metadata.labels, **labels},
                node.metadata.name,
            )
        )
        taints = [t for t in node.spec.taints if t.key != wk.TAINT_UNINITIALIZED]
        spec: dict[str, Any] = {"taints": taints}
        if not node.spec.provider_id and provider_id:
            spec["providerID"] = provider_id
        patch: dict[str, Any] = {
            "metadata": {"resourceVersion": node.metadata.resource_version},
            "spec": spec,
        }
        if labels:
            patch["metadata"]["labels"] = labels
        try:
            return await self._api.patch(NODES, node.metadata.name, patch)
        except ApiError as exc:
            if exc.conflict:
                raise _ConflictError from exc
            if exc.not_found:
                return None
            raise

    # -- addresses ------------------------------------------------------------

    async def _update_addresses(
        self, node: Node | None, cloud_addresses: tuple[NodeAddress, ...]
    ) -> Node | None:
        """Write the addresses ``node`` should carry, if they differ: the whole list
        (upstream's ``$patch: replace``), with the Node's resourceVersion as a
        precondition. Upstream sends none, so a kubelet's Hostname that lands between
        the copy the list was computed from and the write is lost; here the write
        conflicts, and the list is computed again from a fresh read (a few times, then
        the error goes to the caller). The Node written, or None when nothing was."""
        for attempt in range(_ADDRESS_ATTEMPTS):
            if node is None or has_taint(node, wk.TAINT_UNINITIALIZED):
                return None
            annotation = node.metadata.annotations.get(wk.ANNOTATION_PROVIDED_NODE_IP)
            try:
                wanted = desired_addresses(cloud_addresses, node.status.addresses, annotation)
            except NodeIPError as exc:
                log.warning("node %s: not updating addresses: %s", node.metadata.name, exc)
                return None
            if wanted is None or not addresses_changed(node.status.addresses, wanted):
                return None
            patch = {
                "metadata": {"resourceVersion": node.metadata.resource_version},
                "status": {"addresses": [{"$patch": "replace"}, *wanted]},
            }
            try:
                return await self._api.patch(NODES, node.metadata.name, patch, subresource="status")
            except ApiError as exc:
                if exc.not_found:
                    return None
                if not exc.conflict or attempt == _ADDRESS_ATTEMPTS - 1:
                    raise
            log.info(
                "node %s changed while its addresses were written (attempt %d); reading it again",
                node.metadata.name,
                attempt + 1,
            )
            node = await self._fresh(node.metadata.name)
        return None

    async def _fresh(self, name: str) -> Node | None:
        """The Node as the API server has it now (the cache may not have the write that
        made ours conflict yet), or None when it is gone."""
        try:
            return await self._api.get(NODES, name)
        except ApiError as exc:
            if exc.not_found:
                return None
            raise

    async def _keep_address_order(self, node: Node) -> None:
        """A Node initialised here whose addresses changed after the address write (a
        kubelet's status patch adding its Hostname puts it first, giving
        ``[Hostname, InternalIP, ExternalIP]``): written again from the cloud's answer of
        the initialisation, once, without a cloud call and without waiting for the
        refresh (upstream keeps such a list until another address changes)."""
        answered = self._answered.get(node.metadata.name)
        if answered is None or answered.uid != node.metadata.uid:
            return
        if node.metadata.resource_version in answered.seen:
            return  # our own writes (their events, or a cache not there yet)
        if await self._update_addresses(node, answered.addresses) is not None:
            self._answered.pop(node.metadata.name, None)
            log.info(
                "node %s: addresses put back in the cloud's order after a later status update",
                node.metadata.name,
            )

    async def _status_loop(self) -> None:
        """Every status period, refresh initialised nodes' addresses. The period runs from
        one pass's start to the next's (upstream's from a pass's end): a paced pass
        lasts up to :data:`REFRESH_WITHIN` of it, and a changed address is still caught
        within one period. The first pass, at start-up, is not paced (it is part of
        the first complete sync), nor is one that starts late."""
        period = self.options.status_update_period
        paced = False
        while True:
            started = time.monotonic()
            await self.update_node_status(paced=paced)
            took = time.monotonic() - started
            log.debug("node status update pass took %.3f s", took)
            paced = took < period
            await asyncio.sleep(max(0.0, period - took))

    async def update_node_status(self, *, paced: bool = False) -> None:
        """One address refresh of every initialised Node; ``paced`` keeps it within
        :data:`REFRESH_CPU_SHARE` of one core (see :class:`RefreshPacer`)."""
        nodes = [
            n
            for n in self._nodes.list()
            if not has_taint(n, wk.TAINT_UNINITIALIZED)
            and self._scope.manages(n)
            and self._shard.owns(n.metadata.name)
        ]
        workers = max(1, self.options.status_workers or self.options.workers)
        pending = iter(nodes)
        pacer = RefreshPacer(len(nodes), self.options.status_update_period) if paced else None

        async def worker() -> None:
            # A few workers take the nodes in turn, as upstream's ParallelizeUntil does,
            # rather than a task per node waiting on a semaphore (5,000 tasks a pass).
            for node in pending:
                if pacer is not None:
                    await pacer.pace()
                # This refresh's answer replaces the one kept from the initialisation.
                self._answered.pop(node.metadata.name, None)
                try:
                    addresses = await self._instances.node_addresses(node)
                    if addresses is not None:
                        await self._update_addresses(node, addresses)
                except Exception as exc:
                    log.warning("node %s: address update failed: %s", node.metadata.name, exc)

        async with asyncio.TaskGroup() as group:
            for _ in range(min(workers, len(nodes))):
                group.create_task(worker())
        if pacer is not None and pacer.paused:
            log.debug("node status update pass paused %.3f s to stay paced", pacer.paused)


def _seconds_since(timestamp: str | None) -> float:
    if not timestamp:
        return 0.0
    created = datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    return max(0.0, (datetime.datetime.now(datetime.UTC) - created).total_seconds())


def _address_list(addresses: tuple[NodeAddress, ...]) -> str:
    """``[InternalIP=10.0.0.1 Hostname=node-a]``: what a user compares their --node-ip with."""
    return "[" + " ".join(f"{a.type}={a.address}" for a in addresses) + "]"


__all__ = [
    "REFRESH_CPU_SHARE",
    "REFRESH_WITHIN",
    "CloudNodeController",
    "NodeControllerOptions",
    "RefreshPacer",
]
