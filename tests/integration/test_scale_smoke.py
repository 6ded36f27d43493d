"""benchmarks/scale.py's smoke form: the harness works end to end (no timing is checked).

300 Nodes and 30 LoadBalancer Services on a control plane of its own, kube-ccm, and the
Go CCM too where its binary is already built (``benchmarks/goccm.py`` builds it; the
test does not spend the minutes of a cold Go build). The long form fills
docs/benchmarks.md: ``python benchmarks/scale.py``.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import pytest

from kube_ccm.testing.binaries import ControlPlaneBinariesError, ensure_binaries
from kube_ccm.testing.controlplane import controlplane_required

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def scale() -> Any:
    try:
        ensure_binaries()
    except ControlPlaneBinariesError as exc:
        if controlplane_required():
            pytest.fail(f"the scale benchmark needs kube-apiserver and etcd: {exc}")
        pytest.skip(f"the scale benchmark needs kube-apiserver and etcd: {exc}")
    sys.path.insert(0, str(BENCHMARKS))  # the scripts import _bench and goccm as top-level
    try:
        return importlib.import_module("scale")
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_the_smoke_form_measures_every_step_without_writing_an_address(
    scale: Any, tmp_path: Path
) -> None:
    goccm = importlib.import_module("goccm")
    impls = ["py", *(["go"] if goccm.binary_path().exists() else [])]
    markdown = tmp_path / "scale.md"

    results = scale.main(
        ["--smoke", "--impls", *impls, "--workdir", str(tmp_path), "--markdown", str(markdown)]
    )

    assert [r["impl"] for r in results] == impls
    for result in results:
        assert "error" not in result, result
        for key, _label, _unit in scale.ROWS:
            if key == "startup_outcomes" or "_backlog_" in key:
                continue  # text, and the work queued (dicts, checked below)
            assert isinstance(result[key], int | float), (key, result)
        # Each restart reached its first complete sync: every queue drained.
        assert [run["startup_outcome"] for run in result["startup_runs"]] == ["complete"] * 2
        assert result["startup_outcomes"].count(" s") == 2, result
        assert isinstance(result["idle_backlog_at_start"], dict), result
        assert isinstance(result["idle_backlog_at_end"], dict), result
        # Each burst went quiet, so no work is left at its cap.
        assert "join_backlog_left" not in result, result
        assert "leave_backlog_left" not in result, result
        # Seeded as each daemon leaves a Node: the restart rewrites no address.
        assert result["startup_node_writes"] == 0, result
        assert result["refresh_calls"] >= result["nodes"], result
        assert result["lifecycle_checked_nodes"] >= result["not_ready_nodes"], result
        assert result["join_update_calls_per_lb"] >= 1, result
        assert result["leave_update_calls_per_lb"] >= 1, result
        assert result["rss_kib_per_node"] > 0, result
    table = markdown.read_text()
    assert "| metric | 300 Py | 300 Go | Py/Go |" in table
    assert "lifecycle monitor pass" in table
