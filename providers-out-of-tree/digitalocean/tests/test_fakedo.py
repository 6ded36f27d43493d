"""The fake answers as DigitalOcean's API reference says (shapes, errors, limits)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import pytest

from kube_ccm_digitalocean.testing.fakedo import FakeDigitalOcean


async def request(
    fake: FakeDigitalOcean, method: str, path: str, token: str | None = None, **kwargs: Any
) -> tuple[int, Any, dict[str, str]]:
    headers = {"Authorization": f"Bearer {token if token is not None else fake.token}"}
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, fake.url + path, headers=headers, **kwargs) as response,
    ):
        body = await response.json() if response.content_length else {}
        return response.status, body, dict(response.headers)


def lb_body(**changes: object) -> dict[str, object]:
    body: dict[str, object] = {
        "name": "a1b2",
        "region": "nyc3",
        "droplet_ids": [],
        "forwarding_rules": [
            {
                "entry_protocol": "tcp",
                "entry_port": 80,
                "target_protocol": "tcp",
                "target_port": 30080,
            }
        ],
    }
    body.update(changes)
    return body


async def test_droplets_paginate_and_filter(fake: FakeDigitalOcean) -> None:
    for n in range(5):
        fake.add_droplet(f"n{n}", tags=("k8s",) if n % 2 else ())
    status, body, headers = await request(fake, "GET", "/v2/droplets?per_page=2&page=2")
    assert status == 200
    assert [d["name"] for d in body["droplets"]] == ["n2", "n3"]
    assert body["meta"] == {"total": 5}
    assert set(body["links"]["pages"]) == {"first", "prev", "next", "last"}
    assert headers["ratelimit-limit"] == "5000"
    _, tagged, _ = await request(fake, "GET", "/v2/droplets?tag_name=k8s")
    assert [d["name"] for d in tagged["droplets"]] == ["n1", "n3"]


async def test_errors_have_the_references_bodies(fake: FakeDigitalOcean) -> None:
    status, body, _ = await request(fake, "GET", "/v2/droplets/1")
    assert (status, body["id"]) == (404, "not_found")
    status, body, _ = await request(fake, "GET", "/v2/droplets", token="wrong")
    assert (status, body["id"]) == (401, "unauthorized")
    status, body, _ = await request(
        fake, "POST", "/v2/load_balancers", token=fake.read_only_token, json=lb_body()
    )
    assert (status, body["id"]) == (403, "forbidden")
    assert body["request_id"]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"region": None}, "region is required"),
        ({"region": "xyz9"}, "not a valid region"),
        ({"forwarding_rules": []}, "at least 1 item"),
        ({"tag": "k8s"}, "mutually exclusive"),
        ({"algorithm": "random"}, "algorithm must be one of"),
        ({"size_unit": 101}, "size_unit must be an integer from 1 to 100"),
        ({"sticky_sessions": {"type": "cookies"}}, "cookie_name is required"),
        ({"health_check": {"protocol": "udp"}}, "health_check.protocol"),
        (
            {
                "forwarding_rules": [
                    {
                        "entry_protocol": "https",
                        "entry_port": 443,
                        "target_protocol": "http",
                        "target_port": 30080,
                        "certificate_id": "nope",
                    }
                ]
            },
            "certificate nope could not be found",
        ),
    ],
)
async def test_invalid_requests_are_refused_with_422(
    fake: FakeDigitalOcean, changes: dict[str, object], message: str
) -> None:
    body = {k: v for k, v in lb_body(**changes).items() if v is not None}
    status, answer, _ = await request(fake, "POST", "/v2/load_balancers", json=body)
    assert (status, answer["id"]) == (422, "unprocessable_entity")
    assert message in str(answer["message"])


async def test_a_new_load_balancer_becomes_active_after_the_delay(fake: FakeDigitalOcean) -> None:
    fake.activation_delay = 0.3
    status, body, _ = await request(fake, "POST", "/v2/load_balancers", json=lb_body())
    lb = body["load_balancer"]
    assert (status, lb["status"], lb["ip"]) == (202, "new", "")
    await asyncio.sleep(0.35)
    _, body, _ = await request(fake, "GET", f"/v2/load_balancers/{lb['id']}")
    assert body["load_balancer"]["status"] == "active"
    assert body["load_balancer"]["ip"]
    assert fake.calls["POST /v2/load_balancers"] == 1
    assert fake.calls["GET /v2/load_balancers/{id}"] == 1


async def test_the_hourly_limit_gives_429_with_its_headers() -> None:
    with FakeDigitalOcean(rate_limit=3) as fake:
        for left in ("2", "1", "0"):
            status, _, headers = await request(fake, "GET", "/v2/regions")
            assert (status, headers["ratelimit-remaining"]) == (200, left)
        status, body, headers = await request(fake, "GET", "/v2/regions")
        assert (status, body["id"]) == (429, "too_many_requests")
        assert int(headers["ratelimit-reset"]) >= int(time.time())
