"""The cloud kube-ccm runs against in the sandbox, one setup per provider.

- the simulated cloud (the default): kube-ccm's own state file, which the sandbox
  changes to end instances;
- ``--on-prem``: a real libvirtd on libvirt's test driver with a running domain per
  node, and a composite cloud-config (instances from libvirt, load balancers from
  ippool);
- ``--provider aws`` without ``--cloud-config``: the sandbox's own moto
  (:mod:`kube_ccm.sandbox.aws`);
- ``--provider proxmox`` without ``--cloud-config``: the sandbox's own fakepve (a fake
  PVE 9 cluster) with a running VM per node, and a composite cloud-config (instances
  from proxmox, load balancers from ippool);
- any other ``--provider`` with its ``--cloud-config``: instances made by
  ``--provision-command``, and what the sandbox created taken back on the way out.

:func:`set_up` starts what a setup needs and registers its stopping on the sandbox's
exit stack.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import yaml

from kube_ccm.providers.libvirt.libvirtd import LibvirtdServer, LibvirtdUnavailableError
from kube_ccm.runtime.client import KubeClient
from kube_ccm.runtime.resources import NODES, SERVICES, TypedClient
from kube_ccm.sandbox import aws as local_aws
from kube_ccm.sandbox.options import CLEANUP_TIMEOUT, ON_PREM_POOL, ROUTE_PERIOD, SandboxOptions

if TYPE_CHECKING:
    from kube_ccm.providers.proxmox.fakepve import FakePveServer
    from kube_ccm.sandbox.aws import SandboxAws
    from kube_ccm.testing.daemon import DaemonProcess

__all__ = ["Cloud", "clean_up", "set_up", "simulated_config"]


@dataclass(frozen=True)
class Cloud:
    """The provider kube-ccm runs with and what the sandbox started for it."""

    provider: str
    config_file: Path | None = None
    """Passed to kube-ccm as it is; None: the simulated cloud's, generated."""
    hypervisor: LibvirtdServer | None = None
    aws: SandboxAws | None = None
    pve: FakePveServer | None = None

    @property
    def simulated(self) -> bool:
        return self.provider == "simulated"

    @property
    def own_instances(self) -> bool:
        """Whether the sandbox made the instances (and can end them)."""
        return (
            self.simulated
            or self.hypervisor is not None
            or self.aws is not None
            or self.pve is not None
        )

    @property
    def taken_back(self) -> bool:
        """Whether what kube-ccm made in this cloud is deleted on the way out: another
        provider's cloud outlives the sandbox (and the sandbox's own AWS counts what is
        left); the simulated cloud, libvirt's test driver and fakepve go with it."""
        return not self.simulated and self.hypervisor is None and self.pve is None

    def calls(self, daemon: DaemonProcess) -> dict[str, dict[str, int]] | None:
        """kube-ccm's cloud calls by method, where the sandbox can count them."""
        if self.simulated:
            return daemon.cloud.calls()
        if self.aws is not None:
            return self.aws.calls()
        if self.pve is not None:
            return self.pve.calls()
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
        if self.aws is not None:
            await self.aws.terminate(terminated)
            await self.aws.stop(shut_down)
        elif self.pve is not None:
            pve = self.pve
            for name in terminated:  # the VM is destroyed
                await asyncio.to_thread(pve.remove_vm, _vmid(pve, name))
            for name in shut_down:  # the VM is stopped
                await asyncio.to_thread(pve.set_status, _vmid(pve, name), "stopped")
        elif self.hypervisor is not None:
            conn = self.hypervisor.connection()
            for name in terminated:  # the domain is destroyed and undefined
                dom = conn.lookupByName(name)
                dom.destroy()
                dom.undefine()
            for name in shut_down:  # the domain is shut off
                conn.lookupByName(name).destroy()
        else:
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
    if options.on_prem:
        try:
            # On this thread: libvirtd dies with the thread that started it.
            hypervisor = _start_hypervisor(names)
        except LibvirtdUnavailableError as exc:
            print(f"error: --on-prem needs libvirt: {exc}", file=sys.stderr)
            return None
        stack.push_async_callback(_stop_hypervisor, hypervisor)
        print(
            f"libvirtd (test driver) runs {len(names)} domains; kube-ccm takes instances "
            f"from libvirt ({hypervisor.uri}) and load balancers from ippool "
            f"({ON_PREM_POOL})",
            file=out,
            flush=True,
        )
        return Cloud("composite", _on_prem_config(workdir, hypervisor), hypervisor=hypervisor)
    if options.local_aws:
        aws = local_aws.SandboxAws(workdir / "aws")
        stack.push_async_callback(aws.close)
        config = await _start_aws(aws, names, out)
        return None if config is None else Cloud("aws", config, aws=aws)
    if options.local_proxmox:
        need = "--provider proxmox without --cloud-config runs fakepve (a fake PVE cluster)"
        try:
            from kube_ccm.providers.proxmox import fakepve  # noqa: PLC0415 (a dev dependency)
        except ImportError as exc:
            print(f"error: {need}: `pip install 'kube-ccm[dev]'` ({exc})", file=sys.stderr)
            return None
        try:
            pve = _start_pve(workdir / "fakepve", names)
        except fakepve.FakePveUnavailableError as exc:
            print(f"error: {need}: {exc}", file=sys.stderr)
            return None
        stack.push_async_callback(asyncio.to_thread, pve.stop)
        print(
            f"fakepve (a fake PVE 9 cluster) on {pve.url} runs {len(names)} VMs named after "
            f"the nodes; kube-ccm takes instances from proxmox and load balancers from "
            f"ippool ({ON_PREM_POOL})",
            file=out,
            flush=True,
        )
        return Cloud("composite", _proxmox_config(workdir, pve), pve=pve)
    if options.provision_command and not await _provision_instances(options, names, out):
        return None
    return Cloud(options.provider, options.cloud_config)


async def _stop_hypervisor(hypervisor: LibvirtdServer) -> None:
    await asyncio.to_thread(hypervisor.stop)
    shutil.rmtree(hypervisor.workdir, ignore_errors=True)


def simulated_config(options: SandboxOptions) -> dict[str, object]:
    """The simulated cloud's config: instances made for unknown Nodes, and the options'
    latency and failure rate."""
    config: dict[str, object] = {"unknownNodes": "create"}
    if options.latency:
        config["latency"] = f"{options.latency * 1000:g}ms"
    if options.failure_rate:
        config["failureRate"] = options.failure_rate
    return config


async def _start_aws(aws: SandboxAws, names: list[str], out: TextIO) -> Path | None:
    """moto with the sandbox's network and an instance per node; kube-ccm's
    cloud-config (None when moto does not start)."""
    from kube_ccm.providers.aws.moto import MotoUnavailableError  # noqa: PLC0415

    try:
        # On this thread: the moto server dies with the thread that started it.
        aws.start()
    except MotoUnavailableError as exc:
        print(f"error: --provider aws needs moto: {exc}", file=sys.stderr)
        return None
    await aws.start_proxy()
    await aws.create_instances(names)
    assert aws.network is not None
    print(
        f"moto (EC2 and ELBv2) on {aws.server.url}: VPC {aws.network.vpc_id} with "
        f"{len(aws.network.subnets)} subnets tagged for cluster {local_aws.CLUSTER}, route "
        f"table {aws.route_table_id}, {len(names)} instances named after the nodes; "
        "kube-ccm calls it through a counting proxy",
        file=out,
        flush=True,
    )
    return aws.write_config()


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


def _start_hypervisor(names: list[str]) -> LibvirtdServer:
    """libvirtd on the test driver with one running domain per node name."""
    # A unix socket's path is limited to 107 bytes: a short directory of its own.
    server = LibvirtdServer(Path(tempfile.mkdtemp(prefix="kc-libvirtd-")))
    server.start()
    conn = server.connection()
    for i, name in enumerate(names):
        dom = conn.defineXML(server.domain_xml(name, vcpus=2 + 2 * (i % 2), memory_mib=4096))
        dom.create()
    return server


def _start_pve(workdir: Path, names: list[str]) -> FakePveServer:
    """fakepve with a running VM per node name (VMIDs from 100), spread over three PVE
    nodes, each with a guest agent reporting one address."""
    from kube_ccm.providers.proxmox.fakepve import FakePveServer, agent_interfaces  # noqa: PLC0415

    server = FakePveServer(workdir).start()
    for i, name in enumerate(names):
        vmid = 100 + i
        address = f"10.{100 + vmid // 65536}.{vmid // 256 % 256}.{vmid % 256}"
        server.add_vm(
            vmid,
            name,
            node=f"pve{1 + i % 3}",
            cores=2 + 2 * (i % 2),
            memory_mib=4096,
            agent=agent_interfaces(address),
        )
    return server


def _vmid(pve: FakePveServer, name: str) -> int:
    return int(pve.call(lambda: next(vm.vmid for vm in pve.pve.vms if vm.name == name)))


def _proxmox_config(workdir: Path, pve: FakePveServer) -> Path:
    """The composite cloud-config: instances from proxmox, load balancers from ippool."""
    config = {
        "providers": {
            "proxmox": {
                "capabilities": ["instances"],
                "config": {"clusters": [pve.cluster_config()]},
            },
            "ippool": {
                "capabilities": ["loadBalancer"],
                "config": {"configMap": "", "pools": {"cidr-global": ON_PREM_POOL}},
            },
        }
    }
    path = workdir / "proxmox.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _on_prem_config(workdir: Path, hypervisor: LibvirtdServer) -> Path:
    """The composite cloud-config: instances from libvirt, load balancers from ippool."""
    config = {
        "providers": {
            "libvirt": {
                "capabilities": ["instances"],
                "config": {
                    "hosts": [
                        {"uri": hypervisor.uri, "name": "hv1", "zone": "rack-1", "region": "dc-1"}
                    ],
                    "addressSources": ["agent", "lease"],
                },
            },
            "ippool": {
                "capabilities": ["loadBalancer"],
                "config": {"configMap": "", "pools": {"cidr-global": ON_PREM_POOL}},
            },
        }
    }
    path = workdir / "on-prem.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


async def clean_up(
    client: KubeClient, daemon: DaemonProcess, out: TextIO, aws: SandboxAws | None = None
) -> None:
    """Delete the sandbox's Services (their load balancers go first: the finalizer) and
    Nodes (their routes go), waiting a bounded time; say what is left. With the
    sandbox's own AWS, wait for the routes to go and count what moto still holds."""
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
    if aws is None:
        await asyncio.sleep(ROUTE_PERIOD * 2)
        print("deleted the sandbox's Nodes; their routes go on the next route pass", file=out)
        return
    deadline = time.monotonic() + ROUTE_PERIOD * 2
    while time.monotonic() < deadline and daemon.poll() is None:
        if not await aws.routes_left():
            break
        await asyncio.sleep(0.5)
    print(
        f"deleted the sandbox's Nodes; moto holds {await aws.load_balancers_left()} load "
        f"balancers and {await aws.routes_left()} pod routes",
        file=out,
    )
