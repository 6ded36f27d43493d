"""Service controller (``service-lb-controller``): cloud load balancers for Services.

Upstream semantics: a Service of ``type: LoadBalancer`` without a
``loadBalancerClass`` is ours. Before the first cloud call it gets the finalizer
``service.kubernetes.io/load-balancer-cleanup``; the load balancer is ensured
with the eligible nodes and its status written to ``status.loadBalancer``; when
the Service stops wanting one (deleted, type changed), the load balancer is
deleted and only then the finalizer removed. Finalizer and status both go to
the ``status`` subresource as strategic-merge patches; an unchanged status
costs no write (compared as the API server stores it: ``ipMode`` defaults to
``VIP`` when an ingress has an IP).

A node pass keeps backends current: when the eligible node set changes
(exclusion label, providerID, nodes added or deleted), every Service this
controller has ensured gets ``update_load_balancer`` — once per change: the set
is recorded per Service before the cloud call, and a per-Service lock makes a
slow node pass unable to overwrite a newer set written by a concurrent sync
(upstream's guarantee against a slow node pass overwriting a newer node set).
Node changes share one pass until none has come for ``--node-sync-window``, at most
``--node-sync-max-delay`` after the first (upstream passes back to back, one per
dequeued Node key, so its pass's own duration is what batches a burst).

A provider whose status depends on more than the Service and the nodes (ServiceLB:
which of its pods are ready) is handed ``_resync`` through ``LoadBalancer.set_resync``
and calls it with a Service key when that changes: the Service gets an ordinary sync,
so its status is still written only here.

Retries: the provider's ``RetryError`` re-adds the Service after exactly its
delay; other errors back off 5 s → 300 s per Service.

The sync reads as upstream's ``controller.go``: ``sync`` → process deletion or
create-or-update → ``_sync_load_balancer_if_needed`` (delete path or
``_ensure_load_balancer``, then ``_patch_status``); a Service gone without our
finalizer goes to ``_process_load_balancer_delete``. Both delete paths share
``_delete_load_balancer``; every Event goes through ``_event``. Cloud calls are
made on the guarded provider as they are: deadline, retries, metrics and the
fence are the boundary's (:mod:`kube_ccm.controllers.cloudcalls`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec

from kube_ccm.api import wellknown as wk
from kube_ccm.api.helpers import find_taint
from kube_ccm.api.objects import LoadBalancerIngress, LoadBalancerStatus, Node, Service
from kube_ccm.cloudprovider import (
    CloudProvider,
    ImplementedElsewhereError,
    LoadBalancer,
    find_retry_error,
)
from kube_ccm.cloudprovider.annotations import MAX_VALUE_LENGTH, AnnotationTooLongError
from kube_ccm.controllers._base import ControllerBase, supported
from kube_ccm.controllers.errors import ApiCallError, CloudCallError, SyncError
from kube_ccm.controllers.nodescope import EVERY_NODE, NodeScope
from kube_ccm.runtime.client import ApiError, KubeClient
from kube_ccm.runtime.events import EventRecorder, EventType, ObjectReference
from kube_ccm.runtime.informer import Informer, object_key
from kube_ccm.runtime.metrics import Metrics, exponential_buckets
from kube_ccm.runtime.ratelimit import service_rate_limiter
from kube_ccm.runtime.resources import SERVICES
from kube_ccm.runtime.shard import WHOLE, Shard
from kube_ccm.runtime.workqueue import run_workers

log = logging.getLogger(__name__)

_LATENCY_BUCKETS = exponential_buckets(1, 2, 15)
_NODE_PASS_KEY = "node-sync"
_PASS_RETAKE = 1.0
"""Seconds: a node pass takes the eligible nodes again at most this often, and stale
objects (see ``_Eligible.stale``) are refreshed at most this often."""


@dataclass(frozen=True)
class LoadBalancerClasses:
    """Which ``type: LoadBalancer`` Services are this CCM's, by ``spec.loadBalancerClass``
    (``--load-balancer-class``, ``--serve-unclassed-load-balancers``). Upstream serves
    exactly the Services without a class; a Service of any class not listed here is
    never touched."""

    classes: frozenset[str] = frozenset()
    unclassed: bool = True

    def serves(self, service: Service) -> bool:
        wanted = service.spec.load_balancer_class
        return self.unclassed if wanted is None else wanted in self.classes


UPSTREAM_CLASSES = LoadBalancerClasses()


@dataclass(frozen=True)
class ServiceControllerOptions:
    cluster_name: str = "kubernetes"
    """``--cluster-name``, passed to every load-balancer call."""
    workers: int = 1
    """``--concurrent-service-syncs``: service workers and node-pass parallelism."""
    service_resync_period: float = 30.0
    node_sync_window: float = 1.0
    """``--node-sync-window``: node changes share one node pass (one ``UpdateLoadBalancer``
    per load balancer) until none has come for this long; 0 passes at once."""
    node_sync_max_delay: float = 10.0
    """``--node-sync-max-delay``: while changes keep coming, the pass waits at most this
    long after the first of them (a value ≤ ``node_sync_window`` is a fixed window)."""
    classes: LoadBalancerClasses = field(default_factory=LoadBalancerClasses)
    """Which Services are ours by ``loadBalancerClass`` (upstream: only unclassed)."""


# -- which Services and Nodes count, and when ------------------------------------------


def wants_load_balancer(service: Service, classes: LoadBalancerClasses = UPSTREAM_CLASSES) -> bool:
    return service.spec.type == "LoadBalancer" and classes.serves(service)


def needs_cleanup(service: Service, classes: LoadBalancerClasses = UPSTREAM_CLASSES) -> bool:
    """Upstream's rule: the cleanup finalizer is on, and the Service is being deleted
    or no longer wants a load balancer from this CCM (type or class changed)."""
    if wk.FINALIZER_LOAD_BALANCER_CLEANUP not in service.metadata.finalizers:
        return False
    return service.metadata.deletion_timestamp is not None or not wants_load_balancer(
        service, classes
    )


OwnAnnotationWrite = Callable[[Mapping[str, str], Mapping[str, str]], bool]
"""``LoadBalancer.own_annotation_write``: True when the change of a Service's
annotations is only the provider's own write (ippool's address annotation)."""


def needs_update(
    old: Service,
    new: Service,
    classes: LoadBalancerClasses = UPSTREAM_CLASSES,
    own_write: OwnAnnotationWrite | None = None,
) -> bool:
    """The first of the update rules, in upstream's order, that applies. ``own_write``
    (the provider's, when it has one) tells an annotation change that is only the
    provider writing its own result, which needs no second sync."""
    old_wants, new_wants = wants_load_balancer(old, classes), wants_load_balancer(new, classes)
    if not old_wants and not new_wants:
        return False
    if old_wants != new_wants:
        return True
    a, b = old.spec, new.spec
    return (
        a.load_balancer_source_ranges != b.load_balancer_source_ranges
        or a.ports != b.ports
        or a.session_affinity != b.session_affinity
        or a.session_affinity_config != b.session_affinity_config
        or a.load_balancer_ip != b.load_balancer_ip
        or a.external_ips != b.external_ips
        or (
            dict(old.metadata.annotations) != dict(new.metadata.annotations)
            and not (own_write and own_write(old.metadata.annotations, new.metadata.annotations))
        )
        or old.metadata.uid != new.metadata.uid
        or a.external_traffic_policy != b.external_traffic_policy
        or a.health_check_node_port != b.health_check_node_port
        or len(a.ip_families) != len(b.ip_families)
    )


_GO_FALSE = frozenset({"0", "f", "F", "false", "FALSE", "False"})


def node_included(node: Node) -> bool:
    """The exclusion label absent, or set to a value Go parses as false."""
    value = node.metadata.labels.get(wk.LABEL_EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS)
    return value is None or value in _GO_FALSE


def node_eligible(node: Node) -> bool:
    """Backend eligibility: not being deleted, included, no cluster-autoscaler deletion
    taint. Readiness is deliberately not a criterion."""
    return (
        node.metadata.deletion_timestamp is None
        and node_included(node)
        and find_taint(node.spec.taints, wk.TAINT_TO_BE_DELETED_BY_CLUSTER_AUTOSCALER) is None
    )


def should_sync_updated_node(old: Node, new: Node) -> bool:
    """Upstream's trigger: the exclusion label's verdict or the providerID changed."""
    return node_included(old) != node_included(new) or old.spec.provider_id != new.spec.provider_id


def eligibility_changed(old: Node, new: Node, labels: frozenset[str] = frozenset()) -> bool:
    """kube-ccm's trigger: upstream's, plus any change of eligibility (the
    ``ToBeDeletedByClusterAutoscaler`` taint, a ``deletionTimestamp``), plus any of the
    provider's backend-selection ``labels``. Upstream lets those wait for some later
    sync, so backends go on receiving traffic for a node being drained or deleted."""
    return (
        should_sync_updated_node(old, new)
        or node_eligible(old) != node_eligible(new)
        or any(old.metadata.labels.get(k) != new.metadata.labels.get(k) for k in labels)
    )


_MAX_NODE_NAMES_TO_LOG = 20


def loggable_node_names(nodes: Sequence[Node]) -> str:
    """Sorted node names as Go prints a string slice, at most 20 then ``<N more>``
    (upstream's ``loggableNodeNames`` in the ``UpdateLoadBalancerFailed`` message)."""
    names = sorted(n.metadata.name for n in nodes)
    if len(names) > _MAX_NODE_NAMES_TO_LOG:
        skipped = len(names) - _MAX_NODE_NAMES_TO_LOG
        names = [*names[:_MAX_NODE_NAMES_TO_LOG], f"<{skipped} more>"]
    return "[" + " ".join(names) + "]"


def status_as_stored(status: LoadBalancerStatus) -> LoadBalancerStatus:
    """``status`` as the API server stores it: since Kubernetes 1.30 an ingress with an
    ``ip`` and no ``ipMode`` gets ``ipMode: VIP``. A provider that leaves ``ipMode``
    unset returns a status equal to the stored one once both are compared this way
    (upstream compares them as they are, and patches every converged Service again)."""
    if all(i.ip_mode is not None or not i.ip for i in status.ingress):
        return status
    return LoadBalancerStatus(ingress=tuple(_ingress_as_stored(i) for i in status.ingress))


def _ingress_as_stored(ingress: LoadBalancerIngress) -> LoadBalancerIngress:
    if ingress.ip_mode is not None or not ingress.ip:
        return ingress
    return msgspec.structs.replace(ingress, ip_mode="VIP")


NodeSet = frozenset[tuple[str, str]]
"""(name, providerID) of each node a load balancer was given: what decides whether its
backends changed. Kept instead of the Node objects, so no old version of any Node stays
alive once the cache has moved on."""


@dataclass
class _Eligible:
    """The eligible nodes of one node generation (see ``ServiceController._eligible_nodes``)."""

    generation: int
    nodes: tuple[Node, ...]
    node_set: NodeSet
    built_at: float
    """``time.monotonic()`` when ``nodes`` was built."""
    stale: bool = False
    """A Node was updated since ``nodes`` was built, in no way that changes the set."""


class ServiceController(ControllerBase):
    name = wk.CONTROLLER_SERVICE_LB

    def __init__(
        self,
        *,
        client: KubeClient,
        services: Informer[Service],
        nodes: Informer[Node],
        cloud: CloudProvider,
        recorder: EventRecorder,
        metrics: Metrics,
        options: ServiceControllerOptions | None = None,
        scope: NodeScope = EVERY_NODE,
        shard: Shard = WHOLE,
    ) -> None:
        super().__init__(client=client, recorder=recorder, scope=scope)
        self._lb: LoadBalancer = supported(cloud.load_balancer(), "external load balancers")
        self._own_write: OwnAnnotationWrite = self._lb.own_annotation_write
        self._services = services
        self._nodes = nodes
        self.options = options or ServiceControllerOptions()
        # With --worker-processes, this process syncs (and so caches and re-hosts on
        # node changes) only its shard's Services.
        self.queue = self._new_queue(wk.QUEUE_SERVICE, service_rate_limiter(), metrics, shard)
        self.node_queue = self._new_queue(wk.QUEUE_SERVICE_NODES, service_rate_limiter(), metrics)
        self._cache: dict[str, Service] = {}
        """Services this controller has processed, by key (for deletion without a finalizer)."""
        self._last_synced: dict[str, tuple[int, NodeSet]] = {}
        """Per Service: the node generation and the :data:`NodeSet` it was last given."""
        self._node_generation = 0
        """Counts the node changes that can change the eligible set (add, delete, an
        eligibility or scope change); other updates (a kubelet's status) leave it."""
        self._eligible: _Eligible | None = None
        self._unchanged_memo: tuple[NodeSet, NodeSet, bool] | None = None
        """The eligible nodes, sorted and filtered once per node generation: every
        Service synced between two such changes shares this one tuple (at 5,000 nodes and
        2,000 Services, a tuple per Service held ~80 MiB and sorted 5,000 nodes 2,000
        times)."""
        self._locks: dict[str, asyncio.Lock] = {}
        self._pending_since: float | None = None
        """Loop time of the first node change not yet given a pass (None: none pending)."""
        self._last_node_change = 0.0
        self._last_release = float("-inf")
        """Loop time the last node pass was queued."""
        self._quiet = self.options.node_sync_window
        """The quiet spell that ends a pending pass's wait (see ``_trigger_node_pass``)."""
        self._sync_total = metrics.counter(
            wk.METRIC_SERVICE_LOADBALANCER_SYNC_TOTAL,
            "A metric counting the amount of times any load balancer has been configured, "
            "as an effect of service/node changes on the cluster",
        )
        self._nodesync_errors = metrics.counter(
            wk.METRIC_SERVICE_NODESYNC_ERROR_TOTAL,
            "A metric counting the amount of times any load balancer has been configured and "
            "errored, as an effect of node changes on the cluster",
        )
        self._nodesync_latency = metrics.histogram(
            wk.METRIC_SERVICE_NODESYNC_LATENCY,
            "A metric measuring the latency for nodesync which updates loadbalancer hosts on "
            "cluster node updates.",
            _LATENCY_BUCKETS,
        )
        self._update_latency = metrics.histogram(
            wk.METRIC_SERVICE_UPDATE_LOADBALANCER_HOST_LATENCY,
            "A metric measuring the latency for updating each load balancer hosts.",
            _LATENCY_BUCKETS,
        )
        metrics.gauge(
            wk.METRIC_SERVICE_NODE_PASS_PENDING,
            "1 while a node pass waits for its quiet spell (--node-sync-window), else 0",
        ).set_function(lambda: float(self._pending_since is not None))
        services.add_handler(
            on_add=self._on_service_add,
            on_update=self._on_service_update,
            on_delete=self._on_service_delete,
            resync_period=self.options.service_resync_period,
        )
        nodes.add_handler(
            on_add=self._on_node_add_or_delete,
            on_update=self._on_node_update,
            on_delete=self._on_node_add_or_delete,
        )
        self._lb.set_resync(self._resync)

    # -- event handlers ---------------------------------------------------------

    def _on_service_add(self, service: Service) -> None:
        if wants_load_balancer(service, self.options.classes) or needs_cleanup(
            service, self.options.classes
        ):
            self.queue.add(object_key(service))

    def _on_service_update(self, old: Service, new: Service) -> None:
        if needs_update(old, new, self.options.classes, self._own_write) or needs_cleanup(
            new, self.options.classes
        ):
            self.queue.add(object_key(new))

    def _on_service_delete(self, service: Service) -> None:
        # Upstream has no delete handler: a Service deleted without our finalizer (removed
        # by hand, or never added by an older controller) is cleaned up there only if its
        # key happens to be queued already. Ours queues it whenever this controller holds
        # a copy, so its load balancer is deleted (and retried until it is).
        key = object_key(service)
        if key in self._cache:
            self.queue.add(key)

    def _resync(self, key: str) -> None:
        """The provider's ``set_resync`` hook: sync a Service again because something
        its load balancer's status depends on changed (ServiceLB's pods). Only a
        Service this controller serves is queued."""
        service = self._services.get(key)
        if service is not None and wants_load_balancer(service, self.options.classes):
            self.queue.add(key)

    def _on_node_add_or_delete(self, _node: Node) -> None:
        self._node_generation += 1
        self._trigger_node_pass()

    def _on_node_update(self, old: Node, new: Node) -> None:
        if eligibility_changed(old, new, self._lb.backend_node_labels) or (
            self._scope.manages(old) != self._scope.manages(new)
        ):
            self._node_generation += 1
            self._trigger_node_pass()
        elif self._eligible is not None:
            # The same set: only the objects handed to the provider are refreshed, when
            # next asked for (a kubelet's status update costs no sort and no pass).
            self._eligible.stale = True

    def _trigger_node_pass(self) -> None:
        """One node pass for the node changes that come until none has come for a quiet
        spell, and at most ``node_sync_max_delay`` after the first of them, so a stream
        of changes cannot starve it (a debounce with a cap). The quiet spell is
        ``node_sync_window``, doubled after each pass that follows the previous one
        within the cap (up to the cap), and back to the window once a cap has passed
        without a pass: a burst of Nodes joining and being initialised, whose changes
        pause now and then (an apiserver or etcd stall), is a few passes, not one per
        pause; a single change still reaches the cloud after one window."""
        window = self.options.node_sync_window
        if window <= 0:
            self.node_queue.add(_NODE_PASS_KEY)
            return
        now = asyncio.get_running_loop().time()
        self._last_node_change = now
        if self._pending_since is None:
            self._pending_since = now
            if now - self._last_release > self.options.node_sync_max_delay:
                self._quiet = window
            self._arm_node_pass(self._node_pass_due())

    def _node_pass_due(self) -> float:
        """When the pending pass is due: a quiet spell after the last change, capped."""
        assert self._pending_since is not None
        cap = self._pending_since + max(self.options.node_sync_max_delay, 0.0)
        return min(self._last_node_change + self._quiet, cap)

    def _arm_node_pass(self, at: float) -> None:
        asyncio.get_running_loop().call_at(at, self._release_node_pass)

    def _release_node_pass(self) -> None:
        """The timer: queue the pass if it is due, else wait until it is (one timer for
        the whole burst: a change only records its time)."""
        if self._pending_since is None:
            return
        due = self._node_pass_due()
        if asyncio.get_running_loop().time() < due:
            self._arm_node_pass(due)
            return
        self._pending_since = None
        self._last_release = asyncio.get_running_loop().time()
        options = self.options
        self._quiet = min(
            2 * self._quiet, max(options.node_sync_max_delay, options.node_sync_window)
        )
        self.node_queue.add(_NODE_PASS_KEY)

    # -- running ----------------------------------------------------------------

    async def run(self) -> None:
        await self._services.wait_synced()
        await self._nodes.wait_synced()
        await self._serve(
            run_workers(self.queue, self.sync, self.options.workers, retry_after=_retry_after),
            run_workers(self.node_queue, self._node_pass, 1),
        )

    def _lock(self, key: str) -> asyncio.Lock:
        return self._locks.setdefault(key, asyncio.Lock())

    # -- sync ---------------------------------------------------------------------

    async def sync(self, key: str) -> None:
        """Upstream's ``syncService``: a Service gone goes to
        :meth:`_process_service_deletion`, one present to
        :meth:`_process_service_create_or_update`."""
        if key.count("/") != 1:
            log.error('unexpected key format: "%s"; dropping it', key)
            return
        async with self._lock(key):
            service = self._services.get(key)
            if service is None:
                await self._process_service_deletion(key)
            else:
                await self._process_service_create_or_update(key, service)

    async def _process_service_deletion(self, key: str) -> None:
        # The copy stays in our cache until its load balancer is gone, so a failed
        # delete is retried (with backoff) instead of leaking.
        cached = self._cache.get(key)
        if cached is not None and wants_load_balancer(cached, self.options.classes):
            await self._process_load_balancer_delete(cached)
        self._forget(key)

    async def _process_service_create_or_update(self, key: str, service: Service) -> None:
        cached = self._cache.get(key)
        if cached is not None and cached.metadata.uid != service.metadata.uid:
            await self._process_load_balancer_delete(cached)  # re-created under the same name
        self._cache[key] = service
        with self._warn_on_failure(
            service, wk.REASON_SYNC_LOAD_BALANCER_FAILED, wk.MESSAGE_SYNC_LOAD_BALANCER_FAILED
        ):
            operation = await self._sync_load_balancer_if_needed(key, service)
        if operation == "delete":
            self._forget(key)

    def _forget(self, key: str) -> None:
        self._cache.pop(key, None)
        self._last_synced.pop(key, None)

    async def _sync_load_balancer_if_needed(
        self, key: str, service: Service
    ) -> Literal["ensure", "delete"]:
        """Upstream's ``syncLoadBalancerIfNeeded``: delete the load balancer (then the
        finalizer) or ensure it (finalizer first), then write the status."""
        previous = service.status.load_balancer
        if not wants_load_balancer(service, self.options.classes) or needs_cleanup(
            service, self.options.classes
        ):
            await self._cleanup_load_balancer(key, service)
            await self._patch_status(service, previous, LoadBalancerStatus())
            return "delete"
        status = await self._ensure_load_balancer(key, service)
        if status is not None:
            await self._patch_status(service, previous, status)
        return "ensure"

    async def _ensure_load_balancer(self, key: str, service: Service) -> LoadBalancerStatus | None:
        """The finalizer, then the load balancer with the eligible nodes; its status, or
        ``None`` when it is implemented elsewhere (no status of ours to write)."""
        self._event(
            service, "Normal", wk.REASON_ENSURING_LOAD_BALANCER, wk.MESSAGE_ENSURING_LOAD_BALANCER
        )
        try:
            await self._add_finalizer(service)
        except ApiError as exc:
            raise ApiCallError(
                f"failed to add load balancer cleanup finalizer: {exc}", exc
            ) from exc
        generation = self._node_generation
        nodes, node_set = self._eligible_nodes()
        if not nodes:
            self._event(
                service,
                "Warning",
                wk.REASON_UNAVAILABLE_LOAD_BALANCER,
                wk.MESSAGE_UNAVAILABLE_LOAD_BALANCER,
            )
        self._last_synced[key] = (generation, node_set)
        self._check_annotation_lengths(service)
        status: LoadBalancerStatus | None
        try:
            status = await self._lb.ensure_load_balancer(self.options.cluster_name, service, nodes)
        except ImplementedElsewhereError:
            return None
        except Exception as exc:
            raise CloudCallError(f"failed to ensure load balancer: {exc}", exc) from exc
        if status is None:
            raise CloudCallError("service status returned by EnsureLoadBalancer is nil")
        self._event(
            service, "Normal", wk.REASON_ENSURED_LOAD_BALANCER, wk.MESSAGE_ENSURED_LOAD_BALANCER
        )
        return status

    async def _cleanup_load_balancer(self, key: str, service: Service) -> None:
        """A Service with our finalizer that no longer wants a load balancer: delete it
        if the cloud has one, then remove the finalizer (always, as upstream)."""
        try:
            existing = await self._lb.get_load_balancer(self.options.cluster_name, service)
        except Exception as exc:
            raise CloudCallError(
                f"failed to check if load balancer exists before cleanup: {exc}", exc
            ) from exc
        if existing is not None:
            log.info("deleting the load balancer of service %s", key)
            try:
                await self._delete_load_balancer(service)
            except ImplementedElsewhereError:
                pass
            except Exception as exc:
                raise CloudCallError(f"failed to delete load balancer: {exc}", exc) from exc
        try:
            await self._remove_finalizer(service)
        except ApiError as exc:
            raise ApiCallError(
                f"failed to remove load balancer cleanup finalizer: {exc}", exc
            ) from exc
        self._event(
            service, "Normal", wk.REASON_DELETED_LOAD_BALANCER, wk.MESSAGE_DELETED_LOAD_BALANCER
        )

    async def _process_load_balancer_delete(self, service: Service) -> None:
        """Upstream's ``processLoadBalancerDelete``: a Service gone (or re-created)
        without our finalizer; a failure is a ``DeleteLoadBalancerFailed`` Event."""
        with self._warn_on_failure(
            service, wk.REASON_DELETE_LOAD_BALANCER_FAILED, wk.MESSAGE_DELETE_LOAD_BALANCER_FAILED
        ):
            await self._delete_load_balancer(service)
        self._event(
            service, "Normal", wk.REASON_DELETED_LOAD_BALANCER, wk.MESSAGE_DELETED_LOAD_BALANCER
        )

    async def _delete_load_balancer(self, service: Service) -> None:
        """The delete itself, for both paths above (each gives failures its own meaning)."""
        self._event(
            service, "Normal", wk.REASON_DELETING_LOAD_BALANCER, wk.MESSAGE_DELETING_LOAD_BALANCER
        )
        await self._lb.ensure_load_balancer_deleted(self.options.cluster_name, service)

    @contextlib.contextmanager
    def _warn_on_failure(self, service: Service, reason: str, message: str) -> Iterator[None]:
        """An error in the block becomes a Warning Event (``message`` formatted with
        ``error``) and goes on."""
        try:
            yield
        except Exception as exc:
            self._event(service, "Warning", reason, message.format(error=exc))
            raise

    def _event(self, service: Service, event_type: EventType, reason: str, message: str) -> None:
        """The one way this controller records an Event on a Service."""
        self._recorder.event(
            ObjectReference(
                kind="Service",
                name=service.metadata.name,
                namespace=service.metadata.namespace,
                uid=service.metadata.uid,
            ),
            event_type,
            reason,
            message,
        )

    # -- writes ---------------------------------------------------------------------

    async def _patch_service_status(self, service: Service, patch: dict[str, Any]) -> None:
        """A strategic-merge patch on the Service's ``status`` subresource (finalizers
        included: the service controller may write only there)."""
        meta = service.metadata
        await self._api.patch(
            SERVICES, meta.name, patch, namespace=meta.namespace, subresource="status"
        )

    async def _add_finalizer(self, service: Service) -> None:
        finalizers = service.metadata.finalizers
        if wk.FINALIZER_LOAD_BALANCER_CLEANUP in finalizers:
            return
        order = [*finalizers, wk.FINALIZER_LOAD_BALANCER_CLEANUP]
        await self._patch_service_status(
            service,
            {
                "metadata": {
                    "$setElementOrder/finalizers": order,
                    "finalizers": [wk.FINALIZER_LOAD_BALANCER_CLEANUP],
                }
            },
        )

    async def _remove_finalizer(self, service: Service) -> None:
        if wk.FINALIZER_LOAD_BALANCER_CLEANUP not in service.metadata.finalizers:
            return
        try:
            await self._patch_service_status(
                service,
                {
                    "metadata": {
                        "$deleteFromPrimitiveList/finalizers": [wk.FINALIZER_LOAD_BALANCER_CLEANUP]
                    }
                },
            )
        except ApiError as exc:
            if not exc.not_found:
                raise

    async def _patch_status(
        self, service: Service, previous: LoadBalancerStatus, status: LoadBalancerStatus
    ) -> None:
        if previous == status or status_as_stored(previous) == status_as_stored(status):
            return
        ingress = status.ingress if status.ingress else None
        try:
            await self._patch_service_status(
                service, {"status": {"loadBalancer": {"ingress": ingress}}}
            )
        except ApiError as exc:
            if exc.not_found:
                return
            raise ApiCallError(f"failed to update load balancer status: {exc}", exc) from exc

    # -- nodes ------------------------------------------------------------------------

    def _eligible_nodes(self) -> tuple[tuple[Node, ...], NodeSet]:
        """The eligible nodes by name, and their :data:`NodeSet`.

        Listed, filtered and sorted once per node generation. Between two, a Node's
        update (a kubelet's status) only marks the tuple stale: it is rebuilt from the
        cache by name, in the same order and with the same :data:`NodeSet`, at most
        once per :data:`_PASS_RETAKE` (kubelets reporting all the time must not make
        every sync walk all Nodes), so a provider is handed objects at most that much
        older than the cache's, in fields that decide nothing about the backends."""
        cached = self._eligible
        if cached is None or cached.generation != self._node_generation:
            nodes = tuple(
                sorted(
                    (n for n in self._nodes.list() if node_eligible(n) and self._scope.manages(n)),
                    key=lambda n: n.metadata.name,
                )
            )
            node_set = frozenset((n.metadata.name, n.spec.provider_id) for n in nodes)
            cached = self._eligible = _Eligible(
                self._node_generation, nodes, node_set, time.monotonic()
            )
        elif cached.stale and time.monotonic() - cached.built_at >= _PASS_RETAKE:
            fresh: list[Node] = []
            for node in cached.nodes:
                current = self._nodes.get(node.metadata.name)
                if current is None:  # deleted: the generation moves on with its event
                    break
                fresh.append(current)
            else:
                cached.nodes = tuple(fresh)
                cached.stale = False
                cached.built_at = time.monotonic()
        return cached.nodes, cached.node_set

    async def _node_pass(self, _key: str) -> None:
        """Bring every ensured load balancer's backends in line with the eligible nodes.

        The nodes are taken at the start of the pass, as upstream lists them once per
        pass, and taken again during it at most every :data:`_PASS_RETAKE` seconds when
        they changed meanwhile: a burst of joining nodes no longer makes every later
        Service of the pass list, filter and sort the nodes again (Nodes times Services).
        Every change also queues the next pass. A Service already given a newer set by
        its own sync meanwhile is left alone."""
        started = time.monotonic()
        semaphore = asyncio.Semaphore(max(1, self.options.workers))
        retry: list[str] = []
        taken = (self._node_generation, self._eligible_nodes(), time.monotonic())

        async def one(key: str) -> None:
            nonlocal taken
            async with semaphore, self._lock(key):
                service = self._cache.get(key)
                if service is None or not wants_load_balancer(service, self.options.classes):
                    return
                if self._services.get(key) is None:
                    return  # deleted: its load balancer is being deleted, not updated
                now = time.monotonic()
                if taken[0] != self._node_generation and now - taken[2] >= _PASS_RETAKE:
                    taken = (self._node_generation, self._eligible_nodes(), now)
                if not await self._update_hosts(key, service, taken[0], taken[1]):
                    retry.append(key)

        await asyncio.gather(*(one(key) for key in list(self._cache)))
        for key in retry:
            self.queue.add(key)
        self._nodesync_latency.observe(time.monotonic() - started)

    def _unchanged(self, previous: NodeSet, new: NodeSet) -> bool:
        """Whether a load balancer given ``previous`` needs ``new`` (names, providerIDs).

        Services synced together share their sets, so the answer is remembered for the
        last pair compared: a node pass over 2,000 Services compares once, not 2,000
        times."""
        memo = self._unchanged_memo
        if memo is not None and memo[0] is previous and memo[1] is new:
            return memo[2]
        same = previous == new
        self._unchanged_memo = (previous, new, same)
        return same

    async def _update_hosts(
        self,
        key: str,
        service: Service,
        generation: int,
        snapshot: tuple[tuple[Node, ...], NodeSet],
    ) -> bool:
        """One service of a node pass, given the pass's nodes of node ``generation``;
        False means "retry with a full sync"."""
        new, new_set = snapshot
        synced_at, previous = self._last_synced.get(key, (-1, frozenset()))
        if synced_at > generation:
            return True  # its own sync gave it a newer set; the next pass looks again
        self._last_synced[key] = (generation, new_set)
        if previous is new_set or self._unchanged(previous, new_set):
            return True
        self._sync_total.inc()
        started = time.monotonic()
        cluster = self.options.cluster_name
        try:
            await self._lb.update_load_balancer(cluster, service, new)
        except ImplementedElsewhereError:
            return True
        except Exception as exc:
            try:
                exists = await self._lb.get_load_balancer(cluster, service)
            except Exception as lookup_error:
                log.warning("service %s: GetLoadBalancer failed: %s", key, lookup_error)
                exists = LoadBalancerStatus()
            if exists is None:
                return True
            self._nodesync_errors.inc()
            self._event(
                service,
                "Warning",
                wk.REASON_UPDATE_LOAD_BALANCER_FAILED,
                wk.MESSAGE_UPDATE_LOAD_BALANCER_FAILED.format(
                    hosts=loggable_node_names(new), total=len(new), error=exc
                ),
            )
            return False
        finally:
            self._update_latency.observe(time.monotonic() - started)
        if new:
            self._event(
                service, "Normal", wk.REASON_UPDATED_LOAD_BALANCER, wk.MESSAGE_UPDATED_LOAD_BALANCER
            )
        else:
            self._event(
                service,
                "Warning",
                wk.REASON_UNAVAILABLE_LOAD_BALANCER,
                wk.MESSAGE_UNAVAILABLE_LOAD_BALANCER,
            )
        return True

    def _check_annotation_lengths(self, service: Service) -> None:
        """A value the provider reads and a tenant may write is refused unread when it
        is over :data:`MAX_VALUE_LENGTH` (the Event says which key, quoting none of it)."""
        annotations = service.metadata.annotations
        for declared in self._lb.service_annotations:
            length = len(annotations.get(declared.key, ""))
            if length > MAX_VALUE_LENGTH:
                error = AnnotationTooLongError(declared.key, length, MAX_VALUE_LENGTH)
                raise SyncError(f"failed to ensure load balancer: {error}", error) from error


def _retry_after(exc: Exception) -> float | None:
    """The delay a provider's :class:`RetryError` asks for: read off the
    :class:`CloudCallError` that caught it; anything else is searched as
    :func:`find_retry_error` does (a provider's own wrapping)."""
    retry = exc.retry if isinstance(exc, CloudCallError) else find_retry_error(exc)
    return None if retry is None else retry.retry_after


__all__ = [
    "UPSTREAM_CLASSES",
    "LoadBalancerClasses",
    "ServiceController",
    "ServiceControllerOptions",
    "eligibility_changed",
    "loggable_node_names",
    "needs_cleanup",
    "needs_update",
    "node_eligible",
    "node_included",
    "should_sync_updated_node",
    "status_as_stored",
    "wants_load_balancer",
]
