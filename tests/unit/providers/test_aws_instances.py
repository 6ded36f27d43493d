"""The aws provider called directly against moto's EC2 (a server on loopback, checking
credentials), through a proxy that counts the calls and injects EC2's errors; and
its cloud-config.

The daemon-level lifecycle is in ``tests/integration/test_daemon_aws.py``.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from kube_ccm.api.objects import Node, NodeAddress, NodeSpec, ObjectMeta
from kube_ccm.cloudprovider import (
    CloudIdentityError,
    CredentialsError,
    InstanceNotFoundError,
    InstancesV2,
    TransientCloudError,
)
from kube_ccm.controllers.cloudcalls import CloudCallPolicy, CloudCalls, guard
from kube_ccm.providers.aws import (
    AwsConfigError,
    AwsError,
    AwsProvider,
    AwsStartupError,
    AwsThrottledError,
    factory,
    load_config,
    parse_provider_id,
)
from kube_ccm.providers.aws.lookups import Kind, Lookups
from kube_ccm.providers.aws.moto import Ec2Proxy, MotoServer, Network
from kube_ccm.runtime.metrics import Metrics

REGION = "us-east-1"
ZONES = ("us-east-1a", "us-east-1b")

pytestmark = pytest.mark.usefixtures("aws_env")


# -- helpers ----------------------------------------------------------------------------


def node(name: str, provider_id: str = "") -> Node:
    return Node(
        metadata=ObjectMeta(name=name, uid=f"uid-{name}"), spec=NodeSpec(provider_id=provider_id)
    )


@pytest.fixture
def network(moto_server: MotoServer) -> Network:
    return moto_server.network(ZONES)


@pytest.fixture
def credentials_file(moto_server: MotoServer, tmp_path: Path) -> Path:
    path = tmp_path / "aws-credentials"
    path.write_text(moto_server.keys.shared_credentials())
    return path


def config(
    endpoint: str, network: Network | None, credentials: dict[str, str] | None, **extra: Any
) -> bytes:
    document: dict[str, Any] = {
        "region": REGION,
        "endpoint": endpoint,
        "clusterName": "demo",
        "throttleDelay": "20ms",
        **extra,
    }
    if network is not None:
        document["vpcId"] = network.vpc_id
    if credentials is not None:
        document["credentials"] = credentials
    return yaml.safe_dump(document).encode()


def provider(
    proxy: Ec2Proxy, network: Network | None, credentials_file: Path, **extra: Any
) -> AwsProvider:
    return factory(config(proxy.url, network, {"file": str(credentials_file)}, **extra))


def v2(cloud: AwsProvider) -> InstancesV2:
    instances = cloud.instances_v2()
    assert instances is not None
    return instances


def filter_values(proxy: Ec2Proxy, index: int = -1) -> list[str]:
    """The filter values of a DescribeInstances the proxy saw."""
    calls = [r for r in proxy.requests if r.action == "DescribeInstances"]
    params = calls[index].params
    return [v[0] for k, v in sorted(params.items()) if k.startswith("Filter.1.Value.")]


# -- which instance, and what it reports ------------------------------------------------


async def test_a_node_maps_by_private_dns_name_then_by_provider_id(
    moto_server: MotoServer, ec2_proxy: Ec2Proxy, network: Network, credentials_file: Path
) -> None:
    instance = moto_server.run_instance(
        network, "us-east-1b", instance_type="c5.xlarge", public_ip=True, secondary_ips=2
    )
    described = moto_server.describe(instance)
    public_ip, public_dns = described["PublicIpAddress"], described["PublicDnsName"]
    cloud = provider(ec2_proxy, network, credentials_file)
    await cloud.check()

    by_name = await v2(cloud).instance_metadata(node(instance.private_dns_name))
    assert by_name is not None
    assert by_name.provider_id == f"aws:///us-east-1b/{instance.id}"
    assert by_name.instance_type == "c5.xlarge"
    assert (by_name.zone, by_name.region) == ("us-east-1b", REGION)
    prefix = network.cidr_prefix
    assert by_name.node_addresses == (
        NodeAddress(type="InternalIP", address=instance.private_ip),  # eth0's primary
        NodeAddress(type="InternalIP", address=f"{prefix}.2.11"),  # eth1's primary
        NodeAddress(type="InternalIP", address=f"{prefix}.2.12"),  # eth1's secondary
        NodeAddress(type="ExternalIP", address=public_ip),
        NodeAddress(type="InternalDNS", address=instance.private_dns_name),
        NodeAddress(type="ExternalDNS", address=public_dns),
    )

    with_id = node(instance.private_dns_name, by_name.provider_id)
    assert await v2(cloud).instance_metadata(with_id) == by_name
    assert await v2(cloud).instance_exists(with_id) is True
    assert await v2(cloud).instance_shutdown(with_id) is False
    await cloud.aclose()


async def test_stopped_is_shut_down_and_terminated_is_gone(
    moto_server: MotoServer, ec2_proxy: Ec2Proxy, network: Network, credentials_file: Path
) -> None:
    instance = moto_server.run_instance(network, "us-east-1a")
    by_id = node(instance.private_dns_name, instance.provider_id)
    by_name = node(instance.private_dns_name)
    cloud = provider(ec2_proxy, network, credentials_file, cacheTTL="0s")

    moto_server.stop_instances(instance)
    assert await v2(cloud).instance_exists(by_id) is True  # a stopped instance still exists
    assert await v2(cloud).instance_shutdown(by_id) is True
    assert await v2(cloud).instance_shutdown(by_name) is True
    stopped = await v2(cloud).instance_metadata(by_id)
    assert stopped is not None
    assert [a.type for a in stopped.node_addresses] == ["InternalIP", "InternalDNS"]

    moto_server.start_instances(instance)
    assert await v2(cloud).instance_shutdown(by_id) is False

    moto_server.terminate_instances(instance)
    assert moto_server.state(instance) == "terminated"  # EC2 still lists it, terminated
    assert await v2(cloud).instance_exists(by_id) is False
    assert await v2(cloud).instance_exists(by_name) is False
    assert await v2(cloud).instance_shutdown(by_id) is False
    with pytest.raises(InstanceNotFoundError, match=f"{instance.id} is terminated"):
        await v2(cloud).instance_metadata(by_id)
    with pytest.raises(InstanceNotFoundError, match="has the private DNS name"):
        await v2(cloud).instance_metadata(by_name)
    await cloud.aclose()


async def test_an_unknown_instance_does_not_exist(
    moto_server: MotoServer, ec2_proxy: Ec2Proxy, network: Network, credentials_file: Path
) -> None:
    moto_server.run_instance(network, "us-east-1a")  # the credentials see the cluster
    cloud = provider(ec2_proxy, network, credentials_file)
    unknown = node("ip-10-250-9-9.ec2.internal", "aws:///us-east-1a/i-0123456789abcdef0")
    assert await v2(cloud).instance_exists(unknown) is False
    with pytest.raises(InstanceNotFoundError, match="i-0123456789abcdef0 does not exist"):
        await v2(cloud).instance_metadata(unknown)
    with pytest.raises(InstanceNotFoundError, match="no EC2 instance in region us-east-1"):
        await v2(cloud).instance_metadata(node("ip-10-250-9-9.ec2.internal"))
    # EC2's own not-found answer (to an InstanceIds request) is the contract's not-found.
    ec2_proxy.inject("DescribeInstances", "InvalidInstanceID.NotFound", "no such instance")
    cloud.lookups.forget()
    assert await v2(cloud).instance_exists(unknown) is False
    assert ec2_proxy.error_codes["DescribeInstances", "InvalidInstanceID.NotFound"] == 1
    await cloud.aclose()


async def test_keys_of_another_account_see_no_instance_and_say_so_never_gone(
    moto_server: MotoServer, ec2_proxy: Ec2Proxy, network: Network, credentials_file: Path
) -> None:
    first, second = (moto_server.run_instance(network, zone) for zone in ZONES)
    by_id = node(first.private_dns_name, first.provider_id)
    cloud = provider(ec2_proxy, network, credentials_file, cacheTTL="0s", stsEndpoint=ec2_proxy.url)
    assert await v2(cloud).instance_exists(by_id) is True
    assert ec2_proxy.count("GetCallerIdentity") == 0

    # Rotated to a key of another account: every ID unknown, which is no "gone".
    await asyncio.to_thread(
        credentials_file.write_text, moto_server.other_keys.shared_credentials()
    )
    assert cloud.credentials is not None
    await cloud.credentials.refresh()
    for lookup in (by_id, node(first.private_dns_name)):
        with pytest.raises(CloudIdentityError) as caught:
            await v2(cloud).instance_exists(lookup)
        assert "see no instance of this cluster" in str(caught.value)
        assert f"VPC {network.vpc_id}, tag kubernetes.io/cluster/demo" in str(caught.value)
        assert "(they are of account 222222222222)" in caught.value.hint
        assert "that `region` (us-east-1) is the cluster's region" in caught.value.hint

    # The right key back: one instance terminated is gone, the other exists.
    await asyncio.to_thread(credentials_file.write_text, moto_server.keys.shared_credentials())
    await cloud.credentials.refresh()
    moto_server.terminate_instances(first)
    assert await v2(cloud).instance_exists(by_id) is False
    assert await v2(cloud).instance_exists(node("x", second.provider_id)) is True
    # Unknown to EC2 (a terminated instance forgotten), with the cluster in sight: gone.
    assert (
        await v2(cloud).instance_exists(node("y", "aws:///us-east-1a/i-0123456789abcdef0")) is False
    )
    await cloud.aclose()


async def test_a_region_without_the_clusters_instances_is_an_identity_error(
    moto_server: MotoServer, ec2_proxy: Ec2Proxy, network: Network, credentials_file: Path
) -> None:
    instance = moto_server.run_instance(network, "us-east-1a")
    elsewhere = provider(ec2_proxy, None, credentials_file, region="eu-west-1")
    # A providerID without a zone, looked up in another region: nothing is known there.
    with pytest.raises(CloudIdentityError, match="in region eu-west-1"):
        await v2(elsewhere).instance_exists(node("n", f"aws:////{instance.id}"))
    await elsewhere.aclose()


def test_provider_ids_are_read_as_upstream_writes_them() -> None:
    assert parse_provider_id("aws:///eu-west-1a/i-0abc123") == ("eu-west-1a", "i-0abc123")
    assert parse_provider_id("aws:////i-0abc123") == ("", "i-0abc123")
    assert parse_provider_id("aws:///i-0abc123") == ("", "i-0abc123")
    for bad in ("gce://p/z/n", "aws:///eu-west-1a/", "aws:///a/b/i-1", "aws:///eu-west-1a/vol-1"):
        with pytest.raises(ValueError, match="providerID"):
            parse_provider_id(bad)


# -- batching ------------------------------------------------------------------------


async def test_a_wave_of_lookups_is_one_describe_instances(
    moto_server: MotoServer, ec2_proxy: Ec2Proxy, network: Network, credentials_file: Path
) -> None:
    instances = [moto_server.run_instance(network, ZONES[i % 2]) for i in range(6)]
    cloud = provider(ec2_proxy, network, credentials_file, cacheTTL="400ms")
    await cloud.check()
    ec2_proxy.reset()

    # The node controller's workers initialising Nodes at once: one call by name.
    found = await asyncio.gather(
        *(v2(cloud).instance_metadata(node(i.private_dns_name)) for i in instances)
    )
    assert [m.provider_id for m in found if m] == [i.provider_id for i in instances]
    assert ec2_proxy.count() == 1
    assert sorted(filter_values(ec2_proxy)) == sorted(i.private_dns_name for i in instances)

    # The periodic address refresh, by providerID: answered by that call's answers.
    nodes = [node(i.private_dns_name, i.provider_id) for i in instances]
    await asyncio.gather(*(v2(cloud).instance_metadata(n) for n in nodes))
    assert ec2_proxy.count() == 1

    # A lifecycle pass later (each Node in turn: exists, then shutdown): one call, the
    # first Node's, which also asks about the others it has seen.
    await asyncio.sleep(0.5)
    for n in nodes:
        assert await v2(cloud).instance_exists(n) is True
        assert await v2(cloud).instance_shutdown(n) is False
    assert ec2_proxy.count() == 2
    assert sorted(filter_values(ec2_proxy)) == sorted(i.id for i in instances)

    # Concurrent lookups of a fresh provider: one call with every ID.
    fresh = provider(ec2_proxy, network, credentials_file, cacheTTL="0s")
    ec2_proxy.reset()
    assert all(await asyncio.gather(*(v2(fresh).instance_exists(n) for n in nodes)))
    assert ec2_proxy.count() == 1
    assert len(filter_values(ec2_proxy)) == 6
    await cloud.aclose()
    await fresh.aclose()


async def test_a_caller_giving_up_does_not_cancel_the_others_answer(
    moto_server: MotoServer, ec2_proxy: Ec2Proxy, network: Network, credentials_file: Path
) -> None:
    a, b = (moto_server.run_instance(network, "us-east-1a") for _ in range(2))
    cloud = provider(ec2_proxy, network, credentials_file, batchWindow="50ms")
    impatient = asyncio.create_task(v2(cloud).instance_exists(node("a", a.provider_id)))
    patient = asyncio.create_task(v2(cloud).instance_exists(node("b", b.provider_id)))
    await asyncio.sleep(0.01)
    impatient.cancel()
    assert await patient is True
    assert impatient.cancelled()
    await cloud.aclose()


# -- EC2's errors -----------------------------------------------------------------------


async def test_throttling_is_transient_with_ec2s_delay_or_a_jittered_one(
    moto_server: MotoServer, ec2_proxy: Ec2Proxy, network: Network, credentials_file: Path
) -> None:
    instance = moto_server.run_instance(network, "us-east-1a")
    n = node(instance.private_dns_name, instance.provider_id)
    cloud = provider(ec2_proxy, network, credentials_file, cacheTTL="0s")

    fault = ec2_proxy.throttle()
    with pytest.raises(AwsThrottledError) as caught:
        await v2(cloud).instance_exists(n)
    assert isinstance(caught.value, TransientCloudError)
    assert caught.value.code == "RequestLimitExceeded"
    assert caught.value.retry_after is not None
    assert 0.01 <= caught.value.retry_after <= 0.03  # throttleDelay 20ms, jittered
    assert fault.request_ids[0] in str(caught.value)

    ec2_proxy.throttle(retry_after=0.25)
    with pytest.raises(AwsThrottledError) as suggested:
        await v2(cloud).instance_exists(n)
    assert suggested.value.retry_after == 0.25

    ec2_proxy.inject("DescribeInstances", "Throttling", "Rate exceeded", status=400)
    with pytest.raises(AwsThrottledError, match="Throttling: Rate exceeded"):
        await v2(cloud).instance_exists(n)

    # Through the daemon's cloud-call boundary, as the controllers call: retried.
    ec2_proxy.reset()
    ec2_proxy.throttle(times=2)
    calls = CloudCalls("aws", Metrics(), CloudCallPolicy(attempts=3))
    guarded = guard(cloud, calls).instances_v2()
    assert guarded is not None
    assert await guarded.instance_exists(n) is True
    assert ec2_proxy.count() == 3
    await cloud.aclose()


async def test_other_errors_carry_the_aws_request_id(
    ec2_proxy: Ec2Proxy, network: Network, credentials_file: Path
) -> None:
    cloud = provider(ec2_proxy, network, credentials_file, cacheTTL="0s")
    n = node("x", "aws:///us-east-1a/i-0123456789abcdef0")

    fault = ec2_proxy.inject("DescribeInstances", "InvalidParameterValue", "Value is bad")
    with pytest.raises(AwsError) as caught:
        await v2(cloud).instance_exists(n)  # an error, never "does not exist"
    message = str(caught.value)
    assert "InvalidParameterValue: Value is bad" in message
    assert f"request ID {fault.request_ids[0]}" in message
    assert caught.value.request_id == fault.request_ids[0]

    ec2_proxy.inject("DescribeInstances", "InternalError", "try again", status=500)
    with pytest.raises(TransientCloudError, match="InternalError"):
        await v2(cloud).instance_shutdown(n)

    fault = ec2_proxy.inject("DescribeInstances", "UnauthorizedOperation", "no", status=403)
    with pytest.raises(AwsError, match=r"may not call ec2:DescribeInstances") as denied:
        await v2(cloud).instance_metadata(n)
    assert fault.request_ids[0] in str(denied.value)
    await cloud.aclose()


async def test_an_unreachable_endpoint_is_transient(
    network: Network, credentials_file: Path, tmp_path: Path
) -> None:
    cloud = factory(
        config("http://127.0.0.1:9", network, {"file": str(credentials_file)}, requestTimeout="1s")
    )
    with pytest.raises(TransientCloudError, match=re.escape("cannot reach http://127.0.0.1:9")):
        await v2(cloud).instance_exists(node("x", "aws:///us-east-1a/i-0123456789abcdef0"))
    await cloud.check()  # at start-up: logged, the daemon goes on (Nodes wait)
    await cloud.aclose()


# -- bad input ---------------------------------------------------------------------------


async def test_a_wrong_region_is_refused_and_never_deletes(
    moto_server: MotoServer,
    ec2_proxy: Ec2Proxy,
    network: Network,
    credentials_file: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with pytest.raises(AwsStartupError, match=r"'us-eastt-1' is not an AWS region .*us-east-1\?"):
        factory(b"region: us-eastt-1\n")
    with pytest.raises(AwsConfigError, match="`region` 'Frankfurt' is not an AWS region name"):
        load_config(b"region: Frankfurt\n")

    # The cluster is in us-east-1; the cloud-config says eu-west-1.
    instance = moto_server.run_instance(network, "us-east-1a")
    elsewhere = factory(
        config(ec2_proxy.url, network, {"file": str(credentials_file)}, region="eu-west-1")
    )
    with pytest.raises(AwsStartupError, match=f"VPC {network.vpc_id} .* in region eu-west-1"):
        await elsewhere.check()
    n = node(instance.private_dns_name, instance.provider_id)
    with pytest.raises(AwsError, match="in zone us-east-1a, not in this cloud-config's region"):
        await v2(elsewhere).instance_exists(n)  # never "does not exist": no deletion
    await elsewhere.aclose()


async def test_missing_or_invalid_credentials_name_their_source(
    moto_server: MotoServer,
    ec2_proxy: Ec2Proxy,
    network: Network,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(CredentialsError, match=f'"{missing}" named in `credentials.file` does'):
        provider(ec2_proxy, network, missing)

    garbage = tmp_path / "garbage"
    garbage.write_text("hunter2\n")
    with pytest.raises(CredentialsError, match=f'credentials in file "{garbage}"') as caught:
        provider(ec2_proxy, network, garbage)
    assert "hunter2" not in str(caught.value)

    no_section = tmp_path / "other-profile"
    no_section.write_text(moto_server.keys.shared_credentials("ops"))
    with pytest.raises(CredentialsError, match=r"no \[default\] section \(sections: ops\)"):
        provider(ec2_proxy, network, no_section)
    provider(ec2_proxy, network, no_section, profile="ops")  # the section named

    wrong = tmp_path / "wrong"
    wrong.write_text(f"{moto_server.keys.access_key_id}:not-the-secret\n")
    cloud = provider(ec2_proxy, network, wrong)
    with pytest.raises(AwsStartupError) as rejected:
        await cloud.check()
    message = str(rejected.value)
    assert "AuthFailure" in message
    assert f'AWS rejected the credentials from file "{wrong}"' in message
    assert "not-the-secret" not in message

    # Rotated to valid ones (a Secret updated in place): used from the next call.
    wrong.write_text(moto_server.keys.shared_credentials())
    assert cloud.credentials is not None
    assert await cloud.credentials.refresh() is True
    await cloud.check()
    await cloud.aclose()

    monkeypatch.setenv("KC_AWS_KEYS", "AKIAIOSFODNN7EXAMPLE:wJalrXUtnFEMI")
    from_env = factory(config(ec2_proxy.url, network, {"env": "KC_AWS_KEYS"}))
    with pytest.raises(
        AwsStartupError, match='credentials from environment variable "KC_AWS_KEYS"'
    ):
        await from_env.check()
    await from_env.aclose()


async def test_the_sdks_default_chain_is_used_and_named(
    moto_server: MotoServer, ec2_proxy: Ec2Proxy, network: Network, monkeypatch: pytest.MonkeyPatch
) -> None:
    nothing = factory(config(ec2_proxy.url, network, None))
    with pytest.raises(AwsStartupError, match=r"no AWS credentials .* default chain found none"):
        await nothing.check()
    await nothing.aclose()

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", moto_server.keys.access_key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    rejected = factory(config(ec2_proxy.url, network, None))
    with pytest.raises(AwsStartupError, match=r"default chain .*AWS_ACCESS_KEY_ID"):
        await rejected.check()
    await rejected.aclose()

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", moto_server.keys.secret_access_key)
    chain = factory(config(ec2_proxy.url, network, None))
    await chain.check()
    await chain.aclose()

    with pytest.raises(AwsStartupError, match="profile 'nope'"):
        factory(config(ec2_proxy.url, network, None, profile="nope"))


async def test_instances_in_another_vpc_or_untagged_are_not_this_clusters(
    moto_server: MotoServer, ec2_proxy: Ec2Proxy, network: Network, credentials_file: Path
) -> None:
    other_network = moto_server.network(("us-east-1a",))
    other = moto_server.run_instance(other_network, "us-east-1a")
    untagged = moto_server.run_instance(network, "us-east-1a", cluster=None)
    cloud = provider(ec2_proxy, network, credentials_file)

    # By name: ignored (not this cluster's), and the message says where it is.
    by_name = node(other.private_dns_name)
    assert await v2(cloud).instance_exists(by_name) is False
    with pytest.raises(
        InstanceNotFoundError, match=f"{other.id} has it but is in VPC {other.vpc_id}"
    ):
        await v2(cloud).instance_metadata(by_name)
    with pytest.raises(
        InstanceNotFoundError, match=re.escape("lacks the cluster tag kubernetes.io/cluster/demo")
    ):
        await v2(cloud).instance_metadata(node(untagged.private_dns_name))

    # By providerID: an error, never "does not exist" (the Node is not deleted).
    for instance in (other, untagged):
        with pytest.raises(AwsError, match="so it is not this cluster's"):
            await v2(cloud).instance_exists(node("n", instance.provider_id))
    await cloud.aclose()

    # The legacy tag KubernetesCluster=<clusterName> instead.
    legacy = moto_server.run_instance(
        network, "us-east-1b", cluster=None, tags={"KubernetesCluster": "demo"}
    )
    cloud = provider(ec2_proxy, network, credentials_file, clusterTag="KubernetesCluster")
    metadata = await v2(cloud).instance_metadata(node(legacy.private_dns_name))
    assert metadata is not None
    assert metadata.provider_id == legacy.provider_id
    await cloud.aclose()


# -- the cloud-config --------------------------------------------------------------------


def test_the_cloud_config_is_checked_key_by_key() -> None:
    cfg = load_config(b"region: eu-west-1\nvpcId: vpc-0a1b2c3d\nclusterName: prod\n")
    assert (cfg.region, cfg.vpc_id, cfg.cluster_tag) == (
        "eu-west-1",
        "vpc-0a1b2c3d",
        "kubernetes.io/cluster/prod",
    )
    assert (cfg.batch_window, cfg.cache_ttl, cfg.max_concurrent_calls) == (0.005, 2.0, 8)
    bad = {
        b"": "needs a --cloud-config",
        b"region: eu-west-1\nregoin: x\n": "unknown field `regoin`; known fields: region, vpcId,",
        b"region: eu-west-1\nmaxConcurrentCalls: many\n": (
            "`maxConcurrentCalls` must be an integer, got a string"
        ),
        b"region: [eu-west-1]\n": "`region` must be a string, got a list",
        b"region: eu-west-1\nvpcId: vpc-xyz\n": "`vpcId` 'vpc-xyz' is not a VPC ID",
        b"region: eu-west-1\nendpoint: ec2.local\n": "is not an http(s) URL",
        b"region: eu-west-1\nclusterTag: KubernetesCluster\n": "`clusterTag` needs `clusterName`",
        b"region: eu-west-1\nmaxConcurrentCalls: 0\n": "`maxConcurrentCalls` must be 1 or more",
        b"region: eu-west-1\nbatchWindow: 2s\n": "`batchWindow` must be at most 1s",
        b"region: eu-west-1\ncacheTTL: soon\n": "invalid duration",
        b"region: eu-west-1\ncredentials: {file: a, env: B}\n": "names both a file and a variable",
    }
    for text, message in bad.items():
        with pytest.raises(AwsConfigError, match=re.escape(message)):
            load_config(text)


# -- the batching engine alone -----------------------------------------------------------


class FakeEc2:
    """A describe function over a dict of instance ID → private DNS name."""

    def __init__(self, names: dict[str, str]) -> None:
        self.names = names
        self.calls: list[tuple[str, list[str]]] = []
        self.fail: Exception | None = None

    async def describe(self, kind: Kind, keys: list[str]) -> list[tuple[str, str]]:
        self.calls.append((kind, list(keys)))
        await asyncio.sleep(0.01)
        if self.fail is not None:
            raise self.fail
        index = 0 if kind == "instance-id" else 1
        return [item for item in self.names.items() if item[index] in keys]


def keys_of(kind: Kind, instance: tuple[str, str]) -> list[str]:
    return [instance[0] if kind == "instance-id" else instance[1]]


async def test_lookups_are_chunked_at_ec2s_200_filter_values_and_errors_reach_every_waiter() -> (
    None
):
    fake = FakeEc2({f"i-{n}": f"ip-{n}" for n in range(450)})
    lookups = Lookups(fake.describe, keys_of, window=0.005, ttl=0.0)
    found = await asyncio.gather(*(lookups.get("instance-id", f"i-{n}") for n in range(450)))
    assert [f[0][0] for f in found] == [f"i-{n}" for n in range(450)]
    assert [len(keys) for _kind, keys in fake.calls] == [200, 200, 50]

    fake.calls.clear()
    fake.fail = AwsError("boom", code="InternalError")
    results = await asyncio.gather(
        *(lookups.get("private-dns-name", f"ip-{n}") for n in range(3)), return_exceptions=True
    )
    assert all(isinstance(r, AwsError) for r in results)
    assert len(fake.calls) == 1
    fake.fail = None
    assert await lookups.get("private-dns-name", "ip-1") == (("i-1", "ip-1"),)  # not remembered
    assert await lookups.get("private-dns-name", "nowhere") == ()
    await lookups.aclose()


async def test_lookups_share_a_call_in_flight_and_prefetch_recent_ids() -> None:
    fake = FakeEc2({f"i-{n}": f"ip-{n}" for n in range(5)})
    lookups = Lookups(fake.describe, keys_of, window=0.001, ttl=0.2)
    first = asyncio.create_task(lookups.get("instance-id", "i-0"))
    await asyncio.sleep(0.005)  # the call is on its way
    again = await lookups.get("instance-id", "i-0")
    assert await first == again
    assert len(fake.calls) == 1
    for n in range(1, 5):  # one at a time: nothing to coalesce
        await lookups.get("instance-id", f"i-{n}")
    assert len(fake.calls) == 5
    await asyncio.sleep(0.25)  # every answer is stale now
    for n in range(5):  # the next pass: the first call also asks about the others
        await lookups.get("instance-id", f"i-{n}")
    assert len(fake.calls) == 6
    assert sorted(fake.calls[-1][1]) == [f"i-{n}" for n in range(5)]
    await lookups.aclose()


# -- the kubelet serving certificate approver's questions -------------------------------


async def test_an_instance_belongs_to_the_node_named_by_its_private_dns_name(
    moto_server: MotoServer, ec2_proxy: Ec2Proxy, network: Network, credentials_file: Path
) -> None:
    mine = moto_server.run_instance(network, "us-east-1a")
    other = moto_server.run_instance(network, "us-east-1b")
    cloud = provider(ec2_proxy, network, credentials_file)
    instances = v2(cloud)
    assert instances.authoritative is True

    metadata = await instances.instance_metadata(node(mine.private_dns_name, mine.provider_id))
    assert metadata is not None
    assert await instances.instance_belongs_to(mine.private_dns_name, metadata) is True
    assert await instances.instance_belongs_to(mine.private_dns_name.upper(), metadata) is True
    # Another node that set its providerID to this instance: not its own.
    assert await instances.instance_belongs_to(other.private_dns_name, metadata) is False
    assert await instances.instance_belongs_to("evil", metadata) is False
    await cloud.aclose()
