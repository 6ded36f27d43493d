"""Daemon-level checks: ``kube-ccm run --cloud-provider=<name>`` on a real control plane.

Each check starts its own daemon with the target's :class:`DaemonSettings`, drives
Nodes and Services through the API server as kubelets and users do, and asks the
target's provider (built from the same cloud-config, so it sees the same cloud) what
the daemon did in the cloud.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from kube_ccm.api import wellknown as wk
from kube_ccm.api.objects import decode_service
from kube_ccm.cloudprovider import CloudProvider
from kube_ccm.runtime.client import ApiError, KubeClient
from kube_ccm.testing.cleanup import Cleanup
from kube_ccm.testing.conformance._harness import (
    Conformance,
    KitClientBuilder,
    Need,
    open_conformance,
    pod_cidr,
    require,
    unique,
)
from kube_ccm.testing.conformance._known import KnownFailures
from kube_ccm.testing.conformance._target import ConformanceTarget, DaemonSettings
from kube_ccm.testing.controlplane import ControlPlane
from kube_ccm.testing.daemon import DaemonProcess
from kube_ccm.testing.manifests import taint_keys
from kube_ccm.testing.waiting import eventually

FAST = (
    "--leader-elect=false",
    "--node-monitor-period=500ms",
    "--node-status-update-frequency=2s",
    "--route-reconciliation-period=500ms",
    "--cluster-cidr=10.244.0.0/16",
)
"""The kit's daemon flags: short periods, and a cluster CIDR for the route controller."""

UNINITIALIZED = {"key": wk.TAINT_UNINITIALIZED, "value": "true", "effect": "NoSchedule"}


@dataclass(eq=False)
class DaemonHarness:
    """Daemons of one check, the API objects it made, and waits that show the log."""

    conformance: Conformance
    settings: DaemonSettings
    _: KW_ONLY
    kubeconfig: Path
    client: KubeClient
    cleanup: Cleanup
    namespace: str
    workdir: Path
    process: DaemonProcess | None = field(default=None, init=False)
    _started: int = field(default=0, init=False)
    _exits: list[tuple[DaemonProcess, int | None]] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        self.conformance.listeners.append(self._restart_if_running)

    @property
    def wait_timeout(self) -> float:
        return self.conformance.target.wait_timeout

    # -- the daemon --------------------------------------------------------------

    def start(self) -> DaemonProcess:
        """Start ``kube-ccm run`` (or the settings' command) with the kit's flags."""
        assert self.process is None, "a daemon is already running"
        settings = self.settings
        workdir = self.workdir / f"daemon-{self._started}"
        self._started += 1
        process = DaemonProcess(
            kubeconfig=self.kubeconfig,
            workdir=workdir,
            provider=settings.cloud_provider,
            cloud_config_file=settings.cloud_config or workdir / "no-cloud-config",
            args=[*FAST, f"--cluster-name={self.conformance.cluster_name}", *settings.args],
            env=dict(settings.env),
        )
        # DaemonProcess runs `python -m kube_ccm run FLAGS`: keep its flags, and run them
        # with the settings' command.
        flags = process.argv[process.argv.index(f"--cloud-provider={settings.cloud_provider}") :]
        if settings.cloud_config is None:
            flags = [f for f in flags if not f.startswith("--cloud-config=")]
        process.argv = [*settings.command, *flags]
        self.process = process.start()
        return process

    async def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None:
            self._exits.append((process, await asyncio.to_thread(process.stop)))

    async def _restart_if_running(self) -> None:
        """The driver changed a cloud the daemon reads once: start it again."""
        if self.process is not None:
            await self.stop()
            self.start()

    def check_exits(self) -> None:
        """Every daemon of the check stopped cleanly on SIGTERM (status 0)."""
        for process, status in self._exits:
            assert status == 0, (
                f"the daemon exited with status {status} on SIGTERM (0 expected: aclose() "
                f"must return within seconds); its log:\n{process.log()[-3000:]}"
            )

    def log_tail(self) -> str:
        process = self.process
        if process is None:
            return "(no daemon running)"
        state = "" if process.poll() is None else f" (it exited with {process.poll()})"
        return f"the daemon's log{state}:\n{process.log()[-3000:]}"

    async def wait(self, predicate: Callable[[], Awaitable[bool]], what: str) -> None:
        try:
            await eventually(predicate, within=self.wait_timeout, interval=0.1, what=what)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.log_tail()}") from None

    # -- the API objects ------------------------------------------------------------

    async def create_node(
        self, name: str, *, tainted: bool = True, ready: str | None = "True", cidr: str = ""
    ) -> None:
        """Register a Node as a kubelet started with ``--cloud-provider=external`` does."""
        self.cleanup.add(f"/api/v1/nodes/{name}")
        spec: dict[str, Any] = {"taints": [UNINITIALIZED] if tainted else []}
        if cidr:
            spec |= {"podCIDR": cidr, "podCIDRs": [cidr]}
        status: dict[str, Any] = {"addresses": [{"type": "Hostname", "address": name}]}
        if ready is not None:
            status["conditions"] = [{"type": "Ready", "status": ready, "reason": "Conformance"}]
        await self.client.create(
            "/api/v1/nodes", {"metadata": {"name": name}, "spec": spec, "status": status}
        )

    async def set_ready(self, name: str, status: str) -> None:
        await self.client.patch(
            f"/api/v1/nodes/{name}/status",
            {"status": {"conditions": [{"type": "Ready", "status": status, "reason": "Test"}]}},
        )

    async def node(self, name: str) -> dict[str, Any] | None:
        return await self._get(f"/api/v1/nodes/{name}")

    async def wait_initialised(self, name: str) -> dict[str, Any]:
        async def initialised() -> bool:
            node = await self.node(name)
            return bool(node and wk.TAINT_UNINITIALIZED not in taint_keys(node))

        await self.wait(initialised, f"the Node {name} initialised (uninitialized taint removed)")
        node = await self.node(name)
        assert node is not None, f"the Node {name} is gone"
        return node

    async def not_ready_instance_node(self) -> str:
        """The daemon started, and the Node of a new instance initialised, then NotReady
        (its kubelet no longer heard from); returns the Node's name."""
        conformance = self.conformance
        conformance.require_instances()
        name = await conformance.create_instance()
        self.start()
        await self.create_node(name)
        await self.wait_initialised(name)
        await self.set_ready(name, "False")
        return name

    async def backend_node(self) -> str:
        """A Ready Node for load balancers: of a new instance when the target can make
        one (and the provider offers instances), else just a Node."""
        conformance = self.conformance
        if conformance.target.driver is not None and conformance.has_instances():
            name = await conformance.create_instance("lb")
            await self.create_node(name)
            await self.wait_initialised(name)
        else:
            name = unique("lb")
            await self.create_node(name, tainted=False)
        return name

    def service_path(self, name: str) -> str:
        return f"/api/v1/namespaces/{self.namespace}/services/{name}"

    async def service(self, name: str) -> dict[str, Any] | None:
        return await self._get(self.service_path(name))

    async def _get(self, path: str) -> dict[str, Any] | None:
        """The object at ``path``, or None when there is none."""
        try:
            found: dict[str, Any] = await self.client.get(path)
        except ApiError as exc:
            if exc.not_found:
                return None
            raise
        return found

    async def event_count(self, name: str, reason: str) -> int:
        listed = await self.client.get(
            f"/api/v1/namespaces/{self.namespace}/events",
            {"fieldSelector": f"involvedObject.name={name}"},
        )
        return sum(int(e.get("count") or 1) for e in listed["items"] if e.get("reason") == reason)


NO_DAEMON = (
    "the target gives no DaemonSettings (ConformanceTarget(daemon=...)), so the kit cannot "
    "run the daemon"
)

_NEEDS: dict[str, tuple[Need, ...]] = {
    "test_daemon_initialises_the_node_of_a_new_instance": ("instances", "driver"),
    "test_daemon_taints_the_node_of_a_stopped_instance_as_shut_down": ("instances", "driver"),
    "test_daemon_deletes_a_not_ready_node_whose_instance_is_gone": ("instances", "driver"),
    "test_daemon_creates_updates_and_deletes_a_load_balancer": ("load_balancer",),
    "test_daemon_creates_and_deletes_the_route_of_a_nodes_pod_cidr": ("routes",),
}
"""What each daemon-level check needs besides the daemon settings."""


def _precheck(target: ConformanceTarget, needs: tuple[Need, ...]) -> None:
    """Skip unless the provider offers what the check needs: a provider built (not
    initialised) just to read its capability accessors, and closed again."""
    if not needs:
        return
    source = target.provider
    provider = source if isinstance(source, CloudProvider) else source()
    try:
        require(provider, target, *needs)
    finally:
        if provider is not source:
            with contextlib.suppress(Exception):
                asyncio.run(asyncio.wait_for(provider.aclose(), 10))


class DaemonChecks(KnownFailures):
    """The daemon with the provider on a real control plane: what users see. Needs the
    ``kube_controlplane`` fixtures of ``kube_ccm.testing.pytest_plugin``, the target's
    :class:`DaemonSettings`, and for the Node checks its :class:`InstanceDriver`."""

    @pytest.fixture
    def conformance_kubeconfig(self, kube_controlplane: ControlPlane) -> Path:
        """The daemon's kubeconfig; override it to run the daemon with your RBAC."""
        return kube_controlplane.kubeconfig

    @pytest.fixture
    def conformance_cluster(
        self, request: pytest.FixtureRequest, conformance_provider: ConformanceTarget
    ) -> tuple[ControlPlane, Path]:
        """The control plane and the daemon's kubeconfig, asked for only once the check
        can run: a check the target cannot pass for want of a capability, a driver or
        daemon settings is skipped, saying why, before any control plane starts."""
        if conformance_provider.daemon is None:
            pytest.skip(NO_DAEMON)
        needs = _NEEDS.get(getattr(request.node, "originalname", request.node.name), ())
        _precheck(conformance_provider, needs)
        plane: ControlPlane = request.getfixturevalue("kube_controlplane")
        kubeconfig: Path = request.getfixturevalue("conformance_kubeconfig")
        return plane, kubeconfig

    @pytest_asyncio.fixture
    async def conformance_daemon(
        self,
        conformance_provider: ConformanceTarget,
        conformance_cluster: tuple[ControlPlane, Path],
        tmp_path: Path,
    ) -> AsyncIterator[DaemonHarness]:
        """A check's daemons (none started yet), the objects it makes in the cluster
        (deleted after it), and the target's provider built with clients of the real
        control plane, to ask what the daemon did."""
        plane, kubeconfig = conformance_cluster
        settings = conformance_provider.daemon
        assert settings is not None
        client = KubeClient.from_kubeconfig(plane.kubeconfig)
        builder = KitClientBuilder.from_kubeconfig(plane.kubeconfig)
        cleanup = Cleanup()
        # A namespace of its own, never reused (it stays Terminating without
        # kube-controller-manager).
        namespace = unique("conformance")
        try:
            await client.create("/api/v1/namespaces", {"metadata": {"name": namespace}})
            async with open_conformance(conformance_provider, client_builder=builder) as opened:
                harness = DaemonHarness(
                    opened,
                    settings,
                    kubeconfig=kubeconfig,
                    client=client,
                    cleanup=cleanup,
                    namespace=namespace,
                    workdir=tmp_path,
                )
                try:
                    yield harness
                finally:
                    await harness.stop()
                harness.check_exits()
        finally:
            try:
                await cleanup.run(client)
                with contextlib.suppress(ApiError):
                    await client.delete(f"/api/v1/namespaces/{namespace}")
            finally:
                await builder.aclose()
                await client.aclose()

    # -- Nodes ---------------------------------------------------------------------------

    @pytest.mark.asyncio
    async def test_daemon_initialises_the_node_of_a_new_instance(
        self, conformance_daemon: DaemonHarness
    ) -> None:
        """A kubelet's tainted Node of a running instance: the daemon removes the
        uninitialized taint and sets the providerID the provider reports."""
        daemon = conformance_daemon
        conformance = daemon.conformance
        conformance.require_instances()
        name = await conformance.create_instance()
        expected = await conformance.provider_id_of(name)
        daemon.start()
        await daemon.create_node(name)
        node = await daemon.wait_initialised(name)
        provider_id = node["spec"].get("providerID", "")
        assert provider_id == expected, (
            f"the Node's providerID is {provider_id!r}; the provider reports {expected!r}"
        )

    @pytest.mark.asyncio
    async def test_daemon_taints_the_node_of_a_stopped_instance_as_shut_down(
        self, conformance_daemon: DaemonHarness
    ) -> None:
        """NotReady Node, stopped instance: the shutdown taint, and the Node is kept;
        the instance runs again and the Node is Ready: the taint is gone."""
        daemon = conformance_daemon
        conformance = daemon.conformance
        name = await daemon.not_ready_instance_node()
        await conformance.stop_instance(name)

        async def tainted() -> bool:
            return wk.TAINT_SHUTDOWN in taint_keys(await daemon.node(name))

        await daemon.wait(tainted, f"the shutdown taint on the NotReady Node {name}")
        await conformance.start_instance(name)
        await daemon.set_ready(name, "True")

        async def untainted() -> bool:
            node = await daemon.node(name)
            assert node is not None, (
                f"the daemon deleted the Node {name}, whose instance was only stopped"
            )
            return wk.TAINT_SHUTDOWN not in taint_keys(node)

        await daemon.wait(untainted, f"the shutdown taint removed from the Ready Node {name}")

    @pytest.mark.asyncio
    async def test_daemon_deletes_a_not_ready_node_whose_instance_is_gone(
        self, conformance_daemon: DaemonHarness
    ) -> None:
        daemon = conformance_daemon
        name = await daemon.not_ready_instance_node()
        await daemon.conformance.delete_instance(name)

        async def deleted() -> bool:
            return await daemon.node(name) is None

        await daemon.wait(deleted, f"the NotReady Node {name} of a deleted instance deleted")

    # -- Services -----------------------------------------------------------------------

    @pytest.mark.asyncio
    async def test_daemon_creates_updates_and_deletes_a_load_balancer(
        self, conformance_daemon: DaemonHarness
    ) -> None:
        """A ``type: LoadBalancer`` Service gets the cleanup finalizer and the address the
        provider reports; a port change ensures it again, a new Node updates it; deleted,
        the load balancer goes first, then the finalizer, then the Service."""
        daemon = conformance_daemon
        conformance = daemon.conformance
        conformance.load_balancer()
        daemon.start()
        await daemon.backend_node()
        name = unique("web")
        path = daemon.cleanup.add(daemon.service_path(name))
        await daemon.client.create(
            f"/api/v1/namespaces/{daemon.namespace}/services",
            {
                "metadata": {"name": name},
                "spec": {
                    "type": "LoadBalancer",
                    "ports": [{"name": "http", "port": 80, "targetPort": 8080}],
                },
            },
        )

        async def provisioned() -> bool:
            svc = await daemon.service(name)
            return bool(
                svc
                and wk.FINALIZER_LOAD_BALANCER_CLEANUP in (svc["metadata"].get("finalizers") or [])
                and (svc.get("status") or {}).get("loadBalancer", {}).get("ingress")
            )

        await daemon.wait(provisioned, f"the Service {name} with the finalizer and an ingress")
        current = await daemon.service(name)
        assert current is not None
        service = decode_service(json.dumps(current))
        await conformance.reopen()
        observed = await conformance.get_load_balancer(service)
        assert observed is not None, "the provider reports no load balancer for the Service"
        written = [(i.ip, i.hostname) for i in service.status.load_balancer.ingress]
        reported = [(i.ip, i.hostname) for i in observed.ingress]
        assert written == reported, (
            f"the Service's ingress is {written}; the provider reports {reported}"
        )

        await daemon.client.patch(
            path,
            {"spec": {"ports": [{"name": "http", "port": 8080, "targetPort": 8080}]}},
            patch_type="merge",
        )

        async def ensured_again() -> bool:
            return await daemon.event_count(name, wk.REASON_ENSURED_LOAD_BALANCER) >= 2

        await daemon.wait(ensured_again, "a second EnsuredLoadBalancer after the port change")
        await daemon.backend_node()

        async def hosts_updated() -> bool:
            return await daemon.event_count(name, wk.REASON_UPDATED_LOAD_BALANCER) >= 1

        await daemon.wait(hosts_updated, "UpdatedLoadBalancer after a new Node")

        await daemon.client.delete(path)

        async def gone() -> bool:
            return await daemon.service(name) is None

        await daemon.wait(gone, f"the Service {name} deleted once its load balancer is")
        await conformance.reopen()
        after = await conformance.get_load_balancer(service)
        assert after is None, f"the Service is gone; the provider still reports {after}"
        assert service.metadata.uid not in await conformance.listed_uids(), (
            "the Service is gone; list_load_balancers still lists its load balancer"
        )

    # -- Routes -------------------------------------------------------------------------

    @pytest.mark.asyncio
    async def test_daemon_creates_and_deletes_the_route_of_a_nodes_pod_cidr(
        self, conformance_daemon: DaemonHarness
    ) -> None:
        daemon = conformance_daemon
        conformance = daemon.conformance
        conformance.routes()
        with_instance = conformance.target.driver is not None and conformance.has_instances()
        name = await conformance.create_instance("rt") if with_instance else unique("rt")
        cidr = pod_cidr()
        daemon.start()
        await daemon.create_node(name, tainted=False, cidr=cidr)

        async def network_available() -> bool:
            node = await daemon.node(name)
            return any(
                c["type"] == wk.NODE_CONDITION_NETWORK_UNAVAILABLE
                and c["status"] == wk.CONDITION_FALSE
                and c.get("reason") == wk.REASON_ROUTE_CREATED
                for c in ((node or {}).get("status", {}).get("conditions") or [])
            )

        await daemon.wait(network_available, f"NetworkUnavailable=False/RouteCreated on {name}")

        async def listed() -> bool:
            await conformance.reopen()
            found = await conformance.call(
                "ListRoutes", conformance.routes().list_routes(conformance.cluster_name)
            )
            return any(r.target_node == name and r.destination_cidr == cidr for r in found)

        assert await listed(), f"the provider lists no route to {name} for {cidr}"
        await daemon.client.delete(f"/api/v1/nodes/{name}")

        async def removed() -> bool:
            return not await listed()

        await daemon.wait(removed, f"the route to {cidr} removed with the Node {name}")
