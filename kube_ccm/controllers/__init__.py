"""kube_ccm.controllers."""
