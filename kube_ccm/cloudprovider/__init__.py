"""kube_ccm.cloudprovider."""
