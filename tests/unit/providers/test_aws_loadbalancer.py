"""The aws provider's Network Load Balancers and routes, called directly against moto
(a server on loopback, checking credentials) through the proxy that counts the calls
and injects AWS's errors."""

from __future__ import annotations

import re
import uuid
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from kube_ccm.api.objects import Node, NodeSpec, ObjectMeta, Service, ServicePort, ServiceSpec
from kube_ccm.cloudprovider import LoadBalancer, Route, Routes, TransientCloudError
from kube_ccm.cloudprovider.annotations import problems
from kube_ccm.controllers.cloudcalls import CloudCallPolicy, CloudCalls, guard
from kube_ccm.providers.aws import (
    AwsConfigError,
    AwsError,
    AwsProvider,
    AwsThrottledError,
    factory,
    load_config,
)
from kube_ccm.providers.aws.api import Ec2Instance as ApiInstance
from kube_ccm.providers.aws.loadbalancer import (
    ANNOTATION_ADDITIONAL_TAGS,
    ANNOTATION_HC_HEALTHY,
    ANNOTATION_HC_INTERVAL,
    ANNOTATION_INTERNAL,
    SERVICE_UID_TAG,
    AwsLoadBalancer,
    group_name,
    nlb_name,
)
from kube_ccm.providers.aws.moto import Ec2Instance, Ec2Proxy, MotoServer, Network
from kube_ccm.providers.aws.routes import listed_route
from kube_ccm.runtime.metrics import Metrics

REGION = "us-east-1"
ZONES = ("us-east-1a", "us-east-1b")
CLUSTER = "demo"
MUTATING = frozenset(
    {
        "CreateLoadBalancer",
        "DeleteLoadBalancer",
        "CreateTargetGroup",
        "ModifyTargetGroup",
        "DeleteTargetGroup",
        "CreateListener",
        "ModifyListener",
        "DeleteListener",
        "RegisterTargets",
        "DeregisterTargets",
        "AddTags",
        "RemoveTags",
    }
)

pytestmark = pytest.mark.usefixtures("aws_env")


# -- helpers ----------------------------------------------------------------------------


@pytest.fixture
def network(moto_server: MotoServer) -> Network:
    return moto_server.network(ZONES)


@pytest.fixture
def credentials_file(moto_server: MotoServer, tmp_path: Path) -> Path:
    path = tmp_path / "aws-credentials"
    path.write_text(moto_server.keys.shared_credentials())
    return path


@pytest.fixture
def elb(moto_server: MotoServer) -> Any:
    """ELBv2 as the test sees it (not through the proxy)."""
    return moto_server.service_client("elbv2")


def make_provider(
    proxy: Ec2Proxy, network: Network, credentials_file: Path, **extra: Any
) -> AwsProvider:
    document: dict[str, Any] = {
        "region": REGION,
        "endpoint": proxy.url,
        "elbEndpoint": proxy.url,
        "clusterName": CLUSTER,
        "vpcId": network.vpc_id,
        "throttleDelay": "20ms",
        "credentials": {"file": str(credentials_file)},
        "subnetIds": list(network.subnets.values()),
        **extra,
    }
    return factory(yaml.safe_dump(document).encode())


@pytest.fixture
def cloud(ec2_proxy: Ec2Proxy, network: Network, credentials_file: Path) -> AwsProvider:
    return make_provider(ec2_proxy, network, credentials_file)


def lb_of(cloud: AwsProvider) -> AwsLoadBalancer:
    found = cloud.load_balancer()
    assert isinstance(found, AwsLoadBalancer)
    return found


def routes_of(cloud: AwsProvider) -> Routes:
    found = cloud.routes()
    assert found is not None
    return found


def service(
    ports: Sequence[tuple[int, int, str]] = ((80, 30080, "TCP"),),
    *,
    uid: str | None = None,
    annotations: dict[str, str] | None = None,
    local: bool = False,
    name: str = "web",
) -> Service:
    return Service(
        metadata=ObjectMeta(
            name=name,
            namespace="shop",
            uid=uid or str(uuid.uuid4()),
            annotations=annotations or {},
        ),
        spec=ServiceSpec(
            type="LoadBalancer",
            ports=tuple(
                ServicePort(name=f"p{port}", port=port, node_port=node_port, protocol=protocol)
                for port, node_port, protocol in ports
            ),
            external_traffic_policy="Local" if local else "Cluster",
            health_check_node_port=32000 if local else 0,
        ),
    )


def node_of(instance: Ec2Instance | None, name: str = "") -> Node:
    return Node(
        metadata=ObjectMeta(name=instance.private_dns_name if instance else name),
        spec=NodeSpec(provider_id=instance.provider_id if instance else ""),
    )


def mutations(proxy: Ec2Proxy) -> Counter[str]:
    return Counter({a: n for a, n in proxy.calls.items() if a in MUTATING and n})


def tags_of(elb: Any, arn: str) -> dict[str, str]:
    described = elb.describe_tags(ResourceArns=[arn])["TagDescriptions"][0]
    return {t["Key"]: t["Value"] for t in described["Tags"]}


def nlb(elb: Any, svc: Service) -> dict[str, Any]:
    found: dict[str, Any] = elb.describe_load_balancers(Names=[nlb_name(svc)])["LoadBalancers"][0]
    return found


def groups(elb: Any, lb_arn: str) -> dict[str, dict[str, Any]]:
    """The target groups the NLB's listeners forward to."""
    arns = [
        x["DefaultActions"][0]["TargetGroupArn"]
        for x in elb.describe_listeners(LoadBalancerArn=lb_arn)["Listeners"]
    ]
    if not arns:
        return {}
    found = elb.describe_target_groups(TargetGroupArns=arns)["TargetGroups"]
    return {g["TargetGroupName"]: g for g in found}


def listeners(elb: Any, lb_arn: str) -> dict[int, dict[str, Any]]:
    found = elb.describe_listeners(LoadBalancerArn=lb_arn)["Listeners"]
    return {int(listener["Port"]): listener for listener in found}


def targets(elb: Any, group_arn: str) -> set[str]:
    found = elb.describe_target_health(TargetGroupArn=group_arn)["TargetHealthDescriptions"]
    return {d["Target"]["Id"] for d in found}


def tagged_for(elb: Any, svc: Service) -> list[str]:
    """Every NLB and target group carrying the Service's UID tag."""
    arns = [lb["LoadBalancerArn"] for lb in elb.describe_load_balancers()["LoadBalancers"]]
    arns += [g["TargetGroupArn"] for g in elb.describe_target_groups()["TargetGroups"]]
    found = []
    for start in range(0, len(arns), 20):
        for d in elb.describe_tags(ResourceArns=arns[start : start + 20])["TagDescriptions"]:
            if any(
                t["Key"] == SERVICE_UID_TAG and t["Value"] == svc.metadata.uid for t in d["Tags"]
            ):
                found.append(d["ResourceArn"])
    return found


# -- load balancers ---------------------------------------------------------------------


async def test_ensure_makes_an_nlb_target_groups_and_listeners_tagged_as_the_services(
    moto_server: MotoServer, ec2_proxy: Ec2Proxy, network: Network, cloud: AwsProvider, elb: Any
) -> None:
    first = moto_server.run_instance(network, "us-east-1a")
    second = moto_server.run_instance(network, "us-east-1b")
    svc = service(((80, 30080, "TCP"), (53, 30053, "UDP")))
    lb = lb_of(cloud)
    nodes = [node_of(first), node_of(second), node_of(None, "no-provider-id")]
    try:
        status = await lb.ensure_load_balancer(CLUSTER, svc, nodes)
        made = nlb(elb, svc)
        assert made["LoadBalancerName"] == lb.get_load_balancer_name(CLUSTER, svc)
        assert len(made["LoadBalancerName"]) == 32
        assert made["Type"] == "network"
        assert made["Scheme"] == "internet-facing"
        assert [i.hostname for i in status.ingress] == [made["DNSName"]]
        assert await lb.get_load_balancer(CLUSTER, svc) == status
        tags = tags_of(elb, made["LoadBalancerArn"])
        assert tags["kubernetes.io/cluster/demo"] == "owned"
        assert tags["kubernetes.io/service-name"] == "shop/web"
        assert tags[SERVICE_UID_TAG] == svc.metadata.uid
        made_groups = groups(elb, made["LoadBalancerArn"])
        assert set(made_groups) == {
            group_name(svc, "TCP", 30080),
            group_name(svc, "UDP", 30053),
        }
        for group in made_groups.values():
            assert group["TargetType"] == "instance"
            assert group["HealthCheckProtocol"] == "TCP"
            assert targets(elb, group["TargetGroupArn"]) == {first.id, second.id}
            assert tags_of(elb, group["TargetGroupArn"])["kubernetes.io/cluster/demo"] == "owned"
        tcp = made_groups[group_name(svc, "TCP", 30080)]
        assert (tcp["Protocol"], tcp["Port"]) == ("TCP", 30080)
        made_listeners = listeners(elb, made["LoadBalancerArn"])
        assert set(made_listeners) == {80, 53}
        assert made_listeners[53]["Protocol"] == "UDP"
        forward = made_listeners[80]["DefaultActions"][0]
        assert forward["TargetGroupArn"] == tcp["TargetGroupArn"]

        # Again, unchanged: nothing is changed, the status is the same.
        ec2_proxy.reset()
        assert await lb.ensure_load_balancer(CLUSTER, svc, nodes) == status
        assert mutations(ec2_proxy) == Counter()
    finally:
        await lb.ensure_load_balancer_deleted(CLUSTER, svc)
        await cloud.aclose()


async def test_a_port_change_changes_only_that_listener_or_target_group(
    moto_server: MotoServer, ec2_proxy: Ec2Proxy, network: Network, cloud: AwsProvider, elb: Any
) -> None:
    instance = moto_server.run_instance(network, "us-east-1a")
    uid = str(uuid.uuid4())
    lb = lb_of(cloud)
    nodes = [node_of(instance)]
    try:
        await lb.ensure_load_balancer(
            CLUSTER, service(((80, 30080, "TCP"), (443, 30443, "TCP")), uid=uid), nodes
        )
        arn = nlb(elb, service(uid=uid))["LoadBalancerArn"]
        before = listeners(elb, arn)

        # The Service port 80 -> 8080 (same NodePort): one listener made, one deleted.
        ec2_proxy.reset()
        changed = service(((8080, 30080, "TCP"), (443, 30443, "TCP")), uid=uid)
        await lb.ensure_load_balancer(CLUSTER, changed, nodes)
        assert mutations(ec2_proxy) == Counter({"CreateListener": 1, "DeleteListener": 1})
        after = listeners(elb, arn)
        assert set(after) == {8080, 443}
        assert after[443]["ListenerArn"] == before[443]["ListenerArn"]

        # The NodePort of 443 changes: its target group is replaced, its listener
        # modified; port 8080's are untouched.
        ec2_proxy.reset()
        moved = service(((8080, 30080, "TCP"), (443, 30444, "TCP")), uid=uid)
        await lb.ensure_load_balancer(CLUSTER, moved, nodes)
        assert mutations(ec2_proxy) == Counter(
            {
                "CreateTargetGroup": 1,
                "RegisterTargets": 1,
                "ModifyListener": 1,
                "DeleteTargetGroup": 1,
            }
        )
        now = groups(elb, arn)
        assert set(now) == {group_name(moved, "TCP", 30080), group_name(moved, "TCP", 30444)}
        assert targets(elb, now[group_name(moved, "TCP", 30444)]["TargetGroupArn"]) == {instance.id}
    finally:
        await lb.ensure_load_balancer_deleted(CLUSTER, service(uid=uid))
        await cloud.aclose()


async def test_a_node_added_is_one_register_targets_per_port(
    moto_server: MotoServer, ec2_proxy: Ec2Proxy, network: Network, cloud: AwsProvider, elb: Any
) -> None:
    first = moto_server.run_instance(network, "us-east-1a")
    second = moto_server.run_instance(network, "us-east-1b")
    svc = service(((80, 30080, "TCP"), (443, 30443, "TCP")))
    lb = lb_of(cloud)
    try:
        await lb.ensure_load_balancer(CLUSTER, svc, [node_of(first)])
        ec2_proxy.reset()
        await lb.update_load_balancer(CLUSTER, svc, [node_of(first), node_of(second)])
        assert mutations(ec2_proxy) == Counter({"RegisterTargets": 2})
        reads = sum(ec2_proxy.calls.values()) - 2
        assert reads == 5, ec2_proxy.calls  # the NLB, its groups, their tags, 2 x targets
        arn = nlb(elb, svc)["LoadBalancerArn"]
        for group in groups(elb, arn).values():
            assert targets(elb, group["TargetGroupArn"]) == {first.id, second.id}

        ec2_proxy.reset()
        await lb.update_load_balancer(CLUSTER, svc, [node_of(second)])
        assert mutations(ec2_proxy) == Counter({"DeregisterTargets": 2})
    finally:
        await lb.ensure_load_balancer_deleted(CLUSTER, svc)
        await cloud.aclose()


async def test_delete_removes_everything_tagged_and_succeeds_when_gone(
    moto_server: MotoServer, ec2_proxy: Ec2Proxy, network: Network, cloud: AwsProvider, elb: Any
) -> None:
    instance = moto_server.run_instance(network, "us-east-1a")
    svc = service(((80, 30080, "TCP"), (443, 30443, "TCP")))
    lb = lb_of(cloud)
    await lb.ensure_load_balancer(CLUSTER, svc, [node_of(instance)])
    assert len(tagged_for(elb, svc)) == 3
    ec2_proxy.reset()
    await lb.ensure_load_balancer_deleted(CLUSTER, svc)
    assert mutations(ec2_proxy) == Counter(
        {"DeleteListener": 2, "DeleteLoadBalancer": 1, "DeleteTargetGroup": 2}
    )
    order = [r.action for r in ec2_proxy.requests if r.action in MUTATING]
    assert order == ["DeleteListener"] * 2 + ["DeleteLoadBalancer"] + ["DeleteTargetGroup"] * 2
    assert tagged_for(elb, svc) == []
    assert await lb.get_load_balancer(CLUSTER, svc) is None
    await lb.ensure_load_balancer_deleted(CLUSTER, svc)
    await lb.ensure_load_balancer_deleted(CLUSTER, service())  # never made
    await cloud.aclose()


async def test_a_delete_that_stopped_after_the_nlb_went_finds_its_target_groups(
    network: Network, cloud: AwsProvider, elb: Any
) -> None:
    svc = service(((80, 30080, "TCP"), (53, 30053, "UDP")))
    lb = lb_of(cloud)
    await lb.ensure_load_balancer(CLUSTER, svc, [])
    arn = nlb(elb, svc)["LoadBalancerArn"]
    assert len(groups(elb, arn)) == 2
    # The listeners and the NLB went; the target groups did not (a delete cut short).
    for listener in listeners(elb, arn).values():
        elb.delete_listener(ListenerArn=listener["ListenerArn"])
    elb.delete_load_balancer(LoadBalancerArn=arn)
    assert len(tagged_for(elb, svc)) == 2
    await lb.ensure_load_balancer_deleted(CLUSTER, svc)
    assert tagged_for(elb, svc) == []
    await cloud.aclose()


async def test_a_target_group_deleted_behind_its_back_is_made_again(
    moto_server: MotoServer, network: Network, cloud: AwsProvider, elb: Any
) -> None:
    instance = moto_server.run_instance(network, "us-east-1a")
    svc = service()
    lb = lb_of(cloud)
    try:
        await lb.ensure_load_balancer(CLUSTER, svc, [node_of(instance)])
        arn = nlb(elb, svc)["LoadBalancerArn"]
        (group,) = groups(elb, arn).values()
        # ELBv2 deletes no target group in use: someone deleted its listener first.
        elb.delete_listener(ListenerArn=listeners(elb, arn)[80]["ListenerArn"])
        elb.delete_target_group(TargetGroupArn=group["TargetGroupArn"])
        await lb.ensure_load_balancer(CLUSTER, svc, [node_of(instance)])
        (again,) = groups(elb, arn).values()
        assert again["TargetGroupName"] == group["TargetGroupName"]
        assert targets(elb, again["TargetGroupArn"]) == {instance.id}
        forward = listeners(elb, arn)[80]["DefaultActions"][0]["TargetGroupArn"]
        assert forward == again["TargetGroupArn"]
    finally:
        await lb.ensure_load_balancer_deleted(CLUSTER, svc)
        await cloud.aclose()


@pytest.mark.parametrize("owner", [None, "other"])
async def test_an_nlb_of_the_same_name_not_this_clusters_is_refused_never_adopted(
    owner: str | None, network: Network, cloud: AwsProvider, elb: Any
) -> None:
    svc = service()
    tags = [{"Key": f"kubernetes.io/cluster/{owner}", "Value": "owned"}] if owner else []
    theirs = elb.create_load_balancer(
        Name=nlb_name(svc),
        Type="network",
        Subnets=list(network.subnets.values()),
        **({"Tags": tags} if tags else {}),
    )["LoadBalancers"][0]["LoadBalancerArn"]
    lb = lb_of(cloud)
    try:
        with pytest.raises(AwsError, match=r"is not this cluster's .*never adopts"):
            await lb.ensure_load_balancer(CLUSTER, svc, [])
        with pytest.raises(AwsError, match="is not this cluster's"):
            await lb.update_load_balancer(CLUSTER, svc, [])
        assert await lb.get_load_balancer(CLUSTER, svc) is None
        await lb.ensure_load_balancer_deleted(CLUSTER, svc)  # succeeds, touches nothing
        assert listeners(elb, theirs) == {}
        assert elb.describe_load_balancers(LoadBalancerArns=[theirs])["LoadBalancers"]
        assert tags_of(elb, theirs) == {t["Key"]: t["Value"] for t in tags}
        assert [o for o in await lb.list_load_balancers(CLUSTER) if o.name == nlb_name(svc)] == []
    finally:
        elb.delete_load_balancer(LoadBalancerArn=theirs)
        await cloud.aclose()


async def test_bad_annotation_values_are_refused_naming_the_annotation(
    ec2_proxy: Ec2Proxy, cloud: AwsProvider
) -> None:
    lb: LoadBalancer = lb_of(cloud)
    declared = {a.key for a in lb.service_annotations}
    assert {ANNOTATION_INTERNAL, ANNOTATION_ADDITIONAL_TAGS, ANNOTATION_HC_INTERVAL} <= declared
    bad = {
        ANNOTATION_HC_INTERVAL: "often",
        ANNOTATION_HC_HEALTHY: "1",
        ANNOTATION_INTERNAL: "maybe",
        ANNOTATION_ADDITIONAL_TAGS: "aws:owner=me",
    }
    found = problems(lb.service_annotations, bad)
    assert len(found) == 4
    for key, value in bad.items():
        with pytest.raises(AwsError, match=rf"metadata\.annotations\[{key}\]: invalid value"):
            await lb.ensure_load_balancer(CLUSTER, service(annotations={key: value}), [])
    assert sum(ec2_proxy.calls.values()) == 0  # refused before any call
    await cloud.aclose()


async def test_annotations_and_local_traffic_shape_the_nlb_and_health_checks(
    moto_server: MotoServer, network: Network, cloud: AwsProvider, elb: Any
) -> None:
    svc = service(
        local=True,
        annotations={
            ANNOTATION_INTERNAL: "true",
            ANNOTATION_ADDITIONAL_TAGS: "team=shop, cost-centre=42",
            ANNOTATION_HC_INTERVAL: "30",
            ANNOTATION_HC_HEALTHY: "3",
        },
    )
    lb = lb_of(cloud)
    try:
        await lb.ensure_load_balancer(CLUSTER, svc, [])
        made = nlb(elb, svc)
        assert made["Scheme"] == "internal"
        tags = tags_of(elb, made["LoadBalancerArn"])
        assert (tags["team"], tags["cost-centre"]) == ("shop", "42")
        (group,) = groups(elb, made["LoadBalancerArn"]).values()
        assert group["HealthCheckProtocol"] == "HTTP"
        assert group["HealthCheckPort"] == "32000"
        assert group["HealthCheckPath"] == "/healthz"
        assert group["HealthCheckIntervalSeconds"] == 30
        assert group["HealthyThresholdCount"] == 3
        assert tags_of(elb, group["TargetGroupArn"])["team"] == "shop"

        # Cluster traffic policy: the same target group, its health check modified.
        cluster_policy = service(uid=svc.metadata.uid, annotations=dict(svc.metadata.annotations))
        await lb.ensure_load_balancer(CLUSTER, cluster_policy, [])
        (group,) = groups(elb, made["LoadBalancerArn"]).values()
        assert group["HealthCheckProtocol"] == "TCP"

        # The scheme of an NLB cannot change: a clear error.
        public = service(uid=svc.metadata.uid)
        with pytest.raises(AwsError, match="scheme cannot change"):
            await lb.ensure_load_balancer(CLUSTER, public, [])
    finally:
        await lb.ensure_load_balancer_deleted(CLUSTER, svc)
        await cloud.aclose()


async def test_subnets_are_the_vpcs_tagged_for_the_cluster_without_subnet_ids(
    moto_server: MotoServer,
    ec2_proxy: Ec2Proxy,
    network: Network,
    credentials_file: Path,
    elb: Any,
) -> None:
    document: dict[str, Any] = {"subnetIds": []}
    cloud = make_provider(ec2_proxy, network, credentials_file, **document)
    lb = lb_of(cloud)
    svc = service()
    try:
        with pytest.raises(
            AwsError, match=r"no subnet in VPC .* is tagged kubernetes.io/cluster/demo"
        ):
            await lb.ensure_load_balancer(CLUSTER, svc, [])
        moto_server.tag_subnets(network, CLUSTER)
        await lb.ensure_load_balancer(CLUSTER, svc, [])
        zones = {z["SubnetId"] for z in nlb(elb, svc)["AvailabilityZones"]}
        assert zones == set(network.subnets.values())
    finally:
        await lb.ensure_load_balancer_deleted(CLUSTER, svc)
        await cloud.aclose()


async def test_the_inventory_lists_this_clusters_nlbs_with_their_services(
    network: Network, cloud: AwsProvider
) -> None:
    lb = lb_of(cloud)
    svc = service(name="listed")
    try:
        await lb.ensure_load_balancer(CLUSTER, svc, [])
        owned = [
            o for o in await lb.list_load_balancers(CLUSTER) if o.service_uid == svc.metadata.uid
        ]
        assert [(o.name, o.namespace, o.service_name) for o in owned] == [
            (nlb_name(svc), "shop", "listed")
        ]
        elsewhere = await lb.list_load_balancers("other")
        assert svc.metadata.uid not in {o.service_uid for o in elsewhere}
    finally:
        await lb.ensure_load_balancer_deleted(CLUSTER, svc)
    assert svc.metadata.uid not in {o.service_uid for o in await lb.list_load_balancers(CLUSTER)}
    await cloud.aclose()


@pytest.mark.parametrize("action", ["CreateTargetGroup", "CreateListener", "RegisterTargets"])
async def test_throttling_is_retried_without_leaks_or_duplicates(  # noqa: PLR0917
    action: str,
    moto_server: MotoServer,
    ec2_proxy: Ec2Proxy,
    network: Network,
    cloud: AwsProvider,
    elb: Any,
) -> None:
    instance = moto_server.run_instance(network, "us-east-1a")
    svc = service(((80, 30080, "TCP"), (443, 30443, "TCP")))
    lb = lb_of(cloud)
    fault = ec2_proxy.inject(action, "Throttling", "Rate exceeded", status=400)
    with pytest.raises(AwsThrottledError) as raised:
        await lb.ensure_load_balancer(CLUSTER, svc, [node_of(instance)])
    assert isinstance(raised.value, TransientCloudError)
    assert fault.request_ids[0] in str(raised.value)
    assert str(raised.value).startswith(f"ELBv2 {action} failed: Throttling")

    # Through the daemon's cloud-call boundary: retried, and it converges.
    ec2_proxy.inject(action, "Throttling", "Rate exceeded", status=400)
    calls = CloudCalls("aws", Metrics(), CloudCallPolicy(attempts=3))
    guarded = guard(cloud, calls).load_balancer()
    assert guarded is not None
    try:
        status = await guarded.ensure_load_balancer(CLUSTER, svc, [node_of(instance)])
        assert status.ingress
        lbs = [
            x
            for x in elb.describe_load_balancers()["LoadBalancers"]
            if x["LoadBalancerName"] == nlb_name(svc)
        ]
        assert len(lbs) == 1
        arn = lbs[0]["LoadBalancerArn"]
        assert len(groups(elb, arn)) == 2
        assert set(listeners(elb, arn)) == {80, 443}
        for group in groups(elb, arn).values():
            assert targets(elb, group["TargetGroupArn"]) == {instance.id}
    finally:
        await lb.ensure_load_balancer_deleted(CLUSTER, svc)
    assert tagged_for(elb, svc) == []
    await cloud.aclose()


# -- routes -----------------------------------------------------------------------------


async def test_routes_round_trip_and_a_terminated_instance_is_a_blackhole(
    moto_server: MotoServer, ec2_proxy: Ec2Proxy, network: Network, cloud: AwsProvider
) -> None:
    table_id = moto_server.route_table(network, cluster=CLUSTER)
    first = moto_server.run_instance(network, "us-east-1a")
    second = moto_server.run_instance(network, "us-east-1b")
    routes = routes_of(cloud)
    try:
        assert await routes.list_routes(CLUSTER) == []
        for instance, cidr in ((first, "10.244.1.0/24"), (second, "10.244.2.0/24")):
            await routes.create_route(
                CLUSTER, "uid", Route(target_node=instance.private_dns_name, destination_cidr=cidr)
            )
        listed = sorted(await routes.list_routes(CLUSTER), key=lambda r: r.destination_cidr)
        assert [(r.target_node, r.destination_cidr, r.blackhole) for r in listed] == [
            (first.private_dns_name, "10.244.1.0/24", False),
            (second.private_dns_name, "10.244.2.0/24", False),
        ]
        described = moto_server.client().describe_route_tables(RouteTableIds=[table_id])
        made = {
            r["DestinationCidrBlock"]: r.get("InstanceId")
            for r in described["RouteTables"][0]["Routes"]
        }
        assert made["10.244.1.0/24"] == first.id
        assert await routes.list_routes("other") == []

        moto_server.terminate_instances(second)
        cloud.lookups.forget()
        gone = [r for r in await routes.list_routes(CLUSTER) if r.blackhole]
        assert [r.destination_cidr for r in gone] == ["10.244.2.0/24"]

        for route in listed:
            await routes.delete_route(CLUSTER, route)
        assert await routes.list_routes(CLUSTER) == []
        await routes.delete_route(CLUSTER, listed[0])  # already gone: fine
    finally:
        await cloud.aclose()


async def test_a_route_to_an_unknown_node_or_without_a_table_says_what_to_do(
    moto_server: MotoServer, network: Network, cloud: AwsProvider
) -> None:
    routes = routes_of(cloud)
    with pytest.raises(
        AwsError, match=r"no route table of VPC .* is tagged kubernetes.io/cluster/demo"
    ):
        await routes.create_route(
            CLUSTER,
            "uid",
            Route(target_node="ip-10-9-9-9.ec2.internal", destination_cidr="10.244.9.0/24"),
        )
    moto_server.route_table(network, cluster=CLUSTER)
    moto_server.run_instance(network, "us-east-1a")  # the credentials see the cluster
    with pytest.raises(AwsError, match="no EC2 instance"):
        await routes.create_route(
            CLUSTER,
            "uid",
            Route(target_node="ip-10-9-9-9.ec2.internal", destination_cidr="10.244.9.0/24"),
        )
    await cloud.aclose()


def test_a_route_ec2_calls_blackhole_is_listed_as_one() -> None:
    instance = ApiInstance(
        id="i-0123456789abcdef0",
        zone="us-east-1a",
        instance_type="m5.large",
        state="running",
        vpc_id="vpc-1",
        private_dns_name="ip-10-0-0-1.ec2.internal",
        public_dns_name="",
        addresses=(),
    )
    route = {
        "DestinationCidrBlock": "10.244.3.0/24",
        "InstanceId": instance.id,
        "State": "blackhole",
    }
    listed = listed_route(route, {instance.id: instance})
    assert listed is not None
    assert (listed.target_node, listed.blackhole) == ("ip-10-0-0-1.ec2.internal", True)
    unknown = listed_route({**route, "State": "active"}, {})
    assert unknown is not None
    assert (unknown.target_node, unknown.blackhole) == (instance.id, True)
    assert listed_route({"DestinationCidrBlock": "0.0.0.0/0", "GatewayId": "igw-1"}, {}) is None


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"subnetIds": ["sub-1"]}, "`subnetIds` has 'sub-1', not a subnet ID"),
        ({"routeTableId": "rt-1"}, "`routeTableId` 'rt-1' is not a route table ID"),
        ({"elbEndpoint": "localhost:5000"}, "`elbEndpoint` 'localhost:5000' is not an http"),
    ],
)
def test_the_load_balancer_and_route_keys_of_the_cloud_config_are_checked(
    extra: dict[str, Any], message: str
) -> None:
    with pytest.raises(AwsConfigError, match=re.escape(message)):
        load_config(yaml.safe_dump({"region": REGION, **extra}))
    config = load_config(
        yaml.safe_dump(
            {
                "region": REGION,
                "subnetIds": ["subnet-0a1b2c3d4e5f67890"],
                "routeTableId": "rtb-0a1b2c3d4e5f67890",
                "elbEndpoint": "http://127.0.0.1:5000/",
            }
        )
    )
    assert config.subnet_ids == ("subnet-0a1b2c3d4e5f67890",)
    assert config.route_table_id == "rtb-0a1b2c3d4e5f67890"
    assert config.elb_endpoint == "http://127.0.0.1:5000"
