"""Simulated kubelets, and the part of kube-controller-manager that watches them.

A kubelet started with ``--cloud-provider=external`` registers its Node with the
uninitialised taint and no providerID, then proves it is alive in two ways: it
renews its Lease in ``kube-node-lease`` every 10 s, and it posts its Ready
condition when something changes or at least every 5 minutes
(``nodeStatusReportFrequency``). When a kubelet stops doing that, it is
kube-controller-manager's node lifecycle controller (not the CCM) that notices
the stale Lease after ``--node-monitor-grace-period`` and sets Ready to
``Unknown``; only then does the CCM's lifecycle controller ask the cloud whether
the instance still exists.

The sandbox has no kube-controller-manager, so :class:`SimulatedKubelets` plays
both parts: the kubelets (registration with a pod CIDR, Lease renewals, Ready
reports) and the node monitor (stale Lease → Ready ``Unknown`` with upstream's
reason and message). A kubelet dies when told to (:meth:`SimulatedKubelets.kill`)
or when its Node is annotated ``sandbox.kube-ccm.io/kubelet=stopped``, and comes
back when the annotation is removed or set to anything else.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from kube_ccm.api import wellknown as wk
from kube_ccm.api.objects import Node
from kube_ccm.runtime.client import ApiError, KubeClient
from kube_ccm.runtime.informer import Informer
from kube_ccm.runtime.resources import LEASES, NODES
from kube_ccm.runtime.typedclient import TypedClient

log = logging.getLogger(__name__)

KUBELET_ANNOTATION = "sandbox.kube-ccm.io/kubelet"
"""Set to ``stopped`` on a Node to kill its simulated kubelet; remove it to revive it."""
LEASE_NAMESPACE = "kube-node-lease"
# What kube-controller-manager's node lifecycle controller writes on a stale Lease.
REASON_NODE_STATUS_UNKNOWN = "NodeStatusUnknown"
MESSAGE_NODE_STATUS_UNKNOWN = "Kubelet stopped posting node status."


@dataclass(frozen=True)
class KubeletTimings:
    """How often the kubelets report and how soon a silent one is declared Unknown.

    The defaults are the kubelet's (Lease renewed every 10 s of a 40 s lease, Ready
    reported every 5 min) and kube-controller-manager's node monitor period (5 s);
    the grace period is shorter than kube-controller-manager's default so a dead
    node shows within a demo's time.
    """

    lease_period: float = 10.0
    status_period: float = 300.0
    grace_period: float = 15.0
    monitor_period: float = 5.0


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _now_micro() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def node_manifest(name: str, pod_cidr: str | None = None) -> dict[str, Any]:
    """A Node as a kubelet with ``--cloud-provider=external`` registers it."""
    now = _now()
    spec: dict[str, Any] = {
        "taints": [{"key": wk.TAINT_UNINITIALIZED, "value": "true", "effect": "NoSchedule"}]
    }
    if pod_cidr:
        spec["podCIDR"] = pod_cidr
        spec["podCIDRs"] = [pod_cidr]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": spec,
        "status": {
            "addresses": [{"type": "Hostname", "address": name}],
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
        },
    }


def pod_cidrs(cluster_cidr: str, count: int, prefix: int = 24) -> list[str]:
    """``count`` consecutive ``/prefix`` subnets of ``cluster_cidr`` (one per node).

    Raises ValueError when the cluster CIDR has fewer subnets than nodes.
    """
    network = ipaddress.ip_network(cluster_cidr)
    available = 2 ** (prefix - network.prefixlen) if prefix >= network.prefixlen else 0
    if count > available:
        raise ValueError(
            f"{cluster_cidr} holds {available} /{prefix} pod CIDRs, fewer than {count} nodes"
        )
    subnets: Iterator[Any] = network.subnets(new_prefix=prefix)
    return [str(next(subnets)) for _ in range(count)]


class SimulatedKubelets:
    """N kubelets and the node monitor that watches them; :meth:`run` until cancelled."""

    def __init__(self, client: KubeClient, timings: KubeletTimings | None = None) -> None:
        self._api = TypedClient(client)
        self.timings = timings or KubeletTimings()
        self._names: list[str] = []
        self._dead: set[str] = set()
        self._stopped_by_annotation: set[str] = set()
        self._renewed: dict[str, float] = {}
        """When each kubelet last renewed its Lease (monotonic): what the monitor reads."""
        self._unknown: set[str] = set()
        self.lease_renewals = 0
        self.status_reports = 0
        self._nodes: Informer[Node] = Informer(client, NODES, name="sandbox-nodes")
        self._nodes.add_handler(
            on_add=self._on_node,
            on_update=lambda _old, new: self._on_node(new),
            on_delete=lambda node: self._forget(node.metadata.name),
        )

    @property
    def names(self) -> list[str]:
        return list(self._names)

    @property
    def dead(self) -> frozenset[str]:
        return frozenset(self._dead)

    def node(self, name: str) -> Node | None:
        """The Node as last seen by the kubelets' watch."""
        return self._nodes.get(name)

    def nodes(self) -> list[Node]:
        return self._nodes.list()

    # -- registration ---------------------------------------------------------------

    async def register(
        self, names: Sequence[str], cidrs: Sequence[str] | None = None, parallel: int = 32
    ) -> None:
        """Create each Node (and its Lease) as its kubelet would, ``parallel`` at a time."""
        gate = asyncio.Semaphore(parallel)

        async def one(index: int, name: str) -> None:
            async with gate:
                await self._api.create(NODES, node_manifest(name, cidrs[index] if cidrs else None))
                await self._renew(name)

        await asyncio.gather(*(one(i, n) for i, n in enumerate(names)))
        self._names.extend(names)

    # -- life and death --------------------------------------------------------------

    def kill(self, name: str) -> None:
        """Stop this kubelet: no more Lease renewals or Ready reports."""
        if name not in self._dead:
            log.info("kubelet %s stopped", name)
        self._dead.add(name)

    async def revive(self, name: str) -> None:
        """Start this kubelet again: it renews its Lease and reports Ready at once."""
        if name not in self._dead:
            return
        self._dead.discard(name)
        log.info("kubelet %s started", name)
        await self._renew(name)
        await self._report(name, ready=True)

    def _on_node(self, node: Node) -> None:
        name = node.metadata.name
        if name not in self._renewed:
            return  # not one of ours
        wanted_dead = node.metadata.annotations.get(KUBELET_ANNOTATION) == "stopped"
        if wanted_dead and name not in self._dead:
            self._stopped_by_annotation.add(name)
            self.kill(name)
        elif not wanted_dead and name in self._stopped_by_annotation:
            self._stopped_by_annotation.discard(name)
            asyncio.get_running_loop().create_task(self._quietly(self.revive(name)))

    async def _quietly(self, work: Awaitable[None]) -> None:
        try:
            await work
        except (ApiError, OSError) as exc:
            log.warning("simulated kubelet: %s", exc)

    # -- the loops --------------------------------------------------------------------

    async def run(self) -> None:
        """Renew Leases, report Ready, and monitor for silent kubelets; until cancelled."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self._nodes.run())
            group.create_task(self._every(self.timings.lease_period, self._renew))
            group.create_task(
                self._every(self.timings.status_period, lambda n: self._report(n, ready=True))
            )
            group.create_task(self._monitor())

    async def _every(self, period: float, action: Callable[[str], Awaitable[None]]) -> None:
        """Call ``action(name)`` for every live kubelet once per ``period``, evenly spread."""
        while True:
            started = time.monotonic()
            names = [n for n in self._names if n not in self._dead]
            step = period / max(len(names), 1)
            for i, name in enumerate(names):
                if name in self._dead or name not in self._renewed:
                    continue  # died or was deleted meanwhile
                await self._quietly(action(name))
                delay = started + (i + 1) * step - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
            if not names:
                await asyncio.sleep(period)

    async def _renew(self, name: str) -> None:
        spec = {
            "holderIdentity": name,
            "leaseDurationSeconds": 40,
            "renewTime": _now_micro(),
        }
        try:
            await self._api.patch(
                LEASES, name, {"spec": spec}, namespace=LEASE_NAMESPACE, patch_type="merge"
            )
        except ApiError as exc:
            if not exc.not_found:
                raise
            with contextlib.suppress(ApiError):  # a Node deleted under us: nothing to renew
                await self._api.create(
                    LEASES, {"metadata": {"name": name}, "spec": spec}, namespace=LEASE_NAMESPACE
                )
        self._renewed[name] = time.monotonic()
        self.lease_renewals += 1

    async def _report(self, name: str, *, ready: bool) -> None:
        """Post the Ready condition (True from the kubelet, Unknown from the monitor)."""
        now = _now()
        condition: dict[str, Any] = {"type": "Ready", "lastHeartbeatTime": now}
        node = self._nodes.get(name)
        current = next(
            (c.status for c in (node.status.conditions if node else ()) if c.type == "Ready"),
            None,
        )
        target = "True" if ready else "Unknown"
        if ready:
            condition.update(reason="KubeletReady", message="kubelet is posting ready status")
        else:
            condition.update(reason=REASON_NODE_STATUS_UNKNOWN, message=MESSAGE_NODE_STATUS_UNKNOWN)
        condition["status"] = target
        if current != target:
            condition["lastTransitionTime"] = now
        try:
            await self._api.patch(
                NODES, name, {"status": {"conditions": [condition]}}, subresource="status"
            )
        except ApiError as exc:
            if exc.not_found:  # deleted (by the CCM's lifecycle controller): gone for good
                self._forget(name)
                return
            raise
        if ready:
            self._unknown.discard(name)
            self.status_reports += 1
        else:
            self._unknown.add(name)

    def _forget(self, name: str) -> None:
        """A Node deleted (by the CCM's lifecycle controller, or by hand): its kubelet
        stops for good (a real one would register again; these do not)."""
        if name in self._renewed:
            self._names.remove(name)
            self._renewed.pop(name, None)
            self._dead.discard(name)
            self._unknown.discard(name)
            self._stopped_by_annotation.discard(name)

    async def _monitor(self) -> None:
        """kube-controller-manager's part: a Lease older than the grace period → Unknown."""
        while True:
            await asyncio.sleep(self.timings.monitor_period)
            deadline = time.monotonic() - self.timings.grace_period
            for name in list(self._dead):
                if name in self._unknown or self._renewed.get(name, deadline) > deadline:
                    continue
                await self._quietly(self._report(name, ready=False))
