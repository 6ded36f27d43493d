"""The proxmox provider against fakepve (a fake of the whole PVE API) on loopback:
identity as the Go CCM, lookups by name and SMBIOS UUID, metadata, and what each
fault does to a lookup (an error, never "gone")."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml

from kube_ccm.api.objects import Node
from kube_ccm.app.tools.doctor import _self_probes
from kube_ccm.cloudprovider import (
    CloudIdentityError,
    InstanceNotFoundError,
    InstancesV2,
    InvalidCloudConfigError,
    TransientCloudError,
)
from kube_ccm.controllers.nodeutil import NodeIPError, check_node_ip, desired_addresses
from kube_ccm.providers.composite import CompositeProvider
from kube_ccm.providers.proxmox import (
    DUPLICATE_REASON,
    ProxmoxAuthError,
    ProxmoxConfigError,
    ProxmoxError,
    ProxmoxLockedError,
    ProxmoxProvider,
    ProxmoxTLSError,
    factory,
    load_config,
    parse_provider_id,
)
from kube_ccm.providers.proxmox.fakepve import (
    FakePveServer,
    FakePveUnavailableError,
    agent_interfaces,
)
from kube_ccm.providers.proxmox.provider import agent_addresses, cloud_init_addresses, smbios
from kube_ccm.runtime.events import ObjectReference

UUID_A = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
UUID_B = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"


def node(name: str, *, uuid: str = "", provider_id: str = "", node_ip: str = "") -> Node:
    annotations = {"alpha.kubernetes.io/provided-node-ip": node_ip} if node_ip else {}
    return msgspec.convert(
        {
            "metadata": {"name": name, "uid": f"uid-{name}", "annotations": annotations},
            "spec": {"providerID": provider_id} if provider_id else {},
            "status": {"nodeInfo": {"systemUUID": uuid}} if uuid else {},
        },
        Node,
    )


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def event(self, ref: ObjectReference, event_type: str, reason: str, message: str) -> None:
        self.events.append((ref.name, reason, message))


@pytest.fixture
def second_cluster(tmp_path: Path) -> Any:
    server = FakePveServer(tmp_path / "pve2", region="cluster-2", host="127.0.0.1")
    try:
        server.start()
    except FakePveUnavailableError as exc:
        pytest.skip(str(exc))
    yield server
    server.stop()


Make = Callable[..., ProxmoxProvider]


@pytest.fixture
async def make(fakepve_server: FakePveServer) -> AsyncIterator[Make]:
    made: list[ProxmoxProvider] = []

    def build(*servers: FakePveServer, **settings: Any) -> ProxmoxProvider:
        clusters = [s.cluster_config() for s in (servers or (fakepve_server,))]
        provider = factory(yaml.safe_dump({"clusters": clusters, **settings}).encode())
        provider.recorder = Recorder()
        made.append(provider)
        return provider

    yield build
    for provider in made:
        await provider.aclose()


def v2(provider: ProxmoxProvider) -> InstancesV2:
    instances = provider.instances_v2()
    assert instances is not None
    return instances


# -- identity ------------------------------------------------------------------


def test_provider_ids_of_both_go_ccm_forms_parse() -> None:
    assert parse_provider_id("proxmox://cluster-1/100") == ("cluster-1", 100)
    assert parse_provider_id(f"proxmox://{UUID_A.upper()}") == UUID_A
    for bad in ("aws:///i-1", "proxmox://cluster-1/abc", "proxmox://cluster-1", "proxmox:///1"):
        with pytest.raises(ValueError, match="providerID"):
            parse_provider_id(bad)


async def test_a_node_named_as_a_vm_gets_the_go_ccms_provider_id_labels_and_addresses(
    fakepve_server: FakePveServer, make: Make
) -> None:
    agent = agent_interfaces("10.0.0.5", "fe80::1", "2001:db8::5")
    agent.append(
        {"name": "cni0", "ip-addresses": [{"ip-address": "10.244.0.1", "ip-address-type": "ipv4"}]}
    )
    fakepve_server.add_vm(100, "node-a", uuid=UUID_A, node="pve2", agent=agent)
    meta = await v2(make()).instance_metadata(node("node-a"))
    assert meta is not None
    assert meta.provider_id == "proxmox://cluster-1/100"
    assert (meta.region, meta.zone, meta.instance_type) == ("cluster-1", "pve2", "2VCPU-4GB")
    assert meta.additional_labels == {
        "topology.proxmox.sinextra.dev/region": "cluster-1",
        "topology.proxmox.sinextra.dev/zone": "pve2",
        "proxmox.kube-ccm.io/node": "pve2",
    }
    assert [(a.type, a.address) for a in meta.node_addresses] == [
        ("InternalIP", "10.0.0.5"),
        ("InternalIP", "2001:db8::5"),
        ("Hostname", "node-a"),
    ]


async def test_the_kubelets_node_ip_is_kept_when_the_vm_has_it_on_a_skipped_interface(
    fakepve_server: FakePveServer, make: Make
) -> None:
    agent = agent_interfaces("192.168.1.5")
    agent[0]["ip-addresses"].append({"ip-address": "10.1.0.5", "ip-address-type": "ipv4"})
    fakepve_server.add_vm(100, "node-a", agent=agent)  # a BGP address on lo
    instances = v2(make())
    plain = await instances.instance_metadata(node("node-a"))
    assert plain is not None
    assert [a.address for a in plain.node_addresses] == ["192.168.1.5", "node-a"]

    given = node("node-a", node_ip="10.1.0.5")
    meta = await instances.instance_metadata(given)
    assert meta is not None
    assert [a.address for a in meta.node_addresses] == ["10.1.0.5", "192.168.1.5", "node-a"]
    check_node_ip(meta.node_addresses, "10.1.0.5")  # the node controller initialises it
    wanted = desired_addresses(meta.node_addresses, (), "10.1.0.5")
    assert [(a.type, a.address) for a in wanted or ()] == [
        ("InternalIP", "10.1.0.5"),
        ("Hostname", "node-a"),
    ]


async def test_a_vm_that_tells_no_address_takes_the_kubelets_and_a_foreign_one_is_not_added(
    fakepve_server: FakePveServer, make: Make
) -> None:
    fakepve_server.add_vm(100, "node-a", config={"ipconfig0": "ip=dhcp"})  # no agent
    fakepve_server.add_vm(101, "node-b", agent=agent_interfaces("192.168.1.6"))
    instances = v2(make())
    meta = await instances.instance_metadata(node("node-a", node_ip="192.168.1.5,fd00::5"))
    assert meta is not None
    assert [(a.type, a.address) for a in meta.node_addresses] == [
        ("InternalIP", "192.168.1.5"),
        ("InternalIP", "fd00::5"),
        ("Hostname", "node-a"),
    ]
    meta = await instances.instance_metadata(node("node-b", node_ip="192.168.1.99"))
    assert meta is not None
    assert [a.address for a in meta.node_addresses] == ["192.168.1.6", "node-b"]
    with pytest.raises(NodeIPError, match=r"192\.168\.1\.99"):
        check_node_ip(meta.node_addresses, "192.168.1.99")  # ProvidedNodeIPNotValid


async def test_a_vm_in_a_pool_gets_the_pool_label(
    fakepve_server: FakePveServer, make: Make
) -> None:
    vm = fakepve_server.add_vm(100, "node-a")
    fakepve_server.call(lambda: fakepve_server.pve.pools.setdefault("k8s", set()).add(100))
    fakepve_server.call(lambda: setattr(vm, "pool", "k8s"))
    meta = await v2(make()).instance_metadata(node("node-a"))
    assert meta is not None
    assert meta.additional_labels["proxmox.kube-ccm.io/pool"] == "k8s"


async def test_with_ha_group_zones_a_live_migration_moves_the_pve_node_not_the_zone(
    fakepve_server: FakePveServer, make: Make
) -> None:
    fakepve_server.add_vm(100, "node-a", node="pve1")
    fakepve_server.add_vm(101, "node-b", node="pve1")
    # PVE 9's upgrade turned HA group "web" into the node-affinity rule ha-group-web.
    fakepve_server.add_ha_rule("ha-group-web", 100, nodes="pve1,pve2")
    instances = v2(make(zone="haGroup", cacheTTL="0s"))
    before = await instances.instance_metadata(node("node-a"))
    assert before is not None
    assert before.zone == "web"
    assert before.additional_labels["topology.proxmox.sinextra.dev/zone"] == "web"
    assert before.additional_labels["proxmox.kube-ccm.io/node"] == "pve1"

    await fakepve_server.acall(fakepve_server.pve.migrate(100, "pve2"))
    after = await instances.instance_metadata(node("node-a"))
    assert after is not None
    assert after.additional_labels["proxmox.kube-ccm.io/node"] == "pve2"
    assert (after.zone, after.provider_id) == ("web", before.provider_id)

    # A VM in no HA group keeps the PVE node as its zone.
    other = await instances.instance_metadata(node("node-b"))
    assert other is not None
    assert other.zone == "pve1"


async def test_a_pve8_ha_group_is_the_zone_and_without_the_setting_the_node_is(
    fakepve_server: FakePveServer, make: Make
) -> None:
    fakepve_server.add_vm(100, "node-a", node="pve2")
    fakepve_server.add_ha_group("db", 100)
    # PVE 8 has no HA rules: its answer is a 501, not an outage.
    message = "Method 'GET /api2/json/cluster/ha/rules' not implemented"
    fakepve_server.call(lambda: fakepve_server.pve.fail("GET", "/cluster/ha/rules", 501, message))
    meta = await v2(make(zone="haGroup")).instance_metadata(node("node-a"))
    assert meta is not None
    assert meta.zone == "db"
    meta = await v2(make()).instance_metadata(node("node-a"))
    assert meta is not None
    assert meta.zone == "pve2"
    assert fakepve_server.count("/cluster/ha/resources") == 1  # only with zone: haGroup
    assert [r[2] for r in fakepve_server.pve.refused] == [501]


async def test_an_instance_type_tag_beats_the_sku_and_two_of_them_are_ignored(
    fakepve_server: FakePveServer, make: Make, caplog: pytest.LogCaptureFixture
) -> None:
    sku = "c2t1LWxhcmdl"  # base64 of "sku-large"
    smbios1 = f"uuid={UUID_A},sku={sku},base64=1"
    fakepve_server.add_vm(
        100, "node-a", config={"tags": "k8s;instance-type.m1.large", "smbios1": smbios1}
    )
    fakepve_server.add_vm(
        101, "node-b", cores=8, memory_mib=16384, config={"tags": "instance-type.a;instance-type.b"}
    )
    instances = v2(make())
    meta = await instances.instance_metadata(node("node-a"))
    assert meta is not None
    assert meta.instance_type == "m1.large"
    meta = await instances.instance_metadata(node("node-b"))
    assert meta is not None
    assert meta.instance_type == "8VCPU-16GB"
    assert "ignoring its tags instance-type.a, instance-type.b" in caplog.text


async def test_uuid_format_gives_the_capmox_provider_id(
    fakepve_server: FakePveServer, make: Make
) -> None:
    fakepve_server.add_vm(100, "node-a", uuid=UUID_A)
    meta = await v2(make(providerIDFormat="uuid")).instance_metadata(node("node-a"))
    assert meta is not None
    assert meta.provider_id == f"proxmox://{UUID_A}"
    assert await v2(make()).instance_exists(node("x", provider_id=f"proxmox://{UUID_A}"))


async def test_a_node_named_otherwise_is_found_by_its_system_uuid(
    fakepve_server: FakePveServer, make: Make
) -> None:
    fakepve_server.add_vm(100, "vm-100", uuid=UUID_B)
    fakepve_server.add_vm(101, "vm-101", uuid=UUID_A, config={"ipconfig0": "ip=10.0.0.9/24"})
    meta = await v2(make()).instance_metadata(node("worker-7", uuid=UUID_A.upper()))
    assert meta is not None
    assert meta.provider_id == "proxmox://cluster-1/101"
    assert meta.node_addresses[0].address == "10.0.0.9"


async def test_a_vm_restored_under_a_new_vmid_is_found_again_by_uuid(
    fakepve_server: FakePveServer, make: Make
) -> None:
    fakepve_server.add_vm(200, "vm-restored", uuid=UUID_A)
    fakepve_server.add_vm(100, "someone-else", uuid=UUID_B)  # the old VMID, reused
    instances = v2(make())
    old = node("worker-7", uuid=UUID_A, provider_id="proxmox://cluster-1/100")
    assert await instances.instance_exists(old)
    meta = await instances.instance_metadata(old)
    assert meta is not None
    assert meta.provider_id == "proxmox://cluster-1/200"


async def test_two_vms_of_one_name_across_clusters_are_an_event_naming_both_not_a_guess(
    fakepve_server: FakePveServer, second_cluster: FakePveServer, make: Make
) -> None:
    fakepve_server.add_vm(100, "node-a", uuid=UUID_A)
    second_cluster.add_vm(300, "node-a", uuid=UUID_B, node="pve9")
    provider = make(fakepve_server, second_cluster)
    with pytest.raises(ProxmoxError, match="several Proxmox VMs") as raised:
        await v2(provider).instance_metadata(node("node-a"))
    assert "VM 100 on pve1 in cluster-1" in str(raised.value)
    assert "VM 300 on pve9 in cluster-2" in str(raised.value)
    assert isinstance(provider.recorder, Recorder)
    assert [(n, r) for n, r, _ in provider.recorder.events] == [("node-a", DUPLICATE_REASON)]
    # The Node's systemUUID decides, when it can: that is not a guess.
    meta = await v2(provider).instance_metadata(node("node-a", uuid=UUID_B))
    assert meta is not None
    assert meta.provider_id == "proxmox://cluster-2/300"


# -- lifecycle -----------------------------------------------------------------


async def test_stopped_and_paused_vms_are_shut_down_and_a_destroyed_one_is_gone(
    fakepve_server: FakePveServer, make: Make
) -> None:
    fakepve_server.add_vm(100, "node-a", uuid=UUID_A)
    instances = v2(make(cacheTTL="0s"))
    known = node("node-a", uuid=UUID_A, provider_id="proxmox://cluster-1/100")
    assert not await instances.instance_shutdown(known)
    fakepve_server.set_status(100, "running", "paused")
    assert await instances.instance_shutdown(known)
    fakepve_server.set_status(100, "stopped")
    assert await instances.instance_shutdown(known)
    assert await instances.instance_exists(known)
    fakepve_server.remove_vm(100)
    assert not await instances.instance_exists(known)
    with pytest.raises(InstanceNotFoundError):
        await instances.instance_metadata(node("node-a"))


async def test_one_listing_answers_a_wave_of_lookups(
    fakepve_server: FakePveServer, make: Make
) -> None:
    for i in range(20):
        fakepve_server.add_vm(100 + i, f"node-{i}")
    instances = v2(make())
    nodes = [node(f"node-{i}", provider_id=f"proxmox://cluster-1/{100 + i}") for i in range(20)]
    assert all(await asyncio.gather(*(instances.instance_exists(n) for n in nodes)))
    assert fakepve_server.count("/cluster/resources") == 1


# -- faults: an error, never "gone" ----------------------------------------------


async def test_an_unknown_region_in_a_provider_id_says_which_and_what_to_do(
    fakepve_server: FakePveServer, make: Make
) -> None:
    with pytest.raises(ProxmoxError, match=r"region 'cluster-9'.*not among.*cluster-1"):
        await v2(make()).instance_exists(node("a", provider_id="proxmox://cluster-9/1"))


async def test_a_vm_locked_by_a_backup_or_migration_is_an_error_for_shutdown_never_gone(
    fakepve_server: FakePveServer, make: Make
) -> None:
    fakepve_server.add_vm(100, "node-a")
    instances = v2(make(cacheTTL="0s"))
    known = node("node-a", provider_id="proxmox://cluster-1/100")
    fakepve_server.call(lambda: fakepve_server.pve.snapshot_lock(100, "backup"))
    assert not await instances.instance_shutdown(known)  # a snapshot-mode backup
    fakepve_server.set_status(100, "running", "paused")  # a suspend-mode backup
    with pytest.raises(ProxmoxLockedError, match=r"locked \(backup\) and QEMU reports 'paused'"):
        await instances.instance_shutdown(known)
    assert await instances.instance_exists(known)
    fakepve_server.call(lambda: fakepve_server.pve.snapshot_lock(100, "migrate"))
    fakepve_server.set_status(100, "stopped")
    with pytest.raises(TransientCloudError, match=r"locked \(migrate\).*qm unlock 100"):
        await instances.instance_shutdown(known)
    fakepve_server.call(lambda: fakepve_server.pve.snapshot_lock(100, "suspended"))
    assert await instances.instance_shutdown(known)  # hibernated: shut down indeed
    fakepve_server.call(lambda: fakepve_server.pve.unlock(100))
    assert await instances.instance_shutdown(known)


async def test_lost_quorum_still_reads(fakepve_server: FakePveServer, make: Make) -> None:
    fakepve_server.add_vm(100, "node-a")
    fakepve_server.call(fakepve_server.pve.lose_quorum)
    assert await v2(make()).instance_exists(node("node-a", provider_id="proxmox://cluster-1/100"))


async def test_an_offline_pve_node_is_an_error_for_shutdown_and_never_gone(
    fakepve_server: FakePveServer, make: Make
) -> None:
    fakepve_server.add_vm(100, "node-a", node="pve2")
    fakepve_server.call(lambda: fakepve_server.pve.set_node_offline("pve2"))
    instances = v2(make())
    known = node("node-a", provider_id="proxmox://cluster-1/100")
    assert await instances.instance_exists(known)
    with pytest.raises(ProxmoxError, match="offline"):
        await instances.instance_shutdown(known)


@pytest.mark.parametrize(
    ("status", "message", "expected"),
    [
        (500, "cluster not ready - no quorum?", "lost quorum"),
        (503, "service unavailable", "service unavailable"),
    ],
)
async def test_a_5xx_listing_is_a_transient_error_not_gone(
    fakepve_server: FakePveServer, make: Make, status: int, message: str, expected: str
) -> None:
    fakepve_server.call(
        lambda: fakepve_server.pve.fail("GET", "/cluster/resources", status, message)
    )
    instances = v2(make())
    with pytest.raises(TransientCloudError, match=expected):
        await instances.instance_exists(node("node-a", provider_id="proxmox://cluster-1/100"))
    with pytest.raises(TransientCloudError):
        await instances.instance_exists(node("node-a"))


async def test_a_token_without_a_privilege_names_it(
    fakepve_server: FakePveServer, make: Make
) -> None:
    fakepve_server.call(
        lambda: fakepve_server.pve.fail(
            "GET", "/cluster/resources", 403, "Permission check failed (/vms, VM.Audit)"
        )
    )
    with pytest.raises(ProxmoxAuthError, match=r"lacks a privilege: /vms, VM.Audit"):
        await v2(make()).instance_exists(node("node-a"))


async def test_a_token_that_lost_vm_audit_sees_no_vm_and_says_so_never_gone(
    fakepve_server: FakePveServer, make: Make
) -> None:
    fakepve_server.add_vm(100, "node-a")
    fakepve_server.add_vm(101, "node-b")
    instances = v2(make(cacheTTL="0s"))
    known = node("node-a", provider_id="proxmox://cluster-1/100")
    assert await instances.instance_exists(known)
    # An ACL edit: the token keeps the guest-agent privilege, loses VM.Audit. PVE then
    # lists no VM to it (fakepve filters /cluster/resources as PVE does).
    pve = fakepve_server.pve
    fakepve_server.call(lambda: pve.grant(fakepve_server.token_id, "/vms", "VM.Monitor"))
    for lookup in (known, node("node-a"), node("node-b", uuid=UUID_A)):
        with pytest.raises(CloudIdentityError) as caught:
            await instances.instance_exists(lookup)
        assert "holds no VM.Audit on /vms" in str(caught.value)
        assert caught.value.hint.startswith(
            "grant VM.Audit on /vms to the token: `pveum acl modify /vms --tokens "
            "kube-ccm@pve!ccm --roles PVEAuditor`"
        )
    with pytest.raises(CloudIdentityError):
        await instances.instance_metadata(node("node-z"))
    # A grant on one VM only is not enough to call another gone.
    fakepve_server.call(lambda: pve.grant(fakepve_server.token_id, "/vms/100", "VM.Audit"))
    assert await instances.instance_exists(known)
    with pytest.raises(CloudIdentityError):
        await instances.instance_exists(node("node-b", provider_id="proxmox://cluster-1/101"))
    # The privilege back: a VM really destroyed is gone again.
    fakepve_server.call(lambda: pve.grant(fakepve_server.token_id, "/vms", "VM.Audit"))
    fakepve_server.remove_vm(101)
    assert not await instances.instance_exists(
        node("node-b", provider_id="proxmox://cluster-1/101")
    )


async def test_a_token_with_privilege_separation_and_no_acl_of_its_own_is_an_identity_error(
    fakepve_server: FakePveServer, make: Make
) -> None:
    pve = fakepve_server.pve
    token = fakepve_server.token_id

    def separate() -> None:
        pve.grant(token.split("!")[0], "/", "VM.Audit", "Sys.Audit")  # the user's role
        pve.privsep.add(token)

    fakepve_server.add_vm(100, "node-a")
    fakepve_server.call(separate)
    with pytest.raises(CloudIdentityError, match="privilege separation"):
        await v2(make()).instance_exists(node("node-a", provider_id="proxmox://cluster-1/100"))
    fakepve_server.call(lambda: pve.grant(token, "/vms", "VM.Audit"))
    assert await v2(make()).instance_exists(node("node-a", provider_id="proxmox://cluster-1/100"))


async def test_the_privilege_check_is_made_only_for_a_miss_once_per_listing(
    fakepve_server: FakePveServer, make: Make
) -> None:
    for i in range(10):
        fakepve_server.add_vm(100 + i, f"node-{i}")
    instances = v2(make())
    nodes = [node(f"node-{i}", provider_id=f"proxmox://cluster-1/{100 + i}") for i in range(10)]
    assert all(await asyncio.gather(*(instances.instance_exists(n) for n in nodes)))
    assert fakepve_server.count("/access/permissions") == 0
    gone = [node(f"gone-{i}", provider_id=f"proxmox://cluster-1/{200 + i}") for i in range(10)]
    assert not any(await asyncio.gather(*(instances.instance_exists(n) for n in gone)))
    assert fakepve_server.count("/access/permissions") <= 2


async def test_a_refused_token_is_an_auth_error_naming_the_token(
    fakepve_server: FakePveServer, make: Make
) -> None:
    fakepve_server.call(fakepve_server.pve.apitokens.clear)
    with pytest.raises(ProxmoxAuthError, match=r"kube-ccm@pve!ccm .*refused"):
        await v2(make()).instance_exists(node("node-a"))


async def test_a_ca_that_does_not_match_says_so(
    fakepve_server: FakePveServer, second_cluster: FakePveServer, make: Make
) -> None:
    config = fakepve_server.cluster_config(caFile=second_cluster.cafile)
    provider = factory(yaml.safe_dump({"clusters": [config]}).encode())
    try:
        with pytest.raises(ProxmoxTLSError, match="does not verify against caFile"):
            await v2(provider).instance_exists(node("node-a"))
    finally:
        await provider.aclose()


async def test_a_hanging_guest_agent_fails_the_metadata_call(
    fakepve_server: FakePveServer, make: Make
) -> None:
    vm = fakepve_server.add_vm(100, "node-a", agent=agent_interfaces("10.0.0.5"))
    vm.agent_hangs = True
    with pytest.raises(TransientCloudError, match="got timeout"):
        await v2(make()).instance_metadata(node("node-a"))


async def test_a_slow_network_times_out_as_a_transient_error(
    fakepve_server: FakePveServer, make: Make
) -> None:
    fakepve_server.call(lambda: setattr(fakepve_server.pve, "time_scale", 1.0))
    fakepve_server.call(lambda: fakepve_server.pve.slow_network(2.0))
    with pytest.raises(TransientCloudError, match=r"no answer within 0\.3s"):
        await v2(make(requestTimeout="300ms")).instance_exists(node("node-a"))


# -- kube-ccm doctor ------------------------------------------------------------------


async def test_doctor_probes_each_cluster_and_the_tokens_privileges(
    fakepve_server: FakePveServer, second_cluster: FakePveServer, make: Make
) -> None:
    provider = make(fakepve_server, second_cluster)
    second_cluster.call(
        lambda: second_cluster.pve.grant(second_cluster.token_id, "/vms", "VM.Audit")
    )
    checks = await _self_probes(provider, 5.0)
    assert [(c.name, c.status) for c in checks] == [
        ("cloud proxmox cluster-1", "PASS"),
        ("cloud proxmox cluster-2", "WARN"),
    ]
    assert "PVE 9.0.10 at https://127.0.0.1:" in checks[0].detail
    assert "lacks VM.GuestAgent.Audit or VM.GuestAgent.Unrestricted on /vms" in checks[1].detail
    assert "--tokens kube-ccm@pve!ccm" in checks[1].fix

    # Through a composite, with HA zones: Sys.Audit on / is needed too.
    composite = CompositeProvider(
        {"proxmox": make(second_cluster, zone="haGroup")}, {"instances": "proxmox"}
    )
    (check,) = await _self_probes(composite, 5.0)
    assert check.status == "FAIL"
    assert "lacks Sys.Audit on /: zone: haGroup" in check.detail


async def test_doctor_says_what_to_fix_for_a_refused_token(
    fakepve_server: FakePveServer, make: Make
) -> None:
    fakepve_server.call(fakepve_server.pve.apitokens.clear)
    (check,) = await _self_probes(make(), 5.0)
    assert check.status == "FAIL"
    assert "kube-ccm@pve!ccm" in check.detail
    assert "refused" in check.detail
    assert check.fix.startswith("check tokenId and the secret in tokenSecret")


# -- the cloud-config and parsing -------------------------------------------------


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"clusters": []}, "`clusters` is empty"),
        (
            {
                "clusters": [
                    {
                        "region": "r",
                        "url": "http://pve:8006",
                        "tokenId": "a@pve!t",
                        "tokenSecret": {"env": "X"},
                    }
                ]
            },
            "is not an https URL",
        ),
        (
            {
                "clusters": [
                    {
                        "region": "r",
                        "url": "https://pve:8006",
                        "tokenId": "root",
                        "tokenSecret": {"env": "X"},
                    }
                ]
            },
            "user@realm!tokenname",
        ),
        (
            {
                "clusters": [
                    {
                        "region": "r",
                        "url": "https://pve:8006/x",
                        "tokenId": "a@pve!t",
                        "tokenSecret": {"env": "X"},
                    }
                ]
            },
            "the path must be empty or /api2/json",
        ),
        (
            {
                "clusters": [
                    {
                        "region": "r",
                        "url": "https://p",
                        "tokenId": "a@pve!t",
                        "tokenSecret": "s3cret",
                    }
                ]
            },
            "tokenSecret",
        ),
        ({"clusters": [], "insecure": True}, "unknown field `insecure`"),
    ],
)
def test_bad_cloud_configs_say_what_to_fix(document: dict[str, Any], message: str) -> None:
    with pytest.raises(
        ProxmoxConfigError if "unknown" not in message else Exception, match=message
    ):
        load_config(yaml.safe_dump(document))


def test_the_url_gets_the_api_path_and_the_default_port() -> None:
    config = load_config(
        yaml.safe_dump(
            {
                "clusters": [
                    {
                        "region": "r",
                        "url": "https://pve1.example",
                        "tokenId": "a@pve!t",
                        "tokenSecret": {"env": "PVE_SECRET"},
                    }
                ]
            }
        )
    )
    assert config.clusters[0].api == "https://pve1.example:8006/api2/json"


def test_smbios_fields_and_addresses_parse_as_pve_writes_them() -> None:
    sku = "c2t1LWxhcmdl"  # base64 of "sku-large"
    config = {"smbios1": f"uuid={UUID_A.upper()},sku={sku},base64=1"}
    assert smbios(config, "uuid") == UUID_A
    assert smbios(config, "sku") == "sku-large"
    assert cloud_init_addresses(
        {"ipconfig1": "ip6=2001:db8::7/64", "ipconfig0": "ip=dhcp", "ipconfig2": "ip=10.1.0.3/16"}
    ) == ["2001:db8::7", "10.1.0.3"]
    assert agent_addresses({"result": agent_interfaces("192.0.2.4", name="docker0")}) == []


# -- ticket login ---------------------------------------------------------------------


async def test_a_ticket_login_is_renewed_when_pve_forgets_it(
    fakepve_server: FakePveServer, tmp_path: Path
) -> None:
    fakepve_server.add_vm(100, "node-a")
    password = tmp_path / "password"
    password.write_text("secret\n")  # fakepve's root@pam password
    cluster = fakepve_server.cluster_config()
    del cluster["tokenId"], cluster["tokenSecret"]
    cluster.update(username="root@pam", password={"file": str(password)})
    provider = factory(yaml.safe_dump({"clusters": [cluster], "cacheTTL": "0s"}).encode())
    known = node("node-a", provider_id="proxmox://cluster-1/100")
    try:
        assert await v2(provider).instance_exists(known)
        assert await v2(provider).instance_exists(known)
        assert provider.client("cluster-1").logins == 1
        fakepve_server.call(fakepve_server.pve.revoke_tickets)  # an expired ticket
        assert await v2(provider).instance_exists(known)
        assert provider.client("cluster-1").logins == 2
        password.write_text("wrong\n")
        fakepve_server.call(fakepve_server.pve.revoke_tickets)
        with pytest.raises(ProxmoxAuthError, match=r"ticket login of root@pam .*was refused"):
            await v2(provider).instance_exists(known)
    finally:
        await provider.aclose()


def test_a_cluster_needs_a_token_or_a_login_not_both() -> None:
    base = {"region": "r", "url": "https://pve:8006"}
    with pytest.raises(ProxmoxConfigError, match="needs tokenId and tokenSecret"):
        load_config(yaml.safe_dump({"clusters": [base]}))
    both = {**base, "tokenId": "a@pve!t", "tokenSecret": {"env": "X"}, "username": "a@pve"}
    with pytest.raises(ProxmoxConfigError, match="not both"):
        load_config(yaml.safe_dump({"clusters": [both]}))


# -- the Go CCM's keys (issue 39 item 6) --------------------------------------------------

GO_CCM_DOCUMENTED = """\
features:
  provider: capmox
  network:
    mode: qemu
    ipv6_support_disabled: true
    external_ip_cidrs: '192.168.0.0/16,2001:db8:85a3::8a2e:370:7334/112,!fd00:1234:5678::/64'
    ip_sort_order: '192.168.0.0/16,2001:db8:85a3::8a2e:370:7334/112'
  ha_group: true
  force_update_labels: true
clusters:
  - url: https://cluster-api-1.exmple.com:8006/api2/json
    insecure: false
    token_id: "kubernetes-csi@pve!csi"
    token_secret: "secret"
    region: Region-1
"""
"""sergelogvinov/proxmox-cloud-controller-manager v0.13.1: docs/config.md's example, with
``features.network`` as its code reads it (``pkg/config/config.go``: a mapping of
``mode``, ``external_ip_cidrs``, ``ipv6_support_disabled``, ``ip_sort_order``) and
``force_update_labels``."""


def test_the_go_ccms_config_as_written_is_refused_naming_every_key_and_its_equivalent() -> None:
    with pytest.raises(InvalidCloudConfigError) as error:
        load_config(GO_CCM_DOCUMENTED)
    message = str(error.value)
    for told in (
        "`provider`: `providerIDFormat`: vmid for its default, uuid for capmox",
        "`ha_group`: `zone: haGroup` for true",
        "`force_update_labels`: not offered: remove it",
        "its `external_ip_cidrs` is `externalIPCIDRs`",
        "`ipv6_support_disabled` is `ipv6SupportDisabled`",
        "`mode` and `ip_sort_order` are not offered: remove them",
        "`insecure` (not offered: TLS is always verified; give `caFile`",
        "`token_id` (write `tokenId`)",
        "`token_secret` (write `tokenSecret: {file: PATH}`",
        "in `clusters[0]`",
    ):
        assert told in message, (told, message)


def test_the_token_id_may_come_from_a_file_as_the_go_ccms_token_id_file(tmp_path: Path) -> None:
    token_id = tmp_path / "token_id"
    token_id.write_text("kube-ccm@pve!ccm\n")
    cluster = {"region": "r", "url": "https://p", "tokenSecret": {"file": str(tmp_path / "s")}}
    config = load_config(yaml.safe_dump({"clusters": [{**cluster, "tokenIdFile": str(token_id)}]}))
    assert config.clusters[0].token_id == "kube-ccm@pve!ccm"
    for extra, said in (
        ({"tokenIdFile": str(tmp_path / "missing")}, "tokenIdFile"),
        ({"tokenIdFile": str(token_id), "tokenId": "a@pve!t"}, "not both"),
    ):
        with pytest.raises(ProxmoxConfigError, match=said):
            load_config(yaml.safe_dump({"clusters": [{**cluster, **extra}]}))
    token_id.write_text("not-a-token\n")
    with pytest.raises(ProxmoxConfigError, match="tokenIdFile's content"):
        load_config(yaml.safe_dump({"clusters": [{**cluster, "tokenIdFile": str(token_id)}]}))


@pytest.mark.parametrize(
    ("cidrs", "said"),
    [(["!fd00::/64"], "leave out the `!` entries"), (["10.0.0.0/33"], "not a CIDR")],
)
def test_bad_external_ip_cidrs_say_what_to_fix(cidrs: list[str], said: str) -> None:
    cluster = {"region": "r", "url": "https://p", "tokenId": "a@pve!t", "tokenSecret": {"env": "X"}}
    with pytest.raises(ProxmoxConfigError, match=said):
        load_config(yaml.safe_dump({"clusters": [cluster], "externalIPCIDRs": cidrs}))


async def test_external_ip_cidrs_make_external_ips_and_ipv6_can_be_left_out(
    fakepve_server: FakePveServer, make: Make
) -> None:
    """The Go CCM's ``external_ip_cidrs`` and ``ipv6_support_disabled``."""
    agent = agent_interfaces("10.0.0.5", "203.0.113.7", "2001:db8::5")
    fakepve_server.add_vm(100, "node-a", agent=agent)
    provider = make(externalIPCIDRs=["203.0.113.0/24", "2001:db8::/64"])
    meta = await v2(provider).instance_metadata(node("node-a"))
    assert meta is not None
    assert [(a.type, a.address) for a in meta.node_addresses] == [
        ("InternalIP", "10.0.0.5"),
        ("ExternalIP", "203.0.113.7"),
        ("ExternalIP", "2001:db8::5"),
        ("Hostname", "node-a"),
    ]
    meta = await v2(make(ipv6SupportDisabled=True)).instance_metadata(node("node-a"))
    assert meta is not None
    assert [a.address for a in meta.node_addresses] == ["10.0.0.5", "203.0.113.7", "node-a"]


# -- the kubelet serving certificate approver's questions ----------------------


async def test_a_vm_belongs_to_the_node_of_its_name_and_a_uuid_is_no_proof(
    fakepve_server: FakePveServer, make: Make
) -> None:
    fakepve_server.add_vm(100, "node-a", uuid=UUID_A, agent=agent_interfaces("10.0.0.5"))
    fakepve_server.add_vm(101, "vm-101", uuid=UUID_B, agent=agent_interfaces("10.0.0.6"))
    instances = v2(make())
    assert instances.authoritative is True

    meta = await instances.instance_metadata(node("node-a", provider_id="proxmox://cluster-1/100"))
    assert meta is not None
    assert await instances.instance_belongs_to("node-a", meta) is True
    assert await instances.instance_belongs_to("node-a.example.com", meta) is True
    assert await instances.instance_belongs_to("node-b", meta) is False
    # Found by the systemUUID the node reports (its own word): not proof for the approver.
    by_uuid = await instances.instance_metadata(node("worker-7", uuid=UUID_B))
    assert by_uuid is not None
    assert await instances.instance_belongs_to("worker-7", by_uuid) is False


async def test_without_the_nodes_annotation_a_vm_that_tells_no_address_reports_none(
    fakepve_server: FakePveServer, make: Make
) -> None:
    """The approver asks with a Node that has no annotations: the kubelet's --node-ip
    (``alpha.kubernetes.io/provided-node-ip``, the node's own word) is not reported."""
    fakepve_server.add_vm(100, "node-a", config={"ipconfig0": "ip=dhcp"})  # no agent
    meta = await v2(make()).instance_metadata(node("node-a", provider_id="proxmox://cluster-1/100"))
    assert meta is not None
    assert [(a.type, a.address) for a in meta.node_addresses] == [("Hostname", "node-a")]
