"""The mycloud cloud provider for kube-ccm."""

from kube_ccm_mycloud.provider import PROVIDER_NAME, MycloudCloud, factory

__all__ = ["PROVIDER_NAME", "MycloudCloud", "factory"]
