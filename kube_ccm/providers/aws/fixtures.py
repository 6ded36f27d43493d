"""pytest fixtures for the ``aws`` provider's tests: one moto server per session.

Enabled for kube-ccm's own tests in ``tests/conftest.py``; elsewhere, add
``"kube_ccm.providers.aws.fixtures"`` to ``pytest_plugins``. Needs ``boto3`` and
``moto[server]`` (the ``dev`` extra): without them the tests that use these
fixtures are skipped with what to install, except under CI (``CI=true``), where
they fail.

``moto_server`` (session)
    A :class:`~kube_ccm.providers.aws.moto.MotoServer` checking credentials; its
    :attr:`~kube_ccm.providers.aws.moto.MotoServer.keys` are the valid ones.
``ec2_proxy``
    An :class:`~kube_ccm.providers.aws.moto.Ec2Proxy` in front of it on this test's event
    loop: point the provider's ``endpoint`` at ``ec2_proxy.url`` to count its calls
    or inject errors.
``aws_env``
    The SDK's environment cleared of the host's AWS settings (no credentials from
    the machine running the tests, no instance-metadata lookups); the test may then
    set what it needs with ``monkeypatch``.

A test tool beside the provider it fakes, never imported by the provider itself:
only tests and the sandbox import it (its dependencies are dev ones).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from kube_ccm.providers.aws.moto import Ec2Proxy, MotoServer, MotoUnavailableError, moto_missing

__all__ = ["aws_env", "ec2_proxy", "moto_server"]


def _required() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _unavailable(reason: str) -> None:
    if _required():
        pytest.fail(
            f"CI must run the aws provider's tests (make test installs .[dev,aws]): {reason}"
        )
    pytest.skip(reason)


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    missing = moto_missing()
    if missing:
        _unavailable(missing)
    server = MotoServer(log_path=tmp_path_factory.mktemp("moto") / "moto.log")
    with server.started_or(_unavailable, MotoUnavailableError):
        yield server


@pytest_asyncio.fixture
async def ec2_proxy(moto_server: MotoServer) -> AsyncIterator[Ec2Proxy]:
    async with Ec2Proxy(moto_server.url) as proxy:
        yield proxy


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
