"""Load balancers on the fake, with the Go CCM's names and annotations."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from kube_ccm.cloudprovider import LoadBalancer, RetryError
from kube_ccm.cloudprovider.annotations import problems
from kube_ccm.testing.conformance import KitClientBuilder

from kube_ccm_digitalocean.annotations import BASE, SERVICE_ANNOTATIONS, LoadBalancerConfigError
from kube_ccm_digitalocean.client import DigitalOceanForbiddenError
from kube_ccm_digitalocean.provider import DigitalOceanCloud, factory
from kube_ccm_digitalocean.testing import node, service, write_config
from kube_ccm_digitalocean.testing.fakedo import FakeDigitalOcean

UID = "8b6e2f3c-1111-4c5d-9e0f-123456789abc"


def lbs(cloud: DigitalOceanCloud) -> LoadBalancer:
    balancer = cloud.load_balancer()
    assert balancer is not None
    return balancer


def nodes(fake: FakeDigitalOcean, count: int) -> list[Any]:
    return [
        node(f"node-{n}", f"digitalocean://{fake.add_droplet(f'node-{n}')['id']}")
        for n in range(count)
    ]


async def test_create_answers_new_with_a_retry_then_active(
    fake: FakeDigitalOcean, cloud: DigitalOceanCloud
) -> None:
    fake.activation_delay = 0.3
    backends = nodes(fake, 2)
    svc = service(uid=UID)
    with pytest.raises(RetryError, match=r"status new.*15s") as retry:
        await lbs(cloud).ensure_load_balancer("kubernetes", svc, backends)
    assert retry.value.retry_after == 15.0
    lb = fake.load_balancer_named("a8b6e2f3c11114c5d9e0f123456789ab")  # upstream's default
    assert lb is not None
    assert lb["droplet_ids"] == sorted(int(n.spec.provider_id.split("//")[1]) for n in backends)
    assert lb["forwarding_rules"][0]["target_port"] == 30080
    assert lb["health_check"]["port"] == 10256  # kube-proxy's, as the Go CCM
    assert await lbs(cloud).get_load_balancer("kubernetes", svc) is not None
    await asyncio.sleep(0.35)
    status = await lbs(cloud).ensure_load_balancer("kubernetes", svc, backends)
    active = fake.load_balancer(lb["id"])
    assert active is not None
    assert [i.ip for i in status.ingress] == [active["ip"]]
    assert status.ingress[0].ip_mode is None


async def test_an_unchanged_sync_is_one_get_and_a_node_change_one_put(
    fake: FakeDigitalOcean, cloud: DigitalOceanCloud
) -> None:
    backends = nodes(fake, 3)
    svc = service(uid=UID)
    first = await lbs(cloud).ensure_load_balancer("kubernetes", svc, backends)
    fake.reset_calls()
    assert await lbs(cloud).ensure_load_balancer("kubernetes", svc, backends) == first
    assert dict(fake.calls) == {"GET /v2/load_balancers/{id}": 1}
    fake.reset_calls()
    await lbs(cloud).update_load_balancer("kubernetes", svc, backends[:1])
    assert dict(fake.calls) == {"PUT /v2/load_balancers/{id}": 1}  # no GET: it knows it
    fake.reset_calls()
    await lbs(cloud).update_load_balancer("kubernetes", svc, backends[:1])
    assert dict(fake.calls) == {}
    updated = fake.load_balancer_named(lbs(cloud).get_load_balancer_name("", svc))
    assert updated is not None
    assert len(updated["droplet_ids"]) == 1


async def test_the_annotations_make_the_request(
    fake: FakeDigitalOcean, cloud: DigitalOceanCloud
) -> None:
    certificate = fake.add_certificate("web")
    annotations = {
        BASE + "name": "my-lb",
        BASE + "protocol": "http",
        BASE + "tls-ports": "443",
        BASE + "certificate-id": certificate,
        BASE + "redirect-http-to-https": "true",
        BASE + "algorithm": "least_connections",
        BASE + "size-unit": "3",
        BASE + "sticky-sessions-type": "cookies",
        BASE + "sticky-sessions-cookie-name": "DO-LB",
        BASE + "sticky-sessions-cookie-ttl": "300",
        BASE + "override-health-check": "",
        BASE + "healthcheck-path": "/ready",
        BASE + "healthcheck-check-interval-seconds": "10",
        BASE + "enable-proxy-protocol": "true",
    }
    ports = [
        {"port": 80, "protocol": "TCP", "nodePort": 30080},
        {"port": 443, "protocol": "TCP", "nodePort": 30443},
    ]
    svc = service(uid=UID, annotations=annotations, ports=ports)
    status = await lbs(cloud).ensure_load_balancer("kubernetes", svc, nodes(fake, 1))
    lb = fake.load_balancer_named("my-lb")
    assert lb is not None
    assert lb["forwarding_rules"] == [
        {
            "entry_protocol": "http",
            "entry_port": 80,
            "target_protocol": "http",
            "target_port": 30080,
            "certificate_id": "",
            "tls_passthrough": False,
        },
        {
            "entry_protocol": "https",
            "entry_port": 443,
            "target_protocol": "http",
            "target_port": 30443,
            "certificate_id": certificate,
            "tls_passthrough": False,
        },
    ]
    assert (lb["algorithm"], lb["size_unit"], lb["redirect_http_to_https"]) == (
        "least_connections",
        3,
        True,
    )
    assert lb["sticky_sessions"] == {
        "type": "cookies",
        "cookie_name": "DO-LB",
        "cookie_ttl_seconds": 300,
    }
    assert lb["health_check"]["path"] == "/ready"
    assert lb["health_check"]["check_interval_seconds"] == 10
    assert lb["enable_proxy_protocol"]
    assert [(i.ip, i.ip_mode) for i in status.ingress] == [(lb["ip"], "Proxy")]


async def test_an_existing_load_balancer_is_adopted_by_its_id(
    fake: FakeDigitalOcean, cloud: DigitalOceanCloud
) -> None:
    backends = nodes(fake, 1)
    other = await lbs(cloud).ensure_load_balancer("kubernetes", service("old", uid=UID), backends)
    adopted = fake.load_balancer_named(
        lbs(cloud).get_load_balancer_name("", service("old", uid=UID))
    )
    assert adopted is not None
    svc = service(
        "new", annotations={"kubernetes.digitalocean.com/load-balancer-id": adopted["id"]}
    )
    fake.reset_calls()
    assert await lbs(cloud).ensure_load_balancer("kubernetes", svc, backends) == other
    assert fake.calls["POST /v2/load_balancers"] == 0
    assert len(fake.load_balancers) == 1


async def test_a_missing_certificate_is_named(
    fake: FakeDigitalOcean, cloud: DigitalOceanCloud
) -> None:
    missing = "0e4b3d5a-0000-4000-8000-000000000000"
    svc = service(
        uid=UID,
        annotations={BASE + "certificate-id": missing},
        ports=[{"port": 443, "protocol": "TCP", "nodePort": 30443}],
    )
    with pytest.raises(
        LoadBalancerConfigError, match=f"certificate {missing} named by .*does not exist"
    ):
        await lbs(cloud).ensure_load_balancer("kubernetes", svc, nodes(fake, 1))


async def test_a_read_only_token_names_the_scope(fake: FakeDigitalOcean, tmp_path: Path) -> None:
    provider = factory(write_config(fake, tmp_path, token=fake.read_only_token).read_bytes())
    await provider.initialize(KitClientBuilder.in_memory(), asyncio.Event())
    with pytest.raises(DigitalOceanForbiddenError, match="needs the scope load_balancer:create"):
        await lbs(provider).ensure_load_balancer("kubernetes", service(uid=UID), nodes(fake, 1))
    await provider.aclose()


async def test_delete_is_idempotent_and_finds_what_a_cancelled_create_left(
    fake: FakeDigitalOcean, cloud: DigitalOceanCloud, tmp_path: Path
) -> None:
    svc = service(uid=UID)
    await lbs(cloud).ensure_load_balancer("kubernetes", svc, nodes(fake, 1))
    fresh = factory(write_config(fake, tmp_path / "..").read_bytes())  # knows no IDs
    await lbs(fresh).ensure_load_balancer_deleted("kubernetes", svc)
    await lbs(fresh).ensure_load_balancer_deleted("kubernetes", svc)
    assert fake.load_balancers == {}
    assert await lbs(cloud).get_load_balancer("kubernetes", svc) is None
    await fresh.aclose()


async def test_disowned_load_balancers_are_left_alone(
    fake: FakeDigitalOcean, cloud: DigitalOceanCloud
) -> None:
    svc = service(uid=UID, annotations={"service.kubernetes.io/do-loadbalancer-disown": "true"})
    await lbs(cloud).ensure_load_balancer("kubernetes", svc, nodes(fake, 1))
    await lbs(cloud).ensure_load_balancer_deleted("kubernetes", svc)
    assert fake.calls["POST /v2/load_balancers"] == 0


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("size-unit", "500"),
        ("healthcheck-check-interval-seconds", "1"),
        ("healthcheck-unhealthy-threshold", "11"),
        ("algorithm", "random"),
        ("enable-proxy-protocol", "yes"),
        ("tls-ports", "443,http"),
        ("name", "-bad"),
        ("certificate-id", "my-cert"),
    ],
)
def test_values_out_of_range_are_refused_by_the_webhooks_declarations(key: str, value: str) -> None:
    found = problems(SERVICE_ANNOTATIONS, {BASE + key: value})
    assert len(found) == 1
    assert BASE + key in found[0]


def test_a_sane_service_passes_the_webhook() -> None:
    assert (
        problems(
            SERVICE_ANNOTATIONS,
            {BASE + "size-unit": "2", BASE + "protocol": "http", BASE + "tls-ports": "443,8443"},
        )
        == []
    )
