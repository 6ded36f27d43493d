"""kube_ccm.sandbox."""
