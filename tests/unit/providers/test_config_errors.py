"""Every shipped provider's cloud-config error has one base, the contract's
``InvalidCloudConfigError`` (a ``CloudConfigError``, and a ``ValueError`` as before),
so a caller tells "your cloud-config is wrong" apart from any other failure the same
way whichever provider raised it."""

from __future__ import annotations

import pytest

from kube_ccm.cloudprovider import CloudConfigError, InvalidCloudConfigError
from kube_ccm.providers.aws.config import AwsConfigError
from kube_ccm.providers.aws.config import load_config as load_aws
from kube_ccm.providers.composite import CompositeConfigError, build_composite
from kube_ccm.providers.ippool.config import IPPoolConfigError
from kube_ccm.providers.ippool.config import load_config as load_ippool
from kube_ccm.providers.k3s.config import load_config as load_k3s
from kube_ccm.providers.libvirt.config import LibvirtConfigError
from kube_ccm.providers.libvirt.config import load_config as load_libvirt
from kube_ccm.providers.proxmox.config import load_config as load_proxmox
from kube_ccm.providers.servicelb.config import load_config as load_servicelb
from kube_ccm.providers.simulated.config import SimulatedConfigError
from kube_ccm.providers.simulated.config import load_config as load_simulated


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


# Each provider's cloud-config with two misspelt keys (one nested where the provider has
# nesting): every start-up error names both, not the first alone (issue 39).
def _aws(text: str) -> object:
    return load_aws(text)


def _composite(text: str) -> object:
    return build_composite(text.encode())


def _digitalocean(text: str) -> object:
    kube_ccm_digitalocean = pytest.importorskip("kube_ccm_digitalocean.config")
    return kube_ccm_digitalocean.load(text.encode())


def _ippool(text: str) -> object:
    return load_ippool(text)


def _k3s(text: str) -> object:
    return load_k3s(text)


def _libvirt(text: str) -> object:
    return load_libvirt(text)


def _proxmox(text: str) -> object:
    return load_proxmox(text)


def _servicelb(text: str) -> object:
    return load_servicelb(text)


def _simulated(text: str) -> object:
    return load_simulated(text)


@pytest.mark.parametrize(
    ("load", "text", "keys"),
    [
        (_aws, "region: eu-west-1\nregoin: x\nvpcid: y\n", ("`regoin`", "`vpcid`")),
        (
            _composite,
            "providers: {simulated: {capabilities: [instances], cloudconfig: x}}\nprovider: y\n",
            ("`provider`", "`cloudconfig` in `providers.simulated`"),
        ),
        (_digitalocean, "region: nyc3\nregoin: x\ntokn: y\n", ("`regoin`", "`tokn`")),
        (_ippool, "configmap: x\nannouncr: status\n", ("`configmap`", "`announcr`")),
        (_k3s, "annotationPrefx: k3s.io\nlbEnabled: false\n", ("`annotationPrefx`", "`lbEnabled`")),
        (
            _libvirt,
            "hosts: [{uri: 'qemu:///system', nme: a}]\nnodemapping: name\n",
            ("`nodemapping`", "`nme` in `hosts[0]`"),
        ),
        (
            _proxmox,
            "clusters: [{region: r, url: 'https://pve:8006', insecure: true}]\nfeatures: {}\n",
            ("`features`", "`insecure`", "in `clusters[0]`"),
        ),
        (
            _servicelb,
            "namespce: x\nimage_pull_policy: Always\n",
            ("`namespce`", "`image_pull_policy`"),
        ),
        (
            _simulated,
            "state: /tmp/s.json\nlatncy: 1\nloadBalancer: {delya: 1}\n",
            ("`latncy`", "`delya` in `loadBalancer`"),
        ),
    ],
    ids=lambda v: v.__name__.strip("_") if callable(v) else "",
)
def test_every_provider_names_all_its_unknown_keys_at_once(
    load: object, text: str, keys: tuple[str, ...]
) -> None:
    assert callable(load)
    with pytest.raises(InvalidCloudConfigError) as error:
        load(text)
    for key in keys:
        assert key in str(error.value), (key, str(error.value))
