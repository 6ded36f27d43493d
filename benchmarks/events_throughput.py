"""Event recorder throughput: distinct Events offered at a rate, written to a real apiserver.

Fires ``--events`` distinct events (one Service each, so no aggregation) through
one :class:`~kube_ccm.runtime.events.ApiEventRecorder` at each ``--rate``
(events/s offered; 0 offers them as fast as the loop runs, in batches of 50 per
tick), waits until the recorder has written or dropped every one, and reports:

* ``written_per_s``: Events written per second, first offer to last write;
* ``dropped``: events the recorder dropped (its queue of 1,000 was full, or a
  write failed three times);
* ``cpu_ms_per_event``: this process's CPU (recorder plus HTTP client) per
  written Event; the apiserver and etcd are other processes.

``--aggregate K`` fires each event K times instead (one Event with a count of K
per Service), to measure repeats.

Run: ``.venv/bin/python benchmarks/events_throughput.py [--events 5000] [--rate 500 2000 0]
[--in-flight 1 4 8]`` (``--in-flight`` is the recorder's ``max_in_flight``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import time
from typing import Any

from kube_ccm.runtime.client import KubeClient
from kube_ccm.runtime.events import MAX_IN_FLIGHT, ApiEventRecorder, ObjectReference
from kube_ccm.testing.binaries import ensure_binaries
from kube_ccm.testing.controlplane import ControlPlane


async def scenario(
    plane: ControlPlane, *, events: int, rate: float, aggregate: int, run: int, in_flight: int
) -> dict[str, Any]:
    client = KubeClient.from_kubeconfig(plane.kubeconfig)
    recorder = ApiEventRecorder(client, "benchmark", host="bench", max_in_flight=in_flight)
    sink = asyncio.create_task(recorder.run())
    refs = [
        ObjectReference(kind="Service", name=f"r{run}-svc-{i}", namespace="default", uid=f"u{i}")
        for i in range(events)
    ]
    offered = [ref for ref in refs for _ in range(aggregate)]
    cpu0 = time.process_time()
    t0 = time.monotonic()
    try:
        if rate > 0:
            tick = 0.01
            per_tick = max(1, round(rate * tick))
            for start in range(0, len(offered), per_tick):
                for ref in offered[start : start + per_tick]:
                    recorder.event(ref, "Normal", "EnsuringLoadBalancer", "Ensuring load balancer")
                next_at = t0 + (start + per_tick) / rate
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        else:
            for start in range(0, len(offered), 50):
                for ref in offered[start : start + 50]:
                    recorder.event(ref, "Normal", "EnsuringLoadBalancer", "Ensuring load balancer")
                await asyncio.sleep(0)
        async with asyncio.timeout(600):
            await recorder.flush()
        elapsed = time.monotonic() - t0
        cpu = time.process_time() - cpu0
    finally:
        sink.cancel()
        await asyncio.gather(sink, return_exceptions=True)
        await client.aclose()
    written = recorder.written
    return {
        "events": len(offered),
        "in_flight": in_flight,
        "offered_per_s": rate or "max",
        "written": written,
        "dropped": recorder.dropped,
        "seconds": round(elapsed, 2),
        "written_per_s": round(written / elapsed, 1),
        "cpu_ms_per_event": round(cpu * 1000 / max(written, 1), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--rate", type=float, nargs="+", default=[500.0, 2000.0, 0.0])
    parser.add_argument("--aggregate", type=int, default=1)
    parser.add_argument(
        "--in-flight", type=int, nargs="+", default=[MAX_IN_FLIGHT], help="writes at once"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    plane = ControlPlane(binaries=ensure_binaries()).start()
    try:
        cells = [(rate, n) for n in args.in_flight for rate in args.rate]
        for run, (rate, in_flight) in enumerate(cells):
            result = asyncio.run(
                scenario(
                    plane,
                    events=args.events,
                    rate=rate,
                    aggregate=args.aggregate,
                    run=run,
                    in_flight=in_flight,
                )
            )
            print(json.dumps(result), flush=True)
    finally:
        plane.stop()


if __name__ == "__main__":
    main()
