"""Kubernetes' own e2e LoadBalancer specs against kube-ccm, the CI short form (issue 38).

Upstream's ``e2e.test`` (``test/e2e/network`` of the pinned Kubernetes, built from the
Go module proxy by :mod:`kube_ccm.testbed.e2e`) runs the quick specs
(:data:`~kube_ccm.testbed.e2e.QUICK_SPECS`) from the client namespace, with a source
address outside the nodes' subnet, against two real nodes with kube-proxy, CoreDNS as
the cluster DNS, and kube-ccm installed from its image and Helm chart with the
``servicelb`` provider; an egress guard drops anything addressed outside the bed. The
test passes when every selected spec passes by upstream's own verdict, none was
skipped at run time unless :data:`~kube_ccm.testbed.e2e.SKIPS` lists it with a reason
(under ``CI=true`` such a skip fails the test; elsewhere it skips with the names), and
the egress guard dropped nothing. The whole focus runs outside CI:
``make e2e-loadbalancer`` (docs/e2e.md).

Needs what the real-node chart tests need (``make sysdeps``, root) and Go for the
first build; skipped with the reason otherwise, except under ``CI=true``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from kube_ccm.testbed.cluster import chart_cluster_unavailable
from kube_ccm.testbed.e2e import (
    QUICK_FOCUS,
    E2EBed,
    E2EError,
    E2EOptions,
    ensure_e2e_binaries,
    ensure_e2e_images,
)
from kube_ccm.testbed.helm import HelmBinaryError
from kube_ccm.testbed.image import ImageBuildError
from kube_ccm.testbed.nodes import RealNodesError, assert_host_restored, host_snapshot
from kube_ccm.testing.binaries import ControlPlaneBinariesError
from kube_ccm.testing.controlplane import ControlPlaneError
from kube_ccm.testing.pytest_plugin import unavailable


def test_upstreams_quick_loadbalancer_specs_pass_against_servicelb(tmp_path: Path) -> None:
    reason = chart_cluster_unavailable()
    if reason:
        unavailable(reason)
    try:
        binaries = ensure_e2e_binaries()
        images = ensure_e2e_images(binaries)
    except (E2EError, ImageBuildError) as exc:
        unavailable(f"the e2e pieces could not be built: {exc}")
        raise
    before = host_snapshot()
    bed = E2EBed(binaries, images, E2EOptions(provider="servicelb"))
    try:
        bed.__enter__()
    except (HelmBinaryError, ImageBuildError, ControlPlaneBinariesError, ControlPlaneError) as exc:
        unavailable(f"the real-node cluster could not be started: {exc}")
        raise
    except RealNodesError as exc:
        unavailable(f"the real nodes could not start: {exc}")
        raise
    try:
        log = tmp_path / "e2e.log"
        with log.open("w") as output:
            results = bed.run(QUICK_FOCUS, tmp_path / "report", output=output)
        drops = bed.egress_drops()
        dropped = bed.egress_dropped()
        print(f"{results.summary()} in {results.seconds:.0f} s\n{results.table()}", file=sys.stderr)
    finally:
        bed.__exit__(None, None, None)
    assert_host_restored(before, bed.cluster.nodes)
    tail = "\n".join(log.read_text().splitlines()[-60:])
    assert results.specs, f"no spec ran:\n{tail}"
    assert not results.failed(), f"{results.table()}\n{tail}"
    assert not any(drops.values()), f"the egress guard dropped packets: {drops}, to {dropped}"
    unexpected = results.unexpected_skips()
    if unexpected:
        unavailable(
            "upstream skipped specs that SKIPS does not list: "
            + "; ".join(f"{s.name} ({s.message})" for s in unexpected)
        )
    assert results.returncode == 0, tail
