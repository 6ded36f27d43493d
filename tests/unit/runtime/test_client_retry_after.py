"""KubeClient under server-side throttling: a 429 (API Priority and Fairness) or a 5xx
with ``Retry-After`` is sent again after the seconds it asks for, up to client-go's
10 retries, each time through the rate limiter and, for a write, the fence."""

from __future__ import annotations

import asyncio

import pytest

from kube_ccm.runtime.client import (
    MAX_RETRIES,
    ApiError,
    ClientFencedError,
    KubeClient,
    RestClientMetrics,
)
from kube_ccm.runtime.metrics import Metrics
from kube_ccm.runtime.transport import Request, Response
from kube_ccm.testing.transport import MockTransport, json_response

TOO_MANY = {"kind": "Status", "code": 429, "reason": "TooManyRequests", "message": "slow down"}


def throttled(answers: list[Response]) -> tuple[MockTransport, list[Request]]:
    """Answers in turn, then 200 for good."""
    seen: list[Request] = []

    def handle(request: Request) -> Response:
        seen.append(request)
        return answers.pop(0) if answers else json_response(200, {"ok": True})

    return MockTransport(handle), seen


def too_many(retry_after: str | None = "1", status: int = 429) -> Response:
    answer = json_response(status, {**TOO_MANY, "code": status})
    headers = dict(answer.headers)
    if retry_after is not None:
        headers["Retry-After"] = retry_after
    return Response(status, headers, answer.content)


@pytest.fixture
def slept(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The waits the client asked for (none really taken)."""
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    return waits


async def test_a_throttled_write_is_sent_again_after_retry_after(slept: list[float]) -> None:
    transport, seen = throttled([too_many("2"), too_many("1"), too_many("0", status=503)])
    limiter_calls: list[int] = []

    async def limiter() -> None:
        limiter_calls.append(1)

    metrics = Metrics()
    client = KubeClient(transport, rate_limiter=limiter, metrics=RestClientMetrics(metrics))
    assert await client.patch("/api/v1/nodes/a", {"spec": {}}) == {"ok": True}
    assert [r.method for r in seen] == ["PATCH"] * 4
    assert slept == [2, 1, 0]
    assert len(limiter_calls) == 4  # each retry waits for the client's own limits too
    text = metrics.exposition().decode()
    assert 'rest_client_request_retries_total{code="429",host="api.test",verb="PATCH"} 2.0' in text
    assert 'rest_client_request_retries_total{code="503",host="api.test",verb="PATCH"} 1.0' in text


async def test_without_retry_after_or_past_ten_retries_the_error_surfaces(
    slept: list[float],
) -> None:
    transport, seen = throttled([too_many(None)])
    client = KubeClient(transport)
    with pytest.raises(ApiError) as error:
        await client.get("/api/v1/nodes")
    assert error.value.status == 429
    assert len(seen) == 1
    assert slept == []

    # A 500 without Retry-After, and an HTTP-date Retry-After (client-go reads neither).
    for answer in (too_many(None, status=500), too_many("Wed, 21 Oct 2026 07:28:00 GMT")):
        transport, seen = throttled([answer])
        with pytest.raises(ApiError):
            await KubeClient(transport).get("/api/v1/nodes")
        assert len(seen) == 1

    transport, seen = throttled([too_many("1") for _ in range(MAX_RETRIES + 1)])
    with pytest.raises(ApiError, match="slow down"):
        await KubeClient(transport).create("/api/v1/nodes", {})
    assert len(seen) == MAX_RETRIES + 1  # the first try and ten retries
    assert slept == [1] * MAX_RETRIES


async def test_a_write_whose_lease_went_during_retry_after_is_not_sent_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    transport, seen = throttled([too_many("3")])
    doubt: list[str | None] = [None]
    client = KubeClient(transport)
    client.set_write_guard(lambda method, path: doubt[0])

    async def sleep(seconds: float) -> None:
        doubt[0] = "the leader lease was last renewed 4.0 s ago"

    monkeypatch.setattr(asyncio, "sleep", sleep)
    with pytest.raises(ClientFencedError, match="the leader lease"):
        await client.replace("/api/v1/nodes/a", {})
    assert len(seen) == 1
