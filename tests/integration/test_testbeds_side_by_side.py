"""Two real-node test beds on one host: the host check of each leaves out what the other
owns, whenever it started, and still catches a leak of its own (issue 42, item 3).

Bed A starts; bed B starts while A runs and runs a pod on the pod network (its
``cni-*`` network namespace, the veth on B's bridge, containerd's sandbox and rootfs
mounts: what made a neighbour's check fail). A stops while B's pod runs: A's check
finds nothing. A leak of A's own planted then (a pod network namespace nobody owns,
A's bridge) is found while B still runs, and the check is clean again once it is
removed. B stops last: its check, whose "before" saw A running, finds nothing either.
Other sessions' test beds may run meanwhile: the check leaves them out as well.

Needs root, containerd, runc and the CNI plugins (``make sysdeps``) and the node
binaries; skipped with the reason otherwise, except under ``CI=true``.
"""

from __future__ import annotations

import time
import urllib.error
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kube_ccm.testbed._nodehost import NETNS_DIR, run
from kube_ccm.testbed.nodes import (
    PAUSE_IMAGE,
    NodeOptions,
    RealNodes,
    host_changes,
    host_snapshot,
    real_nodes_unavailable,
)
from kube_ccm.testing.binaries import ControlPlaneBinariesError, ensure_node_binaries
from kube_ccm.testing.controlplane import ControlPlane, ControlPlaneError, ControlPlaneOptions
from kube_ccm.testing.pytest_plugin import unavailable


def pod_on_the_pod_network(node: str) -> dict[str, Any]:
    """A pause pod bound to ``node``, not host-network: containerd makes it a network
    namespace, CNI a veth on the test bed's bridge."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "pod-network", "namespace": "default"},
        "spec": {
            "nodeName": node,
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 1,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "pause", "image": PAUSE_IMAGE, "imagePullPolicy": "Never"}],
        },
    }


def wait_running(plane: ControlPlane, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            pod = plane.request("GET", "/api/v1/namespaces/default/pods/pod-network")
            if pod.get("status", {}).get("phase") == "Running":
                return
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise
        assert time.monotonic() < deadline, f"the pod did not run within {timeout:.0f} s"
        time.sleep(0.5)


def plant_netns() -> Path:
    """A pod network namespace as containerd makes one (a new namespace bind-mounted on
    a file of ``/var/run/netns``), of no test bed. Not ``ip netns add``: on first use it
    bind-mounts ``/var/run/netns`` on itself, over the namespaces of running pods, which
    containerd then cannot remove."""
    NETNS_DIR.mkdir(exist_ok=True)
    path = NETNS_DIR / f"cni-{uuid.uuid4()}"
    path.touch()
    run(["unshare", "--net", "--", "mount", "--bind", "/proc/self/ns/net", str(path)])
    return path


class Bed:
    """A control plane and one real node."""

    def __init__(self) -> None:
        self.plane = ControlPlane(ControlPlaneOptions(real_nodes=True))
        self.nodes = RealNodes(self.plane, NodeOptions(count=1))

    def start(self) -> Bed:
        try:
            self.plane.start()
        except ControlPlaneError as exc:
            unavailable(f"the real control plane could not start: {exc}")
        self.nodes.start()
        return self

    def stop(self) -> None:
        self.nodes.stop()
        self.plane.stop()


@pytest.fixture
def beds() -> Iterator[list[Bed]]:
    reason = real_nodes_unavailable()
    if reason:
        unavailable(reason)
    try:
        ensure_node_binaries()
    except ControlPlaneBinariesError as exc:
        unavailable(f"the node binaries are missing: {exc}")
    started: list[Bed] = []
    try:
        yield started
    finally:
        for bed in reversed(started):
            bed.stop()


def test_each_beds_check_leaves_out_the_other_and_still_catches_its_own_leak(
    beds: list[Bed],
) -> None:
    before_a = host_snapshot()
    a = Bed()
    beds.append(a)
    a.start()
    before_b = host_snapshot()  # A runs
    b = Bed()
    beds.append(b)
    b.start()
    node = b.nodes.nodes[0].name
    b.plane.request("POST", "/api/v1/namespaces/default/pods", pod_on_the_pod_network(node))
    wait_running(b.plane)

    a.stop()
    assert a.nodes.leftovers.items == []
    after = host_snapshot()
    changed = host_changes(before_a, after)
    assert not changed, (
        f"A's check saw B's pod (or A left something): {changed}; owned then: "
        f"{after.get('owned')}, beds {[bed['id'] for bed in after['beds']]}, B {b.nodes.id}"
    )

    # A leak of A's own, planted while B runs: a pod network namespace nobody owns
    # and A's bridge.
    planted = plant_netns()
    run(["ip", "link", "add", a.nodes.bridge, "type", "bridge"])
    try:
        changed = host_changes(before_a, host_snapshot())
        assert "netns" in changed, changed
        assert planted.name in changed["netns"][1]
        assert "links" in changed, changed
        assert a.nodes.bridge in changed["links"][1]
    finally:
        run(["ip", "link", "del", a.nodes.bridge], check=False)
        run(["umount", str(planted)], check=False)
        planted.unlink(missing_ok=True)
    assert not host_changes(before_a, host_snapshot())

    b.stop()
    assert b.nodes.leftovers.items == []
    changed = host_changes(before_b, host_snapshot())
    assert not changed, f"B's check saw what A had (or B left something): {changed}"
