"""Kubernetes clients per controller identity (upstream's ControllerClientBuilder).

Without ``--use-service-account-credentials`` every identity gets the daemon's
own credentials with the user agent ``<base>/<identity>``, and its own QPS/burst
budget, as client-go gives each rest config its own limiter. The builder keeps
every client it made, so the daemon can fence all of them at once when it must
stop writing (shutdown, lost leadership).

With ``--use-service-account-credentials`` (:class:`ServiceAccountTokens`), the
controller identities instead authenticate as ServiceAccounts of that name in
``kube-system`` (created if missing) with TokenRequest tokens of one hour,
renewed when less than 20 % of their lifetime remains, as upstream; informers,
leader election and events keep the daemon's own credentials.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING

from lightkube.config.kubeconfig import SingleConfig
from lightkube.config.models import User

from kube_ccm.runtime.aiohttptransport import AiohttpTransport
from kube_ccm.runtime.client import ApiError, KubeClient, RestClientMetrics, WriteGuard
from kube_ccm.runtime.codec import JSON
from kube_ccm.runtime.dryrun import DryRun
from kube_ccm.runtime.ratelimit import AsyncTokenBucket
from kube_ccm.runtime.resources import SERVICE_ACCOUNTS, TypedClient
from kube_ccm.runtime.transport import Transport

if TYPE_CHECKING:  # pycurl is an extra: imported only when the curl transport is chosen
    from kube_ccm.runtime.curltransport import CurlPool

TRANSPORTS = ("aiohttp", "curl")
"""``--kube-api-transport``: aiohttp (the default) or libcurl (HTTP/2, ``kube-ccm[curl]``)."""


class ClientConfigView:
    """What a provider may learn about a client's configuration."""

    def __init__(self, server: str, user_agent: str) -> None:
        self._server = server
        self._user_agent = user_agent

    @property
    def server(self) -> str:
        return self._server

    @property
    def user_agent(self) -> str:
        return self._user_agent


log = logging.getLogger(__name__)

SERVICE_ACCOUNT_NAMESPACE = "kube-system"
TOKEN_LIFETIME = 3600
RENEW_WHEN_REMAINING = 0.2


class ServiceAccountToken:
    """A TokenRequest token for one ServiceAccount, renewed before it expires.

    The ServiceAccount is created on first use if it does not exist (upstream
    does the same). ``clock`` is for tests.
    """

    def __init__(
        self,
        client: KubeClient,
        name: str,
        *,
        namespace: str = SERVICE_ACCOUNT_NAMESPACE,
        lifetime: int = TOKEN_LIFETIME,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._api = TypedClient(client)
        self.name = name
        self._namespace = namespace
        self._lifetime = lifetime
        self._clock = clock
        self._token = ""
        self._issued = 0.0
        self._expires = 0.0
        self._lock = asyncio.Lock()
        self.requests = 0

    def _fresh(self) -> bool:
        remaining = self._expires - self._clock()
        return bool(self._token) and remaining > RENEW_WHEN_REMAINING * (
            self._expires - self._issued
        )

    async def __call__(self) -> str:
        if self._fresh():
            return self._token
        async with self._lock:
            if not self._fresh():
                await self._renew()
        return self._token

    async def _renew(self) -> None:
        namespace = self._namespace
        try:
            await self._api.get(SERVICE_ACCOUNTS, self.name, namespace=namespace)
        except ApiError as exc:
            if not exc.not_found:
                raise
            try:
                await self._api.create(
                    SERVICE_ACCOUNTS, {"metadata": {"name": self.name}}, namespace=namespace
                )
                log.info("created ServiceAccount %s/%s", self._namespace, self.name)
            except ApiError as create_error:
                if not create_error.already_exists:
                    raise
        issued = self._clock()
        response = await self._api.create(
            SERVICE_ACCOUNTS,
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": self._lifetime},
            },
            namespace=namespace,
            name=self.name,
            subresource="token",
        )
        status = response["status"]
        expires = datetime.datetime.fromisoformat(
            status["expirationTimestamp"].replace("Z", "+00:00")
        ).timestamp()
        self._token, self._issued, self._expires = status["token"], issued, expires
        self.requests += 1
        log.info(
            "token for ServiceAccount %s/%s renewed, valid for %d s",
            self._namespace,
            self.name,
            int(expires - issued),
        )


class SimpleClientBuilder:
    """One :class:`KubeClient` per identity, built from one configuration."""

    def __init__(
        self,
        config: SingleConfig,
        *,
        base_user_agent: str,
        qps: float,
        burst: int,
        timeout: float = 30.0,
        metrics: RestClientMetrics | None = None,
        content_type: str = JSON,
        service_accounts: Collection[str] = (),
        transport: str = "aiohttp",
    ) -> None:
        """``service_accounts``: identities that authenticate as their own ServiceAccount
        (``--use-service-account-credentials``) instead of with the daemon's credentials;
        ``content_type``: ``--kube-api-content-type``, every client's.
        ``transport``: one of :data:`TRANSPORTS`; with ``curl`` every client shares one
        libcurl pool, so all of them multiplex one HTTP/2 connection per credential,
        as client-go's clients of one TLS configuration share their transport."""
        if transport not in TRANSPORTS:
            raise ValueError(f"unknown transport {transport!r}; one of {', '.join(TRANSPORTS)}")
        self._transport = transport
        self._curl_pool: CurlPool | None = None
        self._metrics = metrics
        self._service_accounts = frozenset(service_accounts)
        self.tokens: dict[str, ServiceAccountToken] = {}
        self._config = config
        self._base_user_agent = base_user_agent
        self._qps = qps
        self._burst = burst
        self._timeout = timeout
        self._content_type = content_type
        self._clients: dict[str, KubeClient] = {}
        self._fenced: str | None = None
        self._write_guard: WriteGuard | None = None
        self._dry_run: DryRun | None = None

    def user_agent(self, name: str) -> str:
        return f"{self._base_user_agent}/{name}" if name else self._base_user_agent

    def config(self, name: str) -> ClientConfigView:
        return ClientConfigView(str(self._config.cluster.server), self.user_agent(name))

    def client(self, name: str) -> KubeClient:
        existing = self._clients.get(name)
        if existing is not None:
            return existing
        token: ServiceAccountToken | None = None
        config = self._config
        if name in self._service_accounts:
            # The daemon's own client asks for the token; the ServiceAccount's client
            # carries nothing of the daemon's credentials.
            token = ServiceAccountToken(self.client(""), name)
            self.tokens[name] = token
            config = config._replace(user=User())
        transport = self._make_transport(config)
        limiter = AsyncTokenBucket(self._qps, self._burst) if self._qps > 0 else None
        client = KubeClient(
            transport,
            rate_limiter=limiter.acquire if limiter is not None else None,
            user_agent=self.user_agent(name),
            metrics=self._metrics,
            token_source=token,
            content_type=self._content_type,
        )
        if self._fenced is not None:
            client.fence(self._fenced)
        client.set_write_guard(self._write_guard)
        client.set_dry_run(self._dry_run)
        self._clients[name] = client
        return client

    def _make_transport(self, config: SingleConfig) -> Transport:
        if self._transport == "curl":
            from kube_ccm.runtime.curltransport import (  # noqa: PLC0415 (an extra)
                CurlPool,
                CurlTransport,
            )

            if self._curl_pool is None:
                self._curl_pool = CurlPool()
            return CurlTransport.from_config(config, timeout=self._timeout, pool=self._curl_pool)
        return AiohttpTransport.from_config(config, timeout=self._timeout)

    async def prime_service_accounts(self) -> None:
        """Create the ServiceAccount of every identity made so far and fetch its token.

        Upstream's builder does this when a controller starts, so each account exists
        as soon as its controller runs, not only after its first write. A failure is
        logged with what to grant; the token is asked for again on first use.
        """

        async def one(token: ServiceAccountToken) -> None:
            try:
                await token()
            except Exception as exc:
                log.error(
                    "cannot create ServiceAccount %s/%s or a token for it: %s; the daemon "
                    "needs create on serviceaccounts and serviceaccounts/token in %s "
                    "(deploy/rbac-service-account-credentials.yaml); retrying on first use",
                    SERVICE_ACCOUNT_NAMESPACE,
                    token.name,
                    exc,
                    SERVICE_ACCOUNT_NAMESPACE,
                )

        await asyncio.gather(*(one(t) for t in list(self.tokens.values())))

    def set_write_guard(self, guard: WriteGuard | None) -> None:
        """Give every client, made so far or later, ``guard`` (see
        :meth:`KubeClient.set_write_guard`)."""
        self._write_guard = guard
        for client in self._clients.values():
            client.set_write_guard(guard)

    def set_dry_run(self, recorder: DryRun | None) -> None:
        """Make every client, made so far or later, a dry run (``--dry-run``)."""
        self._dry_run = recorder
        for client in self._clients.values():
            client.set_dry_run(recorder)

    def fence_all(self, reason: str) -> None:
        """Refuse writes on every client, made so far or later."""
        self._fenced = reason
        for client in self._clients.values():
            client.fence(reason)

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()
        self._clients.clear()
        if self._curl_pool is not None:
            await self._curl_pool.aclose()
            self._curl_pool = None
