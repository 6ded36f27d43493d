"""The aws provider's lower floor: the EC2 and ELBv2 error types and codes, the values
read from EC2 (:class:`Ec2Instance`, providerIDs), and :class:`AwsApi`, the calls the
load balancers (:mod:`~kube_ccm.providers.aws.loadbalancer`) and routes
(:mod:`~kube_ccm.providers.aws.routes`) make through the provider.

The provider (:mod:`~kube_ccm.providers.aws.provider`) builds on this module and on
those two; none of them imports the provider, so no import goes back up a floor.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from kube_ccm.api.objects import Node, NodeAddress
from kube_ccm.cloudprovider import CloudConfigError, CloudProviderError, TransientCloudError
from kube_ccm.providers.aws.config import AwsConfig
from kube_ccm.providers.aws.lookups import Lookups

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_ec2.type_defs import InstanceTypeDef

PROVIDER_NAME = "aws"
SHUTDOWN_STATES = frozenset({"stopped", "stopping"})
TERMINATED = "terminated"
THROTTLING_CODES = frozenset(
    {
        "RequestLimitExceeded",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequestsException",
        "EC2ThrottledException",
        "SlowDown",
    }
)
CREDENTIALS_CODES = frozenset(
    {
        "AuthFailure",
        "InvalidClientTokenId",
        "UnrecognizedClientException",
        "SignatureDoesNotMatch",
        "IncompleteSignature",
        "InvalidAccessKeyId",
        "ExpiredToken",
        "ExpiredTokenException",
        "RequestExpired",
    }
)
PERMISSION_CODES = frozenset({"UnauthorizedOperation", "AccessDenied", "AccessDeniedException"})
NOT_FOUND_CODES = frozenset({"InvalidInstanceID.NotFound"})
TRANSIENT_CODES = frozenset(
    {"InternalError", "InternalFailure", "ServiceUnavailable", "Unavailable", "RequestTimeout"}
)
MAX_SUGGESTED_DELAY = 30.0
_INSTANCE_ID = re.compile(r"^i-[0-9a-zA-Z]+$")
T = TypeVar("T")


# -- errors ----------------------------------------------------------------------------


class AwsError(CloudProviderError):
    """EC2 answered with an error (its code, message and request ID are in the text),
    or could not be asked; the controllers retry with backoff."""

    def __init__(self, message: str, *, code: str = "", request_id: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.request_id = request_id


class AwsCredentialsRejectedError(AwsError):
    """EC2 refused the credentials (or there are none); the message names their source."""


class AwsThrottledError(TransientCloudError):
    """EC2 throttled the call; retried by the daemon after ``retry_after`` seconds."""

    def __init__(self, message: str, retry_after: float, *, code: str, request_id: str) -> None:
        super().__init__(message, retry_after)
        self.code = code
        self.request_id = request_id


class AwsStartupError(CloudConfigError):
    """The start-up check failed in a way no retry fixes: credentials, region, VPC."""


class AwsUnavailableError(CloudConfigError):
    """boto3 is not installed."""


def load_boto3() -> Any:
    """The ``boto3`` module, or an error saying how to install it."""
    try:
        return importlib.import_module("boto3")
    except ImportError as exc:
        raise AwsUnavailableError(
            f"the aws provider needs boto3: install the extra `pip install 'kube-ccm[aws]'` ({exc})"
        ) from exc


# -- values ----------------------------------------------------------------------------


def parse_provider_id(provider_id: str) -> tuple[str, str]:
    """``(zone, instance ID)`` of ``aws:///<zone>/<id>`` (zone ``""`` for ``aws:////<id>``
    and ``aws:///<id>``); ValueError otherwise."""
    prefix = f"{PROVIDER_NAME}://"
    if not provider_id.startswith(prefix):
        raise ValueError(
            f"providerID {provider_id!r} is not an aws one (aws:///<zone>/<instance-id>)"
        )
    rest = provider_id.removeprefix(prefix)
    _host, _, path = rest.partition("/")
    tokens = path.strip("/").split("/") if path.strip("/") else []
    if len(tokens) == 1:
        zone, instance_id = "", tokens[0]
    elif len(tokens) == 2:
        zone, instance_id = tokens
    else:
        zone, instance_id = "", ""
    if not _INSTANCE_ID.match(instance_id):
        raise ValueError(
            f"providerID {provider_id!r} does not name an instance: write "
            "aws:///<zone>/<instance-id>, e.g. aws:///eu-west-1a/i-0123456789abcdef0"
        )
    return zone, instance_id


@dataclass(frozen=True, slots=True)
class Ec2Instance:
    """What kube-ccm reads of an EC2 instance."""

    id: str
    zone: str
    instance_type: str
    state: str
    vpc_id: str
    private_dns_name: str
    public_dns_name: str
    addresses: tuple[NodeAddress, ...]
    tags: Mapping[str, str] = field(default_factory=dict, hash=False)

    @property
    def provider_id(self) -> str:
        return f"{PROVIDER_NAME}:///{self.zone}/{self.id}"

    @classmethod
    def from_api(cls, data: InstanceTypeDef) -> Ec2Instance:
        return cls(
            id=data.get("InstanceId", ""),
            zone=data.get("Placement", {}).get("AvailabilityZone", ""),
            instance_type=str(data.get("InstanceType", "")),
            state=str(data.get("State", {}).get("Name", "")),
            vpc_id=data.get("VpcId", ""),
            private_dns_name=data.get("PrivateDnsName", "").lower(),
            public_dns_name=data.get("PublicDnsName", "").lower(),
            addresses=node_addresses(data),
            tags={t.get("Key", ""): t.get("Value", "") for t in data.get("Tags", [])},
        )


def node_addresses(data: InstanceTypeDef) -> tuple[NodeAddress, ...]:
    """The instance's addresses, in a stable order (see the module doc)."""
    internal: list[str] = []
    external: list[str] = []
    if data.get("PublicIpAddress"):
        external.append(data.get("PublicIpAddress", ""))
    interfaces = sorted(
        data.get("NetworkInterfaces", []),
        key=lambda i: (
            i.get("Attachment", {}).get("NetworkCardIndex", 0),
            i.get("Attachment", {}).get("DeviceIndex", 0),
        ),
    )
    for interface in interfaces:
        ips = sorted(interface.get("PrivateIpAddresses", []), key=lambda a: not a.get("Primary"))
        for ip in ips:
            address = ip.get("PrivateIpAddress", "")
            if address and address not in internal:
                internal.append(address)
            public = ip.get("Association", {}).get("PublicIp", "")
            if public and public not in external:
                external.append(public)
    if not internal and data.get("PrivateIpAddress"):
        internal.append(data.get("PrivateIpAddress", ""))
    found = [NodeAddress(type="InternalIP", address=a) for a in internal]
    found += [NodeAddress(type="ExternalIP", address=a) for a in external]
    if data.get("PrivateDnsName"):
        found.append(NodeAddress(type="InternalDNS", address=data.get("PrivateDnsName", "")))
    if data.get("PublicDnsName"):
        found.append(NodeAddress(type="ExternalDNS", address=data.get("PublicDnsName", "")))
    return tuple(found)


# -- what the capabilities call ---------------------------------------------------------


class AwsApi(Protocol):
    """What the load balancers and routes use of the provider: its configuration, its
    batched instance lookups, and the EC2 and ELBv2 calls, each through the provider's
    thread pool, credentials and error translation."""

    @property
    def config(self) -> AwsConfig: ...

    @property
    def lookups(self) -> Lookups[Ec2Instance]: ...

    def ec2_call(self, operation: str, fn: Callable[[EC2Client], T]) -> Awaitable[T]: ...

    def elb_call(self, operation: str, fn: Callable[[Any], T]) -> Awaitable[T]: ...

    def find(self, node: Node) -> Awaitable[tuple[Ec2Instance | None, str]]: ...


__all__ = [
    "CREDENTIALS_CODES",
    "MAX_SUGGESTED_DELAY",
    "NOT_FOUND_CODES",
    "PERMISSION_CODES",
    "PROVIDER_NAME",
    "SHUTDOWN_STATES",
    "TERMINATED",
    "THROTTLING_CODES",
    "TRANSIENT_CODES",
    "AwsApi",
    "AwsCredentialsRejectedError",
    "AwsError",
    "AwsStartupError",
    "AwsThrottledError",
    "AwsUnavailableError",
    "Ec2Instance",
    "load_boto3",
    "node_addresses",
    "parse_provider_id",
]
