"""``kube-ccm sandbox --on-prem`` (or ``--provider libvirt`` without ``--cloud-config``):
the libvirt provider against a real libvirtd on libvirt's test driver
(:mod:`.libvirtd`) holding one running domain per sandbox node, named after it.
kube-ccm runs a composite: instances from libvirt, load balancers from ippool.
``--kill`` destroys and undefines domains, ``--shutdown`` shuts them off.

The sandbox's hook (:mod:`kube_ccm.sandbox.local`); the provider never imports it.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TextIO

from kube_ccm.providers.libvirt.libvirtd import LibvirtdServer, LibvirtdUnavailableError
from kube_ccm.sandbox.local import ON_PREM_POOL, LocalCloud, with_ippool

__all__ = ["SandboxLibvirt", "local_cloud"]


class SandboxLibvirt(LocalCloud):
    """libvirtd with a domain per node, and kube-ccm's composite cloud-config for it."""

    provider = "composite"

    def __init__(self, hypervisor: LibvirtdServer, config_file: Path) -> None:
        self.hypervisor = hypervisor
        self.config_file = config_file

    async def end_instances(self, terminated: list[str], shut_down: list[str]) -> None:
        conn = self.hypervisor.connection()
        for name in terminated:  # the domain is destroyed and undefined
            dom = conn.lookupByName(name)
            dom.destroy()
            dom.undefine()
        for name in shut_down:  # the domain is shut off
            conn.lookupByName(name).destroy()

    def hints(self, kubectl: str, node: str) -> list[str]:
        virsh = f"virsh -c '{self.hypervisor.uri}'"
        return [
            f"  {kubectl} get ipaddresses   # the ippool's allocations",
            f"  {virsh} list --all",
            f"  {virsh} destroy {node}   # shut it off: the Node gets the shutdown taint",
        ]


async def local_cloud(
    names: list[str], workdir: Path, out: TextIO, stack: contextlib.AsyncExitStack
) -> SandboxLibvirt | None:
    """libvirtd with a running domain per node name; ``None`` (said on stderr) when it
    cannot start."""
    try:
        # On this thread: libvirtd dies with the thread that started it.
        hypervisor = _start(names)
    except LibvirtdUnavailableError as exc:
        print(f"error: --on-prem needs libvirt: {exc}", file=sys.stderr)
        return None
    stack.push_async_callback(_stop, hypervisor)
    print(
        f"libvirtd (test driver) runs {len(names)} domains; kube-ccm takes instances "
        f"from libvirt ({hypervisor.uri}) and load balancers from ippool "
        f"({ON_PREM_POOL})",
        file=out,
        flush=True,
    )
    config = {
        "hosts": [{"uri": hypervisor.uri, "name": "hv1", "zone": "rack-1", "region": "dc-1"}],
        "addressSources": ["agent", "lease"],
    }
    return SandboxLibvirt(hypervisor, with_ippool("libvirt", config, workdir / "on-prem.yaml"))


def _start(names: list[str]) -> LibvirtdServer:
    """libvirtd on the test driver with one running domain per node name."""
    # A unix socket's path is limited to 107 bytes: a short directory of its own.
    server = LibvirtdServer(Path(tempfile.mkdtemp(prefix="kc-libvirtd-")))
    server.start()
    conn = server.connection()
    for i, name in enumerate(names):
        dom = conn.defineXML(server.domain_xml(name, vcpus=2 + 2 * (i % 2), memory_mib=4096))
        dom.create()
    return server


async def _stop(hypervisor: LibvirtdServer) -> None:
    await asyncio.to_thread(hypervisor.stop)
    shutil.rmtree(hypervisor.workdir, ignore_errors=True)
