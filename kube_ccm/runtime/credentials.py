"""Where a transport gets the kubeconfig user's credentials, and when it refreshes them.

Not the cloud's credentials (those are :mod:`kube_ccm.cloudprovider.credentials`):
these are the Kubernetes API's, applied by both transports
(:mod:`~kube_ccm.runtime.aiohttptransport`, :mod:`~kube_ccm.runtime.curltransport`)
as the ``Authorization`` header. lightkube parses the kubeconfig and builds the TLS
context; :func:`credential_source` turns its user into one of: a static token, a
token file re-read every minute and on a 401 (rotating in-cluster service-account
tokens, as client-go does), an exec credential plugin run again when its token
expires or is refused, or basic auth. Every secret read is registered for
redaction.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
import os
import time
from pathlib import Path
from typing import Protocol

from lightkube.config.models import User, UserExec

from kube_ccm.runtime.redaction import register_secret
from kube_ccm.runtime.transport import CredentialError

_TOKEN_FILE_REFRESH = 60.0  # client-go's cachingTokenSource re-reads the file every minute
_EXEC_API_VERSIONS = frozenset(
    {
        "client.authentication.k8s.io/v1",
        "client.authentication.k8s.io/v1beta1",
        "client.authentication.k8s.io/v1alpha1",
    }
)


class CredentialSource(Protocol):
    """What a transport asks for the ``Authorization`` header of each request."""

    async def header(self) -> str | None:
        """The Authorization header value, or None."""
        ...

    async def refused(self) -> bool:
        """The server answered 401: refresh; True if a retry could succeed."""
        ...


class NoCredentials:
    """No ``Authorization`` header (a kubeconfig user without credentials)."""

    async def header(self) -> str | None:
        return None

    async def refused(self) -> bool:
        return False


class _Static:
    def __init__(self, value: str) -> None:
        self._value = value

    async def header(self) -> str | None:
        return self._value

    async def refused(self) -> bool:
        return False


class _TokenFile:
    """A bearer token in a file that the kubelet rotates (in-cluster credentials)."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._value = ""
        self._read_at = -_TOKEN_FILE_REFRESH

    def _read(self) -> None:
        try:
            token = Path(self._path).read_text().strip()
        except OSError as exc:
            raise CredentialError(
                f"cannot read the bearer token file {self._path}: {exc}; check the "
                "kubeconfig's tokenFile or the mounted service-account token"
            ) from exc
        register_secret(token)
        self._value, self._read_at = f"Bearer {token}", time.monotonic()

    async def header(self) -> str | None:
        if time.monotonic() - self._read_at >= _TOKEN_FILE_REFRESH:
            self._read()
        return self._value

    async def refused(self) -> bool:
        before = self._value
        self._read()
        return self._value != before


class _Exec:
    """A client-go exec credential plugin: run it, cache its token until it expires."""

    def __init__(self, spec: UserExec) -> None:
        if spec.apiVersion not in _EXEC_API_VERSIONS:
            raise CredentialError(
                f"the kubeconfig's exec plugin {spec.command!r} uses apiVersion "
                f"{spec.apiVersion!r}; supported: {', '.join(sorted(_EXEC_API_VERSIONS))}"
            )
        self._spec = spec
        self._value: str | None = None
        self._expires: float | None = None
        self._lock = asyncio.Lock()

    def _fresh(self) -> bool:
        return self._value is not None and (self._expires is None or time.time() < self._expires)

    async def header(self) -> str | None:
        if not self._fresh():
            async with self._lock:
                if not self._fresh():
                    await self._run()
        return self._value

    async def refused(self) -> bool:
        async with self._lock:
            await self._run()
        return True

    async def _run(self) -> None:
        spec = self._spec
        env = dict(os.environ)
        env.update((var.name, var.value) for var in spec.env or ())
        env["KUBERNETES_EXEC_INFO"] = json.dumps(
            {
                "apiVersion": spec.apiVersion,
                "kind": "ExecCredential",
                "spec": {"interactive": False},
            }
        )
        try:
            proc = await asyncio.create_subprocess_exec(
                spec.command,
                *(spec.args or ()),
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            stdout, stderr = await proc.communicate()
        except OSError as exc:
            raise CredentialError(
                f"cannot run the kubeconfig's exec plugin {spec.command!r}: {exc}"
            ) from exc
        if proc.returncode != 0:
            raise CredentialError(
                f"the kubeconfig's exec plugin {spec.command!r} exited with "
                f"{proc.returncode}: {stderr.decode(errors='replace').strip()[:500]}"
            )
        try:
            status = json.loads(stdout)["status"]
            token = status["token"]
        except (ValueError, KeyError, TypeError) as exc:
            raise CredentialError(
                f"the kubeconfig's exec plugin {spec.command!r} printed no ExecCredential "
                "with status.token (client certificates from exec plugins are not "
                "supported; use a token)"
            ) from exc
        expires = status.get("expirationTimestamp")
        self._expires = (
            datetime.datetime.fromisoformat(expires.replace("Z", "+00:00")).timestamp()
            if expires
            else None
        )
        register_secret(str(token))
        self._value = f"Bearer {token}"


def credential_source(user: User | None) -> CredentialSource:
    """The source the kubeconfig ``user`` describes; an auth-provider is refused with
    :class:`CredentialError` saying what to use instead."""
    if user is None:
        return NoCredentials()
    if user.token_file is not None:
        return _TokenFile(user.token_file)
    if user.token is not None:
        register_secret(user.token)
        return _Static(f"Bearer {user.token}")
    if user.exec is not None:
        return _Exec(user.exec)
    if user.username and user.password:
        basic = base64.b64encode(f"{user.username}:{user.password}".encode()).decode()
        register_secret(user.password)
        register_secret(basic)
        return _Static(f"Basic {basic}")
    if user.auth_provider:
        raise CredentialError(
            "the kubeconfig's user has an auth-provider, which kube-ccm (like current "
            "kubectl) does not support: use an exec credential plugin or a token"
        )
    return NoCredentials()
