"""ippool's ``announcer`` (issue 28): the kube-vip annotation only when kube-vip
announces; and MetalLB's ``AllocationFailed`` reason on every refusal."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kube_ccm.api.objects import ObjectMeta, Service, ServicePort, ServiceSpec
from kube_ccm.cloudprovider import ApiError
from kube_ccm.providers.ippool import (
    ADDRESSES_ANNOTATION,
    IPPoolConfigError,
    IPPoolError,
    IPPoolProvider,
    factory,
    load_config,
)
from kube_ccm.providers.ippool.annotations import ALLOCATED_ANNOTATION, own_annotation_write
from kube_ccm.providers.ippool.loadbalancer import ALLOCATION_FAILED_REASON
from kube_ccm.runtime.resources import IP_ADDRESSES
from kube_ccm.testing.events import FakeEventRecorder
from kube_ccm.testing.fakeapi import FakeApiServer, FakeClientBuilder

STATUS = "announcer: status"
CROSS = "ippool.kube-ccm.io/sharing-cross-namespace"
KEY = "ippool.kube-ccm.io/sharing-key"


def configmap(fake: FakeApiServer, **data: str) -> None:
    fake.put_object(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "kubevip", "namespace": "kube-system"},
            "data": {k.replace("_", "-"): v for k, v in data.items()},
        }
    )


async def provider(
    fake: FakeApiServer, config: str = ""
) -> tuple[IPPoolProvider, FakeEventRecorder]:
    p = factory(config.encode() or None)
    await p.initialize(FakeClientBuilder(fake), asyncio.Event())
    recorder = FakeEventRecorder()
    p.recorder = recorder
    return p, recorder


def service(
    fake: FakeApiServer,
    name: str,
    namespace: str = "default",
    *,
    ports: tuple[int, ...] = (80,),
    annotations: dict[str, str] | None = None,
) -> Service:
    """The Service as the service controller's informer has it: the API's copy."""
    path = f"/api/v1/namespaces/{namespace}/services/{name}"
    stored = fake.object(path)
    if stored is None or annotations is not None:
        stored = fake.put_object(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "uid": f"uid-{namespace}-{name}",
                    "annotations": annotations or {},
                },
                "spec": {"type": "LoadBalancer"},
            }
        )
    meta = stored["metadata"]
    assert isinstance(meta, dict)
    return Service(
        metadata=ObjectMeta(
            name=name,
            namespace=namespace,
            uid=str(meta["uid"]),
            annotations=dict(meta.get("annotations") or {}),
        ),
        spec=ServiceSpec(
            type="LoadBalancer", ports=tuple(ServicePort(protocol="TCP", port=n) for n in ports)
        ),
    )


def annotations_of(fake: FakeApiServer, name: str, namespace: str = "default") -> dict[str, str]:
    stored = fake.object(f"/api/v1/namespaces/{namespace}/services/{name}")
    assert stored is not None
    meta = stored["metadata"]
    assert isinstance(meta, dict)
    return dict(meta.get("annotations") or {})


async def ips(p: IPPoolProvider, svc: Service) -> list[str]:
    status = await p.load_balancer().ensure_load_balancer("kubernetes", svc, [])
    return [i.ip for i in status.ingress]


def service_writes(fake: FakeApiServer) -> int:
    return sum(1 for r in fake.writes() if "/services/" in r.path)


# -- the setting ----------------------------------------------------------------------


def test_the_announcer_is_kube_vip_unless_set_to_status_and_nothing_else_is_taken() -> None:
    assert load_config(None).announcer == "kube-vip"
    assert load_config(None).writes_annotation
    assert not load_config(STATUS).writes_annotation
    assert load_config("announcer: kube-vip").writes_annotation
    with pytest.raises(IPPoolConfigError) as error:
        load_config("announcer: metallb")
    message = str(error.value)
    assert "`announcer` is 'metallb'" in message
    assert "kube-vip" in message
    assert "status.loadBalancer.ingress" in message


# -- announcer: status ----------------------------------------------------------------


async def test_with_the_status_announcer_a_service_costs_no_annotation_write() -> None:
    fake = FakeApiServer()
    configmap(fake, range_global="192.0.2.10-192.0.2.20")
    p, _ = await provider(fake, STATUS)

    assert await ips(p, service(fake, "web")) == ["192.0.2.10"]
    assert await ips(p, service(fake, "web")) == ["192.0.2.10"]  # idempotent

    assert service_writes(fake) == 0
    assert annotations_of(fake, "web") == {}
    assert [o["metadata"]["name"] for o in fake.objects(IP_ADDRESSES.path())] == ["192.0.2.10"]


async def test_the_default_announcer_still_writes_kube_vips_annotation_once() -> None:
    fake = FakeApiServer()
    configmap(fake, range_global="192.0.2.10-192.0.2.20")
    p, _ = await provider(fake)

    assert await ips(p, service(fake, "web")) == ["192.0.2.10"]
    assert await ips(p, service(fake, "web")) == ["192.0.2.10"]

    assert service_writes(fake) == 1
    assert annotations_of(fake, "web")[ADDRESSES_ANNOTATION] == "192.0.2.10"


async def test_moving_to_the_status_announcer_removes_what_ippool_wrote() -> None:
    fake = FakeApiServer()
    configmap(fake, range_global="192.0.2.10-192.0.2.20")
    kube_vip, _ = await provider(fake)
    assert await ips(kube_vip, service(fake, "given")) == ["192.0.2.10"]
    asked = {ADDRESSES_ANNOTATION: "192.0.2.15"}
    assert await ips(kube_vip, service(fake, "asked", annotations=asked)) == ["192.0.2.15"]
    assert annotations_of(fake, "given")[ALLOCATED_ANNOTATION] == "192.0.2.10"
    theirs = {"metallb.io/loadBalancerIPs": "192.0.2.16"}
    assert await ips(kube_vip, service(fake, "pinned", annotations=theirs)) == ["192.0.2.16"]

    status, _ = await provider(fake, STATUS)  # the daemon restarted with announcer: status
    before = service_writes(fake)
    given = service(fake, "given")
    assert await ips(status, given) == ["192.0.2.10"]
    assert annotations_of(fake, "given") == {}
    # kube-vip's annotation, once ippool recorded it as given, is ippool's: it goes,
    # and the Service keeps its address (its claim), as it would without the request.
    assert await ips(status, service(fake, "asked")) == ["192.0.2.15"]
    assert annotations_of(fake, "asked") == {}
    assert await ips(status, service(fake, "asked")) == ["192.0.2.15"]
    # Another project's request is the user's alone, and stays.
    assert await ips(status, service(fake, "pinned")) == ["192.0.2.16"]
    assert annotations_of(fake, "pinned") == theirs
    assert service_writes(fake) - before == 3
    # That tidying is the provider's own write: no second sync for it.
    own = status.load_balancer().own_annotation_write
    assert own(given.metadata.annotations, {})


@pytest.mark.parametrize(("config", "requests"), [("", 2), (STATUS, 0)])
async def test_a_deleted_service_is_read_and_patched_only_when_ippool_wrote_to_it(
    config: str, requests: int
) -> None:
    fake = FakeApiServer()
    configmap(fake, range_global="192.0.2.10-192.0.2.20")
    p, _ = await provider(fake, config)
    svc = service(fake, "web")
    assert await ips(p, svc) == ["192.0.2.10"]
    svc = service(fake, "web")
    before = len(fake.requests)

    await p.load_balancer().ensure_load_balancer_deleted("kubernetes", svc)

    assert fake.objects(IP_ADDRESSES.path()) == []
    done = [r for r in fake.requests[before:] if "/services/" in r.path]
    assert len(done) == requests  # kube-vip: its annotation read fresh and removed
    assert annotations_of(fake, "web") == {}


def test_own_writes_under_each_announcer() -> None:
    written = {ADDRESSES_ANNOTATION: "192.0.2.10", ALLOCATED_ANNOTATION: "192.0.2.10"}
    marked = {ALLOCATED_ANNOTATION: ""}  # an evicted guest, under announcer: status
    for writes in (True, False):
        assert own_annotation_write({}, written, writes_annotation=writes)
        # The eviction mark written: the guest must be synced again.
        assert not own_annotation_write({}, marked, writes_annotation=writes)
        assert not own_annotation_write(written, marked, writes_annotation=writes)
        # A user's edit is never the provider's.
        assert not own_annotation_write(
            written, {**written, ADDRESSES_ANNOTATION: "192.0.2.11"}, writes_annotation=writes
        )
        assert not own_annotation_write(marked, {"x": "y"}, writes_annotation=writes)
    # Back to kube-vip, the mark gives way to what is given: no second sync.
    assert own_annotation_write(marked, written, writes_annotation=True)
    # Under status the mark goes once the guest has an address again: no second sync.
    assert own_annotation_write(marked, {}, writes_annotation=False)
    # Both removed: under kube-vip an eviction (synced again); under status, ippool
    # tidying up what an earlier run wrote.
    assert not own_annotation_write(written, {}, writes_annotation=True)
    assert own_annotation_write(written, {}, writes_annotation=False)
    asked = {ADDRESSES_ANNOTATION: "192.0.2.15", ALLOCATED_ANNOTATION: "192.0.2.10"}
    kept = {ADDRESSES_ANNOTATION: "192.0.2.15"}
    assert own_annotation_write(asked, kept, writes_annotation=False)
    assert not own_annotation_write(asked, {}, writes_annotation=False)


async def test_an_evicted_guest_is_marked_so_it_is_synced_again_then_unmarked() -> None:
    fake = FakeApiServer()
    configmap(fake, range_global="192.0.2.10-192.0.2.20")
    p, _ = await provider(fake, STATUS)
    b1 = service(fake, "b1", "team-b", ports=(443,), annotations={KEY: "web", CROSS: "team-a"})
    assert await ips(p, b1) == ["192.0.2.10"]
    a1 = service(fake, "a1", "team-a", annotations={KEY: "web", CROSS: "team-b"})
    assert await ips(p, a1) == ["192.0.2.10"]
    assert service_writes(fake) == 0

    # team-b (the owner) takes port 80 too: its guest gives way, and is marked.
    assert await ips(p, service(fake, "b1", "team-b", ports=(443, 80))) == ["192.0.2.10"]
    marked = annotations_of(fake, "a1", "team-a")
    assert marked == {KEY: "web", CROSS: "team-b", ALLOCATED_ANNOTATION: ""}
    assert not p.load_balancer().own_annotation_write(a1.metadata.annotations, marked)

    # Its next sync gives it an address of its own and takes the mark away.
    assert await ips(p, service(fake, "a1", "team-a")) == ["192.0.2.11"]
    assert annotations_of(fake, "a1", "team-a") == {KEY: "web", CROSS: "team-b"}


async def test_a_refused_request_under_the_status_announcer_blames_no_kube_vip() -> None:
    fake = FakeApiServer()
    configmap(fake, range_global="192.0.2.10-192.0.2.20")
    p, _ = await provider(fake, STATUS)
    with pytest.raises(IPPoolError) as error:
        await ips(p, service(fake, "x", annotations={ADDRESSES_ANNOTATION: "10.99.0.1"}))
    message = str(error.value)
    assert "not in a pool serving Service default/x " in message
    assert "kube-vip" not in message.replace(ADDRESSES_ANNOTATION, "")
    assert f"remove {ADDRESSES_ANNOTATION}" in message


# -- AllocationFailed -----------------------------------------------------------------


@pytest.mark.parametrize("config", ["", STATUS])
async def test_every_refusal_is_also_metallbs_allocation_failed(config: str) -> None:
    fake = FakeApiServer()
    configmap(fake, range_global="192.0.2.10-192.0.2.10")
    p, recorder = await provider(fake, config)
    assert await ips(p, service(fake, "first")) == ["192.0.2.10"]
    assert recorder.events == []  # success: nothing

    with pytest.raises(IPPoolError) as exhausted:
        await ips(p, service(fake, "second"))
    asked = {"metallb.io/loadBalancerIPs": "192.0.2.10"}
    with pytest.raises(IPPoolError) as taken:
        await ips(p, service(fake, "third", annotations=asked))

    failed = [e for e in recorder.events if e.reason == ALLOCATION_FAILED_REASON]
    assert [(e.ref.name, e.type) for e in failed] == [("second", "Warning"), ("third", "Warning")]
    # MetalLB's words, then ours: the same text as the SyncLoadBalancerFailed Event.
    assert failed[0].message == f'Failed to allocate IP for "default/second": {exhausted.value}'
    assert failed[1].message == f'Failed to allocate IP for "default/third": {taken.value}'
    assert failed[0].ref.uid == "uid-default-second"


async def test_an_api_error_is_no_allocation_failure() -> None:
    fake = FakeApiServer()
    configmap(fake, range_global="192.0.2.10-192.0.2.20")
    p, recorder = await provider(fake)
    fake.fail_next("GET", "/api/v1/namespaces/kube-system/configmaps/kubevip")
    with pytest.raises(ApiError) as error:
        await ips(p, service(fake, "web"))
    assert error.value.status == 500
    assert recorder.events == []  # the service controller's Event tells of it


async def test_a_guest_evicted_while_it_writes_its_annotation_takes_it_back_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The owning namespace evicts a guest between the guest's claims and its
    annotation write (the eviction's own removal read the Service before that write):
    the guest must not be left announcing an address it no longer holds."""
    fake = FakeApiServer()
    configmap(fake, range_global="192.0.2.10-192.0.2.20")
    p, _ = await provider(fake)
    balancer = p.load_balancer()
    owner = {KEY: "web", CROSS: "team-a"}
    assert await ips(p, service(fake, "b1", "team-b", ports=(443,), annotations=owner)) == [
        "192.0.2.10"
    ]
    guest = service(fake, "a1", "team-a", annotations={KEY: "web", CROSS: "team-b"})
    assert await ips(p, guest) == ["192.0.2.10"]
    guest = service(fake, "a1", "team-a")  # with the annotation it now has

    write = balancer._annotate
    raced = False

    async def evicted_first(svc: Service, addresses: Any, evicted: bool = False) -> None:
        nonlocal raced
        if svc.metadata.name == "a1" and addresses and not raced:
            raced = True  # the owner takes port 80 now, and removes a1's annotation
            await ips(p, service(fake, "b1", "team-b", ports=(443, 80)))
            assert ADDRESSES_ANNOTATION not in annotations_of(fake, "a1", "team-a")
            # This sync was started by the eviction's first removal (it sees no
            # annotation) and decided before the claim changed hands: it writes.
            svc = service(fake, "a1", "team-a")
        await write(svc, addresses, evicted)

    monkeypatch.setattr(balancer, "_annotate", evicted_first)
    with pytest.raises(IPPoolError, match=r"lost 192\.0\.2\.10 while announcing it; will retry"):
        await ips(p, guest)
    assert raced
    assert ADDRESSES_ANNOTATION not in annotations_of(fake, "a1", "team-a")
    monkeypatch.undo()
    # The retry: an address of its own.
    assert await ips(p, service(fake, "a1", "team-a")) == ["192.0.2.11"]
    assert annotations_of(fake, "a1", "team-a")[ADDRESSES_ANNOTATION] == "192.0.2.11"
