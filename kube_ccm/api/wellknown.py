"""Every string the cloud-controller-manager shares with the rest of Kubernetes.

Taint, label and annotation keys, finalizers, condition types, event reasons and
messages, controller names and identities, lease names and metric names: other
components (kubelet, the scheduler, kubectl users, dashboards, RBAC) match these
byte for byte, so they are typed exactly once, here, and imported everywhere.
The upstream Go identifier is given where one exists, to make cross-checking easy.

Message constants that contain ``{placeholders}`` are :meth:`str.format`
templates; the placeholders are named in each docstring comment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

# ---------------------------------------------------------------------------
# Taints
# ---------------------------------------------------------------------------

TAINT_UNINITIALIZED: Final = "node.cloudprovider.kubernetes.io/uninitialized"
"""Set by kubelet ``--cloud-provider=external`` (value ``true``, effect ``NoSchedule``);
removed by the cloud node controller once the node is initialized.
Upstream: ``cloudproviderapi.TaintExternalCloudProvider``."""

TAINT_SHUTDOWN: Final = "node.cloudprovider.kubernetes.io/shutdown"
"""Added (effect ``NoSchedule``, no value) by the node lifecycle controller while the
instance is shut down. Upstream: ``cloudproviderapi.TaintNodeShutdown``."""

TAINT_TO_BE_DELETED_BY_CLUSTER_AUTOSCALER: Final = "ToBeDeletedByClusterAutoscaler"
"""A node carrying this taint key (any effect) is left out of load-balancer backends.
Upstream: ``ToBeDeletedTaint`` of cluster-autoscaler."""

TAINT_EFFECT_NO_SCHEDULE: Final = "NoSchedule"
TAINT_EFFECT_PREFER_NO_SCHEDULE: Final = "PreferNoSchedule"
TAINT_EFFECT_NO_EXECUTE: Final = "NoExecute"

# ---------------------------------------------------------------------------
# Annotations
# ---------------------------------------------------------------------------

ANNOTATION_PROVIDED_NODE_IP: Final = "alpha.kubernetes.io/provided-node-ip"
"""Set by kubelet ``--node-ip`` when the cloud provider is external; the cloud node
controller honours it when choosing addresses.
Upstream: ``cloudproviderapi.AnnotationAlphaProvidedIPAddr``."""

ANNOTATION_LOAD_BALANCER_SOURCE_RANGES: Final = (
    "service.beta.kubernetes.io/load-balancer-source-ranges"
)
"""Comma-separated CIDRs, read by the source-ranges helper only when
``spec.loadBalancerSourceRanges`` is empty.
Upstream: ``v1.AnnotationLoadBalancerSourceRangesKey``."""

ANNOTATION_PROVISIONED_BY: Final = "pv.kubernetes.io/provisioned-by"
"""Marks a dynamically provisioned PersistentVolume; the PV labeller reuses its
zone/region labels."""

# ---------------------------------------------------------------------------
# Labels (GA and the beta twin the cloud node controller keeps in step)
# ---------------------------------------------------------------------------

LABEL_ZONE: Final = "topology.kubernetes.io/zone"
"""Upstream: ``v1.LabelTopologyZone``."""
LABEL_ZONE_BETA: Final = "failure-domain.beta.kubernetes.io/zone"
"""Upstream: ``v1.LabelFailureDomainBetaZone``."""
LABEL_REGION: Final = "topology.kubernetes.io/region"
"""Upstream: ``v1.LabelTopologyRegion``."""
LABEL_REGION_BETA: Final = "failure-domain.beta.kubernetes.io/region"
"""Upstream: ``v1.LabelFailureDomainBetaRegion``."""
LABEL_INSTANCE_TYPE: Final = "node.kubernetes.io/instance-type"
"""Upstream: ``v1.LabelInstanceTypeStable``."""
LABEL_INSTANCE_TYPE_BETA: Final = "beta.kubernetes.io/instance-type"
"""Upstream: ``v1.LabelInstanceType``."""

GA_LABEL_FOR_BETA: Final[tuple[tuple[str, str], ...]] = (
    (LABEL_ZONE_BETA, LABEL_ZONE),
    (LABEL_REGION_BETA, LABEL_REGION),
    (LABEL_INSTANCE_TYPE_BETA, LABEL_INSTANCE_TYPE),
)
"""(beta, GA) pairs: an initialized node whose beta label is set gets the GA label
with the same value."""

LABEL_EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS: Final = (
    "node.kubernetes.io/exclude-from-external-load-balancers"
)
"""Nodes with this label (value parsed as a boolean; empty or garbage means
excluded, ``false`` means included) are not load-balancer backends.
Upstream: ``v1.LabelNodeExcludeBalancers``."""

LABEL_MULTI_ZONE_DELIMITER: Final = "__"
"""Joins several zones in one PersistentVolume zone label value, e.g. ``a__b``.
Upstream: ``volumehelpers.LabelMultiZoneDelimiter``."""

# ---------------------------------------------------------------------------
# Finalizers and initializers
# ---------------------------------------------------------------------------

FINALIZER_LOAD_BALANCER_CLEANUP: Final = "service.kubernetes.io/load-balancer-cleanup"
"""Added to a Service before its load balancer is ensured and removed only after the
load balancer is deleted. Upstream: ``servicehelper.LoadBalancerCleanupFinalizer``."""

PV_LABEL_INITIALIZER: Final = "pvlabel.kubernetes.io"
"""Historical initializer name of the PV label controller."""

# ---------------------------------------------------------------------------
# Node conditions (the route controller writes NetworkUnavailable)
# ---------------------------------------------------------------------------

NODE_CONDITION_READY: Final = "Ready"
NODE_CONDITION_NETWORK_UNAVAILABLE: Final = "NetworkUnavailable"

CONDITION_TRUE: Final = "True"
CONDITION_FALSE: Final = "False"
CONDITION_UNKNOWN: Final = "Unknown"

REASON_ROUTE_CREATED: Final = "RouteCreated"
"""NetworkUnavailable=False reason once a node's route exists."""
REASON_NO_ROUTE_CREATED: Final = "NoRouteCreated"
"""NetworkUnavailable=True reason while a node's route could not be created."""
MESSAGE_ROUTE_CREATED: Final = "RouteController created a route"
MESSAGE_NO_ROUTE_CREATED: Final = "RouteController failed to create a route"

# ---------------------------------------------------------------------------
# Core API enumerations the controllers compare against
# ---------------------------------------------------------------------------

NODE_ADDRESS_HOSTNAME: Final = "Hostname"
NODE_ADDRESS_INTERNAL_IP: Final = "InternalIP"
NODE_ADDRESS_EXTERNAL_IP: Final = "ExternalIP"
NODE_ADDRESS_INTERNAL_DNS: Final = "InternalDNS"
NODE_ADDRESS_EXTERNAL_DNS: Final = "ExternalDNS"

SERVICE_TYPE_CLUSTER_IP: Final = "ClusterIP"
SERVICE_TYPE_NODE_PORT: Final = "NodePort"
SERVICE_TYPE_LOAD_BALANCER: Final = "LoadBalancer"
SERVICE_TYPE_EXTERNAL_NAME: Final = "ExternalName"

TRAFFIC_POLICY_LOCAL: Final = "Local"
TRAFFIC_POLICY_CLUSTER: Final = "Cluster"

HEALTH_CHECK_PATH: Final = "/healthz"
"""Path of the kube-proxy health check for ``externalTrafficPolicy: Local``."""

CAUSE_NAMESPACE_TERMINATING: Final = "NamespaceTerminating"
"""A Status cause (``v1.NamespaceTerminatingCause``): the NamespaceLifecycle admission
refused a create into a namespace being deleted."""

# ---------------------------------------------------------------------------
# Provider identification
# ---------------------------------------------------------------------------

EXTERNAL_CLOUD_PROVIDER: Final = "external"
"""``--cloud-provider=external``: the only name for which ``is_external`` is true."""

PROVIDER_ID_SEPARATOR: Final = "://"
"""Default providerID format is ``<provider name>://<instance id>``."""

DEFAULT_CLUSTER_NAME: Final = "kubernetes"
"""Default of ``--cluster-name``, passed to load-balancer and route calls."""

# ---------------------------------------------------------------------------
# Leader election and configuration
# ---------------------------------------------------------------------------

LEADER_ELECTION_NAMESPACE: Final = "kube-system"
LEADER_ELECTION_LEASE_NAME: Final = "cloud-controller-manager"
LEADER_MIGRATION_LEASE_NAME: Final = "cloud-provider-extraction-migration"
"""``LeaderName`` of the default leader-migration configuration."""
LEADER_ELECTION_RESOURCE_LOCK: Final = "leases"

LEADER_MIGRATION_CONFIG_GROUP: Final = "controllermanager.config.k8s.io"
LEADER_MIGRATION_CONFIG_KIND: Final = "LeaderMigrationConfiguration"
LEADER_MIGRATION_CONFIG_VERSIONS: Final[tuple[str, ...]] = ("v1alpha1", "v1beta1", "v1")
LEADER_MIGRATION_DEFAULT_CONTROLLERS: Final[tuple[str, ...]] = (
    # Upstream quirk kept on purpose: the first two are *not* today's canonical
    # names, so with the default config only the lifecycle controller migrates.
    "route-controller",
    "service-controller",
    "cloud-node-lifecycle-controller",
)

CONFIGZ_GROUP: Final = "cloudcontrollermanager.config.k8s.io"
CONFIGZ_KIND: Final = "CloudControllerManagerConfiguration"
CONFIGZ_VERSION: Final = "v1alpha1"

SELF_SIGNED_CERT_PAIR_NAME: Final = "cloud-controller-manager"
"""Base name of the generated serving certificate pair."""
WEBHOOK_SELF_SIGNED_CERT_PAIR_NAME: Final = "cloud-controller-manager-webhook"

USER_AGENT: Final = "cloud-controller-manager"
"""User agent of the daemon's own client; controller clients use ``<USER_AGENT>/<identity>``."""

COMPONENT_NAME: Final = "cloud-controller-manager"
"""The daemon's event source and the ``manager`` label of ``running_managed_controllers``."""

HEALTHZ_LEADER_ELECTION: Final = "leaderElection"
"""Name of the leader-election health check on ``/healthz``."""

SERVICE_ACCOUNT_NAMESPACE: Final = "kube-system"
"""Namespace of the per-controller ServiceAccounts."""

# ---------------------------------------------------------------------------
# Events: source components, reasons and messages per controller
# ---------------------------------------------------------------------------

EVENT_TYPE_NORMAL: Final = "Normal"
EVENT_TYPE_WARNING: Final = "Warning"

# Cloud node controller.
EVENT_SOURCE_CLOUD_NODE: Final = "cloud-node-controller"
REASON_SYNCED: Final = "Synced"  # Normal
MESSAGE_SYNCED: Final = "Node synced successfully"

# Cloud node lifecycle controller.
EVENT_SOURCE_CLOUD_NODE_LIFECYCLE: Final = "cloud-node-lifecycle-controller"
REASON_DELETING_NODE: Final = "DeletingNode"  # Normal
MESSAGE_DELETING_NODE: Final = (
    "Deleting node {node} because it does not exist in the cloud provider"
)
"""Placeholders: ``node`` (node name)."""
REASON_DELETING_NODE_FAILED: Final = "DeletingNodeFailed"  # Warning
MESSAGE_DELETING_NODE_FAILED: Final = "Failed deleting node {node}: {error}"
"""Placeholders: ``node``, ``error``."""
REASON_NODE_DELETION_GUARDED: Final = "NodeDeletionGuarded"  # Warning
"""kube-ccm's (not upstream's): the instance is reported gone, but the node deletion
guard holds the deletion (controllers/deletionguard.py)."""
LABEL_CONFIRM_NODE_DELETION: Final = "kube-ccm.node-restriction.kubernetes.io/confirm-deletion"
"""kube-ccm's: a label an operator sets on a Node the deletion guard holds, to the trip's
id, to confirm that its instance is really terminated. Under the
``node-restriction.kubernetes.io`` domain, so that NodeRestriction refuses it from any
kubelet, on its own Node too, at registration as on update: a node can never ask for
its own deletion (it could re-register without the taints an admin gave it)."""
READYZ_NODE_DELETION_GUARD: Final = "node-deletion-guard"
"""The informational check on ``/readyz?verbose``: fails (without failing readiness)
while the guard holds deletions."""

# Service controller (the event source is ``service-controller``, not the
# controller's canonical name ``service-lb-controller``).
EVENT_SOURCE_SERVICE: Final = "service-controller"
REASON_ENSURING_LOAD_BALANCER: Final = "EnsuringLoadBalancer"  # Normal
MESSAGE_ENSURING_LOAD_BALANCER: Final = "Ensuring load balancer"
REASON_ENSURED_LOAD_BALANCER: Final = "EnsuredLoadBalancer"  # Normal
MESSAGE_ENSURED_LOAD_BALANCER: Final = "Ensured load balancer"
REASON_SYNC_LOAD_BALANCER_FAILED: Final = "SyncLoadBalancerFailed"  # Warning
MESSAGE_SYNC_LOAD_BALANCER_FAILED: Final = "Error syncing load balancer: {error}"
"""Placeholders: ``error``."""
REASON_DELETING_LOAD_BALANCER: Final = "DeletingLoadBalancer"  # Normal
MESSAGE_DELETING_LOAD_BALANCER: Final = "Deleting load balancer"
REASON_DELETED_LOAD_BALANCER: Final = "DeletedLoadBalancer"  # Normal
MESSAGE_DELETED_LOAD_BALANCER: Final = "Deleted load balancer"
REASON_DELETE_LOAD_BALANCER_FAILED: Final = "DeleteLoadBalancerFailed"  # Warning
MESSAGE_DELETE_LOAD_BALANCER_FAILED: Final = "Error deleting load balancer: {error}"
"""Placeholders: ``error``."""
REASON_UNAVAILABLE_LOAD_BALANCER: Final = "UnAvailableLoadBalancer"  # Warning (sic: capital A)
MESSAGE_UNAVAILABLE_LOAD_BALANCER: Final = "There are no available nodes for LoadBalancer"
REASON_UPDATED_LOAD_BALANCER: Final = "UpdatedLoadBalancer"  # Normal
MESSAGE_UPDATED_LOAD_BALANCER: Final = "Updated load balancer with new hosts"
REASON_UPDATE_LOAD_BALANCER_FAILED: Final = "UpdateLoadBalancerFailed"  # Warning
MESSAGE_UPDATE_LOAD_BALANCER_FAILED: Final = (
    "Error updating load balancer with new hosts {hosts} "
    "[node names limited, total number of nodes: {total}], error: {error}"
)
"""Placeholders: ``hosts`` (the, possibly truncated, node names), ``total``, ``error``."""

# Route controller (note the underscore: upstream's event source differs from the
# controller's name and from its metric name).
EVENT_SOURCE_ROUTE: Final = "route_controller"
REASON_FAILED_TO_CREATE_ROUTE: Final = "FailedToCreateRoute"  # Warning
MESSAGE_FAILED_TO_CREATE_ROUTE: Final = (
    "Could not create route {name_hint} {cidr} for node {node} after {duration}: {error}"
)
"""Placeholders: ``name_hint`` (the node UID), ``cidr``, ``node``, ``duration``, ``error``."""

# kube-ccm's own reasons, where upstream writes no Event (warnings a user can act on).
REASON_NODE_NOT_MANAGED: Final = "NodeNotManaged"  # Normal
"""Cloud node controller: an uninitialised Node outside this CCM's scope (another
provider's providerID, or labels not matching ``--node-selector``) is left tainted."""
REASON_PROVIDED_NODE_IP_NOT_VALID: Final = "ProvidedNodeIPNotValid"  # Warning
"""Cloud node controller: the kubelet's ``--node-ip`` is not among the cloud's
addresses (or cannot be parsed); the Node stays uninitialised until one of them is
fixed."""
REASON_NODE_DELETION_DISABLED: Final = "NodeDeletionDisabled"  # Warning
"""Node lifecycle controller: the instance is gone but node deletion is switched off."""
REASON_ROUTE_BLACKHOLED: Final = "RouteBlackholed"  # Warning
"""Route controller, on a Node whose route is a blackhole."""
REASON_POD_CIDR_NOT_IN_CLUSTER_CIDR: Final = "PodCIDRNotInClusterCIDR"  # Warning
"""Node IPAM (range allocator): a Node holds a pod CIDR that is not one of this
allocator's node CIDRs (outside the cluster CIDR, or of another mask size, such as the
whole of it)."""
REASON_POD_CIDR_DUPLICATE: Final = "PodCIDRDuplicate"  # Warning
"""Node IPAM (range allocator): a Node holds a pod CIDR another Node held first."""
REASON_POD_CIDR_NOT_FROM_CLOUD: Final = "PodCIDRNotFromCloud"  # Warning
"""Node IPAM (cloud allocator): a Node holds pod CIDRs other than those the cloud
reports."""
REASON_FAILED_NODE_AFFINITY: Final = "FailedToAddNodeAffinity"  # Warning
"""PersistentVolume labelling controller, on a PersistentVolume: the API server refused
to add the node affinity matching its zone labels."""

# The daemon itself (leader election).
EVENT_SOURCE_CLOUD_CONTROLLER_MANAGER: Final = COMPONENT_NAME
REASON_LEADER_ELECTION: Final = "LeaderElection"  # Normal
MESSAGE_BECAME_LEADER: Final = "{identity} became leader"
"""Placeholders: ``identity`` (``<hostname>_<uuid>``)."""

# ---------------------------------------------------------------------------
# Controllers: canonical name, alias, client identity, metric name
# ---------------------------------------------------------------------------

CONTROLLER_CLOUD_NODE: Final = "cloud-node-controller"
CONTROLLER_CLOUD_NODE_LIFECYCLE: Final = "cloud-node-lifecycle-controller"
CONTROLLER_SERVICE_LB: Final = "service-lb-controller"
CONTROLLER_NODE_ROUTE: Final = "node-route-controller"
CONTROLLER_NODE_IPAM: Final = "node-ipam-controller"
"""Optional; not part of the library's set."""

ALIAS_CLOUD_NODE: Final = "cloud-node"
ALIAS_CLOUD_NODE_LIFECYCLE: Final = "cloud-node-lifecycle"
ALIAS_SERVICE_LB: Final = "service"
ALIAS_NODE_ROUTE: Final = "route"
ALIAS_NODE_IPAM: Final = "nodeipam"

IDENTITY_NODE_CONTROLLER: Final = "node-controller"
"""Client identity / ServiceAccount of the cloud node, lifecycle and IPAM controllers."""
IDENTITY_SERVICE_CONTROLLER: Final = "service-controller"
IDENTITY_ROUTE_CONTROLLER: Final = "route-controller"
IDENTITY_PVL_CONTROLLER: Final = "pvl-controller"
"""Client identity of the historical PV label controller."""
IDENTITY_SHARED_INFORMERS: Final = "shared-informers"
IDENTITY_DELEGATED_AUTH: Final = "delegated-auth"
"""Client of the secure port's TokenReviews and SubjectAccessReviews (daemon's credentials)."""
"""Client of the shared informer factory; always the daemon's own credentials."""


@dataclass(frozen=True, slots=True)
class ControllerNames:
    """The four names one controller goes by (its descriptor in ``kube_ccm.app.descriptors``
    adds the constructor).

    ``name`` is what ``--controllers`` and ``/healthz`` use, ``alias`` is accepted
    forever in ``--controllers``, ``identity`` names its client / ServiceAccount,
    and ``metric_name`` is its ``name`` label on ``running_managed_controllers``.
    """

    name: str
    alias: str
    identity: str
    metric_name: str


CLOUD_NODE: Final = ControllerNames(
    CONTROLLER_CLOUD_NODE, ALIAS_CLOUD_NODE, IDENTITY_NODE_CONTROLLER, ALIAS_CLOUD_NODE
)
CLOUD_NODE_LIFECYCLE: Final = ControllerNames(
    CONTROLLER_CLOUD_NODE_LIFECYCLE,
    ALIAS_CLOUD_NODE_LIFECYCLE,
    IDENTITY_NODE_CONTROLLER,
    ALIAS_CLOUD_NODE_LIFECYCLE,
)
SERVICE_LB: Final = ControllerNames(
    CONTROLLER_SERVICE_LB, ALIAS_SERVICE_LB, IDENTITY_SERVICE_CONTROLLER, ALIAS_SERVICE_LB
)
NODE_ROUTE: Final = ControllerNames(
    CONTROLLER_NODE_ROUTE, ALIAS_NODE_ROUTE, IDENTITY_ROUTE_CONTROLLER, ALIAS_NODE_ROUTE
)

CONTROLLERS: Final[tuple[ControllerNames, ...]] = (
    CLOUD_NODE,
    CLOUD_NODE_LIFECYCLE,
    SERVICE_LB,
    NODE_ROUTE,
)
"""Upstream's four controllers (the library's set), for cross-checking names. The
daemon's table of every controller it can run, with constructors and defaults, is
``kube_ccm.app.descriptors.CONTROLLERS``."""

CONTROLLER_PV_LABEL: Final = "persistent-volume-label-controller"
ALIAS_PV_LABEL: Final = "pvl"
PV_LABEL: Final = ControllerNames(
    CONTROLLER_PV_LABEL, ALIAS_PV_LABEL, IDENTITY_PVL_CONTROLLER, ALIAS_PV_LABEL
)
"""kube-ccm's PV labeller: not an upstream controller, and off unless named."""

WEBHOOK_PV_LABEL: Final = "persistent-volume-label"
"""kube-ccm's PV-label admission webhook, served at ``/persistent-volume-label``."""
WEBHOOK_SERVICE_ANNOTATIONS: Final = "service-annotations"
"""kube-ccm's validating webhook for the provider's declared Service annotations,
served at ``/service-annotations``."""
KNOWN_WEBHOOKS: Final[tuple[str, ...]] = (WEBHOOK_PV_LABEL, WEBHOOK_SERVICE_ANNOTATIONS)

CONTROLLER_LB_GC: Final = "load-balancer-gc-controller"
ALIAS_LB_GC: Final = "lb-gc"
LB_GC: Final = ControllerNames(
    CONTROLLER_LB_GC, ALIAS_LB_GC, IDENTITY_SERVICE_CONTROLLER, ALIAS_LB_GC
)
"""kube-ccm's sweep of leaked load balancers: not an upstream controller, off unless named."""


# ---------------------------------------------------------------------------
# Metric names (full names, subsystem included)
# ---------------------------------------------------------------------------

METRIC_RUNNING_MANAGED_CONTROLLERS: Final = "running_managed_controllers"
"""Gauge, labels ``name`` (a controller's ``metric_name``) and ``manager``."""

METRIC_NODE_TAINT_REMOVAL_DELAY: Final = (
    "node_controller_cloud_provider_taint_removal_delay_seconds"
)
METRIC_NODE_INITIAL_SYNC_DELAY: Final = "node_controller_initial_node_sync_delay_seconds"

METRIC_SERVICE_LOADBALANCER_SYNC_TOTAL: Final = "service_controller_loadbalancer_sync_total"
METRIC_SERVICE_NODESYNC_ERROR_TOTAL: Final = "service_controller_nodesync_error_total"
METRIC_SERVICE_NODESYNC_LATENCY: Final = "service_controller_nodesync_latency_seconds"
METRIC_SERVICE_UPDATE_LOADBALANCER_HOST_LATENCY: Final = (
    "service_controller_update_loadbalancer_host_latency_seconds"
)

METRIC_ROUTE_SYNC_TOTAL: Final = "route_controller_route_sync_total"

METRIC_WEBHOOK_REQUEST_TOTAL: Final = "cloud_provider_webhook_request_total"
METRIC_WEBHOOK_REQUEST_DURATION: Final = "cloud_provider_webhook_request_duration_seconds"

METRIC_WORKQUEUE_DEPTH: Final = "workqueue_depth"
METRIC_WORKQUEUE_ADDS_TOTAL: Final = "workqueue_adds_total"
METRIC_WORKQUEUE_QUEUE_DURATION: Final = "workqueue_queue_duration_seconds"
METRIC_WORKQUEUE_WORK_DURATION: Final = "workqueue_work_duration_seconds"
METRIC_WORKQUEUE_UNFINISHED_WORK: Final = "workqueue_unfinished_work_seconds"
METRIC_WORKQUEUE_LONGEST_RUNNING_PROCESSOR: Final = "workqueue_longest_running_processor_seconds"
METRIC_WORKQUEUE_RETRIES_TOTAL: Final = "workqueue_retries_total"

METRIC_LEADER_ELECTION_MASTER_STATUS: Final = "leader_election_master_status"

METRIC_SERVICE_NODE_PASS_PENDING: Final = "kube_ccm_service_node_pass_pending"
"""kube-ccm's gauge: 1 while the service controller's node pass waits out its
``--node-sync-window`` (work the ``node`` queue does not show yet), else 0."""
METRIC_NODE_DELETION_GUARD_HELD: Final = "kube_ccm_node_deletion_guard_held_nodes"
"""kube-ccm's gauge: Nodes whose deletion the node deletion guard holds."""
METRIC_NODE_DELETION_GUARD_TRIPS: Final = "kube_ccm_node_deletion_guard_trips"
"""kube-ccm's counter (exposed as ``..._total``), label ``rule``: the guard's trips."""

# Work-queue ``name`` label values, i.e. the queue names.
QUEUE_CLOUD_NODE: Final = "Nodes"
QUEUE_SERVICE: Final = "service"
QUEUE_SERVICE_NODES: Final = "node"
QUEUE_ROUTES: Final = "Routes"
QUEUE_PV_LABELS: Final = "pvLabels"
"""Queue of the historical PV label controller."""
ROUTES_QUEUE_KEY: Final = "routes"
"""The single key of the watch-based route queue."""

# ---------------------------------------------------------------------------
# Node IPAM controller (``node-ipam-controller``, alias ``nodeipam``): as the sample
# main of upstream's ``cmd/cloud-controller-manager`` adds it
# ---------------------------------------------------------------------------

NODE_IPAM: Final = ControllerNames(
    CONTROLLER_NODE_IPAM, ALIAS_NODE_IPAM, IDENTITY_NODE_CONTROLLER, ALIAS_NODE_IPAM
)
"""Identity ``node-controller``, shared with the cloud node and lifecycle controllers."""

CIDR_ALLOCATOR_RANGE: Final = "RangeAllocator"
"""``--cidr-allocator-type`` of the range allocator (the default). Upstream:
``ipam.RangeAllocatorType``."""
CIDR_ALLOCATOR_CLOUD: Final = "CloudAllocator"
"""Upstream: ``ipam.CloudAllocatorType`` (a provider's own allocation)."""

EVENT_SOURCE_NODE_IPAM: Final = "cidrAllocator"
"""Event source component of the range allocator."""
REASON_CIDR_NOT_AVAILABLE: Final = "CIDRNotAvailable"  # Warning
"""The cluster CIDR has no free node CIDR for this Node; the allocation is retried."""
REASON_CIDR_ASSIGNMENT_FAILED: Final = "CIDRAssignmentFailed"  # Warning
"""Writing the allocated CIDRs to the Node failed (after three tries)."""
MESSAGE_NODE_STATUS_CHANGE: Final = "Node {node} status is now: {status}"
"""Upstream's ``RecordNodeStatusChange`` message. Placeholders: ``node``, ``status``
(the reason)."""

QUEUE_NODE_IPAM: Final = "cidrallocator_node"
"""Work queue of the range allocator."""

METRIC_NODE_IPAM_CIDRSET_ALLOCATIONS: Final = "node_ipam_controller_cidrset_cidrs_allocations_total"
METRIC_NODE_IPAM_CIDRSET_RELEASES: Final = "node_ipam_controller_cidrset_cidrs_releases_total"
METRIC_NODE_IPAM_CIDRSET_MAX_CIDRS: Final = "node_ipam_controller_cirdset_max_cidrs"
"""Sic: upstream's name misspells ``cidrset``."""
METRIC_NODE_IPAM_CIDRSET_USAGE: Final = "node_ipam_controller_cidrset_usage_cidrs"
METRIC_NODE_IPAM_CIDRSET_ALLOCATION_TRIES: Final = (
    "node_ipam_controller_cidrset_allocation_tries_per_request"
)
"""The node IPAM metrics (upstream's ``cidrset/metrics.go``), each labelled ``clusterCIDR``."""

# ---------------------------------------------------------------------------
# Kubelet serving certificate approver (``kubelet-serving-cert-approver``, alias
# ``servingcert``): kube-ccm's, off unless named
# ---------------------------------------------------------------------------

CONTROLLER_KUBELET_SERVING_CERT_APPROVER: Final = "kubelet-serving-cert-approver"
ALIAS_KUBELET_SERVING_CERT_APPROVER: Final = "servingcert"
IDENTITY_KUBELET_SERVING_CERT_APPROVER: Final = "kubelet-serving-cert-approver"
"""Its client identity / ServiceAccount: the only one allowed to approve for the signer."""
KUBELET_SERVING_CERT_APPROVER: Final = ControllerNames(
    CONTROLLER_KUBELET_SERVING_CERT_APPROVER,
    ALIAS_KUBELET_SERVING_CERT_APPROVER,
    IDENTITY_KUBELET_SERVING_CERT_APPROVER,
    ALIAS_KUBELET_SERVING_CERT_APPROVER,
)

SIGNER_KUBELET_SERVING: Final = "kubernetes.io/kubelet-serving"
"""The signer of kubelet serving certificates (signed by kube-controller-manager's
csrsigning controller once approved)."""
NODE_USER_PREFIX: Final = "system:node:"
"""A kubelet's user name is this prefix and its Node's name."""
GROUP_NODES: Final = "system:nodes"
"""The group of every kubelet, and the Organization of its certificates."""
CSR_CONDITION_APPROVED: Final = "Approved"
CSR_CONDITION_DENIED: Final = "Denied"
CSR_CONDITION_FAILED: Final = "Failed"

EVENT_SOURCE_KUBELET_SERVING_CERT_APPROVER: Final = CONTROLLER_KUBELET_SERVING_CERT_APPROVER
REASON_CSR_APPROVED: Final = "KubeletServingCertApproved"
"""Condition reason (and Normal Event) of a CSR whose every name the cloud confirmed."""
REASON_CSR_DENIED: Final = "KubeletServingCertDenied"
"""Condition reason (and Warning Event) of a CSR that can never be right."""
REASON_CSR_PENDING: Final = "KubeletServingCertPending"
"""Warning Event of a CSR left pending while the cloud may still change its answer."""

QUEUE_KUBELET_SERVING_CERTS: Final = "kubelet_serving_csrs"

METRIC_KUBELET_SERVING_CSR_APPROVED: Final = "kubelet_serving_cert_approver_approved_total"
METRIC_KUBELET_SERVING_CSR_DENIED: Final = "kubelet_serving_cert_approver_denied_total"
METRIC_KUBELET_SERVING_CSR_PENDING: Final = "kubelet_serving_cert_approver_left_pending_total"
"""Counters of the approver's decisions; denied and left pending are labelled ``reason``
(a check's short name: ``requester``, ``request``, ``subject``, ``usages``,
``subject_alt_names``, ``dns_names``, ``ip_addresses``; ``node_not_found``,
``instance_not_found``, ``cloud_error``)."""
