"""``kube-ccm gc``: find, and unless ``--dry-run`` delete, leaked load balancers.

One pass of :mod:`kube_ccm.controllers.lbgc` from the command line, for the cases
the daemon cannot see: Services deleted while no CCM ran, or without the cleanup
finalizer. It reads the Services with the kubeconfig (``--kubeconfig``, else
``$KUBECONFIG``, else ``~/.kube/config``, else in-cluster, as kubectl) and asks the provider
(``--cloud-provider``/``--cloud-config``, as for ``kube-ccm run``) for the load
balancers this cluster owns. Exit status: 0 when nothing is leaked or everything
leaked was deleted; 1 when leaks remain (``--dry-run``, or a failed delete) or the
check could not run.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import TextIO

from kube_ccm.api.objects import Service
from kube_ccm.cloudprovider import CloudConfigError, init_cloud_provider
from kube_ccm.controllers.lbgc import delete_leaks, find_leaks, inventory_of
from kube_ccm.runtime.client import KubeClient
from kube_ccm.runtime.clientbuilder import SimpleClientBuilder
from kube_ccm.runtime.kubeconfig import KubeConfigError, load_tool_config
from kube_ccm.runtime.resources import SERVICES, TypedClient

log = logging.getLogger(__name__)


async def _services(client: KubeClient) -> list[Service]:
    return list((await TypedClient(client).list(SERVICES)).items)


async def collect(
    *,
    cloud_provider: str,
    cloud_config: str | None,
    kubeconfig: str | None,
    cluster_name: str,
    dry_run: bool,
    out: TextIO = sys.stdout,
) -> int:
    try:
        cloud = init_cloud_provider(cloud_provider, cloud_config)
    except CloudConfigError as exc:
        print(f"error: the cloud provider could not be initialised: {exc}", file=sys.stderr)
        return 1
    if cloud is None:
        print(f"error: no cloud provider named {cloud_provider!r}", file=sys.stderr)
        return 1
    try:
        balancer, inventory = inventory_of(cloud)
        builder = SimpleClientBuilder(
            load_tool_config(kubeconfig), base_user_agent="kube-ccm-gc", qps=20, burst=30
        )
    except (ValueError, KubeConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    stop = asyncio.Event()
    try:
        await cloud.initialize(builder, stop)
        owned = await inventory.list_load_balancers(cluster_name)
        leaks = find_leaks(owned, await _services(builder.client("")))
        print(
            f"{len(owned)} load balancers owned by cluster {cluster_name!r}, {len(leaks)} leaked",
            file=out,
        )
        for leak in leaks:
            print(f"  {leak.name}: {leak.reason}", file=out)
        if dry_run or not leaks:
            if leaks:
                print("dry run: nothing deleted (run without --dry-run to delete)", file=out)
            return 1 if leaks else 0
        failed = 0
        for leak, error in await delete_leaks(balancer, cluster_name, leaks):
            if error is None:
                print(f"deleted {leak.name}", file=out)
            else:
                failed += 1
                print(f"could not delete {leak.name}: {error}", file=out)
        return 1 if failed else 0
    except Exception as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        stop.set()
        await builder.aclose()
        try:
            await cloud.aclose()
        except Exception as exc:
            print(f"warning: closing the cloud provider failed: {exc}", file=sys.stderr)
