"""A minimal out-of-tree kube-ccm provider whose "cloud" is a static inventory file.

:mod:`kube_ccm_example.provider` is the provider and its factory (the entry point
``example`` in the group ``kube_ccm.cloud_providers``); :mod:`kube_ccm_example.main`
is its own ``example-cloud-controller-manager`` command.
"""
