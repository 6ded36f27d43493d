"""A node's own identity on the test control plane: the attacker of the trust model.

A kubelet talks to kube-apiserver as ``system:node:<name>`` in ``system:nodes``, by a
client certificate (kubeadm's kubelet.conf, or what TLS bootstrapping gives a fresh
node). Under the Node authorizer and the NodeRestriction admission plugin
(``ControlPlaneOptions(real_nodes=True)``) that identity may create and change its own
Node object only, and choose much of it: labels outside the restricted prefixes,
annotations, status, and ``spec.podCIDR``/``spec.providerID`` when it registers. A
test that registers Nodes through such an identity attacks kube-ccm as a compromised
or malicious node would, with no kubelet running.
"""

from __future__ import annotations

from pathlib import Path

from kube_ccm.runtime.client import KubeClient
from kube_ccm.testing.controlplane import ControlPlane

NODES_GROUP = "system:nodes"


def node_user(node: str) -> str:
    """The user name kube-apiserver's Node authorizer takes as Node ``node``'s kubelet."""
    return f"system:node:{node}"


def node_identity_kubeconfig(plane: ControlPlane, node: str, directory: Path) -> Path:
    """A kubeconfig for ``system:node:<node>`` in ``system:nodes`` (a client certificate
    from the plane's CA), written in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    return plane.write_client_kubeconfig(
        directory / f"node-{node}.kubeconfig", node_user(node), (NODES_GROUP,)
    )


def node_identity_client(plane: ControlPlane, node: str, directory: Path) -> KubeClient:
    """A client acting as Node ``node``'s kubelet (see :func:`node_identity_kubeconfig`);
    the plane must run the Node authorizer and NodeRestriction for it to mean anything."""
    if not plane.options.real_nodes:
        raise ValueError(
            "a node identity needs ControlPlaneOptions(real_nodes=True): without the Node "
            "authorizer and NodeRestriction it is refused everything, or (with RBAC "
            "granting system:nodes more) allowed more than a kubelet is"
        )
    return KubeClient.from_kubeconfig(node_identity_kubeconfig(plane, node, directory))


def registration(
    node: str, *, labels: dict[str, str] | None = None, pod_cidrs: tuple[str, ...] = ()
) -> dict[str, object]:
    """The Node object a kubelet creates when it registers (as much as the tests need):
    ``pod_cidrs`` is what kubelet ``--pod-cidr`` (or a hand-made client) writes."""
    spec: dict[str, object] = {}
    if pod_cidrs:
        spec = {"podCIDR": pod_cidrs[0], "podCIDRs": list(pod_cidrs)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node, "labels": dict(labels or {})},
        "spec": spec,
    }


__all__ = [
    "NODES_GROUP",
    "node_identity_client",
    "node_identity_kubeconfig",
    "node_user",
    "registration",
]
