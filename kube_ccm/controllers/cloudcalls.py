"""The cloud-call boundary: every call from a controller into the provider passes here.

One layer, the client the controllers hold: :func:`guard` wraps a provider so that
each asynchronous method of its capabilities goes through a :class:`CloudCalls`, the
way an ``httpx.AsyncClient`` applies its configuration to every request. A call site
just calls (``await balancer.ensure_load_balancer(...)``); the boundary gives it

* a deadline (``--cloud-call-timeout``) covering the whole call, waits for tokens and
  backoff included: a hung provider becomes a :class:`CloudCallTimeoutError` the
  controller retries with its own backoff, never a stuck worker;
* an optional token bucket of cloud calls per provider (cloud API quotas);
* a bounded number of retries with full-jitter backoff for errors the provider marks
  :class:`TransientCloudError` (throttling, a dropped connection);
* per-attempt metrics under the convention peer CCMs share:
  ``cloudprovider_<provider>_api_request_duration_seconds{request}`` and
  ``cloudprovider_<provider>_api_request_errors{request}``, where ``request`` is the
  contract method's upstream name (``EnsureLoadBalancer``), derived from the method's
  own name (:data:`REQUESTS`), and ``<provider>`` the provider that served the call
  (in a composite, the member serving that capability);
* the fence: no call starts once leadership is lost or the daemon stops;
* ``--dry-run``: calls that change the cloud (:data:`DRY_RUN_ANSWERS`) are recorded,
  not made.

A :class:`RetryError` is never retried here; it is the service controller's to honour
(its exact delay). Answers that are not failures (instance not found, not implemented,
implemented elsewhere) count as no error.

The boundary sits above the contract it wraps (its guards are generated from the
contract's own capability classes) and beside the controllers that hold it; runtime
below knows nothing of clouds (docs/design.md, "Layout and the direction of
dependencies").
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import random
import re
import time
import types
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar, cast

from kube_ccm.api.objects import LoadBalancerStatus, Node, Service
from kube_ccm.cloudprovider import (
    ClientBuilder,
    CloudProvider,
    Clusters,
    ImplementedElsewhereError,
    InformerUser,
    InstanceNotFoundError,
    Instances,
    InstancesV2,
    LoadBalancer,
    LoadBalancerInventory,
    NodePodCIDRs,
    NotImplementedByProviderError,
    PVLabeler,
    Route,
    Routes,
    TransientCloudError,
    Zones,
)
from kube_ccm.runtime.dryrun import DryRun
from kube_ccm.runtime.metrics import Metrics
from kube_ccm.runtime.ratelimit import AsyncTokenBucket

log = logging.getLogger(__name__)

R = TypeVar("R")
C = TypeVar("C")

_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
_ANSWERS = (InstanceNotFoundError, NotImplementedByProviderError, ImplementedElsewhereError)
UNHEALTHY_AFTER_FAILURES = 3


class CloudCallTimeoutError(TimeoutError):
    """A cloud provider call did not return within the configured deadline."""


class CloudCallsFencedError(RuntimeError):
    """The daemon may no longer call the cloud (leadership lost, or shutting down)."""


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


_SPECIAL_WORDS = {"id": "ID", "ids": "IDs", "ssh": "SSH", "cidr": "CIDR", "cidrs": "CIDRs"}


def request_name(method: str) -> str:
    """The upstream name of a contract method: ``node_addresses_by_provider_id`` →
    ``NodeAddressesByProviderID``."""
    return "".join(_SPECIAL_WORDS.get(w, w.capitalize()) for w in method.split("_"))


class _Member:
    """One provider behind the boundary: its metrics, its token bucket and its health.

    A daemon has one; a composite provider has one per member, so that each call is
    counted, limited and logged under the provider that served it."""

    def __init__(
        self, provider: str, metrics: Metrics, policy: CloudCallPolicy, started: float
    ) -> None:
        self.provider = provider
        self.bucket = AsyncTokenBucket(policy.qps, policy.burst) if policy.qps > 0 else None
        self.last_success: float | None = None
        self.started = started
        self.failures_in_a_row = 0
        self.failing_since = 0.0
        """When the current run of failures began (the clock's time)."""
        self.last_failure = ""
        self.reported_unhealthy = False
        name = metric_provider_name(provider)
        self.duration = metrics.histogram(
            f"cloudprovider_{name}_api_request_duration_seconds",
            f"Latency of calls into the {provider} cloud provider, per contract method",
            _DURATION_BUCKETS,
            ("request",),
        )
        self.errors = metrics.exact_counter(
            f"cloudprovider_{name}_api_request_errors",
            f"Failed calls into the {provider} cloud provider, per contract method",
            ("request",),
        )


class CloudCalls:
    """Limits, retries and meters the calls into one provider (or into each member of
    a composite, under its own name: :meth:`member`)."""

    def __init__(
        self,
        provider: str,
        metrics: Metrics,
        policy: CloudCallPolicy | None = None,
        *,
        timeout: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.provider = provider
        """The provider a call is counted under when it names none."""
        self.policy = policy or CloudCallPolicy()
        self.timeout = timeout
        """``--cloud-call-timeout``: the deadline of each call, retries included."""
        self._metrics = metrics
        self._fenced: str | None = None
        self._guard: Callable[[], str | None] | None = None
        self.dry_run: DryRun | None = None
        """``--dry-run``: the guarded capabilities skip calls that change the cloud."""
        self._clock = clock
        self._members: dict[str, _Member] = {}
        self.member(provider)

    def member(self, provider: str) -> str:
        """Make ``provider`` known (its metrics, bucket and health) and return its name:
        calls given ``provider=`` are counted under it. Idempotent."""
        if provider not in self._members:
            self._members[provider] = _Member(provider, self._metrics, self.policy, self._clock())
        return provider

    def health(self) -> tuple[bool, str]:
        """(healthy, why not): unhealthy once the last :data:`UNHEALTHY_AFTER_FAILURES`
        attempts into one provider all failed (errors, or no answer within the
        deadline) and nothing into it succeeded for the policy's ``unhealthy_after``
        seconds. Informational: the daemon shows it on ``/healthz/cloud`` and in
        ``/healthz?verbose`` without failing liveness, since restarting the CCM does
        not mend the cloud."""
        reasons = [r for m in self._members.values() if (r := self._member_health(m))]
        return (False, "; ".join(reasons)) if reasons else (True, "")

    def _member_health(self, member: _Member) -> str:
        since = member.last_success if member.last_success is not None else member.started
        quiet = self._clock() - since
        if (
            member.failures_in_a_row < UNHEALTHY_AFTER_FAILURES
            or quiet < self.policy.unhealthy_after
        ):
            if member.reported_unhealthy:
                log.info("the %s cloud answers again", member.provider)
                member.reported_unhealthy = False
            return ""
        reason = (
            f"the last {member.failures_in_a_row} calls to the {member.provider} cloud failed "
            f"and none succeeded for {quiet:.0f} s; last error: {member.last_failure}"
        )
        if not member.reported_unhealthy:
            log.error("cloud health check failing: %s", reason)
            member.reported_unhealthy = True
        return reason

    def _failed(self, member: _Member, request: str, error: str) -> None:
        member.errors.inc(request=request)
        if not member.failures_in_a_row:
            member.failing_since = self._clock()
        member.failures_in_a_row += 1
        member.last_failure = f"{request}: {error}"

    def _succeeded(self, member: _Member) -> None:
        now = self._clock()
        if member.failures_in_a_row:
            # Once per recovery, at the default verbosity: the failures were logged by
            # their callers, the end of them would otherwise go unsaid.
            failures = member.failures_in_a_row
            log.info(
                "%s cloud provider calls succeed again after %d %s / %.1f s (the last: %s)",
                member.provider,
                failures,
                "failure" if failures == 1 else "failures",
                now - member.failing_since,
                member.last_failure,
            )
        member.failures_in_a_row = 0
        member.last_success = now

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

    async def call(
        self, request: str, call: Callable[[], Awaitable[R]], *, provider: str | None = None
    ) -> R:
        """Make ``call`` (a fresh awaitable per try) under the policy, within the deadline:
        what every guarded method does. ``provider``: the one serving it (a
        composite's member, made known with :meth:`member`), by default :attr:`provider`."""
        return await self.within_deadline(request, self.run(request, call, provider=provider))

    async def within_deadline(self, request: str, call: Awaitable[R]) -> R:
        """Await ``call`` with the deadline; a hang becomes a clear, retryable error."""
        try:
            async with asyncio.timeout(self.timeout):
                return await call
        except TimeoutError:
            raise CloudCallTimeoutError(
                f"cloud provider call {request} did not return within {self.timeout:g} s"
            ) from None

    async def run(
        self, request: str, call: Callable[[], Awaitable[R]], *, provider: str | None = None
    ) -> R:
        """Make ``call`` (a fresh awaitable per try) under the policy, without a deadline."""
        member = self._members[provider or self.provider]
        attempt = 0
        while True:
            self._check_fence(request)
            if member.bucket is not None:
                await member.bucket.acquire()
                self._check_fence(request)
            started = time.monotonic()
            try:
                result = await call()
            except _ANSWERS:
                member.duration.labels(request=request).observe(time.monotonic() - started)
                self._succeeded(member)
                raise
            except asyncio.CancelledError:
                if self._fenced is None:
                    # Not the daemon stopping: the caller's deadline ran out.
                    member.duration.labels(request=request).observe(time.monotonic() - started)
                    self._failed(member, request, "no answer within the deadline")
                raise
            except Exception as exc:
                member.duration.labels(request=request).observe(time.monotonic() - started)
                self._failed(member, request, str(exc))
                attempt += 1
                if not isinstance(exc, TransientCloudError) or attempt >= self.policy.attempts:
                    raise
                delay = self.policy.backoff(attempt - 1, exc.retry_after)
                log.info(
                    "cloud call %s to the %s provider failed (%s); try %d of %d in %.2f s",
                    request,
                    member.provider,
                    exc,
                    attempt + 1,
                    self.policy.attempts,
                    delay,
                )
                await asyncio.sleep(delay)
                continue
            member.duration.labels(request=request).observe(time.monotonic() - started)
            self._succeeded(member)
            return result


# -- the guarded provider -------------------------------------------------------------
#
# One generated proxy class per combination of capabilities, built from the contract's
# own classes: every asynchronous method is a cloud call under its derived request
# name, every other public member is forwarded as it is. The proxies subclass the
# capability classes, so ``isinstance`` and mypy see the contract's types.

CAPABILITIES: Final[tuple[type, ...]] = (
    LoadBalancer,
    LoadBalancerInventory,
    Instances,
    InstancesV2,
    Routes,
    Zones,
    Clusters,
)
"""The capability classes a provider's accessors return."""

PROVIDER_MIXINS: Final[tuple[type, ...]] = (PVLabeler, InformerUser, NodePodCIDRs)
"""The optional interfaces a provider itself may implement beside :class:`CloudProvider`."""

REQUESTS: Final[Mapping[str, str]] = {
    name: request_name(name)
    for capability in (*CAPABILITIES, *PROVIDER_MIXINS)
    for name, member in vars(capability).items()
    if inspect.iscoroutinefunction(member)
}
"""Contract method → its upstream request name (the ``request`` metric label, the name
in error messages): every asynchronous method of the contract is a cloud call."""


async def _current_status(
    balancer: LoadBalancer, cluster_name: str, service: Service, nodes: Sequence[Node]
) -> LoadBalancerStatus:
    """A dry run's ``EnsureLoadBalancer``: the load balancer's status as it is, else none."""
    current = await balancer.get_load_balancer(cluster_name, service)
    return current if current is not None else LoadBalancerStatus()


async def _nothing(*_args: object) -> None:
    return None


DRY_RUN_ANSWERS: Final[Mapping[str, Callable[..., Awaitable[Any]]]] = {
    "ensure_load_balancer": _current_status,
    "update_load_balancer": _nothing,
    "ensure_load_balancer_deleted": _nothing,
    "create_route": _nothing,
    "delete_route": _nothing,
}
"""The methods that change the cloud, and what a dry run answers instead of calling
them (given the guarded capability and the call's arguments)."""


def _describe(args: Sequence[object]) -> str:
    """What a would-be change is about, for the dry-run log: ``Service ns/name with 3
    nodes``, ``10.244.1.0/24 to node-1``."""
    parts = []
    for arg in args:
        if isinstance(arg, Service):
            parts.append(f"Service {arg.metadata.namespace}/{arg.metadata.name}")
        elif isinstance(arg, Route):
            parts.append(f"{arg.destination_cidr} to {arg.target_node}")
        elif isinstance(arg, tuple | list):
            parts.append(f"with {len(arg)} nodes")
    return " ".join(parts)


SERVED_BY_KEYS: Final[Mapping[str, str]] = {
    "load_balancer": "loadBalancer",
    "instances": "instances",
    "instances_v2": "instances",
    "zones": "zones",
    "clusters": "clusters",
    "routes": "routes",
    "get_labels_for_volume": "volumeLabels",
    "node_pod_cidrs": "podCIDRs",
}
"""A provider's capability accessor (or mix-in method) → the capability's name in
``served_by`` (:func:`guard`), the names a composite provider's cloud-config uses."""


class _Guard:
    """What every generated proxy holds: the object it guards, the boundary, and the
    provider its calls are counted under."""

    def __init__(self, inner: Any, calls: CloudCalls, provider: str | None = None) -> None:
        self._inner = inner
        self._calls = calls
        self._provider = provider

    def _served_by(self, method: str) -> str | None:
        """The provider a call of ``method`` is counted under (``None``: the boundary's)."""
        return self._provider


def _guarded_method(name: str) -> Callable[..., Awaitable[Any]]:
    request = REQUESTS[name]
    dry_run_answer = DRY_RUN_ANSWERS.get(name)

    async def call(self: _Guard, /, *args: Any, **kwargs: Any) -> Any:
        calls = self._calls
        if dry_run_answer is not None and calls.dry_run is not None:
            calls.dry_run.cloud_call(request, _describe([*args, *kwargs.values()]))
            return await calls.within_deadline(request, dry_run_answer(self, *args, **kwargs))
        method = getattr(self._inner, name)
        return await calls.call(
            request, lambda: method(*args, **kwargs), provider=self._served_by(name)
        )

    call.__name__ = call.__qualname__ = name
    return call


def _forwarded_method(name: str) -> Callable[..., Any]:
    def forward(self: _Guard, /, *args: Any, **kwargs: Any) -> Any:
        return getattr(self._inner, name)(*args, **kwargs)

    forward.__name__ = forward.__qualname__ = name
    return forward


def _forwarded_attribute(name: str) -> property:
    return property(lambda self: getattr(self._inner, name))


@functools.cache
def _proxy_class(base: type[_Guard], capabilities: tuple[type, ...]) -> type[Any]:
    """``base`` implementing ``capabilities`` through the boundary (one class per
    combination, made once)."""
    members: dict[str, Any] = {}
    for capability in capabilities:
        for name, member in vars(capability).items():
            if name.startswith("_"):
                continue
            if inspect.iscoroutinefunction(member):
                members[name] = _guarded_method(name)
            elif callable(member):
                members[name] = _forwarded_method(name)
            else:
                members[name] = _forwarded_attribute(name)
    name = "Guarded" + "".join(c.__name__ for c in capabilities)
    return types.new_class(name, (base, *capabilities), exec_body=lambda ns: ns.update(members))


def _guarded_capability(inner: C | None, calls: CloudCalls, provider: str | None) -> C | None:
    if inner is None:
        return None
    capabilities = tuple(c for c in CAPABILITIES if isinstance(inner, c))
    return cast("C", _proxy_class(_Guard, capabilities)(inner, calls, provider))


class GuardedProvider(_Guard, CloudProvider):
    """A provider whose capabilities call through a :class:`CloudCalls`.

    Only the contract is reachable through it: capability objects are wrapped once
    (and stay ``None`` where the provider has none), and nothing else is forwarded.
    :attr:`inner`, the provider as registered, is the one named way around the
    boundary (its ``aclose``, a composite provider's description).
    """

    def __init__(
        self,
        inner: CloudProvider,
        calls: CloudCalls,
        served_by: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(inner, calls)
        served = dict(served_by or {})
        self._members = {
            method: calls.member(served[key])
            for method, key in SERVED_BY_KEYS.items()
            if key in served
        }

        def guarded(accessor: str, capability: C | None) -> C | None:
            return _guarded_capability(capability, calls, self._members.get(accessor))

        self._lb = guarded("load_balancer", inner.load_balancer())
        self._instances = guarded("instances", inner.instances())
        self._v2 = guarded("instances_v2", inner.instances_v2())
        self._zones = guarded("zones", inner.zones())
        self._clusters = guarded("clusters", inner.clusters())
        self._routes = guarded("routes", inner.routes())

    def _served_by(self, method: str) -> str | None:
        return self._members.get(method)

    @property
    def inner(self) -> CloudProvider:
        """The provider as registered, past the boundary."""
        provider: CloudProvider = self._inner
        return provider

    @property
    def calls(self) -> CloudCalls:
        return self._calls

    async def initialize(self, client_builder: ClientBuilder, stop: asyncio.Event) -> None:
        await self._inner.initialize(client_builder, stop)

    async def aclose(self) -> None:
        # Not through the boundary: it must run even when calls are fenced (leader loss).
        await self._inner.aclose()

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
        name: str = self._inner.provider_name()
        return name

    def has_cluster_id(self) -> bool:
        tagged: bool = self._inner.has_cluster_id()
        return tagged


def guard(
    provider: CloudProvider, calls: CloudCalls, served_by: Mapping[str, str] | None = None
) -> GuardedProvider:
    """``provider`` with every asynchronous contract call going through ``calls``; the
    result is a :class:`PVLabeler`, :class:`InformerUser` or :class:`NodePodCIDRs`
    exactly when ``provider`` is.

    ``served_by``: capability (``loadBalancer``, ``instances``, ..., the keys'
    values of :data:`SERVED_BY_KEYS`) → the name of the provider serving it, for a
    provider composed of several (a composite's ``serving``): each call is then
    metered, rate-limited and logged under that provider's name, not under
    ``calls.provider``."""
    if isinstance(provider, GuardedProvider):
        return provider
    mixins = tuple(m for m in PROVIDER_MIXINS if isinstance(provider, m))
    kind: type[GuardedProvider] = (
        _proxy_class(GuardedProvider, mixins) if mixins else GuardedProvider
    )
    return kind(provider, calls, served_by)


__all__ = [
    "CAPABILITIES",
    "DRY_RUN_ANSWERS",
    "PROVIDER_MIXINS",
    "REQUESTS",
    "SERVED_BY_KEYS",
    "CloudCallPolicy",
    "CloudCallTimeoutError",
    "CloudCalls",
    "CloudCallsFencedError",
    "GuardedProvider",
    "guard",
    "metric_provider_name",
    "request_name",
]
