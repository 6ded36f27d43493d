"""``kube-ccm run --dry-run``: every controller runs, nothing changes.

Two seams make it so, each outside the controllers:

* API writes leave with ``dryRun=All``: the apiserver admits and validates them,
  answers with the object as it would be, and persists nothing (its
  ``apiserver_request_total`` counts them under ``dry_run="All"``). Reviews of the
  secure port's callers and ServiceAccount token requests are not writes and go as
  they are.
* Cloud calls that change something (``EnsureLoadBalancer``,
  ``UpdateLoadBalancer``, ``EnsureLoadBalancerDeleted``, ``CreateRoute``,
  ``DeleteRoute``) are not made; reads are. ``EnsureLoadBalancer`` answers with the
  load balancer's current status (``GetLoadBalancer``), or no address. The
  cloud-call boundary holds that table
  (:data:`~kube_ccm.controllers.cloudcalls.DRY_RUN_ANSWERS`).

:class:`DryRun` records each would-be change: the first of each kind per object is
logged (``dry run: would ...``), all are counted, and :meth:`DryRun.summary` is
logged every few minutes and when the daemon stops.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from typing import Any

log = logging.getLogger(__name__)

READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
NOT_CHANGES = ("/apis/authentication.k8s.io/", "/apis/authorization.k8s.io/")
"""API groups whose writes are reviews, not changes (TokenReview,
SubjectAccessReview): a dry run still makes them, and so does a replica that does
not lead (the manager's write guard)."""


def is_change(method: str, path: str) -> bool:
    """Whether a request changes the cluster (and so is made a dry run)."""
    if method.upper() in READ_METHODS:
        return False
    return not (path.startswith(NOT_CHANGES) or path.endswith("/token"))


def _resource(path: str) -> str:
    """``nodes``, ``nodes/status``, ``services/status``, ``events`` ... of an API path."""
    parts = path.split("?", 1)[0].strip("/").split("/")
    parts = parts[2:] if parts[:1] == ["api"] else parts[3:]
    if len(parts) > 2 and parts[0] == "namespaces":
        parts = parts[2:]
    if len(parts) >= 3:
        return f"{parts[0]}/{parts[2]}"
    return parts[0] if parts else path


def _brief(body: Any, limit: int = 300) -> str:
    if body is None:
        return ""
    text = json.dumps(body, separators=(",", ":"), sort_keys=True)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class DryRun:
    """What a dry-run daemon would have changed."""

    def __init__(self) -> None:
        self.api: Counter[str] = Counter()
        """``VERB resource`` → would-be writes."""
        self.cloud: Counter[str] = Counter()
        """Cloud method → calls not made."""
        self._logged: set[tuple[str, str]] = set()

    def api_write(self, method: str, path: str, body: Any = None) -> None:
        key = f"{method.upper()} {_resource(path)}"
        self.api[key] += 1
        if (method.upper(), path) not in self._logged:
            self._logged.add((method.upper(), path))
            log.info("dry run: would %s %s %s", method.upper(), path, _brief(body))

    def cloud_call(self, request: str, what: str) -> None:
        self.cloud[request] += 1
        if (request, what) not in self._logged:
            self._logged.add((request, what))
            log.info("dry run: would call %s for %s (not made)", request, what)

    def summary(self) -> str:
        if not self.api and not self.cloud:
            return "dry run: nothing would have changed so far"
        parts = [f"{key} x{n}" for key, n in sorted(self.api.items())]
        parts += [f"{key} x{n}" for key, n in sorted(self.cloud.items())]
        return "dry run: would have made " + ", ".join(parts)


__all__ = ["DryRun", "is_change"]
