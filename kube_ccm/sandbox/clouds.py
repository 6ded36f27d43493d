"""The cloud kube-ccm runs against in the sandbox:

- the simulated cloud (the default): kube-ccm's own state file, which the sandbox
  changes to end instances;
- ``--provider NAME`` without ``--cloud-config``, when the provider brings a local
  cloud (:mod:`kube_ccm.sandbox.local`: aws's moto, proxmox's fakepve, libvirt's
  libvirtd; ``--on-prem`` is libvirt's): that cloud, with an instance per node;
- any other ``--provider`` with its ``--cloud-config``: instances made by
  ``--provision-command``, and what the sandbox created taken back on the way out.

:func:`set_up` starts what a setup needs and registers its stopping on the sandbox's
exit stack.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from kube_ccm.runtime.client import KubeClient
from kube_ccm.runtime.resources import NODES, SERVICES
from kube_ccm.runtime.typedclient import TypedClient
from kube_ccm.sandbox.local import LocalCloud, hook
from kube_ccm.sandbox.options import CLEANUP_TIMEOUT, ROUTE_PERIOD, SandboxOptions

if TYPE_CHECKING:
    from kube_ccm.testing.daemon import DaemonProcess

__all__ = ["Cloud", "clean_up", "set_up", "simulated_config"]


@dataclass(frozen=True)
class Cloud:
    """The provider kube-ccm runs with and what the sandbox started for it."""

    provider: str
    config_file: Path | None = None
    """Passed to kube-ccm as it is; None: the simulated cloud's, generated."""
    local: LocalCloud | None = None
    """The provider's own cloud on this machine, when the sandbox started one."""

    @property
    def simulated(self) -> bool:
        return self.provider == "simulated"

    @property
    def own_instances(self) -> bool:
        """Whether the sandbox made the instances (and can end them)."""
        return self.simulated or self.local is not None

    @property
    def taken_back(self) -> bool:
        """Whether what kube-ccm made in this cloud is deleted on the way out: another
        provider's cloud outlives the sandbox (and a local cloud may count what is
        left); the simulated cloud goes with it."""
        if self.local is not None:
            return self.local.taken_back
        return not self.simulated

    def calls(self, daemon: DaemonProcess) -> dict[str, dict[str, int]] | None:
        """kube-ccm's cloud calls by method, where the sandbox can count them."""
        if self.simulated:
            return daemon.cloud.calls()
        if self.local is not None:
            return self.local.calls()
        return None

    def load_balancers_without(self, daemon: DaemonProcess, names: list[str]) -> int | None:
        """How many load balancers list none of ``names`` among their nodes, where the
        sandbox can see their nodes (the simulated cloud); None elsewhere."""
        if not self.simulated:
            return None
        gone = set(names)
        return sum(1 for lb in daemon.cloud.load_balancers() if not gone & set(lb.nodes))

    async def end_instances(
        self, daemon: DaemonProcess, terminated: list[str], shut_down: list[str]
    ) -> None:
        """Terminate and shut down instances, as their kubelets die."""
        if self.local is not None:
            await self.local.end_instances(terminated, shut_down)
            return
        for name in terminated:
            daemon.cloud.set_instance_state(name, "terminated")
        for name in shut_down:
            daemon.cloud.set_instance_state(name, "shutdown")


async def set_up(
    options: SandboxOptions,
    names: list[str],
    workdir: Path,
    out: TextIO,
    stack: contextlib.AsyncExitStack,
) -> Cloud | None:
    """The cloud of ``options`` with an instance per node name, its stopping pushed on
    ``stack``; None (after saying why) when it cannot start."""
    if options.local_cloud is not None:
        module = hook(options.local_cloud)
        assert module is not None  # options.local_cloud names only providers with one
        local: LocalCloud | None = await module.local_cloud(names, workdir, out, stack)
        if local is None:
            return None
        return Cloud(local.provider, local.config_file, local=local)
    if options.provision_command and not await _provision_instances(options, names, out):
        return None
    return Cloud(options.provider, options.cloud_config)


def simulated_config(options: SandboxOptions) -> dict[str, object]:
    """The simulated cloud's config: instances made for unknown Nodes, and the options'
    latency and failure rate."""
    config: dict[str, object] = {"unknownNodes": "create"}
    if options.latency:
        config["latency"] = f"{options.latency * 1000:g}ms"
    if options.failure_rate:
        config["failureRate"] = options.failure_rate
    return config


async def _provision_instances(options: SandboxOptions, names: list[str], out: TextIO) -> bool:
    """``--provision-command``, with the node names as arguments; False when it fails."""
    argv = [*shlex.split(options.provision_command), *names]
    print(f"provisioning instances: {argv[0]} with {len(names)} node names", file=out, flush=True)
    process = await asyncio.create_subprocess_exec(*argv)
    status = await process.wait()
    if status != 0:
        print(f"error: --provision-command exited with {status}", file=sys.stderr)
        return False
    return True


async def clean_up(
    client: KubeClient, daemon: DaemonProcess, out: TextIO, local: LocalCloud | None = None
) -> None:
    """Delete the sandbox's Services (their load balancers go first: the finalizer) and
    Nodes (their routes go), waiting a bounded time; say what is left. With a local
    cloud, wait for what it made for the Nodes to go, and say what it still holds."""
    api = TypedClient(client)
    listed = await api.list(SERVICES, namespace="default")
    ours = [s.metadata.name for s in listed.items if s.metadata.name.startswith("sandbox-lb-")]
    for name in ours:
        with contextlib.suppress(Exception):
            await api.delete(SERVICES, name, namespace="default")

    async def remaining() -> list[str]:
        now = await api.list(SERVICES, namespace="default")
        return [s.metadata.name for s in now.items if s.metadata.name in ours]

    deadline = time.monotonic() + CLEANUP_TIMEOUT
    left = await remaining()
    while left and time.monotonic() < deadline and daemon.poll() is None:
        await asyncio.sleep(0.5)
        left = await remaining()
    if left:
        print(
            f"warning: {len(left)} load balancers not deleted within {CLEANUP_TIMEOUT:g} s "
            f"(e.g. {left[0]}): delete them in your cloud",
            file=out,
        )
    else:
        print(f"deleted the {len(ours)} load balancers the sandbox created", file=out)
    nodes = await api.list(NODES)
    for node in nodes.items:
        if node.metadata.name.startswith("sandbox-node-"):
            with contextlib.suppress(Exception):
                await api.delete(NODES, node.metadata.name)
    # The route controller deletes the routes of Nodes that are gone on its next pass.
    if local is None:
        await asyncio.sleep(ROUTE_PERIOD * 2)
        print("deleted the sandbox's Nodes; their routes go on the next route pass", file=out)
        return
    deadline = time.monotonic() + ROUTE_PERIOD * 2
    while time.monotonic() < deadline and daemon.poll() is None:
        if await local.released():
            break
        await asyncio.sleep(0.5)
    print(f"deleted the sandbox's Nodes; {await local.left_behind()}", file=out)
