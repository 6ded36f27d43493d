"""Leaked load balancers: found, reported, deleted (kube-ccm's; upstream has none).

A load balancer leaks when its Service is deleted while no CCM runs, or without the
``service.kubernetes.io/load-balancer-cleanup`` finalizer, and the service
controller's memory of it is gone (a restart, a leader switch). Providers that
implement :class:`~kube_ccm.cloudprovider.LoadBalancerInventory` list what this
cluster owns; a load balancer is leaked when

* no Service with its recorded UID exists (deleted; a Service of the same name
  with another UID is a new Service with a load balancer of its own), or
* its Service no longer wants one (another ``type``, or a ``loadBalancerClass``)
  and does not carry the cleanup finalizer (with the finalizer, the service
  controller deletes it itself).

``kube-ccm gc [--dry-run]`` does one pass; the ``load-balancer-gc-controller``
(alias ``lb-gc``, off unless named) sweeps every ``--load-balancer-gc-period`` and
deletes a load balancer only when two sweeps in a row found it leaked, so a
Service the cache has not seen yet is never mistaken for a deleted one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kube_ccm.api import wellknown as wk
from kube_ccm.api.objects import ObjectMeta, Service, ServiceSpec
from kube_ccm.cloudprovider import (
    CloudProvider,
    LoadBalancer,
    LoadBalancerInventory,
    OwnedLoadBalancer,
)
from kube_ccm.controllers._base import supported
from kube_ccm.controllers.service import (
    UPSTREAM_CLASSES,
    LoadBalancerClasses,
    wants_load_balancer,
)
from kube_ccm.runtime.informer import Informer
from kube_ccm.runtime.metrics import Metrics

log = logging.getLogger(__name__)

CONTROLLER_LB_GC = wk.CONTROLLER_LB_GC
ALIAS_LB_GC = wk.ALIAS_LB_GC


@dataclass(frozen=True)
class Leak:
    name: str
    namespace: str
    service_name: str
    service_uid: str
    reason: str

    @property
    def service(self) -> str:
        return f"{self.namespace}/{self.service_name}"


def find_leaks(
    owned: Iterable[OwnedLoadBalancer],
    services: Iterable[Service],
    classes: LoadBalancerClasses = UPSTREAM_CLASSES,
) -> list[Leak]:
    """The owned load balancers that no Service will ever clean up."""
    by_uid = {s.metadata.uid: s for s in services}
    names = {f"{s.metadata.namespace}/{s.metadata.name}" for s in by_uid.values()}
    leaks = []
    for lb in owned:
        key = f"{lb.namespace}/{lb.service_name}"
        service = by_uid.get(lb.service_uid)
        if service is None:
            reason = (
                f"Service {key} was deleted (a Service of that name now has another UID)"
                if key in names
                else f"Service {key} no longer exists"
            )
        elif wants_load_balancer(service, classes):
            continue
        elif wk.FINALIZER_LOAD_BALANCER_CLEANUP in service.metadata.finalizers:
            continue  # the service controller deletes it
        elif service.spec.type != "LoadBalancer":
            reason = f"Service {key} is of type {service.spec.type} now"
        else:
            reason = f"Service {key} has loadBalancerClass {service.spec.load_balancer_class!r}"
        leaks.append(Leak(lb.name, lb.namespace, lb.service_name, lb.service_uid, reason))
    return leaks


def service_stub(leak: Leak) -> Service:
    """The Service as the inventory recorded it: enough for ``ensure_load_balancer_deleted``."""
    return Service(
        metadata=ObjectMeta(name=leak.service_name, namespace=leak.namespace, uid=leak.service_uid),
        spec=ServiceSpec(type="LoadBalancer"),
    )


def inventory_of(cloud: CloudProvider) -> tuple[LoadBalancer, LoadBalancerInventory]:
    """The provider's load balancers and their inventory, or ValueError saying what is missing."""
    balancer = supported(cloud.load_balancer(), "external load balancers")
    if not isinstance(balancer, LoadBalancerInventory):
        raise ValueError(
            f"the {cloud.provider_name()} provider cannot list the load balancers it owns "
            "(LoadBalancerInventory), so leaked ones cannot be found"
        )
    return balancer, balancer


async def delete_leaks(
    balancer: LoadBalancer, cluster_name: str, leaks: Sequence[Leak]
) -> list[tuple[Leak, Exception | None]]:
    """Delete each leaked load balancer; (leak, error or None) per leak."""
    results: list[tuple[Leak, Exception | None]] = []
    for leak in leaks:
        stub = service_stub(leak)
        named = balancer.get_load_balancer_name(cluster_name, stub)
        if named != leak.name:
            # Deleting would hit another name (or nothing): refuse rather than guess.
            results.append(
                (
                    leak,
                    ValueError(
                        f"the provider names the load balancer of {leak.service} {named!r}, "
                        f"not {leak.name!r}: its name must depend only on the Service's "
                        "namespace, name and UID for it to be deleted here"
                    ),
                )
            )
            continue
        try:
            await balancer.ensure_load_balancer_deleted(cluster_name, stub)
        except Exception as exc:
            results.append((leak, exc))
        else:
            results.append((leak, None))
    return results


class LoadBalancerGCController:
    """Sweeps leaked load balancers every ``period`` seconds (see the module docstring)."""

    name = CONTROLLER_LB_GC

    def __init__(
        self,
        *,
        services: Informer[Service],
        cloud: CloudProvider,
        metrics: Metrics,
        cluster_name: str = "kubernetes",
        period: float = 600.0,
        classes: LoadBalancerClasses = UPSTREAM_CLASSES,
    ) -> None:
        self._balancer, self._inventory = inventory_of(cloud)
        self._classes = classes
        self._services = services
        self.cluster_name = cluster_name
        self.period = period
        self._suspects: set[str] = set()
        self._stopping = False
        self._deleted = metrics.counter(
            "kube_ccm_leaked_load_balancers_deleted",
            "Load balancers the load-balancer-gc-controller deleted because no Service "
            "would ever clean them up",
        )
        self._failed = metrics.counter(
            "kube_ccm_leaked_load_balancer_deletions_failed",
            "Failed deletions of leaked load balancers (retried on the next sweep)",
        )

    async def run(self) -> None:
        await self._services.wait_synced()
        while not self._stopping:
            try:
                await self.sweep()
            except Exception as exc:
                log.warning("load-balancer sweep failed: %s; next in %g s", exc, self.period)
            await asyncio.sleep(self.period)

    async def shutdown(self) -> None:
        self._stopping = True

    async def sweep(self) -> None:
        owned = await self._inventory.list_load_balancers(self.cluster_name)
        leaks = find_leaks(owned, self._services.list(), self._classes)
        confirmed = [leak for leak in leaks if leak.name in self._suspects]
        self._suspects = {leak.name for leak in leaks}
        for leak in leaks:
            if leak not in confirmed:
                log.info(
                    "load balancer %s looks leaked (%s); deleting it if the next sweep agrees",
                    leak.name,
                    leak.reason,
                )
        for leak, error in await delete_leaks(self._balancer, self.cluster_name, confirmed):
            if error is None:
                self._deleted.inc()
                self._suspects.discard(leak.name)
                log.info("deleted leaked load balancer %s: %s", leak.name, leak.reason)
            else:
                self._failed.inc()
                log.warning("could not delete leaked load balancer %s: %s", leak.name, error)


__all__ = [
    "ALIAS_LB_GC",
    "CONTROLLER_LB_GC",
    "Leak",
    "LoadBalancerGCController",
    "delete_leaks",
    "find_leaks",
    "inventory_of",
    "service_stub",
]
