"""Node IPAM in the daemon, on the real apiserver: Nodes get pod CIDRs (and then routes),
a restart hands out none twice, a full range gives the Event, bad flags stop the start;
and Nodes as attackers: a node identity under NodeRestriction registering with the
whole cluster CIDR, another Node's CIDR, or a CIDR of another size or outside, gets a
Warning and neither takes nor frees another Node's CIDR.

The control plane is shared with other tests: each daemon here manages only the
Nodes carrying its own label (``--node-selector``) and allocates from a range no
other test uses. The attacks run on a control plane of their own, with the Node
authorizer and NodeRestriction, as a cluster with kubelets has.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml

from kube_ccm.runtime.client import ApiError, KubeClient
from kube_ccm.testbed.nodeidentity import node_identity_client, registration
from kube_ccm.testbed.rbac import AUDITED_USERS, forbidden, install_service_account
from kube_ccm.testing.controlplane import ControlPlane, ControlPlaneError, ControlPlaneOptions
from kube_ccm.testing.daemon import DaemonProcess
from kube_ccm.testing.pytest_plugin import Cleanup, unavailable
from kube_ccm.testing.waiting import eventually

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def ipam_daemon(
    kubeconfig: Path, workdir: Path, label: str, cluster_cidr: str, *extra: str
) -> DaemonProcess:
    return DaemonProcess(
        kubeconfig=kubeconfig,
        workdir=workdir,
        args=[
            "--leader-elect=false",
            "--controllers=nodeipam",
            "--allocate-node-cidrs",
            f"--cluster-cidr={cluster_cidr}",
            f"--node-selector=ipam-test={label}",
            *extra,
        ],
    ).start()


async def create_node(
    client: KubeClient, cleanup: Cleanup, name: str, label: str, *cidrs: str
) -> None:
    cleanup.add(f"/api/v1/nodes/{name}")
    spec: dict[str, Any] = {"podCIDR": cidrs[0], "podCIDRs": list(cidrs)} if cidrs else {}
    await client.create(
        "/api/v1/nodes",
        {"metadata": {"name": name, "labels": {"ipam-test": label}}, "spec": spec},
    )


async def pod_cidrs(client: KubeClient, name: str) -> list[str]:
    node: dict[str, Any] = await client.get(f"/api/v1/nodes/{name}")
    cidrs: list[str] = node["spec"].get("podCIDRs") or []
    assert node["spec"].get("podCIDR", "") == (cidrs[0] if cidrs else "")
    return cidrs


async def node_events(client: KubeClient, name: str) -> list[dict[str, Any]]:
    listed = await client.get(
        "/api/v1/namespaces/default/events", {"fieldSelector": f"involvedObject.name={name}"}
    )
    items: list[dict[str, Any]] = listed["items"]
    return items


async def test_nodes_get_pod_cidrs_then_routes_and_a_restart_gives_none_twice(
    *,
    ccm_kubeconfig: Path,
    kube_controlplane: ControlPlane,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    label = unique_name("ipam")
    cluster = "10.250.0.0/16,fd00:250::/56"
    names = [unique_name("node") for _ in range(3)]
    first = ipam_daemon(
        ccm_kubeconfig,
        tmp_path / "first",
        label,
        cluster,
        "--controllers=nodeipam,route",
        "--route-reconciliation-period=500ms",
    )
    try:
        for name in names[:2]:
            first.cloud.add_instance(name, zone="z", region="r", instance_type="t")
            await create_node(kube_client, kube_cleanup, name, label)

        async def allocated(name: str) -> bool:
            return len(await pod_cidrs(kube_client, name)) == 2

        for name in names[:2]:
            await eventually(functools.partial(allocated, name), what=f"pod CIDRs for {name}")
        given = {name: await pod_cidrs(kube_client, name) for name in names[:2]}
        for cidrs in given.values():
            assert ipaddress.IPv4Network(cidrs[0]).subnet_of(ipaddress.IPv4Network("10.250.0.0/16"))
            assert cidrs[0].endswith("/24")
            assert cidrs[1].endswith("/64")
        assert given[names[0]] != given[names[1]]

        def routed() -> bool:
            routes = {(r.target_node, r.destination_cidr) for r in first.cloud.routes()}
            return all((n, c) in routes for n, cidrs in given.items() for c in cidrs)

        await eventually(routed, what="a route for every allocated pod CIDR")
    finally:
        assert first.stop() == 0

    # A new CCM (a restart, or the next leader) must read what the Nodes hold.
    second = ipam_daemon(ccm_kubeconfig, tmp_path / "second", label, cluster)
    try:
        await create_node(kube_client, kube_cleanup, names[2], label)
        await eventually(lambda: allocated(names[2]), what="pod CIDRs for the third node")
        third = await pod_cidrs(kube_client, names[2])
        held = {c for cidrs in given.values() for c in cidrs}
        assert not set(third) & held, f"{third} handed out twice ({held})"
        assert {n: await pod_cidrs(kube_client, n) for n in names[:2]} == given
    finally:
        assert second.stop() == 0


async def test_a_full_range_gives_the_event_and_a_freed_cidr_goes_to_the_waiting_node(
    *,
    ccm_kubeconfig: Path,
    kube_controlplane: ControlPlane,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    label = unique_name("ipam")
    holder, waiting, manual = (unique_name(p) for p in ("holder", "waiting", "manual"))
    ccm = ipam_daemon(ccm_kubeconfig, tmp_path / "daemon", label, "10.251.0.0/24")
    try:
        await create_node(kube_client, kube_cleanup, holder, label)
        await eventually(
            lambda: _equals(pod_cidrs(kube_client, holder), ["10.251.0.0/24"]),
            what="the only CIDR for the first node",
        )
        await create_node(kube_client, kube_cleanup, waiting, label)
        await create_node(kube_client, kube_cleanup, manual, label, "192.168.250.0/24")

        async def event(name: str, reason: str) -> dict[str, Any] | None:
            for found in await node_events(kube_client, name):
                if found["reason"] == reason:
                    return found
            return None

        async def warned(name: str, reason: str) -> bool:
            return await event(name, reason) is not None

        await eventually(
            lambda: warned(waiting, "CIDRNotAvailable"), what="CIDRNotAvailable on the node"
        )
        not_available = await event(waiting, "CIDRNotAvailable")
        assert not_available is not None
        assert not_available["type"] == "Warning"
        assert not_available["message"] == f"Node {waiting} status is now: CIDRNotAvailable"
        assert not_available["source"]["component"] == "cidrAllocator"
        assert not_available["involvedObject"]["kind"] == "Node"

        await eventually(
            lambda: warned(manual, "PodCIDRNotInClusterCIDR"),
            what="the hand-set CIDR outside the range flagged",
        )
        assert await pod_cidrs(kube_client, manual) == ["192.168.250.0/24"], "kept"

        await kube_client.delete(f"/api/v1/nodes/{holder}")
        await eventually(
            lambda: _equals(pod_cidrs(kube_client, waiting), ["10.251.0.0/24"]),
            what="the freed CIDR given to the waiting node",
        )
    finally:
        assert ccm.stop() == 0


async def _equals(value: Any, expected: Any) -> bool:
    return bool(await value == expected)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ("--cluster-cidr=10.252.0.0/16", "--service-cluster-ip-range=10.0.0.0/8"),
            "--service-cluster-ip-range 10.0.0.0/8 covers all of --cluster-cidr 10.252.0.0/16",
        ),
        (
            ("--cluster-cidr=10.252.0.0/20", "--node-cidr-mask-size=16"),
            "--node-cidr-mask-size=16 would give each Node a /16",
        ),
        (
            ("--cluster-cidr=10.252.0.0/16,fd00:252::/56", "--node-cidr-mask-size=24"),
            "usage of --node-cidr-mask-size is not allowed with dual-stack clusters",
        ),
    ],
)
def test_bad_node_ipam_flags_stop_the_start_with_what_to_change(
    ccm_kubeconfig: Path,
    kube_controlplane: ControlPlane,
    tmp_path: Path,
    flags: tuple[str, ...],
    message: str,
) -> None:
    ccm = DaemonProcess(
        kubeconfig=ccm_kubeconfig,
        workdir=tmp_path / "daemon",
        args=["--controllers=nodeipam", "--allocate-node-cidrs", *flags],
    ).start()
    assert ccm.wait(timeout=60) == 1
    assert message in ccm.log()
    ccm.stop()


async def test_the_cloud_allocator_gives_a_node_its_instances_pod_cidrs(
    *,
    ccm_kubeconfig: Path,
    kube_controlplane: ControlPlane,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    """--cidr-allocator-type=CloudAllocator with the simulated cloud's pod ranges: the
    cloud node controller gives the Node its providerID, then the allocator its CIDRs
    and (no route controller running) NetworkUnavailable=False; a Node holding other
    CIDRs keeps them and gets a Warning."""
    label = unique_name("ipam")
    ccm = DaemonProcess(
        kubeconfig=ccm_kubeconfig,
        workdir=tmp_path / "daemon",
        cloud_config={"podCIDRs": {"ranges": ["10.251.0.0/16", "fd00:251::/48"]}},
        args=[
            "--leader-elect=false",
            "--controllers=cloud-node,nodeipam",
            "--allocate-node-cidrs",
            "--cidr-allocator-type=CloudAllocator",
            f"--node-selector=ipam-test={label}",
        ],
    ).start()
    try:
        name, other = unique_name("node"), unique_name("node")
        kube_cleanup.add(f"/api/v1/nodes/{name}")
        await kube_client.create(
            "/api/v1/nodes",
            {
                "metadata": {"name": name, "labels": {"ipam-test": label}},
                "spec": {
                    "taints": [
                        {
                            "key": "node.cloudprovider.kubernetes.io/uninitialized",
                            "value": "true",
                            "effect": "NoSchedule",
                        }
                    ]
                },
            },
        )

        async def given() -> bool:
            return bool(await pod_cidrs(kube_client, name))

        await eventually(given, what="the cloud's pod CIDRs on the Node")
        (instance,) = [i for i in ccm.cloud.instances() if i.node_name == name]
        number = ccm.cloud.instance_number(instance.id)
        v6 = ipaddress.IPv6Address("fd00:251::") + number * 2**64  # the number-th /64
        assert await pod_cidrs(kube_client, name) == [f"10.251.{number}.0/24", f"{v6}/64"]

        async def network_available() -> bool:
            node: dict[str, Any] = await kube_client.get(f"/api/v1/nodes/{name}")
            return any(
                c["type"] == "NetworkUnavailable"
                and (c["status"], c["reason"], c["message"])
                == ("False", "RouteCreated", "NodeController create implicit route")
                for c in node["status"].get("conditions") or []
            )

        await eventually(network_available, what="NetworkUnavailable=False")

        ccm.cloud.add_instance(other, zone="z", region="r", instance_type="t")
        (held,) = [i for i in ccm.cloud.instances() if i.node_name == other]
        kube_cleanup.add(f"/api/v1/nodes/{other}")
        await kube_client.create(
            "/api/v1/nodes",
            {
                "metadata": {"name": other, "labels": {"ipam-test": label}},
                "spec": {
                    "providerID": f"simulated://{held.id}",
                    "podCIDR": "10.99.0.0/24",
                    "podCIDRs": ["10.99.0.0/24"],
                },
            },
        )

        async def flagged() -> bool:
            return any(
                e["reason"] == "PodCIDRNotFromCloud" for e in await node_events(kube_client, other)
            )

        await eventually(flagged, what="a PodCIDRNotFromCloud warning")
        assert await pod_cidrs(kube_client, other) == ["10.99.0.0/24"]
    finally:
        assert ccm.stop() == 0


# -- nodes as attackers: pod CIDRs a node identity registers with ---------------------


@pytest.fixture(scope="module")
def restricted_plane() -> Iterator[ControlPlane]:
    """A control plane of this module's own with the Node authorizer and NodeRestriction
    (no kubelet runs): node identities may create and change only their own Node."""
    plane = ControlPlane(ControlPlaneOptions(real_nodes=True, audit_users=AUDITED_USERS))
    try:
        plane.start()
    except ControlPlaneError as exc:
        unavailable(f"the control plane with NodeRestriction could not start: {exc}")
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="module")
def restricted_ccm_kubeconfig(
    restricted_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """The daemon as deploy/'s ServiceAccount, bound as shipped; never refused."""
    docs = [
        doc
        for name in ("rbac.yaml", "rbac-nodes.yaml")
        for doc in yaml.safe_load_all((DEPLOY / name).read_text())
        if doc
    ]
    kubeconfig = asyncio.run(
        install_service_account(
            restricted_plane,
            docs,
            "kube-system",
            "cloud-controller-manager",
            kubeconfig=tmp_path_factory.mktemp("ccm") / "ccm.kubeconfig",
        )
    )
    yield kubeconfig
    refused = [r for user in AUDITED_USERS for r in forbidden(restricted_plane, user)]
    assert not refused, "the daemon was refused:\n" + "\n".join(refused)


@pytest_asyncio.fixture
async def admin(restricted_plane: ControlPlane) -> AsyncIterator[KubeClient]:
    client = KubeClient.from_kubeconfig(restricted_plane.kubeconfig)
    try:
        yield client
    finally:
        await client.aclose()


class Registrar:
    """Registers Nodes through their own node identities, and deletes them as admin."""

    def __init__(self, plane: ControlPlane, admin: KubeClient, label: str, home: Path) -> None:
        self.plane, self.admin, self.label, self.home = plane, admin, label, home
        self.created: list[str] = []

    async def register(self, name: str, *cidrs: str) -> None:
        node = node_identity_client(self.plane, name, self.home)
        try:
            await node.create(
                "/api/v1/nodes",
                registration(name, labels={"ipam-test": self.label}, pod_cidrs=cidrs),
            )
        finally:
            await node.aclose()
        self.created.append(name)

    async def delete(self, name: str) -> None:
        await self.admin.delete(f"/api/v1/nodes/{name}")

    async def remove_all(self) -> None:
        for name in self.created:
            try:
                await self.admin.delete(f"/api/v1/nodes/{name}")
            except ApiError as exc:
                if not exc.not_found:
                    raise


async def warning(client: KubeClient, name: str, reason: str) -> dict[str, Any] | None:
    for found in await node_events(client, name):
        if found["reason"] == reason and found["type"] == "Warning":
            return found
    return None


async def warned(client: KubeClient, name: str, reason: str) -> bool:
    return await warning(client, name, reason) is not None


async def all_pod_cidrs(client: KubeClient, names: list[str]) -> dict[str, list[str]]:
    return {name: await pod_cidrs(client, name) for name in names}


def assert_no_cidr_twice(given: dict[str, list[str]]) -> None:
    seen: dict[str, str] = {}
    for name, cidrs in given.items():
        for cidr in cidrs:
            assert cidr not in seen, f"{cidr} given to {seen[cidr]} and {name}"
            seen[cidr] = name


async def test_a_node_registering_with_the_whole_cluster_cidr_takes_and_frees_nothing(
    *,
    restricted_plane: ControlPlane,
    restricted_ccm_kubeconfig: Path,
    admin: KubeClient,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    """The attack of issue 37 (finding 5), as a node identity: with upstream's rule the
    whole /23 was marked in use, the next Node got CIDRNotAvailable, and deleting the
    attacker freed the first Node's CIDR for a third: two Nodes with one CIDR."""
    label = unique_name("ipam")
    legit, attacker, small, outside, second, third = (
        unique_name(p) for p in ("legit", "attacker", "small", "outside", "second", "third")
    )
    nodes = Registrar(restricted_plane, admin, label, tmp_path / "identities")
    ccm = ipam_daemon(restricted_ccm_kubeconfig, tmp_path / "daemon", label, "10.254.0.0/23")
    try:
        await nodes.register(legit)
        await eventually(
            lambda: _equals(pod_cidrs(admin, legit), ["10.254.0.0/24"]),
            what="the first CIDR for the first node",
            within=120,
        )
        await nodes.register(attacker, "10.254.0.0/23")
        await nodes.register(small, "10.254.1.128/25")
        await nodes.register(outside, "192.168.254.0/24")
        # Nothing of the range went to them: the second node gets the other /24.
        await nodes.register(second)
        await eventually(
            lambda: _equals(pod_cidrs(admin, second), ["10.254.1.0/24"]),
            what="the second /24 for the second node (not CIDRNotAvailable)",
            within=60,
        )

        for name, problem in (
            (attacker, "pod CIDR 10.254.0.0/23 is a /23, not one /24 of cluster CIDR"),
            (small, "pod CIDR 10.254.1.128/25 is a /25, not one /24"),
            (outside, "pod CIDR 192.168.254.0/24 is outside cluster CIDR 10.254.0.0/23"),
        ):
            await eventually(
                functools.partial(warned, admin, name, "PodCIDRNotInClusterCIDR"),
                what=f"a PodCIDRNotInClusterCIDR Warning on {name}",
                within=60,
            )
            event = await warning(admin, name, "PodCIDRNotInClusterCIDR")
            assert event is not None
            assert problem in event["message"]
            assert event["involvedObject"]["kind"] == "Node"

        # The attackers go: they free nothing, so the range stays full.
        for name in (attacker, small, outside):
            await nodes.delete(name)
        await nodes.register(third)
        await eventually(
            functools.partial(warned, admin, third, "CIDRNotAvailable"),
            what="CIDRNotAvailable for the third node: the range is still full",
            within=60,
        )
        given = await all_pod_cidrs(admin, [legit, second, third])
        assert given == {legit: ["10.254.0.0/24"], second: ["10.254.1.0/24"], third: []}
    finally:
        await nodes.remove_all()
        assert ccm.stop() == 0


async def test_a_node_registering_with_another_nodes_cidr_is_reported_and_frees_nothing(
    *,
    restricted_plane: ControlPlane,
    restricted_ccm_kubeconfig: Path,
    admin: KubeClient,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    label = unique_name("ipam")
    legit, copycat, late, copy2 = (unique_name(p) for p in ("legit", "copycat", "late", "copy2"))
    nodes = Registrar(restricted_plane, admin, label, tmp_path / "identities")
    ccm = ipam_daemon(restricted_ccm_kubeconfig, tmp_path / "daemon", label, "10.254.4.0/23")
    try:
        await nodes.register(legit)
        await eventually(
            lambda: _equals(pod_cidrs(admin, legit), ["10.254.4.0/24"]),
            what="the first CIDR for the first node",
            within=120,
        )
        await nodes.register(copycat, "10.254.4.0/24")
        await eventually(
            functools.partial(warned, admin, copycat, "PodCIDRDuplicate"),
            what="a PodCIDRDuplicate Warning on the node that came second",
            within=60,
        )
        event = await warning(admin, copycat, "PodCIDRDuplicate")
        assert event is not None
        assert f"pod CIDR 10.254.4.0/24 is already Node {legit}'s" in event["message"]
        assert await warning(admin, legit, "PodCIDRDuplicate") is None

        # The copy goes: the CIDR stays legit's. The first node goes while a copy holds
        # it: it stays in use (the copy's now). Neither is handed out again.
        await nodes.delete(copycat)
        await nodes.register(copy2, "10.254.4.0/24")
        await eventually(
            functools.partial(warned, admin, copy2, "PodCIDRDuplicate"),
            what="a PodCIDRDuplicate Warning on the second copy",
            within=60,
        )
        await nodes.delete(legit)
        await nodes.register(late)
        await eventually(
            lambda: _equals(pod_cidrs(admin, late), ["10.254.5.0/24"]),
            what="the other /24 for the late node, not the copied one",
            within=60,
        )
        given = await all_pod_cidrs(admin, [copy2, late])
        assert_no_cidr_twice(given)
    finally:
        await nodes.remove_all()
        assert ccm.stop() == 0


# -- nodes as attackers: cloud routes for the pod CIDRs they registered with ------------


async def refusal(client: KubeClient, name: str) -> str:
    event = await warning(client, name, "FailedToCreateRoute")
    return "" if event is None else str(event["message"])


async def refused_route(client: KubeClient, name: str) -> bool:
    return "not creating a route" in await refusal(client, name)


async def test_routes_go_only_to_the_cidrs_node_ipam_gave(
    *,
    restricted_plane: ControlPlane,
    restricted_ccm_kubeconfig: Path,
    admin: KubeClient,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    """Node IPAM and the route controller in one daemon: a node identity registering
    with the victim's pod CIDR, or with the whole cluster CIDR, gets no cloud route (the
    route controller asks node IPAM whose CIDR it is); the victim's route stays its own.
    Before the fix both attackers got a route: one for the victim's pod traffic, one for
    every Node's."""
    label = unique_name("routes")
    victim, copycat, whole = (unique_name(p) for p in ("victim", "x-copycat", "x-whole"))
    nodes = Registrar(restricted_plane, admin, label, tmp_path / "identities")
    ccm = ipam_daemon(
        restricted_ccm_kubeconfig,
        tmp_path / "daemon",
        label,
        "10.254.8.0/23",
        "--controllers=nodeipam,route",
        "--route-reconciliation-period=500ms",
    )

    def routes() -> set[tuple[str, str]]:
        return {(r.target_node, r.destination_cidr) for r in ccm.cloud.routes()}

    try:
        for name in (victim, copycat, whole):
            ccm.cloud.add_instance(name, zone="z", region="r", instance_type="t")
        await nodes.register(victim)
        await eventually(
            lambda: (victim, "10.254.8.0/24") in routes(),
            what="the victim's route for the CIDR node IPAM gave it",
            within=120,
        )
        await nodes.register(copycat, "10.254.8.0/24")
        await nodes.register(whole, "10.254.8.0/23")

        for name, problem in (
            (copycat, f"pod CIDR 10.254.8.0/24 is already Node {victim}'s"),
            (whole, "pod CIDR 10.254.8.0/23 is a /23, not one /24 of cluster CIDR"),
        ):
            await eventually(
                functools.partial(refused_route, admin, name),
                what=f"a FailedToCreateRoute Warning on {name}",
                within=60,
            )
            message = await refusal(admin, name)
            assert f"is not the Node's in node IPAM: {problem}" in message
        # The warnings come in the pass that would have created the routes.
        assert routes() == {(victim, "10.254.8.0/24")}
        assert [r.target_node for r in ccm.cloud.routes()] == [victim]
        assert await refusal(admin, victim) == ""
    finally:
        await nodes.remove_all()
        assert ccm.stop() == 0


async def test_without_node_ipam_a_later_node_with_another_nodes_cidr_gets_no_route(
    *,
    restricted_plane: ControlPlane,
    restricted_ccm_kubeconfig: Path,
    admin: KubeClient,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    """Pod CIDRs allocated elsewhere (an admin's patch stands for kube-controller-manager):
    a node identity registering later with the victim's CIDR, or with the whole cluster
    CIDR, gets no route; the victim keeps its route. Before the fix both got one."""
    label = unique_name("routes")
    victim, copycat, whole = (unique_name(p) for p in ("victim", "x-copycat", "x-whole"))
    nodes = Registrar(restricted_plane, admin, label, tmp_path / "identities")
    ccm = DaemonProcess(
        kubeconfig=restricted_ccm_kubeconfig,
        workdir=tmp_path / "daemon",
        args=[
            "--leader-elect=false",
            "--controllers=route",
            "--cluster-cidr=10.254.12.0/23",
            "--node-cidr-mask-size=24",
            f"--node-selector=ipam-test={label}",
            "--route-reconciliation-period=500ms",
        ],
    ).start()

    def routes() -> set[tuple[str, str]]:
        return {(r.target_node, r.destination_cidr) for r in ccm.cloud.routes()}

    try:
        for name in (victim, copycat, whole):
            ccm.cloud.add_instance(name, zone="z", region="r", instance_type="t")
        await nodes.register(victim)
        await admin.patch(
            f"/api/v1/nodes/{victim}",
            {"spec": {"podCIDR": "10.254.12.0/24", "podCIDRs": ["10.254.12.0/24"]}},
        )
        await eventually(
            lambda: (victim, "10.254.12.0/24") in routes(), what="the victim's route", within=120
        )
        await nodes.register(copycat, "10.254.12.0/24")
        await nodes.register(whole, "10.254.12.0/23")

        for name, problem in (
            (copycat, f"is Node {victim}'s pod CIDR 10.254.12.0/24 (Node {victim} registered"),
            (whole, "is a /23, not one /24 of cluster CIDR 10.254.12.0/23"),
        ):
            await eventually(
                functools.partial(refused_route, admin, name),
                what=f"a FailedToCreateRoute Warning on {name}",
                within=60,
            )
            assert problem in await refusal(admin, name)
        assert routes() == {(victim, "10.254.12.0/24")}
        assert await refusal(admin, victim) == ""
    finally:
        await nodes.remove_all()
        assert ccm.stop() == 0
