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


def test_the_shipped_results_give_the_tables_cells(current_table: Any) -> None:
    rows = current_table.table_rows(sorted((BENCHMARKS / "results").glob("*.jsonl")), BENCHMARKS)
    assert (
        "| 0 ms cloud, 16 workers: nodes/s | 291.4 | 418.9 | 0.70 | [2026-11-25, 2d89103][sbs] |"
        in rows
    )
