"""DigitalOcean API requests the digitalocean provider (providers-out-of-tree/
digitalocean) makes per Node and per load-balancer sync, and a modelled hour of a
cluster against the 5,000 requests an hour a token is allowed (issue 27).

    PYTHONPATH=.:providers-out-of-tree/digitalocean .venv/bin/python \\
        benchmarks/digitalocean_calls.py [--nodes 200] [--services 50] \\
        [--replacements 10] [--service-changes 20] [--new-services 5]

The provider (default cloud-config: ``dropletCacheTTL: 30s``, ``activeRetry: 15s``)
runs against the fake DigitalOcean API (``kube_ccm_digitalocean.testing.fakedo``, on
loopback in this process), which counts every request. Each operation is called as
the controllers call it, a pass's Nodes all at once (a wave):

* Node **init**: ``instance_metadata`` of each new Node by name (no providerID), a
  wave of ``--nodes`` at cluster start, then one Node alone (a replacement);
* Node **refresh**: ``instance_metadata`` of each Node by providerID (the node
  controller's address refresh, every 5 minutes), once the cache is stale;
* **lifecycle**: ``instance_exists`` and ``instance_shutdown`` of a NotReady Node (every
  ``--node-monitor-period``, 5 s), with the cache fresh and stale;
* load balancer **create** (``status: new``, then active), **resync** (ensure,
  unchanged), **Node change** (``update_load_balancer`` with one droplet more or
  less), **Service change** (ensure with an annotation changed), **delete**.

The modelled hour then adds them up for ``--nodes`` Nodes and ``--services``
``type: LoadBalancer`` Services: 12 refresh waves, the lifecycle checks of the
replaced Nodes while NotReady (a minute each), ``--replacements`` Nodes replaced
(a Node removed and one added: every load balancer updated twice),
``--service-changes`` annotation changes and ``--new-services`` Services created and
as many deleted (each new load balancer ``new`` for a minute, looked at every 15 s).
Nothing is asserted; the figures go into docs/providers.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from kube_ccm_digitalocean.annotations import BASE
from kube_ccm_digitalocean.provider import DigitalOceanCloud, factory
from kube_ccm_digitalocean.testing import FakeDigitalOcean, node, service, write_config

from kube_ccm.cloudprovider import LoadBalancer, Node, RetryError

LIMIT = 5000


async def counted(fake: FakeDigitalOcean, work: Callable[[], Awaitable[Any]]) -> int:
    fake.reset_calls()
    with contextlib.suppress(RetryError):  # a load balancer still new
        await work()
    return sum(fake.calls.values())


def lb(cloud: DigitalOceanCloud) -> LoadBalancer:
    balancer = cloud.load_balancer()
    assert balancer is not None
    return balancer


async def measure(args: argparse.Namespace, workdir: Path) -> dict[str, float]:
    found: dict[str, float] = {}
    with FakeDigitalOcean(activation_delay=0.05) as fake:
        droplets = [fake.add_droplet(f"node-{n}") for n in range(args.nodes)]
        cloud = factory(write_config(fake, workdir).read_bytes())
        v2 = cloud.instances_v2()
        assert v2 is not None
        by_name = [node(d["name"]) for d in droplets]
        by_id = [node(d["name"], f"digitalocean://{d['id']}") for d in droplets]

        async def wave(nodes: list[Node], call: Callable[[Node], Awaitable[Any]]) -> None:
            await asyncio.gather(*(call(n) for n in nodes))

        found["init wave (all Nodes)"] = await counted(
            fake, lambda: wave(by_name, v2.instance_metadata)
        )
        newcomer = fake.add_droplet("node-new")
        found["init (one new Node)"] = await counted(
            fake, lambda: v2.instance_metadata(node("node-new"))
        )
        cloud.droplet_cache.forget()
        found["refresh wave (all Nodes)"] = await counted(
            fake, lambda: wave(by_id, v2.instance_metadata)
        )

        async def lifecycle() -> None:
            await v2.instance_exists(by_id[0])
            await v2.instance_shutdown(by_id[0])

        found["lifecycle check (cache fresh)"] = await counted(fake, lifecycle)
        cloud.droplet_cache.forget()
        found["lifecycle check (cache stale)"] = await counted(fake, lifecycle)

        backends = by_id[: args.nodes]
        svc = service("web", uid="0d1e2f30-0000-4000-8000-000000000001")
        found["LB create (POST, answered new)"] = await counted(
            fake, lambda: lb(cloud).ensure_load_balancer("kubernetes", svc, backends)
        )
        found["LB look while new (retry)"] = await counted(
            fake, lambda: lb(cloud).ensure_load_balancer("kubernetes", svc, backends)
        )
        await asyncio.sleep(0.06)
        found["LB ensure once active"] = await counted(
            fake, lambda: lb(cloud).ensure_load_balancer("kubernetes", svc, backends)
        )
        found["LB resync (unchanged)"] = await counted(
            fake, lambda: lb(cloud).ensure_load_balancer("kubernetes", svc, backends)
        )
        grown = [*backends, node("node-new", f"digitalocean://{newcomer['id']}")]
        found["LB Node change"] = await counted(
            fake, lambda: lb(cloud).update_load_balancer("kubernetes", svc, grown)
        )
        found["LB Node change (no droplet changes)"] = await counted(
            fake, lambda: lb(cloud).update_load_balancer("kubernetes", svc, grown)
        )
        changed = service(
            "web",
            uid="0d1e2f30-0000-4000-8000-000000000001",
            annotations={BASE + "algorithm": "least_connections"},
        )
        found["LB Service change"] = await counted(
            fake, lambda: lb(cloud).ensure_load_balancer("kubernetes", changed, grown)
        )
        found["LB delete"] = await counted(
            fake, lambda: lb(cloud).ensure_load_balancer_deleted("kubernetes", changed)
        )
        await cloud.aclose()
    return found


def model(args: argparse.Namespace, per: dict[str, float]) -> list[tuple[str, float]]:
    retries_while_new = 60 / 15  # a load balancer new for a minute, looked at every 15 s
    lifecycle_lists = 60 / 30  # a replaced Node NotReady for a minute, cache TTL 30 s
    return [
        ("refresh: 12 waves", 12 * per["refresh wave (all Nodes)"]),
        (
            f"lifecycle: {args.replacements} NotReady Nodes x 1 min",
            args.replacements * lifecycle_lists * per["lifecycle check (cache stale)"],
        ),
        (
            f"Node replacements: {args.replacements} x (init + "
            f"{args.services} LBs x (removal + addition))",
            args.replacements
            * (per["init (one new Node)"] + 2 * args.services * per["LB Node change"]),
        ),
        (
            f"Service changes: {args.service_changes}",
            args.service_changes * per["LB Service change"],
        ),
        (
            f"new Services: {args.new_services} (create, 1 min new, active)",
            args.new_services
            * (
                per["LB create (POST, answered new)"]
                + retries_while_new * per["LB look while new (retry)"]
                + per["LB ensure once active"]
            ),
        ),
        (f"deleted Services: {args.new_services}", args.new_services * per["LB delete"]),
    ]


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--services", type=int, default=50)
    parser.add_argument("--replacements", type=int, default=10)
    parser.add_argument("--service-changes", type=int, default=20)
    parser.add_argument("--new-services", type=int, default=5)
    args = parser.parse_args()
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as workdir:
        per = await measure(args, Path(workdir))
    print(f"Requests per operation ({args.nodes} droplets), measured at the fake:")
    for name, calls in per.items():
        print(f"  {name:<40} {calls:>5.0f}")
    print(f"\nA modelled hour: {args.nodes} Nodes, {args.services} LoadBalancer Services")
    total = 0.0
    for name, calls in model(args, per):
        total += calls
        print(f"  {name:<70} {calls:>6.0f}")
    print(f"  {'total':<70} {total:>6.0f}  ({100 * total / LIMIT:.0f}% of {LIMIT:,}/hour)")
    print(f"\n(measured in {time.monotonic() - started:.1f} s)")


if __name__ == "__main__":
    asyncio.run(main())
