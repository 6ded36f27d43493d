"""The service-annotations validating webhook, called by the real kube-apiserver."""

from __future__ import annotations

import base64
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kube_ccm.runtime.client import ApiError, KubeClient
from kube_ccm.testing.controlplane import ControlPlane
from kube_ccm.testing.daemon import DaemonProcess
from kube_ccm.testing.pytest_plugin import Cleanup
from kube_ccm.testing.waiting import eventually

MODE = "simulated.kube-ccm.io/hostname-mode"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def lb_service(name: str, mode: str, label: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": {"test-webhook": label},
            "annotations": {MODE: mode},
        },
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
    }


async def test_a_bad_annotation_is_refused_at_apply_time_with_what_to_fix(
    *,
    ccm_kubeconfig: Path,
    kube_controlplane: ControlPlane,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    kube_namespace: str,
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
            "--controllers=-cloud-node",
            "--feature-gates=CloudControllerManagerWebhook=true",
            "--webhooks=service-annotations",
            "--webhook-bind-address=127.0.0.1",
            f"--webhook-secure-port={port}",
            f"--webhook-cert-dir={cert_dir}",
        ],
    ).start()
    try:
        ccm.wait_for_log("serving webhooks service-annotations")
        ca = (cert_dir / "cloud-controller-manager-webhook.crt").read_bytes()
        config = unique_name("svc-webhook")
        path = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
        kube_cleanup.add(f"{path}/{config}")
        await kube_client.create(
            path,
            {
                "metadata": {"name": config},
                "webhooks": [
                    {
                        "name": "service-annotations.kube-ccm.io",
                        "admissionReviewVersions": ["v1"],
                        "sideEffects": "None",
                        "failurePolicy": "Fail",
                        "timeoutSeconds": 5,
                        "objectSelector": {"matchLabels": {"test-webhook": config}},
                        "rules": [
                            {
                                "apiGroups": [""],
                                "apiVersions": ["v1"],
                                "operations": ["CREATE", "UPDATE"],
                                "resources": ["services"],
                            }
                        ],
                        "clientConfig": {
                            "url": f"https://127.0.0.1:{port}/service-annotations",
                            "caBundle": base64.b64encode(ca).decode(),
                        },
                    }
                ],
            },
        )
        base = f"/api/v1/namespaces/{kube_namespace}/services"
        refused: dict[str, str] = {}

        async def bad_one_refused() -> bool:
            # The configuration takes a moment to reach the admission chain.
            name = unique_name("bad")
            try:
                await kube_client.create(base, lb_service(name, "sometimes", config))
            except ApiError as exc:
                refused["message"] = exc.message
                return True
            await kube_client.delete(f"{base}/{name}")
            return False

        await eventually(bad_one_refused, within=30, interval=0.5, what="a refused Service")
        assert (
            f"metadata.annotations[{MODE}]: invalid value 'sometimes': use true or false"
        ) in refused["message"]

        good = await kube_client.create(base, lb_service("good", "true", config))
        assert good["metadata"]["annotations"][MODE] == "true"
        with pytest.raises(ApiError) as updated:
            await kube_client.patch(
                f"{base}/good", {"metadata": {"annotations": {MODE: "yes"}}}, patch_type="merge"
            )
        assert "use true or false" in updated.value.message
    finally:
        assert ccm.stop() == 0
