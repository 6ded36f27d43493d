"""``kube-ccm migrate`` (issue 39, What to build 2): the guides' mechanical steps as a
command; converted objects on stdout, every key not carried over on stderr, at once."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kube_ccm.app.cli import main
from kube_ccm.app.tools.migrate import NOT_CARRIED
from kube_ccm.providers.ippool.migrate import convert as convert_pools
from kube_ccm.providers.proxmox.config import load_config
from kube_ccm.providers.proxmox.migrate import convert as convert_proxmox

GO_CCM_CONFIG = """\
features:
  provider: capmox
  network:
    mode: qemu
    ipv6_support_disabled: true
    external_ip_cidrs: '192.168.0.0/16,2001:db8:85a3::8a2e:370:7334/112,!fd00:1234:5678::/64'
    ip_sort_order: '192.168.0.0/16,2001:db8:85a3::8a2e:370:7334/112'
  ha_group: true
clusters:
  - url: https://cluster-api-1.exmple.com:8006/api2/json
    insecure: false
    token_id: "kubernetes-csi@pve!csi"
    token_secret: "secret"
    region: Region-1
  - url: https://cluster-api-2.exmple.com:8006/api2/json
    insecure: true
    token_id_file: /run/secrets/region-2/token_id
    token_secret_file: /run/secrets/region-2/token_secret
    region: Region-2
"""
"""sergelogvinov/proxmox-cloud-controller-manager v0.13.1, docs/config.md's example
(``features.network`` as a mapping, as pkg/config/config.go reads it; the second
cluster with the file keys its comment shows)."""


def test_the_go_ccms_config_converts_by_the_table_and_names_what_it_could_not() -> None:
    config, notes = convert_proxmox(yaml.safe_load(GO_CCM_CONFIG))
    assert config == {
        "clusters": [
            {
                "url": "https://cluster-api-1.exmple.com:8006/api2/json",
                "region": "Region-1",
                "tokenId": "kubernetes-csi@pve!csi",
                "tokenSecret": {"file": "/etc/kube-ccm/proxmox/Region-1"},
            },
            {
                "url": "https://cluster-api-2.exmple.com:8006/api2/json",
                "region": "Region-2",
                "tokenIdFile": "/run/secrets/region-2/token_id",
                "tokenSecret": {"file": "/run/secrets/region-2/token_secret"},
            },
        ],
        "providerIDFormat": "uuid",
        "zone": "haGroup",
        "externalIPCIDRs": ["192.168.0.0/16", "2001:db8:85a3::8a2e:370:7334/112"],
        "ipv6SupportDisabled": True,
    }
    told = "\n".join(notes)
    assert "'secret'" not in repr(config)  # the secret's value is never copied
    for key in (
        "clusters[0].token_secret: not copied",
        "clusters[1].insecure: not carried over",
        "external_ip_cidrs '!fd00:1234:5678::/64': left out",
        "features.network.mode 'qemu': not carried over",
        "features.network.ip_sort_order: not carried over",
    ):
        assert key in told, (key, told)
    assert len(notes) == 5
    assert load_config(yaml.safe_dump({**config, "clusters": config["clusters"][:1]}))


def test_pools_name_every_key_they_could_not_carry_over() -> None:
    converted = convert_pools(
        [
            {
                "apiVersion": "metallb.io/v1beta1",
                "kind": "IPAddressPool",
                "metadata": {"name": "p", "namespace": "metallb-system"},
                "spec": {"addresses": ["10.0.0.0/24"], "future": 1},
            },
            {
                "apiVersion": "cilium.io/v2",
                "kind": "CiliumLoadBalancerIPPool",
                "metadata": {"name": "p"},
                "spec": {"blocks": [{"cidr": "10.1.0.0/24"}, {}], "allowFirstLastIPs": "Yes"},
            },
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "config"}},
        ]
    )
    assert [o["spec"]["addresses"] for o in converted.objects] == [["10.0.0.0/24"], ["10.1.0.0/24"]]
    assert converted.objects[1]["spec"]["allowFirstLastIPs"] is True
    assert converted.notes == [
        "IPAddressPool metallb-system/p: spec.future is not carried over (LoadBalancerPool "
        "has none)",
        "CiliumLoadBalancerIPPool p: spec.blocks[1] has neither cidr nor start; left out",
        "CiliumLoadBalancerIPPool p: a LoadBalancerPool 'p' comes from IPAddressPool "
        "metallb-system/p already (LoadBalancerPools are cluster-wide); rename one of them",
        "ConfigMap config: not converted; only MetalLB's IPAddressPool and Cilium's "
        "CiliumLoadBalancerIPPool are pools",
    ]


def test_the_command_prints_the_objects_and_exits_non_zero_when_something_was_left(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    go = tmp_path / "config.yaml"
    go.write_text(GO_CCM_CONFIG)
    assert main(["migrate", "proxmox", str(go)]) == NOT_CARRIED
    out, err = capsys.readouterr()
    assert yaml.safe_load(out)["providerIDFormat"] == "uuid"
    assert len(err.splitlines()) == 5
    assert all(line.startswith("not carried over: ") for line in err.splitlines())
    pool = tmp_path / "pool.yaml"
    pool.write_text(
        "apiVersion: metallb.io/v1beta1\nkind: IPAddressPool\n"
        "metadata: {name: a, namespace: metallb-system}\nspec: {addresses: [10.0.0.0/24]}\n"
    )
    assert main(["migrate", "pools", str(pool)]) == 0
    out, err = capsys.readouterr()
    assert yaml.safe_load(out)["kind"] == "LoadBalancerPool"
    assert err == ""
    assert main(["migrate", "pools", str(tmp_path / "missing.yaml")]) == 2
