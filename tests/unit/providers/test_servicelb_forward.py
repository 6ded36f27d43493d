"""``kube-ccm forward``: klipper-lb's environment decoded, its iptables rules, and
the userspace proxy carrying TCP and UDP on loopback."""

from __future__ import annotations

import argparse
import asyncio
import errno
import ipaddress
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, cast

import pytest

from kube_ccm.app.cli import build_parser
from kube_ccm.providers.servicelb import forward
from kube_ccm.providers.servicelb.forward import ConfigError, ForwardSpec, SetupError
from kube_ccm.providers.servicelb.forward import _iptables as forward_iptables
from kube_ccm.providers.servicelb.forward._userspace import UserspaceForwarder

REPO = Path(__file__).resolve().parents[3]
ENV = {
    "SRC_PORT": "8080",
    "SRC_RANGES": "0.0.0.0/0",
    "DEST_PROTO": "TCP",
    "DEST_PORT": "80",
    "DEST_IPS": "10.43.0.10",
}


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["forward", *argv])


def spec(**env: str) -> ForwardSpec:
    return forward.spec_from(parse(), {**ENV, **env})


def loopback(
    protocol: forward.Protocol, dest_port: int, ranges: str = "127.0.0.0/8"
) -> ForwardSpec:
    return ForwardSpec(
        src_port=0,
        src_ranges=(ipaddress.ip_network(ranges),),
        protocol=protocol,
        dest_port=dest_port,
        dest_ips=(ipaddress.ip_address("127.0.0.1"),),
        listen_ips=(ipaddress.ip_address("127.0.0.1"),),
    )


# -- the environment --------------------------------------------------------------


def test_k3s_environment_decodes_as_klipper_lb_reads_it() -> None:
    decoded = spec(
        SRC_RANGES="0.0.0.0/0,::/0, 192.0.2.7/24",
        DEST_PROTO="udp",
        DEST_IPS="10.43.0.10,fd00:43::10",
    )
    assert decoded.src_port == 8080
    assert decoded.protocol == "UDP"
    assert decoded.dest_port == 80
    assert [str(n) for n in decoded.src_ranges] == ["0.0.0.0/0", "::/0", "192.0.2.0/24"]
    assert decoded.families == (4, 6)
    assert decoded.allows(ipaddress.ip_address("::ffff:198.51.100.1"))


def test_a_flag_wins_over_its_variable() -> None:
    decoded = forward.spec_from(parse("--dest-port", "30080", "--dest-ips", "10.0.0.5"), ENV)
    assert (decoded.dest_port, str(decoded.dest_ips[0])) == (30080, "10.0.0.5")


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("SRC_PORT", "http", "SRC_PORT='http': expected a port number"),
        ("DEST_PORT", "70000", "DEST_PORT='70000': expected a port number"),
        ("DEST_IPS", "10.43.0.x", "'10.43.0.x' is not an IP address"),
        ("DEST_IPS", " , ", "DEST_IPS is empty"),
        ("SRC_RANGES", "", "SRC_RANGES is empty"),
        ("SRC_RANGES", "10.0.0.0/33", "'10.0.0.0/33' is not a CIDR"),
        ("DEST_PROTO", "ICMP", "expected TCP, UDP or SCTP"),
    ],
)
def test_a_malformed_value_names_the_variable_and_what_is_expected(
    name: str, value: str, expected: str
) -> None:
    with pytest.raises(ConfigError, match=expected.replace("(", r"\(")):
        spec(**{name: value})


def test_a_missing_variable_names_its_flag() -> None:
    env = {k: v for k, v in ENV.items() if k != "DEST_IPS"}
    with pytest.raises(ConfigError, match=r"DEST_IPS is not set: .* or --dest-ips"):
        forward.spec_from(parse(), env)


def test_bad_input_exits_2_with_the_message_on_stderr(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status = forward.run(parse(), {**ENV, "DEST_IPS": "nowhere"})
    assert status == 2
    assert "DEST_IPS='nowhere'" in capsys.readouterr().err


def test_sctp_in_userspace_mode_says_to_use_iptables(capsys: pytest.CaptureFixture[str]) -> None:
    assert forward.run(parse(), {**ENV, "DEST_PROTO": "SCTP"}) == 2
    assert "--mode iptables" in capsys.readouterr().err


def test_mode_from_flag_or_environment() -> None:
    assert forward.mode_from(parse(), {}) == "userspace"
    assert forward.mode_from(parse(), {"FORWARD_MODE": "IPTables"}) == "iptables"
    assert forward.mode_from(parse("--mode", "userspace"), {"FORWARD_MODE": "iptables"}) == (
        "userspace"
    )
    with pytest.raises(ConfigError, match="FORWARD_MODE='nat'"):
        forward.mode_from(parse(), {"FORWARD_MODE": "nat"})


class _NoRoute(socket.socket):
    def connect(self, address: object) -> None:
        raise OSError(errno.ENETUNREACH, os.strerror(errno.ENETUNREACH))


def test_no_route_to_any_destination_is_a_setup_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("socket.socket", _NoRoute)
    with pytest.raises(
        SetupError, match=r"no route from this pod to any of DEST_IPS: 10\.43\.0\.10 \(Network is"
    ):
        forward.check_routes(spec())


# -- iptables rules ---------------------------------------------------------------


def test_iptables_rules_are_klipper_lbs() -> None:
    rules = forward_iptables.rules(spec(SRC_RANGES="192.0.2.0/24,198.51.100.0/24"))
    assert [" ".join(r.argv()) for r in rules] == [
        "iptables -w -t filter -I FORWARD -s 192.0.2.0/24 -p tcp --dport 80 -j ACCEPT",
        "iptables -w -t filter -I FORWARD -s 198.51.100.0/24 -p tcp --dport 80 -j ACCEPT",
        "iptables -w -t filter -A FORWARD -d 10.43.0.10/32 -p tcp --dport 80 -j DROP",
        "iptables -w -t nat -I PREROUTING -p tcp --dport 8080 -j DNAT --to 10.43.0.10:80",
        "iptables -w -t nat -I POSTROUTING -d 10.43.0.10/32 -p tcp -j MASQUERADE",
    ]


def test_iptables_rules_dual_stack_and_local_traffic() -> None:
    decoded = spec(
        SRC_RANGES="0.0.0.0/0,::/0",
        DEST_PROTO="UDP",
        DEST_PORT="31053",
        DEST_IPS="10.192.0.2,fd6b::2",
        LISTEN_IPS="10.192.0.2",
    )
    lines = [" ".join(r.argv()) for r in forward_iptables.rules(decoded)]
    assert "ip6tables -w -t filter -I FORWARD -s ::/0 -p udp --dport 31053 -j ACCEPT" in lines
    assert (
        "iptables -w -t nat -I PREROUTING -d 10.192.0.2 -p udp --dport 8080 -j DNAT "
        "--to 10.192.0.2:31053"
    ) in lines
    assert (
        "ip6tables -w -t nat -I PREROUTING -p udp --dport 8080 -j DNAT --to [fd6b::2]:31053"
    ) in lines
    assert "ip6tables -w -t nat -I POSTROUTING -d fd6b::2/128 -p udp -j MASQUERADE" in lines
    only_v4 = forward_iptables.rules(decoded, families=(4,))
    assert {r.family for r in only_v4} == {4}


@pytest.fixture
def sysctls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[int, Path]:
    paths = {4: tmp_path / "ip_forward", 6: tmp_path / "forwarding"}
    for path in paths.values():
        path.write_text("1\n")
    monkeypatch.setattr(forward_iptables, "FORWARDING_SYSCTL", paths)
    return paths


def test_iptables_mode_refuses_when_forwarding_is_off(sysctls: dict[int, Path]) -> None:
    sysctls[4].write_text("0\n")
    with (
        pytest.raises(SetupError, match=r"pod sysctl net.ipv4.ip_forward=1 .* --mode userspace"),
        forward_iptables.installed_rules(spec()),
    ):
        pass


def test_iptables_rules_are_deleted_in_reverse_on_exit(
    sysctls: dict[int, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[list[str]] = []

    def fake_run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        ran.append(argv)
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(forward_iptables, "_run", fake_run)
    monkeypatch.setattr("shutil.which", lambda name: f"/usr/sbin/{name}")
    with forward_iptables.installed_rules(spec()) as added:
        assert len(ran) == len(added) == 4
    deletes = ran[4:]
    assert [d[4] for d in deletes] == ["-D"] * 4
    assert [d[5:] for d in deletes] == [a[5:] for a in reversed(ran[:4])]


def test_iptables_refused_says_net_admin(
    sysctls: dict[int, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[list[str]] = []

    def refusing(argv: list[str]) -> subprocess.CompletedProcess[str]:
        ran.append(argv)
        if len(ran) == 2:
            return subprocess.CompletedProcess(argv, 4, "", "iptables: Permission denied")
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(forward_iptables, "_run", refusing)
    monkeypatch.setattr("shutil.which", lambda name: f"/usr/sbin/{name}")
    with (
        pytest.raises(SetupError, match="needs the NET_ADMIN capability"),
        forward_iptables.installed_rules(spec()),
    ):
        pass
    assert ran[-1][4] == "-D"  # the one rule added before is removed again


# -- the userspace proxy on loopback ----------------------------------------------


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    # Echo until EOF, then say goodbye: checks that half-close passes through.
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()
    writer.write(b"bye")
    await writer.drain()
    writer.close()


@pytest.fixture
async def tcp_backend() -> AsyncIterator[int]:
    server = await asyncio.start_server(_echo, "127.0.0.1", 0)
    async with server:
        port: int = server.sockets[0].getsockname()[1]
        yield port


async def test_tcp_is_forwarded_both_ways_with_half_close(tcp_backend: int) -> None:
    async with UserspaceForwarder(loopback("TCP", tcp_backend)) as fwd:
        reader, writer = await asyncio.open_connection(*fwd.bound[0])
        payload = os.urandom(1 << 20)
        writer.write(payload)
        writer.write_eof()
        received = await asyncio.wait_for(reader.read(), 10)
        writer.close()
    assert received == payload + b"bye"


async def test_bytes_sent_before_the_destination_connects_are_not_lost(
    tcp_backend: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As on Python < 3.11.3 (Debian 12's 3.11.2, the image's): a pause_reading made in
    # connection_made is ignored, so the client's first bytes arrive before the
    # destination is connected.
    selector = asyncio.selector_events._SelectorSocketTransport  # type: ignore[attr-defined]
    monkeypatch.setattr(selector, "pause_reading", lambda self: None)
    monkeypatch.setattr(selector, "resume_reading", lambda self: None)
    original = asyncio.BaseEventLoop.create_connection

    async def slow_connect(self: asyncio.BaseEventLoop, *args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(0.2)
        return await original(self, *args, **kwargs)

    monkeypatch.setattr(asyncio.BaseEventLoop, "create_connection", slow_connect)
    async with UserspaceForwarder(loopback("TCP", tcp_backend)) as fwd:
        reader, writer = await asyncio.open_connection(*fwd.bound[0])
        writer.write(b"early")
        writer.write_eof()
        assert await asyncio.wait_for(reader.read(), 10) == b"earlybye"
        writer.close()


async def test_tcp_client_outside_src_ranges_is_reset(tcp_backend: int) -> None:
    async with UserspaceForwarder(loopback("TCP", tcp_backend, "192.0.2.0/24")) as fwd:
        reader, writer = await asyncio.open_connection(*fwd.bound[0])
        with pytest.raises(ConnectionResetError):
            await asyncio.wait_for(reader.read(), 5)
        writer.close()


async def test_tcp_destination_refusing_resets_the_client_and_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        dead_port = closed.getsockname()[1]
    async with UserspaceForwarder(loopback("TCP", dead_port)) as fwd:
        for _ in range(3):
            reader, writer = await asyncio.open_connection(*fwd.bound[0])
            with pytest.raises(ConnectionResetError):
                await asyncio.wait_for(reader.read(), 5)
            writer.close()
    warnings = [r for r in caplog.records if "cannot connect to 127.0.0.1" in r.getMessage()]
    assert len(warnings) == 1  # rate-limited: one line for three failures


async def test_a_port_in_use_is_a_setup_error(tcp_backend: int) -> None:
    taken = ForwardSpec(**{**loopback("TCP", tcp_backend).__dict__, "src_port": tcp_backend})
    with pytest.raises(SetupError, match=f"TCP port {tcp_backend} on 127.0.0.1 is already in use"):
        async with UserspaceForwarder(taken):
            pass


class _UdpEcho(asyncio.DatagramProtocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # The selector loop's datagram transport does not subclass DatagramTransport.
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.transport.sendto(data.upper(), addr)


@pytest.fixture
async def udp_backend() -> AsyncIterator[int]:
    loop = asyncio.get_running_loop()
    transport, _ = await loop.create_datagram_endpoint(_UdpEcho, local_addr=("127.0.0.1", 0))
    try:
        yield transport.get_extra_info("sockname")[1]
    finally:
        transport.close()


async def _udp_ask(address: tuple[str, int], payload: bytes) -> bytes:
    loop = asyncio.get_running_loop()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as client:
        client.setblocking(False)
        client.connect(address)
        await loop.sock_sendall(client, payload)
        return await asyncio.wait_for(loop.sock_recv(client, 65535), 5)


async def test_udp_datagrams_get_their_replies_per_client(udp_backend: int) -> None:
    async with UserspaceForwarder(loopback("UDP", udp_backend)) as fwd:
        answers = await asyncio.gather(*(_udp_ask(fwd.bound[0], b"ping %d" % i) for i in range(5)))
        assert answers == [b"PING %d" % i for i in range(5)]
        assert fwd.udp_sessions() == 5


async def test_udp_sessions_close_after_the_idle_timeout(udp_backend: int) -> None:
    async with UserspaceForwarder(loopback("UDP", udp_backend), udp_idle_timeout=0.2) as fwd:
        assert await _udp_ask(fwd.bound[0], b"x") == b"X"
        assert fwd.udp_sessions() == 1
        deadline = time.monotonic() + 5
        while fwd.udp_sessions() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert fwd.udp_sessions() == 0


async def test_udp_client_outside_src_ranges_gets_nothing(udp_backend: int) -> None:
    async with UserspaceForwarder(loopback("UDP", udp_backend, "192.0.2.0/24")) as fwd:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(_udp_ask(fwd.bound[0], b"x"), 0.3)
        assert fwd.udp_sessions() == 0


def _env(port: int, dest_port: int) -> Mapping[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "SRC_PORT": str(port),
        "SRC_RANGES": "127.0.0.0/8",
        "DEST_PROTO": "TCP",
        "DEST_PORT": str(dest_port),
        "DEST_IPS": "127.0.0.1",
        "LISTEN_IPS": "127.0.0.1",
    }


def test_the_subcommand_is_ready_then_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    ready = tmp_path / "ready"
    process = subprocess.Popen(
        [sys.executable, "-m", "kube_ccm", "forward", "--ready-file", str(ready)],
        env=_env(port, 9),
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        while not ready.exists():
            assert process.poll() is None, process.communicate()[1]
            assert time.monotonic() < deadline, "not ready within 20 s"
            time.sleep(0.05)
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5):
                pass
        except ConnectionResetError:
            # Accepted, then reset: nothing listens on the destination (port 9), so
            # the forwarder drops the client, sometimes before connect() returns here.
            # Not listening at all would be ConnectionRefusedError.
            pass
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=10)
    finally:
        process.kill()
    assert process.returncode == 0, err
    assert "stopping" in err
    assert not ready.exists()
    with socket.socket() as again:
        again.bind(("127.0.0.1", port))  # released
