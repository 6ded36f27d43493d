"""``kube-ccm sandbox --provider proxmox`` without ``--cloud-config``: the proxmox
provider against fakepve, a fake PVE 9 cluster on loopback (:mod:`.fakepve`), with a
running VM per sandbox node, named after it, spread over three PVE nodes, each with a
guest agent reporting one address. kube-ccm runs a composite: instances from proxmox,
load balancers from ippool. ``--kill`` destroys VMs, ``--shutdown`` stops them; the
summary counts kube-ccm's PVE calls as fakepve saw them.

The sandbox's hook (:mod:`kube_ccm.sandbox.local`); the provider never imports it.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from kube_ccm.sandbox.local import ON_PREM_POOL, LocalCloud, with_ippool

if TYPE_CHECKING:
    from kube_ccm.providers.proxmox.fakepve import FakePveServer

__all__ = ["SandboxProxmox", "local_cloud", "missing"]

_NEED = "--provider proxmox without --cloud-config runs fakepve (a fake PVE cluster)"


def missing() -> str | None:
    """What to install for a local PVE cluster, or ``None``."""
    try:
        from kube_ccm.providers.proxmox import fakepve  # noqa: PLC0415 (a dev dependency)
    except ImportError as exc:
        return f"{_NEED}: `pip install 'kube-ccm[dev]'` ({exc})"
    del fakepve
    return None


class SandboxProxmox(LocalCloud):
    """fakepve with a VM per node, and kube-ccm's composite cloud-config for it."""

    provider = "composite"

    def __init__(self, pve: FakePveServer, config_file: Path) -> None:
        self.pve = pve
        self.config_file = config_file

    async def end_instances(self, terminated: list[str], shut_down: list[str]) -> None:
        for name in terminated:  # the VM is destroyed
            await asyncio.to_thread(self.pve.remove_vm, self._vmid(name))
        for name in shut_down:  # the VM is stopped
            await asyncio.to_thread(self.pve.set_status, self._vmid(name), "stopped")

    def calls(self) -> dict[str, dict[str, int]]:
        return self.pve.calls()

    def _vmid(self, name: str) -> int:
        pve = self.pve
        return int(pve.call(lambda: next(vm.vmid for vm in pve.pve.vms if vm.name == name)))


async def local_cloud(
    names: list[str], workdir: Path, out: TextIO, stack: contextlib.AsyncExitStack
) -> SandboxProxmox | None:
    """fakepve with a running VM per node name (VMIDs from 100); ``None`` (said on
    stderr) when it cannot start."""
    from kube_ccm.providers.proxmox import fakepve  # noqa: PLC0415 (a dev dependency)

    try:
        pve = _start(fakepve.FakePveServer(workdir / "fakepve"), names)
    except fakepve.FakePveUnavailableError as exc:
        print(f"error: {_NEED}: {exc}", file=sys.stderr)
        return None
    stack.push_async_callback(asyncio.to_thread, pve.stop)
    print(
        f"fakepve (a fake PVE 9 cluster) on {pve.url} runs {len(names)} VMs named after "
        f"the nodes; kube-ccm takes instances from proxmox and load balancers from "
        f"ippool ({ON_PREM_POOL})",
        file=out,
        flush=True,
    )
    config = {"clusters": [pve.cluster_config()]}
    return SandboxProxmox(pve, with_ippool("proxmox", config, workdir / "proxmox.yaml"))


def _start(server: FakePveServer, names: list[str]) -> FakePveServer:
    from kube_ccm.providers.proxmox.fakepve import agent_interfaces  # noqa: PLC0415

    server.start()
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
