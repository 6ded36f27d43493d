"""Testing the digitalocean provider: the fake API (:mod:`.fakedo`) and helpers that
point the provider at it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import yaml
from kube_ccm.cloudprovider import Node, Service
from kube_ccm.testing import node_object, service_object

from kube_ccm_digitalocean.testing.fakedo import FakeDigitalOcean

__all__ = ["FakeDigitalOcean", "node", "service", "write_config"]


def write_config(fake: FakeDigitalOcean, directory: Path, token: str = "", **extra: Any) -> Path:
    """A cloud-config for ``fake`` in ``directory``, its token in a file beside it."""
    directory.mkdir(parents=True, exist_ok=True)
    token_file = directory / "do-token"
    token_file.write_text((token or fake.token) + "\n")
    document = {
        "region": "nyc3",
        "endpoint": fake.url,
        "credentials": {"file": str(token_file)},
        **extra,
    }
    path = directory / "cloud.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def node(name: str, provider_id: str = "") -> Node:
    """A typed Node, as the informers hand it to the provider."""
    return msgspec.convert(node_object(name, provider_id=provider_id), Node)


def service(name: str = "web", **fields: Any) -> Service:
    """A typed ``type: LoadBalancer`` Service (``service_object``'s arguments)."""
    return msgspec.convert(service_object(name, **fields), Service)
