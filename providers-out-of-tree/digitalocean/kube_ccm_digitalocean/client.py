"""The provider's one door to DigitalOcean: pydo's async client (``pydo.aio.Client``,
azure-core over aiohttp), each call mapped to the contract's errors.

- The token is read from :class:`~kube_ccm.cloudprovider.Credentials` on every request
  (an azure-core policy sets ``Authorization: Bearer``), so a rotated Secret is used at
  once and a 401 re-reads it before failing.
- azure-core's own retries are off: every attempt passes kube-ccm's cloud-call
  boundary (metered, rate-limited, retried on ``TransientCloudError``); two retry
  layers would multiply attempts and hide throttling.
- pydo answers some 404s as a body; every call asks for the status code (``cls=``).
- Each request's ``ratelimit-remaining`` is remembered; a 429 becomes a
  :class:`DigitalOceanRateLimitedError` whose ``retry_after`` is ``ratelimit-reset``.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pydo.aio
from azure.core.exceptions import (
    HttpResponseError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.core.pipeline import PipelineRequest, PipelineResponse
from azure.core.pipeline.policies import SansIOHTTPPolicy
from kube_ccm.cloudprovider import CloudProviderError, Credentials, TransientCloudError

from kube_ccm_digitalocean import __version__

__all__ = [
    "JSON",
    "DigitalOceanClient",
    "DigitalOceanError",
    "DigitalOceanForbiddenError",
    "DigitalOceanInvalidError",
    "DigitalOceanRateLimitedError",
    "DigitalOceanUnauthorizedError",
    "DigitalOceanUnavailableError",
]

JSON = dict[str, Any]
log = logging.getLogger(__name__)
_PER_PAGE = 200  # the API's maximum: 200 droplets are one request
_MAX_PAGES = 100
_USER_AGENT = f"kube-ccm-digitalocean/{__version__}"


class DigitalOceanError(CloudProviderError):
    """DigitalOcean refused a call: its status, error id, message and request ID."""

    def __init__(
        self,
        operation: str,
        status: int,
        *,
        error_id: str = "",
        message: str = "",
        request_id: str = "",
        detail: str = "",
    ) -> None:
        text = f"DigitalOcean {operation}: {status} {error_id}: {message}".rstrip(": ")
        if request_id:
            text += f" (request ID {request_id})"
        super().__init__(f"{text}{detail}")
        self.operation = operation
        self.status = status
        self.error_id = error_id
        self.api_message = message
        self.request_id = request_id


class DigitalOceanUnauthorizedError(DigitalOceanError):
    """401: the token is not valid (wrong, revoked, expired)."""


class DigitalOceanForbiddenError(DigitalOceanError):
    """403: the token lacks the scope the call needs (a read-only or custom-scoped
    token); the message names the scope."""


class DigitalOceanInvalidError(DigitalOceanError):
    """422: the request was refused as invalid (the message says which field)."""


class DigitalOceanRateLimitedError(TransientCloudError):
    """429: the token's requests for the hour are spent; retried after the reset."""


class DigitalOceanUnavailableError(TransientCloudError):
    """A 5xx, a dropped connection or a timeout on a call safe to repeat."""


class _Bearer(SansIOHTTPPolicy):  # type: ignore[type-arg]
    """``Authorization: Bearer <token>`` from the credentials, per request (so a
    rotated token is used at once; azure-core's bearer policy keeps one token and
    refuses plain http, which the tests' loopback fake speaks)."""

    def __init__(self, credentials: Credentials) -> None:
        self._credentials = credentials

    def on_request(self, request: PipelineRequest) -> None:  # type: ignore[type-arg]
        token = self._credentials.current().reveal()
        request.http_request.headers["Authorization"] = f"Bearer {token}"


def _answer(
    response: PipelineResponse[Any, Any], body: Any, _headers: Any
) -> tuple[int, Any, dict[str, str]]:
    http = response.http_response
    return http.status_code, body, dict(http.headers)


class DigitalOceanClient:
    """The calls the provider makes, each one HTTP request (lists: one per page)."""

    def __init__(self, endpoint: str, credentials: Credentials, timeout: float) -> None:
        self.endpoint = endpoint
        self.credentials = credentials
        self._timeout = timeout
        self._sdk = self._build()
        self.rate_limit_remaining: int | None = None
        self.requests = 0

    def _build(self) -> pydo.aio.Client:
        return pydo.aio.Client(
            "unused",  # the policy below sends the token of the moment
            endpoint=self.endpoint,
            authentication_policy=_Bearer(self.credentials),
            retry_total=0,
            connection_timeout=self._timeout,
            read_timeout=self._timeout,
            user_agent=_USER_AGENT,
        )

    async def close(self) -> None:
        await self._sdk.close()

    def credentials_source(self) -> str:
        secret = self.credentials.current()
        return f"the {self.credentials.source.describe()} (sha256 {secret.fingerprint})"

    async def _call(
        self,
        operation: str,
        scope: str,
        fn: Callable[[pydo.aio.Client], Awaitable[Any]],
        *,
        idempotent: bool = True,
        refreshed: bool = False,
    ) -> tuple[int, Any]:
        """``(status, body)`` of one request; 404 is an answer, the rest raise."""
        self.requests += 1
        try:
            answer: tuple[int, Any, dict[str, str]] = await fn(self._sdk)  # cls=_answer
            status, body, headers = answer
        except HttpResponseError as exc:
            status = exc.status_code or 0
            response = exc.response
            headers = dict(response.headers) if response is not None else {}  # type: ignore[attr-defined]
            self._note(headers)
            error = _error_body(exc)
            message = str(error.get("message", ""))

            def refused(kind: type[DigitalOceanError], detail: str = "") -> DigitalOceanError:
                return kind(
                    operation,
                    status,
                    error_id=str(error.get("id", "")),
                    message=message,
                    request_id=str(error.get("request_id", "") or headers.get("x-request-id", "")),
                    detail=detail,
                )

            if status == 401:
                if not refreshed and await self.credentials.refresh():
                    return await self._call(
                        operation, scope, fn, idempotent=idempotent, refreshed=True
                    )
                raise refused(
                    DigitalOceanUnauthorizedError,
                    f"; the token from {self.credentials_source()} was refused",
                ) from None
            if status == 403:
                raise refused(
                    DigitalOceanForbiddenError,
                    f"; the token from {self.credentials_source()} needs the scope "
                    f"{scope} (a read-only token cannot change load balancers)",
                ) from None
            if status == 422:
                raise refused(DigitalOceanInvalidError) from None
            if status == 429:
                raise DigitalOceanRateLimitedError(
                    f"DigitalOcean {operation}: 429 too_many_requests: the token's "
                    f"requests for the hour are spent (ratelimit-reset "
                    f"{headers.get('ratelimit-reset', '?')})",
                    retry_after=_retry_after(headers),
                ) from None
            if status >= 500 and idempotent:
                raise DigitalOceanUnavailableError(
                    f"DigitalOcean {operation}: {status} {message}".rstrip()
                ) from None
            raise refused(DigitalOceanError) from None
        except (ServiceRequestError, ServiceResponseError) as exc:
            message = f"DigitalOcean {operation}: {exc.message or type(exc).__name__}"
            if idempotent or isinstance(exc, ServiceRequestError):
                raise DigitalOceanUnavailableError(message) from None
            raise CloudProviderError(message) from None
        self._note(headers)
        return status, body

    def _note(self, headers: dict[str, str]) -> None:
        remaining = headers.get("ratelimit-remaining")
        if remaining is not None and remaining.isdigit():
            self.rate_limit_remaining = int(remaining)
            limit = headers.get("ratelimit-limit", "")
            if limit.isdigit() and int(remaining) < int(limit) // 10:
                log.warning(
                    "DigitalOcean: %s of %s requests left this hour for this token",
                    remaining,
                    limit,
                )

    async def _pages(
        self,
        operation: str,
        scope: str,
        key: str,
        list_fn: Callable[..., Awaitable[Any]],
        **query: Any,
    ) -> list[JSON]:
        items: list[JSON] = []
        for page in range(1, _MAX_PAGES + 1):
            request: Callable[[pydo.aio.Client], Awaitable[Any]] = functools.partial(
                _listed, list_fn, per_page=_PER_PAGE, page=page, cls=_answer, **query
            )
            _status, body = await self._call(operation, scope, request)
            items.extend(body.get(key) or [])
            if not ((body.get("links") or {}).get("pages") or {}).get("next"):
                break
        return items

    # -- the calls ----------------------------------------------------------------------

    async def regions(self) -> list[JSON]:
        return await self._pages("ListRegions", "regions:read", "regions", self._sdk.regions.list)

    async def account(self) -> JSON:
        """``GET /v2/account``: the token's user and team (scope ``account:read``)."""
        _status, body = await self._call(
            "GetAccount", "account:read", lambda sdk: sdk.account.get(cls=_answer)
        )
        return dict(body.get("account") or {})

    async def droplet(self, droplet_id: int) -> JSON | None:
        status, body = await self._call(
            "GetDroplet",
            "droplet:read",
            lambda sdk: sdk.droplets.get(droplet_id, cls=_answer),
        )
        return None if status == 404 else body["droplet"]

    async def droplets(self, *, name: str | None = None, tag: str | None = None) -> list[JSON]:
        query: dict[str, str] = {}
        if name:
            query["name"] = name
        if tag:
            query["tag_name"] = tag
        return await self._pages(
            "ListDroplets", "droplet:read", "droplets", self._sdk.droplets.list, **query
        )

    async def load_balancers(self) -> list[JSON]:
        return await self._pages(
            "ListLoadBalancers",
            "load_balancer:read",
            "load_balancers",
            self._sdk.load_balancers.list,
        )

    async def load_balancer(self, lb_id: str) -> JSON | None:
        status, body = await self._call(
            "GetLoadBalancer",
            "load_balancer:read",
            lambda sdk: sdk.load_balancers.get(lb_id, cls=_answer),
        )
        return None if status == 404 else body["load_balancer"]

    async def create_load_balancer(self, request: JSON) -> JSON:
        _status, body = await self._call(
            "CreateLoadBalancer",
            "load_balancer:create",
            lambda sdk: sdk.load_balancers.create(request, cls=_answer),
            idempotent=False,  # a repeated POST makes a second load balancer
        )
        return body["load_balancer"]  # type: ignore[no-any-return]

    async def update_load_balancer(self, lb_id: str, request: JSON) -> JSON | None:
        status, body = await self._call(
            "UpdateLoadBalancer",
            "load_balancer:update",
            lambda sdk: sdk.load_balancers.update(lb_id, request, cls=_answer),
        )
        return None if status == 404 else body["load_balancer"]

    async def delete_load_balancer(self, lb_id: str) -> bool:
        """False when it was already gone."""
        status, _body = await self._call(
            "DeleteLoadBalancer",
            "load_balancer:delete",
            lambda sdk: sdk.load_balancers.delete(lb_id, cls=_answer),
        )
        return status != 404

    async def certificate(self, certificate_id: str) -> JSON | None:
        status, body = await self._call(
            "GetCertificate",
            "certificate:read",
            lambda sdk: sdk.certificates.get(certificate_id, cls=_answer),
        )
        return None if status == 404 else body["certificate"]


def _listed(list_fn: Callable[..., Awaitable[Any]], _sdk: Any, **query: Any) -> Awaitable[Any]:
    return list_fn(**query)


def _error_body(exc: HttpResponseError) -> JSON:
    try:
        body = exc.response.json() if exc.response is not None else None  # type: ignore[attr-defined]
    except Exception:
        body = None
    return body if isinstance(body, dict) else {"message": exc.reason or ""}


def _retry_after(headers: dict[str, str]) -> float | None:
    reset = headers.get("ratelimit-reset", "")
    if not reset.isdigit():
        return None
    return max(0.0, min(float(reset) - time.time(), 3600.0))
