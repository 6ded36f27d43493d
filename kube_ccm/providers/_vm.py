"""What the providers whose Nodes are virtual machines share: ``libvirt`` and ``proxmox``.

Both serve ``instances_v2`` only and make no cloud resources; both reach one or more
hosts (or clusters) named in the cloud-config and keep running when one does not
answer (its Nodes wait, none is deleted); both parse a providerID of their own
scheme, answer the serving-certificate approver's question about a Node name by a
lookup of a Node that stands for it, and tell a Node's trouble in a Warning Event.
Their cloud-configs check label values, credentials and unique names alike.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

from kube_ccm.api.objects import Node, NodeSpec, ObjectMeta
from kube_ccm.cloudprovider import (
    CloudProvider,
    CredentialsError,
    CredentialsSource,
    EventRecorder,
    InstancesV2,
    ProviderEventRecorder,
    object_reference,
)

T = TypeVar("T")

LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
"""A label value that is not empty: up to 63 letters, digits, ``-``, ``_``, ``.``,
beginning and ending with a letter or digit."""


class VmProvider(CloudProvider):
    """An instances-only provider over virtual machines: the contract's fixed answers,
    and the provider's own Warning Events on Nodes.

    A subclass sets :attr:`name`, calls ``super().__init__()`` and sets
    :attr:`_instances`; it starts :attr:`recorder` in ``initialize`` (keeping the one
    it started in :attr:`_events`) and calls :meth:`_close_events` in ``aclose``.
    """

    name: ClassVar[str]
    """The provider's name (``--cloud-provider``), also its providerID scheme."""
    _instances: InstancesV2

    def __init__(self) -> None:
        self.recorder: EventRecorder | None = None
        """Where this provider's Warning Events go (a :class:`ProviderEventRecorder`
        once initialized)."""
        self._events: ProviderEventRecorder | None = None
        """The recorder this provider started (``recorder`` may be replaced in tests)."""

    def provider_name(self) -> str:
        return self.name

    def has_cluster_id(self) -> bool:
        return True  # it makes no cloud resources that would need a cluster tag

    def instances_v2(self) -> InstancesV2 | None:
        return self._instances

    def event(self, node: Node, reason: str, message: str) -> None:
        """A Warning Event on ``node`` (never raises, never blocks), and the same words
        in the provider's log."""
        logging.getLogger(type(self).__module__).warning("%s", message)
        if self.recorder is not None:
            self.recorder.event(object_reference(node), "Warning", reason, message)

    async def _close_events(self) -> None:
        events, self._events = self._events, None
        if events is not None:
            await events.aclose()


def provider_id_path(provider_id: str, scheme: str) -> str:
    """What follows ``<scheme>://`` in ``provider_id``; ValueError when it does not
    start so."""
    prefix = f"{scheme}://"
    if not provider_id.startswith(prefix):
        raise ValueError(f"providerID {provider_id!r} does not start with {prefix!r}")
    return provider_id.removeprefix(prefix)


def stand_in(node_name: str, provider_id: str) -> Node:
    """The Node the approver asks about (``instance_belongs_to``): only its name and
    the providerID of the instance found for it, so a lookup of it reads nothing the
    node wrote itself."""
    return Node(metadata=ObjectMeta(name=node_name), spec=NodeSpec(provider_id=provider_id))


async def ask_each(
    calls: Mapping[str, Awaitable[T]], log: logging.Logger
) -> dict[str, T | BaseException]:
    """Each host's (or cluster's) first answer at start-up, asked at once, by what
    ``calls`` names it; one that does not answer is logged as an error and given as
    its exception, rather than stopping the daemon: it is asked again on every call,
    and its Nodes wait (none is deleted)."""
    results = await asyncio.gather(*calls.values(), return_exceptions=True)
    for what, result in zip(calls, results, strict=True):
        if isinstance(result, BaseException):
            log.error(
                "%s is unreachable at start-up: %s. Its Nodes are neither initialised nor "
                "deleted until it answers",
                what,
                result,
            )
    return dict(zip(calls, results, strict=True))


def credentials_source(value: Any, field: str, error: type[Exception]) -> CredentialsSource:
    """The cloud-config's ``{file: PATH}`` or ``{env: VARIABLE}`` at ``field``;
    ``error`` with what to write when it is neither."""
    try:
        return CredentialsSource.from_config(value, field=field)
    except (CredentialsError, ValueError) as exc:
        raise error(str(exc)) from exc


def repeated(names: Sequence[str]) -> str | None:
    """The first (in sorted order) of ``names`` that appears twice, else ``None``."""
    twice = sorted({n for n in names if names.count(n) > 1})
    return twice[0] if twice else None


__all__ = [
    "LABEL_VALUE",
    "VmProvider",
    "ask_each",
    "credentials_source",
    "provider_id_path",
    "repeated",
    "stand_in",
]
