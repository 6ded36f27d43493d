"""The ``servicelb`` provider: k3s's ServiceLB (a DaemonSet of forwarders per
LoadBalancer Service, the nodes' addresses as its ingress), load balancers only.

See :mod:`kube_ccm.providers.servicelb.provider` for its behaviour,
:mod:`kube_ccm.providers.servicelb.workload` for the DaemonSet,
:mod:`kube_ccm.providers.servicelb.forward` for its pods' forwarder (``kube-ccm forward``)
and :mod:`kube_ccm.providers.servicelb.config` for its (optional) cloud-config.
"""

from __future__ import annotations

import os

from kube_ccm.providers.servicelb.config import (
    IMAGE_ENV,
    PRIORITY_CLASS_ENV,
    WELL_KNOWN_PORTS,
    ServiceLBConfig,
    ServiceLBConfigError,
    load_config,
)
from kube_ccm.providers.servicelb.provider import (
    APPLIED_DAEMON_SET_REASON,
    DAEMON_SET_LIMIT_REASON,
    DELETED_DAEMON_SET_REASON,
    HOST_PORT_IN_USE_REASON,
    HOST_PORT_RESERVED_REASON,
    NO_ENABLED_NODES_REASON,
    NO_PORTS_REASON,
    NODE_ADDRESS_NOT_PUBLISHED_REASON,
    PORT_CONFLICT_REASON,
    PRIORITY_CLASS_NOT_ALLOWED_REASON,
    PRIORITY_CLASS_NOT_FOUND_REASON,
    PROVIDER_NAME,
    TOO_MANY_PORTS_REASON,
    ServiceLBError,
    ServiceLBLoadBalancer,
    ServiceLBProvider,
)
from kube_ccm.providers.servicelb.workload import (
    Names,
    daemon_set,
    daemon_set_name,
    forwarder_privileges,
)


def factory(config: bytes | None) -> ServiceLBProvider:
    """The ``servicelb`` entry point; the default forwarder image from the daemon's
    ``$KUBE_CCM_SERVICELB_IMAGE`` (the Helm chart's own image), the default priority
    class from ``$KUBE_CCM_SERVICELB_PRIORITY_CLASS`` (the chart's
    ``servicelb.priorityClassName``)."""
    return ServiceLBProvider(
        load_config(
            config,
            default_image=os.environ.get(IMAGE_ENV, ""),
            default_priority_class=os.environ.get(PRIORITY_CLASS_ENV, ""),
        )
    )


__all__ = [
    "APPLIED_DAEMON_SET_REASON",
    "DAEMON_SET_LIMIT_REASON",
    "DELETED_DAEMON_SET_REASON",
    "HOST_PORT_IN_USE_REASON",
    "HOST_PORT_RESERVED_REASON",
    "IMAGE_ENV",
    "NODE_ADDRESS_NOT_PUBLISHED_REASON",
    "NO_ENABLED_NODES_REASON",
    "NO_PORTS_REASON",
    "PORT_CONFLICT_REASON",
    "PRIORITY_CLASS_ENV",
    "PRIORITY_CLASS_NOT_ALLOWED_REASON",
    "PRIORITY_CLASS_NOT_FOUND_REASON",
    "PROVIDER_NAME",
    "TOO_MANY_PORTS_REASON",
    "WELL_KNOWN_PORTS",
    "Names",
    "ServiceLBConfig",
    "ServiceLBConfigError",
    "ServiceLBError",
    "ServiceLBLoadBalancer",
    "ServiceLBProvider",
    "daemon_set",
    "daemon_set_name",
    "factory",
    "forwarder_privileges",
    "load_config",
]
