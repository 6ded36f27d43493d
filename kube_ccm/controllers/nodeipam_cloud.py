"""Node IPAM's cloud allocator (``--cidr-allocator-type=CloudAllocator``): pod CIDRs from the cloud.

The ``node-ipam-controller`` with upstream's ``CloudAllocator``
(``nodeipam/ipam/cloud_cidr_allocator.go``, GCE's alias ranges): the cloud has
already given each instance its pod CIDRs, and the controller copies them to the
Node, through the provider's optional :class:`~kube_ccm.cloudprovider.NodePodCIDRs`.
Nothing is allocated or freed here; ``--cluster-cidr`` and the mask sizes play no part.

* A Node is handled when it is added, and on every update while it has no pod CIDRs
  (or, where this controller owns ``NetworkUnavailable``, while that is not False).
  It waits for ``spec.providerID`` (set by the cloud node controller), as upstream.
* The provider's answer: a failure or no CIDR is a Warning ``CIDRNotAvailable``
  (``Node <name> status is now: CIDRNotAvailable``, source ``cidrAllocator``) and a
  rate-limited retry; more than two CIDRs are cut to two, as upstream; two CIDRs of one
  family are an error, retried.
* A Node without pod CIDRs gets them as from the range allocator: one strategic-merge
  patch of ``spec.podCIDR`` (the first) and ``spec.podCIDRs``, tried three times; a
  patch that keeps failing is a Warning ``CIDRAssignmentFailed`` and a retry.
* Then, as upstream, ``NetworkUnavailable`` is set False (``RouteCreated``,
  ``NodeController create implicit route``): the cloud routes its own ranges. Only
  when the route controller does not run: where it runs, the condition is its own, and
  two writers would undo each other's work.

Where kube-ccm differs, on purpose:

* **A Node whose pod CIDRs differ from the cloud's is kept and flagged** with one
  Warning ``PodCIDRNotFromCloud``: upstream patches it ("PodCIDR being reassigned!"),
  which the API server refuses (``spec.podCIDRs`` cannot change), ten times.
* **Retries never stop** (the queue's backoff, up to 1000 s); upstream drops a Node
  after ten and waits for its next update.
"""

from __future__ import annotations

import datetime
import ipaddress
import logging
from dataclasses import dataclass
from typing import Any

from kube_ccm.api import wellknown as wk
from kube_ccm.api.helpers import get_node_condition
from kube_ccm.api.objects import Node
from kube_ccm.cloudprovider import NodePodCIDRs
from kube_ccm.controllers._base import ControllerBase
from kube_ccm.controllers.errors import ApiCallError, CloudCallError
from kube_ccm.controllers.nodeipam import CIDR_UPDATE_WORKERS, patch_pod_cidrs
from kube_ccm.controllers.nodescope import EVERY_NODE, NodeScope
from kube_ccm.runtime.client import KubeClient
from kube_ccm.runtime.events import EventRecorder
from kube_ccm.runtime.informer import Informer
from kube_ccm.runtime.metrics import Metrics
from kube_ccm.runtime.ratelimit import default_controller_rate_limiter
from kube_ccm.runtime.resources import NODES
from kube_ccm.runtime.workqueue import run_workers

log = logging.getLogger(__name__)

MESSAGE_IMPLICIT_ROUTE = "NodeController create implicit route"
"""Upstream's message on the ``NetworkUnavailable`` condition the cloud allocator sets."""


@dataclass(frozen=True)
class CloudAllocatorOptions:
    owns_network_condition: bool = True
    """Set ``NetworkUnavailable`` False once a Node has its CIDRs (the route controller
    does not run)."""
    workers: int = CIDR_UPDATE_WORKERS


IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class CloudAllocatorController(ControllerBase):
    name = wk.CONTROLLER_NODE_IPAM

    def __init__(
        self,
        *,
        client: KubeClient,
        nodes: Informer[Node],
        cloud: NodePodCIDRs,
        recorder: EventRecorder,
        metrics: Metrics,
        options: CloudAllocatorOptions | None = None,
        scope: NodeScope = EVERY_NODE,
    ) -> None:
        super().__init__(client=client, recorder=recorder, scope=scope)
        self._cloud = cloud
        self.options = options or CloudAllocatorOptions()
        self._nodes = nodes
        self._flagged: dict[str, tuple[str, ...]] = {}
        """Nodes warned about, with the pod CIDRs they had then."""
        self.queue = self._new_queue(wk.QUEUE_NODE_IPAM, default_controller_rate_limiter(), metrics)
        nodes.add_handler(
            on_add=lambda n: self.queue.add(n.metadata.name),
            on_update=self._on_update,
            on_delete=self._on_delete,
        )

    def _on_delete(self, node: Node) -> None:
        self._flagged.pop(node.metadata.name, None)

    def _on_update(self, _old: Node, new: Node) -> None:
        if not new.spec.pod_cidrs or (
            self.options.owns_network_condition and not _network_available(new)
        ):
            self.queue.add(new.metadata.name)

    async def run(self) -> None:
        await self._nodes.wait_synced()
        log.info("Starting cloud CIDR allocator")
        await self._serve(run_workers(self.queue, self.sync, self.options.workers))

    # -- sync --------------------------------------------------------------------

    async def sync(self, name: str) -> None:
        """Give the Node the pod CIDRs the cloud reports for its instance."""
        node = self._nodes.get(name)
        if node is None or node.metadata.deletion_timestamp is not None:
            return  # the cloud frees the CIDRs with the instance
        if not self._scope.manages(node):
            return
        if not node.spec.provider_id:
            log.debug("node %s has no providerID yet: its pod CIDRs wait for it", name)
            return
        cidrs = await self._cloud_cidrs(node)
        if node.spec.pod_cidrs:
            if not _same(node.spec.pod_cidrs, cidrs):
                self._flag(node, cidrs)
                return
        elif not await self._write(node, cidrs):
            return
        if self.options.owns_network_condition and not _network_available(node):
            await self._set_network_available(node)

    async def _cloud_cidrs(self, node: Node) -> list[IPNetwork]:
        name = node.metadata.name
        try:
            answer = list(await self._cloud.node_pod_cidrs(node))
        except Exception as exc:
            self._status_event(node, wk.REASON_CIDR_NOT_AVAILABLE)
            raise CloudCallError(f"failed to get cidr(s) from provider: {exc}", exc) from exc
        if not answer:
            self._status_event(node, wk.REASON_CIDR_NOT_AVAILABLE)
            raise CloudCallError(f"failed to allocate cidr: Node {name} has no CIDRs")
        if len(answer) > 2:
            log.info("node %s: the cloud reports %s; keeping the first two", name, answer)
            answer = answer[:2]
        try:
            cidrs = [ipaddress.ip_network(text, strict=False) for text in answer]
        except ValueError as exc:
            raise CloudCallError(f"failed to parse {answer} as CIDRs: {exc}", exc) from exc
        if len(cidrs) == 2 and cidrs[0].version == cidrs[1].version:
            raise CloudCallError(
                f"node {name}: the cloud reports {answer}, two CIDRs that are not dual-stack"
            )
        return cidrs

    async def _write(self, node: Node, cidrs: list[IPNetwork]) -> bool:
        """Patch the Node's pod CIDRs; False when it is gone."""
        texts = [str(c) for c in cidrs]
        try:
            return await patch_pod_cidrs(self._api, node.metadata.name, texts)
        except Exception as error:
            self._status_event(node, wk.REASON_CIDR_ASSIGNMENT_FAILED)
            raise ApiCallError(
                f"failed to update node {node.metadata.name} PodCIDR to {texts}: {error}", error
            ) from error

    def _flag(self, node: Node, cidrs: list[IPNetwork]) -> None:
        name = node.metadata.name
        if self._flagged.get(name) == node.spec.pod_cidrs:
            return
        self._flagged[name] = node.spec.pod_cidrs
        message = (
            f"Node {name} has pod CIDRs {', '.join(node.spec.pod_cidrs)} but the cloud reports "
            f"{', '.join(str(c) for c in cidrs)} for its instance. They are kept "
            "(spec.podCIDRs cannot be changed): if they were set by hand or by another "
            "allocator, re-register the Node without them"
        )
        log.warning("%s", message)
        self._node_event(node, "Warning", wk.REASON_POD_CIDR_NOT_FROM_CLOUD, message)

    async def _set_network_available(self, node: Node) -> None:
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        condition: dict[str, Any] = {
            "type": wk.NODE_CONDITION_NETWORK_UNAVAILABLE,
            "status": wk.CONDITION_FALSE,
            "reason": wk.REASON_ROUTE_CREATED,
            "message": MESSAGE_IMPLICIT_ROUTE,
            "lastTransitionTime": now,
            "lastHeartbeatTime": now,
        }
        await self._api.patch(
            NODES,
            node.metadata.name,
            {"status": {"conditions": [condition]}},
            subresource="status",
        )

    def _status_event(self, node: Node, reason: str) -> None:
        message = wk.MESSAGE_NODE_STATUS_CHANGE.format(node=node.metadata.name, status=reason)
        self._node_event(node, "Warning", reason, message)


def _network_available(node: Node) -> bool:
    condition = get_node_condition(node, wk.NODE_CONDITION_NETWORK_UNAVAILABLE)
    return condition is not None and condition.status == wk.CONDITION_FALSE


def _same(held: tuple[str, ...], cidrs: list[IPNetwork]) -> bool:
    """Whether the Node's pod CIDRs are the cloud's (upstream's ``needPodCIDRsUpdate``:
    with one CIDR from the cloud, only the Node's first is compared)."""
    try:
        parsed = [ipaddress.ip_network(text, strict=False) for text in held]
    except ValueError:
        return False
    return parsed[: len(cidrs)] == cidrs if len(cidrs) == 1 else parsed == cidrs


__all__ = [
    "MESSAGE_IMPLICIT_ROUTE",
    "CloudAllocatorController",
    "CloudAllocatorOptions",
]
