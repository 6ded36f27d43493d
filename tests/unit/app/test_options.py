"""Flags: upstream names and defaults, Go parsing, the controllers grammar, validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from kube_ccm.app.cli import main, run
from kube_ccm.app.options import (
    FLAGS,
    OptionsError,
    format_go_duration,
    parse_feature_gates,
    parse_go_duration,
    parse_options,
    resolve_controllers,
)

ALL = frozenset(
    {
        "cloud-node-controller",
        "cloud-node-lifecycle-controller",
        "service-lb-controller",
        "node-route-controller",
    }
)
BASE = ["--cloud-provider=simulated"]


def test_defaults_are_upstreams() -> None:
    config = parse_options(BASE)
    assert config.controllers == ALL
    assert config.cluster_name == "kubernetes"
    assert config.node_monitor_period == 5.0
    assert config.node_status_update_frequency == 300.0
    assert config.concurrent_node_syncs == 1
    assert config.concurrent_node_status_updates == 0
    assert (config.kube_api_qps, config.kube_api_burst) == (20.0, 30)
    assert config.leader_elect is True
    election = config.leader_election
    assert (election.namespace, election.name) == ("kube-system", "cloud-controller-manager")
    assert (election.lease_duration, election.renew_deadline, election.retry_period) == (
        15.0,
        10.0,
        2.0,
    )
    assert (config.cloud_call_timeout, config.shutdown_grace_period) == (60.0, 10.0)
    assert config.verbosity == 0
    assert config.logging_format == "text"
    assert config.cloud_config is None
    assert config.kubeconfig is None
    assert (config.secure_port, config.bind_address) == (10258, "0.0.0.0")
    assert config.webhook_secure_port == 10260
    assert config.webhooks == frozenset()
    assert config.route_reconciliation_period == 10.0
    assert config.configure_cloud_routes is True
    assert config.cluster_cidr == ""
    assert config.concurrent_service_syncs == 1
    assert config.extra_flags["min-resync-period"] == 12 * 3600.0


def test_every_flag_has_a_help_text_and_a_printable_default() -> None:
    for flag in FLAGS:
        assert flag.help, flag.name
        assert flag.default_text(), flag.name


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("5m0s", 300.0),
        ("1h30m", 5400.0),
        ("500ms", 0.5),
        ("0", 0.0),
        ("1.5s", 1.5),
        ("12h0m0s", 43200.0),
    ],
)
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_go_duration(text) == seconds


@pytest.mark.parametrize(
    ("bad", "message"), [("5", "missing unit"), ("5 minutes", "invalid duration"), ("", "invalid")]
)
def test_bad_durations(bad: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_go_duration(bad)


def test_durations_print_like_go() -> None:
    assert [format_go_duration(s) for s in (300.0, 43200.0, 0.5, 0.0, 10.0)] == [
        "5m0s",
        "12h0m0s",
        "500ms",
        "0s",
        "10s",
    ]


def test_pflag_syntax() -> None:
    config = parse_options(
        [
            "--cloud-provider",
            "simulated",
            "--leader-elect=false",
            "--allow-untagged-cloud",
            "--concurrent-node-syncs",
            "16",
            "-v=4",
            "--node-monitor-period=1m",
            "--kube-api-qps=50.5",
        ]
    )
    assert config.cloud_provider == "simulated"
    assert config.leader_elect is False
    assert config.allow_untagged_cloud is True
    assert config.concurrent_node_syncs == 16
    assert config.verbosity == 4
    assert config.node_monitor_period == 60.0
    assert config.kube_api_qps == 50.5


def test_a_bool_flag_never_takes_the_next_argument() -> None:
    with pytest.raises(OptionsError, match="unexpected argument 'false'"):
        parse_options([*BASE, "--leader-elect", "false"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--cloud-provider="], "--cloud-provider cannot be empty"),
        ([*BASE, "--nope=1"], "unknown flag: --nope"),
        ([*BASE, "positional"], "unexpected argument 'positional'"),
        ([*BASE, "--node-monitor-period=5"], 'time: missing unit in duration "5"'),
        ([*BASE, "--leader-elect=maybe"], 'invalid argument "maybe" for "--leader-elect"'),
        ([*BASE, "--leader-elect-resource-lock=configmaps"], 'resourceLock value must be "leases"'),
        ([*BASE, "--concurrent-node-syncs=0"], "concurrent-node-syncs must be a positive number"),
        (
            [*BASE, "--concurrent-node-status-updates=-1"],
            "concurrent-node-status-updates cannot be a negative number",
        ),
        ([*BASE, "--webhook-secure-port=10258"], "cannot be the same value as --secure-port"),
        ([*BASE, "--secure-port=70000"], "between 0 and 65535"),
        ([*BASE, "--webhooks=foo"], '"foo" is not in the list of known webhooks'),
        ([*BASE, "--webhooks=*,-foo"], '"foo" is not in the list of known webhooks'),
        ([*BASE, "--logging-format=xml"], 'unsupported logging format "xml"'),
        ([*BASE, "--controllers=bogus"], '"bogus" is not in the list of known controllers'),
        ([*BASE, "--controllers=*,-bogus"], '"bogus" is not in the list of known controllers'),
        ([*BASE, "--feature-gates=Nope=true"], "unrecognized feature gate: Nope"),
        ([*BASE, "--kube-api-qps"], "flag needs an argument: --kube-api-qps"),
    ],
)
def test_validation_errors(argv: list[str], message: str) -> None:
    with pytest.raises(OptionsError) as raised:
        parse_options(argv)
    assert message in str(raised.value)


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
        (["-service-lb-controller", "*"], ALL - {"service-lb-controller"}),
        ([], set()),
    ],
)
def test_controllers_grammar(requested: list[str], enabled: set[str]) -> None:
    assert resolve_controllers(requested) == frozenset(enabled)


def test_webhooks_grammar() -> None:
    assert parse_options([*BASE, "--webhooks=*"]).webhooks == {"persistent-volume-label"}
    assert parse_options([*BASE, "--webhooks=*,-persistent-volume-label"]).webhooks == set()
    assert parse_options(BASE).webhooks == set()


def test_pv_labels_are_off_unless_named() -> None:
    assert "persistent-volume-label-controller" not in parse_options(BASE).controllers
    named = parse_options([*BASE, "--controllers=*,pvl"]).controllers
    assert "persistent-volume-label-controller" in named
    assert "cloud-node-controller" in named


def test_feature_gates() -> None:
    gates = parse_feature_gates("CloudControllerManagerWatchBasedRoutesReconciliation=true")
    assert gates["CloudControllerManagerWatchBasedRoutesReconciliation"] is True
    assert gates["CloudControllerManagerWebhook"] is False
    with pytest.raises(OptionsError, match="invalid value"):
        parse_feature_gates("CloudControllerManagerWebhook=yes")


def test_leader_migration_config_is_validated_when_enabled(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(
        "kind: LeaderMigrationConfiguration\n"
        "apiVersion: controllermanager.config.k8s.io/v1\n"
        "leaderName: cloud-provider-extraction-migration\n"
        "controllerLeaders:\n"
        "  - {name: route, component: '*'}\n"
    )
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: Something\n")
    migrate = [*BASE, "--enable-leader-migration"]
    parse_options([*migrate, f"--leader-migration-config={good}"])
    with pytest.raises(OptionsError, match="must be a LeaderMigrationConfiguration"):
        parse_options([*migrate, f"--leader-migration-config={bad}"])
    with pytest.raises(OptionsError, match="cannot read"):
        parse_options([*migrate, f"--leader-migration-config={tmp_path / 'missing'}"])
    parse_options([*BASE, f"--leader-migration-config={bad}"])  # not enabled: not read


def test_run_prints_the_error_and_returns_1(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["--cloud-provider="]) == 1
    err = capsys.readouterr().err
    assert "Error: --cloud-provider cannot be empty" in err
    assert "--help" in err


def test_run_help_lists_flags_with_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--concurrent-node-syncs int" in out
    assert "(default 1)" in out
    assert "--node-status-update-frequency duration" in out
    assert "(default 5m0s)" in out
    assert "--cloud-call-timeout" in out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--version"]) == 0
    assert capsys.readouterr().out.startswith("kube-ccm ")
