"""The frames that take the most samples in a py-spy flame graph (SVG), as text.

    .venv/bin/python benchmarks/flamegraph_top.py docs/img/idle-profile.svg [--top 25]
        [--match kube_ccm]

py-spy's SVG names every box ``function (file:line) (N samples, P%)``; this sums
the samples per ``function (file)`` over every stack it appears in (inclusive
time, counted once per stack position) and prints the largest, so a profile can
be quoted in a report without a browser.
"""

from __future__ import annotations

import argparse
import html
import re
from collections import Counter
from pathlib import Path

TITLE = re.compile(r"<title>([^<]*?) \(([^()]*?):\d+\) \(([\d,]+) samples?, [\d.]+%\)</title>")
TOTAL = re.compile(r"<title>all \(([\d,]+) samples?, 100(?:\.0+)?%\)</title>")


def summarise(svg: str) -> tuple[int, Counter[str]]:
    total_match = TOTAL.search(svg)
    per_frame: Counter[str] = Counter()
    for function, filename, samples in TITLE.findall(svg):
        per_frame[html.unescape(f"{function} ({filename})")] += int(samples.replace(",", ""))
    total = int(total_match.group(1).replace(",", "")) if total_match else 0
    return total, per_frame


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("svg", type=Path)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--match", default="", help="only frames whose text contains this")
    args = parser.parse_args()
    if not args.svg.is_file():
        parser.error(f"{args.svg} does not exist: give a flame graph written by py-spy record")
    total, frames = summarise(args.svg.read_text(errors="replace"))
    if not total:
        parser.error(f"{args.svg} has no py-spy samples (is it a py-spy flame graph?)")
    print(f"{total} samples in {args.svg}")
    shown = [(f, n) for f, n in frames.most_common() if args.match in f][: args.top]
    for frame, samples in shown:
        print(f"{100 * samples / total:6.1f} %  {samples:7d}  {frame}")


if __name__ == "__main__":
    main()
