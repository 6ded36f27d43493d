"""The ``aws`` provider: Nodes are EC2 instances.

Capabilities: ``instances_v2`` (here), ``load_balancer`` (Network Load Balancers,
:mod:`kube_ccm.providers.aws.loadbalancer`) and ``routes`` (a VPC route table,
:mod:`kube_ccm.providers.aws.routes`). What the instances answer:

* **Which instance is a Node's**: the one its providerID names
  (``aws:///<zone>/<instance-id>``; ``aws:////<id>`` and ``aws:///<id>`` are read
  too); before it has one, the instance whose **private DNS name** is the Node's name
  (what a kubelet on EC2 registers as), among the instances that are this cluster's.
* **This cluster's instances**: those in ``vpcId`` and carrying the cluster tag
  (``kubernetes.io/cluster/<clusterName>``, or ``clusterTag=<clusterName>``), when the
  cloud-config names them. A Node whose providerID names an instance that is not this
  cluster's is an error (never "does not exist": the Node is not deleted); by name,
  such instances are ignored.
* **exists** is false only when EC2 says the instance is ``terminated`` or does not
  know it; **shutdown** is ``stopped`` or ``stopping``.
* **metadata**: providerID ``aws:///<zone>/<id>``, the instance type, zone and region,
  and the addresses in a stable order: ``InternalIP`` (the private IPs, network
  interface by device index, each interface's primary first), ``ExternalIP`` (the
  public IP, then other interfaces' public IPs), ``InternalDNS`` (the private DNS
  name), ``ExternalDNS`` (the public one). No ``Hostname``: the kubelet's is kept.
* **authoritative** (the kubelet serving certificate approver may rest on it): an
  instance is a Node's when its private DNS name is the Node's name.

Lookups are batched (:mod:`kube_ccm.providers.aws.lookups`): a wave of lookups is one
``DescribeInstances`` with an ``instance-id`` or ``private-dns-name`` filter, not one
call per Node. boto3 blocks, so each call runs on the provider's own pool of threads
(:class:`~kube_ccm.cloudprovider.BlockingCalls`, ``maxConcurrentCalls``); botocore's
own retries are off, so that every attempt passes the daemon's cloud-call boundary.

Errors: throttling (``RequestLimitExceeded``, ``Throttling``, ...) is a
:class:`~kube_ccm.cloudprovider.TransientCloudError` with EC2's suggested delay, or a
jittered ``throttleDelay``; 5xx answers and dropped connections are transient too;
``InvalidInstanceID.NotFound`` is :class:`~kube_ccm.cloudprovider.InstanceNotFoundError`;
anything else is an :class:`AwsError` whose message has EC2's error code, message and
request ID. At start-up (``initialize``) one call checks the credentials, the region
and the VPC: rejected credentials (the error names where they came from), a VPC that
is not in the region and missing permissions stop the daemon; an EC2 that does not
answer only delays the Nodes.
"""

from __future__ import annotations

import asyncio
import configparser
import logging
import random
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from kube_ccm import __version__
from kube_ccm.api.objects import Node, NodeSpec, ObjectMeta
from kube_ccm.cloudprovider import (
    BlockingCalls,
    ClientBuilder,
    CloudConfigError,
    CloudProvider,
    Credentials,
    CredentialsError,
    InstanceMetadata,
    InstanceNotFoundError,
    InstancesV2,
    LoadBalancer,
    Routes,
    Secret,
    TransientCloudError,
)
from kube_ccm.providers.aws.api import (
    CREDENTIALS_CODES,
    MAX_SUGGESTED_DELAY,
    NOT_FOUND_CODES,
    PERMISSION_CODES,
    PROVIDER_NAME,
    SHUTDOWN_STATES,
    TERMINATED,
    THROTTLING_CODES,
    TRANSIENT_CODES,
    AwsCredentialsRejectedError,
    AwsError,
    AwsStartupError,
    AwsThrottledError,
    Ec2Instance,
    load_boto3,
    parse_provider_id,
)
from kube_ccm.providers.aws.config import AwsConfig
from kube_ccm.providers.aws.loadbalancer import AwsLoadBalancer
from kube_ccm.providers.aws.lookups import Kind, Lookups
from kube_ccm.providers.aws.routes import AwsRoutes

if TYPE_CHECKING:
    from boto3.session import Session
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_ec2.type_defs import FilterTypeDef

log = logging.getLogger(__name__)

_CHAIN_METHODS = {
    "env": "the environment variables AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
    "shared-credentials-file": "the shared credentials file (~/.aws/credentials or "
    "AWS_SHARED_CREDENTIALS_FILE)",
    "config-file": "the SDK's config file (~/.aws/config or AWS_CONFIG_FILE)",
    "assume-role-with-web-identity": "web identity (AWS_ROLE_ARN and "
    "AWS_WEB_IDENTITY_TOKEN_FILE, e.g. IRSA)",
    "container-role": "the container's role (ECS or EKS Pod Identity)",
    "iam-role": "the instance's IAM role (instance metadata)",
}

T = TypeVar("T")


# -- values ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AwsKeys:
    access_key_id: str
    secret_access_key: str
    session_token: str | None = None

    def __repr__(self) -> str:
        return f"AwsKeys({masked(self.access_key_id)}, ***)"


def masked(access_key_id: str) -> str:
    """``AKIA…WXYZ``: enough to tell keys apart in a message."""
    if len(access_key_id) <= 8:
        return "***"
    return f"{access_key_id[:4]}…{access_key_id[-4:]}"


def parse_keys(secret: Secret, *, profile: str, where: str) -> AwsKeys:
    """The key pair in a credentials value: a shared-credentials file (its ``profile``
    section, else ``[default]``) or ``ACCESS_KEY_ID:SECRET_ACCESS_KEY[:SESSION_TOKEN]``.
    Errors name ``where`` and never show the value."""
    text = secret.reveal().strip()
    if "aws_access_key_id" in text or text.startswith("["):
        parser = configparser.ConfigParser(interpolation=None)
        try:
            parser.read_string(text)
        except configparser.Error:
            raise CredentialsError(
                f"the AWS credentials in {where} are not a valid shared-credentials file "
                "(INI: a [default] section with aws_access_key_id and aws_secret_access_key)"
            ) from None
        section = profile or "default"
        if not parser.has_section(section):
            sections = ", ".join(parser.sections()) or "none"
            raise CredentialsError(
                f"the AWS credentials in {where} have no [{section}] section (sections: "
                f"{sections}): set `profile` in the cloud-config to one of them"
            )
        values = parser[section]
        key_id = values.get("aws_access_key_id", "").strip()
        key = values.get("aws_secret_access_key", "").strip()
        token = values.get("aws_session_token", "").strip() or None
        if not key_id or not key:
            raise CredentialsError(
                f"the AWS credentials in {where}, section [{section}], need both "
                "aws_access_key_id and aws_secret_access_key"
            )
        return AwsKeys(key_id, key, token)
    parts = text.split(":")
    if len(parts) in (2, 3) and all(p.strip() for p in parts) and "\n" not in text:
        return AwsKeys(
            parts[0].strip(), parts[1].strip(), parts[2].strip() if len(parts) == 3 else None
        )
    raise CredentialsError(
        f"the AWS credentials in {where} are neither a shared-credentials file ([default] "
        "with aws_access_key_id and aws_secret_access_key) nor ACCESS_KEY_ID:SECRET_ACCESS_KEY"
    )


def _keys_of(kind: Kind, instance: Ec2Instance) -> Sequence[str]:
    if kind == "instance-id":
        return (instance.id,)
    return (instance.private_dns_name,) if instance.private_dns_name else ()


# -- the capability ----------------------------------------------------------------------


class AwsInstances(InstancesV2):
    authoritative = True
    """Every answer is EC2's DescribeInstances; a Node is read for its name and
    providerID only."""

    def __init__(self, provider: AwsProvider) -> None:
        self._p = provider

    async def instance_belongs_to(self, node_name: str, metadata: InstanceMetadata) -> bool:
        """The instance's own private DNS name (EC2's record) is the Node's name: that is
        how a kubelet on EC2 names its Node, and how this provider finds a Node's
        instance before it has a providerID."""
        probe = Node(
            metadata=ObjectMeta(name=node_name), spec=NodeSpec(provider_id=metadata.provider_id)
        )
        try:
            instance, _why = await self._p.find(probe)
        except InstanceNotFoundError:
            return False
        return instance is not None and instance.private_dns_name == node_name.lower()

    async def instance_exists(self, node: Node) -> bool:
        try:
            instance, _why = await self._p.find(node)
        except InstanceNotFoundError:  # EC2's InvalidInstanceID.NotFound
            return False
        return instance is not None

    async def instance_shutdown(self, node: Node) -> bool:
        try:
            instance, _why = await self._p.find(node)
        except InstanceNotFoundError:
            return False
        return instance is not None and instance.state in SHUTDOWN_STATES

    async def instance_metadata(self, node: Node) -> InstanceMetadata | None:
        instance, why = await self._p.find(node)
        if instance is None:
            raise InstanceNotFoundError(f"Node {node.metadata.name}: {why}")
        return InstanceMetadata(
            provider_id=instance.provider_id,
            instance_type=instance.instance_type,
            node_addresses=instance.addresses,
            zone=instance.zone,
            region=self._p.config.region,
        )


# -- the provider ------------------------------------------------------------------------


class AwsProvider(CloudProvider):
    def __init__(self, config: AwsConfig) -> None:
        self.config = config
        self._boto3 = load_boto3()
        self._check_region()
        self._credentials: Credentials | None = None
        self._keys: AwsKeys | None = None
        if config.credentials is not None:
            self._credentials = Credentials(config.credentials)
            # A missing or malformed source stops the daemon now, naming it.
            self._keys = self._parse(self._credentials.load())
        self._session = self._new_session(self._keys)
        self._client: EC2Client | None = None
        self._elb_client: Any = None
        self._client_lock = threading.Lock()
        self._chain_method = ""
        self._blocking = BlockingCalls(PROVIDER_NAME, config.max_concurrent_calls)
        self._lookups: Lookups[Ec2Instance] = Lookups(
            self._describe, _keys_of, window=config.batch_window, ttl=config.cache_ttl
        )
        self._instances = AwsInstances(self)
        # Imported here: they use this module's errors and helpers.

        self._load_balancer = AwsLoadBalancer(self)
        self._routes = AwsRoutes(self)
        self._remove_callback: Callable[[], None] | None = None
        if self._credentials is not None:
            self._remove_callback = self._credentials.on_change(self._credentials_changed)

    # -- the contract ----------------------------------------------------------------

    def provider_name(self) -> str:
        return PROVIDER_NAME

    def has_cluster_id(self) -> bool:
        return bool(self.config.cluster_name)

    def instances_v2(self) -> InstancesV2 | None:
        return self._instances

    def load_balancer(self) -> LoadBalancer | None:
        return self._load_balancer

    def routes(self) -> Routes | None:
        return self._routes

    async def initialize(self, client_builder: ClientBuilder, stop: asyncio.Event) -> None:
        await self.check()
        if self._credentials is not None:
            self._credentials.start(stop)

    async def aclose(self) -> None:
        if self._remove_callback is not None:
            self._remove_callback()
        if self._credentials is not None:
            self._credentials.close()
        await self._lookups.aclose()
        await self._load_balancer.aclose()
        client, elb = self._client, self._elb_client
        self._blocking.close()
        if client is not None:
            client.close()
        if elb is not None:
            elb.close()

    # -- start-up --------------------------------------------------------------------

    def _check_region(self) -> None:
        """Without an endpoint override, the region must be one botocore knows (a typo
        would otherwise surface as an unresolvable host on every call)."""
        if self.config.endpoint:
            return
        session = self._boto3.session.Session()
        known: set[str] = set()
        for partition in session.get_available_partitions():
            known.update(session.get_available_regions("ec2", partition_name=partition))
        if known and self.config.region not in known:
            import difflib  # noqa: PLC0415 (only for this message)

            close = difflib.get_close_matches(self.config.region, sorted(known), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise AwsStartupError(
                f"`region` {self.config.region!r} is not an AWS region botocore knows{hint}; "
                "correct it, or for a region newer than this botocore set `endpoint` to its "
                "EC2 endpoint"
            )

    async def check(self) -> None:
        """One call that proves the credentials, the region and the VPC (see the module
        doc); an EC2 that does not answer is logged, not raised."""
        vpc = self.config.vpc_id
        try:
            if vpc:
                await self._call("DescribeVpcs", lambda c: c.describe_vpcs(VpcIds=[vpc]))
            else:
                await self._call(
                    "DescribeAvailabilityZones", lambda c: c.describe_availability_zones()
                )
        except AwsCredentialsRejectedError as exc:
            raise AwsStartupError(str(exc)) from None
        except AwsError as exc:
            if exc.code == "InvalidVpcID.NotFound":
                raise AwsStartupError(
                    f"the VPC {vpc} (`vpcId`) does not exist in region {self.config.region} "
                    f"(request ID {exc.request_id}): check `region` and `vpcId`"
                ) from None
            if exc.code in PERMISSION_CODES or exc.code.startswith("Invalid"):
                raise AwsStartupError(str(exc)) from None
            log.error("EC2 start-up check failed: %s. Nodes wait until it succeeds", exc)
            return
        except TransientCloudError as exc:
            log.error(
                "EC2 in %s does not answer at start-up: %s. Nodes are neither initialised "
                "nor deleted until it does",
                self.config.region,
                exc,
            )
            return
        log.info(
            "EC2 in %s answers with the credentials from %s%s",
            self.config.region,
            self.credentials_source(),
            f"; the cluster's VPC is {vpc}" if vpc else "",
        )

    # -- credentials -------------------------------------------------------------------

    @property
    def credentials(self) -> Credentials | None:
        """The credentials named in the cloud-config (``None``: the SDK's chain)."""
        return self._credentials

    @property
    def lookups(self) -> Lookups[Ec2Instance]:
        return self._lookups

    def credentials_source(self) -> str:
        """Where the credentials in use came from, for messages (never the value)."""
        if self._credentials is not None:
            secret = self._credentials.current()
            key = f", access key {masked(self._keys.access_key_id)}" if self._keys else ""
            return f"{self._credentials.source.describe()} (sha256 {secret.fingerprint}{key})"
        method = _CHAIN_METHODS.get(self._chain_method, self._chain_method or "nowhere yet")
        profile = f", profile {self.config.profile!r}" if self.config.profile else ""
        return f"the SDK's default chain ({method}{profile})"

    def _parse(self, secret: Secret) -> AwsKeys:
        assert self._credentials is not None
        where = self._credentials.source.describe()
        return parse_keys(secret, profile=self.config.profile, where=f"{where} (`credentials`)")

    def _new_session(self, keys: AwsKeys | None) -> Session:
        from botocore import exceptions as be  # noqa: PLC0415 (boto3 is optional)

        try:
            if keys is not None:
                session: Session = self._boto3.session.Session(
                    aws_access_key_id=keys.access_key_id,
                    aws_secret_access_key=keys.secret_access_key,
                    aws_session_token=keys.session_token,
                    region_name=self.config.region,
                )
            else:
                session = self._boto3.session.Session(
                    profile_name=self.config.profile or None, region_name=self.config.region
                )
        except be.ProfileNotFound:
            raise AwsStartupError(
                f"the AWS profile {self.config.profile!r} (`profile`) is not in the SDK's "
                "config or shared credentials files: correct it, or name the credentials "
                "with `credentials: {file: PATH}`"
            ) from None
        return session

    def _new_client(self, session: Session) -> EC2Client:
        client: EC2Client = self._new_service_client(session, "ec2", self.config.endpoint)
        return client

    def _new_service_client(self, session: Session, service: str, endpoint: str) -> Any:
        from botocore.config import Config  # noqa: PLC0415 (boto3 is optional)

        config = Config(
            retries={"total_max_attempts": 1},  # every attempt passes the daemon's boundary
            connect_timeout=self.config.request_timeout,
            read_timeout=self.config.request_timeout,
            max_pool_connections=self.config.max_concurrent_calls,
            user_agent_extra=f"kube-ccm/{__version__}",
        )
        client = session.client(  # type: ignore[call-overload]
            service, endpoint_url=endpoint or None, config=config
        )
        if self._keys is None:
            credentials = session.get_credentials()
            self._chain_method = credentials.method if credentials is not None else ""
        return client

    def _client_now(self) -> EC2Client:
        """The client (built on first use: loading EC2's model takes a moment). Blocking."""
        with self._client_lock:
            if self._client is None:
                self._client = self._new_client(self._session)
            return self._client

    def _elb_client_now(self) -> Any:
        """The ELBv2 client (built on first use, like the EC2 one). Blocking."""
        with self._client_lock:
            if self._elb_client is None:
                self._elb_client = self._new_service_client(
                    self._session, "elbv2", self.config.elb_endpoint
                )
            return self._elb_client

    async def _credentials_changed(self, secret: Secret) -> None:
        try:
            keys = self._parse(secret)
        except CloudConfigError as exc:
            log.error("%s; keeping the AWS credentials in use", exc)
            return
        session = self._new_session(keys)
        client = await asyncio.to_thread(self._new_client, session)
        with self._client_lock:
            old, self._client = self._client, client
            old_elb, self._elb_client = self._elb_client, None  # rebuilt on next use
            self._keys, self._session = keys, session
        self._lookups.forget()
        log.info("Using the new AWS credentials (access key %s)", masked(keys.access_key_id))
        if old is not None:
            old.close()
        if old_elb is not None:
            old_elb.close()

    # -- calls -------------------------------------------------------------------------

    async def _call(self, operation: str, fn: Callable[[EC2Client], T]) -> T:
        """``fn(client)`` on the pool, its failures mapped to the contract's errors."""
        try:
            return await self._blocking.run(lambda: fn(self._client_now()))
        except Exception as exc:
            raise self._error(operation, exc) from None

    async def elb_call(self, operation: str, fn: Callable[[Any], T]) -> T:
        """``fn(elbv2_client)`` on the pool, its failures mapped as EC2's are."""
        try:
            return await self._blocking.run(lambda: fn(self._elb_client_now()))
        except Exception as exc:
            raise self._error(operation, exc, service="ELBv2", iam="elasticloadbalancing") from None

    async def ec2_call(self, operation: str, fn: Callable[[EC2Client], T]) -> T:
        """``fn(ec2_client)`` on the pool (for the load-balancer and route code)."""
        return await self._call(operation, fn)

    async def _describe(self, kind: Kind, keys: list[str]) -> list[Ec2Instance]:
        filters: list[FilterTypeDef] = [{"Name": kind, "Values": keys}]

        def pages(client: EC2Client) -> list[Ec2Instance]:
            found: list[Ec2Instance] = []
            token = ""
            while True:
                if token:
                    page = client.describe_instances(
                        Filters=filters, MaxResults=1000, NextToken=token
                    )
                else:
                    page = client.describe_instances(Filters=filters, MaxResults=1000)
                for reservation in page.get("Reservations", []):
                    found += [Ec2Instance.from_api(i) for i in reservation.get("Instances", [])]
                token = page.get("NextToken", "")
                if not token:
                    return found

        found = await self._call("DescribeInstances", pages)
        log.debug("DescribeInstances by %s of %d keys: %d instances", kind, len(keys), len(found))
        return found

    def _error(
        self, operation: str, exc: Exception, *, service: str = "EC2", iam: str = "ec2"
    ) -> Exception:
        from botocore import exceptions as be  # noqa: PLC0415 (boto3 is optional)

        if isinstance(exc, be.ClientError):
            response: Mapping[str, Any] = exc.response
            error = response.get("Error", {})
            code, message = str(error.get("Code", "")), str(error.get("Message", ""))
            meta = response.get("ResponseMetadata", {})
            headers = {k.lower(): v for k, v in (meta.get("HTTPHeaders") or {}).items()}
            request_id = str(
                headers.get("x-amzn-requestid")
                or headers.get("x-amz-request-id")
                or meta.get("RequestId", "")
            )
            status = int(meta.get("HTTPStatusCode") or 0)
            detail = f"{service} {operation} failed: {code}: {message} (request ID {request_id})"
            if code in THROTTLING_CODES:
                return AwsThrottledError(
                    f"{detail}; throttled",
                    self._throttle_delay(headers),
                    code=code,
                    request_id=request_id,
                )
            if code in NOT_FOUND_CODES:
                return InstanceNotFoundError(detail)
            if code in CREDENTIALS_CODES:
                return AwsCredentialsRejectedError(
                    f"{detail}: AWS rejected the credentials from {self.credentials_source()}; "
                    "give valid ones (an active access key of this account, a clock within "
                    "5 minutes of AWS's)",
                    code=code,
                    request_id=request_id,
                )
            if code in PERMISSION_CODES:
                return AwsError(
                    f"{detail}: the credentials from {self.credentials_source()} may not call "
                    f"{iam}:{operation}; allow it in their IAM policy",
                    code=code,
                    request_id=request_id,
                )
            if status >= 500 or code in TRANSIENT_CODES:
                return TransientCloudError(detail)
            return AwsError(detail, code=code, request_id=request_id)
        if isinstance(exc, be.NoCredentialsError | be.PartialCredentialsError):
            return AwsCredentialsRejectedError(
                f"{service} {operation}: no AWS credentials ({exc}): the SDK's default chain found "
                "none (environment variables, shared credentials and config files, web "
                "identity, container and instance roles); set `credentials: {file: PATH}` "
                "in the cloud-config or give the daemon a role"
            )
        if isinstance(
            exc,
            be.EndpointConnectionError
            | be.ConnectionClosedError
            | be.ConnectTimeoutError
            | be.ReadTimeoutError,
        ):
            endpoint = self.config.endpoint if service == "EC2" else self.config.elb_endpoint
            where = endpoint or f"region {self.config.region}'s endpoint"
            return TransientCloudError(f"{service} {operation}: cannot reach {where}: {exc}")
        if isinstance(exc, be.BotoCoreError):
            return AwsError(f"{service} {operation} failed: {exc}")
        return exc

    def _throttle_delay(self, headers: Mapping[str, str]) -> float:
        """EC2's Retry-After when it sends one, else a jittered ``throttleDelay``."""
        try:
            suggested = float(headers.get("retry-after", ""))
        except ValueError:
            suggested = -1.0
        if suggested >= 0:
            return min(suggested, MAX_SUGGESTED_DELAY)
        return self.config.throttle_delay * random.uniform(0.5, 1.5)

    # -- which instance is a Node's ---------------------------------------------------

    async def find(self, node: Node) -> tuple[Ec2Instance | None, str]:
        """The Node's live instance, or ``None`` and why (terminated, unknown). Raises
        when it cannot tell, or the instance is not this cluster's."""
        name = node.metadata.name
        provider_id = node.spec.provider_id
        region = self.config.region
        if provider_id:
            try:
                zone, instance_id = parse_provider_id(provider_id)
            except ValueError as exc:
                raise AwsError(f"Node {name}: {exc}") from None
            if zone and not zone.startswith(region):
                raise AwsError(
                    f"Node {name}'s providerID {provider_id} is in zone {zone}, not in this "
                    f"cloud-config's region {region}: is `region` right? The Node is "
                    "neither initialised nor deleted"
                )
            found = await self._lookups.get("instance-id", instance_id)
            if not found:
                return None, f"EC2 instance {instance_id} does not exist in region {region}"
            instance = found[0]
            if instance.state == TERMINATED:
                return None, f"EC2 instance {instance_id} is terminated"
            elsewhere = self._not_ours(instance)
            if elsewhere:
                raise AwsError(
                    f"Node {name}'s instance {instance_id} {elsewhere}, so it is not this "
                    "cluster's: the Node is neither initialised nor deleted; correct the "
                    "cloud-config or the Node's providerID"
                )
            return instance, ""
        found = await self._lookups.get("private-dns-name", name.lower())
        alive = [i for i in found if i.state != TERMINATED]
        ours = [i for i in alive if not self._not_ours(i)]
        if len(ours) > 1:
            ids = ", ".join(i.id for i in ours)
            raise AwsError(
                f"Node {name}: several EC2 instances have this private DNS name ({ids}); "
                "set `vpcId` to the cluster's VPC, or the Node's providerID"
            )
        if ours:
            return ours[0], ""
        why = f"no EC2 instance in region {region}"
        if self.config.vpc_id:
            why += f", VPC {self.config.vpc_id}"
        if self.config.cluster_tag:
            why += f", tagged {self._tag_text()},"
        why += f" has the private DNS name {name} (the Node's name)"
        for other in alive:
            why += f"; {other.id} has it but {self._not_ours(other)}, so it is not this cluster's"
        return None, why

    def _not_ours(self, instance: Ec2Instance) -> str:
        """Why the instance is not this cluster's ("" when it is)."""
        vpc = self.config.vpc_id
        if vpc and instance.vpc_id != vpc:
            return f"is in VPC {instance.vpc_id or '(none)'}, not the cluster's {vpc} (`vpcId`)"
        tag = self.config.cluster_tag
        if tag:
            value = instance.tags.get(tag)
            wanted = self.config.cluster_tag_value
            if value is None or (wanted is not None and value != wanted):
                return f"lacks the cluster tag {self._tag_text()}"
        return ""

    def _tag_text(self) -> str:
        wanted = self.config.cluster_tag_value
        return (
            f"{self.config.cluster_tag}={wanted}" if wanted is not None else self.config.cluster_tag
        )


__all__ = [
    "AwsInstances",
    "AwsKeys",
    "AwsProvider",
    "parse_keys",
]
