"""A TCP and UDP echo backend in kube-ccm's own image, and the probes that talk to it:
what the ServiceLB real-kubelet test and ``kube-ccm sandbox --real-nodes N --provider
servicelb`` send traffic to.

The backend answers each TCP connection with ``tcp backend`` and each UDP datagram
with ``udp backend`` on :data:`ECHO_PORT`, in the pod network, as the image's user;
the probes return the answer or ``error: <why>``, never raise.

Internal: kube-ccm's own test bed, not part of the :mod:`kube_ccm.testing` face.
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kube_ccm.runtime.client import KubeClient

__all__ = [
    "ECHO_PORT",
    "ECHO_SCRIPT",
    "create_echo",
    "echo_deployment",
    "tcp_answer",
    "udp_answer",
]

ECHO_PORT = 8080
ECHO_SCRIPT = f"""
import socket, threading
def tcp():
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", {ECHO_PORT}))
    s.listen()
    while True:
        c, a = s.accept()
        c.recv(100)
        c.sendall(b"tcp backend")
        c.close()
def udp():
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.bind(("0.0.0.0", {ECHO_PORT}))
    while True:
        d, a = u.recvfrom(100)
        u.sendto(b"udp backend", a)
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


def tcp_answer(ip: str, port: int, *, timeout: float = 3.0) -> str:
    """What a TCP connection to ``ip:port`` is answered, or ``error: <why>``."""
    try:
        with socket.create_connection((ip, port), timeout=timeout) as conn:
            conn.sendall(b"hello")
            return conn.recv(100).decode(errors="replace") or "closed"
    except OSError as exc:
        return f"error: {exc.strerror or exc}"


def udp_answer(ip: str, port: int, *, timeout: float = 2.0) -> str:
    """What a UDP datagram to ``ip:port`` is answered, or ``error: <why>``."""
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect((ip, port))
            sock.send(b"hello")
            return sock.recv(100).decode(errors="replace")
        except OSError as exc:
            return f"error: {exc.strerror or exc}"
