"""``kube-ccm sandbox --provider aws``: the aws provider against a local moto.

Without ``--cloud-config``, the sandbox plays AWS itself: a moto server on loopback
(:class:`~kube_ccm.providers.aws.moto.MotoServer`, checking credentials as AWS does, and
dying with the sandbox) holds a VPC with a subnet per zone (tagged
``kubernetes.io/cluster/sandbox``, so load balancers find them), the cluster's
route table and one running instance per sandbox node, whose private DNS name is
the node's name (moto's private DNS name taken from the :data:`NAME_TAG` tag: EC2
derives it from the private IP). kube-ccm gets a cloud-config pointing both
endpoints at an :class:`~kube_ccm.providers.aws.moto.Ec2Proxy` in front of the server,
which counts its EC2 and ELBv2 calls for the summary. ``--kill`` terminates
instances, ``--shutdown`` stops them.

The sandbox's hook (:mod:`kube_ccm.sandbox.local`); the provider never imports it.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import yaml

from kube_ccm.sandbox.local import LocalCloud, stop_kubelet_hint

if TYPE_CHECKING:
    from kube_ccm.providers.aws.moto import Ec2Instance, Ec2Proxy, MotoServer, Network

__all__ = [
    "CLUSTER",
    "CONTROLLERS",
    "MAX_NODES",
    "NAME_TAG",
    "SandboxAws",
    "local_cloud",
    "missing",
    "problems",
]

CLUSTER = "sandbox"
"""The cluster name: the cloud-config's ``clusterName`` and kube-ccm's ``--cluster-name``."""
NAME_TAG = "sandbox.kube-ccm.io/node-name"
"""The instance tag whose value moto gives as the instance's private DNS name."""
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
INSTANCE_TYPES = ("m5.large", "c5.xlarge")
MAX_NODES = 700
"""A ``/24`` subnet per zone holds about 245 instances."""
CONTROLLERS = "cloud-node,cloud-node-lifecycle,service,route"
DAEMON_ENV = {
    # Nothing from the machine running the sandbox: no instance metadata, no profile.
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_CONFIG_FILE": "/nonexistent/aws-config",
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/aws-credentials",
}


def problems(nodes: int) -> list[str]:
    """What is wrong with ``nodes`` instances in the sandbox's AWS, each with what to do."""
    if nodes <= MAX_NODES:
        return []
    return [
        f"--provider aws without --cloud-config runs at most {MAX_NODES} "
        "instances (a /24 subnet per zone): use fewer --nodes"
    ]


def missing() -> str | None:
    """What to install for ``--provider aws`` without a cloud-config, or ``None``."""
    from kube_ccm.providers.aws.moto import moto_missing  # noqa: PLC0415 (a dev dependency)

    if moto_missing() is None:
        return None
    return (
        "--provider aws without --cloud-config runs a local moto server (EC2 and ELBv2) "
        "and the aws provider: `pip install 'kube-ccm[dev,aws]'` (moto[server] and boto3)"
    )


async def local_cloud(
    names: list[str], workdir: Path, out: TextIO, stack: contextlib.AsyncExitStack
) -> SandboxAws | None:
    """moto with the sandbox's network and an instance per node name, behind the
    counting proxy; ``None`` (said on stderr) when moto does not start."""
    from kube_ccm.providers.aws.moto import MotoUnavailableError  # noqa: PLC0415

    aws = SandboxAws(workdir / "aws")
    stack.push_async_callback(aws.close)
    try:
        # On this thread: the moto server dies with the thread that started it.
        aws.start()
    except MotoUnavailableError as exc:
        print(f"error: --provider aws needs moto: {exc}", file=sys.stderr)
        return None
    await aws.start_proxy()
    await aws.create_instances(names)
    assert aws.network is not None
    print(
        f"moto (EC2 and ELBv2) on {aws.server.url}: VPC {aws.network.vpc_id} with "
        f"{len(aws.network.subnets)} subnets tagged for cluster {CLUSTER}, route "
        f"table {aws.route_table_id}, {len(names)} instances named after the nodes; "
        "kube-ccm calls it through a counting proxy",
        file=out,
        flush=True,
    )
    aws.write_config()
    return aws


class SandboxAws(LocalCloud):
    """The sandbox's AWS: a moto server, its network, an instance per node, a proxy."""

    provider = "aws"
    taken_back = True  # moto counts what kube-ccm leaves behind
    daemon_args = (f"--cluster-name={CLUSTER}", f"--controllers={CONTROLLERS}")
    daemon_env = DAEMON_ENV
    ingress = "hostname"  # the NLBs' DNS names

    def __init__(self, workdir: Path) -> None:
        from kube_ccm.providers.aws.moto import MotoServer  # noqa: PLC0415 (a dev dependency)

        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.server: MotoServer = MotoServer(log_path=workdir / "moto.log", dns_name_tag=NAME_TAG)
        self.proxy: Ec2Proxy | None = None
        self.network: Network | None = None
        self.route_table_id = ""
        self.instances: dict[str, Ec2Instance] = {}
        self.credentials_path = workdir / "credentials"
        self.config_file = workdir / "aws.yaml"

    def start(self) -> None:
        """Start moto (on this thread: the server dies with the thread that started it)
        and make the VPC, its tagged subnets and route table.

        Raises :class:`~kube_ccm.providers.aws.moto.MotoUnavailableError`."""
        self.server.start()
        self.network = self.server.network(ZONES)
        self.server.tag_subnets(self.network, CLUSTER)
        self.route_table_id = self.server.route_table(self.network, cluster=CLUSTER)

    async def start_proxy(self) -> str:
        """The counting proxy, on this event loop; its URL."""
        from kube_ccm.providers.aws.moto import Ec2Proxy  # noqa: PLC0415 (a dev dependency)

        self.proxy = await Ec2Proxy(self.server.url).start()
        return self.proxy.url

    async def create_instances(self, names: Sequence[str]) -> None:
        """A running instance per node name, round-robin over the zones."""
        await asyncio.to_thread(self._create_instances, list(names))

    def _create_instances(self, names: list[str]) -> None:
        assert self.network is not None
        for index, name in enumerate(names):
            self.instances[name] = self.server.run_instance(
                self.network,
                ZONES[index % len(ZONES)],
                instance_type=INSTANCE_TYPES[index % len(INSTANCE_TYPES)],
                cluster=CLUSTER,
                tags={NAME_TAG: name},
            )

    def write_config(self) -> Path:
        """kube-ccm's aws cloud-config: both endpoints the proxy, the server's keys."""
        assert self.network is not None
        assert self.proxy is not None
        self.credentials_path.write_text(self.server.keys.shared_credentials())
        self.credentials_path.chmod(0o600)
        config = {
            "region": self.network.region,
            "vpcId": self.network.vpc_id,
            "clusterName": CLUSTER,
            "endpoint": self.proxy.url,
            "elbEndpoint": self.proxy.url,
            "credentials": {"file": str(self.credentials_path)},
        }
        self.config_file.write_text(yaml.safe_dump(config, sort_keys=False))
        return self.config_file

    async def terminate(self, names: Sequence[str]) -> None:
        if names:
            chosen = [self.instances[n] for n in names]
            await asyncio.to_thread(self.server.terminate_instances, *chosen)

    async def stop(self, names: Sequence[str]) -> None:
        if names:
            chosen = [self.instances[n] for n in names]
            await asyncio.to_thread(self.server.stop_instances, *chosen)

    async def end_instances(self, terminated: list[str], shut_down: list[str]) -> None:
        await self.terminate(terminated)
        await self.stop(shut_down)

    def calls(self) -> dict[str, dict[str, int]]:
        """kube-ccm's EC2 and ELBv2 calls by action, as the proxy counted them; failed:
        the error answers other than "not found" (how the provider asks whether an
        NLB or target group exists yet)."""
        if self.proxy is None:
            return {}
        failed: Counter[str] = Counter()
        for (action, code), count in self.proxy.error_codes.items():
            if not code.endswith(("NotFound", "NotFoundException")):
                failed[action] += count
        return {
            action: {"count": count, "errors": failed[action]}
            for action, count in self.proxy.calls.items()
        }

    async def released(self) -> bool:
        """No route to an instance is left in the cluster's route table."""
        return not await self.routes_left()

    async def left_behind(self) -> str:
        return (
            f"moto holds {await self.load_balancers_left()} load balancers and "
            f"{await self.routes_left()} pod routes"
        )

    async def routes_left(self) -> int:
        """The routes to instances in the cluster's route table."""
        return await asyncio.to_thread(self._routes_left)

    def _routes_left(self) -> int:
        tables = self.server.client().describe_route_tables(RouteTableIds=[self.route_table_id])
        return sum(1 for r in tables["RouteTables"][0].get("Routes", []) if r.get("InstanceId"))

    async def load_balancers_left(self) -> int:
        return await asyncio.to_thread(self._load_balancers_left)

    def _load_balancers_left(self) -> int:
        elb = self.server.service_client("elbv2")
        return len(elb.describe_load_balancers().get("LoadBalancers", []))

    def hints(self, kubectl: str, node: str) -> list[str]:
        """kubectl and aws CLI commands against the sandbox's moto."""
        assert self.network is not None
        aws = (
            f"AWS_SHARED_CREDENTIALS_FILE={self.credentials_path} aws --endpoint-url "
            f"{self.server.url} --region {self.network.region}"
        )
        instance = self.instances[node].id if node in self.instances else "i-..."
        return [
            f"  {kubectl} get services   # ingress hostnames: the NLBs' DNS names",
            stop_kubelet_hint(kubectl, node),
            f"  {aws} ec2 describe-instances --filters Name=tag:{NAME_TAG},Values={node}",
            f"  {aws} ec2 stop-instances --instance-ids {instance}"
            "   # with its kubelet stopped: the shutdown taint",
            f"  {aws} elbv2 describe-load-balancers   # one NLB per Service",
            f"  {aws} ec2 describe-route-tables --route-table-ids {self.route_table_id}",
        ]

    async def close(self) -> None:
        """Stop the proxy and the server (the server's files stay in the workdir)."""
        if self.proxy is not None:
            await self.proxy.stop()
            self.proxy = None
        await asyncio.to_thread(self.server.stop)
