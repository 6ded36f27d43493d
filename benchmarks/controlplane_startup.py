"""Control-plane start-up time and memory: median of N starts (default 5).

    .venv/bin/python benchmarks/controlplane_startup.py [--runs 5]

Prints one JSON object. Start-up is measured from ControlPlane.start() (binaries
already cached) until kube-apiserver's /readyz answers ok; RSS is read from
/proc right after readiness and again after 10 s idle.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

from kube_ccm.testing.binaries import ensure_binaries
from kube_ccm.testing.controlplane import ControlPlane


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--settle", type=float, default=10.0, help="seconds before the 2nd RSS read"
    )
    args = parser.parse_args()
    binaries = ensure_binaries()
    starts, ready_rss, settled_rss = [], [], []
    for _ in range(args.runs):
        plane = ControlPlane(binaries=binaries)
        began = time.monotonic()
        plane.start()
        starts.append(time.monotonic() - began)
        ready_rss.append(plane.rss_bytes())
        time.sleep(args.settle)
        settled_rss.append(plane.rss_bytes())
        plane.stop()

    def median_mib(samples: list[dict[str, int]], key: str | None = None) -> float:
        values = [sum(s.values()) if key is None else s[key] for s in samples]
        return round(statistics.median(values) / 2**20, 1)

    print(
        json.dumps(
            {
                "benchmark": "controlplane_startup",
                "runs": args.runs,
                "kubernetes": binaries.versions.kubernetes,
                "etcd": binaries.versions.etcd,
                "machine": f"{platform.machine()} {platform.node()}",
                "start_seconds_median": round(statistics.median(starts), 2),
                "start_seconds_all": [round(s, 2) for s in starts],
                "rss_mib_at_ready_median": median_mib(ready_rss),
                "rss_mib_settled_median": median_mib(settled_rss),
                "rss_mib_settled_apiserver": median_mib(settled_rss, "kube-apiserver"),
                "rss_mib_settled_etcd": median_mib(settled_rss, "etcd"),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
