"""The ``kube-ccm`` command's programs besides the daemon (:mod:`kube_ccm.app.cli`
parses their flags and calls them):

* :mod:`.doctor`: ``kube-ccm doctor``, a live cluster checked for what an external
  CCM needs, and the provider probed;
* :mod:`.gc`: ``kube-ccm gc``, load balancers whose Service is gone;
* :mod:`.newprovider`: ``kube-ccm new-provider``, a provider package written from
  :file:`templates/provider/`;
* :mod:`.migrate`: ``kube-ccm migrate``, MetalLB's, Cilium's and the Go Proxmox
  CCM's configuration converted.

The ServiceLB forwarder (``kube-ccm forward``) and the simulated cloud's
``kube-ccm simcloud`` live with their providers.
"""
