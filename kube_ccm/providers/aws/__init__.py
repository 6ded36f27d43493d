"""The ``aws`` provider: Node metadata from EC2 instances, Network Load Balancers
(ELBv2) and pod routes in a VPC route table.

See :mod:`kube_ccm.providers.aws.provider` for what it reports,
:mod:`kube_ccm.providers.aws.loadbalancer` and :mod:`kube_ccm.providers.aws.routes`,
:mod:`kube_ccm.providers.aws.config` for its cloud-config and
:mod:`kube_ccm.providers.aws.lookups` for how lookups are batched. Needs boto3:
``pip install 'kube-ccm[aws]'``.
"""

from __future__ import annotations

from kube_ccm.providers.aws.api import (
    PROVIDER_NAME,
    AwsCredentialsRejectedError,
    AwsError,
    AwsStartupError,
    AwsThrottledError,
    AwsUnavailableError,
    Ec2Instance,
    parse_provider_id,
)
from kube_ccm.providers.aws.config import AwsConfig, AwsConfigError, load_config
from kube_ccm.providers.aws.provider import AwsProvider


def factory(config: bytes | None) -> AwsProvider:
    """The ``aws`` entry point: parse the cloud-config, load the credentials it names
    and check the region; EC2 is first called in ``initialize``."""
    return AwsProvider(load_config(config))


__all__ = [
    "PROVIDER_NAME",
    "AwsConfig",
    "AwsConfigError",
    "AwsCredentialsRejectedError",
    "AwsError",
    "AwsProvider",
    "AwsStartupError",
    "AwsThrottledError",
    "AwsUnavailableError",
    "Ec2Instance",
    "factory",
    "load_config",
    "parse_provider_id",
]
