"""The simulated cloud checks credentials; the provider presents them from a file or env."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from kube_ccm.api.objects import Node, NodeSpec, ObjectMeta, Service
from kube_ccm.app.cli import main
from kube_ccm.cloudprovider import (
    CloudConfigError,
    CloudProviderInitError,
    CredentialsError,
    Registry,
    Secret,
)
from kube_ccm.providers.simulated import (
    SimulatedAuthError,
    SimulatedCloud,
    SimulatedConfigError,
    factory,
)
from kube_ccm.providers.simulated.config import load_config
from kube_ccm.providers.simulated.state import CloudState
from kube_ccm.testing.waiting import eventually

OLD = "old-cloud-key-5d1f0e"
NEW = "new-cloud-key-a9c3b7"


def node(name: str) -> Node:
    return Node(metadata=ObjectMeta(name=name), spec=NodeSpec())


def kubelet_write(directory: Path, value: str, version: int) -> Path:
    """Project ``token`` as the kubelet does: ``token`` -> ``..data/token``, ``..data`` swapped."""
    directory.mkdir(exist_ok=True)
    target = directory / f"..v{version}"
    target.mkdir()
    (target / "token").write_text(value)
    tmp = directory / "..data_tmp"
    tmp.symlink_to(target.name)
    os.replace(tmp, directory / "..data")
    link = directory / "token"
    if not link.is_symlink():
        link.symlink_to("..data/token")
    return link


@pytest.fixture
def clouds() -> Iterator[list[SimulatedCloud]]:
    made: list[SimulatedCloud] = []
    yield made
    for cloud in made:
        cloud.close()


def build(clouds: list[SimulatedCloud], config: str, tmp_path: Path) -> SimulatedCloud:
    cloud = SimulatedCloud(load_config(config, base_dir=tmp_path))
    clouds.append(cloud)
    return cloud


async def test_without_credentials_anywhere_calls_succeed(
    clouds: list[SimulatedCloud], tmp_path: Path
) -> None:
    cloud = build(clouds, "state: ':memory:'", tmp_path)
    v2 = cloud.instances_v2()
    assert v2 is not None

    assert await v2.instance_metadata(node("n1")) is not None
    assert cloud.credentials is None


async def test_the_right_credentials_from_a_file_are_accepted(
    clouds: list[SimulatedCloud], tmp_path: Path
) -> None:
    (tmp_path / "token").write_text(f"{OLD}\n")
    cloud = build(clouds, "state: ':memory:'\ncredentials: {file: token}", tmp_path)
    cloud.state.sync.set_credentials(OLD)
    v2 = cloud.instances_v2()
    assert v2 is not None

    assert await v2.instance_metadata(node("n1")) is not None
    assert cloud.state.sync.calls()["InstanceMetadata"] == {"count": 1, "errors": 0}


async def test_wrong_credentials_are_rejected_without_showing_them(
    clouds: list[SimulatedCloud], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    token = tmp_path / "token"
    token.write_text(OLD)
    cloud = build(clouds, "state: ':memory:'\ncredentials: {file: token}", tmp_path)
    cloud.state.sync.set_credentials(NEW)
    v2 = cloud.instances_v2()
    assert v2 is not None

    with pytest.raises(SimulatedAuthError) as caught:
        await v2.instance_metadata(node("n1"))

    message = str(caught.value)
    assert message.startswith("InstanceMetadata: authentication failed")
    assert f'file "{token}"' in message
    assert Secret(OLD).fingerprint in message
    assert "simcloud credentials list" in message
    assert OLD not in message
    assert NEW not in message
    assert OLD not in caplog.text
    assert NEW not in caplog.text
    assert cloud.state.sync.calls()["InstanceMetadata"] == {"count": 1, "errors": 1}
    assert cloud.state.sync.instances() == []  # the body never ran


async def test_a_cloud_requiring_credentials_refuses_a_provider_without_any(
    clouds: list[SimulatedCloud], tmp_path: Path
) -> None:
    cloud = build(clouds, "state: ':memory:'", tmp_path)
    cloud.state.sync.set_credentials(NEW)
    lb = cloud.load_balancer()
    assert lb is not None

    with pytest.raises(SimulatedAuthError, match="none are configured; add `credentials:"):
        await lb.ensure_load_balancer_deleted(
            "kubernetes", Service(metadata=ObjectMeta(name="s", namespace="default", uid="u"))
        )


async def test_rejected_env_credentials_say_to_restart(
    clouds: list[SimulatedCloud], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SIM_KEY", OLD)
    cloud = build(clouds, "state: ':memory:'\ncredentials: {env: SIM_KEY}", tmp_path)
    cloud.state.sync.set_credentials(NEW)
    monkeypatch.setenv("SIM_KEY", NEW)  # too late: the process read it at start
    v2 = cloud.instances_v2()
    assert v2 is not None

    with pytest.raises(SimulatedAuthError, match="restart the daemon") as caught:
        await v2.instance_exists(node("n1"))
    assert 'environment variable "SIM_KEY"' in str(caught.value)


async def test_rotation_is_picked_up_by_the_watch_without_a_restart(
    clouds: list[SimulatedCloud], tmp_path: Path
) -> None:
    link = kubelet_write(tmp_path / "secret", OLD, 1)
    cloud = build(
        clouds,
        f"state: ':memory:'\ncredentials: {{file: {link}, reloadInterval: 20ms}}",
        tmp_path,
    )
    cloud.state.sync.set_credentials(OLD)
    stop = asyncio.Event()
    await cloud.initialize(None, stop)  # type: ignore[arg-type]
    v2 = cloud.instances_v2()
    assert v2 is not None
    credentials = cloud.credentials
    assert credentials is not None
    assert await v2.instance_metadata(node("n1")) is not None

    cloud.state.sync.add_credential(NEW)  # the cloud accepts both while the Secret changes
    kubelet_write(tmp_path / "secret", NEW, 2)

    await eventually(lambda: credentials.current() == Secret(NEW), what="the watch reads NEW")
    cloud.state.sync.set_credentials(NEW)  # the old key is revoked
    assert await v2.instance_metadata(node("n2")) is not None
    stop.set()


async def test_a_rejected_call_rereads_a_changed_file_at_once(
    clouds: list[SimulatedCloud], tmp_path: Path
) -> None:
    link = kubelet_write(tmp_path / "secret", OLD, 1)
    cloud = build(clouds, f"state: ':memory:'\ncredentials: {{file: {link}}}", tmp_path)
    v2 = cloud.instances_v2()
    assert v2 is not None

    cloud.state.sync.set_credentials(NEW)  # revoked before the file changed...
    kubelet_write(tmp_path / "secret", NEW, 2)  # ...and no watch runs (default 10 s)

    assert await v2.instance_metadata(node("n1")) is not None
    assert cloud.state.sync.calls()["InstanceMetadata"] == {"count": 1, "errors": 0}


def test_a_missing_credentials_file_stops_the_provider_naming_it(tmp_path: Path) -> None:
    config = tmp_path / "cloud.yaml"
    missing = tmp_path / "secret" / "token"
    config.write_text(f"state: ':memory:'\ncredentials: {{file: {missing}}}\n")
    registry = Registry(entry_point_group=None)
    registry.register("simulated", factory)

    with pytest.raises(CloudProviderInitError) as caught:
        registry.init_cloud_provider("simulated", str(config))

    assert isinstance(caught.value, CloudConfigError)
    assert isinstance(caught.value.__cause__, CredentialsError)
    assert f'"{missing}"' in str(caught.value)
    assert "does not exist" in str(caught.value)


@pytest.mark.parametrize(
    ("credentials", "expected"),
    [
        ("{file: a, env: B}", "names both a file and a variable"),
        ("{token: abc}", "unknown keys token"),
        ("{file: a, reloadInterval: soon}", "invalid `credentials.reloadInterval`"),
        ("{file: a, reloadInterval: 0s}", "must be more than 0"),
        ("{env: B, reloadInterval: 1s}", "applies to `credentials.file` only"),
        ("/etc/token", "must be a mapping"),
    ],
)
def test_a_bad_credentials_field_says_what_to_write(credentials: str, expected: str) -> None:
    with pytest.raises(SimulatedConfigError, match=expected):
        load_config(f"state: ':memory:'\ncredentials: {credentials}\n")


def test_the_credentials_field_is_parsed(tmp_path: Path) -> None:
    config = load_config(
        "state: s.db\ncredentials: {file: keys/token, reloadInterval: 1m30s}", base_dir=tmp_path
    )

    assert config.credentials is not None
    assert config.credentials.file == str(tmp_path / "keys" / "token")
    assert config.credentials_reload_interval == 90.0
    assert load_config("state: s.db").credentials is None


def test_the_state_keeps_salted_hashes_not_values(tmp_path: Path) -> None:
    path = tmp_path / "cloud.db"
    state = CloudState(path)
    try:
        state.set_credentials(OLD)
        state.add_credential(NEW)
        state.add_credential(NEW)  # idempotent
        assert state.authenticate(OLD) == "ok"
        assert state.authenticate(NEW) == "ok"
        assert state.authenticate("guess") == "rejected"
        assert state.authenticate(None) == "required"
        assert [c.fingerprint for c in state.credentials()] == [
            Secret(OLD).fingerprint,
            Secret(NEW).fingerprint,
        ]
        state.set_credentials(NEW)
        assert state.authenticate(OLD) == "rejected"
        state.clear_credentials()
        assert state.authenticate("anything") == "ok"
        state.set_credentials(OLD)
    finally:
        state.close()
    stored = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    assert OLD.encode() not in stored
    assert NEW.encode() not in stored


def test_the_cli_sets_and_lists_credentials_by_fingerprint_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "cloud.db")
    key_file = tmp_path / "key.txt"
    key_file.write_text(f"{NEW}\n")

    assert main(["simcloud", "--state", db, "-o", "json", "credentials", "set", OLD]) == 0
    assert (
        main(["simcloud", "--state", db, "credentials", "add", "--from-file", str(key_file)]) == 0
    )
    assert main(["simcloud", "--state", db, "-o", "json", "credentials", "list"]) == 0
    out = capsys.readouterr().out
    listed = json.loads(out[out.rindex("[\n") :])

    assert [c["fingerprint"] for c in listed] == [
        f"sha256:{Secret(OLD).fingerprint}",
        f"sha256:{Secret(NEW).fingerprint}",
    ]
    assert OLD not in out
    assert NEW not in out
    state = CloudState(db)
    try:
        assert state.authenticate(NEW) == "ok"
    finally:
        state.close()


def test_the_cli_refuses_an_empty_credential(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty"
    empty.write_text("\n")

    code = main(
        [
            "simcloud",
            "--state",
            str(tmp_path / "c.db"),
            "credentials",
            "set",
            "--from-file",
            str(empty),
        ]
    )

    assert code == 1
    assert "is empty: give the credential" in capsys.readouterr().err
