"""The aws provider in the daemon, on the real apiserver and moto's EC2 (a server on
loopback checking credentials, behind a proxy that counts the daemon's EC2 calls):
Nodes named after instances' private DNS names initialised in one batch, an instance
stopped (the shutdown taint) and terminated (the Node deleted), a daemon with
rejected credentials that refuses to start, naming them; and a LoadBalancer Service's
NLB and the Nodes' pod routes (moto's ELBv2 behind the same proxy).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kube_ccm.providers.aws.moto import Ec2Instance, Ec2Proxy, MotoServer, Network
from kube_ccm.runtime.client import ApiError, KubeClient
from kube_ccm.testing.daemon import DaemonProcess
from kube_ccm.testing.manifests import (
    UNINITIALIZED_TAINT,
    create_node,
    find_node,
    set_node_ready,
    taint_keys,
)
from kube_ccm.testing.pytest_plugin import Cleanup
from kube_ccm.testing.waiting import eventually

log = logging.getLogger(__name__)

SHUTDOWN_KEY = "node.cloudprovider.kubernetes.io/shutdown"
FINALIZER = "service.kubernetes.io/load-balancer-cleanup"
NODES = 4
FAST = (
    "--leader-elect=false",
    "--controllers=cloud-node,cloud-node-lifecycle",
    f"--concurrent-node-syncs={NODES}",
    "--node-monitor-period=500ms",
    "--node-status-update-frequency=5m",
    "--cloud-call-timeout=5s",
)
# No credentials, config or instance metadata from the machine running the tests.
AWS_ENV = {
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_CONFIG_FILE": "/nonexistent/aws-config",
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/aws-credentials",
}


def cloud_config(tmp_path: Path, endpoint: str, network: Network, credentials: str) -> Path:
    keys = tmp_path / "aws-credentials"
    keys.write_text(credentials)
    path = tmp_path / "aws.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "region": network.region,
                "vpcId": network.vpc_id,
                "clusterName": "demo",
                "endpoint": endpoint,
                "credentials": {"file": str(keys)},
            }
        )
    )
    return path


def daemon(kubeconfig: Path, workdir: Path, config: Path) -> DaemonProcess:
    return DaemonProcess(
        kubeconfig=kubeconfig,
        workdir=workdir,
        provider="aws",
        cloud_config_file=config,
        args=list(FAST),
        env=AWS_ENV,
    )


@pytest.fixture
def network(moto_server: MotoServer) -> Network:
    return moto_server.network(("us-east-1a", "us-east-1b"))


@pytest.fixture
def ccm(
    ccm_kubeconfig: Path,
    moto_server: MotoServer,
    ec2_proxy: Ec2Proxy,
    network: Network,
    tmp_path: Path,
) -> Iterator[DaemonProcess]:
    config = cloud_config(tmp_path, ec2_proxy.url, network, moto_server.keys.shared_credentials())
    process = daemon(ccm_kubeconfig, tmp_path / "daemon", config).start()
    yield process
    process.stop()


async def test_instances_drive_their_nodes(  # noqa: PLR0917 (fixtures)
    ccm: DaemonProcess,
    moto_server: MotoServer,
    ec2_proxy: Ec2Proxy,
    network: Network,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
) -> None:
    instances = [
        moto_server.run_instance(
            network, ("us-east-1a", "us-east-1b")[i % 2], instance_type="m5.large", public_ip=i == 0
        )
        for i in range(NODES)
    ]
    first = instances[0]
    public = moto_server.describe(first)
    # Kubelets register their Nodes (named after the private DNS names) at about once.
    await asyncio.gather(
        *(create_node(kube_client, kube_cleanup, i.private_dns_name) for i in instances)
    )

    async def all_initialised() -> bool:
        nodes = [await find_node(kube_client, i.private_dns_name) for i in instances]
        return all(n is not None and UNINITIALIZED_TAINT["key"] not in taint_keys(n) for n in nodes)

    await eventually(all_initialised, within=60, what="the Nodes initialised from EC2")
    describes = ec2_proxy.count("DescribeInstances")
    log.warning(
        "EC2 calls to initialise %d Nodes: %s (%.2f DescribeInstances per Node)",
        NODES,
        dict(ec2_proxy.calls),
        describes / NODES,
    )
    assert describes <= NODES // 2, dict(ec2_proxy.calls)  # batched, not one per Node

    obj = await find_node(kube_client, first.private_dns_name)
    assert obj is not None
    labels = obj["metadata"]["labels"]
    assert obj["spec"]["providerID"] == f"aws:///us-east-1a/{first.id}"
    assert labels["node.kubernetes.io/instance-type"] == "m5.large"
    assert labels["topology.kubernetes.io/zone"] == "us-east-1a"
    assert labels["topology.kubernetes.io/region"] == "us-east-1"

    async def addressed() -> bool:
        current = await find_node(kube_client, first.private_dns_name)
        return bool((current or {}).get("status", {}).get("addresses"))

    await eventually(addressed, within=30, what="the Node's addresses")
    obj = await find_node(kube_client, first.private_dns_name)
    assert obj is not None
    assert [(a["type"], a["address"]) for a in obj["status"]["addresses"]] == [
        ("InternalIP", first.private_ip),
        ("ExternalIP", public["PublicIpAddress"]),
        ("InternalDNS", first.private_dns_name),
        ("ExternalDNS", public["PublicDnsName"]),
    ]

    # Stopped, the kubelet gone quiet: the shutdown taint.
    await set_node_ready(kube_client, first.private_dns_name, "Unknown")
    moto_server.stop_instances(first)

    async def shutdown_tainted() -> bool:
        return SHUTDOWN_KEY in taint_keys(await find_node(kube_client, first.private_dns_name))

    await eventually(shutdown_tainted, within=30, what="the shutdown taint on a stopped instance")

    # Terminated: the Node goes; the others (Ready unknown too, but running) stay.
    await set_node_ready(kube_client, instances[1].private_dns_name, "Unknown")
    moto_server.terminate_instances(first)

    async def deleted() -> bool:
        return await find_node(kube_client, first.private_dns_name) is None

    await eventually(deleted, within=30, what="the Node of a terminated instance deleted")
    assert await find_node(kube_client, instances[1].private_dns_name) is not None


async def test_rejected_credentials_stop_the_daemon_naming_them(
    ccm_kubeconfig: Path, moto_server: MotoServer, network: Network, tmp_path: Path
) -> None:
    wrong = moto_server.keys.shared_credentials().replace(
        moto_server.keys.secret_access_key, "s3cr3t-not-valid"
    )
    config = cloud_config(tmp_path, moto_server.url, network, wrong)
    process = daemon(ccm_kubeconfig, tmp_path / "daemon", config).start()
    try:
        status = await asyncio.to_thread(process.wait, 60)
    finally:
        process.stop()
    output = process.log()
    assert status == 1, output[-3000:]
    assert "AuthFailure" in output
    assert f'AWS rejected the credentials from file "{tmp_path / "aws-credentials"}"' in output
    assert "s3cr3t-not-valid" not in output  # the secret is never shown
    assert "Traceback" not in output  # one clear line, as any start-up error
    assert "the cloud provider could not start: " in output


async def test_a_load_balancer_service_gets_an_nlb_and_nodes_get_routes(  # noqa: PLR0917 (fixtures)
    ccm_kubeconfig: Path,
    moto_server: MotoServer,
    ec2_proxy: Ec2Proxy,
    network: Network,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    kube_namespace: str,
    tmp_path: Path,
) -> None:
    """``--controllers=cloud-node,service,route``: a LoadBalancer Service gets its NLB
    (ingress hostname = its DNS name, the Nodes' instances as targets) and the cleanup
    finalizer; deleted, it leaves nothing tagged; each pod CIDR gets a route to its
    Node's instance in the cluster's route table."""
    table_id = moto_server.route_table(network, cluster="demo")
    instances = [moto_server.run_instance(network, zone) for zone in ("us-east-1a", "us-east-1b")]
    config = cloud_config(tmp_path, ec2_proxy.url, network, moto_server.keys.shared_credentials())
    document = yaml.safe_load(config.read_text())
    document.update(elbEndpoint=ec2_proxy.url, subnetIds=list(network.subnets.values()))
    config.write_text(yaml.safe_dump(document))
    process = DaemonProcess(
        kubeconfig=ccm_kubeconfig,
        workdir=tmp_path / "daemon",
        provider="aws",
        cloud_config_file=config,
        args=[
            "--leader-elect=false",
            "--controllers=cloud-node,service,route",
            "--cluster-name=demo",
            "--cluster-cidr=10.244.0.0/16",
            "--route-reconciliation-period=500ms",
            "--node-status-update-frequency=5m",
            "--cloud-call-timeout=5s",
        ],
        env=AWS_ENV,
    ).start()
    elb = moto_server.service_client("elbv2")
    cidrs: dict[str, str] = {}

    async def add_node(instance: Ec2Instance, cidr: str) -> None:
        """The instance's Node registered by its kubelet, Ready, with the pod CIDR ``cidr``."""
        name = instance.private_dns_name
        cidrs[name] = cidr
        await create_node(
            kube_client,
            kube_cleanup,
            name,
            providerID=instance.provider_id,
            podCIDR=cidr,
            podCIDRs=[cidr],
        )
        await set_node_ready(kube_client, name, "True")

    try:
        for index, instance in enumerate(instances):
            await add_node(instance, f"10.244.{100 + index}.0/24")
        base = f"/api/v1/namespaces/{kube_namespace}/services"
        created = await kube_client.create(
            base,
            {
                "metadata": {"name": "web"},
                "spec": {"type": "LoadBalancer", "ports": [{"port": 80, "targetPort": 8080}]},
            },
        )
        uid = created["metadata"]["uid"]
        nlb_name = f"k8s-{uid.replace('-', '')[:28]}"

        async def ingress() -> str:
            svc = await kube_client.get(f"{base}/web")
            found = svc.get("status", {}).get("loadBalancer", {}).get("ingress") or [{}]
            return str(found[0].get("hostname", ""))

        async def has_ingress() -> bool:
            return bool(await ingress())

        await eventually(has_ingress, within=60, what="the Service's NLB hostname")
        [made] = elb.describe_load_balancers(Names=[nlb_name])["LoadBalancers"]
        assert await ingress() == made["DNSName"]
        svc = await kube_client.get(f"{base}/web")
        assert FINALIZER in svc["metadata"]["finalizers"]
        [listener] = elb.describe_listeners(LoadBalancerArn=made["LoadBalancerArn"])["Listeners"]
        group_arn = listener["DefaultActions"][0]["TargetGroupArn"]

        def targets() -> set[str]:
            health = elb.describe_target_health(TargetGroupArn=group_arn)
            return {d["Target"]["Id"] for d in health["TargetHealthDescriptions"]}

        await eventually(
            lambda: targets() == {i.id for i in instances}, within=30, what="both Nodes as targets"
        )

        # A port added: one new listener (and its group); the first listener untouched.
        before = ec2_proxy.calls.copy()
        await kube_client.patch(
            f"{base}/web",
            {
                "spec": {
                    "ports": [
                        {"name": "http", "port": 80, "targetPort": 8080},
                        {"name": "tls", "port": 443},
                    ]
                }
            },
        )

        def listeners() -> list[dict[str, Any]]:
            found = elb.describe_listeners(LoadBalancerArn=made["LoadBalancerArn"])["Listeners"]
            return sorted(found, key=lambda item: item["Port"])

        await eventually(lambda: len(listeners()) == 2, within=30, what="a listener for 443")
        first, second = listeners()
        assert (first["Port"], second["Port"]) == (80, 443)
        assert first["ListenerArn"] == listener["ListenerArn"]
        assert first["DefaultActions"][0]["TargetGroupArn"] == group_arn
        changed = ec2_proxy.calls - before
        assert changed["CreateListener"] == 1, changed
        assert changed["DeleteListener"] == 0, changed
        assert changed["CreateLoadBalancer"] == 0, changed

        # A Node added: its instance registered as a target; no listener changes.
        extra = moto_server.run_instance(network, "us-east-1a")
        before = ec2_proxy.calls.copy()
        await add_node(extra, "10.244.102.0/24")
        instances.append(extra)
        await eventually(
            lambda: targets() == {i.id for i in instances}, within=30, what="the new Node a target"
        )
        changed = ec2_proxy.calls - before
        assert changed["RegisterTargets"] >= 1, changed
        for untouched in (
            "CreateListener",
            "DeleteListener",
            "ModifyListener",
            "CreateLoadBalancer",
        ):
            assert changed[untouched] == 0, changed

        def routes() -> dict[str, str]:
            table = moto_server.client().describe_route_tables(RouteTableIds=[table_id])
            return {
                r["DestinationCidrBlock"]: r["InstanceId"]
                for r in table["RouteTables"][0]["Routes"]
                if r.get("InstanceId")
            }

        wanted = {cidrs[i.private_dns_name]: i.id for i in instances}
        await eventually(lambda: routes() == wanted, within=30, what="a route per pod CIDR")

        await kube_client.delete(f"{base}/web")

        async def gone() -> bool:
            try:
                await kube_client.get(f"{base}/web")
            except ApiError as exc:
                return exc.not_found
            return False

        await eventually(gone, within=60, what="the Service deleted after its NLB")
        arns = [lb["LoadBalancerArn"] for lb in elb.describe_load_balancers()["LoadBalancers"]]
        arns += [g["TargetGroupArn"] for g in elb.describe_target_groups()["TargetGroups"]]
        tagged = [
            d["ResourceArn"]
            for start in range(0, len(arns), 20)
            for d in elb.describe_tags(ResourceArns=arns[start : start + 20])["TagDescriptions"]
            if {"Key": "kube-ccm.io/service-uid", "Value": uid} in d["Tags"]
        ]
        assert tagged == []
        log.warning("ELBv2 and EC2 calls of the daemon: %s", dict(ec2_proxy.calls))
    finally:
        assert process.stop() == 0, process.log()[-3000:]


async def test_keys_of_another_account_delete_no_node_and_name_the_account(  # noqa: PLR0917 (fixtures)
    ccm_kubeconfig: Path,
    moto_server: MotoServer,
    ec2_proxy: Ec2Proxy,
    network: Network,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    tmp_path: Path,
) -> None:
    """Issue 42: keys of another account find none of the cluster's instances (every
    ID unknown). With three Nodes NotReady, none is deleted and the log names the
    account and region to check; the right keys back, nothing is deleted; one instance
    terminated then, its Node goes (and only it)."""
    instances = [moto_server.run_instance(network, ZONE) for ZONE in ("us-east-1a",) * 3]
    config = cloud_config(tmp_path, ec2_proxy.url, network, moto_server.keys.shared_credentials())
    document = yaml.safe_load(config.read_text())
    document["stsEndpoint"] = ec2_proxy.url
    config.write_text(yaml.safe_dump(document))
    keys_file = tmp_path / "aws-credentials"
    process = daemon(ccm_kubeconfig, tmp_path / "daemon", config).start()
    try:
        names = [i.private_dns_name for i in instances]
        for instance in instances:
            await create_node(
                kube_client,
                kube_cleanup,
                instance.private_dns_name,
                providerID=instance.provider_id,
            )
        for name in names:
            await set_node_ready(kube_client, name, "Unknown")

        async def started() -> bool:
            return "EC2 in us-east-1 answers" in process.log()

        await eventually(started, within=60, what="the daemon started with the right keys")
        keys_file.write_text(moto_server.other_keys.shared_credentials())
        hint = "(they are of account 222222222222) and that `region` (us-east-1)"

        async def said() -> bool:
            return process.log().count(hint) >= len(names)

        await eventually(said, within=60, what="the other account named in the log")
        for name in names:
            assert await find_node(kube_client, name) is not None, f"{name} deleted"

        keys_file.write_text(moto_server.keys.shared_credentials())
        moto_server.terminate_instances(instances[0])

        async def deleted() -> bool:
            return await find_node(kube_client, names[0]) is None

        await eventually(deleted, within=60, what="the terminated instance's Node deleted")
        for name in names[1:]:
            assert await find_node(kube_client, name) is not None, f"{name} deleted"
    finally:
        process.stop()
