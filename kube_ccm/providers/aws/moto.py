"""moto's EC2 in server mode on a loopback port, for the ``aws`` provider's tests.

    server = MotoServer().start()             # python -m moto.server, dies with us
    net = server.network(["us-east-1a", "us-east-1b"])
    node = server.run_instance(net, "us-east-1a", instance_type="m5.large")
    node.private_dns_name                     # ip-10-2-1-10.ec2.internal: a Node's name
    server.stop_instances(node)               # stopping → stopped
    server.stop()

The server runs as a subprocess (``python -m moto.server -H 127.0.0.1 -p 0``) in its
own session with a parent-death signal, so it never outlives the test run, and its
CPU is not the test process's. By default it **checks credentials** as AWS does
(moto's IAM authentication): the first requests create an IAM user allowed to do
anything and an access key for it (:attr:`MotoServer.keys`); any other key, or a
wrong secret, gets ``AuthFailure``. Every :meth:`MotoServer.network` is a VPC of its
own with a distinct ``10.<n>.0.0/16``, so tests that share the server see each
other's instances only when they ask without a VPC.

The same server answers ELBv2 (``service_client("elbv2")``); ``route_table`` and
``tag_subnets`` tag a network's route table and subnets for a cluster.

:class:`Ec2Proxy` sits between a client and the server on another loopback port:
it counts the requests by ``Action`` (how many ``DescribeInstances`` a wave of
lookups made; ELBv2's query API has actions too, so an endpoint for both services
counts both) and answers chosen requests with an AWS error instead (throttling,
``AuthFailure``), as EC2 would, request ID included.

Needs ``boto3`` and ``moto[server]`` (the ``dev`` extra); neither is imported
until used.

A test tool beside the provider it fakes, never imported by the provider itself:
only tests and the sandbox import it (its dependencies are dev ones).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs
from xml.sax.saxutils import escape

import aiohttp
from aiohttp import web

from kube_ccm.testing._lifecycle import Started
from kube_ccm.testing.controlplane import die_with_parent

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client

__all__ = [
    "AwsKeys",
    "Ec2Instance",
    "Ec2Proxy",
    "Fault",
    "MotoServer",
    "MotoUnavailableError",
    "Network",
    "ProxiedRequest",
    "moto_missing",
]

DEFAULT_REGION = "us-east-1"
IMAGE_ID = "ami-12c6146b"  # one of moto's built-in AMIs
CLUSTER_TAG_PREFIX = "kubernetes.io/cluster/"
_BOOTSTRAP_ACTIONS = 6  # CreateUser, PutUserPolicy, CreateAccessKey twice: then auth is on
OTHER_ACCOUNT = "222222222222"
"""The account of :attr:`MotoServer.other_keys`: keys that work, of another account."""
_DNS_NAME_BOOT = """
import sys
from moto.ec2.models import instances
from moto.server import main

TAG = sys.argv.pop(1)
by_ip = instances.Instance.private_dns_name


def private_dns_name(self):
    for tag in self.get_tags():
        if tag["key"] == TAG:
            return tag["value"]
    return by_ip.fget(self)


instances.Instance.private_dns_name = property(private_dns_name)
main(sys.argv[1:])
"""
_RUNNING_ON = re.compile(r"Running on http://127\.0\.0\.1:(\d+)")
_ERROR_CODE = re.compile(r"<Code>([^<]+)</Code>")


class MotoUnavailableError(RuntimeError):
    """moto (with its server extra) or boto3 is not installed here."""


def moto_missing() -> str | None:
    """Why the moto server cannot run here (what to install), or ``None``."""
    missing = []
    for module in ("boto3", "moto", "flask", "flask_cors"):
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    if not missing:
        return None
    return (
        f"{', '.join(missing)} not installed: the aws provider's tests need "
        "`pip install -e '.[dev,aws]'` (moto[server] and boto3)"
    )


@dataclass(frozen=True, slots=True)
class AwsKeys:
    """An access key pair moto accepts."""

    access_key_id: str
    secret_access_key: str

    def shared_credentials(self, profile: str = "default") -> str:
        """The pair as an AWS shared-credentials file (``~/.aws/credentials``)."""
        return (
            f"[{profile}]\naws_access_key_id = {self.access_key_id}\n"
            f"aws_secret_access_key = {self.secret_access_key}\n"
        )

    def env(self) -> dict[str, str]:
        """The pair as the SDK's environment variables (the default chain's first link)."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
        }


@dataclass(frozen=True, slots=True)
class Network:
    """A VPC with one subnet per availability zone."""

    region: str
    vpc_id: str
    cidr_prefix: str
    """``10.<n>``: the VPC is ``10.<n>.0.0/16``, zone ``i``'s subnet ``10.<n>.<i>.0/24``."""
    subnets: dict[str, str] = field(default_factory=dict)
    """Availability zone → subnet ID."""


@dataclass(frozen=True, slots=True)
class Ec2Instance:
    """What :meth:`MotoServer.run_instance` made."""

    id: str
    zone: str
    region: str
    instance_type: str
    private_ip: str
    private_dns_name: str
    vpc_id: str

    @property
    def provider_id(self) -> str:
        return f"aws:///{self.zone}/{self.id}"


class MotoServer(Started):
    """One ``moto.server`` subprocess on 127.0.0.1 and helpers to shape its EC2."""

    def __init__(
        self,
        *,
        auth: bool = True,
        region: str = DEFAULT_REGION,
        log_path: Path | None = None,
        dns_name_tag: str = "",
    ) -> None:
        self.auth = auth
        self.dns_name_tag = dns_name_tag
        """With a tag key, an instance carrying that tag has its value as private DNS name
        (so a test may choose a Node's name; EC2 derives it from the private IP)."""
        self.region = region
        self.log_path = log_path or Path(
            f"/tmp/kube-ccm-moto-{os.getpid()}-{uuid.uuid4().hex[:6]}.log"
        )
        self.url = ""
        self.port = 0
        self.keys = AwsKeys("testing", "testing")
        self.other_keys = AwsKeys("testing", "testing")
        """Valid keys of another account (:data:`OTHER_ACCOUNT`), which sees none of the
        instances made here: a wrong identity."""
        self._process: subprocess.Popen[bytes] | None = None
        self._clients: dict[str, EC2Client] = {}
        self._prefixes = itertools.count(1)
        self._ips: dict[str, itertools.count[int]] = {}

    # -- lifecycle ----------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> MotoServer:
        """Start the server (from the main thread: the parent-death signal is tied to
        the thread that forks) and, with ``auth``, create the access key tests use."""
        missing = moto_missing()
        if missing:
            raise MotoUnavailableError(missing)
        env = {
            **os.environ,
            # moto counts requests: the first few (the bootstrap below) go unchecked.
            "INITIAL_NO_AUTH_ACTION_COUNT": str(_BOOTSTRAP_ACTIONS) if self.auth else "inf",
        }
        with self.log_path.open("wb") as log:
            if self.dns_name_tag:
                command = [sys.executable, "-c", _DNS_NAME_BOOT, self.dns_name_tag]
            else:
                command = [sys.executable, "-m", "moto.server"]
            self._process = subprocess.Popen(
                [*command, "-H", "127.0.0.1", "-p", "0"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=die_with_parent(os.getpid()),  # noqa: PLW1509
            )
        deadline = time.monotonic() + timeout
        while True:
            match = _RUNNING_ON.search(self.log_path.read_text(errors="replace"))
            if match:
                break
            if self._process.poll() is not None or time.monotonic() > deadline:
                log_text = self.log_path.read_text(errors="replace")[-2000:]
                self.stop()
                raise MotoUnavailableError(f"moto.server did not start:\n{log_text}")
            time.sleep(0.05)
        self.port = int(match.group(1))
        self.url = f"http://127.0.0.1:{self.port}"
        if self.auth:
            self.keys = self._bootstrap_keys()
            self.other_keys = self._bootstrap_keys(OTHER_ACCOUNT)
        return self

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()

    @property
    def pid(self) -> int:
        assert self._process is not None
        return self._process.pid

    def _bootstrap_keys(self, account: str = "") -> AwsKeys:
        """A user allowed everything, and its key, in the default account or ``account``
        (moto's ``x-moto-account-id`` header; a key then belongs to its user's account)."""
        import boto3  # noqa: PLC0415 (an optional dependency)

        iam = boto3.client(
            "iam",
            endpoint_url=self.url,
            region_name=self.region,
            aws_access_key_id="bootstrap",
            aws_secret_access_key="bootstrap",
        )
        if account:

            def in_account(request: Any, **_: Any) -> None:
                request.headers["x-moto-account-id"] = account

            iam.meta.events.register("before-sign.iam.*", in_account)
        user = f"kube-ccm-{uuid.uuid4().hex[:8]}"
        iam.create_user(UserName=user)
        policy = {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}],
        }
        iam.put_user_policy(
            UserName=user, PolicyName="everything", PolicyDocument=json.dumps(policy)
        )
        key = iam.create_access_key(UserName=user)["AccessKey"]
        return AwsKeys(key["AccessKeyId"], key["SecretAccessKey"])

    # -- clients ------------------------------------------------------------------

    def session_keys(self) -> tuple[AwsKeys, str]:
        """Temporary credentials (``ASIA...``) and their session token, from
        ``sts:AssumeRole`` of a role allowed everything: what IRSA or an instance role
        gives a daemon."""
        import boto3  # noqa: PLC0415 (an optional dependency)

        keys = {
            "endpoint_url": self.url,
            "region_name": self.region,
            "aws_access_key_id": self.keys.access_key_id,
            "aws_secret_access_key": self.keys.secret_access_key,
        }
        iam = boto3.client("iam", **keys)  # type: ignore[call-overload]
        name = f"kube-ccm-{uuid.uuid4().hex[:8]}"
        trust = {
            "Version": "2012-10-17",
            "Statement": [
                {"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "sts:AssumeRole"}
            ],
        }
        role = iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(trust))["Role"]
        everything = {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}],
        }
        iam.put_role_policy(
            RoleName=name, PolicyName="everything", PolicyDocument=json.dumps(everything)
        )
        sts = boto3.client("sts", **keys)  # type: ignore[call-overload]
        made = sts.assume_role(RoleArn=role["Arn"], RoleSessionName="kube-ccm")["Credentials"]
        return AwsKeys(made["AccessKeyId"], made["SecretAccessKey"]), str(made["SessionToken"])

    def client(self, region: str | None = None) -> EC2Client:
        """A boto3 EC2 client with the server's valid keys (one per region, reused)."""
        region = region or self.region
        if region not in self._clients:
            import boto3  # noqa: PLC0415 (an optional dependency)

            self._clients[region] = boto3.client(
                "ec2",
                endpoint_url=self.url,
                region_name=region,
                aws_access_key_id=self.keys.access_key_id,
                aws_secret_access_key=self.keys.secret_access_key,
            )
        return self._clients[region]

    def service_client(self, service: str, region: str | None = None) -> Any:
        """A boto3 client of another service (``elbv2``, ``iam``) with the valid keys."""
        import boto3  # noqa: PLC0415 (an optional dependency)

        return boto3.client(
            service,  # type: ignore[call-overload]
            endpoint_url=self.url,
            region_name=region or self.region,
            aws_access_key_id=self.keys.access_key_id,
            aws_secret_access_key=self.keys.secret_access_key,
        )

    def route_table(self, network: Network, *, cluster: str | None = "demo") -> str:
        """A new route table in the network's VPC, tagged for ``cluster`` (if any)."""
        ec2 = self.client(network.region)
        table_id = ec2.create_route_table(VpcId=network.vpc_id)["RouteTable"]["RouteTableId"]
        if cluster:
            ec2.create_tags(
                Resources=[table_id],
                Tags=[{"Key": f"{CLUSTER_TAG_PREFIX}{cluster}", "Value": "owned"}],
            )
        return table_id

    def tag_subnets(self, network: Network, cluster: str = "demo") -> None:
        """Tag the network's subnets ``kubernetes.io/cluster/<cluster>=owned``."""
        self.client(network.region).create_tags(
            Resources=list(network.subnets.values()),
            Tags=[{"Key": f"{CLUSTER_TAG_PREFIX}{cluster}", "Value": "owned"}],
        )

    # -- shaping EC2 --------------------------------------------------------------

    def network(
        self, zones: Sequence[str] = ("us-east-1a",), *, region: str | None = None
    ) -> Network:
        """A new VPC ``10.<n>.0.0/16`` with a subnet ``10.<n>.<i>.0/24`` in each zone."""
        region = region or self.region
        prefix = f"10.{next(self._prefixes) % 250 + 1}"
        ec2 = self.client(region)
        vpc_id = ec2.create_vpc(CidrBlock=f"{prefix}.0.0/16")["Vpc"]["VpcId"]
        network = Network(region=region, vpc_id=vpc_id, cidr_prefix=prefix)
        for index, zone in enumerate(zones, start=1):
            subnet = ec2.create_subnet(
                VpcId=vpc_id, CidrBlock=f"{prefix}.{index}.0/24", AvailabilityZone=zone
            )["Subnet"]
            network.subnets[zone] = subnet["SubnetId"]
        return network

    def run_instance(
        self,
        network: Network,
        zone: str,
        *,
        instance_type: str = "m5.large",
        cluster: str | None = "demo",
        public_ip: bool = False,
        secondary_ips: int = 0,
        tags: dict[str, str] | None = None,
    ) -> Ec2Instance:
        """One running instance in ``zone``'s subnet with the next free private IP (so
        its private DNS name is ``ip-10-<n>-<i>-<k>.<region's domain>``). ``cluster``
        tags it ``kubernetes.io/cluster/<cluster>=owned``; ``public_ip`` gives it a
        public address (and DNS name); ``secondary_ips`` adds a second network
        interface with that many private IPs."""
        ec2 = self.client(network.region)
        subnet_id = network.subnets[zone]
        subnet_index = list(network.subnets).index(zone) + 1
        counter = self._ips.setdefault(subnet_id, itertools.count(10))
        private_ip = f"{network.cidr_prefix}.{subnet_index}.{next(counter)}"
        all_tags = {**(tags or {})}
        if cluster:
            all_tags[f"{CLUSTER_TAG_PREFIX}{cluster}"] = "owned"
        interface: dict[str, Any] = {
            "DeviceIndex": 0,
            "SubnetId": subnet_id,
            "PrivateIpAddress": private_ip,
            "AssociatePublicIpAddress": public_ip,
        }
        request: dict[str, Any] = {
            "ImageId": IMAGE_ID,
            "MinCount": 1,
            "MaxCount": 1,
            "InstanceType": instance_type,
            "NetworkInterfaces": [interface],
        }
        if all_tags:
            request["TagSpecifications"] = [
                {
                    "ResourceType": "instance",
                    "Tags": [{"Key": k, "Value": v} for k, v in all_tags.items()],
                }
            ]
        made = ec2.run_instances(**request)["Instances"][0]
        instance_id = made["InstanceId"]
        if secondary_ips:
            first = next(counter)
            addresses = [f"{network.cidr_prefix}.{subnet_index}.{first}"]
            addresses += [
                f"{network.cidr_prefix}.{subnet_index}.{next(counter)}"
                for _ in range(secondary_ips - 1)
            ]
            eni = ec2.create_network_interface(
                SubnetId=subnet_id,
                PrivateIpAddresses=[
                    {"PrivateIpAddress": a, "Primary": i == 0} for i, a in enumerate(addresses)
                ],
            )["NetworkInterface"]["NetworkInterfaceId"]
            ec2.attach_network_interface(
                NetworkInterfaceId=eni, InstanceId=instance_id, DeviceIndex=1
            )
        return Ec2Instance(
            id=instance_id,
            zone=zone,
            region=network.region,
            instance_type=instance_type,
            private_ip=made.get("PrivateIpAddress", private_ip),
            private_dns_name=made.get("PrivateDnsName", ""),
            vpc_id=network.vpc_id,
        )

    def describe(self, instance: Ec2Instance) -> dict[str, Any]:
        """The instance as DescribeInstances shows it now."""
        found = self.client(instance.region).describe_instances(InstanceIds=[instance.id])
        return dict(found["Reservations"][0]["Instances"][0])

    def state(self, instance: Ec2Instance) -> str:
        return str(self.describe(instance)["State"]["Name"])

    def stop_instances(self, *instances: Ec2Instance) -> None:
        self._by_region(instances, "stop_instances")

    def start_instances(self, *instances: Ec2Instance) -> None:
        self._by_region(instances, "start_instances")

    def terminate_instances(self, *instances: Ec2Instance) -> None:
        self._by_region(instances, "terminate_instances")

    def _by_region(self, instances: Sequence[Ec2Instance], method: str) -> None:
        regions: dict[str, list[str]] = {}
        for instance in instances:
            regions.setdefault(instance.region, []).append(instance.id)
        for region, ids in regions.items():
            getattr(self.client(region), method)(InstanceIds=ids)


# -- a counting, fault-injecting proxy ------------------------------------------------


@dataclass(slots=True)
class Fault:
    """Answer the next ``times`` requests of ``action`` with this AWS error."""

    action: str
    code: str
    message: str
    status: int = 400
    times: int = 1
    retry_after: float | None = None
    access_key_id: str | None = None
    """Only requests signed with this access key (``None``: all)."""
    request_ids: list[str] = field(default_factory=list)
    """The request IDs of the errors sent so far."""


@dataclass(frozen=True, slots=True)
class ProxiedRequest:
    action: str
    params: dict[str, list[str]]
    access_key_id: str


class Ec2Proxy:
    """An HTTP proxy in front of the moto server, on this event loop.

    ``url`` is what a client uses as its endpoint. :attr:`calls` counts requests by
    ``Action``, :attr:`errors` those answered with an error (injected or the
    server's) and :attr:`error_codes` by action and error code; :attr:`requests`
    keeps each one's parameters; :meth:`inject` makes chosen requests fail the way
    EC2 fails them.
    """

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.url = ""
        self.calls: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.error_codes: Counter[tuple[str, str]] = Counter()
        self.requests: list[ProxiedRequest] = []
        self.faults: list[Fault] = []
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> Ec2Proxy:
        app = web.Application()
        app.router.add_route("*", "/{path:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()
        self.url = f"http://127.0.0.1:{port}"
        self._session = aiohttp.ClientSession(auto_decompress=False)
        return self

    async def stop(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Ec2Proxy:
        return await self.start()

    async def __aexit__(self, *_exc: object) -> None:
        await self.stop()

    def inject(
        self,
        action: str,
        code: str,
        message: str = "",
        *,
        status: int = 400,
        times: int = 1,
        retry_after: float | None = None,
        access_key_id: str | None = None,
    ) -> Fault:
        """Answer the next ``times`` ``action`` requests (``"*"``: any) with the error
        ``code``."""
        fault = Fault(
            action,
            code,
            message or f"injected {code}",
            status,
            times,
            retry_after,
            access_key_id,
        )
        self.faults.append(fault)
        return fault

    def throttle(
        self, action: str = "DescribeInstances", *, times: int = 1, retry_after: float | None = None
    ) -> Fault:
        """EC2's throttling answer (HTTP 503 ``RequestLimitExceeded``)."""
        return self.inject(
            action,
            "RequestLimitExceeded",
            "Request limit exceeded.",
            status=503,
            times=times,
            retry_after=retry_after,
        )

    def count(self, action: str = "DescribeInstances") -> int:
        return self.calls[action]

    def reset(self) -> None:
        self.calls.clear()
        self.errors.clear()
        self.error_codes.clear()
        self.requests.clear()
        self.faults.clear()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        params = parse_qs(body.decode(errors="replace")) if body else {}
        params = params or parse_qs(request.query_string)
        action = (params.get("Action") or [""])[0]
        access_key = ""
        credential = re.search(r"Credential=([^/,\s]+)/", request.headers.get("Authorization", ""))
        if credential:
            access_key = credential.group(1)
        self.calls[action] += 1
        self.requests.append(ProxiedRequest(action, params, access_key))
        for fault in self.faults:
            if fault.times <= 0 or fault.action not in (action, "*"):
                continue
            if fault.access_key_id is not None and fault.access_key_id != access_key:
                continue
            fault.times -= 1
            self.errors[action] += 1
            self.error_codes[action, fault.code] += 1
            request_id = str(uuid.uuid4())
            fault.request_ids.append(request_id)
            headers = {"x-amzn-RequestId": request_id, "Content-Type": "text/xml"}
            if fault.retry_after is not None:
                headers["Retry-After"] = f"{fault.retry_after:g}"
            xml = (
                '<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error>'
                f"<Code>{escape(fault.code)}</Code><Message>{escape(fault.message)}</Message>"
                f"</Error></Errors><RequestID>{request_id}</RequestID></Response>"
            )
            return web.Response(status=fault.status, body=xml.encode(), headers=headers)
        assert self._session is not None
        forwarded = {
            k: v for k, v in request.headers.items() if k.lower() not in ("content-length",)
        }
        async with self._session.request(
            request.method,
            f"{self.upstream}{request.rel_url}",
            data=body,
            headers=forwarded,
            allow_redirects=False,
        ) as upstream:
            payload = await upstream.read()
            if upstream.status >= 400:
                self.errors[action] += 1
                code = _ERROR_CODE.search(payload.decode(errors="replace"))
                self.error_codes[action, code.group(1) if code else str(upstream.status)] += 1
            headers = {
                k: v
                for k, v in upstream.headers.items()
                if k.lower() not in ("content-length", "transfer-encoding", "connection")
            }
            return web.Response(status=upstream.status, body=payload, headers=headers)
