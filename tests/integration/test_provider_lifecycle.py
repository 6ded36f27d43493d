"""A provider's ``aclose()`` runs on every way out once ``initialize`` was called: a
stop, a failing ``initialize``, a start-up failure after it. (Signal and leader loss
are checked on the daemon subprocess in test_daemon_nodes/test_daemon_leadership.)
The daemon runs in this process against the real apiserver."""

from __future__ import annotations

import asyncio

import pytest

from kube_ccm.app.manager import Daemon
from kube_ccm.app.options.buildconfig import parse_options
from kube_ccm.cloudprovider import CloudProvider, CloudProviderError
from kube_ccm.testing.controlplane import ControlPlane
from kube_ccm.testing.fakeprovider import FakeInformerUser

BUGS = {
    "initialize": "a bug in the provider",
    "set_informers": "informers refused",
    "aclose": "close failed",
}


def recording(fail: str = "") -> FakeInformerUser:
    """A provider taking informers, its hooks recorded; the hook ``fail`` raises (a bug,
    or for ``credentials`` the provider's own error from ``initialize``)."""
    cloud = FakeInformerUser(name="recording")
    if fail == "credentials":
        error = CloudProviderError("the cloud refused the credentials from file /x")
        cloud.fail("initialize", error)
    elif fail:
        cloud.fail(fail, RuntimeError(BUGS[fail]))
    return cloud


def daemon(plane: ControlPlane, cloud: CloudProvider) -> Daemon:
    config = parse_options(
        [
            "--cloud-provider=simulated",  # the flag must name one; the object is ours
            f"--kubeconfig={plane.kubeconfig}",
            "--leader-elect=false",
            "--secure-port=0",
            "--controllers=cloud-node",
        ]
    )
    return Daemon(config, cloud)


async def test_a_stopped_daemon_closes_its_provider_once(kube_controlplane: ControlPlane) -> None:
    cloud = recording()
    ccm = daemon(kube_controlplane, cloud)
    running = asyncio.create_task(ccm.run())
    for _ in range(100):
        if "set_informers" in cloud.called():
            break
        await asyncio.sleep(0.05)
    ccm.stop.set()
    assert await asyncio.wait_for(running, 30) == 0
    assert cloud.called() == ["initialize", "set_informers", "aclose"]


@pytest.mark.parametrize("fail", ["initialize", "credentials", "set_informers"])
async def test_a_start_up_failure_after_initialize_still_closes_the_provider(
    kube_controlplane: ControlPlane, fail: str
) -> None:
    cloud = recording(fail)
    assert await asyncio.wait_for(daemon(kube_controlplane, cloud).run(), 30) == 1
    assert cloud.called()[-1] == "aclose"
    assert cloud.called().count("aclose") == 1


async def test_a_provider_that_cannot_start_is_one_line_without_traceback(
    kube_controlplane: ControlPlane, caplog: pytest.LogCaptureFixture
) -> None:
    cloud = recording("credentials")
    assert await asyncio.wait_for(daemon(kube_controlplane, cloud).run(), 30) == 1
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert [r.getMessage() for r in errors] == [
        "the cloud provider could not start: the cloud refused the credentials from file /x"
    ]
    assert all(r.exc_info is None for r in errors)


async def test_a_failing_aclose_is_logged_not_raised(
    kube_controlplane: ControlPlane, caplog: pytest.LogCaptureFixture
) -> None:
    cloud = recording("aclose")
    ccm = daemon(kube_controlplane, cloud)
    running = asyncio.create_task(ccm.run())
    await asyncio.sleep(1)
    ccm.stop.set()
    assert await asyncio.wait_for(running, 30) == 0
    assert "closing the cloud provider failed: close failed" in caplog.text
