"""kube-ccm's own test bed: what its integration tests, its sandbox and its fault suite
run, beyond what a provider author needs. No compatibility is promised; provider
authors use :mod:`kube_ccm.testing`, which this package builds on (never the reverse).

- :mod:`~kube_ccm.testbed.nodes` (with :mod:`~kube_ccm.testbed._nodehost`): real
  kubelets on their own containerds, kube-controller-manager and kube-scheduler;
- :mod:`~kube_ccm.testbed.image`: the shipped image, built with buildah;
- :mod:`~kube_ccm.testbed.helm` (and ``gobuild-helm/``, the Go wrapper module that pins
  helm) and :mod:`~kube_ccm.testbed.cluster`: the chart installed on a cluster of real
  kubelets (``kube-ccm sandbox --real-nodes``);
- :mod:`~kube_ccm.testbed.echo`: a TCP/UDP echo backend in the image, and its probes;
- :mod:`~kube_ccm.testbed.faults`: the fault suite (``python -m kube_ccm.testbed.faults``);
- :mod:`~kube_ccm.testbed.rbac`: least-privilege checks of the shipped RBAC from the
  apiserver's audit log;
- :mod:`~kube_ccm.testbed.nodeidentity`: a node's own identity, the attacker of the
  trust model;
- :mod:`~kube_ccm.testbed.services`: LoadBalancer Services on a real apiserver, for the
  service daemon's tests.

Where the rest went: the real control plane (``controlplane``, with ``binaries``,
``pki`` and the ``gobuild/`` wrapper module it builds kube-apiserver and etcd from) and
``daemon`` stay in :mod:`kube_ccm.testing`, because ``ControlPlane`` and
``DaemonProcess`` are part of its face; the fakes of other clouds sit beside the
provider they fake, in modules the provider itself never imports
(:mod:`kube_ccm.providers.aws.moto` and :mod:`~kube_ccm.providers.aws.fixtures`,
:mod:`kube_ccm.providers.proxmox.fakepve`, :mod:`kube_ccm.providers.libvirt.libvirtd`).
"""
