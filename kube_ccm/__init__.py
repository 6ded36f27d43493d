"""kube-ccm: the Kubernetes cloud-controller-manager, in Python.

The public surface is small: cloud providers implement the contract in
:mod:`kube_ccm.cloudprovider`; provider authors test with :mod:`kube_ccm.testing`;
operators run the ``kube-ccm`` command. Everything else may change.
"""

__version__ = "0.2.0"
