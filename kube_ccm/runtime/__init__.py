"""kube_ccm.runtime."""
