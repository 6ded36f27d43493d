"""Droplets as instances (InstancesV2), as the Go CCM reads them.

- providerID ``digitalocean://<droplet id>``, exactly the Go CCM's, so Nodes move over
  unchanged; a Node without one is found by name as the Go CCM does (``GET
  /v2/droplets?name=``; the droplet's name, or one of its addresses, is the Node's
  name).
- region slug as the region and, DigitalOcean having no zones, as the zone too (the
  Go CCM sets only the region); size slug as the instance type.
- addresses: the droplet's name as ``Hostname``, its private (VPC) IPv4 as
  ``InternalIP``, its public IPv4 and IPv6 as ``ExternalIP``.
- authoritative (the kubelet serving certificate approver may rest on it): a droplet
  is a Node's when its name, or one of its addresses, is the Node's name.
- shut down = status ``off``; gone = 404 only (any other error is raised, so the
  lifecycle controller never deletes a Node because the API did not answer).

Lookups are answered from one droplet list, kept ``dropletCacheTTL`` (30 s): the node
controller's refresh of every Node every 5 minutes costs one request per 200 droplets
instead of one per Node, and the lifecycle controller's checks of NotReady Nodes every
``--node-monitor-period`` (5 s) cost one list per TTL whatever their number. Only a
droplet the list has is answered from it: "gone" is always a ``GET`` of the droplet
answered 404 (so a deleted droplet's Node goes at most a TTL later, never earlier).
``dropletCacheTTL: 0s`` asks for every droplet every time.
"""

from __future__ import annotations

import asyncio
import re
import time

from kube_ccm.cloudprovider import (
    CloudProviderError,
    InstanceMetadata,
    InstanceNotFoundError,
    InstancesV2,
    Node,
    NodeAddress,
)

from kube_ccm_digitalocean.client import JSON, DigitalOceanClient

__all__ = [
    "PROVIDER_ID_PREFIX",
    "DropletCache",
    "Droplets",
    "droplet_id_from_provider_id",
    "node_addresses",
    "provider_id",
]

PROVIDER_ID_PREFIX = "digitalocean://"
_ID = re.compile(r"^[0-9]+$")


def provider_id(droplet_id: int) -> str:
    return f"{PROVIDER_ID_PREFIX}{droplet_id}"


def droplet_id_from_provider_id(value: str) -> int:
    """The droplet ID of ``digitalocean://<id>``; anything else is an error (never "not
    found": a Node another CCM owns must not look gone)."""
    if not value.startswith(PROVIDER_ID_PREFIX):
        raise CloudProviderError(
            f"provider ID {value!r} is missing the prefix {PROVIDER_ID_PREFIX!r}: this Node "
            "is not a DigitalOcean droplet"
        )
    number = value.removeprefix(PROVIDER_ID_PREFIX)
    if not _ID.match(number):
        raise CloudProviderError(f"provider ID {value!r}: {number!r} is not a droplet ID")
    return int(number)


def _address(droplet: JSON, family: str, kind: str) -> str:
    for network in (droplet.get("networks") or {}).get(family) or []:
        if network.get("type") == kind and network.get("ip_address"):
            return str(network["ip_address"])
    return ""


def node_addresses(droplet: JSON) -> tuple[NodeAddress, ...]:
    """As the Go CCM's ``nodeAddresses``: a droplet without a private IPv4 is an error."""
    private = _address(droplet, "v4", "private")
    if not private:
        raise CloudProviderError(
            f"droplet {droplet.get('id')} ({droplet.get('name')!r}) has no private IPv4 "
            "address (its VPC interface)"
        )
    addresses = [
        NodeAddress(type="Hostname", address=str(droplet.get("name", ""))),
        NodeAddress(type="InternalIP", address=private),
    ]
    for family in ("v4", "v6"):
        if public := _address(droplet, family, "public"):
            addresses.append(NodeAddress(type="ExternalIP", address=public))
    return tuple(addresses)


def _named(droplet: JSON, name: str) -> bool:
    if droplet.get("name") == name:
        return True
    return name in {
        _address(droplet, "v4", "private"),
        _address(droplet, "v4", "public"),
        _address(droplet, "v6", "public"),
    } - {""}


class DropletCache:
    """Every droplet, from one list (one request per 200), for ``ttl`` seconds; one
    list at a time. A droplet the list lacks is asked for directly (it may be newer)."""

    def __init__(self, client: DigitalOceanClient, ttl: float) -> None:
        self._client = client
        self._ttl = ttl
        self._by_id: dict[int, JSON] = {}
        self._at = -float("inf")
        self._lock = asyncio.Lock()

    def _fresh(self) -> bool:
        return time.monotonic() - self._at < self._ttl

    async def _refresh(self) -> None:
        if self._ttl <= 0:
            return
        async with self._lock:
            if self._fresh():
                return
            droplets = await self._client.droplets()
            self._by_id = {int(d["id"]): d for d in droplets}
            self._at = time.monotonic()

    async def by_id(self, droplet_id: int) -> JSON | None:
        await self._refresh()
        if self._fresh() and droplet_id in self._by_id:
            return self._by_id[droplet_id]
        return await self._client.droplet(droplet_id)

    async def by_name(self, name: str) -> JSON | None:
        await self._refresh()
        if self._fresh():
            for droplet in self._by_id.values():
                if _named(droplet, name):
                    return droplet
        for droplet in await self._client.droplets(name=name):
            if _named(droplet, name):
                return droplet
        return None

    def forget(self) -> None:
        self._at = -float("inf")


class Droplets(InstancesV2):
    authoritative = True
    """Every answer is DigitalOcean's API; a Node is read for its name and providerID."""

    def __init__(self, client: DigitalOceanClient, cache: DropletCache) -> None:
        self._client = client
        self._cache = cache

    async def instance_belongs_to(self, node_name: str, metadata: InstanceMetadata) -> bool:
        """The droplet's own name (or one of its addresses, as a Node without a
        providerID is found) is the Node's name."""
        try:
            droplet_id = droplet_id_from_provider_id(metadata.provider_id)
        except CloudProviderError:
            return False
        droplet = await self._cache.by_id(droplet_id)
        return droplet is not None and _named(droplet, node_name)

    async def _droplet(self, node: Node) -> JSON | None:
        """The Node's droplet: from the cache when it has it, else asked for (so None
        is the API's own answer)."""
        if node.spec.provider_id:
            return await self._cache.by_id(droplet_id_from_provider_id(node.spec.provider_id))
        return await self._cache.by_name(node.metadata.name)

    async def instance_exists(self, node: Node) -> bool:
        return await self._droplet(node) is not None

    async def instance_shutdown(self, node: Node) -> bool:
        droplet = await self._droplet(node)
        return droplet is not None and droplet.get("status") == "off"

    async def instance_metadata(self, node: Node) -> InstanceMetadata | None:
        droplet = await self._droplet(node)
        if droplet is None:
            # Raised, not None: the Node stays tainted and is retried until its droplet
            # appears (a kubelet may register before the API lists the droplet).
            raise InstanceNotFoundError(
                f"no droplet for node {node.metadata.name!r} (providerID "
                f"{node.spec.provider_id or 'unset'}): none has that ID, or that name or "
                "address"
            )
        region = str((droplet.get("region") or {}).get("slug", ""))
        return InstanceMetadata(
            provider_id=provider_id(int(droplet["id"])),
            instance_type=str(droplet.get("size_slug", "")),
            node_addresses=node_addresses(droplet),
            zone=region,
            region=region,
        )
