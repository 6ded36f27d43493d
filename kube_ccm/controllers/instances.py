"""One view of a provider's instances, whichever interface it implements.

The cloud node controller and the cloud node lifecycle controller ask the same
four questions about a Node's instance: its metadata, its current addresses,
whether it exists and whether it is shut down. A provider answers them through
:class:`~kube_ccm.cloudprovider.InstancesV2` (preferred) or the older
:class:`~kube_ccm.cloudprovider.Instances` (V1). :class:`CloudInstances` hides
that choice, with upstream's fallbacks (``getInstanceMetadata``,
``getInstanceNodeAddresses``, ``ensureNodeExistsByProviderID``,
``shutdownInCloudProvider``):

* **metadata (V1)** is assembled from the providerID (the Node's, else
  ``<provider>://<InstanceID>``; ``NotImplemented`` → empty), the addresses
  (``NodeAddressesByProviderID``, else ``NodeAddresses``), the instance type
  (``InstanceTypeByProviderID``, else ``InstanceType``) and, when the provider has
  Zones, the zone and region (``GetZoneByProviderID``, else ``GetZoneByNodeName``);
* **exists / shut down (V1)** need a providerID: the Node's, else the V1 helper;
  an instance the helper does not find does not exist (and is not shut down), and
  ``NotImplemented`` from ``InstanceShutdownByProviderID`` means "not shut down".

The provider given is the guarded one (:func:`~kube_ccm.controllers.cloudcalls.guard`):
each call has the daemon's deadline and is metered under the contract method's
upstream name (``InstanceMetadata``, ``InstanceExistsByProviderID``, ...), so metrics
and error messages name the call that failed; nothing here wraps a call.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from kube_ccm.api.objects import Node, NodeAddress, NodeSpec, ObjectMeta
from kube_ccm.cloudprovider import (
    CloudProvider,
    InstanceMetadata,
    InstanceNotFoundError,
    Instances,
    InstancesV2,
    NotImplementedByProviderError,
    get_instance_provider_id,
)
from kube_ccm.controllers.errors import CloudCallError

log = logging.getLogger(__name__)

R = TypeVar("R")


class CloudInstances:
    """A provider's instances behind one interface (V2 when offered, else V1).

    Raises :class:`ValueError` ``cloud provider does not support instances`` when
    the provider offers neither: the controllers using it cannot run.
    """

    def __init__(self, cloud: CloudProvider) -> None:
        self._v2: InstancesV2 | None = cloud.instances_v2()
        self._v1: Instances | None = cloud.instances()
        if self._v2 is None and self._v1 is None:
            raise ValueError("cloud provider does not support instances")
        self._cloud = cloud

    # -- node controller --------------------------------------------------------

    async def instance_metadata(self, node: Node) -> InstanceMetadata | None:
        """What initialising ``node`` needs: providerID, addresses, type, zone, region.

        ``None`` (V2 only) means the provider has nothing to say yet: skip the node.
        With V2, a providerID empty in the answer and on the Node is an error
        (``cloud provider does not set node provider ID for node <name>``); with V1
        an empty providerID is allowed (the provider does not implement InstanceID).
        """
        if self._v2 is not None:
            metadata = await self._v2.instance_metadata(node)
            if metadata is not None and not metadata.provider_id and not node.spec.provider_id:
                raise ValueError(
                    f"cloud provider does not set node provider ID for node {node.metadata.name}"
                )
            return metadata
        return await self._instance_metadata_v1(node, self._require_v1())

    async def node_addresses(self, node: Node) -> tuple[NodeAddress, ...] | None:
        """The instance's current addresses (the periodic address refresh): one cloud
        call when the first answers. ``None`` (V2 answered no metadata) → skip the node
        (upstream dereferences it and crashes)."""
        if self._v2 is not None:
            metadata = await self._v2.instance_metadata(node)
            return None if metadata is None else metadata.node_addresses
        return await self._addresses_v1(self._require_v1(), node.spec.provider_id, node)

    # -- kubelet serving certificate approver -----------------------------------

    @property
    def authoritative(self) -> bool:
        """Whether the provider's instance answers are the cloud's own record
        (:attr:`~kube_ccm.cloudprovider.InstancesV2.authoritative`)."""
        chosen = self._v2 if self._v2 is not None else self._require_v1()
        return bool(chosen.authoritative)

    async def cloud_metadata(
        self, name: str, uid: str, provider_id: str
    ) -> InstanceMetadata | None:
        """The instance's providerID and addresses as the cloud alone tells them: the
        provider is handed a Node with nothing but ``name``, ``uid`` and
        ``provider_id``, so none of the node's own labels, annotations or status can
        reach the answer. ``None``: V2 answered no metadata, or (V1) no instance of that
        name. V1 gives the providerID (the given one, else ``<provider>://<InstanceID>``;
        ``NotImplemented`` leaves it empty) and the addresses by that providerID, else by
        name, as the node controller reads them (both are the Node name's instance once
        ``instance_belongs_to`` has said the providerID's is)."""
        bare = Node(metadata=ObjectMeta(name=name, uid=uid), spec=NodeSpec(provider_id=provider_id))
        if self._v2 is not None:
            metadata = await self._v2.instance_metadata(bare)
            if metadata is not None and not metadata.provider_id and provider_id:
                # The contract lets V2 leave it empty when the Node has one: the
                # instance it answered for is the one that providerID names.
                metadata = dataclasses.replace(metadata, provider_id=provider_id)
            return metadata
        instances = self._require_v1()
        if not provider_id:
            try:
                provider_id = await get_instance_provider_id(self._cloud, name)
            except InstanceNotFoundError:
                return None
            except NotImplementedByProviderError:
                return InstanceMetadata()
        addresses = await _with_fallback(
            "addresses",
            lambda: instances.node_addresses_by_provider_id(provider_id),
            lambda: instances.node_addresses(name),
        )
        return InstanceMetadata(provider_id=provider_id, node_addresses=tuple(addresses))

    async def instance_belongs_to(self, node_name: str, metadata: InstanceMetadata) -> bool:
        """The provider's own word on whether the instance is the Node's
        (:meth:`~kube_ccm.cloudprovider.InstancesV2.instance_belongs_to`)."""
        chosen = self._v2 if self._v2 is not None else self._require_v1()
        return await chosen.instance_belongs_to(node_name, metadata)

    # -- node lifecycle controller ---------------------------------------------

    async def instance_exists(self, node: Node) -> bool:
        """Whether the instance exists (stopped instances do). V1: an instance the
        providerID helper does not find does not exist."""
        if self._v2 is not None:
            return await self._v2.instance_exists(node)
        instances = self._require_v1()
        provider_id = await self.provider_id(node)
        if provider_id is None:
            return False
        return await instances.instance_exists_by_provider_id(provider_id)

    async def instance_shutdown(self, node: Node) -> bool:
        """Whether the instance is shut down. V1: not found, or ``NotImplemented`` from
        ``InstanceShutdownByProviderID``, means "not shut down"."""
        if self._v2 is not None:
            return await self._v2.instance_shutdown(node)
        instances = self._require_v1()
        provider_id = await self.provider_id(node)
        if provider_id is None:
            return False
        try:
            return await instances.instance_shutdown_by_provider_id(provider_id)
        except NotImplementedByProviderError:
            return False

    async def provider_id(self, node: Node) -> str | None:
        """The V1 providerID of ``node``: its ``spec.providerID``, else
        ``<provider>://<InstanceID>``; ``None`` when the instance is not found. Other
        errors (``NotImplemented`` included) propagate."""
        if node.spec.provider_id:
            return node.spec.provider_id
        try:
            return await get_instance_provider_id(self._cloud, node.metadata.name)
        except InstanceNotFoundError:
            return None

    # -- V1 ---------------------------------------------------------------------

    def _require_v1(self) -> Instances:
        assert self._v1 is not None
        return self._v1

    async def _instance_metadata_v1(self, node: Node, instances: Instances) -> InstanceMetadata:
        """providerID, addresses, type and zone, each with its fallback."""
        name = node.metadata.name
        provider_id = node.spec.provider_id
        if not provider_id:
            try:
                provider_id = await get_instance_provider_id(self._cloud, name)
            except NotImplementedByProviderError:
                log.warning(
                    "node %s: cloud provider does not implement InstanceID; no providerID", name
                )
                provider_id = ""
        addresses = await self._addresses_v1(instances, provider_id, node)
        instance_type = await _with_fallback(
            "instance type",
            lambda: instances.instance_type_by_provider_id(provider_id),
            lambda: instances.instance_type(name),
        )
        zone_name = region = ""
        zones = self._cloud.zones()
        if zones is not None:
            try:
                zone = await _with_fallback(
                    "zone",
                    lambda: zones.get_zone_by_provider_id(provider_id),
                    lambda: zones.get_zone_by_node_name(name),
                )
            except Exception as exc:
                raise CloudCallError(f"failed to get zone from cloud provider: {exc}", exc) from exc
            zone_name, region = zone.failure_domain, zone.region
        return InstanceMetadata(
            provider_id=provider_id,
            instance_type=instance_type,
            node_addresses=addresses,
            zone=zone_name,
            region=region,
        )

    async def _addresses_v1(
        self, instances: Instances, provider_id: str, node: Node
    ) -> tuple[NodeAddress, ...]:
        addresses = await _with_fallback(
            "addresses",
            lambda: instances.node_addresses_by_provider_id(provider_id),
            lambda: instances.node_addresses(node.metadata.name),
        )
        return tuple(addresses)


async def _with_fallback(
    what: str,
    first: Callable[[], Awaitable[R]],
    second: Callable[[], Awaitable[R]],
) -> R:
    try:
        return await first()
    except Exception as first_error:
        try:
            return await second()
        except Exception as second_error:
            raise CloudCallError(
                f"failed to get {what}: by providerID: {first_error}; by node name: {second_error}",
                second_error,
            ) from second_error


__all__ = ["CloudInstances"]
