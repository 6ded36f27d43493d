"""The host side of :mod:`kube_ccm.testbed.nodes`: the record of what the test beds
changed on this machine, and the undo of each change.

The record lives in ``/run/kube-ccm-testbed/state.json`` under an advisory lock
(``lock`` beside it): the host as the first running test bed found it (the kubelet's
sysctls, the iptables chains, the network namespaces, which fixed directories did not
exist), and every running test bed with its process id and what it owns (cgroup
roots, bridge, subnet, data directory, containerd sockets). The last test bed to stop
puts the host back and removes the record; a test bed whose process died is cleaned
up by the next one to take the lock (:func:`clean_up_dead_test_beds`).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import hashlib
import ipaddress
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

KERNEL_TUNABLES = (
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "kernel.panic",
    "kernel.panic_on_oops",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
)
"""The sysctls the kubelet sets (``setupKernelTunables``, protectKernelDefaults off)."""

STATE_DIR = Path("/run/kube-ccm-testbed")
NETNS_DIR = Path("/var/run/netns")
"""Where containerd 1.6's CRI mounts pods' network namespaces (a fixed path)."""
CONTAINER_LOGS = Path("/var/log/containers")
"""The kubelet's links to container logs (a fixed path, whatever podLogsDir)."""
SHIM_SOCKETS = Path("/run/containerd/s")
"""containerd 1.6's shim sockets (a fixed path, whatever its state directory)."""
DEVICE_PLUGINS = Path("/var/lib/kubelet/device-plugins")
"""Every kubelet's device-plugin socket, whatever its --root-dir (a constant upstream)."""
CNI_RESULTS = Path("/var/lib/cni/results")
"""libcni's result cache in containerd 1.6 (a fixed path); CNI DEL removes entries."""
HOST_DIRS = (
    NETNS_DIR,
    CONTAINER_LOGS,
    SHIM_SOCKETS,
    SHIM_SOCKETS.parent,
    DEVICE_PLUGINS,
    DEVICE_PLUGINS.parent,
    CNI_RESULTS,
    CNI_RESULTS.parent,
)
"""Directories the kubelet, containerd or CNI create at fixed paths: removed when they
did not exist before and hold nothing but what our nodes left (children first)."""
SUBNETS = ipaddress.IPv4Network("10.192.0.0/12")
"""Where each test bed's bridge takes a free /16."""
ULA_PREFIX = ipaddress.IPv6Network("fd6b:6363:6d00::/48")
"""Where each test bed's IPv6 /64 comes from (``fd`` + "kccm"): the /64 whose subnet id
is the first two octets of its IPv4 /16 (:func:`ula_subnet`)."""

_CGROUP_ROOT = Path("/sys/fs/cgroup")
_MNT_DETACH = 2
_BUILTIN_CHAINS = {
    "filter": {"INPUT", "FORWARD", "OUTPUT"},
    "nat": {"PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"},
    "mangle": {"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"},
    "raw": {"PREROUTING", "OUTPUT"},
    "security": {"INPUT", "FORWARD", "OUTPUT"},
}


class HostError(RuntimeError):
    """A host command the test bed needs failed; the message has its error."""


@dataclass
class Leftovers:
    """What an undo found still there and removed (empty after a clean run)."""

    items: list[str] = field(default_factory=list)

    def add(self, what: str) -> None:
        self.items.append(what)


@dataclass(frozen=True)
class TestBed:
    """One running test bed, as the record keeps it."""

    id: str
    pid: int
    data_dir: str
    bridge: str
    subnet: str
    cgroup_roots: tuple[str, ...]
    sockets: tuple[str, ...]
    """Its containerds' sockets: the shims that serve them are ours."""
    subnet6: str = ""
    """Its IPv6 /64 (on its bridge, gone with it), when a node has an IPv6 node IP."""
    kube_proxy: bool = False
    """It runs kube-proxy, whose rules are host-wide: one such test bed at a time."""
    netns: tuple[str, ...] = ()
    """Its network namespaces (names under /var/run/netns), one per node and the
    client's, with :attr:`~kube_ccm.testbed.nodes.NodeOptions.netns`."""
    links: tuple[str, ...] = ()
    """The host ends of their veth pairs, on its bridge."""

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> TestBed:
        return cls(
            id=raw["id"],
            pid=int(raw["pid"]),
            data_dir=raw["data_dir"],
            bridge=raw["bridge"],
            subnet=raw["subnet"],
            cgroup_roots=tuple(raw["cgroup_roots"]),
            sockets=tuple(raw["sockets"]),
            subnet6=raw.get("subnet6", ""),
            kube_proxy=bool(raw.get("kube_proxy", False)),
            netns=tuple(raw.get("netns", ())),
            links=tuple(raw.get("links", ())),
        )


@dataclass
class HostRecord:
    """The host as the first test bed found it, and the test beds running now."""

    beds: dict[str, TestBed] = field(default_factory=dict)
    before: dict[str, Any] = field(default_factory=dict)

    def clean_dead(self, leftovers: Leftovers) -> None:
        """Undo what test beds whose process died left behind."""
        for bed in list(self.beds.values()):
            if not _alive(bed.pid):
                leftovers.add(f"test bed {bed.id} of dead process {bed.pid} cleaned up")
                undo_test_bed(bed, leftovers)
                shutil.rmtree(bed.data_dir, ignore_errors=True)
                del self.beds[bed.id]
        if not self.beds:
            self.restore(leftovers)

    def snapshot_if_first(self) -> None:
        if self.beds:
            return
        self.before = {
            "sysctls": {name: read_sysctl(name) for name in KERNEL_TUNABLES},
            "chains": iptables_chains(),
            "netns": sorted(p.name for p in NETNS_DIR.glob("*")) if NETNS_DIR.is_dir() else [],
            "absent": [str(path) for path in HOST_DIRS if not path.exists()],
        }

    def free_subnet(self) -> ipaddress.IPv4Network:
        """A /16 of :data:`SUBNETS` that no interface and no other test bed uses."""
        used: set[ipaddress.IPv4Network | ipaddress.IPv6Network] = {
            ipaddress.ip_network(bed.subnet) for bed in self.beds.values()
        }
        shown = run(["ip", "-json", "addr", "show"]).stdout
        for link in json.loads(shown):
            for info in link.get("addr_info", []):
                if info.get("family") == "inet":
                    used.add(ipaddress.ip_network(f"{info['local']}/16", strict=False))
                elif info.get("family") == "inet6":
                    used.add(ipaddress.ip_network(f"{info['local']}/64", strict=False))
        for candidate in SUBNETS.subnets(new_prefix=16):
            if candidate not in used and ula_subnet(candidate) not in used:
                return candidate
        raise HostError(f"no free /16 in {SUBNETS} for the test bed's bridge")

    def restore(self, leftovers: Leftovers) -> None:
        """Put back what the first test bed found (the last one has stopped)."""
        before, self.before = self.before, {}
        if not before:
            return
        for name, value in before["sysctls"].items():
            if value is not None and read_sysctl(name) != value:
                write_sysctl(name, value)
        _remove_new_chains(before["chains"], leftovers)
        if NETNS_DIR.is_dir():
            for path in NETNS_DIR.glob("cni-*"):
                if path.name not in before["netns"]:
                    leftovers.add(f"netns {path} removed")
                    remove_netns(path)
        for absent in map(Path, before["absent"]):
            if not absent.is_dir():
                continue
            for entry in absent.iterdir():
                if _ours(absent, entry):
                    entry.unlink()
            if absent == NETNS_DIR and not any(absent.iterdir()) and _self_mounted(absent):
                # `ip netns add` (a test bed's node namespaces) bind-mounts the directory
                # on itself the first time, and the mount outlives every namespace.
                _umount(Path(os.path.realpath(absent)))
            with contextlib.suppress(OSError):
                absent.rmdir()
            if absent.exists():
                leftovers.add(f"{absent} kept: it holds {sorted(os.listdir(absent))}")


def _self_mounted(directory: Path) -> bool:
    """Whether ``directory`` is a mount point (a bind mount of itself included, which
    :func:`os.path.ismount` does not see)."""
    return Path(os.path.realpath(directory)) in mount_points()


def ula_subnet(subnet: ipaddress.IPv4Network) -> ipaddress.IPv6Network:
    """The IPv6 /64 of the test bed whose IPv4 /16 is ``subnet``: 10.192.0.0/16 gives
    fd6b:6363:6d00:ac0::/64 (unique as the /16 is, so the record need not allocate it)."""
    subnet_id = (int(subnet.network_address) >> 16) & 0xFFFF
    return ipaddress.IPv6Network((int(ULA_PREFIX.network_address) | subnet_id << 64, 64))


@contextlib.contextmanager
def locked_record() -> Iterator[HostRecord]:
    """The record, under the lock; saved when the block ends, removed when empty."""
    lock_path, state_path = STATE_DIR / "lock", STATE_DIR / "state.json"
    while True:
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        try:
            handle = lock_path.open("a")
        except FileNotFoundError:  # the last test bed removed the directory meanwhile
            continue
        fcntl.flock(handle, fcntl.LOCK_EX)
        # The last test bed removes the lock file: one that waited on the removed file
        # must take the new one.
        with contextlib.suppress(FileNotFoundError):
            if os.fstat(handle.fileno()).st_ino == lock_path.stat().st_ino:
                break
        handle.close()
    try:
        try:
            raw = json.loads(state_path.read_text())
            record = HostRecord(
                beds={k: TestBed.from_json(v) for k, v in raw["beds"].items()},
                before=raw["before"],
            )
        except (OSError, ValueError, KeyError):
            record = HostRecord()
        yield record
        if record.beds or record.before:
            tmp = state_path.with_suffix(".tmp")
            beds = {k: asdict(v) for k, v in record.beds.items()}
            tmp.write_text(json.dumps({"beds": beds, "before": record.before}, indent=1))
            tmp.replace(state_path)
        else:
            state_path.unlink(missing_ok=True)
            lock_path.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                STATE_DIR.rmdir()
    finally:
        handle.close()


def clean_up_dead_test_beds() -> list[str]:
    """Undo what test beds whose process died (SIGKILL, a crash) left on the host, as the
    next test bed to start does; what was found, one line each."""
    leftovers = Leftovers()
    if STATE_DIR.is_dir():
        with locked_record() as record:
            record.clean_dead(leftovers)
    return leftovers.items


def undo_test_bed(bed: TestBed, leftovers: Leftovers, netns_inodes: Iterable[int] = ()) -> None:
    """Undo one test bed's own changes: processes, netns, mounts, cgroups, log links and
    the bridge (the host-wide ones wait for the last test bed: :meth:`HostRecord.restore`)."""
    data_dir = Path(bed.data_dir)
    inodes = set(netns_inodes)
    shims: set[str] = set()
    own_netns = {_inode(NETNS_DIR / name) for name in bed.netns} - {None}
    for _ in range(3):
        killed = _kill_processes(bed, inodes, shims, own_netns)
        if not killed:
            break
        leftovers.add(f"{len(killed)} leftover processes killed")
        time.sleep(0.3)
    # What the killed shims would have removed themselves: their sockets and the CNI
    # results of their sandboxes.
    for entry in shims:
        if entry.startswith("socket:"):
            (SHIM_SOCKETS / entry.removeprefix("socket:")).unlink(missing_ok=True)
        elif CNI_RESULTS.is_dir():
            for result in CNI_RESULTS.glob(f"*-{entry}-*"):
                result.unlink(missing_ok=True)
    if NETNS_DIR.is_dir() and inodes:
        for path in NETNS_DIR.glob("cni-*"):
            with contextlib.suppress(OSError):
                if path.stat().st_ino in inodes:
                    remove_netns(path)
    mounts = [m for m in mount_points() if m == data_dir or data_dir in m.parents]
    for mount in sorted(mounts, key=lambda m: len(m.parts), reverse=True):
        _umount(mount)
    for root in bed.cgroup_roots:
        _remove_cgroup(root, leftovers)
    if CONTAINER_LOGS.is_dir():
        for link in CONTAINER_LOGS.iterdir():
            with contextlib.suppress(OSError):
                if link.is_symlink() and data_dir in Path(os.readlink(link)).parents:
                    link.unlink()
    for veth in bed.links:  # deleting one end of a veth pair deletes both
        if Path(f"/sys/class/net/{veth}").exists():
            run(["ip", "link", "del", veth], check=False)
    for name in bed.netns:  # gone once no process is left in it
        if (NETNS_DIR / name).exists():
            run(["ip", "netns", "del", name], check=False)
    if Path(f"/sys/class/net/{bed.bridge}").exists():
        run(["ip", "link", "del", bed.bridge], check=False)


def _inode(path: Path) -> int | None:
    try:
        return path.stat().st_ino
    except OSError:
        return None


def _ours(directory: Path, entry: Path) -> bool:
    """Whether ``entry`` in one of :data:`HOST_DIRS` is what our nodes leave there."""
    if entry.is_symlink():
        return not entry.exists()  # a log link into a removed test bed's directory
    if directory == DEVICE_PLUGINS:
        return entry.is_socket()
    return False


def _kill_processes(
    bed: TestBed, netns_inodes: set[int], shims: set[str], own_netns: set[int | None]
) -> list[int]:
    """SIGKILL every process in the test bed's cgroups, every shim serving its
    containerds and every process in its own network namespaces (``own_netns``, their
    inodes: the nodes' kubelets, containerds and kube-proxies); the network namespaces
    of the killed go to ``netns_inodes``, the container ids and socket names of the
    shims to ``shims``."""
    pids: set[int] = set()
    for hierarchy in cgroup_v1_hierarchies():
        for root in bed.cgroup_roots:
            base = hierarchy / root.lstrip("/")
            if base.is_dir():
                for procs in base.rglob("cgroup.procs"):
                    with contextlib.suppress(OSError, ValueError):
                        pids.update(int(p) for p in procs.read_text().split())
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        if own_netns and _inode(proc / "ns" / "net") in own_netns:
            pids.add(int(proc.name))
            continue
        if not bed.sockets:
            continue
        try:
            raw = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        argv = [arg.decode(errors="replace") for arg in raw]
        if not argv[0].endswith("containerd-shim-runc-v2"):
            continue
        address, namespace, task = (_flag(argv, f) for f in ("-address", "-namespace", "-id"))
        if address not in bed.sockets:
            continue
        pids.add(int(proc.name))
        if namespace and task:
            shims.add(task)
            # containerd 1.6 names a shim's socket after the containerd it serves.
            where = os.path.join(address, namespace, task)
            shims.add(f"socket:{hashlib.sha256(where.encode()).hexdigest()}")
    pids.discard(os.getpid())
    for pid in pids:
        with contextlib.suppress(OSError):
            netns_inodes.add(os.stat(f"/proc/{pid}/ns/net").st_ino)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return sorted(pids)


def _flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv[:-1] else None


# -- host helpers -----------------------------------------------------------------


def run(argv: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise HostError(f"`{shlex.join(argv)}` failed: {result.stderr.strip()}")
    return result


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _sysctl_path(name: str) -> Path:
    return Path("/proc/sys") / name.replace(".", "/")


def read_sysctl(name: str) -> str | None:
    try:
        return _sysctl_path(name).read_text().strip()
    except OSError:
        return None


def write_sysctl(name: str, value: str) -> None:
    _sysctl_path(name).write_text(value)


def _unescape(text: str) -> str:
    """A path from /proc/self/mountinfo (octal escapes for spaces and the like)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def _mountinfo() -> list[tuple[Path, str]]:
    """(mount point, filesystem type) of each mount, in mount order."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        before, _, after = line.partition(" - ")
        found.append((Path(_unescape(before.split()[4])), after.split()[0]))
    return found


def mount_points() -> list[Path]:
    return [point for point, _ in _mountinfo()]


def cgroup_v1_hierarchies() -> list[Path]:
    """Mount points of the cgroup v1 hierarchies (cpu, memory, ..., name=systemd)."""
    return [point for point, kind in _mountinfo() if kind == "cgroup"]


def create_cgroup(root: str) -> None:
    """The kubelet's cgroup root must exist in every hierarchy before it starts."""
    for hierarchy in cgroup_v1_hierarchies():
        path = hierarchy / root.lstrip("/")
        path.mkdir(exist_ok=True)
        for name in ("cpuset.cpus", "cpuset.mems"):  # empty in a new cpuset cgroup
            if (path / name).exists():
                (path / name).write_text((hierarchy / name).read_text())


def _remove_cgroup(root: str, leftovers: Leftovers) -> None:
    """Remove ``root`` depth first in every hierarchy (runc adds it to the unified one)."""
    for hierarchy in [*cgroup_v1_hierarchies(), _CGROUP_ROOT / "unified"]:
        base = hierarchy / root.lstrip("/")
        if not base.is_dir():
            continue
        children = sorted(
            (p for p in base.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True
        )
        for path in [*children, base]:
            for attempt in range(20):  # a killed process leaves its cgroup a moment later
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as exc:
                    if exc.errno != errno.EBUSY or attempt == 19:
                        leftovers.add(f"cgroup {path} not removed: {exc}")
                        break
                    time.sleep(0.1)


def _umount(path: Path) -> None:
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.umount2(str(path).encode(), _MNT_DETACH)


def remove_netns(path: Path) -> None:
    _umount(path)
    with contextlib.suppress(OSError):
        path.unlink()


def iptables_chains() -> dict[str, dict[str, list[str]]]:
    """``{"iptables": {"filter": [chains], ...}, "ip6tables": {...}}`` as -save lists them."""
    chains: dict[str, dict[str, list[str]]] = {}
    for family in ("iptables", "ip6tables"):
        save = shutil.which(f"{family}-save")
        if save is None:
            continue
        tables: dict[str, list[str]] = {}
        table = ""
        for line in run([save], check=False).stdout.splitlines():
            if line.startswith("*"):
                table = line[1:]
                tables[table] = []
            elif line.startswith(":") and table:
                tables[table].append(line[1:].split()[0])
        chains[family] = tables
    return chains


def _remove_new_chains(before: dict[str, dict[str, list[str]]], leftovers: Leftovers) -> None:
    """Delete the ``KUBE-*`` chains (and the jumps to them) that were not there before,
    then the nft tables iptables-nft created for them, when they are left empty."""
    for family, tables in iptables_chains().items():
        old = before.get(family, {})
        for table, chains in tables.items():
            new = [c for c in chains if c.startswith("KUBE-") and c not in old.get(table, [])]
            for rule in run([family, "-t", table, "-S"], check=False).stdout.splitlines():
                words = shlex.split(rule)
                if words[:1] != ["-A"] or "-j" not in words[:-1]:
                    continue
                if words[words.index("-j") + 1] in new and words[1] not in new:
                    run([family, "-t", table, "-D", *words[1:]], check=False)
            for action in ("-F", "-X"):
                for chain in new:
                    run([family, "-t", table, action, chain], check=False)
        _remove_empty_nft_tables(family, old, tables, leftovers)


def _remove_empty_nft_tables(
    family: str, old: dict[str, list[str]], tables: dict[str, list[str]], leftovers: Leftovers
) -> None:
    """iptables-nft creates an nft table on first use and never deletes it; a table that
    did not exist before and holds nothing but built-in chains that accept, without
    rules, is deleted with ``nft`` (Debian's nftables)."""
    nft = shutil.which("nft")
    nft_family = "ip" if family == "iptables" else "ip6"
    for table in tables:
        if table in old:
            continue
        if nft is None:
            leftovers.add(f"nft table {nft_family} {table} kept (no `nft` to delete it)")
            continue
        listed = run([nft, "-j", "list", "table", nft_family, table], check=False)
        try:
            items: list[dict[str, Any]] = json.loads(listed.stdout)["nftables"]
        except (ValueError, KeyError):
            continue
        builtin = _BUILTIN_CHAINS.get(table, set())
        empty = all(
            "metainfo" in item
            or "table" in item
            or (
                "chain" in item
                and item["chain"]["name"] in builtin
                and item["chain"].get("policy", "accept") == "accept"
            )
            for item in items
        )
        if empty:
            run([nft, "delete", "table", nft_family, table], check=False)
        else:
            leftovers.add(f"nft table {nft_family} {table} kept: something else uses it")


def _mount_details() -> list[tuple[str, str]]:
    """(mount point, "source superoptions") of each mount: an overlay's options name its
    layers' directories, so a containerd's temporary mount (``/tmp/containerd-mount*``,
    outside its directories) still tells whose snapshots it shows."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        before, _, after = line.partition(" - ")
        rest = after.split()
        found.append((_unescape(before.split()[4]), _unescape(" ".join(rest[1:]))))
    return found


SETTLE_SECONDS = 30.0
"""How long :func:`host_snapshot` waits, at most, for what another test bed's containerd
or CNI is creating or removing (and cannot be told apart yet) to settle."""
STABLE_SECONDS = 5.0
"""Unattributed items unchanged this long are taken as they are (a leak, not a pod
being set up or torn down)."""
TRANSIENT_MOUNTS = ("/tmp/containerd-mount",)
"""Where containerd mounts a snapshot for a moment (unpacking an image, reading a
container's ``/etc/passwd``): its temporary directory."""


def host_snapshot(*, settle: float = SETTLE_SECONDS) -> dict[str, Any]:
    """What the test bed may change on the host, to compare before and after a run:
    the kubelet's sysctls (and forwarding), iptables chains, netns, mounts, top-level
    cgroups, network links and their addresses, and the directories the kubelet,
    containerd and CNI create; with the test beds running meanwhile (``beds``) and
    what of it they own (``owned``: see :func:`owned_by_test_beds`).

    A pod's network namespace, veth or containerd's temporary mount that another test
    bed is setting up or tearing down at that moment cannot be told apart from a leak
    (``unattributed``); while other test beds run, the snapshot is taken again until
    those settle (attributed, gone, or unchanged for :data:`STABLE_SECONDS`), at most
    ``settle`` seconds."""
    deadline = time.monotonic() + settle
    stable_since, last = time.monotonic(), None
    while True:
        snapshot = _snapshot_once()
        pending = snapshot["unattributed"]
        now = time.monotonic()
        if pending != last:
            stable_since, last = now, pending
        if (
            not pending
            or not snapshot["beds"]
            or now >= deadline
            or now - stable_since >= STABLE_SECONDS
        ):
            return snapshot
        time.sleep(0.5)


def _snapshot_once() -> dict[str, Any]:
    hierarchies = [*cgroup_v1_hierarchies(), _CGROUP_ROOT / "unified"]
    forwarding = (
        "net.ipv4.ip_forward",
        "net.ipv6.conf.all.forwarding",
        "net.ipv6.conf.default.disable_ipv6",
    )
    # The test beds listed before and after the look: one that started or stopped
    # meanwhile is listed while its resources may be seen.
    beds = {bed["id"]: bed for bed in _running_beds()}
    addresses = {
        link["ifname"]: sorted(f"{a['local']}/{a['prefixlen']}" for a in link.get("addr_info", []))
        for link in json.loads(run(["ip", "-json", "addr", "show"], check=False).stdout or "[]")
    }
    mounts = _mount_details()
    netns = sorted(p.name for p in NETNS_DIR.glob("*")) if NETNS_DIR.is_dir() else None
    links = sorted(p.name for p in Path("/sys/class/net").iterdir())
    masters = {link: _master(link) for link in links}
    snapshot: dict[str, Any] = {
        "sysctls": {name: read_sysctl(name) for name in (*KERNEL_TUNABLES, *forwarding)},
        "iptables": iptables_chains(),
        "netns": netns,
        "mounts": sorted(point for point, _ in mounts),
        "cgroups": {
            str(h): sorted(p.name for p in h.iterdir() if p.is_dir())
            for h in hierarchies
            if h.is_dir()
        },
        "links": links,
        "addresses": addresses,
        "paths": {
            str(p): p.exists()
            for p in (
                *HOST_DIRS,
                Path("/var/lib/containerd"),
                Path("/etc/cni"),
                Path("/var/log/pods"),
                Path("/usr/libexec/kubernetes"),
                STATE_DIR,
            )
        },
    }
    beds.update((bed["id"], bed) for bed in _running_beds())
    snapshot["beds"] = list(beds.values())
    owned, unattributed = owned_by_test_beds(
        snapshot["beds"],
        netns=netns or [],
        netns_holders={
            **_declared_netns(snapshot["beds"]),
            **_netns_holders(netns or [], snapshot["beds"]),
        },
        cni_results=_cni_results(),
        mounts=mounts,
        masters=masters,
    )
    snapshot["owned"] = owned
    snapshot["unattributed"] = unattributed
    return snapshot


def _master(link: str) -> str:
    """The bridge ``link`` is enslaved to, or ""."""
    try:
        return os.path.basename(os.readlink(f"/sys/class/net/{link}/master"))
    except OSError:
        return ""


def _bed_of_cgroup(lines: str, roots: dict[str, str]) -> str | None:
    """The test bed whose cgroup root holds a process (``/proc/<pid>/cgroup``)."""
    for line in lines.splitlines():
        path = line.split(":", 2)[-1]
        top = path.strip("/").split("/", 1)[0]
        if top in roots:
            return roots[top]
    return None


def _netns_holders(names: Iterable[str], beds: list[dict[str, Any]]) -> dict[str, str]:
    """Pod network namespaces (``cni-*``) → the test bed whose process is in it: a pod's
    pause and containers run under the bed's kubelets' cgroup roots."""
    roots = {root.strip("/"): bed["id"] for bed in beds for root in bed.get("cgroup_roots", ())}
    inodes = {}
    for name in names:
        if name.startswith("cni-"):
            inode = _inode(NETNS_DIR / name)
            if inode is not None:
                inodes[inode] = name
    if not inodes or not roots:
        return {}
    held: dict[str, str] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        held_name = inodes.get(_inode(proc / "ns" / "net") or -1)
        if held_name is None or held_name in held:
            continue
        with contextlib.suppress(OSError):
            bed = _bed_of_cgroup((proc / "cgroup").read_text(), roots)
            if bed is not None:
                held[held_name] = bed
    return held


OWNED_NETNS = "owned-netns"
"""A file in a test bed's directory: its pods' network namespaces (names, one a line),
written when it stops, before their processes are killed."""


def _declared_netns(beds: list[dict[str, Any]]) -> dict[str, str]:
    """Pod network namespaces → the test bed whose :data:`OWNED_NETNS` names them."""
    declared: dict[str, str] = {}
    for bed in beds:
        with contextlib.suppress(OSError):
            text = (Path(bed["data_dir"]) / OWNED_NETNS).read_text()
            declared.update((name, bed["id"]) for name in text.split())
    return declared


def _cni_results() -> dict[str, str]:
    """libcni's cached results (``<network>-<container>-<ifname>``): file name → the
    network namespace recorded in it (path), when the cache records one."""
    found: dict[str, str] = {}
    if not CNI_RESULTS.is_dir():
        return found
    for path in CNI_RESULTS.iterdir():
        with contextlib.suppress(OSError, ValueError, AttributeError):
            netns = json.loads(path.read_text()).get("netns", "")
            found[path.name] = str(netns)
    return found


def owned_by_test_beds(
    beds: list[dict[str, Any]],
    *,
    netns: Iterable[str],
    netns_holders: dict[str, str],
    cni_results: dict[str, str],
    mounts: Iterable[tuple[str, str]],
    masters: dict[str, str],
) -> tuple[dict[str, list[str]], list[str]]:
    """What of the host the test beds ``beds`` own (``{"netns": [...], "mounts": [...],
    "links": [...]}``), and what could be a test bed's pod being set up or torn down but
    is nobody's (yet): ``netns:<name>``, ``link:<name>``, ``mount:<path>``.

    A test bed owns its network namespaces (``kccm-<id>-*``), the pod namespaces
    (``cni-*``) a process under its cgroup roots is in or that it declared while
    stopping (``netns_holders``, :data:`OWNED_NETNS`) or libcni's
    cache records for its network (``kube-ccm-<id>``), every mount below its directory or
    whose source or options name it (containerd's overlays of its snapshots) and the
    mounts of its namespaces, its bridge, veths and every link enslaved to its bridge
    (its pods' veths)."""
    ids = {bed["id"] for bed in beds}
    dirs = {d for bed in beds for d in (bed["data_dir"], os.path.realpath(bed["data_dir"]))}
    bridges = {bed["bridge"] for bed in beds}
    bed_links = {link for bed in beds for link in bed.get("links", ())} | bridges
    bed_netns = {name for bed in beds for name in bed.get("netns", ())}
    networks = {f"kube-ccm-{i}-" for i in ids}
    by_cache = {
        Path(path).name
        for entry, path in cni_results.items()
        if path and any(entry.startswith(n) for n in networks)
    }
    owned_netns: set[str] = set()
    unattributed: list[str] = []
    for name in netns:
        if (
            name in bed_netns
            or any(name.startswith(f"kccm-{i}-") for i in ids)
            or name in netns_holders
            or name in by_cache
        ):
            owned_netns.add(name)
        elif name.startswith("cni-") and beds:
            unattributed.append(f"netns:{name}")
    netns_dirs = {str(NETNS_DIR), os.path.realpath(NETNS_DIR)}
    owned_mounts: set[str] = set()
    for point, details in mounts:
        parent, _, base = point.rpartition("/")
        if any(point == d or point.startswith(d + "/") or d + "/" in details for d in dirs) or (
            parent in netns_dirs and base in owned_netns
        ):
            owned_mounts.add(point)
        elif beds and (
            point.startswith(TRANSIENT_MOUNTS) or (parent in netns_dirs and base.startswith("cni-"))
        ):
            unattributed.append(f"mount:{point}")
    owned_links = {
        link for link, master in masters.items() if link in bed_links or master in bridges
    }
    unattributed += [
        f"link:{link}"
        for link, master in masters.items()
        if beds and link not in owned_links and link.startswith("veth") and not master
    ]
    owned = {
        "netns": sorted(owned_netns),
        "mounts": sorted(owned_mounts),
        "links": sorted(owned_links),
    }
    return owned, sorted(unattributed)


def _running_beds() -> list[dict[str, Any]]:
    """The test beds the record lists now (read without the lock: it is replaced whole)."""
    try:
        raw = json.loads((STATE_DIR / "state.json").read_text())
        return [asdict(TestBed.from_json(bed)) for bed in raw["beds"].values()]
    except (OSError, ValueError, KeyError):
        return []


HOST_WIDE = ("sysctls", "iptables", "paths")
"""What every test bed's kubelets change and the last one to stop restores (not
compared while another test bed runs)."""


def host_changes(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """What differs between two :func:`host_snapshot` results, ``{key: (before, after)}``,
    leaving out what the test beds running at either time own (``beds`` and ``owned``
    of both: their namespaces, pods' namespaces, mounts, bridges, veths and addresses,
    cgroup roots), whenever they started; while another test bed ran, the host-wide
    changes (:data:`HOST_WIDE`, and the mount ``ip netns`` makes of the namespaces'
    directory) are theirs to restore and are not compared."""
    others = [*before.get("beds", ()), *after.get("beds", ())]
    dirs = [Path(bed["data_dir"]) for bed in others]
    bridges = {bed["bridge"] for bed in others}
    bridges |= {link for bed in others for link in bed.get("links", ())}
    roots = {root.strip("/") for bed in others for root in bed["cgroup_roots"]}
    ids = {bed["id"] for bed in others}
    owned: dict[str, set[str]] = {"netns": set(), "mounts": set(), "links": set()}
    for snapshot in (before, after):
        for key, items in snapshot.get("owned", {}).items():
            owned.setdefault(key, set()).update(items)
    owned["netns"] |= {name for bed in others for name in bed.get("netns", ())}
    owned["links"] |= bridges
    netns_dirs = {str(NETNS_DIR), os.path.realpath(NETNS_DIR)}

    def own_netns(name: str) -> bool:
        return name in owned["netns"] or any(name.startswith(f"kccm-{i}-") for i in ids)

    def own_mount(point: str) -> bool:
        parent, _, base = point.rpartition("/")
        return (
            point in owned["mounts"]
            or any(Path(point).is_relative_to(d) for d in dirs)
            or (parent in netns_dirs and own_netns(base))
            or (bool(others) and point in netns_dirs)
        )

    def own(key: str, value: Any) -> Any:
        if key == "netns":  # None: no directory yet ("paths" tells that)
            return [n for n in value or () if not own_netns(n)]
        if value is None:
            return value
        if key == "mounts":
            return [m for m in value if not own_mount(m)]
        if key == "links":
            return [link for link in value if link not in owned["links"]]
        if key == "addresses":
            return {link: a for link, a in value.items() if link not in owned["links"]}
        if key == "cgroups":
            return {h: [c for c in names if c not in roots] for h, names in value.items()}
        return value

    return {
        key: (before[key], after.get(key))
        for key in before
        if key not in ("beds", "owned", "unattributed")
        and not (others and key in HOST_WIDE)
        and own(key, before[key]) != own(key, after.get(key))
    }
