"""``digitalocean-cloud-controller-manager``: kube-ccm's daemon with this provider
registered by the command itself (``kube-ccm run --cloud-provider=digitalocean`` finds
it through the entry point once the package is installed). The flags are the daemon's.
"""

from __future__ import annotations

import contextlib
import sys

from kube_ccm.app.cli import run
from kube_ccm.cloudprovider import DuplicateCloudProviderError, register_cloud_provider

from kube_ccm_digitalocean.provider import PROVIDER_NAME, factory


def main() -> None:
    with contextlib.suppress(DuplicateCloudProviderError):
        register_cloud_provider(PROVIDER_NAME, factory)
    sys.exit(run(program=f"{PROVIDER_NAME}-cloud-controller-manager"))


if __name__ == "__main__":
    main()
