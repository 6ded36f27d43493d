"""The contract a cloud implements to run under kube-ccm.

Everything a provider author needs is importable from here:

* :class:`CloudProvider` and the capability classes (:class:`LoadBalancer`,
  :class:`InstancesV2`, :class:`Instances`, :class:`Routes`, :class:`Zones`,
  :class:`Clusters`) with their obligations in the docstrings; a capability
  accessor returning ``None`` means "unsupported";
* the value types they exchange (:class:`InstanceMetadata`, :class:`Route`,
  :class:`Zone`, and the API structs ``Node``, ``Service`` (its ``ServicePort``),
  ``LoadBalancerStatus`` re-exported from :mod:`kube_ccm.api.objects`);
* the errors controllers give a meaning to (:class:`InstanceNotFoundError`,
  :class:`NotImplementedByProviderError`, :class:`ImplementedElsewhereError`,
  :class:`RetryError`, :class:`TransientCloudError` for failures the daemon may retry
  at once, ...);
* what the :class:`KubernetesClient` a provider is handed raises and takes:
  :class:`ApiError` (an error status from the API server, with ``not_found``,
  ``conflict``, ``already_exists`` and ``gone``) and :class:`PatchType`; and
  :class:`TypedClient` with the resource descriptors (:data:`NODES`, :data:`SERVICES`,
  :data:`CONFIG_MAPS`, :data:`EVENTS`, :data:`IP_ADDRESSES`, ...), so a provider names
  what it reads or writes and never builds an API path;
* optional mix-ins a provider inherits beside :class:`CloudProvider`:
  :class:`PVLabeler`, :class:`InformerUser`, :class:`NodePodCIDRs` (the cloud's own
  pod CIDRs for the node IPAM controller's cloud allocator), and the
  :class:`SelfProbing` hook (with :class:`ProbeLine`) by which ``kube-ccm doctor``
  asks a provider to check its own cloud;
* registration (:func:`register_cloud_provider` or the ``kube_ccm.cloud_providers``
  entry-point group) and the helpers upstream's library offers;
* cloud credentials named in the cloud-config, from a file (reloaded when it
  changes) or an environment variable, never shown (:class:`Credentials`,
  :class:`CredentialsSource`, :class:`Secret`, :class:`CredentialsError`).
* Kubernetes Events on the objects a provider is asked about, written as the
  controllers write theirs (:func:`start_event_recorder` over a client of the client
  builder, giving a :class:`ProviderEventRecorder`; the :class:`EventRecorder`
  protocol, :class:`ObjectReference`, :func:`object_reference`, :data:`EventType`;
  see :mod:`kube_ccm.cloudprovider.events`).
* the pieces of the runtime a provider that watches the cluster itself builds on:
  :class:`KubeClient` (the concrete client behind :class:`KubernetesClient`; an
  ``isinstance`` check tells a real client from a test double), :class:`Informer`
  and :class:`InformerFactory` (what :meth:`InformerUser.set_informers` receives),
  :class:`TransportError` (the request got no answer: connection refused or reset,
  TLS, timeout) and the :data:`NAMESPACES` descriptor.

The private modules behind this one may change; this list will not without notice.
"""

from kube_ccm.api.objects import (
    LoadBalancerIngress,
    LoadBalancerStatus,
    Node,
    NodeAddress,
    PersistentVolume,
    PortStatus,
    Service,
    ServicePort,
)
from kube_ccm.cloudprovider._errors import (
    CloudConfigError,
    CloudConfigFileError,
    CloudIdentityError,
    CloudProviderError,
    CloudProviderInitError,
    DiskNotFoundError,
    DuplicateCloudProviderError,
    ImplementedElsewhereError,
    InstanceNotFoundError,
    InvalidSourceRangeError,
    NotImplementedByProviderError,
    ProviderEntryPointError,
    RetryError,
    TransientCloudError,
    UnknownCloudProviderError,
    find_retry_error,
    one_line,
)
from kube_ccm.cloudprovider._helpers import (
    IPNetwork,
    default_load_balancer_name,
    get_instance_provider_id,
    get_load_balancer_source_ranges,
    get_service_health_check_path_port,
    is_allow_all,
    needs_health_check,
    requests_only_local_traffic,
)
from kube_ccm.cloudprovider._interface import (
    ClientBuilder,
    ClientConfig,
    CloudProvider,
    Clusters,
    InformerUser,
    InstanceMetadata,
    Instances,
    InstancesV2,
    KubernetesClient,
    LoadBalancer,
    LoadBalancerInventory,
    NodePodCIDRs,
    OwnedLoadBalancer,
    ProbeLine,
    PVLabeler,
    Route,
    Routes,
    SelfProbing,
    Zone,
    Zones,
)
from kube_ccm.cloudprovider._registry import (
    ENTRY_POINT_GROUP,
    CloudProviderFactory,
    Registry,
    default_registry,
    get_cloud_provider,
    init_cloud_provider,
    is_cloud_provider,
    is_external,
    register_cloud_provider,
)
from kube_ccm.cloudprovider.blocking import BlockingCalls
from kube_ccm.cloudprovider.config import (
    Duration,
    InvalidCloudConfigError,
    load_cloud_config,
    parse_duration,
)
from kube_ccm.cloudprovider.credentials import (
    Credentials,
    CredentialsError,
    CredentialsSource,
    Secret,
)
from kube_ccm.cloudprovider.events import (
    EventRecorder,
    EventType,
    ObjectReference,
    ProviderEventRecorder,
    object_reference,
    start_event_recorder,
)
from kube_ccm.runtime.client import ApiError, KubeClient, PatchType
from kube_ccm.runtime.informer import Informer, InformerFactory
from kube_ccm.runtime.redaction import register_secret
from kube_ccm.runtime.resources import (
    CONFIG_MAPS,
    EVENTS,
    IP_ADDRESSES,
    NAMESPACES,
    NODES,
    PERSISTENT_VOLUMES,
    SERVICES,
    ObjectList,
    RawObject,
    Resource,
    TypedClient,
)
from kube_ccm.runtime.transport import TransportError

__all__ = [
    "CONFIG_MAPS",
    "ENTRY_POINT_GROUP",
    "EVENTS",
    "IP_ADDRESSES",
    "NAMESPACES",
    "NODES",
    "PERSISTENT_VOLUMES",
    "SERVICES",
    "ApiError",
    "BlockingCalls",
    "ClientBuilder",
    "ClientConfig",
    "CloudConfigError",
    "CloudConfigFileError",
    "CloudIdentityError",
    "CloudProvider",
    "CloudProviderError",
    "CloudProviderFactory",
    "CloudProviderInitError",
    "Clusters",
    "Credentials",
    "CredentialsError",
    "CredentialsSource",
    "DiskNotFoundError",
    "DuplicateCloudProviderError",
    "Duration",
    "EventRecorder",
    "EventType",
    "IPNetwork",
    "ImplementedElsewhereError",
    "Informer",
    "InformerFactory",
    "InformerUser",
    "InstanceMetadata",
    "InstanceNotFoundError",
    "Instances",
    "InstancesV2",
    "InvalidCloudConfigError",
    "InvalidSourceRangeError",
    "KubeClient",
    "KubernetesClient",
    "LoadBalancer",
    "LoadBalancerIngress",
    "LoadBalancerInventory",
    "LoadBalancerStatus",
    "Node",
    "NodeAddress",
    "NodePodCIDRs",
    "NotImplementedByProviderError",
    "ObjectList",
    "ObjectReference",
    "OwnedLoadBalancer",
    "PVLabeler",
    "PatchType",
    "PersistentVolume",
    "PortStatus",
    "ProbeLine",
    "ProviderEntryPointError",
    "ProviderEventRecorder",
    "RawObject",
    "Registry",
    "Resource",
    "RetryError",
    "Route",
    "Routes",
    "Secret",
    "SelfProbing",
    "Service",
    "ServicePort",
    "TransientCloudError",
    "TransportError",
    "TypedClient",
    "UnknownCloudProviderError",
    "Zone",
    "Zones",
    "default_load_balancer_name",
    "default_registry",
    "find_retry_error",
    "get_cloud_provider",
    "get_instance_provider_id",
    "get_load_balancer_source_ranges",
    "get_service_health_check_path_port",
    "init_cloud_provider",
    "is_allow_all",
    "is_cloud_provider",
    "is_external",
    "load_cloud_config",
    "needs_health_check",
    "object_reference",
    "one_line",
    "parse_duration",
    "register_cloud_provider",
    "register_secret",
    "requests_only_local_traffic",
    "start_event_recorder",
]
