# ruff: noqa: E501  (the flag table reads best one flag per line)
"""The daemon's flags: upstream's names, defaults and help, one group per upstream options struct.

Why: operators replace a Go cloud-controller-manager with kube-ccm by changing
the image, not the manifest. So every upstream flag is accepted, with its name,
default and syntax (:mod:`kube_ccm.app.options.pflag`); the ones nothing acts on yet
(profiling, ...) are parsed, kept in ``DaemonConfig.extra_flags`` and
marked "accepted, not yet acting" in ``--help``.

Each row names the :class:`~kube_ccm.app.options.config.DaemonConfig` field it sets
(``field=``, a dotted path for a nested setting) and, when the value changes on
the way, how (``convert=``). So adding a flag is one row here and one field on
``DaemonConfig``; ``tests/unit/app/test_daemon_config.py`` fails when the two disagree.
Checks of the values are in :mod:`kube_ccm.app.options.validation`.

The groups and their order are ``--help``'s: the sections and the order of upstream's
``cloud-controller-manager --help``, then kube-ccm's extensions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from kube_ccm.api import wellknown as wk
from kube_ccm.app.descriptors import CONTROLLERS
from kube_ccm.app.options import featuregates
from kube_ccm.app.options.featuregates import FeatureGates
from kube_ccm.app.options.pflag import (
    BOOL,
    DURATION,
    FLOAT32,
    GATES,
    INT,
    INT32,
    LEVEL,
    STRING,
    STRINGS,
    VERSION,
    Flag,
    FlagType,
    ParsedFlags,
    parse_argv,
)
from kube_ccm.app.options.selection import resolve_controllers, resolve_webhooks

NOT_ACTING: Final = "accepted, not yet acting"


def _flag(type_: FlagType) -> Callable[..., Flag]:
    def make(
        name: str,
        default: Any,
        help: str,
        acting: bool = True,
        *,
        field: str | None = None,
        convert: Callable[[Any], Any] | None = None,
        shorthand: str = "",
    ) -> Flag:
        return Flag(
            name, type_, default, help, acting, shorthand=shorthand, field=field, convert=convert
        )

    return make


_s, _b, _i, _i32, _f, _d, _l, _lv, _g, _ver = map(
    _flag, (STRING, BOOL, INT, INT32, FLOAT32, DURATION, STRINGS, LEVEL, GATES, VERSION)
)


def _section(title: str, *flags: Flag) -> tuple[Flag, ...]:
    return tuple(dataclasses.replace(f, section=title) for f in flags)


def _none_if_empty(text: str) -> str | None:
    return text or None


def _on_off(text: str) -> bool:
    """``on`` → True, ``off`` → False (validation refuses anything else first)."""
    return text == "on"


def _controllers_help() -> str:
    names = ", ".join(
        f"{c.name} ({c.alias}{'' if c.enabled_by_default else ', off by default'})"
        for c in CONTROLLERS
    )
    return (
        "Controllers to enable: '*' enables all on-by-default controllers, 'foo' enables foo, "
        f"'-foo' disables foo; for each controller the first entry naming it wins. Known (alias): {names}."
    )


CLOUD_PROVIDER_FLAGS: Final = _section(
    "Cloud provider flags",
    _s("cloud-provider", "", "The provider for cloud services: the name of an installed provider (required).", field="cloud_provider"),
    _s("cloud-config", "", "The path to the cloud provider configuration file, given to the provider. Empty for none.", field="cloud_config", convert=_none_if_empty),
)  # fmt: skip

GENERIC_FLAGS: Final = _section(
    "Generic flags",
    _b("allocate-node-cidrs", False, "Whether CIDRs for Pods should be allocated and set on the cloud provider: node-ipam-controller (nodeipam, off unless named in --controllers) then gives each Node pod CIDRs cut from --cluster-cidr.", field="allocate_node_cidrs"),
    _b("allow-untagged-cloud", False, "Allow the cluster to run without the cluster-id on cloud instances (deprecated).", True, field="allow_untagged_cloud"),
    _s("cidr-allocator-type", "RangeAllocator", "Type of CIDR allocator to use (node IPAM only): RangeAllocator (from --cluster-cidr) or CloudAllocator (the cloud provider's own pod CIDRs).", field="cidr_allocator_type"),
    _s("cluster-cidr", "", "CIDR range for Pods in the cluster: one, or two comma-separated for dual-stack (needed by the route controller).", field="cluster_cidr"),
    _s("cluster-name", "kubernetes", "The instance prefix for the cluster, given to load balancer and route calls.", field="cluster_name"),
    _b("configure-cloud-routes", True, "Whether pod CIDRs should be configured as routes on the cloud provider.", field="configure_cloud_routes"),
    _d("controller-start-interval", 0.0, "Interval between starting controllers (plus up to as much again at random).", field="controller_start_interval"),
    _l("controllers", ("*",), _controllers_help(), field="controllers", convert=resolve_controllers),
    _s("external-cloud-volume-plugin", "", "The plugin to use when the cloud provider is external (only meaningful for kube-controller-manager).", False),
    _g("feature-gates", {}, "A set of key=value pairs that describe feature gates. Options are:\n" + featuregates.describe(), field="feature_gates", convert=FeatureGates),
    _i32("kube-api-burst", 30, "Burst to use while talking with the Kubernetes API server.", field="kube_api_burst"),
    _s("kube-api-content-type", "application/json", "Content type of requests sent to the API server: application/json (the default; upstream's is protobuf) reads everything as JSON; application/vnd.kubernetes.protobuf reads the informers' lists and watches (Nodes, Services, PersistentVolumes, CertificateSigningRequests) as protobuf, everything else as JSON. Request bodies are JSON either way.", field="kube_api_content_type"),
    _f("kube-api-qps", 20.0, "QPS to use while talking with the Kubernetes API server.", field="kube_api_qps"),
    _b("leader-elect", True, "Start a leader election client and gain leadership (a Lease) before running the controllers; for replicated deployments.", field="leader_elect"),
    _d("leader-elect-lease-duration", 15.0, "How long non-leader candidates wait after observing a leadership renewal before trying to take over the lease.", field="leader_election.lease_duration"),
    _d("leader-elect-renew-deadline", 10.0, "How long the leader tries to renew its leadership before giving it up; less than the lease duration.", field="leader_election.renew_deadline"),
    _s("leader-elect-resource-lock", "leases", "The type of resource object used for locking during leader election; only 'leases' is supported."),
    _s("leader-elect-resource-name", "cloud-controller-manager", "The name of the Lease used for locking during leader election.", field="leader_election.name"),
    _s("leader-elect-resource-namespace", "kube-system", "The namespace of the Lease used for locking during leader election.", field="leader_election.namespace"),
    _d("leader-elect-retry-period", 2.0, "How long clients wait between attempts to acquire and renew leadership.", field="leader_election.retry_period"),
    _d("min-resync-period", 12 * 3600.0, "The resync period of the informers is random in [min-resync-period, 2*min-resync-period).", False, field="min_resync_period"),
    _d("node-monitor-period", 5.0, "The period of the cloud node lifecycle controller's check of the nodes against the cloud.", field="node_monitor_period"),
    _d("node-sync-period", 0.0, "Deprecated no-op, kept for compatibility.", False),
    _d("route-reconciliation-period", 10.0, "The period for reconciling the routes created for nodes by the cloud provider.", field="route_reconciliation_period"),
    _b("use-service-account-credentials", False, "Use a separate service account's credentials for each controller.", field="use_service_account_credentials"),
)  # fmt: skip

LEADER_MIGRATION_FLAGS: Final = _section(
    "Leader-migration flags",
    _b("enable-leader-migration", False, "Whether to enable controller leader migration (acts only with --leader-elect).", field="enable_leader_migration"),
    _s("leader-migration-config", "", "Path to a LeaderMigrationConfiguration file (group controllermanager.config.k8s.io, version v1, v1beta1 or v1alpha1); empty: the default configuration."),
)  # fmt: skip

NODE_CONTROLLER_FLAGS: Final = _section(
    "Node controller flags",
    _i32("concurrent-node-syncs", 1, "Number of workers initialising nodes concurrently.", field="concurrent_node_syncs"),
    _i32("concurrent-node-status-updates", 0, "Number of workers refreshing node addresses concurrently; 0 uses --concurrent-node-syncs.", field="concurrent_node_status_updates"),
    _d("node-status-update-frequency", 300.0, "How often the cloud node controller refreshes the addresses of initialised nodes.", field="node_status_update_frequency"),
)  # fmt: skip

NODE_IPAM_CONTROLLER_FLAGS: Final = _section(
    "Node IPAM controller flags",
    _i32("node-cidr-mask-size", 0, "Mask size for node cidr in cluster (single-stack only). Default is 24 for IPv4 and 64 for IPv6.", field="node_cidr_mask_size"),
    _i32("node-cidr-mask-size-ipv4", 0, "Mask size for IPv4 node cidr in dual-stack cluster. Default is 24.", field="node_cidr_mask_size_ipv4"),
    _i32("node-cidr-mask-size-ipv6", 0, "Mask size for IPv6 node cidr in dual-stack cluster. Default is 64.", field="node_cidr_mask_size_ipv6"),
    _s("service-cluster-ip-range", "", "CIDR Range for Services in cluster (one, or two comma-separated for dual-stack), kept out of the Nodes' pod CIDRs. Requires --allocate-node-cidrs to be true.", field="service_cluster_ip_range"),
)  # fmt: skip

SERVICE_CONTROLLER_FLAGS: Final = _section(
    "Service controller flags",
    _i32("concurrent-service-syncs", 1, "Number of services synced concurrently; also the parallelism of load balancer host updates.", field="concurrent_service_syncs"),
)  # fmt: skip

MISC_FLAGS: Final = _section(
    "Misc flags",
    _s("kubeconfig", "", "Path to a kubeconfig file with the API server's location and credentials; empty (and no --master): in-cluster.", field="kubeconfig", convert=_none_if_empty),
    _s("master", "", "The address of the Kubernetes API server (overrides any value in the kubeconfig).", field="master", convert=_none_if_empty),
)  # fmt: skip

DEBUGGING_FLAGS: Final = _section(
    "Debugging flags",
    _b("contention-profiling", False, "Enable block profiling, if profiling is enabled.", False),
    _b("profiling", True, "Enable profiling via the web interface host:port/debug/pprof/.", False),
)  # fmt: skip

SECURE_SERVING_FLAGS: Final = _section(
    "Secure serving flags",
    _s("bind-address", "0.0.0.0", "The IP address on which to listen for --secure-port.", field="bind_address"),
    _s("cert-dir", "", "The directory of the TLS certificate pair; ignored with --tls-cert-file and --tls-private-key-file. Empty: a self-signed pair in memory.", field="cert_dir"),
    _b("disable-http2-serving", False, "Disable HTTP/2 serving.", False),
    _i("http2-max-streams-per-connection", 0, "The limit of HTTP/2 streams per client connection; 0 uses the default.", False),
    _b("permit-address-sharing", False, "Use SO_REUSEADDR when binding the port.", False),
    _b("permit-port-sharing", False, "Use SO_REUSEPORT when binding the port.", False),
    _i("secure-port", 10258, "The port on which to serve HTTPS (/healthz, /metrics, /configz); 0 turns serving off.", field="secure_port"),
    _s("tls-cert-file", "", "File containing the x509 certificate for HTTPS (CA certificates after it).", field="tls_cert_file"),
    _l("tls-cipher-suites", (), "Comma-separated list of cipher suites for the server.", False),
    _l("tls-curve-preferences", (), "Comma-separated list of elliptic curves for the server.", False),
    _s("tls-min-version", "", "Minimum TLS version supported.", False),
    _s("tls-private-key-file", "", "File containing the x509 private key matching --tls-cert-file.", field="tls_private_key_file"),
    _l("tls-sni-cert-key", (), "A pair of x509 certificate and private key file paths, optionally suffixed with domain patterns; repeatable.", False),
)  # fmt: skip

AUTHENTICATION_FLAGS: Final = _section(
    "Authentication flags",
    _s("authentication-kubeconfig", "", "Kubeconfig with the rights to create tokenreviews.authentication.k8s.io.", field="delegated_auth.authentication_kubeconfig"),
    _b("authentication-skip-lookup", False, "Do not look up the missing authentication configuration from the cluster.", field="delegated_auth.authentication_skip_lookup"),
    _d("authentication-token-webhook-cache-ttl", 10.0, "How long to cache responses from the token authenticator.", field="delegated_auth.authentication_token_webhook_cache_ttl"),
    _b("authentication-tolerate-lookup-failure", False, "Tolerate a failed lookup of the authentication configuration.", field="delegated_auth.authentication_tolerate_lookup_failure"),
    _s("client-ca-file", "", "CA bundle that authenticates client certificates.", field="delegated_auth.client_ca_file"),
    _l("requestheader-allowed-names", (), "Client certificate common names allowed to pass user names in request headers.", field="delegated_auth.requestheader_allowed_names"),
    _s("requestheader-client-ca-file", "", "Root certificate bundle that verifies client certificates of request-header proxies.", field="delegated_auth.requestheader_client_ca_file"),
    _l("requestheader-extra-headers-prefix", ("x-remote-extra-",), "Request header prefixes to inspect for user extras.", field="delegated_auth.requestheader_extra_headers_prefix"),
    _l("requestheader-group-headers", ("x-remote-group",), "Request headers to inspect for groups.", field="delegated_auth.requestheader_group_headers"),
    _l("requestheader-uid-headers", (), "Request headers to inspect for UIDs.", field="delegated_auth.requestheader_uid_headers"),
    _l("requestheader-username-headers", ("x-remote-user",), "Request headers to inspect for user names.", field="delegated_auth.requestheader_username_headers"),
)  # fmt: skip

AUTHORIZATION_FLAGS: Final = _section(
    "Authorization flags",
    _l("authorization-always-allow-paths", ("/healthz", "/readyz", "/livez"), "HTTP paths served without authorization.", field="delegated_auth.authorization_always_allow_paths"),
    _s("authorization-kubeconfig", "", "Kubeconfig with the rights to create subjectaccessreviews.authorization.k8s.io.", field="delegated_auth.authorization_kubeconfig"),
    _d("authorization-webhook-cache-authorized-ttl", 10.0, "How long to cache 'authorized' responses from the authorizer.", field="delegated_auth.authorization_webhook_cache_authorized_ttl"),
    _d("authorization-webhook-cache-unauthorized-ttl", 10.0, "How long to cache 'unauthorized' responses from the authorizer.", field="delegated_auth.authorization_webhook_cache_unauthorized_ttl"),
)  # fmt: skip

WEBHOOK_FLAGS: Final = _section(
    "Webhook flags",
    _l("webhooks", (), "Webhooks to enable, with the grammar of --controllers ('*' all). Known: " + ", ".join(wk.KNOWN_WEBHOOKS) + ". Served only with --feature-gates=CloudControllerManagerWebhook=true.", field="webhooks", convert=resolve_webhooks),
)  # fmt: skip

WEBHOOK_SERVING_FLAGS: Final = _section(
    "Webhook serving flags",
    _s("webhook-bind-address", "0.0.0.0", "The IP address on which to listen for --webhook-secure-port.", field="webhook_bind_address"),
    _s("webhook-client-ca-file", "", "A PEM bundle of CAs. Set: the webhook server asks every client for a certificate and refuses the TLS handshake without one these CAs signed (give kube-apiserver one through its AdmissionConfiguration's kubeConfigFile). Empty: AdmissionReviews from anyone who reaches the port are answered, as upstream's (restrict the port with a NetworkPolicy; docs/security.md).", field="webhook_client_ca_file"),
    _s("webhook-cert-dir", "", "The directory of the webhook server's TLS certificate pair. Empty: a self-signed pair in memory.", field="webhook_cert_dir"),
    _b("webhook-disable-http2-serving", False, "Disable HTTP/2 on the webhook server.", False),
    _i("webhook-secure-port", 10260, "The port on which to serve webhooks over HTTPS; 0 turns the webhook server off.", field="webhook_secure_port"),
    _l("webhook-tls-cipher-suites", (), "Comma-separated list of cipher suites for the webhook server.", False),
    _l("webhook-tls-curve-preferences", (), "Comma-separated list of elliptic curves for the webhook server.", False),
    _s("webhook-tls-cert-file", "", "File containing the x509 certificate of the webhook server.", field="webhook_tls_cert_file"),
    _s("webhook-tls-min-version", "", "Minimum TLS version of the webhook server.", False),
    _s("webhook-tls-private-key-file", "", "File containing the x509 private key of the webhook server.", field="webhook_tls_private_key_file"),
    _l("webhook-tls-sni-cert-key", (), "SNI certificate/key pairs of the webhook server; repeatable.", False),
)  # fmt: skip

LOGS_FLAGS: Final = _section(
    "Logs flags",
    _d("log-flush-frequency", 5.0, "Maximum time between log flushes.", False),
    _s("log-json-info-buffer-size", "0", "With the json format and split streams, the size of the info stream's buffer.", False),
    _b("log-json-split-stream", False, "With the json format, write errors to stderr and info to stdout.", False),
    _s("log-text-info-buffer-size", "0", "With the text format and split streams, the size of the info stream's buffer.", False),
    _b("log-text-split-stream", False, "With the text format, write errors to stderr and info to stdout.", False),
    _s("logging-format", "text", "Sets the log format: text or json.", field="logging_format"),
    _lv("v", 0, "Number for the log level verbosity: 1 logs the flags at start-up, 4 and above add debug messages.", shorthand="v", field="verbosity"),
    _s("vmodule", "", "Comma-separated list of pattern=N settings for file-filtered logging.", False),
)  # fmt: skip

KUBE_CCM_FLAGS: Final = _section(
    "kube-ccm flags (extensions, not upstream's)",
    _d("load-balancer-gc-period", 600.0, "How often load-balancer-gc-controller (off unless named in --controllers) looks for load balancers whose Service is gone; one is deleted when two sweeps in a row find it leaked.", field="load_balancer_gc_period"),
    _l("load-balancer-class", (), "A spec.loadBalancerClass whose Services this CCM serves; repeatable. Services of any other class are never touched. Default: none (upstream: only Services without a class).", field="load_balancer_classes.classes", convert=frozenset),
    _b("serve-unclassed-load-balancers", True, "Serve LoadBalancer Services that set no loadBalancerClass (upstream's only kind); false leaves them to another implementation, such as MetalLB.", field="load_balancer_classes.unclassed"),
    _d("node-sync-window", 1.0, "Node changes share one pass over the load balancers (one UpdateLoadBalancer each) until none has come for this long; 0 updates at once, as upstream.", field="node_sync_window"),
    _d("node-sync-max-delay", 10.0, "While node changes keep coming, their pass waits at most this long after the first of them (a value at or below --node-sync-window makes that a fixed window).", field="node_sync_max_delay"),
    _s("node-selector", "", "Label selector (kubectl -l syntax) of the Nodes this CCM manages; empty: every Node. Nodes whose providerID names another provider are never managed.", field="node_selector"),
    _b("enable-node-deletion", True, "Delete Nodes whose instance is confirmed gone; false: give them the shutdown taint and a Warning event instead.", field="enable_node_deletion"),
    _s("node-deletion-guard", "on", "on: delete no Node when the cloud reports too many instances gone at once (more than --node-deletion-guard-threshold of the Nodes, every Node of a zone, or every Node it was asked about, within --node-deletion-guard-window), as a cloud asked under a wrong identity does; a Warning NodeDeletionGuarded on each held Node says how to confirm. off: delete every Node whose instance is confirmed gone, as upstream.", field="node_deletion_guard", convert=_on_off),
    _f("node-deletion-guard-threshold", 0.3, "The node deletion guard trips when the Nodes reported gone within --node-deletion-guard-window are more than this share (0 to 1) of the Nodes this CCM serves (and at least --node-deletion-guard-min-nodes).", field="node_deletion_guard_settings.threshold"),
    _d("node-deletion-guard-window", 600.0, "How far back the node deletion guard counts the cloud's \"instance gone\" answers (Nodes deleted meanwhile included).", field="node_deletion_guard_settings.window"),
    _i32("node-deletion-guard-min-nodes", 3, "Fewer Nodes than this reported gone within the window never trip the node deletion guard's share and every-Node-asked rules (a zone trips with 2): small losses are deleted as without the guard.", field="node_deletion_guard_settings.min_nodes"),
    _f("cloud-api-qps", 0.0, "Cloud provider calls per second, for the cloud's API quota (in a composite, for each member provider); 0 means unlimited.", field="cloud_calls.qps"),
    _i32("cloud-api-burst", 10, "Cloud provider calls allowed at once above --cloud-api-qps after a quiet period.", field="cloud_calls.burst"),
    _i32("cloud-call-attempts", 3, "Tries of a cloud call that fails with an error the provider marks transient (throttling, a dropped connection), with jittered backoff, within --cloud-call-timeout; 1 never retries.", field="cloud_calls.attempts"),
    _d("cloud-call-timeout", 60.0, "Deadline of each cloud provider call; a call that hangs longer fails and is retried like any error.", field="cloud_call_timeout"),
    _d("shutdown-grace-period", 10.0, "On SIGTERM, how long in-flight syncs may run to completion before they are abandoned.", field="shutdown_grace_period"),
    _s("kube-api-transport", "aiohttp", "HTTP client of the API requests and watches: aiohttp, or curl (libcurl, HTTP/2: every controller's requests multiplexed over one connection; needs the kube-ccm[curl] extra).", field="kube_api_transport"),
    _i32("worker-processes", 1, "Processes the controllers run in under this one's leader lease: cloud-node-controller's Nodes and service-lb-controller's Services are split by a hash of their name across up to this many (no more than that controller's --concurrent-*-syncs, which are split among them), the other controllers run in the first; each watches on its own. 1 runs everything in this process.", field="worker_processes"),
    _b("dry-run", False, "Run every controller without changing anything: API writes go with dryRun=All (validated, not persisted), cloud calls that would change something are not made, and what would change is logged and summarised. Implies --leader-elect=false.", field="dry_run"),
)  # fmt: skip

GLOBAL_FLAGS: Final = _section(
    "Global flags",
    _b("help", False, "Help for this command: every flag, its default and what it does.", shorthand="h"),
    _ver("version", "false", "--version, --version=raw prints version information and quits."),
)  # fmt: skip

FLAGS: Final[tuple[Flag, ...]] = (
    *CLOUD_PROVIDER_FLAGS,
    *GENERIC_FLAGS,
    *LEADER_MIGRATION_FLAGS,
    *NODE_CONTROLLER_FLAGS,
    *NODE_IPAM_CONTROLLER_FLAGS,
    *SERVICE_CONTROLLER_FLAGS,
    *MISC_FLAGS,
    *DEBUGGING_FLAGS,
    *SECURE_SERVING_FLAGS,
    *AUTHENTICATION_FLAGS,
    *AUTHORIZATION_FLAGS,
    *WEBHOOK_FLAGS,
    *WEBHOOK_SERVING_FLAGS,
    *LOGS_FLAGS,
    *KUBE_CCM_FLAGS,
    *GLOBAL_FLAGS,
)
"""Every flag ``kube-ccm run`` accepts, in ``--help`` order: upstream's and kube-ccm's extensions."""

BY_NAME: Final[Mapping[str, Flag]] = {f.name: f for f in FLAGS}


def parse_flags(argv: Sequence[str]) -> ParsedFlags:
    """argv (without the program name) → every flag's value; syntax errors only."""
    return parse_argv(argv, FLAGS)
