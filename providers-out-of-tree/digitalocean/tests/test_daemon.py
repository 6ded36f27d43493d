"""The provider in ``kube-ccm run`` on a real kube-apiserver (built on first use; the
control-plane fixtures of ``kube_ccm.testing.pytest_plugin``), against the fake API:
droplets drive their Nodes, a Service gets a load balancer through DigitalOcean's
``new`` -> ``active`` with ``ipMode: Proxy`` for the PROXY protocol, a missing
certificate is an Event naming it, and the webhook refuses an annotation out of range
at apply.

The daemon is ``python -m kube_ccm run --cloud-provider=digitalocean``: the provider
is found through its entry point. Where the package is not installed (a checkout's
virtualenv before ``make``), the entry point declared in ``pyproject.toml`` is put on
the daemon's path as the install would (a ``.dist-info`` with ``entry_points.txt``).
"""

from __future__ import annotations

import asyncio
import base64
import importlib.metadata
import os
import socket
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kube_ccm.cloudprovider import ApiError, KubernetesClient
from kube_ccm.testing import (
    UNINITIALIZED_TAINT,
    Cleanup,
    ControlPlane,
    DaemonProcess,
    create_node,
    eventually,
    find_node,
    service_manifest,
    set_node_ready,
    taint_keys,
)

import kube_ccm_digitalocean
from kube_ccm_digitalocean.annotations import BASE
from kube_ccm_digitalocean.testing import FakeDigitalOcean, write_config

pytestmark = pytest.mark.integration

PACKAGE = Path(kube_ccm_digitalocean.__file__).resolve().parents[1]
SHUTDOWN = "node.cloudprovider.kubernetes.io/shutdown"
FAST = (
    "--leader-elect=false",
    "--node-monitor-period=500ms",
    "--node-status-update-frequency=2s",
    "--cloud-call-timeout=5s",
)


def installed() -> bool:
    try:
        importlib.metadata.distribution("kube-ccm-digitalocean")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def entry_point_env(directory: Path) -> dict[str, str]:
    """The daemon's PYTHONPATH: as it is when the package is installed, else the
    package and a ``.dist-info`` holding the entry points ``pyproject.toml`` declares."""
    paths = [os.environ.get("PYTHONPATH", "")]
    if not installed():
        project = tomllib.loads((PACKAGE / "pyproject.toml").read_text())["project"]
        info = directory / f"kube_ccm_digitalocean-{project['version']}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n"
        )
        lines = []
        for group, points in project["entry-points"].items():
            lines.append(f"[{group}]")
            lines.extend(f"{name} = {value}" for name, value in points.items())
        (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
        paths = [str(PACKAGE), str(directory), *paths]
    return {"PYTHONPATH": os.pathsep.join(p for p in paths if p)}


@pytest.fixture
def fake() -> Iterator[FakeDigitalOcean]:
    with FakeDigitalOcean(activation_delay=2.0) as server:
        yield server


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def ccm(
    kube_controlplane: ControlPlane, fake: FakeDigitalOcean, tmp_path: Path
) -> Iterator[tuple[DaemonProcess, Path, int]]:
    config = write_config(fake, tmp_path / "config", dropletCacheTTL="0s", activeRetry="1s")
    port = free_port()
    certs = tmp_path / "certs"
    process = DaemonProcess(
        kubeconfig=kube_controlplane.kubeconfig,
        workdir=tmp_path / "daemon",
        provider="digitalocean",
        cloud_config_file=config,
        args=[
            *FAST,
            "--feature-gates=CloudControllerManagerWebhook=true",
            "--webhooks=service-annotations",
            "--webhook-bind-address=127.0.0.1",
            f"--webhook-secure-port={port}",
            f"--webhook-cert-dir={certs}",
        ],
        env=entry_point_env(tmp_path / "site"),
    ).start()
    process.wait_for_log("serving webhooks service-annotations")
    yield process, certs / "cloud-controller-manager-webhook.crt", port
    process.stop()


async def test_a_droplets_life_drives_its_node(
    ccm: Any,
    fake: FakeDigitalOcean,
    kube_client: KubernetesClient,
    kube_cleanup: Cleanup,
    unique_name: Any,
) -> None:
    name = unique_name("droplet")
    droplet = fake.add_droplet(name, region="ams3", size="s-1vcpu-2gb")
    await create_node(kube_client, kube_cleanup, name)

    async def initialised() -> bool:
        node = await find_node(kube_client, name) or {}
        return UNINITIALIZED_TAINT["key"] not in taint_keys(node) and bool(
            node.get("status", {}).get("addresses")
        )

    await eventually(initialised, within=60, what=f"Node {name} initialised from its droplet")
    node = await find_node(kube_client, name) or {}
    labels = node["metadata"]["labels"]
    assert node["spec"]["providerID"] == f"digitalocean://{droplet['id']}"
    assert labels["node.kubernetes.io/instance-type"] == "s-1vcpu-2gb"
    assert labels["topology.kubernetes.io/region"] == "ams3"
    assert labels["topology.kubernetes.io/zone"] == "ams3"
    private = droplet["networks"]["v4"][0]["ip_address"]
    assert {"type": "InternalIP", "address": private} in node["status"]["addresses"]

    await set_node_ready(kube_client, name, "Unknown")
    fake.set_droplet_status(droplet["id"], "off")

    async def shutdown_tainted() -> bool:
        return SHUTDOWN in taint_keys(await find_node(kube_client, name))

    await eventually(shutdown_tainted, within=30, what="the shutdown taint on a droplet off")
    fake.delete_droplet(droplet["id"])

    async def deleted() -> bool:
        return await find_node(kube_client, name) is None

    await eventually(deleted, within=30, what="the Node of a destroyed droplet deleted")


async def events(client: KubernetesClient, namespace: str, name: str) -> list[dict[str, Any]]:
    found = await client.get(f"/api/v1/namespaces/{namespace}/events")
    return [e for e in found["items"] if e["involvedObject"]["name"] == name]


async def test_a_service_waits_for_active_then_gets_its_ingress(
    *,
    ccm: Any,
    fake: FakeDigitalOcean,
    kube_client: KubernetesClient,
    kube_cleanup: Cleanup,
    kube_namespace: str,
    unique_name: Any,
) -> None:
    name = unique_name("web")
    droplet = fake.add_droplet(name)
    await create_node(kube_client, kube_cleanup, name)
    base = f"/api/v1/namespaces/{kube_namespace}/services"
    manifest = service_manifest(
        "web",
        annotations={BASE + "enable-proxy-protocol": "true", BASE + "size-unit": "2"},
    )
    await kube_client.create(base, manifest)

    async def ingress() -> list[dict[str, Any]]:
        service = await kube_client.get(f"{base}/web")
        return list(service.get("status", {}).get("loadBalancer", {}).get("ingress") or [])

    async def has_ingress() -> bool:
        return bool(await ingress())

    await eventually(has_ingress, within=60, what="the Service's ingress once active")
    # Its own load balancer, by the Go CCM's default name: the control plane is shared,
    # so the daemon may also serve other tests' leftover LoadBalancer Services.
    uid = (await kube_client.get(f"{base}/web"))["metadata"]["uid"]
    lb = fake.load_balancer_named(("a" + uid.replace("-", ""))[:32])
    assert lb is not None, [made["name"] for made in fake.load_balancers.values()]
    assert await ingress() == [{"ip": lb["ip"], "ipMode": "Proxy"}]
    assert lb["size_unit"] == 2
    assert lb["enable_proxy_protocol"]

    async def droplet_behind() -> bool:
        current = fake.load_balancer(lb["id"]) or {}
        return droplet["id"] in current.get("droplet_ids", [])

    await eventually(droplet_behind, within=30, what="the initialised Node's droplet behind it")
    seen = await events(kube_client, kube_namespace, "web")
    assert "EnsuredLoadBalancer" in [e["reason"] for e in seen]
    # "new" is a retry after activeRetry (as upstream, its Event is a
    # SyncLoadBalancerFailed), never an error of another kind.
    failed = [e["message"] for e in seen if e["reason"] == "SyncLoadBalancerFailed"]
    assert all("is being created by DigitalOcean (status new)" in m for m in failed), failed

    await kube_client.delete(f"{base}/web")

    async def deleted() -> bool:
        return fake.load_balancer(lb["id"]) is None  # its own: others' may remain

    await eventually(deleted, within=30, what="the load balancer deleted with its Service")


async def test_a_missing_certificate_is_an_event_naming_it(
    ccm: Any,
    fake: FakeDigitalOcean,
    kube_client: KubernetesClient,
    kube_namespace: str,
) -> None:
    missing = "0e4b3d5a-0000-4000-8000-00000000beef"
    base = f"/api/v1/namespaces/{kube_namespace}/services"
    manifest = service_manifest(
        "tls",
        annotations={BASE + "certificate-id": missing},
        ports=[{"port": 443, "protocol": "TCP"}],
    )
    await kube_client.create(base, manifest)

    async def named() -> bool:
        return any(
            e["reason"] == "SyncLoadBalancerFailed" and f"certificate {missing}" in e["message"]
            for e in await events(kube_client, kube_namespace, "tls")
        )

    await eventually(named, within=30, what="a SyncLoadBalancerFailed Event naming the cert")
    await kube_client.delete(f"{base}/tls")


async def test_the_webhook_refuses_an_annotation_out_of_range(
    ccm: Any,
    kube_client: KubernetesClient,
    kube_cleanup: Cleanup,
    kube_namespace: str,
    unique_name: Any,
) -> None:
    _process, ca_file, port = ccm
    config = unique_name("do-webhook")
    path = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
    kube_cleanup.add(f"{path}/{config}")
    await kube_client.create(
        path,
        {
            "metadata": {"name": config},
            "webhooks": [
                {
                    "name": "service-annotations.kube-ccm.io",
                    "admissionReviewVersions": ["v1"],
                    "sideEffects": "None",
                    "failurePolicy": "Fail",
                    "timeoutSeconds": 5,
                    "namespaceSelector": {
                        "matchLabels": {"kubernetes.io/metadata.name": kube_namespace}
                    },
                    "rules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE", "UPDATE"],
                            "resources": ["services"],
                        }
                    ],
                    "clientConfig": {
                        "url": f"https://127.0.0.1:{port}/service-annotations",
                        "caBundle": base64.b64encode(ca_file.read_bytes()).decode(),
                    },
                }
            ],
        },
    )
    base = f"/api/v1/namespaces/{kube_namespace}/services"
    refused: dict[str, str] = {}

    async def out_of_range_refused() -> bool:
        name = unique_name("big")
        manifest = service_manifest(name, annotations={BASE + "size-unit": "500"})
        try:
            await kube_client.create(base, manifest)
        except ApiError as exc:
            refused["message"] = exc.message
            return True
        await kube_client.delete(f"{base}/{name}")
        await asyncio.sleep(0.2)
        return False

    await eventually(out_of_range_refused, within=30, interval=0.5, what="a refused Service")
    assert (
        f"metadata.annotations[{BASE}size-unit]: invalid value '500': use a whole number "
        "from 1 to 100"
    ) in refused["message"]


async def test_a_token_of_another_team_deletes_no_node_and_names_both_teams(
    *,
    ccm: Any,
    fake: FakeDigitalOcean,
    kube_client: KubernetesClient,
    kube_cleanup: Cleanup,
    unique_name: Any,
    tmp_path: Path,
) -> None:
    """Issue 42: a token of another team gets 404 for every droplet. With three Nodes
    NotReady none is deleted, and the log names the teams; the team's token back,
    nothing is deleted; a droplet destroyed then, its Node goes (and only it)."""
    process = ccm[0]
    names = [unique_name(f"team{i}") for i in range(3)]
    droplets = [fake.add_droplet(name) for name in names]
    for name, droplet in zip(names, droplets, strict=True):
        await create_node(
            kube_client, kube_cleanup, name, providerID=f"digitalocean://{droplet['id']}"
        )
        await set_node_ready(kube_client, name, "Unknown")
    process.wait_for_log("DigitalOcean accepts the token")  # the team noted at start-up
    token_file = tmp_path / "config" / "do-token"
    token_file.write_text(fake.other_team_token + "\n")
    hint = "give the daemon a token of team 'cluster team'"

    async def said() -> bool:
        log: str = process.log()
        return log.count(hint) >= len(names)

    await eventually(said, within=60, what="the token's team named in the log")
    assert "is of team 'another team'" in process.log()
    for name in names:
        assert await find_node(kube_client, name) is not None, f"{name} deleted"

    token_file.write_text(fake.token + "\n")
    fake.delete_droplet(droplets[0]["id"])

    async def deleted() -> bool:
        return await find_node(kube_client, names[0]) is None

    await eventually(deleted, within=60, what="the destroyed droplet's Node deleted")
    for name in names[1:]:
        assert await find_node(kube_client, name) is not None, f"{name} deleted"


async def test_the_token_stays_out_of_the_log_at_the_highest_verbosity(
    kube_controlplane: ControlPlane,
    fake: FakeDigitalOcean,
    kube_client: KubernetesClient,
    kube_cleanup: Cleanup,
    tmp_path: Path,
) -> None:
    """Issue 37: ``--v=10`` (debug from pydo, azure-core and aiohttp too): the token
    appears nowhere in the log, however the client libraries would write it."""
    config = write_config(fake, tmp_path / "config", dropletCacheTTL="0s")
    process = DaemonProcess(
        kubeconfig=kube_controlplane.kubeconfig,
        workdir=tmp_path / "daemon",
        provider="digitalocean",
        cloud_config_file=config,
        args=[*FAST, "--v=10", "--controllers=cloud-node,cloud-node-lifecycle"],
        env=entry_point_env(tmp_path / "site"),
    ).start()
    name = "do-secret-node"
    fake.add_droplet(name)
    try:
        await create_node(kube_client, kube_cleanup, name)

        async def initialised() -> bool:
            return UNINITIALIZED_TAINT["key"] not in taint_keys(await find_node(kube_client, name))

        await eventually(initialised, within=60, what=f"Node {name} initialised")
    finally:
        process.stop()
    log = process.log()
    assert "GET /v2/droplets" in log or "droplets" in log, "no API call in the log"
    assert fake.token not in log
