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

``--on-prem`` runs the composed on-prem setup instead of the simulated cloud: a
real libvirtd (:mod:`kube_ccm.providers.libvirt.libvirtd`, libvirt's test driver) holds one
running domain per node, and ``--cloud-provider=composite`` takes instances from
the ``libvirt`` provider and load balancers from ``ippool`` (addresses from
``ON_PREM_POOL``). ``--kill`` undefines domains, ``--shutdown`` shuts them off.

``--provider aws`` without ``--cloud-config`` plays AWS on loopback
(:mod:`kube_ccm.sandbox.aws`): a moto server with a VPC, tagged subnets, a route table
and an instance per node named after it; kube-ccm's EC2 and ELBv2 calls are counted.
``--kill`` terminates instances, ``--shutdown`` stops them.

``--real-nodes N`` runs real kubelets instead (:mod:`kube_ccm.sandbox.real`): N
kubelets on their own containerds, kube-controller-manager and kube-scheduler, the
image built from this checkout and kube-ccm installed by the shipped Helm chart with
leader election, the simulated cloud shared by its pods. Needs root and ``make sysdeps``.
With ``--provider servicelb`` (:mod:`kube_ccm.sandbox.servicelb`) the load balancers are
ServiceLB's instead, answering on the node IPs, with kube-proxy on the nodes.

The modules, by job: :mod:`~kube_ccm.sandbox.options` (the options and what is wrong
with them), :mod:`~kube_ccm.sandbox.clouds` (the cloud per provider),
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
