"""Kubelet serving CSRs: approved only when every check holds, denied when one can
never hold, left pending while the cloud may still change its answer."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
from collections.abc import AsyncIterator, Sequence

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from kube_ccm.api import wellknown as wk
from kube_ccm.api.objects import (
    CertificateSigningRequest,
    CertificateSigningRequestCondition,
    CertificateSigningRequestSpec,
    CertificateSigningRequestStatus,
    Node,
    NodeAddress,
    ObjectMeta,
    to_dict,
)
from kube_ccm.api.selectors import parse_selector
from kube_ccm.cloudprovider import (
    InstanceMetadata,
    InstanceNotFoundError,
    InstancesV2,
    NotImplementedByProviderError,
    Registry,
)
from kube_ccm.controllers.nodescope import EVERY_NODE, NodeScope
from kube_ccm.controllers.servingcerts import (
    KubeletServingCertApprover,
    LeftPendingError,
    RequestDeniedError,
    UntrustedInstancesError,
    Verdict,
    check_names,
    check_request,
    is_decided,
    require_authoritative,
)
from kube_ccm.providers.composite import build_composite
from kube_ccm.providers.ippool import factory as ippool_factory
from kube_ccm.providers.k3s import factory as k3s_factory
from kube_ccm.providers.k3s import rke2_factory
from kube_ccm.runtime.informer import Informer
from kube_ccm.runtime.resources import CERTIFICATE_SIGNING_REQUESTS
from kube_ccm.testing.fakeapi import FakeApiServer, ResourceType
from kube_ccm.testing.fakeprovider import FakeProvider
from kube_ccm.testing.waiting import eventually
from kube_ccm.testing.world import World, controller_world, node_object

KUBELET_USAGES = ("digital signature", "server auth")
CSR_TYPE = ResourceType(
    "certificates.k8s.io/v1",
    "certificatesigningrequests",
    "CertificateSigningRequest",
    namespaced=False,
    status=True,
)
EC_KEY = ec.generate_private_key(ec.SECP256R1())


def request_pem(
    cn: str = "system:node:n1",
    *,
    orgs: Sequence[str] = ("system:nodes",),
    dns: Sequence[str] = ("n1",),
    ips: Sequence[str] = ("10.0.0.1",),
    others: Sequence[x509.GeneralName] = (),
    extra_subject: Sequence[x509.NameAttribute[str]] = (),
    key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey = EC_KEY,
) -> bytes:
    """A PKCS#10 request as a kubelet builds it (crypto/x509 CreateCertificateRequest)."""
    subject = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    subject += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    builder = x509.CertificateSigningRequestBuilder().subject_name(
        x509.Name([*subject, *extra_subject])
    )
    names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    names += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    names += others
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


def csr(
    pem: bytes | None = None,
    *,
    name: str = "csr-1",
    username: str = "system:node:n1",
    groups: Sequence[str] = ("system:nodes", "system:authenticated"),
    usages: Sequence[str] = KUBELET_USAGES,
    signer: str = wk.SIGNER_KUBELET_SERVING,
    conditions: Sequence[str] = (),
) -> CertificateSigningRequest:
    return CertificateSigningRequest(
        metadata=ObjectMeta(name=name, uid=f"uid-{name}"),
        spec=CertificateSigningRequestSpec(
            request=request_pem() if pem is None else pem,
            signer_name=signer,
            usages=tuple(usages),
            username=username,
            groups=tuple(groups),
        ),
        status=CertificateSigningRequestStatus(
            conditions=tuple(
                CertificateSigningRequestCondition(type=c, status="True") for c in conditions
            )
        ),
    )


def denied_by(request: CertificateSigningRequest) -> str:
    with pytest.raises(RequestDeniedError) as caught:
        check_request(request)
    return caught.value.reason


def addresses(**by_type: str) -> tuple[NodeAddress, ...]:
    return tuple(
        NodeAddress(type=kind, address=a)
        for kind, joined in by_type.items()
        for a in joined.split(",")
    )


# -- checks 1-4: the request alone ------------------------------------------------------


def test_a_kubelets_request_on_an_ecdsa_key_passes_the_request_checks() -> None:
    request = check_request(csr())

    assert request.node_name == "n1"
    assert request.dns_names == ("n1",)
    assert request.ip_addresses == (ipaddress.ip_address("10.0.0.1"),)


def test_key_encipherment_is_accepted_as_kubelets_on_rsa_keys_ask_for_it() -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    request = csr(request_pem(key=key), usages=("key encipherment", *KUBELET_USAGES))

    assert check_request(request).node_name == "n1"


@pytest.mark.parametrize(
    ("username", "groups"),
    [
        ("system:serviceaccount:kube-system:default", ("system:serviceaccounts",)),
        ("alice", ("system:nodes",)),
        ("system:node:", ("system:nodes",)),
        ("system:node:n1", ("system:authenticated",)),
    ],
)
def test_a_requester_who_is_not_a_kubelet_is_denied(username: str, groups: tuple[str]) -> None:
    assert denied_by(csr(username=username, groups=groups)) == "requester"


@pytest.mark.parametrize(
    "pem",
    [
        request_pem(cn="system:node:n2"),
        request_pem(cn="n1"),
        request_pem(orgs=()),
        request_pem(orgs=("system:nodes", "system:masters")),
        request_pem(orgs=("system:masters",)),
        request_pem(
            extra_subject=[x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "x")],
        ),
    ],
    ids=["other-node", "bare-name", "no-org", "extra-org", "wrong-org", "extra-attribute"],
)
def test_a_subject_other_than_the_requesters_node_is_denied(pem: bytes) -> None:
    assert denied_by(csr(pem)) == "subject"


@pytest.mark.parametrize(
    "usages",
    [
        ("digital signature", "server auth", "client auth"),
        ("digital signature", "client auth"),
        ("server auth",),
        ("digital signature", "key encipherment"),
        ("digital signature", "server auth", "cert sign"),
        (),
    ],
)
def test_usages_other_than_a_kubelets_are_denied(usages: tuple[str, ...]) -> None:
    assert denied_by(csr(usages=usages)) == "usages"


@pytest.mark.parametrize(
    "others",
    [
        [x509.RFC822Name("kubelet@example.com")],
        [x509.UniformResourceIdentifier("spiffe://cluster/node/n1")],
    ],
    ids=["email", "uri"],
)
def test_subject_alt_names_other_than_dns_and_ip_are_denied(
    others: list[x509.GeneralName],
) -> None:
    assert denied_by(csr(request_pem(others=others))) == "subject_alt_names"


def test_a_request_without_any_dns_name_or_ip_is_denied() -> None:
    assert denied_by(csr(request_pem(dns=(), ips=()))) == "subject_alt_names"


@pytest.mark.parametrize(
    "pem",
    [
        b"not a request",
        b"-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n",
        request_pem() + request_pem(cn="system:node:n2"),
    ],
    ids=["garbage", "bad-der", "two-blocks"],
)
def test_a_request_that_is_not_one_pem_csr_is_denied(pem: bytes) -> None:
    assert denied_by(csr(pem)) == "request"


def test_a_request_whose_signature_does_not_verify_is_denied() -> None:
    good = x509.load_pem_x509_csr(request_pem())
    der = bytearray(good.public_bytes(serialization.Encoding.DER))
    der[-3] ^= 0x01  # inside the signature value
    forged = x509.load_der_x509_csr(bytes(der)).public_bytes(serialization.Encoding.PEM)

    assert denied_by(csr(forged)) == "request"


# -- checks 6-7: the names against the cloud's ----------------------------------------


def test_names_the_cloud_reports_are_approved() -> None:
    request = check_request(
        csr(request_pem(dns=("n1", "n1.internal.example"), ips=("10.0.0.1", "fd00::1")))
    )
    cloud = addresses(
        InternalIP="10.0.0.1,fd00::1", InternalDNS="N1.Internal.Example", Hostname="n1"
    )

    assert check_names(request, cloud).decision == "approve"


def test_the_nodes_own_name_is_allowed_though_the_cloud_reports_no_hostname() -> None:
    assert check_names(check_request(csr()), addresses(InternalIP="10.0.0.1")).decision == (
        "approve"
    )


def test_a_dns_name_that_is_not_the_nodes_is_denied() -> None:
    request = check_request(csr(request_pem(dns=("n1", "kubernetes.default"))))

    verdict = check_names(request, addresses(InternalIP="10.0.0.1", Hostname="n1"))

    assert (verdict.decision, verdict.reason) == ("deny", "dns_names")
    assert "kubernetes.default" in verdict.message


@pytest.mark.parametrize(
    ("dns", "ips", "reason"),
    [
        (("n1", "n2"), (), "dns_names"),  # another node's name
        (("n1", "localhost"), (), "dns_names"),
        (("n1", "*.n1"), (), "dns_names"),
        (("n1", "*.apps.example.com"), (), "dns_names"),
        (("n1", "kubernetes.default.svc"), (), "dns_names"),
        (("n1", "kubernetes.default.svc.cluster.local"), (), "dns_names"),
        (("n1",), ("10.0.0.2",), "ip_addresses"),  # another node's IP
        (("n1",), ("127.0.0.1",), "ip_addresses"),
        (("n1",), ("::1",), "ip_addresses"),
        (("n1",), ("::ffff:10.0.0.1",), "ip_addresses"),  # the Node's IP, IPv4-mapped
    ],
)
def test_names_the_cloud_does_not_report_for_the_instance_are_denied(
    dns: tuple[str, ...], ips: tuple[str, ...], reason: str
) -> None:
    """What held in the attack of issue 37, kept: only the cloud's names count."""
    request = check_request(csr(request_pem(dns=dns, ips=ips)))

    verdict = check_names(request, addresses(InternalIP="10.0.0.1", Hostname="n1"))

    assert (verdict.decision, verdict.reason) == ("deny", reason)


def test_an_ip_the_cloud_does_not_report_is_denied() -> None:
    request = check_request(csr(request_pem(ips=("10.0.0.1", "10.0.0.99"))))

    verdict = check_names(request, addresses(InternalIP="10.0.0.1", ExternalIP="192.0.2.1"))

    assert (verdict.decision, verdict.reason) == ("deny", "ip_addresses")
    assert "10.0.0.99" in verdict.message


def test_a_dns_address_of_the_cloud_does_not_vouch_for_an_ip() -> None:
    request = check_request(csr(request_pem(ips=("10.0.0.1",))))

    verdict = check_names(request, addresses(Hostname="10.0.0.1"))

    assert verdict.reason == "ip_addresses"


def test_decided_and_signed_csrs_are_left_alone() -> None:
    assert is_decided(csr(conditions=["Approved"]))
    assert is_decided(csr(conditions=["Denied"]))
    assert not is_decided(csr())


# -- the controller: Node, scope and cloud ---------------------------------------------


@pytest.fixture
async def fake_world() -> AsyncIterator[tuple[World, FakeProvider]]:
    fake = FakeProvider(capabilities={"instances_v2"}, authoritative=True)
    fake.answer("instance_belongs_to", True)
    async with controller_world(provider=fake) as world:
        yield world, fake


def approver(world: World, scope: NodeScope = EVERY_NODE) -> KubeletServingCertApprover:
    return KubeletServingCertApprover(
        client=world.client,
        csrs=Informer(world.client, CERTIFICATE_SIGNING_REQUESTS),
        nodes=world.nodes,
        cloud=world.guarded(),
        recorder=world.recorder,
        metrics=world.metrics,
        scope=scope,
    )


def outcome(verdict: Verdict | None) -> tuple[str, str] | None:
    return None if verdict is None else (verdict.decision, verdict.reason)


def cloud_says(fake: FakeProvider, **by_type: str) -> None:
    fake.answer(
        "instance_metadata",
        InstanceMetadata(provider_id="fake://n1", node_addresses=addresses(**by_type)),
    )


async def test_a_good_csr_of_an_existing_node_is_approved(
    fake_world: tuple[World, FakeProvider],
) -> None:
    world, fake = fake_world
    await world.add(node_object("n1", tainted=False))
    cloud_says(fake, InternalIP="10.0.0.1")

    verdict = await approver(world).review(csr())

    assert outcome(verdict) == ("approve", "approved")
    assert fake.called() == ["instance_metadata", "instance_belongs_to"]


async def test_an_ip_only_the_node_object_claims_is_denied(
    fake_world: tuple[World, FakeProvider],
) -> None:
    """The kubelet writes its Node's status itself: only the cloud vouches."""
    world, fake = fake_world
    claimed = [
        {"type": "InternalIP", "address": "10.0.0.66"},
        {"type": "Hostname", "address": "n1"},
    ]
    await world.add(node_object("n1", tainted=False, addresses=claimed))
    cloud_says(fake, InternalIP="10.0.0.1")

    verdict = await approver(world).review(csr(request_pem(ips=("10.0.0.66",))))

    assert outcome(verdict) == ("deny", "ip_addresses")


async def test_a_csr_of_a_node_not_yet_known_is_left_pending(
    fake_world: tuple[World, FakeProvider],
) -> None:
    world, fake = fake_world

    verdict = await approver(world).review(csr())

    assert outcome(verdict) == ("pending", "node_not_found")
    assert fake.called() == []


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (None, "instance_not_found"),
        (InstanceNotFoundError(), "instance_not_found"),
        (RuntimeError("cloud API down"), "cloud_error"),
    ],
)
async def test_while_the_cloud_cannot_vouch_the_csr_is_left_pending(
    fake_world: tuple[World, FakeProvider], answer: object, reason: str
) -> None:
    world, fake = fake_world
    await world.add(node_object("n1", tainted=False))
    fake.answer("instance_metadata", answer)

    verdict = await approver(world).review(csr())

    assert outcome(verdict) == ("pending", reason)


async def test_a_request_denied_by_its_content_costs_no_cloud_call(
    fake_world: tuple[World, FakeProvider],
) -> None:
    world, fake = fake_world
    await world.add(node_object("n1", tainted=False))

    verdict = await approver(world).review(csr(username="alice", groups=("system:nodes",)))

    assert outcome(verdict) == ("deny", "requester")
    assert fake.called() == []


async def test_a_node_outside_this_ccms_scope_is_not_ours_to_decide(
    fake_world: tuple[World, FakeProvider],
) -> None:
    world, fake = fake_world
    await world.add(node_object("n1", tainted=False, labels={"pool": "other"}))
    scope = NodeScope(selector=parse_selector("pool=mine"))

    assert await approver(world, scope).review(csr()) is None
    assert fake.called() == []


async def test_a_v1_provider_vouches_with_its_node_addresses() -> None:
    fake = FakeProvider(capabilities={"instances"}, authoritative=True)
    async with controller_world(provider=fake) as world:
        await world.add(node_object("n1", tainted=False, provider_id="fake://i-1"))
        fake.answer("node_addresses_by_provider_id", addresses(InternalIP="10.0.0.1"))
        fake.answer("instance_belongs_to", True)

        verdict = await approver(world).review(csr())

    assert outcome(verdict) == ("approve", "approved")


async def test_a_provider_without_instances_cannot_run_the_approver() -> None:
    async with controller_world(provider=FakeProvider(capabilities={"load_balancer"})) as world:
        with pytest.raises(ValueError, match="does not support instances"):
            approver(world)


async def test_only_undecided_kubelet_serving_csrs_are_queued(
    fake_world: tuple[World, FakeProvider],
) -> None:
    world, _ = fake_world
    controller = approver(world)

    controller._enqueue(csr(name="other", signer="kubernetes.io/kube-apiserver-client"))
    controller._enqueue(csr(name="done", conditions=["Approved"]))
    controller._enqueue(csr(name="mine"))

    assert len(controller.queue) == 1


async def test_a_pending_csr_gets_a_warning_a_metric_and_a_retry_that_backs_off(
    fake_world: tuple[World, FakeProvider],
) -> None:
    world, fake = fake_world
    await world.add(node_object("n1", tainted=False))
    fake.answer("instance_metadata", None)
    api = FakeApiServer(resources=(CSR_TYPE,))
    client = api.client()
    csrs = Informer(client, CERTIFICATE_SIGNING_REQUESTS)
    task = asyncio.create_task(csrs.run())
    try:
        api.put_object(
            {
                "apiVersion": "certificates.k8s.io/v1",
                "kind": "CertificateSigningRequest",
                **to_dict(csr(name="waiting")),
            }
        )
        await csrs.wait_synced()
        await eventually(lambda: csrs.get("waiting") is not None, what="the CSR cached")
        controller = KubeletServingCertApprover(
            client=world.client,
            csrs=csrs,
            nodes=world.nodes,
            cloud=world.guarded(),
            recorder=world.recorder,
            metrics=world.metrics,
        )

        delays = []
        for _ in range(3):
            with pytest.raises(LeftPendingError) as caught:
                await controller.sync("waiting")
            delays.append(controller._retry_after(caught.value))
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await client.aclose()

    assert delays == [5.0, 10.0, 20.0]
    assert [(e.type, e.reason) for e in world.recorder.events][-1] == (
        "Warning",
        wk.REASON_CSR_PENDING,
    )
    assert (
        world.metrics.sample(
            wk.METRIC_KUBELET_SERVING_CSR_PENDING, {"reason": "instance_not_found"}
        )
        == 3
    )
    assert api.count("PUT", "/apis/certificates.k8s.io") == 0


# -- nodes as attackers: what the node wrote vouches for nothing ------------------------


async def test_the_provider_never_sees_what_the_node_wrote_on_its_node(
    fake_world: tuple[World, FakeProvider],
) -> None:
    """Annotations, labels and status are the kubelet's to write: the provider is asked
    with a Node that has only its name, UID and providerID, so none of them can turn
    into a name the certificate may carry."""
    world, fake = fake_world
    await world.add(
        node_object(
            "n1",
            tainted=False,
            provider_id="fake://n1",
            labels={"k3s.io/internal-ip": "10.0.0.2"},
            annotations={"k3s.io/external-dns": "kubernetes.default.svc"},
            addresses=[{"type": "InternalIP", "address": "10.0.0.2"}],
        )
    )
    cloud_says(fake, InternalIP="10.0.0.1")

    await approver(world).review(csr())

    (asked,) = fake.calls_to("instance_metadata")[0]
    assert asked.metadata.name == "n1"
    assert asked.spec.provider_id == "fake://n1"
    assert dict(asked.metadata.labels) == {}
    assert dict(asked.metadata.annotations) == {}
    assert asked.status.addresses == ()
    assert asked.status.node_info is None


async def test_an_instance_the_cloud_does_not_say_is_the_nodes_is_denied(
    fake_world: tuple[World, FakeProvider],
) -> None:
    """n1 set its own empty providerID to n2's instance: the cloud says that instance
    is not n1's, so n2's addresses vouch for nothing."""
    world, fake = fake_world
    await world.add(node_object("n1", tainted=False, provider_id="fake://n2"))
    fake.answer(
        "instance_metadata",
        InstanceMetadata(provider_id="fake://n2", node_addresses=addresses(InternalIP="10.0.0.1")),
    )
    fake.answer("instance_belongs_to", False)

    verdict = await approver(world).review(csr())

    assert outcome(verdict) == ("deny", "instance")
    assert verdict is not None
    assert "fake://n2" in verdict.message
    assert fake.calls_to("instance_belongs_to") == [
        (
            "n1",
            InstanceMetadata(
                provider_id="fake://n2", node_addresses=addresses(InternalIP="10.0.0.1")
            ),
        )
    ]


async def test_two_nodes_with_one_provider_id_get_nothing(
    fake_world: tuple[World, FakeProvider],
) -> None:
    world, fake = fake_world
    await world.add(node_object("n1", tainted=False, provider_id="fake://n1"))
    await world.add(node_object("evil", tainted=False, provider_id="fake://n1"))
    cloud_says(fake, InternalIP="10.0.0.1")

    mine = await approver(world).review(csr())
    theirs = await approver(world).review(
        csr(request_pem("system:node:evil", dns=("evil",)), username="system:node:evil")
    )

    assert outcome(mine) == ("pending", "duplicate_provider_id")
    assert outcome(theirs) == ("pending", "duplicate_provider_id")
    assert mine is not None
    assert "evil" in mine.message
    assert "instance_belongs_to" not in fake.called()


async def test_a_node_without_provider_id_whose_instance_another_node_claims_gets_nothing(
    fake_world: tuple[World, FakeProvider],
) -> None:
    """The cloud finds n1's instance by name, but another Node registered with its
    providerID: the instance has two Nodes, and neither is approved."""
    world, fake = fake_world
    await world.add(node_object("n1", tainted=False))
    await world.add(node_object("evil", tainted=False, provider_id="fake://n1"))
    cloud_says(fake, InternalIP="10.0.0.1")

    verdict = await approver(world).review(csr())

    assert outcome(verdict) == ("pending", "duplicate_provider_id")


async def test_an_instance_without_provider_id_cannot_be_vouched_for(
    fake_world: tuple[World, FakeProvider],
) -> None:
    world, fake = fake_world
    await world.add(node_object("n1", tainted=False))
    fake.answer(
        "instance_metadata", InstanceMetadata(node_addresses=addresses(InternalIP="10.0.0.1"))
    )

    verdict = await approver(world).review(csr())

    assert outcome(verdict) == ("pending", "instance_unknown")


async def test_a_failing_ownership_check_leaves_the_csr_pending(
    fake_world: tuple[World, FakeProvider],
) -> None:
    world, fake = fake_world
    await world.add(node_object("n1", tainted=False, provider_id="fake://n1"))
    cloud_says(fake, InternalIP="10.0.0.1")
    fake.fail("instance_belongs_to", RuntimeError("cloud API down"))

    verdict = await approver(world).review(csr())

    assert outcome(verdict) == ("pending", "cloud_error")


async def test_a_provider_not_declaring_authoritative_instances_stops_the_approver() -> None:
    fake = FakeProvider(capabilities={"instances_v2"})
    async with controller_world(provider=fake) as world:
        with pytest.raises(UntrustedInstancesError, match="'fake' are not authoritative"):
            approver(world)


def test_k3s_and_rke2_cannot_back_the_approver_alone_or_in_a_composite() -> None:
    registry = Registry()
    registry.register("k3s", k3s_factory)
    registry.register("ippool", ippool_factory)
    composite = build_composite(
        b"providers: {k3s: {capabilities: [instances]}, ippool: {capabilities: [loadBalancer],"
        b" config: {pools: {range-global: 192.0.2.10-192.0.2.20}}}}",
        registry=registry,
    )
    for provider in (k3s_factory(None), rke2_factory(None), composite):
        with pytest.raises(UntrustedInstancesError, match="Remove servingcert from --controllers"):
            require_authoritative(provider)


def test_the_contract_default_is_not_authoritative_and_refuses_ownership() -> None:
    class Mine(InstancesV2):
        async def instance_exists(self, node: Node) -> bool:
            return True

        async def instance_shutdown(self, node: Node) -> bool:
            return False

        async def instance_metadata(self, node: Node) -> InstanceMetadata | None:
            return None

    mine = Mine()
    assert mine.authoritative is False
    assert (
        asyncio.run(mine.instance_belongs_to("n1", InstanceMetadata(provider_id="x://1"))) is False
    )


async def test_a_v1_node_without_provider_id_is_vouched_for_by_its_instance_id() -> None:
    fake = FakeProvider(capabilities={"instances"}, authoritative=True)
    async with controller_world(provider=fake) as world:
        await world.add(node_object("n1", tainted=False))
        fake.answer("instance_id", "i-1")
        fake.answer("node_addresses_by_provider_id", addresses(InternalIP="10.0.0.1"))
        fake.answer("instance_belongs_to", True)

        verdict = await approver(world).review(csr())

    assert outcome(verdict) == ("approve", "approved")
    assert fake.calls_to("node_addresses_by_provider_id") == [("fake://i-1",)]
    assert fake.calls_to("instance_belongs_to")[0][1].provider_id == "fake://i-1"


async def test_a_v1_provider_that_names_no_instance_leaves_the_csr_pending() -> None:
    fake = FakeProvider(capabilities={"instances"}, authoritative=True)
    async with controller_world(provider=fake) as world:
        await world.add(node_object("n1", tainted=False))
        fake.fail("instance_id", NotImplementedByProviderError())

        verdict = await approver(world).review(csr())

    assert outcome(verdict) == ("pending", "instance_unknown")


async def test_a_v2_answer_without_provider_id_is_about_the_nodes_own(
    fake_world: tuple[World, FakeProvider],
) -> None:
    """InstancesV2 may leave the providerID empty when the Node has one (the contract);
    the provider is then asked about that one."""
    world, fake = fake_world
    await world.add(node_object("n1", tainted=False, provider_id="fake://n1"))
    fake.answer(
        "instance_metadata", InstanceMetadata(node_addresses=addresses(InternalIP="10.0.0.1"))
    )

    verdict = await approver(world).review(csr())

    assert outcome(verdict) == ("approve", "approved")
    assert fake.calls_to("instance_belongs_to")[0][1].provider_id == "fake://n1"
