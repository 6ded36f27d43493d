"""Cloud credentials from a file or the environment: loaded, reloaded, never shown."""

from __future__ import annotations

import asyncio
import copy
import errno
import logging
import os
import pickle
import shutil
from pathlib import Path
from typing import NoReturn

import pytest

from kube_ccm.cloudprovider import (
    CloudConfigError,
    Credentials,
    CredentialsError,
    CredentialsSource,
    Secret,
)
from kube_ccm.cloudprovider import credentials as credentials_module
from kube_ccm.testing.waiting import eventually

FIRST = "first-token-7f3a9c"
SECOND = "second-token-b41e02"


class SecretVolume:
    """A directory written the way the kubelet's AtomicWriter projects a Secret.

    ``key`` -> ``..data/key``; ``..data`` -> ``..<version>``; an update writes a new
    version directory, renames a fresh ``..data`` symlink over the old one (atomic),
    then removes the old directory. The ``key`` symlink itself never changes.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._version = 0

    def write(self, files: dict[str, str]) -> None:
        self._version += 1
        version = self.directory / f"..2025_01_01_00_00_00.{self._version:06d}"
        version.mkdir()
        for key, value in files.items():
            (version / key).write_text(value)
        data = self.directory / "..data"
        old = data.resolve() if data.is_symlink() else None
        tmp = self.directory / "..data_tmp"
        tmp.symlink_to(version.name)
        os.replace(tmp, data)
        for key in files:
            link = self.directory / key
            if not link.is_symlink():
                link.symlink_to(f"..data/{key}")
        for link in self.directory.iterdir():
            if not link.name.startswith("..") and link.name not in files:
                link.unlink()
        if old is not None:
            shutil.rmtree(old)

    def path(self, key: str) -> Path:
        return self.directory / key


def from_file(path: Path, interval: float = 10.0) -> Credentials:
    return Credentials(CredentialsSource(file=str(path)), reload_interval=interval)


def test_a_file_gives_its_stripped_content(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(f"  {FIRST}\n")
    credentials = from_file(path)

    assert credentials.load().reveal() == FIRST
    assert credentials.current() == Secret(FIRST)


async def test_an_environment_variable_is_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIM_TOKEN", FIRST)
    credentials = Credentials(CredentialsSource(env="SIM_TOKEN"))

    assert credentials.load().reveal() == FIRST
    monkeypatch.setenv("SIM_TOKEN", SECOND)
    assert await credentials.refresh() is False
    await asyncio.wait_for(credentials.watch(asyncio.Event()), 5)  # returns: nothing to watch
    assert credentials.current().reveal() == FIRST


async def test_a_kubelet_style_data_symlink_swap_is_picked_up(tmp_path: Path) -> None:
    volume = SecretVolume(tmp_path / "secret")
    volume.write({"token": FIRST})
    credentials = from_file(volume.path("token"))
    credentials.load()
    link_before = os.readlink(volume.path("token"))

    volume.write({"token": SECOND})

    assert os.readlink(volume.path("token")) == link_before  # the path never changed
    assert await credentials.refresh() is True
    assert credentials.current().reveal() == SECOND


async def test_a_plain_rewrite_of_the_same_size_is_picked_up(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("aaaa-1111")
    credentials = from_file(path)
    credentials.load()
    stat = path.stat()

    path.write_text("bbbb-2222")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # even with the old mtime

    assert await credentials.refresh() is True
    assert credentials.current().reveal() == "bbbb-2222"


@pytest.mark.parametrize(
    ("setup", "expected"),
    [
        (lambda p: None, "does not exist"),
        (lambda p: p.write_text(" \n"), "is empty"),
        (lambda p: p.mkdir(), "is a directory"),
        (lambda p: p.write_bytes(b"\xff\xfe" + FIRST.encode()), "is not UTF-8 text"),
        (lambda p: p.symlink_to(p.parent / "..data" / "token"), "does not exist"),
    ],
    ids=["missing", "empty", "directory", "binary", "dangling-symlink"],
)
def test_an_unusable_file_at_start_is_a_cloud_config_error_naming_it(
    tmp_path: Path, setup: object, expected: str
) -> None:
    path = tmp_path / "token"
    setup(path)  # type: ignore[operator]
    credentials = from_file(path)

    with pytest.raises(CredentialsError) as caught:
        credentials.load()

    assert isinstance(caught.value, CloudConfigError)  # the daemon exits 1 with it
    assert f'"{path}"' in str(caught.value)
    assert expected in str(caught.value)
    assert FIRST not in str(caught.value)
    assert caught.value.__cause__ is None
    assert caught.value.__suppress_context__


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (PermissionError(errno.EACCES, "Permission denied"), "not readable by this process"),
        (OSError(errno.EIO, "Input/output error"), "cannot be read: Input/output error"),
    ],
)
def test_an_unreadable_file_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: OSError, expected: str
) -> None:
    path = tmp_path / "token"
    path.write_text(FIRST)

    def refuse(*args: object, **kwargs: object) -> NoReturn:
        raise error

    # The tests may run as root, who reads any file: make the open fail as it would.
    monkeypatch.setattr(credentials_module, "open", refuse, raising=False)

    with pytest.raises(CredentialsError, match=expected) as caught:
        from_file(path).load()
    assert f'"{path}"' in str(caught.value)


@pytest.mark.parametrize(("value", "expected"), [(None, "is not set"), ("  ", "is empty")])
def test_an_unset_or_empty_variable_at_start_says_what_to_do(
    monkeypatch: pytest.MonkeyPatch, value: str | None, expected: str
) -> None:
    if value is None:
        monkeypatch.delenv("SIM_TOKEN", raising=False)
    else:
        monkeypatch.setenv("SIM_TOKEN", value)

    with pytest.raises(CredentialsError, match=expected) as caught:
        Credentials(CredentialsSource(env="SIM_TOKEN")).load()

    assert '"SIM_TOKEN"' in str(caught.value)
    assert "`credentials.env`" in str(caught.value)


async def test_a_file_that_vanishes_later_keeps_the_old_value_and_warns_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    volume = SecretVolume(tmp_path / "secret")
    volume.write({"token": FIRST})
    credentials = from_file(volume.path("token"))
    credentials.load()
    caplog.set_level(logging.INFO, logger="kube_ccm.cloudprovider.credentials")

    volume.write({"other": "x"})  # the key was removed from the Secret
    assert await credentials.refresh() is False
    assert await credentials.refresh() is False

    assert credentials.current().reveal() == FIRST
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "does not exist" in warnings[0].getMessage()
    assert Secret(FIRST).fingerprint in warnings[0].getMessage()

    volume.write({"token": SECOND})
    assert await credentials.refresh() is True
    assert credentials.current().reveal() == SECOND
    assert "readable again" in caplog.text
    assert FIRST not in caplog.text
    assert SECOND not in caplog.text


async def test_an_emptied_file_keeps_the_old_value(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(FIRST)
    credentials = from_file(path)
    credentials.load()

    path.write_text("")

    assert await credentials.refresh() is False
    assert credentials.current().reveal() == FIRST


async def test_callbacks_fire_once_per_change(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(FIRST)
    credentials = from_file(path)
    credentials.load()
    seen: list[str] = []
    awaited: list[str] = []

    async def async_callback(secret: Secret) -> None:
        awaited.append(secret.reveal())

    def failing(secret: Secret) -> None:
        raise RuntimeError("callback bug")

    credentials.on_change(failing)
    credentials.on_change(lambda s: seen.append(s.reveal()))
    remove = credentials.on_change(async_callback)

    assert await credentials.refresh() is False  # unchanged: nothing fires
    path.write_text(SECOND)
    results = await asyncio.gather(credentials.refresh(), credentials.refresh())
    assert await credentials.refresh() is False

    assert sorted(results) == [False, True]
    assert seen == [SECOND]
    assert awaited == [SECOND]

    remove()
    path.write_text(FIRST)
    assert await credentials.refresh() is True
    assert seen == [SECOND, FIRST]
    assert awaited == [SECOND]


async def test_watch_polls_until_stopped(tmp_path: Path) -> None:
    volume = SecretVolume(tmp_path / "secret")
    volume.write({"token": FIRST})
    credentials = from_file(volume.path("token"), interval=0.02)
    credentials.load()
    stop = asyncio.Event()
    changes: list[Secret] = []
    credentials.on_change(changes.append)
    task = credentials.start(stop)

    volume.write({"token": SECOND})
    await eventually(lambda: credentials.current().reveal() == SECOND, what="the new token")
    stop.set()
    await asyncio.wait_for(task, 5)

    assert changes == [Secret(SECOND)]


async def test_close_cancels_the_watch(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(FIRST)
    credentials = from_file(path, interval=30)
    task = credentials.start(asyncio.Event())
    await asyncio.sleep(0)

    credentials.close()

    with pytest.raises(asyncio.CancelledError):
        await task


def test_the_value_never_shows_in_repr_str_or_format(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(FIRST)
    credentials = from_file(path)
    secret = credentials.load()

    shown = [repr(secret), str(secret), f"{secret}", f"{secret!r}", repr(credentials)]
    shown.append(repr([secret, {"token": secret}]))

    assert all(FIRST not in text for text in shown)
    assert repr(secret) == f"Secret('***', sha256={secret.fingerprint})"
    assert str(secret) == "***"
    assert len(secret.fingerprint) == 8
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(secret)
    assert copy.deepcopy(secret) is secret


def test_secrets_compare_by_value() -> None:
    assert Secret(FIRST) == Secret(FIRST)
    assert Secret(FIRST) != Secret(SECOND)
    assert len({Secret(FIRST), Secret(FIRST)}) == 1
    with pytest.raises(ValueError, match="empty"):
        Secret("")


def test_the_cloud_config_value_is_parsed_strictly(tmp_path: Path) -> None:
    relative = CredentialsSource.from_config({"file": "creds/token"}, base_dir=tmp_path)
    env = CredentialsSource.from_config({"env": "TOKEN"})

    assert relative.file == str(tmp_path / "creds" / "token")
    assert env.env == "TOKEN"
    assert "environment variable" in env.describe()


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("/etc/token", "must be a mapping"),
        ({}, "names no source"),
        ({"file": "/a", "env": "B"}, "names both"),
        ({"file": ""}, "`auth.file` must be a non-empty string"),
        ({"env": 3}, "`auth.env` must be a non-empty string"),
        ({"path": "/a"}, "unknown keys path"),
    ],
)
def test_a_bad_cloud_config_value_says_what_to_write(value: object, expected: str) -> None:
    with pytest.raises(CredentialsError, match=expected) as caught:
        CredentialsSource.from_config(value, field="auth")

    assert "`auth: {file: PATH}`" in str(caught.value)


def test_a_source_needs_exactly_one_of_file_and_env() -> None:
    with pytest.raises(CredentialsError, match="exactly one source"):
        CredentialsSource()
    with pytest.raises(ValueError, match="reload_interval"):
        Credentials(CredentialsSource(env="X"), reload_interval=0)
