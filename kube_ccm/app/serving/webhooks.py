"""The webhook server and kube-ccm's one webhook: persistent-volume labels.

Runs only when the feature gate ``CloudControllerManagerWebhook`` is on, at
least one webhook is enabled with ``--webhooks`` (same list grammar as
``--controllers``) and ``--webhook-secure-port`` is not 0. It is a separate
HTTPS listener, served on every replica (not only the leader), with a
self-signed certificate unless ``--webhook-tls-cert-file``/``-private-key-file``
or ``--webhook-cert-dir`` are given. It answers anyone who reaches it, as
upstream's, unless ``--webhook-client-ca-file`` is given: then a client without a
certificate those CAs signed is refused in the TLS handshake (kube-ccm's).

Request handling follows upstream: ``Content-Type: application/json`` and a
non-empty body decoding to an ``admission.k8s.io/v1`` AdmissionReview with a
request, else 400 with the reason; a handler error gives 500; success returns
the AdmissionReview with the response UID copied from the request. Metrics
``cloud_provider_webhook_request_total`` and ``..._duration_seconds`` (labels
``code``, ``webhook``) are recorded for every outcome, 200 included (upstream
records only 400/500).

``persistent-volume-label`` (path ``/persistent-volume-label``) mutates
PersistentVolumes on CREATE with the same rules as the PV-label controller
(:mod:`kube_ccm.controllers.pvlabel`): labels from the provider's PVLabeler for
volumes it claims, never overwriting labels the PV has, plus node affinity; a
labeler error refuses the PV with 403 (the provider could not say where it is).

``service-annotations`` (path ``/service-annotations``, kube-ccm's) validates the
Service annotations the load-balancer provider declares
(``LoadBalancer.service_annotations``) on CREATE and UPDATE of a ``type:
LoadBalancer`` Service: a bad value is refused with 422 and one line per bad
annotation, so ``kubectl apply`` says what to fix at once. Other Services, and
annotations the provider does not declare, pass.
"""

from __future__ import annotations

import base64
import json
import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import msgspec
from aiohttp import web

from kube_ccm.api import wellknown as wk
from kube_ccm.api.objects import PersistentVolume, Service, decode
from kube_ccm.app.serving.server import HttpsListener
from kube_ccm.cloudprovider import CloudProvider, PVLabeler
from kube_ccm.cloudprovider.annotations import ServiceAnnotation
from kube_ccm.cloudprovider.annotations import problems as annotation_problems
from kube_ccm.controllers.pvlabel import labels_to_add, node_affinity_with
from kube_ccm.runtime.metrics import Metrics

log = logging.getLogger(__name__)

WEBHOOK_PV_LABEL = wk.WEBHOOK_PV_LABEL
_DURATION_BUCKETS = (0.25, 0.5, 0.7, 1.0, 1.5, 3.0, 5.0, 10.0)

AdmissionRequest = Mapping[str, Any]
AdmissionResponse = dict[str, Any]
Handler = Callable[[AdmissionRequest], Awaitable[AdmissionResponse]]


class BadRequestError(Exception):
    """The request is not a usable AdmissionReview (HTTP 400)."""


T = TypeVar("T")


def _decode_object(type_: type[T], obj: Any) -> T:
    """The request's object as ``type_``; a malformed one is the client's error (400)."""
    try:
        return decode(type_, json.dumps(obj))
    except (msgspec.ValidationError, msgspec.DecodeError, TypeError, ValueError) as exc:
        raise BadRequestError(f"the object is not a valid {type_.__name__}: {exc}") from exc


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def pv_label_patch(pv_object: Mapping[str, Any], labels: Mapping[str, str]) -> list[dict[str, Any]]:
    """JSON-patch operations adding the missing labels and the node affinity to a PV."""
    pv = decode(PersistentVolume, json.dumps(pv_object))
    added = labels_to_add(pv, labels)
    operations: list[dict[str, Any]] = []
    if added:
        if pv_object.get("metadata", {}).get("labels"):
            operations += [
                {"op": "add", "path": f"/metadata/labels/{_escape(k)}", "value": v}
                for k, v in sorted(added.items())
            ]
        else:
            operations.append({"op": "add", "path": "/metadata/labels", "value": added})
    affinity = node_affinity_with(pv, labels)
    if affinity is not None:
        operations.append({"op": "add", "path": "/spec/nodeAffinity", "value": affinity})
    return operations


def pv_label_handler(labeler: PVLabeler) -> Handler:
    async def handle(request: AdmissionRequest) -> AdmissionResponse:
        kind = request.get("kind") or {}
        obj = request.get("object")
        if (
            kind.get("kind") != "PersistentVolume"
            or request.get("operation") != "CREATE"
            or not obj
        ):
            return {"allowed": True}
        pv = _decode_object(PersistentVolume, obj)
        try:
            labels = await labeler.get_labels_for_volume(pv)
        except Exception as exc:
            return {
                "allowed": False,
                "status": {
                    "code": 403,
                    "message": f"could not get labels for volume {pv.metadata.name!r}: {exc}",
                },
            }
        operations = pv_label_patch(obj, labels) if labels else []
        if not operations:
            return {"allowed": True}
        patch = json.dumps(operations).encode()
        return {
            "allowed": True,
            "patchType": "JSONPatch",
            "patch": base64.b64encode(patch).decode(),
        }

    return handle


def require_client_certificates(context: ssl.SSLContext, ca_file: str) -> None:
    """Make ``context`` refuse every TLS client without a certificate that a CA of
    ``ca_file`` signed (``--webhook-client-ca-file``): only kube-apiserver, given such
    a certificate, gets an answer. An unreadable file, or one without a certificate,
    is an error (``OSError``/``ValueError``) that stops the start."""
    try:
        context.load_verify_locations(cafile=ca_file)
    except ssl.SSLError as exc:
        raise ValueError(
            f"--webhook-client-ca-file {ca_file}: no PEM CA certificate ({exc})"
        ) from exc
    context.verify_mode = ssl.CERT_REQUIRED


class WebhookServer(HttpsListener):
    """The HTTPS listener for the enabled webhooks."""

    def __init__(
        self,
        handlers: Mapping[str, Handler],
        metrics: Metrics,
        *,
        bind_address: str,
        port: int,
        ssl_context: ssl.SSLContext,
    ) -> None:
        super().__init__(bind_address=bind_address, port=port, ssl_context=ssl_context)
        self._handlers = dict(handlers)
        self._requests = metrics.counter(
            wk.METRIC_WEBHOOK_REQUEST_TOTAL,
            "Number of HTTP requests partitioned by status code and webhook.",
            ("code", "webhook"),
        )
        self._duration = metrics.histogram(
            wk.METRIC_WEBHOOK_REQUEST_DURATION,
            "Response latency distribution in seconds for each webhook and status code.",
            _DURATION_BUCKETS,
            ("code", "webhook"),
        )
        app = web.Application()
        for name in self._handlers:
            app.router.add_post(f"/{name}", self._serve(name))
        self._app = app

    async def start(self) -> None:
        await self._listen(self._app)
        log.info(
            "serving webhooks %s on https://%s:%d",
            ", ".join(sorted(self._handlers)),
            self._bind_address,
            self._port,
        )

    def _serve(self, name: str) -> Callable[[web.Request], Awaitable[web.Response]]:
        handler = self._handlers[name]

        async def serve(request: web.Request) -> web.Response:
            started = time.monotonic()
            try:
                response = await self._handle(handler, request)
            except Exception as exc:  # never a traceback per request, never uncounted
                log.error("webhook %s: request failed: %s", name, exc)
                log.debug("webhook %s: request failed", name, exc_info=exc)
                response = web.Response(status=500, text=f"webhook handler failed: {exc}")
            code = str(response.status)
            self._requests.labels(code=code, webhook=name).inc()
            self._duration.labels(code=code, webhook=name).observe(time.monotonic() - started)
            return response

        return serve

    @staticmethod
    async def _handle(handler: Handler, request: web.Request) -> web.Response:
        try:
            review = await _read_review(request)
            admission = review["request"]
            result = await handler(admission)
        except BadRequestError as exc:
            log.info("webhook %s: bad request: %s", request.path, exc)
            return web.Response(status=400, text=f"{exc}\n")
        return web.json_response(
            {
                "apiVersion": review.get("apiVersion", "admission.k8s.io/v1"),
                "kind": "AdmissionReview",
                "response": {"uid": admission.get("uid", ""), **result},
            }
        )


async def _read_review(request: web.Request) -> dict[str, Any]:
    if request.content_type != "application/json":
        raise BadRequestError(f"contentType={request.content_type}, expected application/json")
    body = await request.read()
    if not body:
        raise BadRequestError("request body is empty")
    try:
        review = json.loads(body)
    except RecursionError:
        raise BadRequestError("could not decode the AdmissionReview: nested too deeply") from None
    except ValueError as exc:
        raise BadRequestError(f"could not decode the AdmissionReview: {exc}") from exc
    if not isinstance(review, dict) or not isinstance(review.get("request"), dict):
        raise BadRequestError("the AdmissionReview has no request")
    return review


def service_annotations_handler(declared: Sequence[ServiceAnnotation]) -> Handler:
    async def handle(request: AdmissionRequest) -> AdmissionResponse:
        kind = request.get("kind") or {}
        obj = request.get("object")
        if (
            kind.get("kind") != "Service"
            or request.get("operation") not in ("CREATE", "UPDATE")
            or not obj
        ):
            return {"allowed": True}
        service = _decode_object(Service, obj)
        if service.spec.type != "LoadBalancer":
            return {"allowed": True}
        found = annotation_problems(declared, service.metadata.annotations)
        if not found:
            return {"allowed": True}
        return {
            "allowed": False,
            "status": {
                "code": 422,
                "reason": "Invalid",
                "message": "; ".join(found),
            },
        }

    return handle


def build_handlers(enabled: frozenset[str], cloud: CloudProvider) -> dict[str, Handler]:
    """The handlers for the enabled webhooks this provider can serve."""
    handlers: dict[str, Handler] = {}
    if wk.WEBHOOK_SERVICE_ANNOTATIONS in enabled:
        balancer = cloud.load_balancer()
        if balancer is not None and balancer.service_annotations:
            handlers[wk.WEBHOOK_SERVICE_ANNOTATIONS] = service_annotations_handler(
                balancer.service_annotations
            )
        else:
            log.warning(
                "Skipping webhook %s: the cloud provider declares no Service annotations",
                wk.WEBHOOK_SERVICE_ANNOTATIONS,
            )
    if WEBHOOK_PV_LABEL in enabled:
        if isinstance(cloud, PVLabeler):
            handlers[WEBHOOK_PV_LABEL] = pv_label_handler(cloud)
        else:
            log.warning(
                "Skipping webhook %s: the cloud provider does not label volumes", WEBHOOK_PV_LABEL
            )
    return handlers
