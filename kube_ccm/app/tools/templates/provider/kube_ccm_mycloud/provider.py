"""The mycloud provider: instances (InstancesV2) and load balancers."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from kube_ccm.api.objects import LoadBalancerIngress, LoadBalancerStatus, Service
from kube_ccm.cloudprovider import (
    ClientBuilder,
    CloudConfigError,
    CloudProvider,
    Credentials,
    CredentialsSource,
    InstanceMetadata,
    InstanceNotFoundError,
    InstancesV2,
    LoadBalancer,
    Node,
    NodeAddress,
    default_load_balancer_name,
)

from kube_ccm_mycloud import config as config_module
from kube_ccm_mycloud.client import CloudClient, NotFoundError, UnauthorizedError
from kube_ccm_mycloud.fake import FakeCloud, FakeInstance

PROVIDER_NAME = "mycloud"

log = logging.getLogger(__name__)


class _Instances(InstancesV2):
    authoritative = True
    """Every answer is the cloud's API, a Node read for its name and providerID only: the
    kubelet serving certificate approver (``servingcert``) may rest on it."""

    def __init__(self, client: CloudClient) -> None:
        self._client = client

    async def instance_belongs_to(self, node_name: str, metadata: InstanceMetadata) -> bool:
        """The instance's own name, as the cloud keeps it, is the Node's: a providerID
        on a Node is no proof (the node may have written it)."""
        try:
            found = await self._client.instance_by_id(metadata.provider_id.rsplit("/", 1)[-1])
        except NotFoundError:
            return False
        return found.name == node_name

    async def _find(self, node: Node) -> FakeInstance | None:
        provider_id = node.spec.provider_id
        try:
            if provider_id:
                return await self._client.instance_by_id(provider_id.rsplit("/", 1)[-1])
            return await self._client.instance_by_name(node.metadata.name)
        except NotFoundError:
            return None  # only "not found" means gone; any other error propagates

    async def instance_exists(self, node: Node) -> bool:
        return await self._find(node) is not None

    async def instance_shutdown(self, node: Node) -> bool:
        found = await self._find(node)
        return found is not None and found.state == "stopped"

    async def instance_metadata(self, node: Node) -> InstanceMetadata | None:
        found = await self._find(node)
        if found is None:
            # Raising keeps the Node tainted and retries it with backoff, so a Node
            # registered before its instance is initialised once the instance appears
            # (returning None would skip the Node until it changes).
            raise InstanceNotFoundError(
                f"instance not found: node {node.metadata.name!r} (providerID "
                f"{node.spec.provider_id or 'unset'}) is not a running or stopped instance"
            )
        return InstanceMetadata(
            provider_id=f"{PROVIDER_NAME}://{found.zone}/{found.id}",
            instance_type=found.type,
            node_addresses=(NodeAddress(type="InternalIP", address=found.private_ip),),
            zone=found.zone,
            region=self._client.config.region,
        )


class _LoadBalancers(LoadBalancer):
    def __init__(self, client: CloudClient) -> None:
        self._client = client

    def get_load_balancer_name(self, cluster_name: str, service: Service) -> str:
        return default_load_balancer_name(service)

    async def get_load_balancer(
        self, cluster_name: str, service: Service
    ) -> LoadBalancerStatus | None:
        found = await self._client.load_balancer(self.get_load_balancer_name(cluster_name, service))
        return None if found is None else _status(found.address)

    async def ensure_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> LoadBalancerStatus:
        balancer = await self._client.put_load_balancer(
            self.get_load_balancer_name(cluster_name, service),
            [p.node_port for p in service.spec.ports],
            _targets(nodes),
        )
        return _status(balancer.address)

    async def update_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> None:
        await self.ensure_load_balancer(cluster_name, service, nodes)

    async def ensure_load_balancer_deleted(self, cluster_name: str, service: Service) -> None:
        await self._client.delete_load_balancer(self.get_load_balancer_name(cluster_name, service))


def _targets(nodes: Sequence[Node]) -> list[str]:
    # Nodes without a providerID yet are left out: they join once initialised.
    return sorted(n.spec.provider_id for n in nodes if n.spec.provider_id)


def _status(address: str) -> LoadBalancerStatus:
    return LoadBalancerStatus(ingress=(LoadBalancerIngress(ip=address),))


class MycloudCloud(CloudProvider):
    def __init__(self, client: CloudClient) -> None:
        self.client = client
        self._instances = _Instances(client)
        self._load_balancers = _LoadBalancers(client)

    def provider_name(self) -> str:
        return PROVIDER_NAME

    async def initialize(self, client_builder: ClientBuilder, stop: asyncio.Event) -> None:
        """Start-up: one read-only call proves the credentials. A refused token stops the
        daemon here, saying where it came from, instead of a daemon logging 401s; a
        cloud that does not answer only delays the work (the controllers retry)."""
        try:
            await self.client.check_credentials()
        except UnauthorizedError as exc:
            raise CloudConfigError(
                f"the mycloud cloud refused the credentials from "
                f"{self.client.credentials_source()}: {exc}; correct them (or the Secret "
                "they come from)"
            ) from None
        except Exception as exc:
            log.error("the mycloud cloud does not answer at start-up: %s", exc)
        else:
            log.info(
                "the mycloud cloud accepts the credentials from %s",
                self.client.credentials_source(),
            )
        if self.client.credentials is not None:
            self.client.credentials.start(stop)  # follow a rotated Secret

    async def aclose(self) -> None:
        if self.client.credentials is not None:
            self.client.credentials.close()

    def has_cluster_id(self) -> bool:
        return True  # load balancers are tagged with clusterTag

    def instances_v2(self) -> InstancesV2 | None:
        return self._instances

    def load_balancer(self) -> LoadBalancer | None:
        return self._load_balancers


def build(config: config_module.Config, fake: FakeCloud | None = None) -> MycloudCloud:
    """The provider for a parsed cloud-config; the credentials it names are read now,
    so a missing file or unset variable stops the daemon at once."""
    credentials = None
    if config.credentials is not None:
        credentials = Credentials(CredentialsSource.from_config(config.credentials))
        credentials.load()
    return MycloudCloud(CloudClient(config, fake, credentials))


def factory(data: bytes | None) -> MycloudCloud:
    """The entry point: parse the cloud-config; no network here (use `initialize`)."""
    return build(config_module.load(data))
