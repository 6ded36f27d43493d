"""The secure port of a running daemon: health, readiness, metrics, configz."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Callable
from pathlib import Path

import httpx2
import yaml

from kube_ccm.runtime.client import KubeClient
from kube_ccm.testing.controlplane import ControlPlane
from kube_ccm.testing.daemon import DaemonProcess
from kube_ccm.testing.pytest_plugin import Cleanup
from kube_ccm.testing.waiting import eventually

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def test_health_readiness_and_metrics_on_the_secure_port(  # noqa: PLR0917 (fixtures)
    ccm_kubeconfig: Path,
    kube_controlplane: ControlPlane,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    port = free_port()
    ccm = DaemonProcess(
        kubeconfig=ccm_kubeconfig,
        workdir=tmp_path / "daemon",
        args=[
            f"--secure-port={port}",
            "--bind-address=127.0.0.1",
            f"--cert-dir={tmp_path / 'certs'}",
            "--controllers=cloud-node,cloud-node-lifecycle",
            "--leader-elect-lease-duration=2s",
            "--leader-elect-renew-deadline=1s",
            "--leader-elect-retry-period=500ms",
        ],
    ).start()
    base = f"https://127.0.0.1:{port}"
    try:
        ccm.wait_for_log("serving securely")
        # A self-signed certificate for loopback: trust is not what this test checks.
        async with httpx2.AsyncClient(verify=False) as client:

            async def ready() -> bool:
                return (await client.get(f"{base}/readyz")).status_code == 200

            await eventually(ready, within=60, what="/readyz ok")

            async def leading() -> bool:
                # A standby is ready too; the controllers' checks appear once it leads.
                verbose = await client.get(f"{base}/healthz", params={"verbose": "1"})
                return "cloud-node-controller" in verbose.text

            await eventually(leading, within=60, what="the controllers' health checks")
            health = await client.get(f"{base}/healthz", params={"verbose": "1"})
            assert health.status_code == 200
            assert "[+]leaderElection ok" in health.text
            assert "[+]cloud-node-controller ok" in health.text
            assert "[+]cloud-node-lifecycle-controller ok" in health.text
            assert (await client.get(f"{base}/livez")).text == "ok"
            # Beyond the always-allowed paths: an authorised identity (the admin's
            # client certificate, group system:masters; checked against the client CA
            # the daemon read from kube-system/extension-apiserver-authentication).
            assert (await client.get(f"{base}/healthz/cloud-node-controller")).status_code == 403
        pki = kube_controlplane.data_dir / "pki"
        admin = ssl.create_default_context()
        admin.check_hostname, admin.verify_mode = False, ssl.CERT_NONE
        admin.load_cert_chain(pki / "admin.crt", pki / "admin.key")
        async with httpx2.AsyncClient(verify=admin) as client:
            one = await client.get(f"{base}/healthz/cloud-node-controller")
            assert one.text == "ok"
            assert (await client.get(f"{base}/healthz/nope")).status_code == 404
            metrics = (await client.get(f"{base}/metrics")).text
            labels = '{manager="cloud-controller-manager",name="cloud-node"}'
            assert f"running_managed_controllers{labels} 1.0" in metrics
            assert 'workqueue_depth{name="Nodes"}' in metrics
            assert "leader_election_master_status" in metrics
            assert 'rest_client_requests_total{code="200",host="127.0.0.1:' in metrics
            assert "rest_client_request_duration_seconds_bucket" in metrics
            # The cloud-call boundary's metrics, named as peer CCMs name theirs.
            node = unique_name("node")
            kube_cleanup.add(f"/api/v1/nodes/{node}")
            taint = {
                "key": "node.cloudprovider.kubernetes.io/uninitialized",
                "effect": "NoSchedule",
            }
            await kube_client.create(
                "/api/v1/nodes", {"metadata": {"name": node}, "spec": {"taints": [taint]}}
            )
            metered = (
                "cloudprovider_simulated_api_request_duration_seconds_count"
                '{request="InstanceMetadata"}'
            )

            async def cloud_call_metered() -> bool:
                return metered in (await client.get(f"{base}/metrics")).text

            await eventually(cloud_call_metered, what="the InstanceMetadata call on /metrics")
            assert (
                "# TYPE cloudprovider_simulated_api_request_errors untyped"
                in (await client.get(f"{base}/metrics")).text
            )
            configz = (await client.get(f"{base}/configz")).json()
            assert configz["kind"] == "CloudControllerManagerConfiguration"
            assert configz["config"]["secure_port"] == port
    finally:
        assert ccm.stop() == 0


def test_a_busy_secure_port_is_a_clear_startup_error(
    ccm_kubeconfig: Path, kube_controlplane: ControlPlane, tmp_path: Path
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ccm = DaemonProcess(
            kubeconfig=ccm_kubeconfig,
            workdir=tmp_path / "daemon",
            args=[
                f"--secure-port={port}",
                "--bind-address=127.0.0.1",
                "--leader-elect=false",
                "--cluster-cidr=10.244.0.0/16",  # else that is the first error
            ],
        ).start()
        assert ccm.wait(timeout=60) == 1
    assert f"cannot serve on 127.0.0.1:{port}" in ccm.log()
    assert "--secure-port=0 turns serving off" in ccm.log()
    ccm.stop()


async def test_metrics_needs_an_authorised_identity_and_healthz_does_not(
    *,
    ccm_kubeconfig: Path,
    kube_controlplane: ControlPlane,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    kube_namespace: str,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    """§8.6: TokenReview authenticates, SubjectAccessReview authorises, against the real
    apiserver; the binding is the shipped metrics-reader ClusterRole of deploy/rbac.yaml."""
    reader = next(
        d
        for d in yaml.safe_load_all((DEPLOY / "rbac.yaml").read_text())
        if d and d["metadata"]["name"] == "cloud-controller-manager:metrics-reader"
    )
    role = {**reader, "metadata": {"name": unique_name("metrics-reader")}}
    roles = "/apis/rbac.authorization.k8s.io/v1/clusterroles"
    bindings = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"
    await kube_client.create(roles, role)
    kube_cleanup.add(f"{roles}/{role['metadata']['name']}")
    accounts = f"/api/v1/namespaces/{kube_namespace}/serviceaccounts"
    tokens = {}
    for account in ("prometheus", "nobody"):
        await kube_client.create(accounts, {"metadata": {"name": account}})
        request = await kube_client.create(
            f"{accounts}/{account}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
        )
        tokens[account] = request["status"]["token"]
    binding = unique_name("prometheus")
    await kube_client.create(
        bindings,
        {
            "metadata": {"name": binding},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role["metadata"]["name"],
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": "prometheus", "namespace": kube_namespace}
            ],
        },
    )
    kube_cleanup.add(f"{bindings}/{binding}")
    port = free_port()
    ccm = DaemonProcess(
        kubeconfig=ccm_kubeconfig,
        workdir=tmp_path / "daemon",
        args=[
            *(f"--secure-port={port}", "--bind-address=127.0.0.1", "--leader-elect=false"),
            "--controllers=cloud-node",
        ],
    ).start()
    base = f"https://127.0.0.1:{port}"
    try:
        ccm.wait_for_log("serving securely")
        async with httpx2.AsyncClient(verify=False) as client:

            async def get(path: str, token: str = "") -> httpx2.Response:
                headers = {"Authorization": f"Bearer {token}"} if token else {}
                return await client.get(f"{base}{path}", headers=headers)

            assert (await get("/healthz")).status_code == 200
            anonymous = await get("/metrics")
            assert anonymous.status_code == 403, anonymous.text
            assert 'User "system:anonymous" cannot get path "/metrics"' in anonymous.text
            scraped = await get("/metrics", tokens["prometheus"])
            assert scraped.status_code == 200, scraped.text
            assert "running_managed_controllers" in scraped.text
            # Authorised for /metrics only, not /configz.
            assert (await get("/configz", tokens["prometheus"])).status_code == 403
            unbound = await get("/metrics", tokens["nobody"])
            assert unbound.status_code == 403
            assert f"system:serviceaccount:{kube_namespace}:nobody" in unbound.text
            assert (await get("/metrics", "not-a-token")).status_code == 401
            assert (await get("/healthz", tokens["nobody"])).status_code == 200
    finally:
        assert ccm.stop() == 0


async def test_a_cloud_that_never_answers_shows_on_healthz_without_failing_liveness(  # noqa: PLR0917 (fixtures)
    ccm_kubeconfig: Path,
    kube_controlplane: ControlPlane,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    """Every cloud call hangs: /healthz/cloud fails (10 s without a successful call,
    with --cloud-call-timeout=1s) while /healthz stays ok; when the cloud answers again
    the check recovers."""
    port = free_port()
    ccm = DaemonProcess(
        kubeconfig=ccm_kubeconfig,
        workdir=tmp_path / "daemon",
        args=[
            f"--secure-port={port}",
            "--bind-address=127.0.0.1",
            "--leader-elect=false",
            "--controllers=cloud-node",
            "--cloud-call-timeout=1s",
        ],
    ).start()
    base = f"https://127.0.0.1:{port}"
    try:
        ccm.wait_for_log("Started cloud-node-controller")
        name = unique_name("node")
        ccm.cloud.add_instance(name, zone="z", region="r", instance_type="t")
        ccm.cloud.set_fault("*", "hang")
        kube_cleanup.add(f"/api/v1/nodes/{name}")
        taint = {"key": "node.cloudprovider.kubernetes.io/uninitialized", "effect": "NoSchedule"}
        await kube_client.create(
            "/api/v1/nodes", {"metadata": {"name": name}, "spec": {"taints": [taint]}}
        )
        # /healthz/<check> needs an authorised identity: the admin's client certificate.
        pki = kube_controlplane.data_dir / "pki"
        admin = ssl.create_default_context()
        admin.check_hostname, admin.verify_mode = False, ssl.CERT_NONE
        admin.load_cert_chain(pki / "admin.crt", pki / "admin.key")
        async with httpx2.AsyncClient(verify=admin) as client:

            async def cloud_failing() -> bool:
                return (await client.get(f"{base}/healthz/cloud")).status_code == 500

            await eventually(cloud_failing, within=40, what="/healthz/cloud failing")
            health = await client.get(f"{base}/healthz", params={"verbose": "1"})
            assert health.status_code == 200, health.text
            assert "[-]cloud failed: reason withheld (not counted for liveness)" in health.text
            assert "cloud health check failing: the last" in ccm.log()

            ccm.cloud.clear_faults()

            async def cloud_ok() -> bool:
                return (await client.get(f"{base}/healthz/cloud")).text == "ok"

            await eventually(cloud_ok, within=60, what="/healthz/cloud ok again")
    finally:
        ccm.cloud.clear_faults()
        assert ccm.stop() == 0
