"""benchmarks/side_by_side.py and goccm.py: what needs no control plane (parsing, cells, tables)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def sbs() -> Any:
    sys.path.insert(0, str(BENCHMARKS))  # the scripts import _bench and goccm as top-level
    try:
        return importlib.import_module("side_by_side")
    finally:
        sys.path.remove(str(BENCHMARKS))


# The same families as both daemons export them (names and the queue label).
METRICS_TEXT = """\
# HELP workqueue_adds_total [ALPHA] Total number of adds handled by workqueue
# TYPE workqueue_adds_total counter
workqueue_adds_total{name="Nodes"} 5
workqueue_adds_total{name="service"} 3
workqueue_adds_total{name="node"} 1
# HELP workqueue_depth [ALPHA] Current depth of workqueue
# TYPE workqueue_depth gauge
workqueue_depth{name="Nodes"} 0
workqueue_depth{name="service"} 1
# HELP workqueue_work_duration_seconds [ALPHA] How long processing an item takes.
# TYPE workqueue_work_duration_seconds histogram
workqueue_work_duration_seconds_bucket{name="Nodes",le="+Inf"} 5
workqueue_work_duration_seconds_sum{name="Nodes"} 0.01
workqueue_work_duration_seconds_count{name="Nodes"} 5
workqueue_work_duration_seconds_bucket{name="service",le="+Inf"} 2
workqueue_work_duration_seconds_sum{name="service"} 0.01
workqueue_work_duration_seconds_count{name="service"} 2
# HELP rest_client_requests_total [ALPHA] Number of HTTP requests
# TYPE rest_client_requests_total counter
rest_client_requests_total{code="200",host="127.0.0.1:6443",method="GET"} 7
rest_client_requests_total{code="201",host="127.0.0.1:6443",method="POST"} 2
# HELP gosim_cloud_calls_total [ALPHA] Calls to the gosim cloud, by contract method.
# TYPE gosim_cloud_calls_total counter
gosim_cloud_calls_total{method="InstanceMetadata"} 5
gosim_cloud_calls_total{method="EnsureLoadBalancer"} 3
# TYPE gosim_load_balancers gauge
gosim_load_balancers 3
# TYPE gosim_load_balancer_backends gauge
gosim_load_balancer_backends 15
"""


def test_queues_listed_and_reconciled(sbs: Any) -> None:
    queues = sbs.Queues.parse(METRICS_TEXT)
    assert queues.adds["Nodes"] == 5
    assert queues.done["service"] == 2
    assert queues.listed({"Nodes": 5, "service": 3})
    assert not queues.listed({"Nodes": 6, "service": 3})
    assert queues.reconciled({"Nodes": 5})
    assert not queues.reconciled({"Nodes": 5, "service": 2})  # one still queued
    assert not queues.reconciled({"route": 0})  # a queue the daemon does not export
    assert sbs.api_requests(METRICS_TEXT) == 9


def test_gosim_counters(sbs: Any) -> None:
    goccm = sys.modules["goccm"]
    state = goccm.parse_gosim(METRICS_TEXT)
    assert state.calls == {"InstanceMetadata": 5, "EnsureLoadBalancer": 3}
    assert (state.load_balancers, state.backends) == (3, 15)
    assert goccm.gosim_calls("") == {}


def test_quick_sizes_and_cells(sbs: Any) -> None:
    args = sbs.parse_args(["--quick"])
    assert args.nodes == sbs.QUICK["nodes"]
    assert args.status_period == sbs.QUICK["status_period"]
    cells = sbs.cells_of(args)
    kinds = [c.scenario for c in cells]
    # 2 QPS levels x 2 latencies x 2 worker counts; 2 LB latencies; one large cluster.
    assert kinds.count("node_init") == 8
    assert kinds.count("lb") == 2
    assert kinds.count("cluster") == 1
    assert {(c.qps, c.burst) for c in cells if c.scenario == "node_init"} == {
        (1000.0, 2000),
        sbs.DEFAULT_QPS,
    }
    cluster = cells[-1]
    assert (cluster.size, cluster.services) == (300, 60)


def test_full_sizes_and_explicit_flags(sbs: Any) -> None:
    args = sbs.parse_args(["--scenarios", "idle", "--cluster-nodes", "100"])
    assert args.cluster_nodes == 100
    assert args.cluster_services == sbs.FULL["cluster_services"]
    assert args.status_period == 300.0
    [cell] = sbs.cells_of(args)
    assert cell.scenario == "cluster"
    labels = [key for key, _label, _unit in sbs.cell_metrics(cell, args.scenarios)]
    assert "idle_cpu_pct_period" in labels
    assert "startup_complete_seconds" not in labels


def test_table_has_py_go_and_ratio(sbs: Any) -> None:
    cell = sbs.Cell("cluster", 300, 0.0, 16, 1000.0, 2000, services=60)
    metrics = sbs.cell_metrics(cell, ["startup"])
    runs = {
        "py": [{"startup_complete_seconds": 2.0}, {"startup_complete_seconds": 4.0}],
        "go": [{"startup_complete_seconds": 1.0}],
    }
    result = sbs.summary(cell, runs, metrics)
    assert result["startup_complete_seconds"] == {"py": 3.0, "go": 1.0, "py_over_go": 3.0}
    text = sbs.table("t", [(cell, result, metrics)], 30.0)
    assert "| 300 nodes + 60 LB Services, 0 ms, 16 w, QPS 1000/2000, status period 30 s |" in text
    assert "| 3 s | 1 s | 3.00 |" in text


def test_impls_with_flags_of_their_own(sbs: Any) -> None:
    proto = "py:kube-api-content-type=application/vnd.kubernetes.protobuf"
    args = sbs.parse_args(["--impls", "py", "go", proto, "go:kube-api-content-type=a:x=y"])
    assert args.impls[2] == proto
    assert sbs.impl_base(proto) == "py"
    assert sbs.impl_flags(proto) == ["--kube-api-content-type=application/vnd.kubernetes.protobuf"]
    assert sbs.impl_flags("go:kube-api-content-type=a:x=y") == [
        "--kube-api-content-type=a",
        "--x=y",
    ]
    assert sbs.impl_flags("py") == []
    for wrong in ("rust", "py:no-value", "py:"):
        with pytest.raises(SystemExit):
            sbs.parse_args(["--impls", wrong])


def test_table_has_a_column_and_a_ratio_per_extra_impl(sbs: Any) -> None:
    cell = sbs.Cell("node_init", 1000, 0.0, 16, 1000.0, 2000)
    metrics = (("nodes_per_second", "nodes/s (first→last)", ""),)
    proto = "py:kube-api-content-type=application/vnd.kubernetes.protobuf"
    runs = {
        "py": [{"nodes_per_second": 200.0}],
        "go": [{"nodes_per_second": 250.0}],
        proto: [{"nodes_per_second": 150.0}, {"nodes_per_second": 170.0}],
    }
    impls = ["py", "go", proto]
    result = sbs.summary(cell, runs, metrics, impls)
    assert result["nodes_per_second"] == {
        "py": 200.0,
        "go": 250.0,
        proto: 160.0,
        "py_over_go": 0.8,
        f"{proto}_over_go": 0.64,
    }
    text = sbs.table("t", [(cell, result, metrics)], 300.0, impls)
    name = "kube-ccm (--kube-api-content-type=application/vnd.kubernetes.protobuf)"
    assert f"| kube-ccm (Py) | Go CCM | {name} | Py/Go | {name}/Go |" in text
    assert "| 200 | 250 | 160 | 0.80 | 0.64 |" in text


def test_a_table_of_two_kube_ccm_variants_and_go(sbs: Any) -> None:
    cell = sbs.Cell("node_init", 1000, 0.0, 16, 1000.0, 2000)
    metrics = (("nodes_per_second", "nodes/s (first→last)", ""),)
    impls = ["py:a=json", "go", "py:a=proto"]
    runs = {
        "py:a=json": [{"nodes_per_second": 200.0}],
        "go": [{"nodes_per_second": 250.0}],
        "py:a=proto": [{"nodes_per_second": 150.0}],
    }
    text = sbs.table("t", [(cell, sbs.summary(cell, runs, metrics, impls), metrics)], 300.0, impls)
    assert (
        "| Go CCM | kube-ccm (--a=json) | kube-ccm (--a=proto) | kube-ccm (--a=json)/Go |" in text
    )
    assert "| 250 | 200 | 150 | 0.80 | 0.60 |" in text
