"""``example-cloud-controller-manager``: the Python counterpart of upstream's main.go.

Registering explicitly is only needed when you ship your own binary; installed
packages are also found through their entry point.
"""

from __future__ import annotations

import sys

from kube_ccm.app.cli import run
from kube_ccm.cloudprovider import is_cloud_provider, register_cloud_provider
from kube_ccm_example.provider import PROVIDER_NAME, factory


def main() -> None:
    if not is_cloud_provider(PROVIDER_NAME):
        register_cloud_provider(PROVIDER_NAME, factory)
    sys.exit(run(program="example-cloud-controller-manager"))


if __name__ == "__main__":
    main()
