"""The cloud node lifecycle controller (``cloud-node-lifecycle-controller``).

Every ``--node-monitor-period`` (5 s; measured after each pass) it looks at
every cached node:

* Ready nodes only lose the shutdown taint if they carry it; they are never
  deleted and the cloud is not asked about them.
* Not-Ready nodes (False, Unknown, or no Ready condition at all) are checked
  with the cloud: an instance that no longer exists means the Node is deleted
  (event ``DeletingNode`` first); an instance that is shut down gets the
  ``node.cloudprovider.kubernetes.io/shutdown:NoSchedule`` taint.
* Any cloud error leaves the node alone until the next pass.

Beyond upstream (kube-ccm's safety rules, see docs/operations.md):

* **Deletion needs confirmation**: "the instance does not exist" must be the
  answer of two checks at least one monitor period apart; an error or a timeout
  in between starts over. Upstream deletes on the first answer.
* **An uninitialised Node is not deleted while its kubelet reports** (it still has
  the ``node.cloudprovider.kubernetes.io/uninitialized`` taint and Ready is
  ``False``, not ``Unknown``): the cloud node controller has not matched it to an
  instance yet, so "no such instance" may only mean the kubelet registered first
  (the instance is still being created, or the cloud's API has not caught up), and a
  kubelet never registers again once its Node is deleted. A real kubelet is
  NotReady from registration until its network add-on runs, so upstream deletes
  such a Node on its first pass, for good. It is logged once; the cloud node
  controller keeps retrying and initialises it once the instance exists. Once its
  kubelet stops reporting (``Unknown``: a machine gone before it was initialised),
  it is deleted as upstream does.
* **Deletion can be switched off** (``--enable-node-deletion=false``): a Node
  whose instance is gone then gets the shutdown taint and one Warning
  ``NodeDeletionDisabled`` instead.
* Nodes outside this CCM's scope (another provider's providerID, or labels not
  matching ``--node-selector``) are never looked at.
* **The node deletion guard** (``--node-deletion-guard``, on by default;
  :mod:`kube_ccm.controllers.deletionguard`): when the cloud reports too many
  instances gone at once (a share of the Nodes, a whole zone, or every Node it was
  asked about), it holds every such deletion, with a Warning ``NodeDeletionGuarded``
  on each Node, until the cloud sees those instances again or an operator confirms.
  With it, a pass asks about every Node first and deletes afterwards; without it
  (``off``), each Node is deleted as soon as its confirmation completes, as upstream.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from kube_ccm.api import wellknown as wk
from kube_ccm.api.helpers import find_taint, has_taint, node_ready_status
from kube_ccm.api.objects import Node, Taint
from kube_ccm.cloudprovider import CloudProvider
from kube_ccm.controllers._base import ControllerBase
from kube_ccm.controllers.deletionguard import DeletionGuard, ServedNode
from kube_ccm.controllers.instances import CloudInstances
from kube_ccm.controllers.nodescope import EVERY_NODE, NodeScope
from kube_ccm.runtime.client import ApiError, KubeClient
from kube_ccm.runtime.events import EventRecorder
from kube_ccm.runtime.informer import Informer
from kube_ccm.runtime.resources import NODES

log = logging.getLogger(__name__)

SHUTDOWN_TAINT = Taint(key=wk.TAINT_SHUTDOWN, effect=wk.TAINT_EFFECT_NO_SCHEDULE)


class CloudNodeLifecycleController(ControllerBase):
    """Deletes Nodes whose instance is gone; taints Nodes whose instance is shut down."""

    name = wk.CONTROLLER_CLOUD_NODE_LIFECYCLE

    def __init__(
        self,
        *,
        client: KubeClient,
        nodes: Informer[Node],
        cloud: CloudProvider,
        recorder: EventRecorder,
        monitor_period: float = 5.0,
        scope: NodeScope = EVERY_NODE,
        delete_nodes: bool = True,
        guard: DeletionGuard | None = None,
    ) -> None:
        """``guard``: the node deletion guard (None: ``--node-deletion-guard=off``, or
        deletion switched off, where it has nothing to guard)."""
        super().__init__(client=client, recorder=recorder, scope=scope)
        self.delete_nodes = delete_nodes
        self.guard = guard if delete_nodes else None
        self._candidates: list[Node] = []
        """This pass's Nodes whose instance is confirmed gone (with the guard)."""
        self._gone_since: dict[str, float] = {}
        """Node name → when its instance was first reported gone (confirmation pending)."""
        self._deletion_skipped: set[str] = set()
        self._uninitialised_kept: set[str] = set()
        """Uninitialised Nodes without an instance, already logged as kept."""
        self._settled: dict[str, tuple[Node, ServedNode | None]] = {}
        """Nodes the last pass found Ready without the shutdown taint, or outside the
        scope (no ServedNode): the informer replaces a Node's object when it changes, so
        the very same object needs no second look (a pass over 5,000 Ready nodes is a
        dict lookup each)."""
        self._instances = CloudInstances(cloud)
        self._nodes = nodes
        self.monitor_period = monitor_period

    async def run(self) -> None:
        """Monitor immediately (upstream does not wait for the cache), then every period."""
        while not self._stopping:
            started = time.monotonic()
            await self.monitor_nodes()
            log.debug("node lifecycle pass took %.3f s", time.monotonic() - started)
            await asyncio.sleep(self.monitor_period)

    async def monitor_nodes(self) -> None:
        nodes = self._nodes.list()
        if self._gone_since or self._deletion_skipped or self._uninitialised_kept:
            present = {n.metadata.name for n in nodes}
            remembered = self._gone_since.keys() | self._deletion_skipped | self._uninitialised_kept
            for forgotten in remembered - present:
                self._gone_since.pop(forgotten, None)
                self._deletion_skipped.discard(forgotten)
                self._uninitialised_kept.discard(forgotten)
        settled_before: dict[str, tuple[Node, ServedNode | None]] = self._settled
        settled: dict[str, tuple[Node, ServedNode | None]] = {}
        served: list[ServedNode] = []
        self._candidates = []
        if self.guard is not None:
            self.guard.begin()
        try:
            for node in nodes:
                if self._stopping:
                    return
                name = node.metadata.name
                before = settled_before.get(name)
                if before is not None and before[0] is node:
                    settled[name] = before
                    if before[1] is not None:
                        served.append(before[1])
                    continue
                if not self._scope.manages(node):
                    # Another CCM's node, or outside --node-selector: never touched.
                    settled[name] = (node, None)
                    continue
                seen = _served(node)
                served.append(seen)
                try:
                    if await self._monitor(node):
                        settled[name] = (node, seen)
                except Exception as exc:
                    log.warning("node %s: lifecycle check failed: %s", name, exc)
        finally:
            self._settled = settled
        if self.guard is not None:
            await self._guarded_deletions(served)

    async def _guarded_deletions(self, served: list[ServedNode]) -> None:
        """The pass is over: the guard decides which confirmed deletions go ahead."""
        guard = self.guard
        assert guard is not None
        candidates = {node.metadata.name: node for node in self._candidates}
        decision = guard.decide(served, sorted(candidates))
        for name in decision.restart:
            self._gone_since.pop(name, None)
        if decision.newly_held:
            nodes = {node.metadata.name: node for node in self._nodes.list()}
            for name in decision.newly_held:
                if name in nodes:
                    self._node_event(
                        nodes[name], "Warning", wk.REASON_NODE_DELETION_GUARDED, guard.message(name)
                    )
        for name in decision.delete:
            self._gone_since.pop(name, None)
            await self._delete(candidates[name])

    def readiness_checks(self) -> dict[str, Callable[[], tuple[bool, str]]]:
        """Checks for ``/readyz?verbose`` that never fail readiness: the guard's."""
        if self.guard is None:
            return {}
        return {wk.READYZ_NODE_DELETION_GUARD: self.guard.readiness}

    async def _monitor(self, node: Node) -> bool:
        """Check one node; True when it is Ready without the shutdown taint (nothing
        to do until its object changes)."""
        name = node.metadata.name
        if node_ready_status(node) == wk.CONDITION_TRUE:
            self._gone_since.pop(name, None)
            if find_taint(node.spec.taints, wk.TAINT_SHUTDOWN, wk.TAINT_EFFECT_NO_SCHEDULE):
                await self._set_shutdown_taint(name, present=False, because="the node is Ready")
                return False
            return True
        try:
            exists = await self._instances.instance_exists(node)
        except Exception as exc:
            self._gone_since.pop(name, None)  # an error never counts towards deletion
            if self.guard is not None:
                self.guard.error(exc)
            log.warning("node %s: error checking if the instance exists: %s", name, exc)
            return False
        if not exists:
            reporting = node_ready_status(node) == wk.CONDITION_FALSE
            if reporting and has_taint(node, wk.TAINT_UNINITIALIZED):
                self._keep_uninitialised(name)
                return False
            self._uninitialised_kept.discard(name)
            if self.guard is not None:
                self.guard.gone(name)
            await self._instance_gone(node)
            return False
        if self.guard is not None:
            self.guard.exists(name)
        self._gone_since.pop(name, None)
        self._uninitialised_kept.discard(name)
        try:
            shut_down = await self._instances.instance_shutdown(node)
        except Exception as exc:
            log.warning("node %s: error checking if the instance is shut down: %s", name, exc)
            return False
        if shut_down:
            await self._set_shutdown_taint(name, present=True, because="its instance is shut down")
        return False

    def _keep_uninitialised(self, name: str) -> None:
        self._gone_since.pop(name, None)
        if name in self._uninitialised_kept:
            return
        self._uninitialised_kept.add(name)
        log.warning(
            "node %s: not Ready and the instance does not exist yet, but the Node is not "
            "initialised and its kubelet reports: not deleting it (its kubelet would not "
            "register again); the cloud node controller initialises it once the cloud has "
            "its instance, and it is deleted if its kubelet stops reporting",
            name,
        )

    async def _instance_gone(self, node: Node) -> None:
        name = node.metadata.name
        now = time.monotonic()
        first = self._gone_since.setdefault(name, now)
        # Passes are at least a monitor period apart; allow for the event loop's clock.
        if now - first < self.monitor_period * 0.9:
            log.info(
                "node %s: the cloud reports its instance gone; deleting the Node if the "
                "next check (in %.3g s) says so too",
                name,
                self.monitor_period,
            )
            return
        if self.guard is not None:
            self._candidates.append(node)  # the guard decides once every Node is asked
            return
        if self.delete_nodes:
            self._gone_since.pop(name, None)
            await self._delete(node)
            return
        await self._set_shutdown_taint(
            name,
            present=True,
            because="its instance no longer exists (--enable-node-deletion=false)",
        )
        if name not in self._deletion_skipped:
            self._deletion_skipped.add(name)
            message = (
                f"The instance of node {name} no longer exists; not deleting the Node "
                "(--enable-node-deletion=false): it has the shutdown taint instead"
            )
            log.warning("%s", message)
            self._node_event(node, "Warning", wk.REASON_NODE_DELETION_DISABLED, message)

    async def _delete(self, node: Node) -> None:
        name = node.metadata.name
        self._node_event(
            node, "Normal", wk.REASON_DELETING_NODE, wk.MESSAGE_DELETING_NODE.format(node=name)
        )
        try:
            await self._api.delete(NODES, name)
            log.info("deleted node %s: its instance no longer exists", name)
        except ApiError as exc:
            if exc.not_found:
                return
            log.error("failed deleting node %s: %s", name, exc)
            self._node_event(
                node,
                "Warning",
                wk.REASON_DELETING_NODE_FAILED,
                wk.MESSAGE_DELETING_NODE_FAILED.format(node=name, error=exc),
            )

    async def _set_shutdown_taint(self, name: str, *, present: bool, because: str) -> None:
        """Add or remove the shutdown taint with the resourceVersion as an optimistic lock;
        a change is logged at the default verbosity, naming the node and ``because``."""
        for attempt in range(5):
            try:
                current = await self._api.get(
                    NODES, name, resource_version="0" if attempt == 0 else None
                )
            except ApiError as exc:
                if exc.not_found:
                    return
                raise
            taints = current.spec.taints
            matching = [
                t
                for t in taints
                if t.key == SHUTDOWN_TAINT.key and t.effect == SHUTDOWN_TAINT.effect
            ]
            if present:
                if matching and all(not t.value for t in matching):
                    return
                new_taints = [t for t in taints if t not in matching] + [SHUTDOWN_TAINT]
            else:
                if not matching:
                    return
                new_taints = [t for t in taints if t not in matching]
            try:
                await self._api.patch(
                    NODES,
                    name,
                    {
                        "metadata": {"resourceVersion": current.metadata.resource_version},
                        "spec": {"taints": new_taints},
                    },
                )
                log.info(
                    "node %s: %s the taint %s:%s: %s",
                    name,
                    "added" if present else "removed",
                    SHUTDOWN_TAINT.key,
                    SHUTDOWN_TAINT.effect,
                    because,
                )
                return
            except ApiError as exc:
                if exc.not_found:
                    log.info("node %s may have been deleted", name)
                    return
                if not exc.conflict:
                    raise
            await asyncio.sleep(0.1)
        log.warning("node %s: could not update the shutdown taint after 5 conflicts", name)


def _served(node: Node) -> ServedNode:
    """What the deletion guard needs to know of a Node in scope."""
    labels = node.metadata.labels
    return ServedNode(
        name=node.metadata.name,
        zone=labels.get(wk.LABEL_ZONE) or labels.get(wk.LABEL_ZONE_BETA, ""),
        ready=node_ready_status(node) == wk.CONDITION_TRUE,
        exempt=has_taint(node, wk.TAINT_TO_BE_DELETED_BY_CLUSTER_AUTOSCALER),
        confirmation=labels.get(wk.LABEL_CONFIRM_NODE_DELETION, ""),
    )
