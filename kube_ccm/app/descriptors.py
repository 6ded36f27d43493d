"""The controllers the manager can run: one descriptor each, in one tuple.

As kube-controller-manager's ``ControllerDescriptor``: a controller's names (from
:mod:`kube_ccm.api.wellknown`, where every name shared with the rest of Kubernetes
is typed once), its constructor and whether ``*`` in ``--controllers`` turns it on.
Everything else the daemon needs is derived from :data:`CONTROLLERS`: the
``--controllers`` grammar and help, the identities that become ServiceAccounts with
``--use-service-account-credentials``, the ``running_managed_controllers`` labels.

Adding a controller: its names in ``wellknown`` (constants and a ``ControllerNames``),
a builder here, and one :class:`ControllerDescriptor` row in :data:`CONTROLLERS`.

A builder may raise ``ValueError`` for "this provider cannot run it" (a missing
capability, or a flag that turns it off): the controller is skipped with a log
line, as upstream. It raises :class:`StartupError` for a setting that is wrong.
Capabilities are checked by the controllers' own constructors (each knows which
interface it needs), so a descriptor does not restate them.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final, Protocol

from kube_ccm.api import wellknown as wk
from kube_ccm.api.objects import Node, PersistentVolume, Service
from kube_ccm.app.options.config import DaemonConfig
from kube_ccm.app.options.featuregates import WATCH_BASED_ROUTES_RECONCILIATION
from kube_ccm.cloudprovider import CloudProvider, NodePodCIDRs
from kube_ccm.controllers.deletionguard import DeletionGuard
from kube_ccm.controllers.lbgc import LoadBalancerGCController
from kube_ccm.controllers.node import CloudNodeController, NodeControllerOptions
from kube_ccm.controllers.nodeipam import NodeIpamController, NodeIpamOptions
from kube_ccm.controllers.nodeipam_cloud import CloudAllocatorController, CloudAllocatorOptions
from kube_ccm.controllers.nodelifecycle import CloudNodeLifecycleController
from kube_ccm.controllers.nodescope import EVERY_NODE, NodeScope
from kube_ccm.controllers.podcidrholders import LateHolders
from kube_ccm.controllers.pvlabel import PersistentVolumeLabelController
from kube_ccm.controllers.route import IPNetwork, RouteController, RouteControllerOptions
from kube_ccm.controllers.service import ServiceController, ServiceControllerOptions
from kube_ccm.controllers.servingcerts import (
    KubeletServingCertApprover,
    UntrustedInstancesError,
    require_authoritative,
)
from kube_ccm.runtime.clientbuilder import SimpleClientBuilder
from kube_ccm.runtime.events import ApiEventRecorder
from kube_ccm.runtime.informer import Informer, InformerFactory
from kube_ccm.runtime.metrics import Metrics
from kube_ccm.runtime.resources import (
    CERTIFICATE_SIGNING_REQUESTS,
    NODES,
    PERSISTENT_VOLUMES,
    SERVICES,
)
from kube_ccm.runtime.shard import WHOLE, Shard


class StartupError(Exception):
    """The daemon cannot start; the message says what to fix. Exit status 1."""


class Controller(Protocol):
    """What the manager needs of a controller."""

    name: str

    async def run(self) -> None:
        """Work until cancelled."""

    async def shutdown(self) -> None:
        """Stop taking new work; return when in-flight work is done."""


@dataclass
class ControllerContext:
    """What a controller's constructor may use."""

    config: DaemonConfig
    cloud: CloudProvider
    clients: SimpleClientBuilder
    informers: InformerFactory
    metrics: Metrics
    recorder: Callable[[str], ApiEventRecorder]
    cluster_cidrs: tuple[IPNetwork, ...] = ()
    """``--cluster-cidr``, parsed once by ``validate_before_leading`` (``()`` when the
    route controller does not run)."""
    scope: NodeScope = EVERY_NODE
    """The Nodes this CCM manages (its provider's, matching ``--node-selector``)."""
    node_ipam: NodeIpamOptions | None = None
    """The node IPAM flags, checked once by ``node_ipam_before_leading`` (None when
    node-ipam-controller does not run)."""
    pod_cidr_holders: LateHolders = dataclasses.field(default_factory=LateHolders)
    """The range allocator's holders, bound when node-ipam-controller is built (after the
    route controller, which reads them: see :func:`_node_route`)."""
    shards: Mapping[str, Shard] = dataclasses.field(default_factory=dict)
    """Controller name → the shard of its keys this process syncs (a worker process
    of ``--worker-processes``); a controller not named syncs every key."""

    def shard(self, controller: str) -> Shard:
        return self.shards.get(controller, WHOLE)

    def nodes(self) -> Informer[Node]:
        return self.informers.informer(NODES, name="nodes")

    def volumes(self) -> Informer[PersistentVolume]:
        return self.informers.informer(PERSISTENT_VOLUMES, name="persistentvolumes")

    def services(self) -> Informer[Service]:
        return self.informers.informer(SERVICES, name="services")


ControllerBuilder = Callable[[ControllerContext, wk.ControllerNames], Controller]
"""Builds one controller; its client is ``ctx.clients.client(names.identity)``."""


@dataclass(frozen=True, slots=True)
class ControllerDescriptor:
    """One controller the manager can run."""

    names: wk.ControllerNames
    """Its name in ``--controllers`` and ``/healthz``, alias, client identity, metric label."""
    build: ControllerBuilder
    enabled_by_default: bool = True
    """False: ``*`` does not turn it on; only naming it does (upstream's "disabled by default")."""

    @property
    def name(self) -> str:
        return self.names.name

    @property
    def alias(self) -> str:
        return self.names.alias

    @property
    def identity(self) -> str:
        return self.names.identity

    @property
    def metric_name(self) -> str:
        return self.names.metric_name


# -- the builders ---------------------------------------------------------------------


def _cloud_node(ctx: ControllerContext, names: wk.ControllerNames) -> Controller:
    return CloudNodeController(
        client=ctx.clients.client(names.identity),
        nodes=ctx.nodes(),
        cloud=ctx.cloud,
        recorder=ctx.recorder(wk.EVENT_SOURCE_CLOUD_NODE),
        metrics=ctx.metrics,
        options=NodeControllerOptions(
            workers=ctx.config.concurrent_node_syncs,
            status_workers=ctx.config.concurrent_node_status_updates,
            status_update_period=ctx.config.node_status_update_frequency,
        ),
        scope=ctx.scope,
        shard=ctx.shard(names.name),
    )


def _cloud_node_lifecycle(ctx: ControllerContext, names: wk.ControllerNames) -> Controller:
    return CloudNodeLifecycleController(
        client=ctx.clients.client(names.identity),
        nodes=ctx.nodes(),
        cloud=ctx.cloud,
        recorder=ctx.recorder(wk.EVENT_SOURCE_CLOUD_NODE_LIFECYCLE),
        monitor_period=ctx.config.node_monitor_period,
        scope=ctx.scope,
        delete_nodes=ctx.config.enable_node_deletion,
        guard=DeletionGuard(ctx.config.node_deletion_guard_settings, metrics=ctx.metrics)
        if ctx.config.node_deletion_guard
        else None,
    )


def _service_lb(ctx: ControllerContext, names: wk.ControllerNames) -> Controller:
    return ServiceController(
        client=ctx.clients.client(names.identity),
        services=ctx.services(),
        nodes=ctx.nodes(),
        cloud=ctx.cloud,
        recorder=ctx.recorder(wk.EVENT_SOURCE_SERVICE),
        metrics=ctx.metrics,
        options=ServiceControllerOptions(
            cluster_name=ctx.config.cluster_name,
            workers=ctx.config.concurrent_service_syncs,
            node_sync_window=ctx.config.node_sync_window,
            node_sync_max_delay=ctx.config.node_sync_max_delay,
            classes=ctx.config.load_balancer_classes,
        ),
        scope=ctx.scope,
        shard=ctx.shard(names.name),
    )


def _node_route(ctx: ControllerContext, names: wk.ControllerNames) -> Controller:
    if not ctx.config.configure_cloud_routes:
        raise ValueError("--configure-cloud-routes is false")
    if ctx.cloud.routes() is None:
        raise ValueError("the cloud provider does not support routes")
    if not ctx.cluster_cidrs:  # validate_before_leading parsed it wherever routes run
        raise StartupError("--cluster-cidr is required when routes are configured")
    return RouteController(
        holders=ctx.pod_cidr_holders if _range_allocator_runs(ctx) else None,
        client=ctx.clients.client(names.identity),
        nodes=ctx.nodes(),
        cloud=ctx.cloud,
        recorder=ctx.recorder(wk.EVENT_SOURCE_ROUTE),
        metrics=ctx.metrics,
        options=RouteControllerOptions(
            cluster_name=ctx.config.cluster_name,
            cluster_cidrs=ctx.cluster_cidrs,
            node_mask_sizes=_known_node_masks(ctx.config, ctx.cluster_cidrs),
            reconciliation_period=ctx.config.route_reconciliation_period,
            watch_based=bool(
                ctx.config.feature_gates.get(WATCH_BASED_ROUTES_RECONCILIATION, False)
            ),
            # The shared informers' resync, as upstream's factory: [min, 2*min).
            resync_period=ctx.config.min_resync_period * (1 + random.random()),
        ),
        scope=ctx.scope,
    )


def _range_allocator_runs(ctx: ControllerContext) -> bool:
    """node-ipam-controller runs here with the range allocator: the route controller
    then routes only the CIDRs it counts as each Node's."""
    return (
        ctx.config.allocate_node_cidrs
        and wk.CONTROLLER_NODE_IPAM in ctx.config.controllers
        and ctx.node_ipam is not None
        and ctx.node_ipam.allocator == wk.CIDR_ALLOCATOR_RANGE
    )


def _known_node_masks(
    config: DaemonConfig, cluster_cidrs: tuple[IPNetwork, ...]
) -> tuple[int | None, ...]:
    """The node CIDR size of each cluster CIDR that ``--node-cidr-mask-size*`` states
    (None where no flag does: the IPAM elsewhere may use another size)."""
    single = config.node_cidr_mask_size if len(cluster_cidrs) == 1 else 0
    by_version = {
        4: config.node_cidr_mask_size_ipv4 or single,
        6: config.node_cidr_mask_size_ipv6 or single,
    }
    return tuple(by_version[c.version] or None for c in cluster_cidrs)


def _node_ipam(ctx: ControllerContext, names: wk.ControllerNames) -> Controller:
    if not ctx.config.allocate_node_cidrs:
        raise ValueError("--allocate-node-cidrs is false")
    if ctx.node_ipam is None:  # node_ipam_before_leading checked it wherever it runs
        raise StartupError("node IPAM settings were not checked before leading")
    if ctx.node_ipam.allocator == wk.CIDR_ALLOCATOR_CLOUD:
        return _node_ipam_cloud(ctx, names, ctx.node_ipam)
    controller = NodeIpamController(
        client=ctx.clients.client(names.identity),
        nodes=ctx.nodes(),
        recorder=ctx.recorder(wk.EVENT_SOURCE_NODE_IPAM),
        metrics=ctx.metrics,
        options=ctx.node_ipam,
        scope=ctx.scope,
    )
    ctx.pod_cidr_holders.bind(controller)
    return controller


def _node_ipam_cloud(
    ctx: ControllerContext, names: wk.ControllerNames, options: NodeIpamOptions
) -> Controller:
    cloud = ctx.cloud
    if not isinstance(cloud, NodePodCIDRs):
        raise StartupError(
            f"--cidr-allocator-type={wk.CIDR_ALLOCATOR_CLOUD}: the cloud provider "
            f"{cloud.provider_name()!r} does not report Nodes' pod CIDRs (it does not "
            f"implement NodePodCIDRs): use --cidr-allocator-type={wk.CIDR_ALLOCATOR_RANGE} "
            "with --cluster-cidr"
        )
    # Where the route controller runs, NetworkUnavailable is its to write.
    routes_run = (
        wk.CONTROLLER_NODE_ROUTE in ctx.config.controllers
        and ctx.config.configure_cloud_routes
        and cloud.routes() is not None
    )
    return CloudAllocatorController(
        client=ctx.clients.client(names.identity),
        nodes=ctx.nodes(),
        cloud=cloud,
        recorder=ctx.recorder(wk.EVENT_SOURCE_NODE_IPAM),
        metrics=ctx.metrics,
        options=CloudAllocatorOptions(
            owns_network_condition=not routes_run, workers=options.workers
        ),
        scope=ctx.scope,
    )


def _pv_label(ctx: ControllerContext, names: wk.ControllerNames) -> Controller:
    return PersistentVolumeLabelController(
        client=ctx.clients.client(names.identity),
        volumes=ctx.volumes(),
        cloud=ctx.cloud,
        recorder=ctx.recorder(wk.CONTROLLER_PV_LABEL),
        metrics=ctx.metrics,
    )


def _lb_gc(ctx: ControllerContext, names: wk.ControllerNames) -> Controller:
    # No API client: the sweep reads the Service informer and calls only the cloud.
    return LoadBalancerGCController(
        services=ctx.services(),
        cloud=ctx.cloud,
        metrics=ctx.metrics,
        cluster_name=ctx.config.cluster_name,
        period=ctx.config.load_balancer_gc_period,
        classes=ctx.config.load_balancer_classes,
    )


def _kubelet_serving_cert_approver(ctx: ControllerContext, names: wk.ControllerNames) -> Controller:
    try:
        # Before the CSR informer exists: no watch when skipped.
        require_authoritative(ctx.cloud)
    except UntrustedInstancesError as exc:
        raise StartupError(str(exc)) from exc
    return KubeletServingCertApprover(
        client=ctx.clients.client(names.identity),
        csrs=ctx.informers.informer(
            CERTIFICATE_SIGNING_REQUESTS,
            name="certificatesigningrequests",
            field_selector=f"spec.signerName={wk.SIGNER_KUBELET_SERVING}",
        ),
        nodes=ctx.nodes(),
        cloud=ctx.cloud,
        recorder=ctx.recorder(wk.EVENT_SOURCE_KUBELET_SERVING_CERT_APPROVER),
        metrics=ctx.metrics,
        scope=ctx.scope,
    )


# -- the table ------------------------------------------------------------------------


CONTROLLERS: Final[tuple[ControllerDescriptor, ...]] = (
    ControllerDescriptor(wk.CLOUD_NODE, _cloud_node),
    ControllerDescriptor(wk.CLOUD_NODE_LIFECYCLE, _cloud_node_lifecycle),
    ControllerDescriptor(wk.SERVICE_LB, _service_lb),
    ControllerDescriptor(wk.NODE_ROUTE, _node_route),
    ControllerDescriptor(wk.NODE_IPAM, _node_ipam, enabled_by_default=False),
    ControllerDescriptor(wk.PV_LABEL, _pv_label, enabled_by_default=False),
    ControllerDescriptor(wk.LB_GC, _lb_gc, enabled_by_default=False),
    ControllerDescriptor(
        wk.KUBELET_SERVING_CERT_APPROVER, _kubelet_serving_cert_approver, enabled_by_default=False
    ),
)
"""Every controller, in start order (and the order ``--help`` lists them)."""

BY_NAME: Final[Mapping[str, ControllerDescriptor]] = {c.name: c for c in CONTROLLERS}
"""Canonical name → descriptor."""

DISABLED_BY_DEFAULT: Final[frozenset[str]] = frozenset(
    c.name for c in CONTROLLERS if not c.enabled_by_default
)
"""Controllers ``*`` does not turn on."""

CONTROLLER_IDENTITIES: Final[frozenset[str]] = frozenset(c.identity for c in CONTROLLERS)
"""Identities that become ServiceAccounts with ``--use-service-account-credentials``."""
