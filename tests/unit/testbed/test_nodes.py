"""The real nodes' configuration, checked without starting anything (no root needed)."""

from __future__ import annotations

import io
import ipaddress
import itertools
import json
import os
import stat
import tarfile
import tomllib
from pathlib import Path
from typing import Any

import pytest

from kube_ccm.testbed import _nodehost
from kube_ccm.testbed import nodes as nodes_module
from kube_ccm.testbed._nodehost import NETNS_DIR, host_changes, owned_by_test_beds, ula_subnet
from kube_ccm.testbed._nodehost import TestBed as BedRecord
from kube_ccm.testbed.nodes import (
    PAUSE_IMAGE,
    NodeOptions,
    RealNode,
    RealNodes,
    RealNodesError,
    node_addresses,
    real_nodes_unavailable,
)
from kube_ccm.testing import binaries
from kube_ccm.testing.binaries import NodeBinaries, Versions
from kube_ccm.testing.controlplane import ControlPlane
from kube_ccm.testing.daemon import ManagedProcess

SUBNET = ipaddress.IPv4Network("10.200.0.0/16")


def _test_bed(tmp_path: Path, count: int = 2, *, netns: bool = False) -> RealNodes:
    pause = tmp_path / "pause"
    pause.write_bytes(b"\x7fELF pause")
    fake = NodeBinaries(pause, pause, pause, pause, Versions("v1.0.0", "v3.6.0"), "env")
    bed = RealNodes(ControlPlane(), NodeOptions(count=count, netns=netns), binaries=fake)
    bed.data_dir = tmp_path
    bed.subnet = SUBNET
    bed.nodes = [
        RealNode(
            f"n{i}",
            f"10.200.0.{10 + i}",
            tmp_path / f"node-{i}",
            f"/cg-{i}",
            1,
            2,
            netns=f"kccm-t-{i}" if netns else "",
            pod_cidr=f"10.200.{128 + i}.0/24" if netns else "",
        )
        for i in range(count)
    ]
    return bed


def test_each_containerd_has_its_own_paths_and_restricts_oom_score_adj(tmp_path: Path) -> None:
    bed = _test_bed(tmp_path)
    configs = [tomllib.loads(bed._containerd_config(node)) for node in bed.nodes]
    for node, config in zip(bed.nodes, configs, strict=True):
        cri = config["plugins"]["io.containerd.grpc.v1.cri"]
        runc = cri["containerd"]["runtimes"]["runc"]
        assert cri["restrict_oom_score_adj"] is True  # no CAP_SYS_RESOURCE here
        assert cri["sandbox_image"] == PAUSE_IMAGE
        assert runc["options"] == {"SystemdCgroup": False, "Root": str(node.directory / "runc")}
        owned = [config["root"], config["state"], config["grpc"]["address"], cri["cni"]["conf_dir"]]
        assert all(Path(path).is_relative_to(node.directory) for path in owned)
    assert configs[0]["grpc"]["address"] != configs[1]["grpc"]["address"]


def test_the_nodes_hand_out_disjoint_pod_addresses_with_no_way_out(tmp_path: Path) -> None:
    bed = _test_bed(tmp_path, count=3)
    ranges = []
    for node in bed.nodes:
        (plugin,) = bed._cni_config(node)["plugins"]
        assert plugin["type"] == "bridge"
        assert plugin["bridge"] == bed.bridge
        assert plugin["isGateway"] is False
        assert plugin["ipMasq"] is False
        assert "routes" not in plugin["ipam"]  # pods reach the bridge only
        assert Path(plugin["ipam"]["dataDir"]).is_relative_to(node.directory)
        ((pool,),) = plugin["ipam"]["ranges"]
        start = ipaddress.IPv4Address(pool["rangeStart"])
        end = ipaddress.IPv4Address(pool["rangeEnd"])
        assert start in SUBNET
        assert end in SUBNET
        ranges.append((start, end))
    ranges.sort()
    assert all(a[1] < b[0] for a, b in itertools.pairwise(ranges))
    node_ips = {ipaddress.IPv4Address(node.ip) for node in bed.nodes}
    assert not any(start <= ip <= end for ip in node_ips for start, end in ranges)


def test_the_pause_image_is_one_executable_file_under_its_tag(tmp_path: Path) -> None:
    bed = _test_bed(tmp_path)
    with tarfile.open(bed._pause_image()) as archive:
        (manifest,) = json.loads(archive.extractfile("manifest.json").read())  # type: ignore[union-attr]
        config = json.loads(archive.extractfile(manifest["Config"]).read())  # type: ignore[union-attr]
        (layer_name,) = manifest["Layers"]
        layer = archive.extractfile(layer_name).read()  # type: ignore[union-attr]
    assert manifest["RepoTags"] == [PAUSE_IMAGE]
    assert config["config"]["Entrypoint"] == ["/pause"]
    with tarfile.open(fileobj=io.BytesIO(layer)) as files:
        (member,) = files.getmembers()
    assert member.name == "pause"
    assert member.mode & stat.S_IXUSR
    assert (member.uid, member.gid) == (0, 0)


def test_without_root_the_reason_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert "need root" in (real_nodes_unavailable() or "")


def test_node_binaries_live_beside_the_control_planes_and_are_not_built_by_a_lookup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(binaries.BIN_ENV, raising=False)
    monkeypatch.setenv(binaries.CACHE_ENV, str(tmp_path))
    assert binaries.find_node_binaries() is None
    directory = binaries.cache_dir()
    directory.mkdir(parents=True)
    for name in binaries.NODE_BINARIES:
        (directory / name).write_text("#!/bin/sh\n")
        (directory / name).chmod(0o755)
    found = binaries.find_node_binaries()
    assert found is not None
    assert found.source == "cache"
    assert found.kubelet == directory / "kubelet"
    assert found.pause.parent == directory


def test_ipv6_node_ips_share_the_host_part_of_the_ipv4_ones_in_the_beds_own_ula() -> None:
    subnet6 = ula_subnet(SUBNET)
    assert subnet6 == ipaddress.IPv6Network("fd6b:6363:6d00:ac8::/64")  # 10.200 = 0x0ac8
    assert subnet6.is_private
    assert ula_subnet(ipaddress.IPv4Network("10.201.0.0/16")) != subnet6
    assert node_addresses(SUBNET, None, 0, ("IPv4",)) == ("10.200.0.10",)
    assert node_addresses(SUBNET, subnet6, 1, ("IPv6",)) == ("fd6b:6363:6d00:ac8::b",)
    assert node_addresses(SUBNET, subnet6, 2, ("IPv6", "IPv4")) == (
        "fd6b:6363:6d00:ac8::c",
        "10.200.0.12",
    )


def test_ip_families_per_node_default_to_the_common_ones_and_are_checked() -> None:
    options = NodeOptions(count=3, node_ip_families=(("IPv6",), ("IPv4", "IPv6")))
    assert [options.families(i) for i in range(3)] == [("IPv6",), ("IPv4", "IPv6"), ("IPv4",)]
    for wrong in ((), ("IPv4", "IPv4"), ("IPv5",), ("IPv4", "IPv6", "IPv4")):
        with pytest.raises(RealNodesError, match="IP families"):
            NodeOptions(ip_families=wrong).families(0)


def test_a_dual_stack_kubelet_gets_both_node_ips_and_serves_on_the_first(tmp_path: Path) -> None:
    node = RealNode("n", "10.200.0.10", tmp_path, "/cg", 1, 2, ("10.200.0.10", "fd00::a"))
    assert (node.ipv4, node.ipv6) == ("10.200.0.10", "fd00::a")
    single = RealNode("n", "fd00::a", tmp_path, "/cg", 1, 2)
    assert single.node_ips == ("fd00::a",)
    assert (single.ipv4, single.ipv6) == (None, "fd00::a")


def test_host_changes_leave_out_what_other_running_test_beds_own() -> None:
    other = {
        "id": "o",
        "pid": 1,
        "data_dir": "/tmp/kccm-o",
        "bridge": "kccmo",
        "subnet": "10.193.0.0/16",
        "cgroup_roots": ["/kube-ccm-o-0"],
        "sockets": [],
        "subnet6": "",
    }

    def snapshot(beds: list[dict[str, object]], *, mine: bool = False) -> dict[str, object]:
        return {
            "sysctls": {"kernel.panic": "10" if beds else "0"},
            "mounts": ["/", *(["/tmp/kccm-o/node-0/kubelet"] if beds else [])],
            "links": ["lo", *(["kccmo"] if beds else []), *(["kccmmine"] if mine else [])],
            "addresses": {"lo": ["127.0.0.1/8"], **({"kccmo": ["10.193.0.1/16"]} if beds else {})},
            "cgroups": {"/sys/fs/cgroup/cpu": ["kube-ccm-o-0"] if beds else []},
            "beds": beds,
        }

    # Another test bed started (or stopped) meanwhile: nothing of ours changed.
    assert host_changes(snapshot([]), snapshot([other])) == {}
    assert host_changes(snapshot([other]), snapshot([])) == {}
    # Our own bridge left behind is still a change, whoever else runs.
    assert set(host_changes(snapshot([other]), snapshot([other], mine=True))) == {"links"}
    # Alone, a host-wide change is one.
    before, after = snapshot([]), snapshot([])
    after["sysctls"] = {"kernel.panic": "10"}
    assert set(host_changes(before, after)) == {"sysctls"}


def test_kube_proxy_is_found_beside_the_node_binaries_or_in_the_binaries_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(binaries.CACHE_ENV, str(tmp_path / "cache"))
    given = tmp_path / "bin"
    given.mkdir()
    (given / "kube-proxy").write_text("#!/bin/sh\n")
    (given / "kube-proxy").chmod(0o755)
    monkeypatch.setenv(binaries.BIN_ENV, str(given))
    assert binaries.ensure_kube_proxy(log=False) == given / "kube-proxy"
    monkeypatch.delenv(binaries.BIN_ENV)
    cached = binaries.cache_dir()
    cached.mkdir(parents=True)
    (cached / "kube-proxy").write_text("#!/bin/sh\n")
    (cached / "kube-proxy").chmod(0o755)
    assert binaries.ensure_kube_proxy(log=False) == cached / "kube-proxy"


def test_a_test_bed_record_without_kube_proxy_reads_as_none_running() -> None:
    raw = {
        "id": "abc123",
        "pid": 1,
        "data_dir": "/tmp/x",
        "bridge": "kccmabc123",
        "subnet": "10.192.0.0/16",
        "cgroup_roots": [],
        "sockets": [],
    }
    assert BedRecord.from_json(raw).kube_proxy is False
    assert BedRecord.from_json({**raw, "kube_proxy": True}).kube_proxy is True


def test_kube_proxy_runs_as_node_0_and_changes_no_sysctl(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bed = _test_bed(tmp_path)
    spawned: dict[str, list[str]] = {}
    monkeypatch.setattr(bed.plane, "write_client_kubeconfig", lambda path, user, **_: path)
    monkeypatch.setattr(bed, "_spawn", lambda name, argv, **_: spawned.setdefault(name, argv))
    bed._start_kube_proxy(tmp_path / "kube-proxy")
    argv = spawned["kube-proxy"]
    assert "--hostname-override=n0" in argv
    assert f"--nodeport-addresses={SUBNET}" in argv
    assert {
        "--conntrack-max-per-core=0",
        "--conntrack-tcp-timeout-established=0s",
        "--conntrack-tcp-timeout-close-wait=0s",
    } <= set(argv)


def test_in_their_own_namespaces_pods_get_a_bridge_per_node_with_hostports_and_routes(
    tmp_path: Path,
) -> None:
    bed = _test_bed(tmp_path, count=3, netns=True)
    cidrs = []
    for node in bed.nodes:
        bridge, portmap = bed._cni_config(node)["plugins"]
        assert bridge["type"] == "bridge"
        assert bridge["bridge"] == "cni0"  # in the node's namespace: one name each
        assert bridge["isGateway"] is True
        assert bridge["ipMasq"] is False
        assert bridge["ipam"]["routes"] == [{"dst": "0.0.0.0/0"}]
        assert bridge["ipam"]["ranges"] == [[{"subnet": node.pod_cidr}]]
        assert portmap == {"type": "portmap", "capabilities": {"portMappings": True}, "snat": True}
        cidrs.append(ipaddress.IPv4Network(node.pod_cidr))
    assert all(not a.overlaps(b) for a, b in itertools.combinations(cidrs, 2))
    # Apart from the node IPs and the host, inside what kube-proxy calls the cluster's.
    assert not any(ipaddress.IPv4Address(node.ip) in c for node in bed.nodes for c in cidrs)
    assert all(c.subnet_of(ipaddress.IPv4Network("10.200.128.0/17")) for c in cidrs)


def test_in_their_own_namespaces_each_node_runs_its_own_kube_proxy_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bed = _test_bed(tmp_path, netns=True)
    spawned: dict[str, tuple[list[str], str]] = {}
    servers: list[str] = []

    def kubeconfig(path: Path, user: str, *, server: str = "") -> Path:
        servers.append(server)
        return path

    monkeypatch.setattr(bed.plane, "write_client_kubeconfig", kubeconfig)
    monkeypatch.setattr(
        bed, "_spawn", lambda name, argv, netns="": spawned.setdefault(name, (argv, netns))
    )
    bed._start_kube_proxy(tmp_path / "kube-proxy")
    assert set(spawned) == {"kube-proxy-n0", "kube-proxy-n1"}
    for node in bed.nodes:
        argv, netns = spawned[f"kube-proxy-{node.name}"]
        assert netns == node.netns
        assert f"--hostname-override={node.name}" in argv
        assert "--cluster-cidr=10.200.128.0/17" in argv
    assert servers == [f"https://10.200.0.1:{bed.plane.secure_port}"]  # the gateway


def test_a_process_in_a_node_namespace_enters_only_its_network_namespace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bed = _test_bed(tmp_path, netns=True)
    started: list[list[str]] = []

    def start(process: ManagedProcess) -> ManagedProcess:
        started.append(process.argv)
        return process

    monkeypatch.setattr(ManagedProcess, "start", start)
    bed._spawn("containerd-n0", ["containerd"], netns="kccm-t-0")
    bed._spawn("kube-controller-manager", ["kcm"])
    assert started == [
        ["nsenter", "--net=/var/run/netns/kccm-t-0", "--", "containerd"],
        ["kcm"],
    ]


def test_a_test_bed_record_keeps_its_namespaces_and_veths_and_others_are_left_out() -> None:
    raw = {
        "id": "o",
        "pid": 1,
        "data_dir": "/tmp/kccm-o",
        "bridge": "kccmo",
        "subnet": "10.193.0.0/16",
        "cgroup_roots": [],
        "sockets": [],
    }
    assert BedRecord.from_json(raw).netns == ()
    other = {**raw, "netns": ["kccm-o-0", "kccm-o-client"], "links": ["kv1", "kv2"]}
    record = BedRecord.from_json(other)
    assert (record.netns, record.links) == (("kccm-o-0", "kccm-o-client"), ("kv1", "kv2"))

    def snapshot(beds: list[dict[str, object]], links: list[str]) -> dict[str, object]:
        return {"links": ["lo", *links], "addresses": {}, "beds": beds}

    # Another test bed's veths come and go with it; ours left behind are a change.
    assert host_changes(snapshot([], []), snapshot([other], ["kccmo", "kv1", "kv2"])) == {}
    assert set(host_changes(snapshot([other], []), snapshot([other], ["kvmine"]))) == {"links"}


OTHER_BED = {
    "id": "o",
    "pid": 1,
    "data_dir": "/tmp/kccm-o",
    "bridge": "kccmo",
    "subnet": "10.193.0.0/16",
    "cgroup_roots": ["/kube-ccm-o-0"],
    "sockets": [],
}
RUN_NETNS = os.path.realpath(NETNS_DIR)  # as /proc/self/mountinfo names it


def test_what_a_running_test_bed_owns_is_told_by_its_names_processes_cache_and_bridge() -> None:
    owned, unattributed = owned_by_test_beds(
        [OTHER_BED],
        netns=["kccm-o-0", "cni-held", "cni-cached", "cni-nobody", "mine"],
        netns_holders={"cni-held": "o"},  # its pod's pause is under its cgroup root
        cni_results={
            "kube-ccm-o-abc-eth0": f"{NETNS_DIR}/cni-cached",
            "kube-ccm-x-def-eth0": f"{NETNS_DIR}/cni-nobody",  # another network's
        },
        mounts=[
            ("/", "/dev/vda rw"),
            ("/tmp/kccm-o/node-0/kubelet", "tmpfs rw"),
            # containerd's temporary mount of one of its snapshots
            ("/tmp/containerd-mount1", "overlay rw,lowerdir=/tmp/kccm-o/node-0/root/s/1/fs"),
            ("/tmp/containerd-mount2", "overlay rw,lowerdir=/var/lib/elsewhere/1/fs"),
            (f"{RUN_NETNS}/cni-held", "nsfs rw"),
            (f"{RUN_NETNS}/cni-nobody", "nsfs rw"),
        ],
        masters={"kccmo": "", "veth1": "kccmo", "veth2": "", "eth0": ""},
    )
    assert owned == {
        "netns": ["cni-cached", "cni-held", "kccm-o-0"],
        "mounts": [
            f"{RUN_NETNS}/cni-held",
            "/tmp/containerd-mount1",
            "/tmp/kccm-o/node-0/kubelet",
        ],
        "links": ["kccmo", "veth1"],
    }
    # What could be a pod being set up or torn down, and is nobody's yet.
    assert unattributed == [
        "link:veth2",
        f"mount:{RUN_NETNS}/cni-nobody",
        "mount:/tmp/containerd-mount2",
        "netns:cni-nobody",
    ]
    # With no other test bed running, nothing is anybody's and nothing waits.
    assert owned_by_test_beds(
        [], netns=["cni-x"], netns_holders={}, cni_results={}, mounts=[], masters={"v": ""}
    ) == ({"netns": [], "mounts": [], "links": []}, [])


def test_a_neighbours_pods_whenever_it_started_are_left_out_and_a_leak_of_ours_is_not() -> None:
    def snapshot(
        beds: list[dict[str, object]], netns: list[str] | None, owned: list[str]
    ) -> dict[str, object]:
        return {
            "netns": netns,
            "mounts": ["/", *(f"{RUN_NETNS}/{n}" for n in netns or [])],
            "links": ["lo"],
            "beds": beds,
            "owned": {"netns": owned, "mounts": [f"{RUN_NETNS}/{n}" for n in owned]},
        }

    # Its pod ran when we looked first; it stopped before we looked again.
    assert host_changes(snapshot([OTHER_BED], ["cni-a"], ["cni-a"]), snapshot([], [], [])) == {}
    # It started meanwhile (no namespace directory before).
    assert host_changes(snapshot([], None, []), snapshot([OTHER_BED], ["cni-a"], ["cni-a"])) == {}
    # A pod namespace nobody owns is a change, even while another test bed runs.
    changed = host_changes(snapshot([], None, []), snapshot([OTHER_BED], ["cni-b"], []))
    assert set(changed) == {"netns", "mounts"}


def test_the_record_lock_is_taken_again_when_the_last_bed_removed_its_directory_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "state"
    monkeypatch.setattr(_nodehost, "STATE_DIR", state)
    real_mkdir = Path.mkdir
    removed: list[Path] = []

    def mkdir(self: Path, *args: Any, **kwargs: Any) -> None:
        real_mkdir(self, *args, **kwargs)
        if self == state and not removed:  # the last test bed stopped just then
            removed.append(self)
            self.rmdir()

    monkeypatch.setattr(Path, "mkdir", mkdir)
    with _nodehost.locked_record() as record:
        assert record.beds == {}
    assert removed == [state]


def test_a_stopping_bed_declares_its_pods_namespaces_for_the_others_checks(tmp_path: Path) -> None:
    """Between killing its pods and removing their namespaces nothing else tells."""
    (tmp_path / _nodehost.OWNED_NETNS).write_text("cni-a\ncni-b\n")
    bed = {**OTHER_BED, "data_dir": str(tmp_path)}
    declared = _nodehost._declared_netns(
        [bed, {**OTHER_BED, "id": "x", "data_dir": "/nonexistent"}]
    )
    assert declared == {"cni-a": "o", "cni-b": "o"}
    owned, unattributed = owned_by_test_beds(
        [bed], netns=["cni-a"], netns_holders=declared, cni_results={}, mounts=[], masters={}
    )
    assert (owned["netns"], unattributed) == (["cni-a"], [])


def test_a_start_that_fails_before_taking_the_host_leaves_no_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bed = _test_bed(tmp_path)
    monkeypatch.setattr(nodes_module, "real_nodes_unavailable", lambda: None)

    def refused() -> None:
        raise RealNodesError("the host record could not be read")

    monkeypatch.setattr(bed, "_acquire_host", refused)
    with pytest.raises(RealNodesError):
        bed.start()
    assert bed.data_dir.name.startswith(f"kccm-{bed.id}-")
    assert not bed.data_dir.exists()
