"""Cloud API calls per Network Load Balancer, and provisioning time, for the aws provider.

    .venv/bin/python benchmarks/aws_load_balancers.py [--services 200] [--workers 16]
        [--nodes 3] [--ports 1] [--sample 10] [--markdown FILE]

Against one moto server (:class:`kube_ccm.providers.aws.moto.MotoServer`, a subprocess on
loopback checking credentials) behind :class:`~kube_ccm.providers.aws.moto.Ec2Proxy`,
which counts every EC2 and ELBv2 request by action. The provider is called
directly, as the service controller calls it (``maxConcurrentCalls`` = workers):

1. **calls per load balancer**: ``--sample`` Services of ``--ports`` ports, one at a
   time: created (``ensure_load_balancer`` on ``--nodes`` Nodes), synced again
   unchanged, updated after a Node is added (``update_load_balancer``), deleted;
   the calls of each step divided by the Services, with and without ``subnetIds``
   (then the subnets are found by their cluster tag: one ``DescribeSubnets`` more);
2. **provisioning**: ``--services`` Services created by ``--workers`` concurrent
   workers (the daemon's ``--concurrent-service-syncs``), then deleted the same way:
   wall time, Services/s, per-Service latency p50/p99, and the calls made.

moto's CPU per call (tens of ms) bounds the rate, so the times say how kube-ccm
behaves under concurrency more than how fast AWS is. Nothing is asserted: the
numbers go into docs/aws.md.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from kube_ccm.api.objects import Node, NodeSpec, ObjectMeta, Service, ServicePort, ServiceSpec
from kube_ccm.providers.aws import AwsProvider, factory
from kube_ccm.providers.aws.loadbalancer import AwsLoadBalancer
from kube_ccm.providers.aws.moto import Ec2Proxy, MotoServer, Network

CLUSTER = "demo"
ZONES = ("us-east-1a", "us-east-1b")


def service(ports: int) -> Service:
    return Service(
        metadata=ObjectMeta(
            name=f"svc-{uuid.uuid4().hex[:8]}", namespace="bench", uid=str(uuid.uuid4())
        ),
        spec=ServiceSpec(
            type="LoadBalancer",
            ports=tuple(
                ServicePort(name=f"p{i}", port=80 + i, node_port=30080 + i, protocol="TCP")
                for i in range(ports)
            ),
            external_traffic_policy="Cluster",
        ),
    )


def provider(
    proxy: Ec2Proxy,
    server: MotoServer,
    network: Network,
    workdir: Path,
    *,
    workers: int,
    subnets: bool,
) -> AwsProvider:
    keys = workdir / "credentials"
    keys.write_text(server.keys.shared_credentials())
    document: dict[str, Any] = {
        "region": network.region,
        "vpcId": network.vpc_id,
        "clusterName": CLUSTER,
        "endpoint": proxy.url,
        "elbEndpoint": proxy.url,
        "credentials": {"file": str(keys)},
        "maxConcurrentCalls": workers,
    }
    if subnets:
        document["subnetIds"] = list(network.subnets.values())
    return factory(yaml.safe_dump(document).encode())


def lb_of(cloud: AwsProvider) -> AwsLoadBalancer:
    found = cloud.load_balancer()
    assert isinstance(found, AwsLoadBalancer)
    return found


async def per_load_balancer(
    proxy: Ec2Proxy, cloud: AwsProvider, nodes: list[Node], extra: Node, args: argparse.Namespace
) -> dict[str, dict[str, float]]:
    lb = lb_of(cloud)
    services = [service(args.ports) for _ in range(args.sample)]
    steps: dict[str, Counter[str]] = {}

    async def step(name: str, call: Any) -> None:
        proxy.reset()
        for svc in services:
            await call(svc)
        steps[name] = Counter(proxy.calls)

    await step("create", lambda s: lb.ensure_load_balancer(CLUSTER, s, nodes))
    await step("sync, unchanged", lambda s: lb.ensure_load_balancer(CLUSTER, s, nodes))
    await step("a Node added", lambda s: lb.update_load_balancer(CLUSTER, s, [*nodes, extra]))
    await step("delete", lambda s: lb.ensure_load_balancer_deleted(CLUSTER, s))
    return {
        name: {action: n / len(services) for action, n in sorted(calls.items())}
        for name, calls in steps.items()
    }


async def provisioning(
    proxy: Ec2Proxy, cloud: AwsProvider, nodes: list[Node], args: argparse.Namespace
) -> dict[str, Any]:
    lb = lb_of(cloud)
    services = [service(args.ports) for _ in range(args.services)]
    result: dict[str, Any] = {"services": args.services, "workers": args.workers}
    for phase in ("create", "delete"):
        queue: asyncio.Queue[Service] = asyncio.Queue()
        for svc in services:
            queue.put_nowait(svc)
        latencies: list[float] = []
        failures = 0

        async def worker(phase: str, queue: asyncio.Queue[Service], latencies: list[float]) -> None:
            nonlocal failures
            while not queue.empty():
                svc = queue.get_nowait()
                started = time.perf_counter()
                try:
                    if phase == "create":
                        await lb.ensure_load_balancer(CLUSTER, svc, nodes)
                    else:
                        await lb.ensure_load_balancer_deleted(CLUSTER, svc)
                except Exception as exc:
                    failures += 1
                    print(f"{phase} failed: {exc}", file=sys.stderr)
                latencies.append(time.perf_counter() - started)

        proxy.reset()
        started = time.perf_counter()
        await asyncio.gather(*(worker(phase, queue, latencies) for _ in range(args.workers)))
        wall = time.perf_counter() - started
        latencies.sort()
        result[phase] = {
            "wall_s": round(wall, 2),
            "per_s": round(len(services) / wall, 1),
            "p50_s": round(statistics.median(latencies), 3),
            "p99_s": round(latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))], 3),
            "calls": sum(proxy.calls.values()),
            "failures": failures,
        }
    return result


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with MotoServer() as server, tempfile.TemporaryDirectory() as tmp:
        network = server.network(ZONES)
        server.tag_subnets(network, CLUSTER)
        instances = [server.run_instance(network, ZONES[i % 2]) for i in range(args.nodes + 1)]
        nodes = [
            Node(
                metadata=ObjectMeta(name=i.private_dns_name),
                spec=NodeSpec(provider_id=i.provider_id),
            )
            for i in instances
        ]
        report: dict[str, Any] = {"nodes": args.nodes, "ports": args.ports}
        async with Ec2Proxy(server.url) as proxy:
            for subnets in (True, False):
                cloud = provider(
                    proxy, server, network, Path(tmp), workers=args.workers, subnets=subnets
                )
                try:
                    key = "subnetIds" if subnets else "subnets by tag"
                    report[key] = await per_load_balancer(proxy, cloud, nodes[:-1], nodes[-1], args)
                    if subnets:
                        report["provisioning"] = await provisioning(proxy, cloud, nodes[:-1], args)
                finally:
                    await cloud.aclose()
        return report


def markdown(report: dict[str, Any]) -> str:
    lines = [
        f"Services of {report['ports']} port(s), {report['nodes']} Nodes "
        "(calls per Service, EC2 and ELBv2):",
        "",
        "| step | calls | of which |",
        "| --- | --- | --- |",
    ]
    for name, calls in report["subnetIds"].items():
        detail = ", ".join(f"{a} {n:g}" for a, n in calls.items())
        lines.append(f"| {name} | {sum(calls.values()):g} | {detail} |")
    create = report["subnets by tag"]["create"]
    lines += [
        "",
        f"Without `subnetIds`, a create is {sum(create.values()):g} calls "
        "(`DescribeSubnets` once more).",
        "",
    ]
    p = report["provisioning"]
    lines += [
        f"{p['services']} Services, {p['workers']} workers:",
        "",
        "| | wall | Services/s | p50 | p99 | calls | failures |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for phase in ("create", "delete"):
        r = p[phase]
        lines.append(
            f"| {phase} | {r['wall_s']} s | {r['per_s']} | {r['p50_s']} s | {r['p99_s']} s | "
            f"{r['calls']} | {r['failures']} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--services", type=int, default=200)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--ports", type=int, default=1)
    parser.add_argument("--sample", type=int, default=10)
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    report = asyncio.run(run(args))
    print(yaml.safe_dump(report, sort_keys=False))
    text = markdown(report)
    print(text)
    if args.markdown:
        with args.markdown.open("a") as out:
            out.write(text)


if __name__ == "__main__":
    main()
