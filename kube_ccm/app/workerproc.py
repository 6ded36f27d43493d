"""A worker process of ``--worker-processes``, as :mod:`kube_ccm.app.workers` starts it.

``python -m kube_ccm.app.workerproc FD PARENT_PID``: it dies with its parent
(``PR_SET_PDEATHSIG``), reads its configuration and shards from the socket ``FD``,
and runs a :class:`~kube_ccm.app.manager.Daemon` without a lease, serving or
webhooks of its own, whose writes and cloud calls are refused once the parent's
lease stamp has passed. The end of the socket (the parent is gone) exits at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import socket
import sys
import time

__all__ = ["main"]

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent: int) -> None:
    """SIGKILL this process when its parent dies (Linux); exit if it already has."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


async def _worker(sock: socket.socket) -> int:
    # Imported here, after _die_with_parent: importing the daemon takes a while (seconds
    # on a loaded machine), and a worker whose parent died meanwhile must not linger.
    from kube_ccm.app.descriptors import StartupError  # noqa: PLC0415
    from kube_ccm.app.logs import configure_logging  # noqa: PLC0415
    from kube_ccm.app.manager import Daemon, build_cloud  # noqa: PLC0415
    from kube_ccm.app.options.config import DaemonConfig  # noqa: PLC0415
    from kube_ccm.app.workers import receive, send  # noqa: PLC0415

    reader, writer = await asyncio.open_unix_connection(sock=sock)
    kind, config, shards, stamp = await receive(reader)
    assert kind == "start"
    assert isinstance(config, DaemonConfig)
    configure_logging(config.verbosity, config.logging_format)
    held_until = [float(stamp)]

    def in_doubt() -> str | None:
        if time.monotonic() < held_until[0]:
            return None
        return "the controller manager's leader lease is not known to be held"

    try:
        daemon = Daemon(config, build_cloud(config))
    except StartupError as exc:
        log.error("%s", exc)
        return 1
    daemon.shards = shards
    daemon.clients.set_write_guard(lambda _method, _path: in_doubt())
    daemon.cloud_calls.set_guard(in_doubt)

    async def serve_parent() -> None:
        while True:
            try:
                message = await receive(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                # The parent is gone, so may be its lease: not one more write.
                log.error("the controller manager's process is gone: exiting")
                os._exit(1)
            if message[0] == "lease":
                held_until[0] = float(message[1])
            elif message[0] == "metrics":
                await send(writer, ("metrics", list(daemon.metrics.registry.collect())))

    async def report_synced() -> None:
        await daemon.caches_synced.wait()
        await send(writer, ("synced",))

    tasks = [asyncio.create_task(serve_parent()), asyncio.create_task(report_synced())]
    try:
        return await daemon.run()
    except StartupError as exc:
        log.error("%s", exc)
        return 1
    finally:
        for task in tasks:
            task.cancel()


def main(argv: list[str]) -> int:
    """``python -m kube_ccm.app.workerproc FD PARENT_PID``: a worker, as the pool starts it."""
    fd, parent = int(argv[0]), int(argv[1])
    _die_with_parent(parent)
    return asyncio.run(_worker(socket.socket(fileno=fd)))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
