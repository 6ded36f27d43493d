"""A minimal kube-ccm provider whose "cloud" is a static inventory file."""
