"""PV labelling through the daemon on the real apiserver (``--controllers=pvl``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from kube_ccm.runtime.client import KubeClient
from kube_ccm.testing.controlplane import ControlPlane, ControlPlaneOptions
from kube_ccm.testing.daemon import DaemonProcess
from kube_ccm.testing.pytest_plugin import Cleanup
from kube_ccm.testing.waiting import eventually

DRIVER = "simulated.csi.kube-ccm.io"


def start_labelling_daemon(kubeconfig: Path, tmp_path: Path) -> DaemonProcess:
    """``kube-ccm run`` with only the PV-label controller, once it has started."""
    ccm = DaemonProcess(
        kubeconfig=kubeconfig,
        workdir=tmp_path / "daemon",
        args=["--leader-elect=false", "--controllers=pvl"],
    ).start()
    try:
        ccm.wait_for_log("Started persistent-volume-label-controller")
    except BaseException:
        ccm.stop()
        raise
    return ccm


async def test_a_new_volume_in_a_zone_gets_labels_and_node_affinity(
    *,
    ccm_kubeconfig: Path,
    kube_controlplane: ControlPlane,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    ccm = start_labelling_daemon(ccm_kubeconfig, tmp_path)
    try:
        name, other = unique_name("pv"), unique_name("pv")
        ccm.cloud.add_volume(f"vol-{name}", zone="sim-zone-c", region="sim-region-1")
        for pv_name, driver in ((name, DRIVER), (other, "nfs.csi.k8s.io")):
            kube_cleanup.add(f"/api/v1/persistentvolumes/{pv_name}")
            await kube_client.create(
                "/api/v1/persistentvolumes",
                {
                    "metadata": {"name": pv_name},
                    "spec": {
                        "capacity": {"storage": "1Gi"},
                        "accessModes": ["ReadWriteOnce"],
                        "csi": {"driver": driver, "volumeHandle": f"vol-{pv_name}"},
                    },
                },
            )
        volume: dict[str, Any] = {}

        async def labelled() -> bool:
            volume.update(await kube_client.get(f"/api/v1/persistentvolumes/{name}"))
            return bool(volume["metadata"].get("labels"))

        await eventually(labelled, what="zone labels on the volume")
        assert volume["metadata"]["labels"] == {
            "topology.kubernetes.io/zone": "sim-zone-c",
            "topology.kubernetes.io/region": "sim-region-1",
        }
        terms = volume["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
        keys = {e["key"] for e in terms[0]["matchExpressions"]}
        assert keys == {"topology.kubernetes.io/zone", "topology.kubernetes.io/region"}
        untouched = await kube_client.get(f"/api/v1/persistentvolumes/{other}")
        assert not untouched["metadata"].get("labels")
    finally:
        assert ccm.stop() == 0


def _csi_volume(name: str, node_affinity: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "capacity": {"storage": "1Gi"},
        "accessModes": ["ReadWriteOnce"],
        "csi": {"driver": DRIVER, "volumeHandle": f"vol-{name}"},
    }
    if node_affinity is not None:
        spec["nodeAffinity"] = node_affinity
    return {"metadata": {"name": name}, "spec": spec}


TWO_TERMS = {
    "required": {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "example.com/rack", "operator": "In", "values": ["r1"]}]},
            {"matchExpressions": [{"key": "example.com/rack", "operator": "In", "values": ["r2"]}]},
        ]
    }
}


def _merged(terms: list[dict[str, Any]], zone: str) -> bool:
    """Both existing terms kept, each with the zone and region requirements appended."""
    return len(terms) == 2 and all(
        term["matchExpressions"]
        == [
            {"key": "example.com/rack", "operator": "In", "values": [rack]},
            {"key": "topology.kubernetes.io/region", "operator": "In", "values": ["sim-region-1"]},
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]},
        ]
        for rack, term in zip(("r1", "r2"), terms, strict=True)
    )


async def test_existing_terms_get_the_zone_where_the_apiserver_lets_node_affinity_change(
    *, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    """With kube-apiserver's MutablePVNodeAffinity gate (alpha, off by default) an existing
    PV's node affinity may change: the requirements go into every existing term."""
    plane = ControlPlane(
        ControlPlaneOptions(extra_apiserver_args=("--feature-gates=MutablePVNodeAffinity=true",))
    )
    plane.start()
    client = KubeClient.from_kubeconfig(plane.kubeconfig)
    ccm = start_labelling_daemon(plane.kubeconfig, tmp_path)
    try:
        name = unique_name("pv")
        ccm.cloud.add_volume(f"vol-{name}", zone="sim-zone-c", region="sim-region-1")
        await client.create("/api/v1/persistentvolumes", _csi_volume(name, TWO_TERMS))
        volume: dict[str, Any] = {}

        async def merged() -> bool:
            volume.update(await client.get(f"/api/v1/persistentvolumes/{name}"))
            return _merged(
                volume["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"], "sim-zone-c"
            )

        await eventually(merged, what="the zone requirements in both existing terms")
        assert volume["metadata"]["labels"]["topology.kubernetes.io/zone"] == "sim-zone-c"
    finally:
        assert ccm.stop() == 0
        await client.aclose()
        plane.stop()


async def test_where_the_apiserver_refuses_the_change_the_labels_land_and_an_event_says_why(
    *,
    ccm_kubeconfig: Path,
    kube_controlplane: ControlPlane,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    """A stock kube-apiserver refuses any change to an existing PV's node affinity: the
    labels are still written and a Warning points to the admission webhook."""
    ccm = start_labelling_daemon(ccm_kubeconfig, tmp_path)
    try:
        name = unique_name("pv")
        ccm.cloud.add_volume(f"vol-{name}", zone="sim-zone-c", region="sim-region-1")
        kube_cleanup.add(f"/api/v1/persistentvolumes/{name}")
        await kube_client.create("/api/v1/persistentvolumes", _csi_volume(name, TWO_TERMS))

        async def warned() -> list[dict[str, Any]]:
            listed = await kube_client.get(
                "/api/v1/namespaces/default/events",
                {"fieldSelector": f"involvedObject.name={name}"},
            )
            return [e for e in listed["items"] if e["reason"] == "FailedToAddNodeAffinity"]

        async def any_warned() -> bool:
            return bool(await warned())

        await eventually(any_warned, what="a FailedToAddNodeAffinity event")
        [event] = await warned()
        assert event["type"] == "Warning"
        assert "persistent-volume-label webhook" in event["message"]
        volume = await kube_client.get(f"/api/v1/persistentvolumes/{name}")
        assert volume["metadata"]["labels"]["topology.kubernetes.io/zone"] == "sim-zone-c"
        assert volume["spec"]["nodeAffinity"] == TWO_TERMS
    finally:
        assert ccm.stop() == 0
