"""benchmarks/current_table.py: which run a cell's figures come from, and how a row reads."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def current_table() -> Any:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        return importlib.import_module("current_table")
    finally:
        sys.path.remove(str(BENCHMARKS))


def header(
    benchmark: str, commit: str, date: str = "2026-11-25", load: float = 1.0
) -> dict[str, Any]:
    return {
        "benchmark": benchmark,
        "header": {"date": date, "commit": commit, "load_average_1m_at_start": load},
    }


def node_summary(py: float, go: float, *, qps: float | None = 1000.0) -> dict[str, Any]:
    summary: dict[str, Any] = {
        "benchmark": "side_by_side",
        "summary": "node_init",
        "size": 1000,
        "cloud_latency_ms": 0.0,
        "workers": 16,
        "runs": 3,
        "nodes_per_second": {"py": py, "go": go},
        "daemon_cpu_ms_per_node": {"py": 2.0, "go": 1.0},
        "load_average_1m": {"py": 1.0, "go": 1.0},
    }
    if qps is not None:
        summary["kube_api_qps"] = qps
        summary["kube_api_burst"] = int(2 * qps) if qps > 20 else 30
    return summary


def write(path: Path, *lines: dict[str, Any] | str) -> Path:
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return path


def test_the_later_commit_wins_whatever_the_file_order(current_table: Any, tmp_path: Path) -> None:
    older = write(
        tmp_path / "b.jsonl", header("side_by_side", "aaaaaaa"), node_summary(100.0, 200.0)
    )
    newer = write(
        tmp_path / "a.jsonl",
        "goccm: using /somewhere",  # the scripts' other output is skipped
        header("side_by_side", "bbbbbbb"),
        node_summary(150.0, 200.0),
    )
    order = {"aaaaaaa": 0, "bbbbbbb": 1}
    cells = current_table.latest(current_table.records([older, newer], order))
    rows = current_table.side_by_side_rows(cells)
    assert (
        rows[1] == "| 0 ms cloud, 16 workers: nodes/s (first→last) | 150 | 200 | 0.75 "
        "| [2026-11-25, bbbbbbb][sbs] |"
    )
    assert rows[2].startswith("|   daemon CPU per Node (start-up included) | 2 ms | 1 ms | 2.00 |")


def test_a_run_without_a_recorded_qps_is_a_high_qps_run(current_table: Any, tmp_path: Path) -> None:
    path = write(
        tmp_path / "r.jsonl",
        header("side_by_side", "aaaaaaa"),
        node_summary(100.0, 200.0, qps=None),
        header("side_by_side", "bbbbbbb"),
        node_summary(10.0, 9.0, qps=20.0),
    )
    rows = current_table.side_by_side_rows(current_table.latest(current_table.records([path], {})))
    assert [r.split(" | ")[0] for r in rows if "nodes/s" in r] == [
        "| 0 ms cloud, 16 workers: nodes/s (first→last)",
        "| 0 ms cloud, 16 workers, QPS 20/30: nodes/s",
    ]


def test_scale_rows_pair_the_daemons_of_one_run_and_mark_a_busy_one(
    current_table: Any, tmp_path: Path
) -> None:
    py = {
        "benchmark": "scale",
        "impl": "py",
        "nodes": 100000,
        "startup_complete_seconds": 13.08,
        "startup_cpu_seconds": 10.76,
        "rss_mib": 369.3,
        "peak_rss_mib": 423.6,
        "lifecycle_pass_seconds": 0.15,
        "load_average_1m_restart": 4.57,
    }
    go = {
        "benchmark": "scale",
        "impl": "go",
        "nodes": 100000,
        "error": "start-up: stopped by the memory guard",
    }
    path = write(tmp_path / "s.jsonl", header("scale", "ccccccc", "2026-11-26", load=1.8), py, go)
    rows = current_table.scale_rows(current_table.latest(current_table.records([path], {})))
    assert rows[1] == (
        "| 100,000 Nodes: start-up to first complete sync (daemon CPU) | 13.08 s (10.76 s) "
        "| not reached | — | [2026-11-26, ccccccc][scale-100k] ᴸ |"
    )
    assert rows[2].startswith("|   RSS steady / peak | 369.3 / 423.6 MiB | — | — |")
    assert rows[5].startswith("|   lifecycle monitor pass | 0.15 s | — | — |")


def test_a_lost_start_up_race_is_every_restart_s_outcome_and_no_ratio(
    current_table: Any, tmp_path: Path
) -> None:
    py = {
        "benchmark": "scale",
        "impl": "py",
        "nodes": 5000,
        "startup_complete_seconds": 1.9,
        "startup_cpu_seconds": 1.45,
        "startup_runs": [{"startup_outcome": "complete", "startup_complete_seconds": 1.9}] * 3,
        "idle_cpu_pct_quiet": 1.133,
        "idle_cpu_pct_period": 1.818,
        "idle_backlog_at_start": {},
        "join_current_seconds": 6.4,
        "join_cpu_seconds": 2.1,
        "join_quiet_seconds": 16.7,
    }
    go = {
        "benchmark": "scale",
        "impl": "go",
        "nodes": 5000,
        "startup_runs": [
            {"startup_outcome": "complete", "startup_complete_seconds": 0.74},
            {
                "startup_outcome": "not reached within 240 s",
                "startup_backlog_at_cap": {"node": 458},
            },
        ],
        "idle_cpu_pct_quiet": 194.706,
        "idle_cpu_pct_period": 191.437,
        "idle_backlog_at_start": {"node": 2533},
        "idle_backlog_at_end": {"node": 2427},
        "refresh_seconds": 0.0,
        "refresh_cpu_seconds": 2.22,
        "join_current_seconds": 3.2,
        "join_cpu_seconds": 450.72,
        "join_quiet_seconds": "not reached within 240 s",
        "join_backlog_left": {"node": 3252},
    }
    path = write(tmp_path / "s.jsonl", header("scale", "ccccccc", "2026-11-28", load=0.4), py, go)
    rows = current_table.scale_rows(current_table.latest(current_table.records([path], {})))
    assert rows[1] == (
        "| 5,000 Nodes: start-up to first complete sync (daemon CPU) | 1.9 s (1.45 s) "
        "| 1 of 2 reached it: 0.74 s; not reached within 240 s (458 `node` keys left) | — "
        "| [2026-11-28, ccccccc][scale-15k] |"
    )
    assert rows[3].startswith("|   address refresh: duration / CPU | — | 0 / 2.22 s (beside that")
    assert rows[4] == (
        "|   idle CPU between refreshes / over one period | 1.133 / 1.818 % "
        "| 194.706 / 191.437 % (not idle: 2,533 `node` keys queued at its start, "
        "2,427 `node` keys at its end) | — | [2026-11-28, ccccccc][scale-15k] |"
    )
    assert rows[6] == (
        "|   burst of 1,000 joining: every LB current after / daemon CPU | 6.4 / 2.1 s "
        "| 3.2 / 450.72 s (not quiet within 240 s, 3,252 `node` keys left) | — "
        "| [2026-11-28, ccccccc][scale-15k] |"
    )


def test_the_shipped_results_give_the_tables_cells(current_table: Any) -> None:
    rows = current_table.table_rows(sorted((BENCHMARKS / "results").glob("*.jsonl")), BENCHMARKS)
    assert (
        "| 0 ms cloud, 16 workers: nodes/s | 315.2 | 358.5 | 0.88 | [2026-11-28, 50a3ee5][sbs] |"
        in rows
    )
