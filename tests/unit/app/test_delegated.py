"""Delegated authentication and authorisation on the secure port (§8.6).

The API server is a mock transport answering TokenReviews and SubjectAccessReviews;
the secure port is a real HTTPS listener, reached with and without client
certificates and bearer tokens.
"""

from __future__ import annotations

import json
import socket
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import pytest

from kube_ccm.app.serving.certs import serving_context
from kube_ccm.app.serving.delegated import (
    Authenticator,
    Authorizer,
    AuthSetupError,
    DelegatedAuthConfig,
    RequestHeaderConfig,
    build_authenticator,
)
from kube_ccm.app.serving.server import HealthChecks, SecureServer
from kube_ccm.runtime.client import KubeClient
from kube_ccm.runtime.metrics import Metrics
from kube_ccm.runtime.transport import Request, Response
from kube_ccm.testing.pki import CertificateAuthority, KeyPair
from kube_ccm.testing.transport import MockTransport, json_response

GOOD_TOKEN = "good-token"


@dataclass
class FakeApiServer:
    """TokenReview: GOOD_TOKEN is user ``alice``; SubjectAccessReview: ``allow`` decides."""

    allow: Callable[[dict[str, Any]], bool] = lambda spec: spec["user"] == "alice"
    configmap: dict[str, str] | None = None
    fail_reviews: bool = False
    token_reviews: list[str] = field(default_factory=list)
    access_reviews: list[dict[str, Any]] = field(default_factory=list)

    def handle(self, request: Request) -> Response:
        path = request.path
        if path.endswith("/configmaps/extension-apiserver-authentication"):
            if self.configmap is None:
                return json_response(403, {"kind": "Status", "code": 403, "message": "no"})
            return json_response(200, {"data": self.configmap})
        if self.fail_reviews:
            return json_response(503, {"kind": "Status", "code": 503, "message": "down"})
        body = json.loads(request.content or b"")
        if path.endswith("/tokenreviews"):
            token = body["spec"]["token"]
            self.token_reviews.append(token)
            status: dict[str, Any] = (
                {"authenticated": True, "user": {"username": "alice", "groups": ["devs"]}}
                if token == GOOD_TOKEN
                else {"authenticated": False, "error": "invalid bearer token"}
            )
            return json_response(201, {**body, "status": status})
        if path.endswith("/subjectaccessreviews"):
            spec = body["spec"]
            self.access_reviews.append(spec)
            allowed = self.allow(spec)
            reason = "" if allowed else "no RBAC rule"
            return json_response(201, {**body, "status": {"allowed": allowed, "reason": reason}})
        return json_response(404)

    def client(self) -> KubeClient:
        return KubeClient(MockTransport(self.handle, server="https://api.invalid"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Served:
    base: str
    api: FakeApiServer
    ca: CertificateAuthority
    proxy_ca: CertificateAuthority
    tmp: Path

    async def get(
        self, path: str, *, token: str = "", cert: KeyPair | None = None, **headers: str
    ) -> httpx2.Response:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # self-signed serving cert: not what we test
        if cert is not None:
            cert_path, key_path = self.tmp / "client.crt", self.tmp / "client.key"
            cert.write(cert_path, key_path)
            context.load_cert_chain(cert_path, key_path)
        if token:
            headers["Authorization"] = f"Bearer {token}"
        async with httpx2.AsyncClient(verify=context) as client:
            return await client.get(f"{self.base}{path}", headers=headers)


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    api = FakeApiServer()
    ca, proxy_ca = CertificateAuthority("client-ca"), CertificateAuthority("front-proxy-ca")
    reviewer = api.client()
    authenticator = Authenticator(
        client_ca_pem=ca.cert_pem,
        request_header=RequestHeaderConfig(
            proxy_ca.cert_pem,
            ("front-proxy-client",),
            ("X-Remote-User",),
            ("X-Remote-Group",),
            ("X-Remote-Extra-",),
        ),
        token_reviewer=reviewer,
    )
    authorizer = Authorizer(
        always_allow_paths=("/healthz", "/readyz", "/livez", "/debug/*"), reviewer=reviewer
    )
    context, _ = serving_context(cert_dir=str(tmp_path / "serving"))
    port = free_port()
    server = SecureServer(
        HealthChecks(),
        Metrics(),
        lambda: {"kind": "CloudControllerManagerConfiguration"},
        bind_address="127.0.0.1",
        port=port,
        ssl_context=context,
        authenticator=authenticator,
        authorizer=authorizer,
    )
    await server.start()
    try:
        yield Served(f"https://127.0.0.1:{port}", api, ca, proxy_ca, tmp_path)
    finally:
        await server.stop()
        await reviewer.aclose()


async def test_health_is_open_and_metrics_is_closed_to_anonymous(served: Served) -> None:
    assert (await served.get("/healthz")).status_code == 200
    assert (await served.get("/livez")).status_code == 200
    refused = await served.get("/metrics")
    assert refused.status_code == 403
    assert 'User "system:anonymous" cannot get path "/metrics"' in refused.text
    assert served.api.access_reviews[-1]["groups"] == ["system:unauthenticated"]
    assert (await served.get("/configz")).status_code == 403


async def test_an_authorised_token_reads_metrics(served: Served) -> None:
    response = await served.get("/metrics", token=GOOD_TOKEN)
    assert response.status_code == 200
    assert served.api.access_reviews[-1] == {
        "user": "alice",
        "groups": ["devs"],
        "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
    }


async def test_reviews_are_cached(served: Served) -> None:
    for _ in range(3):
        assert (await served.get("/metrics", token=GOOD_TOKEN)).status_code == 200
    assert served.api.token_reviews == [GOOD_TOKEN]
    assert len(served.api.access_reviews) == 1


async def test_a_rejected_token_is_401_even_on_health_paths(served: Served) -> None:
    assert (await served.get("/metrics", token="stolen")).status_code == 401
    # Upstream authenticates before the always-allow check, so a bad token is 401 everywhere.
    assert (await served.get("/healthz", token="stolen")).status_code == 401


async def test_an_authenticated_user_without_the_right_is_403(served: Served) -> None:
    served.api.allow = lambda spec: False
    response = await served.get("/metrics", token=GOOD_TOKEN)
    assert response.status_code == 403
    assert 'User "alice" cannot get path "/metrics": no RBAC rule' in response.text


async def test_client_certificate_user_and_groups(served: Served) -> None:
    served.api.allow = lambda spec: spec["user"] == "prometheus"
    cert = served.ca.issue("prometheus", organizations=("monitoring",), client=True)
    assert (await served.get("/metrics", cert=cert)).status_code == 200
    assert served.api.access_reviews[-1]["groups"] == ["monitoring", "system:authenticated"]


async def test_system_masters_needs_no_review(served: Served) -> None:
    cert = served.ca.issue("admin", organizations=("system:masters",), client=True)
    assert (await served.get("/configz", cert=cert)).status_code == 200
    assert served.api.access_reviews == []


async def test_front_proxy_speaks_for_a_user(served: Served) -> None:
    served.api.allow = lambda spec: spec["user"] == "carol"
    proxy = served.proxy_ca.issue("front-proxy-client", client=True)
    response = await served.get(
        "/metrics", cert=proxy, **{"X-Remote-User": "carol", "X-Remote-Group": "ops"}
    )
    assert response.status_code == 200
    assert served.api.access_reviews[-1]["groups"] == ["ops"]


async def test_a_proxy_certificate_with_a_name_not_allowed_is_ignored(served: Served) -> None:
    served.api.allow = lambda spec: spec["user"] == "carol"
    impostor = served.proxy_ca.issue("someone-else", client=True)
    response = await served.get("/metrics", cert=impostor, **{"X-Remote-User": "carol"})
    assert response.status_code == 403
    assert "system:anonymous" in response.text


async def test_always_allow_prefix(served: Served) -> None:
    # /debug/* is always allowed: reaching the (absent) handler gives 404, not 403.
    assert (await served.get("/debug/anything")).status_code == 404
    assert (await served.get("/debugger")).status_code == 403


async def test_api_server_unreachable_is_500_not_allowed(served: Served) -> None:
    served.api.fail_reviews = True
    response = await served.get("/metrics")
    assert response.status_code == 500
    assert "authorization check failed" in response.text
    assert (await served.get("/healthz")).status_code == 200


async def test_configmap_lookup_supplies_the_client_ca() -> None:
    ca = CertificateAuthority("cluster-ca")
    api = FakeApiServer(configmap={"client-ca-file": ca.cert_pem.decode()})
    client = api.client()
    try:
        authenticator = await build_authenticator(DelegatedAuthConfig(), client)
        assert ca.cert_pem in authenticator.verify_pem
    finally:
        await client.aclose()


async def test_configmap_lookup_failure_stops_the_daemon_unless_tolerated() -> None:
    api = FakeApiServer(configmap=None)
    client = api.client()
    try:
        with pytest.raises(AuthSetupError, match="extension-apiserver-authentication-reader"):
            await build_authenticator(DelegatedAuthConfig(), client)
        tolerant = DelegatedAuthConfig(authentication_tolerate_lookup_failure=True)
        assert (await build_authenticator(tolerant, client)).verify_pem == b""
        skipped = DelegatedAuthConfig(authentication_skip_lookup=True)
        assert (await build_authenticator(skipped, client)).verify_pem == b""
    finally:
        await client.aclose()


async def test_an_unreadable_client_ca_file_says_which_flag(tmp_path: Path) -> None:
    config = DelegatedAuthConfig(client_ca_file=str(tmp_path / "missing.crt"))
    with pytest.raises(AuthSetupError, match="--client-ca-file"):
        await build_authenticator(config, None)
