"""Each transport (``--kube-api-transport``) against the real apiserver: requests, errors,
a watch, a client certificate and a rotated token file, a restart of the apiserver; and
libcurl's HTTP/2 multiplexing every client of one builder over one connection."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Callable, Collection
from pathlib import Path

import msgspec
import pytest
import yaml

from kube_ccm.runtime.client import ApiError, KubeClient
from kube_ccm.runtime.clientbuilder import SimpleClientBuilder
from kube_ccm.runtime.kubeconfig import load_config
from kube_ccm.testing.controlplane import ControlPlane
from kube_ccm.testing.pytest_plugin import Cleanup
from kube_ccm.testing.waiting import eventually

Builder = Callable[..., SimpleClientBuilder]
"""(kubeconfig, service_accounts=()) -> a client builder on the transport under test."""
WHO_AM_I = "/apis/authentication.k8s.io/v1/selfsubjectreviews"


@pytest.fixture(params=["aiohttp", "curl"])
def transport(request: pytest.FixtureRequest) -> str:
    if request.param == "curl":
        pytest.importorskip("pycurl", reason="the curl transport's extra (kube-ccm[curl])")
    return str(request.param)


@pytest.fixture
async def builder(kube_controlplane: ControlPlane, transport: str) -> AsyncIterator[Builder]:
    made: list[SimpleClientBuilder] = []

    def make(kubeconfig: Path, service_accounts: Collection[str] = ()) -> SimpleClientBuilder:
        made.append(
            SimpleClientBuilder(
                load_config(kubeconfig),
                base_user_agent="kube-ccm-test",
                qps=0,
                burst=1,
                service_accounts=service_accounts,
                transport=transport,
            )
        )
        return made[-1]

    yield make
    for one in made:
        await one.aclose()


async def username(client: KubeClient) -> str:
    review = await client.create(WHO_AM_I, {"apiVersion": "authentication.k8s.io/v1"})
    return str(review["status"]["userInfo"]["username"])


async def test_requests_watches_and_errors(
    kube_controlplane: ControlPlane,
    builder: Builder,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
) -> None:
    client = builder(kube_controlplane.kubeconfig).client("node-controller")
    name = unique_name("node")
    kube_cleanup.add(f"/api/v1/nodes/{name}")
    assert await username(client) == "kube-ccm-admin"  # the kubeconfig's client certificate
    seen: list[tuple[str, str]] = []
    listed = await client.get("/api/v1/nodes", {"limit": 1})

    async def watch() -> None:
        async for event in client.watch(
            "/api/v1/nodes",
            resource_version=listed["metadata"]["resourceVersion"],
            params={"fieldSelector": f"metadata.name={name}"},
        ):
            if event.type != "BOOKMARK":
                labels = msgspec.json.decode(event.object)["metadata"].get("labels", {})
                seen.append((event.type, labels.get("a", "")))

    watching = asyncio.create_task(watch())
    try:
        await client.create("/api/v1/nodes", {"metadata": {"name": name}})
        patched = await client.patch(
            f"/api/v1/nodes/{name}", {"metadata": {"labels": {"a": "b"}}}, patch_type="merge"
        )
        assert patched["metadata"]["labels"] == {"a": "b"}
        await eventually(lambda: seen == [("ADDED", ""), ("MODIFIED", "b")])
        with pytest.raises(ApiError) as missing:
            await client.get(f"/api/v1/nodes/{name}-missing")
        assert missing.value.not_found
        await client.delete(f"/api/v1/nodes/{name}")
        await eventually(lambda: seen[-1][0] == "DELETED")
    finally:
        watching.cancel()
        await asyncio.gather(watching, return_exceptions=True)


async def test_service_account_clients_beside_a_client_certificate_keep_their_identity(
    kube_controlplane: ControlPlane, builder: Builder
) -> None:
    """``--use-service-account-credentials`` with a daemon that has a client certificate:
    the controllers' clients present no certificate (libcurl must not lend them the
    daemon's connection, whose certificate would authenticate them as the daemon)."""
    clients = builder(kube_controlplane.kubeconfig, ["node-controller"])
    own, controller = clients.client(""), clients.client("node-controller")
    whoami = list(await asyncio.gather(username(own), username(controller), username(own)))
    assert whoami == [
        "kube-ccm-admin",
        "system:serviceaccount:kube-system:node-controller",
        "kube-ccm-admin",
    ]


async def test_a_rotated_token_file_is_read_again(
    *,
    kube_controlplane: ControlPlane,
    kube_client: KubeClient,
    builder: Builder,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    accounts = "/api/v1/namespaces/default/serviceaccounts"
    first, second = unique_name("sa"), unique_name("sa")
    tokens = []
    for name in (first, second):
        kube_cleanup.add(f"{accounts}/{name}")
        await kube_client.create(accounts, {"metadata": {"name": name}})
        request = await kube_client.create(
            f"{accounts}/{name}/token", {"spec": {"expirationSeconds": 3600}}
        )
        tokens.append(request["status"]["token"])
    token = tmp_path / "token"
    token.write_text(tokens[0])
    admin = yaml.safe_load(kube_controlplane.kubeconfig.read_text())
    admin["users"][0]["user"] = {"tokenFile": str(token)}
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps(admin))
    client = builder(kubeconfig).client("")
    assert await username(client) == f"system:serviceaccount:default:{first}"
    token.write_text(tokens[1])  # the kubelet rotates it; the old one is revoked:
    await kube_client.delete(f"{accounts}/{first}")

    async def second_is_used() -> bool:
        return await username(client) == f"system:serviceaccount:default:{second}"

    # (the apiserver caches a token's authentication for 10 s)
    await eventually(second_is_used, interval=1.0, what="the rotated token is sent")


async def test_an_apiserver_restart_ends_a_watch_and_the_next_request_reconnects(
    kube_controlplane: ControlPlane, builder: Builder
) -> None:
    client = builder(kube_controlplane.kubeconfig).client("")
    listed = await client.get("/api/v1/namespaces")
    opened = asyncio.Event()

    async def watch() -> None:
        async for _ in client.watch(
            "/api/v1/namespaces", resource_version=listed["metadata"]["resourceVersion"]
        ):
            pass

    async def first_byte() -> None:
        opened.set()
        await watch()

    watching = asyncio.create_task(first_byte())
    await opened.wait()
    await asyncio.sleep(0.5)
    kube_controlplane.restart_apiserver()
    # the informer's contract: the stream ends (closed or a TransportError), never hangs
    async with asyncio.timeout(30):
        await asyncio.gather(watching, return_exceptions=True)

    async def answers() -> bool:
        return bool((await client.version())["major"])

    await eventually(answers, what="an answer after the restart")


def connections_to(port: int) -> int:
    """This process's established TCP connections to ``port`` on loopback."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the directory's own descriptor, closed by now
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            remote_port = int(fields[2].rsplit(":", 1)[1], 16)
            if remote_port == port and fields[3] == "01" and fields[9] in inodes:
                count += 1
    return count


@pytest.mark.parametrize("transport", ["curl"])  # (aiohttp: one connection per request in flight)
async def test_curl_multiplexes_every_client_over_one_connection(
    kube_controlplane: ControlPlane, builder: Builder
) -> None:
    clients = builder(kube_controlplane.kubeconfig)
    controllers = [clients.client(name) for name in ("", "node-controller", "service-controller")]
    port = int(kube_controlplane.server.rsplit(":", 1)[1])
    listed = await controllers[0].get("/api/v1/namespaces")

    async def watch() -> None:
        async for _ in controllers[1].watch(
            "/api/v1/namespaces", resource_version=listed["metadata"]["resourceVersion"]
        ):
            pass

    watching = asyncio.create_task(watch())
    try:
        await asyncio.gather(
            *(controllers[i % 3].get("/api/v1/namespaces/default") for i in range(60))
        )
        assert connections_to(port) == 1
    finally:
        watching.cancel()
        await asyncio.gather(watching, return_exceptions=True)
