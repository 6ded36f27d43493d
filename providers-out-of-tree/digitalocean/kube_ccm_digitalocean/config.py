"""The ``--cloud-config`` file of the digitalocean provider::

    region: nyc3                          # the cluster's region (checked at start-up)
    credentials: {env: DO_ACCESS_TOKEN}   # the API token: {env: NAME} (the default, as
                                          # the Go CCM's DO_ACCESS_TOKEN) or {file: PATH}
    endpoint: https://api.digitalocean.com   # the Go CCM's DO_OVERRIDE_URL
    clusterID: ""                         # tags the load balancers k8s:<clusterID>
    vpcID: ""                             # the load balancers' VPC (DO_CLUSTER_VPC_ID)
    defaultLoadBalancerType: REGIONAL     # or REGIONAL_NETWORK (DEFAULT_LB_TYPE)
    requestTimeout: 10s                   # one HTTP request to the API
    dropletCacheTTL: 30s                  # how long one droplet list answers lookups
    activeRetry: 15s                      # a new load balancer is looked at again after

Every key but ``region`` is optional; an unknown key is an error naming the known ones.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

import msgspec
from kube_ccm.cloudprovider import Duration, InvalidCloudConfigError, load_cloud_config

__all__ = ["EXAMPLE", "LB_TYPES", "Config", "load"]

EXAMPLE = "region: nyc3\ncredentials: {env: DO_ACCESS_TOKEN}"
LB_TYPES = ("REGIONAL", "REGIONAL_NETWORK")
_REGION = re.compile(r"^[a-z]{3}[0-9]$")
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


class Config(msgspec.Struct, forbid_unknown_fields=True, frozen=True, rename="camel"):
    region: str
    credentials: Any = None
    endpoint: str = "https://api.digitalocean.com"
    cluster_id: str = msgspec.field(default="", name="clusterID")
    vpc_id: str = msgspec.field(default="", name="vpcID")
    default_load_balancer_type: str = "REGIONAL"
    request_timeout: Duration = Duration(10.0)
    droplet_cache_ttl: Duration = msgspec.field(default=Duration(30.0), name="dropletCacheTTL")
    active_retry: Duration = Duration(15.0)

    @property
    def credentials_config(self) -> dict[str, str]:
        """Where the token is; DO_ACCESS_TOKEN, as the Go CCM, when not said."""
        if self.credentials is None:
            return {"env": "DO_ACCESS_TOKEN"}
        return self.credentials  # type: ignore[no-any-return]


def load(data: bytes | None) -> Config:
    config = load_cloud_config(data, Config, provider="digitalocean", example=EXAMPLE)
    if not _REGION.match(config.region):
        raise InvalidCloudConfigError(
            f"`region` {config.region!r} is not a DigitalOcean region slug: write e.g. "
            "`region: nyc3`"
        )
    url = urlsplit(config.endpoint)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise InvalidCloudConfigError(
            f"`endpoint` {config.endpoint!r} is not an http(s) URL: write e.g. "
            "`endpoint: https://api.digitalocean.com`"
        )
    if config.vpc_id and not _UUID.match(config.vpc_id):
        raise InvalidCloudConfigError(f"`vpcID` {config.vpc_id!r} is not a VPC UUID")
    if config.default_load_balancer_type not in LB_TYPES:
        raise InvalidCloudConfigError(
            f"`defaultLoadBalancerType` {config.default_load_balancer_type!r}: use one of "
            f"{', '.join(LB_TYPES)}"
        )
    if not 0 < config.request_timeout.seconds <= 60:
        raise InvalidCloudConfigError("`requestTimeout` must be above 0s and at most 60s")
    return config
