"""The ``example`` cloud: instances listed in the cloud-config, InstancesV2 only.

The cloud-config (the file given with ``--cloud-config``) *is* the cloud::

    clusterID: demo                  # omit it and the daemon needs --allow-untagged-cloud
    instances:
      - name: node-1                 # the Node's name (required)
        providerID: example://i-1    # becomes spec.providerID (required)
        type: m1.small               # instance-type labels
        zone: zone-a                 # zone labels
        region: region-1             # region labels
        state: running               # running (default), shutdown or terminated
        addresses:                   # status.addresses, in this order
          - {type: InternalIP, address: 10.0.0.1}

A node is looked up by ``spec.providerID`` when it has one, else by name. A node
that is not listed, or whose instance is ``terminated``, does not exist in this
cloud: the lifecycle controller deletes it once it is NotReady.

Everything else a provider can offer (load balancers, routes, zones, ...) is left
unsupported: the base class's accessors return ``None``, so the daemon skips
those controllers.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import yaml

from kube_ccm.cloudprovider import (
    CloudConfigError,
    CloudProvider,
    InstanceMetadata,
    InstanceNotFoundError,
    InstancesV2,
    Node,
    NodeAddress,
)

__all__ = ["PROVIDER_NAME", "ExampleCloud", "Instance", "Inventory", "factory", "parse_inventory"]

PROVIDER_NAME = "example"

_FIELDS = ("name", "providerID", "type", "zone", "region", "state", "addresses")
_STATES = ("running", "shutdown", "terminated")
_ADDRESS_TYPES = ("InternalIP", "ExternalIP", "InternalDNS", "ExternalDNS", "Hostname")


@dataclass(frozen=True, kw_only=True, slots=True)
class Instance:
    """One entry of ``instances:``."""

    name: str
    provider_id: str
    instance_type: str = ""
    zone: str = ""
    region: str = ""
    state: str = "running"
    addresses: tuple[NodeAddress, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class Inventory:
    """The whole cloud-config."""

    cluster_id: str
    instances: tuple[Instance, ...]


def parse_inventory(data: bytes) -> Inventory:
    """Parse and check the cloud-config; a :class:`CloudConfigError` says what to fix."""
    try:
        document = yaml.safe_load(data)
    except yaml.YAMLError as exc:
        raise CloudConfigError(f"the cloud-config is not valid YAML: {exc}") from exc
    if not isinstance(document, dict) or not isinstance(document.get("instances"), list):
        raise CloudConfigError(
            "the cloud-config must be a mapping with an `instances:` list "
            "(the format is in the docstring of kube_ccm_example.provider)"
        )
    _no_unknown_fields(document, ("clusterID", "instances"), "the cloud-config")
    instances = tuple(
        _instance(entry, f"instances[{i}]") for i, entry in enumerate(document["instances"])
    )
    for field, values in (
        ("name", [instance.name for instance in instances]),
        ("providerID", [instance.provider_id for instance in instances]),
    ):
        repeated = [value for value, count in Counter(values).items() if count > 1]
        if repeated:
            raise CloudConfigError(f"instances: {field} {repeated[0]!r} is listed more than once")
    return Inventory(cluster_id=str(document.get("clusterID") or ""), instances=instances)


def _instance(entry: Any, where: str) -> Instance:
    if not isinstance(entry, dict) or not entry.get("name") or not entry.get("providerID"):
        raise CloudConfigError(f"{where} needs at least `name` and `providerID`")
    _no_unknown_fields(entry, _FIELDS, where)
    state = entry.get("state", "running")
    if state not in _STATES:
        raise CloudConfigError(f"{where}.state is {state!r}: use one of {', '.join(_STATES)}")
    return Instance(
        name=str(entry["name"]),
        provider_id=str(entry["providerID"]),
        instance_type=str(entry.get("type") or ""),
        zone=str(entry.get("zone") or ""),
        region=str(entry.get("region") or ""),
        state=state,
        addresses=tuple(
            _address(item, f"{where}.addresses[{i}]")
            for i, item in enumerate(entry.get("addresses") or [])
        ),
    )


def _address(item: Any, where: str) -> NodeAddress:
    if (
        not isinstance(item, dict)
        or item.get("type") not in _ADDRESS_TYPES
        or not item.get("address")
    ):
        raise CloudConfigError(
            f"{where} must be {{type: T, address: A}} with T one of {', '.join(_ADDRESS_TYPES)}"
        )
    address = str(item["address"])
    if item["type"].endswith("IP"):
        try:
            ipaddress.ip_address(address)
        except ValueError:
            raise CloudConfigError(f"{where}: {address!r} is not an IP address") from None
    return NodeAddress(type=item["type"], address=address)


def _no_unknown_fields(mapping: dict[Any, Any], known: Iterable[str], where: str) -> None:
    unknown = sorted(str(key) for key in mapping if key not in known)
    if unknown:
        raise CloudConfigError(
            f"{where}: unknown field `{unknown[0]}`; known fields: {', '.join(known)}"
        )


class ExampleInstances(InstancesV2):
    """InstancesV2 over the inventory: every answer comes from memory, so nothing can fail."""

    def __init__(self, instances: Iterable[Instance]) -> None:
        listed = tuple(instances)
        self._by_name = {instance.name: instance for instance in listed}
        self._by_provider_id = {instance.provider_id: instance for instance in listed}

    def _find(self, node: Node) -> Instance | None:
        # The providerID, once set, names the instance for good: a node whose instance
        # was replaced under the same name must not be mistaken for the new one.
        if node.spec.provider_id:
            found = self._by_provider_id.get(node.spec.provider_id)
        else:
            found = self._by_name.get(node.metadata.name)
        return None if found is None or found.state == "terminated" else found

    async def instance_exists(self, node: Node) -> bool:
        # False deletes a NotReady Node at once. A real cloud must raise when it
        # cannot tell (an API error, a timeout); here the inventory is the truth.
        return self._find(node) is not None

    async def instance_shutdown(self, node: Node) -> bool:
        found = self._find(node)
        return found is not None and found.state == "shutdown"

    async def instance_metadata(self, node: Node) -> InstanceMetadata | None:
        found = self._find(node)
        if found is None:
            # Raising keeps the node tainted and retries it with backoff, logging this.
            raise InstanceNotFoundError(
                f"instance not found: node {node.metadata.name!r} "
                f"(providerID {node.spec.provider_id or 'unset'}) is not a running or "
                "shut-down instance in the inventory"
            )
        return InstanceMetadata(
            provider_id=found.provider_id,
            instance_type=found.instance_type,
            node_addresses=found.addresses,
            zone=found.zone,
            region=found.region,
        )


class ExampleCloud(CloudProvider):
    """The provider: its name, its cluster ID and the one capability it offers."""

    def __init__(self, inventory: Inventory) -> None:
        self.inventory = inventory
        self._instances = ExampleInstances(inventory.instances)

    def provider_name(self) -> str:
        return PROVIDER_NAME

    def has_cluster_id(self) -> bool:
        return bool(self.inventory.cluster_id)

    def instances_v2(self) -> InstancesV2 | None:
        return self._instances


def factory(config: bytes | None) -> ExampleCloud:
    """Build the provider from the bytes of ``--cloud-config`` (``None``: no flag given).

    Only parses: network work, if a provider has any, belongs in ``initialize``.
    """
    if config is None:
        raise CloudConfigError("the example provider needs --cloud-config=PATH (its inventory)")
    return ExampleCloud(parse_inventory(config))
