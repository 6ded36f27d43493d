"""The service-annotations validating webhook, called by the real kube-apiserver; and
``--webhook-client-ca-file``: only a caller with a client certificate of that CA (the
apiserver, given one by its AdmissionConfiguration) is answered."""

from __future__ import annotations

import base64
import json
import socket
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml

from kube_ccm.runtime.client import ApiError, KubeClient
from kube_ccm.testing.controlplane import ControlPlane, ControlPlaneError, ControlPlaneOptions
from kube_ccm.testing.daemon import DaemonProcess
from kube_ccm.testing.pki import CertificateAuthority
from kube_ccm.testing.pytest_plugin import Cleanup, unavailable
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


def review(name: str, mode: str) -> bytes:
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u1",
                "kind": {"group": "", "version": "v1", "kind": "Service"},
                "operation": "CREATE",
                "object": lb_service(name, mode, "x") | {"apiVersion": "v1", "kind": "Service"},
            },
        }
    ).encode()


async def test_with_a_client_ca_only_the_apiserver_with_its_certificate_is_answered(
    *, ccm_kubeconfig: Path, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    """Without --webhook-client-ca-file the port answers an anonymous AdmissionReview
    (an oracle on what is valid, issue 37). With it: an anonymous client, or one with a
    certificate of another CA, fails the TLS handshake; kube-apiserver, given a client
    certificate of that CA by its AdmissionConfiguration, still gets its answers."""
    callers = CertificateAuthority("webhook-callers")
    (tmp_path / "callers-ca.crt").write_bytes(callers.cert_pem)
    apiserver_client = callers.issue("kube-apiserver-webhook-client", client=True)
    apiserver_client.write(tmp_path / "apiserver-client.crt", tmp_path / "apiserver-client.key")
    stranger = CertificateAuthority("stranger").issue("stranger", client=True)
    stranger.write(tmp_path / "stranger.crt", tmp_path / "stranger.key")
    webhook_kubeconfig = tmp_path / "webhook-kubeconfig.yaml"
    webhook_kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "users": [
                    {
                        "name": "*",
                        "user": {
                            "client-certificate": str(tmp_path / "apiserver-client.crt"),
                            "client-key": str(tmp_path / "apiserver-client.key"),
                        },
                    }
                ],
            }
        )
    )
    admission = tmp_path / "admission.yaml"
    admission.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "apiserver.config.k8s.io/v1",
                "kind": "AdmissionConfiguration",
                "plugins": [
                    {
                        "name": "ValidatingAdmissionWebhook",
                        "configuration": {
                            "apiVersion": "apiserver.config.k8s.io/v1",
                            "kind": "WebhookAdmissionConfiguration",
                            "kubeConfigFile": str(webhook_kubeconfig),
                        },
                    }
                ],
            }
        )
    )
    plane = ControlPlane(
        ControlPlaneOptions(extra_apiserver_args=(f"--admission-control-config-file={admission}",))
    )
    try:
        plane.start()
    except ControlPlaneError as exc:
        unavailable(f"a control plane with an AdmissionConfiguration could not start: {exc}")
    port = free_port()
    cert_dir = tmp_path / "certs"
    ccm: DaemonProcess | None = None
    admin = KubeClient.from_kubeconfig(plane.kubeconfig)
    try:
        ccm = DaemonProcess(
            kubeconfig=plane.kubeconfig,
            workdir=tmp_path / "daemon",
            args=[
                "--leader-elect=false",
                "--controllers=-cloud-node",
                "--feature-gates=CloudControllerManagerWebhook=true",
                "--webhooks=service-annotations",
                "--webhook-bind-address=127.0.0.1",
                f"--webhook-secure-port={port}",
                f"--webhook-cert-dir={cert_dir}",
                f"--webhook-client-ca-file={tmp_path / 'callers-ca.crt'}",
            ],
        ).start()
        ccm.wait_for_log("serving webhooks service-annotations")
        serving_ca = cert_dir / "cloud-controller-manager-webhook.crt"
        url = f"https://127.0.0.1:{port}/service-annotations"
        headers = {"Content-Type": "application/json"}

        def context(client: Path | None) -> ssl.SSLContext:
            made = ssl.create_default_context(cafile=str(serving_ca))
            made.check_hostname = False
            if client is not None:
                made.load_cert_chain(client.with_suffix(".crt"), client.with_suffix(".key"))
            return made

        for client in (None, tmp_path / "stranger"):
            async with httpx2.AsyncClient(verify=context(client)) as http:
                with pytest.raises(httpx2.TransportError):
                    await http.post(url, content=review("s", "sometimes"), headers=headers)
        async with httpx2.AsyncClient(verify=context(tmp_path / "apiserver-client")) as http:
            answer = (
                await http.post(url, content=review("s", "sometimes"), headers=headers)
            ).json()
        assert answer["response"]["allowed"] is False

        # The apiserver, with its client certificate, is answered.
        config = unique_name("svc-webhook")
        await admin.create(
            "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
            {
                "metadata": {"name": config},
                "webhooks": [
                    {
                        "name": "service-annotations.kube-ccm.io",
                        "admissionReviewVersions": ["v1"],
                        "sideEffects": "None",
                        "failurePolicy": "Fail",
                        "timeoutSeconds": 5,
                        "rules": [
                            {
                                "apiGroups": [""],
                                "apiVersions": ["v1"],
                                "operations": ["CREATE", "UPDATE"],
                                "resources": ["services"],
                            }
                        ],
                        "clientConfig": {
                            "url": url,
                            "caBundle": base64.b64encode(serving_ca.read_bytes()).decode(),
                        },
                    }
                ],
            },
        )
        base = "/api/v1/namespaces/default/services"
        refused: dict[str, str] = {}

        async def bad_one_refused() -> bool:
            name = unique_name("bad")
            try:
                await admin.create(base, lb_service(name, "sometimes", config))
            except ApiError as exc:
                refused["message"] = exc.message
                return True
            await admin.delete(f"{base}/{name}")
            return False

        await eventually(bad_one_refused, within=30, interval=0.5, what="a refused Service")
        assert "use true or false" in refused["message"], refused
        good = await admin.create(base, lb_service(unique_name("good"), "true", config))
        assert good["metadata"]["annotations"][MODE] == "true"
    finally:
        await admin.aclose()
        if ccm is not None:
            assert ccm.stop() == 0
        plane.stop()
