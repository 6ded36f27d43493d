"""Service annotations a provider reads, declared with their types.

A load-balancer provider lists the annotations it understands in
``LoadBalancer.service_annotations``. The daemon's ``service-annotations``
validating webhook then refuses a Service with a bad value when it is applied
(``kubectl apply`` prints which annotation and why), instead of a
``SyncLoadBalancerFailed`` event that someone finds later. Providers should still
check values themselves: the webhook is optional and can be bypassed.

Build declarations with the helpers here (:func:`boolean`, :func:`integer`,
:func:`one_of`, :func:`duration`, :func:`cidr_list`), or give any parse function
that raises ``ValueError`` with a message saying what is accepted.

Annotation values are written by whoever may edit the Service, a tenant included,
and may be up to 256 KiB. Read them with :func:`bounded` (a value over a limit is
an :class:`AnnotationTooLongError` that quotes none of it) and quote them in
messages with :func:`quoted` (a short, escaped prefix), so that no Event, status or
log line echoes a tenant's bytes at length.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

Check = Callable[[str], None]

MAX_VALUE_LENGTH = 4096
"""The longest annotation value the service controller passes to a provider for an
annotation the provider declares; longer is refused with an Event, unread."""
QUOTED_LENGTH = 48
"""How much of a value :func:`quoted` shows."""


class AnnotationTooLongError(ValueError):
    """An annotation value over its limit; the message names the key, not the value."""

    def __init__(self, key: str, length: int, limit: int) -> None:
        super().__init__(
            f"annotation {key} is {length} characters long, over the limit of {limit}; shorten it"
        )
        self.key = key
        self.length = length
        self.limit = limit


def quoted(value: str, limit: int = QUOTED_LENGTH) -> str:
    """``value`` for a message: ``repr`` of at most ``limit`` characters (control bytes
    escaped), with how much was left out."""
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}... ({len(value)} characters)"


def bounded(annotations: Mapping[str, str], key: str, limit: int) -> str:
    """The value of ``key`` ("" when absent), or :class:`AnnotationTooLongError` when it
    is longer than ``limit``; checked before any parsing."""
    value = annotations.get(key, "")
    if len(value) > limit:
        raise AnnotationTooLongError(key, len(value), limit)
    return value


@dataclass(frozen=True)
class ServiceAnnotation:
    """One annotation key, what it means, and the check its value must pass."""

    key: str
    description: str
    check: Check

    def problem(self, value: str) -> str | None:
        """None when ``value`` is acceptable, else a message naming the annotation."""
        try:
            self.check(value)
        except ValueError as exc:
            return f"metadata.annotations[{self.key}]: invalid value {quoted(value)}: {exc}"
        return None


def problems(declared: Iterable[ServiceAnnotation], annotations: Mapping[str, str]) -> list[str]:
    """What is wrong with ``annotations`` under ``declared``; undeclared keys pass. A
    value over :data:`MAX_VALUE_LENGTH` is a problem, unparsed."""
    found = []
    for annotation in declared:
        value = annotations.get(annotation.key)
        if value is None:
            continue
        if len(value) > MAX_VALUE_LENGTH:
            found.append(str(AnnotationTooLongError(annotation.key, len(value), MAX_VALUE_LENGTH)))
        elif (problem := annotation.problem(value)) is not None:
            found.append(problem)
    return found


# -- typed checks ----------------------------------------------------------------------

_TRUE, _FALSE = {"true", "True", "TRUE", "1"}, {"false", "False", "FALSE", "0"}


def boolean(key: str, description: str) -> ServiceAnnotation:
    def check(value: str) -> None:
        if value not in _TRUE | _FALSE:
            raise ValueError("use true or false")

    return ServiceAnnotation(key, description, check)


def integer(key: str, description: str, *, minimum: int, maximum: int) -> ServiceAnnotation:
    def check(value: str) -> None:
        try:
            number = int(value, 10)
        except ValueError:
            raise ValueError(f"use a whole number from {minimum} to {maximum}") from None
        if not minimum <= number <= maximum:
            raise ValueError(f"use a whole number from {minimum} to {maximum}")

    return ServiceAnnotation(key, description, check)


def one_of(key: str, description: str, values: Sequence[str]) -> ServiceAnnotation:
    def check(value: str) -> None:
        if value not in values:
            raise ValueError(f"use one of {', '.join(values)}")

    return ServiceAnnotation(key, description, check)


_DURATION = re.compile(r"^(\d+(\.\d+)?(ms|s|m|h))+$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(value: str) -> float:
    """Go's duration syntax (``90s``, ``1m30s``, ``250ms``) in seconds."""
    if not _DURATION.match(value):
        raise ValueError("use a duration such as 30s, 1m30s or 250ms")
    return sum(
        float(number) * _UNITS[unit]
        for number, _fraction, unit in re.findall(r"(\d+(\.\d+)?)(ms|s|m|h)", value)
    )


def duration(key: str, description: str, *, minimum: float, maximum: float) -> ServiceAnnotation:
    def check(value: str) -> None:
        seconds = parse_duration(value)
        if not minimum <= seconds <= maximum:
            raise ValueError(f"use a duration from {minimum:g}s to {maximum:g}s")

    return ServiceAnnotation(key, description, check)


def cidr_list(key: str, description: str) -> ServiceAnnotation:
    """Comma-separated CIDRs, as upstream's source-ranges annotation is parsed."""

    def check(value: str) -> None:
        if not value.strip():
            return  # empty: allow all, as upstream reads it
        for part in value.split(","):
            text = part.strip()
            if "/" not in text:
                raise ValueError(f"{text!r} is not a CIDR: write e.g. 10.0.0.0/8")
            try:
                ipaddress.ip_network(text, strict=False)
            except ValueError:
                raise ValueError(f"{text!r} is not a CIDR: write e.g. 10.0.0.0/8") from None

    return ServiceAnnotation(key, description, check)


__all__ = [
    "MAX_VALUE_LENGTH",
    "QUOTED_LENGTH",
    "AnnotationTooLongError",
    "ServiceAnnotation",
    "boolean",
    "bounded",
    "cidr_list",
    "duration",
    "integer",
    "one_of",
    "parse_duration",
    "problems",
    "quoted",
]
