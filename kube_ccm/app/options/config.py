"""The daemon's configuration: what the controller manager acts on, in Python units.

Built from the flags by :func:`kube_ccm.app.options.buildconfig.build_config`: each row of
the flag table (:mod:`kube_ccm.app.options.flags`) names the field it sets here, so adding
a flag is one row there and one field here. A field no flag sets is listed in
:data:`NOT_FROM_FLAGS`, with where its value comes from instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from kube_ccm.api import wellknown as wk
from kube_ccm.app.serving.delegated import DelegatedAuthConfig
from kube_ccm.controllers.cloudcalls import CloudCallPolicy
from kube_ccm.controllers.deletionguard import GuardSettings
from kube_ccm.controllers.service import LoadBalancerClasses
from kube_ccm.runtime.leaderelection import LeaderElectionConfig


@dataclass(frozen=True)
class DaemonConfig:
    """Everything the manager acts on, in Python units (built from the flags)."""

    cloud_provider: str
    cloud_config: str | None = None
    kubeconfig: str | None = None
    master: str | None = None
    controllers: frozenset[str] = frozenset(
        {wk.CONTROLLER_CLOUD_NODE, wk.CONTROLLER_CLOUD_NODE_LIFECYCLE}
    )
    cluster_name: str = "kubernetes"
    node_monitor_period: float = 5.0
    node_status_update_frequency: float = 300.0
    concurrent_node_syncs: int = 1
    concurrent_node_status_updates: int = 0
    concurrent_service_syncs: int = 1
    cluster_cidr: str = ""
    allocate_node_cidrs: bool = False
    """``--allocate-node-cidrs``: node-ipam-controller runs only with it."""
    cidr_allocator_type: str = wk.CIDR_ALLOCATOR_RANGE
    node_cidr_mask_size: int = 0
    node_cidr_mask_size_ipv4: int = 0
    node_cidr_mask_size_ipv6: int = 0
    """The node CIDRs' mask sizes; 0: upstream's defaults (24 for IPv4, 64 for IPv6)."""
    service_cluster_ip_range: str = ""
    """``--service-cluster-ip-range``: kept out of the node CIDRs."""
    configure_cloud_routes: bool = True
    route_reconciliation_period: float = 10.0
    secure_port: int = 10258
    bind_address: str = "0.0.0.0"
    cert_dir: str = ""
    tls_cert_file: str = ""
    tls_private_key_file: str = ""
    delegated_auth: DelegatedAuthConfig = field(default_factory=DelegatedAuthConfig)
    """Authentication and authorisation of requests to the secure port."""
    webhooks: frozenset[str] = frozenset()
    webhook_bind_address: str = "0.0.0.0"
    webhook_secure_port: int = 10260
    webhook_cert_dir: str = ""
    webhook_tls_cert_file: str = ""
    webhook_tls_private_key_file: str = ""
    webhook_client_ca_file: str = ""
    """``--webhook-client-ca-file``: require a client certificate these CAs signed
    (kube-ccm's; upstream's webhook server answers anyone)."""
    kube_api_content_type: str = "application/json"
    """``--kube-api-content-type``: what the informers read (kube_ccm.runtime.codec);
    JSON by default, where upstream's is protobuf (docs/design.md says why)."""
    kube_api_qps: float = 20.0
    kube_api_burst: int = 30
    kube_api_transport: str = "aiohttp"
    """``--kube-api-transport``: ``aiohttp`` or ``curl`` (runtime.clientbuilder.TRANSPORTS)."""
    allow_untagged_cloud: bool = False
    leader_elect: bool = True
    leader_election: LeaderElectionConfig = field(default_factory=LeaderElectionConfig)
    cloud_call_timeout: float = 60.0
    worker_processes: int = 1
    """``--worker-processes``: the controllers run in up to this many worker processes
    under this process's lease (:mod:`kube_ccm.app.workers`); 1: in this process."""
    node_selector: str = ""
    """``--node-selector``: the Nodes this CCM manages (with the providerID scheme)."""
    node_sync_window: float = 1.0
    """``--node-sync-window``: node changes coalesced into one pass over the LBs."""
    node_sync_max_delay: float = 10.0
    """``--node-sync-max-delay``: the longest a stream of node changes delays its pass."""
    load_balancer_classes: LoadBalancerClasses = field(default_factory=LoadBalancerClasses)
    """``--load-balancer-class``, ``--serve-unclassed-load-balancers``."""
    load_balancer_gc_period: float = 600.0
    """``--load-balancer-gc-period``: how often ``load-balancer-gc-controller`` sweeps."""
    enable_node_deletion: bool = True
    """``--enable-node-deletion``: false gives gone Nodes the shutdown taint instead."""
    node_deletion_guard: bool = True
    """``--node-deletion-guard``: on (True) holds deletions when the cloud reports too
    many instances gone at once (kube_ccm.controllers.deletionguard)."""
    node_deletion_guard_settings: GuardSettings = field(default_factory=GuardSettings)
    """``--node-deletion-guard-threshold``, ``-window``, ``-min-nodes``."""
    cloud_calls: CloudCallPolicy = field(default_factory=CloudCallPolicy)
    """Rate limit and retries of cloud calls (``--cloud-api-qps``, ``--cloud-api-burst``,
    ``--cloud-call-attempts``)."""
    shutdown_grace_period: float = 10.0
    dry_run: bool = False
    """``--dry-run``: API writes as ``dryRun=All``, no cloud call that changes anything."""
    verbosity: int = 0
    logging_format: str = "text"
    feature_gates: Mapping[str, bool] = field(default_factory=dict)
    min_resync_period: float = 12 * 3600.0
    """Informer resync period is random in [min_resync_period, 2*min_resync_period)."""
    controller_start_interval: float = 0.0
    """Upper bound of the random pause between two controller starts."""
    use_service_account_credentials: bool = False
    """One ServiceAccount's credentials per controller identity."""
    enable_leader_migration: bool = False
    """``--enable-leader-migration``, kept only with ``--leader-elect`` as upstream."""
    leader_migration_lease_name: str = wk.LEADER_MIGRATION_LEASE_NAME
    """The second Lease, protecting the migrated controllers (``leaderName``)."""
    leader_migration_controllers: Mapping[str, str] = field(
        default_factory=lambda: dict.fromkeys(wk.LEADER_MIGRATION_DEFAULT_CONTROLLERS, "*")
    )
    """Controller name → component that runs it during a migration (``*``: any)."""
    extra_flags: Mapping[str, Any] = field(default_factory=dict)
    """Upstream flags accepted for compatibility that nothing acts on yet."""


NOT_FROM_FLAGS: Final[Mapping[str, str]] = {
    "leader_election.identity": "the elector's own <hostname>_<uuid>",
    "cloud_calls.backoff_base": "CloudCallPolicy's default",
    "cloud_calls.backoff_cap": "CloudCallPolicy's default",
    "cloud_calls.unhealthy_after": "derived from --cloud-call-timeout",
    "leader_migration_lease_name": "the --leader-migration-config file",
    "leader_migration_controllers": "the --leader-migration-config file",
    "extra_flags": "every flag marked not acting",
}
"""Fields (dotted paths into nested settings) that no flag row names, and where
their value comes from instead. Every other field is named by exactly one row."""
