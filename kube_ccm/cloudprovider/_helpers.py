"""Library helpers providers and controllers share.

Pure functions over the API structs, except :func:`get_instance_provider_id`,
which calls the provider.
"""

from __future__ import annotations

import ipaddress

from kube_ccm.api.objects import Service
from kube_ccm.api.wellknown import (
    ANNOTATION_LOAD_BALANCER_SOURCE_RANGES,
    HEALTH_CHECK_PATH,
    PROVIDER_ID_SEPARATOR,
    SERVICE_TYPE_LOAD_BALANCER,
    SERVICE_TYPE_NODE_PORT,
    TRAFFIC_POLICY_LOCAL,
)
from kube_ccm.cloudprovider._errors import (
    CloudProviderError,
    InstanceNotFoundError,
    InvalidSourceRangeError,
    NotImplementedByProviderError,
)
from kube_ccm.cloudprovider._interface import CloudProvider

__all__ = [
    "IPNetwork",
    "default_load_balancer_name",
    "get_instance_provider_id",
    "get_load_balancer_source_ranges",
    "get_service_health_check_path_port",
    "is_allow_all",
    "needs_health_check",
    "requests_only_local_traffic",
]

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_ALLOW_ALL = ipaddress.IPv4Network("0.0.0.0/0")
_SPEC_FIELD = "spec.loadBalancerSourceRanges"


def default_load_balancer_name(service: Service) -> str:
    """``a`` + the Service UID without dashes, cut to 32 characters.

    Deprecated upstream and kept for load balancers created before Kubernetes 1.12;
    new providers should choose their own stable naming.
    """
    return ("a" + service.metadata.uid.replace("-", ""))[:32]


async def get_instance_provider_id(cloud: CloudProvider, node_name: str) -> str:
    """The V1 providerID of a node: ``<provider name>://<instance id>``.

    Raises :class:`CloudProviderError` ``failed to get instances from cloud provider``
    when the provider has no V1 :class:`~kube_ccm.cloudprovider.Instances`.
    :class:`InstanceNotFoundError` and :class:`NotImplementedByProviderError` from
    ``instance_id`` propagate unchanged (callers give them a meaning), and so does a
    :class:`TimeoutError` (the daemon's deadline on the call, which names it); any other error
    becomes ``failed to get instance ID from cloud provider: <err>`` with the original
    as ``__cause__``. An empty instance ID still yields ``<name>://``, as upstream.
    """
    instances = cloud.instances()
    if instances is None:
        raise CloudProviderError("failed to get instances from cloud provider")
    try:
        instance_id = await instances.instance_id(node_name)
    except (InstanceNotFoundError, NotImplementedByProviderError, TimeoutError):
        raise
    except Exception as exc:
        raise CloudProviderError(f"failed to get instance ID from cloud provider: {exc}") from exc
    return f"{cloud.provider_name()}{PROVIDER_ID_SEPARATOR}{instance_id}"


def _parse_cidr(entry: str) -> IPNetwork | None:
    """Parse like Go's ``net.ParseCIDR``: an IP, a slash and a decimal prefix length.

    Host bits may be set (``10.0.0.1/8`` is ``10.0.0.0/8``); a bare IP, a netmask
    written as an address, a zone (``%eth0``) or a prefix out of range is invalid.
    """
    address, slash, prefix = entry.partition("/")
    if not slash or not prefix.isdigit() or not prefix.isascii() or "%" in address:
        return None
    try:
        return ipaddress.ip_network(f"{address}/{int(prefix)}", strict=False)
    except ValueError:
        return None


def get_load_balancer_source_ranges(service: Service) -> frozenset[IPNetwork]:
    """The networks allowed to reach the Service's load balancer.

    ``spec.loadBalancerSourceRanges`` when non-empty, else the annotation
    ``service.beta.kubernetes.io/load-balancer-source-ranges`` (comma-separated;
    absent or blank means ``0.0.0.0/0``). Spaces around entries are ignored;
    duplicates collapse. Any invalid entry (``10.0.0.1/33``, ``foo.bar``, ``*``, an
    empty entry from a stray comma, a bare IP without prefix) raises
    :class:`InvalidSourceRangeError` naming the entry and where it came from.
    """
    if service.spec.load_balancer_source_ranges:
        entries: tuple[str, ...] = service.spec.load_balancer_source_ranges
        field = _SPEC_FIELD
    else:
        raw = service.metadata.annotations.get(ANNOTATION_LOAD_BALANCER_SOURCE_RANGES, "").strip()
        entries = tuple(raw.split(",")) if raw else ("0.0.0.0/0",)
        field = ANNOTATION_LOAD_BALANCER_SOURCE_RANGES
    networks: set[IPNetwork] = set()
    for entry in entries:
        network = _parse_cidr(entry.strip())
        if network is None:
            example = "10.0.0.0/24" if field == _SPEC_FIELD else "10.0.0.0/24,192.168.2.0/24"
            listing = "a list of IP ranges" if field == _SPEC_FIELD else "a comma-separated list"
            raise InvalidSourceRangeError(
                f'{field}: "{entry}" is not a valid IP range (CIDR); expecting {listing} '
                f"of source IP ranges, for example {example}",
                value=entry,
                field=field,
            )
        networks.add(network)
    return frozenset(networks)


def is_allow_all(networks: frozenset[IPNetwork] | set[IPNetwork]) -> bool:
    """Whether the set contains ``0.0.0.0/0``.

    As upstream, only the IPv4 "everything" network counts; ``::/0`` alone does not.
    """
    return _ALLOW_ALL in networks


def requests_only_local_traffic(service: Service) -> bool:
    """Whether a ``LoadBalancer`` or ``NodePort`` Service has ``externalTrafficPolicy: Local``."""
    return (
        service.spec.type in (SERVICE_TYPE_LOAD_BALANCER, SERVICE_TYPE_NODE_PORT)
        and service.spec.external_traffic_policy == TRAFFIC_POLICY_LOCAL
    )


def needs_health_check(service: Service) -> bool:
    """Whether the load balancer must health-check nodes: a ``LoadBalancer`` Service with
    local external traffic."""
    return service.spec.type == SERVICE_TYPE_LOAD_BALANCER and requests_only_local_traffic(service)


def get_service_health_check_path_port(service: Service) -> tuple[str, int]:
    """``("/healthz", healthCheckNodePort)`` when a health check is needed and the port
    is allocated, else ``("", 0)``."""
    if not needs_health_check(service):
        return "", 0
    port = service.spec.health_check_node_port
    if port == 0:
        return "", 0
    return HEALTH_CHECK_PATH, port
