# ruff: noqa: E501  (the flag table reads best one flag per line)
"""The daemon's flags: upstream's names, defaults and Go/pflag parsing (§8.3).

Every flag of upstream's cloud-controller-manager is accepted, so manifests
written for a Go CCM work unchanged; the ones that do not act yet (secure
serving, webhooks, authn/authz, profiling, IPAM) are parsed, validated where
upstream validates them, kept in :attr:`DaemonConfig.extra_flags`, and say so
in ``--help``. Parsing follows pflag: ``--name=value`` or ``--name value``;
booleans are ``--name`` or ``--name=false`` and never take the next argument;
durations are Go durations (``5m0s``; a bare number is an error, as in Go);
``-v``/``--v`` is the verbosity.

:func:`parse_options` turns argv into a :class:`DaemonConfig` or raises
:class:`OptionsError` with a message that says what to fix (§8.10).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kube_ccm import __version__
from kube_ccm.api import wellknown as wk
from kube_ccm.app.manager import DaemonConfig
from kube_ccm.runtime.leaderelection import LeaderElectionConfig


class OptionsError(Exception):
    """The flags are invalid; the message says which and what to write instead."""


class HelpRequested(Exception):  # noqa: N818 (a signal, not an error)
    """``-h``/``--help``: the caller prints :func:`usage` and exits 0."""


class VersionRequested(Exception):  # noqa: N818
    """``--version``: the caller prints the version and exits 0."""


# -- value parsers ---------------------------------------------------------------

_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_go_duration(text: str) -> float:
    """Go's ``time.ParseDuration`` → seconds (``1h30m``, ``500ms``, ``0``, ``-5s``)."""
    original = text
    sign = 1.0
    if text and text[0] in "+-":
        sign = -1.0 if text[0] == "-" else 1.0
        text = text[1:]
    if text == "0":
        return 0.0
    if not text:
        raise ValueError(f'time: invalid duration "{original}"')
    position = 0
    total = 0.0
    while position < len(text):
        match = _DURATION_PART.match(text, position)
        if match is None:
            if re.fullmatch(r"[\d.]+", text[position:]):
                raise ValueError(f'time: missing unit in duration "{original}"')
            raise ValueError(f'time: invalid duration "{original}"')
        total += float(match.group(1)) * _UNITS[match.group(2)]
        position = match.end()
    return sign * total


def format_go_duration(seconds: float) -> str:
    """Seconds → Go's ``Duration.String()`` (``5m0s``, ``12h0m0s``, ``500ms``, ``0s``)."""
    if seconds == 0:
        return "0s"
    if abs(seconds) < 1:
        return f"{seconds * 1000:g}ms"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{secs:g}s"
    if hours or minutes:
        text = f"{int(minutes)}m{text}"
    if hours:
        text = f"{int(hours)}h{text}"
    return text


def _parse_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("1", "t", "true"):
        return True
    if lowered in ("0", "f", "false"):
        return False
    raise ValueError(f'strconv.ParseBool: parsing "{text}": invalid syntax')


def _parse_int(text: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        raise ValueError(f'strconv.ParseInt: parsing "{text}": invalid syntax') from None


def _parse_float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f'strconv.ParseFloat: parsing "{text}": invalid syntax') from None


def _parse_list(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


# -- the flag table ----------------------------------------------------------------


@dataclass(frozen=True)
class Flag:
    name: str
    default: Any
    help: str
    parse: Callable[[str], Any] = str
    kind: str = "string"
    acting: bool = True
    """False: accepted for compatibility, not acted on yet (said in --help)."""

    @property
    def is_bool(self) -> bool:
        return self.kind == "bool"

    def default_text(self) -> str:
        if self.kind == "duration":
            return format_go_duration(self.default)
        if self.kind == "bool":
            return "true" if self.default else "false"
        if self.kind == "strings":
            return ",".join(self.default) if self.default else ""
        return str(self.default) if self.default != "" else '""'


def _b(name: str, default: bool, help: str, acting: bool = True) -> Flag:
    return Flag(name, default, help, _parse_bool, "bool", acting)


def _s(name: str, default: str, help: str, acting: bool = True) -> Flag:
    return Flag(name, default, help, str, "string", acting)


def _i(name: str, default: int, help: str, acting: bool = True) -> Flag:
    return Flag(name, default, help, _parse_int, "int", acting)


def _f(name: str, default: float, help: str) -> Flag:
    return Flag(name, default, help, _parse_float, "float")


def _d(name: str, default: float, help: str, acting: bool = True) -> Flag:
    return Flag(name, default, help, parse_go_duration, "duration", acting)


def _l(name: str, default: tuple[str, ...], help: str, acting: bool = True) -> Flag:
    return Flag(name, default, help, _parse_list, "strings", acting)


FLAGS: tuple[Flag, ...] = (
    # generic / cloud
    _s("cloud-provider", "", "The provider for cloud services (required; an installed provider's name)."),
    _s("cloud-config", "", "The path to the cloud provider configuration file."),
    _s("external-cloud-volume-plugin", "", "Only meaningful for kube-controller-manager; accepted.", False),
    _b("use-service-account-credentials", False, "Use individual service account credentials for each controller.", False),
    _b("allow-untagged-cloud", False, "Allow the cluster to run without the cluster-id on cloud instances (deprecated)."),
    _d("route-reconciliation-period", 10.0, "The period for reconciling routes created for Nodes by the cloud provider."),
    _d("node-monitor-period", 5.0, "The period of the cloud node lifecycle check."),
    _s("cluster-name", "kubernetes", "The instance prefix for the cluster."),
    _s("cluster-cidr", "", "CIDR range for Pods in the cluster (comma-separated, at most two)."),
    _b("allocate-node-cidrs", False, "Allocate CIDRs for Pods (node IPAM only).", False),
    _s("cidr-allocator-type", "RangeAllocator", "Type of CIDR allocator (node IPAM only).", False),
    _b("configure-cloud-routes", True, "Whether CIDRs from --allocate-node-cidrs should be configured on the cloud provider."),
    _d("node-sync-period", 0.0, "Deprecated no-op.", False),
    _l("controllers", ("*",), "Controllers to enable: '*' all, 'foo' on, '-foo' off; first match wins. Known: "
       + ", ".join(n.name for n in wk.CONTROLLERS) + " (aliases: " + ", ".join(n.alias for n in wk.CONTROLLERS) + ")."),
    _d("min-resync-period", 12 * 3600.0, "Informer resync period is random in [min-resync-period, 2*min-resync-period).", False),
    _s("kube-api-content-type", "application/vnd.kubernetes.protobuf", "Content type of requests sent to the apiserver (kube-ccm always sends JSON).", False),
    _f("kube-api-qps", 20.0, "QPS to use while talking with kubernetes apiserver (per controller client)."),
    _i("kube-api-burst", 30, "Burst to use while talking with kubernetes apiserver."),
    _d("controller-start-interval", 0.0, "Interval between starting controller managers.", False),
    _b("leader-elect", True, "Run as one of several replicas with one active leader, elected on a Lease."),
    _d("leader-elect-lease-duration", 15.0, "How long non-leaders wait before trying to take over the lease."),
    _d("leader-elect-renew-deadline", 10.0, "How long the leader tries to renew before giving up leadership."),
    _d("leader-elect-retry-period", 2.0, "How long clients wait between attempts to acquire and renew."),
    _s("leader-elect-resource-lock", "leases", "The lock type; only 'leases' is supported."),
    _s("leader-elect-resource-name", "cloud-controller-manager", "The name of the Lease."),
    _s("leader-elect-resource-namespace", "kube-system", "The namespace of the Lease."),
    _b("enable-leader-migration", False, "Enable controller leader migration.", False),
    _s("leader-migration-config", "", "Path to the leader migration configuration file (empty: the default).", False),
    _s("feature-gates", "", "key=value pairs of feature gates: " + "see docs/user-guide.md."),
    _b("profiling", True, "Enable profiling via web interface host:port/debug/pprof/.", False),
    _b("contention-profiling", False, "Enable block profiling, if profiling is enabled.", False),
    _s("master", "", "The address of the Kubernetes API server (overrides any value in kubeconfig)."),
    _s("kubeconfig", "", "Path to kubeconfig file with authorization and master location information."),
    _d("node-status-update-frequency", 300.0, "How often the cloud node controller refreshes node addresses."),
    _i("concurrent-node-syncs", 1, "Number of workers initialising nodes concurrently."),
    _i("concurrent-node-status-updates", 0, "Workers of the periodic address refresh; 0 = --concurrent-node-syncs."),
    _i("concurrent-service-syncs", 1, "Number of services that are allowed to sync concurrently."),
    # kube-ccm's own
    _d("cloud-call-timeout", 60.0, "kube-ccm: deadline of every cloud provider call; a hang becomes a retried error."),
    _d("shutdown-grace-period", 10.0, "kube-ccm: on SIGTERM, how long in-flight syncs may finish before being abandoned."),
    # secure serving, authn/authz (accepted; serving comes with the production-daemon work)
    _s("bind-address", "0.0.0.0", "The IP address on which to listen for --secure-port."),
    _i("secure-port", 10258, "The port on which to serve HTTPS (0: off)."),
    _s("cert-dir", "", "The directory where the TLS certs are located."),
    _s("tls-cert-file", "", "File containing the default x509 certificate for HTTPS."),
    _s("tls-private-key-file", "", "File containing the default x509 private key."),
    _s("tls-cipher-suites", "", "Comma-separated list of cipher suites.", False),
    _s("tls-curve-preferences", "", "Comma-separated list of curve preferences.", False),
    _s("tls-min-version", "", "Minimum TLS version supported.", False),
    _s("tls-sni-cert-key", "", "A pair of x509 certificate and private key file paths.", False),
    _i("http2-max-streams-per-connection", 0, "The limit of HTTP/2 streams per connection.", False),
    _b("disable-http2-serving", False, "Disable HTTP/2 serving.", False),
    _b("permit-port-sharing", False, "Use SO_REUSEPORT when binding the port.", False),
    _b("permit-address-sharing", False, "Use SO_REUSEADDR when binding the address.", False),
    _s("authentication-kubeconfig", "", "Kubeconfig for tokenreviews.", False),
    _d("authentication-token-webhook-cache-ttl", 10.0, "Cache duration of webhook token authentication.", False),
    _b("authentication-skip-lookup", False, "Skip looking up the authentication configmap.", False),
    _b("authentication-tolerate-lookup-failure", False, "Tolerate a failed authentication configmap lookup.", False),
    _s("client-ca-file", "", "CA bundle for client certificate authentication.", False),
    _s("requestheader-client-ca-file", "", "Root certificate bundle for request-header proxies.", False),
    _s("requestheader-allowed-names", "", "Client certificate common names allowed for request headers.", False),
    _s("requestheader-username-headers", "x-remote-user", "Request headers to inspect for usernames.", False),
    _s("requestheader-group-headers", "x-remote-group", "Request headers to inspect for groups.", False),
    _s("requestheader-extra-headers-prefix", "x-remote-extra-", "Request header prefixes for extras.", False),
    _s("requestheader-uid-headers", "", "Request headers to inspect for UIDs.", False),
    _s("authorization-kubeconfig", "", "Kubeconfig for subjectaccessreviews.", False),
    _d("authorization-webhook-cache-authorized-ttl", 10.0, "Cache duration of authorized responses.", False),
    _d("authorization-webhook-cache-unauthorized-ttl", 10.0, "Cache duration of unauthorized responses.", False),
    _s("authorization-always-allow-paths", "/healthz,/readyz,/livez", "HTTP paths that skip authorization.", False),
    # webhooks
    _s("webhooks", "", "Webhooks to enable."),
    _s("webhook-bind-address", "0.0.0.0", "Webhook server bind address."),
    _i("webhook-secure-port", 10260, "Webhook server port (0: off)."),
    _b("webhook-disable-http2-serving", False, "Disable HTTP/2 on the webhook server.", False),
    _s("webhook-cert-dir", "", "Webhook TLS cert directory."),
    _s("webhook-tls-cert-file", "", "Webhook TLS certificate."),
    _s("webhook-tls-private-key-file", "", "Webhook TLS key."),
    _s("webhook-tls-cipher-suites", "", "Webhook TLS cipher suites.", False),
    _s("webhook-tls-curve-preferences", "", "Webhook TLS curve preferences.", False),
    _s("webhook-tls-min-version", "", "Webhook minimum TLS version.", False),
    _s("webhook-tls-sni-cert-key", "", "Webhook SNI cert/key pairs.", False),
    # global / logging
    _i("v", 0, "Log verbosity (4 and above: debug)."),
    _s("vmodule", "", "Per-module verbosity (accepted; not acted on).", False),
    _d("log-flush-frequency", 5.0, "Maximum seconds between log flushes.", False),
    _s("logging-format", "text", "Log format: text or json."),
    _b("log-text-split-stream", False, "Accepted; not acted on.", False),
    _s("log-text-info-buffer-size", "0", "Accepted; not acted on.", False),
    _b("log-json-split-stream", False, "Accepted; not acted on.", False),
    _s("log-json-info-buffer-size", "0", "Accepted; not acted on.", False),
)  # fmt: skip

_BY_NAME: dict[str, Flag] = {f.name: f for f in FLAGS}


# -- parsing ---------------------------------------------------------------------


def parse_flags(argv: Sequence[str]) -> dict[str, Any]:
    """argv → {flag name: parsed value} for every flag (defaults filled in)."""
    values: dict[str, Any] = {f.name: f.default for f in FLAGS}
    args = list(argv)
    index = 0
    while index < len(args):
        arg = args[index]
        index += 1
        if arg in ("-h", "--help", "-help"):
            raise HelpRequested
        if arg == "--":
            if index < len(args):
                raise OptionsError(
                    f"unexpected arguments {args[index:]!r}: this command takes only flags"
                )
            break
        if not arg.startswith("-") or arg == "-":
            raise OptionsError(f"unexpected argument {arg!r}: this command takes only flags")
        name, has_value, value = arg.lstrip("-").partition("=")
        if name == "version":
            raise VersionRequested
        flag = _BY_NAME.get(name)
        if flag is None:
            raise OptionsError(f"unknown flag: {arg.split('=')[0]}")
        if not has_value:
            if flag.is_bool:
                value = "true"
            elif index < len(args):
                value = args[index]
                index += 1
            else:
                raise OptionsError(f"flag needs an argument: --{name}")
        try:
            values[name] = flag.parse(value)
        except ValueError as exc:
            raise OptionsError(f'invalid argument "{value}" for "--{name}" flag: {exc}') from None
    return values


def resolve_controllers(requested: Sequence[str]) -> frozenset[str]:
    """§8.2: aliases → canonical names, first hit wins, ``*`` turns on the rest."""
    alias_to_name = {n.alias: n.name for n in wk.ALL_CONTROLLERS}
    known = [n.name for n in wk.ALL_CONTROLLERS]
    entries: list[str] = []
    for raw in requested:
        negated = raw.startswith("-")
        bare = raw[1:] if negated else raw
        canonical = alias_to_name.get(bare, bare)
        if canonical != "*" and canonical not in known:
            raise OptionsError(
                f'"{bare}" is not in the list of known controllers: use one of '
                f"{', '.join(known)} (or their aliases {', '.join(alias_to_name)}), "
                "'*' for all, '-name' to disable one"
            )
        entries.append(("-" if negated else "") + canonical)
    enabled: set[str] = set()
    for name in known:
        decision: bool | None = None
        for entry in entries:
            if entry == name:
                decision = True
                break
            if entry == f"-{name}":
                decision = False
                break
        if decision is None:
            decision = "*" in entries and name not in wk.DISABLED_BY_DEFAULT
        if decision:
            enabled.add(name)
    return frozenset(enabled)


def resolve_webhooks(requested: Sequence[str]) -> frozenset[str]:
    """``--webhooks``: the ``--controllers`` grammar over the known webhooks (§8.7)."""
    enabled: set[str] = set()
    for name in wk.KNOWN_WEBHOOKS:
        decision: bool | None = None
        for entry in requested:
            if entry in (name, f"-{name}"):
                decision = entry == name
                break
        if decision is None:
            decision = "*" in requested
        if decision:
            enabled.add(name)
    for entry in requested:
        bare = entry.lstrip("-")
        if bare != "*" and bare not in wk.KNOWN_WEBHOOKS:
            raise OptionsError(
                f'"{bare}" is not in the list of known webhooks: use '
                f"{', '.join(wk.KNOWN_WEBHOOKS)} or '*'"
            )
    return frozenset(enabled)


KNOWN_FEATURE_GATES: Mapping[str, bool] = {
    "CloudControllerManagerWebhook": False,
    "CloudControllerManagerWatchBasedRoutesReconciliation": False,
    "ControllerManagerReleaseLeaderElectionLockOnExit": False,
    "LoggingAlphaOptions": False,
    "LoggingBetaOptions": True,
    "ContextualLogging": True,
}


def parse_feature_gates(text: str) -> Mapping[str, bool]:
    """``Name=true,Other=false`` → every known gate's value (§8.8)."""
    gates = dict(KNOWN_FEATURE_GATES)
    for part in _parse_list(text):
        name, has_value, value = part.partition("=")
        name = name.strip()
        if not has_value:
            raise OptionsError(f"missing bool value for feature gate {name}: write {name}=true")
        if name not in gates:
            raise OptionsError(
                f"unrecognized feature gate: {name} (known: {', '.join(sorted(gates))})"
            )
        try:
            gates[name] = _parse_bool(value.strip())
        except ValueError:
            raise OptionsError(
                f"invalid value of {name}={value}, err: strconv.ParseBool: invalid syntax"
            ) from None
    return gates


def _validate_leader_migration(path: str) -> None:
    """A LeaderMigrationConfiguration file must parse and use ``leases`` (§8.5)."""
    if not path:
        return
    try:
        document = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise OptionsError(
            f"cannot read --leader-migration-config {path!r}: {exc.strerror}"
        ) from exc
    except yaml.YAMLError as exc:
        raise OptionsError(f"--leader-migration-config {path!r} is not valid YAML: {exc}") from exc
    if not isinstance(document, dict) or document.get("kind") != "LeaderMigrationConfiguration":
        raise OptionsError(
            f"--leader-migration-config {path!r} must be a LeaderMigrationConfiguration "
            "(apiVersion controllermanager.config.k8s.io/v1)"
        )
    if not document.get("leaderName"):
        raise OptionsError(f"--leader-migration-config {path!r}: leaderName is required")
    if document.get("resourceLock", "leases") != "leases":
        raise OptionsError(f'--leader-migration-config {path!r}: resourceLock must be "leases"')
    for entry in document.get("controllerLeaders") or []:
        if not isinstance(entry, dict) or not entry.get("name") or not entry.get("component"):
            raise OptionsError(
                f"--leader-migration-config {path!r}: every controllerLeaders entry needs "
                "a name and a component"
            )


def validate(values: Mapping[str, Any]) -> None:
    """§8.10, plus the node-controller checks upstream has but never calls."""
    if not values["cloud-provider"]:
        raise OptionsError(
            "--cloud-provider cannot be empty: name the provider to run, e.g. "
            "--cloud-provider=simulated"
        )
    if values["leader-elect"] and values["leader-elect-resource-lock"] != "leases":
        raise OptionsError('resourceLock value must be "leases"')
    if values["concurrent-node-syncs"] <= 0:
        raise OptionsError("concurrent-node-syncs must be a positive number")
    if values["concurrent-service-syncs"] <= 0:
        raise OptionsError("--concurrent-service-syncs must be a positive number")
    if values["concurrent-node-status-updates"] < 0:
        raise OptionsError("concurrent-node-status-updates cannot be a negative number")
    if values["kube-api-qps"] <= 0 or values["kube-api-burst"] <= 0:
        raise OptionsError("--kube-api-qps and --kube-api-burst must be positive")
    for port_flag in ("secure-port", "webhook-secure-port"):
        if not 0 <= values[port_flag] <= 65535:
            raise OptionsError(f"--{port_flag} {values[port_flag]} must be between 0 and 65535")
    if values["webhook-secure-port"] and values["webhook-secure-port"] == values["secure-port"]:
        raise OptionsError("--webhook-secure-port cannot be the same value as --secure-port")
    resolve_webhooks(_parse_list(values["webhooks"]))
    if values["logging-format"] not in ("text", "json"):
        raise OptionsError(
            f'unsupported logging format "{values["logging-format"]}": use text or json'
        )
    for duration_flag in (
        "node-monitor-period",
        "node-status-update-frequency",
        "cloud-call-timeout",
    ):
        if values[duration_flag] <= 0:
            raise OptionsError(f"--{duration_flag} must be a positive duration, e.g. 5s")
    if values["enable-leader-migration"]:
        _validate_leader_migration(values["leader-migration-config"])


def parse_options(argv: Sequence[str]) -> DaemonConfig:
    """argv (without the program name) → the daemon's configuration."""
    values = parse_flags(argv)
    validate(values)
    controllers = resolve_controllers(values["controllers"])
    gates = parse_feature_gates(values["feature-gates"])
    extra = {f.name: values[f.name] for f in FLAGS if not f.acting}
    return DaemonConfig(
        cloud_provider=values["cloud-provider"],
        cloud_config=values["cloud-config"] or None,
        kubeconfig=values["kubeconfig"] or None,
        master=values["master"] or None,
        controllers=controllers,
        cluster_name=values["cluster-name"],
        node_monitor_period=values["node-monitor-period"],
        node_status_update_frequency=values["node-status-update-frequency"],
        concurrent_node_syncs=values["concurrent-node-syncs"],
        concurrent_node_status_updates=values["concurrent-node-status-updates"],
        concurrent_service_syncs=values["concurrent-service-syncs"],
        cluster_cidr=values["cluster-cidr"],
        configure_cloud_routes=values["configure-cloud-routes"],
        route_reconciliation_period=values["route-reconciliation-period"],
        secure_port=values["secure-port"],
        bind_address=values["bind-address"],
        cert_dir=values["cert-dir"],
        tls_cert_file=values["tls-cert-file"],
        tls_private_key_file=values["tls-private-key-file"],
        webhooks=resolve_webhooks(_parse_list(values["webhooks"])),
        webhook_bind_address=values["webhook-bind-address"],
        webhook_secure_port=values["webhook-secure-port"],
        webhook_cert_dir=values["webhook-cert-dir"],
        webhook_tls_cert_file=values["webhook-tls-cert-file"],
        webhook_tls_private_key_file=values["webhook-tls-private-key-file"],
        kube_api_qps=values["kube-api-qps"],
        kube_api_burst=values["kube-api-burst"],
        allow_untagged_cloud=values["allow-untagged-cloud"],
        leader_elect=values["leader-elect"],
        leader_election=LeaderElectionConfig(
            namespace=values["leader-elect-resource-namespace"],
            name=values["leader-elect-resource-name"],
            lease_duration=values["leader-elect-lease-duration"],
            renew_deadline=values["leader-elect-renew-deadline"],
            retry_period=values["leader-elect-retry-period"],
        ),
        cloud_call_timeout=values["cloud-call-timeout"],
        shutdown_grace_period=values["shutdown-grace-period"],
        verbosity=values["v"],
        logging_format=values["logging-format"],
        feature_gates=gates,
        extra_flags=extra,
    )


def usage(program: str = "kube-ccm run") -> str:
    lines = [
        f"Usage: {program} --cloud-provider=NAME [flags]",
        "",
        "The Kubernetes cloud-controller-manager, in Python (kube-ccm "
        f"{__version__}). Flags are upstream's, parsed as Go does.",
        "",
    ]
    for flag in FLAGS:
        value = "" if flag.is_bool else f" {flag.kind}"
        note = "" if flag.acting else " [accepted; not acted on yet]"
        lines.append(f"      --{flag.name}{value}")
        lines.append(f"            {flag.help} (default {flag.default_text()}){note}")
    lines += ["  -h, --help", "            Help for this command.", "      --version",
              "            Print the version and exit."]  # fmt: skip
    return "\n".join(lines) + "\n"


def effective_flags(argv: Sequence[str]) -> list[str]:
    """``FLAG: --name="value"`` lines, as upstream logs them at start-up."""
    values = parse_flags(argv)
    lines = []
    for flag in FLAGS:
        shown = Flag(flag.name, values[flag.name], "", kind=flag.kind).default_text()
        lines.append(f'FLAG: --{flag.name}="{shown.strip(chr(34))}"')
    return lines
