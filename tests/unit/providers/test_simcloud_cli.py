"""`kube-ccm simcloud` as a user drives it: JSON output, clear errors, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kube_ccm.api.objects import decode_node
from kube_ccm.app.cli import main
from kube_ccm.providers.simulated import SimulatedCloud, SimulatedConfig
from kube_ccm.testing.world import node_object


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_instances_lifecycle_through_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "cloud.db")
    assert run(capsys, "simcloud", "--state", db, "instances", "add", "n1", "--zone", "z9")[0] == 0
    assert run(capsys, "simcloud", "--state", db, "instances", "terminate", "n1")[0] == 0

    code, out, _ = run(capsys, "simcloud", "--state", db, "--output", "json", "instances", "list")

    assert code == 0
    [instance] = json.loads(out)
    assert instance["nodeName"] == "n1"
    assert instance["zone"] == "z9"
    assert instance["state"] == "terminated"


def test_cloud_config_supplies_the_state_file_and_defaults(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "cloud.yaml"
    config.write_text(f"state: {tmp_path / 'cloud.db'}\nregion: r7\nzones: [z7]\n")
    assert run(capsys, "simcloud", "--cloud-config", str(config), "instances", "add", "n1")[0] == 0

    code, out, _ = run(
        capsys, "simcloud", "--state", str(tmp_path / "cloud.db"), "-o", "json", "instances", "list"
    )

    assert code == 0
    assert json.loads(out)[0]["region"] == "r7"
    assert json.loads(out)[0]["zone"] == "z7"


def test_an_unknown_instance_is_an_error_with_exit_status_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(
        capsys, "simcloud", "--state", str(tmp_path / "c.db"), "instances", "start", "ghost"
    )
    assert code == 1
    assert "no instance with id or node name 'ghost'" in err


def test_a_bad_cloud_config_names_the_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "cloud.yaml"
    config.write_text("state: c.db\nlatncy: 5ms\n")
    code, _, err = run(capsys, "simcloud", "--cloud-config", str(config), "calls")
    assert code == 1
    assert "unknown field `latncy`" in err


def test_faults_can_be_set_listed_and_cleared(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "c.db")
    run(
        capsys,
        "simcloud",
        "--state",
        db,
        "faults",
        "set",
        "EnsureLoadBalancer",
        "retry",
        "--retry-after",
        "5s",
        "--count",
        "2",
    )
    _, out, _ = run(capsys, "simcloud", "--state", db, "-o", "json", "faults", "list")
    assert json.loads(out) == [
        {"method": "EnsureLoadBalancer", "mode": "retry", "retryAfter": 5.0, "remaining": 2}
    ]
    run(capsys, "simcloud", "--state", db, "faults", "clear")
    _, out, _ = run(capsys, "simcloud", "--state", db, "-o", "json", "faults", "list")
    assert json.loads(out) == []


async def test_a_blind_cloud_sees_no_instance_until_it_sees_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``simcloud blind on``: a wrong identity's view, every instance "not found"."""
    db = str(tmp_path / "cloud.db")
    assert run(capsys, "simcloud", "--state", db, "instances", "add", "n1")[0] == 0
    cloud = SimulatedCloud(SimulatedConfig(state=db))
    instances = cloud.instances_v2()
    assert instances is not None
    node = decode_node(json.dumps(node_object("n1", tainted=False)))
    try:
        assert await instances.instance_exists(node)
        assert run(capsys, "simcloud", "--state", db, "blind", "on")[0] == 0
        assert not await instances.instance_exists(node)
        code, out, _ = run(capsys, "simcloud", "--state", db, "-o", "json", "blind", "status")
        assert (code, json.loads(out)) == (0, {"blind": True})
        assert run(capsys, "simcloud", "--state", db, "blind", "off")[0] == 0
        assert await instances.instance_exists(node)
    finally:
        cloud.close()
