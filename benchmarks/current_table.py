"""The side-by-side and scale rows of docs/benchmarks.md's "Current figures" table.

    .venv/bin/python benchmarks/current_table.py benchmarks/results/*.jsonl

Reads the JSON lines ``side_by_side.py`` and ``scale.py`` print (other lines and
other benchmarks are skipped) and prints, for every cell, the figures of its latest
run in the table's format: kube-ccm, the Go CCM, Py/Go and the run (date and commit,
linked to the section that holds the latest run). A run is the header line a script
prints and the records after it; the latest is the one with the latest date, then
the later commit in this checkout's history, then the later file and line. A run on
a busy machine (any 1-minute load average it recorded above ``BUSY``) is marked ᴸ.
Footnote marks and the kube-ccm-only rows are kept by hand; see docs/benchmarks.md,
"Updating this table".
"""

from __future__ import annotations

import argparse
import json
import subprocess
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Record = dict[str, Any]

BUSY = 4.0
HIGH_QPS = 1000.0
# The reference links the table defines, one per section holding a latest run.
SIDE_BY_SIDE_LINK = "sbs"
SCALE_LINKS = ((15_000, "scale-15k"), (100_000, "scale-100k"))


@dataclass(frozen=True)
class Run:
    date: str
    commit: str
    load: float | None  # the header's load average at the run's start
    order: tuple[str, int, int, int]  # (date, commit's place in history, file, line)


def cite(run: Run, link: str, *records: Record) -> str:
    """The run column: date and commit, linked; ᴸ when the machine was busy."""
    loads = [run.load] if run.load is not None else []
    for record in records:
        for field in ("load_average_1m", "load_average_1m_restart", "load_average_1m_idle"):
            value = record.get(field)
            if isinstance(value, dict):  # a summary: {"py": …, "go": …}
                loads += [v for k, v in value.items() if k in ("py", "go") and v is not None]
            elif isinstance(value, (int, float)):
                loads.append(value)
    busy = " ᴸ" if loads and max(loads) > BUSY else ""
    return f"[{run.date}, {run.commit}][{link}]{busy}"


def commit_order(root: Path) -> dict[str, int]:
    """Each commit of HEAD's history (abbreviated to 7) by its place, oldest first."""
    try:
        out = subprocess.run(
            ["git", "rev-list", "--reverse", "--topo-order", "HEAD"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return {}
    return {sha[:7]: i for i, sha in enumerate(out.split())}


def records(paths: Iterable[Path], order: dict[str, int]) -> Iterator[tuple[Run, Record]]:
    """Every record with the run it belongs to (the last header line before it)."""
    for file_index, path in enumerate(sorted(paths)):
        run: Run | None = None
        for line_index, line in enumerate(path.read_text().splitlines()):
            if not line.startswith("{"):
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if record.get("benchmark") not in ("side_by_side", "scale"):
                continue
            header = record.get("header")
            if isinstance(header, dict) and "impl" not in record and "summary" not in record:
                commit = str(header.get("commit", "?"))[:7]
                date = str(header.get("date", "?"))
                load = header.get("load_average_1m_at_start")
                run = Run(
                    date,
                    commit,
                    float(load) if load is not None else None,
                    (date, order.get(commit, -1), file_index, line_index),
                )
            elif run is not None:
                yield run, record


Key = tuple[Any, ...]
Cells = dict[Key, tuple[Run, Record]]


def cell_key(r: Record) -> Key | None:
    if r["benchmark"] == "side_by_side" and "summary" in r:
        # Runs before the default-QPS cells existed did not record the QPS: all high.
        qps = r.get("kube_api_qps", HIGH_QPS)
        return (
            "sbs",
            r["summary"],
            r.get("size"),
            qps,
            r.get("cloud_latency_ms"),
            r.get("workers"),
        )
    if r["benchmark"] == "scale" and r.get("impl") in ("py", "go"):
        return ("scale", r["nodes"], r["impl"])
    return None


def latest(found: Iterable[tuple[Run, Record]]) -> Cells:
    cells: Cells = {}
    for run, record in found:
        key = cell_key(record)
        if key is not None and (key not in cells or cells[key][0].order <= run.order):
            cells[key] = (run, record)
    return cells


# -- formatting ----------------------------------------------------------------------


def num(value: Any, unit: str = "", digits: int = 2) -> str:
    if not isinstance(value, (int, float)):
        return "—"
    text = f"{value:,.{digits}f}" if isinstance(value, float) else f"{value:,}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return f"{text} {unit}".rstrip()


def ratio(py: Any, go: Any) -> str:
    if not isinstance(py, (int, float)) or not isinstance(go, (int, float)) or not go:
        return "—"
    return f"{py / go:.2f}"


def row(figure: str, py: str, go: str, py_over_go: str, run: str) -> str:
    return f"| {figure} | {py} | {go} | {py_over_go} | {run} |"


def group(title: str) -> str:
    return f"| {title} | | | | |"


def pair(summary: Record, field: str) -> tuple[Any, Any]:
    values = summary.get(field) or {}
    return values.get("py"), values.get("go")


def workers(n: Any) -> str:
    return f"{n} worker" if n == 1 else f"{n} workers"


def side_by_side_rows(cells: Cells) -> list[str]:
    lines: list[str] = []
    for what, title, noun, rate, rate_label, per in (
        (
            "node_init",
            "Node initialisation",
            "Nodes",
            "nodes_per_second",
            "nodes/s",
            "daemon_cpu_ms_per_node",
        ),
        (
            "lb",
            "LB provisioning",
            "LoadBalancer Services",
            "services_per_second",
            "Services/s",
            "daemon_cpu_ms_per_service",
        ),
    ):
        keys = sorted(
            (k for k in cells if k[:2] == ("sbs", what)), key=lambda k: (-k[3], k[4], k[5])
        )
        for size in sorted({k[2] for k in keys}):
            lines.append(
                group(
                    f"**{title}**, {num(size)} {noun}, "
                    f"QPS {HIGH_QPS:g}/{2 * HIGH_QPS:g} and median of 3 unless said"
                )
            )
            first = True
            for key in (k for k in keys if k[2] == size):
                run, summary = cells[key]
                _, _, _, qps, latency, n = key
                said = (
                    [f"QPS {qps:g}/{summary.get('kube_api_burst', '?')}"] if qps != HIGH_QPS else []
                )
                if summary.get("runs", 3) != 3:
                    said.append(
                        f"{summary.get('runs')} run" + ("s" if summary.get("runs") != 1 else "")
                    )
                label = f"{num(latency)} ms cloud, {workers(n)}" + "".join(f", {s}" for s in said)
                py, go = pair(summary, rate)
                figure = f"{label}: {rate_label}" + (" (first→last)" if first else "")
                lines.append(
                    row(
                        figure,
                        num(py, digits=1),
                        num(go, digits=1),
                        ratio(py, go),
                        cite(run, SIDE_BY_SIDE_LINK, summary),
                    )
                )
                py, go = pair(summary, per)
                figure = f"  daemon CPU per {'Node' if what == 'node_init' else 'Service'}" + (
                    " (start-up included)" if first else ""
                )
                lines.append(
                    row(
                        figure,
                        num(py, "ms"),
                        num(go, "ms"),
                        ratio(py, go),
                        cite(run, SIDE_BY_SIDE_LINK, summary),
                    )
                )
                first = False
    for key in sorted(k for k in cells if k[:2] == ("sbs", "cluster")):
        run, s = cells[key]
        at = cite(run, SIDE_BY_SIDE_LINK, s)
        runs = s.get("runs", 1)
        lines.append(
            group(
                f"**A large cluster**, {num(key[2])} Nodes + {num(s.get('services'))} LB Services, "
                f"{workers(key[5])}, {runs} run{'s' if runs != 1 else ''}"
            )
        )
        (ps, gs), (pc, gc) = pair(s, "startup_complete_seconds"), pair(s, "startup_cpu_seconds")
        lines.append(
            row(
                "start-up to first complete sync (daemon CPU until then)",
                f"{num(ps, 's')} ({num(pc, 's')})",
                f"{num(gs, 's')} ({num(gc, 's')})",
                f"{ratio(ps, gs)} ({ratio(pc, gc)})",
                at,
            )
        )
        (pr, gr), (pp, gp) = pair(s, "restart_rss_mib"), pair(s, "restart_peak_rss_mib")
        lines.append(
            row(
                "RSS restarted over the synced cluster: steady / peak",
                f"{num(pr, digits=1)} / {num(pp, 'MiB', 1)}",
                f"{num(gr, digits=1)} / {num(gp, 'MiB', 1)}",
                f"{ratio(pr, gr)} / {ratio(pp, gp)}",
                at,
            )
        )
        py, go = pair(s, "populate_rss_mib")
        lines.append(
            row(
                "RSS after initialising every Node and Service",
                num(py, "MiB", 1),
                num(go, "MiB", 1),
                ratio(py, go),
                at,
            )
        )
        py, go = pair(s, "idle_cpu_pct_quiet")
        lines.append(
            row(
                "idle CPU between address refreshes (% of a core)",
                num(py, "%", 3),
                num(go, "%", 3),
                ratio(py, go),
                at,
            )
        )
        py, go = pair(s, "idle_cpu_pct_period")
        lines.append(
            row(
                "idle CPU over one status period, its refresh included",
                num(py, "%", 3),
                num(go, "%", 3),
                ratio(py, go),
                at,
            )
        )
    return lines


# (figure, field, second field or "", unit): "a / b unit", or "a unit (b unit)" for CPU.
SCALE_FIGURES: tuple[tuple[str, str, str, str], ...] = (
    (
        "start-up to first complete sync (daemon CPU)",
        "startup_complete_seconds",
        "startup_cpu_seconds",
        "s",
    ),
    ("RSS steady / peak", "rss_mib", "peak_rss_mib", "MiB"),
    ("address refresh: duration / CPU", "refresh_seconds", "refresh_cpu_seconds", "s"),
    (
        "idle CPU between refreshes / over one period",
        "idle_cpu_pct_quiet",
        "idle_cpu_pct_period",
        "%",
    ),
    ("lifecycle monitor pass", "lifecycle_pass_seconds", "", "s"),
    (
        "burst of 1,000 joining: every LB current after / daemon CPU",
        "join_current_seconds",
        "join_cpu_seconds",
        "s",
    ),
    (
        "burst of 1,000 leaving: every LB current after / daemon CPU",
        "leave_current_seconds",
        "leave_cpu_seconds",
        "s",
    ),
)


def backlog_text(backlog: Any) -> str:
    """``{"node": 2538}`` as "2,538 `node` keys"; "" for none."""
    if not isinstance(backlog, dict):
        return ""
    parts = [f"{num(n)} `{queue}` keys" for queue, n in backlog.items() if n]
    return ", ".join(parts)


def startup_cell(r: Record, unit: str) -> str | None:
    """Every restart's outcome when any of them missed its first complete sync (the
    median alone would read as a start-up that happened); None when all reached it."""
    runs = r.get("startup_runs")
    if not isinstance(runs, list) or all(x.get("startup_outcome") == "complete" for x in runs):
        return None
    won = [x for x in runs if x.get("startup_outcome") == "complete"]
    lost = [x for x in runs if x.get("startup_outcome") != "complete"]
    text = f"{len(won)} of {len(runs)} reached it"
    if won:
        text += ": " + ", ".join(num(x.get("startup_complete_seconds"), unit, 3) for x in won)
    for x in lost:
        left = backlog_text(x.get("startup_backlog_at_cap"))
        text += f"; {x.get('startup_outcome')}" + (f" ({left} left)" if left else "")
    return text


def over_backlog(r: Record, key: str) -> bool:
    """Whether the figure ``key`` was taken while work was still queued (idle that is not
    idle, a refresh beside it, a burst that never went quiet): shown, never divided into
    a ratio. ``scale.py``'s own table asks the same."""
    if key.startswith(("idle_cpu", "refresh_")):
        return any((r.get("idle_backlog_at_start") or {}).values())
    step = key.split("_", 1)[0]
    return step in ("join", "leave") and isinstance(r.get(f"{step}_quiet_seconds"), str)


def lost_note(r: Record, a: str) -> str:
    """What was still queued while a figure was taken: idle over a backlog is not idle,
    and a burst that never went quiet was measured over the backlog too."""
    if a == "idle_cpu_pct_quiet":
        start = backlog_text(r.get("idle_backlog_at_start"))
        end = backlog_text(r.get("idle_backlog_at_end")) or "none"
        return f" (not idle: {start} queued at its start, {end} at its end)" if start else ""
    if a == "refresh_seconds" and backlog_text(r.get("idle_backlog_at_start")):
        return " (beside that backlog)"
    for step in ("join", "leave"):
        if a == f"{step}_current_seconds" and isinstance(r.get(f"{step}_quiet_seconds"), str):
            left = backlog_text(r.get(f"{step}_backlog_left"))
            return f" ({r[f'{step}_quiet_seconds'].replace('not reached', 'not quiet')}" + (
                f", {left} left)" if left else ")"
            )
    return ""


def scale_cell(r: Record, a: str, b: str, unit: str) -> str:
    if a == "startup_complete_seconds" and r:
        outcomes = startup_cell(r, unit)
        if outcomes is not None:
            return outcomes
    if not r or not isinstance(r.get(a), (int, float)):
        return "—"
    return scale_figure(r, a, b, unit) + lost_note(r, a)


def scale_figure(r: Record, a: str, b: str, unit: str) -> str:
    if not b:
        return num(r[a], unit, 3)
    if "CPU)" in a or a == "startup_complete_seconds":
        return f"{num(r[a], unit, 3)} ({num(r.get(b), unit, 3)})"
    return f"{num(r[a], digits=3)} / {num(r.get(b), unit, 3)}"


def scale_ratio(py: Record, go: Record, a: str, b: str) -> str:
    if any(over_backlog(r, a) for r in (py, go)) or (
        a == "startup_complete_seconds" and any(startup_cell(r, "s") for r in (py, go) if r)
    ):
        return "—"  # no ratio against a figure taken over a backlog or a lost race
    first = ratio(py.get(a), go.get(a))
    if not b:
        return first
    second = ratio(py.get(b), go.get(b))
    if first == second == "—":
        return "—"
    return f"{first} ({second})" if a == "startup_complete_seconds" else f"{first} / {second}"


def scale_rows(cells: Cells) -> list[str]:
    lines: list[str] = []
    sizes = sorted({k[1] for k in cells if k[0] == "scale"})
    if sizes:
        lines.append(
            group("**Scale curve**, lean Nodes, LB Services at 10 % of the Nodes, 16 workers")
        )
    for nodes in sizes:
        link = next((name for bound, name in SCALE_LINKS if nodes <= bound), SCALE_LINKS[-1][1])
        py_run, py = cells.get(("scale", nodes, "py"), (None, {}))
        go_run, go = cells.get(("scale", nodes, "go"), (None, {}))
        if py_run is not None and go_run is not None and go_run.order[:3] != py_run.order[:3]:
            go = {}  # the Go CCM's latest run at this size is another run: no ratio across runs
        run = py_run or go_run
        assert run is not None
        at = cite(run, link, py, go)
        for index, (figure, a, b, unit) in enumerate(SCALE_FIGURES):
            go_cell = scale_cell(go, a, b, unit)
            if index == 0 and go.get("error") and go_cell == "—":
                go_cell = "not reached"
            label = f"{num(nodes)} Nodes: {figure}" if index == 0 else f"  {figure}"
            lines.append(
                row(label, scale_cell(py, a, b, unit), go_cell, scale_ratio(py, go, a, b), at)
            )
    return lines


def table_rows(paths: Iterable[Path], root: Path) -> list[str]:
    cells = latest(records(paths, commit_order(root)))
    return side_by_side_rows(cells) + scale_rows(cells)


def main(argv: list[str] | None = None, out: Callable[[str], None] = print) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "results", type=Path, nargs="+", help="JSON lines of side_by_side.py / scale.py"
    )
    args = parser.parse_args(argv)
    missing = [str(p) for p in args.results if not p.is_file()]
    if missing:
        parser.error(f"no such results file: {', '.join(missing)}")
    out("| figure | kube-ccm | Go CCM | Py/Go | run |")
    out("|:---|---:|---:|---:|:---|")
    for line in table_rows(args.results, Path(__file__).resolve().parent):
        out(line)


if __name__ == "__main__":
    main()
