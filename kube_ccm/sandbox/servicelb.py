"""``kube-ccm sandbox --real-nodes N --provider servicelb``: ServiceLB load balancers
answering on the node IPs.

kube-ccm runs as a composite (instances from the simulated cloud the pods share, load
balancers from ``servicelb``) with host-network forwarders, each bound to its node's IP
(``hostNetwork: true``): every real kubelet of the sandbox shares the host's network
namespace, where a hostPort would answer on every node's IP. One kube-proxy carries the
forwarders' connections to the ClusterIPs.

The sandbox starts an echo backend (kube-ccm's image answering ``tcp backend``) and
``--services`` LoadBalancer Services on ports :data:`FIRST_PORT` and up, waits until
each lists its nodes, then connects to every Service on the first node's IP and says
what answered and how long after the Service was created.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, TextIO

from kube_ccm.runtime.resources import SERVICES
from kube_ccm.runtime.typedclient import TypedClient
from kube_ccm.sandbox.progress import Stalled, watch_progress

if TYPE_CHECKING:
    from kube_ccm.runtime.client import KubeClient
    from kube_ccm.testbed.cluster import ChartCluster

__all__ = ["BACKEND", "FIRST_PORT", "SERVICELB_CONFIG", "serve_on_node_ips"]

FIRST_PORT = 8080
"""The first Service's port; the others count up from it (one port per Service:
ServiceLB holds each on every node)."""
BACKEND = "sandbox-echo"
SERVICELB_CONFIG: dict[str, Any] = {"hostNetwork": True, "imagePullPolicy": "Never"}
"""servicelb's cloud-config in the sandbox: the forwarder image is the chart's own."""


async def serve_on_node_ips(
    client: KubeClient,
    cluster: ChartCluster,
    count: int,
    out: TextIO,
    *,
    stall: float | None = None,
) -> float:
    """The backend and ``count`` Services; seconds until every Service lists its nodes
    and answers a TCP connection on the first node's IP. Raises :class:`Stalled`."""
    from kube_ccm.testbed.echo import ECHO_PORT, create_echo, tcp_answer  # noqa: PLC0415

    if not count:
        return 0.0
    api = TypedClient(client)
    await create_echo(client, BACKEND, cluster.image.reference)
    started = time.monotonic()
    for i in range(count):
        await api.create(
            SERVICES,
            {
                "metadata": {"name": f"sandbox-lb-{i:03d}"},
                "spec": {
                    "type": "LoadBalancer",
                    "selector": {"app": BACKEND},
                    "ports": [{"port": FIRST_PORT + i, "targetPort": ECHO_PORT, "protocol": "TCP"}],
                },
            },
            namespace="default",
        )
    node_ip = cluster.nodes.nodes[0].ip
    answered: dict[str, tuple[str, float]] = {}

    async def done() -> int:
        listed = await api.list(SERVICES, namespace="default")
        for service in listed.items:
            name = service.metadata.name
            if name in answered or not service.status.load_balancer.ingress:
                continue
            port = service.spec.ports[0].port
            answer = await asyncio.to_thread(tcp_answer, node_ip, port, timeout=1.0)
            if not answer.startswith("error"):
                ingress = ", ".join(i.ip or "" for i in service.status.load_balancer.ingress)
                answered[name] = (
                    f"{name}: status {ingress}; TCP to {node_ip}:{port} answered {answer!r}",
                    time.monotonic() - started,
                )
        return len(answered)

    try:
        took = await watch_progress(
            "load balancers answering on the node IPs", done, count, out, started, stall=stall
        )
    except Stalled:
        print(
            "  (svclb pods: kubectl -n kube-system get pods -l "
            "svccontroller.k3s.cattle.io/svcnamespace=default -o wide; the Services' "
            "Events: kubectl get events)",
            file=out,
        )
        raise
    for line, seconds in sorted(answered.values()):
        print(f"  {line} ({seconds:.1f} s after the Services were created)", file=out)
    return took
