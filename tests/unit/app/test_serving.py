"""The secure port's health endpoints follow upstream's /healthz rules."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from pathlib import Path

import httpx2
import pytest

from kube_ccm.app.serving.certs import serving_context
from kube_ccm.app.serving.server import HealthChecks, SecureServer
from kube_ccm.runtime.metrics import Metrics


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[str, HealthChecks]]:
    checks = HealthChecks()
    context, _ = serving_context(cert_dir=str(tmp_path))
    port = free_port()
    server = SecureServer(
        checks,
        Metrics(),
        lambda: {"kind": "CloudControllerManagerConfiguration"},
        bind_address="127.0.0.1",
        port=port,
        ssl_context=context,
    )
    await server.start()
    try:
        yield f"https://127.0.0.1:{port}", checks
    finally:
        await server.stop()


async def get(url: str) -> httpx2.Response:
    # A self-signed loopback certificate: trust is not what these tests check.
    async with httpx2.AsyncClient(verify=False) as client:
        return await client.get(url)


async def test_with_no_checks_ping_answers(served: tuple[str, HealthChecks]) -> None:
    base, _ = served
    assert (await get(f"{base}/healthz")).text == "ok"
    assert "[+]ping ok" in (await get(f"{base}/healthz?verbose")).text


async def test_a_failing_check_is_500_and_can_be_excluded(served: tuple[str, HealthChecks]) -> None:
    base, checks = served
    checks.add("leaderElection", lambda: False)
    checks.add("cloud-node-controller", lambda: True)
    failing = await get(f"{base}/healthz")
    assert failing.status_code == 500
    assert "[-]leaderElection failed" in failing.text
    excluded = await get(f"{base}/healthz?exclude=leaderElection&verbose")
    assert excluded.status_code == 200
    assert "[+]leaderElection excluded: ok" in excluded.text
    assert (await get(f"{base}/healthz/leaderElection")).status_code == 500
    assert (await get(f"{base}/healthz/cloud-node-controller")).text == "ok"


async def test_a_raising_check_fails_instead_of_crashing(served: tuple[str, HealthChecks]) -> None:
    base, checks = served

    def boom() -> bool:
        raise RuntimeError("boom")

    checks.add("broken", boom)
    assert (await get(f"{base}/healthz")).status_code == 500


async def test_readyz_follows_the_readiness_function(served: tuple[str, HealthChecks]) -> None:
    base, checks = served
    assert (await get(f"{base}/readyz")).status_code == 500
    checks.ready = lambda: True
    assert (await get(f"{base}/readyz")).text == "ok"
    assert (await get(f"{base}/livez")).text == "ok"


async def test_readyz_verbose_lists_the_deletion_guard_without_failing_readiness(
    served: tuple[str, HealthChecks],
) -> None:
    base, checks = served
    checks.ready = lambda: True
    state = {"tripped": False}
    checks.add_readiness_info(
        "node-deletion-guard",
        lambda: (
            (False, "tripped (zone): 4 Node deletions held") if state["tripped"] else (True, "")
        ),
    )
    assert "[+]node-deletion-guard ok" in (await get(f"{base}/readyz?verbose")).text
    state["tripped"] = True
    verbose = await get(f"{base}/readyz?verbose")
    assert verbose.status_code == 200
    assert verbose.text.splitlines() == [
        "[+]caches-synced ok",
        "[-]node-deletion-guard tripped (zone): 4 Node deletions held (not counted for readiness)",
        "readyz check passed",
    ]
    assert (await get(f"{base}/readyz")).text == "ok"
    checks.ready = lambda: False
    assert (await get(f"{base}/readyz?verbose")).status_code == 500


async def test_a_readiness_condition_may_be_awaited_and_one_that_raises_is_unknown(
    served: tuple[str, HealthChecks],
) -> None:
    base, checks = served
    checks.ready = lambda: True

    async def from_workers() -> tuple[bool, str]:
        return False, "tripped: 3 Node deletions held"

    def broken() -> tuple[bool, str]:
        raise RuntimeError("worker gone")

    checks.add_readiness_info("node-deletion-guard", from_workers)
    checks.add_readiness_info("other", broken)
    verbose = await get(f"{base}/readyz?verbose")
    assert verbose.status_code == 200
    assert (
        "[-]node-deletion-guard tripped: 3 Node deletions held (not counted for readiness)"
        in verbose.text
    )
    assert "[-]other unknown: it could not be read (see the log)" in verbose.text


async def test_without_an_authorizer_only_health_paths_are_served(
    served: tuple[str, HealthChecks],
) -> None:
    # Delegated authn/authz itself is tested in test_delegated.py.
    base, _ = served
    assert (await get(f"{base}/metrics")).status_code == 403
    assert (await get(f"{base}/configz")).status_code == 403
    assert (await get(f"{base}/healthz/ping")).status_code == 200
