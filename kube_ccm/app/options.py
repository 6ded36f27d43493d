# ruff: noqa: E501  (the flag table reads best one flag per line)
"""The daemon's flags: upstream's names, defaults and pflag syntax, checked.

Why: operators replace a Go cloud-controller-manager with kube-ccm by changing
the image, not the manifest. So every upstream flag is accepted, with its name,
default and syntax; the ones nothing acts on yet (profiling, delegated
authn/authz, IPAM, ...) are parsed, kept in ``DaemonConfig.extra_flags`` and
marked "accepted, not yet acting" in ``--help``.

Syntax, as pflag parses it:

* ``--name=value`` or ``--name value``; a boolean is ``--name``,
  ``--name=true`` or ``--name=false`` and never takes the next argument;
* shorthands ``-v=4``, ``-v 4``, ``-v4`` and ``-h``; ``--`` ends the flags;
* durations are Go durations (``5m0s``, ``1h30m``, ``500ms``; a bare number
  other than ``0`` is an error, as in Go); integers take Go's ``0x``/``0o``/
  ``0b`` prefixes; list flags (``--controllers``, ``--webhooks``, ...) repeat
  by appending, ``--feature-gates`` by merging; a repeated scalar flag: the
  last one wins;
* positional arguments are refused; ``-h``/``--help`` and ``--version`` are
  answered by the caller (:class:`HelpRequested`, :class:`VersionRequested`).

:func:`parse_options` turns argv into a :class:`DaemonConfig` or raises
:class:`OptionsError`, whose message says what to change.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from kube_ccm import __version__
from kube_ccm.api import wellknown as wk
from kube_ccm.api.selectors import SelectorError, parse_selector
from kube_ccm.app import featuregates
from kube_ccm.app.config import DaemonConfig
from kube_ccm.app.delegated import DelegatedAuthConfig
from kube_ccm.app.descriptors import CONTROLLERS, DISABLED_BY_DEFAULT
from kube_ccm.app.featuregates import FeatureGates
from kube_ccm.cloudprovider import one_line
from kube_ccm.controllers.service import LoadBalancerClasses
from kube_ccm.runtime.cloudcalls import CloudCallPolicy
from kube_ccm.runtime.leaderelection import JITTER_FACTOR, LeaderElectionConfig

# -- errors ------------------------------------------------------------------------


class OptionsError(Exception):
    """The flags are invalid. One message per problem, each saying what to write instead."""

    def __init__(self, *problems: str) -> None:
        problems = tuple(one_line(p) for p in problems)
        super().__init__("\n".join(problems))
        self.problems: tuple[str, ...] = problems


class HelpRequested(Exception):  # noqa: N818 (a request, not an error)
    """``-h``/``--help``: the caller prints :func:`usage` and exits 0."""


class VersionRequested(Exception):  # noqa: N818
    """``--version`` (``raw``: ``--version=raw``): the caller prints the version, exits 0."""

    def __init__(self, *, raw: bool) -> None:
        super().__init__("--version=raw" if raw else "--version")
        self.raw = raw


# -- Go value syntax ---------------------------------------------------------------

_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)([^\d.]*)")
_UNITS: Final = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}  # fmt: skip


def parse_go_duration(text: str) -> float:
    """Go's ``time.ParseDuration``, in seconds: ``1h30m``, ``500ms``, ``0``, ``-5s``."""
    body = text[1:] if text[:1] in ("+", "-") else text
    sign = -1.0 if text[:1] == "-" else 1.0
    if body == "0":
        return 0.0
    if not body:
        raise ValueError(f'time: invalid duration "{text}"')
    total = 0.0
    position = 0
    while position < len(body):
        match = _DURATION_PART.match(body, position)
        if match is None:
            raise ValueError(f'time: invalid duration "{text}"')
        number, unit = match.groups()
        if not unit:
            raise ValueError(f'time: missing unit in duration "{text}"')
        if unit not in _UNITS:
            raise ValueError(f'time: unknown unit "{unit}" in duration "{text}"')
        total += float(number) * _UNITS[unit]
        position = match.end()
    return sign * total


def format_go_duration(seconds: float) -> str:
    """Seconds → Go's ``Duration.String()``: ``5m0s``, ``12h0m0s``, ``500ms``, ``0s``."""
    if seconds == 0:
        return "0s"
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    if seconds < 1:
        for unit, scale in (("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
            if seconds >= scale:
                return f"{sign}{round(seconds / scale, 9):g}{unit}"
        return f"{sign}{seconds / 1e-9:g}ns"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{round(secs, 9):g}s"
    if hours or minutes:
        text = f"{int(minutes)}m{text}"
    if hours:
        text = f"{int(hours)}h{text}"
    return sign + text


def _parse_bool(text: str) -> bool:
    """Go's ``strconv.ParseBool``: exactly these spellings."""
    if text in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if text in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise ValueError(f'strconv.ParseBool: parsing "{text}": invalid syntax')


def _int_parser(bits: int) -> Callable[[str], int]:
    """Go's ``strconv.ParseInt(text, 0, bits)``: sign, ``0x``/``0o``/``0b``, leading-0 octal."""
    limit = 1 << (bits - 1)

    def parse(text: str) -> int:
        try:
            if not text.isascii() or text.strip() != text:
                raise ValueError
            octal = re.fullmatch(r"[+-]?0[0-7_]+", text)
            value = int(text, 8) if octal else int(text, 0)
        except ValueError:
            raise ValueError(f'strconv.ParseInt: parsing "{text}": invalid syntax') from None
        if not -limit <= value < limit:
            raise ValueError(f'strconv.ParseInt: parsing "{text}": value out of range')
        return value

    return parse


def _parse_level(text: str) -> int:
    """klog's ``Level``: a non-negative decimal."""
    if not re.fullmatch(r"\d+", text):
        raise ValueError(f'strconv.ParseUint: parsing "{text}": invalid syntax')
    return int(text)


def _parse_float(text: str) -> float:
    try:
        if not text.isascii() or text.strip() != text or "_" in text:
            raise ValueError
        return float(text)
    except ValueError:
        raise ValueError(f'strconv.ParseFloat: parsing "{text}": invalid syntax') from None


def _format_float(value: float) -> str:
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


def _parse_strings(text: str) -> tuple[str, ...]:
    """A pflag string slice: comma-separated; kube-ccm also trims spaces around items."""
    if not text:
        return ()
    return tuple(part.strip() for part in text.split(","))


def _parse_version(text: str) -> str:
    if text == "raw":
        return text
    return "true" if _parse_bool(text) else "false"


# -- the flag table ----------------------------------------------------------------


@dataclass(frozen=True)
class FlagType:
    """How a flag's text becomes a value, and back (for ``--help`` and the FLAG lines)."""

    name: str
    """Shown after the flag in ``--help``, as pflag does (empty for booleans)."""
    parse: Callable[[str], Any]
    show: Callable[[Any], str] = str
    no_opt_value: str | None = None
    """The value when the flag is given without ``=value`` (then it never takes the next argument)."""
    merge: Callable[[Any, Any], Any] | None = None
    """How a repeated flag combines with its earlier value (None: the last one wins)."""
    quoted: bool = False


STRING: Final = FlagType("string", str, quoted=True)
BOOL: Final = FlagType("", _parse_bool, lambda v: "true" if v else "false", no_opt_value="true")
INT: Final = FlagType("int", _int_parser(64))
INT32: Final = FlagType("int32", _int_parser(32))
FLOAT32: Final = FlagType("float32", _parse_float, _format_float)
DURATION: Final = FlagType("duration", parse_go_duration, format_go_duration)
STRINGS: Final = FlagType("strings", _parse_strings, lambda v: "[" + ",".join(v) + "]", merge=lambda old, new: (*old, *new))  # fmt: skip
LEVEL: Final = FlagType("Level", _parse_level)
GATES: Final = FlagType("mapStringBool", featuregates.parse_settings, featuregates.format_settings, merge=lambda old, new: {**old, **new}, quoted=True)  # fmt: skip
VERSION: Final = FlagType("version[=true]", _parse_version, no_opt_value="true")


@dataclass(frozen=True)
class Flag:
    name: str
    type: FlagType
    default: Any
    help: str
    acting: bool = True
    """False: accepted for compatibility, not acted on yet (said in ``--help``)."""
    section: str = ""
    shorthand: str = ""

    def show(self, value: Any) -> str:
        """The value as pflag prints it."""
        return self.type.show(value)

    def default_text(self) -> str:
        shown = self.show(self.default)
        return json.dumps(shown, ensure_ascii=False) if self.type.quoted else shown


def _flag(type_: FlagType) -> Callable[..., Flag]:
    def make(name: str, default: Any, help: str, acting: bool = True, shorthand: str = "") -> Flag:
        return Flag(name, type_, default, help, acting, shorthand=shorthand)

    return make


_s, _b, _i, _i32, _f, _d, _l, _lv, _g, _ver = map(
    _flag, (STRING, BOOL, INT, INT32, FLOAT32, DURATION, STRINGS, LEVEL, GATES, VERSION)
)


def _section(title: str, *flags: Flag) -> tuple[Flag, ...]:
    return tuple(dataclasses.replace(f, section=title) for f in flags)


def _controllers_help() -> str:
    names = ", ".join(
        f"{c.name} ({c.alias}{'' if c.enabled_by_default else ', off by default'})"
        for c in CONTROLLERS
    )
    return (
        "Controllers to enable: '*' enables all on-by-default controllers, 'foo' enables foo, "
        f"'-foo' disables foo; for each controller the first entry naming it wins. Known (alias): {names}."
    )


NOT_ACTING: Final = "accepted, not yet acting"

FLAGS: Final[tuple[Flag, ...]] = (
    *_section(
        "Cloud provider flags",
        _s("cloud-provider", "", "The provider for cloud services: the name of an installed provider (required)."),
        _s("cloud-config", "", "The path to the cloud provider configuration file, given to the provider. Empty for none."),
    ),
    *_section(
        "Generic flags",
        _b("allocate-node-cidrs", False, "Whether CIDRs for Pods should be allocated and set on the cloud provider (node IPAM only).", False),
        _b("allow-untagged-cloud", False, "Allow the cluster to run without the cluster-id on cloud instances (deprecated).", True),
        _s("cidr-allocator-type", "RangeAllocator", "Type of CIDR allocator to use (node IPAM only).", False),
        _s("cluster-cidr", "", "CIDR range for Pods in the cluster: one, or two comma-separated for dual-stack (needed by the route controller)."),
        _s("cluster-name", "kubernetes", "The instance prefix for the cluster, given to load balancer and route calls."),
        _b("configure-cloud-routes", True, "Whether pod CIDRs should be configured as routes on the cloud provider."),
        _d("controller-start-interval", 0.0, "Interval between starting controllers (plus up to as much again at random)."),
        _l("controllers", ("*",), _controllers_help()),
        _s("external-cloud-volume-plugin", "", "The plugin to use when the cloud provider is external (only meaningful for kube-controller-manager).", False),
        _g("feature-gates", {}, "A set of key=value pairs that describe feature gates. Options are:\n" + featuregates.describe()),
        _i32("kube-api-burst", 30, "Burst to use while talking with the Kubernetes API server."),
        _s("kube-api-content-type", "application/vnd.kubernetes.protobuf", "Content type of requests sent to the API server (kube-ccm always sends JSON).", False),
        _f("kube-api-qps", 20.0, "QPS to use while talking with the Kubernetes API server."),
        _b("leader-elect", True, "Start a leader election client and gain leadership (a Lease) before running the controllers; for replicated deployments."),
        _d("leader-elect-lease-duration", 15.0, "How long non-leader candidates wait after observing a leadership renewal before trying to take over the lease."),
        _d("leader-elect-renew-deadline", 10.0, "How long the leader tries to renew its leadership before giving it up; less than the lease duration."),
        _s("leader-elect-resource-lock", "leases", "The type of resource object used for locking during leader election; only 'leases' is supported."),
        _s("leader-elect-resource-name", "cloud-controller-manager", "The name of the Lease used for locking during leader election."),
        _s("leader-elect-resource-namespace", "kube-system", "The namespace of the Lease used for locking during leader election."),
        _d("leader-elect-retry-period", 2.0, "How long clients wait between attempts to acquire and renew leadership."),
        _d("min-resync-period", 12 * 3600.0, "The resync period of the informers is random in [min-resync-period, 2*min-resync-period).", False),
        _d("node-monitor-period", 5.0, "The period of the cloud node lifecycle controller's check of the nodes against the cloud."),
        _d("node-sync-period", 0.0, "Deprecated no-op, kept for compatibility.", False),
        _d("route-reconciliation-period", 10.0, "The period for reconciling the routes created for nodes by the cloud provider."),
        _b("use-service-account-credentials", False, "Use a separate service account's credentials for each controller."),
    ),
    *_section(
        "Leader-migration flags",
        _b("enable-leader-migration", False, "Whether to enable controller leader migration (acts only with --leader-elect)."),
        _s("leader-migration-config", "", "Path to a LeaderMigrationConfiguration file (group controllermanager.config.k8s.io, version v1, v1beta1 or v1alpha1); empty: the default configuration."),
    ),
    *_section(
        "Node controller flags",
        _i32("concurrent-node-syncs", 1, "Number of workers initialising nodes concurrently."),
        _i32("concurrent-node-status-updates", 0, "Number of workers refreshing node addresses concurrently; 0 uses --concurrent-node-syncs."),
        _d("node-status-update-frequency", 300.0, "How often the cloud node controller refreshes the addresses of initialised nodes."),
    ),
    *_section(
        "Service controller flags",
        _i32("concurrent-service-syncs", 1, "Number of services synced concurrently; also the parallelism of load balancer host updates."),
    ),
    *_section(
        "Misc flags",
        _s("kubeconfig", "", "Path to a kubeconfig file with the API server's location and credentials; empty (and no --master): in-cluster."),
        _s("master", "", "The address of the Kubernetes API server (overrides any value in the kubeconfig)."),
    ),
    *_section(
        "Debugging flags",
        _b("contention-profiling", False, "Enable block profiling, if profiling is enabled.", False),
        _b("profiling", True, "Enable profiling via the web interface host:port/debug/pprof/.", False),
    ),
    *_section(
        "Secure serving flags",
        _s("bind-address", "0.0.0.0", "The IP address on which to listen for --secure-port."),
        _s("cert-dir", "", "The directory of the TLS certificate pair; ignored with --tls-cert-file and --tls-private-key-file. Empty: a self-signed pair in memory."),
        _b("disable-http2-serving", False, "Disable HTTP/2 serving.", False),
        _i("http2-max-streams-per-connection", 0, "The limit of HTTP/2 streams per client connection; 0 uses the default.", False),
        _b("permit-address-sharing", False, "Use SO_REUSEADDR when binding the port.", False),
        _b("permit-port-sharing", False, "Use SO_REUSEPORT when binding the port.", False),
        _i("secure-port", 10258, "The port on which to serve HTTPS (/healthz, /metrics, /configz); 0 turns serving off."),
        _s("tls-cert-file", "", "File containing the x509 certificate for HTTPS (CA certificates after it)."),
        _l("tls-cipher-suites", (), "Comma-separated list of cipher suites for the server.", False),
        _l("tls-curve-preferences", (), "Comma-separated list of elliptic curves for the server.", False),
        _s("tls-min-version", "", "Minimum TLS version supported.", False),
        _s("tls-private-key-file", "", "File containing the x509 private key matching --tls-cert-file."),
        _l("tls-sni-cert-key", (), "A pair of x509 certificate and private key file paths, optionally suffixed with domain patterns; repeatable.", False),
    ),
    *_section(
        "Authentication flags",
        _s("authentication-kubeconfig", "", "Kubeconfig with the rights to create tokenreviews.authentication.k8s.io."),
        _b("authentication-skip-lookup", False, "Do not look up the missing authentication configuration from the cluster."),
        _d("authentication-token-webhook-cache-ttl", 10.0, "How long to cache responses from the token authenticator."),
        _b("authentication-tolerate-lookup-failure", False, "Tolerate a failed lookup of the authentication configuration."),
        _s("client-ca-file", "", "CA bundle that authenticates client certificates."),
        _l("requestheader-allowed-names", (), "Client certificate common names allowed to pass user names in request headers."),
        _s("requestheader-client-ca-file", "", "Root certificate bundle that verifies client certificates of request-header proxies."),
        _l("requestheader-extra-headers-prefix", ("x-remote-extra-",), "Request header prefixes to inspect for user extras."),
        _l("requestheader-group-headers", ("x-remote-group",), "Request headers to inspect for groups."),
        _l("requestheader-uid-headers", (), "Request headers to inspect for UIDs."),
        _l("requestheader-username-headers", ("x-remote-user",), "Request headers to inspect for user names."),
    ),
    *_section(
        "Authorization flags",
        _l("authorization-always-allow-paths", ("/healthz", "/readyz", "/livez"), "HTTP paths served without authorization."),
        _s("authorization-kubeconfig", "", "Kubeconfig with the rights to create subjectaccessreviews.authorization.k8s.io."),
        _d("authorization-webhook-cache-authorized-ttl", 10.0, "How long to cache 'authorized' responses from the authorizer."),
        _d("authorization-webhook-cache-unauthorized-ttl", 10.0, "How long to cache 'unauthorized' responses from the authorizer."),
    ),
    *_section(
        "Webhook flags",
        _l("webhooks", (), "Webhooks to enable, with the grammar of --controllers ('*' all). Known: " + ", ".join(wk.KNOWN_WEBHOOKS) + ". Served only with --feature-gates=CloudControllerManagerWebhook=true."),
    ),
    *_section(
        "Webhook serving flags",
        _s("webhook-bind-address", "0.0.0.0", "The IP address on which to listen for --webhook-secure-port."),
        _s("webhook-cert-dir", "", "The directory of the webhook server's TLS certificate pair. Empty: a self-signed pair in memory."),
        _b("webhook-disable-http2-serving", False, "Disable HTTP/2 on the webhook server.", False),
        _i("webhook-secure-port", 10260, "The port on which to serve webhooks over HTTPS; 0 turns the webhook server off."),
        _l("webhook-tls-cipher-suites", (), "Comma-separated list of cipher suites for the webhook server.", False),
        _l("webhook-tls-curve-preferences", (), "Comma-separated list of elliptic curves for the webhook server.", False),
        _s("webhook-tls-cert-file", "", "File containing the x509 certificate of the webhook server."),
        _s("webhook-tls-min-version", "", "Minimum TLS version of the webhook server.", False),
        _s("webhook-tls-private-key-file", "", "File containing the x509 private key of the webhook server."),
        _l("webhook-tls-sni-cert-key", (), "SNI certificate/key pairs of the webhook server; repeatable.", False),
    ),
    *_section(
        "Logs flags",
        _d("log-flush-frequency", 5.0, "Maximum time between log flushes.", False),
        _s("log-json-info-buffer-size", "0", "With the json format and split streams, the size of the info stream's buffer.", False),
        _b("log-json-split-stream", False, "With the json format, write errors to stderr and info to stdout.", False),
        _s("log-text-info-buffer-size", "0", "With the text format and split streams, the size of the info stream's buffer.", False),
        _b("log-text-split-stream", False, "With the text format, write errors to stderr and info to stdout.", False),
        _s("logging-format", "text", "Sets the log format: text or json."),
        _lv("v", 0, "Number for the log level verbosity: 1 logs the flags at start-up, 4 and above add debug messages.", shorthand="v"),
        _s("vmodule", "", "Comma-separated list of pattern=N settings for file-filtered logging.", False),
    ),
    *_section(
        "kube-ccm flags (extensions, not upstream's)",
        _d("load-balancer-gc-period", 600.0, "How often load-balancer-gc-controller (off unless named in --controllers) looks for load balancers whose Service is gone; one is deleted when two sweeps in a row find it leaked."),
        _l("load-balancer-class", (), "A spec.loadBalancerClass whose Services this CCM serves; repeatable. Services of any other class are never touched. Default: none (upstream: only Services without a class)."),
        _b("serve-unclassed-load-balancers", True, "Serve LoadBalancer Services that set no loadBalancerClass (upstream's only kind); false leaves them to another implementation, such as MetalLB."),
        _d("node-sync-window", 1.0, "Node changes within this window after the first share one pass over the load balancers (one UpdateLoadBalancer each); 0 updates at once, as upstream."),
        _s("node-selector", "", "Label selector (kubectl -l syntax) of the Nodes this CCM manages; empty: every Node. Nodes whose providerID names another provider are never managed."),
        _b("enable-node-deletion", True, "Delete Nodes whose instance is confirmed gone; false: give them the shutdown taint and a Warning event instead."),
        _f("cloud-api-qps", 0.0, "Cloud provider calls per second, for the cloud's API quota; 0 means unlimited."),
        _i32("cloud-api-burst", 10, "Cloud provider calls allowed at once above --cloud-api-qps after a quiet period."),
        _i32("cloud-call-attempts", 3, "Tries of a cloud call that fails with an error the provider marks transient (throttling, a dropped connection), with jittered backoff, within --cloud-call-timeout; 1 never retries."),
        _d("cloud-call-timeout", 60.0, "Deadline of each cloud provider call; a call that hangs longer fails and is retried like any error."),
        _d("shutdown-grace-period", 10.0, "On SIGTERM, how long in-flight syncs may run to completion before they are abandoned."),
        _b("dry-run", False, "Run every controller without changing anything: API writes go with dryRun=All (validated, not persisted), cloud calls that would change something are not made, and what would change is logged and summarised. Implies --leader-elect=false."),
    ),
    *_section(
        "Global flags",
        _b("help", False, "Help for this command: every flag, its default and what it does.", shorthand="h"),
        _ver("version", "false", "--version, --version=raw prints version information and quits."),
    ),
)  # fmt: skip
"""Every flag ``kube-ccm run`` accepts: upstream's and kube-ccm's extensions."""

_BY_NAME: Final[Mapping[str, Flag]] = {f.name: f for f in FLAGS}
_BY_SHORTHAND: Final[Mapping[str, Flag]] = {f.shorthand: f for f in FLAGS if f.shorthand}


# -- parsing -----------------------------------------------------------------------


@dataclass(frozen=True)
class ParsedFlags:
    """Every flag's value (defaults filled in) and which ones the command line set."""

    values: Mapping[str, Any]
    explicit: frozenset[str]


class _ArgvParser:
    """One pass over argv with pflag's rules; errors carry pflag's wording."""

    def __init__(self, argv: Sequence[str]) -> None:
        self.args = list(argv)
        self.index = 0
        self.values: dict[str, Any] = {f.name: f.default for f in FLAGS}
        self.explicit: set[str] = set()
        self.positional: list[tuple[str, str]] = []
        """(argument, the argument before it): for a precise error message."""

    def parse(self) -> ParsedFlags:
        while self.index < len(self.args):
            arg = self._take()
            if arg == "--":
                self.positional += [(a, arg) for a in self.args[self.index :]]
                break
            if arg.startswith("--"):
                self._long(arg)
            elif arg.startswith("-") and arg != "-":
                self._shorthands(arg)
            else:
                self.positional.append((arg, self.args[self.index - 2] if self.index > 1 else ""))
        self._refuse_positional()
        version = self.values["version"]
        if version != "false":
            raise VersionRequested(raw=version == "raw")
        return ParsedFlags(dict(self.values), frozenset(self.explicit))

    def _take(self) -> str:
        arg = self.args[self.index]
        self.index += 1
        return arg

    def _long(self, arg: str) -> None:
        name, has_value, value = arg[2:].partition("=")
        if not name or name[0] in "-=":
            raise OptionsError(f"bad flag syntax: {arg}")
        flag = _BY_NAME.get(name)
        if flag is None:
            raise OptionsError(f"unknown flag: --{name}")
        if not has_value:
            value = self._value_for(flag, f"--{name}")
        self._set(flag, value, f"--{name}")

    def _shorthands(self, arg: str) -> None:
        letters = arg[1:]
        while letters:
            letter, rest = letters[0], letters[1:]
            flag = _BY_SHORTHAND.get(letter)
            if flag is None:
                raise OptionsError(f"unknown shorthand flag: {letter!r} in {arg}{_long_hint(arg)}")
            if rest.startswith("="):
                value, letters = rest[1:], ""
            elif flag.type.no_opt_value is not None:
                value, letters = flag.type.no_opt_value, rest
            elif rest:
                value, letters = rest, ""
            else:
                value, letters = self._value_for(flag, f"{letter!r} in -{letter}"), ""
            self._set(flag, value, f"-{letter}, --{flag.name}")

    def _value_for(self, flag: Flag, shown: str) -> str:
        if flag.type.no_opt_value is not None:
            return flag.type.no_opt_value
        if self.index < len(self.args):
            return self._take()
        raise OptionsError(f"flag needs an argument: {shown}")

    def _set(self, flag: Flag, text: str, shown: str) -> None:
        try:
            value = flag.type.parse(text)
        except ValueError as exc:
            raise OptionsError(f'invalid argument "{text}" for "{shown}" flag: {exc}') from None
        if flag.name in self.explicit and flag.type.merge is not None:
            value = flag.type.merge(self.values[flag.name], value)
        self.values[flag.name] = value
        self.explicit.add(flag.name)
        if flag.name == "help" and value:
            raise HelpRequested

    def _refuse_positional(self) -> None:
        # As upstream's command: empty arguments are tolerated, anything else refused.
        for arg, before in self.positional:
            if not arg:
                continue
            hint = "this command takes only flags"
            flag = _BY_NAME.get(before.lstrip("-"))
            if flag is not None and flag.type is BOOL and _is_go_bool(arg):
                hint = f"a boolean flag never takes the next argument: write {before}={arg}"
            raise OptionsError(f'unexpected argument "{arg}": {hint}')


def _is_go_bool(text: str) -> bool:
    try:
        _parse_bool(text)
    except ValueError:
        return False
    return True


def _long_hint(arg: str) -> str:
    name = arg[1:].partition("=")[0]
    return f" (did you mean -{arg}?)" if name in _BY_NAME else ""


def parse_flags(argv: Sequence[str]) -> ParsedFlags:
    """argv (without the program name) → every flag's value; syntax errors only."""
    return _ArgvParser(argv).parse()


# -- the list grammar of --controllers and --webhooks -------------------------


def _enabled_by_list(name: str, entries: Sequence[str], *, on_with_star: bool) -> bool:
    """The first entry naming ``name`` decides (``name`` on, ``-name`` off); else ``*``."""
    for entry in entries:
        if entry == name:
            return True
        if entry == f"-{name}":
            return False
    return on_with_star and "*" in entries


def resolve_controllers(requested: Sequence[str]) -> frozenset[str]:
    """``--controllers`` → the canonical names to run.

    Aliases become canonical names (a leading ``-`` kept); for each controller
    the first entry naming it wins; unnamed controllers run iff ``*`` is listed
    and they are not off by default.
    """
    alias_to_name = {c.alias: c.name for c in CONTROLLERS}
    known = [c.name for c in CONTROLLERS]
    entries: list[str] = []
    unknown: list[str] = []
    for raw in requested:
        dash = "-" if raw.startswith("-") else ""
        bare = raw.removeprefix("-")
        canonical = alias_to_name.get(bare, bare)
        if canonical != "*" and canonical not in known:
            unknown.append(bare)
        entries.append(dash + canonical)
    if unknown:
        raise OptionsError(
            *(
                f'"{bare}" is not in the list of known controllers: use one of '
                f"{', '.join(known)} (or the aliases {', '.join(alias_to_name)}), "
                "'*' for all, '-name' to disable one"
                for bare in unknown
            )
        )
    return frozenset(
        name
        for name in known
        if _enabled_by_list(name, entries, on_with_star=name not in DISABLED_BY_DEFAULT)
    )


def resolve_webhooks(requested: Sequence[str]) -> frozenset[str]:
    """``--webhooks``: the ``--controllers`` grammar over the known webhooks."""
    unknown = [e.removeprefix("-") for e in requested if e.removeprefix("-") not in ("*", *wk.KNOWN_WEBHOOKS)]  # fmt: skip
    if unknown:
        raise OptionsError(
            *(
                f'"{bare}" is not in the list of known webhooks: use '
                f"{', '.join(wk.KNOWN_WEBHOOKS)} or '*'"
                for bare in unknown
            )
        )
    return frozenset(
        name for name in wk.KNOWN_WEBHOOKS if _enabled_by_list(name, requested, on_with_star=True)
    )


# -- leader migration ---------------------------------------------------------


@dataclass(frozen=True)
class LeaderMigrationConfig:
    """A validated ``LeaderMigrationConfiguration``."""

    leader_name: str
    """The name of the second Lease, the one that protects the migration."""
    controller_leaders: Mapping[str, str]
    """Controller name → the component that runs it during the migration (``*``: any)."""


DEFAULT_LEADER_MIGRATION: Final = LeaderMigrationConfig(
    leader_name=wk.LEADER_MIGRATION_LEASE_NAME,
    # Upstream's default, quirk included: names as listed, no alias resolution.
    controller_leaders=dict.fromkeys(wk.LEADER_MIGRATION_DEFAULT_CONTROLLERS, "*"),
)

_MIGRATION_FIELDS: Final = frozenset({"apiVersion", "kind", "leaderName", "resourceLock", "controllerLeaders"})  # fmt: skip
_LEADER_FIELDS: Final = frozenset({"name", "component"})


def load_leader_migration_config(path: str) -> LeaderMigrationConfig:
    """Read and check a LeaderMigrationConfiguration (YAML or JSON); empty path: the default."""
    if not path:
        return DEFAULT_LEADER_MIGRATION
    where = f'--leader-migration-config "{path}"'
    try:
        document = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise OptionsError(f"{where}: cannot read the file: {exc.strerror or exc}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise OptionsError(f"{where}: not valid YAML or JSON: {exc}") from None
    problems = _migration_problems(document)
    if problems:
        raise OptionsError(*(f"{where}: {problem}" for problem in problems))
    leaders = document.get("controllerLeaders") or []
    return LeaderMigrationConfig(
        leader_name=document["leaderName"],
        controller_leaders={entry["name"]: entry["component"] for entry in leaders},
    )


def _migration_problems(document: object) -> list[str]:
    expected = f"{wk.LEADER_MIGRATION_CONFIG_GROUP}/{wk.LEADER_MIGRATION_CONFIG_VERSIONS[-1]}"
    if not isinstance(document, dict):
        return [f"must be a {wk.LEADER_MIGRATION_CONFIG_KIND} object (apiVersion {expected})"]
    problems: list[str] = []
    api_version = document.get("apiVersion")
    group, _, version = str(api_version).partition("/")
    if (
        group != wk.LEADER_MIGRATION_CONFIG_GROUP
        or version not in wk.LEADER_MIGRATION_CONFIG_VERSIONS
    ):
        problems.append(f"apiVersion {api_version!r} is not supported: use {expected}")
    if document.get("kind") != wk.LEADER_MIGRATION_CONFIG_KIND:
        problems.append(
            f"kind {document.get('kind')!r} is not supported: use {wk.LEADER_MIGRATION_CONFIG_KIND}"
        )
    problems += [f'unknown field "{key}"' for key in document if key not in _MIGRATION_FIELDS]
    if not isinstance(document.get("leaderName"), str) or not document["leaderName"]:
        problems.append(
            "leaderName: Required value: leaderName must be set (the name of the migration Lease)"
        )
    lock = document.get("resourceLock", wk.LEADER_ELECTION_RESOURCE_LOCK)
    if lock != wk.LEADER_ELECTION_RESOURCE_LOCK:
        problems.append(
            f'resourceLock: Unsupported value: {json.dumps(lock)}: kube-ccm locks on "leases" only'
        )
    leaders = document.get("controllerLeaders") or []
    if not isinstance(leaders, list):
        return [*problems, "controllerLeaders must be a list of {name, component}"]
    seen: set[str] = set()
    for index, entry in enumerate(leaders):
        problems += _leader_problems(f"controllerLeaders[{index}]", entry, seen)
    return problems


def _leader_problems(path: str, entry: object, seen: set[str]) -> list[str]:
    if not isinstance(entry, dict):
        return [f"{path} must be an object with name and component"]
    problems = [f'{path}: unknown field "{key}"' for key in entry if key not in _LEADER_FIELDS]
    for key in ("name", "component"):
        if not isinstance(entry.get(key), str) or not entry[key]:
            problems.append(f"{path}.{key}: Required value: {key} must be set")
    name = entry.get("name")
    if isinstance(name, str) and name:
        if name in seen:
            problems.append(f'{path}.name: Duplicate value: "{name}" is listed twice')
        seen.add(name)
    return problems


# -- validation ---------------------------------------------------------------


def _problems(values: Mapping[str, Any]) -> list[str]:
    """Every problem of the flags' values, upstream's checks first, then kube-ccm's."""
    problems: list[str] = []
    if not values["cloud-provider"]:
        problems.append(
            "--cloud-provider cannot be empty: name the provider to run, e.g. --cloud-provider=simulated"
        )
    if values["leader-elect"]:
        problems += _leader_election_problems(values)
    problems += _port_problems(values)
    problems += _worker_problems(values)
    problems += _duration_problems(values)
    if values["logging-format"] not in ("text", "json"):
        problems.append(
            f'unsupported logging format "{values["logging-format"]}": use text or json'
        )
    return problems


def _leader_election_problems(values: Mapping[str, Any]) -> list[str]:
    problems: list[str] = []
    if values["leader-elect-resource-lock"] != wk.LEADER_ELECTION_RESOURCE_LOCK:
        problems.append(
            'resourceLock value must be "leases": set --leader-elect-resource-lock=leases'
        )
    lease, renew, retry = (values[f"leader-elect-{n}"] for n in ("lease-duration", "renew-deadline", "retry-period"))  # fmt: skip
    # client-go's own checks (it would refuse them when the election starts).
    if min(lease, renew, retry) <= 0:
        problems.append(
            "--leader-elect-lease-duration, --leader-elect-renew-deadline and --leader-elect-retry-period must be positive"
        )
    elif lease <= renew:
        problems.append(
            f"--leader-elect-lease-duration ({format_go_duration(lease)}) must be greater than --leader-elect-renew-deadline ({format_go_duration(renew)})"
        )
    elif renew <= JITTER_FACTOR * retry:
        problems.append(
            f"--leader-elect-renew-deadline ({format_go_duration(renew)}) must be greater than {JITTER_FACTOR} x --leader-elect-retry-period ({format_go_duration(retry)})"
        )
    return problems


def _port_problems(values: Mapping[str, Any]) -> list[str]:
    problems = [
        f"--{flag} {values[flag]} must be between 0 and 65535 (0 turns it off)"
        for flag in ("secure-port", "webhook-secure-port")
        if not 0 <= values[flag] <= 65535
    ]
    if values["webhook-secure-port"] and values["webhook-secure-port"] == values["secure-port"]:
        problems.append(
            "--webhook-secure-port cannot be the same value as --secure-port: pick another port (default 10260)"
        )
    return problems


def _worker_problems(values: Mapping[str, Any]) -> list[str]:
    problems: list[str] = []
    if values["concurrent-node-syncs"] <= 0:
        problems.append(
            "concurrent-node-syncs must be a positive number: set --concurrent-node-syncs to 1 or more"
        )
    if values["concurrent-node-status-updates"] < 0:
        problems.append(
            "concurrent-node-status-updates cannot be a negative number: set it to 0 (use --concurrent-node-syncs) or more"
        )
    if values["concurrent-service-syncs"] <= 0:
        problems.append(
            "concurrent-service-syncs must be a positive number: set --concurrent-service-syncs to 1 or more"
        )
    if not 0 < values["kube-api-qps"] < math.inf:
        problems.append(
            f"--kube-api-qps must be a positive number, not {_format_float(values['kube-api-qps'])}"
        )
    try:
        parse_selector(values["node-selector"])
    except SelectorError as exc:
        problems.append(f"--node-selector: {exc}")
    if not 0 <= values["cloud-api-qps"] < math.inf:
        problems.append(
            f"--cloud-api-qps must be 0 (unlimited) or a positive number, not {_format_float(values['cloud-api-qps'])}"
        )
    if values["cloud-api-burst"] <= 0:
        problems.append(
            f"--cloud-api-burst must be a positive number, not {values['cloud-api-burst']}"
        )
    for name in values["load-balancer-class"]:
        if not name or any(c.isspace() for c in name):
            problems.append(
                f"--load-balancer-class {name!r} is not a class name; give the value Services "
                "set in spec.loadBalancerClass, e.g. example.com/internal"
            )
    if not values["load-balancer-class"] and not values["serve-unclassed-load-balancers"]:
        problems.append(
            "--serve-unclassed-load-balancers=false with no --load-balancer-class serves no "
            "Service; name a class, or drop service from --controllers"
        )
    if values["dry-run"] and values["use-service-account-credentials"]:
        problems.append(
            "--dry-run runs with the daemon's own credentials (it would create no "
            "ServiceAccounts): drop --use-service-account-credentials for the dry run"
        )
    if values["cloud-call-attempts"] <= 0:
        problems.append(
            f"--cloud-call-attempts must be 1 (no retries) or more, not {values['cloud-call-attempts']}"
        )
    if values["kube-api-burst"] <= 0:
        problems.append(
            f"--kube-api-burst must be a positive number, not {values['kube-api-burst']}"
        )
    return problems


_POSITIVE_DURATIONS: Final = ("node-monitor-period", "node-status-update-frequency", "route-reconciliation-period", "cloud-call-timeout", "load-balancer-gc-period")  # fmt: skip
_NON_NEGATIVE_DURATIONS: Final = ("shutdown-grace-period", "min-resync-period", "controller-start-interval", "node-sync-window")  # fmt: skip


_MINIMUM_PERIODS: Final = {
    "load-balancer-gc-period": 1.0,
    "node-monitor-period": 0.1,
    "route-reconciliation-period": 0.1,
    "node-status-update-frequency": 1.0,
    "cloud-call-timeout": 0.1,
}
"""kube-ccm's floors (upstream has none): ``--node-monitor-period=1ns`` took 88 % of a
core and made thousands of cloud calls a second. A period below its floor is refused."""


def _duration_problems(values: Mapping[str, Any]) -> list[str]:
    problems = [
        f"--{flag} must be a positive duration, e.g. --{flag}={_BY_NAME[flag].default_text()}"
        for flag in _POSITIVE_DURATIONS
        if values[flag] <= 0
    ]
    problems += [
        f"--{flag}={_BY_NAME[flag].show(values[flag])} is below the minimum of "
        f"{_BY_NAME[flag].show(floor)}: it would spin on the CPU and the cloud's API; the "
        f"default is {_BY_NAME[flag].default_text()}"
        for flag, floor in _MINIMUM_PERIODS.items()
        if 0 < values[flag] < floor
    ]
    problems += [
        f"--{flag} cannot be negative" for flag in _NON_NEGATIVE_DURATIONS if values[flag] < 0
    ]
    return problems


def _checked(problems: list[str], resolve: Callable[[], Any]) -> Any:
    """``resolve()``, with its OptionsError's problems added to ``problems`` (then None)."""
    try:
        return resolve()
    except OptionsError as exc:
        problems += exc.problems
        return None


# -- the result -----------------------------------------------------------------------


_DELEGATED_AUTH_FIELDS: Final = frozenset(f.name for f in dataclasses.fields(DelegatedAuthConfig))


def build_config(parsed: ParsedFlags) -> DaemonConfig:
    """Checked flag values → the daemon's configuration; every problem at once."""
    values = parsed.values
    problems = _problems(values)
    controllers = _checked(problems, lambda: resolve_controllers(values["controllers"]))
    webhooks = _checked(problems, lambda: resolve_webhooks(values["webhooks"]))
    migration = DEFAULT_LEADER_MIGRATION
    if values["enable-leader-migration"]:
        migration = _checked(problems, lambda: load_leader_migration_config(values["leader-migration-config"]))  # fmt: skip
    if problems:
        raise OptionsError(*problems)
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
        webhooks=webhooks,
        webhook_bind_address=values["webhook-bind-address"],
        webhook_secure_port=values["webhook-secure-port"],
        webhook_cert_dir=values["webhook-cert-dir"],
        webhook_tls_cert_file=values["webhook-tls-cert-file"],
        webhook_tls_private_key_file=values["webhook-tls-private-key-file"],
        kube_api_qps=values["kube-api-qps"],
        kube_api_burst=values["kube-api-burst"],
        allow_untagged_cloud=values["allow-untagged-cloud"],
        # A dry run never holds the Lease: its Lease writes would not persist, and a
        # real CCM may be leading beside it.
        leader_elect=values["leader-elect"] and not values["dry-run"],
        leader_election=LeaderElectionConfig(
            namespace=values["leader-elect-resource-namespace"],
            name=values["leader-elect-resource-name"],
            lease_duration=values["leader-elect-lease-duration"],
            renew_deadline=values["leader-elect-renew-deadline"],
            retry_period=values["leader-elect-retry-period"],
        ),
        cloud_call_timeout=values["cloud-call-timeout"],
        node_selector=values["node-selector"],
        node_sync_window=values["node-sync-window"],
        load_balancer_classes=LoadBalancerClasses(
            frozenset(values["load-balancer-class"]), values["serve-unclassed-load-balancers"]
        ),
        load_balancer_gc_period=values["load-balancer-gc-period"],
        enable_node_deletion=values["enable-node-deletion"],
        cloud_calls=CloudCallPolicy(
            qps=values["cloud-api-qps"],
            burst=values["cloud-api-burst"],
            attempts=values["cloud-call-attempts"],
            unhealthy_after=max(10.0, 2 * values["cloud-call-timeout"]),
        ),
        shutdown_grace_period=values["shutdown-grace-period"],
        dry_run=values["dry-run"],
        verbosity=values["v"],
        logging_format=values["logging-format"],
        feature_gates=FeatureGates(values["feature-gates"]),
        min_resync_period=values["min-resync-period"],
        controller_start_interval=values["controller-start-interval"],
        use_service_account_credentials=values["use-service-account-credentials"],
        enable_leader_migration=values["enable-leader-migration"]
        and values["leader-elect"]
        and not values["dry-run"],
        leader_migration_lease_name=migration.leader_name,
        leader_migration_controllers=dict(migration.controller_leaders),
        delegated_auth=DelegatedAuthConfig(
            **{
                name.replace("-", "_"): values[name]
                for name in (f.name for f in FLAGS)
                if name.replace("-", "_") in _DELEGATED_AUTH_FIELDS
            }
        ),
        extra_flags={f.name: values[f.name] for f in FLAGS if not f.acting},
    )


def parse_options(argv: Sequence[str]) -> DaemonConfig:
    """argv (without the program name) → the daemon's configuration.

    Raises :class:`OptionsError` (what to change), :class:`HelpRequested` or
    :class:`VersionRequested`.
    """
    return build_config(parse_flags(argv))


# -- what the command prints ----------------------------------------------------------


def usage(program: str = "kube-ccm run") -> str:
    """``--help``: every flag by section, with its type, description and default."""
    lines = [
        f"Usage: {program} --cloud-provider=NAME [flags]",
        "",
        f"The Kubernetes cloud-controller-manager, in Python (kube-ccm {__version__}).",
        "The flags are upstream's, with its names, defaults and syntax, so a manifest",
        "written for a Go cloud-controller-manager works unchanged. Flags marked",
        f'"{NOT_ACTING}" are parsed and checked but change nothing yet.',
    ]
    section = None
    for flag in FLAGS:
        if flag.section != section:
            section = flag.section
            lines += ["", f"{section}:", ""]
        lines += _flag_usage(flag)
    return "\n".join(lines) + "\n"


def _flag_usage(flag: Flag) -> list[str]:
    """``  -v, --v Level  (default 0)`` then the description, wrapped."""
    short = f"-{flag.shorthand}, " if flag.shorthand else "    "
    kind = f" {flag.type.name}" if flag.type.name else ""
    note = f" [{NOT_ACTING}]" if not flag.acting else ""
    lines = [f"  {short}--{flag.name}{kind}  (default {flag.default_text()}){note}"]
    first, *more = flag.help.split("\n")
    lines += textwrap.wrap(
        first,
        _HELP_WIDTH,
        initial_indent=_INDENT,
        subsequent_indent=_INDENT,
        break_on_hyphens=False,
    )
    lines += [_INDENT + "  " + line for line in more]
    return lines


_INDENT: Final = " " * 10
_HELP_WIDTH: Final = 90


def effective_flags(parsed: ParsedFlags) -> list[str]:
    """``FLAG: --name="value"`` for every flag, sorted by name, as upstream logs them at -v=1."""
    return [
        f"FLAG: --{flag.name}={json.dumps(flag.show(parsed.values[flag.name]), ensure_ascii=False)}"
        for flag in sorted(FLAGS, key=lambda f: f.name)
    ]


def inert_flags(parsed: ParsedFlags) -> list[str]:
    """The flags set to a non-default value that nothing acts on yet (worth a warning)."""
    return [
        flag.name
        for flag in FLAGS
        if not flag.acting
        and flag.name in parsed.explicit
        and parsed.values[flag.name] != flag.default
    ]
