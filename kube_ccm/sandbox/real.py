"""``kube-ccm sandbox --real-nodes N``: kube-ccm as users run it, from one command.

The cluster of :mod:`kube_ccm.testbed.cluster`: a real kube-apiserver and etcd,
kube-controller-manager (``--cloud-provider=external``) and kube-scheduler, and N real
kubelets, each on its own containerd (:mod:`kube_ccm.testbed.nodes`); the first
``min(N, 2)`` are labelled as the control plane. The image is built from this checkout's
Dockerfile (cached by its inputs) and imported into every containerd, and kube-ccm is
installed by the shipped Helm chart with ``min(N, 2)`` replicas and leader election.
Every node has an instance in a simulated cloud the pods share (a state file on a
hostPath).

Then the sandbox's story as far as it applies to real kubelets: the pods get ready,
the Nodes are initialised, ``--services`` LoadBalancer Services get addresses,
``--kill``/``--shutdown`` stop worker kubelets with their instances terminated or shut
down, a summary (cloud calls, and kube-ccm's API requests from the apiserver's audit
log of its ServiceAccount), and it keeps running until Ctrl-C or ``--duration``.
Whatever happens, every process is stopped and every host change undone on the way
out (:meth:`kube_ccm.testbed.nodes.RealNodes.stop`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TextIO, TypeVar

import yaml

from kube_ccm.api import wellknown as wk
from kube_ccm.api.helpers import has_taint
from kube_ccm.api.objects import Node
from kube_ccm.runtime.client import ApiError, KubeClient
from kube_ccm.runtime.resources import NODES
from kube_ccm.runtime.typedclient import TypedClient
from kube_ccm.sandbox.clouds import simulated_config
from kube_ccm.sandbox.options import CONTROL_PLANE_NODES
from kube_ccm.sandbox.progress import Stalled, provision_load_balancers, watch_progress
from kube_ccm.sandbox.servicelb import SERVICELB_CONFIG, serve_on_node_ips
from kube_ccm.sandbox.summary import Failures, audited_requests, summary

if TYPE_CHECKING:
    from kube_ccm.sandbox.options import SandboxOptions
    from kube_ccm.testbed.cluster import ChartCluster

__all__ = ["CONTROL_PLANE_NODES", "run_real_sandbox"]


_T = TypeVar("_T")


async def _blocking(fn: Callable[[], _T]) -> _T:
    """``fn()`` on a worker thread. Cancelled meanwhile (Ctrl-C, SIGTERM), it lets ``fn``
    finish before the cancellation goes on, so that what ``fn`` started is stopped by
    the clean-up rather than racing it."""
    future = asyncio.ensure_future(asyncio.to_thread(fn))
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await future
        raise


async def _step(step: Callable[[], object], what: str, *errors: type[Exception]) -> bool:
    """Run a blocking step of the start-up; when it fails with one of ``errors``, say
    ``what: error`` and return False."""
    try:
        await _blocking(step)
    except errors as exc:
        print(f"{what}: {exc}", file=sys.stderr)
        return False
    return True


async def run_real_sandbox(options: SandboxOptions, out: TextIO) -> int:
    """The sandbox on ``options.real_nodes`` real kubelets (see the module docstring)."""
    # Imported here: the simulated sandbox never pays for the test bed's real nodes.
    from kube_ccm.testbed.cluster import (  # noqa: PLC0415
        ChartCluster,
        ChartClusterOptions,
        chart_cluster_unavailable,
    )
    from kube_ccm.testbed.rbac import CCM_SERVICE_ACCOUNT_USER  # noqa: PLC0415

    reason = chart_cluster_unavailable()
    if reason:
        print(f"error: --real-nodes: {reason}", file=sys.stderr)
        return 1
    workdir = options.data_dir or Path(tempfile.mkdtemp(prefix="kube-ccm-sandbox-"))
    grace = options.kubelets.grace_period
    cluster = ChartCluster(
        ChartClusterOptions(
            nodes=options.real_nodes,
            control_plane_nodes=CONTROL_PLANE_NODES,
            controller_manager_args=(
                f"--node-monitor-grace-period={grace:g}s",
                "--node-monitor-period=1s",
            ),
            audit_users=(CCM_SERVICE_ACCOUNT_USER,),
            data_dir=workdir,
            kube_proxy=options.real_servicelb,
        )
    )
    try:
        return await _run(cluster, options, out)
    except Stalled as stalled:
        print(f"error: {stalled}; kube-ccm's pods log:", file=sys.stderr)
        with contextlib.suppress(Exception):
            async with KubeClient.from_kubeconfig(cluster.plane.kubeconfig) as client:
                print(await _pod_log_tails(client), file=sys.stderr)
        return 1
    finally:
        print(
            "stopping: kube-ccm's pods, the kubelets and their containerds, "
            "kube-controller-manager, kube-scheduler; undoing the host changes ...",
            file=out,
            flush=True,
        )
        await _blocking(cluster.stop)
        if options.data_dir is None:
            shutil.rmtree(workdir, ignore_errors=True)
        print("real nodes and control plane stopped, host restored", file=out, flush=True)


async def _run(cluster: ChartCluster, options: SandboxOptions, out: TextIO) -> int:
    from kube_ccm.testbed.cluster import (  # noqa: PLC0415
        CONTROL_PLANE,
        RELEASE,
        ccm_pods,
        pod_ready,
    )
    from kube_ccm.testbed.helm import HelmBinaryError  # noqa: PLC0415
    from kube_ccm.testbed.image import ImageBuildError  # noqa: PLC0415
    from kube_ccm.testbed.nodes import RealNodesError  # noqa: PLC0415
    from kube_ccm.testing.binaries import ControlPlaneBinariesError  # noqa: PLC0415
    from kube_ccm.testing.controlplane import ControlPlaneError  # noqa: PLC0415

    count = options.real_nodes
    began = time.monotonic()
    print(
        "finding helm, the kube-ccm image of this checkout and the node binaries in the "
        "cache, or building them (the image: minutes when the sources changed) ...",
        file=out,
        flush=True,
    )
    if not await _step(
        cluster.build,
        "error: --real-nodes",
        HelmBinaryError,
        ImageBuildError,
        ControlPlaneBinariesError,
    ):
        return 1
    image = cluster.image
    built = time.monotonic() - began
    print(
        f"image {image.reference} ({image.size / 1e6:.0f} MB, "
        f"{'built' if image.source == 'built' else 'from the cache'} in {image.seconds:.1f} s), "
        f"helm {cluster.helm.version}",
        file=out,
        flush=True,
    )
    print("starting kube-apiserver and etcd ...", file=out, flush=True)
    if not await _step(cluster.start_control_plane, "error", ControlPlaneError):
        return 1
    plane = cluster.plane
    print(
        f"control plane ready in {plane.timings.total:.1f} s; kubeconfig: {plane.kubeconfig}",
        file=out,
        flush=True,
    )
    print(
        f"starting {_plural(count, 'real kubelet')}, each on its own containerd with the image "
        "imported, "
        "kube-controller-manager (--cloud-provider=external) and kube-scheduler ...",
        file=out,
        flush=True,
    )
    if not await _step(cluster.start_nodes, "error: the real nodes did not start", RealNodesError):
        return 1
    nodes = cluster.nodes
    names = [node.name for node in nodes.nodes]
    control_plane = names[: cluster.control_plane_nodes]
    cluster.add_instances()
    replicas = len(control_plane)
    print(
        f"{_plural(count, 'Node')} Ready in {nodes.timings.total:.1f} s, with the uninitialised "
        "taint: "
        f"{', '.join(names)} ({', '.join(control_plane)} labelled {CONTROL_PLANE}); an "
        f"instance for each in the simulated cloud the pods share ({cluster.state_dir})",
        file=out,
        flush=True,
    )
    cloud_config = {k: v for k, v in simulated_config(options).items() if k != "unknownNodes"}
    values = cluster.values_for(
        replicas=replicas,
        cloud_config=cloud_config,
        extra_args={"concurrent-node-syncs": str(options.concurrent_node_syncs)},
        servicelb=dict(SERVICELB_CONFIG) if options.real_servicelb else None,
    )
    cluster.values.write_text(yaml.safe_dump(values))
    ready = time.monotonic() - began
    started = time.monotonic()
    installed = await _blocking(cluster.install)
    if installed.returncode != 0:
        print(f"error: helm install failed: {installed.stderr.strip()}", file=sys.stderr)
        return 1
    print(
        f"helm install {RELEASE} deploy/helm/kube-ccm (values: {cluster.values}): "
        f"{_plural(replicas, 'replica')} with leader election"
        + (
            "; instances from the simulated cloud, load balancers from servicelb "
            "(host-network forwarders on each node's IP, kube-proxy for the ClusterIPs)"
            if options.real_servicelb
            else ""
        ),
        file=out,
        flush=True,
    )
    async with KubeClient.from_kubeconfig(plane.kubeconfig) as client:

        async def pods_ready() -> int:
            return sum(1 for pod in await ccm_pods(client) if pod_ready(pod))

        stall = options.stall_timeout
        pods_took = await watch_progress(
            "kube-ccm pods ready", pods_ready, replicas, out, started, stall=stall
        )

        async def initialised() -> int:
            listed = await TypedClient(client).list(NODES)
            return sum(
                1
                for node in listed.items
                if node.metadata.name in names
                and node.spec.provider_id
                and not has_taint(node, wk.TAINT_UNINITIALIZED)
            )

        took = await watch_progress(
            "initialising nodes", initialised, count, out, started, stall=stall
        )
        from_start = time.monotonic() - began
        if options.real_servicelb:
            lb_took = await serve_on_node_ips(client, cluster, options.services, out, stall=stall)
        else:
            lb_took = await provision_load_balancers(client, options.services, out, stall=stall)
        failures = await _failures(cluster, client, options, out)
        await asyncio.sleep(0.5)
        summary(
            out,
            nodes=count,
            took=took,
            services=options.services,
            lb_took=lb_took,
            failures=failures,
            calls=cluster.cloud.calls(),
            requests=audited_requests(plane.audit_events()),
            state=cluster.state_dir / "cloud.db",
        )
        print(
            f"since the sandbox started: image, helm and binaries {built:.1f} s, Nodes Ready "
            f"{ready:.1f} s, kube-ccm pods ready {started - began + pods_took:.1f} s, all "
            f"Nodes initialised {from_start:.1f} s",
            file=out,
        )
        _hints(cluster, out)
    if options.duration is None:
        print("running until Ctrl-C", file=out, flush=True)
    else:
        print(f"running for {options.duration:g} s more", file=out, flush=True)
    deadline = None if options.duration is None else time.monotonic() + options.duration
    while deadline is None or time.monotonic() < deadline:
        if not plane.running:
            print("error: the control plane exited", file=sys.stderr)
            return 1
        left = 0.5 if deadline is None else deadline - time.monotonic()
        await asyncio.sleep(max(0.0, min(0.5, left)))
    return 0


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


async def _failures(
    cluster: ChartCluster, client: KubeClient, options: SandboxOptions, out: TextIO
) -> Failures:
    """``--kill`` and ``--shutdown``: the last worker kubelets stop (SIGTERM; their
    containers live on) and their instances are terminated or shut down; once
    kube-controller-manager marks them NotReady, kube-ccm deletes or taints their Nodes."""

    if not options.kill and not options.shutdown:
        return Failures()
    victims = cluster.nodes.nodes[-(options.kill + options.shutdown) :]
    killed, shut_down = victims[: options.kill], victims[options.kill :]
    for victim in victims:
        await _blocking(functools.partial(cluster.nodes.stop_kubelet, victim))
    for victim in killed:
        cluster.cloud.set_instance_state(victim.name, "terminated")
    for victim in shut_down:
        cluster.cloud.set_instance_state(victim.name, "shutdown")
    grace = options.kubelets.grace_period
    print(
        f"{len(killed)} kubelets stopped with their instances terminated, {len(shut_down)} "
        f"with their instances shut down; kube-controller-manager marks their Nodes "
        f"NotReady after {grace:g} s",
        file=out,
        flush=True,
    )
    started = time.monotonic()

    async def get(name: str) -> Node | None:
        try:
            return await TypedClient(client).get(NODES, name)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    async def deleted() -> int:
        return sum([await get(n.name) is None for n in killed])

    async def tainted() -> int:
        return sum(
            [
                (found := await get(n.name)) is not None and has_taint(found, wk.TAINT_SHUTDOWN)
                for n in shut_down
            ]
        )

    stall = options.stall_timeout + grace
    waits = []
    if killed:
        waits.append(
            watch_progress("deleting dead nodes", deleted, len(killed), out, started, stall=stall)
        )
    if shut_down:
        waits.append(
            watch_progress(
                "tainting shut-down nodes", tainted, len(shut_down), out, started, stall=stall
            )
        )
    took = list(await asyncio.gather(*waits))
    return Failures(
        killed=len(killed),
        killed_took=took[0] if killed else 0.0,
        shut_down=len(shut_down),
        shut_down_took=took[-1] if shut_down else 0.0,
    )


async def _pod_log_tails(client: KubeClient) -> str:
    from kube_ccm.testbed.cluster import ccm_pods, pod_logs  # noqa: PLC0415

    pods = await ccm_pods(client)
    if not pods:
        return "  (no kube-ccm pod: kubectl -n kube-system get events)"
    return await pod_logs(client, pods)


def _hints(cluster: ChartCluster, out: TextIO) -> None:
    from kube_ccm.testbed.cluster import NAMESPACE, RELEASE, SELECTOR  # noqa: PLC0415

    kubectl = f"kubectl --kubeconfig {cluster.plane.kubeconfig}"
    lines = [
        f"{kubectl} get nodes -L topology.kubernetes.io/zone,node.kubernetes.io/instance-type",
        f"{kubectl} -n {NAMESPACE} get pods,leases -o wide",
        f"{kubectl} -n {NAMESPACE} logs -l {SELECTOR} --tail 20",
        f"{cluster.helm.path} --kubeconfig {cluster.plane.kubeconfig} -n {NAMESPACE} "
        f"status {RELEASE}",
    ]
    for node in reversed(cluster.nodes.nodes):  # a worker's kubelet, if one runs
        try:
            kubelet = cluster.nodes.process(f"kubelet-{node.name}")
        except KeyError:  # stopped by --kill or --shutdown
            continue
        lines += [
            f"kill {kubelet.pid}   # the kubelet of {node.name} stops: NotReady, then",
            f"kube-ccm simcloud --state {cluster.state_dir / 'cloud.db'} instances shutdown "
            f"{node.name}   # the shutdown taint (or terminate: the Node goes)",
        ]
        break
    print("\ntry:\n" + "\n".join(f"  {line}" for line in lines), file=out)
