"""The ``k3s`` cloud-config (``--cloud-config``; optional, and so is its one key)::

    annotationPrefix: k3s.io   # where the Node's addresses are read from:
                               # <prefix>/internal-ip, <prefix>/external-ip,
                               # <prefix>/internal-dns, <prefix>/external-dns,
                               # <prefix>/hostname (annotations, then labels)

No file means the default, the distribution's own prefix: ``k3s.io`` for
``--cloud-provider=k3s``, ``rke2.io`` for ``--cloud-provider=rke2``. The name of
the provider, not this key, sets the providerID scheme (``k3s://``, ``rke2://``) and
the default instance type, as the program name does in k3s itself.
"""

from __future__ import annotations

import re

import msgspec

from kube_ccm.cloudprovider import InvalidCloudConfigError, load_cloud_config

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class K3sConfigError(InvalidCloudConfigError):
    """The cloud-config is invalid; one line naming the key and what to write."""


class K3sConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True, rename="camel"):
    annotation_prefix: str = ""
    """The prefix of the address annotations and labels; empty: ``<provider name>.io``."""


def load_config(data: bytes | str | None, *, provider: str = "k3s") -> K3sConfig:
    """The cloud-config in ``data`` (``None``: no file), checked."""
    config = load_cloud_config(data, K3sConfig, provider=provider)
    prefix = config.annotation_prefix
    if prefix and (len(prefix) > 253 or not _SUBDOMAIN.match(prefix)):
        raise K3sConfigError(
            f"`annotationPrefix` is {prefix[:64]!r}; write the prefix of the address "
            "annotations, a DNS subdomain without the slash: k3s.io (k3s) or rke2.io (rke2)"
        )
    return config


__all__ = ["K3sConfig", "K3sConfigError", "load_config"]
