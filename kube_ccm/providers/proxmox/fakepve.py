"""fakepve (a fake of the whole Proxmox VE API) on a loopback port, for the ``proxmox``
provider's tests, as :mod:`kube_ccm.providers.aws.moto` is for the aws provider's.

    with FakePveServer(tmp_path, region="cluster-1") as server:
        server.add_vm(100, "node-a", uuid="...", cores=2, memory_mib=4096)
        server.cluster_config()     # a `clusters` entry of the cloud-config
        server.pve.lose_quorum()    # any of fakepve's faults, on the live fake

The fake runs on an event loop of its own in a daemon thread, so a test's loop (and
its CPU) stays the test's, and a daemon subprocess can reach it too. It serves a
self-signed certificate that the cloud-config names as ``caFile``, and knows one API
token (:attr:`FakePveServer.token_id`, its secret in a file). Faults are fakepve's
own (``lose_quorum``, ``set_node_offline``, ``fail``, ``slow_network``,
``migrate``, ...): call them through :meth:`FakePveServer.call`, which runs them on
the fake's loop.

fakepve is AGPL-licensed: a test dependency only (the ``dev`` extra), never imported
by the provider. Without it the tests that use these fixtures are skipped with what
to install, except under CI (``CI=true``), where they fail.

A test tool beside the provider it fakes, never imported by the provider itself:
only tests and the sandbox import it (its dependencies are dev ones).
"""

from __future__ import annotations

import asyncio
import importlib
import os
import re
import threading
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from kube_ccm.testing._lifecycle import Started

__all__ = [
    "FakePveServer",
    "FakePveUnavailableError",
    "agent_interfaces",
    "fakepve_missing",
    "fakepve_server",
]

T = TypeVar("T")
TOKEN_ID = "kube-ccm@pve!ccm"
TOKEN_SECRET = "5f0c1f2e-8d53-4a0b-9f4e-kube-ccm-test"
_START_TIMEOUT = 30.0


class FakePveUnavailableError(RuntimeError):
    """fakepve (or the cryptography it needs for its certificate) is not installed."""


def fakepve_missing() -> str | None:
    try:
        importlib.import_module("fakepve")
        importlib.import_module("cryptography")
    except ImportError as exc:
        return (
            "the proxmox provider's tests need fakepve: pip install 'fakepve[crypto]' "
            f"(in the dev extra) ({exc})"
        )
    return None


class FakePveServer(Started):
    """One fake PVE cluster (``region``) on its own loopback port and thread."""

    def __init__(
        self, workdir: Path, *, region: str = "cluster-1", host: str = "127.0.0.1"
    ) -> None:
        self.workdir = workdir
        self.region = region
        self.host = host
        self.token_id = TOKEN_ID
        self.secret_file = workdir / f"{region}-token"
        self.cafile = ""
        self.pve: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ----------------------------------------------------------------

    def start(self) -> FakePveServer:
        missing = fakepve_missing()
        if missing:
            raise FakePveUnavailableError(missing)
        fake_pve = _with_ha(importlib.import_module("fakepve").FakePve)
        make_cert = importlib.import_module("fakepve.certs").make_cert

        self.workdir.mkdir(parents=True, exist_ok=True)
        certfile, keyfile, _ = make_cert(
            str(self.workdir), name=f"pve-{self.region}", hosts=(self.host,)
        )
        self.cafile = certfile
        self.secret_file.write_text(TOKEN_SECRET + "\n")
        pve = fake_pve(host=self.host, port=0)
        pve.time_scale = 0
        pve.cluster_name = self.region
        pve.apitokens[self.token_id] = TOKEN_SECRET
        self.pve = pve
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(
            target=loop.run_forever, name=f"fakepve-{self.region}", daemon=True
        )
        self._thread.start()
        self.call(pve.start(certfile, keyfile))
        return self

    def stop(self) -> None:
        loop, self._loop = self._loop, None
        if loop is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self.pve.stop(), loop).result(_START_TIMEOUT)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            if self._thread is not None:
                self._thread.join(_START_TIMEOUT)
            if not loop.is_running():
                loop.close()

    def call(self, work: Coroutine[Any, Any, T] | Callable[[], T]) -> T:
        """Run ``work`` (a coroutine, or a plain callable) on the fake's loop; its result.
        Not from the fake's own loop, nor inside ``work`` (this class's helpers call it).
        """
        assert self._loop is not None, "the fake is not started"
        if asyncio.iscoroutine(work):
            return asyncio.run_coroutine_threadsafe(work, self._loop).result(_START_TIMEOUT)

        async def plain() -> T:
            assert callable(work)
            return work()

        return asyncio.run_coroutine_threadsafe(plain(), self._loop).result(_START_TIMEOUT)

    async def acall(self, work: Coroutine[Any, Any, T] | Callable[[], T]) -> T:
        """:meth:`call` from a test's event loop, without blocking it."""
        return await asyncio.to_thread(self.call, work)

    # -- what tests use -------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.pve.port}"

    def cluster_config(self, **extra: Any) -> dict[str, Any]:
        """This cluster as an entry of the cloud-config's ``clusters``."""
        return {
            "region": self.region,
            "url": self.url,
            "tokenId": self.token_id,
            "tokenSecret": {"file": str(self.secret_file)},
            "caFile": self.cafile,
            **extra,
        }

    def add_vm(
        self,
        vmid: int,
        name: str,
        *,
        uuid: str | None = None,
        node: str = "pve1",
        status: str = "running",
        cores: int = 2,
        memory_mib: int = 4096,
        agent: list[dict[str, Any]] | None = None,
        config: dict[str, Any] | None = None,
    ) -> Any:
        """A QEMU VM; ``agent``: its guest agent's ``network-get-interfaces`` answer
        (``None``: no agent)."""
        settings: dict[str, Any] = {"cores": cores, "memory": memory_mib}
        if uuid:
            settings["smbios1"] = f"uuid={uuid}"
        if agent is not None:
            settings["agent"] = "1"
        settings.update(config or {})

        def add() -> Any:
            vm = self.pve.add_vm(vmid, name, node=node, status=status, config=settings)
            if agent is not None:
                vm.agent = {"interfaces": agent}
            return vm

        return self.call(add)

    def vm(self, vmid: int) -> Any:
        return self.pve.vm(vmid)

    def add_ha_group(self, group: str, *vmids: int, nodes: str = "pve1,pve2") -> None:
        """PVE 8: HA group ``group`` over ``nodes``, the VMs its resources."""

        def add() -> None:
            self.pve.ha_groups[group] = {"group": group, "type": "group", "nodes": nodes}
            for vmid in vmids:
                self.pve.ha_resources[f"vm:{vmid}"] = {"group": group}

        self.call(add)

    def add_ha_rule(self, rule: str, *vmids: int, nodes: str = "pve1,pve2", **extra: Any) -> None:
        """PVE 9: node-affinity rule ``rule`` over ``nodes``, the VMs HA resources in it."""

        def add() -> None:
            sids = [f"vm:{vmid}" for vmid in vmids]
            self.pve.ha_rules[rule] = {
                "rule": rule,
                "type": "node-affinity",
                "resources": ",".join(sids),
                "nodes": nodes,
                "strict": 0,
                **extra,
            }
            for sid in sids:
                self.pve.ha_resources.setdefault(sid, {})

        self.call(add)

    def remove_vm(self, vmid: int) -> None:
        self.call(lambda: self.pve.vms.remove(self.pve.vm(vmid)))

    def set_status(self, vmid: int, status: str, qmpstatus: str | None = None) -> None:
        def change() -> None:
            vm = self.pve.vm(vmid)
            vm.status = status
            vm.qmpstatus = qmpstatus or status

        self.call(change)

    def calls(self) -> dict[str, dict[str, int]]:
        """Requests by method and path (node names and VMIDs as ``{node}``, ``{vmid}``),
        each with how many were refused (400 or more) other than PVE's "not found" (a
        500 saying the VM's configuration does not exist: a VM destroyed since the
        listing, as the provider expects)."""

        def key(method: str, path: str) -> str:
            path = path.removeprefix("/api2/json")
            path = re.sub(r"^/nodes/[^/]+", "/nodes/{node}", path)
            return f"{method} " + re.sub(r"/qemu/\d+", "/qemu/{vmid}", path)

        def gather() -> dict[str, dict[str, int]]:
            counted: dict[str, dict[str, int]] = {}
            for method, path, _ in list(self.pve.requests):
                counted.setdefault(key(method, path), {"count": 0, "errors": 0})["count"] += 1
            for method, path, _, body in list(self.pve.refused):
                if "does not exist" in body:
                    continue
                counted.setdefault(key(method, path), {"count": 0, "errors": 0})["errors"] += 1
            return counted

        return self.call(gather)

    def count(self, suffix: str, method: str = "GET") -> int:
        """Requests seen whose path ends with ``suffix``."""
        return sum(
            1 for m, path, _ in list(self.pve.requests) if m == method and path.endswith(suffix)
        )


def _with_ha(base: type[Any]) -> type[Any]:
    """fakepve's FakePve with HA groups, resources and (PVE 9) rules that a test sets
    and ``GET /cluster/ha/{groups,resources,rules}`` lists; fakepve itself answers those
    with a sample shape and stores nothing. The routes go through fakepve's schema
    checks (parameters, ``Sys.Audit`` on ``/``) like its own stateful areas. It also
    notes every refused request (``refused``), which fakepve's ``requests`` does not,
    and models PVE's privilege separation of API tokens (``privsep``): fakepve lets a
    token hold its user's privileges as well as its own (``--privsep 0``); a token in
    ``privsep`` holds only what an ACL gives the token itself, and of that only what
    its user holds too, in permission checks, ``/cluster/resources`` and
    ``/access/permissions`` alike."""

    class FakePveWithHa(base):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.refused: list[tuple[str, str, int, str]] = []
            """(method, path, status, body) of each answer of 400 or more, for the
            sandbox."""
            self.ha_groups: dict[str, dict[str, Any]] = {}
            self.ha_resources: dict[str, dict[str, Any]] = {}
            self.ha_rules: dict[str, dict[str, Any]] = {}
            self.acl: dict[str, list[tuple[str, set[str]]]] | None = self.acl
            self.privsep: set[str] = set()
            """Token IDs made with privilege separation (``pveum user token add ...
            --privsep 1``, PVE's default)."""

        def allowed(self, user: str, path: str, priv: str) -> bool:
            owner = user.split("!", maxsplit=1)[0]
            if user not in self.privsep or self.acl is None or owner == "root@pam":
                return bool(super().allowed(user, path, priv))
            own = self.acl.get(user, [])
            others = {k: v for k, v in self.acl.items() if k != owner}
            # The token's own entries alone, then its user's: both must hold it.
            saved, self.acl = self.acl, others
            try:
                by_token = bool(super().allowed(user, path, priv)) if own else False
            finally:
                self.acl = saved
            return by_token and bool(super().allowed(owner, path, priv))

        async def _permissions(self, v: dict[str, Any], user: str) -> Any:
            who = v.get("userid") or user
            if who not in self.privsep or self.acl is None:
                return await super()._permissions(v, user)
            held: dict[str, dict[str, int]] = {}
            for path, privs in self.acl.get(who, []):
                if v.get("path") is not None and not (
                    v["path"] == path or path == "/" or v["path"].startswith(path + "/")
                ):
                    continue
                kept = {p for p in privs if self.allowed(who, path, p)}
                held.setdefault(path, {}).update(dict.fromkeys(sorted(kept), 1))
            return dict(sorted(held.items()))

        async def _answer(self, request: Any, *args: Any) -> Any:
            try:
                response = await super()._answer(request, *args)
            except Exception as exc:
                status = int(getattr(exc, "status", 500))
                self.refused.append((request.method, request.path, status, str(exc)))
                raise
            if response.status >= 400:
                text = getattr(response, "text", None) or ""
                self.refused.append((request.method, request.path, response.status, text))
            return response

        def _routes_ha(self) -> list[tuple[str, str, Any]]:
            return [
                ("GET", "/cluster/ha/groups", self._ha_groups_get),
                ("GET", "/cluster/ha/resources", self._ha_resources_get),
                ("GET", "/cluster/ha/rules", self._ha_rules_get),
            ]

        async def _ha_groups_get(self, values: dict[str, Any], user: Any) -> Any:
            return [dict(g) for _, g in sorted(self.ha_groups.items())]

        async def _ha_resources_get(self, values: dict[str, Any], user: Any) -> Any:
            kind = values.get("type")
            return [
                {"sid": sid, "type": sid.split(":", 1)[0], "state": "started", **r}
                for sid, r in sorted(self.ha_resources.items())
                if kind in (None, sid.split(":", 1)[0])
            ]

        async def _ha_rules_get(self, values: dict[str, Any], user: Any) -> Any:
            kind, resource = values.get("type"), values.get("resource")
            return [
                dict(r)
                for _, r in sorted(self.ha_rules.items())
                if kind in (None, r["type"])
                and (resource is None or resource in r["resources"].split(","))
            ]

    return FakePveWithHa


def agent_interfaces(*addresses: str, name: str = "eth0") -> list[dict[str, Any]]:
    """A ``network-get-interfaces`` answer: loopback plus ``name`` with ``addresses``."""
    return [
        {
            "name": "lo",
            "hardware-address": "00:00:00:00:00:00",
            "ip-addresses": [{"ip-address": "127.0.0.1", "ip-address-type": "ipv4", "prefix": 8}],
        },
        {
            "name": name,
            "hardware-address": "bc:24:11:00:00:01",
            "ip-addresses": [
                {
                    "ip-address": a,
                    "ip-address-type": "ipv6" if ":" in a else "ipv4",
                    "prefix": 64 if ":" in a else 24,
                }
                for a in addresses
            ],
        },
    ]


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(
            f"CI must run the proxmox provider's tests (the dev extra has fakepve): {reason}"
        )
    pytest.skip(reason)


@pytest.fixture
def fakepve_server(tmp_path: Path) -> Iterator[FakePveServer]:
    """A started fake PVE cluster ``cluster-1`` for one test."""
    server = FakePveServer(tmp_path / "fakepve")
    with server.started_or(_unavailable, FakePveUnavailableError):
        yield server
