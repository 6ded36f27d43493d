"""kube-ccm as pods on a cluster of real kubelets, installed with the shipped Helm chart:
the recipe the chart test (``tests/integration/test_chart_real_cluster.py``) and
``kube-ccm sandbox --real-nodes`` share::

    cluster = ChartCluster(ChartClusterOptions(nodes=3))
    cluster.build()                 # helm, the image, the node binaries (cached)
    cluster.start()                 # control plane, kubelets, labels, the shared cloud
    try:
        cluster.add_instances()     # an instance per node in the simulated cloud
        cluster.install()           # helm install deploy/helm/kube-ccm
    finally:
        cluster.stop()              # everything stopped, every host change undone

The cluster: a real kube-apiserver and etcd (``real_nodes=True``: the Node authorizer,
NodeRestriction), kube-controller-manager with ``--cloud-provider=external``,
kube-scheduler, and N real kubelets with ``--cloud-provider=external``, each on its own
containerd (:mod:`kube_ccm.testbed.nodes`). The first ``control_plane_nodes`` are
labelled as the control plane (as kubeadm labels its nodes), where the chart's pods
run. The image is built from the shipped Dockerfile
(:func:`kube_ccm.testbed.image.ensure_image`, cached by its inputs) and imported into
every containerd: nothing is pulled.

The chart's values (:meth:`ChartCluster.values`) run ``min(replicas, control-plane
nodes)`` replicas with leader election, in-cluster configuration (the ServiceAccount's
projected token), host networking and the chart's tolerations. What they change from
the defaults, and why:

- ``KUBERNETES_SERVICE_HOST``/``PORT`` (``extraEnv``): this cluster runs no kube-proxy,
  so the ``kubernetes`` Service's ClusterIP leads nowhere; the CCM talks to the
  apiserver's own address, as it must on any cluster without kube-proxy (Cilium's
  kube-proxy replacement, a CCM that starts before the CNI): loopback, or with
  ``netns`` the test bed's gateway (:attr:`RealNodes.api_host`);
- ``--bind-address=$(POD_IP)``: every "node" here shares one network namespace, so two
  host-network replicas would both bind port 10258 on 0.0.0.0; each binds its node's IP;
- a shared cloud: the simulated cloud's state file on a hostPath every replica mounts
  (the chart's default keeps it in each pod's ``/tmp``, a cloud per replica), which the
  caller drives directly (:attr:`ChartCluster.cloud`: instances started, stopped,
  deleted), owned by the image's user;
- short lease and monitor periods, so that a handover and the node lifecycle happen
  within seconds.

Needs root, containerd, runc, the CNI plugins, nft, buildah and debootstrap
(``make sysdeps``; :func:`chart_cluster_unavailable` says what is missing) and the node
binaries and helm (built on first use).
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kube_ccm.providers.simulated.state import CloudState
from kube_ccm.runtime.client import ApiError, KubeClient
from kube_ccm.testbed.helm import Helm, ensure_helm
from kube_ccm.testbed.image import (
    IMAGE_USER,
    SOURCE_ROOT,
    Image,
    ensure_image,
    image_unavailable,
)
from kube_ccm.testbed.nodes import NodeOptions, RealNodes, real_nodes_unavailable
from kube_ccm.testing.binaries import NodeBinaries, ensure_kube_proxy, ensure_node_binaries
from kube_ccm.testing.controlplane import ControlPlane, ControlPlaneOptions

__all__ = [
    "CHART",
    "CONTROL_PLANE",
    "LEASE_SECONDS",
    "NAME",
    "NAMESPACE",
    "RELEASE",
    "SELECTOR",
    "STATE_DIR_IN_POD",
    "ChartCluster",
    "ChartClusterOptions",
    "ccm_pods",
    "chart_cluster_unavailable",
    "pod_logs",
    "pod_ready",
]

CHART = SOURCE_ROOT / "deploy" / "helm" / "kube-ccm"
RELEASE = "kube-ccm"
NAMESPACE = "kube-system"
NAME = "cloud-controller-manager"
"""The chart's default ``name``: its Deployment, ServiceAccount and lease."""
SELECTOR = f"app.kubernetes.io/name={NAME}"
CONTROL_PLANE = "node-role.kubernetes.io/control-plane"
LEASE_SECONDS = 8
"""The values' ``leaderElection.leaseDuration`` (renew deadline 5 s, retry 1 s)."""
STATE_DIR_IN_POD = "/var/lib/simcloud"


def chart_cluster_unavailable() -> str | None:
    """Why the cluster cannot run on this machine (with what to install or run), or None."""
    return real_nodes_unavailable() or image_unavailable()


@dataclass(frozen=True)
class ChartClusterOptions:
    """Knobs for :class:`ChartCluster`. Defaults are the chart test's."""

    nodes: int = 3
    control_plane_nodes: int = 2
    """The first this many nodes get :data:`CONTROL_PLANE` (where the chart's pods go)."""
    controller_manager_args: tuple[str, ...] = (
        "--node-monitor-grace-period=8s",
        "--node-monitor-period=1s",
    )
    audit_users: tuple[str, ...] = ()
    """Users whose requests kube-apiserver audits (:meth:`ControlPlane.audit_events`)."""
    data_dir: Path | None = None
    """The control plane's files, the shared cloud and the values go here (kept); a
    temporary directory per piece, removed, if None. The nodes' files always go to a
    short temporary directory of their own (their sockets' paths are limited)."""
    kube_proxy: bool = False
    """One kube-proxy for the ClusterIPs (:attr:`NodeOptions.kube_proxy`), built by
    :meth:`ChartCluster.build` on first use; ServiceLB's forwarders need it."""
    netns: bool = False
    """Each node in a network namespace of its own (:attr:`NodeOptions.netns`); the
    chart's pods then reach kube-apiserver on the test bed's gateway."""
    images: tuple[Path, ...] = ()
    """Further docker-archives imported into every node beside kube-ccm's image
    (:attr:`NodeOptions.images`)."""
    cluster_dns: str = ""
    """The kubelets' ``clusterDNS`` (:attr:`NodeOptions.cluster_dns`)."""


class ChartCluster:
    """The control plane, the real nodes, the shared simulated cloud and helm."""

    def __init__(self, options: ChartClusterOptions | None = None) -> None:
        self.options = options or ChartClusterOptions()
        data_dir = self.options.data_dir
        self.plane = ControlPlane(
            ControlPlaneOptions(
                real_nodes=True,
                audit_users=self.options.audit_users,
                data_dir=None if data_dir is None else data_dir / "controlplane",
                keep_data_dir=data_dir is not None,
            )
        )
        self._helm: Helm | None = None
        self._image: Image | None = None
        self._binaries: NodeBinaries | None = None
        self._nodes: RealNodes | None = None
        self._cloud: CloudState | None = None
        self.state_dir = Path()
        """The shared cloud's directory on the host (the pods' :data:`STATE_DIR_IN_POD`)."""
        self.installed_at = 0.0
        """``time.monotonic()`` when the last successful :meth:`install` returned."""

    # -- the pieces ------------------------------------------------------------

    @property
    def helm(self) -> Helm:
        assert self._helm is not None, "build() first"
        return self._helm

    @property
    def image(self) -> Image:
        assert self._image is not None, "build() first"
        return self._image

    @property
    def nodes(self) -> RealNodes:
        assert self._nodes is not None, "start_nodes() first"
        return self._nodes

    @property
    def cloud(self) -> CloudState:
        assert self._cloud is not None, "start_nodes() first"
        return self._cloud

    @property
    def values(self) -> Path:
        """The chart's values (:meth:`values_for`), written by :meth:`start_nodes`."""
        return self.state_dir.parent / "values.yaml"

    @property
    def control_plane_nodes(self) -> int:
        return min(self.options.control_plane_nodes, self.options.nodes)

    # -- start and stop ----------------------------------------------------------

    def build(self) -> None:
        """helm, the image and the node binaries: from the cache, or built (minutes).
        Raises :class:`~kube_ccm.testbed.helm.HelmBinaryError`,
        :class:`~kube_ccm.testbed.image.ImageBuildError` or
        :class:`~kube_ccm.testing.binaries.ControlPlaneBinariesError`."""
        self._helm = ensure_helm()
        self._image = ensure_image()
        self._binaries = ensure_node_binaries()
        if self.options.kube_proxy:
            ensure_kube_proxy()

    def start(self) -> ChartCluster:
        """:meth:`start_control_plane`, then :meth:`start_nodes` (stopping what started
        when either fails)."""
        try:
            self.start_control_plane()
            self.start_nodes()
        except BaseException:
            self.stop()
            raise
        return self

    def start_control_plane(self) -> None:
        """kube-apiserver and etcd (raises :class:`ControlPlaneError`)."""
        self.plane.start()

    def start_nodes(self) -> None:
        """The kubelets on their containerds with the image imported, kube-controller-manager
        and kube-scheduler (raises :class:`~kube_ccm.testbed.nodes.RealNodesError`), then
        the control-plane labels, the shared cloud and the values file. :meth:`stop`
        undoes it, also after a failure."""
        self._nodes = RealNodes(
            self.plane,
            NodeOptions(
                count=self.options.nodes,
                images=(self.image.archive, *self.options.images),
                controller_manager_args=self.options.controller_manager_args,
                kube_proxy=self.options.kube_proxy,
                netns=self.options.netns,
                cluster_dns=self.options.cluster_dns,
            ),
            binaries=self._binaries,
        )
        self._nodes.start()
        for node in self._nodes.nodes[: self.control_plane_nodes]:  # as kubeadm labels them
            self.plane.request(
                "PATCH",
                f"/api/v1/nodes/{node.name}",
                {"metadata": {"labels": {CONTROL_PLANE: ""}}},
            )
        base = self.options.data_dir or self._nodes.data_dir
        self.state_dir = base / "simcloud"
        self._cloud = _shared_cloud(self.state_dir)
        self.values.write_text(yaml.safe_dump(self.values_for()))

    def stop(self) -> None:
        """Stop the nodes (undoing every host change), the control plane, and close the
        shared cloud. Idempotent."""
        if self._nodes is not None:
            self._nodes.stop()
        self.plane.stop()
        if self._cloud is not None:
            self._cloud.close()
            self._cloud = None

    # -- the cloud and the chart --------------------------------------------------

    def add_instances(self, zones: tuple[str, ...] = ("zone-a", "zone-b")) -> None:
        """A running instance in the shared cloud for every node: its InternalIP, an
        ExternalIP from 203.0.113.0/24, zones in turn, ``region-1``, ``sim.small``."""
        for i, node in enumerate(self.nodes.nodes):
            self.cloud.add_instance(
                node.name,
                zone=zones[i % len(zones)],
                region="region-1",
                instance_type="sim.small",
                addresses=[("InternalIP", node.ip), ("ExternalIP", f"203.0.113.{10 + i}")],
            )

    def values_for(
        self,
        *,
        replicas: int = 2,
        cloud_config: dict[str, Any] | None = None,
        extra_args: dict[str, str] | None = None,
        servicelb: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The chart's values for this cluster (see the module docstring); at most one
        replica per control-plane node. ``cloud_config`` is added to the simulated
        cloud's config, ``extra_args`` to kube-ccm's flags. With ``servicelb`` (its
        cloud-config), a composite: instances and zones from the simulated cloud, load
        balancers from ``servicelb`` (its RBAC on, its forwarder the chart's image)."""
        simulated = {
            "state": f"{STATE_DIR_IN_POD}/cloud.db",
            "unknownNodes": "notFound",
            **(cloud_config or {}),
        }
        composite: dict[str, Any] = {}
        content: dict[str, Any] = simulated
        if servicelb is not None:
            content = {
                "providers": {
                    "simulated": {"capabilities": ["instances", "zones"], "config": simulated},
                    "servicelb": {"capabilities": ["loadBalancer"], "config": servicelb},
                }
            }
            # The chart's DaemonSet admission policy allows what the cloud-config builds.
            policy = {
                key: servicelb[key] for key in ("hostNetwork", "forwardMode") if key in servicelb
            }
            composite = {
                "cloudProvider": "composite",
                "servicelb": {"enabled": True, "policy": policy},
            }
        return {
            **composite,
            "replicas": min(replicas, self.control_plane_nodes),
            "image": {"pullPolicy": "Never"},
            "cloudConfig": {"content": yaml.safe_dump(content)},
            "leaderElection": {
                "leaseDuration": f"{LEASE_SECONDS}s",
                "renewDeadline": "5s",
                "retryPeriod": "1s",
            },
            "extraEnv": [
                {"name": "KUBERNETES_SERVICE_HOST", "value": self._api_host},
                {"name": "KUBERNETES_SERVICE_PORT", "value": str(self.plane.secure_port)},
                {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            ],
            "extraArgs": {
                "bind-address": "$(POD_IP)",
                "node-monitor-period": "1s",
                **(extra_args or {}),
            },
            "extraVolumes": [
                {
                    "name": "simcloud",
                    "hostPath": {"path": str(self.state_dir), "type": "Directory"},
                }
            ],
            "extraVolumeMounts": [{"name": "simcloud", "mountPath": STATE_DIR_IN_POD}],
            "livenessProbe": {"initialDelaySeconds": 5},
            "readinessProbe": {"periodSeconds": 2},
        }

    @property
    def _api_host(self) -> str:
        return self._nodes.api_host if self._nodes is not None else "127.0.0.1"

    def helm_run(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``helm ARGS --kubeconfig <admin>``, its output captured."""
        return subprocess.run(
            [str(self.helm.path), *args, "--kubeconfig", str(self.plane.kubeconfig)],
            capture_output=True,
            text=True,
            check=False,
            timeout=180,
        )

    def install(
        self, release: str = RELEASE, values: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        """``helm install`` of the shipped chart into :data:`NAMESPACE` with ``values``
        (default :attr:`values`)."""
        done = self.helm_run(
            *("install", release, str(CHART), "--namespace", NAMESPACE),
            *("-f", str(values or self.values)),
        )
        if done.returncode == 0:
            self.installed_at = time.monotonic()
        return done


def _shared_cloud(directory: Path) -> CloudState:
    """The simulated cloud's state, in a directory the image's user owns, so the pods
    (user 65532) and the caller (root) write it; SQLite gives the WAL files it creates
    as root the database file's owner."""
    directory.mkdir(parents=True, exist_ok=True)
    cloud = CloudState(directory / "cloud.db", call_counts_flush_interval=0)
    uid = int(IMAGE_USER.split(":")[0])
    for path in (directory, *directory.iterdir()):
        os.chown(path, uid, uid)
    return cloud


async def ccm_pods(client: KubeClient) -> list[dict[str, Any]]:
    """The chart's pods (by :data:`SELECTOR`)."""
    listed = await client.get(f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector={SELECTOR}")
    items: list[dict[str, Any]] = listed["items"]
    return items


def pod_ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


async def pod_logs(client: KubeClient, pods: list[dict[str, Any]]) -> str:
    """Each pod's log through the apiserver (which asks the node's kubelet)."""
    parts = []
    for pod in pods:
        name = pod["metadata"]["name"]
        try:
            log = await client.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods/{name}/log")
            text = log.decode(errors="replace")
        except ApiError as exc:
            text = f"(no log: {exc})"
        parts.append(f"--- {name} on {pod['spec'].get('nodeName')}:\n{text[-4000:]}")
    return "\n".join(parts)
