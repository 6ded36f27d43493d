"""The ``aws`` cloud-config (``--cloud-config``)::

    region: eu-west-1                  # the cluster's region (required)
    vpcId: vpc-0a1b2c3d4e5f67890       # the cluster's VPC: instances in other VPCs are
                                       # not this cluster's (recommended)
    clusterName: prod                  # the cluster ID: its instances carry the tag
                                       # kubernetes.io/cluster/prod (owned or shared)
    clusterTag: ""                     # another tag key instead, whose value must be
                                       # clusterName (the legacy KubernetesCluster=prod)
    endpoint: ""                       # EC2 endpoint override: a VPC interface endpoint,
                                       # a private region's, moto's (http://127.0.0.1:5000)
    elbEndpoint: ""                    # ELBv2 endpoint override (the same choices)
    stsEndpoint: ""                    # STS endpoint override, only to name the account
                                       # of the credentials in an error message
    subnetIds: []                      # the subnets of load balancers; empty: the VPC's
                                       # subnets tagged kubernetes.io/cluster/<clusterName>
    routeTableId: ""                   # the route table of pod routes; empty: the VPC's
                                       # route table tagged kubernetes.io/cluster/<clusterName>
    credentials: {file: /etc/kube-ccm/aws/credentials}   # or {env: VARIABLE}; omitted:
                                       # the SDK's default chain (IRSA, instance role, ...)
    profile: ""                        # the section of a shared-credentials file given
                                       # in `credentials`, or the SDK chain's profile
    maxConcurrentCalls: 8              # threads for boto3's blocking calls
    batchWindow: 5ms                   # lookups arriving within it share one
                                       # DescribeInstances
    cacheTTL: 2s                       # answers of a DescribeInstances are reused this
                                       # long (a wave of lookups; 0: never)
    requestTimeout: 10s                # connect and read timeout of one EC2 request
    throttleDelay: 1s                  # after throttling, retry after a jittered
                                       # 0.5-1.5 times this (unless EC2 suggests a delay)

``credentials`` names a file or an environment variable (the documented mechanism of
:mod:`kube_ccm.cloudprovider.credentials`: a mounted Secret, reloaded when it changes)
holding either a shared-credentials file (``[default]`` with ``aws_access_key_id``,
``aws_secret_access_key`` and optionally ``aws_session_token``) or the pair
``ACCESS_KEY_ID:SECRET_ACCESS_KEY``.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

import msgspec

from kube_ccm.cloudprovider import CredentialsError, CredentialsSource
from kube_ccm.cloudprovider.config import Duration, InvalidCloudConfigError, load_cloud_config

__all__ = ["CLUSTER_TAG_PREFIX", "AwsConfig", "AwsConfigError", "load_config"]

PROVIDER = "aws"
CLUSTER_TAG_PREFIX = "kubernetes.io/cluster/"
EXAMPLE = "region: eu-west-1, vpcId: vpc-0a1b2c3d4e5f67890, clusterName: prod"
REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d+$")
VPC_ID = re.compile(r"^vpc-[0-9a-f]{8,17}$")
SUBNET_ID = re.compile(r"^subnet-[0-9a-f]{8,17}$")
ROUTE_TABLE_ID = re.compile(r"^rtb-[0-9a-f]{8,17}$")
_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


class AwsConfigError(InvalidCloudConfigError):
    """The aws cloud-config is invalid; one line naming the key and what to write."""


class _Raw(msgspec.Struct, forbid_unknown_fields=True, frozen=True, rename="camel"):
    region: str
    vpc_id: str = ""
    cluster_name: str = ""
    cluster_tag: str = ""
    endpoint: str = ""
    elb_endpoint: str = ""
    sts_endpoint: str = ""
    subnet_ids: list[str] = msgspec.field(default_factory=list)
    route_table_id: str = ""
    credentials: Any = None
    profile: str = ""
    max_concurrent_calls: int = 8
    batch_window: Duration = Duration(0.005)
    cache_ttl: Duration = msgspec.field(default=Duration(2.0), name="cacheTTL")
    request_timeout: Duration = Duration(10.0)
    throttle_delay: Duration = Duration(1.0)


class AwsConfig(msgspec.Struct, frozen=True, kw_only=True):
    region: str
    vpc_id: str = ""
    cluster_name: str = ""
    cluster_tag: str = ""
    """The tag key that marks this cluster's instances ("" without ``clusterName``)."""
    cluster_tag_value: str | None = None
    """The value that tag must have; ``None``: any (``owned``, ``shared``)."""
    endpoint: str = ""
    elb_endpoint: str = ""
    sts_endpoint: str = ""
    subnet_ids: tuple[str, ...] = ()
    route_table_id: str = ""
    credentials: CredentialsSource | None = None
    profile: str = ""
    max_concurrent_calls: int = 8
    batch_window: float = 0.005
    cache_ttl: float = 2.0
    request_timeout: float = 10.0
    throttle_delay: float = 1.0


def load_config(data: bytes | str | None) -> AwsConfig:
    """Parse and check the cloud-config; :class:`AwsConfigError` says what to fix."""
    try:
        raw = load_cloud_config(data, _Raw, provider=PROVIDER, example=EXAMPLE)
    except InvalidCloudConfigError as exc:
        raise AwsConfigError(f"{exc}; the keys are in docs/aws.md") from None
    region = raw.region.strip()
    if not REGION.match(region):
        raise AwsConfigError(
            f"`region` {raw.region!r} is not an AWS region name: write e.g. `region: eu-west-1`"
        )
    if raw.vpc_id and not VPC_ID.match(raw.vpc_id):
        raise AwsConfigError(
            f"`vpcId` {raw.vpc_id!r} is not a VPC ID: write e.g. `vpcId: vpc-0a1b2c3d4e5f67890`"
        )
    if raw.cluster_name and not _LABEL_VALUE.match(raw.cluster_name):
        raise AwsConfigError(
            f"`clusterName` {raw.cluster_name!r} must be up to 63 letters, digits, '-', '_' "
            "or '.', starting and ending with a letter or digit"
        )
    if raw.cluster_tag and not raw.cluster_name:
        raise AwsConfigError(
            "`clusterTag` needs `clusterName`: the tag's value must be the cluster name"
        )
    for key, url, service in (
        ("endpoint", raw.endpoint, "ec2"),
        ("elbEndpoint", raw.elb_endpoint, "elasticloadbalancing"),
        ("stsEndpoint", raw.sts_endpoint, "sts"),
    ):
        if url:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise AwsConfigError(
                    f"`{key}` {url!r} is not an http(s) URL: write e.g. "
                    f"`{key}: https://{service}.{region}.amazonaws.com`"
                )
    for subnet in raw.subnet_ids:
        if not SUBNET_ID.match(subnet):
            raise AwsConfigError(
                f"`subnetIds` has {subnet!r}, not a subnet ID: write e.g. "
                "`subnetIds: [subnet-0a1b2c3d4e5f67890]`"
            )
    if raw.route_table_id and not ROUTE_TABLE_ID.match(raw.route_table_id):
        raise AwsConfigError(
            f"`routeTableId` {raw.route_table_id!r} is not a route table ID: write e.g. "
            "`routeTableId: rtb-0a1b2c3d4e5f67890`"
        )
    if raw.max_concurrent_calls < 1:
        raise AwsConfigError("`maxConcurrentCalls` must be 1 or more")
    if raw.request_timeout.seconds <= 0:
        raise AwsConfigError("`requestTimeout` must be longer than 0s, e.g. 10s")
    if raw.batch_window.seconds > 1:
        raise AwsConfigError(
            "`batchWindow` must be at most 1s: every lookup waits that long (e.g. 5ms)"
        )
    credentials = None
    if raw.credentials is not None:
        try:
            credentials = CredentialsSource.from_config(raw.credentials)
        except CredentialsError as exc:
            raise AwsConfigError(str(exc)) from None
    if raw.cluster_tag:
        tag, tag_value = raw.cluster_tag, raw.cluster_name
    elif raw.cluster_name:
        tag, tag_value = f"{CLUSTER_TAG_PREFIX}{raw.cluster_name}", None
    else:
        tag, tag_value = "", None
    return AwsConfig(
        region=region,
        vpc_id=raw.vpc_id,
        cluster_name=raw.cluster_name,
        cluster_tag=tag,
        cluster_tag_value=tag_value,
        endpoint=raw.endpoint.rstrip("/"),
        elb_endpoint=raw.elb_endpoint.rstrip("/"),
        sts_endpoint=raw.sts_endpoint.rstrip("/"),
        subnet_ids=tuple(raw.subnet_ids),
        route_table_id=raw.route_table_id,
        credentials=credentials,
        profile=raw.profile,
        max_concurrent_calls=raw.max_concurrent_calls,
        batch_window=raw.batch_window.seconds,
        cache_ttl=raw.cache_ttl.seconds,
        request_timeout=raw.request_timeout.seconds,
        throttle_delay=raw.throttle_delay.seconds,
    )
