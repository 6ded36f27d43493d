"""What the sandbox shows while it waits: progress bars that fail when stuck, and the
watch on the kube-ccm subprocess (its log when it exits)."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TextIO, TypeVar

from kube_ccm.api import wellknown as wk
from kube_ccm.api.objects import Node
from kube_ccm.runtime.resources import SERVICES
from kube_ccm.runtime.typedclient import TypedClient

if TYPE_CHECKING:
    from kube_ccm.runtime.client import KubeClient
    from kube_ccm.testing.daemon import DaemonProcess

__all__ = [
    "Stalled",
    "initialised",
    "keep_running",
    "provision_load_balancers",
    "watch_progress",
    "while_alive",
]

_T = TypeVar("_T")


def initialised(node: Node) -> bool:
    return not any(t.key == wk.TAINT_UNINITIALIZED for t in node.spec.taints)


class Stalled(Exception):  # noqa: N818 (a condition, not a bug)
    """No progress for the stall timeout."""

    def __init__(self, label: str, done: int, total: int, seconds: float) -> None:
        super().__init__(f"{label}: stuck at {done}/{total} for {seconds:g} s")


async def watch_progress(
    label: str,
    count: Callable[[], Awaitable[int]],
    total: int,
    out: TextIO,
    started: float,
    *,
    stall: float | None = None,
) -> float:
    """Print a progress line until ``count()`` reaches ``total``; the time it took.

    Raises :class:`Stalled` when ``count()`` has not moved for ``stall`` seconds."""
    interactive = out.isatty()
    last = -1
    moved = time.monotonic()
    while True:
        done = await count()
        if stall is not None and done == last and time.monotonic() - moved > stall:
            if interactive:
                print(file=out)
            raise Stalled(label, done, total, stall)
        if done != last:
            moved = time.monotonic()
            bar = "#" * (30 * done // max(total, 1))
            line = f"  {label} [{bar:<30}] {done}/{total}"
            print(("\r" + line) if interactive else line, end="" if interactive else "\n", file=out)
            out.flush()
            last = done
        if done >= total:
            if interactive:
                print(file=out)
            return time.monotonic() - started
        await asyncio.sleep(0.2)


async def while_alive(daemon: DaemonProcess, work: Awaitable[_T]) -> _T | None:
    """Await ``work`` unless the daemon dies first (then print its log; None)."""
    task = asyncio.ensure_future(work)
    while not task.done():
        if _exited(daemon):
            task.cancel()
            return None
        await asyncio.sleep(0.2)
    return task.result()


def _exited(daemon: DaemonProcess) -> bool:
    """Whether the daemon has exited; if so, say so with the end of its log."""
    if daemon.poll() is None:
        return False
    print(f"error: the daemon exited; its log:\n{daemon.log()[-3000:]}", file=sys.stderr)
    return True


async def keep_running(daemon: DaemonProcess, seconds: float | None) -> bool:
    """Wait ``seconds`` (None: until cancelled); False if the daemon exits meanwhile."""
    deadline = None if seconds is None else time.monotonic() + seconds
    while deadline is None or time.monotonic() < deadline:
        if _exited(daemon):
            return False
        left = 0.2 if deadline is None else deadline - time.monotonic()
        await asyncio.sleep(max(0.0, min(0.2, left)))
    return True


async def provision_load_balancers(
    client: KubeClient, count: int, out: TextIO, *, stall: float | None = None
) -> float:
    """Create ``count`` LoadBalancer Services; seconds until all have an ingress IP."""
    if not count:
        return 0.0
    api = TypedClient(client)
    started = time.monotonic()
    for i in range(count):
        await api.create(
            SERVICES,
            {
                "metadata": {"name": f"sandbox-lb-{i:03d}"},
                "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
            },
            namespace="default",
        )

    async def done() -> int:
        listed = await api.list(SERVICES, namespace="default")
        return sum(1 for s in listed.items if s.status.load_balancer.ingress)

    return await watch_progress(
        "provisioning load balancers", done, count, out, started, stall=stall
    )
