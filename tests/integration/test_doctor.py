"""``kube-ccm doctor`` on the real apiserver: what fails says how to fix it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import yaml

from kube_ccm.runtime.client import ApiError, KubeClient
from kube_ccm.testing.controlplane import ControlPlane
from kube_ccm.testing.pytest_plugin import Cleanup

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


async def bind_shipped_roles(
    client: KubeClient, cleanup: Cleanup, name: str, subject: dict[str, str], *manifests: str
) -> None:
    """Bind ``subject`` to the roles of the deploy/ ``manifests`` (the roles are created
    if missing and kept: the session's daemons run with them), under bindings named
    ``name``."""
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    roles = [
        d
        for manifest in manifests
        for d in yaml.safe_load_all((DEPLOY / manifest).read_text())
        if d and d["kind"] in ("ClusterRole", "Role")
    ]
    for role in roles:
        namespace = role["metadata"].get("namespace")
        where = f"{rbac}/namespaces/{namespace}" if namespace else rbac
        kind = "roles" if namespace else "clusterroles"
        try:
            await client.create(f"{where}/{kind}", role)
        except ApiError as exc:
            if not exc.already_exists:
                raise
        bindings = f"{where}/{'rolebindings' if namespace else 'clusterrolebindings'}"
        binding = f"{name}-{len(cleanup.paths)}"
        cleanup.add(f"{bindings}/{binding}")
        await client.create(
            bindings,
            {
                "metadata": {"name": binding},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": role["kind"],
                    "name": role["metadata"]["name"],
                },
                "subjects": [subject],
            },
        )


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
    assert "fix: kubectl apply -f deploy/rbac.yaml -f deploy/rbac-nodes.yaml" in before.stdout
    assert node in before.stdout, "the stuck node is named"
    assert "PASS  API server" in before.stdout

    # Bound by deploy/rbac.yaml only: enough for ippool alone, not for simulated.
    namespace, name = identity.split(":")[2:4]
    subject = {"kind": "ServiceAccount", "name": name, "namespace": namespace}
    await bind_shipped_roles(kube_client, kube_cleanup, name, subject, "rbac.yaml")
    ippool = doctor(kube_controlplane, f"--as={identity}", "--cloud-provider=ippool", "--no-probe")
    assert "PASS  permissions of" in ippool.stdout, ippool.stdout
    simulated = doctor(kube_controlplane, f"--as={identity}", "--cloud-provider=simulated")
    assert "FAIL  permissions of" in simulated.stdout, simulated.stdout
    assert "missing 4: get nodes, patch nodes, delete nodes, patch nodes/status" in simulated.stdout

    # And by deploy/rbac-nodes.yaml: the permission check passes.
    await bind_shipped_roles(kube_client, kube_cleanup, name, subject, "rbac-nodes.yaml")
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
    subject = {"kind": "Group", "name": group, "apiGroup": "rbac.authorization.k8s.io"}
    await bind_shipped_roles(
        kube_client, kube_cleanup, unique_name("by-group"), subject, "rbac.yaml", "rbac-nodes.yaml"
    )
    without = doctor(kube_controlplane, "--as=ccm-user")
    assert "FAIL  permissions of ccm-user" in without.stdout
    with_group = doctor(kube_controlplane, "--as=ccm-user", f"--as-group={group}")
    assert "PASS  permissions of ccm-user" in with_group.stdout, with_group.stdout


def test_without_kubeconfig_the_doctor_reads_the_kubeconfig_environment_variable(
    kube_controlplane: ControlPlane, tmp_path: Path
) -> None:
    """It used to say "no --kubeconfig or --master given" although its help names
    $KUBECONFIG: kubectl's rules now, the first existing file of the list."""
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    env["KUBECONFIG"] = f"{tmp_path / 'missing'}:{kube_controlplane.kubeconfig}"
    result = subprocess.run(
        [sys.executable, "-m", "kube_ccm", "doctor"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert "PASS  API server" in result.stdout, result.stdout + result.stderr
