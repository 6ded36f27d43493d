"""kube_ccm.app."""
