"""The cloud-call boundary: every call from a controller into the provider passes here.

Two layers, both in this module so that no controller owns them:

* :func:`call_cloud` gives one contract call a deadline (``--cloud-call-timeout``):
  a hung provider becomes a :class:`CloudCallTimeoutError` the controller retries
  with its own backoff, never a stuck worker.
* :func:`guard` wraps a provider so that each of its asynchronous methods goes
  through a :class:`CloudCalls`: an optional token bucket of cloud calls per
  provider (cloud API quotas), a bounded number of retries with full-jitter
  backoff for errors the provider marks :class:`TransientCloudError` (throttling,
  a dropped connection), and per-attempt metrics under the convention peer CCMs
  share: ``cloudprovider_<provider>_api_request_duration_seconds{request}`` and
  ``cloudprovider_<provider>_api_request_errors{request}``, where ``request`` is
  the contract method's upstream name (``EnsureLoadBalancer``).

Retries stay inside the caller's deadline: the deadline covers the whole call,
waits for tokens and backoff included. A :class:`RetryError` is never retried
here; it is the service controller's to honour (its exact delay). Answers that
are not failures (instance not found, not implemented, implemented elsewhere)
count as no error.
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from kube_ccm.api.objects import LoadBalancerStatus, Node, NodeAddress, PersistentVolume, Service
from kube_ccm.cloudprovider import (
    ClientBuilder,
    CloudProvider,
    Clusters,
    ImplementedElsewhereError,
    InformerUser,
    InstanceMetadata,
    InstanceNotFoundError,
    Instances,
    InstancesV2,
    LoadBalancer,
    LoadBalancerInventory,
    NotImplementedByProviderError,
    OwnedLoadBalancer,
    PVLabeler,
    Route,
    Routes,
    TransientCloudError,
    Zone,
    Zones,
)
from kube_ccm.runtime.dryrun import DryRun
from kube_ccm.runtime.metrics import Metrics
from kube_ccm.runtime.ratelimit import AsyncTokenBucket

log = logging.getLogger(__name__)

R = TypeVar("R")

_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
_ANSWERS = (InstanceNotFoundError, NotImplementedByProviderError, ImplementedElsewhereError)
UNHEALTHY_AFTER_FAILURES = 3


class CloudCallTimeoutError(TimeoutError):
    """A cloud provider call did not return within the configured deadline."""


class CloudCallsFencedError(RuntimeError):
    """The daemon may no longer call the cloud (leadership lost, or shutting down)."""


async def call_cloud(what: str, call: Awaitable[R], deadline: float) -> R:
    """Await one provider call with a deadline; a hang becomes a clear, retryable error."""
    try:
        async with asyncio.timeout(deadline):
            return await call
    except TimeoutError:
        raise CloudCallTimeoutError(
            f"cloud provider call {what} did not return within {deadline:g} s"
        ) from None


@dataclass(frozen=True)
class CloudCallPolicy:
    """How calls into one provider are limited and retried."""

    qps: float = 0.0
    """Cloud calls per second for this provider; 0 means unlimited."""
    burst: int = 10
    """Calls allowed at once above ``qps`` after a quiet period."""
    attempts: int = 3
    """Tries of a call that fails with :class:`TransientCloudError` (1: never retry)."""
    backoff_base: float = 0.2
    backoff_cap: float = 5.0
    unhealthy_after: float = 120.0
    """Seconds without a successful call (with at least three failures in a row) before
    the ``cloud`` health check reports failing; the daemon uses two deadlines, at least
    10 s."""

    def __post_init__(self) -> None:
        if self.qps < 0 or self.burst < 1 or self.attempts < 1:
            raise ValueError(
                f"invalid cloud call policy: qps {self.qps:g} must be >= 0, burst "
                f"{self.burst} >= 1, attempts {self.attempts} >= 1"
            )

    def backoff(self, attempt: int, suggested: float | None) -> float:
        """Seconds to wait before try ``attempt + 1``: the cloud's suggestion, else full
        jitter over an exponential window."""
        if suggested is not None and suggested >= 0:
            return suggested
        return random.uniform(0, min(self.backoff_cap, self.backoff_base * 2**attempt))


def metric_provider_name(provider: str) -> str:
    """The provider's name as it appears in metric names (``[a-z0-9_]``)."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", provider).lower()


_SPECIAL_WORDS = {"id": "ID", "ids": "IDs"}


def request_name(method: str) -> str:
    """The upstream name of a contract method: ``node_addresses_by_provider_id`` →
    ``NodeAddressesByProviderID``."""
    return "".join(_SPECIAL_WORDS.get(w, w.capitalize()) for w in method.split("_"))


class CloudCalls:
    """Limits, retries and meters the calls into one provider."""

    def __init__(
        self,
        provider: str,
        metrics: Metrics,
        policy: CloudCallPolicy | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.provider = provider
        self.policy = policy or CloudCallPolicy()
        self._bucket = (
            AsyncTokenBucket(self.policy.qps, self.policy.burst) if self.policy.qps > 0 else None
        )
        self._fenced: str | None = None
        self._guard: Callable[[], str | None] | None = None
        self.dry_run: DryRun | None = None
        """``--dry-run``: the guarded capabilities skip calls that change the cloud."""
        self._clock = clock
        self._last_success: float | None = None
        self._started = self._clock()
        self._failures_in_a_row = 0
        self._failing_since = 0.0
        """When the current run of failures began (the clock's time)."""
        self._last_failure = ""
        self._reported_unhealthy = False
        name = metric_provider_name(provider)
        self._duration = metrics.histogram(
            f"cloudprovider_{name}_api_request_duration_seconds",
            f"Latency of calls into the {provider} cloud provider, per contract method",
            _DURATION_BUCKETS,
            ("request",),
        )
        self._errors = metrics.exact_counter(
            f"cloudprovider_{name}_api_request_errors",
            f"Failed calls into the {provider} cloud provider, per contract method",
            ("request",),
        )

    def health(self) -> tuple[bool, str]:
        """(healthy, why not): unhealthy once the last :data:`UNHEALTHY_AFTER_FAILURES`
        attempts all failed (errors, or no answer within the deadline) and nothing
        succeeded for the policy's ``unhealthy_after`` seconds. Informational: the daemon shows
        it on ``/healthz/cloud`` and in ``/healthz?verbose`` without failing liveness,
        since restarting the CCM does not mend the cloud."""
        since = self._last_success if self._last_success is not None else self._started
        quiet = self._clock() - since
        if (
            self._failures_in_a_row < UNHEALTHY_AFTER_FAILURES
            or quiet < self.policy.unhealthy_after
        ):
            if self._reported_unhealthy:
                log.info("the %s cloud answers again", self.provider)
                self._reported_unhealthy = False
            return True, ""
        reason = (
            f"the last {self._failures_in_a_row} calls to the {self.provider} cloud failed "
            f"and none succeeded for {quiet:.0f} s; last error: {self._last_failure}"
        )
        if not self._reported_unhealthy:
            log.error("cloud health check failing: %s", reason)
            self._reported_unhealthy = True
        return False, reason

    def _failed(self, request: str, error: str) -> None:
        self._errors.inc(request=request)
        if not self._failures_in_a_row:
            self._failing_since = self._clock()
        self._failures_in_a_row += 1
        self._last_failure = f"{request}: {error}"

    def _succeeded(self) -> None:
        now = self._clock()
        if self._failures_in_a_row:
            # Once per recovery, at the default verbosity: the failures were logged by
            # their callers, the end of them would otherwise go unsaid.
            failures = self._failures_in_a_row
            log.info(
                "%s cloud provider calls succeed again after %d %s / %.1f s (the last: %s)",
                self.provider,
                failures,
                "failure" if failures == 1 else "failures",
                now - self._failing_since,
                self._last_failure,
            )
        self._failures_in_a_row = 0
        self._last_success = now

    def fence(self, reason: str) -> None:
        """From now on no call starts, and no retry of a failed one: each raises
        :class:`CloudCallsFencedError`. A call already inside the provider is not
        interrupted here; the daemon cancels it as it stops."""
        self._fenced = reason

    def set_guard(self, guard: Callable[[], str | None] | None) -> None:
        """Ask ``guard()`` before each call starts; a reason refuses it, as
        :meth:`fence` does, for as long as the guard gives one."""
        self._guard = guard

    def _check_fence(self, request: str) -> None:
        if self._fenced is not None:
            raise CloudCallsFencedError(f"cloud call {request} refused: {self._fenced}")
        if self._guard is not None and (reason := self._guard()):
            raise CloudCallsFencedError(f"cloud call {request} refused: {reason}")

    async def run(self, request: str, call: Callable[[], Awaitable[R]]) -> R:
        """Make ``call`` (a fresh awaitable per try) under the policy."""
        attempt = 0
        while True:
            self._check_fence(request)
            if self._bucket is not None:
                await self._bucket.acquire()
                self._check_fence(request)
            started = time.monotonic()
            try:
                result = await call()
            except _ANSWERS:
                self._duration.labels(request=request).observe(time.monotonic() - started)
                self._succeeded()
                raise
            except asyncio.CancelledError:
                if self._fenced is None:
                    # Not the daemon stopping: the caller's deadline ran out.
                    self._duration.labels(request=request).observe(time.monotonic() - started)
                    self._failed(request, "no answer within the deadline")
                raise
            except Exception as exc:
                self._duration.labels(request=request).observe(time.monotonic() - started)
                self._failed(request, str(exc))
                attempt += 1
                if not isinstance(exc, TransientCloudError) or attempt >= self.policy.attempts:
                    raise
                delay = self.policy.backoff(attempt - 1, exc.retry_after)
                log.info(
                    "cloud call %s failed (%s); try %d of %d in %.2f s",
                    request,
                    exc,
                    attempt + 1,
                    self.policy.attempts,
                    delay,
                )
                await asyncio.sleep(delay)
                continue
            self._duration.labels(request=request).observe(time.monotonic() - started)
            self._succeeded()
            return result


# -- the guarded provider -------------------------------------------------------------
#
# One explicit subclass per capability, so the types controllers see stay the
# contract's own and mypy checks every forwarded signature.


def _describe(service: Service, nodes: Sequence[Node] | None = None) -> str:
    what = f"Service {service.metadata.namespace}/{service.metadata.name}"
    if nodes is None:
        return what
    return f"{what} with {len(nodes)} nodes"


class _GuardedLoadBalancer(LoadBalancer):
    def __init__(self, inner: LoadBalancer, calls: CloudCalls) -> None:
        self._inner, self._calls = inner, calls
        self.backend_node_labels = inner.backend_node_labels
        self.service_annotations = inner.service_annotations

    async def get_load_balancer(
        self, cluster_name: str, service: Service
    ) -> LoadBalancerStatus | None:
        return await self._calls.run(
            "GetLoadBalancer", lambda: self._inner.get_load_balancer(cluster_name, service)
        )

    def get_load_balancer_name(self, cluster_name: str, service: Service) -> str:
        return self._inner.get_load_balancer_name(cluster_name, service)

    async def ensure_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> LoadBalancerStatus:
        if self._calls.dry_run is not None:
            self._calls.dry_run.cloud_call("EnsureLoadBalancer", _describe(service, nodes))
            current = await self.get_load_balancer(cluster_name, service)
            return current if current is not None else LoadBalancerStatus()
        return await self._calls.run(
            "EnsureLoadBalancer",
            lambda: self._inner.ensure_load_balancer(cluster_name, service, nodes),
        )

    async def update_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> None:
        if self._calls.dry_run is not None:
            self._calls.dry_run.cloud_call("UpdateLoadBalancer", _describe(service, nodes))
            return
        await self._calls.run(
            "UpdateLoadBalancer",
            lambda: self._inner.update_load_balancer(cluster_name, service, nodes),
        )

    async def ensure_load_balancer_deleted(self, cluster_name: str, service: Service) -> None:
        if self._calls.dry_run is not None:
            self._calls.dry_run.cloud_call("EnsureLoadBalancerDeleted", _describe(service))
            return
        await self._calls.run(
            "EnsureLoadBalancerDeleted",
            lambda: self._inner.ensure_load_balancer_deleted(cluster_name, service),
        )


class _GuardedInventoryLoadBalancer(_GuardedLoadBalancer, LoadBalancerInventory):
    def __init__(self, inner: LoadBalancer, calls: CloudCalls) -> None:
        super().__init__(inner, calls)
        assert isinstance(inner, LoadBalancerInventory)
        self._inventory: LoadBalancerInventory = inner

    async def list_load_balancers(self, cluster_name: str) -> Sequence[OwnedLoadBalancer]:
        return await self._calls.run(
            "ListLoadBalancers", lambda: self._inventory.list_load_balancers(cluster_name)
        )


def _guard_load_balancer(inner: LoadBalancer, calls: CloudCalls) -> LoadBalancer:
    if isinstance(inner, LoadBalancerInventory):
        return _GuardedInventoryLoadBalancer(inner, calls)
    return _GuardedLoadBalancer(inner, calls)


class _GuardedInstances(Instances):
    def __init__(self, inner: Instances, calls: CloudCalls) -> None:
        self._inner, self._calls = inner, calls

    async def node_addresses(self, node_name: str) -> tuple[NodeAddress, ...]:
        return await self._calls.run("NodeAddresses", lambda: self._inner.node_addresses(node_name))

    async def node_addresses_by_provider_id(self, provider_id: str) -> tuple[NodeAddress, ...]:
        return await self._calls.run(
            "NodeAddressesByProviderID",
            lambda: self._inner.node_addresses_by_provider_id(provider_id),
        )

    async def instance_id(self, node_name: str) -> str:
        return await self._calls.run("InstanceID", lambda: self._inner.instance_id(node_name))

    async def instance_type(self, node_name: str) -> str:
        return await self._calls.run("InstanceType", lambda: self._inner.instance_type(node_name))

    async def instance_type_by_provider_id(self, provider_id: str) -> str:
        return await self._calls.run(
            "InstanceTypeByProviderID",
            lambda: self._inner.instance_type_by_provider_id(provider_id),
        )

    async def instance_exists_by_provider_id(self, provider_id: str) -> bool:
        return await self._calls.run(
            "InstanceExistsByProviderID",
            lambda: self._inner.instance_exists_by_provider_id(provider_id),
        )

    async def instance_shutdown_by_provider_id(self, provider_id: str) -> bool:
        return await self._calls.run(
            "InstanceShutdownByProviderID",
            lambda: self._inner.instance_shutdown_by_provider_id(provider_id),
        )

    async def add_ssh_key_to_all_instances(self, user: str, key: bytes) -> None:
        await self._calls.run(
            "AddSSHKeyToAllInstances", lambda: self._inner.add_ssh_key_to_all_instances(user, key)
        )

    async def current_node_name(self, hostname: str) -> str:
        return await self._calls.run(
            "CurrentNodeName", lambda: self._inner.current_node_name(hostname)
        )


class _GuardedInstancesV2(InstancesV2):
    def __init__(self, inner: InstancesV2, calls: CloudCalls) -> None:
        self._inner, self._calls = inner, calls

    async def instance_exists(self, node: Node) -> bool:
        return await self._calls.run("InstanceExists", lambda: self._inner.instance_exists(node))

    async def instance_shutdown(self, node: Node) -> bool:
        return await self._calls.run(
            "InstanceShutdown", lambda: self._inner.instance_shutdown(node)
        )

    async def instance_metadata(self, node: Node) -> InstanceMetadata | None:
        return await self._calls.run(
            "InstanceMetadata", lambda: self._inner.instance_metadata(node)
        )


class _GuardedRoutes(Routes):
    def __init__(self, inner: Routes, calls: CloudCalls) -> None:
        self._inner, self._calls = inner, calls

    async def list_routes(self, cluster_name: str) -> Sequence[Route]:
        return await self._calls.run("ListRoutes", lambda: self._inner.list_routes(cluster_name))

    async def create_route(self, cluster_name: str, name_hint: str, route: Route) -> None:
        if self._calls.dry_run is not None:
            self._calls.dry_run.cloud_call(
                "CreateRoute", f"{route.destination_cidr} to {route.target_node}"
            )
            return
        await self._calls.run(
            "CreateRoute", lambda: self._inner.create_route(cluster_name, name_hint, route)
        )

    async def delete_route(self, cluster_name: str, route: Route) -> None:
        if self._calls.dry_run is not None:
            self._calls.dry_run.cloud_call(
                "DeleteRoute", f"{route.destination_cidr} to {route.target_node}"
            )
            return
        await self._calls.run("DeleteRoute", lambda: self._inner.delete_route(cluster_name, route))


class _GuardedZones(Zones):
    def __init__(self, inner: Zones, calls: CloudCalls) -> None:
        self._inner, self._calls = inner, calls

    async def get_zone(self) -> Zone:
        return await self._calls.run("GetZone", self._inner.get_zone)

    async def get_zone_by_provider_id(self, provider_id: str) -> Zone:
        return await self._calls.run(
            "GetZoneByProviderID", lambda: self._inner.get_zone_by_provider_id(provider_id)
        )

    async def get_zone_by_node_name(self, node_name: str) -> Zone:
        return await self._calls.run(
            "GetZoneByNodeName", lambda: self._inner.get_zone_by_node_name(node_name)
        )


class _GuardedClusters(Clusters):
    def __init__(self, inner: Clusters, calls: CloudCalls) -> None:
        self._inner, self._calls = inner, calls

    async def list_clusters(self) -> Sequence[str]:
        return await self._calls.run("ListClusters", self._inner.list_clusters)

    async def master(self, cluster_name: str) -> str:
        return await self._calls.run("Master", lambda: self._inner.master(cluster_name))


class GuardedProvider(CloudProvider):
    """A provider whose capabilities call through a :class:`CloudCalls`.

    ``inner`` is the provider as registered; capability objects are wrapped once and
    keep being ``None`` where the provider has none.
    """

    def __init__(self, inner: CloudProvider, calls: CloudCalls) -> None:
        self.inner = inner
        self.calls = calls
        balancer, instances, v2 = inner.load_balancer(), inner.instances(), inner.instances_v2()
        zones, clusters, routes = inner.zones(), inner.clusters(), inner.routes()
        self._lb = None if balancer is None else _guard_load_balancer(balancer, calls)
        self._instances = None if instances is None else _GuardedInstances(instances, calls)
        self._v2 = None if v2 is None else _GuardedInstancesV2(v2, calls)
        self._zones = None if zones is None else _GuardedZones(zones, calls)
        self._clusters = None if clusters is None else _GuardedClusters(clusters, calls)
        self._routes = None if routes is None else _GuardedRoutes(routes, calls)

    async def initialize(self, client_builder: ClientBuilder, stop: asyncio.Event) -> None:
        await self.inner.initialize(client_builder, stop)

    async def aclose(self) -> None:
        # Not through the boundary: it must run even when calls are fenced (leader loss).
        await self.inner.aclose()

    def load_balancer(self) -> LoadBalancer | None:
        return self._lb

    def instances(self) -> Instances | None:
        return self._instances

    def instances_v2(self) -> InstancesV2 | None:
        return self._v2

    def zones(self) -> Zones | None:
        return self._zones

    def clusters(self) -> Clusters | None:
        return self._clusters

    def routes(self) -> Routes | None:
        return self._routes

    def provider_name(self) -> str:
        return self.inner.provider_name()

    def has_cluster_id(self) -> bool:
        return self.inner.has_cluster_id()

    def __getattr__(self, name: str) -> Any:
        # Provider-specific extras (``close``, a simulated cloud's state) stay reachable.
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)


class _GuardedLabelingProvider(GuardedProvider, PVLabeler):
    async def get_labels_for_volume(self, pv: PersistentVolume) -> Mapping[str, str]:
        inner = self.inner
        assert isinstance(inner, PVLabeler)
        return await self.calls.run("GetLabelsForVolume", lambda: inner.get_labels_for_volume(pv))


class _ForwardsInformers(InformerUser):
    inner: CloudProvider

    def set_informers(self, informers: Any) -> None:
        inner = self.inner
        assert isinstance(inner, InformerUser)
        inner.set_informers(informers)


class _GuardedInformerUser(GuardedProvider, _ForwardsInformers):
    pass


class _GuardedLabelingInformerUser(_GuardedLabelingProvider, _ForwardsInformers):
    pass


def guard(provider: CloudProvider, calls: CloudCalls) -> GuardedProvider:
    """``provider`` with every asynchronous contract call going through ``calls``; the
    result is a :class:`PVLabeler` or :class:`InformerUser` exactly when ``provider`` is."""
    if isinstance(provider, GuardedProvider):
        return provider
    labeler, informed = isinstance(provider, PVLabeler), isinstance(provider, InformerUser)
    kind: type[GuardedProvider]
    if labeler and informed:
        kind = _GuardedLabelingInformerUser
    elif labeler:
        kind = _GuardedLabelingProvider
    elif informed:
        kind = _GuardedInformerUser
    else:
        kind = GuardedProvider
    return kind(provider, calls)


__all__ = [
    "CloudCallPolicy",
    "CloudCallTimeoutError",
    "CloudCalls",
    "CloudCallsFencedError",
    "GuardedProvider",
    "call_cloud",
    "guard",
    "metric_provider_name",
    "request_name",
]
