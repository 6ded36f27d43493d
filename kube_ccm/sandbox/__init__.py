"""``kube-ccm sandbox``: the whole system on one machine, no cloud account needed.

Starts the test bed's real kube-apiserver + etcd and N simulated kubelets
(:mod:`kube_ccm.sandbox.kubelets`: each registers its Node with the
uninitialised taint and a pod CIDR, renews its Lease, reports Ready, and can be
told to die), runs ``kube-ccm run`` with the simulated cloud as a subprocess,
and shows progress while the nodes are initialised (and their routes created),
M LoadBalancer Services get their ingress IPs, and, with ``--kill`` /
``--shutdown``, dead nodes are deleted or tainted. Then a summary: times, cloud
calls by method, API requests by verb and resource. It keeps running (kubectl
works with the printed kubeconfig) until Ctrl-C or ``--duration``.

``--provider NAME`` without ``--cloud-config`` runs NAME's own cloud on this machine,
when the provider brings one through the sandbox's hook (:mod:`kube_ccm.sandbox.local`;
the sandbox names no provider): aws plays AWS with a moto server (a VPC, tagged
subnets, a route table and an instance per node; kube-ccm's EC2 and ELBv2 calls
counted), proxmox a PVE cluster with fakepve, libvirt a real libvirtd on libvirt's
test driver (``--on-prem``), the last two with ``--cloud-provider=composite`` taking
load balancers from ``ippool``. ``--kill`` and ``--shutdown`` end their instances.

``--real-nodes N`` runs real kubelets instead (:mod:`kube_ccm.sandbox.real`): N
kubelets on their own containerds, kube-controller-manager and kube-scheduler, the
image built from this checkout and kube-ccm installed by the shipped Helm chart with
leader election, the simulated cloud shared by its pods. Needs root and ``make sysdeps``.
With ``--provider servicelb`` (:mod:`kube_ccm.sandbox.servicelb`) the load balancers are
ServiceLB's instead, answering on the node IPs, with kube-proxy on the nodes.

The modules, by job: :mod:`~kube_ccm.sandbox.options` (the options and what is wrong
with them), :mod:`~kube_ccm.sandbox.clouds` (the cloud kube-ccm runs against),
:mod:`~kube_ccm.sandbox.local` (the hook for a provider's local cloud),
:mod:`~kube_ccm.sandbox.kubelets` (the simulated kubelets),
:mod:`~kube_ccm.sandbox.progress` (progress bars, the watch on kube-ccm),
:mod:`~kube_ccm.sandbox.summary` (the summary and the closing hints),
:mod:`~kube_ccm.sandbox.run` (the run, under one exit stack, and its signals).
"""

from __future__ import annotations

from kube_ccm.sandbox.kubelets import SimulatedKubelets, node_manifest
from kube_ccm.sandbox.options import CLUSTER_CIDR, SandboxOptions
from kube_ccm.sandbox.run import main, run_sandbox

__all__ = [
    "CLUSTER_CIDR",
    "SandboxOptions",
    "SimulatedKubelets",
    "main",
    "node_manifest",
    "run_sandbox",
]
