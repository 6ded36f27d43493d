"""Real kubelets and kube-ccm: ``--node-ip`` (IPv4, IPv6, dual-stack), a node IP the
cloud does not know, a kubelet restart and a kubelet that registers before its
instance exists.

One control plane, one :class:`~kube_ccm.testbed.nodes.RealNodes` with five kubelets
(``--cloud-provider=external``; one ``--node-ip`` family choice each, see ``FAMILIES``)
and one ``kube-ccm run`` (the simulated cloud with ``unknownNodes: notFound``, under
the shipped RBAC) for the whole module. The daemon starts before the kubelets, so every
kubelet registers before its instance exists; each test then gives its node an
instance (or a wrong one) through ``ccm.cloud``.

What the cloud's addresses become on the Node follows upstream's rule for the
``alpha.kubernetes.io/provided-node-ip`` annotation: the cloud addresses equal to the
node IPs come first, in the annotation's order; then the cloud's other addresses, in
the cloud's order, except further addresses of a type a node IP matched (a second
InternalIP is dropped); then the kubelet's Hostname.

Needs root, containerd, runc, the CNI plugins and nft (``make sysdeps``), IPv6, and the
node binaries; skipped with the reason otherwise, except under ``CI=true``, where a
skip fails the run. The host must be left as it was found: checked after the module.
"""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from kube_ccm.api import wellknown as wk
from kube_ccm.api.wellknown import REASON_PROVIDED_NODE_IP_NOT_VALID
from kube_ccm.runtime.client import KubeClient
from kube_ccm.testbed.nodes import (
    NodeOptions,
    RealNode,
    RealNodes,
    assert_host_restored,
    host_snapshot,
    real_nodes_unavailable,
)
from kube_ccm.testbed.rbac import AUDITED_USERS, forbidden, install_service_account
from kube_ccm.testing.binaries import ControlPlaneBinariesError, ensure_node_binaries
from kube_ccm.testing.controlplane import (
    ControlPlane,
    ControlPlaneError,
    ControlPlaneOptions,
)
from kube_ccm.testing.daemon import DaemonProcess
from kube_ccm.testing.manifests import taint_keys
from kube_ccm.testing.pytest_plugin import unavailable
from kube_ccm.testing.waiting import eventually

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
UNINITIALIZED = wk.TAINT_UNINITIALIZED
PROVIDED_NODE_IP = wk.ANNOTATION_PROVIDED_NODE_IP
CCM_ARGS = (
    "--leader-elect=false",
    # The lifecycle controller looks at NotReady Nodes every second: a Node it would
    # delete while the kubelet is still getting Ready is deleted here.
    "--node-monitor-period=1s",
    # The daemon's own address refresh stays out of the way: whatever changes the
    # addresses after initialisation is the kubelet.
    "--node-status-update-frequency=5m",
    "--cloud-call-timeout=2s",
    "--controllers=cloud-node,cloud-node-lifecycle",
)
IPV4, IPV6, DUAL, WRONG_IP, LATE = range(5)
FAMILIES = (("IPv4",), ("IPv6",), ("IPv4", "IPv6"), ("IPv4",), ("IPv4",))
"""The ``--node-ip`` families of each node, by the index above."""


@dataclass
class Bed:
    plane: ControlPlane
    nodes: RealNodes
    ccm: DaemonProcess
    uids: dict[str, str]
    """The UID of each Node once every kubelet was Ready: a Node deleted and created
    again would have another."""

    def node(self, index: int) -> RealNode:
        return self.nodes.nodes[index]


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    """Control plane, kube-ccm, then the kubelets; the daemon's requests and the host
    are checked after the module."""
    reason = real_nodes_unavailable()
    if reason:
        unavailable(reason)
    try:
        binaries = ensure_node_binaries()
    except ControlPlaneBinariesError as exc:
        unavailable(f"the node binaries are missing: {exc}")
    before = host_snapshot()
    plane = ControlPlane(ControlPlaneOptions(real_nodes=True, audit_users=AUDITED_USERS))
    try:
        plane.start()
    except ControlPlaneError as exc:
        unavailable(f"the real control plane could not start: {exc}")
    options = NodeOptions(count=len(FAMILIES), node_ip_families=FAMILIES, network_later=(LATE,))
    nodes = RealNodes(plane, options, binaries=binaries)
    ccm: DaemonProcess | None = None
    try:
        kubeconfig = asyncio.run(
            install_service_account(
                plane,
                [
                    doc
                    for name in ("rbac.yaml", "rbac-nodes.yaml", "rbac-pv-labels.yaml")
                    for doc in yaml.safe_load_all((DEPLOY / name).read_text())
                    if doc
                ],
                "kube-system",
                "cloud-controller-manager",
                kubeconfig=tmp_path_factory.mktemp("ccm") / "ccm.kubeconfig",
            )
        )
        ccm = DaemonProcess(
            kubeconfig=kubeconfig,
            workdir=tmp_path_factory.mktemp("ccm-run"),
            cloud_config={"unknownNodes": "notFound"},
            args=CCM_ARGS,
        )
        ccm.start()
        nodes.start()  # on a machine that has everything, a failure here is a failure
        uids = {
            node.name: plane.request("GET", f"/api/v1/nodes/{node.name}")["metadata"]["uid"]
            for node in nodes.nodes
        }
        yield Bed(plane, nodes, ccm, uids)
        assert ccm.poll() is None, ccm.log()[-3000:]
        refused = [r for user in AUDITED_USERS for r in forbidden(plane, user)]
        assert not refused, "the daemon was refused:\n" + "\n".join(refused)
    finally:
        if ccm is not None:
            ccm.stop()
        nodes.stop()
        plane.stop()
    assert_host_restored(before, nodes)


# -- helpers ------------------------------------------------------------------------


def _ready(node: dict[str, Any]) -> str:
    for condition in node["status"].get("conditions") or []:
        if condition["type"] == "Ready":
            status: str = condition["status"]
            return status
    return "Unknown"


def _heartbeat(node: dict[str, Any], *, ready_only: bool = True) -> str:
    """The Ready condition's last heartbeat ("" if not Ready and ``ready_only``)."""
    for condition in node["status"].get("conditions") or []:
        if condition["type"] == "Ready" and (condition["status"] == "True" or not ready_only):
            heartbeat: str = condition["lastHeartbeatTime"]
            return heartbeat
    return ""


def _addresses(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    return [{"type": t, "address": a} for t, a in pairs]


CCM_SOURCES = {wk.CONTROLLER_CLOUD_NODE, wk.CONTROLLER_CLOUD_NODE_LIFECYCLE}


async def _events(client: KubeClient, node: str) -> list[dict[str, Any]]:
    """kube-ccm's Events about the Node (they live in ``default``, as upstream's do; the
    kubelet's and kube-controller-manager's are left out)."""
    selector = urllib.parse.quote(f"involvedObject.kind=Node,involvedObject.name={node}")
    listed = await client.get(f"/api/v1/namespaces/default/events?fieldSelector={selector}")
    return [e for e in listed["items"] if e.get("source", {}).get("component") in CCM_SOURCES]


async def _initialised(
    client: KubeClient,
    name: str,
    addresses: list[dict[str, str]] | None = None,
    *,
    within: float = 30,
) -> dict[str, Any]:
    """Wait until kube-ccm initialised the Node: taint gone, providerID set and, when
    given, the ``addresses`` written (a second write, right after the first, as
    upstream's)."""

    async def done() -> bool:
        found = await client.get(f"/api/v1/nodes/{name}")
        return (
            UNINITIALIZED not in taint_keys(found)
            and bool(found["spec"].get("providerID"))
            and (addresses is None or found["status"]["addresses"] == addresses)
        )

    what = f"node {name} initialised by kube-ccm" + (f" with {addresses}" if addresses else "")
    await eventually(done, within=within, what=what)
    found: dict[str, Any] = await client.get(f"/api/v1/nodes/{name}")
    return found


async def _status_updates(
    client: KubeClient,
    name: str,
    count: int,
    check: Any = None,
    *,
    ready_only: bool = True,
    within: float = 30,
) -> None:
    """Wait for ``count`` more kubelet status updates (new heartbeats of the Ready
    condition, only while it is True with ``ready_only``), running ``check`` on the
    Node at every look."""
    beats = {_heartbeat(await client.get(f"/api/v1/nodes/{name}"), ready_only=ready_only)}

    async def more() -> bool:
        found = await client.get(f"/api/v1/nodes/{name}")
        if check is not None:
            check(found)
        beats.add(_heartbeat(found, ready_only=ready_only))
        beats.discard("")
        return len(beats) > count

    await eventually(more, within=within, what=f"{count} more status updates of {name}")


async def _kubelet_reachable(client: KubeClient, name: str) -> None:
    """The apiserver reaches the kubelet through the Node's addresses (its preferred
    types are InternalIP, Hostname): the kubelet's own pod list, over the node proxy."""
    pods = await client.get(f"/api/v1/nodes/{name}/proxy/pods")
    assert pods["kind"] == "PodList"


def _add_instance(bed: Bed, node: RealNode, *addresses: tuple[str, str]) -> str:
    instance = bed.ccm.cloud.add_instance(
        node.name,
        zone="zone-a",
        region="region-1",
        instance_type="sim.small",
        addresses=list(addresses),
    )
    return f"simulated://{instance.id}"


def _registered_as(found: dict[str, Any], node: RealNode) -> None:
    """What a kubelet with ``--cloud-provider=external --node-ip`` registers."""
    assert UNINITIALIZED in taint_keys(found)
    assert "providerID" not in found["spec"]
    assert found["metadata"]["annotations"][PROVIDED_NODE_IP] == ",".join(node.node_ips)
    assert found["status"]["addresses"] == _addresses(
        *(("InternalIP", ip) for ip in node.node_ips), ("Hostname", node.name)
    )


async def _check_node_ip_story(
    bed: Bed,
    index: int,
    cloud: list[tuple[str, str]],
    expected: list[tuple[str, str]],
) -> None:
    """Node ``index`` registered as its ``--node-ip`` says; given an instance with the
    ``cloud`` addresses, kube-ccm initialises it with ``expected`` (then the kubelet's
    Hostname), and the kubelet's later status updates keep them."""
    node = bed.node(index)
    async with KubeClient.from_kubeconfig(bed.plane.kubeconfig) as client:
        _registered_as(await client.get(f"/api/v1/nodes/{node.name}"), node)
        provider_id = _add_instance(bed, node, *cloud)
        wanted = _addresses(*expected, ("Hostname", node.name))
        done = await _initialised(client, node.name, wanted)
        assert done["spec"]["providerID"] == provider_id
        assert done["metadata"]["labels"]["topology.kubernetes.io/zone"] == "zone-a"
        assert done["metadata"]["labels"]["node.kubernetes.io/instance-type"] == "sim.small"
        assert done["metadata"]["uid"] == bed.uids[node.name]

        def unchanged(found: dict[str, Any]) -> None:
            assert found["status"]["addresses"] == wanted
            assert found["spec"]["providerID"] == provider_id
            assert UNINITIALIZED not in taint_keys(found)

        await _status_updates(client, node.name, 2, unchanged)
        await _kubelet_reachable(client, node.name)


# -- the tests ------------------------------------------------------------------------


async def test_a_kubelet_that_registers_before_its_instance_exists_waits_and_is_not_deleted(
    bed: Bed,
) -> None:
    """The LATE node's kubelet registers before its instance exists and stays NotReady
    (no network add-on yet): the lifecycle controller, looking every second, finds a
    NotReady Node whose instance does not exist. A kubelet never registers again once
    its Node is gone, so deleting it would be for good."""
    node = bed.node(LATE)
    path = f"/api/v1/nodes/{node.name}"
    async with KubeClient.from_kubeconfig(bed.plane.kubeconfig) as client:

        def waiting(found: dict[str, Any]) -> None:
            _registered_as(found, node)
            assert found["metadata"]["uid"] == bed.uids[node.name]
            assert _ready(found) == "False"

        # Several lifecycle passes and retries of the cloud node controller later (at
        # every status update of the kubelet, and with backoff), the Node still waits.
        await _status_updates(client, node.name, 3, waiting, ready_only=False)
        assert "the instance does not exist yet" in bed.ccm.log()
        assert f"error syncing '{node.name}'" in bed.ccm.log()
        for each in bed.nodes.nodes:
            found = await client.get(f"/api/v1/nodes/{each.name}")
            assert found["metadata"]["uid"] == bed.uids[each.name]
            assert await _events(client, each.name) == []
        assert "deleted node" not in bed.ccm.log()

        # The instance appears: the same Node is initialised; then the network.
        provider_id = _add_instance(bed, node, ("InternalIP", node.ip))
        wanted = _addresses(("InternalIP", node.ip), ("Hostname", node.name))
        done = await _initialised(client, node.name, wanted)
        assert done["spec"]["providerID"] == provider_id
        assert done["metadata"]["uid"] == bed.uids[node.name]
        bed.nodes.install_network(node)

        async def ready() -> bool:
            return _ready(await client.get(path)) == "True"

        await eventually(ready, what=f"{node.name} Ready once its network is there")
        assert [e["reason"] for e in await _events(client, node.name)] == [wk.REASON_SYNCED]
        assert (await client.get(path))["metadata"]["uid"] == bed.uids[node.name]


async def test_ipv4_node_ip_comes_first_and_the_kubelets_hostname_stays_last(bed: Bed) -> None:
    node = bed.node(IPV4)
    await _check_node_ip_story(
        bed,
        IPV4,
        cloud=[
            ("InternalIP", node.ip),
            ("InternalIP", "fd00:cafe::4"),  # the instance's IPv6, not the node IP
            ("ExternalIP", "203.0.113.4"),
            ("ExternalIP", "2001:db8::4"),
        ],
        # The second InternalIP goes (a node IP matched that type); the rest keep the
        # cloud's order, and the kubelet's Hostname stays after them.
        expected=[
            ("InternalIP", node.ip),
            ("ExternalIP", "203.0.113.4"),
            ("ExternalIP", "2001:db8::4"),
        ],
    )


async def test_ipv6_node_ip(bed: Bed) -> None:
    node = bed.node(IPV6)
    assert node.ipv6 is not None
    assert node.ipv4 is None
    await _check_node_ip_story(
        bed,
        IPV6,
        cloud=[
            ("InternalIP", "192.0.2.6"),  # the instance's IPv4, not the node IP
            ("InternalIP", node.ipv6),
            ("ExternalIP", "2001:db8::6"),
        ],
        expected=[("InternalIP", node.ipv6), ("ExternalIP", "2001:db8::6")],
    )


async def test_dual_stack_node_ips_come_first_in_the_kubelets_order(bed: Bed) -> None:
    node = bed.node(DUAL)
    assert node.ipv4 is not None
    assert node.ipv6 is not None
    await _check_node_ip_story(
        bed,
        DUAL,
        cloud=[
            ("ExternalIP", "203.0.113.2"),
            ("InternalIP", node.ipv6),
            ("InternalIP", node.ipv4),
        ],
        expected=[
            ("InternalIP", node.ipv4),
            ("InternalIP", node.ipv6),
            ("ExternalIP", "203.0.113.2"),
        ],
    )


async def test_a_node_ip_the_cloud_does_not_know_waits_with_an_event_until_the_cloud_has_it(
    bed: Bed,
) -> None:
    node = bed.node(WRONG_IP)
    path = f"/api/v1/nodes/{node.name}"
    async with KubeClient.from_kubeconfig(bed.plane.kubeconfig) as client:
        provider_id = _add_instance(
            bed, node, ("InternalIP", "192.0.2.3"), ("ExternalIP", "203.0.113.3")
        )
        expected_message = (
            f'provided node ip for node "{node.name}" is not valid: failed to get node '
            f"address from cloud provider that matches ip: {node.ip}; annotation "
            f"{PROVIDED_NODE_IP}='{node.ip}', the cloud's addresses: "
            "[InternalIP=192.0.2.3 ExternalIP=203.0.113.3]; the Node stays uninitialised "
            "until the kubelet's --node-ip (one IP, or an IPv4,IPv6 pair) is among the "
            "instance's addresses: fix --node-ip or the instance"
        )

        async def warned(times: int) -> bool:
            events = [
                e
                for e in await _events(client, node.name)
                if e["reason"] == REASON_PROVIDED_NODE_IP_NOT_VALID
            ]
            if not events:
                return False
            (event,) = events
            assert event["type"] == "Warning"
            assert event["message"] == expected_message
            assert event["involvedObject"]["uid"] == bed.uids[node.name]
            return int(event["count"]) >= times

        await eventually(lambda: warned(1), what="a Warning Event on the Node")
        assert f"{expected_message}, requeuing" in bed.ccm.log()

        # It stays so: retried at every status update of the kubelet, never written.
        def waiting(found: dict[str, Any]) -> None:
            _registered_as(found, node)
            assert found["metadata"]["uid"] == bed.uids[node.name]

        await _status_updates(client, node.name, 2, waiting)
        await eventually(lambda: warned(2), what="the Event repeated (a count above 1)")

        # The cloud learns the address (nothing restarts): the Node is initialised, its
        # node IP first; the other InternalIP goes.
        bed.ccm.cloud.set_instance_addresses(
            node.name,
            [("InternalIP", "192.0.2.3"), ("InternalIP", node.ip), ("ExternalIP", "203.0.113.3")],
        )
        wanted = _addresses(
            ("InternalIP", node.ip), ("ExternalIP", "203.0.113.3"), ("Hostname", node.name)
        )
        done = await _initialised(client, node.name, wanted)
        assert done["spec"]["providerID"] == provider_id
        assert done["metadata"]["uid"] == bed.uids[node.name]
        assert (await client.get(path))["metadata"]["labels"][wk.LABEL_ZONE] == "zone-a"


async def test_a_restarted_kubelet_keeps_what_kube_ccm_wrote(bed: Bed) -> None:
    node = bed.node(IPV4)
    path = f"/api/v1/nodes/{node.name}"
    async with KubeClient.from_kubeconfig(bed.plane.kubeconfig) as client:
        wanted = None  # the IPv4 test initialised it, and waited for its addresses
        if bed.ccm.cloud.instance_by_node(node.name) is None:  # run on its own
            _add_instance(bed, node, ("InternalIP", node.ip), ("ExternalIP", "203.0.113.4"))
            wanted = _addresses(
                ("InternalIP", node.ip), ("ExternalIP", "203.0.113.4"), ("Hostname", node.name)
            )
        before = await _initialised(client, node.name, wanted)
        log = bed.nodes.process(f"kubelet-{node.name}").log()
        registrations = log.count("Attempting to register node")

        bed.nodes.stop_kubelet(node)
        bed.nodes.start_kubelet(node)
        kubelet = bed.nodes.process(f"kubelet-{node.name}")

        def registered_again() -> bool:
            return kubelet.log().count("Attempting to register node") > registrations

        await eventually(registered_again, what="the restarted kubelet registering again")

        def kept(found: dict[str, Any]) -> None:
            assert found["metadata"]["uid"] == before["metadata"]["uid"]
            assert found["spec"]["providerID"] == before["spec"]["providerID"]
            assert found["status"]["addresses"] == before["status"]["addresses"]
            assert UNINITIALIZED not in taint_keys(found)
            for key in (wk.LABEL_ZONE, wk.LABEL_REGION, wk.LABEL_INSTANCE_TYPE):
                assert found["metadata"]["labels"][key] == before["metadata"]["labels"][key]

        await _status_updates(client, node.name, 3, kept)
        kept(await client.get(path))
        synced = [e for e in await _events(client, node.name) if e["reason"] == wk.REASON_SYNCED]
        assert len(synced) == 1
        assert synced[0].get("count", 1) == 1  # initialised once, not again
        assert kubelet.poll() is None
