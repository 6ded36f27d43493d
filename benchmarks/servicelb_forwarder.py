"""The ServiceLB forwarder's two modes against no forwarder at all.

    sudo .venv/bin/python benchmarks/servicelb_forwarder.py [--runs 3] [--duration 5]
        [--modes direct iptables userspace] [--markdown docs/benchmarks.md]

Needs root (network namespaces) and Go (the load generator, ``benchmarks/netload``,
built into a temporary directory). Nothing leaves the machine and the host's own
network is not touched: the script creates four network namespaces, ``<p>-hub``
with a bridge and ``<p>-cli`` (the client, 10.251.0.1), ``<p>-fwd`` (the svclb pod,
10.251.0.2) and ``<p>-srv`` (the backend, 10.251.0.3), each joined to the bridge by
a veth, and deletes them (with their links, addresses, sysctls and iptables rules)
when it ends, however it ends. The forwarding pod's sysctls (``ip_forward``,
``send_redirects``) and ``tcp_tw_reuse`` in the client and the pod are set inside
those namespaces only.

Per mode:

``direct``     the client talks to the backend (the baseline);
``iptables``   ``kube-ccm forward --mode iptables`` in the pod namespace, the client
               talks to the pod: DNAT to the backend, MASQUERADE, forwarded by the
               kernel (traffic enters and leaves by the pod's one interface, as in
               a pod whose destination is a ClusterIP);
``userspace``  ``kube-ccm forward --mode userspace`` in the pod namespace.

One forwarder process per port, as the DaemonSet has one container per Service
port: a TCP echo port, a TCP discard port and a UDP echo port; both modes' forwarders
run at once, on ports of their own, and the cells are interleaved (for each run, each
metric, each mode), so a change in the shared machine's load falls on all modes
alike. Measured, ``--runs`` times for ``--duration`` seconds (``rr``: 5,000 round
trips):

* ``cps``: connections per second, 8 concurrent clients each connecting, sending
  one byte, reading it back and closing;
* ``tput``: MB/s over one TCP connection writing 64 KiB chunks to the discard port;
* ``rr``: p50 and p99 round-trip time of a 64-byte request/response on one
  connection (what the forwarder adds to latency);
* ``udp``: UDP datagram round trips per second, 8 clients each with its own socket
  (so 8 sessions in userspace mode).

Also the forwarder's CPU seconds per cell (userspace: its process; iptables: the
kernel's, not attributable) and the 1-minute load average before each cell (the
machine is shared). Prints one JSON object per cell; ``--markdown`` appends the
medians with their min-max.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _bench import REPO, append_markdown, cpu_seconds, emit, load_average, markdown_table

NETLOAD = Path(__file__).resolve().parent / "netload"
SUBNET = "10.251.0"
ADDRESSES = {"cli": f"{SUBNET}.1", "fwd": f"{SUBNET}.2", "srv": f"{SUBNET}.3"}
# (name, protocol, forwarder port, backend port); each mode's forwarders on their own
# ports (iptables 8001-8003, userspace 8011-8013), so both run at once
PORTS = (("echo", "TCP", 8001, 9001), ("sink", "TCP", 8002, 9002), ("udp", "UDP", 8003, 9003))
PORT_OFFSET = {"direct": 0, "iptables": 0, "userspace": 10}
METRICS = ("cps", "tput", "rr", "udp")


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, check=check, capture_output=True, text=True)


def in_ns(ns: str, *argv: str) -> list[str]:
    return ["ip", "netns", "exec", ns, *argv]


class Topology:
    """Four namespaces on one bridge; removed by :meth:`remove` (also at exit)."""

    def __init__(self) -> None:
        self.prefix = f"kccmfw{os.getpid() % 100000}"
        self.namespaces = [f"{self.prefix}-{role}" for role in ("hub", "cli", "fwd", "srv")]

    def ns(self, role: str) -> str:
        return f"{self.prefix}-{role}"

    def create(self) -> None:
        atexit.register(self.remove)
        for ns in self.namespaces:
            sh("ip", "netns", "add", ns)
            sh(*in_ns(ns, "ip", "link", "set", "lo", "up"))
        hub = self.ns("hub")
        sh(*in_ns(hub, "ip", "link", "add", "br0", "type", "bridge"))
        sh(*in_ns(hub, "ip", "link", "set", "br0", "up"))
        # Bridged frames need not pass the hub's (empty) iptables.
        for name in ("net.bridge.bridge-nf-call-iptables", "net.bridge.bridge-nf-call-ip6tables"):
            sh(*in_ns(hub, "sysctl", "-qw", f"{name}=0"), check=False)
        for role, address in ADDRESSES.items():
            ns, outer = self.ns(role), f"v{role}"
            sh(*in_ns(hub, "ip", "link", "add", outer, "type", "veth", "peer", "eth0", "netns", ns))
            sh(*in_ns(hub, "ip", "link", "set", outer, "master", "br0", "up"))
            sh(*in_ns(ns, "ip", "addr", "add", f"{address}/24", "dev", "eth0"))
            sh(*in_ns(ns, "ip", "link", "set", "eth0", "up"))
            sh(*in_ns(ns, "sysctl", "-qw", "net.ipv4.tcp_tw_reuse=1"))
            sh(*in_ns(ns, "sysctl", "-qw", "net.ipv4.ip_local_port_range=10000 65000"))
        fwd = self.ns("fwd")
        for name in ("net.ipv4.ip_forward=1", "net.ipv4.conf.all.send_redirects=0"):
            sh(*in_ns(fwd, "sysctl", "-qw", name))
        sh(*in_ns(fwd, "sysctl", "-qw", "net.ipv4.conf.eth0.send_redirects=0"))

    def remove(self) -> None:
        for ns in reversed(self.namespaces):
            sh("ip", "netns", "pids", ns, check=False)
            pids = sh("ip", "netns", "pids", ns, check=False).stdout.split()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            sh("ip", "netns", "del", ns, check=False)


def build_netload(directory: Path) -> Path:
    binary = directory / "netload"
    env = {**os.environ, "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"}
    subprocess.run(
        ["go", "build", "-trimpath", "-o", str(binary), "."], cwd=NETLOAD, env=env, check=True
    )
    return binary


@contextlib.contextmanager
def started(
    argv: list[str], ready: str | None = None, ready_file: Path | None = None
) -> Iterator[int]:
    """A process, waited for (a line on stdout, or a file), killed on exit; its pid."""
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        if ready is not None:
            assert process.stdout is not None
            line = process.stdout.readline()
            if ready not in line:
                raise RuntimeError(f"{argv}: {line!r} {process.communicate(timeout=5)}")
        while ready_file is not None and not ready_file.exists():
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError(f"{argv} did not start: {process.communicate()[1]}")
            time.sleep(0.05)
        yield process.pid
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.contextmanager
def forwarders(topology: Topology, mode: str, workdir: Path) -> Iterator[list[int]]:
    """One ``kube-ccm forward`` per port in the pod namespace (none for ``direct``)."""
    if mode == "direct":
        yield []
        return
    with contextlib.ExitStack() as stack:
        pids = []
        for name, proto, base_port, dest in PORTS:
            port = base_port + PORT_OFFSET[mode]
            ready = workdir / f"{mode}-{name}.ready"
            argv = in_ns(
                topology.ns("fwd"),
                "env",
                f"PYTHONPATH={REPO}",
                f"SRC_PORT={port}",
                "SRC_RANGES=0.0.0.0/0",
                f"DEST_PROTO={proto}",
                f"DEST_PORT={dest}",
                f"DEST_IPS={ADDRESSES['srv']}",
                sys.executable,
                "-m",
                "kube_ccm",
                "forward",
                "--mode",
                mode,
                "--ready-file",
                str(ready),
            )
            pids.append(stack.enter_context(started(argv, ready_file=ready)))
        yield pids


def target(mode: str, index: int) -> str:
    _, _, port, dest = PORTS[index]
    if mode == "direct":
        return f"{ADDRESSES['srv']}:{dest}"
    return f"{ADDRESSES['fwd']}:{port + PORT_OFFSET[mode]}"


def measure(
    topology: Topology, netload: Path, mode: str, metric: str, duration: float
) -> dict[str, Any]:
    client = in_ns(topology.ns("cli"), str(netload))
    seconds = f"{duration}s"
    rounds = 5000 if duration else 10
    argv = {
        "cps": [*client, "cps", "-addr", target(mode, 0), "-conc", "8", "-duration", seconds],
        "tput": [*client, "tput", "-addr", target(mode, 1), "-duration", seconds],
        "rr": [*client, "rr", "-addr", target(mode, 0), "-n", str(rounds), "-size", "64"],
        "udp": [*client, "udp", "-addr", target(mode, 2), "-conc", "8", "-duration", seconds],
    }[metric]
    done = subprocess.run(argv, check=True, capture_output=True, text=True, timeout=120)
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def run_all(
    topology: Topology, netload: Path, args: argparse.Namespace, workdir: Path
) -> list[dict[str, Any]]:
    """Every mode's forwarders at once; the cells interleaved (run, metric, mode), so a
    change in the machine's load falls on every mode alike."""
    cells: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        pids = {
            mode: stack.enter_context(forwarders(topology, mode, workdir)) for mode in args.modes
        }
        for mode in args.modes:
            # A first connection through each path, so no cell pays for a cold start.
            measure(topology, netload, mode, "rr", 0)
        for run in range(args.runs):
            for metric in METRICS:
                for mode in args.modes:
                    load = load_average()
                    cpu_before = sum(cpu_seconds(p) for p in pids[mode])
                    started_at = time.monotonic()
                    result = measure(topology, netload, mode, metric, args.duration)
                    elapsed = time.monotonic() - started_at
                    cpu = sum(cpu_seconds(p) for p in pids[mode]) - cpu_before
                    cell = {
                        "benchmark": "servicelb_forwarder",
                        "mode": mode,
                        "metric": metric,
                        "run": run,
                        "load_1m": load,
                        "forwarder_cpu_share": round(cpu / elapsed, 2) if pids[mode] else None,
                        **result,
                    }
                    emit(cell)
                    cells.append(cell)
    return cells


def _median(cells: list[dict[str, Any]], key: str) -> str:
    values = [float(c[key]) for c in cells]
    mid = statistics.median(values)
    low, high = min(values), max(values)
    digits = 0 if mid >= 100 else 1
    return f"{mid:.{digits}f} ({low:.{digits}f}-{high:.{digits}f})"


def table(cells: list[dict[str, Any]], modes: list[str]) -> str:
    rows = []
    for mode in modes:
        mine = [c for c in cells if c["mode"] == mode]

        def of(metric: str, mine: list[dict[str, Any]] = mine) -> list[dict[str, Any]]:
            return [c for c in mine if c["metric"] == metric]

        cpu = [c["forwarder_cpu_share"] for c in mine if c["forwarder_cpu_share"] is not None]
        loads = [c["load_1m"] for c in mine]
        rows.append(
            [
                mode,
                _median(of("cps"), "per_s"),
                _median(of("tput"), "mb_per_s"),
                _median(of("rr"), "p50_us"),
                _median(of("rr"), "p99_us"),
                _median(of("udp"), "per_s"),
                f"{max(cpu):.2f}" if cpu and mode == "userspace" else "-",
                f"{min(loads):.2f}-{max(loads):.2f}",
            ]
        )
    return markdown_table(
        "ServiceLB forwarder: direct, iptables, userspace (median of runs, min-max)",
        [
            "mode",
            "TCP connections/s",
            "TCP MB/s (1 conn)",
            "RTT p50 µs",
            "RTT p99 µs",
            "UDP round trips/s",
            "forwarder CPU (cores, max)",
            "load avg 1m",
        ],
        rows,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per cell")
    parser.add_argument(
        "--modes", nargs="+", default=["direct", "iptables", "userspace"], metavar="MODE"
    )
    parser.add_argument("--markdown", type=Path, default=None)
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("needs root: it creates network namespaces", file=sys.stderr)
        return 2
    topology = Topology()
    cells: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="kccm-fwd-bench-") as tmp:
        workdir = Path(tmp)
        netload = build_netload(workdir)
        try:
            topology.create()
            server = in_ns(
                topology.ns("srv"),
                str(netload),
                "server",
                "-echo",
                f":{PORTS[0][3]}",
                "-sink",
                f":{PORTS[1][3]}",
                "-udp",
                f":{PORTS[2][3]}",
            )
            with started(server, ready="ready"):
                cells = run_all(topology, netload, args, workdir)
        finally:
            topology.remove()
    text = table(cells, args.modes)
    print(text)
    append_markdown(args.markdown, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
