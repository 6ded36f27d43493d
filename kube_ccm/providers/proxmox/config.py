"""The ``proxmox`` cloud-config (``--cloud-config``)::

clusters:                                   # one or more PVE clusters, each a region
  - region: cluster-1                       # topology.kubernetes.io/region; in providerIDs
    url: https://pve1.example:8006          # any node of the cluster (/api2/json optional)
    tokenId: kube-ccm@pve!ccm               # an API token: user@realm!name
    tokenSecret: {file: /etc/kube-ccm/proxmox/cluster-1}   # or {env: VAR}; its secret
    # or, instead of a token, a ticket login (renewed before PVE's 2 h expiry, and
    # again whenever PVE refuses the ticket):
    # username: kube-ccm@pve
    # password: {file: /etc/kube-ccm/proxmox/cluster-1-password}
    caFile: /etc/kube-ccm/proxmox/ca.crt    # the CA that signed the API's certificate;
                                            # default: the system's CA store
providerIDFormat: vmid                      # vmid: proxmox://<region>/<vmid> (the Go CCM's
                                            # default); uuid: proxmox://<SMBIOS UUID> (its
                                            # "capmox" mode)
zone: node                                  # node: the zone is the PVE node the VM runs on;
                                            # haGroup: the VM's HA group (PVE 9: its
                                            # node-affinity rule), so a live migration does
                                            # not move it; the PVE node when it has none
cacheTTL: 5s                                # how long one /cluster/resources answer serves
requestTimeout: 10s                         # one HTTP request to PVE

TLS is always verified; there is no switch to turn it off (give ``caFile`` for a
self-signed PVE certificate: ``/etc/pve/pve-root-ca.pem`` on any PVE node).
"""

from __future__ import annotations

import re
from typing import Any, Literal
from urllib.parse import urlsplit

import msgspec

from kube_ccm.cloudprovider import (
    CredentialsError,
    CredentialsSource,
    Duration,
    InvalidCloudConfigError,
    load_cloud_config,
)

PROVIDER_NAME = "proxmox"
API_PATH = "/api2/json"
_REGION = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_USER_ID = re.compile(r"^[^@!\s:]+@[^@!\s:]+$")
_TOKEN_ID = re.compile(r"^[^@!\s]+@[^@!\s]+![A-Za-z][A-Za-z0-9._-]*$")
EXAMPLE = (
    "clusters: [{region: cluster-1, url: https://pve1.example:8006, "
    "tokenId: kube-ccm@pve!ccm, tokenSecret: {file: /etc/kube-ccm/proxmox/token}}]"
)


class ProxmoxConfigError(InvalidCloudConfigError):
    """The cloud-config is invalid; one line naming the key and what to write."""


class _RawCluster(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    region: str
    url: str
    token_id: str | None = None
    token_secret: Any = None
    username: str | None = None
    password: Any = None
    ca_file: str | None = None


class _Raw(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    clusters: list[_RawCluster]
    provider_id_format: Literal["vmid", "uuid"] = msgspec.field(
        default="vmid", name="providerIDFormat"
    )
    zone: Literal["node", "haGroup"] = "node"
    cache_ttl: Duration = msgspec.field(default_factory=lambda: Duration(5.0), name="cacheTTL")
    request_timeout: Duration = msgspec.field(default_factory=lambda: Duration(10.0))


class Cluster(msgspec.Struct, frozen=True):
    """One PVE cluster: a region."""

    region: str
    api: str
    """``https://host:port/api2/json``, without a trailing slash."""
    token_id: str
    """``user@realm!name`` of an API token, or ``user@realm`` for a ticket login."""
    token_secret: CredentialsSource
    """The token's secret, or the user's password for a ticket login."""
    ca_file: str | None = None
    ticket: bool = False
    """Log in with ``username``/``password`` for a ticket instead of a token."""


class ProxmoxConfig(msgspec.Struct, frozen=True):
    clusters: tuple[Cluster, ...]
    provider_id_format: Literal["vmid", "uuid"] = "vmid"
    zone: Literal["node", "haGroup"] = "node"
    """Where the zone comes from: the VM's PVE node, or its HA group."""
    cache_ttl: float = 5.0
    request_timeout: float = 10.0

    def cluster(self, region: str) -> Cluster | None:
        for cluster in self.clusters:
            if cluster.region == region:
                return cluster
        return None


def _api_url(where: str, url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme != "https" or not parts.hostname:
        raise ProxmoxConfigError(
            f"{where}.url {url!r} is not an https URL of a PVE node, e.g. "
            "https://pve1.example:8006 (PVE serves its API on HTTPS only)"
        )
    if parts.query or parts.fragment:
        raise ProxmoxConfigError(f"{where}.url {url!r} must not have a query or fragment")
    path = parts.path.rstrip("/")
    if path not in ("", API_PATH):
        raise ProxmoxConfigError(
            f"{where}.url {url!r}: the path must be empty or {API_PATH}, not {parts.path!r}"
        )
    port = f":{parts.port}" if parts.port else ":8006"
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"https://{host}{port}{API_PATH}"


def load_config(data: bytes | str | None) -> ProxmoxConfig:
    raw = load_cloud_config(data, _Raw, provider=PROVIDER_NAME, example=EXAMPLE)
    if not raw.clusters:
        raise ProxmoxConfigError(f"`clusters` is empty; name at least one, e.g. `{EXAMPLE}`")
    if raw.request_timeout.seconds <= 0:
        raise ProxmoxConfigError("`requestTimeout` must be more than 0s")
    clusters: list[Cluster] = []
    for i, c in enumerate(raw.clusters):
        where = f"clusters[{i}]"
        if not _REGION.match(c.region):
            raise ProxmoxConfigError(
                f"{where}.region {c.region!r} must be a label value (up to 63 letters, digits, "
                "'-', '_', '.'): it is the region label and part of every providerID"
            )
        ticket = c.token_id is None and c.token_secret is None
        if ticket:
            if not c.username or c.password is None:
                raise ProxmoxConfigError(
                    f"{where} needs tokenId and tokenSecret (an API token, preferred), or "
                    "username and password (a ticket login)"
                )
            if not _USER_ID.match(c.username):
                raise ProxmoxConfigError(
                    f"{where}.username {c.username!r} is not a PVE user ID: write user@realm "
                    "(kube-ccm@pve, root@pam)"
                )
            user, secret_value, secret_key = c.username, c.password, "password"
        else:
            if c.username is not None or c.password is not None:
                raise ProxmoxConfigError(
                    f"{where}: give either tokenId and tokenSecret or username and password, "
                    "not both"
                )
            if c.token_id is None or not _TOKEN_ID.match(c.token_id):
                raise ProxmoxConfigError(
                    f"{where}.tokenId {c.token_id!r} is not an API token ID: write "
                    "user@realm!tokenname, as `pveum user token add` names it"
                )
            if c.token_secret is None:
                raise ProxmoxConfigError(
                    f"{where}.tokenSecret is missing: write `tokenSecret: {{file: PATH}}` or "
                    "`tokenSecret: {env: VARIABLE}`"
                )
            user, secret_value, secret_key = c.token_id, c.token_secret, "tokenSecret"
        try:
            secret = CredentialsSource.from_config(secret_value, field=f"{where}.{secret_key}")
        except (CredentialsError, ValueError) as exc:
            raise ProxmoxConfigError(str(exc)) from exc
        clusters.append(
            Cluster(
                region=c.region,
                api=_api_url(where, c.url),
                token_id=user,
                token_secret=secret,
                ca_file=c.ca_file,
                ticket=ticket,
            )
        )
    regions = [c.region for c in clusters]
    twice = sorted({r for r in regions if regions.count(r) > 1})
    if twice:
        raise ProxmoxConfigError(
            f"two clusters have the region {twice[0]!r}; each needs its own (it is part of "
            "every providerID)"
        )
    return ProxmoxConfig(
        clusters=tuple(clusters),
        provider_id_format=raw.provider_id_format,
        zone=raw.zone,
        cache_ttl=raw.cache_ttl.seconds,
        request_timeout=raw.request_timeout.seconds,
    )


__all__ = [
    "API_PATH",
    "PROVIDER_NAME",
    "Cluster",
    "ProxmoxConfig",
    "ProxmoxConfigError",
    "load_config",
]
