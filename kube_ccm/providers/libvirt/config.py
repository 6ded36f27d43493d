"""The ``libvirt`` cloud-config (``--cloud-config``)::

hosts:                           # one or more libvirt connections
  - uri: qemu+ssh://ccm@hv1.example/system
    name: hv1                    # in providerIDs; default: the URI's host, else "local"
    zone: rack-1                 # topology.kubernetes.io/zone of its Nodes (optional)
    region: dc-1                 # topology.kubernetes.io/region (optional)
    username: ccm                # optional, for URIs that ask for credentials (SASL)
    credentials: {file: /etc/kube-ccm/hv1-password}   # or {env: VAR}; the passphrase
nodeMapping: name                # name: a Node is the domain of its name;
                                 # systemUUID: the domain whose UUID is the Node's
                                 # status.nodeInfo.systemUUID
addressSources: [agent, lease]   # where addresses come from, first that answers:
                                 # agent (qemu guest agent), lease (DHCP), arp
instanceTypeFrom: resources      # resources: vcpu<N>-<M>mib; metadata: the domain's
                                 # <kube-ccm:instance type="..."/> metadata element,
                                 # falling back to resources
maxConcurrentCalls: 4            # threads for libvirt's blocking calls, per daemon
"""

from __future__ import annotations

import re
from typing import Any, Literal
from urllib.parse import urlsplit

import msgspec

from kube_ccm.cloudprovider import (
    CredentialsSource,
    InvalidCloudConfigError,
)
from kube_ccm.cloudprovider.config import convert_config, parse_yaml
from kube_ccm.providers._vm import LABEL_VALUE, credentials_source, repeated

_HOST_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$")


class LibvirtConfigError(InvalidCloudConfigError):
    """The cloud-config is invalid; one line naming the key and what to write."""


class _RawHost(msgspec.Struct, forbid_unknown_fields=True):
    uri: str
    name: str | None = None
    zone: str = ""
    region: str = ""
    username: str | None = None
    credentials: Any = None


class _Raw(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    hosts: list[_RawHost]
    node_mapping: Literal["name", "systemUUID"] = "name"
    address_sources: list[Literal["agent", "lease", "arp"]] = msgspec.field(
        default_factory=lambda: ["agent", "lease"]
    )
    instance_type_from: Literal["resources", "metadata"] = "resources"
    max_concurrent_calls: int = 4


class Host(msgspec.Struct, frozen=True):
    uri: str
    name: str
    zone: str = ""
    region: str = ""
    username: str | None = None
    credentials: CredentialsSource | None = None


class LibvirtConfig(msgspec.Struct, frozen=True):
    hosts: tuple[Host, ...]
    node_mapping: Literal["name", "systemUUID"] = "name"
    address_sources: tuple[str, ...] = ("agent", "lease")
    instance_type_from: Literal["resources", "metadata"] = "resources"
    max_concurrent_calls: int = 4


def _host_name(uri: str) -> str:
    host = urlsplit(uri).hostname
    return (host or "local").lower()


def load_config(data: bytes | str | None) -> LibvirtConfig:
    if data is None or not data.strip():
        raise LibvirtConfigError(
            "the libvirt provider needs a --cloud-config naming its hosts, e.g. "
            "`hosts: [{uri: qemu:///system}]`"
        )
    document = parse_yaml(data, provider="libvirt", error=LibvirtConfigError)
    raw = convert_config(
        document,
        _Raw,
        provider="libvirt",
        error=LibvirtConfigError,
        see="; see the keys in docs/on-prem.md",
    )
    if not raw.hosts:
        raise LibvirtConfigError("`hosts` is empty; name at least one libvirt URI")
    if raw.max_concurrent_calls < 1:
        raise LibvirtConfigError("`maxConcurrentCalls` must be 1 or more")
    if not raw.address_sources:
        raise LibvirtConfigError("`addressSources` is empty; use agent, lease or arp")
    hosts: list[Host] = []
    for i, h in enumerate(raw.hosts):
        where = f"hosts[{i}]"
        if "://" not in h.uri and ":" not in h.uri:
            raise LibvirtConfigError(f"{where}.uri {h.uri!r} is not a libvirt URI (qemu:///system)")
        name = (h.name or _host_name(h.uri)).lower()
        if not _HOST_NAME.match(name):
            raise LibvirtConfigError(
                f"{where}.name {name!r} must be a DNS label (lowercase letters, digits, '-', '.'): "
                "it is part of every providerID"
            )
        for key, value in (("zone", h.zone), ("region", h.region)):
            if value and not LABEL_VALUE.match(value):
                raise LibvirtConfigError(
                    f"{where}.{key} {value!r} is not a valid label value (63 characters "
                    "of letters, digits, '-', '_', '.')"
                )
        credentials = None
        if h.credentials is not None:
            credentials = credentials_source(
                h.credentials, f"{where}.credentials", LibvirtConfigError
            )
        hosts.append(Host(h.uri, name, h.zone, h.region, h.username, credentials))
    twice = repeated([h.name for h in hosts])
    if twice:
        raise LibvirtConfigError(
            f"two hosts are named {twice!r}; give each a distinct `name` "
            "(it is part of every providerID)"
        )
    return LibvirtConfig(
        hosts=tuple(hosts),
        node_mapping=raw.node_mapping,
        address_sources=tuple(raw.address_sources),
        instance_type_from=raw.instance_type_from,
        max_concurrent_calls=raw.max_concurrent_calls,
    )
