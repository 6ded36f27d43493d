"""A TCP and UDP echo backend in kube-ccm's own image, and the probes that talk to it:
what the ServiceLB real-kubelet test and ``kube-ccm sandbox --real-nodes N --provider
servicelb`` send traffic to.

The backend answers each TCP connection with ``tcp backend`` and each UDP datagram
with ``udp backend`` on :data:`ECHO_PORT`, in the pod network, as the image's user;
asked ``peer`` (:data:`PEER`), it answers ``peer <address>`` instead: the source
address it saw, to tell whether a client's own address reached it. The probes return
the answer or ``error: <why>``, never raise; with ``netns`` they send from that network
namespace (a name under /var/run/netns, e.g. :attr:`RealNodes.client_netns
<kube_ccm.testbed.nodes.RealNodes.client_netns>`).
"""

from __future__ import annotations

import ctypes
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kube_ccm.runtime.client import KubeClient

__all__ = [
    "ECHO_PORT",
    "ECHO_SCRIPT",
    "PEER",
    "create_echo",
    "echo_deployment",
    "tcp_answer",
    "udp_answer",
]

ECHO_PORT = 8080
PEER = b"peer"
"""What to send for the source address the backend saw (``peer <address>``)."""
ECHO_SCRIPT = f"""
import socket, threading
def answer(kind, data, peer):
    return b"peer " + peer[0].encode() if data.startswith({PEER!r}) else kind + b" backend"
def tcp():
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", {ECHO_PORT}))
    s.listen()
    while True:
        c, a = s.accept()
        c.sendall(answer(b"tcp", c.recv(100), a))
        c.close()
def udp():
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.bind(("0.0.0.0", {ECHO_PORT}))
    while True:
        d, a = u.recvfrom(100)
        u.sendto(answer(b"udp", d, a), a)
threading.Thread(target=tcp, daemon=True).start()
udp()
"""


def echo_deployment(
    name: str, image: str, *, replicas: int = 1, node_selector: dict[str, str] | None = None
) -> dict[str, Any]:
    """A Deployment of the echo backend, pods labelled ``app: <name>``, never pulled,
    ready once the TCP port accepts."""
    labels = {"app": name}
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 1,
        "automountServiceAccountToken": False,
        "containers": [
            {
                "name": "echo",
                "image": image,
                "imagePullPolicy": "Never",
                "command": ["python", "-c", ECHO_SCRIPT],
                "ports": [
                    {"containerPort": ECHO_PORT, "protocol": "TCP"},
                    {"containerPort": ECHO_PORT, "protocol": "UDP"},
                ],
                "readinessProbe": {"tcpSocket": {"port": ECHO_PORT}, "periodSeconds": 1},
            }
        ],
    }
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": spec},
        },
    }


async def create_echo(
    client: KubeClient, name: str, image: str, *, namespace: str = "default", **options: Any
) -> None:
    """Create :func:`echo_deployment` (``options`` are its keywords) in ``namespace``."""
    await client.create(
        f"/apis/apps/v1/namespaces/{namespace}/deployments",
        echo_deployment(name, image, **options),
    )


def tcp_answer(
    ip: str, port: int, *, timeout: float = 3.0, message: bytes = b"hello", netns: str = ""
) -> str:
    """What a TCP connection to ``ip:port`` is answered, or ``error: <why>``."""

    def probe() -> str:
        try:
            with socket.create_connection((ip, port), timeout=timeout) as conn:
                conn.sendall(message)
                return conn.recv(100).decode(errors="replace") or "closed"
        except OSError as exc:
            return f"error: {exc.strerror or exc}"

    return _in_netns(netns, probe)


def udp_answer(
    ip: str, port: int, *, timeout: float = 2.0, message: bytes = b"hello", netns: str = ""
) -> str:
    """What a UDP datagram to ``ip:port`` is answered, or ``error: <why>``."""

    def probe() -> str:
        family = socket.AF_INET6 if ":" in ip else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.settimeout(timeout)
            try:
                sock.connect((ip, port))
                sock.send(message)
                return sock.recv(100).decode(errors="replace")
            except OSError as exc:
                return f"error: {exc.strerror or exc}"

    return _in_netns(netns, probe)


_CLONE_NEWNET = 0x40000000
_NETNS_DIR = Path("/var/run/netns")


def _in_netns(netns: str, probe: Callable[[], str]) -> str:
    """``probe()`` in the network namespace ``netns`` ("": here): on a thread of its
    own that enters it (setns(2) moves only the calling thread) and then ends, so no
    other thread ever runs there. Needs root."""
    if not netns:
        return probe()
    result: list[str] = []

    def run() -> None:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        fd = os.open(_NETNS_DIR / netns, os.O_RDONLY)
        try:
            if libc.setns(fd, _CLONE_NEWNET) != 0:
                result.append(f"error: setns {netns}: {os.strerror(ctypes.get_errno())}")
                return
        finally:
            os.close(fd)
        result.append(probe())

    thread = threading.Thread(target=run, name=f"probe-in-{netns}")
    thread.start()
    thread.join()
    return result[0] if result else "error: the probe thread failed"
