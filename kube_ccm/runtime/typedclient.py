"""A typed client: resource descriptors in, compact structs out.

Controllers name *what* they read or write with the descriptors of
:mod:`kube_ccm.runtime.resources` (``NODES``, ``SERVICES``, ``LEASES``) and get back the
msgspec structs of :mod:`kube_ccm.api.objects`; no controller builds an API path by
hand or walks a response dict::

    api = TypedClient(kube_client)
    node = await api.get(NODES, "node-a")                      # GET /api/v1/nodes/node-a
    page = await api.list(SERVICES, namespace="default", label_selector="app=web")
    await api.patch(                                           # PATCH .../services/web/status
        SERVICES, "web", {"status": {...}}, namespace="default", subresource="status"
    )
    lease = await api.get(LEASES, "ccm", namespace="kube-system")
    # GET /apis/coordination.k8s.io/v1/namespaces/kube-system/leases/ccm

Request bodies may be plain JSON values, msgspec structs, or both mixed
(``{"spec": {"taints": node.spec.taints}}``); they leave as JSON with the API's
field names (structs omit their defaults). Responses are decoded once, straight
into the descriptor's struct; an answer that does not fit raises
:class:`ResponseDecodeError` naming the request. API errors are the client's
:class:`~kube_ccm.runtime.client.ApiError`.

Structs are *trimmed* views: never PUT one back unless its struct keeps every
field of the kind (the :class:`~kube_ccm.api.objects.Lease` does); patch instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, TypeVar

import msgspec

from kube_ccm.api.objects import ObjectList, to_dict
from kube_ccm.runtime.client import PATCH_CONTENT_TYPES, PatchType
from kube_ccm.runtime.resources import Resource

__all__ = [
    "RequestClient",
    "ResponseDecodeError",
    "TypedClient",
]

T = TypeVar("T")


class ResponseDecodeError(Exception):
    """The API server's answer does not decode into the resource's struct."""


_decoders: dict[Any, msgspec.json.Decoder[Any]] = {}


def _decode(type_: Any, data: bytes, what: str) -> Any:
    decoder = _decoders.get(type_)
    if decoder is None:
        decoder = _decoders[type_] = msgspec.json.Decoder(type_)
    try:
        return decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise ResponseDecodeError(
            f"{what}: the answer is not a valid {_name(type_)}: {exc}"
        ) from exc


def _name(type_: Any) -> str:
    return getattr(type_, "__name__", None) or str(type_)


def _json(body: Any) -> Any:
    """A body (JSON values and structs, mixed) as plain JSON values with API names.

    Plain values, not bytes, so the client's dry run can show the body it refuses."""
    return to_dict(body)


class RequestClient(Protocol):
    """What :class:`TypedClient` needs of a client: the raw request (a
    :class:`~kube_ccm.runtime.client.KubeClient`, or a provider's
    ``KubernetesClient``, which extends this protocol)."""

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str | int] | None = None,
        body: Any = None,
        content: bytes | None = None,
        content_type: str | None = None,
        request_timeout: float | None = None,
    ) -> bytes:
        """One request, the answer's raw bytes; HTTP errors raise
        :class:`~kube_ccm.runtime.client.ApiError`."""
        ...


class TypedClient:
    """``get``/``list``/``create``/``replace``/``patch``/``delete`` by resource descriptor.

    Wraps a :class:`~kube_ccm.runtime.client.KubeClient` or any :class:`RequestClient`
    (a KubeClient's rate limits, fencing,
    dry run and metrics apply unchanged).
    """

    def __init__(self, client: RequestClient) -> None:
        self.client = client

    async def request(
        self,
        method: str,
        resource: Resource[Any],
        name: str | None = None,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        params: Mapping[str, str | int] | None = None,
        content: bytes | None = None,
        content_type: str | None = None,
    ) -> bytes:
        """Any request on a resource, with a body already encoded (``content``): the
        undecoded answer. The path is the descriptor's, as lightkube's
        ``prepare_request`` derives it; for callers that send pre-encoded bodies
        (the event recorder) or do not need the answer decoded."""
        path = resource.path(name, namespace=namespace, subresource=subresource)
        return await self.client.request(
            method, path, params=params, content=content, content_type=content_type
        )

    async def get(
        self,
        resource: Resource[T],
        name: str,
        *,
        namespace: str | None = None,
        resource_version: str | None = None,
    ) -> T:
        """One object. ``resource_version="0"`` lets the API server answer from its cache."""
        path = resource.path(name, namespace=namespace)
        params = {"resourceVersion": resource_version} if resource_version is not None else None
        raw = await self.client.request("GET", path, params=params)
        return _decode(resource.type, raw, f"GET {path}")  # type: ignore[no-any-return]

    async def list(
        self,
        resource: Resource[T],
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_: str | None = None,
        resource_version: str | None = None,
        params: Mapping[str, str | int] | None = None,
    ) -> ObjectList[T]:
        """One page of objects (all of them unless ``limit``); a namespaced resource
        without ``namespace`` is listed across all namespaces."""
        path = resource.path(namespace=namespace)
        query: dict[str, str | int] = dict(params or {})
        for key, value in (
            ("labelSelector", label_selector),
            ("fieldSelector", field_selector),
            ("limit", limit),
            ("continue", continue_),
            ("resourceVersion", resource_version),
        ):
            if value is not None:
                query[key] = value
        raw = await self.client.request("GET", path, params=query or None)
        return _decode(  # type: ignore[no-any-return]
            ObjectList[resource.type],  # type: ignore[name-defined]
            raw,
            f"GET {path}",
        )

    async def create(
        self,
        resource: Resource[T],
        body: Any,
        *,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
    ) -> T:
        """POST ``body`` to the collection; the created object. With ``name`` and
        ``subresource``, POST to that subresource of the object (a ServiceAccount's
        ``token``); the answer then decodes as the resource's type too."""
        path = resource.path(name, namespace=namespace, subresource=subresource)
        raw = await self.client.request("POST", path, body=_json(body))
        return _decode(resource.type, raw, f"POST {path}")  # type: ignore[no-any-return]

    async def replace(
        self, resource: Resource[T], name: str, body: Any, *, namespace: str | None = None
    ) -> T:
        """PUT ``body`` (a whole object, with the resourceVersion it was read at)."""
        path = resource.path(name, namespace=namespace)
        raw = await self.client.request("PUT", path, body=_json(body))
        return _decode(resource.type, raw, f"PUT {path}")  # type: ignore[no-any-return]

    async def patch(
        self,
        resource: Resource[T],
        name: str,
        body: Any,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        patch_type: PatchType = "strategic",
        field_manager: str | None = None,
        force: bool = False,
    ) -> T:
        """PATCH one object (or its ``status``); strategic merge unless ``patch_type``
        says ``merge``, ``json`` (a list of operations) or ``apply`` (which needs
        ``field_manager``)."""
        path = resource.path(name, namespace=namespace, subresource=subresource)
        params: dict[str, str | int] = {}
        if field_manager is not None:
            params["fieldManager"] = field_manager
        if force:
            if patch_type != "apply":
                raise ValueError("force applies to server-side apply patches only")
            params["force"] = "true"
        if patch_type == "apply" and field_manager is None:
            raise ValueError("a server-side apply patch needs a field manager")
        raw = await self.client.request(
            "PATCH",
            path,
            params=params or None,
            body=_json(body),
            content_type=PATCH_CONTENT_TYPES[patch_type],
        )
        return _decode(resource.type, raw, f"PATCH {path}")  # type: ignore[no-any-return]

    async def delete(
        self,
        resource: Resource[Any],
        name: str,
        *,
        namespace: str | None = None,
        body: Any = None,
    ) -> None:
        """DELETE one object; ``body`` is optional DeleteOptions (preconditions,
        propagationPolicy). The answer (the object or a Status) is not decoded."""
        path = resource.path(name, namespace=namespace)
        await self.client.request("DELETE", path, body=None if body is None else _json(body))
