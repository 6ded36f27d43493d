"""Delegated authentication and authorisation on the secure port.

What the API-server library does for upstream's CCM, in the same order:

1. **Authentication**, first match wins:
   * a client certificate signed by the request-header CA whose common name is
     allowed (``--requestheader-allowed-names``, empty = any): the user comes
     from the ``X-Remote-User``-style headers (a front proxy speaking for a user);
   * a client certificate signed by the client CA: user = CN, groups = O;
   * ``Authorization: Bearer <token>``: a ``TokenReview`` against the API server,
     answers cached for ``--authentication-token-webhook-cache-ttl``; a token the
     API server rejects is a 401, as upstream;
   * nothing: ``system:anonymous`` in ``system:unauthenticated``.

   The CAs come from ``--client-ca-file``/``--requestheader-client-ca-file`` and,
   unless ``--authentication-skip-lookup``, from the ``kube-system/
   extension-apiserver-authentication`` ConfigMap that every API server
   publishes. A failed lookup stops the daemon unless
   ``--authentication-tolerate-lookup-failure``.

2. **Authorisation**: ``--authorization-always-allow-paths`` (default
   ``/healthz,/readyz,/livez``; a trailing ``*`` matches a prefix) and the group
   ``system:masters`` are allowed; everything else is a ``SubjectAccessReview``
   for the non-resource URL and the lower-cased HTTP verb (``get`` for ``GET``
   and ``HEAD``), allowed answers cached for
   ``--authorization-webhook-cache-authorized-ttl``, denied ones for
   ``-unauthorized-ttl``.

Which credentials ask the API server: ``--authentication-kubeconfig`` /
``--authorization-kubeconfig`` when given; else in-cluster when running in a
Pod; else the daemon's own ``--kubeconfig``. (Upstream falls back to nothing at
that last step, which leaves ``/metrics`` closed to everyone off-cluster; kubeadm
passes the daemon's kubeconfig to both flags, which is what we do by default.)
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import ssl
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from cryptography import x509
from cryptography.x509.oid import NameOID

from kube_ccm.runtime.client import KubeClient
from kube_ccm.runtime.resources import (
    CONFIG_MAPS,
    SUBJECT_ACCESS_REVIEWS,
    TOKEN_REVIEWS,
    TypedClient,
)

log = logging.getLogger(__name__)

ANONYMOUS: Final = "system:anonymous"
UNAUTHENTICATED: Final = "system:unauthenticated"
AUTHENTICATED: Final = "system:authenticated"
MASTERS: Final = "system:masters"
AUTH_CONFIGMAP_NAMESPACE: Final = "kube-system"
AUTH_CONFIGMAP_NAME: Final = "extension-apiserver-authentication"


@dataclass(frozen=True)
class DelegatedAuthConfig:
    """The delegated authentication/authorization flags; defaults are upstream's."""

    authentication_kubeconfig: str = ""
    authentication_skip_lookup: bool = False
    authentication_tolerate_lookup_failure: bool = False
    authentication_token_webhook_cache_ttl: float = 10.0
    client_ca_file: str = ""
    requestheader_client_ca_file: str = ""
    requestheader_allowed_names: tuple[str, ...] = ()
    requestheader_username_headers: tuple[str, ...] = ("x-remote-user",)
    requestheader_group_headers: tuple[str, ...] = ("x-remote-group",)
    requestheader_extra_headers_prefix: tuple[str, ...] = ("x-remote-extra-",)
    requestheader_uid_headers: tuple[str, ...] = ()
    authorization_kubeconfig: str = ""
    authorization_always_allow_paths: tuple[str, ...] = ("/healthz", "/readyz", "/livez")
    authorization_webhook_cache_authorized_ttl: float = 10.0
    authorization_webhook_cache_unauthorized_ttl: float = 10.0


class AuthSetupError(Exception):
    """Delegated authentication could not be set up; the message says what to do."""


@dataclass(frozen=True)
class UserInfo:
    name: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


ANONYMOUS_USER: Final = UserInfo(ANONYMOUS, (UNAUTHENTICATED,))


class UnauthenticatedError(Exception):
    """Credentials were presented and rejected (HTTP 401)."""


@dataclass(frozen=True)
class RequestHeaderConfig:
    """Who may act as an authenticating front proxy, and the headers it uses."""

    ca_pem: bytes
    allowed_names: tuple[str, ...]
    username_headers: tuple[str, ...]
    group_headers: tuple[str, ...]
    extra_headers_prefix: tuple[str, ...]
    uid_headers: tuple[str, ...] = ()


@dataclass
class _Cached:
    value: Any
    expires: float


class _TTLCache:
    """A small expiring map; entries past their time are dropped on read."""

    def __init__(self, max_entries: int = 4096) -> None:
        self._entries: dict[str, _Cached] = {}
        self._max = max_entries

    def get(self, key: str) -> Any | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry.expires <= time.monotonic():
            del self._entries[key]
            return None
        return entry.value

    def put(self, key: str, value: Any, ttl: float) -> None:
        if ttl <= 0:
            return
        if len(self._entries) >= self._max:
            now = time.monotonic()
            self._entries = {k: v for k, v in self._entries.items() if v.expires > now}
            if len(self._entries) >= self._max:
                self._entries.pop(next(iter(self._entries)))
        self._entries[key] = _Cached(value, time.monotonic() + ttl)


def _certificates(pem: bytes) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(pem) if pem.strip() else []


def _issued_by_any(cert: x509.Certificate, cas: Sequence[x509.Certificate]) -> bool:
    for ca in cas:
        try:
            cert.verify_directly_issued_by(ca)
        except Exception:
            continue
        return True
    return False


def _name_values(name: x509.Name, oid: x509.ObjectIdentifier) -> list[str]:
    return [str(attribute.value) for attribute in name.get_attributes_for_oid(oid)]


class Authenticator:
    """Turns a request's TLS peer and headers into a user (see the module doc)."""

    def __init__(
        self,
        *,
        client_ca_pem: bytes = b"",
        request_header: RequestHeaderConfig | None = None,
        token_reviewer: KubeClient | None = None,
        token_cache_ttl: float = 10.0,
    ) -> None:
        self._client_cas = _certificates(client_ca_pem)
        self._request_header = request_header
        self._proxy_cas = _certificates(request_header.ca_pem) if request_header else []
        self._reviewer = token_reviewer
        self._ttl = token_cache_ttl
        self._cache = _TTLCache()

    @property
    def verify_pem(self) -> bytes:
        """Every CA a client certificate may be signed by (for the TLS context)."""
        from cryptography.hazmat.primitives.serialization import Encoding  # noqa: PLC0415

        return b"".join(ca.public_bytes(Encoding.PEM) for ca in self._client_cas + self._proxy_cas)

    def configure(self, context: ssl.SSLContext) -> None:
        """Ask TLS clients for a certificate (optional) signed by one of our CAs."""
        pem = self.verify_pem
        if pem:
            context.load_verify_locations(cadata=pem.decode())
            context.verify_mode = ssl.CERT_OPTIONAL

    async def authenticate(self, peer_der: bytes | None, headers: Mapping[str, str]) -> UserInfo:
        """The user, ANONYMOUS_USER, or UnauthenticatedError when credentials were rejected."""
        if peer_der:
            user = self._from_certificate(x509.load_der_x509_certificate(peer_der), headers)
            if user is not None:
                return user
        authorization = headers.get("Authorization", "")
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return await self._review_token(token.strip())
        return ANONYMOUS_USER

    def _from_certificate(
        self, cert: x509.Certificate, headers: Mapping[str, str]
    ) -> UserInfo | None:
        proxy = self._request_header
        if proxy is not None and _issued_by_any(cert, self._proxy_cas):
            common_names = _name_values(cert.subject, NameOID.COMMON_NAME)
            if not proxy.allowed_names or any(cn in proxy.allowed_names for cn in common_names):
                user = self._from_request_headers(proxy, headers)
                if user is not None:
                    return user
        if _issued_by_any(cert, self._client_cas):
            names = _name_values(cert.subject, NameOID.COMMON_NAME)
            if names:
                groups = _name_values(cert.subject, NameOID.ORGANIZATION_NAME)
                return UserInfo(names[0], (*groups, AUTHENTICATED))
        return None

    @staticmethod
    def _from_request_headers(
        proxy: RequestHeaderConfig, headers: Mapping[str, str]
    ) -> UserInfo | None:
        name = next((headers[h] for h in proxy.username_headers if headers.get(h)), "")
        if not name:
            return None
        groups: list[str] = []
        extra: dict[str, tuple[str, ...]] = {}
        lowered = [(key.lower(), value) for key, value in headers.items()]
        for header in proxy.group_headers:
            groups += [value for key, value in lowered if key == header.lower()]
        for prefix in proxy.extra_headers_prefix:
            for key, value in lowered:
                if key.startswith(prefix.lower()):
                    extra_key = key.removeprefix(prefix.lower())
                    extra[extra_key] = (*extra.get(extra_key, ()), value)
        uid = next((headers[h] for h in proxy.uid_headers if headers.get(h)), "")
        return UserInfo(name, tuple(groups), uid, extra)

    async def _review_token(self, token: str) -> UserInfo:
        if self._reviewer is None:
            raise UnauthenticatedError("bearer tokens cannot be checked: no API server to ask")
        key = hashlib.sha256(token.encode()).hexdigest()
        cached = self._cache.get(key)
        if cached is None:
            review = await TypedClient(self._reviewer).create(
                TOKEN_REVIEWS,
                {
                    "apiVersion": "authentication.k8s.io/v1",
                    "kind": "TokenReview",
                    "spec": {"token": token},
                },
            )
            status = review.get("status") or {}
            cached = _user_from_review(status)
            self._cache.put(key, cached, self._ttl)
        if isinstance(cached, str):
            raise UnauthenticatedError(cached)
        assert isinstance(cached, UserInfo)
        return cached


def _user_from_review(status: Mapping[str, Any]) -> UserInfo | str:
    """The reviewed user, or the reason the token was rejected."""
    if not status.get("authenticated"):
        return str(status.get("error") or "token rejected by the API server")
    user = status.get("user") or {}
    extra = {k: tuple(v) for k, v in (user.get("extra") or {}).items()}
    return UserInfo(
        str(user.get("username", "")), tuple(user.get("groups") or ()), user.get("uid", ""), extra
    )


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str = ""


class Authorizer:
    """Always-allowed paths and groups, else a SubjectAccessReview (cached)."""

    def __init__(
        self,
        *,
        always_allow_paths: Sequence[str],
        reviewer: KubeClient | None,
        allowed_ttl: float = 10.0,
        denied_ttl: float = 10.0,
    ) -> None:
        self._exact = {p for p in always_allow_paths if not p.endswith("*")}
        self._prefixes = tuple(p[:-1] for p in always_allow_paths if p.endswith("*"))
        self._reviewer = reviewer
        self._allowed_ttl = allowed_ttl
        self._denied_ttl = denied_ttl
        self._cache = _TTLCache()

    def always_allowed(self, path: str) -> bool:
        return path in self._exact or any(path.startswith(p) for p in self._prefixes)

    async def authorize(self, user: UserInfo, verb: str, path: str) -> Decision:
        if self.always_allowed(path) or MASTERS in user.groups:
            return Decision(True)
        if self._reviewer is None:
            return Decision(False, "no authorizer: only the always-allowed paths are served")
        key = json.dumps([user.name, user.groups, user.uid, sorted(user.extra.items()), verb, path])
        cached = self._cache.get(key)
        if cached is not None:
            assert isinstance(cached, Decision)
            return cached
        spec: dict[str, Any] = {
            "user": user.name,
            "groups": list(user.groups),
            "nonResourceAttributes": {"path": path, "verb": verb},
        }
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = {k: list(v) for k, v in user.extra.items()}
        review = await TypedClient(self._reviewer).create(
            SUBJECT_ACCESS_REVIEWS,
            {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": spec,
            },
        )
        status = review.get("status") or {}
        decision = Decision(bool(status.get("allowed")), str(status.get("reason") or ""))
        self._cache.put(key, decision, self._allowed_ttl if decision.allowed else self._denied_ttl)
        return decision


def http_verb(method: str) -> str:
    """The authorisation verb of a non-resource request, as the API server maps it."""
    method = method.upper()
    return {"GET": "get", "HEAD": "get", "POST": "post", "PUT": "put", "PATCH": "patch"}.get(
        method, method.lower()
    )


async def lookup_authentication_configmap(client: KubeClient) -> Mapping[str, str]:
    """The API server's published client CAs and request-header settings."""
    configmap = await TypedClient(client).get(
        CONFIG_MAPS, AUTH_CONFIGMAP_NAME, namespace=AUTH_CONFIGMAP_NAMESPACE
    )
    data = configmap.get("data") or {}
    return {str(k): str(v) for k, v in data.items()}


def _json_list(text: str | None) -> tuple[str, ...]:
    if not text:
        return ()
    try:
        value = json.loads(text)
    except ValueError:
        return ()
    return tuple(str(v) for v in value) if isinstance(value, list) else ()


def _read_ca(path: str, flag: str) -> bytes:
    try:
        pem = open(path, "rb").read()  # noqa: SIM115 (small file, read once)
        _certificates(pem)
    except (OSError, ValueError) as exc:
        raise AuthSetupError(
            f"cannot read {flag}={path}: {exc}; pass a readable PEM CA bundle"
        ) from exc
    return pem


async def build_authenticator(
    config: DelegatedAuthConfig, client: KubeClient | None
) -> Authenticator:
    """The delegated authenticator from the flags and, unless skipped, the cluster's ConfigMap."""
    client_ca = b""
    if config.client_ca_file:
        client_ca = _read_ca(config.client_ca_file, "--client-ca-file")
    proxy_ca = (
        _read_ca(config.requestheader_client_ca_file, "--requestheader-client-ca-file")
        if config.requestheader_client_ca_file
        else b""
    )
    allowed = config.requestheader_allowed_names
    username_headers = config.requestheader_username_headers
    group_headers = config.requestheader_group_headers
    extra_prefix = config.requestheader_extra_headers_prefix
    uid_headers = config.requestheader_uid_headers
    if client is not None and not config.authentication_skip_lookup:
        try:
            data = await asyncio.wait_for(lookup_authentication_configmap(client), timeout=30)
        except Exception as exc:
            message = (
                f"cannot read configmap {AUTH_CONFIGMAP_NAMESPACE}/{AUTH_CONFIGMAP_NAME} for the "
                f"client CAs: {exc}. Grant the daemon the Role "
                "extension-apiserver-authentication-reader (deploy/rbac.yaml does), or pass "
                "--authentication-skip-lookup=true with "
                "--client-ca-file, or --authentication-tolerate-lookup-failure=true"
            )
            if not config.authentication_tolerate_lookup_failure:
                raise AuthSetupError(message) from exc
            log.warning("%s", message)
            data = {}
        if not client_ca:
            client_ca = data.get("client-ca-file", "").encode()
        if not proxy_ca and data.get("requestheader-client-ca-file"):
            proxy_ca = data["requestheader-client-ca-file"].encode()
            allowed = _json_list(data.get("requestheader-allowed-names")) or allowed
            username_headers = (
                _json_list(data.get("requestheader-username-headers")) or username_headers
            )
            group_headers = _json_list(data.get("requestheader-group-headers")) or group_headers
            extra_prefix = (
                _json_list(data.get("requestheader-extra-headers-prefix")) or extra_prefix
            )
            uid_headers = _json_list(data.get("requestheader-uid-headers")) or uid_headers
    try:
        return Authenticator(
            client_ca_pem=client_ca,
            request_header=RequestHeaderConfig(
                proxy_ca, allowed, username_headers, group_headers, extra_prefix, uid_headers
            )
            if proxy_ca
            else None,
            token_reviewer=client,
            token_cache_ttl=config.authentication_token_webhook_cache_ttl,
        )
    except ValueError as exc:
        raise AuthSetupError(f"invalid client CA bundle: {exc}") from exc
