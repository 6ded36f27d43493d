"""LoadBalancer Services on a real apiserver, for daemon tests: a service-controller
daemon on a cloud-config, every Service's ingress addresses, a Service's Events by
reason, and the clean-up that waits until every load balancer is released."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import yaml

from kube_ccm.api import wellknown as wk
from kube_ccm.runtime.client import ApiError, KubeClient
from kube_ccm.testing.daemon import DaemonProcess
from kube_ccm.testing.waiting import eventually


def service_daemon(
    kubeconfig: Path, workdir: Path, *args: str, provider: str = "ippool", config: Any = None
) -> DaemonProcess:
    """``kube-ccm run`` with only the service controller, no leader election, and
    ``config`` (YAML-dumped) as its cloud-config; started."""
    workdir.mkdir(parents=True, exist_ok=True)
    config_file = workdir / "cloud.yaml"
    config_file.write_text(yaml.safe_dump(config or {}))
    return DaemonProcess(
        kubeconfig=kubeconfig,
        workdir=workdir,
        provider=provider,
        cloud_config_file=config_file,
        args=["--leader-elect=false", "--controllers=service", *args],
    ).start()


async def ingress_addresses(client: KubeClient) -> dict[str, list[str]]:
    """Every LoadBalancer Service's ingress IPs, by namespace/name."""
    listed = await client.get("/api/v1/services")
    return {
        f"{s['metadata']['namespace']}/{s['metadata']['name']}": [
            i.get("ip", "")
            for i in s.get("status", {}).get("loadBalancer", {}).get("ingress") or []
        ]
        for s in listed["items"]
        if s["spec"].get("type") == "LoadBalancer"
    }


async def event_messages(client: KubeClient, namespace: str, name: str, reason: str) -> list[str]:
    """The messages of the Events with ``reason`` about the object ``name``."""
    listed = await client.get(
        f"/api/v1/namespaces/{namespace}/events",
        {"fieldSelector": f"involvedObject.name={name},reason={reason}"},
    )
    return [e["message"] for e in listed["items"]]


async def delete_load_balancer_services(client: KubeClient) -> None:
    """Delete every LoadBalancer Service, and wait until none holds the load-balancer
    cleanup finalizer (a daemon must still be running to release them)."""
    listed = await client.get("/api/v1/services")
    for s in listed["items"]:
        meta = s["metadata"]
        if s["spec"].get("type") == "LoadBalancer":
            with contextlib.suppress(ApiError):
                await client.delete(
                    f"/api/v1/namespaces/{meta['namespace']}/services/{meta['name']}"
                )

    async def released() -> bool:
        remaining = await client.get("/api/v1/services")
        return not any(
            wk.FINALIZER_LOAD_BALANCER_CLEANUP in (s["metadata"].get("finalizers") or [])
            for s in remaining["items"]
        )

    await eventually(released, within=120, what="every LoadBalancer Service released")
