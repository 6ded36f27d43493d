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
externalIPCIDRs: []                         # a VM address in one of these CIDRs is an
                                            # ExternalIP, the others InternalIPs (the Go
                                            # CCM's features.network.external_ip_cidrs)
ipv6SupportDisabled: false                  # true: the VM's IPv6 addresses are left out
                                            # (the Go CCM's ipv6_support_disabled); the
                                            # kubelet's --node-ip is kept whatever it is

A cluster's token ID may come from a file too, ``tokenIdFile: PATH`` instead of
``tokenId`` (the Go CCM's ``token_id_file``; read at start-up). The Go CCM's own keys,
written as they are, are refused all at once, each with its kube-ccm equivalent
(:data:`GO_CCM_HINTS`; ``kube-ccm migrate proxmox`` converts a whole file).

TLS is always verified; there is no switch to turn it off (give ``caFile`` for a
self-signed PVE certificate: ``/etc/pve/pve-root-ca.pem`` on any PVE node).
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import msgspec
import yaml

from kube_ccm.cloudprovider import (
    CredentialsSource,
    Duration,
    InvalidCloudConfigError,
    load_cloud_config,
)
from kube_ccm.providers._vm import LABEL_VALUE, credentials_source, repeated

PROVIDER_NAME = "proxmox"
API_PATH = "/api2/json"
_USER_ID = re.compile(r"^[^@!\s:]+@[^@!\s:]+$")
_TOKEN_ID = re.compile(r"^[^@!\s]+@[^@!\s]+![A-Za-z][A-Za-z0-9._-]*$")
EXAMPLE = (
    "clusters: [{region: cluster-1, url: https://pve1.example:8006, "
    "tokenId: kube-ccm@pve!ccm, tokenSecret: {file: /etc/kube-ccm/proxmox/token}}]"
)


class ProxmoxConfigError(InvalidCloudConfigError):
    """The cloud-config is invalid; one line naming the key and what to write."""


GO_CCM_FEATURES = {
    "provider": "`providerIDFormat`: vmid for its default, uuid for capmox",
    "ha_group": "`zone: haGroup` for true",
    "force_update_labels": (
        "not offered: remove it; kube-ccm writes the zone and region labels when a Node "
        "is initialised, as upstream's node controller, so a live migration does not "
        "move them"
    ),
    "network": (
        "its `external_ip_cidrs` is `externalIPCIDRs` (a YAML list), "
        "`ipv6_support_disabled` is `ipv6SupportDisabled`; `mode` and `ip_sort_order` are "
        "not offered: remove them (kube-ccm always reads the guest agent, else cloud-init, "
        "and puts the kubelet's --node-ip first, as mode auto)"
    ),
}
"""What each key of the Go CCM's ``features`` becomes here."""
GO_CCM_HINTS = {
    "token_id": "write `tokenId`",
    "token_secret": (
        "write `tokenSecret: {file: PATH}` (a mounted Secret) or `{env: VARIABLE}`, never the value"
    ),
    "token_id_file": "write `tokenIdFile`",
    "token_secret_file": "write `tokenSecret: {file: PATH}`",
    "insecure": (
        "not offered: TLS is always verified; give `caFile` (/etc/pve/pve-root-ca.pem on a "
        "PVE node)"
    ),
    "ca_file": "write `caFile`",
    "provider_id_format": "write `providerIDFormat`",
    "external_ip_cidrs": "write `externalIPCIDRs`, a YAML list",
    "ipv6_support_disabled": "write `ipv6SupportDisabled`",
}
"""The Go CCM's (sergelogvinov/proxmox-cloud-controller-manager, ``pkg/config`` and
``pkg/proxmoxpool``) keys, and what to write instead; ``features`` is told key by key
(:data:`GO_CCM_FEATURES`)."""


class _RawCluster(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    region: str
    url: str
    token_id: str | None = None
    token_id_file: str | None = None
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
    external_ip_cidrs: list[str] = msgspec.field(default_factory=list, name="externalIPCIDRs")
    ipv6_support_disabled: bool = msgspec.field(default=False, name="ipv6SupportDisabled")


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
    external_ip_cidrs: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()
    """A VM address in one of these is an ExternalIP; the others are InternalIPs."""
    ipv6_support_disabled: bool = False
    """The VM's IPv6 addresses are left out (the kubelet's --node-ip is kept)."""

    def address_type(self, address: str) -> str:
        """``ExternalIP`` for an address in :attr:`external_ip_cidrs`, else ``InternalIP``."""
        ip = ipaddress.ip_address(address)
        return "ExternalIP" if any(ip in n for n in self.external_ip_cidrs) else "InternalIP"

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


def _hints(data: bytes | str | None) -> dict[str, str]:
    """:data:`GO_CCM_HINTS`, and for a Go CCM ``features`` mapping what each of its keys
    becomes (:data:`GO_CCM_FEATURES`)."""
    hints = dict(GO_CCM_HINTS)
    try:
        document = yaml.safe_load(data) if data else None
    except yaml.YAMLError:
        return hints
    features = document.get("features") if isinstance(document, dict) else None
    if isinstance(features, dict):
        told = [
            f"`{k}`: {GO_CCM_FEATURES.get(str(k), 'not a key of the Go CCM: remove it')}"
            for k in features
        ]
        hints["features"] = "the Go CCM's; " + "; ".join(told or ["remove it"])
    return hints


def _external_cidrs(cidrs: list[str]) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    networks = []
    for i, text in enumerate(cidrs):
        where = f"externalIPCIDRs[{i}]"
        if text.strip().startswith("!"):
            raise ProxmoxConfigError(
                f"`{where}` is {text[:50]!r}: leave out the `!` entries (the Go CCM's docs "
                "say `!` excludes a CIDR, its code skips such an entry in external_ip_cidrs); "
                "list only the CIDRs whose addresses are external"
            )
        try:
            networks.append(ipaddress.ip_network(text.strip(), strict=False))
        except ValueError:
            raise ProxmoxConfigError(
                f"`{where}` is {text[:50]!r}, not a CIDR; write e.g. 203.0.113.0/24"
            ) from None
    return tuple(networks)


def _token_id(where: str, c: _RawCluster) -> str | None:
    """The cluster's ``tokenId``, or the content of its ``tokenIdFile``."""
    if c.token_id_file is None:
        return c.token_id
    if c.token_id is not None:
        raise ProxmoxConfigError(f"{where}: give tokenId or tokenIdFile, not both")
    try:
        text = Path(c.token_id_file).read_text().strip()
    except OSError as exc:
        raise ProxmoxConfigError(
            f"{where}.tokenIdFile {c.token_id_file!r} cannot be read ({exc.strerror}); mount "
            "the file holding the API token ID (user@realm!tokenname) there"
        ) from None
    return text


def load_config(data: bytes | str | None) -> ProxmoxConfig:
    raw = load_cloud_config(data, _Raw, provider=PROVIDER_NAME, example=EXAMPLE, hints=_hints(data))
    if not raw.clusters:
        raise ProxmoxConfigError(f"`clusters` is empty; name at least one, e.g. `{EXAMPLE}`")
    if raw.request_timeout.seconds <= 0:
        raise ProxmoxConfigError("`requestTimeout` must be more than 0s")
    clusters: list[Cluster] = []
    for i, c in enumerate(raw.clusters):
        where = f"clusters[{i}]"
        if not LABEL_VALUE.match(c.region):
            raise ProxmoxConfigError(
                f"{where}.region {c.region!r} must be a label value (up to 63 letters, digits, "
                "'-', '_', '.'): it is the region label and part of every providerID"
            )
        token_id = _token_id(where, c)
        ticket = token_id is None and c.token_secret is None
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
            if token_id is None or not _TOKEN_ID.match(token_id):
                source = "tokenIdFile's content" if c.token_id_file else "tokenId"
                raise ProxmoxConfigError(
                    f"{where}.{source} {token_id!r} is not an API token ID: write "
                    "user@realm!tokenname, as `pveum user token add` names it"
                )
            if c.token_secret is None:
                raise ProxmoxConfigError(
                    f"{where}.tokenSecret is missing: write `tokenSecret: {{file: PATH}}` or "
                    "`tokenSecret: {env: VARIABLE}`"
                )
            user, secret_value, secret_key = token_id, c.token_secret, "tokenSecret"
        secret = credentials_source(secret_value, f"{where}.{secret_key}", ProxmoxConfigError)
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
    twice = repeated([c.region for c in clusters])
    if twice:
        raise ProxmoxConfigError(
            f"two clusters have the region {twice!r}; each needs its own (it is part of "
            "every providerID)"
        )
    return ProxmoxConfig(
        clusters=tuple(clusters),
        provider_id_format=raw.provider_id_format,
        zone=raw.zone,
        cache_ttl=raw.cache_ttl.seconds,
        request_timeout=raw.request_timeout.seconds,
        external_ip_cidrs=_external_cidrs(raw.external_ip_cidrs),
        ipv6_support_disabled=raw.ipv6_support_disabled,
    )


__all__ = [
    "API_PATH",
    "GO_CCM_FEATURES",
    "GO_CCM_HINTS",
    "PROVIDER_NAME",
    "Cluster",
    "ProxmoxConfig",
    "ProxmoxConfigError",
    "load_config",
]
