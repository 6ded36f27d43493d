"""pytest fixtures for testing against a real control plane.

Enable in a ``conftest.py`` with ``pytest_plugins = ["kube_ccm.testing.pytest_plugin"]``
(needs the ``kube-ccm[testing]`` extra: pytest and pytest-asyncio).

Fixtures:

``kube_controlplane`` (session)
    One etcd + kube-apiserver for the whole run. When it cannot start, tests
    that use it are skipped with the reason, unless the environment requires
    it (``CI=true`` or ``KUBE_CCM_REQUIRE_CONTROLPLANE=1``), where they fail.
``kube_controlplane_options`` (session)
    The :class:`~kube_ccm.testing.controlplane.ControlPlaneOptions` it starts with
    (the defaults); override it in a ``conftest.py`` to change them, e.g. to
    audit the requests of some users (``audit_users``).
``kube_client``
    An async :class:`~kube_ccm.runtime.client.KubeClient` with admin rights.
``kube_namespace``
    A fresh namespace, deleted after the test.
``kube_cleanup``
    Register cluster-scoped objects a test creates; they are deleted after it,
    finalizers stripped first, so one test's Nodes never leak into the next.
``unique_name``
    ``unique_name("node")`` gives a DNS-safe name unique to this test.
``world`` (no binaries needed)
    A :class:`kube_ccm.testing.world.World`: the in-memory apiserver, a running
    node informer over it and the simulated cloud in memory, for fast controller
    tests; override the ``cloud_config`` fixture to configure the cloud.
"""

from __future__ import annotations

import itertools
import re
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
import pytest_asyncio

from kube_ccm.runtime.client import ApiError, KubeClient

# Cleanup lives in a module of its own: importing it (the conformance kit does) must not
# import this plugin before pytest loads it, which would stop its assertion rewriting.
from kube_ccm.testing.cleanup import Cleanup
from kube_ccm.testing.controlplane import (
    REQUIRE_ENV,
    ControlPlane,
    ControlPlaneError,
    ControlPlaneOptions,
    controlplane_required,
)
from kube_ccm.testing.world import World, controller_world

__all__ = [
    "Cleanup",
    "cloud_config",
    "kube_cleanup",
    "kube_client",
    "kube_controlplane",
    "kube_controlplane_options",
    "kube_namespace",
    "unavailable",
    "unique_name",
    "world",
]

_RUN_ID = uuid.uuid4().hex[:6]


def unavailable(message: str) -> None:
    """Skip the test for a missing piece of the test bed, or fail it where the test bed
    is required (CI, ``KUBE_CCM_REQUIRE_CONTROLPLANE=1``): a skip must not hide it there."""
    if controlplane_required():
        pytest.fail(f"{message}\n(required because CI=true or {REQUIRE_ENV}=1)")
    pytest.skip(message)


@pytest.fixture(scope="session")
def kube_controlplane_options() -> ControlPlaneOptions:
    return ControlPlaneOptions()


@pytest.fixture(scope="session")
def kube_controlplane(kube_controlplane_options: ControlPlaneOptions) -> Iterator[ControlPlane]:
    plane = ControlPlane(kube_controlplane_options)
    with plane.started_or(_no_controlplane, ControlPlaneError):
        yield plane


def _no_controlplane(reason: str) -> None:
    unavailable(f"the real control plane could not start: {reason}")


@pytest_asyncio.fixture
async def kube_client(kube_controlplane: ControlPlane) -> AsyncIterator[KubeClient]:
    client = KubeClient.from_kubeconfig(kube_controlplane.kubeconfig)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    base = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:30].strip("-")
    counter = itertools.count()

    def make(prefix: str) -> str:
        name = f"{prefix}-{base}-{_RUN_ID}-{next(counter)}"
        return name[:63].strip("-")

    return make


@pytest_asyncio.fixture
async def kube_cleanup(kube_client: KubeClient) -> AsyncIterator[Cleanup]:
    cleanup = Cleanup()
    try:
        yield cleanup
    finally:
        await cleanup.run(kube_client)


@pytest_asyncio.fixture
async def kube_namespace(
    kube_client: KubeClient, unique_name: Callable[[str], str]
) -> AsyncIterator[str]:
    name = unique_name("ns")
    await kube_client.create(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    try:
        yield name
    finally:
        # Without kube-controller-manager the namespace stays Terminating; its
        # objects are unique to this test, so that is harmless.
        try:
            await kube_client.delete(f"/api/v1/namespaces/{name}")
        except ApiError as exc:
            if not exc.not_found:
                raise


@pytest.fixture
def cloud_config() -> dict[str, Any]:
    """Fields of the simulated cloud's config for ``world``; override in a test module."""
    return {}


@pytest_asyncio.fixture
async def world(cloud_config: dict[str, Any]) -> AsyncIterator[World]:
    """An in-memory apiserver, a node informer and the simulated cloud (no binaries)."""
    async with controller_world(**cloud_config) as built:
        yield built
