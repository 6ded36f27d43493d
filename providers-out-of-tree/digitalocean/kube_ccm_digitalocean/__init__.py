"""DigitalOcean for kube-ccm: droplets as instances and load balancers, on pydo,
shipped out of tree (``kube-ccm run --cloud-provider=digitalocean``)."""

__version__ = "0.1.0"
