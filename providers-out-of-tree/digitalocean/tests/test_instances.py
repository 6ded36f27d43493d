"""Droplets as instances, as the Go CCM reports them."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from kube_ccm.cloudprovider import (
    CloudConfigError,
    CloudProviderError,
    InstanceNotFoundError,
    InstancesV2,
    InvalidCloudConfigError,
    NodeAddress,
    TransientCloudError,
)
from kube_ccm.testing.conformance import KitClientBuilder

from kube_ccm_digitalocean.provider import DigitalOceanCloud, factory
from kube_ccm_digitalocean.testing import node, write_config
from kube_ccm_digitalocean.testing.fakedo import FakeDigitalOcean


def v2(cloud: DigitalOceanCloud) -> InstancesV2:
    instances = cloud.instances_v2()
    assert instances is not None
    return instances


async def test_metadata_is_the_go_ccms(fake: FakeDigitalOcean, cloud: DigitalOceanCloud) -> None:
    droplet = fake.add_droplet("node-1", region="fra1", size="s-4vcpu-8gb")
    meta = await v2(cloud).instance_metadata(node("node-1"))
    assert meta is not None
    assert meta.provider_id == f"digitalocean://{droplet['id']}"
    assert (meta.instance_type, meta.region, meta.zone) == ("s-4vcpu-8gb", "fra1", "fra1")
    networks = droplet["networks"]
    assert meta.node_addresses == (
        NodeAddress(type="Hostname", address="node-1"),
        NodeAddress(type="InternalIP", address=networks["v4"][0]["ip_address"]),
        NodeAddress(type="ExternalIP", address=networks["v4"][1]["ip_address"]),
        NodeAddress(type="ExternalIP", address=networks["v6"][0]["ip_address"]),
    )
    by_id = await v2(cloud).instance_metadata(node("renamed", meta.provider_id))
    assert by_id == meta


async def test_a_node_named_by_its_private_ip_is_found(
    fake: FakeDigitalOcean, cloud: DigitalOceanCloud
) -> None:
    """The Go CCM matches a Node's name against the droplets' addresses too (among the
    droplets ``?name=`` returns)."""
    droplet = fake.add_droplet("node-1", public=False, ipv6=False)
    meta = await v2(cloud).instance_metadata(node("node-1"))
    assert meta is not None
    assert [a.type for a in meta.node_addresses] == ["Hostname", "InternalIP"]
    assert meta.provider_id == f"digitalocean://{droplet['id']}"


async def test_off_is_shut_down_and_404_is_gone(
    fake: FakeDigitalOcean, cloud: DigitalOceanCloud
) -> None:
    droplet = fake.add_droplet("node-1")
    n = node("node-1", f"digitalocean://{droplet['id']}")
    assert await v2(cloud).instance_exists(n)
    assert not await v2(cloud).instance_shutdown(n)
    fake.set_droplet_status(droplet["id"], "off")
    assert await v2(cloud).instance_shutdown(n)
    assert await v2(cloud).instance_exists(n)
    fake.delete_droplet(droplet["id"])
    assert not await v2(cloud).instance_exists(n)
    assert not await v2(cloud).instance_exists(node("node-1"))
    with pytest.raises(InstanceNotFoundError, match="node-1"):
        await v2(cloud).instance_metadata(n)


async def test_an_outage_is_never_gone(fake: FakeDigitalOcean, cloud: DigitalOceanCloud) -> None:
    droplet = fake.add_droplet("node-1")
    with fake.failing(503), pytest.raises(TransientCloudError, match="503"):
        await v2(cloud).instance_exists(node("node-1", f"digitalocean://{droplet['id']}"))


async def test_a_foreign_provider_id_is_an_error_not_gone(cloud: DigitalOceanCloud) -> None:
    with pytest.raises(CloudProviderError, match="missing the prefix"):
        await v2(cloud).instance_exists(node("n", "aws:///us-east-1a/i-0abc"))


async def test_the_cache_answers_a_refresh_wave_with_one_list(
    fake: FakeDigitalOcean, tmp_path: Path
) -> None:
    droplets = [fake.add_droplet(f"node-{n}") for n in range(250)]
    provider = factory(write_config(fake, tmp_path, dropletCacheTTL="30s").read_bytes())
    fake.reset_calls()
    for droplet in droplets:
        await v2(provider).instance_metadata(
            node(droplet["name"], f"digitalocean://{droplet['id']}")
        )
    assert dict(fake.calls) == {"GET /v2/droplets": 2}  # 200 a page
    await provider.aclose()


async def test_a_refused_token_stops_the_daemon_naming_its_source(
    fake: FakeDigitalOcean, tmp_path: Path
) -> None:
    provider = factory(write_config(fake, tmp_path, token="dop_v1_revoked").read_bytes())
    with pytest.raises(
        CloudConfigError, match=r'401 unauthorized.*token from the file ".*do-token" \(sha256'
    ):
        await provider.initialize(KitClientBuilder.in_memory(), asyncio.Event())
    await provider.aclose()


async def test_an_unknown_region_stops_the_daemon(fake: FakeDigitalOcean, tmp_path: Path) -> None:
    provider = factory(write_config(fake, tmp_path, region="xyz9").read_bytes())
    with pytest.raises(
        CloudConfigError, match=r"`region` 'xyz9' is not a DigitalOcean region.*nyc3"
    ):
        await provider.initialize(KitClientBuilder.in_memory(), asyncio.Event())
    await provider.aclose()


def test_the_cloud_config_is_strict(fake: FakeDigitalOcean, tmp_path: Path) -> None:
    with pytest.raises(InvalidCloudConfigError, match="unknown field `regoin`"):
        factory(b"regoin: nyc3\n")
    with pytest.raises(InvalidCloudConfigError, match="not a DigitalOcean region slug"):
        factory(b"region: New York\n")
    with pytest.raises(InvalidCloudConfigError, match="defaultLoadBalancerType"):
        factory(write_config(fake, tmp_path, defaultLoadBalancerType="GLOBAL").read_bytes())


async def test_gone_is_never_answered_from_the_cache(
    fake: FakeDigitalOcean, tmp_path: Path
) -> None:
    """A droplet the cached list has exists (for at most a TTL after it went); one it
    lacks is asked for, so "gone" is the API's 404, never the cache's silence."""
    kept = fake.add_droplet("node-1")
    provider = factory(write_config(fake, tmp_path, dropletCacheTTL="30s").read_bytes())
    n = node("node-1", f"digitalocean://{kept['id']}")
    assert await v2(provider).instance_exists(n)
    fake.delete_droplet(kept["id"])
    assert await v2(provider).instance_exists(n)  # the list is 30 s fresh
    newer = fake.add_droplet("node-2")
    fake.reset_calls()
    assert await v2(provider).instance_exists(node("node-2", f"digitalocean://{newer['id']}"))
    assert not await v2(provider).instance_exists(node("node-3", "digitalocean://1"))
    assert dict(fake.calls) == {"GET /v2/droplets/{id}": 2}
    await provider.aclose()


async def test_a_droplet_belongs_to_the_node_of_its_name_or_address(
    fake: FakeDigitalOcean, cloud: DigitalOceanCloud
) -> None:
    """What the kubelet serving certificate approver asks: a providerID is the node's
    own word, the droplet's name is DigitalOcean's."""
    droplet = fake.add_droplet("node-1")
    instances = v2(cloud)
    assert instances.authoritative is True
    meta = await instances.instance_metadata(node("node-1", f"digitalocean://{droplet['id']}"))
    assert meta is not None
    private = droplet["networks"]["v4"][0]["ip_address"]
    assert await instances.instance_belongs_to("node-1", meta) is True
    assert await instances.instance_belongs_to(private, meta) is True
    assert await instances.instance_belongs_to("evil", meta) is False
