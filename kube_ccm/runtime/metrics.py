"""Prometheus metrics with upstream's names, in a registry per daemon.

Each daemon (and each test) owns a :class:`Metrics` object wrapping its own
``CollectorRegistry``, so two daemons in one process (tests) never share
counters. Metric names come from :mod:`kube_ccm.api.wellknown`.
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest


class Metrics:
    """A registry plus get-or-create helpers (creating a metric twice returns the first)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        self._metrics: dict[str, Counter | Gauge | Histogram] = {}

    def counter(self, name: str, documentation: str, labels: Sequence[str] = ()) -> Counter:
        existing = self._metrics.get(name)
        if existing is None:
            existing = Counter(name, documentation, labels, registry=self.registry)
            self._metrics[name] = existing
        assert isinstance(existing, Counter)
        return existing

    def gauge(self, name: str, documentation: str, labels: Sequence[str] = ()) -> Gauge:
        existing = self._metrics.get(name)
        if existing is None:
            existing = Gauge(name, documentation, labels, registry=self.registry)
            self._metrics[name] = existing
        assert isinstance(existing, Gauge)
        return existing

    def histogram(
        self,
        name: str,
        documentation: str,
        buckets: Sequence[float],
        labels: Sequence[str] = (),
    ) -> Histogram:
        existing = self._metrics.get(name)
        if existing is None:
            existing = Histogram(
                name, documentation, labels, buckets=tuple(buckets), registry=self.registry
            )
            self._metrics[name] = existing
        assert isinstance(existing, Histogram)
        return existing

    def exposition(self) -> bytes:
        """The Prometheus text format of everything registered."""
        return generate_latest(self.registry)

    def sample(self, name: str, labels: dict[str, str] | None = None) -> float | None:
        """The current value of one sample (for tests and the sandbox summary)."""
        return self.registry.get_sample_value(name, labels or {})


def exponential_buckets(start: float, factor: float, count: int) -> tuple[float, ...]:
    return tuple(start * factor**i for i in range(count))
