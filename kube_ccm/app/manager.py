"""The controller manager: from validated options to running controllers.

Order of events, as upstream:

1. build the cloud provider from ``--cloud-provider``/``--cloud-config`` (fatal
   on error, on ``external``/nil, and on an untagged cloud without
   ``--allow-untagged-cloud``);
2. build the clients (own credentials, per-controller identities) and the
   shared informers;
3. with ``--leader-elect`` (default) wait to acquire the Lease; then call the
   provider's ``initialize`` (and ``set_informers``), start each enabled
   controller (a controller that cannot run with this provider is skipped with
   a log line, not fatal), then start the informers;
4. run until SIGTERM/SIGINT, then shut down gracefully: controllers stop
   taking work, in-flight syncs get ``shutdown_grace_period`` to finish, then
   every client is fenced (no write leaves the process after that) and the
   tasks are cancelled. Exit 0.
5. Losing the lease fences every client at once, stops the controllers and
   exits 1 (upstream: "leaderelection lost").
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import math
import random
import signal
from collections.abc import Mapping
from typing import Any

from kube_ccm.api import wellknown as wk
from kube_ccm.api.selectors import parse_selector
from kube_ccm.app.descriptors import (
    CONTROLLER_IDENTITIES,
    CONTROLLERS,
    Controller,
    ControllerContext,
    ControllerDescriptor,
    StartupError,
)
from kube_ccm.app.options.config import DaemonConfig
from kube_ccm.app.options.configz import configz
from kube_ccm.app.options.leadermigration import migration_split
from kube_ccm.app.options.validation import (
    ClusterCIDRError,
    NodeIpamConfigError,
    parse_cluster_cidrs,
    parse_node_ipam,
)
from kube_ccm.app.serving.certs import serving_context
from kube_ccm.app.serving.delegated import Authorizer, AuthSetupError, build_authenticator
from kube_ccm.app.serving.server import HealthChecks, SecureServer
from kube_ccm.app.serving.webhooks import WebhookServer, build_handlers, require_client_certificates
from kube_ccm.app.workers import WorkerExitedError, WorkerPool, guard_readiness
from kube_ccm.cloudprovider import (
    CloudConfigError,
    CloudProvider,
    CloudProviderError,
    InformerUser,
    init_cloud_provider,
)
from kube_ccm.controllers.cloudcalls import CloudCalls, guard
from kube_ccm.controllers.nodeipam import NodeIpamOptions
from kube_ccm.controllers.nodescope import NodeScope
from kube_ccm.controllers.route import IPNetwork
from kube_ccm.controllers.servingcerts import UntrustedInstancesError, require_authoritative
from kube_ccm.providers.composite import CompositeProvider
from kube_ccm.runtime.client import ClientOptions, KubeClient, RestClientMetrics
from kube_ccm.runtime.clientbuilder import SimpleClientBuilder
from kube_ccm.runtime.dryrun import NOT_CHANGES, DryRun
from kube_ccm.runtime.events import ApiEventRecorder
from kube_ccm.runtime.informer import InformerFactory
from kube_ccm.runtime.kubeconfig import KubeConfigError, load_config
from kube_ccm.runtime.leaderelection import LeaderElector, LeadershipLostError
from kube_ccm.runtime.metrics import Metrics
from kube_ccm.runtime.shard import Shard

__all__ = [
    "Daemon",
    "build_cloud",
    "node_ipam_before_leading",
    "run_daemon",
    "validate_before_leading",
]

log = logging.getLogger(__name__)


def build_cloud(config: DaemonConfig) -> CloudProvider:
    """Steps 1 of the startup: the provider, or a StartupError that says what to do."""
    try:
        cloud = init_cloud_provider(config.cloud_provider, config.cloud_config)
    except CloudConfigError as exc:
        raise StartupError(f"Cloud provider could not be initialized: {exc}") from exc
    if cloud is None:
        raise StartupError(
            "Cloud provider is nil: --cloud-provider must name an installed provider "
            f"(got {config.cloud_provider!r}); `external` is what kubelets are given, "
            "not this daemon"
        )
    if not cloud.has_cluster_id():
        if not config.allow_untagged_cloud:
            raise StartupError(
                "no ClusterID found. A ClusterID is required for the cloud provider to function "
                "properly: tag the cloud resources with the cluster ID, or pass "
                "--allow-untagged-cloud=true (deprecated)"
            )
        log.warning("detected a cluster without a ClusterID; continuing (--allow-untagged-cloud)")
    return cloud


def validate_before_leading(config: DaemonConfig, cloud: CloudProvider) -> tuple[IPNetwork, ...]:
    """What can be checked without the cloud's network or the lease, checked before
    leader election: a replica that could never run its controllers must fail at once
    with one line, not after winning the Lease (where it would crash-loop holding it).

    Returns ``--cluster-cidr`` parsed when the route controller will run (else ``()``):
    the one place it is parsed."""
    main, migrated, _elsewhere = migration_split(config)
    if wk.CONTROLLER_KUBELET_SERVING_CERT_APPROVER in main | migrated:
        try:
            require_authoritative(cloud)
        except ValueError:
            pass  # no instances at all: the controller is skipped with a warning, as upstream
        except UntrustedInstancesError as exc:
            raise StartupError(str(exc)) from exc
    runs_routes = wk.CONTROLLER_NODE_ROUTE in main | migrated
    if runs_routes and config.configure_cloud_routes and cloud.routes() is not None:
        try:
            return parse_cluster_cidrs(config.cluster_cidr)
        except ClusterCIDRError as exc:
            raise StartupError(str(exc)) from exc
    return ()


def node_ipam_before_leading(config: DaemonConfig) -> NodeIpamOptions | None:
    """The node IPAM flags checked before leader election, as ``--cluster-cidr`` is for
    routes: the settings when node-ipam-controller will run (enabled and
    ``--allocate-node-cidrs``), else None."""
    main, migrated, _elsewhere = migration_split(config)
    enabled = wk.CONTROLLER_NODE_IPAM in main | migrated
    if config.allocate_node_cidrs and wk.CONTROLLER_NODE_IPAM not in config.controllers:
        # Upstream's sample CCM runs it with '*'; here it is off unless named.
        log.warning(
            "--allocate-node-cidrs is set but %s is not in --controllers: no pod CIDRs are "
            "allocated; name it to run it (--controllers=*,%s)",
            wk.CONTROLLER_NODE_IPAM,
            wk.ALIAS_NODE_IPAM,
        )
    if not enabled or not config.allocate_node_cidrs:
        return None
    try:
        return parse_node_ipam(
            cluster_cidr=config.cluster_cidr,
            service_cluster_ip_range=config.service_cluster_ip_range,
            node_cidr_mask_size=config.node_cidr_mask_size,
            node_cidr_mask_size_ipv4=config.node_cidr_mask_size_ipv4,
            node_cidr_mask_size_ipv6=config.node_cidr_mask_size_ipv6,
            cidr_allocator_type=config.cidr_allocator_type,
        )
    except NodeIpamConfigError as exc:
        raise StartupError(str(exc)) from exc


def _expected_exit(error: BaseException) -> BaseException | None:
    """The LeadershipLostError or StartupError that ended the run, also when task groups
    wrapped it (with the errors of tasks it brought down), else None."""
    if isinstance(error, LeadershipLostError | StartupError | WorkerExitedError):
        return error
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            found = _expected_exit(inner)
            if found is not None:
                return found
    return None


async def _cancel_and_wait(task: asyncio.Task[None]) -> None:
    """Cancel ``task`` unless it is done, and wait for it to end (its error is not ours)."""
    if not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


DRY_RUN_SUMMARY_PERIOD = 300.0
"""How often a ``--dry-run`` daemon logs what it would have changed so far."""
CLOSE_TIMEOUT = 10.0
EVENT_FLUSH_GRACE = 2.0
"""Seconds a graceful shutdown spends writing queued Events after the controllers drained."""
"""Seconds the provider's ``aclose`` may take on the way out."""


class Daemon:
    """One run of the cloud-controller-manager."""

    def __init__(self, config: DaemonConfig, cloud: CloudProvider) -> None:
        self._cloud_initialized = False
        self.config = config
        self.cluster_cidrs = validate_before_leading(config, cloud)
        self.node_ipam = node_ipam_before_leading(config)
        try:
            client_config = load_config(config.kubeconfig, master=config.master)
        except KubeConfigError as exc:
            raise StartupError(str(exc)) from exc
        self.metrics = Metrics()
        # Every call of every controller into the provider passes the cloud-call boundary.
        self.cloud_calls = CloudCalls(
            cloud.provider_name(),
            self.metrics,
            config.cloud_calls,
            timeout=config.cloud_call_timeout,
        )
        # A composite's calls are counted and logged under the member serving each.
        self.cloud: CloudProvider = guard(
            cloud,
            self.cloud_calls,
            cloud.serving if isinstance(cloud, CompositeProvider) else None,
        )
        if isinstance(cloud, CompositeProvider):
            log.info(
                "composite cloud provider: %s",
                ", ".join(f"{c} from {p}" for c, p in cloud.describe().items()),
            )
        self.clients = SimpleClientBuilder(
            client_config,
            base_user_agent=wk.USER_AGENT,
            qps=config.kube_api_qps,
            burst=config.kube_api_burst,
            transport=config.kube_api_transport,
            content_type=config.kube_api_content_type,
            metrics=RestClientMetrics(self.metrics),
            service_accounts=CONTROLLER_IDENTITIES
            if config.use_service_account_credentials
            else (),
        )
        self.dry_run: DryRun | None = None
        if config.dry_run:
            self.dry_run = DryRun()
            self.clients.set_dry_run(self.dry_run)
            self.cloud_calls.dry_run = self.dry_run
            log.warning(
                "dry run: API writes go as dryRun=All and nothing is persisted; cloud calls "
                "that change something are not made; what would change is logged"
            )
        self.client = self.clients.client("")
        self._extra_clients: list[KubeClient] = []
        self.informers = InformerFactory(self.clients.client(wk.IDENTITY_SHARED_INFORMERS))
        self._recorders: dict[str, ApiEventRecorder] = {}
        self.controllers: list[Controller] = []
        self.shards: Mapping[str, Shard] = {}
        """In a worker process (``--worker-processes``): the shard of each sharded controller."""
        self.pool: WorkerPool | None = None
        """With ``--worker-processes`` > 1, once leading: the worker processes."""
        self.health = HealthChecks()
        self.health.ready = self._ready
        self.health.add_informational("cloud", self.cloud_calls.health)
        self._synced = False
        self.caches_synced = asyncio.Event()
        """Set with ``_synced``: the controllers' informers have synced."""
        self.stop = asyncio.Event()
        self.elector: LeaderElector | None = None
        self._running = self.metrics.gauge(
            wk.METRIC_RUNNING_MANAGED_CONTROLLERS,
            "Indicates where instances of a controller are currently running",
            ("name", "manager"),
        )
        self._leader_status = self.metrics.gauge(
            wk.METRIC_LEADER_ELECTION_MASTER_STATUS,
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates "
            "backup, 1 indicates master. 'name' is the string used to identify the lease.",
            ("name",),
        )

    def recorder(self, component: str) -> ApiEventRecorder:
        existing = self._recorders.get(component)
        if existing is None:
            existing = ApiEventRecorder(self.client, component)
            self._recorders[component] = existing
        return existing

    # -- the run --------------------------------------------------------------

    async def run(self) -> int:
        """Serve, lead (or wait to), run the controllers until stopped; the exit status.

        One exit stack owns everything started here and stops it in reverse order on
        every way out (a stop signal, a failure, a lost lease, a start-up error, being
        cancelled): the main task is cancelled first (after the graceful shutdown has
        fenced every client, on a signal), then the signal handlers go, the provider
        is closed, a dry run's summary is logged, the servers stop and last the clients
        close.
        """
        async with contextlib.AsyncExitStack() as stack:
            stack.push_async_callback(self._close_clients)
            webhooks = await self._start_webhooks()
            if webhooks is not None:
                stack.push_async_callback(webhooks.stop)
            secure = await self._start_secure_serving()
            if secure is not None:
                stack.push_async_callback(secure.stop)
            if self.dry_run is not None:
                stack.callback(self._log_dry_run_summary, self.dry_run)
            stack.push_async_callback(self._close_cloud)
            self._handle_stop_signals(stack)
            work = asyncio.create_task(self._lead_or_start(), name="ccm-main")
            stack.push_async_callback(_cancel_and_wait, work)
            stopping = asyncio.create_task(self.stop.wait(), name="ccm-stop")
            stack.callback(stopping.cancel)
            await asyncio.wait({work, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if work.done():
                status = self._exit_status(work)
            else:
                await self._graceful_shutdown(work)
                status = 0
        return status

    def _handle_stop_signals(self, stack: contextlib.AsyncExitStack) -> None:
        """SIGTERM and SIGINT set ``stop``, until the stack unwinds."""
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._request_stop, signum)
            stack.callback(loop.remove_signal_handler, signum)

    @staticmethod
    def _log_dry_run_summary(dry_run: DryRun) -> None:
        log.info("%s", dry_run.summary())

    async def _close_clients(self) -> None:
        await self.clients.aclose()
        for client in self._extra_clients:
            await client.aclose()

    async def _start_secure_serving(self) -> SecureServer | None:
        """The secure port; None with ``--secure-port=0``."""
        config = self.config
        if not config.secure_port:
            return None
        auth = config.delegated_auth
        try:
            authenticator = await build_authenticator(
                auth, self._auth_client(auth.authentication_kubeconfig, "authentication")
            )
        except AuthSetupError as exc:
            raise StartupError(str(exc)) from exc
        authorizer = Authorizer(
            always_allow_paths=auth.authorization_always_allow_paths,
            reviewer=self._auth_client(auth.authorization_kubeconfig, "authorization"),
            allowed_ttl=auth.authorization_webhook_cache_authorized_ttl,
            denied_ttl=auth.authorization_webhook_cache_unauthorized_ttl,
        )
        try:
            context, _ = serving_context(
                cert_file=config.tls_cert_file,
                key_file=config.tls_private_key_file,
                cert_dir=config.cert_dir,
            )
            server = SecureServer(
                self.health,
                self.metrics,
                self._configz,
                bind_address=config.bind_address,
                port=config.secure_port,
                ssl_context=context,
                authenticator=authenticator,
                authorizer=authorizer,
            )
            await server.start()
        except (OSError, ValueError) as exc:
            raise StartupError(
                f"cannot serve on {config.bind_address}:{config.secure_port}: {exc}; check "
                "--secure-port, --bind-address and the --tls-* flags (--secure-port=0 turns "
                "serving off)"
            ) from exc
        return server

    def _auth_client(self, kubeconfig: str, purpose: str) -> KubeClient:
        """The client that asks the API server about requests to the secure port.

        ``--authentication-kubeconfig``/``--authorization-kubeconfig`` when given,
        else the daemon's own configuration (in-cluster or ``--kubeconfig``).
        """
        if not kubeconfig:
            return self.clients.client(wk.IDENTITY_DELEGATED_AUTH)
        try:
            client = KubeClient.from_kubeconfig(
                kubeconfig,
                options=ClientOptions(user_agent=f"{wk.USER_AGENT}/{wk.IDENTITY_DELEGATED_AUTH}"),
            )
        except KubeConfigError as exc:
            raise StartupError(f"--{purpose}-kubeconfig: {exc}") from exc
        self._extra_clients.append(client)
        return client

    def _configz(self) -> dict[str, Any]:
        return configz(self.config, self.cloud)

    def _ready(self) -> bool:
        if self._synced:
            return True
        # A standby replica is ready to take over; readiness is about the leader's caches.
        return self.elector is not None and not self.elector.is_leader

    async def _start_webhooks(self) -> WebhookServer | None:
        """The webhook listener, on every replica; None when not enabled."""
        config = self.config
        gate = config.feature_gates.get("CloudControllerManagerWebhook", False)
        if not (gate and config.webhooks and config.webhook_secure_port):
            if config.webhooks and not gate:
                log.warning(
                    "--webhooks is set but the feature gate CloudControllerManagerWebhook is off: "
                    "add --feature-gates=CloudControllerManagerWebhook=true"
                )
            return None
        handlers = build_handlers(config.webhooks, self.cloud)
        if not handlers:
            return None
        try:
            context, _ = serving_context(
                cert_file=config.webhook_tls_cert_file,
                key_file=config.webhook_tls_private_key_file,
                cert_dir=config.webhook_cert_dir,
                pair_name="cloud-controller-manager-webhook",
            )
            if config.webhook_client_ca_file:
                require_client_certificates(context, config.webhook_client_ca_file)
            server = WebhookServer(
                handlers,
                self.metrics,
                bind_address=config.webhook_bind_address,
                port=config.webhook_secure_port,
                ssl_context=context,
            )
            await server.start()
        except (OSError, ValueError) as exc:
            raise StartupError(
                f"cannot serve webhooks on {config.webhook_bind_address}:"
                f"{config.webhook_secure_port}: {exc}; check --webhook-secure-port and the "
                "--webhook-tls-* and --webhook-client-ca-file flags"
            ) from exc
        return server

    async def _summarise_dry_run(self, dry_run: DryRun) -> None:
        while True:
            await asyncio.sleep(DRY_RUN_SUMMARY_PERIOD)
            log.info("%s", dry_run.summary())

    async def _close_cloud(self) -> None:
        """The provider's ``aclose``, once, if ``initialize`` was called; bounded, never raising."""
        if not self._cloud_initialized:
            return
        self._cloud_initialized = False
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT):
                await self.cloud.aclose()
        except TimeoutError:
            log.warning("the cloud provider did not close within %.0f s", CLOSE_TIMEOUT)
        except Exception as exc:
            log.warning("closing the cloud provider failed: %s", exc)
        else:
            log.info("closed the cloud provider")

    def _request_stop(self, signum: int) -> None:
        log.info("received %s: shutting down", signal.Signals(signum).name)
        self.stop.set()

    def _exit_status(self, work: asyncio.Task[None]) -> int:
        if work.cancelled():
            return 1
        error = work.exception()
        if error is None:
            return 0
        expected = _expected_exit(error)
        if expected is not None:
            # Losing the lease is how a failover works, and a bad setting is the user's
            # to fix: one line each, as upstream ("leaderelection lost"), no traceback.
            log.error("%s", expected)
        else:
            log.error("the controller manager failed: %s", error, exc_info=error)
        return 1

    async def _graceful_shutdown(self, work: asyncio.Task[None]) -> None:
        grace = self.config.shutdown_grace_period
        if self.pool is not None:
            await self.pool.shutdown(grace)  # the workers drain as this process would
        try:
            async with asyncio.timeout(grace):
                await asyncio.gather(
                    *(c.shutdown() for c in self.controllers), return_exceptions=True
                )
        except TimeoutError:
            log.warning("in-flight work did not finish within %.0f s; abandoning it", grace)
        # The Events the drained work fired are written before writes stop (bounded):
        # a user reading `kubectl describe` after a rollout sees how the last syncs ended.
        await asyncio.gather(
            *(r.stop(EVENT_FLUSH_GRACE) for r in self._recorders.values()),
            return_exceptions=True,
        )
        self.clients.fence_all("the controller manager is shutting down")
        self.cloud_calls.fence("the controller manager is shutting down")
        work.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await work
        log.info("shut down cleanly")

    async def _lead_or_start(self) -> None:
        if not self.config.leader_elect:
            await self._start()
            return
        self.elector = LeaderElector(
            self.client,
            self.config.leader_election,
            recorder=self.recorder(wk.COMPONENT_NAME),
            on_leader_change=self._on_leader_change,
        )
        self.health.add("leaderElection", self.elector.healthy)
        elector = self.elector
        leases = elector.lease_collection_path

        def write_guard(method: str, path: str) -> str | None:
            # Held back: what the controllers write. Never: the elector's own writes,
            # the reviews that authenticate scrapes and webhook calls (standbys serve
            # those too) and ServiceAccount token requests.
            if path.startswith((leases, *NOT_CHANGES)) or path.endswith("/token"):
                return None
            return elector.lease_in_doubt()

        self.clients.set_write_guard(write_guard)
        self.cloud_calls.set_guard(elector.lease_in_doubt)
        async with asyncio.TaskGroup() as group:
            group.create_task(self.recorder(wk.COMPONENT_NAME).run())
            group.create_task(self.elector.run(self._start))

    def _on_leader_change(self, leader: bool, lease: str = "") -> None:
        self._leader_status.labels(name=lease or self.config.leader_election.name).set(int(leader))
        if not leader:
            # Before anything else: no write may leave this process any more, and no
            # cloud call may start (a mutation by a replica that no longer leads could
            # undo the new leader's work).
            self.clients.fence_all("leadership lost")
            self.cloud_calls.fence("leadership lost")
            if self.pool is not None:
                self.pool.kill()

    async def _start(self) -> None:
        if self.config.worker_processes > 1:
            await self._run_workers()
            return
        self._cloud_initialized = True  # aclose() is owed from here on, even if this raises
        try:
            await self.cloud.initialize(self.clients, self.stop)
        except CloudProviderError as exc:
            # The provider's own message says what is wrong (credentials, region, an
            # endpoint): one line, as for any start-up error, no traceback.
            raise StartupError(f"the cloud provider could not start: {exc}") from exc
        if isinstance(self.cloud, InformerUser):
            self.cloud.set_informers(self.informers)
        ctx = ControllerContext(
            config=self.config,
            cloud=self.cloud,
            clients=self.clients,
            informers=self.informers,
            metrics=self.metrics,
            recorder=self.recorder,
            cluster_cidrs=self.cluster_cidrs,
            node_ipam=self.node_ipam,
            shards=self.shards,
            scope=NodeScope(
                provider=self.cloud.provider_name(),
                selector=parse_selector(self.config.node_selector),
            ),
        )
        known = {c.name for c in CONTROLLERS}
        for name in sorted(self.config.controllers - known):
            log.warning("Skipping %s: not available in this version of kube-ccm", name)
        for name in known - self.config.controllers:
            log.info("%s is disabled", name)
        main, migrated, elsewhere = migration_split(self.config)
        for name in sorted(elsewhere):
            log.info(
                "%s is run by %s during the leader migration: not started here",
                name,
                self.config.leader_migration_controllers[name],
            )
        # Every controller is built now, so its informers are registered before they
        # start; a migrated one only runs once the migration lock is held.
        first = self._build_controllers(ctx, main)
        later = self._build_controllers(ctx, migrated)
        async with asyncio.TaskGroup() as group:
            if self.dry_run is not None:
                group.create_task(self._summarise_dry_run(self.dry_run))
            for recorder in list(self._recorders.values()):
                if recorder.component != wk.COMPONENT_NAME:
                    group.create_task(recorder.run())
            group.create_task(self.informers.run())
            group.create_task(self._mark_synced())
            # Each controller identity's ServiceAccount exists once its controller runs
            # (--use-service-account-credentials), as upstream's client builder makes it.
            group.create_task(self.clients.prime_service_accounts())
            await self._start_controllers(group, first)
            if later:
                group.create_task(self._lead_migrated(later))
            if not first and not later:
                log.info(
                    "no controller to run here; serving %s until stopped",
                    "webhooks and health" if self.config.webhooks else "health",
                )
            # Run until stopped or until a task fails, even with nothing else to do: a
            # webhook-only replica must keep its webhooks up.
            group.create_task(self.stop.wait())

    async def _run_workers(self) -> None:
        """``--worker-processes``: the controllers run in worker processes, this one
        holds the lease and serves (:mod:`kube_ccm.app.workers`)."""
        elector = self.elector
        pool = WorkerPool(
            self.config, elector.held_until if elector is not None else lambda: math.inf
        )
        self.pool = pool
        self.metrics.others = pool.metrics
        config = self.config
        if (
            wk.CONTROLLER_CLOUD_NODE_LIFECYCLE in config.controllers
            and config.node_deletion_guard
            and config.enable_node_deletion
        ):

            async def guard_in_workers() -> tuple[bool, str]:
                return guard_readiness(await pool.metrics())

            self.health.add_readiness_info(wk.READYZ_NODE_DELETION_GUARD, guard_in_workers)

        async def mark_synced() -> None:
            await pool.synced.wait()
            self._synced = True
            self.caches_synced.set()

        async with asyncio.TaskGroup() as group:
            group.create_task(pool.run())
            group.create_task(mark_synced())

    def _build_controllers(
        self, ctx: ControllerContext, names: frozenset[str]
    ) -> list[tuple[ControllerDescriptor, Controller]]:
        built = []
        for descriptor in CONTROLLERS:
            if descriptor.name not in names:
                continue
            try:
                built.append((descriptor, descriptor.build(ctx, descriptor.names)))
            except ValueError as exc:
                log.warning("Skipping %s: %s", descriptor.name, exc)
        return built

    async def _start_controllers(
        self,
        group: asyncio.TaskGroup,
        controllers: list[tuple[ControllerDescriptor, Controller]],
    ) -> None:
        """Start each controller; between two starts wait ``--controller-start-interval``
        plus up to as much again at random (upstream's jitter factor 1.0)."""
        interval = self.config.controller_start_interval
        for index, (descriptor, controller) in enumerate(controllers):
            if index and interval > 0:
                await asyncio.sleep(interval * (1 + random.random()))
            self.controllers.append(controller)
            self.health.add(descriptor.name, lambda: True)
            checks = getattr(controller, "readiness_checks", None)
            for name, check in (checks() if checks is not None else {}).items():
                self.health.add_readiness_info(name, check)
            group.create_task(self._run_controller(descriptor, controller))
            log.info("Started %s", descriptor.name)

    async def _lead_migrated(
        self, controllers: list[tuple[ControllerDescriptor, Controller]]
    ) -> None:
        """Hold the migration Lease and run the migrated controllers under it;
        losing it raises LeadershipLostError, which ends the daemon with status 1."""
        assert self.elector is not None
        config = dataclasses.replace(
            self.config.leader_election,
            name=self.config.leader_migration_lease_name,
            identity=self.elector.identity,
        )
        elector = LeaderElector(
            self.client,
            config,
            recorder=self.recorder(wk.COMPONENT_NAME),
            on_leader_change=functools.partial(self._on_leader_change, lease=config.name),
        )

        async def run() -> None:
            async with asyncio.TaskGroup() as group:
                await self._start_controllers(group, controllers)

        await elector.run(run)

    async def _mark_synced(self) -> None:
        await self.informers.wait_synced()
        self._synced = True
        self.caches_synced.set()

    async def _run_controller(
        self, descriptor: ControllerDescriptor, controller: Controller
    ) -> None:
        running = self._running.labels(name=descriptor.metric_name, manager=wk.COMPONENT_NAME)
        running.set(1)
        try:
            await controller.run()
        finally:
            running.set(0)


async def run_daemon(config: DaemonConfig) -> int:
    """Build and run the daemon; the exit status (1 with a logged reason on failure)."""
    try:
        cloud = build_cloud(config)
        daemon = Daemon(config, cloud)  # validate_before_leading first
    except StartupError as exc:
        log.error("%s", exc)
        return 1
    try:
        return await daemon.run()
    except StartupError as exc:
        log.error("%s", exc)  # the run has closed what it opened
        return 1
