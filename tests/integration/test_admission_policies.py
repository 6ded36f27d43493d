"""deploy/admission-policies.yaml on the real apiserver: what RBAC lets the CCM's
identity do and the policies refuse, what they still allow, and that nobody else is
affected. The DaemonSet policy is tried as an attacker holding the CCM's real token
would: another image, ServiceAccount, hostPath, privileges, kube-proxy's DaemonSet.
(That the daemon works with them in force is tests/integration/test_rbac_combinations.py.)

The CCM here is a ServiceAccount of its own bound by deploy/rbac.yaml and
deploy/rbac-ippool.yaml (renamed, as the chart's ``name`` renames them), so that
RBAC grants every request below and only the policies can refuse it.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml

from kube_ccm.api.objects import ObjectMeta, Service, ServicePort, ServiceSpec
from kube_ccm.providers.servicelb import Names, ServiceLBConfig, daemon_set, load_config
from kube_ccm.runtime.client import ApiError, KubeClient
from kube_ccm.testbed.helm import Helm
from kube_ccm.testbed.rbac import install_policies, install_service_account, renamed
from kube_ccm.testing.controlplane import ControlPlane
from kube_ccm.testing.pytest_plugin import Cleanup
from kube_ccm.testing.waiting import eventually

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
CHART = DEPLOY / "helm" / "kube-ccm"
ACCOUNT = "ccm-policies"
IPADDRESSES = "/apis/networking.k8s.io/v1/ipaddresses"
MANAGED_BY = "ipaddress.kubernetes.io/managed-by"
FINALIZER = "service.kubernetes.io/load-balancer-cleanup"
SPEC = "kube-ccm may not change a Service's spec"
ANNOTATIONS = (
    "kube-ccm may change only the annotations kube-vip.io/loadbalancerIPs and "
    "ippool.kube-ccm.io/allocated of a Service"
)
FINALIZERS = (
    "kube-ccm may add or remove only the finalizer "
    "service.kubernetes.io/load-balancer-cleanup of a Service"
)
LABELS = "kube-ccm may not change a Service's labels or owner references"
SYSTEM_DAEMON_SETS = "/apis/apps/v1/namespaces/kube-system/daemonsets"
CREATE_DAEMON_SET = "kube-ccm may create and update only its own svclb-* DaemonSets"
CHANGE_DAEMON_SET = "kube-ccm may update and delete only its own svclb-* DaemonSets"
FORWARDER = "the svclb pods run only `kube-ccm forward` in the forwarder image"
POD = "the svclb pods have no volumes, init or ephemeral containers"
PRIVILEGES = "the svclb pods are not privileged"
PRIORITY_AND_PORTS = "the svclb pods have only the priority classes the operator allowed"
CREATE_IPADDRESS = (
    "kube-ccm may create and update only IPAddress objects labelled "
    "ipaddress.kubernetes.io/managed-by=ippool.kube-ccm.io"
)
CHANGE_IPADDRESS = (
    "kube-ccm may update and delete only IPAddress objects labelled "
    "ipaddress.kubernetes.io/managed-by=ippool.kube-ccm.io"
)


def documents(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def ipaddress_object(address: str, namespace: str, manager: str | None) -> dict[str, Any]:
    labels = {MANAGED_BY: manager} if manager else {}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "IPAddress",
        "metadata": {"name": address, "labels": labels},
        "spec": {
            "parentRef": {"group": "", "resource": "services", "namespace": namespace, "name": "x"}
        },
    }


async def refused(call: Awaitable[Any], message: str) -> None:
    """``call`` fails with 403 and the policy's message."""
    with pytest.raises(ApiError) as caught:
        await call
    assert caught.value.status == 403, caught.value
    assert "ValidatingAdmissionPolicy" in caught.value.message, caught.value
    assert message in caught.value.message, caught.value


@dataclass
class Cluster:
    admin: KubeClient
    ccm: KubeClient
    tenant: KubeClient
    namespace: str
    cleanup: Cleanup

    @property
    def services(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/services"


@pytest_asyncio.fixture
async def cluster(
    kube_controlplane: ControlPlane,
    kube_client: KubeClient,
    kube_namespace: str,
    kube_cleanup: Cleanup,
    tmp_path: Path,
) -> AsyncIterator[Cluster]:
    """The policies installed and enforced; clients for the CCM's identity and for a
    tenant that may edit Services in its namespace."""
    rbac = renamed(
        documents("rbac.yaml") + documents("rbac-ippool.yaml") + documents("rbac-servicelb.yaml"),
        ACCOUNT,
    )
    ccm_config = await install_service_account(
        kube_controlplane, rbac, "kube-system", ACCOUNT, kubeconfig=tmp_path / "ccm"
    )
    tenant_rbac: list[dict[str, Any]] = [
        {"kind": "ServiceAccount", "metadata": {"name": "tenant", "namespace": kube_namespace}},
        {
            "kind": "Role",
            "metadata": {"name": "services", "namespace": kube_namespace},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["services", "services/status"],
                    "verbs": ["get", "update", "patch"],
                }
            ],
        },
        {
            "kind": "RoleBinding",
            "metadata": {"name": "services", "namespace": kube_namespace},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "services",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": kube_namespace}],
        },
    ]
    tenant_config = await install_service_account(
        kube_controlplane, tenant_rbac, kube_namespace, "tenant", kubeconfig=tmp_path / "tenant"
    )
    for path in await install_policies(
        kube_client, renamed(documents("admission-policies.yaml"), ACCOUNT)
    ):
        kube_cleanup.add(path)
    async with (
        KubeClient.from_kubeconfig(ccm_config) as ccm,
        KubeClient.from_kubeconfig(tenant_config) as tenant,
    ):
        world = Cluster(kube_client, ccm, tenant, kube_namespace, kube_cleanup)
        await wait_until_enforced(world)
        yield world


async def wait_until_enforced(cluster: Cluster) -> None:
    """Both policies refuse the CCM (the admission plugin loads them asynchronously)."""
    await cluster.admin.create(
        cluster.services, {"metadata": {"name": "probe"}, "spec": {"ports": [{"port": 80}]}}
    )
    attempt = itertools.count()

    async def labels_refused() -> bool:
        try:
            await cluster.ccm.patch(
                f"{cluster.services}/probe/status",
                {"metadata": {"labels": {"probe": str(next(attempt))}}},
                patch_type="merge",
            )
        except ApiError as exc:
            if exc.status != 403 or LABELS not in exc.message:
                raise
            return True
        return False

    async def ipaddress_refused() -> bool:
        body = ipaddress_object("198.51.100.250", cluster.namespace, None)
        try:
            await cluster.ccm.create(IPADDRESSES, body)
        except ApiError as exc:
            if exc.status != 403 or CREATE_IPADDRESS not in exc.message:
                raise
            return True
        await cluster.admin.delete(f"{IPADDRESSES}/198.51.100.250")
        return False

    async def daemon_set_refused() -> bool:
        body = {
            "metadata": {"name": f"probe-{next(attempt)}"},
            "spec": {
                "selector": {"matchLabels": {"app": "probe"}},
                "template": {
                    "metadata": {"labels": {"app": "probe"}},
                    "spec": {"containers": [{"name": "c", "image": "pause"}]},
                },
            },
        }
        try:
            created = await cluster.ccm.create(SYSTEM_DAEMON_SETS, body)
        except ApiError as exc:
            if exc.status != 403 or CREATE_DAEMON_SET not in exc.message:
                raise
            return True
        await cluster.admin.delete(f"{SYSTEM_DAEMON_SETS}/{created['metadata']['name']}")
        return False

    await eventually(labels_refused, within=30, what="the Service policy enforced")
    await eventually(daemon_set_refused, within=30, what="the DaemonSet policy enforced")
    await eventually(ipaddress_refused, within=30, what="the IPAddress policy enforced")
    await cluster.admin.delete(f"{cluster.services}/probe")


async def web_service(cluster: Cluster) -> dict[str, Any]:
    # Deleted after the test: its namespace stays Terminating without
    # kube-controller-manager, and a LoadBalancer Service showing an address
    # would be there for later tests (`kube-ccm doctor` probes them).
    cluster.cleanup.add(f"{cluster.services}/web")
    service: dict[str, Any] = await cluster.admin.create(
        cluster.services,
        {
            "metadata": {
                "name": "web",
                "labels": {"app": "web"},
                "annotations": {"example.com/owner": "team-a"},
            },
            "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
        },
    )
    return service


async def test_the_ccm_may_not_change_a_service_beyond_its_annotations_finalizer_and_status(
    cluster: Cluster,
) -> None:
    await web_service(cluster)
    web = f"{cluster.services}/web"

    def merge(path: str, body: dict[str, Any]) -> Awaitable[Any]:
        return cluster.ccm.patch(path, body, patch_type="merge")

    # Refused, on the Service and on its status (whose strategy keeps the spec but
    # lets metadata through).
    await refused(merge(web, {"spec": {"ports": [{"port": 81}]}}), SPEC)
    await refused(merge(web, {"spec": {"externalIPs": ["203.0.113.9"]}}), SPEC)
    for path in (web, f"{web}/status"):
        await refused(
            merge(path, {"metadata": {"annotations": {"example.com/owner": "ccm"}}}), ANNOTATIONS
        )
        await refused(
            merge(path, {"metadata": {"annotations": {"example.com/owner": None}}}), ANNOTATIONS
        )
        await refused(
            merge(path, {"metadata": {"annotations": {"kube-vip.io/other": "x"}}}), ANNOTATIONS
        )
        await refused(merge(path, {"metadata": {"labels": {"app": "other"}}}), LABELS)
        await refused(merge(path, {"metadata": {"finalizers": ["example.com/keep"]}}), FINALIZERS)
    current = (await cluster.admin.get(web))["metadata"]["resourceVersion"]
    # Allowed: ippool's annotations, the cleanup finalizer, the status.
    addresses = {
        "kube-vip.io/loadbalancerIPs": "192.0.2.7",
        "ippool.kube-ccm.io/allocated": "192.0.2.7",
    }
    await merge(web, {"metadata": {"annotations": addresses}})
    await merge(f"{web}/status", {"metadata": {"finalizers": [FINALIZER]}})
    await merge(f"{web}/status", {"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.7"}]}}})
    await merge(web, {"metadata": {"annotations": dict.fromkeys(addresses)}})
    await merge(f"{web}/status", {"metadata": {"finalizers": None}})
    # A Service without annotations or finalizers gets them, and loses them again.
    cluster.cleanup.add(f"{cluster.services}/bare")
    await cluster.admin.create(
        cluster.services, {"metadata": {"name": "bare"}, "spec": {"ports": [{"port": 80}]}}
    )
    bare = f"{cluster.services}/bare"
    await merge(bare, {"metadata": {"annotations": addresses}})
    await merge(bare, {"metadata": {"annotations": dict.fromkeys(addresses)}})
    await merge(f"{bare}/status", {"metadata": {"finalizers": [FINALIZER]}})
    await merge(f"{bare}/status", {"metadata": {"finalizers": None}})
    assert not (await cluster.admin.get(bare))["metadata"].get("annotations")
    got = await cluster.admin.get(web)
    assert got["metadata"]["resourceVersion"] != current
    assert got["metadata"]["labels"] == {"app": "web"}
    assert got["metadata"]["annotations"] == {"example.com/owner": "team-a"}
    assert got["spec"]["ports"][0]["port"] == 80
    assert [i["ip"] for i in got["status"]["loadBalancer"]["ingress"]] == ["192.0.2.7"]


async def test_a_tenant_and_the_admin_are_not_affected(cluster: Cluster) -> None:
    await web_service(cluster)
    web = f"{cluster.services}/web"
    await cluster.tenant.patch(
        web,
        {
            "metadata": {"labels": {"app": "v2"}, "annotations": {"example.com/owner": "b"}},
            "spec": {"ports": [{"port": 8080}]},
        },
        patch_type="merge",
    )
    await cluster.tenant.patch(
        f"{web}/status", {"metadata": {"finalizers": ["example.com/keep"]}}, patch_type="merge"
    )
    got = await cluster.admin.get(web)
    assert got["spec"]["ports"][0]["port"] == 8080
    assert got["metadata"]["finalizers"] == ["example.com/keep"]
    await cluster.tenant.patch(
        f"{web}/status", {"metadata": {"finalizers": None}}, patch_type="merge"
    )
    address = "198.51.100.251"
    cluster.cleanup.add(f"{IPADDRESSES}/{address}")
    await cluster.admin.create(IPADDRESSES, ipaddress_object(address, cluster.namespace, None))
    await cluster.admin.delete(f"{IPADDRESSES}/{address}")


async def test_the_ccm_may_write_only_ipaddresses_labelled_as_ippool_s(
    cluster: Cluster,
) -> None:
    service = await web_service(cluster)
    # The apiserver's own IPAddress of the Service's ClusterIP.
    cluster_ip = f"{IPADDRESSES}/{service['spec']['clusterIP']}"
    own = await cluster.admin.get(cluster_ip)
    assert own["metadata"]["labels"][MANAGED_BY] == "ipallocator.k8s.io"
    await refused(cluster.ccm.delete(cluster_ip), CHANGE_IPADDRESS)
    relabelled = {
        **own,
        "metadata": {**own["metadata"], "labels": {MANAGED_BY: "ippool.kube-ccm.io"}},
    }
    await refused(cluster.ccm.replace(cluster_ip, relabelled), CHANGE_IPADDRESS)
    address = "198.51.100.252"
    path = cluster.cleanup.add(f"{IPADDRESSES}/{address}")
    for manager in (None, "other.example.com"):
        await refused(
            cluster.ccm.create(IPADDRESSES, ipaddress_object(address, cluster.namespace, manager)),
            CREATE_IPADDRESS,
        )
    # Another manager's claim: neither taken over nor deleted.
    await cluster.admin.create(
        IPADDRESSES, ipaddress_object(address, cluster.namespace, "other.example.com")
    )
    other = await cluster.ccm.get(path)
    taken = {
        **other,
        "metadata": {**other["metadata"], "labels": {MANAGED_BY: "ippool.kube-ccm.io"}},
    }
    await refused(cluster.ccm.replace(path, taken), CHANGE_IPADDRESS)
    await refused(cluster.ccm.delete(path), CHANGE_IPADDRESS)
    await cluster.admin.delete(path)
    # Its own: created, updated (holders), deleted.
    created = await cluster.ccm.create(
        IPADDRESSES, ipaddress_object(address, cluster.namespace, "ippool.kube-ccm.io")
    )
    created["metadata"]["annotations"] = {"ippool.kube-ccm.io/holders": "[]"}
    await cluster.ccm.replace(path, created)
    refused_relabel = await cluster.ccm.get(path)
    refused_relabel["metadata"]["labels"] = {MANAGED_BY: "other.example.com"}
    await refused(cluster.ccm.replace(path, refused_relabel), CREATE_IPADDRESS)
    await cluster.ccm.delete(path)
    with pytest.raises(ApiError) as gone:
        await cluster.admin.get(path)
    assert gone.value.not_found


def svclb_daemon_set(
    name: str = "web", port: int = 80, config: ServiceLBConfig | None = None
) -> dict[str, Any]:
    """The DaemonSet kube-ccm's servicelb provider builds (with its default config)."""
    service = Service(
        metadata=ObjectMeta(
            name=name, namespace="team-a", uid=f"{name:x<8}-0000-4000-8000-000000000000"[:36]
        ),
        spec=ServiceSpec(
            type="LoadBalancer",
            ports=(ServicePort(port=port, node_port=30080),),
            ip_families=("IPv4",),
            cluster_ip="10.96.0.10",
            cluster_ips=("10.96.0.10",),
        ),
    )
    config = config or ServiceLBConfig()
    return daemon_set(service, config, Names(config.label_domain), by_label=False)


def changed(body: dict[str, Any], change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """``body`` with ``change`` applied to a copy of its pod spec."""
    new = copy.deepcopy(body)
    change(new["spec"]["template"]["spec"])
    return new


def forwarder(pod: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = pod["containers"][0]
    return container


ATTACKS: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("another image", lambda pod: forwarder(pod).update(image="evil.example/shell:1"), FORWARDER),
    ("a shell", lambda pod: forwarder(pod).update(command=["sh", "-c", "id"]), FORWARDER),
    ("arguments", lambda pod: forwarder(pod).update(args=["--listen", "0.0.0.0"]), FORWARDER),
    (
        "a second container",
        lambda pod: pod["containers"].append({"name": "x", "image": "evil.example/x:1"}),
        FORWARDER,
    ),
    ("another ServiceAccount", lambda pod: pod.update(serviceAccountName="admin"), POD),
    ("a token", lambda pod: pod.update(automountServiceAccountToken=True), POD),
    (
        "a hostPath",
        lambda pod: pod.update(volumes=[{"name": "root", "hostPath": {"path": "/"}}]),
        POD,
    ),
    (
        "an init container",
        lambda pod: pod.update(
            initContainers=[{"name": "i", "image": "kube-ccm:latest", "command": ["sh"]}]
        ),
        POD,
    ),
    (
        "privileged",
        lambda pod: forwarder(pod).update(securityContext={"privileged": True}),
        PRIVILEGES,
    ),
    (
        "NET_ADMIN",
        lambda pod: forwarder(pod).update(securityContext={"capabilities": {"add": ["NET_ADMIN"]}}),
        PRIVILEGES,
    ),
    ("the host network", lambda pod: pod.update(hostNetwork=True), PRIVILEGES),
    ("the host PID namespace", lambda pod: pod.update(hostPID=True), PRIVILEGES),
    (
        "an unsafe sysctl",
        lambda pod: pod.update(
            securityContext={"sysctls": [{"name": "net.ipv4.ip_forward", "value": "1"}]}
        ),
        PRIVILEGES,
    ),
    (
        "no seccomp",
        lambda pod: pod.update(securityContext={"seccompProfile": {"type": "Unconfined"}}),
        PRIVILEGES,
    ),
    (
        "system-node-critical",
        lambda pod: pod.update(priorityClassName="system-node-critical"),
        PRIORITY_AND_PORTS,
    ),
    (
        "the kubelet's port",
        lambda pod: forwarder(pod)["ports"][0].update(hostPort=10250, containerPort=10250),
        PRIORITY_AND_PORTS,
    ),
]


async def test_the_ccm_may_write_only_its_own_svclb_daemonsets_as_it_builds_them(
    cluster: Cluster,
) -> None:
    """With the CCM's real token: kube-proxy's DaemonSet can be neither changed nor
    deleted, a DaemonSet of any other shape or name is refused, kube-ccm's own is
    created, replaced and deleted."""
    # kube-proxy's, as a cluster admin installed it (the policy does not bind the admin).
    proxy_name = f"kube-proxy-{cluster.namespace}"[:63]
    proxy = cluster.cleanup.add(f"{SYSTEM_DAEMON_SETS}/{proxy_name}")
    await cluster.admin.create(
        SYSTEM_DAEMON_SETS,
        {
            "metadata": {"name": proxy_name, "labels": {"k8s-app": "kube-proxy"}},
            "spec": {
                "selector": {"matchLabels": {"k8s-app": "kube-proxy"}},
                "template": {
                    "metadata": {"labels": {"k8s-app": "kube-proxy"}},
                    "spec": {
                        "hostNetwork": True,
                        "containers": [
                            {
                                "name": "kube-proxy",
                                "image": "registry.k8s.io/kube-proxy:v1.31.0",
                                "securityContext": {"privileged": True},
                            }
                        ],
                    },
                },
            },
        },
    )
    current = await cluster.ccm.get(proxy)  # RBAC lets the CCM read and write it...
    shell = changed(current, lambda pod: forwarder(pod).update(image="evil.example/shell:1"))
    # ...not the policy: neither the object nor the one it replaces is kube-ccm's.
    await refused(cluster.ccm.replace(proxy, shell), "only its own svclb-* DaemonSets")
    # Labelled as a svclb DaemonSet, it is still not one of kube-ccm's (its name).
    relabelled = copy.deepcopy(current)
    relabelled["metadata"]["labels"] = svclb_daemon_set()["metadata"]["labels"]
    await refused(cluster.ccm.replace(proxy, relabelled), "only its own svclb-* DaemonSets")
    await refused(cluster.ccm.delete(proxy), CHANGE_DAEMON_SET)
    assert (await cluster.admin.get(proxy))["spec"]["template"]["spec"]["containers"][0][
        "image"
    ] == "registry.k8s.io/kube-proxy:v1.31.0"

    # Not its name or labels.
    own = svclb_daemon_set()
    path = cluster.cleanup.add(f"{SYSTEM_DAEMON_SETS}/{own['metadata']['name']}")
    renamed_one = copy.deepcopy(own)
    renamed_one["metadata"]["name"] = "calico-node"
    await refused(cluster.ccm.create(SYSTEM_DAEMON_SETS, renamed_one), CREATE_DAEMON_SET)
    unlabelled = copy.deepcopy(own)
    unlabelled["metadata"]["labels"] = {}
    await refused(cluster.ccm.create(SYSTEM_DAEMON_SETS, unlabelled), CREATE_DAEMON_SET)
    # Not another pod shape (on a high port: no sysctl, which the host network forbids).
    high = svclb_daemon_set(port=8443)
    for what, change, message in ATTACKS:
        try:
            await refused(cluster.ccm.create(SYSTEM_DAEMON_SETS, changed(high, change)), message)
        except AssertionError as exc:
            raise AssertionError(f"{what}: {exc}") from exc

    # Its own, as it builds it: created, replaced (a port change), deleted.
    created = await cluster.ccm.create(SYSTEM_DAEMON_SETS, own)
    moved = svclb_daemon_set(port=8080)
    moved["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"]
    replaced = await cluster.ccm.replace(path, moved)
    # ... but not turned into something else, nor stripped of its labels.
    shell = changed(replaced, lambda pod: forwarder(pod).update(image="evil.example/shell:1"))
    await refused(cluster.ccm.replace(path, shell), FORWARDER)
    relabelled = copy.deepcopy(replaced)
    relabelled["metadata"]["labels"] = {}
    await refused(cluster.ccm.replace(path, relabelled), CREATE_DAEMON_SET)
    await cluster.ccm.delete(path)
    with pytest.raises(ApiError) as gone:
        await cluster.admin.get(path)
    assert gone.value.not_found


def chart_daemonset_policy(
    helm: Helm, values_file: Path, values: dict[str, Any]
) -> list[dict[str, Any]]:
    """The chart's DaemonSet policy and binding, rendered with ``values``."""
    values_file.write_text(yaml.safe_dump(values))
    rendered = subprocess.run(
        [str(helm.path), "template", "kube-ccm", str(CHART), "-f", str(values_file)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return [
        d
        for d in yaml.safe_load_all(rendered.stdout)
        if d and d["metadata"]["name"] == f"{ACCOUNT}-daemonsets"
    ]


CHART_VARIANTS: list[tuple[str, dict[str, Any]]] = [
    ("hostNetwork: true", {"hostNetwork": True}),
    ("forwardMode: iptables", {"forwardMode": "iptables"}),
    ("priorityClassName: system-cluster-critical", {}),
]
"""servicelb cloud-configs deploy/'s policy refuses, and the chart values that match."""


async def test_the_chart_s_daemonset_policy_admits_the_servicelb_options_it_is_given(
    cluster: Cluster, helm: Helm, tmp_path: Path
) -> None:
    """The chart's policy, rendered with the servicelb values matching a cloud-config,
    lets the CCM create what servicelb builds with it (deploy/'s defaults refuse it:
    the attacks above), and still refuses a privileged pod."""
    for index, (cloud_config, policy) in enumerate(CHART_VARIANTS):
        try:
            await admitted_by_the_chart_s_policy(
                cluster, helm, tmp_path / f"values-{index}.yaml", cloud_config, policy
            )
        except AssertionError as exc:
            raise AssertionError(f"{cloud_config}: {exc}") from exc


async def admitted_by_the_chart_s_policy(
    cluster: Cluster, helm: Helm, values_file: Path, cloud_config: str, policy: dict[str, Any]
) -> None:
    config = load_config(cloud_config)
    values = {
        "name": ACCOUNT,
        "namespace": "kube-system",
        "servicelb": {
            "enabled": True,
            "priorityClassName": config.priority_class_name,
            "policy": policy,
        },
    }
    docs = await asyncio.to_thread(chart_daemonset_policy, helm, values_file, values)
    assert len(docs) == 2, "the policy and its binding"
    for path in await install_policies(cluster.admin, docs):
        cluster.cleanup.add(path)
    built = svclb_daemon_set(config=config)
    path = cluster.cleanup.add(f"{SYSTEM_DAEMON_SETS}/{built['metadata']['name']}")

    async def created() -> bool:
        try:
            await cluster.ccm.create(SYSTEM_DAEMON_SETS, built)
        except ApiError as exc:
            if exc.status != 403:  # deploy/'s policy, until the chart's is loaded
                raise
            return False
        return True

    await eventually(created, within=30, what="servicelb's DaemonSet admitted")
    await cluster.ccm.delete(path)
    privileged = changed(
        built, lambda pod: forwarder(pod).update(securityContext={"privileged": True})
    )
    await refused(cluster.ccm.create(SYSTEM_DAEMON_SETS, privileged), PRIVILEGES)
