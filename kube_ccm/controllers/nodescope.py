"""Which Nodes this CCM manages (kube-ccm's; upstream manages every Node).

Two CCMs in one cluster (a mixed fleet: cloud and on-prem nodes, or two clouds)
must never fight over the same Nodes. A Node is managed when

* its ``spec.providerID`` is empty, has this provider's scheme
  (``<provider name>://...``) or has no ``scheme://`` at all (a kubelet started
  with ``--provider-id=node-17``: nobody else's either, and upstream manages it);
  a Node whose providerID names another provider is never initialised, tainted,
  deleted, routed or put behind a load balancer here;
* and its labels match ``--node-selector`` (empty: every Node).

A Node without a providerID (or with one without a scheme) is in scope only through
the selector, so in a mixed fleet give each CCM a selector that the other's kubelets
never carry.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kube_ccm.api.objects import Node
from kube_ccm.api.selectors import LabelSelector, parse_selector


def provider_id_scheme(provider_id: str) -> str | None:
    """``aws`` for ``aws:///us-east-1a/i-0abc``; None when it has no ``scheme://``."""
    scheme, separator, _rest = provider_id.partition("://")
    return scheme if separator and scheme else None


@dataclass(frozen=True)
class NodeScope:
    provider: str = ""
    """The provider's name: the providerID scheme of its Nodes. Empty: any scheme."""
    selector: LabelSelector = field(default_factory=lambda: parse_selector(""))

    def why_not(self, node: Node) -> str | None:
        """Why this CCM leaves ``node`` alone, or None when it manages it."""
        provider_id = node.spec.provider_id
        if provider_id and self.provider:
            scheme = provider_id_scheme(provider_id)
            if scheme is not None and scheme != self.provider:
                return (
                    f"its providerID {provider_id!r} is not of this provider "
                    f"({self.provider}://...)"
                )
        if not self.selector.matches(node.metadata.labels):
            return f"its labels do not match --node-selector={self.selector}"
        return None

    def manages(self, node: Node) -> bool:
        return self.why_not(node) is None


EVERY_NODE = NodeScope()
"""No restriction (upstream's behaviour; also the default in unit tests)."""

__all__ = ["EVERY_NODE", "NodeScope", "provider_id_scheme"]
