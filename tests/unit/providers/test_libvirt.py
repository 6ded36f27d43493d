"""The libvirt provider against libvirt's own test driver (``test:///default``, a real
driver with an in-memory hypervisor, in this process), and its cloud-config.

The daemon-level lifecycle on libvirtd over a socket is in
``tests/integration/test_daemon_libvirt.py``.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import uuid as uuidlib
from collections.abc import Iterator
from typing import Any

import pytest

from kube_ccm.api.objects import Node, NodeSpec, NodeStatus, NodeSystemInfo, ObjectMeta
from kube_ccm.cloudprovider import InstanceNotFoundError
from kube_ccm.providers.libvirt import (
    METADATA_NAMESPACE,
    LibvirtConfigError,
    LibvirtError,
    LibvirtProvider,
    LibvirtUnavailableError,
    factory,
    load_config,
    parse_provider_id,
)
from kube_ccm.testing.fakeapi import FakeApiServer, FakeClientBuilder


def _libvirt() -> Any:
    try:
        return importlib.import_module("libvirt")
    except ImportError:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("CI must install the libvirt extra (make test does)")
        pytest.skip("libvirt's Python bindings are not installed: pip install -e '.[libvirt]'")


HOST = "hosts: [{uri: 'test:///default', name: hv1, zone: rack-1, region: dc-1}]\n"


@pytest.fixture
def conn() -> Iterator[Any]:
    """A connection to the in-process test hypervisor; it keeps its state alive."""
    libvirt = _libvirt()
    connection = libvirt.open("test:///default")
    yield connection
    for dom in connection.listAllDomains():
        if dom.name().startswith("kc-"):
            if dom.isActive():
                dom.destroy()
            dom.undefine()
    connection.close()


def define(conn: Any, name: str, *, vcpus: int = 2, mib: int = 2048, start: bool = True) -> Any:
    uuid = str(uuidlib.uuid4())
    dom = conn.defineXML(
        f"""<domain type='test'><name>{name}</name><uuid>{uuid}</uuid>
        <memory unit='MiB'>{mib}</memory><vcpu>{vcpus}</vcpu><os><type>hvm</type></os>
        <devices><interface type='network'><source network='default'/></interface></devices>
        </domain>"""
    )
    if start:
        dom.create()
    return dom


def node(name: str, provider_id: str = "", system_uuid: str = "") -> Node:
    return Node(
        metadata=ObjectMeta(name=name, uid=f"uid-{name}"),
        spec=NodeSpec(provider_id=provider_id),
        status=NodeStatus(
            node_info=NodeSystemInfo(system_uuid=system_uuid) if system_uuid else None
        ),
    )


def provider(config: str = HOST) -> LibvirtProvider:
    _libvirt()
    return factory(config.encode())


# -- lifecycle on the test driver ---------------------------------------------------


async def test_a_running_domain_gives_the_node_its_id_type_zone_and_addresses(conn: Any) -> None:
    dom = define(conn, "kc-a", vcpus=4, mib=8192)
    p = provider()
    v2 = p.instances_v2()
    assert v2 is not None
    meta = await v2.instance_metadata(node("kc-a"))
    assert meta is not None
    assert meta.provider_id == f"libvirt://hv1/{dom.UUIDString()}"
    assert meta.instance_type == "vcpu4-8192mib"
    assert (meta.zone, meta.region) == ("rack-1", "dc-1")
    internal = [a.address for a in meta.node_addresses if a.type == "InternalIP"]
    assert internal, meta.node_addresses  # the test driver's leases and agent answer
    assert ("Hostname", "kc-a") in [(a.type, a.address) for a in meta.node_addresses]
    assert await v2.instance_exists(node("kc-a")) is True
    assert await v2.instance_shutdown(node("kc-a")) is False
    p.close()


async def test_shut_off_is_shutdown_and_undefined_is_gone(conn: Any) -> None:
    dom = define(conn, "kc-b")
    by_id = node("kc-b", provider_id=f"libvirt://hv1/{dom.UUIDString()}")
    p = provider()
    v2 = p.instances_v2()
    assert v2 is not None
    dom.destroy()
    assert await v2.instance_exists(by_id) is True  # a stopped instance still exists
    assert await v2.instance_shutdown(by_id) is True
    meta = await v2.instance_metadata(by_id)
    assert meta is not None
    assert [a.type for a in meta.node_addresses] == ["Hostname"]  # no addresses when off
    dom.undefine()
    assert await v2.instance_exists(by_id) is False
    assert await v2.instance_exists(node("kc-b")) is False
    with pytest.raises(InstanceNotFoundError, match="no libvirt domain for Node kc-b"):
        await v2.instance_metadata(node("kc-b"))
    p.close()


async def test_the_instance_type_can_come_from_the_domains_metadata(conn: Any) -> None:
    libvirt = _libvirt()
    tagged = define(conn, "kc-c")
    tagged.setMetadata(
        libvirt.VIR_DOMAIN_METADATA_ELEMENT, '<instance type="gold"/>', "kc", METADATA_NAMESPACE, 0
    )
    define(conn, "kc-d", vcpus=1, mib=512)
    p = provider(HOST + "instanceTypeFrom: metadata\n")
    v2 = p.instances_v2()
    assert v2 is not None
    tagged_meta = await v2.instance_metadata(node("kc-c"))
    untagged_meta = await v2.instance_metadata(node("kc-d"))
    assert tagged_meta is not None
    assert untagged_meta is not None
    assert tagged_meta.instance_type == "gold"
    assert untagged_meta.instance_type == "vcpu1-512mib"  # falls back to resources
    p.close()


async def test_nodes_map_by_system_uuid_when_configured(conn: Any) -> None:
    dom = define(conn, "kc-e")
    p = provider(HOST + "nodeMapping: systemUUID\n")
    v2 = p.instances_v2()
    assert v2 is not None
    meta = await v2.instance_metadata(node("other-name", system_uuid=dom.UUIDString().upper()))
    assert meta is not None
    assert meta.provider_id.endswith(dom.UUIDString())
    with pytest.raises(LibvirtError, match=r"no status\.nodeInfo\.systemUUID"):
        await v2.instance_exists(node("kc-e"))
    p.close()


async def test_a_domain_on_two_hosts_is_an_error_not_a_guess(conn: Any) -> None:
    define(conn, "kc-f")
    two = "hosts: [{uri: 'test:///default', name: hv1}, {uri: 'test:///default', name: hv2}]\n"
    p = provider(two)
    v2 = p.instances_v2()
    assert v2 is not None
    with pytest.raises(LibvirtError, match="several hosts"):
        await v2.instance_metadata(node("kc-f"))
    p.close()


# -- never a wrong "gone" ------------------------------------------------------------


async def test_an_unreachable_host_is_an_error_never_a_missing_instance(
    conn: Any, tmp_path: Any
) -> None:
    dead = f"test+unix:///default?socket={tmp_path}/no-such-socket"
    p = provider(f"hosts: [{{uri: '{dead}', name: hv9}}]\n")
    await p.initialize(FakeClientBuilder(FakeApiServer()), asyncio.Event())  # logs, does not stop
    v2 = p.instances_v2()
    assert v2 is not None
    with pytest.raises(LibvirtError, match="cannot connect to libvirt host hv9"):
        await v2.instance_exists(node("kc-g"))
    with pytest.raises(LibvirtError, match="cannot connect"):
        await v2.instance_exists(node("kc-g", provider_id="libvirt://hv9/" + str(uuidlib.uuid4())))
    p.close()


async def test_one_host_down_makes_absence_unsure_but_presence_elsewhere_counts(
    conn: Any, tmp_path: Any
) -> None:
    define(conn, "kc-h")
    dead = f"test+unix:///default?socket={tmp_path}/no-such-socket"
    p = provider(f"hosts: [{{uri: 'test:///default', name: hv1}}, {{uri: '{dead}', name: hv2}}]\n")
    v2 = p.instances_v2()
    assert v2 is not None
    assert await v2.instance_exists(node("kc-h")) is True  # found on hv1
    with pytest.raises(LibvirtError, match="hv2"):  # absent from hv1, hv2 unknown
        await v2.instance_exists(node("kc-nowhere"))
    p.close()


async def test_a_provider_id_on_an_unconfigured_host_is_an_error(conn: Any) -> None:
    p = provider()
    v2 = p.instances_v2()
    assert v2 is not None
    gone_elsewhere = node("kc-i", provider_id=f"libvirt://hv7/{uuidlib.uuid4()}")
    with pytest.raises(LibvirtError, match="not in the cloud-config's hosts"):
        await v2.instance_exists(gone_elsewhere)
    with pytest.raises(LibvirtError, match="libvirt://<host>/<domain-uuid>"):
        await v2.instance_exists(node("kc-i", provider_id="libvirt://hv1"))
    p.close()


async def test_a_renamed_domain_is_followed_by_uuid_and_reported_once(conn: Any) -> None:
    dom = define(conn, "kc-j", start=False)  # libvirt renames only inactive domains
    fake = FakeApiServer()
    p = provider()
    await p.initialize(FakeClientBuilder(fake), asyncio.Event())
    v2 = p.instances_v2()
    assert v2 is not None
    running = node("kc-j", provider_id=f"libvirt://hv1/{dom.UUIDString()}")
    dom.rename("kc-j-renamed", 0)
    for _ in range(3):
        meta = await v2.instance_metadata(running)
        assert meta is not None
        assert meta.provider_id == running.spec.provider_id
    assert await v2.instance_exists(running) is True
    await asyncio.sleep(0.05)
    events = [
        e
        for e in fake.objects("/api/v1/namespaces/default/events")
        if e["reason"] == "DomainRenamed"
    ]
    assert len(events) == 1, events
    assert "now named 'kc-j-renamed'" in events[0]["message"]
    assert events[0]["involvedObject"]["name"] == "kc-j"
    await p.aclose()


# -- configuration -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ("", "needs a --cloud-config naming its hosts"),
        ("hosts: []", "`hosts` is empty"),
        ("hosts: [{uri: 'not a uri'}]", "is not a libvirt URI"),
        ("hosts: [{uri: 'qemu:///system', name: 'Bad_Name'}]", "must be a DNS label"),
        ("hosts: [{uri: 'qemu:///system', zone: 'a b'}]", "zone 'a b' is not a valid label"),
        (
            "hosts: [{uri: 'qemu+ssh://hv/system'}, {uri: 'qemu+tls://hv/system'}]",
            "two hosts are named 'hv'",
        ),
        ("hosts: [{uri: 'qemu:///system'}]\nnodeMapping: mac", "nodeMapping"),
        ("hosts: [{uri: 'qemu:///system'}]\naddressSources: [dns]", "addressSources"),
        ("hosts: [{uri: 'qemu:///system'}]\naddressSources: []", "`addressSources` is empty"),
        ("hosts: [{uri: 'qemu:///system'}]\nmaxConcurrentCalls: 0", "`maxConcurrentCalls`"),
        ("hosts: [{uri: 'qemu:///system'}]\nhostz: 1", "hostz"),
        (
            "hosts: [{uri: 'qemu+ssh://hv/system', credentials: {file: /a, env: B}}]",
            "hosts[0].credentials",
        ),
        ("hosts: [{uri: 'qemu:///system'", "not valid YAML"),
    ],
)
def test_a_bad_cloud_config_says_what_to_fix(config: str, message: str) -> None:
    with pytest.raises(LibvirtConfigError) as caught:
        load_config(config)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_host_names_default_to_the_uris_host() -> None:
    config = load_config(
        "hosts: [{uri: 'qemu+ssh://ccm@HV1.example/system', username: ccm,"
        " credentials: {env: HV1_PASSWORD}}, {uri: 'qemu:///system'}]"
    )
    assert [h.name for h in config.hosts] == ["hv1.example", "local"]
    assert config.hosts[0].credentials is not None
    assert config.hosts[0].credentials.env == "HV1_PASSWORD"
    assert config.address_sources == ("agent", "lease")


def test_provider_ids_parse_strictly() -> None:
    assert parse_provider_id("libvirt://hv1/ABC-def") == ("hv1", "abc-def")
    for bad in ("aws://hv1/x", "libvirt://hv1", "libvirt:///x", "libvirt://hv1/x/y"):
        with pytest.raises(ValueError, match="providerID"):
            parse_provider_id(bad)


def test_without_the_bindings_the_error_says_how_to_install_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = importlib.import_module

    def no_libvirt(name: str, package: str | None = None) -> Any:
        if name == "libvirt":
            raise ImportError("No module named 'libvirt'")
        return real(name, package)

    monkeypatch.setattr(importlib, "import_module", no_libvirt)
    with pytest.raises(LibvirtUnavailableError, match=r"kube-ccm\[libvirt\]"):
        factory(HOST.encode())


# -- the kubelet serving certificate approver's questions ---------------------------


async def test_a_domain_belongs_to_the_node_of_its_name_only(conn: Any) -> None:
    dom = define(conn, "kc-own")
    p = provider()
    v2 = p.instances_v2()
    assert v2 is not None
    assert v2.authoritative is True
    meta = await v2.instance_metadata(
        node("kc-own", provider_id=f"libvirt://hv1/{dom.UUIDString()}")
    )
    assert meta is not None
    assert await v2.instance_belongs_to("kc-own", meta) is True
    # Another Node whose providerID (set by itself) names this domain.
    assert await v2.instance_belongs_to("kc-other", meta) is False
    p.close()
