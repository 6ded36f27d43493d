"""PV labelling through the daemon on the real apiserver (``--controllers=pvl``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from kube_ccm.runtime.client import KubeClient
from kube_ccm.testing.controlplane import ControlPlane
from kube_ccm.testing.daemon import DaemonProcess
from kube_ccm.testing.pytest_plugin import Cleanup
from kube_ccm.testing.waiting import eventually

DRIVER = "simulated.csi.kube-ccm.io"


async def test_a_new_volume_in_a_zone_gets_labels_and_node_affinity(
    *,
    ccm_kubeconfig: Path,
    kube_controlplane: ControlPlane,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    ccm = DaemonProcess(
        kubeconfig=ccm_kubeconfig,
        workdir=tmp_path / "daemon",
        args=["--leader-elect=false", "--controllers=pvl"],
    ).start()
    try:
        ccm.wait_for_log("Started persistent-volume-label-controller")
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
