"""Kubelet serving certificate approver (``kubelet-serving-cert-approver``, alias
``servingcert``): approves a kubelet's serving CSR when the cloud vouches for it.

A kubelet with ``serverTLSBootstrap: true`` asks for its serving certificate with a
CertificateSigningRequest for the signer ``kubernetes.io/kubelet-serving``. Nothing
in Kubernetes approves those; kube-controller-manager signs them once approved. This
controller approves one only when **every** check holds:

1. the requester (set by the API server, not by the kubelet) is ``system:node:<name>``
   and in the group ``system:nodes``;
2. the request is one PEM ``CERTIFICATE REQUEST`` with a valid signature, its subject
   exactly ``CN=system:node:<name>, O=system:nodes`` for the requester's ``<name>``;
3. the usages are what a kubelet asks for: ``digital signature`` and ``server auth``,
   plus ``key encipherment`` (kubelets on RSA keys, and older kubelets on any key,
   ask for it; upstream's ``ValidateKubeletServingCSR`` and Talos's approver
   accept both sets);
4. the subject alternative names are DNS names and IP addresses only, at least one;
5. the Node ``<name>`` exists (in this CCM's scope);
6. the cloud names the instance (a providerID), and no other Node carries that
   providerID;
7. the provider says, from the cloud's own record, that the instance is Node
   ``<name>``'s (``instance_belongs_to``: its own name, hostname or private DNS name);
8. every DNS name is the Node's name or a DNS-type address (``Hostname``,
   ``InternalDNS``, ``ExternalDNS``) the **cloud** reports for that instance;
9. every IP address is an ``InternalIP``/``ExternalIP`` the **cloud** reports for it.

Nodes are attackers: NodeRestriction lets a kubelet write its own Node's labels,
annotations and status, and its ``spec.providerID`` while that is empty; a new node
identity (a bootstrap token) may register a Node with any of them. So nothing the
node wrote vouches for anything:

* the provider is asked (``InstanceMetadata``, or V1 ``NodeAddressesByProviderID``)
  with a Node that carries **only its name, UID and providerID**: the Node's own
  addresses, labels and annotations never reach the answer;
* only providers whose instances declare themselves ``authoritative`` (answers from a
  cloud, not from the Node) can back approval: with any other (``k3s`` and ``rke2``,
  whose addresses are the Node's own annotations, alone or as a composite's
  ``instances``) the daemon refuses to start this controller;
* the Node's providerID is only a pointer: the instance it names must be proven the
  Node's by the provider (check 7, which refuses by default), and a providerID two
  Nodes carry proves nothing for either (check 6).

What happens otherwise:

* **Denied**, with the check in the condition's message, when the CSR can never be
  right: a wrong requester, request, subject, usages or kind of SAN, an instance the
  cloud does not say is the Node's (a providerID naming another node's instance), a
  name the Node does not have, or an IP the cloud does not report for the instance.
  The kubelet then asks again with a new CSR (its names and addresses may have
  changed).
* **Left pending**, with a Warning Event and a retry with backoff (5 s up to 5 min),
  when the answer may still change: the Node is not in the cache yet, the cloud has
  no instance for it yet (``InstanceNotFound``, no metadata, no providerID), the
  cloud call failed, or two Nodes carry the instance's providerID (the Event names
  the other; once an admin deletes the Node that is not the instance's, the rightful
  one is approved). A CSR left pending for a day is deleted by
  kube-controller-manager's ``csrcleaner``.
* **Ignored**: other signers, CSRs already approved, denied or signed, and Nodes
  outside this CCM's scope (another CCM's cloud must vouch for them).

A provider with neither ``InstancesV2`` nor ``Instances`` cannot tell an instance's
addresses, so it cannot approve anything: the controller is skipped.

Where kube-ccm differs from Talos's approver (``pkg/certificatesigningrequest``): the
subject CN must name the requester's own Node (Talos checks only the prefix), the
Node must exist, the request's signature is checked, the IP addresses are the
cloud's, the instance must be the Node's by the cloud's record, and a cloud failure
leaves the CSR pending instead of denying it.
"""

from __future__ import annotations

import ipaddress
import json
import logging
from dataclasses import dataclass
from typing import Literal

from cryptography import x509
from cryptography.x509.oid import NameOID

from kube_ccm.api import wellknown as wk
from kube_ccm.api.objects import CertificateSigningRequest, Node, NodeAddress
from kube_ccm.cloudprovider import CloudProvider, InstanceNotFoundError
from kube_ccm.controllers._base import ControllerBase
from kube_ccm.controllers.instances import CloudInstances
from kube_ccm.controllers.nodescope import EVERY_NODE, NodeScope
from kube_ccm.runtime.client import ApiError, KubeClient
from kube_ccm.runtime.events import EventRecorder, ObjectReference
from kube_ccm.runtime.informer import Informer
from kube_ccm.runtime.metrics import Metrics
from kube_ccm.runtime.ratelimit import (
    ItemExponentialFailureRateLimiter,
    default_controller_rate_limiter,
)
from kube_ccm.runtime.resources import CERTIFICATE_SIGNING_REQUESTS
from kube_ccm.runtime.workqueue import run_workers

log = logging.getLogger(__name__)

USAGES_ECDSA: frozenset[str] = frozenset({"digital signature", "server auth"})
"""What a current kubelet asks for with an ECDSA key (its default)."""
USAGES_RSA: frozenset[str] = USAGES_ECDSA | {"key encipherment"}
"""What a kubelet asks for with an RSA key (and older kubelets with any key)."""
DNS_ADDRESS_TYPES: frozenset[str] = frozenset({"Hostname", "InternalDNS", "ExternalDNS"})
IP_ADDRESS_TYPES: frozenset[str] = frozenset({"InternalIP", "ExternalIP"})

Decision = Literal["approve", "deny", "pending"]


@dataclass(frozen=True)
class Verdict:
    """What to do with one CSR: ``reason`` is the check's short name (the metrics'
    ``reason`` label), ``message`` says what was wrong, for the condition or Event."""

    decision: Decision
    reason: str
    message: str


class RequestDeniedError(Exception):
    """The request can never be approved; ``reason`` names the check that failed."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class LeftPendingError(Exception):
    """A CSR left pending: raised out of ``sync`` so that the queue retries it after the
    CSR's own backoff (5 s, doubling, up to 5 min), logged as a warning."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name


@dataclass(frozen=True)
class KubeletRequest:
    """A kubelet serving CSR that passed the checks needing no Node and no cloud."""

    node_name: str
    dns_names: tuple[str, ...]
    ip_addresses: tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, ...]


def is_kubelet_serving(csr: CertificateSigningRequest) -> bool:
    return csr.spec.signer_name == wk.SIGNER_KUBELET_SERVING


def is_decided(csr: CertificateSigningRequest) -> bool:
    """Approved, denied, failed or signed already: nothing left to decide."""
    return bool(csr.status.certificate) or any(
        c.type in (wk.CSR_CONDITION_APPROVED, wk.CSR_CONDITION_DENIED, wk.CSR_CONDITION_FAILED)
        for c in csr.status.conditions
    )


def check_request(csr: CertificateSigningRequest) -> KubeletRequest:
    """Checks 1-4 (requester, request, subject, usages, kinds of SAN): the request of a
    kubelet, or :class:`RequestDeniedError` naming the first check that failed."""
    username = csr.spec.username
    node_name = username.removeprefix(wk.NODE_USER_PREFIX)
    if username == node_name or not node_name or wk.GROUP_NODES not in csr.spec.groups:
        raise RequestDeniedError(
            "requester",
            f"the requester {username!r} is not a kubelet: a kubelet serving certificate "
            f"is asked for by {wk.NODE_USER_PREFIX}<node> in the group {wk.GROUP_NODES}",
        )
    request = _parse(csr.spec.request)
    expected = f"{wk.NODE_USER_PREFIX}{node_name}"
    subject = [(a.oid, a.value) for a in request.subject]
    if sorted(subject, key=lambda pair: pair[0].dotted_string) != sorted(
        [(NameOID.COMMON_NAME, expected), (NameOID.ORGANIZATION_NAME, wk.GROUP_NODES)],
        key=lambda pair: pair[0].dotted_string,
    ):
        raise RequestDeniedError(
            "subject",
            f"the subject {request.subject.rfc4514_string()!r} is not "
            f"CN={expected},O={wk.GROUP_NODES}",
        )
    usages = frozenset(csr.spec.usages)
    if usages not in (USAGES_ECDSA, USAGES_RSA):
        raise RequestDeniedError(
            "usages",
            f"the usages {sorted(csr.spec.usages)} are not a kubelet's: "
            f"{sorted(USAGES_ECDSA)}, or with 'key encipherment'",
        )
    dns_names, ips = _subject_alt_names(request)
    return KubeletRequest(node_name, dns_names, ips)


def _parse(pem: bytes) -> x509.CertificateSigningRequest:
    if pem.count(b"-----BEGIN ") != 1 or b"-----BEGIN CERTIFICATE REQUEST-----" not in pem:
        raise RequestDeniedError("request", "the request is not one PEM CERTIFICATE REQUEST block")
    try:
        request = x509.load_pem_x509_csr(pem)
        valid = request.is_signature_valid
    except ValueError as exc:
        raise RequestDeniedError("request", f"the request does not parse: {exc}") from exc
    if not valid:
        raise RequestDeniedError("request", "the request's signature is not valid")
    return request


def _subject_alt_names(
    request: x509.CertificateSigningRequest,
) -> tuple[tuple[str, ...], tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, ...]]:
    try:
        names = request.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        names = x509.SubjectAlternativeName([])
    except ValueError as exc:
        raise RequestDeniedError(
            "request", f"the request's extensions do not parse: {exc}"
        ) from exc
    others = [n for n in names if not isinstance(n, x509.DNSName | x509.IPAddress)]
    if others:
        raise RequestDeniedError(
            "subject_alt_names",
            f"only DNS names and IP addresses may be asked for, not {others[0]}",
        )
    dns_names = tuple(names.get_values_for_type(x509.DNSName))
    ips = tuple(
        ip
        for ip in names.get_values_for_type(x509.IPAddress)
        if isinstance(ip, ipaddress.IPv4Address | ipaddress.IPv6Address)
    )
    if len(ips) != len(names.get_values_for_type(x509.IPAddress)):
        raise RequestDeniedError("subject_alt_names", "IP address ranges may not be asked for")
    if not dns_names and not ips:
        raise RequestDeniedError(
            "subject_alt_names", "at least one DNS name or IP address is required"
        )
    return dns_names, ips


def check_names(request: KubeletRequest, addresses: tuple[NodeAddress, ...]) -> Verdict:
    """Checks 6-7: every DNS name and IP address of ``request`` among the Node's name
    and the ``addresses`` the cloud reports for its instance."""
    allowed_names = {request.node_name.lower()} | {
        a.address.lower() for a in addresses if a.type in DNS_ADDRESS_TYPES
    }
    strange = [n for n in request.dns_names if n.lower() not in allowed_names]
    if strange:
        return Verdict(
            "deny",
            "dns_names",
            f"DNS name {strange[0]!r} is neither the Node's name nor a name the cloud "
            f"reports for its instance ({', '.join(sorted(allowed_names))})",
        )
    allowed_ips = set()
    for a in addresses:
        if a.type in IP_ADDRESS_TYPES:
            try:
                allowed_ips.add(ipaddress.ip_address(a.address))
            except ValueError:
                continue
    strange_ips = [ip for ip in request.ip_addresses if ip not in allowed_ips]
    if strange_ips:
        return Verdict(
            "deny",
            "ip_addresses",
            f"IP address {strange_ips[0]} is not an address the cloud reports for the "
            f"instance of Node {request.node_name} "
            f"({', '.join(sorted(str(ip) for ip in allowed_ips)) or 'none'})",
        )
    return Verdict(
        "approve",
        "approved",
        f"the cloud reports every name of Node {request.node_name}'s instance "
        f"({', '.join([*request.dns_names, *(str(ip) for ip in request.ip_addresses)])})",
    )


def require_instances(cloud: CloudProvider) -> CloudInstances:
    """The provider's instances, or ``ValueError``: without them no instance's addresses
    can vouch for a certificate, and the controller does not start."""
    try:
        return CloudInstances(cloud)
    except ValueError as exc:
        raise ValueError(
            "the cloud provider does not support instances, so it cannot tell which "
            "addresses a kubelet serving certificate may name"
        ) from exc


class UntrustedInstancesError(Exception):
    """The provider's instances are not the cloud's own word (their ``authoritative``
    is False): the approver must not run on them. The daemon refuses to start."""


def require_authoritative(cloud: CloudProvider) -> CloudInstances:
    """The provider's instances (``ValueError`` without: the controller is skipped), or
    :class:`UntrustedInstancesError` when they do not declare themselves the cloud's
    own record (:attr:`~kube_ccm.cloudprovider.InstancesV2.authoritative`)."""
    instances = require_instances(cloud)
    if not instances.authoritative:
        provider = cloud.provider_name()
        raise UntrustedInstancesError(
            f"--controllers names {wk.CONTROLLER_KUBELET_SERVING_CERT_APPROVER} "
            f"({wk.ALIAS_KUBELET_SERVING_CERT_APPROVER}), but the instances of cloud "
            f"provider {provider!r} are not authoritative: the provider does not promise "
            "that the names and addresses it reports come from a cloud rather than from "
            "the Node object, which the node's kubelet writes itself (k3s and rke2 read "
            "them from the Node's own annotations and labels), so approving on them would "
            "let a node choose the names in its own certificate (another node's IP, "
            "kubernetes.default.svc). Remove servingcert from --controllers and approve "
            "kubelet serving CSRs another way (check and `kubectl certificate approve` "
            "them, or run an approver with a fixed DNS and IP policy), or serve "
            "`instances` from a provider with a cloud (--cloud-provider=composite); a "
            "provider's author declares it with `authoritative = True` on its "
            "InstancesV2 (docs/providers.md)"
        )
    return instances


class KubeletServingCertApprover(ControllerBase):
    name = wk.CONTROLLER_KUBELET_SERVING_CERT_APPROVER

    def __init__(
        self,
        *,
        client: KubeClient,
        csrs: Informer[CertificateSigningRequest],
        nodes: Informer[Node],
        cloud: CloudProvider,
        recorder: EventRecorder,
        metrics: Metrics,
        scope: NodeScope = EVERY_NODE,
        workers: int = 1,
    ) -> None:
        self._instances = require_authoritative(cloud)
        super().__init__(client=client, recorder=recorder, scope=scope)
        self._csrs = csrs
        self._nodes = nodes
        self.workers = workers
        self.queue = self._new_queue(
            wk.QUEUE_KUBELET_SERVING_CERTS, default_controller_rate_limiter(), metrics
        )
        self._pending_backoff = ItemExponentialFailureRateLimiter(5.0, 300.0)
        """Per CSR left pending: the delay of its next try (API errors use the queue's)."""
        self._approved = metrics.counter(
            wk.METRIC_KUBELET_SERVING_CSR_APPROVED,
            "Kubelet serving CSRs approved, every name vouched for by the cloud",
        )
        self._denied = metrics.counter(
            wk.METRIC_KUBELET_SERVING_CSR_DENIED,
            "Kubelet serving CSRs denied, by the check that failed",
            ["reason"],
        )
        self._pending = metrics.counter(
            wk.METRIC_KUBELET_SERVING_CSR_PENDING,
            "Times a kubelet serving CSR was left pending for a retry, by reason",
            ["reason"],
        )
        csrs.add_handler(
            on_add=self._enqueue,
            on_update=lambda _old, new: self._enqueue(new),
            on_delete=lambda csr: self._pending_backoff.forget(csr.metadata.name),
        )

    def _enqueue(self, csr: CertificateSigningRequest) -> None:
        if is_kubelet_serving(csr) and not is_decided(csr):
            self.queue.add(csr.metadata.name)

    async def run(self) -> None:
        await self._csrs.wait_synced()
        await self._nodes.wait_synced()
        await self._serve(
            run_workers(self.queue, self.sync, self.workers, retry_after=self._retry_after)
        )

    def _retry_after(self, exc: Exception) -> float | None:
        if isinstance(exc, LeftPendingError):
            return self._pending_backoff.when(exc.name)
        return None

    # -- sync --------------------------------------------------------------------

    async def sync(self, name: str) -> None:
        """Decide one CSR and write the decision (or leave it pending: raises
        :class:`LeftPendingError`, so the queue retries it with backoff)."""
        csr = self._csrs.get(name)
        verdict = None
        if csr is not None and is_kubelet_serving(csr) and not is_decided(csr):
            verdict = await self.review(csr)
        if csr is None or verdict is None:
            self._pending_backoff.forget(name)
            return
        ref = ObjectReference(
            kind="CertificateSigningRequest",
            name=name,
            uid=csr.metadata.uid,
            api_version=CERTIFICATE_SIGNING_REQUESTS.api_version,
        )
        if verdict.decision == "pending":
            self._pending.labels(reason=verdict.reason).inc()
            self._recorder.event(ref, "Warning", wk.REASON_CSR_PENDING, verdict.message)
            raise LeftPendingError(name, f"CSR {name} left pending: {verdict.message}")
        self._pending_backoff.forget(name)
        approve = verdict.decision == "approve"
        if not await self._write(name, approve, verdict.message):
            return
        if approve:
            self._approved.inc()
            log.info("approved kubelet serving CSR %s: %s", name, verdict.message)
            self._recorder.event(ref, "Normal", wk.REASON_CSR_APPROVED, verdict.message)
        else:
            self._denied.labels(reason=verdict.reason).inc()
            log.warning("denied kubelet serving CSR %s: %s", name, verdict.message)
            self._recorder.event(ref, "Warning", wk.REASON_CSR_DENIED, verdict.message)

    async def review(self, csr: CertificateSigningRequest) -> Verdict | None:
        """The verdict on ``csr`` (None: not this CCM's to decide, its Node is out of scope)."""
        try:
            request = check_request(csr)
        except RequestDeniedError as denied:
            return Verdict("deny", denied.reason, str(denied))
        node = self._nodes.get(request.node_name)
        if node is None:
            return Verdict(
                "pending", "node_not_found", f"Node {request.node_name} does not exist (yet)"
            )
        why_not = self._scope.why_not(node)
        if why_not is not None:
            log.info(
                "CSR %s: not this CCM's to decide: Node %s: %s",
                csr.metadata.name,
                request.node_name,
                why_not,
            )
            return None
        name = request.node_name
        provider_id = node.spec.provider_id
        try:
            metadata = await self._instances.cloud_metadata(name, node.metadata.uid, provider_id)
        except InstanceNotFoundError:
            metadata = None
        except Exception as exc:
            return Verdict(
                "pending",
                "cloud_error",
                f"the cloud could not tell the addresses of Node {name}'s instance: {exc}",
            )
        if metadata is None:
            return Verdict(
                "pending", "instance_not_found", f"the cloud has no instance for Node {name} (yet)"
            )
        if not metadata.provider_id:
            return Verdict(
                "pending",
                "instance_unknown",
                f"the cloud names no instance (no providerID) for Node {name}, so nothing "
                "can vouch that an instance is this Node's",
            )
        claimed = {provider_id, metadata.provider_id} - {""}
        others = sorted(
            n.metadata.name
            for n in self._nodes.list()
            if n.spec.provider_id in claimed and n.metadata.name != name
        )
        if others:
            return Verdict(
                "pending",
                "duplicate_provider_id",
                f"instance {metadata.provider_id} of Node {name} is also the providerID of "
                f"Node {', '.join(others)}: a providerID names one Node, and a node can set "
                "its own while it is empty, or register with any; no serving certificate "
                "is approved for any of them until the Nodes that are not this instance's "
                "are deleted (kubectl delete node <name>)",
            )
        try:
            belongs = await self._instances.instance_belongs_to(name, metadata)
        except Exception as exc:
            return Verdict(
                "pending",
                "cloud_error",
                f"the cloud could not tell whether instance {metadata.provider_id} is "
                f"Node {name}'s: {exc}",
            )
        if not belongs:
            return Verdict(
                "deny",
                "instance",
                f"the cloud does not say that instance {metadata.provider_id} is Node "
                f"{name}'s (its own name in the cloud is not {name}); a Node's "
                "providerID is the node's own word until proven, so its names and "
                "addresses cannot vouch for this Node",
            )
        return check_names(request, metadata.node_addresses)

    async def _write(self, name: str, approve: bool, message: str) -> bool:
        """Append the condition to the CSR as read now, and PUT it to ``approval`` (the
        resourceVersion read guards against a concurrent decision). False: decided
        meanwhile, or gone."""
        try:
            raw = json.loads(await self._api.request("GET", CERTIFICATE_SIGNING_REQUESTS, name))
        except ApiError as exc:
            if exc.not_found:
                return False
            raise
        conditions = raw.setdefault("status", {}).setdefault("conditions", [])
        if any(
            c.get("type") in (wk.CSR_CONDITION_APPROVED, wk.CSR_CONDITION_DENIED)
            for c in conditions
        ):
            return False
        conditions.append(
            {
                "type": wk.CSR_CONDITION_APPROVED if approve else wk.CSR_CONDITION_DENIED,
                "status": "True",
                "reason": wk.REASON_CSR_APPROVED if approve else wk.REASON_CSR_DENIED,
                "message": f"{wk.CONTROLLER_KUBELET_SERVING_CERT_APPROVER}: {message}",
            }
        )
        await self._api.request(
            "PUT",
            CERTIFICATE_SIGNING_REQUESTS,
            name,
            subresource="approval",
            content=json.dumps(raw).encode(),
            content_type="application/json",
        )
        return True


__all__ = [
    "USAGES_ECDSA",
    "USAGES_RSA",
    "KubeletRequest",
    "KubeletServingCertApprover",
    "LeftPendingError",
    "RequestDeniedError",
    "UntrustedInstancesError",
    "Verdict",
    "check_names",
    "check_request",
    "is_decided",
    "is_kubelet_serving",
    "require_authoritative",
    "require_instances",
]
