"""The Go CCM's Service annotations this provider honours, declared for kube-ccm's
``service-annotations`` webhook (a bad value is refused at ``kubectl apply``), and the
load-balancer request they make (``POST``/``PUT /v2/load_balancers``), built as the Go
CCM's ``buildLoadBalancerRequest`` builds it.

Ranges are DigitalOcean's (the Go CCM's annotations.md and the API reference):
health-check interval and timeout 3-300 s, thresholds 2-10, ``size-unit`` 1-100,
``http-idle-timeout-seconds`` 30-600.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

from kube_ccm.cloudprovider import (
    CloudProviderError,
    Service,
    ServicePort,
    get_service_health_check_path_port,
)
from kube_ccm.cloudprovider.annotations import (
    ServiceAnnotation,
    boolean,
    integer,
    one_of,
    problems,
)

from kube_ccm_digitalocean.client import JSON

__all__ = [
    "ANN_LOAD_BALANCER_ID",
    "BASE",
    "SERVICE_ANNOTATIONS",
    "LoadBalancerConfigError",
    "Settings",
    "build_request",
    "certificate_id",
    "proxy_protocol",
]

BASE = "service.beta.kubernetes.io/do-loadbalancer-"
ANN_LOAD_BALANCER_ID = "kubernetes.digitalocean.com/load-balancer-id"
ANN_NAME = BASE + "name"
ANN_TYPE = BASE + "type"
ANN_PROTOCOL = BASE + "protocol"
ANN_HTTP_PORTS = BASE + "http-ports"
ANN_TLS_PORTS = BASE + "tls-ports"
ANN_HTTP2_PORTS = BASE + "http2-ports"
ANN_TLS_PASSTHROUGH = BASE + "tls-passthrough"
ANN_CERTIFICATE_ID = BASE + "certificate-id"
ANN_HOSTNAME = BASE + "hostname"
ANN_REDIRECT = BASE + "redirect-http-to-https"
ANN_OVERRIDE_HEALTH_CHECK = BASE + "override-health-check"
ANN_HC_PATH = BASE + "healthcheck-path"
ANN_HC_PORT = BASE + "healthcheck-port"
ANN_HC_PROTOCOL = BASE + "healthcheck-protocol"
ANN_HC_INTERVAL = BASE + "healthcheck-check-interval-seconds"
ANN_HC_TIMEOUT = BASE + "healthcheck-response-timeout-seconds"
ANN_HC_UNHEALTHY = BASE + "healthcheck-unhealthy-threshold"
ANN_HC_HEALTHY = BASE + "healthcheck-healthy-threshold"
ANN_STICKY_TYPE = BASE + "sticky-sessions-type"
ANN_STICKY_NAME = BASE + "sticky-sessions-cookie-name"
ANN_STICKY_TTL = BASE + "sticky-sessions-cookie-ttl"
ANN_PROXY_PROTOCOL = BASE + "enable-proxy-protocol"
ANN_BACKEND_KEEPALIVE = BASE + "enable-backend-keepalive"
ANN_ALGORITHM = BASE + "algorithm"
ANN_SIZE_SLUG = BASE + "size-slug"
ANN_SIZE_UNIT = BASE + "size-unit"
ANN_IDLE_TIMEOUT = BASE + "http-idle-timeout-seconds"
ANN_DISOWN = "service.kubernetes.io/do-loadbalancer-disown"

_TRUE = {"true", "True", "TRUE", "1"}
_LB_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,253}[A-Za-z0-9.])?$")
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_COOKIE = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,40}$")


class LoadBalancerConfigError(CloudProviderError):
    """A Service's annotations cannot make a load balancer (the message says which)."""


def _matching(pattern: re.Pattern[str], accepted: str) -> Callable[[str], None]:
    def check(value: str) -> None:
        if not pattern.match(value):
            raise ValueError(accepted)

    return check


def _ports(value: str) -> None:
    for part in value.split(","):
        if not part.strip().isdigit() or not 1 <= int(part) <= 65535:
            raise ValueError("use comma-separated port numbers, e.g. 443,8443")


def _path(value: str) -> None:
    if not value.startswith("/") or any(c.isspace() for c in value):
        raise ValueError("use an absolute URL path without spaces, e.g. /healthz")


SERVICE_ANNOTATIONS: tuple[ServiceAnnotation, ...] = (
    ServiceAnnotation(
        ANN_NAME,
        "the load balancer's name (default: a + the Service's UID)",
        _matching(
            _LB_NAME,
            "use at most 255 letters, digits, dots and dashes, starting with a letter or "
            "digit and not ending with a dash",
        ),
    ),
    ServiceAnnotation(
        ANN_LOAD_BALANCER_ID,
        "adopt this existing load balancer instead of creating one",
        _matching(_UUID, "use a load balancer's ID, a UUID"),
    ),
    one_of(ANN_TYPE, "REGIONAL or REGIONAL_NETWORK", ("REGIONAL", "REGIONAL_NETWORK")),
    one_of(ANN_PROTOCOL, "the ports' default protocol", ("tcp", "http", "https", "http2")),
    ServiceAnnotation(ANN_HTTP_PORTS, "ports served as http", _ports),
    ServiceAnnotation(ANN_TLS_PORTS, "ports served as https", _ports),
    ServiceAnnotation(ANN_HTTP2_PORTS, "ports served as http2", _ports),
    boolean(ANN_TLS_PASSTHROUGH, "pass TLS through to the droplets"),
    ServiceAnnotation(
        ANN_CERTIFICATE_ID,
        "the DigitalOcean certificate that terminates TLS",
        _matching(_UUID, "use a certificate's ID, a UUID (doctl compute certificate list)"),
    ),
    ServiceAnnotation(
        ANN_HOSTNAME,
        "report this hostname as the ingress instead of the IP",
        _matching(re.compile(r"^[A-Za-z0-9.-]{1,253}$"), "use a DNS name"),
    ),
    boolean(ANN_REDIRECT, "redirect http to https"),
    ServiceAnnotation(ANN_HC_PATH, "health-check path", _path),
    integer(ANN_HC_PORT, "the Service port to health-check", minimum=1, maximum=65535),
    one_of(ANN_HC_PROTOCOL, "health-check protocol", ("tcp", "http", "https")),
    integer(ANN_HC_INTERVAL, "seconds between health checks", minimum=3, maximum=300),
    integer(ANN_HC_TIMEOUT, "seconds a health check may take", minimum=3, maximum=300),
    integer(ANN_HC_UNHEALTHY, "failed checks to mark unhealthy", minimum=2, maximum=10),
    integer(ANN_HC_HEALTHY, "passed checks to mark healthy", minimum=2, maximum=10),
    one_of(ANN_STICKY_TYPE, "sticky sessions", ("none", "cookies")),
    ServiceAnnotation(
        ANN_STICKY_NAME,
        "the sticky-session cookie's name",
        _matching(_COOKIE, "use a cookie name of at most 40 token characters"),
    ),
    integer(ANN_STICKY_TTL, "the sticky-session cookie's TTL", minimum=1, maximum=31536000),
    boolean(ANN_PROXY_PROTOCOL, "send the PROXY protocol (ingress ipMode: Proxy)"),
    boolean(ANN_BACKEND_KEEPALIVE, "keep HTTP connections to the droplets alive"),
    one_of(ANN_ALGORITHM, "balancing algorithm", ("round_robin", "least_connections")),
    one_of(
        ANN_SIZE_SLUG, "size (deprecated by DigitalOcean)", ("lb-small", "lb-medium", "lb-large")
    ),
    integer(ANN_SIZE_UNIT, "number of load balancer nodes", minimum=1, maximum=100),
    integer(ANN_IDLE_TIMEOUT, "HTTP idle timeout", minimum=30, maximum=600),
    boolean(ANN_DISOWN, "leave the load balancer alone (no create, update or delete)"),
)
_DECLARED = {a.key: a for a in SERVICE_ANNOTATIONS}


class Settings:
    """What the cloud-config adds to every request."""

    def __init__(
        self, *, region: str, vpc_id: str = "", cluster_id: str = "", default_type: str
    ) -> None:
        self.region = region
        self.vpc_id = vpc_id
        self.cluster_id = cluster_id
        self.default_type = default_type


def _flag(annotations: Mapping[str, str], key: str) -> bool:
    return annotations.get(key, "") in _TRUE


def _port_list(annotations: Mapping[str, str], key: str) -> list[int]:
    value = annotations.get(key, "")
    return [int(p) for p in value.split(",")] if value else []


def proxy_protocol(service: Service) -> bool:
    return _flag(service.metadata.annotations, ANN_PROXY_PROTOCOL)


def disowned(service: Service) -> bool:
    return _flag(service.metadata.annotations, ANN_DISOWN)


def certificate_id(service: Service) -> str:
    return service.metadata.annotations.get(ANN_CERTIFICATE_ID, "")


def hostname(service: Service) -> str:
    return service.metadata.annotations.get(ANN_HOSTNAME, "").lower()


def check(service: Service) -> None:
    """The webhook's checks again (it is optional and can be bypassed)."""
    found = problems(SERVICE_ANNOTATIONS, service.metadata.annotations)
    if found:
        raise LoadBalancerConfigError("; ".join(found))


def build_request(
    service: Service, name: str, droplet_ids: Sequence[int], settings: Settings
) -> JSON:
    """The body of ``POST``/``PUT /v2/load_balancers`` for ``service``."""
    check(service)
    annotations = service.metadata.annotations
    lb_type = annotations.get(ANN_TYPE) or settings.default_type
    network = lb_type == "REGIONAL_NETWORK"
    rules = _network_rules(service) if network else _forwarding_rules(service)
    if not rules:
        raise LoadBalancerConfigError("the Service has no ports to forward")
    request: JSON = {
        "name": name,
        "region": settings.region,
        "type": lb_type,
        "forwarding_rules": rules,
        "health_check": _health_check(service),
        "sticky_sessions": _sticky_sessions(annotations),
        "algorithm": annotations.get(ANN_ALGORITHM) or "round_robin",
        "redirect_http_to_https": _flag(annotations, ANN_REDIRECT),
        "enable_proxy_protocol": _flag(annotations, ANN_PROXY_PROTOCOL),
        "enable_backend_keepalive": _flag(annotations, ANN_BACKEND_KEEPALIVE),
        "droplet_ids": sorted(droplet_ids),
    }
    slug, unit = annotations.get(ANN_SIZE_SLUG, ""), annotations.get(ANN_SIZE_UNIT, "")
    if slug and unit:
        raise LoadBalancerConfigError(
            f"only one of {ANN_SIZE_SLUG} and {ANN_SIZE_UNIT} can be given"
        )
    if slug:
        request["size"] = slug
    elif unit:
        request["size_unit"] = int(unit)
    if idle := annotations.get(ANN_IDLE_TIMEOUT):
        request["http_idle_timeout_seconds"] = int(idle)
    if settings.vpc_id:
        request["vpc_uuid"] = settings.vpc_id
    if settings.cluster_id:
        request["tags"] = [f"k8s:{settings.cluster_id}"]
    return request


def _network_rules(service: Service) -> list[JSON]:
    """REGIONAL_NETWORK (pass-through): each port to the same port on the droplets."""
    rules = []
    for port in service.spec.ports:
        protocol = _l4(port)
        rules.append(
            {
                "entry_protocol": protocol,
                "entry_port": port.port,
                "target_protocol": protocol,
                "target_port": port.port,
            }
        )
    return rules


def _l4(port: ServicePort) -> str:
    if port.protocol not in ("TCP", "UDP"):
        raise LoadBalancerConfigError(
            f"only TCP or UDP ports are supported, got {port.protocol!r} (port {port.port})"
        )
    return port.protocol.lower()


def _forwarding_rules(service: Service) -> list[JSON]:
    annotations = service.metadata.annotations
    default = annotations.get(ANN_PROTOCOL) or "tcp"
    http, https, http2 = (
        _port_list(annotations, key) for key in (ANN_HTTP_PORTS, ANN_TLS_PORTS, ANN_HTTP2_PORTS)
    )
    shared = sorted({p for p in http + https + http2 if (http + https + http2).count(p) > 1})
    if shared:
        raise LoadBalancerConfigError(
            f'ports from annotations "{BASE}*-ports" cannot be shared but found: '
            + ", ".join(map(str, shared))
        )
    certificate = certificate_id(service)
    passthrough = _flag(annotations, ANN_TLS_PASSTHROUGH)
    if certificate and passthrough:
        raise LoadBalancerConfigError(
            f"either {ANN_CERTIFICATE_ID} or {ANN_TLS_PASSTHROUGH}, not both"
        )
    if (certificate or passthrough) and not https and 443 not in http2:
        https = [443]
    rules = []
    for port in service.spec.ports:
        _l4(port)
        protocol = default
        if port.port in http:
            protocol = "http"
        if port.port in https:
            protocol = "https"
        if port.port in http2:
            protocol = "http2"
        if port.protocol == "UDP":
            protocol = "udp"
        rule: JSON = {
            "entry_protocol": protocol,
            "entry_port": port.port,
            "target_protocol": protocol,
            "target_port": port.node_port,
        }
        if protocol in ("https", "http2"):
            if passthrough:
                rule["tls_passthrough"] = True
            elif certificate:
                rule["certificate_id"] = certificate
                rule["target_protocol"] = "http"
            else:
                raise LoadBalancerConfigError(
                    f"port {port.port} is {protocol}: set {ANN_CERTIFICATE_ID} or "
                    f"{ANN_TLS_PASSTHROUGH}"
                )
        rules.append(rule)
    return rules


def _health_check(service: Service) -> JSON:
    """As the Go CCM: kube-proxy's /healthz (10256), or the Service's health-check
    node port with ``externalTrafficPolicy: Local``; the annotations only with
    ``override-health-check``."""
    annotations = service.metadata.annotations
    path, port = get_service_health_check_path_port(service)
    check: JSON = {"protocol": "http", "port": port or 10256, "path": path or "/healthz"}
    if ANN_OVERRIDE_HEALTH_CHECK in annotations:
        path = annotations.get(ANN_HC_PATH, "")
        protocol = annotations.get(ANN_HC_PROTOCOL) or ("http" if path else "tcp")
        check = {"protocol": protocol, "port": _health_check_port(service)}
        if path:
            check["path"] = path
    check["check_interval_seconds"] = int(annotations.get(ANN_HC_INTERVAL) or 3)
    check["response_timeout_seconds"] = int(annotations.get(ANN_HC_TIMEOUT) or 5)
    check["unhealthy_threshold"] = int(annotations.get(ANN_HC_UNHEALTHY) or 3)
    check["healthy_threshold"] = int(annotations.get(ANN_HC_HEALTHY) or 5)
    return check


def _health_check_port(service: Service) -> int:
    wanted = service.metadata.annotations.get(ANN_HC_PORT)
    for port in service.spec.ports:
        if wanted is None and port.protocol == "TCP":
            return port.node_port
        if wanted is not None and port.port == int(wanted):
            if port.protocol == "UDP":
                raise LoadBalancerConfigError(f"health check port {wanted} cannot be UDP")
            return port.node_port
    if wanted is not None:
        raise LoadBalancerConfigError(f"{ANN_HC_PORT}: port {wanted} is not a port of the Service")
    raise LoadBalancerConfigError("no TCP port to health-check")


def _sticky_sessions(annotations: Mapping[str, str]) -> JSON:
    if annotations.get(ANN_STICKY_TYPE) != "cookies":
        return {"type": "none"}
    name, ttl = annotations.get(ANN_STICKY_NAME, ""), annotations.get(ANN_STICKY_TTL, "")
    if not name or not ttl:
        raise LoadBalancerConfigError(
            f"sticky sessions of type cookies need {ANN_STICKY_NAME} and {ANN_STICKY_TTL}"
        )
    return {"type": "cookies", "cookie_name": name, "cookie_ttl_seconds": int(ttl)}
