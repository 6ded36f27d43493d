"""Every shipped provider's cloud-config error has one base, the contract's
``InvalidCloudConfigError`` (a ``CloudConfigError``, and a ``ValueError`` as before),
so a caller tells "your cloud-config is wrong" apart from any other failure the same
way whichever provider raised it."""

from __future__ import annotations

import pytest

from kube_ccm.cloudprovider import CloudConfigError, InvalidCloudConfigError
from kube_ccm.providers.aws.config import AwsConfigError
from kube_ccm.providers.composite import CompositeConfigError
from kube_ccm.providers.ippool.config import IPPoolConfigError
from kube_ccm.providers.libvirt.config import LibvirtConfigError
from kube_ccm.providers.simulated.config import SimulatedConfigError


@pytest.mark.parametrize(
    "error",
    [
        AwsConfigError,
        CompositeConfigError,
        IPPoolConfigError,
        LibvirtConfigError,
        SimulatedConfigError,
    ],
)
def test_one_base_for_every_providers_config_error(error: type[Exception]) -> None:
    assert issubclass(error, InvalidCloudConfigError)
    assert issubclass(error, CloudConfigError)
    assert issubclass(error, ValueError)
    raised = error("a\n  b")
    assert str(raised) == "a | b", "one line, whatever the message held"
