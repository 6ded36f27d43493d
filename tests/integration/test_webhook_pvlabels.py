"""The PV-label admission webhook, called by the real kube-apiserver."""

from __future__ import annotations

import asyncio
import base64
import socket
from collections.abc import Callable
from pathlib import Path

import httpx2

from kube_ccm.runtime.client import KubeClient
from kube_ccm.testing.controlplane import ControlPlane
from kube_ccm.testing.daemon import DaemonProcess
from kube_ccm.testing.pytest_plugin import Cleanup
from kube_ccm.testing.waiting import eventually

DRIVER = "simulated.csi.kube-ccm.io"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def test_a_volume_created_through_the_apiserver_is_labelled_at_admission(
    *,
    ccm_kubeconfig: Path,
    kube_controlplane: ControlPlane,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    port = free_port()
    cert_dir = tmp_path / "certs"
    ccm = DaemonProcess(
        kubeconfig=ccm_kubeconfig,
        workdir=tmp_path / "daemon",
        args=[
            "--leader-elect=false",
            "--controllers=cloud-node",
            "--feature-gates=CloudControllerManagerWebhook=true",
            "--webhooks=persistent-volume-label",
            "--webhook-bind-address=127.0.0.1",
            f"--webhook-secure-port={port}",
            f"--webhook-cert-dir={cert_dir}",
        ],
    ).start()
    try:
        ccm.wait_for_log("serving webhooks persistent-volume-label")
        ca = (cert_dir / "cloud-controller-manager-webhook.crt").read_bytes()
        config = unique_name("pvl-webhook")
        kube_cleanup.add(
            f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{config}"
        )
        await kube_client.create(
            "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
            {
                "metadata": {"name": config},
                "webhooks": [
                    {
                        "name": "persistent-volume-label.kube-ccm.io",
                        "admissionReviewVersions": ["v1"],
                        "sideEffects": "None",
                        "failurePolicy": "Ignore",
                        "timeoutSeconds": 10,
                        "objectSelector": {"matchLabels": {"test-webhook": config}},
                        "rules": [
                            {
                                "apiGroups": [""],
                                "apiVersions": ["v1"],
                                "operations": ["CREATE"],
                                "resources": ["persistentvolumes"],
                            }
                        ],
                        "clientConfig": {
                            "url": f"https://127.0.0.1:{port}/persistent-volume-label",
                            "caBundle": base64.b64encode(ca).decode(),
                        },
                    }
                ],
            },
        )
        created: dict[str, object] = {}

        async def admitted_with_labels() -> bool:
            # The webhook configuration takes a moment to reach the apiserver's admission
            # chain: create fresh volumes until one comes back with the webhook's labels.
            name = unique_name("pv")
            ccm.cloud.add_volume(f"vol-{name}", zone="sim-zone-a", region="sim-region-1")
            kube_cleanup.add(f"/api/v1/persistentvolumes/{name}")
            volume = await kube_client.create(
                "/api/v1/persistentvolumes",
                {
                    "metadata": {"name": name, "labels": {"test-webhook": config}},
                    "spec": {
                        "capacity": {"storage": "1Gi"},
                        "accessModes": ["ReadWriteOnce"],
                        "csi": {"driver": DRIVER, "volumeHandle": f"vol-{name}"},
                    },
                },
            )
            if "topology.kubernetes.io/zone" not in (volume["metadata"].get("labels") or {}):
                return False
            created.update(volume)
            return True

        await eventually(admitted_with_labels, within=30, interval=0.5, what="a labelled PV")
        labels = created["metadata"]["labels"]  # type: ignore[index]
        assert labels["topology.kubernetes.io/zone"] == "sim-zone-a"
        assert labels["topology.kubernetes.io/region"] == "sim-region-1"
        assert labels["test-webhook"] == config, "existing labels kept"
        terms = created["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]  # type: ignore[index]
        assert {e["key"] for e in terms[0]["matchExpressions"]} == {
            "topology.kubernetes.io/zone",
            "topology.kubernetes.io/region",
        }

        # A volume created with node-selector terms of its own: the requirements are
        # appended to each of them, not written as a separate term, not skipped.
        racked = unique_name("pv")
        ccm.cloud.add_volume(f"vol-{racked}", zone="sim-zone-b", region="sim-region-1")
        kube_cleanup.add(f"/api/v1/persistentvolumes/{racked}")
        rack_terms = [
            {"matchExpressions": [{"key": "example.com/rack", "operator": "In", "values": [r]}]}
            for r in ("r1", "r2")
        ]
        volume = await kube_client.create(
            "/api/v1/persistentvolumes",
            {
                "metadata": {"name": racked, "labels": {"test-webhook": config}},
                "spec": {
                    "capacity": {"storage": "1Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "csi": {"driver": DRIVER, "volumeHandle": f"vol-{racked}"},
                    "nodeAffinity": {"required": {"nodeSelectorTerms": rack_terms}},
                },
            },
        )
        merged = volume["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
        assert [t["matchExpressions"] for t in merged] == [
            [
                {"key": "example.com/rack", "operator": "In", "values": [rack]},
                {
                    "key": "topology.kubernetes.io/region",
                    "operator": "In",
                    "values": ["sim-region-1"],
                },
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["sim-zone-b"]},
            ]
            for rack in ("r1", "r2")
        ]
    finally:
        assert ccm.stop() == 0


async def test_a_webhook_only_replica_keeps_serving_and_refuses_malformed_reviews(
    *, ccm_kubeconfig: Path, kube_controlplane: ControlPlane, tmp_path: Path
) -> None:
    """Every controller off, the webhook on: the replica keeps running and serving. A
    malformed or absurdly nested AdmissionReview gets 400, one log line, and is counted."""
    port = free_port()
    ccm = DaemonProcess(
        kubeconfig=ccm_kubeconfig,
        workdir=tmp_path / "daemon",
        args=[
            "--leader-elect=false",
            "--controllers=-cloud-node",
            "--feature-gates=CloudControllerManagerWebhook=true",
            "--webhooks=persistent-volume-label",
            "--webhook-bind-address=127.0.0.1",
            f"--webhook-secure-port={port}",
            f"--webhook-cert-dir={tmp_path / 'certs'}",
        ],
    ).start()
    try:
        ccm.wait_for_log("no controller to run here")
        await asyncio.sleep(3)
        assert ccm.poll() is None, "the webhook-only replica exited"
        url = f"https://127.0.0.1:{port}/persistent-volume-label"
        bodies = [
            b"[" * 50_000 + b"]" * 50_000,
            b'{"request": {"uid": "1", "operation": "CREATE", '
            b'"kind": {"kind": "PersistentVolume"}, "object": {"metadata": 7}}}',
        ]
        async with httpx2.AsyncClient(verify=False) as client:
            for body in bodies:
                response = await client.post(
                    url, content=body, headers={"Content-Type": "application/json"}
                )
                assert response.status_code == 400, response.text
        assert "Traceback" not in ccm.log()
    finally:
        assert ccm.stop() == 0
