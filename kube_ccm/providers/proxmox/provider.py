"""The ``proxmox`` provider: Nodes are QEMU VMs in one or more Proxmox VE clusters.

Capabilities: ``instances_v2``. Compatible with the Go CCM
(sergelogvinov/proxmox-cloud-controller-manager), so its Nodes switch without being
initialised again:

* **providerID** ``proxmox://<region>/<vmid>`` (``providerIDFormat: vmid``, the
  default) or ``proxmox://<SMBIOS UUID>`` (``uuid``, the Go CCM's ``capmox`` mode).
  A Node keeps whatever providerID it has; both forms are read.
* **Which VM is a Node's**: the one its providerID names, confirmed by the SMBIOS
  UUID (``smbios1: uuid=...`` in the VM's config) when the Node reports a
  ``systemUUID`` and the VM's name is not the Node's. A VMID that changed (a clone
  or restore under a new ID) is found again by that UUID. Before a providerID: the
  VM named as the Node (or as its first DNS label), else the VM whose SMBIOS UUID is
  the Node's ``systemUUID``. Two VMs of one name, in one cluster or several, are
  never guessed between: the UUID decides if it can, else a Warning Event
  ``DuplicateVMName`` on the Node names both and the lookup fails (retried).
* **exists** is false only when every configured cluster answered and none lists
  the VM (by VMID and by UUID), and the token holds ``VM.Audit`` on ``/vms`` (or
  ``/``) in each: PVE filters ``/cluster/resources`` by that privilege, so a token
  without it (an ACL edit, a token made with privilege separation and no ACL of its
  own) sees no VMs, which is no evidence that they are gone. That is checked with
  ``GET /access/permissions`` after the listing a "not found" rests on (once per
  listing, shared by a wave, only when something is not found). A cluster that does
  not answer, lost quorum, a 5xx, a refused token, a missing ``VM.Audit``
  (:class:`CloudIdentityError`): the call raises, and the controllers retry; no
  Node is deleted for it.
* **shutdown**: the VM is ``stopped``, or ``paused``/``suspended`` by QEMU. A VM
  whose PVE node is offline (status ``unknown``) raises: nobody can tell; so does a
  VM locked by a backup or migration that is not plainly running.
* **metadata**: region = the cluster's ``region``; zone = the PVE node, or with
  ``zone: haGroup`` the VM's HA group (PVE 9: its node-affinity rule) when it has
  one, so a live migration keeps it; instance type = the VM's tag
  ``instance-type.<value>``, else the SMBIOS ``sku`` when set (as the Go CCM), else
  ``<N>VCPU-<M>GB``; extra
  labels ``topology.proxmox.sinextra.dev/region`` and ``/zone`` as the Go CCM sets
  them, and ``proxmox.kube-ccm.io/node`` and ``/pool`` (when the VM is in a pool);
  addresses from the guest agent (``network-get-interfaces``, without loopback,
  link-local and container/CNI interfaces), else from cloud-init ``ipconfigN``, plus
  the Node's name as ``Hostname``; the kubelet's ``--node-ip`` is honoured (see
  ``_addresses``).
* **authoritative** (the kubelet serving certificate approver may rest on it): a VM
  is a Node's when its name is the Node's name or first DNS label.

One ``GET /cluster/resources?type=vm`` per cluster answers every lookup for
``cacheTTL``: callers arriving while it is in flight share it (a wave).
"""

from __future__ import annotations

import asyncio
import base64
import functools
import ipaddress
import logging
import re
import time
import uuid as uuidlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from urllib.parse import unquote

from kube_ccm.api.objects import Node, NodeAddress
from kube_ccm.api.wellknown import ANNOTATION_PROVIDED_NODE_IP
from kube_ccm.cloudprovider import (
    ClientBuilder,
    CloudIdentityError,
    InstanceMetadata,
    InstanceNotFoundError,
    InstancesV2,
    KubeClient,
    start_event_recorder,
)
from kube_ccm.providers._vm import (
    LABEL_VALUE,
    VmProvider,
    ask_each,
    provider_id_path,
    stand_in,
)
from kube_ccm.providers.proxmox.api import (
    ProxmoxAuthError,
    ProxmoxError,
    ProxmoxLockedError,
    ProxmoxNotFoundError,
    ProxmoxNotImplementedError,
    ProxmoxTLSError,
    PveClient,
)
from kube_ccm.providers.proxmox.config import PROVIDER_NAME, ProxmoxConfig

log = logging.getLogger(__name__)

EVENT_SOURCE = "proxmox"
DUPLICATE_REASON = "DuplicateVMName"
LABEL_GROUP = "proxmox.sinextra.dev"
LABEL_REGION = f"topology.{LABEL_GROUP}/region"
LABEL_ZONE = f"topology.{LABEL_GROUP}/zone"
LABEL_PVE_NODE = "proxmox.kube-ccm.io/node"
LABEL_POOL = "proxmox.kube-ccm.io/pool"
INSTANCE_TYPE_TAG = "instance-type."
"""A VM tag ``instance-type.<value>`` sets its instance type."""
GIB = 1024**3
_IPCONFIG = re.compile(r"^ipconfig\d+$")
# Interfaces a container runtime or CNI makes inside the guest: their addresses are
# not the Node's.
_VIRTUAL_INTERFACES = (
    "lo",
    "docker",
    "veth",
    "cni",
    "flannel",
    "cali",
    "cilium",
    "lxc",
    "vxlan",
    "tunl",
    "kube-",
    "weave",
    "genev",
    "nodelocaldns",
)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Vm:
    """One row of ``/cluster/resources?type=vm`` (QEMU guests, templates left out)."""

    region: str
    vmid: int
    name: str
    node: str
    status: str
    maxcpu: int
    maxmem: int
    lock: str
    pool: str
    tags: tuple[str, ...] = ()

    @property
    def ref(self) -> str:
        return f"{self.region}/{self.vmid}"


@dataclass(frozen=True, slots=True)
class ProbeLine:
    """One line of ``kube-ccm doctor`` about one cluster."""

    name: str
    status: str
    """PASS, WARN or FAIL."""
    detail: str
    fix: str = ""


@dataclass(frozen=True, slots=True)
class Found:
    """The VM a Node maps to, and its config when the lookup read it."""

    vm: Vm
    config: dict[str, Any] | None = None


def parse_provider_id(provider_id: str) -> tuple[str, int] | str:
    """``(region, vmid)`` of ``proxmox://<region>/<vmid>``, or the UUID of
    ``proxmox://<uuid>``; ValueError with what is expected otherwise."""
    rest = provider_id_path(provider_id, PROVIDER_NAME)
    region, slash, vmid = rest.partition("/")
    if not slash:
        try:
            return str(_uuid(rest))
        except ValueError:
            pass
    if not slash or not region or not vmid.isdigit():
        raise ValueError(
            f"providerID {provider_id!r} is neither proxmox://<region>/<vmid> nor "
            "proxmox://<SMBIOS UUID>"
        )
    return region, int(vmid)


def _uuid(text: str) -> str:
    return str(uuidlib.UUID(text.strip()))


def smbios(config: dict[str, Any], key: str) -> str:
    """A field of the VM's ``smbios1`` (``uuid=...,sku=<base64>,base64=1``)."""
    fields: dict[str, str] = {}
    for part in str(config.get("smbios1") or "").split(","):
        name, eq, value = part.partition("=")
        if eq:
            fields[name.strip()] = value.strip()
    value = fields.get(key, "")
    if key != "uuid" and value and fields.get("base64") == "1":
        try:
            return base64.b64decode(value, validate=True).decode()
        except (ValueError, UnicodeDecodeError):
            return ""
    return unquote(value) if key != "uuid" else value.lower()


def system_uuid(node: Node) -> str:
    info = node.status.node_info
    raw = info.system_uuid if info else ""
    try:
        return _uuid(raw) if raw else ""
    except ValueError:
        return ""


def names_match(vm_name: str, node_name: str) -> bool:
    vm_name, node_name = vm_name.lower(), node_name.lower()
    return vm_name == node_name or node_name.split(".", 1)[0] == vm_name


class _Shared(Generic[T]):
    """One answer, fetched once per wave (callers arriving while it is in flight share
    it) and then served for ``ttl`` seconds."""

    def __init__(self, fetch: Callable[[], Awaitable[T]], ttl: float) -> None:
        self._fetch = fetch
        self.ttl = ttl
        self._value: T | None = None
        self._at = 0.0
        self._inflight: asyncio.Future[T] | None = None

    async def get(self, *, fresh: bool = False) -> T:
        now = time.monotonic()
        if not fresh and self._value is not None and now - self._at < self.ttl:
            return self._value
        if self._inflight is None:
            self._inflight = asyncio.ensure_future(self._fetch())
            self._inflight.add_done_callback(self._done)
        return await asyncio.shield(self._inflight)

    def _done(self, future: asyncio.Future[T]) -> None:
        self._inflight = None
        if not future.cancelled() and future.exception() is None:
            self._value, self._at = future.result(), time.monotonic()


class _Inventory:
    """One cluster's VM list (and HA groups), shared by the lookups of one wave and
    for ``ttl`` seconds."""

    def __init__(self, client: PveClient, ttl: float) -> None:
        self.client = client
        self.ttl = ttl
        self._vms = _Shared(self._list, ttl)
        self._ha = _Shared(self._ha_groups, ttl)
        self._sight = _Shared(self._audit_paths, 0.0)
        self.listed_at = 0.0
        """When the last listing was asked for (monotonic)."""
        self._sight_at = -1.0
        """When the last privilege check that found ``VM.Audit`` on ``/vms`` was asked for."""
        self.uuids: dict[tuple[int, str], str] = {}
        """SMBIOS UUID by (vmid, PVE node), from configs read before."""

    async def vms(self, *, fresh: bool = False) -> tuple[Vm, ...]:
        return await self._vms.get(fresh=fresh)

    async def ha_groups(self) -> dict[int, str]:
        """The HA group of each VM that has one, by VMID."""
        return await self._ha.get()

    async def sees_every_vm(self) -> None:
        """Raise :class:`CloudIdentityError` unless the token holds ``VM.Audit`` on
        ``/vms`` (or ``/``), checked after the last listing was asked for: only then
        does a VM missing from it mean the VM is gone. One ``GET /access/permissions``
        per listing at most, shared by the callers of a wave."""
        needed = self.listed_at
        while self._sight_at < needed:
            asked, paths = await self._sight.get(fresh=True)
            if "/" not in paths and "/vms" not in paths:
                raise CloudIdentityError(
                    f"cluster {self.client.cluster.region}: {_who(self.client)} holds no "
                    "VM.Audit on /vms, so PVE lists to it none of the VMs, or only some: "
                    "a VM missing from its answer is not known to be gone, and no Node "
                    "is deleted for it",
                    audit_hint(self.client),
                )
            self._sight_at = max(self._sight_at, asked)

    async def _audit_paths(self) -> tuple[float, frozenset[str]]:
        """When it was asked, and where the token (or ticket user) holds ``VM.Audit``
        among ``/`` and ``/vms``, from ``GET /access/permissions?path=/vms`` (PVE
        answers ``{path: {privilege: 1}}``, propagation applied)."""
        asked = time.monotonic()
        tree = await self.client.get("/access/permissions", path="/vms")
        return asked, frozenset(
            path
            for path, privileges in (tree or {}).items()
            if path in ("/", "/vms") and isinstance(privileges, dict) and privileges.get("VM.Audit")
        )

    async def _list(self) -> tuple[Vm, ...]:
        region = self.client.cluster.region
        self.listed_at = time.monotonic()
        rows = await self.client.get("/cluster/resources", type="vm")
        vms = []
        for row in rows or ():
            if row.get("type") != "qemu" or row.get("template"):
                continue
            vms.append(
                Vm(
                    region=region,
                    vmid=int(row["vmid"]),
                    name=str(row.get("name") or ""),
                    node=str(row.get("node") or ""),
                    status=str(row.get("status") or "unknown"),
                    maxcpu=int(row.get("maxcpu") or 0),
                    maxmem=int(row.get("maxmem") or 0),
                    lock=str(row.get("lock") or ""),
                    pool=str(row.get("pool") or ""),
                    tags=tuple(t for t in re.split(r"[;,\s]+", str(row.get("tags") or "")) if t),
                )
            )
        listed = {(v.vmid, v.node) for v in vms}
        for key in [k for k in self.uuids if k not in listed]:
            del self.uuids[key]
        return tuple(vms)

    async def config(self, vm: Vm) -> dict[str, Any]:
        config = await self.client.get(f"/nodes/{vm.node}/qemu/{vm.vmid}/config")
        config = config if isinstance(config, dict) else {}
        self.uuids[(vm.vmid, vm.node)] = smbios(config, "uuid")
        return config

    async def _ha_groups(self) -> dict[int, str]:
        """PVE 8 names a resource's group in ``/cluster/ha/resources``; PVE 9 replaced
        groups by node-affinity rules (``/cluster/ha/rules``), and its upgrade turns
        group ``G`` into rule ``ha-group-G``, which counts as ``G`` so the zone stays."""
        resources, rules = await asyncio.gather(
            self.client.get("/cluster/ha/resources", type="vm"), self._ha_rules()
        )
        groups: dict[int, str] = {}
        for rule in sorted(rules, key=lambda r: str(r.get("rule") or "")):
            if rule.get("type") != "node-affinity" or _true(rule.get("disable")):
                continue
            name = str(rule.get("rule") or "").removeprefix("ha-group-")
            for vmid in _ha_vmids(rule.get("resources")):
                groups.setdefault(vmid, name)
        for resource in resources or ():
            group = str(resource.get("group") or "")
            for vmid in _ha_vmids(resource.get("sid")):
                if group:
                    groups[vmid] = group
        return groups

    async def _ha_rules(self) -> list[dict[str, Any]]:
        try:
            rules = await self.client.get("/cluster/ha/rules", type="node-affinity")
        except ProxmoxNotImplementedError:
            return []  # before PVE 9: groups only
        return [r for r in rules or () if isinstance(r, dict)]


class ProxmoxInstances(InstancesV2):
    authoritative = True
    """Answers are Proxmox VE's (the VM list, its config, its guest agent). Given a Node
    without annotations and status, the kubelet's ``--node-ip`` and ``systemUUID`` play
    no part (the approver's call): only the VM's own addresses are reported."""

    def __init__(self, provider: ProxmoxProvider) -> None:
        self._p = provider

    async def instance_belongs_to(self, node_name: str, metadata: InstanceMetadata) -> bool:
        """The VM's own name is the Node's (or its first DNS label), as a Node is found
        by name before it has a providerID. A VM found by SMBIOS UUID under another
        name is not proof: the Node's ``systemUUID`` is the node's own word."""
        found = await self._p.find(stand_in(node_name, metadata.provider_id))
        return found is not None and names_match(found.vm.name, node_name)

    async def instance_exists(self, node: Node) -> bool:
        return await self._p.find(node) is not None

    async def instance_shutdown(self, node: Node) -> bool:
        found = await self._p.find(node)
        if found is None:
            return False
        return await self._p.shut_down(found.vm)

    async def instance_metadata(self, node: Node) -> InstanceMetadata | None:
        found = await self._p.find(node)
        if found is None:
            raise InstanceNotFoundError(
                f"no Proxmox VM for Node {node.metadata.name} in "
                f"{', '.join(c.region for c in self._p.config.clusters)}: none is named so, "
                "nor has its systemUUID as SMBIOS UUID"
            )
        return await self._p.metadata(node, found)


class ProxmoxProvider(VmProvider):
    name = PROVIDER_NAME

    def __init__(self, config: ProxmoxConfig) -> None:
        super().__init__()
        self.config = config
        self._clients = {
            c.region: PveClient(c, timeout=config.request_timeout) for c in config.clusters
        }
        self._inventories = {
            region: _Inventory(client, config.cache_ttl) for region, client in self._clients.items()
        }
        self._instances = ProxmoxInstances(self)
        self._credential_tasks: list[asyncio.Task[None]] = []

    # -- the contract ----------------------------------------------------------

    async def initialize(self, client_builder: ClientBuilder, stop: asyncio.Event) -> None:
        client = client_builder.client("proxmox-provider")
        if isinstance(client, KubeClient):
            self.recorder = self._events = start_event_recorder(client, EVENT_SOURCE)
        for pve in self._clients.values():
            if pve.cluster.token_secret.file is not None:
                self._credential_tasks.append(pve.credentials.start(stop))
        answers = await ask_each(
            {
                f"Proxmox cluster {pve.cluster.region} ({pve.cluster.api})": pve.get("/version")
                for pve in self._clients.values()
            },
            log,
        )
        for pve, result in zip(self._clients.values(), answers.values(), strict=True):
            if not isinstance(result, BaseException):
                log.info(
                    "Proxmox cluster %s answers: PVE %s",
                    pve.cluster.region,
                    (result or {}).get("version", "?"),
                )

    async def aclose(self) -> None:
        for watch in self._credential_tasks:
            watch.cancel()
        await asyncio.gather(*self._credential_tasks, return_exceptions=True)
        self._credential_tasks.clear()
        await self._close_events()
        await asyncio.gather(*(c.aclose() for c in self._clients.values()))

    # -- kube-ccm doctor -------------------------------------------------------------

    async def doctor_probe(self) -> list[ProbeLine]:
        """Per cluster: does it answer (TLS, token), and does the token hold what the
        provider reads with (``VM.Audit`` on ``/vms``; the guest agent's privilege; with
        ``zone: haGroup`` ``Sys.Audit`` on ``/``)."""
        return list(await asyncio.gather(*(self._probe(c) for c in self._clients.values())))

    async def _probe(self, pve: PveClient) -> ProbeLine:
        cluster = pve.cluster
        name = f"cloud proxmox {cluster.region}"
        grant = f"`pveum acl modify <path> --tokens {cluster.token_id} --roles <role>`"
        if cluster.ticket:
            grant = f"`pveum acl modify <path> --users {cluster.token_id} --roles <role>`"
        try:
            version = await pve.get("/version")
            held_vms = await self._held(pve, "/vms")
            held_root = await self._held(pve, "/") if self.config.zone == "haGroup" else None
        except ProxmoxError as exc:
            fix = "check url and the network path to it"
            if isinstance(exc, ProxmoxAuthError):
                fix = "check tokenId and the secret in tokenSecret (or username and password)"
            elif isinstance(exc, ProxmoxTLSError):
                fix = "give the CA that signed the API's certificate as caFile"
            return ProbeLine(name, "FAIL", str(exc), fix)
        release = str((version or {}).get("version") or "?")
        agent: tuple[str, ...] = ("VM.GuestAgent.Audit", "VM.GuestAgent.Unrestricted")
        if release.split(".", 1)[0].isdigit() and int(release.split(".", 1)[0]) < 9:
            agent = ("VM.Monitor",)
        who = f"PVE {release} at {cluster.api}, {cluster.token_id}"
        if "VM.Audit" not in held_vms:
            return ProbeLine(
                name,
                "FAIL",
                f"{who} lacks VM.Audit on /vms: VMs cannot be listed nor read",
                grant.replace("<path>", "/vms").replace("<role>", "PVEAuditor"),
            )
        if held_root is not None and "Sys.Audit" not in held_root:
            return ProbeLine(
                name,
                "FAIL",
                f"{who} lacks Sys.Audit on /: zone: haGroup cannot read the HA groups",
                grant.replace("<path>", "/").replace("<role>", "PVEAuditor"),
            )
        if not any(p in held_vms for p in agent):
            return ProbeLine(
                name,
                "WARN",
                f"{who} lacks {' or '.join(agent)} on /vms: addresses come from cloud-init "
                "only, not from the guest agent",
                grant.replace("<path>", "/vms").replace("<role>", f"a role with {agent[0]}"),
            )
        return ProbeLine(name, "PASS", f"{who} holds what the provider reads with")

    @staticmethod
    async def _held(pve: PveClient, path: str) -> set[str]:
        """Privileges the token holds on ``path`` (PVE answers ``{path: {priv: 1}}``)."""
        answer = await pve.get("/access/permissions", path=path)
        held: set[str] = set()
        for granted, privileges in (answer or {}).items():
            if granted in ("/", path) or path.startswith(f"{granted.rstrip('/')}/"):
                held.update(p for p, on in (privileges or {}).items() if on)
        return held

    # -- lookups ------------------------------------------------------------------

    def client(self, region: str) -> PveClient:
        return self._clients[region]

    async def _each(
        self, fn: Callable[[_Inventory], Awaitable[T]]
    ) -> list[tuple[str, T | BaseException]]:
        regions = list(self._inventories)
        results = await asyncio.gather(
            *(fn(self._inventories[r]) for r in regions), return_exceptions=True
        )
        return list(zip(regions, results, strict=True))

    async def find(self, node: Node) -> Found | None:
        """The Node's VM; ``None`` only when every cluster answered, none has it, and
        each token can see every VM (else :class:`CloudIdentityError`)."""
        found = await self._find(node)
        if found is None:
            for inventory in self._inventories.values():
                await inventory.sees_every_vm()
        return found

    async def _find(self, node: Node) -> Found | None:
        name = node.metadata.name
        uuid = system_uuid(node)
        provider_id = node.spec.provider_id
        if provider_id:
            try:
                parsed = parse_provider_id(provider_id)
            except ValueError as exc:
                raise ProxmoxError(f"Node {name}: {exc}") from None
            if isinstance(parsed, str):
                return await self._by_uuid(node, parsed)
            region, vmid = parsed
            inventory = self._inventories.get(region)
            if inventory is None:
                raise ProxmoxError(
                    f"Node {name} has providerID {provider_id} in region {region!r}, which "
                    f"is not among the cloud-config's clusters "
                    f"({', '.join(self._inventories)}): add that cluster, or the Node "
                    "cannot be checked"
                )
            vm = next((v for v in await inventory.vms() if v.vmid == vmid), None)
            if vm is not None:
                if not uuid or names_match(vm.name, name):
                    return Found(vm)
                config = await self._config(inventory, vm)
                if config is not None and smbios(config, "uuid") in ("", uuid):
                    return Found(vm, config)
            if not uuid:
                # Without a UUID to search by, the listing is the last word, but only
                # a fresh one: a VM just restored may be missing from a cached answer.
                fresh = await inventory.vms(fresh=True)
                vm = next((v for v in fresh if v.vmid == vmid), None)
                return Found(vm) if vm is not None else None
            # The VMID is gone or holds another VM now: a clone or restore under a new
            # ID keeps the SMBIOS UUID, so look for it.
            return await self._by_uuid(node, uuid)
        by_name = await self._by_name(node)
        if by_name is not None:
            return by_name
        if uuid:
            return await self._by_uuid(node, uuid)
        return None

    async def _config(self, inventory: _Inventory, vm: Vm) -> dict[str, Any] | None:
        try:
            return await inventory.config(vm)
        except ProxmoxNotFoundError:
            return None  # destroyed or migrated between the listing and now

    async def _by_name(self, node: Node) -> Found | None:
        name = node.metadata.name
        listed = await self._each(lambda inv: inv.vms())
        failed = [(r, x) for r, x in listed if isinstance(x, BaseException)]
        matches = [
            vm
            for _, vms in listed
            if not isinstance(vms, BaseException)
            for vm in vms
            if names_match(vm.name, name)
        ]
        if failed:
            # A cluster that did not answer may hold a second VM of this name.
            region, error = failed[0]
            raise _again(
                error,
                f"Node {name}: cluster {region} did not answer, so a VM named {name} cannot "
                f"be told apart from one there: {error}",
            ) from None
        if len(matches) <= 1:
            return Found(matches[0]) if matches else None
        uuid = system_uuid(node)
        if uuid:
            configs = await asyncio.gather(
                *(self._config(self._inventories[vm.region], vm) for vm in matches)
            )
            same = [
                Found(vm, c)
                for vm, c in zip(matches, configs, strict=True)
                if c is not None and smbios(c, "uuid") == uuid
            ]
            if len(same) == 1:
                return same[0]
        where = " and ".join(f"VM {vm.vmid} on {vm.node} in {vm.region}" for vm in matches)
        message = (
            f"Node {name} matches several Proxmox VMs by name: {where}; rename one, or give "
            "the VM the Node's systemUUID in smbios1, or set the Node's providerID"
        )
        self.event(node, DUPLICATE_REASON, message)
        raise ProxmoxError(message)

    async def _by_uuid(self, node: Node, uuid: str) -> Found | None:
        """The VM whose SMBIOS UUID is ``uuid``, searching every cluster; configs read
        before are reused, and a miss is confirmed with fresh listings and configs."""
        for fresh in (False, True):
            results = await self._each(functools.partial(self._search_uuid, uuid=uuid, fresh=fresh))
            found = [x for _, x in results if isinstance(x, Found)]
            failed = [(r, x) for r, x in results if isinstance(x, BaseException)]
            if len(found) > 1:
                where = " and ".join(f.vm.ref for f in found)
                message = (
                    f"Node {node.metadata.name}: SMBIOS UUID {uuid} is on several VMs ({where})"
                )
                self.event(node, DUPLICATE_REASON, message)
                raise ProxmoxError(message)
            if found:
                return found[0]
            if failed:
                region, error = failed[0]
                raise _again(
                    error,
                    f"Node {node.metadata.name}: cluster {region} did not answer while looking "
                    f"for SMBIOS UUID {uuid}: {error}",
                ) from None
        return None

    async def _search_uuid(self, inventory: _Inventory, *, uuid: str, fresh: bool) -> Found | None:
        vms = await inventory.vms(fresh=fresh)
        unknown = [vm for vm in vms if fresh or (vm.vmid, vm.node) not in inventory.uuids]
        configs = await asyncio.gather(*(self._config(inventory, vm) for vm in unknown))
        for vm, config in zip(unknown, configs, strict=True):
            if config is not None and smbios(config, "uuid") == uuid:
                return Found(vm, config)
        for vm in vms:
            if inventory.uuids.get((vm.vmid, vm.node)) == uuid:
                return Found(vm)
        return None

    # -- what it reports -------------------------------------------------------

    async def shut_down(self, vm: Vm) -> bool:
        """Stopped, or paused/suspended by QEMU; a VM locked by a task (a backup in
        stop or suspend mode, the pause at the end of a live migration) raises
        :class:`ProxmoxLockedError` instead, so it is retried and never tainted for it.
        A hibernated VM (lock ``suspended``) is shut down."""
        locked = vm.lock not in ("", "suspended")
        if vm.status == "stopped" and not locked:
            return True
        if vm.status not in ("running", "stopped"):
            raise ProxmoxError(
                f"VM {vm.ref} on PVE node {vm.node} has status {vm.status!r} (the node is "
                "offline or not answering): cannot tell whether it is shut down"
            )
        qmp = "stopped"
        if vm.status == "running":
            status = await self.client(vm.region).get(
                f"/nodes/{vm.node}/qemu/{vm.vmid}/status/current"
            )
            qmp = str((status or {}).get("qmpstatus") or (status or {}).get("status") or "")
        if locked and qmp != "running":
            raise ProxmoxLockedError(
                f"VM {vm.ref} on PVE node {vm.node} is locked ({vm.lock}) and QEMU reports "
                f"{qmp!r}: whether it is shut down is checked again once the lock is "
                f"released; if no task holds it, `qm unlock {vm.vmid}` on {vm.node}"
            )
        return qmp in ("stopped", "paused", "suspended", "prelaunch")

    async def metadata(self, node: Node, found: Found) -> InstanceMetadata:
        vm = found.vm
        config = found.config
        if config is None:
            config = await self._config(self._inventories[vm.region], vm)
            if config is None:
                raise ProxmoxError(f"VM {vm.ref} vanished while Node {node.metadata.name} was read")
        if self.config.provider_id_format == "uuid" and smbios(config, "uuid"):
            provider_id = f"{PROVIDER_NAME}://{smbios(config, 'uuid')}"
        else:
            provider_id = f"{PROVIDER_NAME}://{vm.region}/{vm.vmid}"
        ips = await self._addresses(node, vm, config)
        addresses = [NodeAddress(type=self.config.address_type(a), address=a) for a in ips]
        addresses.append(NodeAddress(type="Hostname", address=node.metadata.name))
        zone = await self.zone(vm)
        return InstanceMetadata(
            provider_id=provider_id,
            instance_type=self.instance_type(vm, config),
            node_addresses=tuple(addresses),
            zone=zone,
            region=vm.region,
            additional_labels=self.labels(vm, zone),
        )

    async def zone(self, vm: Vm) -> str:
        """The PVE node; with ``zone: haGroup`` the VM's HA group when it has one."""
        if self.config.zone != "haGroup":
            return vm.node
        group = (await self._inventories[vm.region].ha_groups()).get(vm.vmid, "")
        if not group:
            log.debug("VM %s is in no HA group; its zone is its PVE node %s", vm.ref, vm.node)
            return vm.node
        if not LABEL_VALUE.match(group):
            log.warning(
                "VM %s: HA group %r is not a label value; its zone is its PVE node %s",
                vm.ref,
                group,
                vm.node,
            )
            return vm.node
        return group

    @staticmethod
    def labels(vm: Vm, zone: str | None = None) -> dict[str, str]:
        """The Go CCM's topology labels, and kube-ccm's for the PVE node and pool."""
        labels = {LABEL_REGION: vm.region, LABEL_ZONE: zone or vm.node, LABEL_PVE_NODE: vm.node}
        if vm.pool and LABEL_VALUE.match(vm.pool):
            labels[LABEL_POOL] = vm.pool
        return labels

    @staticmethod
    def instance_type(vm: Vm, config: dict[str, Any]) -> str:
        """The VM's ``instance-type.<value>`` tag, else its SMBIOS ``sku`` (as the Go
        CCM), else ``<cores>VCPU-<GiB>GB``. PVE allows no ``=`` in a tag, hence the dot."""
        tagged = sorted(
            {t.removeprefix(INSTANCE_TYPE_TAG) for t in vm.tags if t.startswith(INSTANCE_TYPE_TAG)}
        )
        if len(tagged) == 1 and LABEL_VALUE.match(tagged[0]):
            return tagged[0]
        if tagged:
            log.warning(
                "VM %s: ignoring its tags %s: give one %s<value> tag, the value a label "
                "value (letters, digits, '-', '_', '.')",
                vm.ref,
                ", ".join(INSTANCE_TYPE_TAG + t for t in tagged),
                INSTANCE_TYPE_TAG,
            )
        sku = smbios(config, "sku")
        if sku and LABEL_VALUE.match(sku):
            return sku
        return f"{vm.maxcpu}VCPU-{vm.maxmem // GIB}GB"

    async def _addresses(self, node: Node, vm: Vm, config: dict[str, Any]) -> list[str]:
        """The agent's addresses, else cloud-init's, then the kubelet's ``--node-ip``
        (``alpha.kubernetes.io/provided-node-ip``) honoured: kept when the agent reports
        it on an interface left out here (a BGP address on ``lo`` or ``dummy0``), used
        alone when the VM tells none (DHCP, no agent: the Go CCM's default). An IP the
        VM does not have is not added: the node controller says so on the Node."""
        every: list[str] = []
        found: list[str] = []
        if vm.status == "running" and _agent_enabled(config):
            try:
                answer = await self.client(vm.region).get(
                    f"/nodes/{vm.node}/qemu/{vm.vmid}/agent/network-get-interfaces"
                )
            except ProxmoxError as exc:
                if "guest agent is not running" not in str(exc):
                    raise
                log.debug("VM %s: no guest agent yet; addresses from cloud-init", vm.ref)
            else:
                found = agent_addresses(answer)
                every = agent_addresses(answer, every_interface=True)
        if not found:
            found = cloud_init_addresses(config)
        if self.config.ipv6_support_disabled:
            found = [ip for ip in found if ":" not in ip]
        provided = provided_node_ips(node)
        if not found:
            return provided
        kept = [ip for ip in provided if ip not in found and ip in every]
        return kept + found


def _who(client: PveClient) -> str:
    kind = "user" if client.cluster.ticket else "API token"
    return f"the {kind} {client.cluster.token_id}"


def audit_hint(client: PveClient) -> str:
    """What to do when the token lacks ``VM.Audit`` on ``/vms``: the ``pveum`` line,
    and why a token may hold less than its user (privilege separation)."""
    token_id = client.cluster.token_id
    if client.cluster.ticket:
        return (
            f"grant VM.Audit on /vms to {token_id}: `pveum acl modify /vms --users "
            f"{token_id} --roles PVEAuditor`"
        )
    return (
        f"grant VM.Audit on /vms to the token: `pveum acl modify /vms --tokens {token_id} "
        "--roles PVEAuditor`; a token made with privilege separation (`pveum user token "
        "add ... --privsep 1`, the default) holds only what an ACL gives the token itself, "
        "and never more than its user"
    )


def _again(error: BaseException, message: str) -> BaseException:
    """``error`` told in ``message``, of the same class, so the boundary still retries
    a transient one and an auth error stays one."""
    if isinstance(error, ProxmoxError):
        return type(error)(message)
    return error


def _true(value: Any) -> bool:
    return str(value or "0").lower() in ("1", "true", "on", "yes")


def _ha_vmids(sids: Any) -> list[int]:
    """VMIDs of the QEMU guests in an HA resource list (``vm:100,ct:101``, or ``100``)."""
    vmids = []
    for sid in str(sids or "").split(","):
        kind, colon, vmid = sid.strip().rpartition(":")
        if (kind == "vm" or not colon) and vmid.isdigit():
            vmids.append(int(vmid))
    return vmids


def _agent_enabled(config: dict[str, Any]) -> bool:
    value = str(config.get("agent") or "0")
    first = value.split(",", 1)[0]
    if first.startswith("enabled="):
        first = first.removeprefix("enabled=")
    return first in ("1", "true", "on", "yes")


def _usable(address: str) -> str | None:
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return None
    if ip.is_loopback or ip.is_link_local or ip.is_unspecified or ip.is_multicast:
        return None
    return str(ip)


def provided_node_ips(node: Node) -> list[str]:
    """The IPs of the Node's ``alpha.kubernetes.io/provided-node-ip`` (the kubelet's
    ``--node-ip``); what does not parse is left to the node controller to report."""
    value = node.metadata.annotations.get(ANNOTATION_PROVIDED_NODE_IP) or ""
    ips = [_usable(part.strip()) for part in value.split(",") if part.strip()]
    return [ip for ip in ips if ip]


def agent_addresses(answer: Any, *, every_interface: bool = False) -> list[str]:
    """The guest's addresses from ``network-get-interfaces``, in its order; without
    loopback and container/CNI interfaces unless ``every_interface``."""
    interfaces = answer.get("result") if isinstance(answer, dict) else answer
    found: list[str] = []
    for interface in interfaces or ():
        name = str(interface.get("name") or "")
        if name.startswith(_VIRTUAL_INTERFACES) and not every_interface:
            continue
        for entry in interface.get("ip-addresses") or ():
            address = _usable(str(entry.get("ip-address") or ""))
            if address and address not in found:
                found.append(address)
    return found


def cloud_init_addresses(config: dict[str, Any]) -> list[str]:
    """Static addresses of cloud-init's ``ipconfigN`` (``ip=10.0.0.5/24,gw=...``)."""
    found: list[str] = []
    for key in sorted((k for k in config if _IPCONFIG.match(k)), key=lambda k: int(k[8:])):
        for part in str(config[key]).split(","):
            name, _, value = part.partition("=")
            if name.strip() in ("ip", "ip6"):
                address = _usable(value.strip().split("/", 1)[0])
                if address and address not in found:
                    found.append(address)
    return found


__all__ = [
    "DUPLICATE_REASON",
    "INSTANCE_TYPE_TAG",
    "LABEL_POOL",
    "LABEL_PVE_NODE",
    "LABEL_REGION",
    "LABEL_ZONE",
    "Found",
    "ProbeLine",
    "ProxmoxInstances",
    "ProxmoxProvider",
    "Vm",
    "agent_addresses",
    "audit_hint",
    "cloud_init_addresses",
    "parse_provider_id",
    "provided_node_ips",
    "smbios",
]
