"""Prometheus metrics with upstream's names, in a registry per daemon.

Each daemon (and each test) owns a :class:`Metrics` object wrapping its own
``CollectorRegistry``, so two daemons in one process (tests) never share
counters. Metric names come from :mod:`kube_ccm.api.wellknown`.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from typing import TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics_core import Metric

from kube_ccm.api import wellknown as wk


class ExactCounter:
    """A counter exposed under exactly its name, without the ``_total`` suffix that
    ``prometheus_client`` adds: for names fixed by Go components that predate the
    suffix convention (``cloudprovider_<provider>_api_request_errors``).

    ``prometheus_client`` appends ``_total`` to every family of type counter, so the
    family is declared ``untyped``: the series name is what queries and dashboards
    use, and ``rate()`` works on it as on any counter."""

    def __init__(self, name: str, documentation: str, labels: Sequence[str]) -> None:
        self.name, self.documentation, self.label_names = name, documentation, tuple(labels)
        self._values: dict[tuple[str, ...], float] = {}
        self._lock = threading.Lock()

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        key = tuple(labels[n] for n in self.label_names)
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount

    def describe(self) -> list[Metric]:
        return [Metric(self.name, self.documentation, "unknown")]

    def collect(self) -> Iterator[Metric]:
        metric = Metric(self.name, self.documentation, "unknown")
        with self._lock:
            for key, value in sorted(self._values.items()):
                metric.add_sample(self.name, dict(zip(self.label_names, key, strict=True)), value)
        yield metric


_Metric = Counter | Gauge | Histogram | ExactCounter
_M = TypeVar("_M", bound=_Metric)


class Metrics:
    """A registry plus get-or-create helpers (creating a metric twice returns the first)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        self._metrics: dict[str, _Metric] = {}
        self.others: Callable[[], Awaitable[list[list[Metric]]]] | None = None
        """Other processes' metric families to add to this one's when served
        (``--worker-processes``: the worker processes')."""

    def _get_or_create(self, name: str, kind: type[_M], create: Callable[[], _M]) -> _M:
        """The metric registered as ``name``, made with ``create`` the first time."""
        existing = self._metrics.get(name)
        if existing is None:
            existing = self._metrics[name] = create()
        assert isinstance(existing, kind)
        return existing

    def exact_counter(
        self, name: str, documentation: str, labels: Sequence[str] = ()
    ) -> ExactCounter:
        def create() -> ExactCounter:
            counter = ExactCounter(name, documentation, labels)
            self.registry.register(counter)
            return counter

        return self._get_or_create(name, ExactCounter, create)

    def counter(self, name: str, documentation: str, labels: Sequence[str] = ()) -> Counter:
        return self._get_or_create(
            name, Counter, lambda: Counter(name, documentation, labels, registry=self.registry)
        )

    def gauge(self, name: str, documentation: str, labels: Sequence[str] = ()) -> Gauge:
        return self._get_or_create(
            name, Gauge, lambda: Gauge(name, documentation, labels, registry=self.registry)
        )

    def histogram(
        self,
        name: str,
        documentation: str,
        buckets: Sequence[float],
        labels: Sequence[str] = (),
    ) -> Histogram:
        return self._get_or_create(
            name,
            Histogram,
            lambda: Histogram(
                name, documentation, labels, buckets=tuple(buckets), registry=self.registry
            ),
        )

    def exposition(self) -> bytes:
        """The Prometheus text format of everything registered."""
        return generate_latest(self.registry)

    async def served(self) -> bytes:
        """What ``/metrics`` serves: :meth:`exposition`, with :attr:`others` merged in
        by :func:`merge_families` when set."""
        if self.others is None:
            return self.exposition()
        families = merge_families(
            [list(self.registry.collect()), *await self.others()], highest=_STATES
        )
        return generate_latest(_Families(families))

    def sample(self, name: str, labels: dict[str, str] | None = None) -> float | None:
        """The current value of one sample (for tests and the sandbox summary)."""
        return self.registry.get_sample_value(name, labels or {})


def exponential_buckets(start: float, factor: float, count: int) -> tuple[float, ...]:
    return tuple(start * factor**i for i in range(count))


_STATES = frozenset({wk.METRIC_RUNNING_MANAGED_CONTROLLERS})
"""Gauges that say whether something runs: a controller sharded across two
workers runs (1), not twice (2)."""


class _Families:
    """What ``generate_latest`` needs of a registry: ``collect``."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


def merge_families(
    groups: Iterable[Iterable[Metric]], highest: frozenset[str] = frozenset()
) -> list[Metric]:
    """Several processes' metric families as one daemon's: samples with the same name
    and labels are added up (counters, gauges such as a queue's depth, histogram
    buckets, counts and sums), except ``*_created``, which keeps the earliest, and the
    families named in ``highest`` (a 0/1 state such as "this controller runs"), which
    keep the highest. A family keeps the type and help of its first appearance; the
    order is first seen."""
    merged: dict[str, Metric] = {}
    values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
    for group in groups:
        for family in group:
            if family.name not in merged:
                merged[family.name] = Metric(family.name, family.documentation, family.type)
                values[family.name] = {}
            samples = values[family.name]
            for sample in family.samples:
                key = (sample.name, tuple(sorted(sample.labels.items())))
                previous = samples.get(key)
                if previous is None:
                    samples[key] = sample.value
                elif sample.name.endswith("_created"):
                    samples[key] = min(previous, sample.value)
                elif family.name in highest:
                    samples[key] = max(previous, sample.value)
                else:
                    samples[key] = previous + sample.value
    for name, family in merged.items():
        for (sample_name, labels), value in values[name].items():
            family.add_sample(sample_name, dict(labels), value)
    return list(merged.values())
