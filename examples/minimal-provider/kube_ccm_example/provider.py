"""The ``example`` cloud: instances listed in the cloud-config, InstancesV2 only.

Cloud-config (the file given with ``--cloud-config``)::

    clusterID: demo
    instances:
      - name: node-1                 # the Node's name
        providerID: example://i-1
        type: m1.small
        zone: zone-a
        region: region-1
        state: running               # running (default), shutdown or terminated
        addresses:
          - {type: InternalIP, address: 10.0.0.1}

Everything else a provider can offer (load balancers, routes, zones, ...) is
left unsupported: the base class's accessors return ``None``.
"""

from __future__ import annotations

from collections.abc import Mapping
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

PROVIDER_NAME = "example"


@dataclass(frozen=True)
class Instance:
    name: str
    provider_id: str
    instance_type: str
    zone: str
    region: str
    state: str
    addresses: tuple[NodeAddress, ...]


def parse_inventory(data: bytes) -> tuple[str, dict[str, Instance]]:
    """The cloud-config → (cluster ID, instances by node name); errors say what to fix."""
    try:
        document = yaml.safe_load(data)
    except yaml.YAMLError as exc:
        raise CloudConfigError(f"example cloud-config is not valid YAML: {exc}") from exc
    if not isinstance(document, dict) or not isinstance(document.get("instances"), list):
        raise CloudConfigError(
            "example cloud-config must be a mapping with an `instances:` list "
            "(see kube_ccm_example/provider.py for the format)"
        )
    instances: dict[str, Instance] = {}
    for index, entry in enumerate(document["instances"]):
        instances_entry = _instance(entry, index)
        instances[instances_entry.name] = instances_entry
    return str(document.get("clusterID", "")), instances


def _instance(entry: Any, index: int) -> Instance:
    if not isinstance(entry, dict) or not entry.get("name") or not entry.get("providerID"):
        raise CloudConfigError(f"instances[{index}] needs at least `name` and `providerID`")
    state = entry.get("state", "running")
    if state not in ("running", "shutdown", "terminated"):
        raise CloudConfigError(
            f"instances[{index}].state is {state!r}: use running, shutdown or terminated"
        )
    addresses = tuple(
        NodeAddress(type=str(a["type"]), address=str(a["address"]))
        for a in entry.get("addresses") or []
    )
    return Instance(
        name=str(entry["name"]),
        provider_id=str(entry["providerID"]),
        instance_type=str(entry.get("type", "")),
        zone=str(entry.get("zone", "")),
        region=str(entry.get("region", "")),
        state=state,
        addresses=addresses,
    )


class ExampleInstances(InstancesV2):
    def __init__(self, instances: Mapping[str, Instance]) -> None:
        self._by_name = dict(instances)
        self._by_provider_id = {i.provider_id: i for i in instances.values()}

    def _find(self, node: Node) -> Instance | None:
        found = self._by_provider_id.get(node.spec.provider_id) if node.spec.provider_id else None
        found = found or self._by_name.get(node.metadata.name)
        return None if found is None or found.state == "terminated" else found

    async def instance_exists(self, node: Node) -> bool:
        return self._find(node) is not None

    async def instance_shutdown(self, node: Node) -> bool:
        found = self._find(node)
        return found is not None and found.state == "shutdown"

    async def instance_metadata(self, node: Node) -> InstanceMetadata | None:
        found = self._find(node)
        if found is None:
            raise InstanceNotFoundError(f"no instance for node {node.metadata.name}")
        return InstanceMetadata(
            provider_id=found.provider_id,
            instance_type=found.instance_type,
            node_addresses=found.addresses,
            zone=found.zone,
            region=found.region,
        )


class ExampleCloud(CloudProvider):
    def __init__(self, cluster_id: str, instances: Mapping[str, Instance]) -> None:
        self._cluster_id = cluster_id
        self._instances = ExampleInstances(instances)

    def provider_name(self) -> str:
        return PROVIDER_NAME

    def has_cluster_id(self) -> bool:
        return bool(self._cluster_id)

    def instances_v2(self) -> InstancesV2 | None:
        return self._instances


def factory(config: bytes | None) -> ExampleCloud:
    """Called by kube-ccm with the bytes of ``--cloud-config`` (None if not given)."""
    if config is None:
        raise CloudConfigError("the example provider needs --cloud-config=PATH (its inventory)")
    cluster_id, instances = parse_inventory(config)
    return ExampleCloud(cluster_id, instances)
