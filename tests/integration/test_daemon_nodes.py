"""The daemon, started as users start it, runs the node controllers on the real apiserver.

Each test gets its own ``kube-ccm run`` subprocess with the simulated provider
over a fresh SQLite cloud that the test drives (``daemon.cloud``).
"""

from __future__ import annotations

import asyncio
import datetime
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kube_ccm.runtime.client import ApiError, KubeClient
from kube_ccm.testing.controlplane import ControlPlane
from kube_ccm.testing.daemon import DaemonProcess
from kube_ccm.testing.manifests import (
    UNINITIALIZED_TAINT,
    create_node,
    set_node_ready,
    taint_keys,
)
from kube_ccm.testing.pytest_plugin import Cleanup
from kube_ccm.testing.waiting import eventually

SHUTDOWN_KEY = "node.cloudprovider.kubernetes.io/shutdown"
FAST = (
    "--leader-elect=false",
    "--node-monitor-period=500ms",
    "--node-status-update-frequency=2s",
    "--cloud-call-timeout=2s",
    "--cluster-cidr=10.244.0.0/16",
)

DaemonFactory = Callable[..., DaemonProcess]


@pytest.fixture
def daemon(
    ccm_kubeconfig: Path, kube_controlplane: ControlPlane, tmp_path: Path
) -> Iterator[DaemonFactory]:
    started: list[DaemonProcess] = []

    def start(
        *args: str, cloud_config: dict[str, Any] | None = None, fast: bool = True
    ) -> DaemonProcess:
        process = DaemonProcess(
            kubeconfig=ccm_kubeconfig,
            workdir=tmp_path / f"daemon-{len(started)}",
            cloud_config=cloud_config,
            args=[*(FAST if fast else ()), *args],
        )
        started.append(process.start())
        return process

    yield start
    for process in started:
        process.stop()


async def get_node(client: KubeClient, name: str) -> dict[str, Any]:
    node: dict[str, Any] = await client.get(f"/api/v1/nodes/{name}")
    return node


async def node_events(client: KubeClient, name: str) -> list[dict[str, Any]]:
    listed = await client.get(
        "/api/v1/namespaces/default/events", {"fieldSelector": f"involvedObject.name={name}"}
    )
    items: list[dict[str, Any]] = listed["items"]
    return items


async def test_a_tainted_node_is_initialised_with_one_cloud_call(
    daemon: DaemonFactory,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
) -> None:
    ccm = daemon("--node-status-update-frequency=5m")
    name = unique_name("node")
    instance = ccm.cloud.add_instance(
        name,
        zone="zone-b",
        region="region-1",
        instance_type="sim.large",
        addresses=[("InternalIP", "10.20.0.7"), ("ExternalIP", "203.0.113.7")],
        labels={"example.com/pool": "blue", "kubernetes.io/forbidden": "x"},
    )
    await create_node(
        kube_client, kube_cleanup, name, addresses=[{"type": "Hostname", "address": name}]
    )

    async def initialised() -> bool:
        node = await get_node(kube_client, name)
        addresses = node["status"].get("addresses") or []
        return UNINITIALIZED_TAINT["key"] not in taint_keys(node) and len(addresses) == 3

    await eventually(initialised, what="the node is initialised with the cloud's addresses")
    node = await get_node(kube_client, name)
    labels = node["metadata"]["labels"]
    assert node["spec"]["providerID"] == f"simulated://{instance.id}"
    assert labels["topology.kubernetes.io/zone"] == "zone-b"
    assert labels["failure-domain.beta.kubernetes.io/zone"] == "zone-b"
    assert labels["topology.kubernetes.io/region"] == "region-1"
    assert labels["failure-domain.beta.kubernetes.io/region"] == "region-1"
    assert labels["node.kubernetes.io/instance-type"] == "sim.large"
    assert labels["beta.kubernetes.io/instance-type"] == "sim.large"
    assert labels["example.com/pool"] == "blue"
    assert "kubernetes.io/forbidden" not in labels
    assert node["status"]["addresses"] == [
        {"type": "InternalIP", "address": "10.20.0.7"},
        {"type": "ExternalIP", "address": "203.0.113.7"},
        {"type": "Hostname", "address": name},  # the kubelet's, kept at the end
    ]
    await eventually(
        lambda: _has_event(kube_client, name, "Synced", "Node synced successfully"),
        what="a Synced event",
    )
    # one cloud call initialised it (the periodic address loop is 5 minutes away)
    assert ccm.cloud.calls()["InstanceMetadata"]["count"] == 1


async def _has_event(client: KubeClient, name: str, reason: str, message: str) -> bool:
    return any(
        e["reason"] == reason and e["message"] == message for e in await node_events(client, name)
    )


async def test_a_hostname_written_after_initialisation_ends_up_after_the_clouds_addresses(
    daemon: DaemonFactory,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
) -> None:
    """A kubelet's Hostname that reaches the API after the daemon wrote the cloud's
    addresses: a strategic-merge patch puts it first. The next address refresh
    (--node-status-update-frequency, 2 s here) puts the cloud's addresses first again."""
    ccm = daemon()
    name = unique_name("node")
    ccm.cloud.add_instance(
        name,
        zone="z",
        region="r",
        instance_type="t",
        addresses=[("InternalIP", "10.20.0.8"), ("ExternalIP", "203.0.113.8")],
    )
    await create_node(kube_client, kube_cleanup, name)
    cloud = [
        {"type": "InternalIP", "address": "10.20.0.8"},
        {"type": "ExternalIP", "address": "203.0.113.8"},
    ]

    async def initialised() -> bool:
        addresses: list[dict[str, str]] = (await get_node(kube_client, name))["status"].get(
            "addresses", []
        )
        return addresses == cloud

    await eventually(initialised, what="the cloud's addresses on the node")
    hostname = {"type": "Hostname", "address": name}
    patched = await kube_client.patch(
        f"/api/v1/nodes/{name}/status", {"status": {"addresses": [hostname]}}
    )
    assert patched["status"]["addresses"][0] == hostname, "the race this test stands for"

    async def reordered() -> bool:
        addresses: list[dict[str, str]] = (await get_node(kube_client, name))["status"]["addresses"]
        return addresses == [*cloud, hostname]

    await eventually(reordered, within=20, what="the Hostname back after the cloud's addresses")


@pytest.mark.parametrize("node_ip", [False, True], ids=["kubelet-hostname", "provided-node-ip"])
async def test_a_kubelet_status_update_that_crosses_initialisation_ends_in_upstreams_order(
    daemon: DaemonFactory,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
    node_ip: bool,
) -> None:
    """The kubelet's status update crosses the initialisation: it lands after the daemon
    wrote the cloud's addresses, and the API server's strategic merge puts what it adds
    (the kubelet's Hostname; with --node-ip its [InternalIP, Hostname]) before the
    ExternalIP. The daemon puts upstream's order back at once, with no refresh (5
    minutes away) and no further cloud call."""
    ccm = daemon("--node-status-update-frequency=5m")
    name = unique_name("node")
    ccm.cloud.add_instance(
        name,
        zone="z",
        region="r",
        instance_type="t",
        addresses=[("InternalIP", "10.20.0.9"), ("ExternalIP", "203.0.113.9")],
    )
    internal = {"type": "InternalIP", "address": "10.20.0.9"}
    external = {"type": "ExternalIP", "address": "203.0.113.9"}
    hostname = {"type": "Hostname", "address": name}
    annotations = {"alpha.kubernetes.io/provided-node-ip": "10.20.0.9"} if node_ip else None
    await create_node(kube_client, kube_cleanup, name, annotations=annotations)

    async def addresses() -> list[dict[str, str]]:
        found: list[dict[str, str]] = (await get_node(kube_client, name))["status"].get(
            "addresses", []
        )
        return found

    async def written() -> bool:
        return await addresses() == [internal, external]

    await eventually(written, what="the cloud's addresses on the node")
    kubelet = [internal, hostname] if node_ip else [hostname]
    patched = await kube_client.patch(
        f"/api/v1/nodes/{name}/status", {"status": {"addresses": kubelet}}
    )
    merged = patched["status"]["addresses"]
    assert merged != [internal, external, hostname], "the crossing this test stands for"

    async def in_order() -> bool:
        return await addresses() == [internal, external, hostname]

    await eventually(in_order, within=30, what="upstream's order without waiting for a refresh")
    assert ccm.cloud.calls()["InstanceMetadata"]["count"] == 1


@pytest.mark.parametrize("status_workers", ["0", "2"])
async def test_addresses_the_cloud_changes_reach_every_node_with_any_status_worker_count(
    daemon: DaemonFactory,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
    status_workers: str,
) -> None:
    """--concurrent-node-status-updates as v0.36 has it: 0 (the default) falls back to
    --concurrent-node-syncs; either way the address refresh reaches every Node."""
    ccm = daemon(f"--concurrent-node-status-updates={status_workers}")
    names = [unique_name("node") for _ in range(4)]
    for i, name in enumerate(names):
        ccm.cloud.add_instance(
            name,
            zone="z",
            region="r",
            instance_type="t",
            addresses=[("InternalIP", f"10.21.0.{i}")],
        )
        await create_node(kube_client, kube_cleanup, name)

    async def addresses(want: str) -> bool:
        for i, name in enumerate(names):
            got = (await get_node(kube_client, name))["status"].get("addresses", [])
            if got != [{"type": "InternalIP", "address": f"{want}.{i}"}]:
                return False
        return True

    await eventually(lambda: addresses("10.21.0"), what="the cloud's addresses on every node")
    for i, name in enumerate(names):
        ccm.cloud.set_instance_addresses(name, [("InternalIP", f"10.22.0.{i}")])
    # --node-status-update-frequency is 2 s here: a pass or two.
    await eventually(lambda: addresses("10.22.0"), within=20, what="the new addresses refreshed")


async def test_node_ip_annotation_orders_addresses_and_an_impossible_one_keeps_the_taint(
    daemon: DaemonFactory,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
) -> None:
    ccm = daemon()
    good, bad = unique_name("node"), unique_name("node")
    for name in (good, bad):
        ccm.cloud.add_instance(
            name,
            zone="z",
            region="r",
            instance_type="t",
            addresses=[("InternalIP", "10.0.0.1"), ("InternalIP", "10.0.0.2"), ("Hostname", name)],
        )
    annotation = "alpha.kubernetes.io/provided-node-ip"
    await create_node(kube_client, kube_cleanup, good, annotations={annotation: "10.0.0.2"})
    await create_node(kube_client, kube_cleanup, bad, annotations={annotation: "10.9.9.9"})

    async def good_initialised() -> bool:
        return bool((await get_node(kube_client, good))["status"].get("addresses"))

    await eventually(good_initialised, what="the node with a valid node IP is initialised")
    assert (await get_node(kube_client, good))["status"]["addresses"] == [
        {"type": "InternalIP", "address": "10.0.0.2"},
        {"type": "Hostname", "address": good},
    ]
    ccm.wait_for_log(f'provided node ip for node "{bad}" is not valid')
    assert (
        "alpha.kubernetes.io/provided-node-ip='10.9.9.9', the cloud's addresses: "
        f"[InternalIP=10.0.0.1 InternalIP=10.0.0.2 Hostname={bad}]"
    ) in ccm.log()
    node = await get_node(kube_client, bad)
    assert UNINITIALIZED_TAINT["key"] in taint_keys(node)
    assert "providerID" not in node["spec"]


async def test_shutdown_instance_is_tainted_and_untainted_when_it_runs_again(
    daemon: DaemonFactory,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
) -> None:
    ccm = daemon()
    name = unique_name("node")
    ccm.cloud.add_instance(name, zone="z", region="r", instance_type="t")
    await create_node(kube_client, kube_cleanup, name, tainted=False)
    await set_node_ready(kube_client, name, "False")

    ccm.cloud.set_instance_state(name, "shutdown")

    async def tainted() -> bool:
        return SHUTDOWN_KEY in taint_keys(await get_node(kube_client, name))

    await eventually(tainted, what="the shutdown taint")
    # Said at the default verbosity, naming the node.
    ccm.wait_for_log(f"node {name}: added the taint {SHUTDOWN_KEY}:NoSchedule")
    ccm.cloud.set_instance_state(name, "running")
    await set_node_ready(kube_client, name, "True")  # what the kubelet does once it runs

    async def untainted() -> bool:
        return SHUTDOWN_KEY not in taint_keys(await get_node(kube_client, name))

    await eventually(untainted, what="the shutdown taint is removed")
    ccm.wait_for_log(f"node {name}: removed the taint {SHUTDOWN_KEY}:NoSchedule")
    assert ccm.log().count(f"node {name}: added the taint") == 1


async def test_a_not_ready_node_whose_instance_is_terminated_is_deleted_with_an_event(
    daemon: DaemonFactory,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
) -> None:
    ccm = daemon()
    gone_ready, gone_not_ready = unique_name("node"), unique_name("node")
    for name in (gone_ready, gone_not_ready):
        ccm.cloud.add_instance(name, zone="z", region="r", instance_type="t")
        await create_node(kube_client, kube_cleanup, name, tainted=False)
    await set_node_ready(kube_client, gone_ready, "True")
    await set_node_ready(kube_client, gone_not_ready, "Unknown")

    ccm.cloud.set_instance_state(gone_ready, "terminated")
    ccm.cloud.set_instance_state(gone_not_ready, "terminated")

    async def deleted() -> bool:
        try:
            await get_node(kube_client, gone_not_ready)
        except ApiError as exc:
            return exc.not_found
        return False

    await eventually(deleted, what="the NotReady node of a terminated instance is deleted")
    # The Event is written by the recorder beside the delete, not before it: wait for it.
    await eventually(
        lambda: _has_event(
            kube_client,
            gone_not_ready,
            "DeletingNode",
            f"Deleting node {gone_not_ready} because it does not exist in the cloud provider",
        ),
        what="a DeletingNode Event",
    )
    await asyncio.sleep(2)  # several monitor periods
    assert (await get_node(kube_client, gone_ready))["metadata"]["name"] == gone_ready


async def test_initialisation_survives_an_apiserver_restart(
    daemon: DaemonFactory,
    kube_controlplane: ControlPlane,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
) -> None:
    ccm = daemon()
    before, after = unique_name("node"), unique_name("node")
    await create_node(kube_client, kube_cleanup, before)

    async def initialised(name: str) -> bool:
        return UNINITIALIZED_TAINT["key"] not in taint_keys(await get_node(kube_client, name))

    await eventually(lambda: initialised(before), what="first node initialised")
    kube_controlplane.restart_apiserver()
    async with KubeClient.from_kubeconfig(kube_controlplane.kubeconfig) as client:
        await create_node(client, kube_cleanup, after)

        async def after_initialised() -> bool:
            return UNINITIALIZED_TAINT["key"] not in taint_keys(await get_node(client, after))

        await eventually(after_initialised, within=60, what="node created after the restart")
    assert ccm.poll() is None, ccm.log()[-2000:]


async def test_a_hanging_then_failing_provider_is_retried_until_the_node_initialises(
    daemon: DaemonFactory,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
) -> None:
    ccm = daemon("--controllers=cloud-node")
    # The first InstanceMetadata call hangs; the next two calls (any method) fail.
    ccm.cloud.set_fault("InstanceMetadata", "hang", remaining=1)
    ccm.cloud.set_fault("*", "error", remaining=2)
    name = unique_name("node")
    await create_node(kube_client, kube_cleanup, name)
    ccm.wait_for_log("did not return within 2 s", timeout=30)

    async def initialised() -> bool:
        return UNINITIALIZED_TAINT["key"] not in taint_keys(await get_node(kube_client, name))

    await eventually(initialised, within=60, what="initialised after the faults")

    async def both_errors_counted() -> bool:
        # The daemon's cloud writes its call counts at the end of a flush interval; a
        # reader waits for that at most 5 s, which a loaded machine can outlast (CI read
        # 0 once, after the Node had been initialised past both errors).
        calls = await asyncio.to_thread(ccm.cloud.calls)
        return calls.get("InstanceMetadata", {}).get("errors", 0) >= 2

    await eventually(both_errors_counted, within=30, what="both injected errors counted")
    # The recovery is said at the default verbosity too.
    ccm.wait_for_log("simulated cloud provider calls succeed again after")
    assert ccm.poll() is None


async def test_sigterm_stops_the_daemon_cleanly(daemon: DaemonFactory) -> None:
    ccm = daemon()
    ccm.wait_for_log("Started cloud-node-controller")
    ccm.signal(signal.SIGTERM)
    assert ccm.wait(timeout=30) == 0
    assert "shut down cleanly" in ccm.log()
    # The provider's aclose() ran on the way out (issue 12: provider lifecycle).
    assert "closing the simulated cloud" in ccm.log()
    assert "closed the cloud provider" in ccm.log()


def test_controller_start_interval_spaces_the_starts(daemon: DaemonFactory) -> None:
    ccm = daemon("--controllers=cloud-node,cloud-node-lifecycle", "--controller-start-interval=1s")
    ccm.wait_for_log("Started cloud-node-lifecycle-controller")
    stamps = [
        datetime.datetime.strptime(line.split()[1], "%H:%M:%S.%f")
        for line in ccm.log().splitlines()
        if "] Started cloud-node" in line
    ]
    assert len(stamps) == 2
    # A lower bound only (the sleep is at least the interval): nothing here can be early.
    assert (stamps[1] - stamps[0]).total_seconds() >= 1.0


@pytest.mark.parametrize(
    ("args", "cloud_config", "message"),
    [
        (
            ("--controllers=cloud-node,bogus",),
            None,
            '"bogus" is not in the list of known controllers',
        ),
        (("--cloud-provider=nope",), None, 'unknown cloud provider "nope"'),
        ((), {"latency": "5 parsecs"}, "invalid `latency`"),
        ((), {"unknownField": 1}, "unknown field `unknownField`"),
    ],
)
def test_bad_configuration_exits_1_with_a_message_that_says_what_to_fix(
    daemon: DaemonFactory, args: tuple[str, ...], cloud_config: dict[str, Any] | None, message: str
) -> None:
    ccm = daemon(*args, cloud_config=cloud_config)
    assert ccm.wait(timeout=30) == 1
    assert message in ccm.log()


async def test_a_missing_cluster_cidr_fails_before_leader_election_in_one_line(
    daemon: DaemonFactory, kube_client: KubeClient, unique_name: Callable[[str], str]
) -> None:
    """With leader election on, a replica that could never run its route controller
    must not win the Lease first (it would crash-loop holding it)."""
    lease = unique_name("lease")
    ccm = daemon("--controllers=route", f"--leader-elect-resource-name={lease}", fast=False)
    assert ccm.wait(timeout=30) == 1
    log = ccm.log()
    assert "--cluster-cidr is required when routes are configured" in log
    assert "Traceback" not in log
    with pytest.raises(ApiError) as gone:
        await kube_client.get(f"/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/{lease}")
    assert gone.value.not_found


async def test_in_a_mixed_fleet_nodes_outside_the_scope_are_never_touched(
    daemon: DaemonFactory,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
) -> None:
    """Another CCM's Node (another providerID scheme) and a Node outside --node-selector
    are never initialised, tainted or deleted, even when this cloud says their instance
    is gone; a Node in scope in the same state is deleted (the daemon is at work)."""
    ccm = daemon("--node-selector=!example.com/other-ccm")
    theirs, excluded, ours = unique_name("node"), unique_name("node"), unique_name("node")
    for name in (theirs, excluded, ours):
        ccm.cloud.add_instance(name, zone="z", region="r", instance_type="t")
        ccm.cloud.set_instance_state(name, "terminated")
    await create_node(kube_client, kube_cleanup, theirs, tainted=False)
    await kube_client.patch(
        f"/api/v1/nodes/{theirs}", {"spec": {"providerID": "othercloud://i-123"}}
    )
    await create_node(kube_client, kube_cleanup, excluded)
    await kube_client.patch(
        f"/api/v1/nodes/{excluded}", {"metadata": {"labels": {"example.com/other-ccm": "true"}}}
    )
    await create_node(kube_client, kube_cleanup, ours, tainted=False)
    for name in (theirs, excluded, ours):
        await set_node_ready(kube_client, name, "False")

    async def ours_deleted() -> bool:
        try:
            await get_node(kube_client, ours)
        except ApiError as exc:
            return exc.not_found
        return False

    await eventually(ours_deleted, what="the in-scope node deleted")
    await asyncio.sleep(2)  # four more lifecycle passes
    kept_theirs, kept_excluded = (
        await get_node(kube_client, theirs),
        await get_node(kube_client, excluded),
    )
    assert SHUTDOWN_KEY not in taint_keys(kept_theirs)
    assert SHUTDOWN_KEY not in taint_keys(kept_excluded)
    assert UNINITIALIZED_TAINT["key"] in taint_keys(kept_excluded), "never initialised"
    assert "providerID" not in kept_excluded["spec"]


async def test_a_provider_id_without_a_scheme_is_ours_and_a_node_left_alone_is_said_once(
    daemon: DaemonFactory,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
) -> None:
    """A kubelet started with ``--provider-id=<id>`` (no ``scheme://``) registers a Node
    this CCM initialises, as upstream does; another provider's tainted Node is left
    alone, which the daemon says once: one log line and one ``NodeNotManaged`` Event."""
    ccm = daemon()
    plain, theirs = unique_name("node"), unique_name("node")
    ccm.cloud.add_instance(plain, zone="z", region="r", instance_type="t", instance_id=plain)
    await create_node(kube_client, kube_cleanup, plain, providerID=plain)
    await create_node(kube_client, kube_cleanup, theirs, providerID="othercloud://i-9")

    async def initialised() -> bool:
        return UNINITIALIZED_TAINT["key"] not in taint_keys(await get_node(kube_client, plain))

    async def said() -> bool:
        return any(e["reason"] == "NodeNotManaged" for e in await node_events(kube_client, theirs))

    await eventually(initialised, what="the node with a scheme-less providerID initialised")
    assert (await get_node(kube_client, plain))["spec"]["providerID"] == plain
    await eventually(said, what="a NodeNotManaged event on the other provider's node")
    # More syncs of the foreign node: still tainted, still said once.
    for value in ("a", "b"):
        await kube_client.patch(
            f"/api/v1/nodes/{theirs}", {"metadata": {"labels": {"example.com/poke": value}}}
        )
    await asyncio.sleep(1.5)
    assert UNINITIALIZED_TAINT["key"] in taint_keys(await get_node(kube_client, theirs))
    events = await node_events(kube_client, theirs)
    assert [(e["type"], e["reason"], e["count"]) for e in events] == [
        ("Normal", "NodeNotManaged", 1)
    ]
    assert "'othercloud://i-9' is not of this provider (simulated://...)" in events[0]["message"]
    assert ccm.log().count(f"Not initializing node {theirs}:") == 1


async def test_with_node_deletion_off_a_gone_instance_gets_the_shutdown_taint_and_a_warning(
    daemon: DaemonFactory,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
) -> None:
    ccm = daemon("--enable-node-deletion=false")
    name = unique_name("node")
    ccm.cloud.add_instance(name, zone="z", region="r", instance_type="t")
    ccm.cloud.set_instance_state(name, "terminated")
    await create_node(kube_client, kube_cleanup, name, tainted=False)
    await set_node_ready(kube_client, name, "False")

    async def warned() -> bool:
        return any(
            e["reason"] == "NodeDeletionDisabled" for e in await node_events(kube_client, name)
        )

    await eventually(warned, what="a NodeDeletionDisabled warning")
    await asyncio.sleep(1.5)  # more passes: still there, still one warning
    node = await get_node(kube_client, name)
    assert SHUTDOWN_KEY in taint_keys(node)
    events = [e for e in await node_events(kube_client, name) if e["reason"] != "Synced"]
    assert [e["reason"] for e in events] == ["NodeDeletionDisabled"]
    assert events[0]["count"] == 1
