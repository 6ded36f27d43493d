"""The ``libvirt`` provider: Nodes are libvirt domains on one or more hosts.

Capabilities: ``instances_v2`` (and the zones it reports). What it answers:

* **providerID** ``libvirt://<host name>/<domain UUID>``. The UUID, not the domain
  name: a domain keeps its UUID when renamed (``virsh domrename``), and the same
  name may exist on two hosts. The host name is the ``name`` of a ``hosts`` entry.
* **Which domain is a Node's**: the one its providerID names; before it has one,
  the domain of the Node's name (``nodeMapping: name``) or of its
  ``status.nodeInfo.systemUUID`` (``nodeMapping: systemUUID``) on any host.
* **exists** is false only when every host that could hold the domain answered
  "no such domain" (``VIR_ERR_NO_DOMAIN``) and is still the host it was: a URI that
  now reaches another hypervisor (a DNS name moved, a socket or ssh alias pointing
  elsewhere, a wrong URI) has no such domain either. Each connection notes the host's
  hostname and UUID (``getHostname``, the capabilities' ``host/uuid``) when it opens;
  after a "no such domain", a host that is not the one where this daemon found
  domains before is a :class:`~kube_ccm.cloudprovider.CloudIdentityError` naming
  both. Where the host tells no UUID (libvirt's test driver), its domains are listed
  instead (``listAllDomains``): it must still hold one of the other domains found
  there before (none found before: any domain at all). A host that does not answer, a dropped
  connection or any other libvirt error is raised as :class:`LibvirtError`, which
  the controllers retry with backoff: a lost hypervisor never deletes a Node.
* **shutdown** is the domain's state being ``VIR_DOMAIN_SHUTOFF``.
* **instance type** ``vcpu<N>-<M>mib`` from the domain's vCPUs and memory, or (with
  ``instanceTypeFrom: metadata``) the ``type`` of the metadata element
  ``<instance xmlns="https://kube-ccm.io/libvirt/1" type="..."/>`` set with
  ``virsh metadata``.
* **addresses** from the first of ``addressSources`` that answers (the qemu guest
  agent, the DHCP leases of libvirt's network, the host's ARP table), as
  ``InternalIP``, plus the Node's name as ``Hostname``.
* **zone/region** from the host's ``zone``/``region``.
* **authoritative** (the kubelet serving certificate approver may rest on it): a
  domain is a Node's when its name is the Node's name.

Every libvirt call blocks, so each runs on the provider's own bounded pool of
threads (:class:`~kube_ccm.cloudprovider.BlockingCalls`, ``maxConcurrentCalls``).
Connections are opened lazily, kept alive with libvirt's keepalive (so a hung or
vanished host fails its calls in seconds instead of hanging them), and reopened
after they drop. Remote URIs that ask for credentials get ``username`` and the
passphrase from ``credentials`` through libvirt's auth callback (``openAuth``).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import threading
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from kube_ccm.api.objects import Node, NodeAddress
from kube_ccm.cloudprovider import (
    BlockingCalls,
    ClientBuilder,
    CloudIdentityError,
    CloudProviderError,
    Credentials,
    InstanceMetadata,
    InstanceNotFoundError,
    InstancesV2,
    start_event_recorder,
)
from kube_ccm.providers._vm import VmProvider, ask_each, provider_id_path, stand_in
from kube_ccm.providers.libvirt.config import Host, LibvirtConfig

log = logging.getLogger(__name__)

PROVIDER_NAME = "libvirt"
METADATA_NAMESPACE = "https://kube-ccm.io/libvirt/1"
"""The XML namespace of the ``<instance type="..."/>`` metadata element."""
RENAMED_REASON = "DomainRenamed"
KEEPALIVE_INTERVAL = 5
KEEPALIVE_COUNT = 3

# libvirt's constants, by value, so this module imports without libvirt installed.
VIR_ERR_NO_DOMAIN = 42
VIR_ERR_NO_DOMAIN_METADATA = 80
VIR_DOMAIN_SHUTOFF = 5
VIR_DOMAIN_METADATA_ELEMENT = 2
_ADDRESS_SOURCES = {"lease": 0, "agent": 1, "arp": 2}

T = TypeVar("T")


class LibvirtError(CloudProviderError):
    """A libvirt host did not answer, or answered with an error: retried with backoff."""


class LibvirtUnavailableError(CloudProviderError):
    """The libvirt Python bindings are not installed."""


def load_libvirt() -> Any:
    """The ``libvirt`` module, or a message saying how to install it."""
    try:
        return importlib.import_module("libvirt")
    except ImportError as exc:
        raise LibvirtUnavailableError(
            "the libvirt provider needs libvirt's Python bindings: install the extra "
            "`pip install 'kube-ccm[libvirt]'` (it builds against Debian's libvirt-dev and "
            f"pkg-config: `apt-get install libvirt-dev pkg-config`) ({exc})"
        ) from exc


_event_loop_lock = threading.Lock()
_event_loop_started: list[bool] = []


def _start_libvirt_event_loop(libvirt: Any) -> None:
    """libvirt's default event loop on a daemon thread, once per process: keepalive
    (and so the detection of a dead connection) needs one."""
    with _event_loop_lock:
        if _event_loop_started:
            return
        libvirt.virEventRegisterDefaultImpl()

        def run() -> None:
            while True:
                libvirt.virEventRunDefaultImpl()

        threading.Thread(target=run, name="libvirt-events", daemon=True).start()
        _event_loop_started.append(True)


def parse_provider_id(provider_id: str) -> tuple[str, str]:
    """``(host name, domain UUID)`` of ``libvirt://<host>/<uuid>``; ValueError otherwise."""
    host, _, uuid = provider_id_path(provider_id, PROVIDER_NAME).partition("/")
    if not host or not uuid or "/" in uuid:
        raise ValueError(f"providerID {provider_id!r} is not libvirt://<host>/<domain-uuid>")
    return host, uuid.lower()


@dataclass(frozen=True, slots=True)
class Domain:
    """What one lookup of a domain found, read in one go on a worker thread."""

    host: Host
    uuid: str
    name: str
    state: int
    vcpus: int
    memory_kib: int
    metadata_type: str
    addresses: tuple[str, ...]

    @property
    def provider_id(self) -> str:
        return f"{PROVIDER_NAME}://{self.host.name}/{self.uuid}"


class _Connection:
    """One host's connection: opened on first use, reopened once it is dead."""

    def __init__(self, libvirt: Any, host: Host) -> None:
        self._libvirt = libvirt
        self.host = host
        self._conn: Any = None
        self._lock = threading.Lock()
        self._credentials = Credentials(host.credentials) if host.credentials else None
        self.current: tuple[str, str] = ("?", "?")
        """The (hostname, host UUID) of the open connection, "?" where it tells none."""
        self.baseline: tuple[str, str] | None = None
        """The (hostname, host UUID) where this daemon first found a domain."""
        self.seen: dict[str, str] = {}
        """Name by UUID of the domains found on this host (by this daemon, since it
        started)."""

    def get(self) -> Any:
        """The open connection (blocking; call on a worker thread)."""
        with self._lock:
            conn = self._conn
            if conn is not None:
                try:
                    if conn.isAlive() == 1:
                        return conn
                except self._libvirt.libvirtError:
                    pass
                log.warning("libvirt connection to %s dropped; reconnecting", self.describe())
                self._conn = None
                with contextlib.suppress(self._libvirt.libvirtError):
                    conn.close()
            self._conn = self._open()
            return self._conn

    def reset(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(self._libvirt.libvirtError):
                conn.close()

    def describe(self) -> str:
        return f"host {self.host.name} ({self.host.uri})"

    def _open(self) -> Any:
        libvirt = self._libvirt
        try:
            if self.host.username is None and self._credentials is None:
                conn = libvirt.open(self.host.uri)
            else:
                conn = libvirt.openAuth(self.host.uri, self._auth(), 0)
        except libvirt.libvirtError as exc:
            raise LibvirtError(
                f"cannot connect to libvirt {self.describe()}: {exc}; check that libvirtd "
                "runs there and that the URI, network path and credentials are right "
                "(retrying with backoff)"
            ) from None
        if conn is None:
            raise LibvirtError(f"cannot connect to libvirt {self.describe()} (retrying)")
        # Local drivers (test:///default in-process) have no keepalive: nothing to do.
        with contextlib.suppress(libvirt.libvirtError):
            conn.setKeepAlive(KEEPALIVE_INTERVAL, KEEPALIVE_COUNT)
        self.current = _identity(conn)
        log.info("connected to libvirt %s: host %s, UUID %s", self.describe(), *self.current)
        return conn

    def _auth(self) -> list[Any]:
        libvirt = self._libvirt
        username = self.host.username or ""
        passphrase = self._credentials.load().reveal() if self._credentials else ""

        def answer(credentials: list[list[Any]], _data: object) -> int:
            for credential in credentials:
                if credential[0] == libvirt.VIR_CRED_AUTHNAME:
                    credential[4] = username or credential[3] or ""
                elif credential[0] == libvirt.VIR_CRED_PASSPHRASE:
                    credential[4] = passphrase
                else:
                    return -1
            return 0

        return [[libvirt.VIR_CRED_AUTHNAME, libvirt.VIR_CRED_PASSPHRASE], answer, None]


class LibvirtInstances(InstancesV2):
    authoritative = True
    """Answers are libvirt's (the domain, its guest agent, DHCP leases, ARP)."""

    def __init__(self, provider: LibvirtProvider) -> None:
        self._p = provider

    async def instance_belongs_to(self, node_name: str, metadata: InstanceMetadata) -> bool:
        """The domain's own name is the Node's. With ``nodeMapping: systemUUID`` a
        domain named otherwise is not proof: the Node's ``systemUUID`` is the node's own
        word."""
        domain = await self._p.find(stand_in(node_name, metadata.provider_id))
        return domain is not None and domain.name == node_name

    async def instance_exists(self, node: Node) -> bool:
        return await self._p.find(node) is not None

    async def instance_shutdown(self, node: Node) -> bool:
        domain = await self._p.find(node)
        return domain is not None and domain.state == VIR_DOMAIN_SHUTOFF

    async def instance_metadata(self, node: Node) -> InstanceMetadata | None:
        domain = await self._p.find(node)
        if domain is None:
            raise InstanceNotFoundError(
                f"no libvirt domain for Node {node.metadata.name} on "
                f"{', '.join(h.name for h in self._p.config.hosts)} "
                f"(nodeMapping: {self._p.config.node_mapping})"
            )
        self._p.check_renamed(node, domain)
        addresses = [NodeAddress(type="InternalIP", address=a) for a in domain.addresses]
        addresses.append(NodeAddress(type="Hostname", address=node.metadata.name))
        return InstanceMetadata(
            provider_id=domain.provider_id,
            instance_type=self._p.instance_type(domain),
            node_addresses=tuple(addresses),
            zone=domain.host.zone,
            region=domain.host.region,
        )


class LibvirtProvider(VmProvider):
    name = PROVIDER_NAME

    def __init__(self, config: LibvirtConfig, libvirt: Any | None = None) -> None:
        super().__init__()
        self.config = config
        self._libvirt = libvirt if libvirt is not None else load_libvirt()
        # libvirt prints every error to stderr by default; they are raised (and logged
        # with what to do) here instead.
        self._libvirt.registerErrorHandler(_ignore_error, None)
        self._connections = {h.name: _Connection(self._libvirt, h) for h in config.hosts}
        self._blocking = BlockingCalls(PROVIDER_NAME, config.max_concurrent_calls)
        self._instances = LibvirtInstances(self)
        self._renames_reported: dict[str, str] = {}

    # -- the contract ----------------------------------------------------------

    async def initialize(self, client_builder: ClientBuilder, stop: asyncio.Event) -> None:
        self.recorder = self._events = start_event_recorder(
            client_builder.client("libvirt-provider"), PROVIDER_NAME
        )
        if any("+" in h.uri.split(":", 1)[0] for h in self.config.hosts):
            _start_libvirt_event_loop(self._libvirt)
        await ask_each(
            {
                f"libvirt {c.describe()}": self._blocking.run(c.get)
                for c in self._connections.values()
            },
            log,
        )

    def close(self) -> None:
        for connection in self._connections.values():
            connection.reset()
        self._blocking.close()

    async def aclose(self) -> None:
        await self._close_events()
        # Closing a connection to a hung host may block: off the loop, bounded.
        try:
            async with asyncio.timeout(5):
                await asyncio.to_thread(self.close)
        except TimeoutError:
            log.warning("libvirt connections did not close within 5 s; leaving them")

    # -- lookups ------------------------------------------------------------------

    async def find(self, node: Node) -> Domain | None:
        """The Node's domain; ``None`` only when it is verifiably undefined."""
        provider_id = node.spec.provider_id
        if provider_id:
            try:
                host_name, uuid = parse_provider_id(provider_id)
            except ValueError as exc:
                raise LibvirtError(f"Node {node.metadata.name}: {exc}") from None
            connection = self._connections.get(host_name)
            if connection is None:
                raise LibvirtError(
                    f"Node {node.metadata.name} has providerID {provider_id} on host "
                    f"{host_name!r}, which is not in the cloud-config's hosts "
                    f"({', '.join(self._connections)}): add it, or the Node cannot be checked"
                )
            return await self._blocking.run(self._lookup, connection, "uuid", uuid)
        if self.config.node_mapping == "systemUUID":
            key = (node.status.node_info.system_uuid if node.status.node_info else "").lower()
            if not key:
                raise LibvirtError(
                    f"Node {node.metadata.name} reports no status.nodeInfo.systemUUID yet, "
                    "which nodeMapping: systemUUID needs (waiting for the kubelet)"
                )
            how = "uuid"
        else:
            key, how = node.metadata.name, "name"
        results = await asyncio.gather(
            *(self._blocking.run(self._lookup, c, how, key) for c in self._connections.values()),
            return_exceptions=True,
        )
        found = [r for r in results if isinstance(r, Domain)]
        failed = [r for r in results if isinstance(r, BaseException)]
        if len(found) > 1:
            where = ", ".join(d.host.name for d in found)
            raise LibvirtError(
                f"Node {node.metadata.name} matches a domain on several hosts ({where}); "
                "rename one, or set the Node's spec.providerID to libvirt://<host>/<uuid>"
            )
        if found:
            return found[0]
        if failed:
            raise failed[0]
        return None

    def _call(self, connection: _Connection, fn: Callable[[Any], T]) -> T:
        libvirt = self._libvirt
        conn = connection.get()
        try:
            return fn(conn)
        except libvirt.libvirtError as exc:
            if exc.get_error_code() == VIR_ERR_NO_DOMAIN:
                raise
            if conn.isAlive() != 1:
                connection.reset()
            raise LibvirtError(f"libvirt {connection.describe()}: {exc} (retrying)") from None

    def _lookup(self, connection: _Connection, how: str, key: str) -> Domain | None:
        """Blocking: the domain, ``None`` if the host says it has no such domain and is
        still the host it was (:meth:`_vouch`)."""
        libvirt = self._libvirt
        try:
            domain = self._call(
                connection, lambda conn: self._read(connection.host, conn, how, key)
            )
        except libvirt.libvirtError as exc:
            if exc.get_error_code() == VIR_ERR_NO_DOMAIN:
                self._call(connection, lambda conn: self._vouch(connection, conn, key))
                return None
            raise
        connection.seen[domain.uuid] = domain.name
        if connection.baseline is None:
            connection.baseline = connection.current
        return domain

    def _vouch(self, connection: _Connection, conn: Any, missing: str) -> None:
        """Raise :class:`CloudIdentityError` unless the host is the one where domains
        were found before (by its UUID), or, where it tells no UUID, holds one of the
        other domains found there before (none found before: any domain at all)."""
        now, before = connection.current, connection.baseline
        if before is not None and now != before:
            raise self._elsewhere(
                connection,
                f"is now host {now[0]}, UUID {now[1]}, not host {before[0]}, UUID "
                f"{before[1]} where this daemon found the Nodes' domains",
            )
        if before is not None and now[1] != "?":
            return  # the same hypervisor: its "no such domain" is the last word
        listed = {d.UUIDString().lower() for d in conn.listAllDomains(0)}
        known = {
            u for u, name in connection.seen.items() if missing.lower() not in (u, name.lower())
        }
        if (known and known & listed) or (not known and listed):
            return
        what = f"none of the {len(known)} domains found there before" if known else "no domain"
        raise self._elsewhere(connection, f"(host {now[0]}, UUID {now[1]}) holds {what}")

    @staticmethod
    def _elsewhere(connection: _Connection, what: str) -> CloudIdentityError:
        return CloudIdentityError(
            f"libvirt {connection.describe()} {what}, so it may not be the hypervisor the "
            'Nodes run on: its "no such domain" says nothing about whether their domains '
            "exist, and no Node is deleted for it",
            f"check that the URI {connection.host.uri} of host {connection.host.name} "
            "reaches the cluster's hypervisor (its DNS name, ssh alias or socket) and "
            "that the connection may see the domains (polkit or ACLs); if the hypervisor "
            "was replaced on purpose, restart kube-ccm",
        )

    def _read(self, host: Host, conn: Any, how: str, key: str) -> Domain:
        dom = conn.lookupByUUIDString(key) if how == "uuid" else conn.lookupByName(key)
        # One call: [state, max memory KiB, memory KiB, vCPUs, CPU time].
        state, max_kib, memory_kib, vcpus, _cpu = dom.info()
        metadata_type = ""
        if self.config.instance_type_from == "metadata":
            metadata_type = self._metadata_type(dom)
        addresses: tuple[str, ...] = ()
        if state != VIR_DOMAIN_SHUTOFF:
            addresses = self._addresses(dom)
        return Domain(
            host=host,
            uuid=dom.UUIDString().lower(),
            name=dom.name(),
            state=state,
            vcpus=vcpus,
            memory_kib=max_kib or memory_kib,
            metadata_type=metadata_type,
            addresses=addresses,
        )

    def _metadata_type(self, dom: Any) -> str:
        libvirt = self._libvirt
        try:
            text = dom.metadata(VIR_DOMAIN_METADATA_ELEMENT, METADATA_NAMESPACE, 0)
        except libvirt.libvirtError as exc:
            if exc.get_error_code() == VIR_ERR_NO_DOMAIN_METADATA:
                return ""
            raise
        try:
            element = ET.fromstring(text)
        except ET.ParseError:
            log.warning("domain %s: its kube-ccm metadata is not XML: %r", dom.name(), text)
            return ""
        return element.get("type", "").strip()

    def _addresses(self, dom: Any) -> tuple[str, ...]:
        libvirt = self._libvirt
        for source in self.config.address_sources:
            try:
                interfaces = dom.interfaceAddresses(_ADDRESS_SOURCES[source], 0)
            except libvirt.libvirtError as exc:
                if exc.get_error_code() == VIR_ERR_NO_DOMAIN:
                    raise
                log.debug("domain %s: no addresses from %s: %s", dom.name(), source, exc)
                continue
            found: list[str] = []
            for ifname, interface in sorted((interfaces or {}).items()):
                if ifname == "lo":
                    continue
                for entry in interface.get("addrs") or ():
                    address = str(entry.get("addr", ""))
                    if not address or address.startswith(("127.", "fe80:", "::1")):
                        continue
                    if address not in found:
                        found.append(address)
            if found:
                return tuple(found)
        return ()

    # -- what it reports -------------------------------------------------------

    def instance_type(self, domain: Domain) -> str:
        if domain.metadata_type:
            return domain.metadata_type
        return f"vcpu{domain.vcpus}-{domain.memory_kib // 1024}mib"

    def check_renamed(self, node: Node, domain: Domain) -> None:
        """A Warning Event (once per new name) when the Node's domain was renamed."""
        node_name = node.metadata.name
        if (
            self.config.node_mapping != "name"
            or not node.spec.provider_id
            or domain.name == node_name
            or self._renames_reported.get(node_name) == domain.name
        ):
            return
        self._renames_reported[node_name] = domain.name
        message = (
            f"the libvirt domain {domain.uuid} of Node {node_name} on host {domain.host.name} "
            f"is now named {domain.name!r}; kube-ccm follows it by the UUID in the "
            "providerID, but a new Node of this name would not find it"
        )
        self.event(node, RENAMED_REASON, message)


def _identity(conn: Any) -> tuple[str, str]:
    """(hostname, host UUID) of the connection, "?" for what it does not tell."""
    hostname, uuid = "?", "?"
    with contextlib.suppress(Exception):
        hostname = str(conn.getHostname())
    with contextlib.suppress(Exception):
        found = ET.fromstring(conn.getCapabilities()).findtext("host/uuid")
        uuid = found or "?"
    return hostname, uuid


def _ignore_error(_context: object, _error: object) -> None:
    return None


__all__ = [
    "METADATA_NAMESPACE",
    "PROVIDER_NAME",
    "Domain",
    "LibvirtError",
    "LibvirtInstances",
    "LibvirtProvider",
    "LibvirtUnavailableError",
    "load_libvirt",
    "parse_provider_id",
]
