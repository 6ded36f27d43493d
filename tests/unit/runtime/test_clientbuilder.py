"""Per-controller ServiceAccount tokens (§1.9): created if missing, renewed at 20 %."""

from __future__ import annotations

import datetime
import json

from kube_ccm.runtime.client import KubeClient
from kube_ccm.runtime.clientbuilder import ServiceAccountToken
from kube_ccm.runtime.transport import Request, Response
from kube_ccm.testing.transport import MockTransport, json_response


class FakeApi:
    def __init__(self, clock: list[float]) -> None:
        self.clock = clock
        self.accounts: set[str] = set()
        self.issued: list[str] = []
        self.seen_auth: list[str] = []

    def handle(self, request: Request) -> Response:
        path = request.path
        self.seen_auth.append(request.headers.get("Authorization", ""))
        if path.endswith("/token"):
            lifetime = json.loads(request.content or b"")["spec"]["expirationSeconds"]
            token = f"token-{len(self.issued)}"
            self.issued.append(token)
            expires = datetime.datetime.fromtimestamp(self.clock[0] + lifetime, datetime.UTC)
            stamp = expires.strftime("%Y-%m-%dT%H:%M:%SZ")
            return json_response(201, {"status": {"token": token, "expirationTimestamp": stamp}})
        if request.method == "GET":
            name = path.rsplit("/", 1)[1]
            if name in self.accounts:
                return json_response(200, {"metadata": {"name": name}})
            return json_response(404, {"kind": "Status", "code": 404, "reason": "NotFound"})
        if request.method == "POST":
            self.accounts.add(json.loads(request.content or b"")["metadata"]["name"])
            return json_response(201, {})
        return json_response(405)


async def test_creates_the_account_then_reuses_the_token_until_20_percent_remains() -> None:
    clock = [1_000_000.0]
    api = FakeApi(clock)
    own = KubeClient(MockTransport(api.handle))
    token = ServiceAccountToken(own, "node-controller", lifetime=100, clock=lambda: clock[0])
    assert await token() == "token-0"
    assert api.accounts == {"node-controller"}
    clock[0] += 79  # 21 % left: keep
    assert await token() == "token-0"
    clock[0] += 2  # 19 % left: renew
    assert await token() == "token-1"
    assert token.requests == 2


async def test_a_client_with_a_token_source_sends_it_on_every_request() -> None:
    clock = [1_000_000.0]
    api = FakeApi(clock)
    transport = MockTransport(api.handle)
    own = KubeClient(transport)
    token = ServiceAccountToken(own, "route-controller", lifetime=100, clock=lambda: clock[0])
    controller = KubeClient(transport, token_source=token)
    api.accounts.add("anything")
    await controller.get("/api/v1/namespaces/kube-system/serviceaccounts/anything")
    assert api.seen_auth[-1] == "Bearer token-0"
