"""The simulated cloud's state: a SQLite database anyone can seed and inspect.

One file holds the whole cloud (instances, load balancers and their IP pool,
routes, volumes, per-method call counters, injected faults and the credentials
the cloud accepts, as salted hashes), so it survives
a daemon restart and the ``kube-ccm simcloud`` command can change it while the
daemon runs. ``:memory:`` gives a private in-memory cloud for unit tests.

All access goes through one dedicated thread that owns the connection: SQLite
calls never block the event loop, and the daemon and the CLI can use the file
at the same time (WAL mode, busy timeout).

Call counters are counted in memory and written to the ``calls`` table at most
once per :data:`CALL_COUNTS_FLUSH_INTERVAL` (0.1 s; the cloud-config's
``callCountsFlushInterval``), so a busy cloud does not pay a write per call: the
first call after a quiet interval is written at once, later ones when the
interval ends, and everything on :meth:`CloudState.close`. Readers see exact
totals: :meth:`CloudState.calls` writes its own process's counts first and, when
another process has counts not yet written, waits for that process's next write
(at most one interval). A process killed with SIGKILL loses at most its last
interval's counts.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import datetime
import functools
import hashlib
import hmac
import ipaddress
import json
import logging
import os
import secrets
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import msgspec

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

R = TypeVar("R")
Record = TypeVar("Record", bound="DataclassInstance")

log = logging.getLogger(__name__)

InstanceState = Literal["running", "shutdown", "terminated"]
Authentication = Literal["ok", "rejected", "required"]
INSTANCE_STATES: tuple[InstanceState, ...] = ("running", "shutdown", "terminated")

SCHEMA_VERSION = 1

CALL_COUNTS_FLUSH_INTERVAL = 0.1
"""Seconds between writes of the in-memory call counters (0: write every call)."""

_FLUSH_DUE = "calls_flush_due"  # meta: "<unix time> <writer>": counts may wait until then
_RESET_AT = "calls_reset_at"  # meta: unix time of the last reset_calls()
_READ_MARGIN = 0.05  # seconds a reader allows a writer past its due time
_MAX_READ_WAIT = 5.0
_INTERNAL_NETWORK = ipaddress.ip_network("10.128.0.0/9")
"""Where new instances' InternalIPs come from (parsed once: per instance it was 16 % of
the cloud's cost of an auto-created instance)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS instances (
    id TEXT PRIMARY KEY,
    node_name TEXT NOT NULL UNIQUE,
    zone TEXT NOT NULL,
    region TEXT NOT NULL,
    instance_type TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('running', 'shutdown', 'terminated')),
    addresses TEXT NOT NULL,          -- JSON [[type, address], ...]
    labels TEXT NOT NULL DEFAULT '{}', -- JSON additional labels
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS load_balancers (
    name TEXT PRIMARY KEY,
    cluster TEXT NOT NULL,
    service TEXT NOT NULL,            -- namespace/name
    service_uid TEXT NOT NULL,
    ip TEXT,
    hostname TEXT,
    ports TEXT NOT NULL,              -- JSON [{"protocol", "port", "nodePort"}]
    nodes TEXT NOT NULL,              -- JSON [node names]
    source_ranges TEXT NOT NULL,      -- JSON [cidrs]
    created REAL NOT NULL,
    updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS ip_pool (ip TEXT PRIMARY KEY, lb_name TEXT);
CREATE TABLE IF NOT EXISTS routes (
    name TEXT PRIMARY KEY,
    cluster TEXT NOT NULL,
    target_node TEXT NOT NULL,
    destination_cidr TEXT NOT NULL,
    target_addresses TEXT NOT NULL,   -- JSON [[type, address], ...]
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS volumes (
    id TEXT PRIMARY KEY,
    zone TEXT NOT NULL,
    region TEXT NOT NULL,
    size_gib INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS calls (
    method TEXT PRIMARY KEY,
    count INTEGER NOT NULL DEFAULT 0,
    errors INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS faults (
    method TEXT PRIMARY KEY,          -- a contract method name, or '*'
    mode TEXT NOT NULL CHECK (mode IN ('error', 'retry', 'hang')),
    retry_after REAL NOT NULL DEFAULT 0,
    remaining INTEGER                 -- NULL: until cleared
);
CREATE TABLE IF NOT EXISTS credentials (
    id INTEGER PRIMARY KEY,
    fingerprint TEXT NOT NULL,        -- first 8 hex digits of sha256(value), as Secret shows
    salt TEXT NOT NULL,
    hash TEXT NOT NULL,               -- sha256(salt + value): the value itself is not stored
    created REAL NOT NULL
);
"""


class StateError(Exception):
    """A state operation cannot be done as asked; the message says what to change."""


@dataclass(frozen=True)
class Instance:
    id: str
    node_name: str
    zone: str
    region: str
    instance_type: str
    state: InstanceState
    addresses: tuple[tuple[str, str], ...]
    labels: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "nodeName": self.node_name,
            "zone": self.zone,
            "region": self.region,
            "instanceType": self.instance_type,
            "state": self.state,
            "addresses": [{"type": t, "address": a} for t, a in self.addresses],
            "labels": dict(self.labels),
        }


@dataclass(frozen=True)
class LoadBalancerRecord:
    name: str
    cluster: str
    service: str
    service_uid: str
    ip: str | None
    hostname: str | None
    ports: tuple[dict[str, Any], ...]
    nodes: tuple[str, ...]
    source_ranges: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "cluster": self.cluster,
            "service": self.service,
            "serviceUID": self.service_uid,
            "ip": self.ip,
            "hostname": self.hostname,
            "ports": list(self.ports),
            "nodes": list(self.nodes),
            "sourceRanges": list(self.source_ranges),
        }


@dataclass(frozen=True)
class RouteRecord:
    name: str
    cluster: str
    target_node: str
    destination_cidr: str
    target_addresses: tuple[tuple[str, str], ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "cluster": self.cluster,
            "targetNode": self.target_node,
            "destinationCIDR": self.destination_cidr,
            "targetAddresses": [{"type": t, "address": a} for t, a in self.target_addresses],
        }


@dataclass(frozen=True)
class VolumeRecord:
    id: str
    zone: str
    region: str
    size_gib: int

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "zone": self.zone, "region": self.region, "sizeGiB": self.size_gib}


@dataclass(frozen=True)
class Fault:
    method: str
    mode: Literal["error", "retry", "hang"]
    retry_after: float
    remaining: int | None

    def to_json(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "mode": self.mode,
            "retryAfter": self.retry_after,
            "remaining": self.remaining,
        }


@dataclass(frozen=True)
class CredentialRecord:
    """One credential the cloud accepts, known by its fingerprint only."""

    fingerprint: str
    created: float

    def to_json(self) -> dict[str, Any]:
        created = datetime.datetime.fromtimestamp(self.created, datetime.UTC)
        return {
            "fingerprint": f"sha256:{self.fingerprint}",
            "created": created.isoformat(timespec="seconds").replace("+00:00", "Z"),
        }


def _salted(salt: str, value: str) -> str:
    return hashlib.sha256((salt + value).encode()).hexdigest()


@functools.cache
def _field_names(cls: type[DataclassInstance]) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


def _from_row(cls: type[Record], row: sqlite3.Row, **decoded: Any) -> Record:
    """A record from the row's columns of its fields' names (the tables name their
    columns as the records name their fields); ``decoded`` gives the fields stored as
    JSON text."""
    columns = {name: row[name] for name in _field_names(cls) if name not in decoded}
    return cls(**columns, **decoded)


def _pairs(text: str) -> tuple[tuple[str, str], ...]:
    """A JSON ``[[type, address], ...]`` column."""
    return tuple((t, a) for t, a in json.loads(text))


def _instance(row: sqlite3.Row) -> Instance:
    return _from_row(
        Instance, row, addresses=_pairs(row["addresses"]), labels=json.loads(row["labels"])
    )


def _lb(row: sqlite3.Row) -> LoadBalancerRecord:
    return _from_row(
        LoadBalancerRecord,
        row,
        ports=tuple(_decode(row["ports"])),
        nodes=tuple(_decode(row["nodes"])),
        source_ranges=tuple(_decode(row["source_ranges"])),
    )


_decode = msgspec.json.decode


def _json_text(value: Any) -> str:
    """JSON for a TEXT column (msgspec: a fraction of json.dumps' cost on node lists)."""
    return msgspec.json.encode(value).decode()


_last_names: list[tuple[tuple[str, ...], str]] = []


def _names_text(names: Sequence[str]) -> str:
    """``_json_text`` of a node-name list, remembered for the last tuple: every load
    balancer of a cluster is given the same one until the nodes change."""
    if _last_names and _last_names[0][0] is names:
        return _last_names[0][1]
    text = _json_text(list(names))
    if isinstance(names, tuple):
        _last_names[:] = [(names, text)]
    return text


def _route(row: sqlite3.Row) -> RouteRecord:
    return _from_row(RouteRecord, row, target_addresses=_pairs(row["target_addresses"]))


class CloudState:
    """Synchronous access to the state database (the CLI and tests use it directly).

    The async provider wraps it with :class:`AsyncCloudState`.
    """

    def __init__(
        self, path: str | Path, *, call_counts_flush_interval: float = CALL_COUNTS_FLUSH_INTERVAL
    ) -> None:
        """``call_counts_flush_interval``: see the module docstring (0 writes each call)."""
        self.path = str(path)
        self.call_counts_flush_interval = call_counts_flush_interval
        # A transaction at a time on the connection, whichever thread asks (tests read
        # counters from the event loop's thread while the database thread works).
        self._conn_lock = threading.RLock()
        self._counts_lock = threading.Lock()
        self._unflushed: list[tuple[float, str, int, int]] = []  # (unix time, method, n, errors)
        self._window_end = 0.0  # monotonic: counts wait until then for the next write
        self.schedule_flush: Callable[[float], None] | None = None
        """Set by :class:`AsyncCloudState`: call :meth:`flush_calls` in that many seconds."""
        self._writer = f"{os.getpid()}:{id(self):x}"
        self._conn = sqlite3.connect(
            self.path, timeout=30.0, isolation_level=None, check_same_thread=False
        )
        self._conn.row_factory = sqlite3.Row
        if self.path != ":memory:":
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.executescript(_SCHEMA)
        row = self._conn.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
        if row is None:
            self._conn.execute(
                "INSERT INTO meta(key, value) VALUES ('schema', ?)", (str(SCHEMA_VERSION),)
            )
        elif int(row["value"]) != SCHEMA_VERSION:
            raise StateError(
                f"{self.path} has schema version {row['value']}, this kube-ccm uses "
                f"{SCHEMA_VERSION}: use a new state file"
            )

    def close(self) -> None:
        self.flush_calls()
        self._conn.close()

    def _tx(self, fn: Callable[[sqlite3.Connection], R]) -> R:
        with self._conn_lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                result = fn(self._conn)
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")
            return result

    # -- instances ------------------------------------------------------------

    def add_instance(
        self,
        node_name: str,
        *,
        zone: str,
        region: str,
        instance_type: str,
        addresses: Sequence[tuple[str, str]] | None = None,
        instance_id: str | None = None,
        state: InstanceState = "running",
        labels: dict[str, str] | None = None,
    ) -> Instance:
        instance_id = instance_id or f"i-{uuid.uuid4().hex[:16]}"
        if addresses is None:
            addresses = (("InternalIP", self._next_internal_ip()), ("Hostname", node_name))
        try:
            self._conn.execute(
                "INSERT INTO instances VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    instance_id,
                    node_name,
                    zone,
                    region,
                    instance_type,
                    state,
                    json.dumps([list(a) for a in addresses]),
                    json.dumps(labels or {}),
                    time.time(),
                ),
            )
        except sqlite3.IntegrityError as exc:
            raise StateError(
                f"an instance for node {node_name!r} or with id {instance_id!r} already exists"
            ) from exc
        return Instance(
            id=instance_id,
            node_name=node_name,
            zone=zone,
            region=region,
            instance_type=instance_type,
            state=state,
            addresses=tuple((t, a) for t, a in addresses),
            labels=dict(labels or {}),
        )

    def _next_internal_ip(self) -> str:
        # The highest rowid, not COUNT(*): the same number while nothing was deleted,
        # O(log n) rather than a scan per new instance, and no address handed out twice
        # after an instance in the middle is deleted.
        last = self._conn.execute("SELECT COALESCE(MAX(rowid), 0) FROM instances").fetchone()[0]
        return str(_INTERNAL_NETWORK.network_address + 10 + last)

    def instances(self) -> list[Instance]:
        rows = self._conn.execute("SELECT * FROM instances ORDER BY created, id").fetchall()
        return [_instance(r) for r in rows]

    def instance_by_id(self, instance_id: str) -> Instance | None:
        row = self._conn.execute("SELECT * FROM instances WHERE id=?", (instance_id,)).fetchone()
        return _instance(row) if row else None

    def instance_by_node(self, node_name: str) -> Instance | None:
        row = self._conn.execute(
            "SELECT * FROM instances WHERE node_name=?", (node_name,)
        ).fetchone()
        return _instance(row) if row else None

    def set_instance_state(self, ref: str, state: InstanceState) -> Instance:
        """``ref`` is an instance id or a node name."""
        if state not in INSTANCE_STATES:
            raise StateError(f"unknown state {state!r}: use one of {', '.join(INSTANCE_STATES)}")
        found = self.instance_by_id(ref) or self.instance_by_node(ref)
        if found is None:
            raise StateError(f"no instance with id or node name {ref!r}")
        self._conn.execute("UPDATE instances SET state=? WHERE id=?", (state, found.id))
        updated = self.instance_by_id(found.id)
        assert updated is not None
        return updated

    def set_instance_addresses(self, ref: str, addresses: Sequence[tuple[str, str]]) -> Instance:
        """Replace the addresses of an instance (``ref``: its id or node name), in order:
        (type, address) pairs, as :meth:`add_instance` takes them."""
        found = self.instance_by_id(ref) or self.instance_by_node(ref)
        if found is None:
            raise StateError(f"no instance with id or node name {ref!r}")
        self._conn.execute(
            "UPDATE instances SET addresses=? WHERE id=?",
            (json.dumps([list(a) for a in addresses]), found.id),
        )
        updated = self.instance_by_id(found.id)
        assert updated is not None
        return updated

    def instance_number(self, instance_id: str) -> int:
        """The instance's place in creation order, from 0 (the simulated cloud's pod
        CIDRs are numbered by it). Stable while the instance lives; the number of the
        newest instance is given again after it is deleted."""
        row = self._conn.execute("SELECT rowid FROM instances WHERE id=?", (instance_id,))
        found = row.fetchone()
        if found is None:
            raise StateError(f"no instance with id {instance_id!r}")
        return int(found[0]) - 1

    def delete_instance(self, ref: str) -> bool:
        found = self.instance_by_id(ref) or self.instance_by_node(ref)
        if found is None:
            return False
        self._conn.execute("DELETE FROM instances WHERE id=?", (found.id,))
        return True

    # -- load balancers -------------------------------------------------------

    def seed_ip_pool(self, cidrs: Iterable[str]) -> int:
        """Add every host address of ``cidrs`` to the pool (idempotent); returns the pool size."""

        def seed(conn: sqlite3.Connection) -> int:
            for cidr in cidrs:
                network = ipaddress.ip_network(cidr, strict=False)
                # A CIDR seeded once is remembered, so a daemon restarting over a /16
                # pool does not insert-or-ignore 65,534 rows each time.
                key = f"ip_pool:{network}"
                if conn.execute("SELECT 1 FROM meta WHERE key=?", (key,)).fetchone():
                    continue
                hosts = network.hosts() if network.num_addresses > 2 else iter(network)
                conn.executemany(
                    "INSERT OR IGNORE INTO ip_pool(ip, lb_name) VALUES (?, NULL)",
                    ((str(ip),) for ip in hosts),
                )
                conn.execute("INSERT INTO meta(key, value) VALUES (?, 'seeded')", (key,))
            count: int = conn.execute("SELECT COUNT(*) FROM ip_pool").fetchone()[0]
            return count

        return self._tx(seed)

    def load_balancer(self, name: str) -> LoadBalancerRecord | None:
        row = self._conn.execute("SELECT * FROM load_balancers WHERE name=?", (name,)).fetchone()
        return _lb(row) if row else None

    def load_balancers(self) -> list[LoadBalancerRecord]:
        rows = self._conn.execute("SELECT * FROM load_balancers ORDER BY created").fetchall()
        return [_lb(r) for r in rows]

    def upsert_load_balancer(
        self,
        *,
        name: str,
        cluster: str,
        service: str,
        service_uid: str,
        ports: Sequence[dict[str, Any]],
        nodes: Sequence[str],
        source_ranges: Sequence[str],
        hostname_mode: bool = False,
        hostname_suffix: str = "lb.simulated.example",
        requested_ip: str | None = None,
    ) -> LoadBalancerRecord:
        """Create or update a load balancer, taking an IP from the pool on creation.

        ``requested_ip`` (the Service's ``spec.loadBalancerIP``) is honoured when it is
        in the pool and free, also by moving an existing load balancer to it; otherwise,
        as when the pool is exhausted, :class:`StateError` says why and nothing changes.
        """

        def take_requested(conn: sqlite3.Connection, wanted: str) -> str:
            if hostname_mode:
                raise StateError(
                    f"spec.loadBalancerIP {wanted} cannot be honoured: this simulated cloud "
                    "gives load balancers hostnames (loadBalancer.hostnameMode); leave "
                    "spec.loadBalancerIP empty"
                )
            row = conn.execute("SELECT lb_name FROM ip_pool WHERE ip=?", (wanted,)).fetchone()
            if row is None:
                raise StateError(
                    f"spec.loadBalancerIP {wanted} is not in the simulated cloud's IP pool: "
                    "use a free address of loadBalancer.ipPool, or leave it empty"
                )
            if row["lb_name"] not in (None, name):
                raise StateError(
                    f"spec.loadBalancerIP {wanted} is already used by load balancer "
                    f"{row['lb_name']}: choose another address, or leave it empty"
                )
            conn.execute("UPDATE ip_pool SET lb_name=NULL WHERE lb_name=?", (name,))
            conn.execute("UPDATE ip_pool SET lb_name=? WHERE ip=?", (name, wanted))
            return wanted

        ports_json = _json_text(list(ports))
        nodes_json = _names_text(nodes)
        ranges_json = _json_text(list(source_ranges))

        def record(ip: str | None, hostname: str | None, lb_cluster: str) -> LoadBalancerRecord:
            return LoadBalancerRecord(
                name=name,
                cluster=lb_cluster,
                service=service,
                service_uid=service_uid,
                ip=ip,
                hostname=hostname,
                ports=tuple(ports),
                nodes=tuple(nodes),
                source_ranges=tuple(source_ranges),
            )

        def upsert(conn: sqlite3.Connection) -> LoadBalancerRecord:
            now = time.time()
            ip: str | None = None
            existing = conn.execute("SELECT * FROM load_balancers WHERE name=?", (name,)).fetchone()
            if existing is not None and requested_ip and existing["ip"] != requested_ip:
                ip = take_requested(conn, requested_ip)
                conn.execute("UPDATE load_balancers SET ip=? WHERE name=?", (ip, name))
                return update(conn, existing, ip, now)
            if existing is not None:
                return update(conn, existing, existing["ip"], now)
            hostname: str | None = None
            if hostname_mode and not requested_ip:
                hostname = f"{name}.{hostname_suffix}"
            elif requested_ip:
                ip = take_requested(conn, requested_ip)
            else:
                free = conn.execute(
                    "SELECT ip FROM ip_pool WHERE lb_name IS NULL ORDER BY rowid LIMIT 1"
                ).fetchone()
                if free is None:
                    size = conn.execute("SELECT COUNT(*) FROM ip_pool").fetchone()[0]
                    raise StateError(
                        f"the load-balancer IP pool is exhausted ({size} addresses, all in "
                        "use): add addresses to loadBalancer.ipPool in the cloud-config, "
                        "or delete unused LoadBalancer services"
                    )
                ip = free["ip"]
                conn.execute("UPDATE ip_pool SET lb_name=? WHERE ip=?", (name, ip))
            conn.execute(
                "INSERT INTO load_balancers VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    name,
                    cluster,
                    service,
                    service_uid,
                    ip,
                    hostname,
                    ports_json,
                    nodes_json,
                    ranges_json,
                    now,
                    now,
                ),
            )
            return record(ip, hostname, cluster)

        def update(
            conn: sqlite3.Connection, existing: sqlite3.Row, ip: str | None, now: float
        ) -> LoadBalancerRecord:
            unchanged = (
                existing["ports"] == ports_json
                and existing["nodes"] == nodes_json
                and existing["source_ranges"] == ranges_json
                and existing["service"] == service
                and existing["service_uid"] == service_uid
            )
            if not unchanged:  # an ensure that changes nothing writes nothing, like a cloud's
                conn.execute(
                    "UPDATE load_balancers SET ports=?, nodes=?, source_ranges=?, service=?, "
                    "service_uid=?, updated=? WHERE name=?",
                    (ports_json, nodes_json, ranges_json, service, service_uid, now, name),
                )
            return record(ip, existing["hostname"], existing["cluster"])

        return self._tx(upsert)

    def update_load_balancer_nodes(self, name: str, nodes: Sequence[str]) -> bool:
        cursor = self._conn.execute(
            "UPDATE load_balancers SET nodes=?, updated=? WHERE name=?",
            (_names_text(nodes), time.time(), name),
        )
        return cursor.rowcount > 0

    def delete_load_balancer(self, name: str) -> bool:
        def delete(conn: sqlite3.Connection) -> bool:
            conn.execute("UPDATE ip_pool SET lb_name=NULL WHERE lb_name=?", (name,))
            return conn.execute("DELETE FROM load_balancers WHERE name=?", (name,)).rowcount > 0

        return self._tx(delete)

    # -- routes ---------------------------------------------------------------

    def routes(self, cluster: str | None = None) -> list[RouteRecord]:
        if cluster is None:
            rows = self._conn.execute("SELECT * FROM routes ORDER BY created").fetchall()
        else:
            rows = self._conn.execute(
                "SELECT * FROM routes WHERE cluster=? ORDER BY created", (cluster,)
            ).fetchall()
        return [_route(r) for r in rows]

    def upsert_route(
        self,
        *,
        name: str,
        cluster: str,
        target_node: str,
        destination_cidr: str,
        target_addresses: Sequence[tuple[str, str]],
    ) -> RouteRecord:
        self._conn.execute(
            "INSERT INTO routes VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(name) DO UPDATE SET "
            "target_node=excluded.target_node, destination_cidr=excluded.destination_cidr, "
            "target_addresses=excluded.target_addresses",
            (
                name,
                cluster,
                target_node,
                destination_cidr,
                json.dumps([list(a) for a in target_addresses]),
                time.time(),
            ),
        )
        return RouteRecord(name, cluster, target_node, destination_cidr, tuple(target_addresses))

    def delete_route(self, name: str) -> bool:
        return self._conn.execute("DELETE FROM routes WHERE name=?", (name,)).rowcount > 0

    # -- volumes --------------------------------------------------------------

    def add_volume(self, volume_id: str, *, zone: str, region: str, size_gib: int = 1) -> None:
        try:
            self._conn.execute(
                "INSERT INTO volumes VALUES (?, ?, ?, ?)", (volume_id, zone, region, size_gib)
            )
        except sqlite3.IntegrityError as exc:
            raise StateError(f"volume {volume_id!r} already exists") from exc

    def volume(self, volume_id: str) -> VolumeRecord | None:
        row = self._conn.execute("SELECT * FROM volumes WHERE id=?", (volume_id,)).fetchone()
        return _from_row(VolumeRecord, row) if row else None

    def volumes(self) -> list[VolumeRecord]:
        rows = self._conn.execute("SELECT * FROM volumes ORDER BY id").fetchall()
        return [_from_row(VolumeRecord, r) for r in rows]

    # -- calls and faults -----------------------------------------------------

    def record_call(self, method: str, *, error: bool = False) -> None:
        """Count a call (on the connection's thread): written now if the last write is
        an interval old, else when the interval ends."""
        self._record(method, 1, int(error))

    def _record(self, method: str, count: int, errors: int) -> None:
        self._count(method, count, errors)
        now = time.monotonic()
        if self.call_counts_flush_interval <= 0 or now >= self._window_end:
            self.flush_calls()
        elif self.schedule_flush is not None:
            self.schedule_flush(self._window_end - now)

    def count_error(self, method: str) -> None:
        """Count a failed call from any thread; written by the next scheduled write (or
        the next :meth:`flush_calls` when nothing schedules writes)."""
        self._count(method, 0, 1)
        self.count_scheduled()

    def count_scheduled(self) -> None:
        if self.schedule_flush is not None:
            self.schedule_flush(max(0.0, self._window_end - time.monotonic()))

    def _count(self, method: str, count: int, errors: int) -> None:
        with self._counts_lock:
            self._unflushed.append((time.time(), method, count, errors))

    def flush_calls(self) -> None:
        """Write the counts made in this process since the last write."""
        with self._counts_lock:
            entries, self._unflushed = self._unflushed, []
        if not entries:
            return
        interval = self.call_counts_flush_interval

        def write(conn: sqlite3.Connection) -> None:
            row = conn.execute("SELECT value FROM meta WHERE key=?", (_RESET_AT,)).fetchone()
            reset_at = float(row["value"]) if row is not None else 0.0
            totals: dict[str, list[int]] = {}
            for at, method, count, errors in entries:
                if at >= reset_at:  # counts made before a reset (by anyone) are gone
                    total = totals.setdefault(method, [0, 0])
                    total[0] += count
                    total[1] += errors
            conn.executemany(
                "INSERT INTO calls(method, count, errors) VALUES (?, ?, ?) ON CONFLICT(method) "
                "DO UPDATE SET count=count+excluded.count, errors=errors+excluded.errors",
                [(method, count, errors) for method, (count, errors) in totals.items()],
            )
            if interval > 0:
                conn.execute(
                    "INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) "
                    "DO UPDATE SET value=excluded.value",
                    (_FLUSH_DUE, f"{time.time() + interval} {self._writer}"),
                )

        try:
            self._tx(write)
        except BaseException:
            with self._counts_lock:
                self._unflushed[:0] = entries
            raise
        self._window_end = time.monotonic() + interval

    def calls(self) -> dict[str, dict[str, int]]:
        """Calls by method, exact: this process's counts are written first, another
        process's pending ones waited for (see the module docstring)."""
        self.flush_calls()
        self._wait_for_other_writers()
        with self._conn_lock:
            rows = self._conn.execute("SELECT * FROM calls ORDER BY method").fetchall()
        return {r["method"]: {"count": r["count"], "errors": r["errors"]} for r in rows}

    def _wait_for_other_writers(self) -> None:
        with self._conn_lock:
            row = self._conn.execute("SELECT value FROM meta WHERE key=?", (_FLUSH_DUE,)).fetchone()
        if row is None:
            return
        due, _, writer = str(row["value"]).partition(" ")
        wait = float(due) - time.time()
        if writer != self._writer and wait > 0:
            time.sleep(min(wait + _READ_MARGIN, _MAX_READ_WAIT))

    def reset_calls(self) -> None:
        """Forget every count, also the ones another process has not written yet."""
        with self._counts_lock:
            self._unflushed.clear()

        def reset(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM calls")
            conn.execute(
                "INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) "
                "DO UPDATE SET value=excluded.value",
                (_RESET_AT, repr(time.time())),
            )

        self._tx(reset)

    def set_fault(
        self,
        method: str,
        mode: Literal["error", "retry", "hang"],
        *,
        retry_after: float = 0.0,
        remaining: int | None = None,
    ) -> None:
        self._conn.execute(
            "INSERT INTO faults VALUES (?, ?, ?, ?) ON CONFLICT(method) DO UPDATE SET "
            "mode=excluded.mode, retry_after=excluded.retry_after, remaining=excluded.remaining",
            (method, mode, retry_after, remaining),
        )

    def clear_faults(self, method: str | None = None) -> None:
        if method is None:
            self._conn.execute("DELETE FROM faults")
        else:
            self._conn.execute("DELETE FROM faults WHERE method=?", (method,))

    def faults(self) -> list[Fault]:
        rows = self._conn.execute("SELECT * FROM faults ORDER BY method").fetchall()
        return [_from_row(Fault, r) for r in rows]

    def take_fault(self, method: str) -> Fault | None:
        """The fault to inject into this call of ``method`` (consuming one if counted)."""
        # A read first: no fault (nearly every call) or one until cleared needs no write.
        found = _fault_row(self._conn, method)
        if found is None:
            return None
        if found["remaining"] is None:
            return _from_row(Fault, found)

        def take(conn: sqlite3.Connection) -> Fault | None:
            row = _fault_row(conn, method)
            if row is None:
                return None
            if row["remaining"] is not None:
                if row["remaining"] <= 1:
                    conn.execute("DELETE FROM faults WHERE method=?", (row["method"],))
                else:
                    conn.execute(
                        "UPDATE faults SET remaining=remaining-1 WHERE method=?", (row["method"],)
                    )
            return _from_row(Fault, row)

        return self._tx(take)

    # -- blindness -------------------------------------------------------------

    def set_blind(self, blind: bool) -> None:
        """Make the cloud see no instance at all (every lookup answers "not found"), as a
        real cloud does when asked under a wrong identity: a token short of a read
        privilege, another account, another region. ``False`` restores its sight."""
        self._conn.execute(
            "INSERT INTO meta(key, value) VALUES ('blind', ?) ON CONFLICT(key) "
            "DO UPDATE SET value=excluded.value",
            ("1" if blind else "0",),
        )

    def blind(self) -> bool:
        row = self._conn.execute("SELECT value FROM meta WHERE key='blind'").fetchone()
        return row is not None and row["value"] == "1"

    # -- credentials ----------------------------------------------------------

    def set_credentials(self, *values: str) -> list[CredentialRecord]:
        """Accept exactly ``values`` from now on (no values: accept anything).

        Only a salted SHA-256 of each value is stored. Returns what is accepted.
        """

        def replace(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM credentials")
            for value in values:
                self._insert_credential(conn, value)

        self._tx(replace)
        return self.credentials()

    def add_credential(self, value: str) -> list[CredentialRecord]:
        """Accept ``value`` too (overlapping rotation); idempotent. Returns what is accepted."""

        def add(conn: sqlite3.Connection) -> None:
            if self._matches(conn, value) is None:
                self._insert_credential(conn, value)

        self._tx(add)
        return self.credentials()

    def clear_credentials(self) -> None:
        """Stop checking credentials: every call is accepted again."""
        self._conn.execute("DELETE FROM credentials")

    def credentials(self) -> list[CredentialRecord]:
        rows = self._conn.execute(
            "SELECT fingerprint, created FROM credentials ORDER BY created, id"
        ).fetchall()
        return [_from_row(CredentialRecord, r) for r in rows]

    def authenticate(self, presented: str | None) -> Authentication:
        """``ok`` when the cloud accepts no particular credentials or ``presented`` is one
        it accepts; ``required`` when it accepts some and none were presented; else
        ``rejected``."""
        if self._conn.execute("SELECT 1 FROM credentials LIMIT 1").fetchone() is None:
            return "ok"
        if presented is None:
            return "required"
        return "ok" if self._matches(self._conn, presented) is not None else "rejected"

    @staticmethod
    def _insert_credential(conn: sqlite3.Connection, value: str) -> None:
        if not value:
            raise StateError("a credential cannot be empty: give the value the cloud accepts")
        salt = secrets.token_hex(16)
        conn.execute(
            "INSERT INTO credentials(fingerprint, salt, hash, created) VALUES (?, ?, ?, ?)",
            (
                hashlib.sha256(value.encode()).hexdigest()[:8],
                salt,
                _salted(salt, value),
                time.time(),
            ),
        )

    @staticmethod
    def _matches(conn: sqlite3.Connection, value: str) -> int | None:
        for row in conn.execute("SELECT id, salt, hash FROM credentials").fetchall():
            if hmac.compare_digest(_salted(row["salt"], value), row["hash"]):
                found: int = row["id"]
                return found
        return None


def _fault_row(conn: sqlite3.Connection, method: str) -> sqlite3.Row | None:
    """The fault set for ``method``, else the one for every method (``*``): two lookups
    by primary key, 3 µs, where one query ordering by ``method='*'`` took 23 µs on every
    cloud call (its sorter), 1.7 % of the daemon's CPU per Node initialised."""
    query = "SELECT * FROM faults WHERE method=?"
    row: sqlite3.Row | None = conn.execute(query, (method,)).fetchone()
    return row if row is not None else conn.execute(query, ("*",)).fetchone()


def _name_os_thread() -> None:
    """Give the database thread the OS name ``simcloud-db`` (Python does not), so
    ``top -H`` and the benchmarks can tell the simulated cloud's CPU from the CCM's."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(15, b"simcloud-db", 0, 0, 0)  # PR_SET_NAME


class AsyncCloudState:
    """:class:`CloudState` on its own thread, awaited from the event loop."""

    def __init__(
        self, path: str | Path, *, call_counts_flush_interval: float = CALL_COUNTS_FLUSH_INTERVAL
    ) -> None:
        self._executor = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="simcloud-db", initializer=_name_os_thread
        )
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._closed = False
        self.sync: CloudState = self._executor.submit(
            functools.partial(
                CloudState, path, call_counts_flush_interval=call_counts_flush_interval
            )
        ).result()
        self.sync.schedule_flush = self._schedule_flush

    async def run(self, fn: Callable[[CloudState], R]) -> R:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self.run_here, fn)

    def run_here(self, fn: Callable[[CloudState], R]) -> R:
        """Run ``fn`` on the calling thread, one user of the connection at a time (the
        database thread, the event loop's :meth:`SimulatedCloud.call_step`)."""
        with self.sync._conn_lock:
            return fn(self.sync)

    def count_error(self, method: str) -> None:
        """Count a failed call without a trip to the database thread."""
        self.sync.count_error(method)

    def _schedule_flush(self, delay: float) -> None:
        with self._lock:
            if self._timer is not None or self._closed:
                return
            self._timer = threading.Timer(delay, self._flush_now)
            self._timer.daemon = True
            self._timer.name = "simcloud-counts"
            self._timer.start()

    def _flush_now(self) -> None:
        with self._lock:
            self._timer = None
            if self._closed:
                return
            self._executor.submit(self._flush_quietly)

    def _flush_quietly(self) -> None:
        try:
            self.sync.flush_calls()
        except sqlite3.Error as exc:  # kept in memory; the next write tries again
            log.warning("writing the simulated cloud's call counters failed: %s", exc)
            self.sync.count_scheduled()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        self._executor.submit(self.sync.close).result()
        self._executor.shutdown(wait=True)
