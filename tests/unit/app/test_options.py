"""Flags: upstream's names and defaults, pflag syntax, the list grammar, gates, validation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kube_ccm.app.options import validation
from kube_ccm.app.options.buildconfig import parse_options
from kube_ccm.app.options.featuregates import FeatureGates, parse_feature_gates, parse_settings
from kube_ccm.app.options.flags import FLAGS, parse_flags
from kube_ccm.app.options.pflag import (
    HelpRequested,
    OptionsError,
    VersionRequested,
    format_go_duration,
    parse_go_duration,
)
from kube_ccm.app.options.selection import resolve_controllers
from kube_ccm.app.options.usage import effective_flags, inert_flags, usage
from kube_ccm.controllers.deletionguard import GuardSettings
from kube_ccm.controllers.service import LoadBalancerClasses

ALL = frozenset(
    {
        "cloud-node-controller",
        "cloud-node-lifecycle-controller",
        "service-lb-controller",
        "node-route-controller",
    }
)
BASE = ["--cloud-provider=simulated"]


def problem(argv: list[str]) -> str:
    with pytest.raises(OptionsError) as raised:
        parse_options(argv)
    return str(raised.value)


# -- defaults -----------------------------------------------------------------------

UPSTREAM_DEFAULTS = {
    # §8.3 generic / cloud
    "cloud-provider": '""',
    "cloud-config": '""',
    "external-cloud-volume-plugin": '""',
    "use-service-account-credentials": "false",
    "allow-untagged-cloud": "false",
    "route-reconciliation-period": "10s",
    "node-monitor-period": "5s",
    "cluster-name": '"kubernetes"',
    "cluster-cidr": '""',
    "allocate-node-cidrs": "false",
    "cidr-allocator-type": '"RangeAllocator"',
    "configure-cloud-routes": "true",
    "node-sync-period": "0s",
    "controllers": "[*]",
    "min-resync-period": "12h0m0s",
    # upstream's is protobuf; kube-ccm's is JSON until protobuf wins (docs/design.md)
    "kube-api-content-type": '"application/json"',
    "kube-api-qps": "20",
    "kube-api-burst": "30",
    "controller-start-interval": "0s",
    "leader-elect": "true",
    "leader-elect-lease-duration": "15s",
    "leader-elect-renew-deadline": "10s",
    "leader-elect-retry-period": "2s",
    "leader-elect-resource-lock": '"leases"',
    "leader-elect-resource-name": '"cloud-controller-manager"',
    "leader-elect-resource-namespace": '"kube-system"',
    "enable-leader-migration": "false",
    "leader-migration-config": '""',
    "feature-gates": '""',
    "profiling": "true",
    "contention-profiling": "false",
    "master": '""',
    "kubeconfig": '""',
    "node-status-update-frequency": "5m0s",
    "concurrent-node-syncs": "1",
    "concurrent-node-status-updates": "0",
    "concurrent-service-syncs": "1",
    # §8.2 the node IPAM controller's flags (upstream's sample CCM adds them)
    "node-cidr-mask-size": "0",
    "node-cidr-mask-size-ipv4": "0",
    "node-cidr-mask-size-ipv6": "0",
    "service-cluster-ip-range": '""',
    # secure serving / authn / authz
    "bind-address": '"0.0.0.0"',
    "secure-port": "10258",
    "cert-dir": '""',
    "tls-cert-file": '""',
    "tls-private-key-file": '""',
    "tls-cipher-suites": "[]",
    "tls-curve-preferences": "[]",
    "tls-min-version": '""',
    "tls-sni-cert-key": "[]",
    "http2-max-streams-per-connection": "0",
    "disable-http2-serving": "false",
    "permit-port-sharing": "false",
    "permit-address-sharing": "false",
    "authentication-kubeconfig": '""',
    "authentication-token-webhook-cache-ttl": "10s",
    "authentication-skip-lookup": "false",
    "authentication-tolerate-lookup-failure": "false",
    "client-ca-file": '""',
    "requestheader-client-ca-file": '""',
    "requestheader-allowed-names": "[]",
    "requestheader-username-headers": "[x-remote-user]",
    "requestheader-group-headers": "[x-remote-group]",
    "requestheader-extra-headers-prefix": "[x-remote-extra-]",
    "requestheader-uid-headers": "[]",
    "authorization-kubeconfig": '""',
    "authorization-webhook-cache-authorized-ttl": "10s",
    "authorization-webhook-cache-unauthorized-ttl": "10s",
    "authorization-always-allow-paths": "[/healthz,/readyz,/livez]",
    # webhook serving
    "webhooks": "[]",
    "webhook-bind-address": '"0.0.0.0"',
    "webhook-secure-port": "10260",
    "webhook-disable-http2-serving": "false",
    "webhook-cert-dir": '""',
    "webhook-client-ca-file": '""',
    "webhook-tls-cert-file": '""',
    "webhook-tls-private-key-file": '""',
    "webhook-tls-cipher-suites": "[]",
    "webhook-tls-curve-preferences": "[]",
    "webhook-tls-min-version": '""',
    "webhook-tls-sni-cert-key": "[]",
    # global
    "v": "0",
    "vmodule": '""',
    "log-flush-frequency": "5s",
    "logging-format": '"text"',
    "log-text-split-stream": "false",
    "log-text-info-buffer-size": '"0"',
    "log-json-split-stream": "false",
    "log-json-info-buffer-size": '"0"',
    "help": "false",
    "version": "false",
    # kube-ccm's own
    "load-balancer-gc-period": "10m0s",
    "load-balancer-class": "[]",
    "serve-unclassed-load-balancers": "true",
    "node-sync-window": "1s",
    "node-sync-max-delay": "10s",
    "node-selector": '""',
    "enable-node-deletion": "true",
    "node-deletion-guard": '"on"',
    "node-deletion-guard-threshold": "0.3",
    "node-deletion-guard-window": "10m0s",
    "node-deletion-guard-min-nodes": "3",
    "cloud-api-qps": "0",
    "cloud-api-burst": "10",
    "cloud-call-attempts": "3",
    "cloud-call-timeout": "1m0s",
    "shutdown-grace-period": "10s",
    "kube-api-transport": '"aiohttp"',
    "worker-processes": "1",
    "dry-run": "false",
}


def test_every_upstream_flag_is_accepted_with_upstreams_default() -> None:
    shown = {flag.name: flag.default_text() for flag in FLAGS}

    assert shown == UPSTREAM_DEFAULTS


def test_load_balancer_classes_reach_the_service_controller_and_are_checked() -> None:
    config = parse_options(
        [
            *BASE,
            "--load-balancer-class=example.com/internal",
            "--load-balancer-class=kube-ccm.io/ippool",
            "--serve-unclassed-load-balancers=false",
        ]
    )
    assert config.load_balancer_classes == LoadBalancerClasses(
        frozenset({"example.com/internal", "kube-ccm.io/ippool"}), unclassed=False
    )
    assert parse_options(BASE).load_balancer_classes == LoadBalancerClasses()
    with pytest.raises(OptionsError, match="with no --load-balancer-class serves no Service"):
        parse_options([*BASE, "--serve-unclassed-load-balancers=false"])
    with pytest.raises(OptionsError, match="--load-balancer-class 'a b' is not a class name"):
        parse_options([*BASE, "--load-balancer-class=a b"])


def test_the_node_deletion_guard_flags_reach_the_daemon_config() -> None:
    config = parse_options(
        [
            *BASE,
            "--node-deletion-guard=off",
            "--node-deletion-guard-threshold=0.5",
            "--node-deletion-guard-window=2m",
            "--node-deletion-guard-min-nodes=5",
        ]
    )
    assert config.node_deletion_guard is False
    assert config.node_deletion_guard_settings == GuardSettings(
        threshold=0.5, window=120.0, min_nodes=5
    )


def test_the_defaults_reach_the_daemon_config() -> None:
    config = parse_options(BASE)

    assert config.cloud_provider == "simulated"
    assert (config.cloud_config, config.kubeconfig, config.master) == (None, None, None)
    assert config.controllers == ALL
    assert config.cluster_name == "kubernetes"
    assert (config.cluster_cidr, config.configure_cloud_routes) == ("", True)
    assert config.route_reconciliation_period == 10.0
    assert config.node_monitor_period == 5.0
    assert config.node_status_update_frequency == 300.0
    assert (config.concurrent_node_syncs, config.concurrent_node_status_updates) == (1, 0)
    assert config.concurrent_service_syncs == 1
    assert (config.kube_api_qps, config.kube_api_burst) == (20.0, 30)
    assert config.allow_untagged_cloud is False
    assert config.leader_elect is True
    election = config.leader_election
    assert (election.namespace, election.name) == ("kube-system", "cloud-controller-manager")
    assert (election.lease_duration, election.renew_deadline, election.retry_period) == (
        15.0,
        10.0,
        2.0,
    )
    assert (config.secure_port, config.bind_address) == (10258, "0.0.0.0")
    assert (config.webhooks, config.webhook_secure_port) == (frozenset(), 10260)
    assert (config.cloud_call_timeout, config.shutdown_grace_period) == (60.0, 10.0)
    assert (config.verbosity, config.logging_format) == (0, "text")
    assert config.min_resync_period == 12 * 3600.0
    assert config.controller_start_interval == 0.0
    assert config.use_service_account_credentials is False
    assert config.enable_leader_migration is False
    assert config.node_deletion_guard is True
    assert config.node_deletion_guard_settings == GuardSettings(
        threshold=0.3, window=600.0, min_nodes=3
    )
    assert isinstance(config.feature_gates, FeatureGates)
    assert config.feature_gates == FeatureGates()


def test_flags_nothing_acts_on_yet_are_kept_and_marked_in_the_help() -> None:
    config = parse_options([*BASE, "--profiling=false", "--tls-sni-cert-key=a.crt,a.key"])

    assert config.extra_flags["profiling"] is False
    assert config.extra_flags["tls-sni-cert-key"] == ("a.crt", "a.key")
    assert "kube-api-content-type" not in config.extra_flags
    assert "cloud-provider" not in config.extra_flags
    profiling = next(line for line in usage().splitlines() if "--profiling" in line)
    assert profiling.endswith("(default true) [accepted, not yet acting]")


# -- Go value syntax ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("5m0s", 300.0),
        ("1h30m", 5400.0),
        ("500ms", 0.5),
        ("10s", 10.0),
        ("0", 0.0),
        ("1.5s", 1.5),
        ("12h0m0s", 43200.0),
        ("-5s", -5.0),
        ("1m30.5s", 90.5),
        ("250us", 0.00025),
    ],
)
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("5", 'time: missing unit in duration "5"'),
        ("1m5", 'time: missing unit in duration "1m5"'),
        ("5x", 'time: unknown unit "x" in duration "5x"'),
        ("5 minutes", 'time: unknown unit " minutes" in duration "5 minutes"'),
        ("", 'time: invalid duration ""'),
        ("s", 'time: invalid duration "s"'),
    ],
)
def test_bad_durations_are_refused_with_gos_message(bad: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_go_duration(bad)


def test_durations_print_like_go() -> None:
    shown = [format_go_duration(s) for s in (300.0, 43200.0, 0.5, 0.0, 10.0, 5400.0, 90.5)]

    assert shown == ["5m0s", "12h0m0s", "500ms", "0s", "10s", "1h30m0s", "1m30.5s"]


def test_a_bare_number_for_a_duration_is_refused_like_upstream() -> None:
    assert problem([*BASE, "--node-monitor-period=5"]) == (
        'invalid argument "5" for "--node-monitor-period" flag: time: missing unit in duration "5"'
    )


def test_values_may_follow_as_the_next_argument() -> None:
    config = parse_options(
        ["--cloud-provider", "simulated", "--node-monitor-period", "1m", "--cluster-name", "-x"]
    )

    assert (config.cloud_provider, config.node_monitor_period) == ("simulated", 60.0)
    assert config.cluster_name == "-x"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--leader-elect=false"], False),
        (["--leader-elect=true"], True),
        (["--leader-elect=0"], False),
        (["--leader-elect=F"], False),
        (["--leader-elect=false", "--leader-elect"], True),
        ([], True),
    ],
)
def test_booleans(argv: list[str], expected: bool) -> None:
    assert parse_options([*BASE, *argv]).leader_elect is expected


def test_a_boolean_never_takes_the_next_argument() -> None:
    assert problem([*BASE, "--leader-elect", "false"]) == (
        'unexpected argument "false": a boolean flag never takes the next argument: '
        "write --leader-elect=false"
    )


def test_a_word_after_a_boolean_is_just_an_unexpected_argument() -> None:
    assert problem([*BASE, "--leader-elect", "no"]) == (
        'unexpected argument "no": this command takes only flags'
    )


def test_only_gos_boolean_spellings_are_accepted() -> None:
    assert problem([*BASE, "--leader-elect=yes"]) == (
        'invalid argument "yes" for "--leader-elect" flag: '
        'strconv.ParseBool: parsing "yes": invalid syntax'
    )


@pytest.mark.parametrize(
    "argv", [["-v=4"], ["--v=4"], ["-v", "4"], ["--v", "4"], ["-v4"], ["-v=1", "-v=4"]]
)
def test_verbosity_forms(argv: list[str]) -> None:
    assert parse_options([*BASE, *argv]).verbosity == 4


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-v=-1"], 'invalid argument "-1" for "-v, --v" flag'),
        (["-v"], "flag needs an argument: 'v' in -v"),
        (["--v=high"], 'invalid argument "high" for "--v" flag'),
    ],
)
def test_bad_verbosity(argv: list[str], message: str) -> None:
    assert message in problem([*BASE, *argv])


@pytest.mark.parametrize(
    ("text", "value"), [("16", 16), ("0x10", 16), ("017", 15), ("0b11", 3), ("+2", 2)]
)
def test_integers_use_gos_syntax(text: str, value: int) -> None:
    assert parse_options([*BASE, f"--concurrent-node-syncs={text}"]).concurrent_node_syncs == value


def test_an_int32_flag_refuses_a_value_out_of_range() -> None:
    assert problem([*BASE, "--kube-api-burst=4294967296"]).endswith(
        'strconv.ParseInt: parsing "4294967296": value out of range'
    )


def test_a_float_flag() -> None:
    assert parse_options([*BASE, "--kube-api-qps=50.5"]).kube_api_qps == 50.5


def test_the_content_type_reaches_the_config() -> None:
    assert parse_options(BASE).kube_api_content_type == "application/json"
    protobuf = parse_options([*BASE, "--kube-api-content-type=application/vnd.kubernetes.protobuf"])
    assert protobuf.kube_api_content_type == "application/vnd.kubernetes.protobuf"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--foo"], "unknown flag: --foo"),
        (["--foo=1"], "unknown flag: --foo"),
        (["-x"], "unknown shorthand flag: 'x' in -x"),
        (
            ["-cloud-config=a"],
            "unknown shorthand flag: 'c' in -cloud-config=a (did you mean --cloud-config=a?)",
        ),
        (["---cloud-config"], "bad flag syntax: ---cloud-config"),
        (["positional"], 'unexpected argument "positional": this command takes only flags'),
        (["--", "--cloud-config=a"], 'unexpected argument "--cloud-config=a"'),
        (["--kube-api-qps"], "flag needs an argument: --kube-api-qps"),
    ],
)
def test_syntax_errors_use_pflags_words(argv: list[str], message: str) -> None:
    assert message in problem([*BASE, *argv])


def test_an_empty_argument_is_tolerated_like_upstream() -> None:
    assert parse_options([*BASE, ""]).cloud_provider == "simulated"


def test_a_repeated_scalar_flag_keeps_the_last_value() -> None:
    assert parse_options([*BASE, "--cluster-name=a", "--cluster-name=b"]).cluster_name == "b"


def test_a_repeated_list_flag_appends() -> None:
    config = parse_options([*BASE, "--controllers=cloud-node", "--controllers=route"])

    assert config.controllers == {"cloud-node-controller", "node-route-controller"}


@pytest.mark.parametrize("argv", [["-h"], ["--help"], ["--help=true"], ["--help", "--foo"]])
def test_help_is_a_request(argv: list[str]) -> None:
    with pytest.raises(HelpRequested):
        parse_options(argv)


def test_help_false_is_no_request() -> None:
    assert parse_options([*BASE, "--help=false"]).cloud_provider == "simulated"


@pytest.mark.parametrize(("argv", "raw"), [(["--version"], False), (["--version=raw"], True)])
def test_version_is_a_request_even_without_a_provider(argv: list[str], raw: bool) -> None:
    with pytest.raises(VersionRequested) as raised:
        parse_options(argv)

    assert raised.value.raw is raw


def test_version_false_is_no_request() -> None:
    assert parse_options([*BASE, "--version=false"]).cloud_provider == "simulated"


# -- --controllers (§8.2) -------------------------------------------------------------


@pytest.mark.parametrize(
    ("requested", "enabled"),
    [
        (["*"], ALL),
        (["cloud-node", "route"], {"cloud-node-controller", "node-route-controller"}),
        (["*", "-route"], ALL - {"node-route-controller"}),
        (["-route", "*"], ALL - {"node-route-controller"}),
        (["route", "-route"], {"node-route-controller"}),
        (["-route", "route"], set()),
        (["cloud-node-lifecycle"], {"cloud-node-lifecycle-controller"}),
        (["service"], {"service-lb-controller"}),
        (["-service-lb-controller", "*"], ALL - {"service-lb-controller"}),
        (["*", "-cloud-node"], ALL - {"cloud-node-controller"}),
        (["-*"], set()),
        ([], set()),
    ],
)
def test_controllers_grammar(requested: list[str], enabled: set[str]) -> None:
    assert resolve_controllers(requested) == frozenset(enabled)


def test_an_empty_controllers_flag_runs_nothing() -> None:
    assert parse_options([*BASE, "--controllers="]).controllers == frozenset()


def test_the_pv_labeller_is_off_unless_named() -> None:
    assert "persistent-volume-label-controller" not in parse_options(BASE).controllers
    named = parse_options([*BASE, "--controllers=*,pvl"]).controllers
    assert named == ALL | {"persistent-volume-label-controller"}


@pytest.mark.parametrize("entry", ["bogus", "-bogus"])
def test_an_unknown_controller_is_refused_with_the_known_ones(entry: str) -> None:
    message = problem([*BASE, f"--controllers=*,{entry}"])

    assert message.startswith('"bogus" is not in the list of known controllers')
    assert "node-route-controller" in message
    assert "route" in message


def test_webhooks_grammar() -> None:
    assert parse_options([*BASE, "--webhooks=*"]).webhooks == {
        "persistent-volume-label",
        "service-annotations",
    }
    assert parse_options([*BASE, "--webhooks=*,-persistent-volume-label"]).webhooks == {
        "service-annotations"
    }
    assert parse_options(BASE).webhooks == set()
    assert problem([*BASE, "--webhooks=*,-foo"]).startswith(
        '"foo" is not in the list of known webhooks'
    )


# -- --feature-gates (§8.8) -------------------------------------------------------------


def test_feature_gates_default_to_upstreams_values() -> None:
    gates = parse_options(BASE).feature_gates

    assert isinstance(gates, FeatureGates)
    assert not gates.enabled("CloudControllerManagerWebhook")
    assert not gates.enabled("CloudControllerManagerWatchBasedRoutesReconciliation")
    assert gates.enabled("LoggingBetaOptions")


def test_feature_gates_from_the_flag_repeated_flags_merge() -> None:
    gates = parse_options(
        [
            *BASE,
            "--feature-gates=CloudControllerManagerWebhook=true, LoggingBetaOptions=false",
            "--feature-gates=CloudControllerManagerWatchBasedRoutesReconciliation=true",
        ]
    ).feature_gates

    assert isinstance(gates, FeatureGates)
    assert gates.enabled("CloudControllerManagerWebhook")
    assert gates.enabled("CloudControllerManagerWatchBasedRoutesReconciliation")
    assert not gates.enabled("LoggingBetaOptions")
    assert gates.get("CloudControllerManagerWebhook") is True  # the manager reads it so


def test_all_alpha_turns_on_the_alpha_gates_not_set_explicitly() -> None:
    gates = parse_feature_gates("AllAlpha=true,CloudControllerManagerWebhook=false")

    assert gates.enabled("CloudControllerManagerWatchBasedRoutesReconciliation")
    assert not gates.enabled("CloudControllerManagerWebhook")
    assert gates.enabled("LoggingBetaOptions")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("Nope=true", "unrecognized feature gate: Nope"),
        ("StableLoadBalancerNodeSet=true", "removed in 1.32: remove it from --feature-gates"),
        ("CloudControllerManagerWebhook=yes", "invalid value of CloudControllerManagerWebhook=yes"),
        ("CloudControllerManagerWebhook", "missing bool value for CloudControllerManagerWebhook"),
    ],
)
def test_bad_feature_gates(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_settings(text)
    assert f'invalid argument "{text}" for "--feature-gates" flag: ' in problem(
        [*BASE, f"--feature-gates={text}"]
    )


def test_feature_gates_are_read_only_and_unknown_names_are_a_programming_error() -> None:
    gates = FeatureGates({"CloudControllerManagerWebhook": True})

    with pytest.raises(TypeError):
        gates["CloudControllerManagerWebhook"] = False  # type: ignore[index]
    with pytest.raises(KeyError, match="Nope"):
        gates.enabled("Nope")
    with pytest.raises(ValueError, match="unrecognized feature gate: Nope"):
        FeatureGates({"Nope": True})
    assert str(gates) == "CloudControllerManagerWebhook=true"


# -- validation (§8.10) ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--cloud-provider="], "--cloud-provider cannot be empty"),
        ([*BASE, "--leader-elect-resource-lock=endpoints"], 'resourceLock value must be "leases"'),
        (
            [*BASE, "--leader-elect-renew-deadline=15s"],
            "--leader-elect-lease-duration (15s) must be greater than "
            "--leader-elect-renew-deadline (15s)",
        ),
        (
            [*BASE, "--leader-elect-retry-period=9s"],
            "--leader-elect-renew-deadline (10s) must be greater than 1.2 x "
            "--leader-elect-retry-period (9s)",
        ),
        ([*BASE, "--leader-elect-retry-period=0s"], "must be positive"),
        ([*BASE, "--concurrent-node-syncs=0"], "concurrent-node-syncs must be a positive number"),
        (
            [*BASE, "--concurrent-node-status-updates=-1"],
            "concurrent-node-status-updates cannot be a negative number",
        ),
        ([*BASE, "--concurrent-service-syncs=0"], "concurrent-service-syncs must be a positive"),
        ([*BASE, "--kube-api-qps=0"], "--kube-api-qps must be a positive number, not 0"),
        (
            [*BASE, "--kube-api-content-type=application/yaml"],
            "--kube-api-content-type must be one of application/vnd.kubernetes.protobuf, "
            "application/json, not 'application/yaml'",
        ),
        ([*BASE, "--kube-api-qps=nan"], "--kube-api-qps must be a positive number, not nan"),
        ([*BASE, "--kube-api-burst=-1"], "--kube-api-burst must be a positive number, not -1"),
        (
            [*BASE, "--kube-api-transport=httpx"],
            "--kube-api-transport must be one of aiohttp, curl, not 'httpx'",
        ),
        (
            [*BASE, "--webhook-secure-port=10258"],
            "--webhook-secure-port cannot be the same value as --secure-port",
        ),
        ([*BASE, "--secure-port=70000"], "--secure-port 70000 must be between 0 and 65535"),
        ([*BASE, "--webhook-secure-port=-1"], "--webhook-secure-port -1 must be between 0"),
        ([*BASE, "--logging-format=xml"], 'unsupported logging format "xml": use text or json'),
        ([*BASE, "--node-monitor-period=0s"], "--node-monitor-period must be a positive duration"),
        ([*BASE, "--cloud-call-timeout=-1s"], "--cloud-call-timeout must be a positive duration"),
        ([*BASE, "--shutdown-grace-period=-1s"], "--shutdown-grace-period cannot be negative"),
        ([*BASE, "--node-selector=a in (b"], "--node-selector: cannot parse 'a in (b'"),
        (
            [*BASE, "--node-monitor-period=1ns"],
            "--node-monitor-period=1ns is below the minimum of 100ms",
        ),
        (
            [*BASE, "--route-reconciliation-period=10ms"],
            "--route-reconciliation-period=10ms is below the minimum of 100ms",
        ),
        (
            [*BASE, "--node-status-update-frequency=500ms"],
            "--node-status-update-frequency=500ms is below the minimum of 1s",
        ),
        ([*BASE, "--node-deletion-guard=true"], "--node-deletion-guard must be on or off"),
        (
            [*BASE, "--node-deletion-guard-threshold=30"],
            "--node-deletion-guard-threshold must be a share above 0 and at most 1",
        ),
        (
            [*BASE, "--node-deletion-guard-threshold=0"],
            "--node-deletion-guard-threshold must be a share above 0 and at most 1",
        ),
        ([*BASE, "--node-deletion-guard-min-nodes=0"], "--node-deletion-guard-min-nodes must be 1"),
        (
            [*BASE, "--node-deletion-guard-window=0s"],
            "--node-deletion-guard-window must be a positive duration",
        ),
    ],
)
def test_validation_errors(argv: list[str], message: str) -> None:
    assert message in problem(argv)


def test_the_curl_transport_is_chosen_by_flag_and_needs_its_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert parse_options(BASE).kube_api_transport == "aiohttp"
    monkeypatch.setattr(validation, "find_spec", lambda name: None)
    assert "pip install 'kube-ccm[curl]'" in problem([*BASE, "--kube-api-transport=curl"])


def test_a_lock_other_than_leases_is_fine_without_leader_election() -> None:
    argv = [*BASE, "--leader-elect=false", "--leader-elect-resource-lock=endpoints"]

    assert parse_options(argv).leader_elect is False


def test_port_zero_turns_both_servers_off_without_a_clash() -> None:
    config = parse_options([*BASE, "--secure-port=0", "--webhook-secure-port=0"])

    assert (config.secure_port, config.webhook_secure_port) == (0, 0)


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(OptionsError) as raised:
        parse_options(["--concurrent-node-syncs=0", "--controllers=bogus", "--logging-format=x"])

    assert len(raised.value.problems) == 4
    assert raised.value.problems[0].startswith("--cloud-provider cannot be empty")


# -- leader migration (§8.5) -----------------------------------------------------------

MIGRATE = [*BASE, "--enable-leader-migration"]


def test_leader_migration_reads_a_yaml_config(tmp_path: Path) -> None:
    path = tmp_path / "migration.yaml"
    path.write_text(
        "kind: LeaderMigrationConfiguration\n"
        "apiVersion: controllermanager.config.k8s.io/v1\n"
        "leaderName: cloud-provider-extraction-migration\n"
        "controllerLeaders:\n"
        "  - {name: node-route-controller, component: '*'}\n"
        "  - {name: service-lb-controller, component: cloud-controller-manager}\n"
    )

    config = parse_options([*MIGRATE, f"--leader-migration-config={path}"])

    assert config.enable_leader_migration is True
    assert config.leader_migration_lease_name == "cloud-provider-extraction-migration"
    assert config.leader_migration_controllers == {
        "node-route-controller": "*",
        "service-lb-controller": "cloud-controller-manager",
    }


def test_leader_migration_reads_a_json_config_of_an_older_version(tmp_path: Path) -> None:
    path = tmp_path / "migration.json"
    path.write_text(
        json.dumps(
            {
                "kind": "LeaderMigrationConfiguration",
                "apiVersion": "controllermanager.config.k8s.io/v1beta1",
                "leaderName": "kcm-to-ccm",
                "resourceLock": "leases",
                "controllerLeaders": [{"name": "route-controller", "component": "*"}],
            }
        )
    )

    config = parse_options([*MIGRATE, f"--leader-migration-config={path}"])

    assert config.leader_migration_lease_name == "kcm-to-ccm"
    assert config.leader_migration_controllers == {"route-controller": "*"}


def test_leader_migration_without_a_file_uses_upstreams_default() -> None:
    config = parse_options(MIGRATE)

    assert config.leader_migration_lease_name == "cloud-provider-extraction-migration"
    assert config.leader_migration_controllers == {
        "route-controller": "*",
        "service-controller": "*",
        "cloud-node-lifecycle-controller": "*",
    }


def test_leader_migration_needs_leader_election_as_upstream() -> None:
    assert parse_options([*MIGRATE, "--leader-elect=false"]).enable_leader_migration is False


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("kind: Something\n", "kind 'Something' is not supported"),
        ("- a list\n", "must be a LeaderMigrationConfiguration object"),
        ("key: [unclosed\n", "not valid YAML or JSON"),
        (
            "kind: LeaderMigrationConfiguration\napiVersion: v1\nleaderName: x\n",
            "apiVersion 'v1' is not supported: use controllermanager.config.k8s.io/v1",
        ),
        (
            "kind: LeaderMigrationConfiguration\napiVersion: controllermanager.config.k8s.io/v1\n",
            "leaderName: Required value",
        ),
        (
            "kind: LeaderMigrationConfiguration\n"
            "apiVersion: controllermanager.config.k8s.io/v1beta1\n"
            "leaderName: x\nresourceLock: endpoints\n",
            'resourceLock: Unsupported value: "endpoints"',
        ),
        (
            "kind: LeaderMigrationConfiguration\n"
            "apiVersion: controllermanager.config.k8s.io/v1\n"
            "leaderName: x\ncontrollerLeaders: [{name: route-controller}]\n",
            "controllerLeaders[0].component: Required value",
        ),
        (
            "kind: LeaderMigrationConfiguration\n"
            "apiVersion: controllermanager.config.k8s.io/v1\n"
            "leaderName: x\ncontrollerLeader: []\n",
            'unknown field "controllerLeader"',
        ),
        (
            "kind: LeaderMigrationConfiguration\n"
            "apiVersion: controllermanager.config.k8s.io/v1\nleaderName: x\n"
            "controllerLeaders: [{name: a, component: '*'}, {name: a, component: '*'}]\n",
            'controllerLeaders[1].name: Duplicate value: "a"',
        ),
    ],
)
def test_a_bad_leader_migration_config_is_refused(
    tmp_path: Path, content: str, message: str
) -> None:
    path = tmp_path / "migration.yaml"
    path.write_text(content)

    text = problem([*MIGRATE, f"--leader-migration-config={path}"])

    assert text.startswith(f'--leader-migration-config "{path}": ')
    assert message in text


def test_a_missing_leader_migration_config_is_refused(tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"

    assert "cannot read the file" in problem([*MIGRATE, f"--leader-migration-config={missing}"])


def test_the_leader_migration_config_is_not_read_unless_enabled(tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"

    config = parse_options([*BASE, f"--leader-migration-config={missing}"])

    assert config.enable_leader_migration is False


# -- what the command prints ---------------------------------------------------------------


def test_effective_flags_are_listed_like_upstreams_flag_lines() -> None:
    lines = effective_flags(parse_flags([*BASE, "--controllers=*,-route", "-v=2"]))

    assert len(lines) == len(FLAGS)
    assert 'FLAG: --cloud-provider="simulated"' in lines
    assert 'FLAG: --controllers="[*,-route]"' in lines
    assert 'FLAG: --node-status-update-frequency="5m0s"' in lines
    assert 'FLAG: --v="2"' in lines
    names = [line.partition("=")[0] for line in lines]
    assert names == sorted(names)


def test_inert_flags_are_those_set_away_from_their_default() -> None:
    parsed = parse_flags([*BASE, "--profiling=false", "--contention-profiling=false", "-v=2"])

    assert inert_flags(parsed) == ["profiling"]


def test_the_help_shows_every_flag_with_its_type_and_default() -> None:
    text = usage("cloud-controller-manager")

    assert text.startswith("Usage: cloud-controller-manager --cloud-provider=NAME [flags]")
    for flag in FLAGS:
        assert f"--{flag.name}" in text
    assert "      --concurrent-node-syncs int32  (default 1)\n" in text
    assert "  -v, --v Level  (default 0)\n" in text
    assert "CloudControllerManagerWebhook=true|false (ALPHA - default=false)" in text


def test_a_dry_run_never_takes_the_lease_and_refuses_per_controller_accounts() -> None:
    config = parse_options([*BASE, "--dry-run"])
    assert config.dry_run is True
    assert config.leader_elect is False
    assert parse_options(BASE).dry_run is False
    with pytest.raises(OptionsError, match="drop --use-service-account-credentials"):
        parse_options([*BASE, "--dry-run", "--use-service-account-credentials"])
