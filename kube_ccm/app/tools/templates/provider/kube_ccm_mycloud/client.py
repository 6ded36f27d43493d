"""The seam between the provider and the cloud: replace the bodies with your SDK's
calls (blocking SDKs: run them with kube_ccm.cloudprovider.BlockingCalls)."""

from __future__ import annotations

from pathlib import Path

from kube_ccm.cloudprovider import CloudProviderError, Credentials

from kube_ccm_mycloud.config import Config
from kube_ccm_mycloud.fake import SHARED, FakeCloud, FakeInstance, FakeLoadBalancer, FakeState


class NotFoundError(CloudProviderError):
    """The cloud has no such object."""


class UnauthorizedError(CloudProviderError):
    """The cloud refused the credentials (HTTP 401/403)."""


class CloudClient:
    def __init__(
        self,
        config: Config,
        fake: FakeCloud | None = None,
        credentials: Credentials | None = None,
    ) -> None:
        if not config.endpoint.startswith("fake:"):
            raise CloudProviderError(
                f"endpoint {config.endpoint!r}: this provider only knows the fake cloud yet "
                "(put your SDK in client.py)"
            )
        path = config.endpoint.removeprefix("fake:")
        self._cloud = fake or (FakeCloud(Path(path)) if path else SHARED)
        self.config = config
        self.credentials = credentials

    def credentials_source(self) -> str:
        """Where the token comes from, for messages (never the token itself)."""
        if self.credentials is None:
            return "nowhere (`credentials` is not set in the cloud-config)"
        return f"the {self.credentials.source.describe()}"

    def _up(self, state: FakeState) -> FakeState:
        if state.outage:
            raise CloudProviderError("the cloud's API is unavailable (503)")
        # Your SDK sends the token with every call: self.credentials.current().reveal()
        # (current() follows a rotated Secret).
        token = self.credentials.current().reveal() if self.credentials else ""
        if state.token and token != state.token:
            raise UnauthorizedError("401 Unauthorized: the API token was refused")
        return state

    async def check_credentials(self) -> None:
        """One cheap read-only call that needs valid credentials (your cloud's
        "who am I" or a list of regions)."""
        with self._cloud.state() as state:
            self._up(state)

    async def instance_by_id(self, instance_id: str) -> FakeInstance:
        with self._cloud.state() as state:
            found = self._up(state).instances.get(instance_id)
        if found is None or found.state == "terminated":
            raise NotFoundError(f"instance {instance_id} not found")
        return found

    async def instance_by_name(self, name: str) -> FakeInstance:
        with self._cloud.state() as state:
            for instance in self._up(state).instances.values():
                if instance.name == name and instance.state != "terminated":
                    return instance
        raise NotFoundError(f"no instance named {name}")

    async def load_balancer(self, name: str) -> FakeLoadBalancer | None:
        with self._cloud.state() as state:
            found = self._up(state).load_balancers.get(name)
        return found if found is not None and found.tag == self.config.cluster_tag else None

    async def put_load_balancer(
        self, name: str, ports: list[int], targets: list[str]
    ) -> FakeLoadBalancer:
        with self._cloud.state() as state:
            balancers = self._up(state).load_balancers
            existing = balancers.get(name)
            if existing is not None and existing.tag != self.config.cluster_tag:
                raise CloudProviderError(f"load balancer {name} belongs to another cluster")
            address = existing.address if existing else _free_address(balancers)
            balancer = FakeLoadBalancer(name, self.config.cluster_tag, ports, targets, address)
            balancers[name] = balancer
            return balancer

    async def delete_load_balancer(self, name: str) -> None:
        with self._cloud.state() as state:
            balancers = self._up(state).load_balancers
            existing = balancers.get(name)
            if existing is not None and existing.tag == self.config.cluster_tag:
                del balancers[name]


def _free_address(balancers: dict[str, FakeLoadBalancer]) -> str:
    """The lowest address of 192.0.2.0/24 no load balancer holds (a freed one is
    reused; two load balancers never share one)."""
    used = {balancer.address for balancer in balancers.values()}
    for host in range(1, 255):
        if f"192.0.2.{host}" not in used:
            return f"192.0.2.{host}"
    raise CloudProviderError("the fake cloud has no free address left")
