"""Real nodes beside a local control plane: kubelets on containerd, with
kube-controller-manager and kube-scheduler, as a cluster with an external cloud
provider runs them::

    options = ControlPlaneOptions(real_nodes=True)
    with ControlPlane(options) as plane, RealNodes(plane, NodeOptions(count=2)) as nodes:
        nodes.nodes[0].name, nodes.nodes[0].ip   # a Node registered by a real kubelet

What runs (binaries from :func:`~kube_ccm.testing.binaries.ensure_node_binaries`,
containerd, runc and the CNI plugins from Debian, ``make sysdeps``):

- kube-controller-manager with ``--cloud-provider=external`` (so it runs no cloud
  loops) and its controllers' ServiceAccount credentials, and kube-scheduler, both
  with client certificates (kubeadm's users) and no serving port;
- per node: its own containerd (a kubelet kills the containers it does not know, so
  kubelets never share one) with its own root, state, runc root, socket and config
  (``restrict_oom_score_adj = true``: this machine lacks ``CAP_SYS_RESOURCE``); and a
  kubelet with its own root directory, ports, cgroup root, name, ``--node-ip`` and
  ``--cloud-provider=external`` (``failCgroupV1: false``: the machine has cgroup v1);
- a bridge of this test bed's own carrying the node IPs (a free /16 of ``10.192.0.0/12``,
  and, when a node has an IPv6 ``--node-ip`` (:attr:`NodeOptions.ip_families`), the ULA
  /64 derived from it, e.g. ``fd6b:6363:6d00:ac0::/64`` for ``10.192.0.0/16``, its
  addresses added ``nodad``), which the kubelets' CNI config (Debian's ``bridge`` and
  ``host-local`` plugins) puts pods on, IPv4 only: no gateway, no masquerading, no
  route out, so pods reach only this bridge; host-network pods are simplest (and the
  only ones with an IPv6 address on an IPv6 node);
- a pause image (``gobuild/pause``, one static file) assembled here and imported into
  each containerd with ``ctr images import``: no registry is ever contacted.

With :attr:`NodeOptions.netns` (default off; IPv4 node IPs only) each node is a
machine of its own on that bridge instead:

- a network namespace ``kccm-<id>-<n>`` with a veth pair, whose host end joins the
  bridge and whose node end (``eth0``) carries the node IP (``<subnet>.0.10 + n/24``)
  and a default route to the host (``<subnet>.0.1``); the node's containerd, kubelet
  and kube-proxy run in it (``nsenter --net``: only the network namespace changes, so
  mounts and cgroups are the host's, as without it);
- its pods on a bridge of its own there (``cni0``, their gateway), pod CIDR
  ``<subnet>.<128 + n>.0/24``, with CNI's ``portmap`` plugin, so a hostPort answers on
  that node's IP only, as on a real cluster; routes to every other node's pod CIDR via
  that node's IP (and on the host, so the host reaches every pod); forwarding and
  ``bridge-nf-call-iptables`` on inside the namespace;
- a client namespace ``kccm-<id>-client`` at ``<subnet>.0.2`` on the bridge, outside
  every node: :attr:`RealNodes.client_netns`, :meth:`RealNodes.route_from_client`;
- kube-apiserver served on the gateway too (:meth:`ControlPlane.serve_also_on`: the
  serving certificate gets that address, kube-apiserver is restarted once, bound to
  every address, and advertises it, so the ``kubernetes`` Service leads there): the
  nodes' kubeconfigs and host-network pods use it (:attr:`RealNodes.api_host`).

Whatever the kubelet, kube-proxy and CNI change in a node's namespace (iptables chains,
``route_localnet``, the pods' ``cni-*`` namespaces' veths, the sysctls above) is that
namespace's and goes with it: the host sees only the veths and routes below.

Host changes, and their undo. The kubelet makes most of them itself; every one is
undone when the test bed stops (:meth:`RealNodes.stop`), and a test bed that died
without stopping is cleaned up by the next one (see *Crash recovery*):

============================================  ===============================================
change                                        undo
============================================  ===============================================
sysctls ``vm.overcommit_memory``,             the values read before the first kubelet
``vm.panic_on_oom``, ``kernel.panic``,        started are written back (kubelet sets
``kernel.panic_on_oops``,                     1, 0, 10, 1, 1000000 and 25000000)
``kernel.keys.root_maxkeys``/``root_maxbytes``
iptables chains ``KUBE-FIREWALL``,            the jumps to them are deleted, then the chains
``KUBE-KUBELET-CANARY``, ``KUBE-IPTABLES-     (every ``KUBE-*`` chain that did not exist
HINT`` (IPv4 and IPv6), jumps from            before); nft tables iptables-nft created for
``INPUT``/``OUTPUT``                          them are deleted when left empty (with ``nft``)
a shared bind mount of each kubelet root      unmounted, with every mount below the test
dir, pod volumes (tmpfs), containerd's        bed's directory (deepest first, lazily)
rootfs and shm mounts
cgroup root ``/kube-ccm-<id>-<n>`` in every   processes left in them killed, then removed
cgroup v1 hierarchy (created here; the        depth first
kubelet adds ``kubepods/...`` below)
``/var/run/netns/cni-*`` (pods that are not   the ones our pods used are unmounted and
host-network)                                 removed, and any new one when the last test bed
                                              stops
the bridge ``kccm<id>`` with the node IPs     deleted (its addresses and its own
(IPv4 /32s, IPv6 /128s ``nodad``) and its     ``disable_ipv6`` go with it)
``disable_ipv6`` set to 0 if it was not
``/var/log/containers`` and its symlinks      our symlinks removed; the directory too if it
                                              did not exist and is empty
``/run/containerd/s`` (containerd 1.6's shim  removed if it did not exist and is empty
sockets, a fixed path)
``/var/lib/kubelet/device-plugins/kubelet.    removed, with the directories, if they did not
sock`` (a fixed path, whatever --root-dir)    exist
``/var/lib/cni/results`` (libcni's cache,     our entries removed, with the directories if
a fixed path)                                 they did not exist
containerd-shim processes (they outlive       tasks killed through containerd, then any
containerd by design)                          shim of our sockets killed
with :attr:`NodeOptions.kube_proxy`: its      ``kube-proxy --cleanup`` when the test bed
iptables chains (``KUBE-SERVICES``,           stops, then every new ``KUBE-*`` chain as
``KUBE-NODEPORTS``, ``KUBE-POSTROUTING``,     above; it is started so that it changes no
``KUBE-FORWARD``, ...) and their jumps        sysctl (conntrack sizing off, nodePorts on
(not with ``netns``: they are the nodes')     the test bed's subnet only, not loopback)
with :attr:`NodeOptions.netns`: network       each veth's host end deleted (its peer goes
namespaces ``/var/run/netns/kccm-<id>-*``,    with it), then ``ip netns del`` each, once
veth pairs ``kv<hash>`` on the bridge,        every process in them is stopped (or killed,
routes to the pod CIDRs via the node IPs      by crash recovery); the routes go with the
on the bridge                                 bridge
============================================  ===============================================

kube-proxy (:attr:`NodeOptions.kube_proxy`, default off): every kubelet shares the
host's network namespace, so one kube-proxy serves them all (two would fight over the
same chains), in iptables mode, as node 0 (``--hostname-override``). What that gives:
ClusterIPs and nodePorts reach the backends from the host and from host-network pods
(pods on the bridge have no route to ClusterIPs), and an ingress IP in a Service's
status is served by kube-proxy itself, as on a real node. What it cannot give: per-node
``externalTrafficPolicy: Local`` (to kube-proxy every node IP is node 0's, so "local
endpoints" are node 0's). Its rules are host-wide, so only one test bed at a time may
run it (:class:`RealNodesError` otherwise). With :attr:`NodeOptions.netns`, each node
runs its own kube-proxy in its namespace, as itself, with the pod CIDRs
(``<subnet>.128.0/17``) as ``--cluster-cidr``: per-node ``Local``, ClusterIPs from
pods, and no host-wide rule, so any number of such test beds may run at once.

Stopping order: kube-scheduler and kube-controller-manager first (nothing recreates
or places pods any more), then every pod bound to our nodes is deleted with a
one-second grace period and the kubelets get a few seconds to stop them, then the
kubelets (nothing asks for pods any more), then each containerd is left until it is
quiet (its tasks the same on two looks, none being created or stopped), its pod
sandboxes' network namespaces are read from their specs, whatever containers remain
are killed through containerd, then the containerds, leftover shims and processes,
then the mounts, netns (those of its sandboxes too, with or without a process),
cgroups, the bridge and the host-wide changes. Each containerd's ``TMPDIR`` (its
temporary mounts of snapshots) is in its node's directory.

Crash recovery and sharing: the host-wide state (values before, chains and netns
that existed before, which test beds are running with their pids, cgroup roots,
bridges and directories) lives in ``/run/kube-ccm-testbed/state.json`` under an
advisory lock (``kube_ccm/testbed/_nodehost.py``). The first test bed to start records
the host as it was; the last to stop restores it and removes the file (with
``/var/run/netns``, when it did not exist: also the bind mount of itself that
``ip netns add`` makes on first use). A test bed
whose process is gone (``kill -9``: its kubelets and containerds get SIGTERM, its
containers and shims live on; with ``netns``, every process left in its namespaces
is killed, and its veths and namespaces deleted) is cleaned up by the next one that
starts, or by
:func:`clean_up_dead_test_beds`. :func:`host_snapshot` is what the tests compare
before and after, with :func:`host_changes`, which leaves out what the test beds
listed at either look own, whenever they started: their namespaces, bridges,
veths, cgroup roots and directories, and what their pods made under no bed's name
(a ``cni-*`` namespace held by a process in the bed's cgroups or in libcni's cache
for its network, a ``veth*`` on its bridge, a containerd mount whose options name
its directory). What a neighbour is setting up at that instant is looked at again
until it settles (see :func:`host_snapshot`); a leak of our own is still a change
while neighbours run.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import hashlib
import io
import ipaddress
import json
import os
import platform
import shutil
import subprocess
import tarfile
import tempfile
import time
import urllib.error
import urllib.parse
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kube_ccm.testbed._nodehost import (
    NETNS_DIR,
    OWNED_NETNS,
    HostError,
    Leftovers,
    TestBed,
    cgroup_v1_hierarchies,
    clean_up_dead_test_beds,
    create_cgroup,
    host_changes,
    host_snapshot,
    locked_record,
    run,
    ula_subnet,
    undo_test_bed,
)
from kube_ccm.testing._lifecycle import Started
from kube_ccm.testing.binaries import (
    ControlPlaneBinariesError,
    NodeBinaries,
    ensure_kube_proxy,
    ensure_node_binaries,
)
from kube_ccm.testing.controlplane import ControlPlane, _free_port, _rss_bytes
from kube_ccm.testing.daemon import ManagedProcess
from kube_ccm.testing.pki import CertificateAuthority

__all__ = [
    "PAUSE_IMAGE",
    "NodeOptions",
    "RealNode",
    "RealNodes",
    "RealNodesError",
    "assert_host_restored",
    "clean_up_dead_test_beds",
    "host_changes",
    "host_snapshot",
    "node_addresses",
    "pause_deployment",
    "real_nodes_unavailable",
]

PAUSE_IMAGE = "kube-ccm.local/pause:1.0"
"""The image of every pod sandbox, and a container image that does nothing (use it with
``imagePullPolicy: Never``)."""

CNI_BIN_DIR = Path("/usr/lib/cni")
"""Where Debian's containernetworking-plugins puts the plugins."""

_STOP_TIMEOUT = 10.0
_QUIET_TIMEOUT = 20.0
_POD_GRACE_SECONDS = 1


class RealNodesError(RuntimeError):
    """The real nodes could not start; the message names the piece that failed."""


def real_nodes_unavailable() -> str | None:
    """Why real nodes cannot run on this machine, or None when they can."""
    if os.geteuid() != 0:
        return "real nodes need root (the kubelet manages cgroups, mounts and sysctls)"
    missing = [
        name
        for name in ("containerd", "containerd-shim-runc-v2", "runc", "ctr", "ip", "nft", "nsenter")
        if shutil.which(name) is None
    ]
    missing += [
        f"{CNI_BIN_DIR}/{name}"
        for name in ("bridge", "host-local", "loopback", "portmap")
        if not os.access(CNI_BIN_DIR / name, os.X_OK)
    ]
    if missing:
        return (
            f"real nodes need containerd, runc, the CNI plugins, nft and nsenter "
            f"({', '.join(missing)} missing): run `make sysdeps` (Debian's containerd, runc, "
            "containernetworking-plugins and nftables; nsenter is util-linux's)"
        )
    if not cgroup_v1_hierarchies():
        # The test bed creates and removes the kubelets' cgroup roots per v1 hierarchy;
        # the unified (v2) layout has not been tried.
        return "real nodes need cgroup v1 hierarchies under /sys/fs/cgroup (cgroup v2 is untried)"
    return None


@dataclass(frozen=True)
class NodeOptions:
    """Knobs for the real nodes. Defaults suit tests."""

    count: int = 1
    controllers: bool = True
    """Also run kube-controller-manager and kube-scheduler (pods need both)."""
    status_update_frequency: str = "2s"
    """The kubelets' ``nodeStatusUpdateFrequency`` and ``nodeStatusReportFrequency``: a
    status patch this often, so tests see the kubelet's later updates soon."""
    data_dir: Path | None = None
    """Where every node's files go; a fresh temporary directory if None."""
    ready_timeout: float = 60.0
    """How long :meth:`RealNodes.start` waits for every Node to register and be Ready."""
    wait_ready: bool = True
    images: tuple[Path, ...] = ()
    """docker-archive tarballs imported into every node's containerd before its kubelet
    starts (e.g. :attr:`kube_ccm.testbed.image.Image.archive`); pods use them with
    ``imagePullPolicy: Never`` or ``IfNotPresent``."""
    controller_manager_args: tuple[str, ...] = ()
    """Further kube-controller-manager flags, e.g. ``--node-monitor-grace-period=10s``
    so a stopped kubelet's Node turns NotReady soon."""
    ip_families: tuple[str, ...] = ("IPv4",)
    """The families of every node's ``--node-ip``, in that order: ``("IPv4",)``,
    ``("IPv6",)``, or a dual-stack pair, ``("IPv4", "IPv6")`` or ``("IPv6", "IPv4")``.
    An IPv6 node IP is an address of the test bed's ULA /64 on its bridge; the kubelet
    serves on the first node IP. Pods stay IPv4 (the CNI config is IPv4-only): on an
    IPv6-only node use host-network pods."""
    node_ip_families: tuple[tuple[str, ...], ...] = ()
    """Per node, by index, instead of :attr:`ip_families` (nodes past its end use
    :attr:`ip_families`): e.g. ``(("IPv4",), ("IPv6",), ("IPv4", "IPv6"))``."""

    server_tls_bootstrap: bool = False
    """The kubelets ask for their serving certificates (``serverTLSBootstrap: true``, a
    ``kubernetes.io/kubelet-serving`` CSR each) instead of being given one, and
    kube-controller-manager signs those CSRs, once something approves them, with a CA of
    the test bed's own (:attr:`RealNodes.kubelet_serving_ca`). Until then a kubelet
    serves no TLS at all. Default: certificates issued by the control plane's CA."""

    kube_proxy: bool = False
    """Also run one kube-proxy for the whole test bed (see the module docstring: iptables
    mode, as node 0, one such test bed per host), built on first use
    (:func:`~kube_ccm.testing.binaries.ensure_kube_proxy`). Default off: no ClusterIP
    or nodePort leads anywhere, as before."""

    netns: bool = False
    """Each node in a network namespace of its own (``kccm-<id>-<n>``), as separate
    machines are: a veth pair whose host end joins the test bed's bridge and whose node
    end (``eth0``) carries the node IP, its containerd, kubelet and (with
    :attr:`kube_proxy`) its own kube-proxy inside, and its pods on a bridge of their
    own there (``cni0``, pod CIDR ``<subnet>.<128 + n>.0/24``, with CNI's portmap
    plugin, so hostPorts work as on any cluster); plus a client namespace
    (:attr:`RealNodes.client_netns`) on the bridge. See the module docstring. IPv4
    node IPs only. Default off: every node in the host's network namespace."""

    cluster_dns: str = ""
    """The kubelets' ``clusterDNS`` (a ClusterIP of a DNS Service the caller runs, e.g.
    :mod:`kube_ccm.testbed.e2e`'s CoreDNS) with ``clusterDomain: cluster.local``: pods
    then resolve Services by name. Default: none (pods get the host's resolv.conf)."""

    network_later: tuple[int, ...] = ()
    """Nodes (by index) whose containerd starts without a CNI config, as before a
    cluster's network add-on runs: their kubelet registers and stays NotReady
    (``NetworkPluginNotReady``) until :meth:`RealNodes.install_network`; :meth:`RealNodes.start`
    waits only for them to register."""

    def families(self, index: int) -> tuple[str, ...]:
        """The ``--node-ip`` families of node ``index``, checked."""
        families = (
            self.node_ip_families[index] if index < len(self.node_ip_families) else self.ip_families
        )
        if (
            not families
            or len(families) > 2
            or len(set(families)) != len(families)
            or not set(families) <= {"IPv4", "IPv6"}
        ):
            raise RealNodesError(
                f"node {index}: IP families {families!r}: use one of IPv4 and IPv6, or one of each"
            )
        return families


@dataclass(frozen=True)
class RealNode:
    """One kubelet and its containerd."""

    name: str
    ip: str
    """Its first node IP: the kubelet serves there."""
    directory: Path
    cgroup_root: str
    kubelet_port: int
    healthz_port: int
    node_ips: tuple[str, ...] = ()
    """Its ``--node-ip`` (one IP, or a dual-stack pair), in order; ``(ip,)`` if not given."""
    netns: str = ""
    """Its network namespace (a name under /var/run/netns), or "" for the host's."""
    pod_cidr: str = ""
    """With a network namespace: its pods' subnet (on its own bridge ``cni0``)."""

    def __post_init__(self) -> None:
        if not self.node_ips:
            object.__setattr__(self, "node_ips", (self.ip,))

    @property
    def ipv4(self) -> str | None:
        return next((ip for ip in self.node_ips if ipaddress.ip_address(ip).version == 4), None)

    @property
    def ipv6(self) -> str | None:
        return next((ip for ip in self.node_ips if ipaddress.ip_address(ip).version == 6), None)

    @property
    def containerd_socket(self) -> Path:
        return self.directory / "containerd.sock"

    @property
    def kubelet_root(self) -> Path:
        return self.directory / "kubelet"

    @property
    def pod_logs(self) -> Path:
        return self.directory / "pod-logs"


@dataclass
class NodeTimings:
    """Seconds from the last start() to each milestone (``binaries``: finding or building
    them; ``containerd``: every containerd answering with the pause image imported)."""

    binaries: float = 0.0
    host: float = 0.0
    containerd: float = 0.0
    registered: float = 0.0
    ready: float = 0.0
    total: float = 0.0


class RealNodes(Started):
    """N kubelets (each on its own containerd), kube-controller-manager and kube-scheduler."""

    def __init__(
        self,
        plane: ControlPlane,
        options: NodeOptions | None = None,
        *,
        binaries: NodeBinaries | None = None,
    ) -> None:
        self.plane = plane
        self.options = options or NodeOptions()
        self._binaries = binaries
        self.id = uuid.uuid4().hex[:6]
        self.nodes: list[RealNode] = []
        self.data_dir = Path()
        self._owns_data_dir = False
        self._processes: dict[str, ManagedProcess] = {}
        self._bed: TestBed | None = None
        self.subnet: ipaddress.IPv4Network | None = None
        self.subnet6: ipaddress.IPv6Network | None = None
        """The IPv6 /64 of the bridge, when a node has an IPv6 node IP."""
        self.bridge = f"kccm{self.id}"
        self.timings = NodeTimings()
        self.leftovers = Leftovers()
        """What :meth:`stop` found still there and removed (empty after a clean run)."""
        self._netns_inodes: set[int] = set()
        self._kube_proxy: Path | None = None
        self.client_netns = ""
        """With :attr:`NodeOptions.netns`: a network namespace of a client outside every
        node (``kccm-<id>-client``, at :attr:`client_ip` on the bridge, a default route
        to the host); :meth:`route_from_client` adds routes, :mod:`kube_ccm.testbed.echo`'s
        probes take it as ``netns``."""

    @property
    def gateway(self) -> str:
        """The host's address on the bridge (``<subnet>.0.1``)."""
        assert self.subnet is not None, "start() first"
        return str(self.subnet.network_address + 1)

    @property
    def client_ip(self) -> str:
        """The client namespace's address (``<subnet>.0.2``)."""
        assert self.subnet is not None, "start() first"
        return str(self.subnet.network_address + 2)

    @property
    def api_host(self) -> str:
        """Where the nodes (and host-network pods) reach kube-apiserver: loopback, or with
        :attr:`NodeOptions.netns` the :attr:`gateway` (it serves there too, in its
        certificate: :meth:`ControlPlane.serve_also_on`)."""
        return self.gateway if self.options.netns else "127.0.0.1"

    @property
    def api_server(self) -> str:
        return f"https://{self.api_host}:{self.plane.secure_port}"

    def route_from_client(self, destination: str, node: RealNode) -> None:
        """Route ``destination`` (an address or CIDR) from the client namespace to
        ``node``, as a router in front of the nodes would (e.g. a node's ExternalIP)."""
        if not self.client_netns:
            raise RealNodesError("route_from_client needs NodeOptions(netns=True)")
        run(["ip", "-n", self.client_netns, "route", "replace", destination, "via", node.ip])

    # -- public surface -------------------------------------------------------

    @property
    def binaries(self) -> NodeBinaries:
        if self._binaries is None:
            raise RealNodesError("the real nodes have not been started")
        return self._binaries

    @property
    def kubelet_serving_ca(self) -> Path:
        """The CA file kube-controller-manager signs kubelet serving certificates with
        (:attr:`NodeOptions.server_tls_bootstrap`): what a client of a kubelet verifies
        against."""
        return self.data_dir / "pki" / "kubelet-serving-ca.crt"

    def process(self, name: str) -> ManagedProcess:
        """``kube-controller-manager``, ``kube-scheduler``, ``kubelet-<n>`` or
        ``containerd-<n>``: its log, pid and signals."""
        return self._processes[name]

    def rss_bytes(self) -> dict[str, int]:
        """Resident memory of each process, from /proc."""
        return {name: _rss_bytes(p.pid) for name, p in self._processes.items() if p.poll() is None}

    def start(self) -> RealNodes:
        """Start the controllers, then each node's containerd and kubelet; with
        ``wait_ready``, wait until every Node is registered and Ready and the
        controllers work (the default ServiceAccount exists)."""
        started = time.monotonic()
        reason = real_nodes_unavailable()
        if reason:
            raise RealNodesError(reason)
        try:
            if self._binaries is None:
                self._binaries = ensure_node_binaries()
            if self.options.kube_proxy:
                self._kube_proxy = ensure_kube_proxy()
        except ControlPlaneBinariesError as exc:
            raise RealNodesError(str(exc)) from exc
        self.timings = NodeTimings(binaries=time.monotonic() - started)
        self._prepare_data_dir()
        # Before the control plane's own exit handler (registered earlier, run later):
        # deleting the pods needs the API.
        atexit.register(self.stop)
        try:
            self._acquire_host()
            self.timings.host = time.monotonic() - started - self.timings.binaries
            if self.options.controllers:
                self._start_controllers()
            image = self._pause_image()
            for node in self.nodes:
                self._start_containerd(node, image)
            if self.options.images:
                # One import per containerd at a time, all containerds at once: mostly
                # unpacking layers to disk, so the wall time is about one node's.
                with concurrent.futures.ThreadPoolExecutor(len(self.nodes)) as pool:
                    for done in [
                        pool.submit(self._import_all, node, self.options.images)
                        for node in self.nodes
                    ]:
                        done.result()
            self.timings.containerd = time.monotonic() - started
            for node in self.nodes:
                self._start_kubelet(node)
            if self._kube_proxy is not None:
                self._start_kube_proxy(self._kube_proxy)
            if self.options.wait_ready:
                self._wait_nodes(started)
        except BaseException:
            self.stop()
            raise
        self.timings.total = time.monotonic() - started
        return self

    def node(self, name: str) -> RealNode:
        """The node called ``name``."""
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)

    def import_image(self, archive: Path) -> None:
        """Import a docker-archive tarball into every node's containerd."""
        for node in self.nodes:
            self._import(node, archive)

    def install_network(self, node: RealNode) -> None:
        """Write the CNI config of a node started without it (:attr:`NodeOptions.network_later`):
        containerd notices it and the kubelet turns Ready."""
        (node.directory / "cni" / "10-kube-ccm.conflist").write_text(
            json.dumps(self._cni_config(node), indent=2)
        )

    def stop_kubelet(self, node: RealNode) -> None:
        """Stop one kubelet (SIGTERM), as a crashed or stopped kubelet: its containerd and
        containers keep running, and its Node turns NotReady once kube-controller-manager's
        grace period passes."""
        kubelet = self._processes.pop(f"kubelet-{node.name}", None)
        if kubelet is not None:
            kubelet.stop(_STOP_TIMEOUT)

    def start_kubelet(self, node: RealNode) -> None:
        """Start a stopped kubelet again with the same flags (its log goes on)."""
        if f"kubelet-{node.name}" in self._processes:
            raise RealNodesError(f"the kubelet of {node.name} is running")
        self._start_kubelet(node)

    def stop(self) -> None:
        """Stop everything and undo every host change (see the module docstring). Idempotent."""
        atexit.unregister(self.stop)
        if self._bed is None and not self._processes:
            self._remove_data_dir()  # start() failed before taking the host
            return
        self._stop_kube_proxy()
        for name in ("kube-scheduler", "kube-controller-manager"):
            if name in self._processes:
                self._processes.pop(name).stop(_STOP_TIMEOUT)
        self._delete_pods()
        for node in self.nodes:
            kubelet = self._processes.pop(f"kubelet-{node.name}", None)
            if kubelet is not None:
                kubelet.stop(_STOP_TIMEOUT)
        for node in self.nodes:
            containerd = self._processes.pop(f"containerd-{node.name}", None)
            if containerd is not None and containerd.poll() is None:
                # Nothing asks it for pods any more: let what it was doing end, then
                # note its pods' namespaces (also those without a process) and kill.
                self._wait_quiet(node)
                self._record_sandboxes(node)
                self._declare_netns()
                self._kill_tasks(node)
                containerd.stop(_STOP_TIMEOUT)
        if self._bed is not None:
            with locked_record() as record:
                record.beds.pop(self._bed.id, None)
                undo_test_bed(self._bed, self.leftovers, self._netns_inodes)
                if not record.beds:
                    record.restore(self.leftovers)
            self._bed = None
        self._remove_data_dir()

    def _remove_data_dir(self) -> None:
        if self._owns_data_dir and self.data_dir.exists():
            shutil.rmtree(self.data_dir, ignore_errors=True)

    # -- start ----------------------------------------------------------------

    def _prepare_data_dir(self) -> None:
        if self.options.data_dir is not None:
            self.data_dir = self.options.data_dir
            self.data_dir.mkdir(parents=True, exist_ok=True)
        else:
            # Short: containerd's sockets live here and a socket path is at most 107 bytes.
            self.data_dir = Path(tempfile.mkdtemp(prefix=f"kccm-{self.id}-"))
            self._owns_data_dir = True
        (self.data_dir / "pki").mkdir(exist_ok=True)

    def _acquire_host(self) -> None:
        """Record this test bed (taking a free subnet), then create its bridge, node IPs
        and cgroup roots; the record comes first so a crash in between is cleaned up."""
        with locked_record() as record:
            record.clean_dead(self.leftovers)
            proxied = [bed for bed in record.beds.values() if bed.kube_proxy]
            if self.options.kube_proxy and proxied:
                raise RealNodesError(
                    f"test bed {proxied[0].id} (pid {proxied[0].pid}) runs kube-proxy, whose "
                    "rules are host-wide: one test bed with kube_proxy at a time; wait for it "
                    "to stop"
                )
            record.snapshot_if_first()
            self.subnet = record.free_subnet()
            families = [self.options.families(i) for i in range(self.options.count)]
            if any("IPv6" in f for f in families):
                if self.options.netns:
                    raise RealNodesError("NodeOptions(netns=True) takes IPv4 node IPs only")
                self.subnet6 = ula_subnet(self.subnet)
            netns = self.options.netns
            for i in range(self.options.count):
                node_ips = node_addresses(self.subnet, self.subnet6, i, families[i])
                self.nodes.append(
                    RealNode(
                        name=f"real-{self.id}-{i}",
                        ip=node_ips[0],
                        directory=self.data_dir / f"node-{i}",
                        cgroup_root=f"/kube-ccm-{self.id}-{i}",
                        kubelet_port=_free_port(),
                        healthz_port=_free_port(),
                        node_ips=node_ips,
                        netns=f"kccm-{self.id}-{i}" if netns else "",
                        pod_cidr=str(_pod_cidr(self.subnet, i)) if netns else "",
                    )
                )
            if netns:
                self.client_netns = f"kccm-{self.id}-client"
            self._bed = TestBed(
                id=self.id,
                pid=os.getpid(),
                data_dir=str(self.data_dir),
                bridge=self.bridge,
                subnet=str(self.subnet),
                subnet6=str(self.subnet6 or ""),
                cgroup_roots=tuple(node.cgroup_root for node in self.nodes),
                sockets=tuple(str(node.containerd_socket) for node in self.nodes),
                kube_proxy=self.options.kube_proxy and not netns,
                netns=(*(n.netns for n in self.nodes), self.client_netns) if netns else (),
                links=tuple(_veth(ns) for ns in self._namespaces()),
            )
            record.beds[self.id] = self._bed
        try:
            run(["ip", "link", "add", self.bridge, "type", "bridge"])
            gateway = self.subnet.network_address + 1
            run(["ip", "addr", "add", f"{gateway}/{self.subnet.prefixlen}", "dev", self.bridge])
            if self.subnet6 is not None:
                _enable_ipv6(self.bridge)
                # nodad: usable at once (duplicate address detection would keep them
                # tentative, and unbindable, for a second or more).
                gateway6 = self.subnet6.network_address + 1
                run(["ip", "-6", "addr", "add", f"{gateway6}/64", "dev", self.bridge, "nodad"])
            for node in self.nodes:
                for ip in node.node_ips if not netns else ():
                    if ipaddress.ip_address(ip).version == 4:
                        run(["ip", "addr", "add", f"{ip}/32", "dev", self.bridge])
                    else:
                        run(["ip", "-6", "addr", "add", f"{ip}/128", "dev", self.bridge, "nodad"])
                create_cgroup(node.cgroup_root)
            run(["ip", "link", "set", self.bridge, "up"])
            if netns:
                self._create_namespaces()
        except (HostError, OSError) as exc:
            raise RealNodesError(f"preparing the host for the real nodes failed: {exc}") from exc
        if netns:
            # Before anything connects: the nodes reach kube-apiserver on the gateway.
            if self.plane.advertise_address != "127.0.0.1":
                raise RealNodesError(
                    f"the control plane already serves nodes in their own namespaces on "
                    f"{self.plane.advertise_address}: one NodeOptions(netns=True) test bed "
                    "per control plane (kube-apiserver advertises one address)"
                )
            self.plane.serve_also_on(self.gateway)

    def _namespaces(self) -> list[str]:
        """The test bed's network namespaces: each node's, then the client's."""
        if not self.options.netns:
            return []
        return [*(node.netns for node in self.nodes), self.client_netns]

    def _create_namespaces(self) -> None:
        """Each node's namespace and the client's (see :attr:`NodeOptions.netns`): a veth
        pair to the bridge, the address in ``<subnet>.0.0/24``, a default route to the
        host; in each node's, forwarding and bridge netfilter on (per namespace: they go
        with it) and a route to every other node's pod CIDR, which the host gets too."""
        assert self.subnet is not None
        addresses = {node.netns: node.ip for node in self.nodes}
        addresses[self.client_netns] = self.client_ip
        for name, ip in addresses.items():
            veth = _veth(name)
            run(["ip", "netns", "add", name])
            run(["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", name])
            run(["ip", "link", "set", veth, "master", self.bridge, "up"])
            run(["ip", "-n", name, "addr", "add", f"{ip}/24", "dev", "eth0"])
            for link in ("lo", "eth0"):
                run(["ip", "-n", name, "link", "set", link, "up"])
            run(["ip", "-n", name, "route", "add", "default", "via", self.gateway])
        for node in self.nodes:
            _netns_sysctl(node.netns, "net.ipv4.ip_forward", "1")
            # Pod to pod through a ClusterIP on one node's bridge needs the DNAT undone
            # on the way back: bridged traffic through iptables (if br_netfilter is in).
            _netns_sysctl(node.netns, "net.bridge.bridge-nf-call-iptables", "1", optional=True)
            run(["ip", "route", "add", node.pod_cidr, "via", node.ip, "dev", self.bridge])
            for other in self.nodes:
                if other is not node:
                    run(["ip", "-n", node.netns, "route", "add", other.pod_cidr, "via", other.ip])

    def _spawn(
        self, name: str, argv: list[str], *, netns: str = "", env: dict[str, str] | None = None
    ) -> ManagedProcess:
        """Start ``argv`` as ``name``, in the network namespace ``netns`` if given
        (``nsenter --net``, which execs it: only the network namespace changes, so mounts
        the kubelet makes are containerd's too, unlike under ``ip netns exec``)."""
        if netns:
            argv = ["nsenter", f"--net={NETNS_DIR / netns}", "--", *argv]
        process = ManagedProcess(argv, self.data_dir / "logs" / f"{name}.log", env=env)
        process.what = name
        self._processes[name] = process.start()
        return process

    def _start_controllers(self) -> None:
        pki = self.plane.data_dir / "pki"
        kcm = self.plane.write_client_kubeconfig(
            self.data_dir / "pki" / "controller-manager.kubeconfig",
            "system:kube-controller-manager",
        )
        scheduler = self.plane.write_client_kubeconfig(
            self.data_dir / "pki" / "scheduler.kubeconfig", "system:kube-scheduler"
        )
        self._spawn(
            "kube-controller-manager",
            [
                str(self.binaries.kube_controller_manager),
                f"--kubeconfig={kcm}",
                "--cloud-provider=external",
                "--secure-port=0",
                "--leader-elect=false",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={self.plane.ca_file}",
                f"--flex-volume-plugin-dir={self.data_dir / 'flexvolume'}",
                "--v=2",
                *self._signing_args(),
                *self.options.controller_manager_args,
            ],
        )
        self._spawn(
            "kube-scheduler",
            [
                str(self.binaries.kube_scheduler),
                f"--kubeconfig={scheduler}",
                "--secure-port=0",
                "--leader-elect=false",
                "--v=2",
            ],
        )

    def _start_kube_proxy(self, binary: Path) -> None:
        """One kube-proxy for every node (they share one network namespace), as node 0,
        changing no sysctl: conntrack sizing off, nodePorts on the test bed's subnet.
        With :attr:`NodeOptions.netns`, one per node in its namespace, as that node
        (``kube-proxy-<node>``), the pod CIDRs as the cluster's."""
        assert self.subnet is not None
        kubeconfig = self.plane.write_client_kubeconfig(
            self.data_dir / "pki" / "kube-proxy.kubeconfig",
            "system:kube-proxy",
            server=self.api_server,
        )
        if not self.options.netns:
            self._spawn_kube_proxy("kube-proxy", binary, kubeconfig, self.nodes[0], self.subnet)
            return
        for node in self.nodes:
            self._spawn_kube_proxy(
                f"kube-proxy-{node.name}", binary, kubeconfig, node, _pod_cidrs(self.subnet)
            )

    def _spawn_kube_proxy(
        self,
        name: str,
        binary: Path,
        kubeconfig: Path,
        node: RealNode,
        cluster_cidr: ipaddress.IPv4Network,
    ) -> None:
        assert self.subnet is not None
        self._spawn(
            name,
            [
                str(binary),
                f"--kubeconfig={kubeconfig}",
                f"--hostname-override={node.name}",
                "--proxy-mode=iptables",
                f"--cluster-cidr={cluster_cidr}",
                f"--nodeport-addresses={self.subnet}",
                "--conntrack-max-per-core=0",
                "--conntrack-tcp-timeout-established=0s",
                "--conntrack-tcp-timeout-close-wait=0s",
                f"--metrics-bind-address=127.0.0.1:{_free_port()}",
                f"--healthz-bind-address=127.0.0.1:{_free_port()}",
                "--v=2",
            ],
            netns=node.netns,
        )

    def _stop_kube_proxy(self) -> None:
        """Stop kube-proxy, then delete its rules (``kube-proxy --cleanup``); in the
        nodes' own namespaces, the rules go with them."""
        for name in [n for n in self._processes if n.startswith("kube-proxy-")]:
            self._processes.pop(name).stop(_STOP_TIMEOUT)
        process = self._processes.pop("kube-proxy", None)
        if process is None or self._kube_proxy is None:
            return
        process.stop(_STOP_TIMEOUT)
        cleanup = subprocess.run(
            [str(self._kube_proxy), "--cleanup"],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        if cleanup.returncode != 0:
            self.leftovers.add(f"kube-proxy --cleanup failed: {_tail(cleanup.stderr, 5)}")

    def _signing_args(self) -> list[str]:
        """With :attr:`NodeOptions.server_tls_bootstrap`: a CA of the test bed's own for
        the ``kubernetes.io/kubelet-serving`` signer (the control plane's CA key stays
        inside it)."""
        if not self.options.server_tls_bootstrap:
            return []
        key_file = self.kubelet_serving_ca.with_suffix(".key")
        _write_signing_ca(self.kubelet_serving_ca, key_file)
        return [
            f"--cluster-signing-kubelet-serving-cert-file={self.kubelet_serving_ca}",
            f"--cluster-signing-kubelet-serving-key-file={key_file}",
        ]

    def _pause_image(self) -> Path:
        """A docker-archive tarball of :data:`PAUSE_IMAGE`: the static pause program."""
        path = self.data_dir / "pause.tar"
        layer = io.BytesIO()
        with tarfile.open(fileobj=layer, mode="w") as tar:
            tar.add(self.binaries.pause, arcname="pause", filter=_root_owned)
        layer_bytes = layer.getvalue()
        diff_id = hashlib.sha256(layer_bytes).hexdigest()
        arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
        config = json.dumps(
            {
                "architecture": arch,
                "os": "linux",
                "config": {"Entrypoint": ["/pause"], "User": "65535:65535"},
                "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
            }
        ).encode()
        config_name = f"{hashlib.sha256(config).hexdigest()}.json"
        manifest = json.dumps(
            [{"Config": config_name, "RepoTags": [PAUSE_IMAGE], "Layers": [f"{diff_id}/layer.tar"]}]
        ).encode()
        with tarfile.open(path, mode="w") as tar:
            for name, data in (
                (f"{diff_id}/layer.tar", layer_bytes),
                (config_name, config),
                ("manifest.json", manifest),
            ):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        return path

    def _start_containerd(self, node: RealNode, image: Path) -> None:
        for sub in ("root", "state", "runc", "opt", "cni", "cni-ipam", "tmp"):
            (node.directory / sub).mkdir(parents=True, exist_ok=True)
        config = node.directory / "containerd.toml"
        config.write_text(self._containerd_config(node))
        if self.nodes.index(node) not in self.options.network_later:
            self.install_network(node)
        process = self._spawn(
            f"containerd-{node.name}",
            ["containerd", f"--config={config}", "--log-level=info"],
            netns=node.netns,
            # Its temporary mounts of snapshots (unpacking, reading /etc/passwd) below
            # the test bed's directory, where every other test bed knows they are ours.
            env={"TMPDIR": str(node.directory / "tmp")},
        )
        deadline = time.monotonic() + 30
        while True:
            if process.poll() is not None:
                raise RealNodesError(
                    f"containerd of {node.name} exited with status {process.poll()}; "
                    f"its log ends with:\n{_tail(process.log())}"
                )
            if node.containerd_socket.exists() and self._ctr(node, "version").returncode == 0:
                break
            if time.monotonic() > deadline:
                raise RealNodesError(
                    f"containerd of {node.name} did not answer within 30 s; "
                    f"its log ends with:\n{_tail(process.log())}"
                )
            time.sleep(0.1)
        self._import(node, image)

    def _import_all(self, node: RealNode, archives: tuple[Path, ...]) -> None:
        for archive in archives:
            self._import(node, archive)

    def _import(self, node: RealNode, archive: Path) -> None:
        imported = self._ctr(node, "images", "import", str(archive))
        if imported.returncode != 0:
            raise RealNodesError(
                f"importing {archive.name} into containerd of {node.name} failed: "
                f"{imported.stderr.strip()}"
            )

    def _ctr(self, node: RealNode, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ctr", f"--address={node.containerd_socket}", "--namespace=k8s.io", *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )

    def _containerd_config(self, node: RealNode) -> str:
        d = node.directory
        cri = '[plugins."io.containerd.grpc.v1.cri"]'
        runc = '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]'

        def q(value: object) -> str:
            return json.dumps(str(value))

        return "\n".join(
            [
                "version = 2",
                f"root = {q(d / 'root')}",
                f"state = {q(d / 'state')}",
                "disabled_plugins = ["
                + ", ".join(
                    q(f"io.containerd.snapshotter.v1.{name}")
                    for name in ("aufs", "btrfs", "devmapper", "zfs")
                )
                + "]",
                "[grpc]",
                f"  address = {q(node.containerd_socket)}",
                "[debug]",
                '  address = ""',
                "[metrics]",
                '  address = ""',
                cri,
                f"  sandbox_image = {q(PAUSE_IMAGE)}",
                # runc cannot lower oom_score_adj without CAP_SYS_RESOURCE; this keeps
                # every container's at least containerd's own.
                "  restrict_oom_score_adj = true",
                "  disable_apparmor = true",
                "  enable_selinux = false",
                f"{cri[:-1]}.containerd]",
                '  snapshotter = "overlayfs"',
                '  default_runtime_name = "runc"',
                runc,
                '  runtime_type = "io.containerd.runc.v2"',
                f"{runc[:-1]}.options]",
                "  SystemdCgroup = false",
                f"  Root = {q(d / 'runc')}",
                f"{cri[:-1]}.cni]",
                f"  bin_dir = {q(CNI_BIN_DIR)}",
                f"  conf_dir = {q(d / 'cni')}",
                "  max_conf_num = 1",
                '[plugins."io.containerd.internal.v1.opt"]',
                f"  path = {q(d / 'opt')}",
                "",
            ]
        )

    def _cni_config(self, node: RealNode) -> dict[str, Any]:
        """Debian's bridge plugin on our bridge: each node hands out its own slice of the
        subnet; no gateway, masquerading or route, so pods reach only the bridge. In a
        node's own namespace: its own bridge ``cni0`` as the pods' gateway (routes lead
        to the other nodes' pods and the host), and the portmap plugin for hostPorts."""
        assert self.subnet is not None
        if node.netns:
            return {
                "cniVersion": "1.0.0",
                "name": f"kube-ccm-{self.id}",
                "plugins": [
                    {
                        "type": "bridge",
                        "bridge": "cni0",
                        "isGateway": True,
                        "ipMasq": False,
                        "hairpinMode": True,
                        "ipam": {
                            "type": "host-local",
                            "dataDir": str(node.directory / "cni-ipam"),
                            "ranges": [[{"subnet": node.pod_cidr}]],
                            "routes": [{"dst": "0.0.0.0/0"}],
                        },
                    },
                    {"type": "portmap", "capabilities": {"portMappings": True}, "snat": True},
                ],
            }
        index = self.nodes.index(node)
        base = int(self.subnet.network_address) + (index + 1) * 256
        return {
            "cniVersion": "1.0.0",
            "name": f"kube-ccm-{self.id}",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": self.bridge,
                    "isGateway": False,
                    "ipMasq": False,
                    "ipam": {
                        "type": "host-local",
                        "dataDir": str(node.directory / "cni-ipam"),
                        "ranges": [
                            [
                                {
                                    "subnet": str(self.subnet),
                                    "rangeStart": str(ipaddress.IPv4Address(base + 2)),
                                    "rangeEnd": str(ipaddress.IPv4Address(base + 254)),
                                }
                            ]
                        ],
                    },
                }
            ],
        }

    def _start_kubelet(self, node: RealNode) -> None:
        pki = node.directory / "pki"
        pki.mkdir(parents=True, exist_ok=True)
        self.plane.certificate_authority.issue(
            f"system:node:{node.name}",
            organizations=("system:nodes",),
            dns_names=(node.name,),
            ip_addresses=node.node_ips,
            server=True,
        ).write(pki / "kubelet.crt", pki / "kubelet.key")
        kubeconfig = self.plane.write_client_kubeconfig(
            node.directory / "kubelet.kubeconfig",
            f"system:node:{node.name}",
            ("system:nodes",),
            server=self.api_server,
        )
        frequency = self.options.status_update_frequency
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            # This machine has cgroup v1, which kubelet 1.35+ refuses unless told.
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": node.cgroup_root,
            "containerRuntimeEndpoint": f"unix://{node.containerd_socket}",
            "address": node.ip,
            "port": node.kubelet_port,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": node.healthz_port,
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": False},
                "x509": {"clientCAFile": str(self.plane.ca_file)},
            },
            "authorization": {"mode": "AlwaysAllow"},
            "failSwapOn": False,
            # Without CAP_SYS_RESOURCE the kubelet cannot lower its own score anyway.
            "oomScoreAdj": 0,
            "podLogsDir": str(node.pod_logs),
            "volumePluginDir": str(node.directory / "volume-plugins"),
            # The machine's disk is shared: never evict or collect our images for it.
            "evictionHard": {
                "memory.available": "1Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
                "nodefs.inodesFree": "1%",
            },
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "nodeStatusUpdateFrequency": frequency,
            "nodeStatusReportFrequency": frequency,
            "registerNode": True,
        }
        if self.options.cluster_dns:
            config["clusterDNS"] = [self.options.cluster_dns]
            config["clusterDomain"] = "cluster.local"
        if self.options.server_tls_bootstrap:
            config["serverTLSBootstrap"] = True  # written to --cert-dir once signed
        else:
            config["tlsCertFile"] = str(pki / "kubelet.crt")
            config["tlsPrivateKeyFile"] = str(pki / "kubelet.key")
        config_path = node.directory / "kubelet.yaml"
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        self._spawn(
            f"kubelet-{node.name}",
            [
                str(self.binaries.kubelet),
                f"--config={config_path}",
                f"--kubeconfig={kubeconfig}",
                f"--root-dir={node.kubelet_root}",
                f"--cert-dir={pki}",
                f"--hostname-override={node.name}",
                f"--node-ip={','.join(node.node_ips)}",
                "--cloud-provider=external",
                "--v=2",
            ],
            netns=node.netns,
        )

    def _wait_nodes(self, started: float) -> None:
        deadline = time.monotonic() + self.options.ready_timeout
        pending = {node.name for node in self.nodes}
        registered: set[str] = set()
        while pending:
            for node in self.nodes:
                kubelet = self._processes[f"kubelet-{node.name}"]
                if kubelet.poll() is not None:
                    raise RealNodesError(
                        f"the kubelet of {node.name} exited with status {kubelet.poll()}; "
                        f"its log ends with:\n{_tail(kubelet.log())}"
                    )
            pending.discard("kube-controller-manager")
            for name in sorted(pending):
                try:
                    found = self.plane.request("GET", f"/api/v1/nodes/{name}")
                except urllib.error.HTTPError as exc:
                    if exc.code == 404:
                        continue
                    raise
                if name not in registered:
                    registered.add(name)
                    if len(registered) == len(self.nodes):
                        self.timings.registered = time.monotonic() - started
                conditions = found.get("status", {}).get("conditions") or []
                if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
                    pending.discard(name)
                elif self.nodes.index(self.node(name)) in self.options.network_later:
                    pending.discard(name)  # registered: Ready only with its network
            if not pending and self.options.controllers and not self._controllers_working():
                pending.add("kube-controller-manager")
            if not pending:
                break
            if time.monotonic() > deadline:
                if pending == {"kube-controller-manager"}:
                    raise RealNodesError(
                        "kube-controller-manager did not create the default ServiceAccount "
                        f"within {self.options.ready_timeout:.0f} s; its log ends with:\n"
                        f"{_tail(self._processes['kube-controller-manager'].log())}"
                    )
                name = sorted(pending)[0]
                log = self._processes[f"kubelet-{name}"].log()
                raise RealNodesError(
                    f"{', '.join(sorted(pending))} not Ready within "
                    f"{self.options.ready_timeout:.0f} s ({len(registered)} registered); "
                    f"the kubelet log of {name} ends with:\n{_tail(log)}"
                )
            time.sleep(0.2)
        self.timings.ready = time.monotonic() - started

    def _controllers_working(self) -> bool:
        """kube-controller-manager's controllers run: the ServiceAccount controller made
        ``default/default``, without which no pod can be created."""
        try:
            self.plane.request("GET", "/api/v1/namespaces/default/serviceaccounts/default")
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return False
            raise
        return True

    # -- stop -----------------------------------------------------------------

    def _delete_pods(self) -> None:
        """Delete every pod bound to our nodes, with a short grace, and give the kubelets
        a few seconds to stop their containers (so no shim outlives them)."""
        kubelets_up = any(
            p.poll() is None for name, p in self._processes.items() if name.startswith("kubelet-")
        )
        if not self.nodes or not self.plane.running:
            return
        names = {node.name for node in self.nodes}

        def bound() -> list[dict[str, Any]]:
            pods: list[dict[str, Any]] = []
            for name in names:
                selector = urllib.parse.quote(f"spec.nodeName={name}")
                listed = self.plane.request("GET", f"/api/v1/pods?fieldSelector={selector}")
                pods += listed.get("items") or []
            return pods

        try:
            pods = bound()
            for pod in pods:
                meta = pod["metadata"]
                with contextlib.suppress(urllib.error.HTTPError):
                    self.plane.request(
                        "DELETE",
                        f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                        {"gracePeriodSeconds": _POD_GRACE_SECONDS},
                    )
            deadline = time.monotonic() + (15 if kubelets_up else 0)
            while pods and time.monotonic() < deadline:
                time.sleep(0.2)
                pods = bound()
            for pod in pods:  # the kubelet is gone or stuck: take them off the API
                meta = pod["metadata"]
                self.leftovers.add(f"pod {meta['namespace']}/{meta['name']} force-deleted")
                with contextlib.suppress(urllib.error.HTTPError):
                    self.plane.request(
                        "DELETE",
                        f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                        {"gracePeriodSeconds": 0},
                    )
        except (OSError, urllib.error.URLError):
            return  # the API is gone; the containers are killed below all the same

    def _kill_tasks(self, node: RealNode) -> None:
        """Kill, through containerd, the containers the kubelet left (their shims exit)."""
        listed = self._ctr(node, "tasks", "ls", "--quiet")
        for task in listed.stdout.split():
            self.leftovers.add(f"container {task[:12]} on {node.name} killed")
            self._record_netns(task, node)
            self._ctr(node, "tasks", "kill", "--signal", "SIGKILL", task)
            self._ctr(node, "tasks", "delete", "--force", task)

    def _tasks(self, node: RealNode) -> list[tuple[str, str]]:
        """(task id, status) of each task of the node's containerd."""
        listed = self._ctr(node, "tasks", "ls")
        rows = [line.split() for line in listed.stdout.splitlines()[1:]]
        return sorted((row[0], row[-1]) for row in rows if row)

    def _wait_quiet(self, node: RealNode) -> None:
        """Once the kubelet is stopped: wait until the node's containerd is quiet, its
        tasks the same on two looks in a row and none being created or stopped (a pod
        sandbox the kubelet asked for just before it stopped is finished or undone by
        containerd itself), at most :data:`_QUIET_TIMEOUT` seconds."""
        deadline = time.monotonic() + _QUIET_TIMEOUT
        last: list[tuple[str, str]] | None = None
        while time.monotonic() < deadline:
            tasks = self._tasks(node)
            settled = all(status in ("RUNNING", "STOPPED", "PAUSED") for _, status in tasks)
            if tasks == last and settled:
                return
            last = tasks
            time.sleep(0.5)
        self.leftovers.add(f"containerd of {node.name} still busy after {_QUIET_TIMEOUT:.0f} s")

    def _record_sandboxes(self, node: RealNode) -> None:
        """The network namespaces of the node's pod sandboxes, from their containers' specs
        (``linux.namespaces``): removed with the test bed even when no process is in them
        (a sandbox whose task never started, or was killed)."""
        listed = self._ctr(node, "containers", "ls", "--quiet")
        for container in listed.stdout.split():
            info = self._ctr(node, "containers", "info", container)
            try:
                spec = json.loads(info.stdout).get("Spec") or {}
                namespaces = (spec.get("linux") or {}).get("namespaces") or []
            except (ValueError, AttributeError):
                continue
            for namespace in namespaces:
                path = namespace.get("path", "") if isinstance(namespace, dict) else ""
                if namespace.get("type") == "network" and path.startswith(str(NETNS_DIR)):
                    with contextlib.suppress(OSError):
                        self._netns_inodes.add(os.stat(path).st_ino)

    def _declare_netns(self) -> None:
        """Write the pod network namespaces recorded so far to the test bed's
        :data:`~kube_ccm.testbed._nodehost.OWNED_NETNS` file: once their processes are
        killed, nothing else tells other test beds' host checks that they are ours
        until :func:`undo_test_bed` removes them."""
        if not NETNS_DIR.is_dir():
            return
        names = sorted(
            path.name for path in NETNS_DIR.glob("cni-*") if _inode_of(path) in self._netns_inodes
        )
        with contextlib.suppress(OSError):
            (self.data_dir / OWNED_NETNS).write_text("".join(f"{n}\n" for n in names))

    def _record_netns(self, task: str, node: RealNode) -> None:
        info = self._ctr(node, "tasks", "ps", task)
        for line in info.stdout.splitlines()[1:]:
            pid = line.split()[0] if line.split() else ""
            with contextlib.suppress(OSError, ValueError):
                self._netns_inodes.add(os.stat(f"/proc/{int(pid)}/ns/net").st_ino)


def assert_host_restored(before: dict[str, Any], nodes: RealNodes) -> None:
    """After ``nodes`` stopped: nothing was left for :meth:`RealNodes.stop` to clean up,
    and the host is as :func:`host_snapshot` found it at ``before``."""
    assert nodes.leftovers.items == [], nodes.leftovers.items
    changed = host_changes(before, host_snapshot())
    assert not changed, f"the test bed left the host changed: {changed}"


def pause_deployment(name: str) -> dict[str, Any]:
    """A Deployment of one :data:`PAUSE_IMAGE` pod, labelled ``app: <name>``: host network
    (no CNI needed), never pulled, and no toleration of any taint, so it waits for the
    CCM to initialise a node."""
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "hostNetwork": True,
                    "terminationGracePeriodSeconds": 1,
                    "containers": [
                        {"name": "pause", "image": PAUSE_IMAGE, "imagePullPolicy": "Never"}
                    ],
                },
            },
        },
    }


def node_addresses(
    subnet: ipaddress.IPv4Network,
    subnet6: ipaddress.IPv6Network | None,
    index: int,
    families: tuple[str, ...],
) -> tuple[str, ...]:
    """The node IPs of node ``index``, in the order of ``families``: ``.10 + index`` of
    the IPv4 /16, and the same host part in the IPv6 /64 (10.192.0.11 and
    fd6b:6363:6d00:ac0::b)."""
    host = 10 + index
    ips: list[str] = []
    for family in families:
        if family == "IPv4":
            ips.append(str(subnet.network_address + host))
        else:
            if subnet6 is None:
                raise RealNodesError("an IPv6 node IP needs the test bed's IPv6 subnet")
            ips.append(str(subnet6.network_address + host))
    return tuple(ips)


def _pod_cidrs(subnet: ipaddress.IPv4Network) -> ipaddress.IPv4Network:
    """Where the pods of nodes in their own namespaces are: the upper half of the /16,
    apart from the node IPs and the host (kube-proxy's ``--cluster-cidr``)."""
    return list(subnet.subnets(new_prefix=subnet.prefixlen + 1))[1]


def _pod_cidr(subnet: ipaddress.IPv4Network, index: int) -> ipaddress.IPv4Network:
    """Node ``index``'s pod CIDR: ``<subnet>.<128 + index>.0/24``."""
    return ipaddress.IPv4Network((int(_pod_cidrs(subnet).network_address) + index * 256, 24))


def _veth(netns: str) -> str:
    """The host end of a namespace's veth pair: ``kv`` + its name's hash (15 bytes at
    most, as every interface name)."""
    return "kv" + hashlib.sha256(netns.encode()).hexdigest()[:12]


def _netns_sysctl(netns: str, name: str, value: str, *, optional: bool = False) -> None:
    """Write a network sysctl inside ``netns`` (``/proc/sys/net`` is the writer's
    namespace's); ``optional``: skip it when the kernel lacks it there."""
    path = "/proc/sys/" + name.replace(".", "/")
    script = f"[ -e {path} ] || exit 3; echo {value} > {path}"
    done = run(["nsenter", f"--net={NETNS_DIR / netns}", "sh", "-c", script], check=False)
    if done.returncode == 3 and optional:
        return
    if done.returncode != 0:
        raise HostError(f"setting {name}={value} in netns {netns} failed: {done.stderr.strip()}")


def _enable_ipv6(bridge: str) -> None:
    """IPv6 on the bridge (its own sysctl, gone with it), or why not."""
    switch = Path(f"/proc/sys/net/ipv6/conf/{bridge}/disable_ipv6")
    if not switch.exists():
        raise HostError("IPv6 node IPs need IPv6 in the kernel (no /proc/sys/net/ipv6)")
    if switch.read_text().strip() != "0":
        switch.write_text("0")


def _write_signing_ca(cert_file: Path, key_file: Path) -> None:
    """A self-signed CA for one signer of kube-controller-manager, valid a day."""
    ca = CertificateAuthority("kube-ccm-test-bed-kubelet-serving")
    cert_file.parent.mkdir(parents=True, exist_ok=True)
    cert_file.write_bytes(ca.cert_pem)
    key_file.write_bytes(ca.key_pem)
    key_file.chmod(0o600)


def _inode_of(path: Path) -> int | None:
    try:
        return path.stat().st_ino
    except OSError:
        return None


def _tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _root_owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mode = 0o755
    return info
