"""The ``servicelb`` provider: k3s's ServiceLB as a kube-ccm load-balancer provider.

For each LoadBalancer Service the service controller gives it, a DaemonSet
``svclb-<name>-<uid8>`` in one namespace (``kube-system`` by default) runs a
forwarder per Service port on every chosen node, holding that port as a hostPort
(:mod:`~kube_ccm.providers.servicelb.workload`). The Service's ingress is the
addresses of the nodes where that pod is ready
(:mod:`~kube_ccm.providers.servicelb.status`).

How the status follows the pods: the provider watches its DaemonSets and pods (in
its namespace), the Nodes, and the EndpointSlices (for ``externalTrafficPolicy:
Local``), and when something a Service's status depends on changes it asks the
service controller to sync that Service again (``LoadBalancer.set_resync``). The
sync calls :meth:`ServiceLBLoadBalancer.ensure_load_balancer`, which re-applies the
DaemonSet (no write when unchanged) and returns the status; the service controller
writes it. k3s instead returns ``ImplementedElsewhere`` and patches the status from
its own worker, behind the service controller's back; here the service controller
stays the one writer of ``status.loadBalancer`` and its finalizer.

Node choice (k3s): while no Node has the label ``svccontroller.k3s.cattle.io/enablelb``
every node runs the pods; once any Node has it, only Nodes labelled ``true``, and for
a Service labelled ``svccontroller.k3s.cattle.io/lbpool=<pool>`` only those with the
same pool label. A label change re-applies every DaemonSet (the pods come and go) and
so the statuses.

Bad input is a Warning Event on the Service that says what to fix, and nothing is
deleted (but for a reserved port): a port another Service's svclb pods hold on the
same nodes (``PortConflict``, naming the other Service only when it is in the same
namespace; the DaemonSet is not made or changed), a node where the port is already
taken (``HostPortInUse``, from the scheduler's verdict on the pod), a priority class
that does not exist (``PriorityClassNotFound``), a Service with no ports
(``NoPorts``), and Nodes that all lack the enable label (``NoEnabledNodes``; the
DaemonSet is kept, so labelling a Node is enough).

Refused for the nodes' and tenants' sake (unlike k3s), each with a Warning Event:

* ``HostPortReserved``: a port of the node's own services (the cloud-config's
  :data:`~kube_ccm.providers.servicelb.config.WELL_KNOWN_PORTS`, each Node's reported
  kubelet port, the operator's ``reservedPorts``), any protocol, for the whole
  Service. A DaemonSet already holding a well-known or operator-reserved port is
  deleted. A port only a Node reports (``status.daemonEndpoints``, which the node
  writes itself) is refused to a Service that does not hold it yet, and never costs
  a Service a port it has: a node can deny a port, never grant one or take one away.
* ``PriorityClassNotAllowed``: the Service's priority-class annotation names a class
  the operator did not list in ``allowedPriorityClasses`` (a tenant cannot raise its
  pods' priority; no class, ``""``, is always allowed).
* ``TooManyPorts``: more ports than ``maxPortsPerService`` (one container per port
  on every node).
* ``DaemonSetLimitReached``: the Service's namespace already has
  ``maxServicesPerNamespace`` svclb DaemonSets (the pods run in ServiceLB's
  namespace, outside the tenant's ResourceQuota).

And on the Node (a Warning per address, logged too): ``NodeAddressNotPublished``, an
address the Node reports that is never published as a Service's ingress (see
:mod:`~kube_ccm.providers.servicelb.status`: what the node wrote itself must not make
kube-proxy on every node send some other host's traffic to a Service). The Services
get no Event for it: they just do not list it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from kube_ccm.api.objects import LoadBalancerStatus, Node, Service
from kube_ccm.cloudprovider import (
    NODES,
    ApiError,
    ClientBuilder,
    CloudProvider,
    CloudProviderError,
    EventRecorder,
    EventType,
    Informer,
    InformerFactory,
    InformerUser,
    InvalidSourceRangeError,
    KubeClient,
    KubernetesClient,
    LoadBalancer,
    ProviderEventRecorder,
    RetryError,
    TypedClient,
    object_reference,
    start_event_recorder,
)
from kube_ccm.providers.servicelb.config import WELL_KNOWN_PORTS, ServiceLBConfig, node_networks
from kube_ccm.providers.servicelb.objects import (
    DEFAULT_SERVICES,
    ENDPOINT_SLICES,
    KUBERNETES_NAMESPACE,
    KUBERNETES_SERVICE,
    PRIORITY_CLASSES,
    DaemonSet,
    EndpointSlice,
    Pod,
    daemon_set_bodies,
    daemon_sets,
    pods,
)
from kube_ccm.providers.servicelb.status import (
    CONTROL_PLANE_LABELS,
    PUBLISHED_TYPES,
    AddressRules,
    IPAddress,
    NodeAddresses,
    endpoint_nodes,
    ingress,
    node_addresses,
    parse_address,
    serving_nodes,
)
from kube_ccm.providers.servicelb.workload import (
    SPEC_HASH_ANNOTATION,
    Names,
    ServiceLBInputError,
    daemon_set,
    daemon_set_name,
    host_ports,
    priority_class,
    selects_by_label,
)

log = logging.getLogger(__name__)

PROVIDER_NAME = "servicelb"
EVENT_SOURCE = "servicelb"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
"""An EndpointSlice's Service."""

# Event reasons: k3s's where it has them, ours for the bad input it leaves to Pending pods.
APPLIED_DAEMON_SET_REASON = "AppliedDaemonSet"
DELETED_DAEMON_SET_REASON = "DeletedDaemonSet"
PORT_CONFLICT_REASON = "PortConflict"
HOST_PORT_IN_USE_REASON = "HostPortInUse"
PRIORITY_CLASS_NOT_FOUND_REASON = "PriorityClassNotFound"
NO_PORTS_REASON = "NoPorts"
NO_ENABLED_NODES_REASON = "NoEnabledNodes"
HOST_PORT_RESERVED_REASON = "HostPortReserved"
PRIORITY_CLASS_NOT_ALLOWED_REASON = "PriorityClassNotAllowed"
TOO_MANY_PORTS_REASON = "TooManyPorts"
DAEMON_SET_LIMIT_REASON = "DaemonSetLimitReached"
NODE_ADDRESS_NOT_PUBLISHED_REASON = "NodeAddressNotPublished"
"""Warning on a Node: an address it reports that ServiceLB never publishes (ours)."""
MAX_TOLD_PER_NODE = 8
"""Refused addresses told (Event and log line) per Node; the others are refused all
the same."""

BUILTIN_PRIORITY_CLASSES = frozenset({"system-node-critical", "system-cluster-critical"})
"""Created by every kube-apiserver at start: never looked up."""
SYNC_WAIT = 10.0
"""Seconds a call waits for the informers' first list before asking to be retried."""
RETRY_AFTER = 2.0


class ServiceLBError(CloudProviderError):
    """A Service ServiceLB will not serve as it is; the message says what to fix (and
    the same text is a Warning Event on the Service)."""


def _service_key(labels: Mapping[str, str], names: Names) -> str | None:
    name = labels.get(names.svc_name)
    namespace = labels.get(names.svc_namespace)
    return f"{namespace}/{name}" if name and namespace else None


def _pod_view(pod: Pod) -> tuple[object, ...]:
    """What of a pod the status and the Events depend on."""
    scheduled = pod.condition("PodScheduled")
    return (
        pod.metadata.deletion_timestamp is None,
        pod.spec.node_name,
        pod.status.pod_ip,
        pod.ready,
        pod.target_node,
        None if scheduled is None else (scheduled.status, scheduled.message),
    )


def _node_view(node: Node, names: Names) -> tuple[object, ...]:
    labels = node.metadata.labels
    return (
        names.enable_lb in labels,
        labels.get(names.enable_lb),
        labels.get(names.lb_pool),
        node.status.addresses,
        any(label in labels for label in CONTROL_PLANE_LABELS),
        kubelet_port(node),
    )


def kubelet_port(node: Node) -> int:
    """The kubelet port ``node`` reports (``status.daemonEndpoints``), 0 if none."""
    endpoints = node.status.daemon_endpoints
    if endpoints is None or endpoints.kubelet_endpoint is None:
        return 0
    return endpoints.kubelet_endpoint.port


def _is_kubernetes_slice(eps: EndpointSlice) -> bool:
    """One of kube-apiserver's EndpointSlices of the ``kubernetes`` Service."""
    return (
        eps.metadata.namespace == KUBERNETES_NAMESPACE
        and eps.metadata.labels.get(SERVICE_NAME_LABEL) == KUBERNETES_SERVICE
    )


def _slice_addresses(eps: EndpointSlice) -> frozenset[str]:
    return frozenset(a for e in eps.endpoints or () for a in e.addresses)


def _parsed(texts: Iterable[str]) -> frozenset[IPAddress]:
    return frozenset(ip for ip in map(parse_address, texts) if ip is not None)


def _cluster_ips(svc: Service) -> frozenset[str]:
    return frozenset((svc.spec.cluster_ip, *svc.spec.cluster_ips)) - {"", "None"}


def _matches(labels: Mapping[str, str], selector: Mapping[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def _service_of(ds: DaemonSet, names: Names) -> str:
    labels = ds.metadata.labels
    return f"{labels.get(names.svc_namespace, '?')}/{labels.get(names.svc_name, '?')}"


def _held_ports(ds: DaemonSet) -> frozenset[tuple[str, int]]:
    """(protocol, hostPort) of the DaemonSet's pods."""
    return frozenset(
        (p.protocol, p.host_port)
        for c in ds.spec.template.spec.containers
        for p in c.ports
        if p.host_port
    )


def _ports_text(ports: Iterable[tuple[str, int]]) -> str:
    return ", ".join(f"{port}/{protocol}" for protocol, port in sorted(ports, key=lambda p: p[1]))


def _names_text(names: Iterable[str], limit: int = 5) -> str:
    listed = sorted(names)
    more = f" and {len(listed) - limit} more" if len(listed) > limit else ""
    return ", ".join(listed[:limit]) + more


class ServiceLBLoadBalancer(LoadBalancer):
    """The load-balancer capability (see the module); its state is the provider's."""

    def __init__(self, provider: ServiceLBProvider) -> None:
        self._provider = provider

    def set_resync(self, resync: Callable[[str], None]) -> None:
        self._provider.resync = resync

    def get_load_balancer_name(self, cluster_name: str, service: Service) -> str:
        return daemon_set_name(service)

    async def get_load_balancer(
        self, cluster_name: str, service: Service
    ) -> LoadBalancerStatus | None:
        provider = self._provider
        await provider.ready()
        if not await provider.exists(service):
            return None
        return provider.status(service)

    async def ensure_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> LoadBalancerStatus:
        return await self._provider.ensure(service)

    async def update_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> None:
        # The DaemonSet chooses the nodes by their labels, not by the service
        # controller's node set (k3s ignores it too); label changes re-apply the
        # DaemonSets through the provider's own watch of the Nodes.
        return None

    async def ensure_load_balancer_deleted(self, cluster_name: str, service: Service) -> None:
        await self._provider.delete(service)


class ServiceLBProvider(CloudProvider, InformerUser):
    """Load balancers only; compose it with an instances provider (``composite``)."""

    def __init__(self, config: ServiceLBConfig | None = None) -> None:
        self.config = config or ServiceLBConfig()
        self.names = Names(self.config.label_domain)
        self._lb = ServiceLBLoadBalancer(self)
        self.resync: Callable[[str], None] | None = None
        """The service controller's hook (``set_resync``); ``None`` until it is given."""
        self.recorder: EventRecorder | None = None
        self._events: ProviderEventRecorder | None = None
        """The recorder this provider started (``recorder`` may be replaced in tests)."""
        self._client: KubeClient | None = None
        self._nodes: Informer[Node] | None = None
        self._daemon_sets: Informer[DaemonSet] | None = None
        self._pods: Informer[Pod] | None = None
        self._slices: Informer[EndpointSlice] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._local: set[str] = set()
        """Keys of the Services ensured with ``externalTrafficPolicy: Local``."""
        self._refused: set[str] = set()
        """Keys of the Services refused for what others' changes may clear (a port
        another Service holds, a Node's kubelet port, the namespace's cap): tried
        again at once when a DaemonSet goes or a Node changes."""
        self._told: dict[tuple[str, str], str] = {}
        """The last message of each (Service key, reason) told in an Event; repeats of a
        state already told (every resync) are not sent again."""
        self._networks = node_networks(self.config)
        self._kubernetes: Informer[Service] | None = None
        self._told_nodes: dict[tuple[str, str], str] = {}
        """The message told for each (Node name, refused address), as ``_told``."""

    # -- the contract --------------------------------------------------------------

    def load_balancer(self) -> ServiceLBLoadBalancer:
        return self._lb

    def provider_name(self) -> str:
        return PROVIDER_NAME

    def has_cluster_id(self) -> bool:
        return True  # it makes nothing outside the cluster that a tag would mark

    async def initialize(self, client_builder: ClientBuilder, stop: asyncio.Event) -> None:
        client = client_builder.client(PROVIDER_NAME)
        if not isinstance(client, KubeClient):
            raise ServiceLBError("the servicelb provider needs kube-ccm's own Kubernetes client")
        self._client = client
        self.recorder = self._events = start_event_recorder(client, EVENT_SOURCE)
        loop = asyncio.get_running_loop()
        namespace = self.config.namespace
        has_svc = self.names.svc_name
        self._daemon_sets = Informer(
            client, daemon_sets(namespace), name="servicelb-daemonsets", label_selector=has_svc
        )
        self._pods = Informer(
            client, pods(namespace), name="servicelb-pods", label_selector=has_svc
        )
        self._slices = Informer(
            client,
            ENDPOINT_SLICES,
            name="servicelb-endpointslices",
            label_selector=SERVICE_NAME_LABEL,
        )
        self._daemon_sets.add_handler(
            on_update=self._daemon_set_updated, on_delete=self._daemon_set_deleted
        )
        self._pods.add_handler(
            on_add=self._pod_changed,
            on_update=self._pod_updated,
            on_delete=self._pod_changed,
        )
        self._slices.add_handler(
            on_add=self._slice_changed,
            on_update=self._slice_updated,
            on_delete=self._slice_changed,
        )
        self._kubernetes = Informer(
            client,
            DEFAULT_SERVICES,
            name="servicelb-kubernetes-service",
            field_selector=f"metadata.name={KUBERNETES_SERVICE}",
        )
        self._kubernetes.add_handler(
            on_add=lambda svc: self._resync_all(),
            on_update=self._kubernetes_updated,
            on_delete=lambda svc: self._resync_all(),
        )
        self._tasks = [
            loop.create_task(informer.run(), name=informer.name)
            for informer in (self._daemon_sets, self._pods, self._slices, self._kubernetes)
        ]

    def set_informers(self, informers: Any) -> None:
        """The daemon's shared Node informer (one cache of the Nodes for everyone)."""
        if isinstance(informers, InformerFactory) and self._nodes is None:
            self._watch_nodes(informers.informer(NODES, name="nodes"))

    def _watch_nodes(self, nodes: Informer[Node]) -> None:
        self._nodes = nodes
        nodes.add_handler(
            on_add=self._node_added,
            on_update=self._node_updated,
            on_delete=lambda node: self._nodes_changed(),
        )

    async def aclose(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        events, self._events = self._events, None
        if events is not None:
            await events.aclose()

    # -- watching -------------------------------------------------------------------

    def _resync(self, key: str | None) -> None:
        if key is not None and self.resync is not None:
            self.resync(key)

    def _resync_all(self) -> None:
        if self._daemon_sets is None:
            return
        for ds in self._daemon_sets.list():
            self._resync(_service_key(ds.metadata.labels, self.names))

    def _daemon_set_deleted(self, ds: DaemonSet) -> None:
        self._resync(_service_key(ds.metadata.labels, self.names))  # made again if still wanted
        self._resync_refused()

    def _daemon_set_updated(self, old: DaemonSet, new: DaemonSet) -> None:
        if _held_ports(old) != _held_ports(new) or (
            old.spec.template.spec.node_selector != new.spec.template.spec.node_selector
        ):
            self._resync_refused()

    def _resync_refused(self) -> None:
        """The Services refused for a port conflict, at once when a port may be free."""
        for key in list(self._refused):
            self._resync(key)

    def _pod_changed(self, pod: Pod) -> None:
        self._resync(_service_key(pod.metadata.labels, self.names))

    def _pod_updated(self, old: Pod, new: Pod) -> None:
        if _pod_view(old) != _pod_view(new):
            self._pod_changed(new)

    def _slice_key(self, eps: EndpointSlice) -> str | None:
        service = eps.metadata.labels.get(SERVICE_NAME_LABEL)
        key = f"{eps.metadata.namespace}/{service}" if service else None
        return key if key in self._local else None

    def _slice_changed(self, eps: EndpointSlice) -> None:
        if _is_kubernetes_slice(eps):
            self._resync_all()  # kube-apiserver's addresses: every status may change
        self._resync(self._slice_key(eps))

    def _slice_updated(self, old: EndpointSlice, new: EndpointSlice) -> None:
        if endpoint_nodes((old,)) != endpoint_nodes((new,)) or (
            _is_kubernetes_slice(new) and _slice_addresses(old) != _slice_addresses(new)
        ):
            self._slice_changed(new)

    def _kubernetes_updated(self, old: Service, new: Service) -> None:
        if _cluster_ips(old) != _cluster_ips(new):
            self._resync_all()

    def _nodes_changed(self) -> None:
        self._resync_all()
        self._resync_refused()

    def _node_added(self, node: Node) -> None:
        # A new Node matters at once only if it turns label selection on, or reports an
        # address another Node has (then neither publishes it); its svclb pod (and with
        # it the status) comes through the pod watch.
        if self.names.enable_lb in node.metadata.labels or self._claims_another_s(node):
            self._resync_all()

    def _claims_another_s(self, node: Node) -> bool:
        assert self._nodes is not None
        mine = _parsed(a.address for a in node.status.addresses if a.type in PUBLISHED_TYPES)
        return bool(mine) and any(
            parse_address(a.address) in mine
            for other in self._nodes.list()
            if other.metadata.name != node.metadata.name
            for a in other.status.addresses
        )

    def _node_updated(self, old: Node, new: Node) -> None:
        if _node_view(old, self.names) != _node_view(new, self.names):
            self._nodes_changed()

    # -- reading ----------------------------------------------------------------------

    @property
    def api(self) -> TypedClient:
        if self._client is None:
            raise RuntimeError("the servicelb provider is used before initialize()")
        return TypedClient(self._client)

    @property
    def client(self) -> KubernetesClient:
        if self._client is None:
            raise RuntimeError("the servicelb provider is used before initialize()")
        return self._client

    async def ready(self) -> None:
        """The caches have been listed once (a Node cache of its own if the daemon gave
        none); :class:`RetryError` if that takes more than :data:`SYNC_WAIT`."""
        if self._client is None or self._daemon_sets is None:
            raise RuntimeError("the servicelb provider is used before initialize()")
        if self._nodes is None:
            nodes: Informer[Node] = Informer(self._client, NODES, name="servicelb-nodes")
            self._watch_nodes(nodes)
            self._tasks.append(asyncio.get_running_loop().create_task(nodes.run()))
        informers = (self._nodes, self._daemon_sets, self._pods, self._slices, self._kubernetes)
        try:
            async with asyncio.timeout(SYNC_WAIT):
                for informer in informers:
                    assert informer is not None
                    await informer.wait_synced()
        except TimeoutError:
            raise RetryError(
                "servicelb: the Nodes, DaemonSets, pods, EndpointSlices and the kubernetes "
                "Service are not listed yet",
                RETRY_AFTER,
            ) from None

    def _all_nodes(self) -> list[Node]:
        assert self._nodes is not None
        return self._nodes.list()

    def daemon_set(self, service: Service) -> DaemonSet | None:
        assert self._daemon_sets is not None
        return self._daemon_sets.get(f"{self.config.namespace}/{daemon_set_name(service)}")

    async def exists(self, service: Service) -> bool:
        """Whether the Service's DaemonSet exists, asked of the API server (not the
        cache, which may lag a create or a delete by a moment): the service controller
        asks before deleting, and a DaemonSet just made must not be left behind."""
        namespace = self.config.namespace
        try:
            await self.api.get(
                daemon_set_bodies(namespace), daemon_set_name(service), namespace=namespace
            )
        except ApiError as exc:
            if exc.not_found:
                return False
            raise
        return True

    def _pods_of(self, service: Service) -> list[Pod]:
        assert self._pods is not None
        names = self.names
        return [
            p
            for p in self._pods.list()
            if p.metadata.labels.get(names.svc_name) == service.metadata.name
            and p.metadata.labels.get(names.svc_namespace) == service.metadata.namespace
        ]

    def status(self, service: Service) -> LoadBalancerStatus:
        """The ingress rule (:mod:`~kube_ccm.providers.servicelb.status`) on the caches."""
        serving = serving_nodes(self._pods_of(service))
        if service.spec.external_traffic_policy == "Local":
            assert self._slices is not None
            meta = service.metadata
            slices = [
                s
                for s in self._slices.list()
                if s.metadata.namespace == meta.namespace
                and s.metadata.labels.get(SERVICE_NAME_LABEL) == meta.name
            ]
            serving = serving & endpoint_nodes(slices)
        return ingress(service, self.node_addresses(), serving)

    def address_rules(self) -> AddressRules:
        """The rules on the Nodes' addresses: the operator's ``nodeAddressCIDRs`` and
        the ``kubernetes`` Service's ClusterIPs and endpoint addresses, from the caches
        (every EndpointSlice of it in ``default`` counts: it can only refuse more)."""
        assert self._slices is not None
        cluster_ips = [
            text
            for svc in (self._kubernetes.list() if self._kubernetes is not None else ())
            for text in _cluster_ips(svc)
        ]
        endpoints = [
            address
            for eps in self._slices.list()
            if _is_kubernetes_slice(eps)
            for address in _slice_addresses(eps)
        ]
        return AddressRules(
            networks=self._networks, cluster_ips=_parsed(cluster_ips), endpoints=_parsed(endpoints)
        )

    def node_addresses(self) -> NodeAddresses:
        """Every Node's published addresses (the status rule's input); each refused
        address told once as a Warning on its Node, and logged."""
        nodes = self._all_nodes()
        addresses = node_addresses(nodes, self.address_rules())
        by_name = {n.metadata.name: n for n in nodes}
        now: dict[tuple[str, str], str] = {}
        per_node: dict[str, int] = {}
        for refused in addresses.refused:
            per_node[refused.node] = per_node.get(refused.node, 0) + 1
            if per_node[refused.node] > MAX_TOLD_PER_NODE:
                continue  # a node listing hundreds of addresses gets no hundred Events
            key = (refused.node, refused.address)
            message = (
                f"ServiceLB does not publish this Node's {refused.kind} {refused.address} "
                f"as a LoadBalancer Service address: {refused.why}. Published, it would "
                "make kube-proxy on every node send that address's traffic to the "
                "Services' backends. If the node should have this address, correct the "
                "Node's addresses (the kubelet's --node-ip, the cloud's, or the "
                "k3s.io/internal-ip and external-ip annotations) or, if it is outside "
                "nodeAddressCIDRs, add its network there; if not, the node may be "
                "compromised: check it"
            )
            now[key] = message
            if self._told_nodes.get(key) == message:
                continue
            log.warning(
                "servicelb: not publishing %s %s of Node %s: %s",
                refused.kind,
                refused.address,
                refused.node,
                refused.why,
            )
            node = by_name.get(refused.node)
            if node is not None and self.recorder is not None:
                self.recorder.event(
                    object_reference(node), "Warning", NODE_ADDRESS_NOT_PUBLISHED_REASON, message
                )
        self._told_nodes = now
        return addresses

    # -- ensuring and deleting ----------------------------------------------------------

    async def ensure(self, service: Service) -> LoadBalancerStatus:
        """Apply the Service's DaemonSet (after the checks of the module) and return its
        status as the pods are now."""
        await self.ready()
        key = f"{service.metadata.namespace}/{service.metadata.name}"
        if service.spec.external_traffic_policy == "Local":
            self._local.add(key)
        else:
            self._local.discard(key)
        nodes = self._all_nodes()
        by_label = selects_by_label([n.metadata.labels for n in nodes], self.names)
        try:
            body = daemon_set(service, self.config, self.names, by_label=by_label)
        except ServiceLBInputError as exc:
            raise self._refuse(service, exc.reason, str(exc)) from None
        except InvalidSourceRangeError:
            raise  # the service controller's SyncLoadBalancerFailed Event names it
        self._told.pop((key, NO_PORTS_REASON), None)
        self._check_port_count(service)
        await self._check_reserved_ports(service, body, nodes)
        self._check_priority_class_allowed(service)
        await self._check_priority_class(service)
        self._check_namespace_cap(service)
        selector: Mapping[str, str] = body["spec"]["template"]["spec"].get("nodeSelector", {})
        chosen = {n.metadata.name for n in nodes if _matches(n.metadata.labels, selector)}
        self._check_conflicts(service, body, chosen, nodes)
        if by_label and not chosen:
            pool = selector.get(self.names.lb_pool)
            self._warn(
                service,
                NO_ENABLED_NODES_REASON,
                f"no Node is labelled {self.names.enable_lb}=true"
                + (f" and {self.names.lb_pool}={pool}" if pool else "")
                + ", so no node runs this Service's svclb pods (once any Node has the "
                f"{self.names.enable_lb} label, only Nodes labelled true do): label the "
                f"Nodes to use with {self.names.enable_lb}=true"
                + (f" {self.names.lb_pool}={pool}" if pool else ""),
            )
        else:
            self._told.pop((key, NO_ENABLED_NODES_REASON), None)
        await self._apply(service, body)
        self._refused.discard(key)
        self._check_host_ports(service)
        return self.status(service)

    async def delete(self, service: Service) -> None:
        key = f"{service.metadata.namespace}/{service.metadata.name}"
        self._local.discard(key)
        self._refused.discard(key)
        for told in [k for k in self._told if k[0] == key]:
            del self._told[told]
        await self._delete_daemon_set(service)

    async def _delete_daemon_set(self, service: Service) -> None:
        """Delete the Service's DaemonSet if it exists, with a Normal Event."""
        name = daemon_set_name(service)
        namespace = self.config.namespace
        try:
            await self.api.delete(daemon_set_bodies(namespace), name, namespace=namespace)
        except ApiError as exc:
            if exc.not_found:
                return
            raise
        self._event(
            service,
            "Normal",
            DELETED_DAEMON_SET_REASON,
            f"Deleted LoadBalancer DaemonSet {namespace}/{name}",
        )

    async def _apply(self, service: Service, body: dict[str, Any]) -> None:
        """Create the DaemonSet, or replace it when what kube-ccm would write changed
        (:data:`SPEC_HASH_ANNOTATION`); nothing when it did not."""
        namespace = self.config.namespace
        name = body["metadata"]["name"]
        resource = daemon_set_bodies(namespace)
        current = self.daemon_set(service)
        wanted = body["metadata"]["annotations"][SPEC_HASH_ANNOTATION]
        if current is not None and current.metadata.annotations.get(SPEC_HASH_ANNOTATION) == wanted:
            return
        if current is None:
            try:
                await self.api.create(resource, body, namespace=namespace)
            except ApiError as exc:
                if exc.status != 409:
                    raise
                fresh = await self.api.get(resource, name, namespace=namespace)
                await self._replace(body, fresh)
        else:
            fresh = await self.api.get(resource, name, namespace=namespace)
            await self._replace(body, fresh)
        self._event(
            service,
            "Normal",
            APPLIED_DAEMON_SET_REASON,
            f"Applied LoadBalancer DaemonSet {namespace}/{name}",
        )

    async def _replace(self, body: dict[str, Any], fresh: Mapping[str, Any]) -> None:
        """PUT ``body`` over ``fresh`` (its resourceVersion: a conflict is retried by the
        service controller), keeping others' labels and annotations."""
        meta = fresh.get("metadata") or {}
        new = dict(body)
        new["metadata"] = {
            **body["metadata"],
            "resourceVersion": meta.get("resourceVersion", ""),
            "labels": {**(meta.get("labels") or {}), **body["metadata"]["labels"]},
            "annotations": {**(meta.get("annotations") or {}), **body["metadata"]["annotations"]},
        }
        namespace = self.config.namespace
        await self.api.replace(
            daemon_set_bodies(namespace), body["metadata"]["name"], new, namespace=namespace
        )

    # -- the checks ------------------------------------------------------------------------

    def _check_port_count(self, service: Service) -> None:
        cap = self.config.max_ports_per_service
        count = len(service.spec.ports)
        if cap and count > cap:
            raise self._refuse(
                service,
                TOO_MANY_PORTS_REASON,
                f"the Service has {count} ports and ServiceLB serves at most {cap} per "
                "Service (maxPortsPerService in the servicelb cloud-config; each port is "
                "a forwarder container on every node): split it into Services of at most "
                f"{cap} ports, or ask the cluster operator to raise the cap",
            )
        self._told.pop((self._key(service), TOO_MANY_PORTS_REASON), None)

    def _reserved_ports(self, nodes: Sequence[Node]) -> tuple[dict[int, str], dict[int, set[str]]]:
        """The ports no Service may take: those a cluster admin vouches for (the
        well-known ones, the operator's list), each with why; and the kubelet ports the
        Nodes report (written by the nodes themselves), with the Nodes reporting each."""
        trusted: dict[int, str] = {}
        by_nodes: dict[int, set[str]] = {}
        if self.config.reserve_system_ports:
            trusted.update(WELL_KNOWN_PORTS)
            for node in nodes:
                port = kubelet_port(node)
                if port and port not in trusted:
                    by_nodes.setdefault(port, set()).add(node.metadata.name)
        for port in self.config.reserved_ports:
            trusted[port] = "reserved by the cluster operator (reservedPorts)"
        return trusted, by_nodes

    async def _check_reserved_ports(
        self, service: Service, body: Mapping[str, Any], nodes: Sequence[Node]
    ) -> None:
        """Refuse the node's own ports (see the module): with a hostPort there, portmap
        would send the node's traffic for that port (the kubelet's: kube-apiserver's
        logs, exec and port-forward) to the Service's backends."""
        trusted, by_nodes = self._reserved_ports(nodes)
        wanted = {port for _, port in host_ports(body)}
        own = self.daemon_set(service)
        held = {port for _, port in _held_ports(own)} if own is not None else set()
        reasons = [f"{port} is {trusted[port]}" for port in sorted(wanted & trusted.keys())]
        reasons += [
            f"{port} is the kubelet port Node {_names_text(by_nodes[port])} reports"
            for port in sorted((wanted & by_nodes.keys()) - held)
        ]
        if not reasons:
            self._told.pop((self._key(service), HOST_PORT_RESERVED_REASON), None)
            return
        if wanted & trusted.keys() and own is not None:
            await self._delete_daemon_set(service)
        if wanted & by_nodes.keys():
            self._refused.add(self._key(service))
        raise self._refuse(
            service,
            HOST_PORT_RESERVED_REASON,
            "ServiceLB will not take port "
            + "; ".join(reasons)
            + ": a svclb hostPort there would take that port from the node's own service "
            "on every node. Use another port for the Service (the reserved ports are "
            "servicelb's built-in list, the Nodes' kubelet ports and the cloud-config's "
            "reservedPorts)",
        )

    def _check_priority_class_allowed(self, service: Service) -> None:
        """A Service may choose its pods' class only among ``allowedPriorityClasses``
        (or the configured one, or none): else a tenant could preempt others' pods."""
        annotations = service.metadata.annotations
        name = annotations.get(self.names.priority_class, "")
        allowed = self.config.allowed_priority_classes
        if name and name != self.config.priority_class_name and name not in allowed:
            raise self._refuse(
                service,
                PRIORITY_CLASS_NOT_ALLOWED_REASON,
                f"the annotation {self.names.priority_class} asks for PriorityClass "
                f"{name!r}, which the cluster operator does not let Services choose "
                "(allowedPriorityClasses in the servicelb cloud-config: "
                + (", ".join(allowed) if allowed else "none")
                + "): remove the annotation, or ask the operator to allow the class",
            )
        self._told.pop((self._key(service), PRIORITY_CLASS_NOT_ALLOWED_REASON), None)

    def _check_namespace_cap(self, service: Service) -> None:
        """A new DaemonSet only while the Service's namespace has fewer than
        ``maxServicesPerNamespace`` (the cache's count: a burst may pass it by the
        DaemonSets made in the same moment)."""
        assert self._daemon_sets is not None
        cap = self.config.max_services_per_namespace
        if not cap or self.daemon_set(service) is not None:
            self._told.pop((self._key(service), DAEMON_SET_LIMIT_REASON), None)
            return
        namespace, name = service.metadata.namespace, service.metadata.name
        others = {
            ds.metadata.labels.get(self.names.svc_name)
            for ds in self._daemon_sets.list()
            if ds.metadata.labels.get(self.names.svc_namespace) == namespace
            and ds.metadata.labels.get(self.names.svc_name) != name
        }
        if len(others) < cap:
            self._told.pop((self._key(service), DAEMON_SET_LIMIT_REASON), None)
            return
        self._refused.add(self._key(service))
        raise self._refuse(
            service,
            DAEMON_SET_LIMIT_REASON,
            f"namespace {namespace} already has {len(others)} LoadBalancer Services served "
            f"by ServiceLB, its cap (maxServicesPerNamespace in the servicelb "
            "cloud-config): delete one, or ask the cluster operator to raise the cap",
        )

    async def _check_priority_class(self, service: Service) -> None:
        name = priority_class(service, self.config, self.names)
        if not name or name in BUILTIN_PRIORITY_CLASSES:
            return
        try:
            await self.api.get(PRIORITY_CLASSES, name)
        except ApiError as exc:
            if not exc.not_found:
                raise
            raise self._refuse(
                service,
                PRIORITY_CLASS_NOT_FOUND_REASON,
                f"the PriorityClass {name!r} (annotation {self.names.priority_class}, else the "
                "servicelb cloud-config's priorityClassName) does not exist, so no svclb pod "
                "could be created: create it, or fix or remove the annotation",
            ) from None
        self._told.pop((self._key(service), PRIORITY_CLASS_NOT_FOUND_REASON), None)

    def _check_conflicts(
        self, service: Service, body: Mapping[str, Any], chosen: set[str], nodes: Sequence[Node]
    ) -> None:
        """Refuse ports that another Service's svclb pods hold on some of the same nodes,
        unless this Service's DaemonSet is the older one (then the other one is told)."""
        assert self._daemon_sets is not None
        own = self.daemon_set(service)
        wanted = host_ports(body)
        labels = {n.metadata.name: n.metadata.labels for n in nodes}
        for other in self._daemon_sets.list():
            if other.metadata.name == body["metadata"]["name"]:
                continue
            if _service_of(other, self.names) == self._key(service):
                continue  # an older DaemonSet of a Service of the same name: being deleted
            clash = wanted & _held_ports(other)
            if not clash:
                continue
            selector = other.spec.template.spec.node_selector
            shared = {name for name in chosen if _matches(labels[name], selector)}
            if not shared:
                continue
            if own is not None and (own.metadata.creation_timestamp or "", own.metadata.name) < (
                other.metadata.creation_timestamp or "",
                other.metadata.name,
            ):
                continue  # ours came first: the other Service is the one refused
            self._refused.add(self._key(service))
            holder = _service_of(other, self.names)
            same_namespace = holder.split("/", 1)[0] == service.metadata.namespace
            # Another namespace's Service is not named (nor confirmed): only that the
            # port is in use, which the tenant cannot help learning.
            by = f"Service {holder}" if same_namespace else "another Service"
            raise self._refuse(
                service,
                PORT_CONFLICT_REASON,
                f"port {_ports_text(clash)} is already served by ServiceLB for {by} on "
                f"node {_names_text(shared)}; Service {self._key(service)} gets no svclb "
                "pods there: change the Service's port, or ask for a node pool of its own "
                f"({self.names.lb_pool} labels on Services and Nodes)",
            )
        self._told.pop((self._key(service), PORT_CONFLICT_REASON), None)

    def _check_host_ports(self, service: Service) -> None:
        """An svclb pod the scheduler cannot place because its host port is taken on its
        node (by something other than ServiceLB): an Event naming the nodes."""
        stuck = {
            pod.target_node or "?"
            for pod in self._pods_of(service)
            if (scheduled := pod.condition("PodScheduled")) is not None
            and scheduled.status == "False"
            and "free ports" in scheduled.message
        }
        if not stuck:
            self._told.pop((self._key(service), HOST_PORT_IN_USE_REASON), None)
            return
        ports = _ports_text((p.protocol, p.port) for p in service.spec.ports)
        self._warn(
            service,
            HOST_PORT_IN_USE_REASON,
            f"on node {_names_text(stuck)} a port of {ports} is already in use by another "
            "pod with that hostPort or host network, so the svclb pod there is Pending "
            "(it stays so, unless the svclb pods' priority class lets it preempt that pod) "
            "and the node is not in the status: free the port on that node, change the "
            f"Service's port, or keep ServiceLB off that node ({self.names.enable_lb}=false)",
        )

    # -- Events -----------------------------------------------------------------------------

    @staticmethod
    def _key(service: Service) -> str:
        return f"{service.metadata.namespace}/{service.metadata.name}"

    def _refuse(self, service: Service, reason: str, message: str) -> ServiceLBError:
        self._warn(service, reason, message)
        return ServiceLBError(message)

    def _warn(self, service: Service, reason: str, message: str) -> None:
        """A Warning Event, once per state: a resync repeating it sends nothing."""
        told = (self._key(service), reason)
        if self._told.get(told) == message:
            return
        self._told[told] = message
        self._event(service, "Warning", reason, message)

    def _event(self, service: Service, event_type: EventType, reason: str, message: str) -> None:
        if self.recorder is not None:
            self.recorder.event(object_reference(service), event_type, reason, message)


__all__ = [
    "APPLIED_DAEMON_SET_REASON",
    "DAEMON_SET_LIMIT_REASON",
    "DELETED_DAEMON_SET_REASON",
    "HOST_PORT_IN_USE_REASON",
    "HOST_PORT_RESERVED_REASON",
    "NODE_ADDRESS_NOT_PUBLISHED_REASON",
    "NO_ENABLED_NODES_REASON",
    "NO_PORTS_REASON",
    "PORT_CONFLICT_REASON",
    "PRIORITY_CLASS_NOT_ALLOWED_REASON",
    "PRIORITY_CLASS_NOT_FOUND_REASON",
    "PROVIDER_NAME",
    "TOO_MANY_PORTS_REASON",
    "ServiceLBError",
    "ServiceLBLoadBalancer",
    "ServiceLBProvider",
    "kubelet_port",
]
