"""``kube-ccm doctor`` on the real apiserver: what fails says how to fix it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from kube_ccm.runtime.client import ApiError, KubeClient
from kube_ccm.testing.controlplane import ControlPlane
from kube_ccm.testing.pytest_plugin import Cleanup

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def doctor(plane: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kube_ccm", "doctor", f"--kubeconfig={plane.kubeconfig}", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def test_doctor_reports_missing_rbac_and_stuck_nodes_then_passes(
    kube_controlplane: ControlPlane,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
) -> None:
    identity = "system:serviceaccount:kube-system:" + unique_name("ccm")
    node = unique_name("node")
    kube_cleanup.add(f"/api/v1/nodes/{node}")
    taint = {"key": "node.cloudprovider.kubernetes.io/uninitialized", "effect": "NoSchedule"}
    await kube_client.create(
        "/api/v1/nodes", {"metadata": {"name": node}, "spec": {"taints": [taint]}}
    )

    before = doctor(kube_controlplane, f"--as={identity}", "--stuck-after=0s")
    assert before.returncode == 1, before.stdout + before.stderr
    assert "FAIL  permissions of" in before.stdout
    assert "fix: kubectl apply -f deploy/rbac.yaml" in before.stdout
    assert node in before.stdout, "the stuck node is named"
    assert "PASS  API server" in before.stdout

    # Bind the identity to the shipped ClusterRole: the permission check passes.
    role = next(
        d
        for d in yaml.safe_load_all((DEPLOY / "rbac.yaml").read_text())
        if d["kind"] == "ClusterRole"
    )
    binding_name = unique_name("doctor")
    path = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"
    kube_cleanup.add(f"{path}/{binding_name}")
    namespace, name = identity.split(":")[2:4]
    binding: dict[str, Any] = {
        "metadata": {"name": binding_name},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": role["metadata"]["name"],
        },
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
    }
    # Not cleaned up: the session's daemons run with this shipped role (ccm_kubeconfig).
    try:
        await kube_client.create("/apis/rbac.authorization.k8s.io/v1/clusterroles", role)
    except ApiError as exc:
        if not exc.already_exists:
            raise
    await kube_client.create(path, binding)

    after = doctor(kube_controlplane, f"--as={identity}", "--cloud-provider=simulated")
    assert "PASS  permissions of" in after.stdout, after.stdout
    assert "load balancers, routes, volume labels" in after.stdout


async def test_the_probe_fails_when_the_cloud_does_not_answer(
    kube_controlplane: ControlPlane,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    """The provider check used to pass with an unreachable cloud: it never called it."""
    node = unique_name("node")
    kube_cleanup.add(f"/api/v1/nodes/{node}")
    await kube_client.create("/api/v1/nodes", {"metadata": {"name": node}})
    config = tmp_path / "cloud.yaml"
    config.write_text(yaml.safe_dump({"state": str(tmp_path / "c.db"), "failureRate": 1.0}))
    result = doctor(kube_controlplane, "--cloud-provider=simulated", f"--cloud-config={config}")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "PASS  provider simulated" in result.stdout  # it can be built ...
    assert "FAIL  cloud simulated instances" in result.stdout  # ... but not reached
    assert "lookups failed" in result.stdout
    assert "fix: check the cloud endpoint" in result.stdout
    # --no-probe: the capabilities only, as before.
    quiet = doctor(
        kube_controlplane, "--cloud-provider=simulated", f"--cloud-config={config}", "--no-probe"
    )
    assert "cloud simulated instances" not in quiet.stdout


async def test_the_probe_names_nodes_without_an_instance_and_foreign_ones(
    kube_controlplane: ControlPlane,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    missing, foreign = unique_name("gone"), unique_name("aws")
    for name, spec in ((missing, {}), (foreign, {"providerID": "aws:///us-east-1a/i-0abc"})):
        kube_cleanup.add(f"/api/v1/nodes/{name}")
        await kube_client.create("/api/v1/nodes", {"metadata": {"name": name}, "spec": spec})
    config = tmp_path / "cloud.yaml"
    config.write_text(yaml.safe_dump({"state": str(tmp_path / "c.db"), "unknownNodes": "notFound"}))
    result = doctor(kube_controlplane, "--cloud-provider=simulated", f"--cloud-config={config}")
    line = next((ln for ln in result.stdout.splitlines() if "cloud simulated instances" in ln), "")
    assert line.startswith("WARN"), result.stdout + result.stderr
    assert "no instance for" in line
    assert missing in line
    assert "another provider's providerID (left alone)" in line
    assert "PASS  cloud simulated load balancers" in result.stdout
    assert "cloud simulated routes" in result.stdout


async def test_as_group_is_used_for_the_permission_check(
    kube_controlplane: ControlPlane,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
) -> None:
    """``--as`` used to drop the user's groups: a CCM whose rights come from a group
    was reported as missing every permission."""
    group = unique_name("ccm-operators")
    role = next(
        d
        for d in yaml.safe_load_all((DEPLOY / "rbac.yaml").read_text())
        if d["kind"] == "ClusterRole"
    )
    try:
        await kube_client.create("/apis/rbac.authorization.k8s.io/v1/clusterroles", role)
    except ApiError as exc:
        if not exc.already_exists:
            raise
    path = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"
    binding = unique_name("by-group")
    kube_cleanup.add(f"{path}/{binding}")
    await kube_client.create(
        path,
        {
            "metadata": {"name": binding},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role["metadata"]["name"],
            },
            "subjects": [{"kind": "Group", "name": group, "apiGroup": "rbac.authorization.k8s.io"}],
        },
    )
    without = doctor(kube_controlplane, "--as=ccm-user")
    assert "FAIL  permissions of ccm-user" in without.stdout
    with_group = doctor(kube_controlplane, "--as=ccm-user", f"--as-group={group}")
    assert "PASS  permissions of ccm-user" in with_group.stdout, with_group.stdout
