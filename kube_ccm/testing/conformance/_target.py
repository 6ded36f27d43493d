"""What a provider package hands the conformance kit: the target and its driver."""

from __future__ import annotations

import contextlib
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kube_ccm.cloudprovider import ClientBuilder, CloudProvider

__all__ = ["ConformanceTarget", "DaemonSettings", "InstanceDriver"]


class InstanceDriver(ABC):
    """Makes and changes instances in the provider's cloud (or in a fake of it), so the
    kit can check what the provider reports about them.

    Names are Node names: after ``await create_instance("n1")`` the provider must map a
    Node named ``n1`` that has no providerID yet to that instance, as it maps the Node a
    kubelet registers. Each method returns once the cloud's API shows the change.
    The kit deletes the instances it created at the end of each check (errors there are
    ignored), so ``delete_instance`` of a missing instance should do nothing.
    """

    live: bool = True
    """Whether a change reaches a provider already built and a daemon already running.
    Set it to ``False`` for a cloud read once at start-up (a static inventory in the
    cloud-config): the kit then builds the provider again, and restarts the daemon,
    after each change it makes."""

    @abstractmethod
    async def create_instance(self, name: str) -> None:
        """Create a running instance for the Node ``name``."""

    @abstractmethod
    async def stop_instance(self, name: str) -> None:
        """Stop it: shut down, but it still exists (``instance_exists`` stays true)."""

    @abstractmethod
    async def start_instance(self, name: str) -> None:
        """Start the stopped instance again."""

    @abstractmethod
    async def delete_instance(self, name: str) -> None:
        """Delete it for good (terminated): the instance is really gone."""

    def api_errors(self) -> contextlib.AbstractAsyncContextManager[None]:
        """While inside, every call the provider makes to its cloud fails as in an outage
        (a 5xx, a refused connection). Optional: the default raises
        :class:`NotImplementedError`, and the checks that need it are skipped."""
        raise NotImplementedError("the driver cannot make the cloud's API fail")

    async def make_blackhole(self, name: str) -> None:
        """Make the routes whose target is the Node ``name`` blackholes: by default,
        delete its instance. Raise :class:`NotImplementedError` when the cloud removes
        such routes itself; the blackhole check is then skipped."""
        await self.delete_instance(name)


ProviderSource = CloudProvider | Callable[[], CloudProvider]


@dataclass(frozen=True, kw_only=True)
class DaemonSettings:
    """How to run ``kube-ccm run`` with this provider, for the daemon-level checks."""

    cloud_provider: str
    """``--cloud-provider``: the name the provider is registered under."""
    cloud_config: Path | None = None
    """``--cloud-config``: a file describing the same cloud as the target's provider
    (the kit asks that provider what the daemon did)."""
    args: Sequence[str] = ()
    """More flags, e.g. ``--allow-untagged-cloud=true``; they come after the kit's."""
    command: Sequence[str] = (sys.executable, "-m", "kube_ccm", "run")
    """The daemon's command without flags: your own ``main.py`` if the provider is
    registered by it rather than by an entry point."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Added to the daemon's environment (e.g. ``PYTHONPATH`` or credentials)."""


@dataclass(frozen=True, kw_only=True)
class ConformanceTarget:
    """The provider under test, returned by the ``conformance_provider`` fixture."""

    provider: ProviderSource
    """A factory (called for each check, its result initialised with
    :attr:`client_builder` and closed with ``aclose`` afterwards), or a provider
    object used as it is (never initialised or closed by the kit)."""
    driver: InstanceDriver | None = None
    """Creates, stops and deletes instances; without it, checks that need instances
    are skipped."""
    client_builder: ClientBuilder | None = None
    """Given to ``initialize``; the default serves an in-memory API server
    (:class:`~kube_ccm.testing.fakeapi.FakeApiServer`), enough for providers that keep
    state in the Kubernetes API."""
    daemon: DaemonSettings | None = None
    """How to run the daemon; without it, the daemon-level checks are skipped."""
    cluster_name: str = "kubernetes"
    """``cluster_name`` of every call (and ``--cluster-name`` of the daemon)."""
    call_timeout: float = 30.0
    """Seconds one provider call may take before the check fails."""
    wait_timeout: float = 60.0
    """Seconds the daemon may take to reach each expected state."""
