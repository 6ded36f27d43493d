"""The well-known strings are upstream's, byte for byte (upstream-behaviour.md §0, §8)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from kube_ccm.api import wellknown as wk


def test_node_taint_annotation_and_label_keys_match_upstream() -> None:
    assert wk.TAINT_UNINITIALIZED == "node.cloudprovider.kubernetes.io/uninitialized"
    assert wk.TAINT_SHUTDOWN == "node.cloudprovider.kubernetes.io/shutdown"
    assert wk.TAINT_TO_BE_DELETED_BY_CLUSTER_AUTOSCALER == "ToBeDeletedByClusterAutoscaler"
    assert wk.ANNOTATION_PROVIDED_NODE_IP == "alpha.kubernetes.io/provided-node-ip"
    assert wk.LABEL_ZONE == "topology.kubernetes.io/zone"
    assert wk.LABEL_ZONE_BETA == "failure-domain.beta.kubernetes.io/zone"
    assert wk.LABEL_REGION == "topology.kubernetes.io/region"
    assert wk.LABEL_REGION_BETA == "failure-domain.beta.kubernetes.io/region"
    assert wk.LABEL_INSTANCE_TYPE == "node.kubernetes.io/instance-type"
    assert wk.LABEL_INSTANCE_TYPE_BETA == "beta.kubernetes.io/instance-type"
    assert (
        wk.LABEL_EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS
        == "node.kubernetes.io/exclude-from-external-load-balancers"
    )


def test_service_and_volume_strings_match_upstream() -> None:
    assert wk.FINALIZER_LOAD_BALANCER_CLEANUP == "service.kubernetes.io/load-balancer-cleanup"
    assert (
        wk.ANNOTATION_LOAD_BALANCER_SOURCE_RANGES
        == "service.beta.kubernetes.io/load-balancer-source-ranges"
    )
    assert wk.PV_LABEL_INITIALIZER == "pvlabel.kubernetes.io"
    assert wk.LABEL_MULTI_ZONE_DELIMITER == "__"


def test_route_condition_strings_match_upstream() -> None:
    assert wk.NODE_CONDITION_NETWORK_UNAVAILABLE == "NetworkUnavailable"
    assert (wk.REASON_ROUTE_CREATED, wk.REASON_NO_ROUTE_CREATED) == (
        "RouteCreated",
        "NoRouteCreated",
    )
    assert wk.MESSAGE_ROUTE_CREATED == "RouteController created a route"
    assert wk.MESSAGE_NO_ROUTE_CREATED == "RouteController failed to create a route"


def test_daemon_strings_match_upstream() -> None:
    assert (wk.LEADER_ELECTION_NAMESPACE, wk.LEADER_ELECTION_LEASE_NAME) == (
        "kube-system",
        "cloud-controller-manager",
    )
    assert wk.LEADER_MIGRATION_LEASE_NAME == "cloud-provider-extraction-migration"
    assert (wk.CONFIGZ_GROUP, wk.CONFIGZ_KIND, wk.CONFIGZ_VERSION) == (
        "cloudcontrollermanager.config.k8s.io",
        "CloudControllerManagerConfiguration",
        "v1alpha1",
    )
    assert wk.SELF_SIGNED_CERT_PAIR_NAME == "cloud-controller-manager"
    assert wk.WEBHOOK_SELF_SIGNED_CERT_PAIR_NAME == "cloud-controller-manager-webhook"
    assert wk.USER_AGENT == "cloud-controller-manager"
    assert wk.EXTERNAL_CLOUD_PROVIDER == "external"


def test_event_sources_include_the_route_controllers_underscore() -> None:
    assert wk.EVENT_SOURCE_CLOUD_NODE == "cloud-node-controller"
    assert wk.EVENT_SOURCE_CLOUD_NODE_LIFECYCLE == "cloud-node-lifecycle-controller"
    assert wk.EVENT_SOURCE_SERVICE == "service-controller"
    assert wk.EVENT_SOURCE_ROUTE == "route_controller"
    assert wk.EVENT_SOURCE_CLOUD_CONTROLLER_MANAGER == "cloud-controller-manager"


def test_event_message_templates_render_upstreams_text() -> None:
    assert wk.MESSAGE_DELETING_NODE.format(node="n1") == (
        "Deleting node n1 because it does not exist in the cloud provider"
    )
    assert wk.MESSAGE_DELETING_NODE_FAILED.format(node="n1", error="boom") == (
        "Failed deleting node n1: boom"
    )
    assert wk.MESSAGE_SYNC_LOAD_BALANCER_FAILED.format(error="e") == (
        "Error syncing load balancer: e"
    )
    assert wk.MESSAGE_DELETE_LOAD_BALANCER_FAILED.format(error="e") == (
        "Error deleting load balancer: e"
    )
    assert wk.MESSAGE_UPDATE_LOAD_BALANCER_FAILED.format(hosts="[n1 n2]", total=2, error="e") == (
        "Error updating load balancer with new hosts [n1 n2] "
        "[node names limited, total number of nodes: 2], error: e"
    )
    assert wk.MESSAGE_FAILED_TO_CREATE_ROUTE.format(
        name_hint="uid-1", cidr="10.244.0.0/24", node="n1", duration="1.2s", error="e"
    ) == ("Could not create route uid-1 10.244.0.0/24 for node n1 after 1.2s: e")
    assert wk.MESSAGE_BECAME_LEADER.format(identity="h_1") == "h_1 became leader"


def test_event_reasons_match_upstream() -> None:
    assert [
        wk.REASON_SYNCED,
        wk.REASON_DELETING_NODE,
        wk.REASON_DELETING_NODE_FAILED,
        wk.REASON_ENSURING_LOAD_BALANCER,
        wk.REASON_ENSURED_LOAD_BALANCER,
        wk.REASON_SYNC_LOAD_BALANCER_FAILED,
        wk.REASON_DELETING_LOAD_BALANCER,
        wk.REASON_DELETED_LOAD_BALANCER,
        wk.REASON_DELETE_LOAD_BALANCER_FAILED,
        wk.REASON_UNAVAILABLE_LOAD_BALANCER,
        wk.REASON_UPDATED_LOAD_BALANCER,
        wk.REASON_UPDATE_LOAD_BALANCER_FAILED,
        wk.REASON_FAILED_TO_CREATE_ROUTE,
        wk.REASON_LEADER_ELECTION,
    ] == [
        "Synced",
        "DeletingNode",
        "DeletingNodeFailed",
        "EnsuringLoadBalancer",
        "EnsuredLoadBalancer",
        "SyncLoadBalancerFailed",
        "DeletingLoadBalancer",
        "DeletedLoadBalancer",
        "DeleteLoadBalancerFailed",
        "UnAvailableLoadBalancer",
        "UpdatedLoadBalancer",
        "UpdateLoadBalancerFailed",
        "FailedToCreateRoute",
        "LeaderElection",
    ]


def test_controller_names_aliases_identities_and_metric_names() -> None:
    assert [(c.name, c.alias, c.identity, c.metric_name) for c in wk.CONTROLLERS] == [
        ("cloud-node-controller", "cloud-node", "node-controller", "cloud-node"),
        (
            "cloud-node-lifecycle-controller",
            "cloud-node-lifecycle",
            "node-controller",
            "cloud-node-lifecycle",
        ),
        ("service-lb-controller", "service", "service-controller", "service"),
        ("node-route-controller", "route", "route-controller", "route"),
    ]


def test_controller_names_follow_upstreams_naming_rule() -> None:
    for name in [c.name for c in wk.CONTROLLERS] + [wk.CONTROLLER_NODE_IPAM]:
        assert re.fullmatch(r"[a-z-]+-controller", name), name


def test_metric_names_match_upstream() -> None:
    assert wk.METRIC_RUNNING_MANAGED_CONTROLLERS == "running_managed_controllers"
    assert {
        wk.METRIC_NODE_TAINT_REMOVAL_DELAY,
        wk.METRIC_NODE_INITIAL_SYNC_DELAY,
        wk.METRIC_SERVICE_LOADBALANCER_SYNC_TOTAL,
        wk.METRIC_SERVICE_NODESYNC_ERROR_TOTAL,
        wk.METRIC_SERVICE_NODESYNC_LATENCY,
        wk.METRIC_SERVICE_UPDATE_LOADBALANCER_HOST_LATENCY,
        wk.METRIC_ROUTE_SYNC_TOTAL,
    } == {
        "node_controller_cloud_provider_taint_removal_delay_seconds",
        "node_controller_initial_node_sync_delay_seconds",
        "service_controller_loadbalancer_sync_total",
        "service_controller_nodesync_error_total",
        "service_controller_nodesync_latency_seconds",
        "service_controller_update_loadbalancer_host_latency_seconds",
        "route_controller_route_sync_total",
    }
    assert (wk.QUEUE_CLOUD_NODE, wk.QUEUE_SERVICE, wk.QUEUE_SERVICE_NODES, wk.QUEUE_ROUTES) == (
        "Nodes",
        "service",
        "node",
        "Routes",
    )


def test_kube_ccms_own_event_reasons_are_kept_byte_for_byte() -> None:
    """Reasons upstream has no Event for; users filter on them, so they do not change."""
    assert (
        wk.REASON_NODE_NOT_MANAGED,
        wk.REASON_PROVIDED_NODE_IP_NOT_VALID,
        wk.REASON_NODE_DELETION_DISABLED,
        wk.REASON_ROUTE_BLACKHOLED,
        wk.REASON_POD_CIDR_NOT_IN_CLUSTER_CIDR,
        wk.REASON_POD_CIDR_DUPLICATE,
        wk.REASON_POD_CIDR_NOT_FROM_CLOUD,
        wk.REASON_FAILED_NODE_AFFINITY,
    ) == (
        "NodeNotManaged",
        "ProvidedNodeIPNotValid",
        "NodeDeletionDisabled",
        "RouteBlackholed",
        "PodCIDRNotInClusterCIDR",
        "PodCIDRDuplicate",
        "PodCIDRNotFromCloud",
        "FailedToAddNodeAffinity",
    )


def _typed_in_controllers() -> list[str]:
    """Reason and queue names a controller module types itself: a module-level
    ``REASON_*``/``QUEUE_*`` constant, a string literal as a queue's name, or as an
    Event's reason."""
    found: list[str] = []
    for path in sorted((Path(wk.__file__).parents[1] / "controllers").glob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else []
            if isinstance(node, ast.AnnAssign):
                targets = [node.target]
            found.extend(
                f"{path.name}: {t.id}"
                for t in targets
                if isinstance(t, ast.Name) and t.id.startswith(("REASON_", "QUEUE_"))
            )
        for call in ast.walk(tree):
            if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Attribute):
                continue
            at = {"_new_queue": 0, "_event": 2, "_node_event": 2, "event": 2}.get(call.func.attr)
            if at is None or len(call.args) <= at:
                continue
            argument = call.args[at]
            if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
                found.append(f"{path.name}:{call.lineno}: {call.func.attr}({argument.value!r})")
    return found


def test_controllers_take_reasons_and_queue_names_from_here() -> None:
    assert _typed_in_controllers() == []
