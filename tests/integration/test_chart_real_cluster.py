"""kube-ccm as a pod: the shipped image, installed with the shipped Helm chart, on a
cluster of real kubelets (issue 22's "user's first hour", for real).

The cluster: a real kube-apiserver and etcd (Node authorizer, NodeRestriction, audit of
the CCM's ServiceAccount), kube-controller-manager with ``--cloud-provider=external``,
kube-scheduler, and three real kubelets with ``--cloud-provider=external``, each on its
own containerd (:mod:`kube_ccm.testbed.nodes`). Nodes 0 and 1 are labelled as the
control plane (as kubeadm labels its nodes); node 2 is a worker. The image is built from
the shipped Dockerfile (:func:`kube_ccm.testbed.image.ensure_image`, cached by its
inputs) and imported into every containerd: nothing is pulled.

``helm install`` of ``deploy/helm/kube-ccm`` runs with 2 replicas and leader election,
in-cluster configuration (the ServiceAccount's projected token), host networking and
the chart's tolerations. What the values change from the defaults, and why:

- ``KUBERNETES_SERVICE_HOST``/``PORT`` (``extraEnv``): this cluster runs no kube-proxy,
  so the ``kubernetes`` Service's ClusterIP leads nowhere; the CCM talks to the
  apiserver's own address, as it must on any cluster without kube-proxy (Cilium's
  kube-proxy replacement, a CCM that starts before the CNI);
- ``--bind-address=$(POD_IP)``: every "node" here shares one network namespace, so two
  host-network replicas would both bind port 10258 on 0.0.0.0; each binds its node's IP;
- a shared cloud: the simulated cloud's state file on a hostPath both replicas mount
  (the chart's default keeps it in each pod's ``/tmp``, a cloud per replica), which the
  test drives directly (instances started, stopped, deleted);
- short lease and monitor periods, so that the handover and the node lifecycle happen
  within seconds.

Needs root, containerd, runc, the CNI plugins, nft, buildah and debootstrap
(``make sysdeps``) and the node binaries and helm (built on first use); skipped with the
reason otherwise, except under ``CI=true``, where a skip fails the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import datetime
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kube_ccm.runtime.client import ApiError, KubeClient
from kube_ccm.testbed.cluster import (
    CHART,
    LEASE_SECONDS,
    NAME,
    NAMESPACE,
    ChartCluster,
    ChartClusterOptions,
    chart_cluster_unavailable,
)
from kube_ccm.testbed.cluster import ccm_pods as _ccm_pods
from kube_ccm.testbed.cluster import pod_logs as _pod_logs
from kube_ccm.testbed.cluster import pod_ready as _pod_ready
from kube_ccm.testbed.helm import HelmBinaryError
from kube_ccm.testbed.image import ImageBuildError
from kube_ccm.testbed.nodes import (
    assert_host_restored,
    host_snapshot,
    pause_deployment,
)
from kube_ccm.testbed.rbac import CCM_SERVICE_ACCOUNT_USER
from kube_ccm.testing.binaries import ControlPlaneBinariesError
from kube_ccm.testing.controlplane import ControlPlaneError
from kube_ccm.testing.manifests import taint_keys
from kube_ccm.testing.pytest_plugin import unavailable
from kube_ccm.testing.waiting import eventually

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
UNINITIALIZED = "node.cloudprovider.kubernetes.io/uninitialized"
SHUTDOWN = "node.cloudprovider.kubernetes.io/shutdown"
POD_NAME_EXTRA = "authentication.kubernetes.io/pod-name"
LEASE = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{NAME}"
WRITES = {"create", "update", "patch", "delete"}


Bed = ChartCluster
"""The cluster (:mod:`kube_ccm.testbed.cluster`)."""


@pytest.fixture(scope="module")
def bed() -> Iterator[Bed]:
    """The cluster with the image imported; the host is checked after."""
    reason = chart_cluster_unavailable()
    if reason:
        unavailable(reason)
    # 3 nodes, the first 2 labelled as the control plane (as kubeadm labels them).
    cluster = ChartCluster(ChartClusterOptions(nodes=3, audit_users=(CCM_SERVICE_ACCOUNT_USER,)))
    try:
        cluster.build()
    except (HelmBinaryError, ImageBuildError, ControlPlaneBinariesError) as exc:
        unavailable(f"a piece of the cluster could not be built: {exc}")
        raise
    before = host_snapshot()
    try:
        cluster.start_control_plane()
    except ControlPlaneError as exc:
        unavailable(f"the real control plane could not start: {exc}")
    try:
        cluster.start_nodes()
        yield cluster
    finally:
        cluster.stop()
    nodes = cluster.nodes
    assert_host_restored(before, nodes)


def _ready(node: dict[str, Any]) -> str:
    for condition in node["status"].get("conditions") or []:
        if condition["type"] == "Ready":
            status: str = condition["status"]
            return status
    return ""


@pytest.fixture(scope="module")
def installed(bed: Bed) -> str:
    """Before the CCM: a Deployment that does not tolerate the taint waits. Then
    ``helm install``. Yields the waiting Deployment's namespace."""
    plane, nodes = bed.plane, bed.nodes

    async def before_install() -> str:
        async with KubeClient.from_kubeconfig(plane.kubeconfig) as client:
            bed.add_instances()  # zone-a, zone-b, zone-a; ExternalIPs 203.0.113.10, .11, .12
            namespace = f"waits-{nodes.id}"
            await client.create(
                "/api/v1/namespaces",
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
            )
            await client.create(
                f"/apis/apps/v1/namespaces/{namespace}/deployments", pause_deployment("w")
            )

            async def unschedulable() -> bool:
                listed = await client.get(f"/api/v1/namespaces/{namespace}/pods")
                return any(
                    c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable"
                    for pod in listed["items"]
                    for c in pod["status"].get("conditions") or []
                )

            await eventually(unschedulable, what="the pod unschedulable before kube-ccm runs")
            return namespace

    namespace = asyncio.run(before_install())
    installed = bed.install()
    assert installed.returncode == 0, installed.stderr
    print(f"real nodes: {bed.nodes.timings}")
    return namespace


async def test_the_chart_runs_kube_ccm_as_two_pods_that_initialise_the_real_nodes(
    bed: Bed, installed: str
) -> None:
    plane, nodes = bed.plane, bed.nodes
    async with KubeClient.from_kubeconfig(plane.kubeconfig) as client:

        async def two_ready_replicas() -> bool:
            pods = await _ccm_pods(client)
            return len(pods) == 2 and all(_pod_ready(p) for p in pods)

        try:
            await eventually(two_ready_replicas, within=90, what="two ready kube-ccm pods")
            print(f"helm install to two ready pods: {time.monotonic() - bed.installed_at:.1f} s")
        except AssertionError:
            pods = await _ccm_pods(client)
            raise AssertionError(
                f"pods: {[(p['metadata']['name'], p['status']) for p in pods]}\n"
                + await _pod_logs(client, pods)
            ) from None
        pods = await _ccm_pods(client)
        # On the two control-plane nodes, one each, from the image (never pulled).
        assert sorted(p["spec"]["nodeName"] for p in pods) == sorted(
            n.name for n in nodes.nodes[:2]
        )
        for pod in pods:
            assert pod["spec"]["hostNetwork"] is True
            (status,) = pod["status"]["containerStatuses"]
            assert status["image"] == "docker.io/library/kube-ccm:latest"
            assert status["restartCount"] == 0, await _pod_logs(client, [pod])
            # In-cluster config: the projected token, no kubeconfig anywhere.
            mounts = {m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]}
            assert "/var/run/secrets/kubernetes.io/serviceaccount" in mounts

        # Every real kubelet's Node is initialised from the cloud.
        instances = {i.node_name: i for i in bed.cloud.instances()}

        async def all_initialised() -> bool:
            for node in nodes.nodes:
                found = await client.get(f"/api/v1/nodes/{node.name}")
                if UNINITIALIZED in taint_keys(found) or not found["spec"].get("providerID"):
                    return False
            return True

        await eventually(all_initialised, within=60, what="every Node initialised by the pods")
        print(
            f"helm install to every Node initialised: {time.monotonic() - bed.installed_at:.1f} s"
        )
        for node in nodes.nodes:
            found = await client.get(f"/api/v1/nodes/{node.name}")
            instance = instances[node.name]
            assert found["spec"]["providerID"] == f"simulated://{instance.id}"
            labels = found["metadata"]["labels"]
            assert labels["topology.kubernetes.io/zone"] == instance.zone
            assert labels["topology.kubernetes.io/region"] == "region-1"
            assert labels["node.kubernetes.io/instance-type"] == "sim.small"
            assert found["status"]["addresses"] == [
                *({"type": t, "address": a} for t, a in instance.addresses),
                {"type": "Hostname", "address": node.name},
            ]

        # The pod that waited for the taint to go runs now.
        async def waiting_pod_runs() -> bool:
            listed = await client.get(f"/api/v1/namespaces/{installed}/pods")
            return any(p["status"].get("phase") == "Running" for p in listed["items"])

        await eventually(waiting_pod_runs, within=60, what="the waiting pod running")

        # The kubelets' later status updates (every 2 s) keep what the CCM wrote.
        expected = {
            n.name: (await client.get(f"/api/v1/nodes/{n.name}"))["status"]["addresses"]
            for n in nodes.nodes
        }
        await asyncio.sleep(6)
        for node in nodes.nodes:
            found = await client.get(f"/api/v1/nodes/{node.name}")
            assert found["status"]["addresses"] == expected[node.name]
            assert UNINITIALIZED not in taint_keys(found)


async def test_a_load_balancer_service_gets_its_address(bed: Bed, installed: str) -> None:
    async with KubeClient.from_kubeconfig(bed.plane.kubeconfig) as client:
        await client.create(
            f"/api/v1/namespaces/{installed}/services",
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "web"},
                "spec": {
                    "type": "LoadBalancer",
                    "selector": {"app": "w"},
                    "ports": [{"port": 80, "targetPort": 8080}],
                },
            },
        )
        path = f"/api/v1/namespaces/{installed}/services/web"

        async def ingress() -> bool:
            found = await client.get(path)
            return bool(found["status"].get("loadBalancer", {}).get("ingress"))

        await eventually(ingress, within=60, what="the Service's load balancer address")
        found = await client.get(path)
        (entry,) = found["status"]["loadBalancer"]["ingress"]
        (record,) = bed.cloud.load_balancers()
        assert entry["ip"] == record.ip
        assert "service.kubernetes.io/load-balancer-cleanup" in found["metadata"]["finalizers"]


async def test_a_stopped_kubelet_keeps_its_node_while_its_instance_lives(
    bed: Bed, installed: str
) -> None:
    """Shut down, the Node gets the shutdown taint; back, the taint goes. Then with its
    instance gone, the Node goes."""
    nodes = bed.nodes
    worker = nodes.nodes[2]
    path = f"/api/v1/nodes/{worker.name}"
    async with KubeClient.from_kubeconfig(bed.plane.kubeconfig) as client:
        nodes.stop_kubelet(worker)
        bed.cloud.set_instance_state(worker.name, "shutdown")

        async def tainted_shutdown() -> bool:
            found = await client.get(path)
            return _ready(found) != "True" and SHUTDOWN in taint_keys(found)

        await eventually(tainted_shutdown, within=60, what="the shutdown taint on the worker")

        bed.cloud.set_instance_state(worker.name, "running")
        nodes.start_kubelet(worker)

        async def back() -> bool:
            found = await client.get(path)
            return _ready(found) == "True" and SHUTDOWN not in taint_keys(found)

        await eventually(back, within=60, what="the worker Ready and untainted")
        # Stopped once more, its instance kept running: the Node stays.
        nodes.stop_kubelet(worker)

        async def not_ready() -> bool:
            return _ready(await client.get(path)) == "Unknown"

        await eventually(not_ready, within=30, what="the worker NotReady (Unknown)")
        await asyncio.sleep(3)  # a few of the CCM's monitor periods (1 s)
        found = await client.get(path)
        assert SHUTDOWN not in taint_keys(found)

        # Its instance deleted: the Node is deleted.
        assert bed.cloud.delete_instance(worker.name)

        async def gone() -> bool:
            try:
                await client.get(path)
            except ApiError as exc:
                return exc.status == 404
            return False

        await eventually(gone, within=60, what="the worker's Node deleted")

        async def deleting_event() -> bool:
            # The recorder writes Events in the background: it may land after the delete.
            events = await client.get(
                f"/api/v1/namespaces/default/events?fieldSelector=involvedObject.name={worker.name}"
            )
            return any(e["reason"] == "DeletingNode" for e in events["items"])

        await eventually(deleting_event, within=30, what="a DeletingNode Event for the worker")


def _lease_writes(bed: Bed) -> list[tuple[str, str, str]]:
    """(time, pod, verb path) of every write by the CCM's pods, from the audit log."""
    writes = []
    for event in bed.plane.audit_events():
        user = event.get("user", {})
        pod = (user.get("extra", {}).get(POD_NAME_EXTRA) or [""])[0]
        if event.get("stage") != "ResponseComplete" or event.get("verb") not in WRITES or not pod:
            continue
        if event.get("responseStatus", {}).get("code", 500) >= 300:
            continue
        writes.append((event["requestReceivedTimestamp"], pod, event["requestURI"]))
    return sorted(writes)


async def test_deleting_the_leader_pod_hands_over_within_the_lease(
    bed: Bed, installed: str
) -> None:
    async with KubeClient.from_kubeconfig(bed.plane.kubeconfig) as client:
        pods = {p["metadata"]["name"]: p for p in await _ccm_pods(client)}
        lease = await client.get(LEASE)
        holder = lease["spec"]["holderIdentity"]
        leaders = {pod for _, pod, uri in _lease_writes(bed) if uri.startswith(LEASE)}
        # The holder identity names the host, which both host-network pods share; the
        # audit log's pod name (the bound token's) tells which pod renews.
        renewals = [pod for _, pod, uri in _lease_writes(bed) if uri.startswith(LEASE)]
        assert renewals, "no lease write audited"
        old = renewals[-1]
        assert old in pods, (old, list(pods))
        assert len(leaders) == 1, (leaders, holder)
        deleted_at = datetime.datetime.now(datetime.UTC)
        await client.delete(f"/api/v1/namespaces/{NAMESPACE}/pods/{old}")

        async def new_holder() -> bool:
            found = await client.get(LEASE)
            return bool(found["spec"].get("holderIdentity") not in (None, "", holder))

        await eventually(new_holder, within=LEASE_SECONDS + 20, what="a new lease holder")
        handover = datetime.datetime.now(datetime.UTC) - deleted_at
        writes = _lease_writes(bed)
        since = deleted_at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        new_first = min(t for t, pod, _ in writes if pod != old and t >= since)
        late = [w for w in writes if w[1] == old and w[0] >= new_first]
        assert not late, f"the old leader wrote after the new one's first write: {late}"
        assert handover.total_seconds() < LEASE_SECONDS + 5, handover
        print(f"leader handover after deleting the leader pod: {handover.total_seconds():.1f} s")


async def test_the_deploy_manifests_run_as_their_comments_say(bed: Bed, installed: str) -> None:
    """``deploy/deployment.yaml`` then ``deploy/daemonset.yaml``, each applied once after
    ``deploy/rbac.yaml`` and ``rbac-nodes.yaml`` (the chart uninstalled first), with only
    what this cluster needs changed (see the module docstring): each pod gets ready and
    one takes the lease."""
    uninstalled = bed.helm_run("uninstall", "kube-ccm", "--namespace", NAMESPACE, "--wait")
    assert uninstalled.returncode == 0, uninstalled.stderr
    async with KubeClient.from_kubeconfig(bed.plane.kubeconfig) as client:
        before = {
            n["metadata"]["name"]: n["spec"].get("providerID")
            for n in (await client.get("/api/v1/nodes"))["items"]
        }

        async def no_pods() -> bool:
            return not await _ccm_pods(client)

        await eventually(no_pods, within=60, what="the chart's pods gone")
        for name in ("rbac.yaml", "rbac-nodes.yaml"):
            for doc in yaml.safe_load_all((DEPLOY / name).read_text()):
                if doc:
                    await _create(client, doc)
        shipped = {
            name: [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]
            for name in ("deployment.yaml", "daemonset.yaml")
        }
        # daemonset.yaml says: apply rbac.yaml and the ConfigMap in deployment.yaml first.
        config_map = [d for d in shipped["deployment.yaml"] if d["kind"] == "ConfigMap"]
        assert len(config_map) == 1
        for manifest in ("deployment.yaml", "daemonset.yaml"):
            docs = shipped[manifest] + (config_map if manifest == "daemonset.yaml" else [])
            workload = next(d for d in docs if d["kind"] in ("Deployment", "DaemonSet"))
            _adapt(workload, bed)
            for doc in docs:
                await _create(client, doc)

            async def ready() -> bool:
                pods = await _ccm_pods(client)
                return bool(pods) and all(_pod_ready(p) for p in pods)

            try:
                await eventually(ready, within=90, what=f"the pods of {manifest} ready")
            except AssertionError:
                pods = await _ccm_pods(client)
                raise AssertionError(await _pod_logs(client, pods)) from None
            # Two replicas, or one pod per control-plane node: two either way.
            assert len(await _ccm_pods(client)) == 2

            async def leased() -> bool:
                lease = await client.get(LEASE)
                return bool(lease["spec"].get("holderIdentity"))

            await eventually(leased, within=30, what=f"a pod of {manifest} holding the lease")
            for doc in docs:
                kind = doc["kind"]
                collection = {"Deployment": "deployments", "DaemonSet": "daemonsets"}.get(kind)
                if collection:
                    await client.delete(
                        f"/apis/apps/v1/namespaces/{NAMESPACE}/{collection}/{doc['metadata']['name']}"
                    )
                elif kind == "ConfigMap":
                    await client.delete(
                        f"/api/v1/namespaces/{NAMESPACE}/configmaps/{doc['metadata']['name']}"
                    )
            await eventually(no_pods, within=60, what=f"the pods of {manifest} gone")
        # As shipped, each pod's simulated cloud is its own (a file in its /tmp) and knows
        # none of the nodes' instances: it makes new ones, and deletes no Node.
        after = {
            n["metadata"]["name"]: n["spec"].get("providerID")
            for n in (await client.get("/api/v1/nodes"))["items"]
        }
        assert after == before


def _what_the_ccm_writes(node: dict[str, Any]) -> tuple[Any, ...]:
    return (
        node["metadata"]["name"],
        node["metadata"].get("labels"),
        node["spec"],
        node["status"].get("addresses"),
    )


def _adapt(workload: dict[str, Any], bed: Bed) -> None:
    """What this cluster needs (the module docstring): the apiserver's address, a bind
    address per node, the local image, short probes."""
    spec = workload["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    container["imagePullPolicy"] = "Never"
    container["env"] = [
        *(container.get("env") or []),
        {"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
        {"name": "KUBERNETES_SERVICE_PORT", "value": str(bed.plane.secure_port)},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    ]
    container["args"] = [*container["args"], "--bind-address=$(POD_IP)"]
    container["readinessProbe"]["periodSeconds"] = 2


def _path(doc: dict[str, Any]) -> str:
    """The object's path."""
    api, kind = doc["apiVersion"], doc["kind"]
    namespace = doc["metadata"].get("namespace")
    plural = {
        "ServiceAccount": "serviceaccounts",
        "ConfigMap": "configmaps",
        "ClusterRole": "clusterroles",
        "ClusterRoleBinding": "clusterrolebindings",
        "Role": "roles",
        "RoleBinding": "rolebindings",
        "Deployment": "deployments",
        "DaemonSet": "daemonsets",
    }[kind]
    prefix = "/api/v1" if api == "v1" else f"/apis/{api}"
    path = f"{prefix}/namespaces/{namespace}/{plural}" if namespace else f"{prefix}/{plural}"
    return f"{path}/{doc['metadata']['name']}"


async def _create(client: KubeClient, doc: dict[str, Any]) -> None:
    """Create, as ``kubectl create`` (a leftover of the same name is deleted first)."""
    path = _path(doc)
    with contextlib.suppress(ApiError):
        await client.delete(path)
    await client.create(path.rsplit("/", 1)[0], copy.deepcopy(doc))


async def test_a_pod_without_its_rbac_says_what_to_apply_and_changes_nothing(bed: Bed) -> None:
    """``rbac.create=false`` and no RBAC of its own: the pod is refused, logs which RBAC
    to apply, and no Node is touched."""
    bed.helm_run("uninstall", "kube-ccm", "--namespace", NAMESPACE, "--wait")
    async with KubeClient.from_kubeconfig(bed.plane.kubeconfig) as client:
        for name in ("rbac.yaml", "rbac-nodes.yaml"):  # left by the test before, if it ran
            for doc in yaml.safe_load_all((DEPLOY / name).read_text()):
                if doc:
                    with contextlib.suppress(ApiError):
                        await client.delete(_path(doc))
        nodes_before = (await client.get("/api/v1/nodes"))["items"]
        values = yaml.safe_load(bed.values.read_text())
        values.update({"replicas": 1, "rbac": {"create": False}})
        path = bed.values.with_name("no-rbac.yaml")
        path.write_text(yaml.safe_dump(values))
        installed = bed.helm_run(
            "install", "no-rbac", str(CHART), "--namespace", NAMESPACE, "-f", str(path)
        )
        assert installed.returncode == 0, installed.stderr
        try:
            log = ""

            async def refused_with_a_hint() -> bool:
                nonlocal log
                log = await _pod_logs(client, await _ccm_pods(client))
                return "deploy/rbac.yaml" in log

            try:
                await eventually(refused_with_a_hint, within=60, what="the refusal logged")
            except AssertionError:
                raise AssertionError(log) from None
            # As upstream: the client CAs cannot be read, the daemon stops at once with
            # what to grant (the pod restarts with backoff, visibly) and never reaches the
            # controllers; with --authentication-tolerate-lookup-failure=true it would
            # wait for the lease instead, saying which Role it lacks (a unit test).
            assert 'configmaps "extension-apiserver-authentication" is forbidden' in log, log
            assert "Grant the daemon the Role extension-apiserver-authentication-reader" in log
            await asyncio.sleep(3)
            (pod,) = await _ccm_pods(client)
            assert not _pod_ready(pod)
            nodes_after = (await client.get("/api/v1/nodes"))["items"]
            assert [_what_the_ccm_writes(n) for n in nodes_after] == [
                _what_the_ccm_writes(n) for n in nodes_before
            ]
        finally:
            bed.helm_run("uninstall", "no-rbac", "--namespace", NAMESPACE, "--wait")
