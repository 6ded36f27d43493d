"""The cloud-call boundary: retries of transient errors, the rate limit, metrics, the guard."""

from __future__ import annotations

import asyncio
import logging

import pytest

from kube_ccm.api.objects import Node, ObjectMeta, PersistentVolume
from kube_ccm.cloudprovider import (
    InformerUser,
    InstanceMetadata,
    InstanceNotFoundError,
    InstancesV2,
    PVLabeler,
    RetryError,
    TransientCloudError,
)
from kube_ccm.controllers.cloudcalls import (
    DRY_RUN_ANSWERS,
    REQUESTS,
    CloudCallPolicy,
    CloudCalls,
    CloudCallsFencedError,
    CloudCallTimeoutError,
    guard,
    metric_provider_name,
    request_name,
)
from kube_ccm.runtime.metrics import Metrics
from kube_ccm.testing import FakeLabelingProvider

DURATION = "cloudprovider_acme_api_request_duration_seconds"
ERRORS = "cloudprovider_acme_api_request_errors"
NO_WAIT = CloudCallPolicy(backoff_base=0.001, backoff_cap=0.001)


class Flaky:
    """Fails with ``error`` ``failures`` times, then answers ``"ok"``."""

    def __init__(self, failures: int, error: Exception) -> None:
        self.failures, self.error, self.calls = failures, error, 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return "ok"


def errors(metrics: Metrics, request: str) -> float:
    return metrics.sample(ERRORS, {"request": request}) or 0.0


def attempts(metrics: Metrics, request: str) -> float:
    return metrics.sample(f"{DURATION}_count", {"request": request}) or 0.0


def test_request_names_are_upstreams() -> None:
    assert request_name("ensure_load_balancer") == "EnsureLoadBalancer"
    assert request_name("node_addresses_by_provider_id") == "NodeAddressesByProviderID"
    assert request_name("instance_id") == "InstanceID"
    assert request_name("node_pod_cidrs") == "NodePodCIDRs"
    assert metric_provider_name("my-cloud.v2") == "my_cloud_v2"


async def test_a_transient_error_is_retried_and_each_attempt_metered() -> None:
    metrics = Metrics()
    calls = CloudCalls("acme", metrics, NO_WAIT)
    flaky = Flaky(2, TransientCloudError("throttled"))

    assert await calls.run("EnsureLoadBalancer", flaky) == "ok"

    assert flaky.calls == 3
    assert errors(metrics, "EnsureLoadBalancer") == 2
    assert attempts(metrics, "EnsureLoadBalancer") == 3


async def test_retries_stop_after_the_configured_attempts() -> None:
    metrics = Metrics()
    calls = CloudCalls("acme", metrics, CloudCallPolicy(attempts=2, backoff_base=0.001))
    flaky = Flaky(5, TransientCloudError("throttled"))

    with pytest.raises(TransientCloudError):
        await calls.run("UpdateLoadBalancer", flaky)

    assert flaky.calls == 2
    assert errors(metrics, "UpdateLoadBalancer") == 2


@pytest.mark.parametrize(
    "error", [RuntimeError("boom"), RetryError("later", 5.0)], ids=["plain", "RetryError"]
)
async def test_other_errors_are_never_retried_here(error: Exception) -> None:
    metrics = Metrics()
    flaky = Flaky(1, error)

    with pytest.raises(type(error)):
        await CloudCalls("acme", metrics, NO_WAIT).run("EnsureLoadBalancer", flaky)

    assert flaky.calls == 1
    assert errors(metrics, "EnsureLoadBalancer") == 1


async def test_answers_are_not_errors() -> None:
    metrics = Metrics()
    flaky = Flaky(1, InstanceNotFoundError())

    with pytest.raises(InstanceNotFoundError):
        await CloudCalls("acme", metrics, NO_WAIT).run("InstanceExists", flaky)

    assert errors(metrics, "InstanceExists") == 0
    assert attempts(metrics, "InstanceExists") == 1


async def test_the_clouds_suggested_delay_replaces_the_backoff() -> None:
    loop = asyncio.get_running_loop()
    flaky = Flaky(1, TransientCloudError("slow down", retry_after=0.2))
    started = loop.time()

    await CloudCalls("acme", Metrics(), NO_WAIT).run("ListRoutes", flaky)

    assert loop.time() - started >= 0.19


async def test_retries_never_outlive_the_calls_deadline() -> None:
    calls = CloudCalls(
        "acme", Metrics(), CloudCallPolicy(attempts=100, backoff_base=0.05), timeout=0.2
    )
    flaky = Flaky(1000, TransientCloudError("throttled"))

    with pytest.raises(CloudCallTimeoutError, match=r"ListRoutes did not return within 0\.2 s"):
        await calls.call("ListRoutes", flaky)

    assert 1 < flaky.calls < 100


async def test_the_token_bucket_spaces_calls_out() -> None:
    loop = asyncio.get_running_loop()
    calls = CloudCalls("acme", Metrics(), CloudCallPolicy(qps=20, burst=1))
    started = loop.time()

    await asyncio.gather(*(calls.run("GetZone", Flaky(0, RuntimeError())) for _ in range(4)))

    # one at once, then three at 20 per second: at least 0.15 s
    assert loop.time() - started >= 0.14


def test_a_policy_that_cannot_work_is_refused() -> None:
    with pytest.raises(ValueError, match="attempts 0 >= 1"):
        CloudCallPolicy(attempts=0)


# -- the guard ------------------------------------------------------------------------


def acme() -> FakeLabelingProvider:
    """Instances (whose metadata fails once, transiently) and volume labels."""
    fake = FakeLabelingProvider(name="acme", capabilities={"instances_v2"})
    failures = [TransientCloudError("connection reset")]
    fake.answer(
        "instance_metadata",
        lambda node: failures.pop() if failures else InstanceMetadata(provider_id="acme://1"),
    )
    fake.answer("get_labels_for_volume", {"zone": "a"})
    fake.extra = "reachable"  # type: ignore[attr-defined]
    return fake


async def test_a_guarded_provider_keeps_its_shape_and_meters_every_call() -> None:
    metrics = Metrics()
    guarded = guard(acme(), CloudCalls("acme", metrics, NO_WAIT))

    assert isinstance(guarded, PVLabeler)
    assert not isinstance(guarded, InformerUser)
    assert guarded.load_balancer() is None
    assert guarded.routes() is None
    assert guarded.provider_name() == "acme"
    assert not hasattr(guarded, "extra"), "nothing past the contract reaches the provider"
    assert isinstance(guarded.inner, FakeLabelingProvider)
    assert getattr(guarded.inner, "extra", None) == "reachable"
    v2 = guarded.instances_v2()
    assert v2 is not None
    metadata = await v2.instance_metadata(Node(metadata=ObjectMeta(name="n")))
    assert metadata is not None
    assert metadata.provider_id == "acme://1"
    assert errors(metrics, "InstanceMetadata") == 1
    assert attempts(metrics, "InstanceMetadata") == 2
    assert await guarded.get_labels_for_volume(PersistentVolume()) == {"zone": "a"}
    assert attempts(metrics, "GetLabelsForVolume") == 1
    assert guard(guarded, CloudCalls("acme", metrics)) is guarded
    exposed = metrics.exposition().decode()
    assert "# TYPE cloudprovider_acme_api_request_errors untyped" in exposed
    assert 'cloudprovider_acme_api_request_errors{request="InstanceMetadata"} 1.0' in exposed


async def test_no_call_and_no_retry_starts_after_the_fence() -> None:
    calls = CloudCalls("acme", Metrics(), CloudCallPolicy(attempts=5))
    flaky = Flaky(10, TransientCloudError("throttled", retry_after=0.1))

    async def fence_soon() -> None:
        await asyncio.sleep(0.01)
        calls.fence("leadership lost")

    fencing = asyncio.create_task(fence_soon())
    with pytest.raises(CloudCallsFencedError, match="EnsureLoadBalancer refused: leadership lost"):
        await calls.run("EnsureLoadBalancer", flaky)
    await fencing
    assert flaky.calls == 1, "the retry after the fence never started"

    untouched = Flaky(0, RuntimeError())
    with pytest.raises(CloudCallsFencedError):
        await calls.run("EnsureLoadBalancerDeleted", untouched)
    assert untouched.calls == 0


async def test_the_guard_holds_calls_back_while_it_gives_a_reason() -> None:
    calls = CloudCalls("acme", Metrics())
    doubt: list[str | None] = ["the lease may be another's"]
    calls.set_guard(lambda: doubt[0])
    held = Flaky(0, RuntimeError())
    with pytest.raises(CloudCallsFencedError, match="refused: the lease may be another's"):
        await calls.run("EnsureLoadBalancer", held)
    assert held.calls == 0

    doubt[0] = None
    await calls.run("EnsureLoadBalancer", held)
    assert held.calls == 1


async def test_health_fails_after_three_failures_and_a_quiet_window_and_recovers() -> None:
    now = [1000.0]
    calls = CloudCalls(
        "acme", Metrics(), CloudCallPolicy(attempts=1, unhealthy_after=60), clock=lambda: now[0]
    )
    for _ in range(3):
        with pytest.raises(RuntimeError):
            await calls.run("InstanceMetadata", Flaky(1, RuntimeError("503 from the API")))
    assert calls.health() == (True, ""), "three failures, but within the window"

    now[0] += 61
    healthy, reason = calls.health()
    assert not healthy
    assert "the last 3 calls to the acme cloud failed and none succeeded for 61 s" in reason
    assert "InstanceMetadata: 503 from the API" in reason

    await calls.run("InstanceMetadata", Flaky(0, RuntimeError()))
    assert calls.health() == (True, "")


async def test_a_call_cut_by_its_deadline_counts_as_a_failure() -> None:
    metrics = Metrics()
    calls = CloudCalls("acme", metrics, NO_WAIT, timeout=0.05)

    async def hang() -> str:
        await asyncio.Event().wait()
        return "never"

    with pytest.raises(CloudCallTimeoutError):
        await calls.call("ListRoutes", hang)

    assert errors(metrics, "ListRoutes") == 1


async def test_the_cloud_answering_again_is_logged_once_per_recovery(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [1000.0]
    calls = CloudCalls("acme", Metrics(), CloudCallPolicy(attempts=1), clock=lambda: now[0])

    def recoveries() -> list[str]:
        return [
            r.getMessage()
            for r in caplog.records
            if r.levelno >= logging.INFO and "succeed again" in r.getMessage()
        ]

    with caplog.at_level(logging.INFO, logger="kube_ccm.controllers.cloudcalls"):
        await calls.run("InstanceMetadata", Flaky(0, RuntimeError()))
        assert recoveries() == [], "no failure before: nothing to say"
        for _ in range(3):
            with pytest.raises(RuntimeError):
                await calls.run("InstanceMetadata", Flaky(1, RuntimeError("503 from the API")))
            now[0] += 6.25
        await calls.run("InstanceMetadata", Flaky(0, RuntimeError()))
        await calls.run("EnsureLoadBalancer", Flaky(0, RuntimeError()))
        assert recoveries() == [
            "acme cloud provider calls succeed again after 3 failures / 18.8 s "
            "(the last: InstanceMetadata: 503 from the API)"
        ]

        with pytest.raises(RuntimeError):
            await calls.run("ListRoutes", Flaky(1, RuntimeError("timeout")))
        now[0] += 2
        await calls.run("ListRoutes", Flaky(0, RuntimeError()))
        assert recoveries()[1:] == [
            "acme cloud provider calls succeed again after 1 failure / 2.0 s "
            "(the last: ListRoutes: timeout)"
        ]


def test_every_contract_call_keeps_its_upstream_request_name() -> None:
    # The names are metric label values: a rename would break dashboards.
    assert sorted(REQUESTS.values()) == sorted(
        [
            "GetLoadBalancer",
            "EnsureLoadBalancer",
            "UpdateLoadBalancer",
            "EnsureLoadBalancerDeleted",
            "ListLoadBalancers",
            "NodeAddresses",
            "NodeAddressesByProviderID",
            "InstanceID",
            "InstanceType",
            "InstanceTypeByProviderID",
            "InstanceExistsByProviderID",
            "InstanceShutdownByProviderID",
            "AddSSHKeyToAllInstances",
            "CurrentNodeName",
            "InstanceExists",
            "InstanceShutdown",
            "InstanceMetadata",
            "InstanceBelongsTo",
            "ListRoutes",
            "CreateRoute",
            "DeleteRoute",
            "GetZone",
            "GetZoneByProviderID",
            "GetZoneByNodeName",
            "ListClusters",
            "Master",
            "GetLabelsForVolume",
            "NodePodCIDRs",
        ]
    )
    assert sorted(REQUESTS[m] for m in DRY_RUN_ANSWERS) == [
        "CreateRoute",
        "DeleteRoute",
        "EnsureLoadBalancer",
        "EnsureLoadBalancerDeleted",
        "UpdateLoadBalancer",
    ]


async def test_a_guarded_capability_is_the_contracts_type_and_nothing_more() -> None:
    metrics = Metrics()
    fake = acme()
    fake.answer("instance_exists", True)
    raw = fake.instances_v2()
    assert raw is not None
    raw.failures = 1  # type: ignore[attr-defined]  # an attribute of the provider's own
    v2 = guard(fake, CloudCalls("acme", metrics, NO_WAIT)).instances_v2()

    assert isinstance(v2, InstancesV2)
    assert not isinstance(v2, type(raw))
    assert not hasattr(v2, "failures"), "the provider's own attributes stay behind the fence"
    assert await v2.instance_exists(Node(metadata=ObjectMeta(name="n")))
    assert attempts(metrics, "InstanceExists") == 1


async def test_each_member_of_a_composite_has_its_own_failures_health_and_metrics() -> None:
    """A member that keeps failing is not hidden by another that succeeds, and the
    health check names it."""
    now = [1000.0]
    metrics = Metrics()
    calls = CloudCalls(
        "acme", metrics, CloudCallPolicy(attempts=1, unhealthy_after=60), clock=lambda: now[0]
    )
    lbco = calls.member("lbco")
    for _ in range(3):
        with pytest.raises(RuntimeError):
            await calls.run("EnsureLoadBalancer", Flaky(1, RuntimeError("quota")), provider=lbco)
        await calls.run("InstanceMetadata", Flaky(0, RuntimeError()))
    now[0] += 61
    healthy, reason = calls.health()
    assert not healthy
    assert reason == (
        "the last 3 calls to the lbco cloud failed and none succeeded for 61 s; "
        "last error: EnsureLoadBalancer: quota"
    )
    exposed = metrics.exposition().decode()
    assert 'cloudprovider_lbco_api_request_errors{request="EnsureLoadBalancer"} 3.0' in exposed
    assert 'cloudprovider_acme_api_request_errors{request="' not in exposed
    assert (
        'cloudprovider_acme_api_request_duration_seconds_count{request="InstanceMetadata"} 3.0'
        in (exposed)
    )
