"""The example cloud provider for kube-ccm."""

from kube_ccm_example.provider import PROVIDER_NAME, ExampleCloud, factory

__all__ = ["PROVIDER_NAME", "ExampleCloud", "factory"]
