"""A fake of the DigitalOcean API (``/v2``), for tests, written from DigitalOcean's
public API reference (github.com/digitalocean/openapi, ``specification/``).

    with FakeDigitalOcean(activation_delay=2.0) as fake:
        droplet = fake.add_droplet("node-1")      # running, with VPC, public IPv4 and IPv6
        pydo.aio.Client(fake.token, endpoint=fake.url)   # what the provider is given

It serves the endpoints the provider uses, on 127.0.0.1 on an event loop of its own
in a daemon thread (so a test's loop stays the test's, and a daemon subprocess can
reach it):

- droplets: ``GET /v2/droplets`` (``tag_name``, ``name``, ``page``, ``per_page`` up to
  200, ``links.pages`` and ``meta.total``), ``GET /v2/droplets/{id}``;
- load balancers: ``POST``/``GET /v2/load_balancers``, ``GET``/``PUT``/``DELETE
  /v2/load_balancers/{id}``; a new one is ``status: new`` without an IP for
  ``activation_delay`` seconds, then ``active`` (0: active at once); the request body
  is checked as the reference says (required fields, enums, ranges, ``droplet_ids``
  and ``tag`` mutually exclusive, a known region and certificate) and refused with
  ``422 unprocessable_entity``;
- ``GET /v2/certificates/{id}``, ``GET /v2/regions`` and ``GET /v2/account`` (the
  token's user and team);
- a second team: :attr:`FakeDigitalOcean.other_team_token` is a valid token of another
  team, which sees none of the droplets, load balancers and certificates made here
  (404 for each, empty lists), as a token of the wrong team does;
- errors as the reference's bodies (``{"id": ..., "message": ..., "request_id": ...}``):
  401 without a known bearer token, 403 for a write with a read-only token, 404;
- rate limiting per token: every answer carries ``ratelimit-limit``,
  ``ratelimit-remaining`` and ``ratelimit-reset`` (a sliding hour, ``rate_limit``
  requests), and 429 ``too_many_requests`` once it is spent.

:attr:`FakeDigitalOcean.calls` counts the requests by operation (``GET
/v2/droplets/{id}``), which ``benchmarks/digitalocean_calls.py`` reads.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ipaddress
import itertools
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from aiohttp import web

__all__ = ["FakeDigitalOcean", "RateLimit"]

JSON = dict[str, Any]
TOKEN = "dop_v1_fake_read_write"
READ_ONLY_TOKEN = "dop_v1_fake_read_only"
OTHER_TEAM_TOKEN = "dop_v1_fake_other_team"
TEAM = {"uuid": "5df3e3004a4b1a2c3d4e5f6a7b8c9d0e1f2a3b4c", "name": "cluster team"}
OTHER_TEAM = {"uuid": "9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b", "name": "another team"}
REGIONS = ("ams3", "blr1", "fra1", "lon1", "nyc1", "nyc3", "sfo3", "sgp1", "syd1", "tor1")
_MAX_PER_PAGE = 200
_HOUR = 3600.0

_ENTRY_PROTOCOLS = ("http", "https", "http2", "http3", "tcp", "udp")
_TARGET_PROTOCOLS = ("http", "https", "http2", "tcp", "udp")


class _RefusedError(Exception):
    def __init__(self, status: int, error_id: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error_id = error_id
        self.message = message


def _invalid(message: str) -> _RefusedError:
    return _RefusedError(422, "unprocessable_entity", message)


@dataclass
class RateLimit:
    """DigitalOcean's limit per token: ``limit`` requests in any hour."""

    limit: int = 5000
    window: float = _HOUR
    stamps: dict[str, collections.deque[float]] = field(default_factory=dict)

    def take(self, token: str, now: float) -> tuple[bool, dict[str, str]]:
        stamps = self.stamps.setdefault(token, collections.deque())
        while stamps and stamps[0] <= now - self.window:
            stamps.popleft()
        allowed = len(stamps) < self.limit
        if allowed:
            stamps.append(now)
        reset = (stamps[0] + self.window) if stamps else now
        headers = {
            "ratelimit-limit": str(self.limit),
            "ratelimit-remaining": str(max(0, self.limit - len(stamps))),
            "ratelimit-reset": str(int(time.time() + (reset - now))),
        }
        return allowed, headers


class FakeDigitalOcean:
    """The fake API; see the module's docstring. Every method is thread-safe."""

    def __init__(
        self,
        *,
        activation_delay: float = 0.0,
        rate_limit: int = 5000,
        regions: tuple[str, ...] = REGIONS,
    ) -> None:
        self.token = TOKEN
        self.read_only_token = READ_ONLY_TOKEN
        self.other_team_token = OTHER_TEAM_TOKEN
        self.activation_delay = activation_delay
        self.rate = RateLimit(limit=rate_limit)
        self.regions = regions
        self.droplets: dict[int, JSON] = {}
        self.load_balancers: dict[str, JSON] = {}
        self.certificates: dict[str, JSON] = {}
        self.calls: collections.Counter[str] = collections.Counter()
        self.outage = 0
        """When not 0, every request is answered with this status (an outage)."""
        self._created: dict[str, float] = {}
        self._lock = threading.RLock()
        self._ids = itertools.count(3164444)
        self._addresses = itertools.count(10)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self.url = ""

    # -- lifecycle --------------------------------------------------------------------

    def start(self) -> FakeDigitalOcean:
        loop = asyncio.new_event_loop()
        ready = threading.Event()
        self._loop = loop

        def serve() -> None:
            asyncio.set_event_loop(loop)
            loop.run_until_complete(self._serve())
            ready.set()
            loop.run_forever()

        self._thread = threading.Thread(target=serve, name="fakedo", daemon=True)
        self._thread.start()
        if not ready.wait(30) or not self.url:
            raise RuntimeError("the fake DigitalOcean API did not start within 30 s")
        return self

    async def _serve(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/v2/{path:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server: Any = site._server
        port = server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        loop, self._loop = self._loop, None
        if loop is None:
            return
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)
        loop.close()

    def __enter__(self) -> FakeDigitalOcean:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- shaping the cloud ------------------------------------------------------------

    def add_droplet(
        self,
        name: str,
        *,
        region: str = "nyc3",
        size: str = "s-2vcpu-4gb",
        status: str = "active",
        public: bool = True,
        ipv6: bool = True,
        tags: tuple[str, ...] = (),
    ) -> JSON:
        with self._lock:
            droplet_id = next(self._ids)
            n = next(self._addresses)
            v4 = [
                {
                    "ip_address": f"10.{n // 250 % 250}.{n % 250}.{2 + n % 200}",
                    "netmask": "255.255.0.0",
                    "gateway": "10.0.0.1",
                    "type": "private",
                }
            ]
            if public:
                v4.append(
                    {
                        "ip_address": f"198.51.{n // 250 % 250}.{n % 250 + 1}",
                        "netmask": "255.255.240.0",
                        "gateway": "198.51.0.1",
                        "type": "public",
                    }
                )
            v6 = (
                [
                    {
                        "ip_address": str(ipaddress.IPv6Address(f"2604:a880:800:10::{n:x}:1")),
                        "netmask": 64,
                        "gateway": "2604:a880:800:10::1",
                        "type": "public",
                    }
                ]
                if ipv6
                else []
            )
            droplet = {
                "id": droplet_id,
                "name": name,
                "memory": 4096,
                "vcpus": 2,
                "disk": 80,
                "locked": False,
                "status": status,
                "created_at": "2026-11-26T17:00:00Z",
                "features": ["private_networking"] + (["ipv6"] if ipv6 else []),
                "size_slug": size,
                "networks": {"v4": v4, "v6": v6},
                "region": _region(region),
                "tags": list(tags),
                "vpc_uuid": "760e09ef-dc84-11e8-981e-3cfdfeaae000",
            }
            self.droplets[droplet_id] = droplet
            return droplet

    def set_droplet_status(self, droplet_id: int, status: str) -> None:
        with self._lock:
            self.droplets[droplet_id]["status"] = status

    def delete_droplet(self, droplet_id: int) -> None:
        with self._lock:
            self.droplets.pop(droplet_id, None)

    def add_certificate(self, name: str, certificate_type: str = "custom") -> str:
        with self._lock:
            certificate_id = str(uuid.uuid4())
            self.certificates[certificate_id] = {
                "id": certificate_id,
                "name": name,
                "not_after": "2027-02-28T00:00:00Z",
                "sha1_fingerprint": "dfcc9f57d86bf58e321c2c6c31c7a971be244ac7",
                "created_at": "2026-11-26T17:00:00Z",
                "dns_names": [],
                "state": "verified",
                "type": certificate_type,
            }
            return certificate_id

    def load_balancer(self, lb_id: str) -> JSON | None:
        with self._lock:
            found = self.load_balancers.get(lb_id)
            return None if found is None else self._current(found)

    def load_balancer_named(self, name: str) -> JSON | None:
        with self._lock:
            for lb in self.load_balancers.values():
                if lb["name"] == name:
                    return self._current(lb)
        return None

    @contextlib.contextmanager
    def failing(self, status: int = 503) -> Iterator[None]:
        """Every request answered with ``status`` inside the block (an outage)."""
        self.outage = status
        try:
            yield
        finally:
            self.outage = 0

    def reset_calls(self) -> None:
        with self._lock:
            self.calls.clear()

    # -- the API ----------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.Response:
        path = "/" + request.match_info["path"].strip("/")
        with self._lock:
            token = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
            if token not in (self.token, self.read_only_token, self.other_team_token):
                return _error(401, "unauthorized", "Unable to authenticate you", {})
            allowed, headers = self.rate.take(token, time.monotonic())
            operation = f"{request.method} /v2{_template(path)}"
            self.calls[operation] += 1
            if not allowed:
                return _error(429, "too_many_requests", "API rate limit exceeded.", headers)
            if self.outage:
                return _error(self.outage, "service_unavailable", "Service Unavailable", headers)
            if request.method != "GET" and token == self.read_only_token:
                return _error(
                    403,
                    "forbidden",
                    "You do not have permission to perform this action.",
                    headers,
                )
            body: Any = {}
            if request.method in ("POST", "PUT"):
                try:
                    body = await request.json()
                except ValueError:
                    return _error(400, "bad_request", "invalid JSON body", headers)
                if not isinstance(body, dict):
                    return _error(400, "bad_request", "the body must be an object", headers)
            try:
                answer: JSON | None
                if path == "/account" and request.method == "GET":
                    status, answer = 200, _account(token)
                elif token == self.other_team_token and path != "/regions":
                    status, answer = self._other_team(request.method, path, request.query)
                else:
                    status, answer = self._route(request.method, path, request.query, body)
            except _RefusedError as refused:
                return _error(refused.status, refused.error_id, refused.message, headers)
        if answer is None:
            return web.Response(status=status, headers=headers)
        return web.json_response(answer, status=status, headers=headers)

    def _route(self, method: str, path: str, query: Any, body: JSON) -> tuple[int, JSON | None]:
        parts = path.strip("/").split("/")
        match method, parts:
            case "GET", ["droplets"]:
                droplets = list(self.droplets.values())
                if tag := query.get("tag_name"):
                    droplets = [d for d in droplets if tag in d["tags"]]
                if name := query.get("name"):
                    droplets = [d for d in droplets if d["name"] == name]
                return 200, _page("droplets", droplets, query, path)
            case "GET", ["droplets", droplet_id]:
                droplet = self.droplets.get(_int(droplet_id))
                if droplet is None:
                    raise _not_found()
                return 200, {"droplet": droplet}
            case "GET", ["regions"]:
                return 200, _page("regions", [_region(r) for r in self.regions], query, path)
            case "GET", ["certificates", certificate_id]:
                certificate = self.certificates.get(certificate_id)
                if certificate is None:
                    raise _not_found()
                return 200, {"certificate": certificate}
            case "GET", ["load_balancers"]:
                lbs = [self._current(lb) for lb in self.load_balancers.values()]
                return 200, _page("load_balancers", lbs, query, path)
            case "POST", ["load_balancers"]:
                lb = self._validate(body)
                lb_id = str(uuid.uuid4())
                lb.update(id=lb_id, status="new", ip="", ipv6="", created_at=_now())
                self.load_balancers[lb_id] = lb
                self._created[lb_id] = time.monotonic()
                return 202, {"load_balancer": self._current(lb)}
            case "GET", ["load_balancers", lb_id]:
                return 200, {"load_balancer": self._current(self._lb(lb_id))}
            case "PUT", ["load_balancers", lb_id]:
                existing = self._current(self._lb(lb_id))
                lb = self._validate(body)
                for kept in ("id", "status", "ip", "ipv6", "created_at"):
                    lb[kept] = existing[kept]
                self.load_balancers[lb_id] = lb
                return 200, {"load_balancer": self._current(lb)}
            case "DELETE", ["load_balancers", lb_id]:
                self._lb(lb_id)
                del self.load_balancers[lb_id]
                return 204, None
        raise _not_found()

    def _other_team(self, method: str, path: str, query: Any) -> tuple[int, JSON | None]:
        """What another team's token sees: none of this team's objects."""
        key = path.strip("/").split("/")[0]
        if method == "GET" and path.strip("/") in ("droplets", "load_balancers"):
            return 200, _page(key, [], query, path)
        raise _not_found()

    def _lb(self, lb_id: str) -> JSON:
        lb = self.load_balancers.get(lb_id)
        if lb is None:
            raise _not_found()
        return lb

    def _current(self, lb: JSON) -> JSON:
        """The load balancer as it is now: ``active``, with addresses, once its
        activation delay has passed since it was created."""
        if lb["status"] == "new":
            age = time.monotonic() - self._created.get(lb["id"], 0.0)
            if age >= self.activation_delay:
                n = len([x for x in self._created.values() if x <= self._created[lb["id"]]])
                lb["status"] = "active"
                lb["ip"] = f"203.0.113.{n % 250 + 1}"
                if lb.get("network_stack") == "DUALSTACK":
                    lb["ipv6"] = f"2001:db8:1::{n:x}"
        answer = dict(lb)
        answer["region"] = _region(lb["region"])
        return answer

    def _validate(self, body: JSON) -> JSON:
        """The request checked as ``load_balancer_create.yml`` says; the stored load
        balancer, defaults filled in, as the API answers it."""
        region = body.get("region")
        if not region:
            raise _invalid("region is required")
        if region not in self.regions:
            raise _invalid(f"region {region!r} is not a valid region")
        has_ids = body.get("droplet_ids") is not None
        has_tag = body.get("tag") not in (None, "")
        if has_ids and has_tag:
            raise _invalid("droplet_ids and tag are mutually exclusive")
        if not has_ids and not has_tag:
            raise _invalid("one of droplet_ids or tag is required")
        if has_ids:
            ids = body["droplet_ids"]
            if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
                raise _invalid("droplet_ids must be a list of integers")
            unknown = [i for i in ids if i not in self.droplets]
            if unknown:
                raise _invalid(f"droplet(s) {unknown} not found")
        name = body.get("name", "")
        if not isinstance(name, str) or len(name) > 255:
            raise _invalid("name must be a string of at most 255 characters")
        rules = body.get("forwarding_rules")
        if not isinstance(rules, list) or len(rules) < 1:
            raise _invalid("forwarding_rules must have at least 1 item")
        for rule in rules:
            self._check_rule(rule)
        _enum(body, "algorithm", ("round_robin", "least_connections"))
        _enum(body, "size", ("lb-small", "lb-medium", "lb-large"))
        _enum(body, "network", ("EXTERNAL", "INTERNAL"))
        _enum(body, "network_stack", ("IPV4", "DUALSTACK"))
        _enum(body, "type", ("REGIONAL", "REGIONAL_NETWORK", "GLOBAL"))
        _enum(body, "tls_cipher_policy", ("DEFAULT", "STRONG"))
        if body.get("size") and body.get("size_unit"):
            raise _invalid("only one of size and size_unit may be given")
        _range(body, "size_unit", 1, 100)
        _range(body, "http_idle_timeout_seconds", 30, 600)
        health = body.get("health_check") or {}
        if not isinstance(health, dict):
            raise _invalid("health_check must be an object")
        _enum(health, "protocol", ("http", "https", "tcp"), "health_check.")
        _range(health, "port", 1, 65535, "health_check.")
        _range(health, "check_interval_seconds", 3, 300, "health_check.")
        _range(health, "response_timeout_seconds", 3, 300, "health_check.")
        _range(health, "unhealthy_threshold", 2, 10, "health_check.")
        _range(health, "healthy_threshold", 2, 10, "health_check.")
        sticky = body.get("sticky_sessions") or {}
        if not isinstance(sticky, dict):
            raise _invalid("sticky_sessions must be an object")
        _enum(sticky, "type", ("cookies", "none"), "sticky_sessions.")
        if sticky.get("type") == "cookies":
            if not sticky.get("cookie_name"):
                raise _invalid("sticky_sessions.cookie_name is required for cookies")
            if not sticky.get("cookie_ttl_seconds"):
                raise _invalid("sticky_sessions.cookie_ttl_seconds is required for cookies")
        stored: JSON = {
            "name": name,
            "region": region,
            "size_unit": body.get("size_unit") or (None if body.get("size") else 1),
            "size": body.get("size") or "",
            "algorithm": body.get("algorithm") or "round_robin",
            "forwarding_rules": [_rule_defaults(rule) for rule in rules],
            "health_check": {
                "protocol": "http",
                "port": 80,
                "path": "/",
                "check_interval_seconds": 10,
                "response_timeout_seconds": 5,
                "healthy_threshold": 3,
                "unhealthy_threshold": 5,
                **health,
            },
            "sticky_sessions": {"type": "none", **sticky},
            "redirect_http_to_https": bool(body.get("redirect_http_to_https", False)),
            "enable_proxy_protocol": bool(body.get("enable_proxy_protocol", False)),
            "enable_backend_keepalive": bool(body.get("enable_backend_keepalive", False)),
            "http_idle_timeout_seconds": body.get("http_idle_timeout_seconds") or 60,
            "vpc_uuid": body.get("vpc_uuid") or "760e09ef-dc84-11e8-981e-3cfdfeaae000",
            "droplet_ids": sorted(body["droplet_ids"]) if has_ids else [],
            "tag": body.get("tag") or "",
            "tags": list(body.get("tags") or []),
            "network": body.get("network") or "EXTERNAL",
            "network_stack": body.get("network_stack") or "IPV4",
            "type": body.get("type") or "REGIONAL",
            "disable_lets_encrypt_dns_records": bool(
                body.get("disable_lets_encrypt_dns_records", False)
            ),
            "firewall": body.get("firewall") or {"deny": [], "allow": []},
        }
        return stored

    def _check_rule(self, rule: Any) -> None:
        if not isinstance(rule, dict):
            raise _invalid("forwarding_rules items must be objects")
        for required in ("entry_protocol", "entry_port", "target_protocol", "target_port"):
            if required not in rule:
                raise _invalid(f"forwarding_rules.{required} is required")
        _enum(rule, "entry_protocol", _ENTRY_PROTOCOLS, "forwarding_rules.")
        _enum(rule, "target_protocol", _TARGET_PROTOCOLS, "forwarding_rules.")
        _range(rule, "entry_port", 1, 65535, "forwarding_rules.")
        _range(rule, "target_port", 1, 65535, "forwarding_rules.")
        if (rule["entry_protocol"] == "udp") != (rule["target_protocol"] == "udp"):
            raise _invalid("udp must be both the entry and the target protocol")
        certificate_id = rule.get("certificate_id") or ""
        passthrough = bool(rule.get("tls_passthrough"))
        secure = rule["entry_protocol"] in ("https", "http2", "http3")
        if secure and not certificate_id and not passthrough:
            raise _invalid(
                f"forwarding rule for port {rule['entry_port']} needs a certificate_id "
                "or tls_passthrough"
            )
        if certificate_id and certificate_id not in self.certificates:
            raise _invalid(f"certificate {certificate_id} could not be found")


def _rule_defaults(rule: JSON) -> JSON:
    return {
        "entry_protocol": rule["entry_protocol"],
        "entry_port": rule["entry_port"],
        "target_protocol": rule["target_protocol"],
        "target_port": rule["target_port"],
        "certificate_id": rule.get("certificate_id") or "",
        "tls_passthrough": bool(rule.get("tls_passthrough", False)),
    }


def _enum(body: JSON, key: str, allowed: tuple[str, ...], prefix: str = "") -> None:
    value = body.get(key)
    if value is not None and value not in allowed:
        raise _invalid(f"{prefix}{key} must be one of {', '.join(allowed)}; got {value!r}")


def _range(body: JSON, key: str, low: int, high: int, prefix: str = "") -> None:
    value = body.get(key)
    if value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise _invalid(f"{prefix}{key} must be an integer from {low} to {high}; got {value!r}")


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise _not_found() from None


def _account(token: str) -> JSON:
    """``GET /v2/account``: the token's user, and its team."""
    team = OTHER_TEAM if token == OTHER_TEAM_TOKEN else TEAM
    return {
        "account": {
            "droplet_limit": 25,
            "floating_ip_limit": 3,
            "email": f"ops@{team['name'].replace(' ', '-')}.example",
            "uuid": team["uuid"][:32],
            "email_verified": True,
            "status": "active",
            "status_message": "",
            "team": dict(team),
        }
    }


def _not_found() -> _RefusedError:
    return _RefusedError(404, "not_found", "The resource you were accessing could not be found.")


def _error(status: int, error_id: str, message: str, headers: dict[str, str]) -> web.Response:
    body = {"id": error_id, "message": message, "request_id": str(uuid.uuid4())}
    return web.json_response(body, status=status, headers=headers)


def _template(path: str) -> str:
    parts = path.strip("/").split("/")
    return "/" + "/".join(
        part if i == 0 else ("{id}" if i == 1 else part) for i, part in enumerate(parts)
    )


def _page(key: str, items: list[JSON], query: Any, path: str) -> JSON:
    try:
        page = max(1, int(query.get("page", "1")))
        per_page = min(_MAX_PER_PAGE, max(1, int(query.get("per_page", "20"))))
    except ValueError:
        raise _invalid("page and per_page must be integers") from None
    start = (page - 1) * per_page
    last = max(1, -(-len(items) // per_page))
    pages: JSON = {}
    base = f"https://api.digitalocean.com/v2{path}?per_page={per_page}&page="
    if page < last:
        pages.update(next=f"{base}{page + 1}", last=f"{base}{last}")
    if page > 1:
        pages.update(first=f"{base}1", prev=f"{base}{page - 1}")
    return {
        key: items[start : start + per_page],
        "links": {"pages": pages},
        "meta": {"total": len(items)},
    }


def _region(slug: str) -> JSON:
    return {
        "slug": slug,
        "name": slug.upper(),
        "sizes": ["s-1vcpu-1gb", "s-2vcpu-4gb"],
        "available": True,
        "features": ["private_networking", "ipv6", "metadata"],
    }


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
