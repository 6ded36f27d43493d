"""The configuration as the secure port's ``/configz`` shows it (upstream's
``configz`` of the component config): the :class:`DaemonConfig`, credentials in
``--master`` redacted, and for a composite provider which provider serves which
capability. The daemon hands :func:`configz` to the server
(:class:`kube_ccm.app.serving.server.SecureServer`), which knows no flag."""

from __future__ import annotations

import dataclasses
import urllib.parse
from typing import Any

from kube_ccm.app.options.config import DaemonConfig
from kube_ccm.cloudprovider import CloudProvider
from kube_ccm.controllers.cloudcalls import GuardedProvider
from kube_ccm.providers.composite import CompositeProvider


def redact_url(url: str) -> str:
    """``url`` with any ``user:password@`` replaced by ``REDACTED@`` (for display)."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit(parts._replace(netloc=f"REDACTED@{host}"))


def configz(config: DaemonConfig, cloud: CloudProvider | None = None) -> dict[str, Any]:
    """What ``/configz`` shows: the configuration, with credentials in ``--master``
    redacted (a kubeconfig or token file is shown by path, never by content), and for
    a composite provider which provider serves which capability."""
    values: dict[str, Any] = {
        k: sorted(v) if isinstance(v, frozenset) else v
        for k, v in dataclasses.asdict(config).items()
    }
    if config.master:
        values["master"] = redact_url(config.master)
    inner = cloud.inner if isinstance(cloud, GuardedProvider) else cloud
    if isinstance(inner, CompositeProvider):
        values["cloudProviders"] = inner.describe()
    return {
        "kind": "CloudControllerManagerConfiguration",
        "apiVersion": "cloudcontrollermanager.config.k8s.io/v1alpha1",
        "config": values,
    }
