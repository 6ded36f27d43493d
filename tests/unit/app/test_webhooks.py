"""The webhook server (§8.7) and the PV-label webhook, over real HTTPS on loopback."""

from __future__ import annotations

import base64
import json
import socket
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from kube_ccm.api import wellknown as wk
from kube_ccm.app.serving.certs import serving_context
from kube_ccm.app.serving.webhooks import (
    WebhookServer,
    build_handlers,
    pv_label_patch,
    require_client_certificates,
    service_annotations_handler,
)
from kube_ccm.cloudprovider.annotations import boolean
from kube_ccm.providers.simulated import SimulatedCloud, SimulatedConfig
from kube_ccm.providers.simulated.provider import CSI_DRIVER
from kube_ccm.runtime.metrics import Metrics

PATH = "/persistent-volume-label"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def pv(name: str, driver: str = CSI_DRIVER, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, **({"labels": labels} if labels else {})},
        "spec": {"csi": {"driver": driver, "volumeHandle": f"vol-{name}"}},
    }


def review(obj: dict[str, Any], operation: str = "CREATE") -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "req-1",
            "kind": {"group": "", "version": "v1", "kind": "PersistentVolume"},
            "operation": operation,
            "object": obj,
        },
    }


class Served:
    def __init__(self, url: str, cloud: SimulatedCloud, metrics: Metrics) -> None:
        self.url = url
        self.cloud = cloud
        self.metrics = metrics


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    cloud = SimulatedCloud(SimulatedConfig(state=":memory:"))
    cloud.state.sync.add_volume("vol-pv1", zone="sim-zone-b", region="sim-region-1")
    metrics = Metrics()
    context, _ = serving_context(cert_dir=str(tmp_path))
    port = free_port()
    server = WebhookServer(
        build_handlers(frozenset({wk.WEBHOOK_PV_LABEL}), cloud),
        metrics,
        bind_address="127.0.0.1",
        port=port,
        ssl_context=context,
    )
    await server.start()
    try:
        yield Served(f"https://127.0.0.1:{port}{PATH}", cloud, metrics)
    finally:
        await server.stop()
        cloud.close()


async def post(
    served: Served, content: bytes, content_type: str = "application/json"
) -> httpx2.Response:
    async with httpx2.AsyncClient(verify=False) as client:
        return await client.post(
            served.url, content=content, headers={"Content-Type": content_type}
        )


async def test_a_claimed_volume_is_patched_with_labels_and_affinity(served: Served) -> None:
    response = await post(served, json.dumps(review(pv("pv1"))).encode())
    assert response.status_code == 200
    body = response.json()
    assert body["kind"] == "AdmissionReview"
    assert body["response"]["uid"] == "req-1"
    assert body["response"]["allowed"] is True
    assert body["response"]["patchType"] == "JSONPatch"
    patch = json.loads(base64.b64decode(body["response"]["patch"]))
    assert patch[0] == {
        "op": "add",
        "path": "/metadata/labels",
        "value": {wk.LABEL_ZONE: "sim-zone-b", wk.LABEL_REGION: "sim-region-1"},
    }
    assert patch[1]["path"] == "/spec/nodeAffinity"
    assert (
        served.metrics.sample(
            "cloud_provider_webhook_request_total",
            {"code": "200", "webhook": wk.WEBHOOK_PV_LABEL},
        )
        == 1
    )


async def test_other_volumes_and_operations_are_allowed_unchanged(served: Served) -> None:
    for body in (review(pv("nfs", driver="nfs.csi.k8s.io")), review(pv("pv1"), "UPDATE")):
        response = await post(served, json.dumps(body).encode())
        assert response.json()["response"] == {"uid": "req-1", "allowed": True}


async def test_a_labeler_error_refuses_the_volume_with_403(served: Served) -> None:
    response = await post(served, json.dumps(review(pv("unknown"))).encode())
    result = response.json()["response"]
    assert result["allowed"] is False
    assert result["status"]["code"] == 403
    assert "unknown" in result["status"]["message"]


@pytest.mark.parametrize(
    ("content", "content_type", "reason"),
    [
        (b"{}", "text/plain", "expected application/json"),
        (b"", "application/json", "request body is empty"),
        (b"{not json", "application/json", "could not decode"),
        (b'{"kind": "AdmissionReview"}', "application/json", "has no request"),
        (b"[" * 100_000 + b"]" * 100_000, "application/json", "nested too deeply"),
        (
            b'{"request": {"uid": "1", "operation": "CREATE", "kind": {"kind": '
            b'"PersistentVolume"}, "object": {"metadata": "not a map"}}}',
            "application/json",
            "not a valid PersistentVolume",
        ),
    ],
    ids=["content-type", "empty", "not-json", "no-request", "nested", "bad-object"],
)
async def test_bad_requests_get_400_with_the_reason(
    served: Served, content: bytes, content_type: str, reason: str
) -> None:
    response = await post(served, content, content_type)
    assert response.status_code == 400
    assert reason in response.text
    assert (
        served.metrics.sample(
            "cloud_provider_webhook_request_total", {"code": "400", "webhook": wk.WEBHOOK_PV_LABEL}
        )
        == 1
    )


def test_existing_labels_are_kept_and_new_ones_added_one_by_one() -> None:
    patch = pv_label_patch(
        pv("x", labels={wk.LABEL_ZONE: "mine"}), {wk.LABEL_ZONE: "z", "a/b": "c"}
    )
    assert patch[0] == {"op": "add", "path": "/metadata/labels/a~1b", "value": "c"}
    assert all(op["path"] != "/metadata/labels/topology.kubernetes.io~1zone" for op in patch)


def test_serving_context_needs_both_files_or_neither(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="both"):
        serving_context(cert_file=str(tmp_path / "c.crt"))
    _, first = serving_context(cert_dir=str(tmp_path))
    _, again = serving_context(cert_dir=str(tmp_path))
    assert first == again, "an existing pair in --cert-dir is reused"


async def test_service_annotations_are_checked_for_load_balancer_services_only() -> None:
    declared = [boolean("x/flag", "a flag")]
    handle = service_annotations_handler(declared)

    def review(svc_type: str, value: str, operation: str = "CREATE") -> dict[str, Any]:
        return {
            "uid": "1",
            "kind": {"kind": "Service"},
            "operation": operation,
            "object": {
                "metadata": {"name": "s", "namespace": "d", "annotations": {"x/flag": value}},
                "spec": {"type": svc_type},
            },
        }

    refused = await handle(review("LoadBalancer", "maybe"))
    assert refused["allowed"] is False
    assert refused["status"]["code"] == 422
    assert refused["status"]["message"] == (
        "metadata.annotations[x/flag]: invalid value 'maybe': use true or false"
    )
    assert (await handle(review("LoadBalancer", "maybe", "UPDATE")))["allowed"] is False
    assert (await handle(review("LoadBalancer", "true")))["allowed"] is True
    assert (await handle(review("ClusterIP", "maybe")))["allowed"] is True
    assert (await handle(review("LoadBalancer", "maybe", "DELETE")))["allowed"] is True


def test_a_client_ca_file_that_is_missing_or_not_a_certificate_stops_the_start(
    tmp_path: Path,
) -> None:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with pytest.raises(FileNotFoundError):
        require_client_certificates(context, str(tmp_path / "missing.crt"))
    garbage = tmp_path / "garbage.crt"
    garbage.write_text("not a certificate\n")
    with pytest.raises(ValueError, match=r"--webhook-client-ca-file .*no PEM CA certificate"):
        require_client_certificates(context, str(garbage))
    assert context.verify_mode == ssl.CERT_NONE, "left as it was"
