"""The secure port: health checks, readiness, liveness, metrics, configz.

HTTPS on ``--bind-address:--secure-port`` (default ``0.0.0.0:10258``; 0 turns it
off) with a self-signed certificate unless ``--tls-cert-file``/``--tls-private-key-file``
or ``--cert-dir`` are given.

* ``/healthz``: every registered check (``leaderElection`` when electing, one per
  started controller, named by its canonical name; ``ping`` when there is none);
  ``?verbose`` lists them, ``?exclude=<name>`` skips one, ``/healthz/<name>``
  serves one; a failing check gives 500, as upstream.
* ``/livez`` (the process serves) and ``/readyz`` (controllers started and
  caches synced): not upstream (404 there) but what operators' probes expect.
  ``/readyz?verbose`` also lists conditions that never fail readiness, such as
  ``node-deletion-guard`` while the node deletion guard holds deletions.
* ``/metrics`` (Prometheus text) and ``/configz`` (the effective configuration).

Every request goes through delegated authentication and authorisation
(:mod:`kube_ccm.app.serving.delegated`): the health paths are always allowed, as
upstream's ``--authorization-always-allow-paths``; ``/metrics`` and ``/configz``
need a user the API server authorises for that non-resource URL (401 for
rejected credentials, 403 for a user without the right, 500 when the API server
cannot be asked).
"""

from __future__ import annotations

import inspect
import json
import logging
import ssl
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web

from kube_ccm.app.serving.delegated import (
    ANONYMOUS_USER,
    Authenticator,
    Authorizer,
    UnauthenticatedError,
    UserInfo,
    http_verb,
)
from kube_ccm.runtime.metrics import Metrics

log = logging.getLogger(__name__)

HealthCheck = Callable[[], bool]
ReadinessInfo = Callable[[], tuple[bool, str] | Awaitable[tuple[bool, str]]]
"""A condition for ``/readyz?verbose``: (fine, what is wrong), now or awaited."""


class HealthChecks:
    """Named checks, registered as controllers start."""

    def __init__(self) -> None:
        self._checks: dict[str, HealthCheck] = {}
        self._informational: dict[str, Callable[[], tuple[bool, str]]] = {}
        self._readiness_info: dict[str, ReadinessInfo] = {}
        self.ready: Callable[[], bool] = lambda: False

    def add(self, name: str, check: HealthCheck) -> None:
        self._checks[name] = check

    def add_informational(self, name: str, check: Callable[[], tuple[bool, str]]) -> None:
        """A check shown on ``/healthz/<name>`` and in ``/healthz?verbose`` that never
        fails ``/healthz`` itself (liveness): restarting the CCM would not mend it."""
        self._informational[name] = check

    def informational(self) -> list[tuple[str, bool, str]]:
        return [(name, *check()) for name, check in self._informational.items()]

    def add_readiness_info(self, name: str, check: ReadinessInfo) -> None:
        """A condition listed in ``/readyz?verbose`` that never fails ``/readyz``: the
        node deletion guard's (failing the leader's readiness would change nothing, and
        would take a standby's Service endpoint away for no reason)."""
        self._readiness_info[name] = check

    async def readiness_info(self) -> list[tuple[str, bool, str]]:
        found = []
        for name, check in self._readiness_info.items():
            try:
                result = check()
                ok, reason = await result if inspect.isawaitable(result) else result
            except Exception as exc:
                log.warning("readiness condition %s could not be read: %s", name, exc)
                ok, reason = False, "unknown: it could not be read (see the log)"
            found.append((name, ok, reason))
        return found

    def names(self) -> list[str]:
        return list(self._checks) or ["ping"]

    def run(self, name: str) -> bool:
        check = self._checks.get(name)
        if check is None:
            return name == "ping" and not self._checks
        try:
            return bool(check())
        except Exception:
            log.exception("health check %s raised", name)
            return False


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _peer_certificate(request: web.Request) -> bytes | None:
    transport = request.transport
    ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
    if ssl_object is None:
        return None
    der: bytes | None = ssl_object.getpeercert(binary_form=True)
    return der


class HttpsListener:
    """An aiohttp application served over TLS on ``bind_address:port``: the start and
    stop the secure port and the webhook server share."""

    def __init__(self, *, bind_address: str, port: int, ssl_context: ssl.SSLContext) -> None:
        self._bind_address = bind_address
        self._port = port
        self._ssl = ssl_context
        self._runner: web.AppRunner | None = None

    async def _listen(self, app: web.Application) -> None:
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._bind_address, self._port, ssl_context=self._ssl)
        await site.start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


class SecureServer(HttpsListener):
    def __init__(
        self,
        checks: HealthChecks,
        metrics: Metrics,
        configz: Callable[[], Mapping[str, Any]],
        *,
        bind_address: str,
        port: int,
        ssl_context: ssl.SSLContext,
        authenticator: Authenticator | None = None,
        authorizer: Authorizer | None = None,
    ) -> None:
        """Without an authorizer only the always-allowed health paths are served."""
        super().__init__(bind_address=bind_address, port=port, ssl_context=ssl_context)
        self._checks = checks
        self._metrics = metrics
        self._configz = configz
        self._authenticator = authenticator or Authenticator()
        if authenticator is not None:
            authenticator.configure(ssl_context)
        self._authorizer = authorizer or Authorizer(
            always_allow_paths=("/healthz", "/readyz", "/livez", "/healthz/*"), reviewer=None
        )
        app = web.Application(middlewares=[self._authorize])
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/healthz/{name}", self._healthz_one)
        app.router.add_get("/livez", self._livez)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics_handler)
        app.router.add_get("/configz", self._configz_handler)
        self._app = app

    async def start(self) -> None:
        await self._listen(self._app)
        log.info("serving securely on %s:%d", self._bind_address, self._port)

    async def _healthz(self, request: web.Request) -> web.Response:
        excluded = set(request.query.getall("exclude", []))
        lines, failed = [], False
        for name in self._checks.names():
            if name in excluded:
                lines.append(f"[+]{name} excluded: ok")
                continue
            ok = self._checks.run(name)
            failed |= not ok
            lines.append(f"[+]{name} ok" if ok else f"[-]{name} failed: reason withheld")
        for name, ok, _reason in self._checks.informational():
            lines.append(
                f"[+]{name} ok"
                if ok
                else f"[-]{name} failed: reason withheld (not counted for liveness)"
            )
        if failed:
            return web.Response(status=500, text="\n".join([*lines, "healthz check failed"]) + "\n")
        if "verbose" in request.query:
            return web.Response(text="\n".join([*lines, "healthz check passed"]) + "\n")
        return web.Response(text="ok")

    async def _healthz_one(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        for informational, ok, _reason in self._checks.informational():
            if informational == name:
                if ok:
                    return web.Response(text="ok")
                # Health paths are open to anyone: the reason goes to the log only.
                return web.Response(status=500, text=f"[-]{name} failed: reason withheld\n")
        if name not in self._checks.names():
            return web.Response(status=404, text=f"no health check named {name!r}\n")
        if self._checks.run(name):
            return web.Response(text="ok")
        return web.Response(status=500, text=f"[-]{name} failed\n")

    async def _livez(self, _request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _readyz(self, request: web.Request) -> web.Response:
        ready = self._checks.ready()
        if "verbose" not in request.query:
            if ready:
                return web.Response(text="ok")
            return web.Response(
                status=500, text="not ready: controllers not started or caches not synced\n"
            )
        lines = [
            "[+]caches-synced ok"
            if ready
            else "[-]caches-synced failed: controllers not started or caches not synced"
        ]
        for name, ok, reason in await self._checks.readiness_info():
            lines.append(
                f"[+]{name} ok" if ok else f"[-]{name} {reason} (not counted for readiness)"
            )
        if ready:
            return web.Response(text="\n".join([*lines, "readyz check passed"]) + "\n")
        return web.Response(status=500, text="\n".join([*lines, "readyz check failed"]) + "\n")

    async def _metrics_handler(self, _request: web.Request) -> web.Response:
        return web.Response(
            body=await self._metrics.served(),
            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
        )

    async def _configz_handler(self, _request: web.Request) -> web.Response:
        return web.Response(
            text=json.dumps(self._configz(), indent=2, default=str),
            content_type="application/json",
        )

    @web.middleware
    async def _authorize(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Authenticate, then authorise, every request, as upstream's secure serving chain does."""
        path = request.path
        user: UserInfo = ANONYMOUS_USER
        try:
            user = await self._authenticator.authenticate(
                _peer_certificate(request), request.headers
            )
        except UnauthenticatedError as exc:
            log.info("secure port: rejected credentials for %s: %s", path, exc)
            return web.Response(status=401, text="Unauthorized\n")
        except Exception as exc:
            log.warning("secure port: authentication of a request for %s failed: %s", path, exc)
            return web.Response(status=401, text="Unauthorized\n")
        verb = http_verb(request.method)
        try:
            decision = await self._authorizer.authorize(user, verb, path)
        except Exception as exc:
            log.warning("secure port: authorization of %s for %s failed: %s", path, user.name, exc)
            return web.Response(
                status=500, text=f"Internal Server Error: authorization check failed: {exc}\n"
            )
        if not decision.allowed:
            reason = f": {decision.reason}" if decision.reason else ""
            return web.Response(
                status=403,
                text=f'forbidden: User "{user.name}" cannot {verb} path "{path}"{reason}\n',
            )
        return await handler(request)
