"""The contract a cloud implements (upstream ``cloud.go``).

A provider is a :class:`CloudProvider` subclass. It answers which *capabilities*
it supports by returning an object from the matching accessor, or ``None``:

=====================  ====================  =============================================
accessor               capability            ``None`` (unsupported) means
=====================  ====================  =============================================
``load_balancer()``    :class:`LoadBalancer`  the service controller is not started
``instances_v2()``     :class:`InstancesV2`   node controllers fall back to ``instances()``
``instances()``        :class:`Instances`     (V1) with neither, node controllers idle
``zones()``            :class:`Zones`         V1 nodes get no zone/region labels
``routes()``           :class:`Routes`        the route controller is not started
``clusters()``         :class:`Clusters`      nothing; no controller uses it
=====================  ====================  =============================================

This replaces upstream's ``(impl, supported bool)`` pairs: **returning ``None`` is the
one way to say "unsupported"**, and the base class returns ``None`` for all of them,
so a provider overrides only what it supports. Return the same object on every
call; controllers may call an accessor more than once.

Every cloud call is a coroutine. Implementations must not block the event loop
(run blocking SDKs in a thread), should bound their own network timeouts, and
must treat the :class:`~kube_ccm.api.objects.Node` and
:class:`~kube_ccm.api.objects.Service` arguments as read-only: they are the
shared, cached objects.

Errors: raise the classes of :mod:`kube_ccm.cloudprovider` (``InstanceNotFoundError``,
``NotImplementedByProviderError``, ``ImplementedElsewhereError``, ``RetryError``) where a
method's docstring says a controller gives them a meaning; anything else is a plain
failure that is logged and retried with backoff.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from kube_ccm.api.objects import (
    LoadBalancerStatus,
    Node,
    NodeAddress,
    PersistentVolume,
    Service,
)
from kube_ccm.cloudprovider._errors import NotImplementedByProviderError
from kube_ccm.cloudprovider.annotations import ServiceAnnotation
from kube_ccm.runtime.client import PatchType
from kube_ccm.runtime.resources import RequestClient

__all__ = [
    "ClientBuilder",
    "ClientConfig",
    "CloudProvider",
    "Clusters",
    "InformerUser",
    "InstanceMetadata",
    "Instances",
    "InstancesV2",
    "KubernetesClient",
    "LoadBalancer",
    "NodePodCIDRs",
    "PVLabeler",
    "Route",
    "Routes",
    "Zone",
    "Zones",
]

# ---------------------------------------------------------------------------
# What the daemon hands a provider
# ---------------------------------------------------------------------------


class ClientConfig(Protocol):
    """Connection settings for one controller identity, as the runtime provides them."""

    @property
    def server(self) -> str:
        """The API server URL."""
        ...

    @property
    def user_agent(self) -> str:
        """``cloud-controller-manager/<identity>`` unless per-controller credentials are used."""
        ...


class KubernetesClient(RequestClient, Protocol):
    """The part of the runtime's Kubernetes client a provider may rely on.

    Paths are API paths (``/api/v1/nodes/n1``); bodies are JSON-able values; results
    are decoded JSON. HTTP errors raise :class:`~kube_ccm.cloudprovider.ApiError`.
    Build no path by hand: wrap the client in a
    :class:`~kube_ccm.cloudprovider.TypedClient` and name the resource
    (``await TypedClient(client).get(CONFIG_MAPS, name, namespace=namespace)``):
    ``request`` (one request, the answer's raw bytes) is what it sends through.
    """

    async def get(self, path: str, params: Mapping[str, str | int] | None = None) -> Any: ...

    async def create(self, path: str, body: Any) -> Any: ...

    async def replace(self, path: str, body: Any) -> Any: ...

    async def patch(
        self,
        path: str,
        body: Any,
        *,
        patch_type: PatchType = "strategic",
        params: Mapping[str, str | int] | None = None,
    ) -> Any: ...

    async def delete(
        self, path: str, body: Any = None, params: Mapping[str, str | int] | None = None
    ) -> Any: ...


class ClientBuilder(Protocol):
    """Gives clients for named identities (upstream ``ControllerClientBuilder``).

    Without ``--use-service-account-credentials`` every name yields the daemon's own
    credentials with the user agent suffixed ``/<name>``; with it, each name is a
    ServiceAccount in ``kube-system``. Both methods raise on failure (there is no
    separate "or die" form: let the error propagate out of ``initialize``).
    """

    def config(self, name: str) -> ClientConfig: ...

    def client(self, name: str) -> KubernetesClient: ...


# ---------------------------------------------------------------------------
# Value types
# ---------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class InstanceMetadata:
    """What :meth:`InstancesV2.instance_metadata` reports about a node's instance.

    Empty strings mean "unknown / do not set".
    """

    provider_id: str = ""
    """Becomes ``spec.providerID``, set only at initialization and only if the Node has
    none. Empty here *and* on the Node is an initialization error. Convention:
    ``<provider name>://<instance id>``."""
    instance_type: str = ""
    """Becomes the ``node.kubernetes.io/instance-type`` label and its beta twin."""
    node_addresses: tuple[NodeAddress, ...] = ()
    """Becomes ``status.addresses`` (filtered by the kubelet's ``--node-ip``)."""
    zone: str = ""
    """Becomes ``topology.kubernetes.io/zone`` and its beta twin."""
    region: str = ""
    """Becomes ``topology.kubernetes.io/region`` and its beta twin."""
    additional_labels: Mapping[str, str] = field(default_factory=dict)
    """Extra node labels; keys in the ``kubernetes.io``/``k8s.io`` namespaces are
    dropped. Treat as read-only."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Route:
    """A cloud route sending a node's pod CIDR to that node."""

    name: str = ""
    """The cloud's name for the route; ignored by :meth:`Routes.create_route`."""
    target_node: str
    """The node name the route points at."""
    destination_cidr: str
    """The pod CIDR (IPv4 or IPv6) the route carries."""
    target_node_addresses: tuple[NodeAddress, ...] = ()
    """Addresses of the target node, when the provider routes to addresses."""
    enable_node_addresses: bool = False
    """Set by the provider on listed routes when it tracks ``target_node_addresses``;
    when false the controller ignores them when comparing routes."""
    blackhole: bool = False
    """True on listed routes whose target is gone; the controller deletes them."""


@dataclass(frozen=True, slots=True)
class Zone:
    """Where an instance runs."""

    failure_domain: str
    """The zone."""
    region: str


# ---------------------------------------------------------------------------
# Capabilities
# ---------------------------------------------------------------------------


class LoadBalancer(ABC):
    """Load balancers for Services of ``type: LoadBalancer``.

    ``cluster_name`` is always ``--cluster-name`` (default ``kubernetes``); use it to
    tell this cluster's load balancers from others'. ``nodes`` is the backend set
    chosen by the service controller; it may be empty (no eligible node: the
    controller has emitted ``UnAvailableLoadBalancer`` and still ensures the load
    balancer, as upstream does). Service and Node arguments are read-only.
    """

    service_annotations: Sequence[ServiceAnnotation] = ()
    """The Service annotations this provider reads, with their checks
    (:mod:`kube_ccm.cloudprovider.annotations`): the ``service-annotations`` webhook
    refuses bad values at ``kubectl apply`` time."""

    backend_node_labels: frozenset[str] = frozenset()
    """Node labels this provider uses to choose backends (for example a pool label read
    from a Service annotation). The service controller updates every load balancer as
    soon as one of them changes on a Node; by default only eligibility changes count."""

    def own_annotation_write(self, old: Mapping[str, str], new: Mapping[str, str]) -> bool:
        """Whether a Service's annotations going from ``old`` to ``new`` is only this
        provider writing its own result from :meth:`ensure_load_balancer` (ippool's
        address annotation): the service controller then does not sync the Service
        again for it. The default, False, is upstream's rule: every annotation change
        syncs."""
        return False

    def set_resync(self, resync: Callable[[str], None]) -> None:  # noqa: B027 (optional hook)
        """Optional: receive the service controller's way to sync a Service again.

        The service controller calls it once, before its workers start, with a function
        that takes a Service key (``namespace/name``) and queues that Service for an
        ordinary sync (``ensure_load_balancer``, then the status written if it
        changed), if it is a Service this CCM serves; other keys are ignored. It never
        blocks and may be called from any task of the event loop.

        For a provider whose status depends on more than the Service and the node set
        (ServiceLB: which of its pods are ready): it calls ``resync`` when that
        changes, and the status follows without the provider writing it behind the
        controller's back. The default ignores it: nothing else changes a status.
        """

    @abstractmethod
    async def get_load_balancer(
        self, cluster_name: str, service: Service
    ) -> LoadBalancerStatus | None:
        """The status of the Service's load balancer, or ``None`` if it does not exist.

        ``None`` replaces upstream's ``exists=false``: report a load balancer only if
        this provider created it for this Service. An existing load balancer with no
        address yet is ``LoadBalancerStatus()`` (no ingress), not ``None``.
        """

    @abstractmethod
    def get_load_balancer_name(self, cluster_name: str, service: Service) -> str:
        """The cloud name of the Service's load balancer.

        The name must be stable for the life of the Service. Providers without a
        scheme of their own may return
        :func:`~kube_ccm.cloudprovider.default_load_balancer_name` (deprecated upstream).
        """

    @abstractmethod
    async def ensure_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> LoadBalancerStatus:
        """Create the load balancer, or update it to match the Service, and return its status.

        Must return a status (the controller writes it to ``status.loadBalancer``).
        May raise :class:`RetryError` (also wrapped) to be retried after a fixed delay,
        or :class:`ImplementedElsewhereError` if another controller owns this Service's
        load balancer.
        """

    @abstractmethod
    async def update_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> None:
        """Point the existing load balancer at exactly ``nodes``; change nothing else.

        May raise :class:`ImplementedElsewhereError`.
        """

    @abstractmethod
    async def ensure_load_balancer_deleted(self, cluster_name: str, service: Service) -> None:
        """Delete the load balancer; succeed if it is already gone (idempotent).

        Must not raise :class:`ImplementedElsewhereError`. Only after this returns does
        the controller remove the Service's cleanup finalizer.
        """


@dataclass(frozen=True, kw_only=True, slots=True)
class OwnedLoadBalancer:
    """A load balancer this cluster owns, and the Service it was made for."""

    name: str
    """The cloud's name for it (``get_load_balancer_name`` of that Service)."""
    namespace: str
    service_name: str
    service_uid: str


class LoadBalancerInventory(ABC):
    """Optional mix-in for the :class:`LoadBalancer` capability: what this cluster owns.

    With it, ``kube-ccm gc`` and the ``load-balancer-gc`` sweep can find load balancers
    whose Service is gone (deleted while no CCM ran, or without the cleanup finalizer)
    or no longer wants one, and delete them with ``ensure_load_balancer_deleted``,
    called with a Service that has only the recorded namespace, name and UID (so
    ``get_load_balancer_name`` must depend on nothing else). Inherit from it next to
    :class:`LoadBalancer`.
    """

    @abstractmethod
    async def list_load_balancers(self, cluster_name: str) -> Sequence[OwnedLoadBalancer]:
        """Every load balancer this provider made for ``cluster_name`` (and only those:
        tag or name them so that other clusters' and hand-made ones are never listed)."""


class Instances(ABC):
    """The V1 instance API, used only when :meth:`CloudProvider.instances_v2` is ``None``.

    Prefer :class:`InstancesV2` for new providers. Methods taking ``provider_id`` are
    called from the control plane and must not rely on local instance metadata.
    :attr:`authoritative` and :meth:`instance_belongs_to` are as in :class:`InstancesV2`.
    """

    authoritative: bool = False
    """As :attr:`InstancesV2.authoritative`."""

    async def instance_belongs_to(self, node_name: str, metadata: InstanceMetadata) -> bool:
        """As :meth:`InstancesV2.instance_belongs_to`; ``metadata`` has the providerID
        (the Node's, else ``<provider>://<InstanceID>``) and the instance's addresses.
        The default refuses."""
        return False

    @abstractmethod
    async def node_addresses(self, node_name: str) -> tuple[NodeAddress, ...]:
        """Addresses of the named node's instance (fallback when by-providerID fails)."""

    @abstractmethod
    async def node_addresses_by_provider_id(self, provider_id: str) -> tuple[NodeAddress, ...]:
        """Addresses of the instance. May be called with an empty ``provider_id``:
        raise then, and the controller falls back to :meth:`node_addresses`."""

    @abstractmethod
    async def instance_id(self, node_name: str) -> str:
        """The cloud instance ID of the named node.

        Raise :class:`InstanceNotFoundError` if the instance does not exist, and only
        then: never for a stopped or sleeping instance. May raise
        :class:`NotImplementedByProviderError`, in which case the node is initialized
        without a providerID.
        """

    @abstractmethod
    async def instance_type(self, node_name: str) -> str:
        """The instance type of the named node (fallback of the by-providerID form)."""

    @abstractmethod
    async def instance_type_by_provider_id(self, provider_id: str) -> str:
        """The instance type; tried first by the node controller."""

    @abstractmethod
    async def instance_exists_by_provider_id(self, provider_id: str) -> bool:
        """Whether the instance exists, stopped ones included.

        Return ``False`` only if the instance is really gone: a not-Ready Node whose
        instance does not exist is **deleted at once**. When unsure, raise.
        """

    async def instance_shutdown_by_provider_id(self, provider_id: str) -> bool:
        """Whether the instance is shut down (the Node then gets the shutdown taint).

        The default raises :class:`NotImplementedByProviderError`, which the lifecycle
        controller reads as "not shut down".
        """
        raise NotImplementedByProviderError()

    async def add_ssh_key_to_all_instances(self, user: str, key: bytes) -> None:
        """Unused by the CCM's controllers; the default raises
        :class:`NotImplementedByProviderError`."""
        raise NotImplementedByProviderError()

    async def current_node_name(self, hostname: str) -> str:
        """Unused by the CCM's controllers (a kubelet-side call); the default raises
        :class:`NotImplementedByProviderError`."""
        raise NotImplementedByProviderError()


class InstancesV2(ABC):
    """The instance API for external providers.

    When a provider supports it, the node controllers use it exclusively and never
    call :class:`Instances` or :class:`Zones`. Each method gets the whole Node: use
    ``node.spec.provider_id`` when set, else the name, labels or annotations.

    **Who wrote what you read.** A Node's kubelet writes its own Node (NodeRestriction
    lets it set its labels outside the reserved prefixes, its annotations, its status,
    and its ``spec.providerID`` while that is empty), and a new node identity may
    register a Node with any of them. What a provider reads from the Node is the node's
    word, not the cloud's. The kubelet serving certificate approver
    (``--controllers=...,servingcert``) therefore rests only on providers that declare
    :attr:`authoritative`, and calls :meth:`instance_metadata` for it with a Node that
    carries nothing but its name, UID and ``spec.providerID``; and it uses a
    providerID only once :meth:`instance_belongs_to` says the instance is the Node's.
    """

    authoritative: bool = False
    """Whether this capability's answers about an instance are the cloud's own record
    (its API, its hypervisor) and never the Node object's labels, annotations or
    status: a node must not be able to change them by writing its Node.

    ``True`` is a promise the kubelet serving certificate approver rests on: it
    approves a kubelet's certificate for the names and addresses
    :meth:`instance_metadata` reports. Set it only if, given a Node with nothing but a
    name and a providerID, :meth:`instance_metadata` answers from the cloud alone, and
    implement :meth:`instance_belongs_to` too. The default, ``False``, is the safe
    answer for a provider that has not said: the daemon refuses to start
    ``servingcert`` with it (as with ``k3s`` and ``rke2``, whose addresses are the
    Node's own annotations)."""

    async def instance_belongs_to(self, node_name: str, metadata: InstanceMetadata) -> bool:
        """Whether the instance ``metadata`` describes (``metadata.provider_id``, as
        :meth:`instance_metadata` answered it) is, by the cloud's own record, the
        instance of the Node named ``node_name``.

        A providerID is no proof: a node may set its own while it is empty, and a new
        node identity may register with any. Answer from what the node cannot write:
        the instance's own name, hostname or private DNS name as the cloud keeps it,
        compared with ``node_name`` the way this provider names Nodes (the name
        a kubelet registers with). Never read the Node object here, and say ``False``
        when unsure. Called by the kubelet serving certificate approver only (a
        ``False`` denies the kubelet's CSR); it may call the cloud. The default refuses.
        """
        return False

    @abstractmethod
    async def instance_exists(self, node: Node) -> bool:
        """Whether the node's instance exists, stopped ones included.

        Return ``False`` only if the instance is really gone: a not-Ready Node whose
        instance does not exist is **deleted at once**. When unsure, raise.
        """

    @abstractmethod
    async def instance_shutdown(self, node: Node) -> bool:
        """Whether the node's instance is shut down (the Node then gets the shutdown
        taint). :class:`NotImplementedByProviderError` counts as "not shut down"."""

    @abstractmethod
    async def instance_metadata(self, node: Node) -> InstanceMetadata | None:
        """Metadata used to initialize the node and keep its addresses and labels current.

        Return ``None`` to skip the node silently: it stays uninitialized (tainted)
        and is not retried until it changes. Raise to have it retried with backoff.
        """


class Routes(ABC):
    """Cloud routes to nodes' pod CIDRs; ``cluster_name`` scopes them."""

    @abstractmethod
    async def list_routes(self, cluster_name: str) -> Sequence[Route]:
        """Every route this provider manages for the cluster."""

    @abstractmethod
    async def create_route(self, cluster_name: str, name_hint: str, route: Route) -> None:
        """Create ``route``. ``name_hint`` is the Node's UID; if used to name the route,
        dual-stack providers must still make names unique per CIDR."""

    @abstractmethod
    async def delete_route(self, cluster_name: str, route: Route) -> None:
        """Delete a route as returned by :meth:`list_routes`."""


class Zones(ABC):
    """Zone and region of instances (deprecated). Only the V1 node path calls it,
    by providerID first, then by node name."""

    async def get_zone(self) -> Zone:
        """The zone of the machine this code runs on; kubelet-only, never called by the
        CCM. The default raises :class:`NotImplementedByProviderError`."""
        raise NotImplementedByProviderError()

    @abstractmethod
    async def get_zone_by_provider_id(self, provider_id: str) -> Zone:
        """The zone of the instance; must not rely on local metadata."""

    @abstractmethod
    async def get_zone_by_node_name(self, node_name: str) -> Zone:
        """The zone of the named node's instance; must not rely on local metadata."""


class Clusters(ABC):
    """Cluster listing; part of the contract, used by no controller."""

    @abstractmethod
    async def list_clusters(self) -> Sequence[str]:
        """Names of the clusters this provider knows."""

    @abstractmethod
    async def master(self, cluster_name: str) -> str:
        """Address of the cluster's control plane."""


# ---------------------------------------------------------------------------
# The provider
# ---------------------------------------------------------------------------


class CloudProvider(ABC):
    """A cloud: its name, its setup hook and the capabilities it supports.

    Subclasses must implement :meth:`provider_name` and :meth:`has_cluster_id`, and
    override the accessors of the capabilities they support; the others return
    ``None``, which means **unsupported**.

    Providers are built by a factory registered under a name (see
    :func:`~kube_ccm.cloudprovider.register_cloud_provider`). The factory should only
    parse configuration; network work belongs in :meth:`initialize`.
    """

    async def initialize(  # noqa: B027 (an optional hook: doing nothing is a valid default)
        self, client_builder: ClientBuilder, stop: asyncio.Event
    ) -> None:
        """Called exactly once, after leadership is acquired and before any controller starts.

        ``client_builder`` gives Kubernetes clients for named identities. A provider
        may start its own background tasks here; they must end when ``stop`` is set.
        An exception stops the daemon. The default does nothing.
        """

    async def aclose(self) -> None:  # noqa: B027 (an optional hook: doing nothing is a valid default)
        """Release what the provider holds (connections, threads, files).

        The daemon calls it once on every way out after :meth:`initialize` was called
        (also when ``initialize`` raised): a signal, the loss of leadership, a start-up
        failure. ``kube-ccm gc`` calls it too. It should return within seconds and
        must not raise (an exception is logged). The default does nothing.
        """

    def load_balancer(self) -> LoadBalancer | None:
        """The load-balancer capability, or ``None`` if unsupported (no service controller)."""
        return None

    def instances(self) -> Instances | None:
        """The V1 instance capability, or ``None`` if unsupported."""
        return None

    def instances_v2(self) -> InstancesV2 | None:
        """The V2 instance capability, or ``None`` if unsupported. When it is not ``None``,
        node controllers use it exclusively and never call :meth:`instances` or
        :meth:`zones`."""
        return None

    def zones(self) -> Zones | None:
        """The zones capability (deprecated; V1 path only), or ``None`` if unsupported."""
        return None

    def clusters(self) -> Clusters | None:
        """The clusters capability, or ``None`` if unsupported."""
        return None

    def routes(self) -> Routes | None:
        """The routes capability, or ``None`` if unsupported (no route controller)."""
        return None

    @abstractmethod
    def provider_name(self) -> str:
        """The provider's name; the V1 providerID helper builds ``<name>://<id>`` with it."""

    @abstractmethod
    def has_cluster_id(self) -> bool:
        """Whether the cloud resources are tagged with a cluster ID.

        ``False`` makes the daemon refuse to start unless ``--allow-untagged-cloud`` is
        set (then it only warns).
        """


class InformerUser(ABC):
    """Mix-in for providers that want the daemon's shared informers.

    Inherit from it next to :class:`CloudProvider`; the daemon checks
    ``isinstance(provider, InformerUser)`` and calls :meth:`set_informers` right after
    :meth:`CloudProvider.initialize`.
    """

    @abstractmethod
    def set_informers(self, informers: Any) -> None:
        """Receive the shared informer factory of the runtime. Must return quickly;
        register handlers here, do not wait for caches."""


class PVLabeler(ABC):
    """Mix-in for providers that label PersistentVolumes (deprecated upstream).

    Inherit from it next to :class:`CloudProvider`; the PV labelling code checks
    ``isinstance(provider, PVLabeler)``.
    """

    @abstractmethod
    async def get_labels_for_volume(self, pv: PersistentVolume) -> Mapping[str, str]:
        """Labels for the volume, typically zone and region; several zones are joined
        with ``__``. Return an empty mapping for volumes that are not this cloud's
        (check ``pv.spec.volume_source``). Raise to have the volume retried (or, in the
        webhook, refused)."""


class NodePodCIDRs(ABC):
    """Mix-in for providers whose cloud gives each instance its pod CIDRs (alias IP
    ranges, delegated prefixes): the node IPAM controller's cloud allocator
    (``--allocate-node-cidrs --cidr-allocator-type=CloudAllocator``) writes what it
    returns to the Node's ``spec.podCIDRs``, as upstream's ``CloudAllocator`` does with
    GCE's alias ranges.

    Inherit from it next to :class:`CloudProvider`; the controller checks
    ``isinstance(provider, NodePodCIDRs)`` and refuses to start without it.
    """

    @abstractmethod
    async def node_pod_cidrs(self, node: Node) -> Sequence[str]:
        """The pod CIDRs the cloud assigned to the Node's instance: one, or an IPv4 and an
        IPv6 one for dual-stack (any more are ignored, as upstream does).

        Called only for Nodes that have ``spec.providerID``: find the instance by it (this
        runs in the control plane, not on the Node). Return the same CIDRs for as long as
        the instance lives: ``spec.podCIDRs`` cannot be changed once set. Return an empty
        sequence when the instance has none (yet), or raise: the Node then gets a Warning
        ``CIDRNotAvailable`` and is retried with backoff. Releasing the CIDRs when the
        instance goes is the cloud's business; the controller frees nothing.
        """


class ProbeLine(Protocol):
    """One line of a provider's own ``kube-ccm doctor`` probe (:class:`SelfProbing`):
    ``status`` is ``PASS``, ``WARN`` or ``FAIL`` (anything else is shown as ``WARN``);
    ``fix`` says what to do when it is not ``PASS``."""

    @property
    def name(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def detail(self) -> str: ...
    @property
    def fix(self) -> str: ...


@runtime_checkable
class SelfProbing(Protocol):
    """A provider that checks its own cloud's endpoints and credentials for
    ``kube-ccm doctor``.

    Found by the method's name (``isinstance(provider, SelfProbing)``), so a provider
    need not inherit from it; in a composite, each member is asked. :meth:`doctor_probe`
    is called once, after :meth:`CloudProvider.initialize`, within doctor's call
    timeout; it must only read (never create or change anything in the cloud) and
    return one :class:`ProbeLine` per thing checked. Raising is shown as one ``FAIL``
    line with the error.
    """

    async def doctor_probe(self) -> Sequence[ProbeLine]: ...
