"""The conformance kit against the aws provider, on moto in server mode (a subprocess on
loopback checking credentials) behind the counting, fault-injecting proxy.

A Node is its instance's by private DNS name, which EC2 derives from the private IP;
the kit names Nodes itself, so this moto gives an instance carrying the tag
``kube-ccm.io/conformance-node`` that tag's value as its private DNS name
(:class:`~kube_ccm.providers.aws.moto.MotoServer` ``dns_name_tag``). The driver runs, stops,
starts and terminates instances with EC2's API; an outage is every request answered
``503 ServiceUnavailable`` by the proxy.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
import yaml

from kube_ccm.providers.aws import factory
from kube_ccm.providers.aws.moto import (
    Ec2Instance,
    Ec2Proxy,
    MotoServer,
    MotoUnavailableError,
    Network,
    moto_missing,
)
from kube_ccm.testing.conformance import (
    ConformanceSuite,
    ConformanceTarget,
    DaemonSettings,
    InstanceDriver,
)

CLUSTER = "kubernetes"  # the kit's cluster name (and --cluster-name)
NAME_TAG = "kube-ccm.io/conformance-node"
ZONES = ("us-east-1a", "us-east-1b")
AWS_ENV = {
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_CONFIG_FILE": "/nonexistent/aws-config",
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/aws-credentials",
}

pytestmark = pytest.mark.usefixtures("aws_env")


class MotoDriver(InstanceDriver):
    """Instances in moto's EC2, named as the kit's Nodes; outages injected by the proxy."""

    def __init__(self, server: MotoServer, network: Network, proxy: Ec2Proxy) -> None:
        self.server = server
        self.network = network
        self.proxy = proxy
        self.instances: dict[str, Ec2Instance] = {}

    async def create_instance(self, name: str) -> None:
        zone = ZONES[len(self.instances) % len(ZONES)]
        self.instances[name] = await asyncio.to_thread(
            self.server.run_instance, self.network, zone, cluster=CLUSTER, tags={NAME_TAG: name}
        )

    async def stop_instance(self, name: str) -> None:
        await asyncio.to_thread(self.server.stop_instances, self.instances[name])

    async def start_instance(self, name: str) -> None:
        await asyncio.to_thread(self.server.start_instances, self.instances[name])

    async def delete_instance(self, name: str) -> None:
        instance = self.instances.get(name)
        if instance is not None:
            await asyncio.to_thread(self.server.terminate_instances, instance)

    @contextlib.asynccontextmanager
    async def api_errors(self) -> AsyncIterator[None]:
        fault = self.proxy.inject(
            "*", "ServiceUnavailable", "injected outage", status=503, times=1_000_000
        )
        try:
            yield
        finally:
            fault.times = 0


@pytest.fixture(scope="module")
def moto_dns(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    """A moto server of this module's, whose instances take their DNS name from a tag."""
    server = MotoServer(
        log_path=tmp_path_factory.mktemp("moto") / "moto.log", dns_name_tag=NAME_TAG
    )
    try:
        missing = moto_missing()
        if missing:
            raise MotoUnavailableError(missing)
        server.start()
    except MotoUnavailableError as exc:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI must run the aws provider's conformance: {exc}")
        pytest.skip(str(exc))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def moto_network(moto_dns: MotoServer) -> Network:
    network = moto_dns.network(ZONES)
    moto_dns.route_table(network, cluster=CLUSTER)
    return network


@pytest_asyncio.fixture
async def dns_proxy(moto_dns: MotoServer) -> AsyncIterator[Ec2Proxy]:
    async with Ec2Proxy(moto_dns.url) as proxy:
        yield proxy


class TestAwsConformance(ConformanceSuite):
    @pytest.fixture
    def conformance_provider(
        self, moto_dns: MotoServer, moto_network: Network, dns_proxy: Ec2Proxy, tmp_path: Path
    ) -> ConformanceTarget:
        keys = tmp_path / "aws-credentials"
        keys.write_text(moto_dns.keys.shared_credentials())
        config = tmp_path / "aws.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "region": moto_network.region,
                    "vpcId": moto_network.vpc_id,
                    "clusterName": CLUSTER,
                    "endpoint": dns_proxy.url,
                    "elbEndpoint": dns_proxy.url,
                    "subnetIds": list(moto_network.subnets.values()),
                    "credentials": {"file": str(keys)},
                    "cacheTTL": "0s",
                    "throttleDelay": "20ms",
                }
            )
        )
        return ConformanceTarget(
            provider=lambda: factory(config.read_bytes()),
            driver=MotoDriver(moto_dns, moto_network, dns_proxy),
            daemon=DaemonSettings(
                cloud_provider="aws",
                cloud_config=config,
                args=("--cloud-call-timeout=5s",),
                env=AWS_ENV,
            ),
            cluster_name=CLUSTER,
        )

    @pytest.fixture
    def conformance_kubeconfig(self, ccm_kubeconfig: Path) -> Path:
        """The daemon runs with exactly the shipped RBAC."""
        return ccm_kubeconfig
