"""Checks a provider is known to fail, declared next to the suite."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import pytest


class KnownFailures:
    """Base of the check classes: ``known_failures`` marks checks expected to fail."""

    known_failures: ClassVar[Mapping[str, str]] = {}
    """Check (test) names expected to fail, each with the reason: a finding not fixed
    yet. They run as strict ``xfail``: a check that starts passing fails the run, so the
    fix is noticed and the entry removed. An unknown name is an error."""

    @pytest.fixture(autouse=True)
    def _conformance_known_failures(self, request: pytest.FixtureRequest) -> None:
        unknown = sorted(
            name
            for name in self.known_failures
            if not name.startswith("test_") or not callable(getattr(type(self), name, None))
        )
        if unknown:
            raise ValueError(
                f"known_failures of {type(self).__name__} names no check: {', '.join(unknown)}"
            )
        name = getattr(request.node, "originalname", request.node.name)
        reason = self.known_failures.get(name)
        if reason:
            request.applymarker(pytest.mark.xfail(strict=True, reason=reason))
