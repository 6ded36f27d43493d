"""Pod routes in a VPC route table: one route per pod CIDR to the Node's instance.

The table is the cloud-config's ``routeTableId``, else the one route table of the VPC
tagged ``kubernetes.io/cluster/<cluster name>``. Listed are the routes whose target is
an instance (others, such as the local route or a NAT gateway's, are not the route
controller's); their target Node is the instance's private DNS name (the name a kubelet
on EC2 registers). A route is a blackhole when EC2 says so (its instance is gone) or
when its instance is terminated or unknown.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from kube_ccm.api.objects import Node, NodeSpec, ObjectMeta
from kube_ccm.cloudprovider import Route, Routes
from kube_ccm.providers.aws.api import TERMINATED, AwsApi, AwsError, Ec2Instance
from kube_ccm.providers.aws.config import CLUSTER_TAG_PREFIX

log = logging.getLogger(__name__)

BLACKHOLE = "blackhole"


def _destination(route: Mapping[str, Any]) -> str:
    return str(route.get("DestinationCidrBlock") or route.get("DestinationIpv6CidrBlock") or "")


def _cidr_field(cidr: str) -> str:
    network = ipaddress.ip_network(cidr, strict=False)
    return "DestinationIpv6CidrBlock" if network.version == 6 else "DestinationCidrBlock"


def listed_route(
    route: Mapping[str, Any], instances: Mapping[str, Ec2Instance | None]
) -> Route | None:
    """The route as :meth:`AwsRoutes.list_routes` reports it (``None``: not an instance's)."""
    instance_id = str(route.get("InstanceId", ""))
    cidr = _destination(route)
    if not instance_id or not cidr:
        return None
    instance = instances.get(instance_id)
    gone = instance is None or instance.state == TERMINATED
    return Route(
        name=cidr,
        target_node=(instance.private_dns_name if instance else "") or instance_id,
        destination_cidr=cidr,
        blackhole=route.get("State") == BLACKHOLE or gone,
    )


class AwsRoutes(Routes):
    def __init__(self, provider: AwsApi) -> None:
        self._p = provider
        self._tables: dict[str, str] = {}

    def _cluster_tag(self, cluster_name: str) -> str:
        return f"{CLUSTER_TAG_PREFIX}{cluster_name}"

    async def _table(self, cluster_name: str, *, required: bool = True) -> dict[str, Any] | None:
        """The cluster's route table (``None``: another cluster's, with ``routeTableId``;
        or none is tagged for the cluster and ``required`` is false)."""
        config = self._p.config
        table_id = config.route_table_id or self._tables.get(cluster_name, "")
        if config.route_table_id and config.cluster_name and cluster_name != config.cluster_name:
            return None
        if table_id:
            page = await self._p.ec2_call(
                "DescribeRouteTables", lambda c: c.describe_route_tables(RouteTableIds=[table_id])
            )
            tables = page.get("RouteTables", [])
            if not tables:
                raise AwsError(f"the route table {table_id} does not exist")
            return dict(tables[0])
        tag = self._cluster_tag(cluster_name)
        filters: list[Any] = [{"Name": "tag-key", "Values": [tag]}]
        if config.vpc_id:
            filters.append({"Name": "vpc-id", "Values": [config.vpc_id]})
        page = await self._p.ec2_call(
            "DescribeRouteTables", lambda c: c.describe_route_tables(Filters=filters)
        )
        tables = page.get("RouteTables", [])
        where = f" of VPC {config.vpc_id}" if config.vpc_id else ""
        if not tables and not required:
            return None
        if not tables:
            raise AwsError(
                f"no route table{where} is tagged {tag}: tag the cluster's route table, or "
                "set `routeTableId` in the cloud-config"
            )
        if len(tables) > 1:
            ids = ", ".join(sorted(t.get("RouteTableId", "") for t in tables))
            raise AwsError(
                f"several route tables{where} are tagged {tag} ({ids}): set `routeTableId` "
                "in the cloud-config to the one for pod routes"
            )
        self._tables[cluster_name] = tables[0]["RouteTableId"]
        return dict(tables[0])

    async def list_routes(self, cluster_name: str) -> Sequence[Route]:
        """The table's routes to instances; none when no table is the cluster's (creating
        a route then says what to tag)."""
        table = await self._table(cluster_name, required=False)
        if table is None:
            return []
        routes = [r for r in table.get("Routes", []) if r.get("InstanceId") and _destination(r)]
        ids = sorted({str(r["InstanceId"]) for r in routes})
        found = await asyncio.gather(*(self._p.lookups.get("instance-id", i) for i in ids))
        instances = {i: (f[0] if f else None) for i, f in zip(ids, found, strict=True)}
        listed = [listed_route(r, instances) for r in routes]
        return [r for r in listed if r is not None]

    async def create_route(self, cluster_name: str, name_hint: str, route: Route) -> None:
        table = await self._table(cluster_name)
        if table is None:
            raise AwsError(
                f"`routeTableId` is cluster {self._p.config.cluster_name}'s, not {cluster_name}'s"
            )
        table_id = table["RouteTableId"]
        node = Node(metadata=ObjectMeta(name=route.target_node), spec=NodeSpec())
        instance, why = await self._p.find(node)
        if instance is None:
            raise AwsError(f"no route to Node {route.target_node}'s pod CIDR: {why}")
        cidr = route.destination_cidr
        # Pod traffic is not the instance's own: it must forward it.
        await self._p.ec2_call(
            "ModifyInstanceAttribute",
            lambda c: c.modify_instance_attribute(
                InstanceId=instance.id, SourceDestCheck={"Value": False}
            ),
        )
        request: dict[str, Any] = {
            "RouteTableId": table_id,
            "InstanceId": instance.id,
            _cidr_field(cidr): cidr,
        }
        existing = [r for r in table.get("Routes", []) if _destination(r) == cidr]
        if existing:
            current = existing[0]
            if current.get("InstanceId") == instance.id and current.get("State") != BLACKHOLE:
                return
            if not current.get("InstanceId") and current.get("State") != BLACKHOLE:
                raise AwsError(
                    f"the route table {table_id} already routes {cidr} elsewhere ({current}); "
                    "kube-ccm replaces only routes to instances"
                )
            await self._p.ec2_call("ReplaceRoute", lambda c: c.replace_route(**request))
        else:
            await self._p.ec2_call("CreateRoute", lambda c: c.create_route(**request))
        log.info("Route %s -> %s (Node %s) in %s", cidr, instance.id, route.target_node, table_id)

    async def delete_route(self, cluster_name: str, route: Route) -> None:
        table = await self._table(cluster_name, required=False)
        if table is None:
            return
        table_id = table["RouteTableId"]
        cidr = route.destination_cidr
        request: dict[str, Any] = {"RouteTableId": table_id, _cidr_field(cidr): cidr}
        try:
            await self._p.ec2_call("DeleteRoute", lambda c: c.delete_route(**request))
        except AwsError as exc:
            if exc.code != "InvalidRoute.NotFound":
                raise


__all__ = ["AwsRoutes", "listed_route"]
