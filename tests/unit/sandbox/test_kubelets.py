"""The sandbox's simulated kubelets and node monitor, against the in-memory apiserver."""

from __future__ import annotations

import ast
import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from kube_ccm.api import wellknown as wk
from kube_ccm.sandbox import SandboxOptions, local
from kube_ccm.sandbox.kubelets import (
    KUBELET_ANNOTATION,
    MESSAGE_NODE_STATUS_UNKNOWN,
    REASON_NODE_STATUS_UNKNOWN,
    KubeletTimings,
    SimulatedKubelets,
    pod_cidrs,
)
from kube_ccm.sandbox.summary import audited_requests
from kube_ccm.testing.fakeapi import FakeApiServer
from kube_ccm.testing.waiting import eventually

FAST = KubeletTimings(lease_period=0.05, status_period=0.2, grace_period=0.3, monitor_period=0.05)
LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"


def ready(fake: FakeApiServer, name: str) -> dict[str, str]:
    node = fake.object(f"/api/v1/nodes/{name}")
    assert node is not None
    return next(c for c in node["status"]["conditions"] if c["type"] == "Ready")


def renewed_since(fake: FakeApiServer, name: str) -> Callable[[], bool]:
    """A predicate: the Lease of ``name`` has a renewTime other than it has now."""
    first = fake.object(f"{LEASES}/{name}")
    assert first is not None

    def renewed() -> bool:
        lease = fake.object(f"{LEASES}/{name}")
        return lease is not None and lease["spec"]["renewTime"] != first["spec"]["renewTime"]

    return renewed


@pytest.fixture
async def fleet() -> AsyncIterator[tuple[FakeApiServer, SimulatedKubelets]]:
    fake = FakeApiServer()
    kubelets = SimulatedKubelets(fake.client(), FAST)
    await kubelets.register(["n0", "n1", "n2"], pod_cidrs("10.64.0.0/10", 3))
    task = asyncio.create_task(kubelets.run())
    yield fake, kubelets
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def test_pod_cidrs_are_consecutive_subnets_and_refuse_too_many_nodes() -> None:
    assert pod_cidrs("10.64.0.0/10", 3) == ["10.64.0.0/24", "10.64.1.0/24", "10.64.2.0/24"]
    assert len(pod_cidrs("10.64.0.0/10", 16384)) == 16384
    with pytest.raises(ValueError, match="holds 256 /24 pod CIDRs, fewer than 257 nodes"):
        pod_cidrs("10.244.0.0/16", 257)


async def test_registered_nodes_look_like_an_external_kubelets(
    fleet: tuple[FakeApiServer, SimulatedKubelets],
) -> None:
    fake, _ = fleet
    node = fake.object("/api/v1/nodes/n1")
    assert node is not None
    assert node["spec"]["taints"] == [
        {"key": wk.TAINT_UNINITIALIZED, "value": "true", "effect": "NoSchedule"}
    ]
    assert node["spec"]["podCIDR"] == "10.64.1.0/24"
    assert node["spec"]["podCIDRs"] == ["10.64.1.0/24"]
    assert "providerID" not in node["spec"]
    assert ready(fake, "n1")["status"] == "True"
    lease = fake.object(f"{LEASES}/n1")
    assert lease is not None
    assert lease["spec"]["holderIdentity"] == "n1"


async def test_live_kubelets_keep_renewing_their_leases(
    fleet: tuple[FakeApiServer, SimulatedKubelets],
) -> None:
    fake, kubelets = fleet
    await eventually(renewed_since(fake, "n0"), within=5)
    await asyncio.sleep(FAST.grace_period * 2)
    assert ready(fake, "n0")["status"] == "True"
    assert kubelets.status_reports > 0


async def test_a_killed_kubelets_node_turns_unknown_after_the_grace_period_only(
    fleet: tuple[FakeApiServer, SimulatedKubelets],
) -> None:
    fake, kubelets = fleet
    kubelets.kill("n2")
    assert ready(fake, "n2")["status"] == "True"  # not before the grace period
    await eventually(lambda: ready(fake, "n2")["status"] == "Unknown", within=5)
    condition = ready(fake, "n2")
    assert condition["reason"] == REASON_NODE_STATUS_UNKNOWN
    assert condition["message"] == MESSAGE_NODE_STATUS_UNKNOWN
    assert ready(fake, "n0")["status"] == "True"
    assert ready(fake, "n1")["status"] == "True"


async def test_the_annotation_stops_a_kubelet_and_removing_it_starts_it_again(
    fleet: tuple[FakeApiServer, SimulatedKubelets],
) -> None:
    fake, kubelets = fleet
    client = fake.client()
    await client.patch(
        "/api/v1/nodes/n0", {"metadata": {"annotations": {KUBELET_ANNOTATION: "stopped"}}}
    )
    await eventually(lambda: "n0" in kubelets.dead, within=5)
    await eventually(lambda: ready(fake, "n0")["status"] == "Unknown", within=5)

    await client.patch(
        "/api/v1/nodes/n0", {"metadata": {"annotations": {KUBELET_ANNOTATION: None}}}
    )
    await eventually(lambda: ready(fake, "n0")["status"] == "True", within=5)
    assert "n0" not in kubelets.dead


async def test_a_dead_kubelets_node_deleted_by_the_ccm_is_forgotten(
    fleet: tuple[FakeApiServer, SimulatedKubelets],
) -> None:
    fake, kubelets = fleet
    kubelets.kill("n1")
    await eventually(lambda: ready(fake, "n1")["status"] == "Unknown", within=5)
    await fake.client().delete("/api/v1/nodes/n1")
    await eventually(lambda: "n1" not in kubelets.names, within=5)
    assert fake.object("/api/v1/nodes/n1") is None  # nothing re-created it
    assert kubelets.names == ["n0", "n2"]


async def test_a_failing_apiserver_does_not_stop_the_kubelets(
    fleet: tuple[FakeApiServer, SimulatedKubelets],
) -> None:
    fake, _ = fleet
    fake.fail_next("PATCH", LEASES, status=500, count=5)
    await eventually(renewed_since(fake, "n0"), within=5)


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        (SandboxOptions(nodes=0), "--nodes must be at least 1"),
        (SandboxOptions(nodes=3, kill=2, shutdown=2), "is more than the 3 nodes"),
        (SandboxOptions(kill=-1), "cannot be negative"),
        (SandboxOptions(failure_rate=2), "--failure-rate must be between 0 and 1"),
        (SandboxOptions(provider="acme", kill=1), "annotation instead"),
        (SandboxOptions(nodes=20000), "fewer than 20000 nodes"),
        (SandboxOptions(provider="acme", latency=0.05), "--provider=acme they would be ignored"),
        (SandboxOptions(provider="acme", failure_rate=0.1), "would be ignored"),
        (SandboxOptions(on_prem=True, latency=0.05), "--on-prem they would be ignored"),
        (SandboxOptions(on_prem=True, provider="ippool"), "--on-prem chooses its providers"),
        (SandboxOptions(stall_timeout=0), "--stall-timeout must be more than 0 s"),
        (SandboxOptions(provision_command="make-vms"), "--provision-command provisions"),
        (SandboxOptions(provider="aws", provision_command="x"), "--provision-command provisions"),
        (SandboxOptions(provider="aws", nodes=701), "runs at most 700 instances"),
        (
            SandboxOptions(provider="proxmox", provision_command="x"),
            "own local cloud (--provider proxmox without --cloud-config) create theirs",
        ),
        (
            SandboxOptions(provider="proxmox", cloud_config=Path("pve.yaml"), kill=1),
            "annotation instead",
        ),
        (
            SandboxOptions(provider="aws", cloud_config=Path("aws.yaml"), kill=1),
            "annotation instead",
        ),
        (SandboxOptions(real_nodes=-1), "--real-nodes must be at least 1"),
        (SandboxOptions(nodes=2, real_nodes=2, kill=1), "more than the 0 worker nodes"),
        (SandboxOptions(nodes=3, real_nodes=3, kill=1, shutdown=1), "the 1 worker nodes"),
        (SandboxOptions(nodes=2, real_nodes=2, on_prem=True), "drop --on-prem, --provider"),
        (SandboxOptions(nodes=2, real_nodes=2, provider="aws"), "drop --on-prem, --provider"),
        (SandboxOptions(provider="servicelb"), "add --real-nodes N"),
        (
            SandboxOptions(nodes=2, real_nodes=2, provider="servicelb", cloud_config=Path("x")),
            "drop --on-prem, --provider",
        ),
    ],
)
def test_sandbox_options_say_what_is_wrong(options: SandboxOptions, problem: str) -> None:
    assert any(problem in p for p in options.problems()), options.problems()


def test_default_sandbox_options_are_fine() -> None:
    assert SandboxOptions().problems() == []


def test_real_nodes_kill_and_shut_down_workers_only() -> None:
    assert SandboxOptions(nodes=4, real_nodes=4, kill=1, shutdown=1).problems() == []
    assert SandboxOptions(nodes=1, real_nodes=1, latency=0.05, services=3).problems() == []


def test_real_nodes_with_servicelb_are_fine_and_end_instances() -> None:
    options = SandboxOptions(nodes=3, real_nodes=3, provider="servicelb", kill=1)
    assert options.real_servicelb
    assert options.problems() == []
    assert not SandboxOptions(provider="servicelb").real_servicelb


def test_audited_requests_count_the_ccm_s_finished_requests_but_watches() -> None:
    def event(verb: str, resource: str, stage: str = "ResponseComplete") -> dict[str, Any]:
        return {"verb": verb, "stage": stage, "objectRef": {"resource": resource}}

    events: list[dict[str, Any]] = [
        event("patch", "nodes"),
        event("patch", "nodes"),
        event("patch", "nodes", stage="ResponseStarted"),
        event("list", "services"),
        event("watch", "services"),
        event("update", "leases"),
        event("create", "events"),
        {"verb": "get", "stage": "ResponseComplete"},  # /healthz, /version: no object
    ]
    assert audited_requests(events) == {
        "PATCH nodes": 2,
        "LIST services": 1,
        "PUT leases": 1,
        "POST events": 1,
    }


def test_the_sandbox_plays_aws_itself_without_a_cloud_config() -> None:
    options = SandboxOptions(provider="aws", nodes=3, kill=1, shutdown=1)
    assert options.local_cloud == "aws"
    assert options.problems() == []  # it terminates and stops its own instances
    assert SandboxOptions(provider="aws", cloud_config=Path("aws.yaml")).local_cloud is None


def test_the_sandbox_plays_proxmox_itself_without_a_cloud_config() -> None:
    options = SandboxOptions(provider="proxmox", nodes=3, kill=1, shutdown=1)
    assert options.local_cloud == "proxmox"
    assert options.problems() == []  # it destroys and stops its own VMs
    assert SandboxOptions(provider="proxmox", cloud_config=Path("pve.yaml")).local_cloud is None


def test_on_prem_is_libvirt_s_local_cloud_and_other_providers_have_none() -> None:
    assert SandboxOptions(on_prem=True).local_cloud == "libvirt"
    assert SandboxOptions(provider="libvirt").local_cloud == "libvirt"
    assert SandboxOptions().local_cloud is None  # the simulated cloud is the sandbox's own
    assert SandboxOptions(provider="ippool").local_cloud is None  # no hook: another's cloud
    assert SandboxOptions(provider="no-such-provider").local_cloud is None


def test_a_provider_brings_its_local_cloud_in_its_own_package() -> None:
    # Found by the provider's name through its factory's entry point: the sandbox
    # names no provider (adding one with a local cloud touches nothing of sandbox/).
    for provider in ("aws", "proxmox", "libvirt"):
        module = local.hook(provider)
        assert module is not None, provider
        assert module.__name__ == f"kube_ccm.providers.{provider}.sandbox"
        assert callable(module.local_cloud)
    assert local.hook("composite") is None  # a module, not a package: no hook beside it
    assert local.hook("ippool") is None
    assert local.hook("no-such-provider") is None


def test_the_sandbox_imports_no_provider() -> None:
    sandbox = Path(local.__file__).parent
    imported = [
        f"{path.name}: {name}"
        for path in sorted(sandbox.glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for name in (
            [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else [a.name for a in node.names]
        )
        if name.startswith("kube_ccm.providers")
    ]
    assert imported == []
