"""The servicelb provider in the daemon, on the real apiserver, composed with k3s
instances: the DaemonSet per Service, its pods' readiness becoming the Service's status,
a port change, externalTrafficPolicy Local, a node labelled out, a port conflict as an
Event naming both Services, load-balancer classes, and the DaemonSet deleted with the
Service. And what a tenant's Service or a node cannot get, each refusal an Event and no
DaemonSet: the kubelet's and the operator's reserved ports, a kubelet port a node
reports (written with the node's own identity), a priority class, too many ports,
more DaemonSets than the namespace's cap, and no other namespace's Service named. And
which Node addresses are published: none a node writes into its own status that may
be another host's (kube-apiserver's ClusterIP and address, an outside address beyond
``nodeAddressCIDRs``), each a Warning on the Node.

There is no DaemonSet controller or kubelet here: the test plays both, creating the
svclb pods a DaemonSet would have (its labels, a node each) and writing their Ready
status, and an EndpointSlice for the Local Service. The daemon registers the providers
itself (as a provider's own main does), so nothing depends on the installed entry
points; it runs as the ServiceAccount of the shipped RBAC (deploy/rbac-servicelb.yaml
included), and the session fails if any of its requests was refused.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from kube_ccm.runtime.client import ApiError, KubeClient
from kube_ccm.testing.controlplane import ControlPlane
from kube_ccm.testing.daemon import DaemonProcess
from kube_ccm.testing.manifests import find_node
from kube_ccm.testing.pytest_plugin import Cleanup
from kube_ccm.testing.waiting import eventually

MAIN = (
    "import sys\n"
    "from kube_ccm.app.cli import run\n"
    "from kube_ccm.cloudprovider import register_cloud_provider\n"
    "from kube_ccm.providers import k3s, servicelb\n"
    "register_cloud_provider('k3s', k3s.factory)\n"
    "register_cloud_provider('servicelb', servicelb.factory)\n"
    "sys.exit(run())\n"
)
CLASS = "kube-ccm.io/servicelb-test"
OTHER_CLASS = "example.com/other"
"""A class the daemon does not serve."""
DOMAIN = "svccontroller.k3s.cattle.io"
ENABLE = f"{DOMAIN}/enablelb"
SYSTEM = "kube-system"
DAEMON_SETS = f"/apis/apps/v1/namespaces/{SYSTEM}/daemonsets"
PODS = f"/api/v1/namespaces/{SYSTEM}/pods"
BINDINGS = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"
CONFIG: dict[str, Any] = {
    "providers": {
        "k3s": {"capabilities": ["instances"]},
        "servicelb": {"capabilities": ["loadBalancer"]},
    }
}


def daemon(
    kubeconfig: Path,
    workdir: Path,
    servicelb: dict[str, Any] | None = None,
    controllers: str = "cloud-node,cloud-node-lifecycle,service",
) -> DaemonProcess:
    """The daemon; ``servicelb``: the servicelb member's cloud-config."""
    workdir.mkdir(parents=True, exist_ok=True)
    config_file = workdir / "cloud.yaml"
    config = copy.deepcopy(CONFIG)
    if servicelb is not None:
        config["providers"]["servicelb"]["config"] = servicelb
    config_file.write_text(yaml.safe_dump(config))
    process = DaemonProcess(
        kubeconfig=kubeconfig,
        workdir=workdir,
        provider="composite",
        cloud_config_file=config_file,
        args=[
            "--leader-elect=false",
            f"--controllers={controllers}",
            "--node-status-update-frequency=1s",
            f"--load-balancer-class={CLASS}",
            "--serve-unclassed-load-balancers=false",
        ],
    )
    assert process.argv[1:4] == ["-m", "kube_ccm", "run"], process.argv
    process.argv[1:4] = ["-c", MAIN]
    return process.start()


class Bed:
    def __init__(self, client: KubeClient, cleanup: Cleanup, namespace: str) -> None:
        self.client = client
        self.cleanup = cleanup
        self.namespace = namespace
        self.services = f"/api/v1/namespaces/{namespace}/services"

    async def node(self, name: str, ip: str) -> None:
        self.cleanup.add(f"/api/v1/nodes/{name}")
        await self.client.create(
            "/api/v1/nodes",
            {
                "metadata": {
                    "name": name,
                    "labels": {ENABLE: "true"},
                    "annotations": {"k3s.io/internal-ip": ip},
                },
                "spec": {
                    "taints": [
                        {
                            "key": "node.cloudprovider.kubernetes.io/uninitialized",
                            "value": "true",
                            "effect": "NoSchedule",
                        }
                    ]
                },
            },
        )

    async def service(
        self, name: str, port: int, annotations: dict[str, str] | None = None, **spec: Any
    ) -> dict[str, Any]:
        body = {
            "metadata": {"name": name, "annotations": annotations or {}},
            "spec": {
                "type": "LoadBalancer",
                "loadBalancerClass": CLASS,
                "ports": [{"port": port, "protocol": "TCP"}],
                **spec,
            },
        }
        created: dict[str, Any] = await self.client.create(self.services, body)
        return created

    async def daemon_set(self, svc: dict[str, Any]) -> dict[str, Any] | None:
        name = f"svclb-{svc['metadata']['name']}-{svc['metadata']['uid'][:8]}"
        try:
            found: dict[str, Any] = await self.client.get(f"{DAEMON_SETS}/{name}")
        except ApiError as exc:
            if exc.not_found:
                return None
            raise
        return found

    async def wait_daemon_set(self, svc: dict[str, Any], what: str) -> dict[str, Any]:
        async def made() -> bool:
            return await self.daemon_set(svc) is not None

        await eventually(made, within=30, what=what)
        found = await self.daemon_set(svc)
        assert found is not None
        return found

    async def pod(self, ds: dict[str, Any], node: str, *, ready: bool = True) -> None:
        """The svclb pod the DaemonSet controller would make on ``node``, bound and
        (as its kubelet would report) with an IP and a Ready condition."""
        name = f"{ds['metadata']['name']}-{node}"[:63].rstrip("-.")
        path = f"{PODS}/{name}"
        self.cleanup.add(path)
        labels = ds["spec"]["template"]["metadata"]["labels"]
        with contextlib.suppress(ApiError):
            await self.client.create(
                PODS,
                {
                    "metadata": {"name": name, "labels": labels},
                    "spec": {
                        "nodeName": node,
                        "automountServiceAccountToken": False,
                        "containers": [{"name": "lb", "image": "pause"}],
                    },
                },
            )
        await self.client.patch(
            f"{path}/status",
            {
                "status": {
                    "phase": "Running",
                    "podIP": "10.42.0.9",
                    "podIPs": [{"ip": "10.42.0.9"}],
                    "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                }
            },
        )

    async def ingress(self, name: str) -> list[str]:
        found = await self.client.get(f"{self.services}/{name}")
        ingress = (found.get("status", {}).get("loadBalancer") or {}).get("ingress") or []
        return [i["ip"] for i in ingress]

    async def wait_ingress(self, name: str, wanted: list[str], what: str) -> None:
        async def listed() -> bool:
            return await self.ingress(name) == wanted

        await eventually(listed, within=30, what=what)

    async def told(self, name: str, reason: str) -> str:
        """The message of the Event ``reason`` on Service ``name``, once it is there."""

        async def there() -> bool:
            return any(e["reason"] == reason for e in await self.events(name))

        await eventually(there, within=30, what=f"the {reason} Event on {name}")
        messages = {str(e["message"]) for e in await self.events(name) if e["reason"] == reason}
        assert len(messages) == 1, messages
        return messages.pop()

    async def events(self, name: str) -> list[dict[str, Any]]:
        listed = await self.client.get(
            f"/api/v1/namespaces/{self.namespace}/events",
            {"fieldSelector": f"involvedObject.name={name}"},
        )
        items: list[dict[str, Any]] = listed["items"]
        return items


async def release_services(client: KubeClient) -> None:
    """Delete every Service of this module's classes, in any namespace, and wait until
    the daemon (still running) has released them. A deleted namespace stays
    Terminating here (no namespace controller), so its Services would outlive the test
    and count as unserved LoadBalancers in later tests of the session."""
    listed = await client.get("/api/v1/services")
    ours = [
        s["metadata"]
        for s in listed["items"]
        if s["spec"].get("loadBalancerClass") in (CLASS, OTHER_CLASS)
    ]
    for meta in ours:
        with contextlib.suppress(ApiError):
            await client.delete(f"/api/v1/namespaces/{meta['namespace']}/services/{meta['name']}")

    async def released() -> bool:
        remaining = await client.get("/api/v1/services")
        return not any(
            s["spec"].get("loadBalancerClass") in (CLASS, OTHER_CLASS) for s in remaining["items"]
        )

    await eventually(released, within=60, what="this test's Services released and deleted")


async def default_service_account(client: KubeClient) -> None:
    """Pods need their namespace's ``default`` ServiceAccount (no controller makes it
    here); left in place for later tests."""
    with contextlib.suppress(ApiError):
        await client.create(
            f"/api/v1/namespaces/{SYSTEM}/serviceaccounts", {"metadata": {"name": "default"}}
        )


async def test_servicelb_with_k3s_instances_on_the_real_apiserver(
    ccm_kubeconfig: Path,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    kube_namespace: str,
    tmp_path: Path,
) -> None:
    await default_service_account(kube_client)
    bed = Bed(kube_client, kube_cleanup, kube_namespace)
    await bed.node("slb-a", "10.0.0.41")
    await bed.node("slb-b", "10.0.0.42")
    ccm = daemon(ccm_kubeconfig, tmp_path / "ccm")
    try:
        ccm.wait_for_log("Started service-lb-controller")

        async def addressed() -> bool:
            nodes = [await find_node(kube_client, n) for n in ("slb-a", "slb-b")]
            return all(n and n.get("status", {}).get("addresses") for n in nodes)

        await eventually(addressed, within=30, what="k3s instances gave the Nodes addresses")

        # Create: the DaemonSet as k3s makes it, then the ready pods' nodes as ingress.
        web = await bed.service("web", 80)
        ds = await bed.wait_daemon_set(web, "the svclb DaemonSet of web")
        labels = ds["metadata"]["labels"]
        assert labels[f"{DOMAIN}/svcname"] == "web"
        assert labels[f"{DOMAIN}/svcnamespace"] == kube_namespace
        spec = ds["spec"]["template"]["spec"]
        assert spec["nodeSelector"] == {ENABLE: "true"}
        [container] = spec["containers"]
        assert container["name"] == "lb-tcp-80"
        assert container["ports"][0]["hostPort"] == 80
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["DEST_IPS"] == web["spec"]["clusterIP"]
        assert await bed.ingress("web") == [], "no svclb pod is ready yet"
        await bed.pod(ds, "slb-a")
        await bed.pod(ds, "slb-b", ready=False)
        await bed.wait_ingress("web", ["10.0.0.41"], "the node with a ready svclb pod")
        await bed.pod(ds, "slb-b")
        await bed.wait_ingress("web", ["10.0.0.41", "10.0.0.42"], "both nodes")

        # A port change rolls the pods: the template changes.
        generation = ds["metadata"]["generation"]
        await kube_client.patch(
            f"{bed.services}/web",
            {"spec": {"ports": [{"port": 8080, "protocol": "TCP"}]}},
            patch_type="merge",
        )

        async def rolled() -> bool:
            found = await bed.daemon_set(web)
            return found is not None and found["metadata"]["generation"] > generation

        await eventually(rolled, within=30, what="the DaemonSet updated for port 8080")
        ds = await bed.wait_daemon_set(web, "web's DaemonSet")
        assert [c["name"] for c in ds["spec"]["template"]["spec"]["containers"]] == ["lb-tcp-8080"]

        # externalTrafficPolicy Local: only nodes with a ready backend.
        local = await bed.service("local", 81, externalTrafficPolicy="Local")
        local_ds = await bed.wait_daemon_set(local, "the svclb DaemonSet of local")
        env = {e["name"]: e for e in local_ds["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env["DEST_PORT"]["value"] == str(local["spec"]["ports"][0]["nodePort"])
        assert env["DEST_IPS"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.hostIPs"
        await kube_client.create(
            f"/apis/discovery.k8s.io/v1/namespaces/{kube_namespace}/endpointslices",
            {
                "metadata": {
                    "name": "local-backends",
                    "labels": {"kubernetes.io/service-name": "local"},
                },
                "addressType": "IPv4",
                "endpoints": [
                    {
                        "addresses": ["10.42.1.7"],
                        "nodeName": "slb-b",
                        "conditions": {"ready": True},
                        "targetRef": {"kind": "Pod", "name": "backend", "namespace": "x"},
                    }
                ],
                "ports": [{"port": 8080, "protocol": "TCP"}],
            },
        )
        await bed.pod(local_ds, "slb-a")
        await bed.pod(local_ds, "slb-b")
        await bed.wait_ingress("local", ["10.0.0.42"], "only the node with a ready backend")

        # Two Services on one port: an Event naming both, and no DaemonSet.
        clash = await bed.service("clash", 8080)

        async def told() -> bool:
            return any(e["reason"] == "PortConflict" for e in await bed.events("clash"))

        await eventually(told, within=30, what="the PortConflict Event on clash")
        [event] = [e for e in await bed.events("clash") if e["reason"] == "PortConflict"]
        assert f"{kube_namespace}/web" in event["message"]
        assert f"{kube_namespace}/clash" in event["message"]
        assert await bed.daemon_set(clash) is None

        # Another class is not ours.
        other = await bed.service("other", 9090, loadBalancerClass=OTHER_CLASS)

        # A node labelled out: its pod goes (the test deletes it as the DaemonSet
        # controller would), and it leaves the status.
        await kube_client.patch("/api/v1/nodes/slb-b", {"metadata": {"labels": {ENABLE: "false"}}})
        await kube_client.delete(f"{PODS}/{ds['metadata']['name']}-slb-b")
        await bed.wait_ingress("web", ["10.0.0.41"], "slb-b labelled out")
        assert await bed.daemon_set(other) is None, "a Service of another class"

        # Deleting the Service deletes its DaemonSet, then the finalizer.
        await kube_client.delete(f"{bed.services}/web")

        async def gone() -> bool:
            if await bed.daemon_set(web) is not None:
                return False
            try:
                await kube_client.get(f"{bed.services}/web")
            except ApiError as exc:
                return exc.not_found
            return False

        await eventually(gone, within=30, what="web's DaemonSet and web deleted")
        for svc in (local, clash):
            await kube_client.delete(f"{bed.services}/{svc['metadata']['name']}")

        async def cleaned() -> bool:
            return await bed.daemon_set(local) is None

        await eventually(cleaned, within=30, what="local's DaemonSet deleted")
        assert ccm.poll() is None, "the daemon keeps running"
    finally:
        try:
            await release_services(kube_client)
        finally:
            assert ccm.stop() == 0


async def test_servicelb_refuses_what_a_tenant_or_a_node_may_not_get(
    *,
    ccm_kubeconfig: Path,
    kube_controlplane: ControlPlane,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    kube_namespace: str,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    await default_service_account(kube_client)
    bed = Bed(kube_client, kube_cleanup, kube_namespace)
    node = unique_name("slb-r")
    await bed.node(node, "10.0.0.51")
    # The node, with its own identity (the system:node role, as the Node authorizer
    # grants it, and NodeRestriction: its own Node only), reports a kubelet port of
    # its choosing: 10350, as if the kubelet were elsewhere.
    kube_cleanup.add(f"{BINDINGS}/{node}")
    await kube_client.create(
        BINDINGS,
        {
            "metadata": {"name": node},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "system:node",
            },
            "subjects": [
                {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "User",
                    "name": f"system:node:{node}",
                }
            ],
        },
    )
    node_kubeconfig = kube_controlplane.write_client_kubeconfig(
        tmp_path / "node.kubeconfig", f"system:node:{node}", ("system:nodes",)
    )
    async with KubeClient.from_kubeconfig(node_kubeconfig) as as_node:

        async def reported() -> bool:
            try:
                await as_node.patch(
                    f"/api/v1/nodes/{node}/status",
                    {"status": {"daemonEndpoints": {"kubeletEndpoint": {"Port": 10350}}}},
                    patch_type="strategic",
                )
            except ApiError as exc:
                if exc.status != 403:  # until the authorizer has the binding
                    raise
                return False
            return True

        await eventually(reported, within=30, what="the node reported its kubelet port")
    ccm = daemon(
        ccm_kubeconfig,
        tmp_path / "ccm",
        {"reservedPorts": [9443], "maxServicesPerNamespace": 1},
    )
    try:
        ccm.wait_for_log("Started service-lb-controller")
        refused: list[dict[str, Any]] = []
        # The kubelet's well-known port, whatever port the node reports.
        refused.append(await bed.service("kubelet", 10250))
        message = await bed.told("kubelet", "HostPortReserved")
        assert "10250 is the kubelet's port" in message
        assert "Use another port" in message
        # The port the node reports (a node can deny a port, never take one).
        refused.append(await bed.service("reported", 10350))
        message = await bed.told("reported", "HostPortReserved")
        assert f"10350 is the kubelet port Node {node} reports" in message
        # The operator's list.
        refused.append(await bed.service("operator", 9443))
        assert "reserved by the cluster operator" in await bed.told("operator", "HostPortReserved")
        # A priority class the operator did not allow.
        annotation = {f"{DOMAIN}/priorityclassname": "system-node-critical"}
        refused.append(await bed.service("critical", 81, annotations=annotation))
        message = await bed.told("critical", "PriorityClassNotAllowed")
        assert "'system-node-critical'" in message
        # Nine ports (eight by default).
        refused.append(
            await bed.service(
                "many",
                9000,
                ports=[{"name": f"p{i}", "port": 9000 + i, "protocol": "TCP"} for i in range(9)],
            )
        )
        assert "at most 8" in await bed.told("many", "TooManyPorts")

        # One Service's DaemonSet, without a priority class, with resources; the
        # namespace's second is refused (the cap here is 1).
        first = await bed.service("first", 82)
        ds = await bed.wait_daemon_set(first, "first's DaemonSet")
        spec = ds["spec"]["template"]["spec"]
        assert "priorityClassName" not in spec
        assert spec["containers"][0]["resources"]["limits"] == {"cpu": "1", "memory": "256Mi"}
        refused.append(await bed.service("second", 83))
        message = await bed.told("second", "DaemonSetLimitReached")
        assert "maxServicesPerNamespace" in message

        # Another namespace's Service on first's port: told the port is in use, not by whom.
        other_namespace = unique_name("slb-b")
        await kube_client.create("/api/v1/namespaces", {"metadata": {"name": other_namespace}})
        kube_cleanup.add(f"/api/v1/namespaces/{other_namespace}")
        other = Bed(kube_client, kube_cleanup, other_namespace)
        refused.append(await other.service("clash", 82))
        message = await other.told("clash", "PortConflict")
        assert "another Service" in message
        assert kube_namespace not in message
        assert "first" not in message

        for svc in refused:
            assert await bed.daemon_set(svc) is None, svc["metadata"]["name"]
        assert ccm.poll() is None, "the daemon keeps running"
    finally:
        try:
            await release_services(kube_client)
        finally:
            assert ccm.stop() == 0


async def test_servicelb_publishes_no_address_a_node_writes_that_may_be_another_host_s(
    *,
    ccm_kubeconfig: Path,
    kube_controlplane: ControlPlane,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    kube_namespace: str,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    await default_service_account(kube_client)
    bed = Bed(kube_client, kube_cleanup, kube_namespace)
    honest, attacker = unique_name("slb-h"), unique_name("slb-x")
    for name, ip in ((honest, "10.0.0.61"), (attacker, "10.0.0.62")):
        await bed.node(name, ip)
        await kube_client.patch(
            f"/api/v1/nodes/{name}/status",
            {"status": {"addresses": [{"type": "InternalIP", "address": ip}]}},
            patch_type="merge",
        )
    # kube-apiserver's own addresses: its Service's ClusterIP, and its endpoint in the
    # Service's EndpointSlice. This plane advertises loopback, which kube-apiserver
    # does not write into endpoints: the test writes the slice it would write with
    # --advertise-address=192.0.2.10 (on a plane that has one, that one is used).
    kubernetes = await kube_client.get("/api/v1/namespaces/default/services/kubernetes")
    cluster_ip = kubernetes["spec"]["clusterIP"]
    slices = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices"
    selector = {"labelSelector": "kubernetes.io/service-name=kubernetes"}
    if not (await kube_client.get(slices, selector))["items"]:
        kube_cleanup.add(f"{slices}/kubernetes")
        await kube_client.create(
            slices,
            {
                "metadata": {
                    "name": "kubernetes",
                    "labels": {"kubernetes.io/service-name": "kubernetes"},
                },
                "addressType": "IPv4",
                "endpoints": [{"addresses": ["192.0.2.10"], "conditions": {"ready": True}}],
                "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}],
            },
        )
    [apiserver_slice] = (await kube_client.get(slices, selector))["items"]
    [apiserver_ip] = apiserver_slice["endpoints"][0]["addresses"]
    outside = "198.51.100.7"  # a package mirror, say
    kube_cleanup.add(f"{BINDINGS}/{attacker}")
    await kube_client.create(
        BINDINGS,
        {
            "metadata": {"name": attacker},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "system:node",
            },
            "subjects": [
                {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "User",
                    "name": f"system:node:{attacker}",
                }
            ],
        },
    )
    # No cloud node controller: nothing rewrites what the node writes (as in the
    # minutes between two of its address updates, or for good with k3s annotations).
    ccm = daemon(
        ccm_kubeconfig,
        tmp_path / "ccm",
        {"nodeAddressCIDRs": ["10.0.0.0/24"]},
        controllers="service",
    )
    try:
        ccm.wait_for_log("Started service-lb-controller")
        web = await bed.service("web", 84)
        ds = await bed.wait_daemon_set(web, "web's DaemonSet")
        await bed.pod(ds, honest)
        await bed.pod(ds, attacker)
        await bed.wait_ingress("web", ["10.0.0.61", "10.0.0.62"], "both nodes")

        # The node, with its own identity, reports kube-apiserver's ClusterIP and
        # address and an outside address as ExternalIPs (which would turn the Service
        # to external addresses), and moves its InternalIP (which it may).
        node_kubeconfig = kube_controlplane.write_client_kubeconfig(
            tmp_path / "node.kubeconfig", f"system:node:{attacker}", ("system:nodes",)
        )
        claimed = [
            {"type": "InternalIP", "address": "10.0.0.63"},
            {"type": "ExternalIP", "address": cluster_ip},
            {"type": "ExternalIP", "address": apiserver_ip},
            {"type": "ExternalIP", "address": outside},
            {"type": "Hostname", "address": attacker},
        ]
        async with KubeClient.from_kubeconfig(node_kubeconfig) as as_node:

            async def reported() -> bool:
                try:
                    await as_node.patch(
                        f"/api/v1/nodes/{attacker}/status",
                        {"status": {"addresses": claimed}},
                        patch_type="merge",
                    )
                except ApiError as exc:
                    if exc.status != 403:  # until the authorizer has the binding
                        raise
                    return False
                return True

            await eventually(reported, within=30, what="the node wrote its own addresses")
        found = await find_node(kube_client, attacker)
        assert found is not None
        assert found["status"]["addresses"] == claimed, "the node's write stands"

        # Only the honest addresses, the node's new one included: a sync after the
        # write, without any address of another host.
        await bed.wait_ingress("web", ["10.0.0.61", "10.0.0.63"], "the honest addresses")

        async def node_events() -> list[str]:
            listed = await kube_client.get(
                "/api/v1/namespaces/default/events",
                {"fieldSelector": f"involvedObject.name={attacker},involvedObject.kind=Node"},
            )
            return [
                str(e["message"])
                for e in listed["items"]
                if e["reason"] == "NodeAddressNotPublished" and e["type"] == "Warning"
            ]

        async def told() -> bool:
            return len(await node_events()) == 3

        await eventually(told, within=30, what="a NodeAddressNotPublished Warning per address")
        messages = {
            m.split(" as a LoadBalancer")[0].rsplit(" ", 1)[1]: m for m in await node_events()
        }
        assert set(messages) == {cluster_ip, apiserver_ip, outside}
        assert "ClusterIP of the kubernetes Service" in messages[cluster_ip]
        assert "endpoint of the kubernetes Service" in messages[apiserver_ip]
        assert "outside nodeAddressCIDRs (10.0.0.0/24)" in messages[outside]
        # The tenant's Service is told nothing of the node or its addresses.
        for event in await bed.events("web"):
            assert attacker not in event["message"]
            assert outside not in event["message"]
        assert await bed.ingress("web") == ["10.0.0.61", "10.0.0.63"]
        assert ccm.poll() is None, "the daemon keeps running"
    finally:
        try:
            await release_services(kube_client)
        finally:
            assert ccm.stop() == 0


K3S_TOLERATIONS = (
    '[{"key":"node-role.kubernetes.io/master","operator":"Exists","effect":"NoSchedule"},'
    ' {"key":"dedicated","value":"lb","effect":"NoSchedule"}]'
)
"""k3s's annotation, in the JSON form of its docs' traefik example, with a second
toleration (operator left out: Equal, as k3s fills it in)."""


async def test_the_k3s_tolerations_annotation_is_refused_unless_allowed_then_honoured(
    ccm_kubeconfig: Path,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    kube_namespace: str,
    tmp_path: Path,
) -> None:
    """Issue 39 item 3: ``svccontroller.k3s.cattle.io/tolerations`` is refused with an
    ``InvalidTolerations`` Event naming the cloud-config key by default (no DaemonSet);
    with ``serviceTolerations: true`` the DaemonSet's pods carry them after k3s's own."""
    await default_service_account(kube_client)
    bed = Bed(kube_client, kube_cleanup, kube_namespace)
    await bed.node("slb-t", "10.0.0.51")
    body = {
        "metadata": {"name": "tol", "annotations": {f"{DOMAIN}/tolerations": K3S_TOLERATIONS}},
        "spec": {
            "type": "LoadBalancer",
            "loadBalancerClass": CLASS,
            "ports": [{"port": 7070, "protocol": "TCP"}],
        },
    }
    svc: dict[str, Any] = await kube_client.create(bed.services, body)
    ccm = daemon(ccm_kubeconfig, tmp_path / "ccm")
    try:

        async def refused() -> bool:
            return any(
                e["reason"] == "InvalidTolerations" and "serviceTolerations: true" in e["message"]
                for e in await bed.events("tol")
            )

        await eventually(refused, within=60, what="InvalidTolerations naming the key")
        assert await bed.daemon_set(svc) is None
    finally:
        assert ccm.stop() == 0
    ccm = daemon(ccm_kubeconfig, tmp_path / "ccm-allowed", {"serviceTolerations": True})
    try:
        ds = await bed.wait_daemon_set(svc, "the DaemonSet once tolerations are allowed")
        tolerations = ds["spec"]["template"]["spec"]["tolerations"]
        assert tolerations[-2:] == [
            {"key": "node-role.kubernetes.io/master", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "dedicated", "operator": "Equal", "value": "lb", "effect": "NoSchedule"},
        ]
        assert {"key": "CriticalAddonsOnly", "operator": "Exists"} in tolerations
        await kube_client.delete(f"{bed.services}/tol")

        async def cleaned() -> bool:
            return await bed.daemon_set(svc) is None

        await eventually(cleaned, within=30, what="tol's DaemonSet deleted")
        assert ccm.poll() is None
    finally:
        try:
            await release_services(kube_client)
        finally:
            assert ccm.stop() == 0
