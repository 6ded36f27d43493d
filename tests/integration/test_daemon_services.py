"""The service controller in the daemon, on the real apiserver, with the simulated cloud."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest_asyncio
from prometheus_client.parser import text_string_to_metric_families

from kube_ccm.runtime.client import ApiError, KubeClient
from kube_ccm.testing.controlplane import ControlPlane
from kube_ccm.testing.daemon import DaemonProcess
from kube_ccm.testing.pytest_plugin import Cleanup
from kube_ccm.testing.waiting import eventually

FINALIZER = "service.kubernetes.io/load-balancer-cleanup"
EXCLUDE = "node.kubernetes.io/exclude-from-external-load-balancers"


@pytest_asyncio.fixture
async def ccm(
    ccm_kubeconfig: Path, kube_controlplane: ControlPlane, kube_client: KubeClient, tmp_path: Path
) -> AsyncIterator[DaemonProcess]:
    process = DaemonProcess(
        kubeconfig=ccm_kubeconfig,
        workdir=tmp_path / "daemon",
        args=["--leader-elect=false", "--controllers=service", "--cloud-call-timeout=2s"],
    ).start()
    process.wait_for_log("Started service-lb-controller")
    yield process
    # Leave no LoadBalancer Service behind: the next test's daemon would sync it and
    # consume faults injected for that test. Delete them while this daemon still runs,
    # so it releases their finalizers.
    await _delete_load_balancer_services(kube_client)
    assert process.stop() == 0


async def _delete_load_balancer_services(client: KubeClient) -> None:
    listed = await client.get("/api/v1/services")
    doomed = [
        s["metadata"]
        for s in listed["items"]
        if FINALIZER in (s["metadata"].get("finalizers") or [])
        or s["spec"].get("type") == "LoadBalancer"
    ]
    for meta in doomed:
        with contextlib.suppress(ApiError):
            await client.delete(f"/api/v1/namespaces/{meta['namespace']}/services/{meta['name']}")

    async def all_gone() -> bool:
        remaining = await client.get("/api/v1/services")
        return not any(
            FINALIZER in (s["metadata"].get("finalizers") or []) for s in remaining["items"]
        )

    await eventually(all_gone, within=60, what="every LoadBalancer service released")


async def get_service(client: KubeClient, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = await client.get(f"/api/v1/namespaces/{namespace}/services/{name}")
    except ApiError as exc:
        if exc.not_found:
            return None
        raise
    return found


def lb_service(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80, "targetPort": 8080}], **spec},
    }


async def test_a_load_balancer_service_lifecycle(
    ccm: DaemonProcess,
    kube_client: KubeClient,
    kube_namespace: str,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
) -> None:
    node = unique_name("node")
    kube_cleanup.add(f"/api/v1/nodes/{node}")
    await kube_client.create("/api/v1/nodes", {"metadata": {"name": node}})
    base = f"/api/v1/namespaces/{kube_namespace}/services"
    await kube_client.create(base, lb_service("web"))

    async def has_ingress() -> bool:
        svc = await get_service(kube_client, kube_namespace, "web")
        return bool(svc and svc.get("status", {}).get("loadBalancer", {}).get("ingress"))

    await eventually(has_ingress, what="an ingress IP")
    svc = await get_service(kube_client, kube_namespace, "web")
    assert svc is not None
    assert FINALIZER in svc["metadata"]["finalizers"]
    ip = svc["status"]["loadBalancer"]["ingress"][0]["ip"]
    [lb] = [b for b in ccm.cloud.load_balancers() if b.service == f"{kube_namespace}/web"]
    assert lb.ip == ip
    assert node in lb.nodes

    # a port change reaches the cloud
    await kube_client.patch(
        f"{base}/web", {"spec": {"ports": [{"port": 443, "targetPort": 8443}]}}, patch_type="merge"
    )

    def ports() -> list[int]:
        return [
            p["port"]
            for b in ccm.cloud.load_balancers()
            if b.service == f"{kube_namespace}/web"
            for p in b.ports
        ]

    await eventually(lambda: ports() == [443], what="the LB follows the new port")

    # deletion: LB first, then the finalizer, then the Service is gone
    await kube_client.delete(f"{base}/web")

    async def gone() -> bool:
        return await get_service(kube_client, kube_namespace, "web") is None

    await eventually(gone, what="the service deleted after its finalizer")
    assert not [b for b in ccm.cloud.load_balancers() if b.service == f"{kube_namespace}/web"]


async def test_a_service_with_a_load_balancer_class_is_ignored(
    ccm: DaemonProcess, kube_client: KubeClient, kube_namespace: str
) -> None:
    base = f"/api/v1/namespaces/{kube_namespace}/services"
    await kube_client.create(base, lb_service("mine", loadBalancerClass="example.com/other"))
    await kube_client.create(base, lb_service("ours"))

    async def ours_done() -> bool:
        svc = await get_service(kube_client, kube_namespace, "ours")
        return bool(svc and svc.get("status", {}).get("loadBalancer", {}).get("ingress"))

    await eventually(ours_done, what="the unclassed service's ingress")
    mine = await get_service(kube_client, kube_namespace, "mine")
    assert mine is not None
    assert FINALIZER not in (mine["metadata"].get("finalizers") or [])
    assert not mine.get("status", {}).get("loadBalancer", {}).get("ingress")
    assert not [b for b in ccm.cloud.load_balancers() if b.service.endswith("/mine")]


async def test_one_new_node_updates_each_of_50_load_balancers_exactly_once(
    ccm: DaemonProcess,
    kube_client: KubeClient,
    kube_namespace: str,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
) -> None:
    base = f"/api/v1/namespaces/{kube_namespace}/services"
    names = [f"svc-{i:02d}" for i in range(50)]
    for name in names:
        await kube_client.create(base, lb_service(name))

    def ensured() -> int:
        return sum(1 for b in ccm.cloud.load_balancers() if b.service.startswith(kube_namespace))

    async def all_have_ingress() -> bool:
        listed = await kube_client.get(base)
        return sum(
            1 for s in listed["items"] if s.get("status", {}).get("loadBalancer", {}).get("ingress")
        ) == len(names)

    await eventually(all_have_ingress, within=120, what="50 services with an ingress")
    assert ensured() == 50
    ccm.cloud.reset_calls()

    node = unique_name("node")
    kube_cleanup.add(f"/api/v1/nodes/{node}")
    await kube_client.create("/api/v1/nodes", {"metadata": {"name": node}})

    def updates() -> int:
        return ccm.cloud.calls().get("UpdateLoadBalancer", {}).get("count", 0)

    # Every load balancer this daemon manages is updated exactly once: our 50, plus
    # any left in the shared cluster by earlier tests (their namespaces never finish
    # terminating without kube-controller-manager).
    managed = len(ccm.cloud.load_balancers())
    assert managed >= 50
    await eventually(lambda: updates() >= managed, within=60, what="one update per LB")
    await asyncio.sleep(1.0)  # a second pass would show up here
    calls = ccm.cloud.calls()
    assert updates() == managed
    assert "EnsureLoadBalancer" not in calls
    assert all(
        node in b.nodes for b in ccm.cloud.load_balancers() if b.service.startswith(kube_namespace)
    )


async def _wait_for_ingress(client: KubeClient, namespace: str, name: str) -> None:
    async def has_ingress() -> bool:
        svc = await get_service(client, namespace, name)
        return bool(svc and svc.get("status", {}).get("loadBalancer", {}).get("ingress"))

    await eventually(has_ingress, within=60, what=f"an ingress for {name}")


async def _events(client: KubeClient, namespace: str, name: str) -> list[str]:
    listed = await client.get(
        f"/api/v1/namespaces/{namespace}/events", {"fieldSelector": f"involvedObject.name={name}"}
    )
    return [e["reason"] for e in listed["items"]]


async def _wait_for_event(client: KubeClient, namespace: str, name: str, reason: str) -> None:
    async def seen() -> bool:
        return reason in await _events(client, namespace, name)

    await eventually(seen, what=f"a {reason} event for {name}")


async def test_a_failing_cloud_backs_off_and_a_retry_error_waits_exactly_its_delay(
    ccm: DaemonProcess, kube_client: KubeClient, kube_namespace: str
) -> None:
    base = f"/api/v1/namespaces/{kube_namespace}/services"
    loop = asyncio.get_running_loop()

    ccm.cloud.set_fault("EnsureLoadBalancer", "error", remaining=1)
    started = loop.time()
    await kube_client.create(base, lb_service("flaky"))
    await _wait_for_ingress(kube_client, kube_namespace, "flaky")
    backoff = loop.time() - started
    await _wait_for_event(kube_client, kube_namespace, "flaky", "SyncLoadBalancerFailed")
    assert backoff >= 4.5, "an ordinary error is retried after the 5 s backoff"

    ccm.cloud.set_fault("EnsureLoadBalancer", "retry", retry_after=1.0, remaining=1)
    started = loop.time()
    await kube_client.create(base, lb_service("busy"))
    await _wait_for_ingress(kube_client, kube_namespace, "busy")
    waited = loop.time() - started
    await _wait_for_event(kube_client, kube_namespace, "busy", "SyncLoadBalancerFailed")
    assert 0.9 <= waited < 4.5, "RetryError: its own 1 s delay, not the 5 s backoff"
    assert "retrying after 1 s" in ccm.log()


async def test_a_node_with_the_exclusion_label_is_left_out_of_every_lb(
    ccm: DaemonProcess,
    kube_client: KubeClient,
    kube_namespace: str,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
) -> None:
    kept, excluded = unique_name("node"), unique_name("node")
    for node, labels in ((kept, {}), (excluded, {EXCLUDE: "true"})):
        kube_cleanup.add(f"/api/v1/nodes/{node}")
        await kube_client.create("/api/v1/nodes", {"metadata": {"name": node, "labels": labels}})
    base = f"/api/v1/namespaces/{kube_namespace}/services"
    for name in ("a", "b"):
        await kube_client.create(base, lb_service(name))
    for name in ("a", "b"):
        await _wait_for_ingress(kube_client, kube_namespace, name)
    ours = [b for b in ccm.cloud.load_balancers() if b.service.startswith(f"{kube_namespace}/")]
    assert len(ours) == 2
    assert all(kept in b.nodes and excluded not in b.nodes for b in ours)

    # Removing the label (or setting it to "false") brings the node back, in every LB.
    await kube_client.patch(
        f"/api/v1/nodes/{excluded}", {"metadata": {"labels": {EXCLUDE: "false"}}}
    )

    def included_everywhere() -> bool:
        lbs = [b for b in ccm.cloud.load_balancers() if b.service.startswith(f"{kube_namespace}/")]
        return all(excluded in b.nodes for b in lbs)

    await eventually(included_everywhere, what="the node back in every LB")


async def test_a_service_deleted_without_its_finalizer_still_loses_its_load_balancer(
    ccm: DaemonProcess, kube_client: KubeClient, kube_namespace: str
) -> None:
    """Someone removes the finalizer by hand, then deletes the Service: the controller
    still deletes the load balancer, reports a failed delete and retries it."""
    base = f"/api/v1/namespaces/{kube_namespace}/services"
    await kube_client.create(base, lb_service("orphan"))
    await _wait_for_ingress(kube_client, kube_namespace, "orphan")
    key = f"{kube_namespace}/orphan"
    assert [b for b in ccm.cloud.load_balancers() if b.service == key]

    ccm.cloud.set_fault("EnsureLoadBalancerDeleted", "error", remaining=1)
    await kube_client.patch(
        f"{base}/orphan", {"metadata": {"finalizers": None}}, patch_type="merge"
    )
    await kube_client.delete(f"{base}/orphan")
    assert await get_service(kube_client, kube_namespace, "orphan") is None

    await _wait_for_event(kube_client, kube_namespace, "orphan", "DeleteLoadBalancerFailed")
    await eventually(
        lambda: not [b for b in ccm.cloud.load_balancers() if b.service == key],
        within=40,
        what="the load balancer deleted on the retry",
    )
    await _wait_for_event(kube_client, kube_namespace, "orphan", "DeletedLoadBalancer")


async def test_a_failed_update_on_a_node_change_is_reported_and_resynced_in_full(
    ccm: DaemonProcess,
    kube_client: KubeClient,
    kube_namespace: str,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
) -> None:
    base = f"/api/v1/namespaces/{kube_namespace}/services"
    await kube_client.create(base, lb_service("web"))
    await _wait_for_ingress(kube_client, kube_namespace, "web")
    key = f"{kube_namespace}/web"
    ensures = ccm.cloud.calls().get("EnsureLoadBalancer", {}).get("count", 0)

    # Every UpdateLoadBalancer fails until the Event is seen, whatever other load
    # balancers the shared cluster holds; EnsureLoadBalancer keeps working.
    ccm.cloud.set_fault("UpdateLoadBalancer", "error")
    node = unique_name("node")
    kube_cleanup.add(f"/api/v1/nodes/{node}")
    await kube_client.create("/api/v1/nodes", {"metadata": {"name": node}})
    try:
        await _wait_for_event(kube_client, kube_namespace, "web", "UpdateLoadBalancerFailed")
    finally:
        ccm.cloud.clear_faults()
    listed = await kube_client.get(
        f"/api/v1/namespaces/{kube_namespace}/events",
        {"fieldSelector": "involvedObject.name=web"},
    )
    [failed] = [e for e in listed["items"] if e["reason"] == "UpdateLoadBalancerFailed"]
    assert failed["type"] == "Warning"
    # Go's %v of the sorted names, at most 20 (the shared cluster may hold more nodes).
    assert re.match(
        r"Error updating load balancer with new hosts \[[^]',]+\] "
        r"\[node names limited, total number of nodes: \d+\], error: ",
        failed["message"],
    ), failed["message"]

    def resynced() -> bool:
        [lb] = [b for b in ccm.cloud.load_balancers() if b.service == key]
        calls = ccm.cloud.calls().get("EnsureLoadBalancer", {}).get("count", 0)
        return node in lb.nodes and calls > ensures

    await eventually(resynced, within=40, what="a full sync puts the new node in the LB")


async def test_a_requested_load_balancer_ip_is_honoured_or_refused_with_an_event(
    ccm: DaemonProcess, kube_client: KubeClient, kube_namespace: str
) -> None:
    base = f"/api/v1/namespaces/{kube_namespace}/services"
    await kube_client.create(base, lb_service("pinned", loadBalancerIP="203.0.113.250"))
    await kube_client.create(base, lb_service("outside", loadBalancerIP="192.0.2.10"))

    await _wait_for_ingress(kube_client, kube_namespace, "pinned")
    pinned = await get_service(kube_client, kube_namespace, "pinned")
    assert pinned is not None
    assert pinned["status"]["loadBalancer"]["ingress"][0]["ip"] == "203.0.113.250"

    await _wait_for_event(kube_client, kube_namespace, "outside", "SyncLoadBalancerFailed")
    listed = await kube_client.get(
        f"/api/v1/namespaces/{kube_namespace}/events",
        {"fieldSelector": "involvedObject.name=outside"},
    )
    messages = [e["message"] for e in listed["items"] if e["reason"] == "SyncLoadBalancerFailed"]
    assert any("192.0.2.10 is not in the simulated cloud's IP pool" in m for m in messages)
    outside = await get_service(kube_client, kube_namespace, "outside")
    assert outside is not None
    assert not outside.get("status", {}).get("loadBalancer", {}).get("ingress")


async def test_a_node_burst_is_coalesced_and_an_autoscaler_taint_acts_at_once(
    ccm: DaemonProcess,
    kube_client: KubeClient,
    kube_namespace: str,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
) -> None:
    base = f"/api/v1/namespaces/{kube_namespace}/services"
    for name in ("a", "b", "c"):
        await kube_client.create(base, lb_service(name))
    for name in ("a", "b", "c"):
        await _wait_for_ingress(kube_client, kube_namespace, name)
    managed = len(ccm.cloud.load_balancers())
    ccm.cloud.reset_calls()

    nodes = [unique_name("node") for _ in range(20)]
    for node in nodes:
        kube_cleanup.add(f"/api/v1/nodes/{node}")
        await kube_client.create("/api/v1/nodes", {"metadata": {"name": node}})

    def ours() -> list[Any]:
        return [b for b in ccm.cloud.load_balancers() if b.service.startswith(f"{kube_namespace}/")]

    await eventually(
        lambda: all(set(nodes) <= set(b.nodes) for b in ours()), what="all 20 nodes in every LB"
    )
    await asyncio.sleep(2)
    updates = ccm.cloud.calls()["UpdateLoadBalancer"]["count"]
    assert updates <= 3 * managed, f"{updates} updates for {managed} LBs and 20 nodes"

    # The cluster autoscaler marks a node for deletion: it leaves every LB now,
    # not at some later sync (upstream reacts to the exclusion label and providerID only).
    doomed = nodes[0]
    taint = {"key": "ToBeDeletedByClusterAutoscaler", "value": "1", "effect": "NoSchedule"}
    await kube_client.patch(f"/api/v1/nodes/{doomed}", {"spec": {"taints": [taint]}})
    await eventually(
        lambda: all(doomed not in b.nodes for b in ours()), what="the doomed node out of every LB"
    )


async def test_the_hostname_mode_annotation_is_honoured_and_a_bad_value_named(
    ccm: DaemonProcess, kube_client: KubeClient, kube_namespace: str
) -> None:
    mode = "simulated.kube-ccm.io/hostname-mode"
    base = f"/api/v1/namespaces/{kube_namespace}/services"
    named = lb_service("named")
    named["metadata"]["annotations"] = {mode: "true"}
    await kube_client.create(base, named)
    wrong = lb_service("wrong")
    wrong["metadata"]["annotations"] = {mode: "sometimes"}
    await kube_client.create(base, wrong)

    await _wait_for_ingress(kube_client, kube_namespace, "named")
    svc = await get_service(kube_client, kube_namespace, "named")
    assert svc is not None
    assert svc["status"]["loadBalancer"]["ingress"][0]["hostname"].endswith(".lb.simulated.example")
    await _wait_for_event(kube_client, kube_namespace, "wrong", "SyncLoadBalancerFailed")
    listed = await kube_client.get(
        f"/api/v1/namespaces/{kube_namespace}/events",
        {"fieldSelector": "involvedObject.name=wrong"},
    )
    assert any(
        f"metadata.annotations[{mode}]: invalid value 'sometimes': use true or false"
        in e["message"]
        for e in listed["items"]
    )


async def _status_patches(client: KubeClient) -> int:
    """PATCHes of ``services/status`` the apiserver persisted (not dry runs)."""
    text = (await client.request("GET", "/metrics")).decode()
    return sum(
        int(sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "apiserver_request_total"
        and sample.labels.get("verb") == "PATCH"
        and sample.labels.get("resource") == "services"
        and sample.labels.get("subresource") == "status"
        and not sample.labels.get("dry_run")
    )


async def test_a_converged_service_gets_no_status_write_on_a_resync(
    ccm_kubeconfig: Path, kube_client: KubeClient, kube_namespace: str, tmp_path: Path
) -> None:
    """A provider that leaves ``ipMode`` unset: the apiserver stores ``VIP`` (its default
    since 1.30), and a later sync of the converged Service (a restart syncs every one)
    writes no status, nor does a dry run say it would."""
    workdir = tmp_path / "daemon"
    args = ["--leader-elect=false", "--controllers=service", "--cloud-call-timeout=2s"]

    def start(*extra: str) -> DaemonProcess:
        process = DaemonProcess(
            kubeconfig=ccm_kubeconfig,
            workdir=workdir,  # one cloud for all three
            cloud_config={"loadBalancer": {"ipMode": ""}},
            args=[*args, *extra],
        ).start()
        process.wait_for_log("Started service-lb-controller")
        return process

    async def ensured_twice() -> bool:
        reasons = await _events(kube_client, kube_namespace, "web")
        return reasons.count("EnsuredLoadBalancer") >= 2

    first = start()
    try:
        await kube_client.create(f"/api/v1/namespaces/{kube_namespace}/services", lb_service("web"))
        await _wait_for_ingress(kube_client, kube_namespace, "web")
    finally:
        assert first.stop() == 0
    svc = await get_service(kube_client, kube_namespace, "web")
    assert svc is not None
    [ingress] = svc["status"]["loadBalancer"]["ingress"]
    assert ingress["ipMode"] == "VIP", "defaulted by the apiserver"
    before = await _status_patches(kube_client)

    dry = start("--dry-run")
    try:
        await asyncio.to_thread(
            dry.wait_for_log, f"would call EnsureLoadBalancer for Service {kube_namespace}/web"
        )
        await asyncio.sleep(1)
    finally:
        assert dry.stop() == 0
    assert "services/web/status" not in dry.log(), "a dry run reports no status patch"

    second = start()
    try:
        await eventually(ensured_twice, what="the restarted daemon ensured it")
        await asyncio.sleep(1)  # its status patch, if any, follows at once
        assert await _status_patches(kube_client) == before
    finally:
        await _delete_load_balancer_services(kube_client)
        assert second.stop() == 0
