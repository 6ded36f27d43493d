"""The Kubernetes API as the cloud-controller-manager sees it.

* :mod:`kube_ccm.api.wellknown` — every label, taint, annotation, finalizer,
  event, controller and metric name shared with the rest of Kubernetes;
* :mod:`kube_ccm.api.objects` — compact immutable structs for Nodes, Services and
  PersistentVolumes, decoded straight from API JSON;
* :mod:`kube_ccm.api.helpers` — pure helpers over those structs (taints,
  conditions, addresses, zones).

Import from the submodules; this package re-exports nothing so that importing
the constants never pulls in more than it needs.
"""
