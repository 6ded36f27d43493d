"""benchmarks/side_by_side.py and goccm.py: what needs no control plane (parsing, cells, tables)."""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
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
    # Every Node processed once, but the daemon is not reconciled while any queue it
    # exports has work: "service" has one queued, upstream's "node" one added, not done.
    assert not queues.reconciled({"Nodes": 5})
    assert queues.backlog() == {"node": 1, "service": 1}
    assert not queues.reconciled({"Nodes": 5, "service": 2})  # one still queued
    assert not queues.reconciled({"route": 0})  # a queue the daemon does not export
    assert sbs.api_requests(METRICS_TEXT) == 9


def _exposition(adds: int, done: int, depth: int, pending: int | None = None) -> str:
    text = f"""\
# TYPE workqueue_adds_total counter
workqueue_adds_total{{name="Nodes"}} 5
workqueue_adds_total{{name="node"}} {adds}
# TYPE workqueue_depth gauge
workqueue_depth{{name="Nodes"}} 0
workqueue_depth{{name="node"}} {depth}
# TYPE workqueue_work_duration_seconds histogram
workqueue_work_duration_seconds_bucket{{name="Nodes",le="+Inf"}} 5
workqueue_work_duration_seconds_sum{{name="Nodes"}} 0.01
workqueue_work_duration_seconds_count{{name="Nodes"}} 5
workqueue_work_duration_seconds_bucket{{name="node",le="+Inf"}} {done}
workqueue_work_duration_seconds_sum{{name="node"}} 0.01
workqueue_work_duration_seconds_count{{name="node"}} {done}
"""
    if pending is not None:
        text += "# TYPE kube_ccm_service_node_pass_pending gauge\n"
        text += f"kube_ccm_service_node_pass_pending {pending}\n"
    return text


@pytest.mark.parametrize(
    ("counts", "left"),
    [
        ((5000, 3986, 1014, None), {"node": 1014}),  # upstream's lost race: keys queued
        ((5000, 4999, 0, None), {"node": 1}),  # the last key in flight: depth 0, not done
        ((5000, 5000, 0, 1), {"node pass (pending)": 1}),  # kube-ccm's debounced pass
        ((5000, 5000, 0, 0), {}),
    ],
    ids=["queued", "in-flight", "pending-pass", "drained"],
)
def test_reconciled_waits_for_every_queue_queued_in_flight_or_pending(
    sbs: Any, counts: tuple[int, int, int, int | None], left: dict[str, int]
) -> None:
    """Issue 41: "first complete sync" is every queue either daemon exports drained,
    not only the queues the milestone names (the Go CCM's ``node`` queue held up to
    4,997 keys at the milestone the harness used to declare)."""
    queues = sbs.Queues.parse(_exposition(*counts))
    assert queues.backlog() == left
    assert queues.drained() == (not left)
    assert queues.reconciled({"Nodes": 5}) == (not left)


def test_a_lost_restart_leaves_no_figure_that_reads_as_success(sbs: Any) -> None:
    won = {
        "startup_outcome": "complete",
        "startup_listed_seconds": 0.5,
        "startup_reconciled_seconds": 1.5,
        "startup_address_pass_seconds": 1.2,
        "startup_complete_seconds": 1.5,
        "startup_cpu_seconds": 2.0,
    }
    lost = {"startup_outcome": "not reached within 600 s", "startup_backlog_at_cap": {"node": 9}}
    every = sbs.restart_summary([won, won | {"startup_complete_seconds": 1.7}, won])
    assert every["startup_complete_seconds"] == 1.5
    assert every["startup_outcomes"] == "1.5 s, 1.7 s, 1.5 s"
    mixed = sbs.restart_summary([won, lost, won])
    assert "startup_complete_seconds" not in mixed
    assert "startup_cpu_seconds" not in mixed
    assert mixed["startup_outcomes"] == "1.5 s, not reached within 600 s, 1.5 s"
    assert mixed["startup_runs"][1]["startup_backlog_at_cap"] == {"node": 9}
    # Over several runs of a cell: a start-up figure is shown only if no restart lost.
    assert sbs.median([every, every], "startup_complete_seconds") == 1.5
    assert sbs.median([every, mixed], "startup_complete_seconds") is None
    assert sbs.median([every, mixed], "startup_outcomes") == (
        "1.5 s, 1.7 s, 1.5 s; 1.5 s, not reached within 600 s, 1.5 s"
    )


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


def test_a_kube_ccm_side_with_more_flags_gets_its_own_columns(sbs: Any) -> None:
    args = sbs.parse_args(["--impls", "py", "go", "py:kube-api-transport=curl"])
    curl = args.impls[2]
    assert sbs.side_of(curl) == "py"
    assert sbs.extra_flags(curl) == ["--kube-api-transport=curl"]
    with pytest.raises(SystemExit):
        sbs.parse_args(["--impls", "go:x=y"])
    cell = sbs.Cell("node_init", 10, 0.0, 1, 1000.0, 2000)
    metrics = sbs.cell_metrics(cell, ["node_init"])[:1]
    runs = {
        "py": [{"nodes_per_second": 8.0}],
        "go": [{"nodes_per_second": 10.0}],
        curl: [{"nodes_per_second": 12.0}],
    }
    result = sbs.summary(cell, runs, metrics)
    assert result["nodes_per_second"][f"{curl}_over_go"] == 1.2
    text = sbs.table("t", [(cell, result, metrics)], 30.0, args.impls)
    assert "| kube-ccm (Py) | kube-ccm (kube-api-transport=curl) | Go CCM | Py/Go |" in text
    assert "| 8 | 12 | 10 | 0.80 | 1.20 |" in text


def test_cpu_and_memory_of_a_process_tree_include_its_children(sbs: Any) -> None:
    """A parent of its own with one child: the test runner itself may have other
    children (servers of other tests), which the tree would rightly count."""
    import subprocess  # noqa: PLC0415
    import time  # noqa: PLC0415

    bench = sys.modules["_bench"]
    script = (
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
        "time.sleep(30)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script])
    try:
        pids: list[int] = []
        for _ in range(200):  # until the child runs Python (its RSS beyond the fork's)
            pids = bench.tree_pids(parent.pid)
            if len(pids) == 2 and bench.memory_mib(pids[1]).get("VmRSS", 0.0) > 5:
                break
            time.sleep(0.05)
        assert len(pids) == 2, pids
        child = pids[1]
        ours, theirs = bench.memory_mib(parent.pid), bench.memory_mib(child)
        tree = bench.tree_memory_mib(parent.pid)
        assert tree["VmRSS"] == pytest.approx(ours["VmRSS"] + theirs["VmRSS"], abs=2)
        assert bench.tree_cpu_seconds(parent.pid) >= bench.cpu_seconds(parent.pid)
    finally:
        for pid in bench.tree_pids(parent.pid)[1:]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        parent.kill()
        parent.wait()
