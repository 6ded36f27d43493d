"""The userspace mode of ``kube-ccm forward``: an asyncio TCP and UDP proxy.

TCP: each accepted connection from inside ``SRC_RANGES`` gets a connection to the
first of ``DEST_IPS`` (its own family first) that accepts; bytes are copied both
ways by two :class:`asyncio.Protocol` halves, with flow control (a full write
buffer on one side pauses reading on the other) and half-close passed through.
A client outside ``SRC_RANGES`` is reset at once; so is one whose destinations
all refuse (as a ClusterIP without endpoints rejects it).

UDP: a session per client address, each with its own socket connected to the
destination, so replies go back to the client that caused them; a session is
closed after ``udp_idle_timeout`` seconds without a datagram either way. At most
:data:`MAX_UDP_SESSIONS` at once; a datagram that would open one more is dropped
(and logged, rate-limited), as a full conntrack table drops it.

Why protocols and not streams: they copy each chunk once, with no reader buffer
or task per direction; the benchmark (``benchmarks/servicelb_forwarder.py``)
measured both and this is what the numbers in ``docs/benchmarks.md`` are from.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import ipaddress
import logging
import socket
import struct
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeVar, cast

from kube_ccm.providers.servicelb.forward._spec import ForwardSpec, IPAddress, SetupError

log = logging.getLogger("kube_ccm.forward")

CONNECT_TIMEOUT = 10.0
MAX_UDP_SESSIONS = 4096
BACKLOG = 1024
UDP_BUFFER = 65535
_LOG_EVERY = 10.0


class _RateLimitedLog:
    """Log a warning per key at most once per :data:`_LOG_EVERY` seconds."""

    def __init__(self) -> None:
        self._last: dict[str, float] = {}

    def warning(self, key: str, message: str, *args: object) -> None:
        now = time.monotonic()
        if now - self._last.get(key, -_LOG_EVERY) >= _LOG_EVERY:
            self._last[key] = now
            log.warning(message, *args)


_P = TypeVar("_P")


def _returning(protocol: _P) -> Callable[[], _P]:
    """A protocol factory handing out one protocol made beforehand."""
    return lambda: protocol


def _reset(transport: asyncio.Transport) -> None:
    """Close with a TCP RST, as a rejecting firewall or a refused connect would."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


def _client_ip(peer: Any) -> IPAddress | None:
    try:
        return ipaddress.ip_address(peer[0].split("%", 1)[0])
    except (TypeError, ValueError, IndexError):
        return None


# -- TCP ------------------------------------------------------------------------------


class _Half(asyncio.Protocol):
    """One side of a proxied TCP connection: what it reads, its peer writes."""

    def __init__(self, forwarder: UserspaceForwarder) -> None:
        self.forwarder = forwarder
        self.transport: asyncio.Transport | None = None
        self.peer: _Half | None = None
        self.eof = False
        self.closed = False
        self.pending: list[bytes] = []
        """What arrived before the peer existed (Python before 3.11.3 ignores a
        ``pause_reading`` made in ``connection_made``): flushed to it once connected."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        peer = self.peer
        if peer is not None and peer.transport is not None:
            peer.transport.write(data)
        else:
            self.pending.append(data)

    def eof_received(self) -> bool:
        self.eof = True
        peer = self.peer
        if peer is not None and peer.transport is not None and not peer.closed:
            if peer.eof:
                # Both sides are done: closing flushes what is still buffered.
                peer.transport.close()
                return False
            peer.transport.write_eof()
        return True

    # The peer's write buffer is full: stop reading until it drains.
    def pause_writing(self) -> None:
        peer = self.peer
        if peer is not None and peer.transport is not None and not peer.closed:
            peer.transport.pause_reading()

    def resume_writing(self) -> None:
        peer = self.peer
        if peer is not None and peer.transport is not None and not peer.closed:
            peer.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.forwarder.halves.discard(self)
        peer = self.peer
        if peer is not None and peer.transport is not None and not peer.closed:
            if exc is None:
                peer.transport.close()
            else:
                peer.transport.abort()


class _ClientHalf(_Half):
    """The accepted side: checks the client, then opens the destination side."""

    def __init__(self, forwarder: UserspaceForwarder, family: int) -> None:
        super().__init__(forwarder)
        self.family = family

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        assert self.transport is not None
        client = _client_ip(transport.get_extra_info("peername"))
        if client is None or not self.forwarder.spec.allows(client):
            log.debug("refused %s: outside SRC_RANGES", client)
            _reset(self.transport)
            return
        self.forwarder.halves.add(self)
        self.transport.pause_reading()
        task = asyncio.get_running_loop().create_task(self._connect())
        self.forwarder.tasks.add(task)
        task.add_done_callback(self.forwarder.tasks.discard)

    async def _connect(self) -> None:
        spec = self.forwarder.spec
        loop = asyncio.get_running_loop()
        for dest in spec.destinations(self.family):
            if self.closed:
                return
            upstream = _Half(self.forwarder)
            try:
                async with asyncio.timeout(CONNECT_TIMEOUT):
                    await loop.create_connection(_returning(upstream), str(dest), spec.dest_port)
            except (OSError, TimeoutError) as exc:
                reason = getattr(exc, "strerror", None) or type(exc).__name__
                self.forwarder.warn.warning(
                    f"connect {dest}",
                    "cannot connect to %s port %d: %s (client connections are reset)",
                    dest,
                    spec.dest_port,
                    reason,
                )
                continue
            self.forwarder.halves.add(upstream)
            if self.closed or self.transport is None:
                if upstream.transport is not None:
                    upstream.transport.close()
                return
            self.peer, upstream.peer = upstream, self
            if upstream.transport is not None:
                for chunk in self.pending:
                    upstream.transport.write(chunk)
                self.pending.clear()
                if self.eof:
                    upstream.transport.write_eof()
            self.transport.resume_reading()
            return
        if self.transport is not None:
            _reset(self.transport)


# -- UDP ------------------------------------------------------------------------------


class _UdpSession:
    """One client's datagrams: a socket connected to the destination."""

    def __init__(
        self,
        listener: _UdpListener,
        client: Any,
        sock: socket.socket,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.listener = listener
        self.client = client
        self.sock = sock
        self.loop = loop
        self.active = time.monotonic()
        loop.add_reader(sock.fileno(), self._readable)

    def send(self, data: bytes) -> None:
        self.active = time.monotonic()
        with contextlib.suppress(BlockingIOError, InterruptedError, ConnectionRefusedError):
            self.sock.send(data)

    def _readable(self) -> None:
        transport = self.listener.transport
        for _ in range(64):
            try:
                data = self.sock.recv(UDP_BUFFER)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                # ICMP port unreachable from the destination, reported on the next recv.
                self.listener.forwarder.warn.warning(
                    f"udp {self.sock.getpeername()[0]}",
                    "UDP to %s: %s",
                    self.sock.getpeername()[0],
                    exc.strerror or exc,
                )
                return
            self.active = time.monotonic()
            if transport is not None:
                transport.sendto(data, self.client)

    def close(self) -> None:
        self.loop.remove_reader(self.sock.fileno())
        self.sock.close()


class _UdpListener(asyncio.DatagramProtocol):
    def __init__(self, forwarder: UserspaceForwarder, family: int) -> None:
        self.forwarder = forwarder
        self.family = family
        self.transport: asyncio.DatagramTransport | None = None
        self.sessions: dict[Any, _UdpSession] = {}

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # The selector loop's datagram transport does not subclass DatagramTransport.
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: Any) -> None:
        session = self.sessions.get(addr)
        if session is None:
            session = self._open(addr)
            if session is None:
                return
        session.send(data)

    def _open(self, addr: Any) -> _UdpSession | None:
        forwarder = self.forwarder
        client = _client_ip(addr)
        if client is None or not forwarder.spec.allows(client):
            log.debug("dropped a datagram from %s: outside SRC_RANGES", client)
            return None
        if forwarder.udp_sessions() >= MAX_UDP_SESSIONS:
            forwarder.warn.warning(
                "udp sessions",
                "%d UDP sessions open: dropping datagrams of new clients until some idle out",
                MAX_UDP_SESSIONS,
            )
            return None
        for dest in forwarder.spec.destinations(self.family):
            family = socket.AF_INET if dest.version == 4 else socket.AF_INET6
            sock = socket.socket(family, socket.SOCK_DGRAM)
            sock.setblocking(False)
            try:
                sock.connect((str(dest), forwarder.spec.dest_port))
            except OSError as exc:
                sock.close()
                forwarder.warn.warning(f"udp {dest}", "UDP to %s: %s", dest, exc.strerror or exc)
                continue
            session = _UdpSession(self, addr, sock, asyncio.get_running_loop())
            self.sessions[addr] = session
            return session
        return None

    def expire(self, idle_timeout: float) -> None:
        cutoff = time.monotonic() - idle_timeout
        for addr in [a for a, s in self.sessions.items() if s.active < cutoff]:
            self.sessions.pop(addr).close()

    def close(self) -> None:
        for session in self.sessions.values():
            session.close()
        self.sessions.clear()
        if self.transport is not None:
            self.transport.close()


# -- the forwarder --------------------------------------------------------------------


class UserspaceForwarder:
    """Listens on ``SRC_PORT`` for each family of ``DEST_IPS``; an async context manager."""

    def __init__(self, spec: ForwardSpec, *, udp_idle_timeout: float = 60.0) -> None:
        self.spec = spec
        self.udp_idle_timeout = udp_idle_timeout
        self.warn = _RateLimitedLog()
        self.halves: set[_Half] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self._servers: list[asyncio.Server] = []
        self._udp: list[_UdpListener] = []
        self._sweeper: asyncio.Task[None] | None = None
        self.bound: list[tuple[str, int]] = []

    def udp_sessions(self) -> int:
        return sum(len(listener.sessions) for listener in self._udp)

    def _addresses(self, family: int) -> list[str]:
        chosen = [str(ip) for ip in self.spec.listen_ips if ip.version == family]
        if chosen or self.spec.listen_ips:
            return chosen
        return ["0.0.0.0" if family == 4 else "::"]

    async def __aenter__(self) -> UserspaceForwarder:
        try:
            await self._listen()
        except BaseException:
            await self.aclose()
            raise
        if self._udp:
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep())
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _listen(self) -> None:
        loop = asyncio.get_running_loop()
        port = self.spec.src_port
        skipped: list[str] = []
        for family in self.spec.families:
            af = socket.AF_INET if family == 4 else socket.AF_INET6
            for host in self._addresses(family):
                try:
                    if self.spec.protocol == "TCP":
                        server = await loop.create_server(
                            functools.partial(_ClientHalf, self, family),
                            host,
                            port,
                            family=af,
                            backlog=BACKLOG,
                            reuse_address=True,
                        )
                        self._servers.append(server)
                        sockname = server.sockets[0].getsockname()
                    else:
                        sock = socket.socket(af, socket.SOCK_DGRAM)
                        if af == socket.AF_INET6:
                            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                        try:
                            sock.bind((host, port))
                        except OSError:
                            sock.close()
                            raise
                        listener = _UdpListener(self, family)
                        await loop.create_datagram_endpoint(_returning(listener), sock=sock)
                        self._udp.append(listener)
                        sockname = sock.getsockname()
                except OSError as exc:
                    if exc.errno == errno.EADDRINUSE:
                        raise SetupError(
                            f"{self.spec.protocol} port {port} on {host} is already in use: "
                            "another Service or process holds it on this node"
                        ) from None
                    if exc.errno in (errno.EACCES, errno.EPERM):
                        raise SetupError(
                            f"not allowed to bind {self.spec.protocol} port {port}: ports "
                            "below 1024 need NET_BIND_SERVICE (or the pod sysctl "
                            "net.ipv4.ip_unprivileged_port_start=0)"
                        ) from None
                    skipped.append(f"{host} ({exc.strerror or exc})")
                    continue
                self.bound.append((str(sockname[0]), int(sockname[1])))
        if not self.bound:
            raise SetupError(
                f"could not listen on {self.spec.protocol} port {port}: {'; '.join(skipped)}"
            )
        for entry in skipped:
            log.warning("not listening on %s", entry)

    async def _sweep(self) -> None:
        period = max(0.05, min(self.udp_idle_timeout / 2, 5.0))
        while True:
            await asyncio.sleep(period)
            for listener in self._udp:
                listener.expire(self.udp_idle_timeout)

    async def aclose(self) -> None:
        """Stop listening, close every connection and session (buffers flushed)."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        for server in self._servers:
            server.close()
        for task in list(self.tasks):
            task.cancel()
        for half in list(self.halves):
            if half.transport is not None:
                half.transport.close()
        for listener in self._udp:
            listener.close()
        for server in self._servers:
            await server.wait_closed()
        self._servers.clear()
        self._udp.clear()
