"""``kube-ccm sandbox``: the whole system on one machine, no cloud account needed.

Starts the test bed's real kube-apiserver + etcd and N simulated kubelets
(:mod:`kube_ccm.sandbox.kubelets`: each registers its Node with the
uninitialised taint and a pod CIDR, renews its Lease, reports Ready, and can be
told to die), runs ``kube-ccm run`` with the simulated cloud as a subprocess,
and shows progress while the nodes are initialised (and their routes created),
M LoadBalancer Services get their ingress IPs, and, with ``--kill`` /
``--shutdown``, dead nodes are deleted or tainted. Then a summary: times, cloud
calls by method, API requests by verb and resource. It keeps running (kubectl
works with the printed kubeconfig) until Ctrl-C or ``--duration``.

``--on-prem`` runs the composed on-prem setup instead of the simulated cloud: a
real libvirtd (:mod:`kube_ccm.testing.libvirtd`, libvirt's test driver) holds one
running domain per node, and ``--cloud-provider=composite`` takes instances from
the ``libvirt`` provider and load balancers from ``ippool`` (addresses from
``ON_PREM_POOL``). ``--kill`` undefines domains, ``--shutdown`` shuts them off.

``--provider aws`` without ``--cloud-config`` plays AWS on loopback
(:mod:`kube_ccm.sandbox.aws`): a moto server with a VPC, tagged subnets, a route table
and an instance per node named after it; kube-ccm's EC2 and ELBv2 calls are counted.
``--kill`` terminates instances, ``--shutdown`` stops them.

``--real-nodes N`` runs real kubelets instead (:mod:`kube_ccm.sandbox.real`): N
kubelets on their own containerds, kube-controller-manager and kube-scheduler, the
image built from this checkout and kube-ccm installed by the shipped Helm chart with
leader election, the simulated cloud shared by its pods. Needs root and ``make sysdeps``.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

import yaml

from kube_ccm.api import wellknown as wk
from kube_ccm.api.objects import Node
from kube_ccm.runtime.client import KubeClient
from kube_ccm.sandbox import aws as local_aws
from kube_ccm.sandbox.kubelets import (
    KUBELET_ANNOTATION,
    KubeletTimings,
    SimulatedKubelets,
    node_manifest,
    pod_cidrs,
)
from kube_ccm.testing.libvirtd import LibvirtdServer, LibvirtdUnavailableError

if TYPE_CHECKING:
    from kube_ccm.sandbox.aws import SandboxAws
    from kube_ccm.testing.daemon import DaemonProcess

__all__ = [
    "CLUSTER_CIDR",
    "SandboxOptions",
    "SimulatedKubelets",
    "main",
    "node_manifest",
    "run_sandbox",
]

CLUSTER_CIDR = "10.64.0.0/10"
"""The sandbox's ``--cluster-cidr``: a /24 pod CIDR each for up to 16,384 nodes."""
ROUTE_PERIOD = 5.0
"""The sandbox's ``--route-reconciliation-period`` (seconds)."""
CLEANUP_TIMEOUT = 60.0
"""How long the sandbox waits for another provider to delete its load balancers."""
ON_PREM_POOL = "198.18.0.0/22"
"""``--on-prem``: the ippool addresses of LoadBalancer Services (a benchmarking range)."""


@dataclass(frozen=True)
class SandboxOptions:
    nodes: int = 20
    services: int = 5
    duration: float | None = None
    latency: float = 0.0
    failure_rate: float = 0.0
    concurrent_node_syncs: int = 4
    provider: str = "simulated"
    cloud_config: Path | None = None
    data_dir: Path | None = None
    kill: int = 0
    shutdown: int = 0
    kubelets: KubeletTimings = field(default_factory=KubeletTimings)
    on_prem: bool = False
    stall_timeout: float = 60.0
    provision_command: str = ""
    real_nodes: int = 0
    """Real kubelets and kube-ccm from its image and chart (0: simulated kubelets)."""

    @property
    def local_aws(self) -> bool:
        """``--provider aws`` without a cloud-config: the sandbox's own moto plays AWS."""
        return self.provider == "aws" and self.cloud_config is None and not self.on_prem

    def problems(self) -> list[str]:
        """What is wrong with these options, each with what to do; empty when fine."""
        found = []
        if self.nodes < 1 and not self.real_nodes:
            found.append("--nodes must be at least 1")
        if self.services < 0 or self.kill < 0 or self.shutdown < 0:
            found.append("--services, --kill and --shutdown cannot be negative")
        if self.kill + self.shutdown > self.nodes and not self.real_nodes:
            found.append(
                f"--kill {self.kill} plus --shutdown {self.shutdown} is more than the "
                f"{self.nodes} nodes: kill or shut down fewer, or add nodes"
            )
        if not 0.0 <= self.failure_rate <= 1.0:
            found.append("--failure-rate must be between 0 and 1")
        if self.on_prem and (self.provider != "simulated" or self.cloud_config is not None):
            found.append(
                "--on-prem chooses its providers (libvirt instances, ippool load balancers) "
                "and writes their cloud-config: drop --provider and --cloud-config"
            )
        if (self.provider != "simulated" or self.on_prem) and (self.latency or self.failure_rate):
            found.append(
                "--latency and --failure-rate shape the simulated cloud; with "
                f"{'--on-prem' if self.on_prem else '--provider=' + self.provider} they "
                "would be ignored: drop them"
            )
        ends_instances = self.provider == "simulated" or self.on_prem or self.local_aws
        if not ends_instances and (self.kill or self.shutdown):
            found.append(
                "--kill and --shutdown end instances in the simulated cloud; with "
                f"--provider={self.provider}, stop kubelets with the "
                f"{KUBELET_ANNOTATION}=stopped annotation instead"
            )
        if self.stall_timeout <= 0:
            found.append("--stall-timeout must be more than 0 s")
        if self.provision_command and ends_instances:
            found.append(
                "--provision-command provisions instances in another provider's cloud; the "
                "simulated cloud, --on-prem and --provider aws without --cloud-config "
                "create theirs"
            )
        if self.local_aws and self.nodes > local_aws.MAX_NODES:
            found.append(
                f"--provider aws without --cloud-config runs at most {local_aws.MAX_NODES} "
                "instances (a /24 subnet per zone): use fewer --nodes"
            )
        if self.cloud_config is not None and self.provider == "simulated":
            found.append(
                "--cloud-config is for other providers; the simulated cloud's is generated "
                "(use --latency and --failure-rate)"
            )
        if self.real_nodes:
            found += self._real_node_problems()
        try:
            pod_cidrs(CLUSTER_CIDR, self.nodes)
        except ValueError as exc:
            found.append(f"--nodes: {exc}")
        return found

    def _real_node_problems(self) -> list[str]:
        from kube_ccm.sandbox.real import CONTROL_PLANE_NODES  # noqa: PLC0415

        found = []
        if self.real_nodes < 0:
            found.append("--real-nodes must be at least 1 (or 0: simulated kubelets)")
        if self.on_prem or self.provider != "simulated" or self.cloud_config is not None:
            found.append(
                "--real-nodes runs kube-ccm's image with the simulated cloud its pods share: "
                "drop --on-prem, --provider and --cloud-config"
            )
        workers = max(0, self.real_nodes - CONTROL_PLANE_NODES)
        if self.kill + self.shutdown > workers:
            found.append(
                f"--kill {self.kill} plus --shutdown {self.shutdown} is more than the {workers} "
                f"worker nodes of --real-nodes {self.real_nodes} (the first min(N, "
                f"{CONTROL_PLANE_NODES}) are the control plane, where kube-ccm runs): "
                "kill or shut down fewer, or add real nodes"
            )
        return found


def initialised(node: Node) -> bool:
    return not any(t.key == wk.TAINT_UNINITIALIZED for t in node.spec.taints)


class Stalled(Exception):  # noqa: N818 (a condition, not a bug)
    """No progress for the stall timeout."""

    def __init__(self, label: str, done: int, total: int, seconds: float) -> None:
        super().__init__(f"{label}: stuck at {done}/{total} for {seconds:g} s")


async def _watch_progress(
    label: str,
    count: Callable[[], Awaitable[int]],
    total: int,
    out: TextIO,
    started: float,
    *,
    stall: float | None = None,
) -> float:
    """Print a progress line until ``count()`` reaches ``total``; the time it took.

    Raises :class:`Stalled` when ``count()`` has not moved for ``stall`` seconds."""
    interactive = out.isatty()
    last = -1
    moved = time.monotonic()
    while True:
        done = await count()
        if stall is not None and done == last and time.monotonic() - moved > stall:
            if interactive:
                print(file=out)
            raise Stalled(label, done, total, stall)
        if done != last:
            moved = time.monotonic()
            bar = "#" * (30 * done // max(total, 1))
            line = f"  {label} [{bar:<30}] {done}/{total}"
            print(("\r" + line) if interactive else line, end="" if interactive else "\n", file=out)
            out.flush()
            last = done
        if done >= total:
            if interactive:
                print(file=out)
            return time.monotonic() - started
        await asyncio.sleep(0.2)


_COUNTED = ("nodes", "services", "events", "ipaddresses")
"""What the summary reports (the sandbox runs kube-ccm without leader election; the
apiserver renews Leases of its own)."""


def request_key(method: str, path: str) -> str | None:
    """``VERB resource`` as the apiserver's ``apiserver_request_total`` labels a request.

    A GET without a name is a LIST; subresources count under their resource.
    """
    parts = path.split("?", maxsplit=1)[0].strip("/").split("/")
    parts = parts[2:] if parts[:1] == ["api"] else parts[3:]  # /api/v1 or /apis/g/v
    if len(parts) > 2 and parts[0] == "namespaces":
        parts = parts[2:]
    if not parts or not parts[0]:
        return None
    verb = method.upper()
    if verb == "GET" and len(parts) == 1:
        verb = "LIST"
    return f"{verb} {parts[0]}"


class _TallyingClient(KubeClient):
    """The sandbox's own client: counts its requests so the summary can show kube-ccm's.

    :meth:`snapshot` holds new requests back and waits for those in flight, so the
    apiserver's counters and this tally are read at one consistent moment.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tally: Counter[str] = Counter()
        self._open = asyncio.Event()
        self._open.set()
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    async def request(self, method: str, path: str, **kwargs: Any) -> bytes:
        key = request_key(method, path)
        if key is None:  # /metrics and the like: never held back, never counted
            return await super().request(method, path, **kwargs)
        await self._open.wait()
        self._in_flight += 1
        self._idle.clear()
        try:
            return await super().request(method, path, **kwargs)
        finally:
            self.tally[key] += 1
            self._in_flight -= 1
            if not self._in_flight:
                self._idle.set()

    async def snapshot(self) -> Counter[str]:
        """The apiserver's counters less this client's tally, at one quiet moment."""
        self._open.clear()
        try:
            await self._idle.wait()
            return await _request_counts(self) - self.tally
        finally:
            self._open.set()


async def _request_counts(client: KubeClient) -> Counter[str]:
    """The apiserver's own request counters for the resources the CCM touches (no watches)."""
    from prometheus_client.parser import text_string_to_metric_families  # noqa: PLC0415

    counts: Counter[str] = Counter()
    text = (await client.request("GET", "/metrics")).decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if (
                sample.name == "apiserver_request_total"
                and sample.labels.get("resource") in _COUNTED
                and sample.labels.get("verb") != "WATCH"
            ):
                key = f"{sample.labels['verb']} {sample.labels['resource']}"
                counts[key] += int(sample.value)
    return counts


async def run_sandbox(options: SandboxOptions, out: TextIO = sys.stdout) -> int:
    problems = options.problems()
    if problems:
        for problem in problems:
            print(f"error: {problem}", file=sys.stderr)
        return 2
    # Imported here: the daemon itself never needs the test bed.
    from kube_ccm.testing.controlplane import (  # noqa: PLC0415
        ControlPlane,
        ControlPlaneError,
        ControlPlaneOptions,
    )
    from kube_ccm.testing.daemon import DaemonProcess  # noqa: PLC0415

    if options.real_nodes:
        from kube_ccm.sandbox.real import run_real_sandbox  # noqa: PLC0415

        return await run_real_sandbox(options, out)
    if options.local_aws and (missing := local_aws.missing()):
        print(f"error: {missing}", file=sys.stderr)
        return 1
    workdir = options.data_dir or Path(tempfile.mkdtemp(prefix="kube-ccm-sandbox-"))
    plane = ControlPlane(ControlPlaneOptions(data_dir=workdir / "controlplane", keep_data_dir=True))
    print("starting kube-apiserver and etcd ...", file=out, flush=True)
    try:
        await asyncio.to_thread(plane.start)
    except ControlPlaneError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    daemon: DaemonProcess | None = None
    hypervisor: LibvirtdServer | None = None
    aws: SandboxAws | None = None
    provider = options.provider
    client = _TallyingClient.from_kubeconfig(plane.kubeconfig)
    assert isinstance(client, _TallyingClient)
    kubelets = SimulatedKubelets(client, options.kubelets)
    running: asyncio.Task[None] | None = None
    try:
        print(
            f"control plane ready in {plane.timings.total:.1f} s; kubeconfig: {plane.kubeconfig}",
            file=out,
            flush=True,
        )
        names = [f"sandbox-node-{i:04d}" for i in range(options.nodes)]
        provider, cloud_config_file = options.provider, options.cloud_config
        if options.on_prem:
            try:
                # On this thread: libvirtd dies with the thread that started it.
                hypervisor = _start_hypervisor(names)
            except LibvirtdUnavailableError as exc:
                print(f"error: --on-prem needs libvirt: {exc}", file=sys.stderr)
                return 1
            provider, cloud_config_file = "composite", _on_prem_config(workdir, hypervisor)
            print(
                f"libvirtd (test driver) runs {len(names)} domains; kube-ccm takes instances "
                f"from libvirt ({hypervisor.uri}) and load balancers from ippool "
                f"({ON_PREM_POOL})",
                file=out,
                flush=True,
            )
        if options.local_aws:
            aws = local_aws.SandboxAws(workdir / "aws")
            cloud_config_file = await _start_aws(aws, names, out)
            if cloud_config_file is None:
                return 1
        if options.provision_command and not await _provision_instances(options, names, out):
            return 1
        await kubelets.register(names, pod_cidrs(CLUSTER_CIDR, len(names)))
        running = asyncio.create_task(kubelets.run())
        print(
            f"registered {len(names)} nodes with the uninitialised taint and a pod CIDR each; "
            "their kubelets renew Leases and report Ready",
            file=out,
        )
        before = await client.snapshot()
        aws_args = (
            [f"--cluster-name={local_aws.CLUSTER}", f"--controllers={local_aws.CONTROLLERS}"]
            if aws is not None
            else []
        )
        daemon = DaemonProcess(
            kubeconfig=plane.kubeconfig,
            workdir=workdir / "ccm",
            cloud_config=_simulated_config(options),
            cloud_config_file=cloud_config_file,
            provider=provider,
            args=[
                "--leader-elect=false",
                f"--cluster-cidr={CLUSTER_CIDR}",
                f"--concurrent-node-syncs={options.concurrent_node_syncs}",
                "--kube-api-qps=100",
                "--kube-api-burst=200",
                f"--route-reconciliation-period={ROUTE_PERIOD:g}s",
                *aws_args,
            ],
            env=local_aws.DAEMON_ENV if aws is not None else None,
        )
        started = time.monotonic()
        daemon.start()
        print(
            f"started kube-ccm run --cloud-provider={provider} (log: {daemon.log_path})",
            file=out,
            flush=True,
        )

        async def nodes_done() -> int:
            return sum(1 for n in kubelets.nodes() if initialised(n))

        try:
            took = await _while_alive(
                daemon,
                _watch_progress(
                    "initialising nodes",
                    nodes_done,
                    len(names),
                    out,
                    started,
                    stall=options.stall_timeout,
                ),
            )
        except Stalled as stalled:
            _explain_stall(stalled, daemon, provider, names, own_instances=aws is not None)
            return 1
        if took is None:
            return 1
        lb_took = await _provision(client, daemon, options.services, out)
        if lb_took is None:
            return 1
        failures = await _failures(kubelets, daemon, options, out, hypervisor=hypervisor, aws=aws)
        if failures is None:
            return 1
        await asyncio.sleep(0.5)
        # What the apiserver counted less what the kubelets and this driver sent: kube-ccm's.
        after = await client.snapshot()
        calls = None
        if provider == "simulated":
            calls = daemon.cloud.calls()
        elif aws is not None:
            calls = aws.calls()
        _summary(
            out,
            nodes=len(names),
            took=took,
            services=options.services,
            lb_took=lb_took,
            failures=failures,
            calls=calls,
            requests=after - before,
            state=daemon.state_path if provider == "simulated" else None,
            ingress="hostname" if aws is not None else "IP",
        )
        _hints(out, plane.kubeconfig, names[0], daemon, hypervisor=hypervisor, aws=aws)
        if options.duration is None:
            print("running until Ctrl-C", file=out, flush=True)
        else:
            print(f"running for {options.duration:g} s more", file=out, flush=True)
        return 0 if await _keep_running(daemon, options.duration) else 1
    finally:
        if running is not None:
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await running
        if daemon is not None and provider != "simulated" and not options.on_prem:
            # Another provider's cloud outlives the sandbox: take back what it made.
            await _clean_up(client, daemon, out, aws)
        if daemon is not None:
            status = await asyncio.to_thread(daemon.stop)
            print(f"kube-ccm stopped (exit status {status})", file=out)
        await client.aclose()
        if aws is not None:
            await aws.close()
        if hypervisor is not None:
            await asyncio.to_thread(hypervisor.stop)
            shutil.rmtree(hypervisor.workdir, ignore_errors=True)
        await asyncio.to_thread(plane.stop)
        if options.data_dir is None:
            shutil.rmtree(workdir, ignore_errors=True)
        print("control plane stopped", file=out, flush=True)


async def _provision_instances(options: SandboxOptions, names: list[str], out: TextIO) -> bool:
    """``--provision-command``, with the node names as arguments; False when it fails."""
    argv = [*shlex.split(options.provision_command), *names]
    print(f"provisioning instances: {argv[0]} with {len(names)} node names", file=out, flush=True)
    process = await asyncio.create_subprocess_exec(*argv)
    status = await process.wait()
    if status != 0:
        print(f"error: --provision-command exited with {status}", file=sys.stderr)
        return False
    return True


async def _start_aws(aws: SandboxAws, names: list[str], out: TextIO) -> Path | None:
    """moto with the sandbox's network and an instance per node; kube-ccm's
    cloud-config (None when moto does not start)."""
    from kube_ccm.testing.moto import MotoUnavailableError  # noqa: PLC0415

    try:
        # On this thread: the moto server dies with the thread that started it.
        aws.start()
    except MotoUnavailableError as exc:
        print(f"error: --provider aws needs moto: {exc}", file=sys.stderr)
        return None
    await aws.start_proxy()
    await aws.create_instances(names)
    assert aws.network is not None
    print(
        f"moto (EC2 and ELBv2) on {aws.server.url}: VPC {aws.network.vpc_id} with "
        f"{len(aws.network.subnets)} subnets tagged for cluster {local_aws.CLUSTER}, route "
        f"table {aws.route_table_id}, {len(names)} instances named after the nodes; "
        "kube-ccm calls it through a counting proxy",
        file=out,
        flush=True,
    )
    return aws.write_config()


def _explain_stall(
    stalled: Stalled,
    daemon: DaemonProcess,
    provider: str,
    names: list[str],
    *,
    own_instances: bool = False,
) -> None:
    errors = [
        line
        for line in daemon.log().splitlines()
        if line[:1] in ("E", "W") or "error" in line.lower()
    ]
    print(f"error: {stalled}; kube-ccm's last errors:", file=sys.stderr)
    for line in errors[-8:] or ["(none logged)"]:
        print(f"  {line[:300]}", file=sys.stderr)
    if provider != "simulated" and not own_instances:
        print(
            f"the sandbox's Nodes are named {names[0]} ... {names[-1]}: --provider={provider} "
            "must find an instance for each (create them, or pass --provision-command)",
            file=sys.stderr,
        )


async def _clean_up(
    client: KubeClient, daemon: DaemonProcess, out: TextIO, aws: SandboxAws | None = None
) -> None:
    """Delete the sandbox's Services (their load balancers go first: the finalizer) and
    Nodes (their routes go), waiting a bounded time; say what is left. With the
    sandbox's own AWS, wait for the routes to go and count what moto still holds."""
    services = "/api/v1/namespaces/default/services"
    listed = await client.get(services)
    ours = [
        s["metadata"]["name"]
        for s in listed["items"]
        if s["metadata"]["name"].startswith("sandbox-lb-")
    ]
    for name in ours:
        with contextlib.suppress(Exception):
            await client.delete(f"{services}/{name}")

    async def remaining() -> list[str]:
        now = await client.get(services)
        return [s["metadata"]["name"] for s in now["items"] if s["metadata"]["name"] in ours]

    deadline = time.monotonic() + CLEANUP_TIMEOUT
    left = await remaining()
    while left and time.monotonic() < deadline and daemon.poll() is None:
        await asyncio.sleep(0.5)
        left = await remaining()
    if left:
        print(
            f"warning: {len(left)} load balancers not deleted within {CLEANUP_TIMEOUT:g} s "
            f"(e.g. {left[0]}): delete them in your cloud",
            file=out,
        )
    else:
        print(f"deleted the {len(ours)} load balancers the sandbox created", file=out)
    nodes = await client.get("/api/v1/nodes")
    for node in nodes["items"]:
        if node["metadata"]["name"].startswith("sandbox-node-"):
            with contextlib.suppress(Exception):
                await client.delete(f"/api/v1/nodes/{node['metadata']['name']}")
    # The route controller deletes the routes of Nodes that are gone on its next pass.
    if aws is None:
        await asyncio.sleep(ROUTE_PERIOD * 2)
        print("deleted the sandbox's Nodes; their routes go on the next route pass", file=out)
        return
    deadline = time.monotonic() + ROUTE_PERIOD * 2
    while time.monotonic() < deadline and daemon.poll() is None:
        if not await aws.routes_left():
            break
        await asyncio.sleep(0.5)
    print(
        f"deleted the sandbox's Nodes; moto holds {await aws.load_balancers_left()} load "
        f"balancers and {await aws.routes_left()} pod routes",
        file=out,
    )


def _start_hypervisor(names: list[str]) -> LibvirtdServer:
    """libvirtd on the test driver with one running domain per node name."""
    # A unix socket's path is limited to 107 bytes: a short directory of its own.
    server = LibvirtdServer(Path(tempfile.mkdtemp(prefix="kc-libvirtd-")))
    server.start()
    conn = server.connection()
    for i, name in enumerate(names):
        dom = conn.defineXML(server.domain_xml(name, vcpus=2 + 2 * (i % 2), memory_mib=4096))
        dom.create()
    return server


def _on_prem_config(workdir: Path, hypervisor: LibvirtdServer) -> Path:
    """The composite cloud-config: instances from libvirt, load balancers from ippool."""
    config = {
        "providers": {
            "libvirt": {
                "capabilities": ["instances"],
                "config": {
                    "hosts": [
                        {"uri": hypervisor.uri, "name": "hv1", "zone": "rack-1", "region": "dc-1"}
                    ],
                    "addressSources": ["agent", "lease"],
                },
            },
            "ippool": {
                "capabilities": ["loadBalancer"],
                "config": {"configMap": "", "pools": {"cidr-global": ON_PREM_POOL}},
            },
        }
    }
    path = workdir / "on-prem.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _simulated_config(options: SandboxOptions) -> dict[str, object]:
    config: dict[str, object] = {"unknownNodes": "create"}
    if options.latency:
        config["latency"] = f"{options.latency * 1000:g}ms"
    if options.failure_rate:
        config["failureRate"] = options.failure_rate
    return config


async def _provision(
    client: KubeClient, daemon: DaemonProcess, count: int, out: TextIO
) -> float | None:
    """Create ``count`` LoadBalancer Services; seconds until all have an ingress IP."""
    if not count:
        return 0.0
    services = "/api/v1/namespaces/default/services"
    started = time.monotonic()
    for i in range(count):
        await client.create(
            services,
            {
                "metadata": {"name": f"sandbox-lb-{i:03d}"},
                "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
            },
        )

    async def done() -> int:
        listed = await client.get(services)
        return sum(
            1 for s in listed["items"] if s.get("status", {}).get("loadBalancer", {}).get("ingress")
        )

    return await _while_alive(
        daemon, _watch_progress("provisioning load balancers", done, count, out, started)
    )


@dataclass(frozen=True)
class _Failures:
    killed: int = 0
    killed_took: float = 0.0
    shut_down: int = 0
    shut_down_took: float = 0.0


async def _failures(
    kubelets: SimulatedKubelets,
    daemon: DaemonProcess,
    options: SandboxOptions,
    out: TextIO,
    *,
    hypervisor: LibvirtdServer | None = None,
    aws: SandboxAws | None = None,
) -> _Failures | None:
    """``--kill`` and ``--shutdown``: kubelets die with their instances; the CCM reacts.

    Killed nodes' instances are terminated, so the CCM's lifecycle controller deletes
    the Nodes (and the service controller drops them from every load balancer); shut
    down ones keep their instances, so they get the shutdown taint instead. Either
    needs kube-controller-manager's part first: Ready turns Unknown after the grace
    period.
    """
    if not options.kill and not options.shutdown:
        return _Failures()
    victims = kubelets.names[-(options.kill + options.shutdown) :]
    killed, shut_down = victims[: options.kill], victims[options.kill :]
    for name in killed:
        kubelets.kill(name)
        if aws is not None:
            continue  # terminated below, in one call
        if hypervisor is None:
            daemon.cloud.set_instance_state(name, "terminated")
        else:  # the domain is destroyed and undefined
            dom = hypervisor.connection().lookupByName(name)
            dom.destroy()
            dom.undefine()
    for name in shut_down:
        kubelets.kill(name)
        if aws is not None:
            continue  # stopped below, in one call
        if hypervisor is None:
            daemon.cloud.set_instance_state(name, "shutdown")
        else:  # the domain is shut off
            hypervisor.connection().lookupByName(name).destroy()
    if aws is not None:
        await aws.terminate(killed)
        await aws.stop(shut_down)
    grace = options.kubelets.grace_period
    print(
        f"{len(killed)} kubelets died with their instances terminated, {len(shut_down)} with "
        f"their instances shut down; Ready turns Unknown after {grace:g} s without a Lease "
        "renewal",
        file=out,
        flush=True,
    )
    started = time.monotonic()

    async def deleted() -> int:
        return sum(1 for n in killed if kubelets.node(n) is None)

    async def tainted() -> int:
        return sum(
            1
            for n in shut_down
            if (node := kubelets.node(n)) is not None
            and any(t.key == wk.TAINT_SHUTDOWN for t in node.spec.taints)
        )

    waits = []
    if killed:
        waits.append(_watch_progress("deleting dead nodes", deleted, len(killed), out, started))
    if shut_down:
        waits.append(
            _watch_progress("tainting shut-down nodes", tainted, len(shut_down), out, started)
        )

    async def both() -> list[float]:
        return list(await asyncio.gather(*waits))

    took = await _while_alive(daemon, both())
    if took is None:
        return None
    return _Failures(
        killed=len(killed),
        killed_took=took[0] if killed else 0.0,
        shut_down=len(shut_down),
        shut_down_took=took[-1] if shut_down else 0.0,
    )


_T = TypeVar("_T")


async def _while_alive(daemon: DaemonProcess, work: Awaitable[_T]) -> _T | None:
    """Await ``work`` unless the daemon dies first (then print its log; None)."""
    task = asyncio.ensure_future(work)
    while not task.done():
        if _exited(daemon):
            task.cancel()
            return None
        await asyncio.sleep(0.2)
    return task.result()


def _exited(daemon: DaemonProcess) -> bool:
    """Whether the daemon has exited; if so, say so with the end of its log."""
    if daemon.poll() is None:
        return False
    print(f"error: the daemon exited; its log:\n{daemon.log()[-3000:]}", file=sys.stderr)
    return True


async def _keep_running(daemon: DaemonProcess, seconds: float | None) -> bool:
    """Wait ``seconds`` (None: until cancelled); False if the daemon exits meanwhile."""
    deadline = None if seconds is None else time.monotonic() + seconds
    while deadline is None or time.monotonic() < deadline:
        if _exited(daemon):
            return False
        left = 0.2 if deadline is None else deadline - time.monotonic()
        await asyncio.sleep(max(0.0, min(0.2, left)))
    return True


def _summary(
    out: TextIO,
    *,
    nodes: int,
    took: float,
    services: int,
    lb_took: float,
    failures: _Failures,
    calls: dict[str, dict[str, int]] | None,
    requests: Counter[str],
    state: Path | None,
    ingress: str = "IP",
) -> None:
    print(f"\nall {nodes} nodes initialised in {took:.2f} s (including daemon start-up)", file=out)
    if services:
        print(
            f"all {services} load balancers got an ingress {ingress} in {lb_took:.2f} s", file=out
        )
    if failures.killed:
        print(
            f"all {failures.killed} dead nodes deleted in {failures.killed_took:.2f} s "
            "(including the grace period)",
            file=out,
        )
    if failures.shut_down:
        print(
            f"all {failures.shut_down} shut-down nodes tainted in {failures.shut_down_took:.2f} s "
            "(including the grace period)",
            file=out,
        )
    if calls is None:
        print("cloud calls: counted by the simulated cloud only", file=out)
    else:
        print("cloud calls:", file=out)
        for method, count in sorted(calls.items()):
            print(f"  {method:<28} {count['count']:>6}  ({count['errors']} failed)", file=out)
    print("API requests by kube-ccm during the run (watches not counted):", file=out)
    for key, requested in sorted(requests.items()):
        if requested:
            print(f"  {key:<28} {requested:>6}", file=out)
    if state is not None:
        print(
            f"simulated cloud state: {state} (inspect with kube-ccm simcloud --state ...)",
            file=out,
        )


def _hints(
    out: TextIO,
    kubeconfig: Path,
    node: str,
    daemon: DaemonProcess,
    *,
    hypervisor: LibvirtdServer | None = None,
    aws: SandboxAws | None = None,
) -> None:
    kubectl = f"kubectl --kubeconfig {kubeconfig}"
    if aws is not None:
        print(
            "\ntry:\n"
            f"  {kubectl} get nodes -L topology.kubernetes.io/zone,"
            "node.kubernetes.io/instance-type\n"
            f"  {kubectl} get services   # ingress hostnames: the NLBs' DNS names\n"
            f"  {kubectl} annotate node {node} {KUBELET_ANNOTATION}=stopped   # its kubelet dies\n"
            f"{aws.hints(node)}",
            file=out,
        )
        return
    if hypervisor is not None:
        virsh = f"virsh -c '{hypervisor.uri}'"
        print(
            "\ntry:\n"
            f"  {kubectl} get nodes -L topology.kubernetes.io/zone,"
            "node.kubernetes.io/instance-type\n"
            f"  {kubectl} get ipaddresses   # the ippool's allocations\n"
            f"  {virsh} list --all\n"
            f"  {virsh} destroy {node}   # shut it off: the Node gets the shutdown taint",
            file=out,
        )
        return
    print(
        "\ntry:\n"
        f"  {kubectl} get nodes -L topology.kubernetes.io/zone,node.kubernetes.io/instance-type\n"
        f"  {kubectl} annotate node {node} {KUBELET_ANNOTATION}=stopped   # its kubelet dies\n"
        f"  kube-ccm simcloud --state {daemon.state_path} instances terminate {node}"
        "   # and its instance",
        file=out,
    )


def main(options: SandboxOptions) -> int:
    """Run the sandbox; Ctrl-C or SIGTERM stop it the same way: everything it started
    (kube-ccm, libvirtd, the control plane) is stopped before it exits."""

    async def run() -> int:
        task = asyncio.current_task()
        assert task is not None
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
        try:
            return await run_sandbox(options)
        except asyncio.CancelledError:
            print("stopped by SIGTERM", file=sys.stderr)
            return 0

    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(run())
    return 0
