"""``kube-ccm run`` and ``cloud-controller-manager``: flags in, then the daemon or a refusal."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator

import pytest

from kube_ccm import __version__
from kube_ccm.app import cli, manager
from kube_ccm.app.options.config import DaemonConfig
from kube_ccm.app.options.featuregates import FeatureGates


@pytest.fixture
def daemon(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[DaemonConfig]]:
    """Stands in for the daemon: records the configuration it is started with, exits 0."""
    started: list[DaemonConfig] = []

    async def run_daemon(config: DaemonConfig) -> int:
        started.append(config)
        return 0

    monkeypatch.setattr(manager, "run_daemon", run_daemon)
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield started
    root.handlers[:], root.level = handlers, level


def test_bad_flags_print_each_problem_and_a_hint_then_exit_1(
    capsys: pytest.CaptureFixture[str], daemon: list[DaemonConfig]
) -> None:
    status = cli.run(["--cloud-provider=", "--concurrent-node-syncs=0"])

    err = capsys.readouterr().err
    assert status == 1
    assert err.splitlines() == [
        "Error: --cloud-provider cannot be empty: name the provider to run, "
        "e.g. --cloud-provider=simulated",
        "Error: concurrent-node-syncs must be a positive number: "
        "set --concurrent-node-syncs to 1 or more",
        "run with --help to see all flags",
    ]
    assert daemon == []


def test_an_unknown_flag_is_refused_in_pflags_words(
    capsys: pytest.CaptureFixture[str], daemon: list[DaemonConfig]
) -> None:
    assert cli.run(["--cloud-provider=simulated", "--foo"]) == 1
    assert "Error: unknown flag: --foo\n" in capsys.readouterr().err
    assert daemon == []


def test_help_lists_every_flag_with_its_default_and_exits_0(
    capsys: pytest.CaptureFixture[str], daemon: list[DaemonConfig]
) -> None:
    assert cli.run(["--help"]) == 0

    out = capsys.readouterr().out
    assert out.startswith("Usage: kube-ccm run --cloud-provider=NAME [flags]")
    assert "--concurrent-node-syncs int32  (default 1)" in out
    assert "--node-status-update-frequency duration  (default 5m0s)" in out
    assert "--cloud-call-timeout duration  (default 1m0s)" in out
    assert daemon == []


def test_kube_ccm_run_forwards_every_argument_to_the_daemon(daemon: list[DaemonConfig]) -> None:
    status = cli.main(["run", "--cloud-provider=simulated", "-v", "2", "--controllers=route"])

    assert status == 0
    [config] = daemon
    assert config.cloud_provider == "simulated"
    assert config.verbosity == 2
    assert config.controllers == {"node-route-controller"}
    assert isinstance(config.feature_gates, FeatureGates)


def test_kube_ccm_run_help_is_the_daemons_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["run", "--help"]) == 0
    assert capsys.readouterr().out.startswith("Usage: kube-ccm run --cloud-provider=NAME")


def test_kube_ccm_run_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["run", "--version"]) == 0
    assert capsys.readouterr().out == f"kube-ccm {__version__}\n"


def test_version_raw_is_machine_readable(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.run(["--version=raw"]) == 0
    assert json.loads(capsys.readouterr().out)["gitVersion"] == __version__


def test_run_without_argv_reads_the_command_line(
    monkeypatch: pytest.MonkeyPatch, daemon: list[DaemonConfig]
) -> None:
    monkeypatch.setattr(sys, "argv", ["my-ccm", "--cloud-provider=mine", "--leader-elect=false"])

    assert cli.run() == 0

    [config] = daemon
    assert (config.cloud_provider, config.leader_elect) == ("mine", False)


def test_at_v1_the_effective_flags_are_logged(
    capsys: pytest.CaptureFixture[str], daemon: list[DaemonConfig]
) -> None:
    assert cli.run(["--cloud-provider=simulated", "-v=1"]) == 0

    err = capsys.readouterr().err
    assert 'FLAG: --cloud-provider="simulated"' in err
    assert 'FLAG: --min-resync-period="12h0m0s"' in err


def test_at_v0_no_flags_are_logged_but_inert_ones_are_warned_about(
    capsys: pytest.CaptureFixture[str], daemon: list[DaemonConfig]
) -> None:
    assert cli.run(["--cloud-provider=simulated", "--profiling=false"]) == 0

    err = capsys.readouterr().err
    assert "FLAG:" not in err
    assert "--profiling is accepted for compatibility but not acted on yet" in err


def test_the_json_logging_format_is_applied(
    capsys: pytest.CaptureFixture[str], daemon: list[DaemonConfig]
) -> None:
    assert cli.run(["--cloud-provider=simulated", "--logging-format=json", "-v=1"]) == 0

    first = capsys.readouterr().err.splitlines()[0]
    assert json.loads(first)["msg"].startswith("FLAG: --")


def test_the_daemons_exit_status_is_the_commands(
    monkeypatch: pytest.MonkeyPatch, daemon: list[DaemonConfig]
) -> None:
    async def failing(config: DaemonConfig) -> int:
        return 1

    monkeypatch.setattr(manager, "run_daemon", failing)

    assert cli.run(["--cloud-provider=simulated"]) == 1


def test_the_cloud_controller_manager_command_uses_upstreams_name(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["cloud-controller-manager", "--help"])

    with pytest.raises(SystemExit) as exited:
        cli.cloud_controller_manager_main()

    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith("Usage: cloud-controller-manager ")


def test_kube_ccm_version_flag_as_well_as_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    """``kube-ccm --version`` is what users type first; it answers like ``kube-ccm version``."""
    with pytest.raises(SystemExit) as exited:
        cli.main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"kube-ccm {__version__}"
