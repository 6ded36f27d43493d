"""ServiceLB on real kubelets with real traffic (issue 24, item 4).

kube-ccm's image, installed by the shipped Helm chart, runs ``--cloud-provider=composite``:
instances from the simulated cloud (an instance per node, ExternalIP 203.0.113.10 + i),
load balancers from ``servicelb``, whose forwarder image is the chart's own
(``KUBE_CCM_SERVICELB_IMAGE``). Two real kubelets, each in a network namespace of its own
with its own kube-proxy and its pods on its own bridge with CNI's portmap plugin
(:mod:`kube_ccm.testbed.cluster`, ``netns=True, kube_proxy=True``), as separate machines;
an echo backend Deployment on the second node (:mod:`kube_ccm.testbed.echo`), and
LoadBalancer Services. Every probe comes from a client namespace outside the nodes
(:attr:`RealNodes.client_netns`), which routes each node's ExternalIP to that node as a
router in front of the nodes would. One cluster for the module; then:

k3s's default path (svclb pods holding a hostPort on the pod network), in
:func:`test_hostport_path_answers_keeps_the_local_client_address_and_follows_nodes`:

- a TCP connection and a UDP datagram to ``<node IP>:<port>`` reach the backend, from
  either node (portmap's DNAT to the svclb pod, the forwarder, the ClusterIP, kube-proxy,
  the backend on the second node); the time from the Service's creation to the first
  answered TCP connection is printed (``time to first answer``);
- the status lists the nodes with a ready svclb pod: their ExternalIPs;
- with ``externalTrafficPolicy: Local``: only the node with a ready backend is listed,
  and a client sending to that listed address reaches the backend with its own source
  address (kube-proxy takes the listed IP, ``ipMode: VIP``, and does not masquerade for
  Local); with ``Cluster`` the backend sees another address (kube-proxy masquerades), and
  through the forwarder (the node IP) it sees the forwarder's, Local or not;
- a node labelled out (``svccontroller.k3s.cattle.io/enablelb=false`` while the other
  is ``true``) loses its pod, leaves the status and stops answering on its own IP;
- deleting a Service removes its DaemonSet and its status, and its port stops answering.

A tenant's Service on the nodes' kubelet ports (the ports they report, random here),
in :func:`test_a_service_on_the_kubelet_port_is_refused_and_the_kubelet_stays_reachable`:
refused with a ``HostPortReserved`` Event and no DaemonSet, and kube-apiserver still
reaches both kubelets (``nodes/proxy``, a pod's log). Before the fix the svclb hostPort
took the kubelet's port and portmap sent kube-apiserver's connections to the Service.

The documented option ``hostNetwork: true`` (forwarders on the node's network, bound to
its IP), after a ``helm upgrade``, in
:func:`test_the_host_network_option_answers_on_the_node_ips`: TCP and UDP to each
node IP, the pods' least privilege, and silence once the Service is gone.

Needs root, containerd, runc, the CNI plugins, nft, buildah and debootstrap
(``make sysdeps``), and the node binaries, kube-proxy and helm (built on first use);
skipped with the reason otherwise, except under ``CI=true``, where a skip fails the run.
The host is checked after the module.
"""

from __future__ import annotations

import asyncio
import functools
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
import yaml

from kube_ccm.runtime.client import ApiError, KubeClient
from kube_ccm.testbed.cluster import (
    CHART,
    NAMESPACE,
    RELEASE,
    ChartCluster,
    ChartClusterOptions,
    ccm_pods,
    chart_cluster_unavailable,
    pod_logs,
)
from kube_ccm.testbed.echo import ECHO_PORT, PEER, create_echo, tcp_answer, udp_answer
from kube_ccm.testbed.helm import HelmBinaryError
from kube_ccm.testbed.image import ImageBuildError
from kube_ccm.testbed.nodes import RealNode, assert_host_restored, host_snapshot
from kube_ccm.testing.binaries import ControlPlaneBinariesError
from kube_ccm.testing.controlplane import ControlPlaneError
from kube_ccm.testing.pytest_plugin import unavailable
from kube_ccm.testing.waiting import eventually

PORT = 8080
LOCAL_PORT = 8081
HOST_NETWORK_PORT = 8082
EARLY_PORT = 8083
SERIAL_PORT = 8084
ENABLE = "svccontroller.k3s.cattle.io/enablelb"
SERVICES = "/api/v1/namespaces/default/services"
SYSTEM = "kube-system"
SVCLB_PODS = f"/api/v1/namespaces/{SYSTEM}/pods?labelSelector=svccontroller.k3s.cattle.io/svcname"
SERVICELB = {"imagePullPolicy": "Never"}
"""servicelb's cloud-config: k3s's defaults (a hostPort per port), the image on the nodes."""


def external_ip(index: int) -> str:
    """Node ``index``'s ExternalIP (:meth:`ChartCluster.add_instances`)."""
    return f"203.0.113.{10 + index}"


@pytest.fixture(scope="module")
def bed() -> Iterator[ChartCluster]:
    """Two real nodes in their own network namespaces, each with its kube-proxy; kube-ccm
    installed with servicelb; each ExternalIP routed from the client namespace to its
    node; the backend on the second node. The host is checked after."""
    reason = chart_cluster_unavailable()
    if reason:
        unavailable(reason)
    cluster = ChartCluster(ChartClusterOptions(nodes=2, kube_proxy=True, netns=True))
    try:
        cluster.build()
    except (HelmBinaryError, ImageBuildError, ControlPlaneBinariesError) as exc:
        unavailable(f"a piece of the cluster could not be built: {exc}")
        raise
    before = host_snapshot()
    try:
        cluster.start_control_plane()
    except ControlPlaneError as exc:
        unavailable(f"the real control plane could not start: {exc}")
    try:
        cluster.start_nodes()
        cluster.add_instances()
        for i, node in enumerate(cluster.nodes.nodes):
            cluster.nodes.route_from_client(external_ip(i), node)
        _ignore_redirects(cluster.nodes.client_netns)
        cluster.values.write_text(
            yaml.safe_dump(cluster.values_for(replicas=1, servicelb=SERVICELB))
        )
        installed = cluster.install()
        assert installed.returncode == 0, installed.stderr
        asyncio.run(_backend(cluster))
        yield cluster
    finally:
        cluster.stop()
    assert_host_restored(before, cluster.nodes)


def _ignore_redirects(netns: str) -> None:
    """The client takes no ICMP redirect. A probe to an ExternalIP on a port no rule
    takes (a Service just deleted) makes its node route the packet back out of the
    interface it came in by, so the node redirects the client to the host's bridge
    address; the client then sends that ExternalIP's traffic past the node for the
    redirect's five minutes, and a later Service on it seems to drop everything (seen:
    the ``Local`` check timing out on the node with the backend). A router in front of
    real nodes would not take the nodes' redirects either."""
    for key in ("all", "default", "eth0"):
        subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                netns,
                "sysctl",
                "-q",
                "-w",
                f"net.ipv4.conf.{key}.accept_redirects=0",
            ],
            check=True,
        )


async def _backend(cluster: ChartCluster) -> None:
    """Both Nodes initialised by kube-ccm, then the echo backend on the second."""
    async with KubeClient.from_kubeconfig(cluster.plane.kubeconfig) as client:

        async def initialised() -> bool:
            listed = (await client.get("/api/v1/nodes"))["items"]
            return len(listed) == 2 and all(
                n["spec"].get("providerID")
                and not any(
                    t["key"] == "node.cloudprovider.kubernetes.io/uninitialized"
                    for t in n["spec"].get("taints") or []
                )
                for n in listed
            )

        await eventually(initialised, within=180, interval=1, what="both Nodes initialised")
        await create_echo(
            client,
            "backend",
            cluster.image.reference,
            node_selector={"kubernetes.io/hostname": cluster.nodes.nodes[1].name},
        )


def service(name: str, port: int, *, protocols: tuple[str, ...], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {
            "type": "LoadBalancer",
            "selector": {"app": "backend"},
            "ports": [
                {"name": p.lower(), "protocol": p, "port": port, "targetPort": ECHO_PORT}
                for p in protocols
            ],
            **spec,
        },
    }


class Probe:
    """The cluster's API and the client namespace's view of it."""

    def __init__(self, bed: ChartCluster, client: KubeClient) -> None:
        self.bed = bed
        self.client = client
        self.netns = bed.nodes.client_netns

    async def tcp(self, ip: str, port: int, message: bytes = b"hello") -> str:
        return await asyncio.to_thread(
            tcp_answer, ip, port, timeout=1.5, message=message, netns=self.netns
        )

    async def udp(self, ip: str, port: int, message: bytes = b"hello") -> str:
        return await asyncio.to_thread(
            udp_answer, ip, port, timeout=1.5, message=message, netns=self.netns
        )

    async def answers(self, ip: str, port: int) -> tuple[str, str]:
        return await self.tcp(ip, port), await self.udp(ip, port)

    async def peers(self, ip: str, port: int) -> tuple[str, str]:
        """The source addresses the backend saw for a TCP connection and a UDP datagram
        to ``ip:port``, once both get there (kube-proxy may not have synced yet)."""
        seen: list[str] = []

        async def answered() -> bool:
            seen[:] = [await self.tcp(ip, port, PEER), await self.udp(ip, port, PEER)]
            return all(answer.startswith("peer ") for answer in seen)

        await self.until(answered, f"the backend's answers to {ip}:{port}", 60)
        return peer(seen[0]), peer(seen[1])

    async def silent(self, ip: str, port: int) -> bool:
        tcp, udp = await self.answers(ip, port)
        return tcp.startswith("error") and udp.startswith("error")

    async def until_silent(self, ips: list[str], port: int) -> None:
        for ip in ips:
            await self.until(functools.partial(self.silent, ip, port), f"{ip}:{port} silent", 60)

    async def ingress(self, name: str) -> list[str]:
        found = await self.client.get(f"{SERVICES}/{name}")
        entries = found.get("status", {}).get("loadBalancer", {}).get("ingress") or []
        return sorted(e.get("ip", "") for e in entries)

    async def gone(self, path: str) -> bool:
        try:
            await self.client.get(path)
        except ApiError as exc:
            if exc.status == 404:
                return True
            raise
        return False

    async def diagnosis(self) -> str:
        """The svclb pods' state and kube-ccm's log, for a failure message."""
        pods = (await self.client.get(SVCLB_PODS))["items"]
        lines = [
            f"{p['metadata']['name']} on {p['spec'].get('nodeName')}: "
            f"{p.get('status', {}).get('phase')} "
            f"{[(c['type'], c['status']) for c in p.get('status', {}).get('conditions') or []]} "
            f"{[c.get('state') for c in p.get('status', {}).get('containerStatuses') or []]}"
            for p in pods
        ]
        ccm = await pod_logs(self.client, await ccm_pods(self.client))
        return "svclb pods:\n" + "\n".join(lines) + "\n" + ccm

    async def until(self, check: Callable[[], Awaitable[bool]], what: str, within: float) -> None:
        """``eventually``, failing with :meth:`diagnosis`."""
        try:
            await eventually(check, within=within, interval=0.5, what=what)
        except AssertionError as exc:
            pytest.fail(f"{exc}\n{await self.diagnosis()}")

    async def label(self, values: dict[str, str | None]) -> None:
        """Set (or with None remove) the enable label on nodes by name."""
        for name, value in values.items():
            await self.client.patch(
                f"/api/v1/nodes/{name}",
                {"metadata": {"labels": {ENABLE: value}}},
                patch_type="merge",
            )

    async def delete(self, created: dict[str, Any]) -> None:
        """Delete the Service: its DaemonSet goes, then the Service (its finalizer)."""
        name = created["metadata"]["name"]
        daemon_set = f"svclb-{name}-{created['metadata']['uid'][:8]}"
        await self.client.delete(f"{SERVICES}/{name}")
        await self.until(
            lambda: self.gone(f"/apis/apps/v1/namespaces/{SYSTEM}/daemonsets/{daemon_set}"),
            f"{name}'s DaemonSet deleted",
            60,
        )
        await self.until(lambda: self.gone(f"{SERVICES}/{name}"), f"{name} gone", 60)


def peer(answer: str) -> str:
    """The address in the backend's ``peer <address>``, or the whole answer."""
    return answer.removeprefix("peer ")


async def test_hostport_path_answers_keeps_the_local_client_address_and_follows_nodes(
    bed: ChartCluster,
) -> None:
    first, second = bed.nodes.nodes
    external = {first.name: external_ip(0), second.name: external_ip(1)}
    client_ip = bed.nodes.client_ip
    async with KubeClient.from_kubeconfig(bed.plane.kubeconfig) as client:
        probe = Probe(bed, client)
        await probe.label({first.name: None, second.name: None})

        # The Service; through either node's hostPort and forwarder to the backend.
        created = time.monotonic()
        web = await client.create(SERVICES, service("web", PORT, protocols=("TCP", "UDP")))

        async def first_answer() -> bool:
            for node in (first, second):
                if await probe.tcp(node.ip, PORT) == "tcp backend":
                    return True
            return False

        await probe.until(first_answer, f"a TCP answer on {PORT}", 240)
        took = time.monotonic() - created
        print(
            f"\nservicelb: time to first answer (created to TCP answered), hostPort: {took:.1f} s"
        )

        async def both_answer() -> bool:
            got = [await probe.answers(n.ip, PORT) for n in (first, second)]
            return got == [("tcp backend", "udp backend")] * 2

        await probe.until(both_answer, "TCP and UDP via both node IPs", 120)
        both = sorted(external.values())
        await probe.until(lambda: listed(probe, "web", both), "both nodes listed", 60)

        # k3s's pods: on the pod network, a hostPort per Service port, least privilege.
        pods = (await client.get(f"{SVCLB_PODS}=web"))["items"]
        assert {p["spec"]["nodeName"] for p in pods} == {first.name, second.name}
        for pod in pods:
            assert pod["spec"].get("hostNetwork") is not True
            assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
            for container in pod["spec"]["containers"]:
                assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
                assert [p["hostPort"] for p in container["ports"]] == [PORT]

        # Cluster: kube-proxy takes the listed address and masquerades; the forwarder
        # connects from its own address.
        for ip in (external[first.name], external[second.name], first.ip, second.ip):
            tcp, udp = await probe.peers(ip, PORT)
            print(f"servicelb: Cluster, client {client_ip} to {ip}: backend saw {tcp}, {udp}")
            assert client_ip not in (tcp, udp), (ip, tcp, udp)

        # Local: both nodes are listed (their svclb pods are ready), and at the backend's
        # node the client's own address reaches the backend; through the forwarder it
        # does not.
        local = await client.create(
            SERVICES,
            service(
                "web-local", LOCAL_PORT, protocols=("TCP", "UDP"), externalTrafficPolicy="Local"
            ),
        )
        await probe.until(
            lambda: listed(probe, "web-local", both),
            "both nodes listed for Local",
            120,
        )

        async def client_address_kept() -> bool:
            got = [
                await probe.tcp(external[second.name], LOCAL_PORT, PEER),
                await probe.udp(external[second.name], LOCAL_PORT, PEER),
            ]
            return got == [f"peer {client_ip}"] * 2

        await probe.until(client_address_kept, "the client's address at the backend", 60)
        via_forwarder = await probe.peers(second.ip, LOCAL_PORT)
        assert client_ip not in via_forwarder, via_forwarder

        # Deleting a Service removes its DaemonSet and status; its port stops answering.
        await probe.delete(local)
        await probe.until_silent([first.ip, second.ip, external[second.name]], LOCAL_PORT)

        # A node labelled out loses its pod, leaves the status and stops answering on
        # its own IP; the other goes on.
        await probe.label({first.name: "true", second.name: "false"})

        async def second_out() -> bool:
            return await probe.ingress("web") == [external[first.name]] and await probe.silent(
                second.ip, PORT
            )

        await probe.until(second_out, "the second node out", 120)

        async def first_answers() -> bool:
            return await probe.answers(first.ip, PORT) == ("tcp backend", "udp backend")

        await probe.until(first_answers, "the first node answers", 120)

        # Deleting the Service: the DaemonSet and the status go, and the port is silent.
        await probe.delete(web)
        await probe.until_silent([first.ip], PORT)
        await probe.label({first.name: None, second.name: None})


async def listed(probe: Probe, name: str, wanted: list[str]) -> bool:
    return await probe.ingress(name) == wanted


async def test_a_service_on_the_kubelet_port_is_refused_and_the_kubelet_stays_reachable(
    bed: ChartCluster,
) -> None:
    first, second = bed.nodes.nodes
    ports = [first.kubelet_port, second.kubelet_port]
    async with KubeClient.from_kubeconfig(bed.plane.kubeconfig) as client:
        probe = Probe(bed, client)
        for node in (first, second):  # the port each Node reports is the kubelet's
            reported = (await client.get(f"/api/v1/nodes/{node.name}"))["status"]
            assert reported["daemonEndpoints"]["kubeletEndpoint"]["Port"] == node.kubelet_port
        body = service("hijack", ports[0], protocols=("TCP",))
        body["spec"]["ports"] = [
            {"name": f"k{i}", "protocol": "TCP", "port": port, "targetPort": ECHO_PORT}
            for i, port in enumerate(ports)
        ]
        hijack = await client.create(SERVICES, body)
        events: list[dict[str, Any]] = []

        async def told() -> bool:
            listed = await client.get(
                "/api/v1/namespaces/default/events",
                {"fieldSelector": "involvedObject.name=hijack"},
            )
            events[:] = [e for e in listed["items"] if e["reason"] == "HostPortReserved"]
            return bool(events)

        await probe.until(told, "the HostPortReserved Event on hijack", 60)
        message = events[0]["message"]
        for node in (first, second):
            assert f"{node.kubelet_port} is the kubelet port Node {node.name} reports" in message
        daemon_set = f"/apis/apps/v1/namespaces/{SYSTEM}/daemonsets/svclb-hijack-"
        assert await probe.gone(daemon_set + hijack["metadata"]["uid"][:8])
        # kube-apiserver reaches both kubelets: nodes/proxy, and the backend's log.
        for node in (first, second):
            healthz = await client.request("GET", f"/api/v1/nodes/{node.name}/proxy/healthz")
            assert healthz == b"ok", (node.name, healthz)
        backends = await client.get(
            "/api/v1/namespaces/default/pods", {"labelSelector": "app=backend"}
        )
        [backend] = backends["items"]
        assert backend["spec"]["nodeName"] == second.name
        log = await client.request(
            "GET", f"/api/v1/namespaces/default/pods/{backend['metadata']['name']}/log"
        )
        assert isinstance(log, bytes)
        await client.delete(f"{SERVICES}/hijack")
        await probe.until(lambda: probe.gone(f"{SERVICES}/hijack"), "hijack gone", 60)


async def healthz(probe: Probe, ip: str, port: int) -> str:
    """The status line kube-proxy's health-check node port answers at ``ip``."""
    answer = await probe.tcp(ip, port, b"GET /healthz HTTP/1.0\r\n\r\n")
    return answer.split("\r\n", 1)[0]


async def test_a_local_service_has_its_nodes_addresses_before_any_endpoint_and_keeps_them(
    bed: ChartCluster,
) -> None:
    """Issue 38: upstream's ``ExternalTrafficPolicy: Local`` specs wait for an address
    before any backend exists. Every node running the svclb pods is listed at once; the
    health-check node port steers: 503 on a node without a local endpoint, 200 where
    the backend is, and kube-proxy drops external traffic at a node without one. The
    status stays as the backend comes and moves."""
    first, second = bed.nodes.nodes
    external = {first.name: external_ip(0), second.name: external_ip(1)}
    both = sorted(external.values())
    async with KubeClient.from_kubeconfig(bed.plane.kubeconfig) as client:
        probe = Probe(bed, client)
        await probe.label({first.name: None, second.name: None})
        created = time.monotonic()
        body = service("early", EARLY_PORT, protocols=("TCP",), externalTrafficPolicy="Local")
        body["spec"]["selector"] = {"app": "early"}
        early = await client.create(SERVICES, body)
        await probe.until(lambda: listed(probe, "early", both), "both nodes, no endpoint", 180)
        took = time.monotonic() - created
        print(f"\nservicelb: Local, no endpoint: created to address {took:.1f} s")
        found = await client.get(f"{SERVICES}/early")
        version = found["metadata"]["resourceVersion"]
        health = found["spec"]["healthCheckNodePort"]

        async def health_is(wanted: dict[str, str]) -> bool:
            got = {n.name: await healthz(probe, n.ip, health) for n in (first, second)}
            return all(wanted[name] in line for name, line in got.items())

        await probe.until(
            lambda: health_is({first.name: " 503", second.name: " 503"}), "503 on both", 60
        )
        # The backend on the second node: the health check and the traffic follow it.
        await create_echo(
            client,
            "early",
            bed.image.reference,
            node_selector={"kubernetes.io/hostname": second.name},
        )
        await probe.until(
            lambda: health_is({first.name: " 503", second.name: " 200"}), "200 where it is", 120
        )

        async def reached() -> bool:
            answer = await probe.tcp(external[second.name], EARLY_PORT, PEER)
            if answer != f"peer {bed.nodes.client_ip}":
                print(f"servicelb: {external[second.name]}:{EARLY_PORT} answered {answer!r}")
                return False
            return True

        await probe.until(reached, "the backend through its node, the client's address", 120)
        dropped = await probe.tcp(external[first.name], EARLY_PORT)
        assert dropped.startswith("error"), f"a node without an endpoint answered: {dropped}"
        found = await client.get(f"{SERVICES}/early")
        assert found["metadata"]["resourceVersion"] == version, "the status did not churn"
        assert await probe.ingress("early") == both
        await client.delete("/apis/apps/v1/namespaces/default/deployments/early")
        await probe.delete(early)


async def test_a_port_passes_to_the_next_service_when_the_holder_s_namespace_goes(
    bed: ChartCluster,
) -> None:
    """Issue 38, serially: the previous Service's namespace is being deleted while the
    next Service wants its port. Measures the window from the namespace's deletion to
    the next Service's address and first answer."""
    first, second = bed.nodes.nodes
    both = sorted((external_ip(0), external_ip(1)))
    namespace = "slb-previous"
    async with KubeClient.from_kubeconfig(bed.plane.kubeconfig) as client:
        probe = Probe(bed, client)
        await probe.label({first.name: None, second.name: None})
        await client.create("/api/v1/namespaces", {"metadata": {"name": namespace}})
        previous = f"/api/v1/namespaces/{namespace}/services"
        await client.create(previous, service("previous", SERIAL_PORT, protocols=("TCP",)))

        async def previous_listed() -> bool:
            found = await client.get(f"{previous}/previous")
            entries = found.get("status", {}).get("loadBalancer", {}).get("ingress") or []
            return sorted(e["ip"] for e in entries) == both

        await probe.until(previous_listed, "the previous Service listed", 180)
        nxt = await client.create(SERVICES, service("next", SERIAL_PORT, protocols=("TCP",)))

        async def refused() -> bool:
            listed = await client.get(
                "/api/v1/namespaces/default/events", {"fieldSelector": "involvedObject.name=next"}
            )
            return any(e["reason"] == "PortConflict" for e in listed["items"])

        await probe.until(refused, "the PortConflict Event on next", 60)
        started = time.monotonic()
        timeline: dict[str, float] = {}
        watching = asyncio.create_task(_serial_timeline(client, namespace, started, timeline))
        await client.delete(f"/api/v1/namespaces/{namespace}")
        await probe.until(lambda: listed(probe, "next", both), "next listed", 180)
        addressed = time.monotonic() - started
        watching.cancel()
        await asyncio.gather(watching, return_exceptions=True)
        print(
            "\nservicelb: serial timeline (s after the namespace's deletion): "
            + ", ".join(f"{what} {at:.1f}" for what, at in sorted(timeline.items(), key=_at))
        )

        async def answers() -> bool:
            return await probe.tcp(first.ip, SERIAL_PORT) == "tcp backend"

        await probe.until(answers, "next answers", 120)
        answered = time.monotonic() - started
        print(
            f"\nservicelb: serial window, namespace deleted to next's address {addressed:.1f} s,"
            f" to its first answer {answered:.1f} s"
        )
        await probe.delete(nxt)
        await probe.until(lambda: probe.gone(f"/api/v1/namespaces/{namespace}"), "gone", 180)


def _at(item: tuple[str, float]) -> float:
    return item[1]


async def _serial_timeline(
    client: KubeClient, namespace: str, started: float, timeline: dict[str, float]
) -> None:
    """When each step of the port's passing was first seen (polled), for the report."""
    previous = f"/api/v1/namespaces/{namespace}/services/previous"
    daemon_sets = f"/apis/apps/v1/namespaces/{SYSTEM}/daemonsets"
    while True:
        seen: set[str] = set()
        try:
            found = await client.get(previous)
            if found["metadata"].get("deletionTimestamp"):
                seen.add("previous deleting")
        except ApiError as exc:
            if exc.status != 404:
                raise
            seen.update(("previous deleting", "previous gone"))
        for name in ("previous", "next"):
            selector = {"labelSelector": f"svccontroller.k3s.cattle.io/svcname={name}"}
            sets = (await client.get(daemon_sets, selector))["items"]
            pods = (await client.get(f"/api/v1/namespaces/{SYSTEM}/pods", selector))["items"]
            if name == "previous":
                if not sets:
                    seen.add("previous DaemonSet gone")
                if not pods:
                    seen.add("previous pods gone")
                continue
            if sets:
                seen.add("next DaemonSet")
            if pods:
                seen.add("next pods made")
            if len(pods) == 2 and all(p["spec"].get("nodeName") for p in pods):
                seen.add("next pods scheduled")
            if len(pods) == 2 and all(
                any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in p.get("status", {}).get("conditions") or []
                )
                for p in pods
            ):
                seen.add("next pods ready")
        now = time.monotonic() - started
        for what in seen:
            timeline.setdefault(what, now)
        await asyncio.sleep(0.2)


async def test_the_host_network_option_answers_on_the_node_ips(bed: ChartCluster) -> None:
    """``hostNetwork: true``: host-network forwarders bound to their node's IP, each node
    answering on its own IP in its own namespace."""
    values = bed.values_for(replicas=1, servicelb={**SERVICELB, "hostNetwork": True})
    bed.values.write_text(yaml.safe_dump(values))
    upgraded = bed.helm_run(
        *("upgrade", RELEASE, str(CHART), "--namespace", NAMESPACE, "-f", str(bed.values))
    )
    assert upgraded.returncode == 0, upgraded.stderr
    nodes: list[RealNode] = bed.nodes.nodes
    async with KubeClient.from_kubeconfig(bed.plane.kubeconfig) as client:
        probe = Probe(bed, client)
        await probe.label({node.name: None for node in nodes})

        async def rolled() -> bool:
            pods = await ccm_pods(client)
            return len(pods) == 1 and all(
                p["metadata"].get("deletionTimestamp") is None
                and p.get("status", {}).get("phase") == "Running"
                and any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in p.get("status", {}).get("conditions") or []
                )
                for p in pods
            )

        await probe.until(rolled, "kube-ccm rolled to the new cloud-config", 120)
        created = time.monotonic()
        web = await client.create(
            SERVICES, service("web-hostnet", HOST_NETWORK_PORT, protocols=("TCP", "UDP"))
        )

        async def first_answer() -> bool:
            for node in nodes:
                if await probe.tcp(node.ip, HOST_NETWORK_PORT) == "tcp backend":
                    return True
            return False

        await probe.until(first_answer, f"a TCP answer on {HOST_NETWORK_PORT}", 180)
        took = time.monotonic() - created
        print(f"\nservicelb: time to first answer, hostNetwork: {took:.1f} s")

        async def all_answer() -> bool:
            got = [await probe.answers(n.ip, HOST_NETWORK_PORT) for n in nodes]
            return got == [("tcp backend", "udp backend")] * len(nodes)

        await probe.until(all_answer, "TCP and UDP via every node IP", 180)
        pods = (await client.get(f"{SVCLB_PODS}=web-hostnet"))["items"]
        assert {p["spec"]["nodeName"] for p in pods} == {node.name for node in nodes}
        for pod in pods:
            assert pod["spec"]["hostNetwork"] is True
            assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
            for container in pod["spec"]["containers"]:
                assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}

        await probe.delete(web)
        await probe.until_silent([node.ip for node in nodes], HOST_NETWORK_PORT)
