"""Which Node holds a pod CIDR: node IPAM's accounting, read by the route controller.

A route is a grant: it must rest on a pod CIDR kube-ccm (or a cluster admin) gave the
Node, not on whatever the Node wrote in ``spec.podCIDRs`` when it registered. Where this
daemon runs the range allocator, that allocator knows which Node each node CIDR counts
for (:mod:`kube_ccm.controllers.nodeipam`); the route controller asks it through
:class:`PodCIDRHolders` and nothing else, so neither module reaches into the other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from kube_ccm.api.objects import Node


@dataclass(frozen=True, slots=True)
class Standing:
    """Where one of a Node's pod CIDRs stands in node IPAM's accounting."""

    held: bool
    """It counts as this Node's: the allocator gave it, or took it in as the Node's."""
    refusal: str = ""
    """Why it does not (outside the range, another size, another Node's); empty while
    the allocator has not judged it yet (it has not seen the Node, or not started)."""

    @property
    def pending(self) -> bool:
        return not self.held and not self.refusal


HELD = Standing(held=True)
PENDING = Standing(held=False)


class PodCIDRHolders(Protocol):
    """A read-only view of the allocator's holders."""

    def standing(self, node: Node) -> Mapping[str, Standing]:
        """The standing of each of ``node``'s ``spec.podCIDRs`` (keyed by the text the
        Node shows). Must not block or change anything."""
        ...


class LateHolders:
    """The holders of an allocator that is built after its reader: every CIDR is pending
    until :meth:`bind` is called (the manager builds the route controller first)."""

    def __init__(self) -> None:
        self._target: PodCIDRHolders | None = None

    def bind(self, target: PodCIDRHolders) -> None:
        self._target = target

    def standing(self, node: Node) -> Mapping[str, Standing]:
        if self._target is None:
            return dict.fromkeys(node.spec.pod_cidrs, PENDING)
        return self._target.standing(node)


__all__ = ["HELD", "PENDING", "LateHolders", "PodCIDRHolders", "Standing"]
