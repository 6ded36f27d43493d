"""The issue's targets against a suite run's JSON lines: a Markdown table.

    .venv/bin/python benchmarks/targets.py RESULTS.jsonl [--markdown docs/benchmarks.md]

Reads the JSON objects the scenario scripts print (one per line; other lines are
ignored) and checks each target the benchmarks report (tests do not time them).
The "cause of a gap" column is left for a person to fill in from the profiles.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from _bench import append_markdown, markdown_table

Result = dict[str, Any]


def load(paths: Iterable[Path]) -> list[Result]:
    results = []
    for path in paths:
        for line in path.read_text().splitlines():
            if line.startswith("{"):
                try:
                    results.append(json.loads(line))
                except json.JSONDecodeError:
                    continue  # a pretty-printed object (controlplane_startup): not a target
    return results


def of(results: list[Result], benchmark: str, **match: Any) -> list[Result]:
    return [
        r
        for r in results
        if r.get("benchmark") == benchmark and all(r.get(k) == v for k, v in match.items())
    ]


def check(
    rows: list[list[str]],
    target: str,
    found: list[Result],
    measure: Callable[[list[Result]], tuple[str, bool]],
) -> None:
    if not found:
        rows.append([target, "not measured in this run", "—", ""])
        return
    value, met = measure(found)
    rows.append([target, value, "met" if met else "**missed**", ""])


def _node_reads(r: Result) -> int:
    requests = r.get("requests", {})
    return int(requests.get("GET nodes", 0)) + int(requests.get("LIST nodes", 0))


def targets(results: list[Result]) -> list[list[str]]:
    rows: list[list[str]] = []
    init = of(results, "node_init")
    check(
        rows,
        "1 cloud call per node initialised",
        init,
        lambda f: (
            "min to max over cells: "
            f"{min(r['cloud_calls_per_node'] for r in f)} to "
            f"{max(r['cloud_calls_per_node'] for r in f)}",
            all(r["cloud_calls_per_node"] == 1.0 for r in f),
        ),
    )
    check(
        rows,
        "≤ 2 API writes per node",
        init,
        lambda f: (
            f"max over cells: {max(r['api_writes_per_node'] for r in f)} (Events not counted)",
            all(r["api_writes_per_node"] <= 2.0 for r in f),
        ),
    )
    check(
        rows,
        "no extra reads (only the informer's LIST)",
        init,
        lambda f: (
            "GET + LIST of nodes per cell: "
            + ", ".join(sorted({str(_node_reads(r)) for r in f}, key=int))
            + " (watches re-opened after their timeout not counted)",
            all(_node_reads(r) <= 1 for r in f),
        ),
    )
    zero = [r for r in init if r["cloud_latency_ms"] == 0]
    check(
        rows,
        "0 ms latency: ≥ 80 % of the raw-write baseline (the same writes: 2 node patches "
        "and the Synced Event; in brackets, against the 2 patches alone)",
        zero,
        lambda f: (
            "; ".join(
                f"{r['nodes']} nodes, {r['concurrent_node_syncs']} w: "
                f"{100 * r.get('ratio_to_baseline_with_events', float('nan')):.0f} % "
                f"({100 * r['ratio_to_baseline']:.0f} %)"
                for r in f
            ),
            all(r.get("ratio_to_baseline_with_events", 0.0) >= 0.8 for r in f),
        ),
    )
    speedups: list[tuple[int, float]] = []
    for nodes in sorted({r["nodes"] for r in init}):
        one = of(init, "node_init", nodes=nodes, cloud_latency_ms=50.0, concurrent_node_syncs=1)
        many = of(init, "node_init", nodes=nodes, cloud_latency_ms=50.0, concurrent_node_syncs=16)
        if one and many:
            speedups.append((nodes, many[0]["nodes_per_second"] / one[0]["nodes_per_second"]))
    check(
        rows,
        "50 ms latency: 16 workers ≥ 10x 1 worker",
        [{"speedups": speedups}] if speedups else [],
        lambda _f: (
            "; ".join(f"{n} nodes: {s:.1f}x" for n, s in speedups),
            all(s >= 10 for _n, s in speedups),
        ),
    )
    idle = of(results, "idle")
    check(
        rows,
        "RSS with 5,000 nodes and 2,000 Services cached ≤ 150 MiB",
        [r for r in idle if r["nodes"] >= 5000 and r["services"] >= 2000],
        lambda f: (
            f"peak {max(r['peak_rss_mib_since_start'] for r in f)} MiB, steady "
            + " / ".join(f"{r['rss_mib_end']} MiB ({r['phase']})" for r in f),
            max(r["peak_rss_mib_since_start"] for r in f) <= 150,
        ),
    )
    check(
        rows,
        "idle CPU ≤ 1 % of a core",
        idle,
        lambda f: (
            " / ".join(
                f"{r['cpu_percent_of_core']} % ({r['phase']}; "
                f"{r.get('cpu_percent_of_core_without_simulated_cloud', '?')} % without the "
                "simulated cloud's thread)"
                for r in f
            ),
            all(r["cpu_percent_of_core"] <= 1.0 for r in f),
        ),
    )
    churn = [r for r in of(results, "node_churn") if r["wave"] == 1]
    check(
        rows,
        "node churn: UpdateLoadBalancer ≤ Services per node-set change (a node added is 2: "
        "registered, then given its providerID), no EnsureLoadBalancer",
        churn,
        lambda f: (
            "; ".join(
                f"{r['direction']} 1 node at {r['cloud_latency_ms']:g} ms: "
                f"{r['update_load_balancer_calls']} Update, "
                f"{r['ensure_load_balancer_calls']} Ensure"
                for r in f
            ),
            all(
                r["update_load_balancer_calls"]
                <= r["services"] * (2 if r["direction"] == "add" else 1)
                and r["ensure_load_balancer_calls"] == 0
                for r in f
            ),
        ),
    )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("results", type=Path, nargs="+", help="JSON-lines output of the suite")
    parser.add_argument("--markdown", type=Path, default=None)
    args = parser.parse_args()
    missing = [str(p) for p in args.results if not p.is_file()]
    if missing:
        parser.error(f"no such results file: {', '.join(missing)} (run benchmarks/run_all.sh)")
    table = markdown_table(
        "Targets", ("target", "measured", "met?", "cause of a gap"), targets(load(args.results))
    )
    print(table)
    append_markdown(args.markdown, table)


if __name__ == "__main__":
    main()
