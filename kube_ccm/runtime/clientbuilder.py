"""Kubernetes clients per controller identity (upstream's ControllerClientBuilder, §1.9).

Without ``--use-service-account-credentials`` every identity gets the daemon's
own credentials with the user agent ``<base>/<identity>``, and its own QPS/burst
budget, as client-go gives each rest config its own limiter. The builder keeps
every client it made, so the daemon can fence all of them at once when it must
stop writing (shutdown, lost leadership).
"""

from __future__ import annotations

import httpx2
from lightkube.config import client_adapter
from lightkube.config.kubeconfig import SingleConfig

from kube_ccm.runtime.client import KubeClient, RestClientMetrics
from kube_ccm.runtime.ratelimit import AsyncTokenBucket


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
    ) -> None:
        self._metrics = metrics
        self._config = config
        self._base_user_agent = base_user_agent
        self._qps = qps
        self._burst = burst
        self._timeout = timeout
        self._clients: dict[str, KubeClient] = {}
        self._fenced: str | None = None

    def user_agent(self, name: str) -> str:
        return f"{self._base_user_agent}/{name}" if name else self._base_user_agent

    def config(self, name: str) -> ClientConfigView:
        return ClientConfigView(str(self._config.cluster.server), self.user_agent(name))

    def client(self, name: str) -> KubeClient:
        existing = self._clients.get(name)
        if existing is not None:
            return existing
        params = client_adapter.ConnectionParams(
            timeout=httpx2.Timeout(self._timeout), trust_env=False
        )
        http = client_adapter.AsyncClient(self._config, params)
        limiter = AsyncTokenBucket(self._qps, self._burst) if self._qps > 0 else None
        client = KubeClient(
            http,
            rate_limiter=limiter.acquire if limiter is not None else None,
            user_agent=self.user_agent(name),
            metrics=self._metrics,
        )
        if self._fenced is not None:
            client.fence(self._fenced)
        self._clients[name] = client
        return client

    def fence_all(self, reason: str) -> None:
        """Refuse writes on every client, made so far or later."""
        self._fenced = reason
        for client in self._clients.values():
            client.fence(reason)

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()
        self._clients.clear()
