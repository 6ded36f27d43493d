"""``mycloud-cloud-controller-manager``: the counterpart of upstream's template
``main.go``, a command named after this cloud.

Installing the package is enough for ``kube-ccm run --cloud-provider=mycloud`` (the
entry point in ``pyproject.toml``); this command also registers the provider itself,
so it works where the package's metadata is not installed. The flags are the daemon's.
"""

from __future__ import annotations

import contextlib
import sys

from kube_ccm.app.cli import run
from kube_ccm.cloudprovider import DuplicateCloudProviderError, register_cloud_provider

from kube_ccm_mycloud.provider import PROVIDER_NAME, factory


def main() -> None:
    # An explicit registration wins over the installed entry point of the same name;
    # the guard only matters when main() runs twice in one process (tests).
    with contextlib.suppress(DuplicateCloudProviderError):
        register_cloud_provider(PROVIDER_NAME, factory)
    sys.exit(run(program=f"{PROVIDER_NAME}-cloud-controller-manager"))


if __name__ == "__main__":
    main()
