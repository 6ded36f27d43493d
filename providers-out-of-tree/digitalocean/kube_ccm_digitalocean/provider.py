"""The digitalocean provider: droplets (InstancesV2) and load balancers, on pydo."""

from __future__ import annotations

import asyncio
import logging

from kube_ccm.cloudprovider import (
    ClientBuilder,
    CloudConfigError,
    CloudProvider,
    Credentials,
    CredentialsSource,
    InstancesV2,
    LoadBalancer,
)

from kube_ccm_digitalocean import config as config_module
from kube_ccm_digitalocean.annotations import Settings
from kube_ccm_digitalocean.client import (
    DigitalOceanClient,
    DigitalOceanForbiddenError,
    DigitalOceanUnauthorizedError,
)
from kube_ccm_digitalocean.instances import DropletCache, Droplets
from kube_ccm_digitalocean.loadbalancers import LoadBalancers

__all__ = ["PROVIDER_NAME", "DigitalOceanCloud", "build", "factory"]

PROVIDER_NAME = "digitalocean"
log = logging.getLogger(__name__)


class DigitalOceanCloud(CloudProvider):
    def __init__(self, config: config_module.Config, credentials: Credentials) -> None:
        self.config = config
        self.credentials = credentials
        self.client = DigitalOceanClient(
            config.endpoint, credentials, config.request_timeout.seconds
        )
        self.droplet_cache = DropletCache(self.client, config.droplet_cache_ttl.seconds)
        self._instances = Droplets(self.client, self.droplet_cache)
        self._load_balancers = LoadBalancers(
            self.client,
            Settings(
                region=config.region,
                vpc_id=config.vpc_id,
                cluster_id=config.cluster_id,
                default_type=config.default_load_balancer_type,
            ),
            config.active_retry.seconds,
        )

    def provider_name(self) -> str:
        return PROVIDER_NAME

    def has_cluster_id(self) -> bool:
        return True  # load balancers are named after their Service's UID, as the Go CCM

    def instances_v2(self) -> InstancesV2 | None:
        return self._instances

    def load_balancer(self) -> LoadBalancer | None:
        return self._load_balancers

    async def initialize(self, client_builder: ClientBuilder, stop: asyncio.Event) -> None:
        """One read-only call, the regions, proves the token and the region (as the Go
        CCM checks ``REGION``): a refused token or an unknown region stops the daemon
        here; an API that does not answer only delays the work."""
        try:
            regions = await self.client.regions()
        except DigitalOceanUnauthorizedError as exc:
            raise CloudConfigError(f"{exc}; correct it (or the Secret it comes from)") from None
        except DigitalOceanForbiddenError as exc:
            raise CloudConfigError(
                f"the token from {self.client.credentials_source()} may not list regions: "
                f"{exc}; give it the scopes regions:read, droplet:read, certificate:read "
                "and load_balancer:read/create/update/delete"
            ) from None
        except Exception as exc:
            log.error("DigitalOcean does not answer at start-up: %s", exc)
        else:
            slugs = sorted(str(r.get("slug")) for r in regions)
            if self.config.region not in slugs:
                raise CloudConfigError(
                    f"`region` {self.config.region!r} is not a DigitalOcean region; the API "
                    f"knows {', '.join(slugs)}"
                )
            log.info(
                "DigitalOcean accepts the token from %s; region %s",
                self.client.credentials_source(),
                self.config.region,
            )
            try:
                await self._instances.team_check.record()
            except Exception as exc:
                log.warning("DigitalOcean: the token's team is unknown at start-up: %s", exc)
        self.credentials.start(stop)  # follow a rotated Secret

    async def aclose(self) -> None:
        self.credentials.close()
        await self.client.close()


def build(config: config_module.Config) -> DigitalOceanCloud:
    """The provider for a parsed cloud-config; the token is read now, so a missing file
    or unset variable stops the daemon at once."""
    credentials = Credentials(CredentialsSource.from_config(config.credentials_config))
    credentials.load()
    return DigitalOceanCloud(config, credentials)


def factory(data: bytes | None) -> DigitalOceanCloud:
    """The entry point: parse the cloud-config; no network here (see ``initialize``)."""
    return build(config_module.load(data))
