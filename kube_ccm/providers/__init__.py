"""kube_ccm.providers."""
