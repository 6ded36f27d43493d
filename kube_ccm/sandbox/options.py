"""The sandbox's options (``kube-ccm sandbox``'s flags, parsed in :mod:`kube_ccm.app.cli`)
and what is wrong with a combination of them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kube_ccm.sandbox.kubelets import KUBELET_ANNOTATION, KubeletTimings, pod_cidrs
from kube_ccm.sandbox.local import hook

__all__ = [
    "CLEANUP_TIMEOUT",
    "CLUSTER_CIDR",
    "CONTROL_PLANE_NODES",
    "ROUTE_PERIOD",
    "SandboxOptions",
]

CONTROL_PLANE_NODES = 2
"""``--real-nodes``: at most this many nodes are the control plane, each with a kube-ccm
replica; the others are workers (``--kill`` and ``--shutdown`` pick from those)."""
CLUSTER_CIDR = "10.64.0.0/10"
"""The sandbox's ``--cluster-cidr``: a /24 pod CIDR each for up to 16,384 nodes."""
ROUTE_PERIOD = 5.0
"""The sandbox's ``--route-reconciliation-period`` (seconds)."""
CLEANUP_TIMEOUT = 60.0
"""How long the sandbox waits for another provider to delete its load balancers."""
ON_PREM = "libvirt"
"""``--on-prem``: the provider whose local cloud it runs (libvirt instances, ippool load
balancers)."""


@dataclass(frozen=True)
class SandboxOptions:
    nodes: int = 20
    services: int = 5
    duration: float | None = None
    latency: float = 0.0
    failure_rate: float = 0.0
    concurrent_node_syncs: int = 4
    provider: str = "simulated"
    cloud_config: Path | None = None
    data_dir: Path | None = None
    kill: int = 0
    shutdown: int = 0
    kubelets: KubeletTimings = field(default_factory=KubeletTimings)
    on_prem: bool = False
    stall_timeout: float = 60.0
    provision_command: str = ""
    real_nodes: int = 0
    """Real kubelets and kube-ccm from its image and chart (0: simulated kubelets)."""

    @property
    def local_cloud(self) -> str | None:
        """The provider whose own cloud the sandbox runs on this machine: ``--on-prem``'s,
        or ``--provider``'s without a cloud-config when it has one
        (:mod:`kube_ccm.sandbox.local`); ``None`` for the simulated cloud and another's."""
        if self.on_prem:
            return ON_PREM
        if self.provider == "simulated" or self.cloud_config is not None:
            return None
        return self.provider if hook(self.provider) is not None else None

    @property
    def real_servicelb(self) -> bool:
        """``--real-nodes N --provider servicelb``: the simulated cloud's instances and
        ServiceLB load balancers (host-network forwarders, one kube-proxy)."""
        return self.provider == "servicelb" and self.real_nodes > 0

    def problems(self) -> list[str]:
        """What is wrong with these options, each with what to do; empty when fine."""
        found = []
        if self.nodes < 1 and not self.real_nodes:
            found.append("--nodes must be at least 1")
        if self.services < 0 or self.kill < 0 or self.shutdown < 0:
            found.append("--services, --kill and --shutdown cannot be negative")
        if self.kill + self.shutdown > self.nodes and not self.real_nodes:
            found.append(
                f"--kill {self.kill} plus --shutdown {self.shutdown} is more than the "
                f"{self.nodes} nodes: kill or shut down fewer, or add nodes"
            )
        if not 0.0 <= self.failure_rate <= 1.0:
            found.append("--failure-rate must be between 0 and 1")
        if self.on_prem and (self.provider != "simulated" or self.cloud_config is not None):
            found.append(
                "--on-prem chooses its providers (libvirt instances, ippool load balancers) "
                "and writes their cloud-config: drop --provider and --cloud-config"
            )
        if (self.provider != "simulated" or self.on_prem) and (self.latency or self.failure_rate):
            found.append(
                "--latency and --failure-rate shape the simulated cloud; with "
                f"{'--on-prem' if self.on_prem else '--provider=' + self.provider} they "
                "would be ignored: drop them"
            )
        if self.provider == "servicelb" and not self.real_nodes and self.cloud_config is None:
            found.append(
                "--provider servicelb runs its load balancers as pods, which need real "
                "kubelets: add --real-nodes N"
            )
        local = self.local_cloud
        ends_instances = self.provider == "simulated" or local is not None or self.real_servicelb
        if not ends_instances and (self.kill or self.shutdown):
            found.append(
                "--kill and --shutdown end instances in the simulated cloud; with "
                f"--provider={self.provider}, stop kubelets with the "
                f"{KUBELET_ANNOTATION}=stopped annotation instead"
            )
        if self.stall_timeout <= 0:
            found.append("--stall-timeout must be more than 0 s")
        if self.provision_command and ends_instances:
            found.append(
                "--provision-command provisions instances in another provider's cloud; the "
                "simulated cloud, --on-prem and a provider's own local cloud (--provider "
                f"{self.provider} without --cloud-config) create theirs"
            )
        if local is not None and (module := hook(local)) is not None:
            found += getattr(module, "problems", lambda _nodes: [])(self.nodes)
        if self.cloud_config is not None and self.provider == "simulated":
            found.append(
                "--cloud-config is for other providers; the simulated cloud's is generated "
                "(use --latency and --failure-rate)"
            )
        if self.real_nodes:
            found += self._real_node_problems()
        try:
            pod_cidrs(CLUSTER_CIDR, self.nodes)
        except ValueError as exc:
            found.append(f"--nodes: {exc}")
        return found

    def _real_node_problems(self) -> list[str]:
        found = []
        if self.real_nodes < 0:
            found.append("--real-nodes must be at least 1 (or 0: simulated kubelets)")
        if (
            self.on_prem
            or self.provider not in ("simulated", "servicelb")
            or self.cloud_config is not None
        ):
            found.append(
                "--real-nodes runs kube-ccm's image with the simulated cloud its pods share, "
                "with the cloud's load balancers or ServiceLB's: drop --on-prem, --provider "
                "(but servicelb) and --cloud-config"
            )
        workers = max(0, self.real_nodes - CONTROL_PLANE_NODES)
        if self.kill + self.shutdown > workers:
            found.append(
                f"--kill {self.kill} plus --shutdown {self.shutdown} is more than the {workers} "
                f"worker nodes of --real-nodes {self.real_nodes} (the first min(N, "
                f"{CONTROL_PLANE_NODES}) are the control plane, where kube-ccm runs): "
                "kill or shut down fewer, or add real nodes"
            )
        return found
