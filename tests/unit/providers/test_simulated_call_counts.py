"""Call counters live in memory and reach the state file at most once an interval;
every reader still sees exact totals."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from kube_ccm.providers.simulated import SimulatedCloud, SimulatedConfig
from kube_ccm.providers.simulated.config import SimulatedConfigError, load_config
from kube_ccm.providers.simulated.provider import SimulatedCloudError
from kube_ccm.providers.simulated.state import CALL_COUNTS_FLUSH_INTERVAL, CloudState


def written(path: Path) -> dict[str, tuple[int, int]]:
    """What the file holds now, read without CloudState (no waiting)."""
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT method, count, errors FROM calls").fetchall()
    return {method: (count, errors) for method, count, errors in rows}


async def noop() -> None:
    return None


async def fail() -> None:
    raise SimulatedCloudError("boom")


def sim(path: Path, interval: float) -> SimulatedCloud:
    return SimulatedCloud(SimulatedConfig(state=str(path), call_counts_flush_interval=interval))


async def test_a_burst_is_written_once_an_interval_and_the_first_call_at_once(
    tmp_path: Path,
) -> None:
    path = tmp_path / "cloud.db"
    cloud = sim(path, 1.0)
    try:
        await cloud.call("Quiet", noop)
        assert written(path) == {"Quiet": (1, 0)}, "the first call after a quiet while"
        for _ in range(50):
            await cloud.call("Busy", noop)
        assert "Busy" not in written(path), "not a write per call"
        await asyncio.sleep(1.5)
        assert written(path) == {"Quiet": (1, 0), "Busy": (50, 0)}, "written when due"
    finally:
        await cloud.aclose()


async def test_in_process_readers_see_exact_counts_at_once(tmp_path: Path) -> None:
    cloud = sim(tmp_path / "cloud.db", 10.0)
    try:
        for _ in range(20):
            await cloud.call("InstanceMetadata", noop)
        for _ in range(3):
            with pytest.raises(SimulatedCloudError):
                await cloud.call("InstanceMetadata", fail)
        assert cloud.state.sync.calls() == {"InstanceMetadata": {"count": 23, "errors": 3}}
    finally:
        await cloud.aclose()


async def test_another_reader_waits_for_the_pending_counts(tmp_path: Path) -> None:
    path = tmp_path / "cloud.db"
    cloud = sim(path, 1.5)  # longer than the CLI takes to start
    other = CloudState(path)
    try:
        for _ in range(30):
            await cloud.call("EnsureLoadBalancer", noop)
        with pytest.raises(SimulatedCloudError):
            await cloud.call("EnsureLoadBalancer", fail)
        assert written(path)["EnsureLoadBalancer"] == (1, 0)
        # Another process (the CLI here), while this one's counts are pending: it
        # waits for their write (made on this process's threads, not its loop).
        done = await asyncio.to_thread(
            subprocess.run,
            [
                sys.executable,
                "-m",
                "kube_ccm",
                "simcloud",
                "--state",
                str(path),
                "-o",
                "json",
                "calls",
            ],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        assert json.loads(done.stdout) == [
            {"method": "EnsureLoadBalancer", "count": 31, "errors": 1}
        ]
        for _ in range(5):
            await cloud.call("EnsureLoadBalancer", noop)
        assert written(path)["EnsureLoadBalancer"][0] < 36, "pending again"
        assert other.calls() == {"EnsureLoadBalancer": {"count": 36, "errors": 1}}
    finally:
        other.close()
        await cloud.aclose()


async def test_closing_writes_what_is_pending(tmp_path: Path) -> None:
    path = tmp_path / "cloud.db"
    cloud = sim(path, 60.0)
    for _ in range(10):
        await cloud.call("ListRoutes", noop)
    assert written(path) == {"ListRoutes": (1, 0)}
    await cloud.aclose()
    assert written(path) == {"ListRoutes": (10, 0)}


async def test_a_reset_elsewhere_forgets_counts_not_yet_written(tmp_path: Path) -> None:
    path = tmp_path / "cloud.db"
    cloud = sim(path, 0.3)
    other = CloudState(path)
    try:
        for _ in range(10):
            await cloud.call("UpdateLoadBalancer", noop)
        other.reset_calls()  # as a test does from its own process
        for _ in range(4):
            await cloud.call("UpdateLoadBalancer", noop)
        assert other.calls() == {"UpdateLoadBalancer": {"count": 4, "errors": 0}}
        cloud.state.sync.reset_calls()
        assert cloud.state.sync.calls() == {}
    finally:
        other.close()
        await cloud.aclose()


def test_interval_zero_writes_every_call(tmp_path: Path) -> None:
    path = tmp_path / "cloud.db"
    state = CloudState(path, call_counts_flush_interval=0)
    for _ in range(3):
        state.record_call("X", error=True)
    assert written(path) == {"X": (3, 3)}
    state.close()


def test_the_interval_is_set_in_the_cloud_config() -> None:
    assert load_config("state: ':memory:'").call_counts_flush_interval == CALL_COUNTS_FLUSH_INTERVAL
    assert (
        load_config("state: ':memory:'\ncallCountsFlushInterval: 250ms").call_counts_flush_interval
        == 0.25
    )
    assert (
        load_config("state: ':memory:'\ncallCountsFlushInterval: 0").call_counts_flush_interval == 0
    )
    with pytest.raises(SimulatedConfigError, match="callCountsFlushInterval"):
        load_config("state: ':memory:'\ncallCountsFlushInterval: soon")
    with pytest.raises(SimulatedConfigError, match="must not be negative"):
        load_config("state: ':memory:'\ncallCountsFlushInterval: -1")
