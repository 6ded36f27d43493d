"""benchmarks/scale.py: what needs no control plane (sizes, seeding plan, the table)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def scale() -> Any:
    sys.path.insert(0, str(BENCHMARKS))  # the scripts import _bench and goccm as top-level
    try:
        return importlib.import_module("scale")
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_services_are_a_tenth_of_the_nodes_capped_at_10000(scale: Any) -> None:
    assert [scale.services_for(n) for n in scale.FULL_SIZES] == [500, 1500, 5000, 10000]
    assert scale.services_for(300) == 30


def test_the_forms_and_their_sizes(scale: Any) -> None:
    assert scale.parse_args([]).sizes == [5000, 15000, 50000, 100000]
    assert scale.parse_args(["--short"]).sizes == [5000]
    smoke = scale.parse_args(["--smoke"])
    plan = scale.Plan.of(smoke.sizes[0], smoke)
    assert (plan.nodes, plan.services, plan.not_ready, plan.burst) == (300, 30, 3, 50)
    assert plan.status_period < 60
    assert not plan.backend_names
    full = scale.Plan.of(100_000, scale.parse_args([]))
    assert (full.not_ready, full.burst, full.status_period) == (1000, 1000, 120.0)


def test_the_not_ready_nodes_are_spread_over_the_names(scale: Any) -> None:
    plan = scale.Plan.of(5000, scale.parse_args(["--short"]))
    spread = sorted(scale.not_ready_indexes(plan))
    assert len(spread) == 50
    assert spread[0] == 0
    assert spread[-1] >= 4900


def test_a_lean_node_is_initialised_for_kube_ccm(scale: Any) -> None:
    node = scale.lean_node("py", 7, ready=False)
    assert node["spec"] == {"providerID": "simulated://i-0000000000000007"}
    assert node["status"]["addresses"][0] == {"type": "InternalIP", "address": "10.128.0.18"}
    assert node["status"]["conditions"] == [{"type": "Ready", "status": "Unknown"}]


def test_the_table_has_a_py_go_ratio_per_size_and_names_failures(scale: Any) -> None:
    results = [
        {"impl": "py", "nodes": 5000, "rss_mib": 100.0, "startup_complete_seconds": 2.0},
        {"impl": "go", "nodes": 5000, "rss_mib": 200.0, "startup_complete_seconds": 4.0},
        {"impl": "py", "nodes": 100000, "error": "seeding: TimeoutError: etcd"},
    ]
    text = scale.table("t", results)
    assert "| metric | 5,000 Py | 5,000 Go | Py/Go | 100,000 Py | 100,000 Go | Py/Go |" in text
    assert "| RSS steady (end of run) | 100 MiB | 200 MiB | 0.50 | — | — | — |" in text
    assert "kube-ccm at 100,000 Nodes: **seeding: TimeoutError: etcd**" in text


def test_figures_taken_over_a_backlog_show_it_and_get_no_ratio(scale: Any) -> None:
    results = [
        {
            "impl": "py",
            "nodes": 5000,
            "idle_backlog_at_start": {},
            "idle_cpu_pct_quiet": 1.1,
            "join_quiet_seconds": 16.7,
            "join_cpu_seconds": 2.1,
            "rss_mib": 99.0,
        },
        {
            "impl": "go",
            "nodes": 5000,
            "idle_backlog_at_start": {"node": 2533},
            "idle_cpu_pct_quiet": 194.7,
            "join_quiet_seconds": "not reached within 240 s",
            "join_backlog_left": {"node": 3252},
            "join_cpu_seconds": 450.7,
            "rss_mib": 203.3,
        },
    ]
    text = scale.table("t", results)
    assert "| work queued when the idle window starts | none | node 2,533 | — |" in text
    assert "| idle CPU between refreshes | 1.1 % | 194.7 % | — |" in text
    assert "|   every queue drained after | 16.7 s | not reached within 240 s | — |" in text
    assert "|   work left at the cap | — | node 3,252 | — |" in text
    assert "|   daemon CPU | 2.1 s | 450.7 s | — |" in text
    assert "| RSS steady (end of run) | 99 MiB | 203.3 MiB | 0.49 |" in text
