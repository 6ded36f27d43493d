"""The sandbox's run: the control plane, the cloud, the simulated kubelets and kube-ccm
started in order, their stopping on one exit stack, the story told, and the signals
that end it."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from kube_ccm.api import wellknown as wk
from kube_ccm.api.helpers import has_taint
from kube_ccm.runtime.client import KubeClient
from kube_ccm.sandbox import clouds
from kube_ccm.sandbox.kubelets import SimulatedKubelets, pod_cidrs
from kube_ccm.sandbox.local import hook
from kube_ccm.sandbox.options import CLUSTER_CIDR, ROUTE_PERIOD, SandboxOptions
from kube_ccm.sandbox.progress import (
    Stalled,
    initialised,
    keep_running,
    provision_load_balancers,
    watch_progress,
    while_alive,
)
from kube_ccm.sandbox.summary import Failures, audited_requests, hints, summary

if TYPE_CHECKING:
    from kube_ccm.testing.controlplane import ControlPlane
    from kube_ccm.testing.daemon import DaemonProcess

__all__ = ["CCM_USER", "main", "run_sandbox"]

CCM_USER = "kube-ccm"
"""kube-ccm's user in the sandbox (in ``system:masters``, as the admin is): its own, so
that the apiserver's audit log of this user is kube-ccm's requests and no one else's."""

_SIGNALS = {signal.SIGINT: "SIGINT (Ctrl-C)", signal.SIGTERM: "SIGTERM"}


def main(options: SandboxOptions) -> int:
    """Run the sandbox; Ctrl-C or SIGTERM stop it the same way: everything it started
    (kube-ccm, libvirtd, the control plane) is stopped before it exits, and it says
    which signal stopped it."""

    async def run() -> int:
        task = asyncio.current_task()
        assert task is not None
        received: list[str] = []

        def stop(signum: signal.Signals) -> None:
            received.append(_SIGNALS[signum])
            task.cancel()  # again on a second signal: the clean-up step it is in ends

        loop = asyncio.get_running_loop()
        for signum in _SIGNALS:
            loop.add_signal_handler(signum, stop, signum)
        try:
            return await run_sandbox(options)
        except asyncio.CancelledError:
            print(f"stopped by {received[0] if received else 'cancellation'}", file=sys.stderr)
            return 0

    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(run())
    return 0


async def run_sandbox(options: SandboxOptions, out: TextIO = sys.stdout) -> int:
    problems = options.problems()
    if problems:
        for problem in problems:
            print(f"error: {problem}", file=sys.stderr)
        return 2
    if options.real_nodes:
        from kube_ccm.sandbox.real import run_real_sandbox  # noqa: PLC0415

        return await run_real_sandbox(options, out)
    local = options.local_cloud
    module = hook(local) if local is not None else None
    if module is not None and (missing := getattr(module, "missing", lambda: None)()):
        print(f"error: {missing}", file=sys.stderr)
        return 1
    async with contextlib.AsyncExitStack() as stack:
        return await _run(options, out, stack)


async def _run(options: SandboxOptions, out: TextIO, stack: contextlib.AsyncExitStack) -> int:
    """The sandbox's story; whatever it starts, its stopping goes on ``stack``."""
    # Imported here: the daemon itself never needs the test bed.
    from kube_ccm.testing.controlplane import (  # noqa: PLC0415
        ControlPlane,
        ControlPlaneError,
        ControlPlaneOptions,
    )
    from kube_ccm.testing.daemon import DaemonProcess  # noqa: PLC0415

    workdir = options.data_dir or Path(tempfile.mkdtemp(prefix="kube-ccm-sandbox-"))
    if options.data_dir is None:
        stack.callback(shutil.rmtree, workdir, ignore_errors=True)
    plane = ControlPlane(
        ControlPlaneOptions(
            data_dir=workdir / "controlplane", keep_data_dir=True, audit_users=(CCM_USER,)
        )
    )
    print("starting kube-apiserver and etcd ...", file=out, flush=True)
    try:
        await asyncio.to_thread(plane.start)
    except ControlPlaneError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    stack.push_async_callback(_stop_plane, plane, out)
    client = KubeClient.from_kubeconfig(plane.kubeconfig)
    stack.push_async_callback(client.aclose)
    print(
        f"control plane ready in {plane.timings.total:.1f} s; kubeconfig: {plane.kubeconfig}",
        file=out,
        flush=True,
    )
    names = [f"sandbox-node-{i:04d}" for i in range(options.nodes)]
    cloud = await clouds.set_up(options, names, workdir, out, stack)
    if cloud is None:
        return 1
    kubelets = SimulatedKubelets(client, options.kubelets)
    await kubelets.register(names, pod_cidrs(CLUSTER_CIDR, len(names)))
    stack.push_async_callback(_cancel, asyncio.create_task(kubelets.run()))
    print(
        f"registered {len(names)} nodes with the uninitialised taint and a pod CIDR each; "
        "their kubelets renew Leases and report Ready",
        file=out,
    )
    local = cloud.local
    (workdir / "ccm").mkdir(parents=True, exist_ok=True)
    daemon = DaemonProcess(
        kubeconfig=plane.write_client_kubeconfig(
            workdir / "ccm" / "kubeconfig", CCM_USER, groups=("system:masters",)
        ),
        workdir=workdir / "ccm",
        cloud_config=clouds.simulated_config(options),
        cloud_config_file=cloud.config_file,
        provider=cloud.provider,
        args=[
            "--leader-elect=false",
            f"--cluster-cidr={CLUSTER_CIDR}",
            f"--concurrent-node-syncs={options.concurrent_node_syncs}",
            "--kube-api-qps=100",
            "--kube-api-burst=200",
            f"--route-reconciliation-period={ROUTE_PERIOD:g}s",
            *(local.daemon_args if local is not None else ()),
        ],
        env=dict(local.daemon_env) if local is not None and local.daemon_env else None,
    )
    started = time.monotonic()
    daemon.start()
    stack.push_async_callback(_stop_daemon, daemon, out)
    if cloud.taken_back:
        # Before kube-ccm stops: it deletes the load balancers of the Services deleted.
        stack.push_async_callback(clouds.clean_up, client, daemon, out, local)
    print(
        f"started kube-ccm run --cloud-provider={cloud.provider} (log: {daemon.log_path})",
        file=out,
        flush=True,
    )

    async def nodes_done() -> int:
        return sum(1 for n in kubelets.nodes() if initialised(n))

    try:
        took = await while_alive(
            daemon,
            watch_progress(
                "initialising nodes",
                nodes_done,
                len(names),
                out,
                started,
                stall=options.stall_timeout,
            ),
        )
    except Stalled as stalled:
        _explain_stall(stalled, daemon, cloud, names)
        return 1
    if took is None:
        return 1
    lb_took = await while_alive(daemon, provision_load_balancers(client, options.services, out))
    if lb_took is None:
        return 1
    failures = await _failures(kubelets, daemon, cloud, options, out)
    if failures is None:
        return 1
    await asyncio.sleep(0.5)
    summary(
        out,
        nodes=len(names),
        took=took,
        services=options.services,
        lb_took=lb_took,
        failures=failures,
        calls=cloud.calls(daemon),
        # The audit log of kube-ccm's own user: its requests, and only its.
        requests=audited_requests(await asyncio.to_thread(plane.audit_events)),
        state=daemon.state_path if cloud.simulated else None,
        ingress=local.ingress if local is not None else "IP",
    )
    hints(
        out,
        plane.kubeconfig,
        names[0],
        state=daemon.state_path if cloud.simulated else None,
        local=local,
    )
    if options.duration is None:
        print("running until Ctrl-C", file=out, flush=True)
    else:
        print(f"running for {options.duration:g} s more", file=out, flush=True)
    return 0 if await keep_running(daemon, options.duration) else 1


async def _stop_plane(plane: ControlPlane, out: TextIO) -> None:
    await asyncio.to_thread(plane.stop)
    print("control plane stopped", file=out, flush=True)


async def _stop_daemon(daemon: DaemonProcess, out: TextIO) -> None:
    status = await asyncio.to_thread(daemon.stop)
    print(f"kube-ccm stopped (exit status {status})", file=out)


async def _cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task


def _explain_stall(
    stalled: Stalled, daemon: DaemonProcess, cloud: clouds.Cloud, names: list[str]
) -> None:
    errors = [
        line
        for line in daemon.log().splitlines()
        if line[:1] in ("E", "W") or "error" in line.lower()
    ]
    print(f"error: {stalled}; kube-ccm's last errors:", file=sys.stderr)
    for line in errors[-8:] or ["(none logged)"]:
        print(f"  {line[:300]}", file=sys.stderr)
    if not cloud.own_instances:
        print(
            f"the sandbox's Nodes are named {names[0]} ... {names[-1]}: "
            f"--provider={cloud.provider} must find an instance for each (create them, or "
            "pass --provision-command)",
            file=sys.stderr,
        )


async def _failures(
    kubelets: SimulatedKubelets,
    daemon: DaemonProcess,
    cloud: clouds.Cloud,
    options: SandboxOptions,
    out: TextIO,
) -> Failures | None:
    """``--kill`` and ``--shutdown``: kubelets die with their instances; the CCM reacts.

    Killed nodes' instances are terminated, so the CCM's lifecycle controller deletes
    the Nodes (and the service controller drops them from every load balancer); shut
    down ones keep their instances, so they get the shutdown taint instead. Either
    needs kube-controller-manager's part first: Ready turns Unknown after the grace
    period.
    """
    if not options.kill and not options.shutdown:
        return Failures()
    victims = kubelets.names[-(options.kill + options.shutdown) :]
    killed, shut_down = victims[: options.kill], victims[options.kill :]
    for name in victims:
        kubelets.kill(name)
    await cloud.end_instances(daemon, killed, shut_down)
    grace = options.kubelets.grace_period
    print(
        f"{len(killed)} kubelets died with their instances terminated, {len(shut_down)} with "
        f"their instances shut down; Ready turns Unknown after {grace:g} s without a Lease "
        "renewal",
        file=out,
        flush=True,
    )
    started = time.monotonic()

    async def deleted() -> int:
        return sum(1 for n in killed if kubelets.node(n) is None)

    async def tainted() -> int:
        return sum(
            1
            for n in shut_down
            if (node := kubelets.node(n)) is not None and has_taint(node, wk.TAINT_SHUTDOWN)
        )

    async def dropped() -> int:
        return cloud.load_balancers_without(daemon, killed) or 0

    waits = []
    if killed:
        waits.append(watch_progress("deleting dead nodes", deleted, len(killed), out, started))
        if options.services and cloud.load_balancers_without(daemon, killed) is not None:
            # The story goes on after the deletion: the service controller takes the
            # dead nodes out of every load balancer (an UpdateLoadBalancer each).
            waits.append(
                watch_progress(
                    "taking dead nodes out of load balancers",
                    dropped,
                    options.services,
                    out,
                    started,
                )
            )
    if shut_down:
        waits.append(
            watch_progress("tainting shut-down nodes", tainted, len(shut_down), out, started)
        )

    async def both() -> list[float]:
        return list(await asyncio.gather(*waits))

    took = await while_alive(daemon, both())
    if took is None:
        return None
    return Failures(
        killed=len(killed),
        killed_took=took[0] if killed else 0.0,
        shut_down=len(shut_down),
        shut_down_took=took[-1] if shut_down else 0.0,
    )
