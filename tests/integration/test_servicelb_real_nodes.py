"""ServiceLB on real kubelets with real traffic (issue 24, item 4).

kube-ccm's image, installed by the shipped Helm chart, runs ``--cloud-provider=composite``:
instances from the simulated cloud (an instance per node, ExternalIP 203.0.113.10 + i),
load balancers from ``servicelb``, whose forwarder image is the chart's own
(``KUBE_CCM_SERVICELB_IMAGE``). Two real kubelets, one kube-proxy for the ClusterIPs
(:mod:`kube_ccm.testing.cluster`, ``kube_proxy=True``), an echo backend Deployment on the
second node (:mod:`kube_ccm.testing.echo`), and a LoadBalancer Service. Then:

- a TCP connection and a UDP datagram to ``<node IP>:<port>`` reach the backend, from
  either node; the time from the Service's creation to the first answered TCP
  connection is printed (``time to first answer``);
- the status lists the nodes with a ready svclb pod: their ExternalIPs;
- with ``externalTrafficPolicy: Local`` only the node with a ready backend is listed;
- a node labelled out (``svccontroller.k3s.cattle.io/enablelb=false`` while the other
  is ``true``) loses its pod, leaves the status and stops answering;
- deleting a Service removes its DaemonSet, and its port stops answering.

What this test bed cannot show: all kubelets share the host's network namespace, so the
svclb pods are host-network (``hostNetwork: true`` in servicelb's cloud-config), each
bound to its node's IP (a hostPort would match every node IP here), and one kube-proxy
serves all "nodes". So ``Local``'s other half, the client address kept, is not checked:
that needs a network namespace per node. The connections to the node IPs go through the
forwarders (``kube-ccm forward``, userspace, no capability, non-root), then kube-proxy's
ClusterIP rules: kube-proxy takes the listed ExternalIPs itself (``ipMode: VIP``), not
the node IPs, which are not in the status.

Needs root, containerd, runc, the CNI plugins, nft, buildah and debootstrap
(``make sysdeps``), and the node binaries, kube-proxy and helm (built on first use);
skipped with the reason otherwise, except under ``CI=true``, where a skip fails the run.
The host is checked after the module.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from kube_ccm.runtime.client import ApiError, KubeClient
from kube_ccm.testing.binaries import ControlPlaneBinariesError
from kube_ccm.testing.cluster import (
    ChartCluster,
    ChartClusterOptions,
    ccm_pods,
    chart_cluster_unavailable,
    pod_logs,
)
from kube_ccm.testing.controlplane import ControlPlaneError
from kube_ccm.testing.echo import ECHO_PORT, create_echo, tcp_answer, udp_answer
from kube_ccm.testing.helm import HelmBinaryError
from kube_ccm.testing.image import ImageBuildError
from kube_ccm.testing.nodes import assert_host_restored, host_snapshot
from kube_ccm.testing.pytest_plugin import unavailable
from kube_ccm.testing.waiting import eventually

PORT = 8080
LOCAL_PORT = 8081
ENABLE = "svccontroller.k3s.cattle.io/enablelb"
SERVICES = "/api/v1/namespaces/default/services"
SYSTEM = "kube-system"
SVCLB_PODS = f"/api/v1/namespaces/{SYSTEM}/pods?labelSelector=svccontroller.k3s.cattle.io/svcname"


@pytest.fixture(scope="module")
def bed() -> Iterator[ChartCluster]:
    """Two real nodes with kube-proxy, kube-ccm installed with servicelb; the host is
    checked after."""
    reason = chart_cluster_unavailable()
    if reason:
        unavailable(reason)
    cluster = ChartCluster(ChartClusterOptions(nodes=2, kube_proxy=True))
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
        values = cluster.values_for(
            replicas=1, servicelb={"hostNetwork": True, "imagePullPolicy": "Never"}
        )
        cluster.values.write_text(yaml.safe_dump(values))
        installed = cluster.install()
        assert installed.returncode == 0, installed.stderr
        yield cluster
    finally:
        cluster.stop()
    assert_host_restored(before, cluster.nodes)


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


async def ingress(client: KubeClient, name: str) -> list[str]:
    found = await client.get(f"{SERVICES}/{name}")
    entries = found.get("status", {}).get("loadBalancer", {}).get("ingress") or []
    return sorted(e.get("ip", "") for e in entries)


def daemon_set_path(svc: dict[str, Any]) -> str:
    name = f"svclb-{svc['metadata']['name']}-{svc['metadata']['uid'][:8]}"
    return f"/apis/apps/v1/namespaces/{SYSTEM}/daemonsets/{name}"


async def gone(client: KubeClient, path: str) -> bool:
    try:
        await client.get(path)
    except ApiError as exc:
        if exc.status == 404:
            return True
        raise
    return False


async def answers(ip: str, port: int) -> tuple[str, str]:
    return (
        await asyncio.to_thread(tcp_answer, ip, port),
        await asyncio.to_thread(udp_answer, ip, port),
    )


async def diagnosis(client: KubeClient) -> str:
    """The svclb pods' state and kube-ccm's log, for a failure message."""
    pods = (await client.get(SVCLB_PODS))["items"]
    lines = [
        f"{p['metadata']['name']} on {p['spec'].get('nodeName')}: "
        f"{p.get('status', {}).get('phase')} "
        f"{[(c['type'], c['status']) for c in p.get('status', {}).get('conditions') or []]} "
        f"{[c.get('state') for c in p.get('status', {}).get('containerStatuses') or []]}"
        for p in pods
    ]
    return (
        "svclb pods:\n" + "\n".join(lines) + "\n" + await pod_logs(client, await ccm_pods(client))
    )


async def test_a_loadbalancer_service_answers_on_the_node_ips_and_follows_the_nodes(
    bed: ChartCluster,
) -> None:
    first, second = bed.nodes.nodes
    external = {first.name: "203.0.113.10", second.name: "203.0.113.11"}
    async with KubeClient.from_kubeconfig(bed.plane.kubeconfig) as client:

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
            bed.image.reference,
            node_selector={"kubernetes.io/hostname": second.name},
        )

        # The Service; through either node's forwarder to the backend on the second node.
        created = time.monotonic()
        web = await client.create(SERVICES, service("web", PORT, protocols=("TCP", "UDP")))

        async def first_answer() -> bool:
            for node in (first, second):
                if await asyncio.to_thread(tcp_answer, node.ip, PORT, timeout=1) == "tcp backend":
                    return True
            return False

        try:
            await eventually(first_answer, within=240, interval=0.2, what="a TCP answer")
        except AssertionError:
            pytest.fail(f"no node IP answered on {PORT}\n{await diagnosis(client)}")
        took = time.monotonic() - created
        print(f"\nservicelb: time to first answer (Service created to TCP answered): {took:.1f} s")

        async def both_answer() -> bool:
            got = [await answers(n.ip, PORT) for n in (first, second)]
            return got == [("tcp backend", "udp backend")] * 2

        try:
            await eventually(both_answer, within=120, interval=0.5, what="TCP and UDP on both")
        except AssertionError:
            got = [await answers(n.ip, PORT) for n in (first, second)]
            pytest.fail(f"TCP and UDP via both node IPs: {got}\n{await diagnosis(client)}")

        async def listed(name: str, wanted: list[str]) -> bool:
            return await ingress(client, name) == wanted

        both = sorted(external.values())
        await eventually(
            lambda: listed("web", both), within=60, interval=0.5, what="both nodes listed"
        )

        # The svclb pods run with the least privilege the userspace forwarder needs.
        pods = (await client.get(SVCLB_PODS))["items"]
        for pod in pods:
            assert pod["spec"]["hostNetwork"] is True
            assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
            for container in pod["spec"]["containers"]:
                assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}

        # externalTrafficPolicy Local: only the node with a ready backend is listed.
        local = await client.create(
            SERVICES,
            service("web-local", LOCAL_PORT, protocols=("TCP",), externalTrafficPolicy="Local"),
        )
        try:
            await eventually(
                lambda: listed("web-local", [external[second.name]]),
                within=120,
                interval=0.5,
                what="only the backend's node listed for Local",
            )
        except AssertionError:
            lists = await ingress(client, "web-local")
            pytest.fail(f"Local lists {lists}\n{await diagnosis(client)}")

        # Deleting a Service removes its DaemonSet; its port stops answering.
        await client.delete(f"{SERVICES}/web-local")
        await eventually(
            lambda: gone(client, daemon_set_path(local)),
            within=60,
            interval=0.5,
            what="web-local's DaemonSet deleted",
        )

        async def local_silent() -> bool:
            got = [await asyncio.to_thread(tcp_answer, n.ip, LOCAL_PORT) for n in (first, second)]
            return all(a.startswith("error") for a in got)

        await eventually(local_silent, within=60, interval=0.5, what="web-local's port silent")

        # A node labelled out loses its pod, leaves the status and stops answering.
        for node, value in ((first, "true"), (second, "false")):
            await client.patch(
                f"/api/v1/nodes/{node.name}",
                {"metadata": {"labels": {ENABLE: value}}},
                patch_type="merge",
            )

        async def second_out() -> bool:
            tcp, udp = await answers(second.ip, PORT)
            return (
                await ingress(client, "web") == [external[first.name]]
                and tcp.startswith("error")
                and udp.startswith("error")
            )

        try:
            await eventually(second_out, within=120, interval=0.5, what="the second node out")
        except AssertionError:
            state = (await ingress(client, "web"), await answers(second.ip, PORT))
            pytest.fail(f"status, second node: {state}\n{await diagnosis(client)}")

        async def first_answers() -> bool:
            return await answers(first.ip, PORT) == ("tcp backend", "udp backend")

        await eventually(first_answers, within=120, interval=0.5, what="the first node answers")

        # Deleting the Service removes the DaemonSet; the first node stops answering.
        await client.delete(f"{SERVICES}/web")
        await eventually(
            lambda: gone(client, daemon_set_path(web)),
            within=60,
            interval=0.5,
            what="web's DaemonSet deleted",
        )
        await eventually(
            lambda: gone(client, f"{SERVICES}/web"),
            within=60,
            interval=0.5,
            what="web gone (its finalizer removed)",
        )

        async def first_silent() -> bool:
            tcp, udp = await answers(first.ip, PORT)
            return tcp.startswith("error") and udp.startswith("error")

        await eventually(first_silent, within=60, interval=0.5, what="the first node silent")
