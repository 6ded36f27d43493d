"""One PVE cluster's API over aiohttp: read-only GETs with an API token, or with a
login ticket (``POST /access/ticket``) renewed after :data:`TICKET_RENEW` seconds,
before PVE's two-hour expiry, and at once when PVE refuses it (401).

Why aiohttp and not proxmoxer: see ``docs/design.md`` ("The proxmox provider's
client"). Every answer PVE gives is ``{"data": ...}``; an error is an HTTP status
with a one-line reason (``Permission check failed (/vms/100, VM.Audit)``), which
:func:`_error` turns into a message that says what to fix.

Errors, for the controllers (all :class:`ProxmoxError`):

* :class:`ProxmoxUnavailableError` (a :class:`TransientCloudError`): a dropped
  connection, a timeout, a 5xx other than a missing VM: the daemon's boundary
  retries the call (they are all GETs), then the controller with backoff;
* :class:`ProxmoxLockedError` (transient too): a locked VM (backup, migration)
  that QEMU does not report plainly running;
* :class:`ProxmoxAuthError`: the token was refused (401) or lacks a privilege (403,
  the privilege and path named);
* :class:`ProxmoxTLSError`: the certificate does not verify against ``caFile``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import time
from typing import Any

import aiohttp

from kube_ccm.cloudprovider import (
    CloudProviderError,
    Credentials,
    TransientCloudError,
    register_secret,
)
from kube_ccm.providers.proxmox.config import Cluster

log = logging.getLogger(__name__)

TICKET_RENEW = 3600.0
"""Seconds a ticket is used before a new login: PVE's tickets last two hours."""


class ProxmoxError(CloudProviderError):
    """A PVE cluster did not answer, or answered with an error."""


class ProxmoxUnavailableError(ProxmoxError, TransientCloudError):
    """The cluster did not answer in time, dropped the connection, or answered 5xx."""


class ProxmoxAuthError(ProxmoxError):
    """The API token was refused, or lacks the privilege a call needs."""


class ProxmoxTLSError(ProxmoxError):
    """The API's certificate does not verify against the configured CA."""


class ProxmoxLockedError(ProxmoxError, TransientCloudError):
    """The VM is locked (a backup, a migration, a snapshot) and not simply running:
    whether it is shut down cannot be told until the lock is released."""


class ProxmoxNotFoundError(ProxmoxError):
    """PVE says the VM's configuration does not exist (it answers that with a 500)."""


class ProxmoxNotImplementedError(ProxmoxError):
    """This PVE version has no such API method (501), e.g. ``/cluster/ha/rules``
    before PVE 9."""


def ssl_context(cluster: Cluster) -> ssl.SSLContext:
    """Verify the server against ``caFile``, or the system's CA store without one."""
    try:
        return ssl.create_default_context(cafile=cluster.ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise ProxmoxTLSError(
            f"cluster {cluster.region}: cannot read caFile {cluster.ca_file!r} as PEM "
            f"certificates: {exc}"
        ) from None


class PveClient:
    """GETs against one cluster. The session is made on first use, on the running loop."""

    def __init__(self, cluster: Cluster, *, timeout: float) -> None:
        self.cluster = cluster
        self.credentials = Credentials(cluster.token_secret)
        self.credentials.load()  # a missing secret file stops the daemon at start-up
        self._ssl = ssl_context(cluster)
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None
        self._ticket: tuple[str, float] | None = None
        """The login ticket and when it was issued (monotonic), for a ticket login."""
        self._login: asyncio.Lock | None = None
        self.logins = 0
        """Ticket logins made, for tests."""
        self.requests = 0
        """Requests sent, for tests and the benchmark."""

    async def _auth(self, *, renew: bool = False) -> dict[str, str]:
        """The request's credentials: the token header, or the ticket cookie."""
        if not self.cluster.ticket:
            return {
                "Authorization": (
                    f"PVEAPIToken={self.cluster.token_id}={self.credentials.current().reveal()}"
                )
            }
        if self._login is None:
            self._login = asyncio.Lock()
        held = self._ticket
        async with self._login:
            current = self._ticket
            stale = current is None or time.monotonic() - current[1] >= TICKET_RENEW
            if stale or (renew and current is held):
                self._ticket = (await self._log_in(), time.monotonic())
        assert self._ticket is not None
        return {"Cookie": f"PVEAuthCookie={self._ticket[0]}"}

    async def _log_in(self) -> str:
        url = self.cluster.api + "/access/ticket"
        self.logins += 1
        form = {"username": self.cluster.token_id, "password": self.credentials.current().reveal()}
        try:
            async with self._client().post(url, data=form) as response:
                body = await response.json(content_type=None)
                status = response.status
        except aiohttp.ClientConnectorCertificateError as exc:
            raise self._tls_error(exc) from None
        except (TimeoutError, aiohttp.ClientError, ValueError) as exc:
            raise ProxmoxUnavailableError(
                f"cluster {self.cluster.region}: the ticket login failed: "
                f"{exc or type(exc).__name__}"
            ) from None
        ticket = (body or {}).get("data", {}) if isinstance(body, dict) else {}
        if status >= 400 or not isinstance(ticket, dict) or not ticket.get("ticket"):
            raise ProxmoxAuthError(
                f"cluster {self.cluster.region}: the ticket login of {self.cluster.token_id} "
                f"(password sha256:{self.credentials.current().fingerprint}) was refused "
                f"(HTTP {status}); check username and the file in password"
            )
        if ticket.get("NeedTFA"):
            raise ProxmoxAuthError(
                f"cluster {self.cluster.region}: {self.cluster.token_id} has two-factor "
                "authentication; use an API token (tokenId, tokenSecret) instead"
            )
        log.info("cluster %s: logged in as %s", self.cluster.region, self.cluster.token_id)
        register_secret(str(ticket["ticket"]))
        if ticket.get("CSRFPreventionToken"):
            register_secret(str(ticket["CSRFPreventionToken"]))
        return str(ticket["ticket"])

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=self._ssl, limit=8),
                timeout=self._timeout,
                headers={"Accept": "application/json"},
            )
        return self._session

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def get(self, path: str, /, **params: str) -> Any:
        """``data`` of ``GET <api><path>``; one retry with a re-read secret after a 401."""
        status, body = await self._get(path, params)
        if status == 401 and self.cluster.ticket:
            log.info("cluster %s: the ticket was refused; logging in again", self.cluster.region)
            await self.credentials.refresh()
            status, body = await self._get(path, params, renew=True)
        elif status == 401 and await self.credentials.refresh():
            log.info("cluster %s: retrying with the rotated token secret", self.cluster.region)
            status, body = await self._get(path, params)
        if status >= 400:
            raise _error(self.cluster, self.credentials, path, status, body)
        return body.get("data") if isinstance(body, dict) else None

    async def _get(
        self, path: str, params: dict[str, str], *, renew: bool = False
    ) -> tuple[int, Any]:
        url = self.cluster.api + path
        headers = await self._auth(renew=renew)
        self.requests += 1
        try:
            async with self._client().get(url, params=params, headers=headers) as response:
                text = await response.text()
                try:
                    body = json.loads(text) if text else {}
                except ValueError:
                    body = {"message": text[:200]}
                if response.status >= 400 and isinstance(body, dict) and not body.get("message"):
                    body["message"] = response.reason or ""
                return response.status, body
        except aiohttp.ClientConnectorCertificateError as exc:
            raise self._tls_error(exc) from None
        except TimeoutError:
            raise ProxmoxUnavailableError(
                f"cluster {self.cluster.region}: GET {path} got no answer within "
                f"{self._timeout.total:g}s (requestTimeout)"
            ) from None
        except aiohttp.ClientError as exc:
            raise ProxmoxUnavailableError(
                f"cluster {self.cluster.region}: GET {path} failed: {exc or type(exc).__name__}"
            ) from None

    def _tls_error(self, exc: aiohttp.ClientConnectorCertificateError) -> ProxmoxTLSError:
        return ProxmoxTLSError(
            f"cluster {self.cluster.region}: the certificate of {self.cluster.api} does "
            f"not verify against {self._ca()}: {exc.certificate_error}; give the CA that "
            "signed it as caFile (/etc/pve/pve-root-ca.pem on a PVE node)"
        )

    def _ca(self) -> str:
        return f"caFile {self.cluster.ca_file}" if self.cluster.ca_file else "the system CA store"


def _error(
    cluster: Cluster, credentials: Credentials, path: str, status: int, body: Any
) -> ProxmoxError:
    message = str(body.get("message", "") if isinstance(body, dict) else "").strip()
    where = f"cluster {cluster.region}: GET {path}"
    if status == 401 and cluster.ticket:
        return ProxmoxAuthError(
            f"{where}: PVE refused a fresh ticket of {cluster.token_id} ({message}); check "
            "the user's realm and that it is enabled"
        )
    if status == 401:
        return ProxmoxAuthError(
            f"{where}: the API token {cluster.token_id} (secret "
            f"sha256:{credentials.current().fingerprint}) was refused ({message}); check "
            "tokenId and the secret in tokenSecret"
        )
    if status == 403:
        privilege = message
        if message.startswith("Permission check failed"):
            privilege = message.removeprefix("Permission check failed").strip(" ()")
        return ProxmoxAuthError(
            f"{where}: the API token {cluster.token_id} lacks a privilege: {privilege}; grant "
            "it, e.g. `pveum acl modify / --tokens "
            f"{cluster.token_id} --roles PVEAuditor` (the provider needs VM.Audit, and "
            "VM.GuestAgent.Audit for the guest agent: VM.Monitor before PVE 9)"
        )
    if status == 500 and "does not exist" in message and "Configuration file" in message:
        return ProxmoxNotFoundError(f"{where}: {message}")
    if status == 501:
        return ProxmoxNotImplementedError(f"{where}: {message or 'not implemented'}")
    if status >= 500:
        detail = message or f"HTTP {status}"
        if status == 595:
            detail = f"{detail} (the PVE node is offline or unreachable from {cluster.api})"
        elif "quorum" in message:
            detail = f"{detail} (the cluster lost quorum)"
        return ProxmoxUnavailableError(f"{where}: {detail}")
    return ProxmoxError(f"{where}: HTTP {status}: {message}")


__all__ = [
    "ProxmoxAuthError",
    "ProxmoxError",
    "ProxmoxLockedError",
    "ProxmoxNotFoundError",
    "ProxmoxNotImplementedError",
    "ProxmoxTLSError",
    "ProxmoxUnavailableError",
    "PveClient",
    "ssl_context",
]
