"""A provider's own cloud on this machine, for ``kube-ccm sandbox --provider NAME``
without ``--cloud-config``: the hook through which a provider plugs into the sandbox,
so that the sandbox names no provider.

A provider offers one with a module named ``sandbox`` in the package that declares its
factory (for ``aws = "kube_ccm.providers.aws:factory"``, ``kube_ccm.providers.aws.sandbox``),
holding:

- ``async def local_cloud(names, workdir, out, stack) -> LocalCloud | None``: start the
  cloud with one running instance per node name, push its stopping on ``stack``, say
  what runs on ``out``, and return it; or say why not on stderr and return ``None``;
- optionally ``def missing() -> str | None``: what to install first (asked before the
  control plane starts; the sandbox stops with it);
- optionally ``def problems(nodes: int) -> list[str]``: what is wrong with asking for
  ``nodes`` instances, each with what to do.

The module is imported only by the sandbox, never by the provider: a local cloud's
dependencies (moto, fakepve, libvirtd) are development ones.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import ClassVar

import yaml

from kube_ccm.cloudprovider import ENTRY_POINT_GROUP
from kube_ccm.sandbox.kubelets import KUBELET_ANNOTATION

__all__ = ["ON_PREM_POOL", "LocalCloud", "hook", "stop_kubelet_hint", "with_ippool"]

ON_PREM_POOL = "198.18.0.0/22"
"""The ippool addresses of LoadBalancer Services in a local cloud that has no load
balancers of its own (a benchmarking range)."""


class LocalCloud:
    """What a provider's ``local_cloud`` hook started, and how the sandbox drives it.

    Subclasses set :attr:`provider` and :attr:`config_file` and implement
    :meth:`end_instances`; the rest has defaults.
    """

    provider: str
    """The ``--cloud-provider`` kube-ccm runs with (``composite`` when the local cloud
    takes load balancers from another provider)."""
    config_file: Path
    """kube-ccm's ``--cloud-config``, written by the hook."""
    taken_back: ClassVar[bool] = False
    """Whether the sandbox deletes its Services (their load balancers) and Nodes before
    kube-ccm stops: a cloud that counts what is left does; one that goes with the
    sandbox need not."""
    daemon_args: ClassVar[tuple[str, ...]] = ()
    """Flags kube-ccm needs in this cloud, besides the sandbox's own."""
    daemon_env: ClassVar[Mapping[str, str] | None] = None
    """Environment variables kube-ccm runs with (``None``: the sandbox's)."""
    ingress: ClassVar[str] = "IP"
    """What a LoadBalancer Service's ingress holds here: ``IP`` or ``hostname``."""

    async def end_instances(self, terminated: list[str], shut_down: list[str]) -> None:
        """Terminate the instances of ``terminated`` and shut down those of
        ``shut_down``, as their kubelets die (``--kill``, ``--shutdown``)."""
        raise NotImplementedError

    def calls(self) -> dict[str, dict[str, int]] | None:
        """kube-ccm's calls into this cloud by method (``count`` and ``errors``), where
        they can be counted; ``None`` elsewhere."""
        return None

    def hints(self, kubectl: str, node: str) -> list[str]:
        """Commands to try while the sandbox runs, one a line, about ``node``."""
        return [stop_kubelet_hint(kubectl, node)]

    async def released(self) -> bool:
        """Whether what kube-ccm made for the deleted Nodes is gone (the sandbox waits a
        route pass or two for it, when :attr:`taken_back`)."""
        return True

    async def left_behind(self) -> str:
        """What the cloud still holds after the clean-up, said in a few words."""
        return "their routes go on the next route pass"


def stop_kubelet_hint(kubectl: str, node: str) -> str:
    return f"  {kubectl} annotate node {node} {KUBELET_ANNOTATION}=stopped   # its kubelet dies"


def with_ippool(provider: str, config: object, path: Path) -> Path:
    """Write at ``path`` a composite cloud-config: instances from ``provider`` (its
    ``config``), load balancers from ippool (addresses from :data:`ON_PREM_POOL`)."""
    composite = {
        "providers": {
            provider: {"capabilities": ["instances"], "config": config},
            "ippool": {
                "capabilities": ["loadBalancer"],
                "config": {"configMap": "", "pools": {"cidr-global": ON_PREM_POOL}},
            },
        }
    }
    path.write_text(yaml.safe_dump(composite, sort_keys=False))
    return path


def hook(provider: str) -> ModuleType | None:
    """The ``sandbox`` module of the package declaring ``provider``'s factory (an
    installed entry point), or ``None`` when it has none."""
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP, name=provider):
        name = f"{entry_point.module}.sandbox"
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise  # the hook is there, and something it imports is not
    return None
