"""DigitalOcean load balancers for ``type: LoadBalancer`` Services, as the Go CCM makes
them: named by ``do-loadbalancer-name`` or ``a`` + the Service's UID (upstream's
default name), found by the ``kubernetes.digitalocean.com/load-balancer-id``
annotation when a Service names one (adoption), else by name; the droplets behind it
are the Nodes' providerIDs.

DigitalOcean creates a load balancer asynchronously (``status: new`` until
``active``): an ensure that finds it new raises :class:`RetryError`, so the service
controller looks again after ``activeRetry`` (15 s, the Go CCM's delay) without
counting a failure.

Calls per sync (counted by ``benchmarks/digitalocean_calls.py``): an ensure of an
unchanged load balancer is one ``GET``, of a changed one a ``GET`` and a ``PUT``; a
new one a list of load balancers (once per process, then names are remembered), a
``POST`` and, once active, a ``GET``; a change of Nodes is one ``PUT`` per load
balancer whose droplets change, compared with the API's last answer (no ``GET``).
Unlike the Go CCM this provider never writes to the Service (the ID annotation is
read, not written: kube-ccm's admission policies keep the CCM to the Service's
status), and sends a ``PUT`` only when something differs.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from kube_ccm.cloudprovider import (
    CloudProviderError,
    LoadBalancer,
    LoadBalancerIngress,
    LoadBalancerStatus,
    Node,
    RetryError,
    Service,
    default_load_balancer_name,
)

from kube_ccm_digitalocean.annotations import (
    ANN_CERTIFICATE_ID,
    ANN_LOAD_BALANCER_ID,
    ANN_NAME,
    SERVICE_ANNOTATIONS,
    LoadBalancerConfigError,
    Settings,
    build_request,
    certificate_id,
    disowned,
    hostname,
    proxy_protocol,
)
from kube_ccm_digitalocean.client import JSON, DigitalOceanClient, DigitalOceanInvalidError
from kube_ccm_digitalocean.instances import PROVIDER_ID_PREFIX, droplet_id_from_provider_id

__all__ = ["LoadBalancers", "differs"]

log = logging.getLogger(__name__)


class LoadBalancers(LoadBalancer):
    service_annotations = SERVICE_ANNOTATIONS

    def __init__(self, client: DigitalOceanClient, settings: Settings, active_retry: float) -> None:
        self._client = client
        self._settings = settings
        self._active_retry = active_retry
        self._ids: dict[str, str] = {}
        """Load balancer name -> ID, from the last list and what this process made."""
        self._seen: dict[str, JSON] = {}
        """Load balancer ID -> the API's last answer about it, for node updates."""

    def get_load_balancer_name(self, cluster_name: str, service: Service) -> str:
        return service.metadata.annotations.get(ANN_NAME) or default_load_balancer_name(service)

    async def _find(self, service: Service) -> JSON | None:
        adopted = service.metadata.annotations.get(ANN_LOAD_BALANCER_ID)
        if adopted:
            return self._saw(await self._client.load_balancer(adopted))
        name = self.get_load_balancer_name("", service)
        known = self._ids.get(name)
        if known is not None:
            found = self._saw(await self._client.load_balancer(known))
            if found is not None and found.get("name") == name:
                return found
            self._ids.pop(name, None)
            self._seen.pop(known, None)
        listed = await self._client.load_balancers()
        self._ids = {str(lb["name"]): str(lb["id"]) for lb in listed}
        by_name = {str(lb["name"]): lb for lb in listed}
        # As the Go CCM: the custom name, then the default one (a Service that gained a
        # name annotation keeps its load balancer, which the next update renames).
        for candidate in (name, default_load_balancer_name(service)):
            if candidate in by_name:
                return self._saw(by_name[candidate])
        return None

    def _saw(self, found: JSON | None) -> JSON | None:
        if found is not None:
            self._seen[str(found["id"])] = found
        return found

    async def get_load_balancer(
        self, cluster_name: str, service: Service
    ) -> LoadBalancerStatus | None:
        found = await self._find(service)
        if found is None:
            return None
        if found.get("status") != "active":
            return LoadBalancerStatus()
        return self._status(found, service)

    async def ensure_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> LoadBalancerStatus:
        if disowned(service):
            return service.status.load_balancer
        name = self.get_load_balancer_name(cluster_name, service)
        request = build_request(service, name, _droplet_ids(nodes), self._settings)
        found = await self._find(service)
        if found is None:
            try:
                found = await self._client.create_load_balancer(request)
            except DigitalOceanInvalidError as exc:
                raise await self._explained(exc, service) from None
            self._ids[name] = str(found["id"])
            self._saw(found)
            log.info("created load balancer %s (%s) for %s", name, found["id"], _key(service))
        elif differs(found, request):
            found = await self._update(found, request, service)
        return self._active(found, service)

    async def update_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> None:
        if disowned(service):
            return
        name = self.get_load_balancer_name(cluster_name, service)
        request = build_request(service, name, _droplet_ids(nodes), self._settings)
        # A change of Nodes is compared with the API's last answer about this load
        # balancer, without asking again: one PUT per load balancer when the droplets
        # change, none when they do not (a drift made by hand is put right by the next
        # ensure, which asks).
        known = self._ids.get(name)
        adopted = service.metadata.annotations.get(ANN_LOAD_BALANCER_ID)
        seen = self._seen.get(adopted or known or "")
        if seen is not None and seen.get("status") == "active":
            if differs(seen, request):
                await self._update(seen, request, service)
            return
        found = await self._find(service)
        if found is None:
            raise CloudProviderError(
                f"load balancer {name} of {_key(service)} not found; the next sync of the "
                "Service creates it"
            )
        if differs(found, request):
            await self._update(found, request, service)

    async def ensure_load_balancer_deleted(self, cluster_name: str, service: Service) -> None:
        if disowned(service):
            return
        found = await self._find(service)
        if found is None:
            return
        await self._client.delete_load_balancer(str(found["id"]))
        self._ids.pop(str(found.get("name")), None)
        self._seen.pop(str(found["id"]), None)
        log.info(
            "deleted load balancer %s (%s) of %s", found.get("name"), found["id"], _key(service)
        )

    async def _update(self, found: JSON, request: JSON, service: Service) -> JSON:
        try:
            updated = await self._client.update_load_balancer(str(found["id"]), request)
        except DigitalOceanInvalidError as exc:
            raise await self._explained(exc, service) from None
        if updated is None:
            self._ids.pop(str(found.get("name")), None)
            self._seen.pop(str(found["id"]), None)
            raise CloudProviderError(
                f"load balancer {found['id']} of {_key(service)} disappeared while updating it"
            )
        self._ids[str(updated["name"])] = str(updated["id"])
        self._saw(updated)
        return updated

    def _active(self, found: JSON, service: Service) -> LoadBalancerStatus:
        status = found.get("status")
        if status == "new":
            raise RetryError(
                f"load balancer {found.get('name')} ({found['id']}) is being created by "
                f"DigitalOcean (status new); looking again in {self._active_retry:g}s",
                self._active_retry,
            )
        if status != "active":
            raise CloudProviderError(
                f"load balancer {found.get('name')} ({found['id']}) has status {status!r}, "
                "not active: see it in DigitalOcean's control panel"
            )
        return self._status(found, service)

    def _status(self, found: JSON, service: Service) -> LoadBalancerStatus:
        name = hostname(service)
        if name:
            return LoadBalancerStatus(ingress=(LoadBalancerIngress(hostname=name),))
        # PROXY protocol: ipMode Proxy, so kube-proxy sends in-cluster traffic to the
        # load balancer too instead of short-cutting it without the header
        # (digitalocean-cloud-controller-manager#811).
        mode = "Proxy" if proxy_protocol(service) else None
        ingress = tuple(
            LoadBalancerIngress(ip=str(address), ip_mode=mode)
            for address in (found.get("ip"), found.get("ipv6"))
            if address
        )
        return LoadBalancerStatus(ingress=ingress)

    async def _explained(self, exc: DigitalOceanInvalidError, service: Service) -> Exception:
        """A refused request, said in the Service's terms: a certificate that does not
        exist is named (one more request, only on this path)."""
        certificate = certificate_id(service)
        if certificate and await self._client.certificate(certificate) is None:
            return LoadBalancerConfigError(
                f"certificate {certificate} named by {ANN_CERTIFICATE_ID} on {_key(service)} "
                "does not exist in this DigitalOcean account (doctl compute certificate "
                f"list); {exc}"
            )
        return LoadBalancerConfigError(f"{_key(service)}: {exc}")


def _key(service: Service) -> str:
    return f"Service {service.metadata.namespace}/{service.metadata.name}"


def _droplet_ids(nodes: Sequence[Node]) -> list[int]:
    """The droplets behind the load balancer: each Node's providerID. Nodes without
    one yet join when they are initialised (the controller updates again)."""
    ids = set()
    for node in nodes:
        provider_id = node.spec.provider_id
        if not provider_id:
            continue
        if not provider_id.startswith(PROVIDER_ID_PREFIX):
            log.warning(
                "node %s: providerID %s is not a droplet; left out of load balancers",
                node.metadata.name,
                provider_id,
            )
            continue
        ids.add(droplet_id_from_provider_id(provider_id))
    return sorted(ids)


def _rules(rules: Any) -> list[tuple[Any, ...]]:
    return sorted(
        (
            r.get("entry_protocol"),
            r.get("entry_port"),
            r.get("target_protocol"),
            r.get("target_port"),
            r.get("certificate_id") or "",
            bool(r.get("tls_passthrough")),
        )
        for r in rules or []
    )


def differs(found: JSON, request: JSON) -> bool:
    """Whether ``PUT``-ing ``request`` would change the load balancer ``found``."""
    for key, wanted in request.items():
        have = found.get(key)
        if key == "forwarding_rules":
            if _rules(have) != _rules(wanted):
                return True
        elif key == "region":
            if (have or {}).get("slug", have) != wanted:
                return True
        elif key in {"droplet_ids", "tags"}:
            if sorted(have or []) != sorted(wanted):
                return True
        elif isinstance(wanted, dict):
            have = have or {}
            if any(have.get(k) != v for k, v in wanted.items()):
                return True
        elif have != wanted:
            return True
    return False
