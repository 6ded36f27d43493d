"""The informer against the real apiserver: real payloads, real watch, a restart."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

import msgspec

from kube_ccm.runtime.client import KubeClient
from kube_ccm.runtime.informer import Backoff, Informer
from kube_ccm.runtime.resources import NODES
from kube_ccm.testing.controlplane import ControlPlane
from kube_ccm.testing.pytest_plugin import Cleanup
from kube_ccm.testing.waiting import eventually


class Meta(msgspec.Struct, frozen=True):
    name: str
    labels: dict[str, str] = {}


class Node(msgspec.Struct, frozen=True):
    metadata: Meta


async def test_informer_follows_nodes_and_survives_an_apiserver_restart(
    kube_controlplane: ControlPlane,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
) -> None:
    first, second = unique_name("node"), unique_name("node")
    for name in (first, second):
        kube_cleanup.add(f"/api/v1/nodes/{name}")
    await kube_client.create("/api/v1/nodes", {"metadata": {"name": first}})
    informer = Informer(kube_client, NODES, backoff=Backoff(initial=0.1, maximum=0.5))
    deleted: list[str] = []
    informer.add_handler(on_delete=lambda n: deleted.append(n.metadata.name))
    task = asyncio.create_task(informer.run())
    try:
        async with asyncio.timeout(30):
            await informer.wait_synced()
        assert informer.get(first) is not None

        await kube_client.patch(f"/api/v1/nodes/{first}", {"metadata": {"labels": {"a": "b"}}})
        await eventually(
            lambda: (n := informer.get(first)) is not None and n.metadata.labels == {"a": "b"}
        )

        kube_controlplane.restart_apiserver()
        await kube_client.create("/api/v1/nodes", {"metadata": {"name": second}})
        await eventually(lambda: informer.get(second) is not None)

        await kube_client.delete(f"/api/v1/nodes/{first}")
        await eventually(lambda: first in deleted)
        assert informer.get(first) is None
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


class Recording:
    """The client, recording each list request's parameters."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self.lists: list[dict[str, str | int]] = []
        self.watch = client.watch

    async def request(
        self, method: str, path: str, *, params: Mapping[str, str | int] | None = None
    ) -> bytes:
        self.lists.append(dict(params or {}))
        return await self.client.request(method, path, params=params)


async def test_the_first_list_is_paged_by_the_real_apiserver(
    kube_client: KubeClient, kube_cleanup: Cleanup, unique_name: Callable[[str], str]
) -> None:
    """Issue 26: the informer's first LIST goes in pages of ``page_size`` (limit and
    continue): the apiserver honours the limit, as it would not at resourceVersion=0."""
    label = unique_name("paged")
    names = [unique_name("node") for _ in range(7)]
    for name in names:
        kube_cleanup.add(f"/api/v1/nodes/{name}")
        await kube_client.create(
            "/api/v1/nodes", {"metadata": {"name": name, "labels": {"paged": label}}}
        )
    recording = Recording(kube_client)
    informer = Informer(recording, NODES, label_selector=f"paged={label}", page_size=2)
    task = asyncio.create_task(informer.run())
    try:
        async with asyncio.timeout(30):
            await informer.wait_synced()
        assert sorted(informer.keys()) == sorted(names)
        assert len(recording.lists) == 4, "7 Nodes in pages of 2"
        assert all(params["limit"] == 2 for params in recording.lists)
        assert "resourceVersion" not in recording.lists[0]
        assert [bool(params.get("continue")) for params in recording.lists] == [
            False,
            True,
            True,
            True,
        ]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
