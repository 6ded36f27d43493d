"""Kubernetes' own end-to-end LoadBalancer specs against kube-ccm on the real-node bed::

    python -m kube_ccm.testbed.e2e run --provider servicelb      # `make e2e-loadbalancer`
    python -m kube_ccm.testbed.e2e build                         # the pieces only

Upstream's ``test/e2e/network/loadbalancer.go`` (the ``[Feature:LoadBalancer]`` specs)
and the Service specs that create LoadBalancers, as upstream's ``e2e.test`` runs them,
against kube-ccm installed from its image and Helm chart on two real kubelets
(:mod:`kube_ccm.testbed.cluster`, ``netns=True, kube_proxy=True``).

What is built (cached by its inputs under the user cache, like the control plane's
binaries, :mod:`kube_ccm.testing.binaries`):

- from the wrapper module ``gobuild-e2e`` (the same ``k8s.io/kubernetes`` version and
  staging replaces as ``gobuild``, kept apart so that ginkgo and the rest never move
  the control plane's cache key): ``e2e.test`` cut down to ``test/e2e/network``
  (``gobuild-e2e/e2enetwork``: upstream's ``e2e.go`` and ``e2e_test.go`` with the other
  test packages left out; the specs, flags and reports are upstream's), ``agnhost``
  (static) and ``kubectl`` (the specs' helpers run ``kubectl exec``);
- from ``gobuild-coredns``: CoreDNS (static), the cluster DNS three specs need (they
  look Services up by name from pods);
- two images, with buildah on a storage of their own (``<cache>/e2e-image``): agnhost
  under exactly the name upstream's ``test/utils/image/manifest.go`` gives it
  (:data:`AGNHOST_IMAGE`), on a base debootstrapped from Debian's packages with what
  the specs run in its pods (``/bin/sh``, ``curl``, ``nc``, ``wget``, ``dig``, ``ip``);
  GNU wget with ``tries = 1`` in ``/etc/wgetrc`` (its default retries 20 times, which
  made one spec take 806 s; BusyBox 1.35's wget, the other choice, segfaults on
  ``-T``); and CoreDNS alone in an image (:data:`COREDNS_IMAGE`). Both are imported
  into every node's containerd; nothing is pulled.

The bed (:class:`E2EBed`) adds, as options:

- cluster DNS (:attr:`E2EOptions.cluster_dns`): CoreDNS as a Deployment in
  ``kube-system`` behind the ``kube-dns`` Service at :data:`DNS_IP`, the kubelets'
  ``clusterDNS`` (:attr:`~kube_ccm.testbed.nodes.NodeOptions.cluster_dns`); it serves
  ``cluster.local`` and the reverse zones only (no ``forward``: nothing is asked
  outside);
- an outside client address (:attr:`E2EOptions.outside_client`): the client namespace
  gets ``198.18.<n>.2`` (``n``: the bed's /16's second octet), outside the nodes' /16,
  which upstream's source-IP checks take for "the node subnet"; the routes to each
  node's ExternalIP leave with it as the source and each node routes it back to the
  client namespace. The e2e runner runs in that namespace;
- an egress guard: an nftables table ``kccm_egress`` in the client's and each node's
  namespace drops (and counts) any packet to an address outside the bed (its /16, the
  ExternalIPs' 203.0.113.0/24, 198.18.0.0/15, the Service CIDR, and 224.0.0.0/24, the
  link-local multicast the nodes' bridges send IGMP reports to); the run reports the
  count and where they were going, and a non-zero count is an error.

Skips: upstream's job (cloud-provider-kind's ``hack/ci/e2e.sh``) skips
:data:`UPSTREAM_SKIPS`; here they run (kube-ccm passes some of them), and the results
table says which they are. :data:`SKIPS` are this project's, each with its reason; the
runner passes them to ``--ginkgo.skip``. A selected spec that upstream's code skips at
run time (``e2eskipper.Skipf``) is an *unexpected skip* unless :data:`SKIPS` lists it:
:meth:`Results.unexpected_skips`, which the CI test fails on.

Part of kube-ccm's own test bed (:mod:`kube_ccm.testbed`), not of the :mod:`kube_ccm.testing` face.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from kube_ccm.runtime.client import KubeClient
from kube_ccm.testbed.cluster import ChartCluster, ChartClusterOptions, pod_ready
from kube_ccm.testbed.image import Buildah, ImageBuildError, StandIn, build_stand_in
from kube_ccm.testing.binaries import (
    ControlPlaneBinariesError,
    Versions,
    _go,
    _ldflags,
    cache_root,
    file_lock,
    gobuild_digest,
)
from kube_ccm.testing.waiting import eventually

AGNHOST_IMAGE = "registry.k8s.io/e2e-test-images/agnhost:2.63.0"
"""``test/utils/image/manifest.go`` of the pinned version: ``configs[Agnhost]``."""
COREDNS_REPOSITORY = "localhost/kube-ccm-e2e/coredns"
DNS_IP = "10.0.0.10"
"""The ``kube-dns`` Service's ClusterIP (in the control plane's ``10.0.0.0/24``)."""
SERVICE_CIDR = "10.0.0.0/24"
EXTERNAL_CIDR = "203.0.113.0/24"
"""Where :meth:`ChartCluster.add_instances` takes the nodes' ExternalIPs."""
OUTSIDE_CIDR = "198.18.0.0/15"

_E2E_FILES = (
    "go.mod",
    "go.sum",
    "tools.go",
    "e2enetwork/e2e.go",
    "e2enetwork/e2e_test.go",
    "e2enetwork/suites.go",
)
_COREDNS_FILES = ("go.mod", "go.sum", "tools.go")

LB_FOCUS = r"\[Feature:LoadBalancer\]"
SERVICE_LB_SPECS = (
    "should fail health check node port if there are only terminating endpoints",
    "should serve endpoints on same port and different protocol for internal traffic "
    "on Type LoadBalancer",
    "should implement NodePort and HealthCheckNodePort correctly when ExternalTrafficPolicy "
    "changes",
    "should complete a service status lifecycle",
)
"""``test/e2e/network/service.go``'s specs that create a LoadBalancer Service (the last
one with a ``loadBalancerClass``, so no cloud provider acts on it; it checks the status
subresource)."""
FULL_FOCUS = "|".join([LB_FOCUS, *(re.escape(spec) for spec in SERVICE_LB_SPECS)])

QUICK_SPECS = (
    "should handle load balancer cleanup finalizer for service",
    "should be able to preserve UDP traffic when server pod cycles for a LoadBalancer "
    "service on the same nodes",
    *SERVICE_LB_SPECS,
)
"""The CI short form: a few minutes on this machine."""
QUICK_FOCUS = "|".join(re.escape(spec) for spec in QUICK_SPECS)

IPPOOL_SPECS = (
    "should handle load balancer cleanup finalizer for service",
    *SERVICE_LB_SPECS,
)
"""What ``ippool`` can meet without an announcer: no traffic to the ingress address
(nothing would carry it there). Every other spec sends traffic to it."""
IPPOOL_FOCUS = "|".join(re.escape(spec) for spec in IPPOOL_SPECS)


@dataclass(frozen=True)
class Skip:
    pattern: str
    """A regular expression on the spec's full text, as ``--ginkgo.skip`` takes it."""
    reason: str


UPSTREAM_SKIPS = (
    Skip(
        "LoadBalancer.Service.without.NodePort",
        "cloud-provider-kind's hack/ci/e2e.sh: its load balancer forwards to node ports",
    ),
    Skip("type.and.ports.of.a.TCP.service", "cloud-provider-kind's hack/ci/e2e.sh"),
    Skip("loadbalancer.source.ranges", "cloud-provider-kind's hack/ci/e2e.sh"),
)
"""The LoadBalancer specs cloud-provider-kind's CI skips (``SKIP`` of its
``hack/ci/e2e.sh``; the rest of that list, ``Feature|Disruptive|Serial|...``, selects
nothing here). Run here anyway: the table says which they are."""

_NODE_ADDRESS_LB = (
    "servicelb's addresses are the nodes' own: the spec reads status.loadBalancer.ingress[0] "
    "once, that is one node, and kube-proxy sends externalTrafficPolicy: Local traffic only "
    "to that node's own backends, so the spec passes only when its backends happen to be "
    "there (docs/on-prem.md, 'Session affinity under Local'); cloud-provider-kind passes it "
    "with a proxy of its own address that health-checks the nodes"
)

SKIPS = (
    Skip(
        re.escape(
            "should implement NodePort and HealthCheckNodePort correctly when "
            "ExternalTrafficPolicy changes"
        ),
        "upstream skips it below 3 schedulable nodes (e2eskipper: 'Need at least 3 "
        "schedulable nodes'); the bed runs 2 so that the run stays inside CI's budget",
    ),
    *(
        Skip(re.escape(spec), _NODE_ADDRESS_LB)
        for spec in (
            "ExternalTrafficPolicy: Local [Feature:LoadBalancer] [Slow] should only target "
            "nodes with endpoints",
            "ExternalTrafficPolicy: Local [Feature:LoadBalancer] [Slow] should work for "
            "type=LoadBalancer",
            "should be able to switch session affinity for LoadBalancer service with Local "
            "traffic policy",
        )
    ),
)
"""This project's skips, each with its reason."""


class E2EError(RuntimeError):
    """The e2e pieces cannot be built or the bed cannot run; the message says why."""


# -- builds -------------------------------------------------------------------


def _module_dir(name: str) -> Path:
    return Path(str(resources.files("kube_ccm.testbed") / name))


def kubernetes_version() -> str:
    text = (_module_dir("gobuild-e2e") / "go.mod").read_text()
    found = re.search(r"^\s*k8s\.io/kubernetes\s+(v\S+)", text, re.MULTILINE)
    if not found:
        raise E2EError("cannot find k8s.io/kubernetes's version in gobuild-e2e/go.mod")
    return found.group(1)


def coredns_version() -> str:
    text = (_module_dir("gobuild-coredns") / "go.mod").read_text()
    found = re.search(r"^(?:require)?\s*github\.com/coredns/coredns\s+(v\S+)", text, re.MULTILINE)
    if not found:
        raise E2EError("cannot find CoreDNS's version in gobuild-coredns/go.mod")
    return found.group(1)


def e2e_cache_dir() -> Path:
    digest = gobuild_digest(_module_dir("gobuild-e2e"), _E2E_FILES)
    return cache_root() / "e2e" / f"k8s-{kubernetes_version()}_{digest}"


def coredns_cache_dir() -> Path:
    digest = gobuild_digest(_module_dir("gobuild-coredns"), _COREDNS_FILES)
    return cache_root() / "coredns" / f"coredns-{coredns_version()}_{digest}"


@dataclass(frozen=True)
class E2EBinaries:
    e2e_test: Path
    agnhost: Path
    kubectl: Path
    coredns: Path
    builds: dict[str, dict[str, Any]]
    """Per binary, how its build went (seconds, the load average before and after,
    bytes), as recorded when it was built (``build.json`` beside it)."""


@dataclass(frozen=True)
class _Target:
    name: str
    argv: tuple[str, ...]
    static: bool


def _e2e_targets(version: str) -> tuple[_Target, ...]:
    ldflags = _ldflags(Versions(kubernetes=version, etcd=""))
    return (
        _Target("e2e.test", ("test", "-c", f"-ldflags={ldflags}", "./e2enetwork"), False),
        _Target(
            "agnhost",
            ("build", "-ldflags=-s -w", "k8s.io/kubernetes/test/images/agnhost"),
            True,
        ),
        _Target("kubectl", ("build", f"-ldflags={ldflags}", "k8s.io/kubernetes/cmd/kubectl"), True),
    )


_COREDNS_TARGETS = (
    _Target("coredns", ("build", "-ldflags=-s -w", "github.com/coredns/coredns"), True),
)


def ensure_e2e_binaries(*, log: bool = True) -> E2EBinaries:
    """e2e.test, agnhost, kubectl and CoreDNS: from the cache, or built from the Go
    module proxy (once, under a lock; cold on two loaded cores, tens of minutes)."""
    e2e_dir = e2e_cache_dir()
    coredns_dir = coredns_cache_dir()
    _build_module("gobuild-e2e", e2e_dir, _e2e_targets(kubernetes_version()), log=log)
    _build_module("gobuild-coredns", coredns_dir, _COREDNS_TARGETS, log=log)
    builds: dict[str, dict[str, Any]] = {}
    for directory in (e2e_dir, coredns_dir):
        record = directory / "build.json"
        if record.exists():
            builds.update(json.loads(record.read_text()))
    return E2EBinaries(
        e2e_test=e2e_dir / "e2e.test",
        agnhost=e2e_dir / "agnhost",
        kubectl=e2e_dir / "kubectl",
        coredns=coredns_dir / "coredns",
        builds=builds,
    )


def _build_module(module: str, target: Path, targets: tuple[_Target, ...], *, log: bool) -> None:
    names = [t.name for t in targets]
    if all(os.access(target / name, os.X_OK) for name in names):
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(target.parent / ".build.lock"):
        missing = [t for t in targets if not os.access(target / t.name, os.X_OK)]
        if not missing:
            return
        try:
            go = _go()
        except ControlPlaneBinariesError as exc:
            raise E2EError(str(exc)) from exc
        env = dict(os.environ)
        env.setdefault("GOTOOLCHAIN", "local")
        env.setdefault("GOFLAGS", "-mod=readonly")
        record_path = target / "build.json"
        with tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-") as tmp:
            work = Path(tmp) / "src"
            shutil.copytree(_module_dir(module), work)
            out = Path(tmp) / "bin"
            out.mkdir()
            records: dict[str, dict[str, Any]] = {}
            for t in missing:
                if log:
                    _say(f"building {t.name} from the Go module proxy ({module}; first time only)")
                before = os.getloadavg()[0]
                started = time.monotonic()
                argv = [go, t.argv[0], "-o", str(out / t.name), *t.argv[1:]]
                built = subprocess.run(
                    argv,
                    cwd=work,
                    env={**env, **({"CGO_ENABLED": "0"} if t.static else {})},
                    capture_output=True,
                    text=True,
                    check=False,
                )
                if built.returncode != 0:
                    raise E2EError(
                        f"`go {' '.join(t.argv)}` in {module} failed:\n{built.stderr[-3000:]}"
                    )
                seconds = time.monotonic() - started
                records[t.name] = {
                    "seconds": round(seconds),
                    "load_before": round(before, 1),
                    "load_after": round(os.getloadavg()[0], 1),
                    "bytes": (out / t.name).stat().st_size,
                }
                if log:
                    _say(
                        f"built {t.name} in {seconds:.0f} s "
                        f"({records[t.name]['bytes'] / 1e6:.0f} MB, load {before:.1f})"
                    )
            target.mkdir(parents=True, exist_ok=True)
            old = json.loads(record_path.read_text()) if record_path.exists() else {}
            for t in missing:
                (out / t.name).replace(target / t.name)
            record_path.write_text(json.dumps({**old, **records}, indent=1))


# -- images -------------------------------------------------------------------

AGNHOST_BASE = StandIn(
    packages=(
        "curl",
        "wget",
        "netcat-openbsd",
        "iproute2",
        "dnsutils",
        "ca-certificates",
        "netbase",
    ),
    headers_from="",
    env=("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",),
)
"""What upstream's agnhost image (Alpine with ``bind-tools curl netcat-openbsd
iproute2``) gives the specs' commands, from Debian's packages."""
WGETRC = "# kube-ccm: one try, as BusyBox's wget (agnhost's own) makes\ntries = 1\n"


@dataclass(frozen=True)
class E2EImages:
    agnhost: Path
    """A docker-archive of :data:`AGNHOST_IMAGE`."""
    coredns: Path
    coredns_reference: str
    seconds: float


def e2e_image_directory() -> Path:
    return cache_root() / "e2e-image"


def ensure_e2e_images(binaries: E2EBinaries, *, log: bool = True) -> E2EImages:
    """The agnhost and CoreDNS images, exported as docker-archives, keyed by the
    binaries' and the base recipe's digests (built once, under a lock)."""
    started = time.monotonic()
    directory = e2e_image_directory()
    directory.mkdir(parents=True, exist_ok=True)
    buildah = Buildah(directory)
    with file_lock(directory / ".lock"):
        if buildah.image_id(AGNHOST_BASE.name) is None:
            build_stand_in(buildah, AGNHOST_BASE, log=log)
        agnhost_key = _digest(binaries.agnhost, AGNHOST_BASE.digest(), WGETRC)
        agnhost = directory / f"agnhost-{agnhost_key}.tar"
        if not agnhost.exists():
            _assemble(
                buildah,
                AGNHOST_BASE.name,
                AGNHOST_IMAGE,
                agnhost,
                files={"/agnhost": binaries.agnhost},
                text={"/etc/wgetrc": WGETRC},
                entrypoint=["/agnhost"],
                cmd=["pause"],
            )
        coredns_key = _digest(binaries.coredns)
        reference = f"{COREDNS_REPOSITORY}:{coredns_version()}-{coredns_key}"
        coredns = directory / f"coredns-{coredns_key}.tar"
        if not coredns.exists():
            _assemble(
                buildah,
                "scratch",
                reference,
                coredns,
                files={"/coredns": binaries.coredns},
                text={},
                entrypoint=["/coredns"],
                cmd=[],
            )
    return E2EImages(agnhost, coredns, reference, time.monotonic() - started)


def _digest(path: Path, *extra: str) -> str:
    digest = hashlib.sha256(path.read_bytes())
    for item in extra:
        digest.update(item.encode())
    return digest.hexdigest()[:16]


def _assemble(
    buildah: Buildah,
    base: str,
    reference: str,
    archive: Path,
    *,
    files: dict[str, Path],
    text: dict[str, str],
    entrypoint: list[str],
    cmd: list[str],
) -> None:
    container = f"kube-ccm-e2e-{os.getpid()}-{time.monotonic_ns()}"
    buildah.run("from", "--pull=never", f"--name={container}", base)
    try:
        root = Path(buildah.run("mount", container).stdout.strip())
        for destination, source in files.items():
            shutil.copy2(source, root / destination.lstrip("/"))
        for destination, content in text.items():
            (root / destination.lstrip("/")).write_text(content)
        buildah.run("umount", container)
        buildah.run(
            "config",
            f"--entrypoint={json.dumps(entrypoint)}",
            f"--cmd={json.dumps(cmd)}",
            "--label=org.opencontainers.image.description=built by kube_ccm.testbed.e2e",
            container,
        )
        buildah.run("commit", "--quiet", "--rm", container, reference)
    except BaseException:
        buildah.run("rm", container, check=False)
        raise
    partial = archive.with_suffix(".tar.partial")
    partial.unlink(missing_ok=True)
    buildah.run("push", "--quiet", reference, f"docker-archive:{partial}:{reference}")
    partial.replace(archive)


def _say(message: str) -> None:
    print(f"kube-ccm: {message}", file=sys.stderr, flush=True)


# -- the bed ------------------------------------------------------------------

SERVICELB = {"imagePullPolicy": "Never"}
"""servicelb's cloud-config: k3s's defaults (a hostPort per port), the image on the nodes."""
IPPOOL_POOL = "198.51.100.0/26"
IPPOOL = {"configMap": "", "pools": {"cidr-global": IPPOOL_POOL}, "announcer": "status"}
"""ippool's cloud-config: one pool, no kube-vip (``announcer: status``); nothing
announces the addresses, see :data:`IPPOOL_SPECS`."""
PROVIDERS = ("servicelb", "ippool")


@dataclass(frozen=True)
class E2EOptions:
    provider: str = "servicelb"
    cluster_dns: bool = True
    outside_client: bool = True
    egress_guard: bool = True


class E2EBed:
    """The real-node cluster with kube-ccm for :attr:`E2EOptions.provider`, CoreDNS and
    the outside client, ready for ``e2e.test``::

        with E2EBed(binaries, images, E2EOptions()) as bed:
            results = bed.run(FULL_FOCUS, report_dir)
    """

    def __init__(self, binaries: E2EBinaries, images: E2EImages, options: E2EOptions) -> None:
        if options.provider not in PROVIDERS:
            raise E2EError(f"provider {options.provider!r}: use one of {', '.join(PROVIDERS)}")
        self.binaries = binaries
        self.images = images
        self.options = options
        self.cluster = ChartCluster(
            ChartClusterOptions(
                nodes=2,
                control_plane_nodes=1,
                kube_proxy=True,
                netns=True,
                images=(images.agnhost, images.coredns),
                cluster_dns=DNS_IP if options.cluster_dns else "",
            )
        )
        self.outside_ip = ""
        self.kubeconfig = Path()
        self.timings: dict[str, float] = {}

    def __enter__(self) -> E2EBed:
        started = time.monotonic()
        cluster = self.cluster
        cluster.build()
        try:
            cluster.start()
            self.timings["cluster"] = time.monotonic() - started
            cluster.add_instances()
            nodes = cluster.nodes
            if self.options.outside_client:
                self._outside_client()
            else:
                for i, node in enumerate(nodes.nodes):
                    nodes.route_from_client(f"203.0.113.{10 + i}", node)
            if self.options.egress_guard:
                for netns in (*(n.netns for n in nodes.nodes), nodes.client_netns):
                    _nft(netns, self._guard())
            cluster.values.write_text(yaml.safe_dump(self._values()))
            installed = cluster.install()
            if installed.returncode != 0:
                raise E2EError(f"helm install failed: {installed.stderr}")
            if self.options.cluster_dns:
                self._apply(coredns_manifests(self.images.coredns_reference))
            asyncio.run(self._ready())
            self.kubeconfig = cluster.plane.write_client_kubeconfig(
                nodes.data_dir / "e2e.kubeconfig",
                "kube-ccm-e2e",
                ("system:masters",),
                server=nodes.api_server,
            )
            self.timings["ready"] = time.monotonic() - started
        except BaseException:
            cluster.stop()
            raise
        return self

    def __exit__(self, *_exc: object) -> None:
        self.cluster.stop()

    def _values(self) -> dict[str, Any]:
        cluster = self.cluster
        if self.options.provider == "servicelb":
            return cluster.values_for(replicas=1, servicelb=SERVICELB)
        values = cluster.values_for(replicas=1)
        simulated = yaml.safe_load(values["cloudConfig"]["content"])
        content = {
            "providers": {
                "simulated": {"capabilities": ["instances", "zones"], "config": simulated},
                "ippool": {"capabilities": ["loadBalancer"], "config": IPPOOL},
            }
        }
        return {
            **values,
            "cloudProvider": "composite",
            "cloudConfig": {"content": yaml.safe_dump(content)},
            "ippool": {"enabled": True, "configMap": ""},
        }

    def _outside_client(self) -> None:
        """The client namespace's second address, outside the nodes' /16 (see the module
        docstring), the source of its routes to the ExternalIPs; each node routes it
        back to the client namespace (not to the host, which forwards nothing)."""
        nodes = self.cluster.nodes
        assert nodes.subnet is not None
        second = str(nodes.subnet.network_address).split(".")[1]
        self.outside_ip = f"198.18.{second}.2"
        client = nodes.client_netns
        _ip(client, "addr", "add", f"{self.outside_ip}/32", "dev", "eth0")
        for i, node in enumerate(nodes.nodes):
            _ip(
                client,
                "route",
                "replace",
                f"203.0.113.{10 + i}",
                "via",
                node.ip,
                "src",
                self.outside_ip,
            )
            _ip(node.netns, "route", "replace", f"{self.outside_ip}/32", "via", nodes.client_ip)

    def _guard(self) -> str:
        nodes = self.cluster.nodes
        allowed = ", ".join(
            [
                str(nodes.subnet),
                EXTERNAL_CIDR,
                OUTSIDE_CIDR,
                SERVICE_CIDR,
                "127.0.0.0/8",
                # Link-local multicast (IGMP reports when a bridge comes up): never routed.
                "224.0.0.0/24",
            ]
        )
        return (
            "table inet kccm_egress {\n"
            f"  set allowed {{ type ipv4_addr; flags interval; elements = {{ {allowed} }} }}\n"
            "  set dropped { type ipv4_addr . inet_proto . inet_service; size 1024;"
            " flags dynamic; }\n"
            "  chain egress_output { type filter hook output priority 0; policy accept;\n"
            "    ip daddr != @allowed add @dropped { ip daddr . meta l4proto . th dport }"
            " counter drop\n"
            "    ip daddr != @allowed counter drop\n"
            "    meta nfproto ipv6 ip6 daddr != { ::1, fe80::/10, ff00::/8 } counter drop\n  }\n"
            "  chain egress_forward { type filter hook forward priority 0; policy accept;\n"
            "    ip daddr != @allowed add @dropped { ip daddr . meta l4proto . th dport }"
            " counter drop\n"
            "    ip daddr != @allowed counter drop\n"
            "    meta nfproto ipv6 ip6 daddr != { fe80::/10, ff00::/8 } counter drop\n  }\n"
            "}\n"
        )

    def egress_dropped(self) -> dict[str, list[str]]:
        """Per namespace, where the TCP and UDP packets the guard dropped were going
        (``address . protocol . port``)."""
        nodes = self.cluster.nodes
        found = {}
        for netns in (*(n.netns for n in nodes.nodes), nodes.client_netns):
            listed = _run(
                ["nsenter", f"--net=/var/run/netns/{netns}", "nft", "list", "set", "inet",
                 "kccm_egress", "dropped"],
                check=False,
            )  # fmt: skip
            body = listed.stdout.partition("elements = {")[2].partition("}")[0]
            found[netns] = [item.strip() for item in body.split(",") if item.strip()]
        return found

    def egress_drops(self) -> dict[str, int]:
        """Per namespace, the packets the egress guard dropped so far."""
        nodes = self.cluster.nodes
        drops = {}
        for netns in (*(n.netns for n in nodes.nodes), nodes.client_netns):
            listed = _run(
                [
                    "nsenter",
                    f"--net=/var/run/netns/{netns}",
                    "nft",
                    "list",
                    "table",
                    "inet",
                    "kccm_egress",
                ],
                check=False,
            )
            drops[netns] = sum(int(n) for n in re.findall(r"packets (\d+)", listed.stdout))
        return drops

    def _apply(self, objects: list[dict[str, Any]]) -> None:
        for obj in objects:
            path = _collection(obj)
            self.cluster.plane.request("POST", path, obj)

    async def _ready(self) -> None:
        async with KubeClient.from_kubeconfig(self.cluster.plane.kubeconfig) as client:

            async def settled() -> bool:
                nodes = (await client.get("/api/v1/nodes"))["items"]
                pods = (await client.get("/api/v1/namespaces/kube-system/pods"))["items"]
                return (
                    len(nodes) == 2
                    and all(
                        n["spec"].get("providerID")
                        and not any(
                            t["key"] == "node.cloudprovider.kubernetes.io/uninitialized"
                            for t in n["spec"].get("taints") or []
                        )
                        for n in nodes
                    )
                    and bool(pods)
                    and all(pod_ready(p) for p in pods)
                )

            await eventually(
                settled, within=300, interval=2, what="Nodes initialised, kube-system ready"
            )

    # -- the run ------------------------------------------------------------

    def run(
        self,
        focus: str,
        report_dir: Path,
        *,
        skips: tuple[Skip, ...] = SKIPS,
        timeout: str = "6h",
        output: Any = None,
    ) -> Results:
        """``e2e.test`` with ``focus`` and ``skips`` from the client namespace; its
        output to ``output`` (a file object, default stdout), its JUnit and JSON
        reports in ``report_dir``."""
        # e2e.test runs in report_dir: a relative path (the make target's default
        # _artifacts/e2e) would put its reports under report_dir/report_dir.
        report_dir = report_dir.resolve()
        report_dir.mkdir(parents=True, exist_ok=True)
        kubectl_dir = str(self.binaries.kubectl.parent)
        argv = [
            "nsenter",
            f"--net=/var/run/netns/{self.cluster.nodes.client_netns}",
            "--",
            str(self.binaries.e2e_test),
            f"--kubeconfig={self.kubeconfig}",
            "--provider=skeleton",
            "--num-nodes=2",
            f"--kubectl-path={self.binaries.kubectl}",
            f"--report-dir={report_dir}",
            f"--ginkgo.json-report={report_dir / 'report.json'}",
            f"--ginkgo.focus={focus}",
            f"--ginkgo.timeout={timeout}",
            "--ginkgo.no-color",
            "--ginkgo.v",
            "--disable-log-dump",
        ]
        if skips:
            argv.append(f"--ginkgo.skip={'|'.join(s.pattern for s in skips)}")
        env = {
            **os.environ,
            "PATH": f"{kubectl_dir}:{os.environ.get('PATH', '')}",
            "KUBECONFIG": str(self.kubeconfig),
            "HOME": str(report_dir),
        }
        started = time.monotonic()
        done = subprocess.run(
            argv, env=env, stdout=output, stderr=subprocess.STDOUT, check=False, cwd=report_dir
        )
        seconds = time.monotonic() - started
        asyncio.run(self._namespaces_gone())
        return Results.read(report_dir, focus, skips, done.returncode, seconds)

    async def _namespaces_gone(self, within: float = 300) -> None:
        """Wait (up to ``within`` seconds) until the namespaces the specs made are gone:
        the framework deletes them without waiting, and the bed's stop would otherwise
        find their pods still terminating."""
        async with KubeClient.from_kubeconfig(self.cluster.plane.kubeconfig) as client:

            async def gone() -> bool:
                listed = await client.get("/api/v1/namespaces?labelSelector=e2e-run")
                return not listed["items"]

            try:
                await eventually(gone, within=within, interval=2, what="the e2e namespaces gone")
            except AssertionError as exc:
                _say(f"{exc}; stopping the bed anyway")


def coredns_manifests(image: str) -> list[dict[str, Any]]:
    """CoreDNS as ``kube-dns`` in ``kube-system``: its ServiceAccount, RBAC (as
    upstream's deployment), Corefile (the cluster zones only), Deployment and Service."""
    labels = {"k8s-app": "kube-dns"}
    corefile = (
        ".:53 {\n    errors\n    health :8080\n    ready :8181\n"
        "    kubernetes cluster.local in-addr.arpa ip6.arpa {\n"
        "        pods insecure\n        fallthrough in-addr.arpa ip6.arpa\n        ttl 30\n    }\n"
        "    cache 30\n    loadbalance\n}\n"
    )
    meta = {"name": "coredns", "namespace": "kube-system", "labels": labels}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "system:coredns"},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["endpoints", "services", "pods", "namespaces"],
                    "verbs": ["list", "watch"],
                },
                {
                    "apiGroups": ["discovery.k8s.io"],
                    "resources": ["endpointslices"],
                    "verbs": ["list", "watch"],
                },
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "system:coredns"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "system:coredns",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "coredns", "namespace": "kube-system"}],
        },
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"Corefile": corefile}},
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta,
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "serviceAccountName": "coredns",
                        "dnsPolicy": "Default",
                        "containers": [
                            {
                                "name": "coredns",
                                "image": image,
                                "imagePullPolicy": "Never",
                                "args": ["-conf", "/etc/coredns/Corefile"],
                                "ports": [
                                    {"containerPort": 53, "protocol": "UDP", "name": "dns"},
                                    {"containerPort": 53, "protocol": "TCP", "name": "dns-tcp"},
                                ],
                                "readinessProbe": {
                                    "httpGet": {"path": "/ready", "port": 8181},
                                    "periodSeconds": 2,
                                },
                                "securityContext": {
                                    "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]},
                                    "readOnlyRootFilesystem": True,
                                },
                                "volumeMounts": [{"name": "config", "mountPath": "/etc/coredns"}],
                            }
                        ],
                        "volumes": [{"name": "config", "configMap": {"name": "coredns"}}],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {**meta, "name": "kube-dns"},
            "spec": {
                "clusterIP": DNS_IP,
                "selector": labels,
                "ports": [
                    {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                    {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
                ],
            },
        },
    ]


def _collection(obj: dict[str, Any]) -> str:
    kind = obj["kind"]
    namespace = obj["metadata"].get("namespace")
    plural = {
        "ServiceAccount": "serviceaccounts",
        "ConfigMap": "configmaps",
        "Service": "services",
        "Deployment": "deployments",
        "ClusterRole": "clusterroles",
        "ClusterRoleBinding": "clusterrolebindings",
    }[kind]
    group = obj["apiVersion"]
    prefix = "/api/v1" if group == "v1" else f"/apis/{group}"
    return f"{prefix}/namespaces/{namespace}/{plural}" if namespace else f"{prefix}/{plural}"


def _run(argv: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
    if check and done.returncode != 0:
        raise E2EError(f"`{' '.join(argv)}` failed: {done.stderr.strip()}")
    return done


def _ip(netns: str, *args: str) -> None:
    _run(["ip", "-n", netns, *args])


def _nft(netns: str, ruleset: str) -> None:
    done = subprocess.run(
        ["nsenter", f"--net=/var/run/netns/{netns}", "nft", "-f", "-"],
        input=ruleset,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    if done.returncode != 0:
        raise E2EError(f"the egress guard in {netns} failed: {done.stderr.strip()}")


# -- results ------------------------------------------------------------------


@dataclass(frozen=True)
class Spec:
    name: str
    state: str
    """ginkgo's: ``passed``, ``failed``, ``skipped``, ``timedout``, ``panicked``, ..."""
    seconds: float
    message: str = ""


@dataclass(frozen=True)
class Results:
    specs: tuple[Spec, ...]
    """The specs the focus and skips selected, in the order they ran."""
    listed_skips: tuple[tuple[str, str], ...]
    """Specs the focus matches that :data:`SKIPS` (or the caller's skips) left out,
    with the reason."""
    returncode: int
    seconds: float
    junit: Path

    @classmethod
    def read(
        cls, report_dir: Path, focus: str, skips: tuple[Skip, ...], returncode: int, seconds: float
    ) -> Results:
        path = report_dir / "report.json"
        if not path.exists():
            raise E2EError(f"e2e.test wrote no report (exit {returncode}); see its output")
        reports = json.loads(path.read_text())
        specs: list[Spec] = []
        listed: list[tuple[str, str]] = []
        focused = re.compile(focus)
        for report in reports:
            for spec in report.get("SpecReports") or []:
                if spec.get("LeafNodeType") != "It":
                    continue
                name = " ".join(
                    [*(spec.get("ContainerHierarchyTexts") or []), spec.get("LeafNodeText", "")]
                ).strip()
                if not focused.search(name):
                    continue
                skip = next((s for s in skips if re.search(s.pattern, name)), None)
                if skip is not None:
                    listed.append((name, skip.reason))
                    continue
                failure = spec.get("Failure") or {}
                specs.append(
                    Spec(
                        name=name,
                        state=spec.get("State", "unknown"),
                        seconds=(spec.get("RunTime") or 0) / 1e9,
                        message=(failure.get("Message") or "").strip(),
                    )
                )
        return cls(tuple(specs), tuple(listed), returncode, seconds, report_dir / "junit_01.xml")

    def unexpected_skips(self) -> list[Spec]:
        """Selected specs that upstream's code skipped at run time (``Skipf`` gives a
        message; a spec the suite's timeout or an interrupt left out has none)."""
        return [s for s in self.specs if s.state == "skipped" and s.message]

    def not_run(self) -> list[Spec]:
        """Selected specs left out by the suite's timeout or an interrupt."""
        return [s for s in self.specs if s.state == "skipped" and not s.message]

    def failed(self) -> list[Spec]:
        return [s for s in self.specs if s.state not in ("passed", "skipped")]

    def table(self) -> str:
        """Markdown: spec, result, time (and why, for a failure or a skip)."""
        lines = ["| spec | result | time | cloud-provider-kind's CI |", "|---|---|---|---|"]
        for spec in self.specs:
            upstream = (
                "skips it"
                if any(re.search(s.pattern, spec.name) for s in UPSTREAM_SKIPS)
                else "runs it"
            )
            result = "not run (suite timeout)" if spec in self.not_run() else spec.state
            if spec.state != "passed" and spec.message:
                first = spec.message.splitlines()[0][:160].replace("|", "\\|")
                result = f"**{spec.state}**: {first}"
            lines.append(f"| {_short(spec.name)} | {result} | {spec.seconds:.0f} s | {upstream} |")
        for name, reason in self.listed_skips:
            lines.append(f"| {_short(name)} | skipped (listed): {reason} | - | - |")
        return "\n".join(lines)

    def summary(self) -> str:
        counts: dict[str, int] = {}
        not_run = self.not_run()
        for spec in self.specs:
            state = "not run" if spec in not_run else spec.state
            counts[state] = counts.get(state, 0) + 1
        parts = [f"{n} {state}" for state, n in sorted(counts.items())]
        if self.listed_skips:
            parts.append(f"{len(self.listed_skips)} skipped by the listed skips")
        return f"{len(self.specs)} specs ran: " + ", ".join(parts)


def _short(name: str) -> str:
    return name.replace("[sig-network] ", "").replace("|", "\\|")


DOCS = Path(__file__).resolve().parents[2] / "docs" / "e2e.md"


def write_docs_table(results: Results, provider: str, note: str, docs: Path = DOCS) -> None:
    """Replace ``provider``'s table in ``docs`` (between its markers) with ``results``."""
    begin, end = f"<!-- e2e:{provider}:begin -->", f"<!-- e2e:{provider}:end -->"
    text = docs.read_text() if docs.exists() else ""
    body = f"{begin}\n{note}\n\n{results.summary()}.\n\n{results.table()}\n{end}"
    if begin in text and end in text:
        head, _, rest = text.partition(begin)
        _, _, tail = rest.partition(end)
        text = head + body + tail
    else:
        text = text.rstrip("\n") + f"\n\n## {provider}\n\n{body}\n"
    docs.write_text(text)


# -- the command ----------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kube_ccm.testbed.e2e",
        description="Upstream's e2e LoadBalancer specs against kube-ccm on real nodes.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser(
        "build",
        help="build (or find cached) e2e.test, agnhost, kubectl, CoreDNS "
        "and the two images; print the build record",
    )
    run = sub.add_parser("run", help="run the specs; print upstream's result per spec")
    run.add_argument("--provider", choices=PROVIDERS, default="servicelb")
    run.add_argument(
        "--focus",
        default="",
        help="a ginkgo focus regex; default: every [Feature:LoadBalancer] spec and the "
        "Service specs that create LoadBalancers (servicelb), or the specs ippool can meet "
        "without an announcer (ippool); 'quick' for the CI short form",
    )
    run.add_argument("--report-dir", type=Path, default=Path("_artifacts/e2e"))
    run.add_argument(
        "--timeout",
        default="6h",
        help="ginkgo's suite timeout (default 6h): the spec running then is interrupted and "
        "the rest reported as not run",
    )
    run.add_argument(
        "--also-skip",
        default="",
        help="a further ginkgo skip regex, e.g. to split the focus over two beds run at once",
    )
    run.add_argument(
        "--no-docs",
        action="store_true",
        help="do not write the table into docs/e2e.md (it is written for the default focus)",
    )
    args = parser.parse_args(argv)
    try:
        binaries = ensure_e2e_binaries()
        images = ensure_e2e_images(binaries)
    except (E2EError, ImageBuildError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.command == "build":
        print(
            json.dumps(
                {
                    "builds": binaries.builds,
                    "images": {"agnhost": str(images.agnhost), "coredns": str(images.coredns)},
                },
                indent=1,
            )
        )
        return 0
    focus = args.focus or (FULL_FOCUS if args.provider == "servicelb" else IPPOOL_FOCUS)
    if focus == "quick":
        focus = QUICK_FOCUS
    report_dir = args.report_dir / args.provider
    load = os.getloadavg()
    with E2EBed(binaries, images, E2EOptions(provider=args.provider)) as bed:
        skips: tuple[Skip, ...] = SKIPS
        if args.also_skip:
            skips = (*SKIPS, Skip(args.also_skip, "left to another run (--also-skip)"))
        results = bed.run(focus, report_dir, skips=skips, timeout=args.timeout)
        drops = bed.egress_drops()
        dropped = bed.egress_dropped()
    load_after = os.getloadavg()
    print(f"\n{results.summary()} in {results.seconds:.0f} s (JUnit: {results.junit})")
    for spec in results.specs:
        print(f"  {spec.state.upper():8} {spec.seconds:6.0f} s  {_short(spec.name)}")
    for name, reason in results.listed_skips:
        print(f"  {'LISTED':8} {'':6}    {_short(name)} ({reason})")
    print(f"egress guard: {sum(drops.values())} packets dropped {drops}; to {dropped}")
    if not args.focus and not args.also_skip and not args.no_docs:
        note = (
            f"Run of {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: "
            f"`make e2e-loadbalancer PROVIDER={args.provider}`, {results.seconds / 60:.0f} min, "
            f"load average {load[0]:.1f} at the start and {load_after[0]:.1f} at the end "
            f"(2 cores, shared); egress guard drops: {sum(drops.values())}."
        )
        write_docs_table(results, args.provider, note)
    unexpected = results.unexpected_skips()
    for spec in unexpected:
        print(f"unexpected skip (not in SKIPS): {spec.name}: {spec.message}", file=sys.stderr)
    return 0 if not results.failed() and not unexpected and not any(drops.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
