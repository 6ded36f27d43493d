"""``kube-ccm run --dry-run`` on the real apiserver: every controller runs, logs what it
would change, and changes nothing: no persisted API write (the apiserver's own
request counters), no cloud mutation (the simulated cloud's records)."""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from kube_ccm.runtime.client import KubeClient
from kube_ccm.testing.daemon import DaemonProcess
from kube_ccm.testing.pytest_plugin import Cleanup

UNINITIALIZED = {
    "key": "node.cloudprovider.kubernetes.io/uninitialized",
    "value": "true",
    "effect": "NoSchedule",
}
# Not leases: the apiserver renews its own identity Lease every 10 s, and counts it. The
# daemon taking no Lease is checked in its log (it never acquires one).
WATCHED = {"nodes", "services", "events", "serviceaccounts", "configmaps"}
READS = {"GET", "LIST", "WATCH"}


async def writes(client: KubeClient) -> Counter[tuple[str, str]]:
    """(dry_run, resource) → write requests the apiserver counted, for what the CCM writes."""
    text = (await client.request("GET", "/metrics")).decode()
    counts: Counter[tuple[str, str]] = Counter()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if (
                sample.name == "apiserver_request_total"
                and labels.get("verb") not in READS
                and labels.get("resource") in WATCHED
            ):
                counts[(labels.get("dry_run", ""), labels["resource"])] += int(sample.value)
    return counts


async def test_a_dry_run_changes_nothing_and_says_what_it_would_do(
    ccm_kubeconfig: Path,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    tmp_path: Path,
) -> None:
    ccm = DaemonProcess(
        kubeconfig=ccm_kubeconfig,
        workdir=tmp_path / "ccm",
        args=[
            "--dry-run",
            "--leader-elect=true",  # ignored: a dry run never takes the Lease
            "--node-monitor-period=500ms",
            "--cluster-cidr=10.250.0.0/16",
            "--route-reconciliation-period=1s",
            "--controllers=*",
        ],
    )
    new, gone = "dry-new", "dry-gone"
    ccm.cloud.add_instance(gone, zone="z", region="r", instance_type="t")
    ccm.cloud.set_instance_state(gone, "terminated")
    for name, spec in (
        (new, {"taints": [UNINITIALIZED], "podCIDR": "10.250.1.0/24"}),
        (gone, {"providerID": "simulated://z/" + gone}),
    ):
        kube_cleanup.add(f"/api/v1/nodes/{name}")
        await kube_client.create("/api/v1/nodes", {"metadata": {"name": name}, "spec": spec})
    await kube_client.patch(
        f"/api/v1/nodes/{gone}/status",
        {"status": {"conditions": [{"type": "Ready", "status": "Unknown", "reason": "T"}]}},
    )
    services = "/api/v1/namespaces/default/services"
    await kube_client.create(
        services,
        {"metadata": {"name": "dry-lb"}, "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}},
    )
    try:
        before = await writes(kube_client)
        ccm.start()
        for expected in (
            f"dry run: would PATCH /api/v1/nodes/{new}",
            "dry run: would call EnsureLoadBalancer for Service default/dry-lb",
            "dry run: would call CreateRoute for 10.250.1.0/24",
            f"dry run: would DELETE /api/v1/nodes/{gone}",
        ):
            await asyncio.to_thread(ccm.wait_for_log, expected, 60)
        await asyncio.sleep(2)
        ccm.signal(signal.SIGTERM)
        assert await asyncio.to_thread(ccm.wait, 30) == 0
        after = await writes(kube_client)
        # Nothing changed in the cloud: no load balancer, no route, no mutating call.
        assert ccm.cloud.load_balancers() == []
        assert ccm.cloud.routes() == []
        calls = ccm.cloud.calls()
        for mutating in ("EnsureLoadBalancer", "UpdateLoadBalancer", "CreateRoute", "DeleteRoute"):
            assert mutating not in calls, calls
    finally:
        ccm.stop()
    try:
        await check_nothing_changed(ccm.log(), kube_client, after - before, new, gone)
    finally:
        await kube_client.delete(f"{services}/dry-lb")


async def check_nothing_changed(
    log: str, kube_client: KubeClient, made: Counter[tuple[str, str]], new: str, gone: str
) -> None:
    services = "/api/v1/namespaces/default/services"
    persisted = {key: n for key, n in made.items() if key[0] == ""}
    assert persisted == {}, f"a dry run persisted writes: {persisted}"
    assert made[("All", "nodes")] >= 2, made  # the initialisation and the deletion, dry
    assert "dry run: would have made" in log  # the summary at exit
    assert "successfully acquired lease" not in log
    # Nothing changed in the API: the Node still uninitialised, the gone one still
    # there, the Service without finalizer or address.
    node = await kube_client.get(f"/api/v1/nodes/{new}")
    assert UNINITIALIZED["key"] in [t["key"] for t in node["spec"].get("taints") or []]
    assert "providerID" not in node["spec"]
    await kube_client.get(f"/api/v1/nodes/{gone}")
    service = await kube_client.get(f"{services}/dry-lb")
    assert not service.get("status", {}).get("loadBalancer", {}).get("ingress")
    assert "finalizers" not in service["metadata"]
