"""The `--cloud-config` file of the mycloud provider::

    endpoint: https://api.mycloud.example   # the cloud's API; "fake:" = in memory,
                                           # "fake:/path/state.json" = a shared file
    region: region-1
    clusterTag: kubernetes                 # tag of the load balancers this cluster owns
    requestTimeout: 10s
    credentials: {file: /etc/mycloud/token}  # the API token (a mounted Secret), or
                                           # {env: MYCLOUD_TOKEN}; omitted: none

Every key is optional (the defaults are below); an unknown key is an error.
"""

from __future__ import annotations

import msgspec
from kube_ccm.cloudprovider import Duration, load_cloud_config


class Config(msgspec.Struct, forbid_unknown_fields=True, frozen=True, rename="camel"):
    endpoint: str = "fake:"
    region: str = "region-1"
    cluster_tag: str = "kubernetes"
    request_timeout: Duration = Duration(10.0)
    credentials: dict[str, str] | None = None


def load(data: bytes | None) -> Config:
    return load_cloud_config(data, Config, provider="mycloud", example="endpoint: https://...")
