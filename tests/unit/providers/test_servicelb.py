"""The servicelb provider on the in-memory API server: the DaemonSet k3s would make,
the ingress rule, node choice by labels, bad input as Events, and the status following
the pods through the service controller."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml

from kube_ccm.api.objects import (
    LoadBalancerStatus,
    Node,
    NodeAddress,
    NodeStatus,
    ObjectMeta,
    Service,
    ServicePort,
    ServiceSpec,
    decode,
    encode,
    to_dict,
)
from kube_ccm.cloudprovider import InvalidCloudConfigError, InvalidSourceRangeError, Registry
from kube_ccm.controllers.service import (
    LoadBalancerClasses,
    ServiceController,
    ServiceControllerOptions,
)
from kube_ccm.providers.composite import build_composite
from kube_ccm.providers.k3s import factory as k3s_factory
from kube_ccm.providers.servicelb import (
    APPLIED_DAEMON_SET_REASON,
    DAEMON_SET_LIMIT_REASON,
    DELETED_DAEMON_SET_REASON,
    HOST_PORT_IN_USE_REASON,
    HOST_PORT_RESERVED_REASON,
    NO_ENABLED_NODES_REASON,
    NO_PORTS_REASON,
    NODE_ADDRESS_NOT_PUBLISHED_REASON,
    PORT_CONFLICT_REASON,
    PRIORITY_CLASS_NOT_ALLOWED_REASON,
    PRIORITY_CLASS_NOT_FOUND_REASON,
    TOO_MANY_PORTS_REASON,
    WELL_KNOWN_PORTS,
    Names,
    ServiceLBConfig,
    ServiceLBError,
    ServiceLBProvider,
    daemon_set,
    daemon_set_name,
    factory,
    forwarder_privileges,
    load_config,
)
from kube_ccm.providers.servicelb.objects import EndpointSlice
from kube_ccm.providers.servicelb.status import endpoint_nodes, ingress, node_addresses
from kube_ccm.providers.servicelb.workload import (
    SPEC_HASH_ANNOTATION,
    TolerationsError,
    host_ports,
)
from kube_ccm.runtime.informer import Informer
from kube_ccm.runtime.metrics import Metrics
from kube_ccm.runtime.resources import SERVICES
from kube_ccm.testing.events import FakeEventRecorder
from kube_ccm.testing.fakeapi import (
    DEFAULT_RESOURCES,
    FakeApiServer,
    FakeClientBuilder,
    ResourceType,
)
from kube_ccm.testing.world import guarded, node_object

NAMES = Names("svccontroller.k3s.cattle.io")
ENABLE = NAMES.enable_lb
POOL = NAMES.lb_pool
DS_PREFIX = "/apis/apps/v1/namespaces/kube-system/daemonsets"
RESOURCES = (
    *DEFAULT_RESOURCES,
    ResourceType("apps/v1", "daemonsets", "DaemonSet", namespaced=True, status=True),
    ResourceType("v1", "pods", "Pod", namespaced=True, status=True),
    ResourceType("discovery.k8s.io/v1", "endpointslices", "EndpointSlice", namespaced=True),
    ResourceType("scheduling.k8s.io/v1", "priorityclasses", "PriorityClass", namespaced=False),
)


def service(
    name: str = "web",
    *,
    namespace: str = "default",
    uid: str | None = None,
    ports: tuple[tuple[str, int, int], ...] = (("TCP", 80, 30080),),
    families: tuple[str, ...] = ("IPv4",),
    cluster_ips: tuple[str, ...] = ("10.43.0.10",),
    policy: str = "Cluster",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    ranges: tuple[str, ...] = (),
    lb_class: str | None = None,
) -> Service:
    return Service(
        metadata=ObjectMeta(
            name=name,
            namespace=namespace,
            uid=uid or f"{name:x<8}-0000-4000-8000-000000000000"[:36],
            labels=labels or {},
            annotations=annotations or {},
        ),
        spec=ServiceSpec(
            type="LoadBalancer",
            load_balancer_class=lb_class,
            ports=tuple(ServicePort(protocol=p, port=n, node_port=np) for p, n, np in ports),
            ip_families=families,
            cluster_ip=cluster_ips[0] if cluster_ips else "",
            cluster_ips=cluster_ips,
            external_traffic_policy=policy,
            load_balancer_source_ranges=ranges,
        ),
    )


def service_body(svc: Service) -> dict[str, Any]:
    """The Service as the API server would store it."""
    body = to_dict(svc)
    body.update(apiVersion="v1", kind="Service")
    return dict(body)


def node(
    name: str,
    internal: str = "",
    external: str = "",
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    addresses = [{"type": "Hostname", "address": name}]
    for kind, text in (("InternalIP", internal), ("ExternalIP", external)):
        addresses += [{"type": kind, "address": a} for a in text.split(",") if a]
    return node_object(name, tainted=False, labels=labels, addresses=addresses)


def svclb_pod(
    svc: Service,
    node_name: str,
    *,
    ready: bool = True,
    ip: str = "10.42.0.5",
    scheduled: tuple[str, str] | None = None,
) -> dict[str, Any]:
    ds = daemon_set_name(svc)
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    if scheduled is not None:
        conditions.append({"type": "PodScheduled", "status": scheduled[0], "message": scheduled[1]})
    spec: dict[str, Any] = {
        "containers": [{"name": "lb-tcp-80"}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [node_name]}
                            ]
                        }
                    ]
                }
            }
        },
    }
    if scheduled is None or scheduled[0] == "True":
        spec["nodeName"] = node_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{ds}-{node_name}",
            "namespace": "kube-system",
            "labels": {
                "app": ds,
                NAMES.svc_name: svc.metadata.name,
                NAMES.svc_namespace: svc.metadata.namespace,
            },
        },
        "spec": spec,
        "status": {"podIP": ip if spec.get("nodeName") else "", "conditions": conditions},
    }


def endpoint_slice(svc: Service, nodes: dict[str, bool]) -> dict[str, Any]:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": f"{svc.metadata.name}-abcde",
            "namespace": svc.metadata.namespace,
            "labels": {"kubernetes.io/service-name": svc.metadata.name},
        },
        "addressType": "IPv4",
        "endpoints": [
            {
                "addresses": [f"10.42.{i}.9"],
                "nodeName": name,
                "conditions": {"ready": ready},
                "targetRef": {"kind": "Pod", "name": f"backend-{i}"},
            }
            for i, (name, ready) in enumerate(nodes.items())
        ],
    }


async def eventually(check: Callable[[], bool], what: str = "condition") -> None:
    for _ in range(400):
        if check():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"never: {what}")


class Bed:
    def __init__(self, fake: FakeApiServer, provider: ServiceLBProvider) -> None:
        self.fake = fake
        self.provider = provider
        self.lb = provider.load_balancer()
        self.recorder = FakeEventRecorder()
        provider.recorder = self.recorder

    def daemon_sets(self) -> dict[str, dict[str, Any]]:
        return {o["metadata"]["name"]: o for o in self.fake.objects(DS_PREFIX)}

    def ds(self, svc: Service) -> dict[str, Any]:
        found = self.fake.object(f"{DS_PREFIX}/{daemon_set_name(svc)}")
        assert found is not None, f"no DaemonSet for {svc.metadata.name}"
        return found

    def reasons(self) -> list[str]:
        return self.recorder.reasons()

    def messages(self, reason: str) -> list[str]:
        return [e.message for e in self.recorder.events if e.reason == reason]

    async def ensure(self, svc: Service) -> list[str]:
        status = await self.lb.ensure_load_balancer("kubernetes", svc, [])
        await self.caught_up()
        return [i.ip for i in status.ingress]

    async def caught_up(self) -> None:
        """The provider's caches hold what the fake stores (DaemonSets, pods, nodes)."""
        p = self.provider
        assert p._daemon_sets is not None
        assert p._pods is not None
        assert p._nodes is not None
        for informer, prefix in (
            (p._daemon_sets, DS_PREFIX),
            (p._pods, "/api/v1/namespaces/kube-system/pods"),
            (p._nodes, "/api/v1/nodes"),
        ):
            wanted = {
                o["metadata"]["name"]: o["metadata"]["resourceVersion"]
                for o in self.fake.objects(prefix)
            }
            await eventually(
                lambda i=informer, w=wanted: (
                    {  # type: ignore[misc]
                        x.metadata.name: x.metadata.resource_version for x in i.list()
                    }
                    == w
                ),
                f"{prefix} cached",
            )
        if p._slices is not None:
            wanted_slices = {
                o["metadata"]["resourceVersion"]
                for o in self.fake.objects("/apis/discovery.k8s.io/v1/endpointslices")
            }
            await eventually(
                lambda: (
                    {s.metadata.resource_version for s in p._slices.list()}  # type: ignore[union-attr]
                    == wanted_slices
                ),
                "slices cached",
            )

    async def put(self, obj: dict[str, Any]) -> None:
        self.fake.put_object(obj)
        await self.caught_up()


@pytest.fixture
async def bed() -> AsyncIterator[Bed]:
    async with make_bed(ServiceLBConfig()) as made:
        yield made


@pytest.fixture
async def k3s_bed() -> AsyncIterator[Bed]:
    """k3s's rule for Local Services: ``localTrafficAddresses: endpointNodes``."""
    async with make_bed(ServiceLBConfig(local_traffic_addresses="endpointNodes")) as made:
        yield made


@contextlib.asynccontextmanager
async def make_bed(config: ServiceLBConfig) -> AsyncIterator[Bed]:
    fake = FakeApiServer(resources=RESOURCES)
    provider = ServiceLBProvider(config)
    await provider.initialize(FakeClientBuilder(fake), asyncio.Event())
    for name, ip in (("n1", "10.0.0.1"), ("n2", "10.0.0.2"), ("n3", "10.0.0.3")):
        fake.put_object(node(name, internal=ip))
    b = Bed(fake, provider)
    await provider.ready()
    await b.caught_up()
    try:
        yield b
    finally:
        await provider.aclose()


# -- the DaemonSet ------------------------------------------------------------------------


def test_the_daemonset_is_named_as_k3s_names_it() -> None:
    svc = service("web", uid="0123abcd-ffff-4000-8000-000000000000")
    assert daemon_set_name(svc) == "svclb-web-0123abcd"
    long = service("a" * 47 + "--tail", uid="0123abcd-ffff-4000-8000-000000000000")
    assert daemon_set_name(long) == "svclb-" + "a" * 47 + "-0123abcd", "cut, not at a hyphen"


def test_the_daemonset_has_k3s_labels_a_forwarder_per_port_and_klipper_env() -> None:
    svc = service(ports=(("TCP", 80, 30080), ("UDP", 53, 30053)), cluster_ips=("10.43.0.10",))
    body = daemon_set(svc, ServiceLBConfig(), NAMES, by_label=False)
    name = daemon_set_name(svc)
    assert body["metadata"]["namespace"] == "kube-system"
    assert body["metadata"]["labels"] == {
        NAMES.node_selector: "false",
        NAMES.svc_name: "web",
        NAMES.svc_namespace: "default",
    }
    assert body["spec"]["selector"] == {"matchLabels": {"app": name}}
    pod = body["spec"]["template"]
    assert pod["metadata"]["labels"]["app"] == name
    spec = pod["spec"]
    assert "priorityClassName" not in spec, "no priority class unless the operator sets one"
    assert spec["automountServiceAccountToken"] is False
    assert "nodeSelector" not in spec
    assert {t["key"] for t in spec["tolerations"]} == {
        "node-role.kubernetes.io/master",
        "node-role.kubernetes.io/control-plane",
        "CriticalAddonsOnly",
    }
    tcp, udp = spec["containers"]
    assert (tcp["name"], udp["name"]) == ("lb-tcp-80", "lb-udp-53")
    assert tcp["command"] == ["kube-ccm", "forward", "--ready-file", "/tmp/ready"]
    assert tcp["readinessProbe"]["exec"] == {"command": ["test", "-e", "/tmp/ready"]}
    assert tcp["image"] == "kube-ccm:latest"
    assert tcp["ports"] == [
        {"name": "lb-tcp-80", "containerPort": 80, "hostPort": 80, "protocol": "TCP"}
    ]
    for forwarder in (tcp, udp):
        assert forwarder["resources"] == {
            "requests": {"cpu": "10m", "memory": "64Mi"},
            "limits": {"cpu": "1", "memory": "256Mi"},
        }
    assert {e["name"]: e.get("value") for e in udp["env"]} == {
        "SRC_PORT": "53",
        "SRC_RANGES": "0.0.0.0/0",
        "DEST_PROTO": "UDP",
        "DEST_PORT": "53",
        "DEST_IPS": "10.43.0.10",
    }
    assert body["spec"]["updateStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 1},
    }


def test_local_traffic_forwards_to_the_node_port_on_the_hosts_own_ips() -> None:
    svc = service(policy="Local", ports=(("TCP", 443, 31443),))
    body = daemon_set(svc, ServiceLBConfig(), NAMES, by_label=False)
    env = {e["name"]: e for e in body["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["DEST_PORT"]["value"] == "31443"
    assert env["DEST_IPS"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.hostIPs"}}


def test_source_ranges_are_normalised_and_ipv6_widens_the_default() -> None:
    dual = service(families=("IPv4", "IPv6"), cluster_ips=("10.43.0.10", "fd00::10"))
    body = daemon_set(dual, ServiceLBConfig(), NAMES, by_label=False)
    env = {
        e["name"]: e.get("value") for e in body["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["SRC_RANGES"] == "0.0.0.0/0,::/0"
    assert env["DEST_IPS"] == "10.43.0.10,fd00::10"
    ranged = service(ranges=("192.0.2.7/24", "10.0.0.0/8"))
    body = daemon_set(ranged, ServiceLBConfig(), NAMES, by_label=False)
    env = {
        e["name"]: e.get("value") for e in body["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["SRC_RANGES"] == "10.0.0.0/8,192.0.2.0/24"
    with pytest.raises(InvalidSourceRangeError):
        daemon_set(service(ranges=("nope",)), ServiceLBConfig(), NAMES, by_label=False)


def _pod(config: ServiceLBConfig, svc: Service | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = daemon_set(svc or service(), config, NAMES, by_label=False)["spec"][
        "template"
    ]["spec"]
    return spec


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


NO_CAPABILITIES = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
HIGH = service(ports=(("TCP", 8080, 30080), ("UDP", 8080, 30080)))
LOW = service(ports=(("TCP", 80, 30080), ("TCP", 8443, 30443)))


def test_userspace_on_the_pod_network_needs_no_capability_and_runs_as_non_root() -> None:
    spec = _pod(ServiceLBConfig(), HIGH)
    assert spec["securityContext"] == {
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert "hostNetwork" not in spec
    assert "dnsPolicy" not in spec
    for c in spec["containers"]:
        assert c["securityContext"] == NO_CAPABILITIES
        assert c["ports"][0]["hostPort"] == c["ports"][0]["containerPort"] == 8080
        assert c["readinessProbe"]["exec"]["command"] == ["test", "-e", "/tmp/ready"]
        assert "FORWARD_MODE" not in _env(c)
        assert "LISTEN_IPS" not in _env(c)


def test_userspace_on_the_pod_network_below_1024_sets_only_the_safe_port_sysctl() -> None:
    spec = _pod(ServiceLBConfig(), LOW)
    assert spec["securityContext"]["sysctls"] == [
        {"name": "net.ipv4.ip_unprivileged_port_start", "value": "0"}
    ]
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert [c["securityContext"] for c in spec["containers"]] == [NO_CAPABILITIES] * 2


def test_userspace_on_the_host_network_binds_the_nodes_ip() -> None:
    config = load_config("hostNetwork: true")
    spec = _pod(config, HIGH)
    assert spec["hostNetwork"] is True
    assert spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert spec["securityContext"] == {
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }, "no net sysctl: a host-network pod cannot set one"
    for c in spec["containers"]:
        assert c["securityContext"] == NO_CAPABILITIES
        assert _env(c)["LISTEN_IPS"] == {"fieldRef": {"fieldPath": "status.hostIP"}}
        # The scheduler's port accounting sees the port (a host-network pod's
        # hostPort must equal its containerPort).
        assert c["ports"][0]["hostPort"] == c["ports"][0]["containerPort"] == 8080
    assert host_ports(daemon_set(HIGH, config, NAMES, by_label=False)) == {
        ("TCP", 8080),
        ("UDP", 8080),
    }
    dual = service(families=("IPv4", "IPv6"), cluster_ips=("10.43.0.10", "fd00::10"))
    (c,) = _pod(config, dual)["containers"]
    assert _env(c)["LISTEN_IPS"] == {"fieldRef": {"fieldPath": "status.hostIPs"}}


def test_userspace_on_the_host_network_below_1024_adds_only_net_bind_service() -> None:
    spec = _pod(load_config("hostNetwork: true"), LOW)
    assert "sysctls" not in spec["securityContext"]
    assert spec["securityContext"]["runAsUser"] == 0, "no ambient capabilities for non-root"
    for c in spec["containers"]:
        assert c["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
        }


def test_iptables_mode_asks_for_k3s_privileges() -> None:
    privileges = forwarder_privileges(("IPv4", "IPv6"), mode="iptables")
    assert privileges.pod_security_context == {
        "runAsUser": 0,
        "sysctls": [
            {"name": "net.ipv4.ip_forward", "value": "1"},
            {"name": "net.ipv6.conf.all.forwarding", "value": "1"},
        ],
    }
    assert privileges.container_security_context == {"capabilities": {"add": ["NET_ADMIN"]}}
    assert privileges.host_network is False
    spec = _pod(load_config("forwardMode: iptables"), LOW)
    assert spec["securityContext"] == {
        "runAsUser": 0,
        "sysctls": [{"name": "net.ipv4.ip_forward", "value": "1"}],
    }
    assert "hostNetwork" not in spec
    for c in spec["containers"]:
        assert c["securityContext"] == {"capabilities": {"add": ["NET_ADMIN"]}}
        assert _env(c)["FORWARD_MODE"] == "iptables"
        assert c["ports"][0]["hostPort"] == c["ports"][0]["containerPort"]


def test_iptables_mode_on_the_host_network_is_refused() -> None:
    with pytest.raises(InvalidCloudConfigError, match="hostNetwork"):
        load_config("forwardMode: iptables\nhostNetwork: true\n")


def test_the_mode_and_network_are_in_the_spec_hash_so_a_change_rolls_the_pods() -> None:
    hashes = {
        daemon_set(HIGH, load_config(text), NAMES, by_label=False)["metadata"]["annotations"][
            SPEC_HASH_ANNOTATION
        ]
        for text in ("", "hostNetwork: true", "forwardMode: iptables")
    }
    assert len(hashes) == 3


def test_nodes_are_chosen_by_the_enable_label_and_the_services_pool() -> None:
    pooled = service(labels={POOL: "edge"})
    assert (
        "nodeSelector"
        not in daemon_set(pooled, ServiceLBConfig(), NAMES, by_label=False)["spec"]["template"][
            "spec"
        ]
    ), "the pool counts only while the enable label is in use (k3s)"
    body = daemon_set(pooled, ServiceLBConfig(), NAMES, by_label=True)
    assert body["spec"]["template"]["spec"]["nodeSelector"] == {ENABLE: "true", POOL: "edge"}
    assert body["metadata"]["labels"][NAMES.node_selector] == "true"


def test_the_priority_class_annotation_and_the_config() -> None:
    config = load_config(b"priorityClassName: svclb\nimage: reg.example/kube-ccm:0.2.0\n")
    body = daemon_set(service(), config, NAMES, by_label=False)
    assert body["spec"]["template"]["spec"]["priorityClassName"] == "svclb"
    assert (
        body["spec"]["template"]["spec"]["containers"][0]["image"] == "reg.example/kube-ccm:0.2.0"
    )
    annotated = service(annotations={NAMES.priority_class: "high"})
    body = daemon_set(annotated, config, NAMES, by_label=False)
    assert body["spec"]["template"]["spec"]["priorityClassName"] == "high"


@pytest.mark.parametrize(
    "text",
    [
        "namespace: Kube_System",
        "image: ''",
        "imagePullPolicy: Sometimes",
        "forwardMode: ebpf",
        "hostNetwork: maybe",
        "labelDomain: ''",
        "nonsense: 1",
        "reservedPorts: [70000]",
        "maxPortsPerService: -1",
        "maxServicesPerNamespace: -2",
        "allowedPriorityClasses: [Not_A_Name]",
        "resources: {limit: {cpu: 1}}",
        "resources: {limits: {gpu: 1}}",
        "resources: {limits: {cpu: lots}}",
        "localTrafficAddresses: endpoints",
    ],
)
def test_a_bad_cloud_config_is_one_line_naming_the_key(text: str) -> None:
    with pytest.raises(InvalidCloudConfigError):
        load_config(text)


def test_local_traffic_addresses_default_to_all_nodes_and_keep_k3s_s_rule_reachable() -> None:
    assert load_config(None).local_traffic_addresses == "allNodes"
    k3s = load_config(b"localTrafficAddresses: endpointNodes\n")
    assert k3s.local_traffic_addresses == "endpointNodes"
    with pytest.raises(InvalidCloudConfigError, match=r"allNodes.*endpointNodes"):
        load_config(b"localTrafficAddresses: some\n")


def test_no_cloud_config_is_k3s_defaults() -> None:
    config = factory(None).config
    assert (config.namespace, config.label_domain) == ("kube-system", "svccontroller.k3s.cattle.io")


def test_the_default_image_comes_from_the_environment_unless_the_config_names_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KUBE_CCM_SERVICELB_IMAGE", "registry.example/kube-ccm:0.4.0")
    assert factory(None).config.image == "registry.example/kube-ccm:0.4.0"
    assert factory(b"namespace: svclb\n").config.image == "registry.example/kube-ccm:0.4.0"
    assert factory(b"image: mine:1\n").config.image == "mine:1"
    monkeypatch.setenv("KUBE_CCM_SERVICELB_IMAGE", "")
    assert factory(None).config.image == "kube-ccm:latest"
    monkeypatch.setenv("KUBE_CCM_SERVICELB_IMAGE", "bad image")
    with pytest.raises(InvalidCloudConfigError, match="KUBE_CCM_SERVICELB_IMAGE"):
        factory(None)


def test_the_default_priority_class_comes_from_the_environment_unless_the_config_names_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert factory(None).config.priority_class_name == "", "none by default"
    monkeypatch.setenv("KUBE_CCM_SERVICELB_PRIORITY_CLASS", "svclb")
    assert factory(None).config.priority_class_name == "svclb"
    assert factory(b"priorityClassName: ''\n").config.priority_class_name == ""
    monkeypatch.setenv("KUBE_CCM_SERVICELB_PRIORITY_CLASS", "Not_A_Name")
    with pytest.raises(InvalidCloudConfigError, match="priorityClassName"):
        factory(None)


def test_the_shipped_daemonset_policy_matches_servicelb_s_defaults() -> None:
    """deploy/admission-policies.yaml's DaemonSet policy expects what servicelb builds
    with its defaults, and refuses the same well-known ports."""
    deploy = Path(__file__).resolve().parents[3] / "deploy" / "admission-policies.yaml"
    [policy] = [
        d
        for d in yaml.safe_load_all(deploy.read_text())
        if d
        and d["kind"] == "ValidatingAdmissionPolicy"
        and d["metadata"]["name"] == "cloud-controller-manager-daemonsets"
    ]
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    config = ServiceLBConfig()
    assert variables["svclbNamespace"] == f"'{config.namespace}'"
    assert variables["image"] == f"'{config.image}'"
    assert variables["labelDomain"] == f"'{config.label_domain}'"
    assert variables["priorityClasses"] == "['']"
    assert variables["hostNetwork"] == str(config.host_network).lower()
    assert yaml.safe_load(variables["reservedPorts"]) == sorted(WELL_KNOWN_PORTS)


# -- the ingress rule -----------------------------------------------------------------------


def _node(name: str, *addresses: tuple[str, str]) -> Node:
    return Node(
        metadata=ObjectMeta(name=name),
        status=NodeStatus(addresses=tuple(NodeAddress(type=t, address=a) for t, a in addresses)),
    )


def test_external_ips_win_else_internal_ones_filtered_and_ordered_by_families() -> None:
    nodes = {
        "a": _node("a", ("InternalIP", "10.0.0.2"), ("InternalIP", "fd00::2")),
        "b": _node("b", ("InternalIP", "10.0.0.10"), ("Hostname", "b")),
    }
    dual = service(families=("IPv6", "IPv4"))
    assert [
        i.ip for i in ingress(dual, node_addresses(nodes.values()), {"a", "b", "gone"}).ingress
    ] == [
        "fd00::2",
        "10.0.0.10",
        "10.0.0.2",
    ]
    assert all(
        i.ip_mode == "VIP" for i in ingress(dual, node_addresses(nodes.values()), {"a"}).ingress
    )
    nodes["c"] = _node("c", ("InternalIP", "10.0.0.3"), ("ExternalIP", "203.0.113.3"))
    assert [
        i.ip for i in ingress(service(), node_addresses(nodes.values()), {"a", "c"}).ingress
    ] == ["203.0.113.3"]
    assert ingress(service(), node_addresses(nodes.values()), set()) == LoadBalancerStatus()


def test_only_ready_pod_endpoints_with_a_node_count_for_local() -> None:
    svc = service()
    raw = endpoint_slice(svc, {"n1": True, "n2": False})
    raw["endpoints"].append({"addresses": ["10.0.0.9"], "conditions": {"ready": True}})
    raw["endpoints"].append(
        {"addresses": ["10.0.0.8"], "nodeName": "n3", "conditions": {"ready": True}}
    )
    assert endpoint_nodes([decode(EndpointSlice, encode(raw))]) == {"n1"}
    # The API server sends `endpoints: null` for a slice of a Service with no pods yet.
    empty = endpoint_slice(svc, {})
    empty["endpoints"] = None
    assert endpoint_nodes([decode(EndpointSlice, encode(empty))]) == frozenset()


# -- ensure, update, delete -----------------------------------------------------------------


async def test_ensure_creates_the_daemonset_once_and_reports_ready_nodes(bed: Bed) -> None:
    svc = service()
    assert await bed.ensure(svc) == [], "no pod is ready yet"
    assert bed.ds(svc)["metadata"]["annotations"][SPEC_HASH_ANNOTATION]
    assert bed.reasons() == [APPLIED_DAEMON_SET_REASON]
    writes = len(bed.fake.writes())
    await bed.put(svclb_pod(svc, "n1"))
    await bed.put(svclb_pod(svc, "n2", ready=False))
    assert await bed.ensure(svc) == ["10.0.0.1"]
    assert len(bed.fake.writes()) == writes, "an unchanged DaemonSet is not written again"
    assert await bed.lb.get_load_balancer("kubernetes", svc) == await bed.lb.ensure_load_balancer(
        "kubernetes", svc, []
    )
    await bed.lb.update_load_balancer("kubernetes", svc, [])
    assert len(bed.fake.writes()) == writes


def kubernetes_service(cluster_ip: str) -> dict[str, Any]:
    """kube-apiserver's own Service, as it writes it."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "kubernetes", "namespace": "default"},
        "spec": {"clusterIP": cluster_ip, "clusterIPs": [cluster_ip], "ports": [{"port": 443}]},
    }


def kubernetes_slice(*addresses: str) -> dict[str, Any]:
    """kube-apiserver's EndpointSlice of the ``kubernetes`` Service."""
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": "kubernetes",
            "namespace": "default",
            "labels": {"kubernetes.io/service-name": "kubernetes"},
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": list(addresses), "conditions": {"ready": True}}],
    }


async def test_a_node_s_addresses_that_may_be_another_host_s_are_not_published_but_told(
    bed: Bed,
) -> None:
    asked: list[str] = []
    bed.lb.set_resync(asked.append)
    svc = service()
    await bed.ensure(svc)
    await bed.put(svclb_pod(svc, "n1"))
    await bed.put(svclb_pod(svc, "n2"))
    assert await bed.ensure(svc) == ["10.0.0.1", "10.0.0.2"]
    # kube-apiserver's Service and address come: every Service is synced again.
    asked.clear()
    await bed.put(kubernetes_service("10.43.0.1"))
    await bed.put(kubernetes_slice("192.0.2.10"))
    await eventually(lambda: bool(bed.provider.address_rules().cluster_ips), "ClusterIP cached")
    assert "default/web" in asked
    # n2, with its own identity, reports kube-apiserver's ClusterIP and address, an
    # outside host's and n1's own, all as ExternalIPs.
    asked.clear()
    await bed.put(node("n2", internal="10.0.0.2", external="10.43.0.1,192.0.2.10,10.0.0.1"))
    assert "default/web" in asked
    assert await bed.ensure(svc) == ["10.0.0.2"], "not one of them; n1's address is contested"
    told = {
        (e.ref.kind, e.ref.name, e.type, e.message.split(" as a LoadBalancer")[0])
        for e in bed.recorder.events
        if e.reason == NODE_ADDRESS_NOT_PUBLISHED_REASON
    }
    assert told == {
        ("Node", "n2", "Warning", "ServiceLB does not publish this Node's ExternalIP 10.43.0.1"),
        ("Node", "n2", "Warning", "ServiceLB does not publish this Node's ExternalIP 192.0.2.10"),
        ("Node", "n2", "Warning", "ServiceLB does not publish this Node's ExternalIP 10.0.0.1"),
        ("Node", "n1", "Warning", "ServiceLB does not publish this Node's InternalIP 10.0.0.1"),
    }
    [contested] = [
        m for m in bed.messages(NODE_ADDRESS_NOT_PUBLISHED_REASON) if "InternalIP 10.0.0.1" in m
    ]
    assert "Node n2 reports it too" in contested
    assert "check it" in contested
    # Told once per address: a resync repeats nothing; no Event on the Service for it.
    count = len(bed.recorder.events)
    await bed.ensure(svc)
    assert len(bed.recorder.events) == count
    assert all(
        e.ref.kind == "Node"
        for e in bed.recorder.events
        if e.reason == NODE_ADDRESS_NOT_PUBLISHED_REASON
    )
    # Hundreds of junk values: refused, a few told (quoted, cut), none published.
    junk = [{"type": "InternalIP", "address": f"x{i}" + "y" * 300} for i in range(200)]
    flooding = node("n3", internal="10.0.0.3")
    flooding["status"]["addresses"] += junk
    count = len(bed.recorder.events)
    await bed.put(flooding)
    await bed.ensure(svc)
    told_now = [e.message for e in bed.recorder.events[count:] if e.ref.name == "n3"]
    assert len(told_now) == 8
    assert all("'x" in m and "y" * 70 not in m for m in told_now)
    await bed.put(node("n3", internal="10.0.0.3"))
    # The node gives them up: both nodes are published again.
    await bed.put(node("n2", internal="10.0.0.2"))
    assert await bed.ensure(svc) == ["10.0.0.1", "10.0.0.2"]
    # A new Node claiming n1's address has every Service synced
    # at once, without a svclb pod of its own: n1's address leaves the status.
    asked.clear()
    await bed.put(node("n4", internal="10.0.0.1"))
    assert "default/web" in asked
    assert await bed.ensure(svc) == ["10.0.0.2"]


async def test_a_pod_being_deleted_no_longer_counts(bed: Bed) -> None:
    svc = service()
    await bed.ensure(svc)
    await bed.put(svclb_pod(svc, "n1"))
    leaving = svclb_pod(svc, "n2")
    leaving["metadata"]["deletionTimestamp"] = "2026-11-26T00:00:00Z"
    await bed.put(leaving)
    assert await bed.ensure(svc) == ["10.0.0.1"]


async def test_a_port_change_replaces_the_pod_template_so_the_pods_roll(bed: Bed) -> None:
    svc = service()
    await bed.ensure(svc)
    before = bed.ds(svc)
    changed = service(ports=(("TCP", 8080, 30080),))
    await bed.ensure(changed)
    after = bed.ds(svc)
    assert [c["name"] for c in after["spec"]["template"]["spec"]["containers"]] == ["lb-tcp-8080"]
    assert after["metadata"]["generation"] > before["metadata"]["generation"]
    assert after["metadata"]["uid"] == before["metadata"]["uid"], "replaced, not re-created"


async def test_delete_removes_the_daemonset_and_is_idempotent(bed: Bed) -> None:
    svc = service()
    await bed.ensure(svc)
    await bed.lb.ensure_load_balancer_deleted("kubernetes", svc)
    await bed.caught_up()
    assert bed.daemon_sets() == {}
    assert await bed.lb.get_load_balancer("kubernetes", svc) is None
    await bed.lb.ensure_load_balancer_deleted("kubernetes", svc)
    assert bed.reasons() == [APPLIED_DAEMON_SET_REASON, DELETED_DAEMON_SET_REASON]


async def test_the_daemonset_lives_in_the_configured_namespace() -> None:
    fake = FakeApiServer(resources=RESOURCES)
    provider = factory(b"namespace: svclb\n")
    await provider.initialize(FakeClientBuilder(fake), asyncio.Event())
    try:
        await provider.load_balancer().ensure_load_balancer("kubernetes", service(), [])
        assert [
            o["metadata"]["name"] for o in fake.objects("/apis/apps/v1/namespaces/svclb/daemonsets")
        ] == [daemon_set_name(service())]
        assert fake.objects(DS_PREFIX) == []
    finally:
        await provider.aclose()


# -- node choice ----------------------------------------------------------------------------


async def test_once_a_node_has_the_enable_label_only_true_nodes_serve(bed: Bed) -> None:
    svc = service()
    await bed.ensure(svc)
    assert "nodeSelector" not in bed.ds(svc)["spec"]["template"]["spec"]
    await bed.put(node("n1", internal="10.0.0.1", labels={ENABLE: "true"}))
    await bed.put(node("n2", internal="10.0.0.2", labels={ENABLE: "false"}))
    await bed.ensure(svc)
    assert bed.ds(svc)["spec"]["template"]["spec"]["nodeSelector"] == {ENABLE: "true"}
    assert NO_ENABLED_NODES_REASON not in bed.reasons()


async def test_a_label_change_on_a_node_resyncs_every_servicelb_service(bed: Bed) -> None:
    asked: list[str] = []
    bed.lb.set_resync(asked.append)
    await bed.ensure(service("web"))
    await bed.ensure(service("api", ports=(("TCP", 8080, 30081),)))
    asked.clear()
    await bed.put(node("n1", internal="10.0.0.1", labels={ENABLE: "false"}))
    assert sorted(asked) == ["default/api", "default/web"]
    asked.clear()
    await bed.put(node("n1", internal="10.0.0.1", labels={ENABLE: "false", "other": "x"}))
    assert asked == [], "a label ServiceLB does not read changes nothing"
    await bed.put(node("n4", internal="10.0.0.4"))
    assert asked == [], "a new Node's pod, not the Node, changes a status"
    await bed.put(node("n5", internal="10.0.0.5", labels={ENABLE: "true"}))
    assert sorted(asked) == ["default/api", "default/web"], "it turns label selection on"


async def test_nodes_that_all_lack_the_enable_label_are_an_event_and_the_daemonset_stays(
    bed: Bed,
) -> None:
    for name in ("n1", "n2", "n3"):
        await bed.put(node(name, internal="10.0.0.9", labels={ENABLE: "false"}))
    svc = service()
    assert await bed.ensure(svc) == []
    assert bed.ds(svc)["spec"]["template"]["spec"]["nodeSelector"] == {ENABLE: "true"}
    [message] = bed.messages(NO_ENABLED_NODES_REASON)
    assert f"{ENABLE}=true" in message
    await bed.ensure(svc)
    assert bed.reasons().count(NO_ENABLED_NODES_REASON) == 1, "told once per state"
    pooled = service("pooled", labels={POOL: "edge"})
    await bed.put(node("n1", internal="10.0.0.1", labels={ENABLE: "true"}))
    await bed.ensure(pooled)
    assert f"{POOL}=edge" in bed.messages(NO_ENABLED_NODES_REASON)[-1]


# -- bad input ------------------------------------------------------------------------------


async def test_two_services_wanting_one_port_on_the_same_nodes_get_an_event(
    bed: Bed,
) -> None:
    first, second = service("web"), service("web2", namespace="team-b")
    await bed.ensure(first)
    with pytest.raises(ServiceLBError, match="another Service"):
        await bed.ensure(second)
    [message] = bed.messages(PORT_CONFLICT_REASON)
    assert "default/web" not in message, "another namespace's Service is not named"
    assert "web " not in message
    assert "another Service" in message
    assert "team-b/web2" in message
    assert "80/TCP" in message
    assert list(bed.daemon_sets()) == [daemon_set_name(first)], "nothing made for the second"
    await bed.ensure(first)  # the first one is left alone
    asked: list[str] = []
    bed.lb.set_resync(asked.append)
    await bed.lb.ensure_load_balancer_deleted("kubernetes", first)
    await bed.caught_up()
    assert "team-b/web2" in asked, "the refused Service is tried again once the port is free"
    await bed.ensure(second)
    assert list(bed.daemon_sets()) == [daemon_set_name(second)]
    other_protocol = service("dns", ports=(("UDP", 80, 30082),))
    await bed.ensure(other_protocol)
    assert daemon_set_name(other_protocol) in bed.daemon_sets()


async def stored(bed: Bed, svc: dict[str, Any]) -> None:
    """``svc`` in the fake and in the provider's Service cache as it is now."""
    bed.fake.put_object(svc)
    body = bed.fake.object(
        f"/api/v1/namespaces/{svc['metadata']['namespace']}/services/{svc['metadata']['name']}"
    )
    assert body is not None
    services = bed.provider._services
    assert services is not None
    key = f"{svc['metadata']['namespace']}/{svc['metadata']['name']}"
    await eventually(
        lambda: (
            (cached := services.get(key)) is not None
            and cached.metadata.resource_version == body["metadata"]["resourceVersion"]
        ),
        f"{key} cached",
    )


async def test_a_port_is_free_for_others_once_its_service_is_being_deleted(bed: Bed) -> None:
    """A port held by a Service being deleted (its namespace too) is given at once to the
    Service waiting for it, before the holder's DaemonSet and pods are gone; no one else
    can free it."""
    first, second = service("web"), service("web2", namespace="team-b")
    await stored(bed, service_body(first))
    await stored(bed, service_body(second))
    await bed.ensure(first)
    with pytest.raises(ServiceLBError, match="another Service"):
        await bed.ensure(second)
    asked: list[str] = []
    bed.lb.set_resync(asked.append)
    # Another Service's changes, or the holder's other changes, free nothing.
    await stored(bed, service_body(service("web3", namespace="team-b")))
    changed = service_body(first)
    changed["metadata"]["labels"] = {"tier": "front"}
    await stored(bed, changed)
    assert "team-b/web2" not in asked
    with pytest.raises(ServiceLBError, match="another Service"):
        await bed.ensure(second)
    # The holder is being deleted: its DaemonSet is still there, its port is free.
    changed["metadata"]["deletionTimestamp"] = "2026-11-28T00:00:00Z"
    changed["metadata"]["finalizers"] = ["service.kubernetes.io/load-balancer-cleanup"]
    await stored(bed, changed)
    assert "team-b/web2" in asked, "the waiting Service is tried again at once"
    await bed.ensure(second)
    assert set(bed.daemon_sets()) == {daemon_set_name(first), daemon_set_name(second)}
    # Now the second holds it: a third Service is refused as before.
    third = service("web4", namespace="team-c")
    await stored(bed, service_body(third))
    with pytest.raises(ServiceLBError, match="another Service"):
        await bed.ensure(third)


async def test_a_port_is_free_once_its_service_is_no_longer_a_load_balancer(bed: Bed) -> None:
    first, second = service("web"), service("web2", namespace="team-b")
    await stored(bed, service_body(first))
    await stored(bed, service_body(second))
    await bed.ensure(first)
    with pytest.raises(ServiceLBError, match="another Service"):
        await bed.ensure(second)
    asked: list[str] = []
    bed.lb.set_resync(asked.append)
    changed = service_body(first)
    changed["spec"]["type"] = "ClusterIP"
    await stored(bed, changed)
    assert "team-b/web2" in asked
    await bed.ensure(second)
    assert daemon_set_name(second) in bed.daemon_sets()


async def test_a_port_is_free_once_the_holder_s_daemonset_is_being_deleted(bed: Bed) -> None:
    first, second = service("web"), service("web2", namespace="team-b")
    await stored(bed, service_body(first))
    await stored(bed, service_body(second))
    await bed.ensure(first)
    with pytest.raises(ServiceLBError, match="another Service"):
        await bed.ensure(second)
    asked: list[str] = []
    bed.lb.set_resync(asked.append)
    ds = bed.ds(first)
    ds["metadata"]["deletionTimestamp"] = "2026-11-28T00:00:00Z"
    ds["metadata"]["finalizers"] = ["foregroundDeletion"]
    await bed.put(ds)
    assert "team-b/web2" in asked
    await bed.ensure(second)
    assert daemon_set_name(second) in bed.daemon_sets()


async def test_services_in_different_pools_may_share_a_port(bed: Bed) -> None:
    await bed.put(node("n1", internal="10.0.0.1", labels={ENABLE: "true", POOL: "a"}))
    await bed.put(node("n2", internal="10.0.0.2", labels={ENABLE: "true", POOL: "b"}))
    await bed.ensure(service("web", labels={POOL: "a"}))
    await bed.ensure(service("web2", labels={POOL: "b"}))
    assert len(bed.daemon_sets()) == 2
    assert PORT_CONFLICT_REASON not in bed.reasons()


async def test_a_port_taken_on_a_node_is_an_event_naming_the_node(bed: Bed) -> None:
    svc = service()
    await bed.ensure(svc)
    await bed.put(svclb_pod(svc, "n1"))
    await bed.put(
        svclb_pod(
            svc,
            "n2",
            ready=False,
            scheduled=(
                "False",
                "0/3 nodes are available: 1 node(s) didn't have free ports for the "
                "requested pod ports.",
            ),
        )
    )
    assert await bed.ensure(svc) == ["10.0.0.1"]
    [message] = bed.messages(HOST_PORT_IN_USE_REASON)
    assert "node n2" in message
    assert "80/TCP" in message


async def test_a_port_still_held_by_a_deleted_service_s_pod_is_no_event(bed: Bed) -> None:
    """The port passing on: the next Service's pod waits for the old forwarder to stop
    on that node, which is no port taken by something else (no ``HostPortInUse``)."""
    old, new = service("old"), service("new", namespace="team-b")
    await stored(bed, service_body(old))
    await stored(bed, service_body(new))
    await bed.ensure(old)
    leaving = svclb_pod(old, "n2")
    leaving["spec"]["containers"] = [
        {"name": "lb-tcp-80", "ports": [{"containerPort": 80, "hostPort": 80, "protocol": "TCP"}]}
    ]
    await bed.put(leaving)
    deleting = service_body(old)
    deleting["metadata"]["deletionTimestamp"] = "2026-11-28T00:00:00Z"
    deleting["metadata"]["finalizers"] = ["service.kubernetes.io/load-balancer-cleanup"]
    await stored(bed, deleting)
    await bed.ensure(new)
    pending = svclb_pod(
        new,
        "n2",
        ready=False,
        scheduled=("False", "0/3 nodes are available: 1 node(s) didn't have free ports."),
    )
    await bed.put(pending)
    await bed.ensure(new)
    assert HOST_PORT_IN_USE_REASON not in bed.reasons()
    # A pod of a port taken by anything else on another node is still told.
    await bed.put(
        svclb_pod(
            new,
            "n3",
            ready=False,
            scheduled=("False", "0/3 nodes are available: 1 node(s) didn't have free ports."),
        )
    )
    await bed.ensure(new)
    [message] = bed.messages(HOST_PORT_IN_USE_REASON)
    assert "node n3" in message
    assert "n2" not in message


async def test_a_service_in_the_same_namespace_is_named_in_the_port_conflict(bed: Bed) -> None:
    await bed.ensure(service("web"))
    with pytest.raises(ServiceLBError, match="default/web "):
        await bed.ensure(service("web2"))
    [message] = bed.messages(PORT_CONFLICT_REASON)
    assert "for Service default/web on node" in message


async def test_a_missing_priority_class_is_an_event_and_no_daemonset(bed: Bed) -> None:
    bed.provider.config = msgspec.structs.replace(
        bed.provider.config, allowed_priority_classes=("gold",)
    )
    svc = service(annotations={NAMES.priority_class: "gold"})
    with pytest.raises(ServiceLBError, match="gold"):
        await bed.ensure(svc)
    assert bed.daemon_sets() == {}
    assert "does not exist" in bed.messages(PRIORITY_CLASS_NOT_FOUND_REASON)[0]
    bed.fake.put_object(
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": "gold"},
            "value": 1000,
        }
    )
    await bed.ensure(svc)
    assert bed.ds(svc)["spec"]["template"]["spec"]["priorityClassName"] == "gold"
    lookups = bed.fake.count("GET", "/apis/scheduling.k8s.io/v1/priorityclasses")
    await bed.ensure(service("builtin", ports=(("TCP", 81, 30083),)))
    assert bed.fake.count("GET", "/apis/scheduling.k8s.io/v1/priorityclasses") == lookups


def configure(bed: Bed, **changes: Any) -> None:
    bed.provider.config = msgspec.structs.replace(bed.provider.config, **changes)


def kubelet_node(name: str, ip: str, port: int) -> dict[str, Any]:
    """A Node reporting its kubelet on ``port`` (as the node itself writes it)."""
    obj = node(name, internal=ip)
    obj["status"]["daemonEndpoints"] = {"kubeletEndpoint": {"Port": port}}
    return obj


@pytest.mark.parametrize(
    ("port", "what"),
    [
        (10250, "the kubelet's port"),
        (10255, "the kubelet's read-only port"),
        (10249, "kube-proxy's metrics port"),
        (10256, "kube-proxy's healthz port"),
        (6443, "kube-apiserver's secure port"),
        (2379, "etcd's client port"),
        (10259, "kube-scheduler's secure port"),
    ],
)
async def test_a_service_on_a_system_port_is_refused_with_an_event(
    bed: Bed, port: int, what: str
) -> None:
    for protocol in ("TCP", "UDP"):
        svc = service(f"sys-{protocol.lower()}", ports=((protocol, port, 30080),))
        with pytest.raises(ServiceLBError, match="will not take port"):
            await bed.ensure(svc)
    [message] = set(bed.messages(HOST_PORT_RESERVED_REASON))
    assert f"{port} is {what}" in message
    assert "Use another port" in message
    assert bed.daemon_sets() == {}, "no DaemonSet, so no hostPort"


async def test_a_daemonset_already_on_a_system_port_is_deleted(bed: Bed) -> None:
    """One made before the fix (or by k3s's rules) would keep the kubelet's port."""
    svc = service(ports=(("TCP", 10250, 30080),))
    body = daemon_set(svc, ServiceLBConfig(), NAMES, by_label=False)
    await bed.put(body)
    with pytest.raises(ServiceLBError, match="the kubelet's port"):
        await bed.ensure(svc)
    await bed.caught_up()
    assert bed.daemon_sets() == {}
    assert bed.reasons() == [DELETED_DAEMON_SET_REASON, HOST_PORT_RESERVED_REASON]


async def test_the_operator_reserves_more_ports_or_turns_the_system_ports_off(bed: Bed) -> None:
    configure(bed, reserved_ports=(8443,))
    with pytest.raises(ServiceLBError, match="8443 is reserved by the cluster operator"):
        await bed.ensure(service("admin", ports=(("TCP", 8443, 30080),)))
    configure(bed, reserved_ports=(), reserve_system_ports=False)
    kubelet = service("k3s-way", ports=(("TCP", 10250, 30081),))
    await bed.ensure(kubelet)  # k3s's rule: any port
    assert (
        bed.ds(kubelet)["spec"]["template"]["spec"]["containers"][0]["ports"][0]["hostPort"]
        == 10250
    )


async def test_a_node_s_reported_kubelet_port_is_refused_but_never_taken_away(bed: Bed) -> None:
    held = service("held", ports=(("TCP", 12000, 30080),))
    await bed.ensure(held)
    asked: list[str] = []
    bed.lb.set_resync(asked.append)
    # n2 claims the port a Service already holds, and another one.
    await bed.put(kubelet_node("n2", "10.0.0.2", 12000))
    await bed.put(kubelet_node("n3", "10.0.0.3", 12001))
    await bed.ensure(held)
    assert daemon_set_name(held) in bed.daemon_sets(), "a node cannot take a port away"
    fresh = service("fresh", ports=(("TCP", 12001, 30081),))
    with pytest.raises(ServiceLBError, match="12001 is the kubelet port Node n3 reports"):
        await bed.ensure(fresh)
    assert daemon_set_name(fresh) not in bed.daemon_sets()
    # A node reporting the well-known port changes nothing; one that stops claiming
    # 12001 gets the refused Service tried again at once.
    asked.clear()
    await bed.put(kubelet_node("n3", "10.0.0.3", 10250))
    assert "default/fresh" in asked
    await bed.ensure(fresh)
    assert daemon_set_name(fresh) in bed.daemon_sets()


async def test_a_service_cannot_choose_a_priority_class_the_operator_did_not_allow(
    bed: Bed,
) -> None:
    critical = service(annotations={NAMES.priority_class: "system-node-critical"})
    with pytest.raises(ServiceLBError, match="does not let Services choose"):
        await bed.ensure(critical)
    [message] = bed.messages(PRIORITY_CLASS_NOT_ALLOWED_REASON)
    assert "'system-node-critical'" in message
    assert bed.daemon_sets() == {}
    # No class at all is always allowed; so is one the operator lists, or configures.
    none = service("none", ports=(("TCP", 82, 0),), annotations={NAMES.priority_class: ""})
    await bed.ensure(none)
    assert "priorityClassName" not in bed.ds(none)["spec"]["template"]["spec"]
    configure(bed, allowed_priority_classes=("system-node-critical",))
    await bed.ensure(service(annotations={NAMES.priority_class: "system-node-critical"}))
    configure(bed, allowed_priority_classes=(), priority_class_name="system-cluster-critical")
    chosen = service("chosen", ports=(("TCP", 81, 30081),))
    await bed.ensure(chosen)
    spec = bed.ds(chosen)["spec"]["template"]["spec"]
    assert spec["priorityClassName"] == "system-cluster-critical"


async def test_a_service_with_more_ports_than_the_cap_is_refused(bed: Bed) -> None:
    ports = tuple(("TCP", 9000 + i, 30000 + i) for i in range(9))
    with pytest.raises(ServiceLBError, match="9 ports"):
        await bed.ensure(service("many", ports=ports))
    [message] = bed.messages(TOO_MANY_PORTS_REASON)
    assert "at most 8" in message
    assert "maxPortsPerService" in message
    assert bed.daemon_sets() == {}
    await bed.ensure(service("eight", ports=ports[:8]))
    configure(bed, max_ports_per_service=0)
    await bed.ensure(service("many", ports=tuple(("TCP", 9100 + i, 0) for i in range(40))))
    assert len(bed.daemon_sets()) == 2


async def test_a_namespace_gets_at_most_its_cap_of_daemonsets(bed: Bed) -> None:
    configure(bed, max_services_per_namespace=2)
    first, second = (service(f"s{i}", ports=(("TCP", 8000 + i, 0),)) for i in range(2))
    await bed.ensure(first)
    await bed.ensure(second)
    third = service("s2", ports=(("TCP", 8002, 0),))
    with pytest.raises(ServiceLBError, match="already has 2"):
        await bed.ensure(third)
    [message] = bed.messages(DAEMON_SET_LIMIT_REASON)
    assert "maxServicesPerNamespace" in message
    assert daemon_set_name(third) not in bed.daemon_sets()
    await bed.ensure(service("s0", ports=(("TCP", 8010, 0),)))  # a kept one still changes
    await bed.ensure(service("s2", namespace="team-b", ports=(("TCP", 8003, 0),)))
    asked: list[str] = []
    bed.lb.set_resync(asked.append)
    await bed.lb.ensure_load_balancer_deleted("kubernetes", first)
    await bed.caught_up()
    assert "default/s2" in asked, "tried again once the namespace is under its cap"
    await bed.ensure(third)
    assert daemon_set_name(third) in bed.daemon_sets()


def test_the_forwarders_resources_are_configurable() -> None:
    config = load_config(b"resources: {requests: {cpu: 50m}, limits: {memory: 1Gi}}\n")
    body = daemon_set(service(), config, NAMES, by_label=False)
    [forwarder] = body["spec"]["template"]["spec"]["containers"]
    assert forwarder["resources"] == {"requests": {"cpu": "50m"}, "limits": {"memory": "1Gi"}}
    body = daemon_set(service(), load_config(b"resources: {}\n"), NAMES, by_label=False)
    assert "resources" not in body["spec"]["template"]["spec"]["containers"][0]


async def test_a_service_without_ports_is_an_event(bed: Bed) -> None:
    with pytest.raises(ServiceLBError, match="no ports"):
        await bed.ensure(service(ports=()))
    assert bed.reasons() == [NO_PORTS_REASON]
    assert bed.daemon_sets() == {}


K3S_TOLERATIONS = (
    '[{"key":"node-role.kubernetes.io/master","operator":"Exists","effect":"NoSchedule"}]'
)
"""k3s's documented form (its traefik HelmChartConfig example): a JSON list."""


@pytest.mark.parametrize(
    "text",
    [
        K3S_TOLERATIONS.replace("master", "dedicated"),
        "- key: node-role.kubernetes.io/dedicated\n  operator: Exists\n  effect: NoSchedule\n",
    ],
)
def test_the_tolerations_annotation_adds_to_the_pods_as_k3s_when_allowed(text: str) -> None:
    """Issue 39 item 3: k3s's ``getTolerations``: JSON, else YAML, appended to the
    defaults; ``operator`` defaults to Equal."""
    allowed = ServiceLBConfig(service_tolerations=True)
    pod = _pod(allowed, service(annotations={"svccontroller.k3s.cattle.io/tolerations": text}))
    assert pod["tolerations"][-1] == {
        "key": "node-role.kubernetes.io/dedicated",
        "operator": "Exists",
        "effect": "NoSchedule",
    }
    assert len(pod["tolerations"]) == len(_pod(allowed)["tolerations"]) + 1
    equal = service(annotations={NAMES.tolerations: '[{"key": "gpu", "value": "yes"}]'})
    assert _pod(allowed, equal)["tolerations"][-1] == {
        "key": "gpu",
        "value": "yes",
        "operator": "Equal",
    }


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("not a list", "is not a list of tolerations"),
        ('[{"value": "x"}]', "empty key must have operator 'Exists'"),
        ('[{"key": "a", "operator": "Exists", "value": "x"}]', "must have an empty value"),
        ('[{"key": "a", "operator": "Like"}]', "operator 'Like' is not Equal or Exists"),
        ('[{"key": "a", "effect": "NoWay"}]', "effect 'NoWay' is not one of"),
        ('[{"key": "a", "tolerationSeconds": 5}]', "with effect NoExecute only"),
        ('[{"key": "a", "nodeName": "n1"}]', "unknown field 'nodeName'"),
    ],
)
def test_a_bad_tolerations_annotation_is_refused_saying_what_to_change(
    text: str, said: str
) -> None:
    allowed = ServiceLBConfig(service_tolerations=True)
    with pytest.raises(TolerationsError, match=re.escape(said)) as error:
        _pod(allowed, service(annotations={NAMES.tolerations: text}))
    assert NAMES.tolerations in str(error.value)


async def test_the_tolerations_annotation_is_an_event_unless_an_admin_allowed_it(
    bed: Bed,
) -> None:
    """A Service's tolerations put its host ports on tainted nodes: by default refused
    with an ``InvalidTolerations`` Event naming the cloud-config key; no DaemonSet."""
    svc = service(annotations={NAMES.tolerations: K3S_TOLERATIONS})
    with pytest.raises(ServiceLBError, match="serviceTolerations: true"):
        await bed.ensure(svc)
    assert bed.reasons() == ["InvalidTolerations"]
    assert bed.daemon_sets() == {}


# -- the status follows the pods, through the service controller ------------------------------


@pytest.fixture
async def running(bed: Bed) -> AsyncIterator[tuple[Bed, Informer[Service]]]:
    async with run_controller(bed) as services:
        yield bed, services


@contextlib.asynccontextmanager
async def run_controller(bed: Bed) -> AsyncIterator[Informer[Service]]:
    """The service controller over ``bed``'s provider, on its own Service informer."""
    client = bed.fake.client()
    services: Informer[Service] = Informer(client, SERVICES)
    nodes = bed.provider._nodes
    assert nodes is not None
    controller = ServiceController(
        client=client,
        services=services,
        nodes=nodes,
        cloud=guarded(bed.provider),
        recorder=FakeEventRecorder(),
        metrics=Metrics(),
        options=ServiceControllerOptions(
            node_sync_window=0.0,
            classes=LoadBalancerClasses(frozenset({"kube-ccm.io/servicelb"}), unclassed=True),
        ),
    )
    tasks = [asyncio.create_task(services.run()), asyncio.create_task(controller.run())]
    try:
        yield services
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await client.aclose()


def ips(fake: FakeApiServer, name: str = "web") -> list[str]:
    stored = fake.object(f"/api/v1/namespaces/default/services/{name}") or {}
    return [
        i["ip"] for i in (stored.get("status", {}).get("loadBalancer", {}).get("ingress") or [])
    ]


async def test_the_status_follows_pods_labels_and_deletion(
    running: tuple[Bed, Informer[Service]],
) -> None:
    bed, _ = running
    svc = service()
    bed.fake.put_object(service_body(svc))
    await eventually(lambda: daemon_set_name(svc) in bed.daemon_sets(), "the DaemonSet")
    bed.fake.put_object(svclb_pod(svc, "n1"))
    bed.fake.put_object(svclb_pod(svc, "n2"))
    await eventually(lambda: ips(bed.fake) == ["10.0.0.1", "10.0.0.2"], "both nodes listed")
    bed.fake.put_object(svclb_pod(svc, "n2", ready=False))
    await eventually(lambda: ips(bed.fake) == ["10.0.0.1"], "the unready one gone")
    # n1 labelled out: the DaemonSet selects by label; its pod goes (no DaemonSet
    # controller here, so the test deletes it as the real one would).
    bed.fake.put_object(node("n1", internal="10.0.0.1", labels={ENABLE: "false"}))
    bed.fake.put_object(node("n2", internal="10.0.0.2", labels={ENABLE: "true"}))
    await eventually(
        lambda: bed.ds(svc)["spec"]["template"]["spec"].get("nodeSelector") == {ENABLE: "true"},
        "the DaemonSet re-applied",
    )
    bed.fake.delete_object(f"/api/v1/namespaces/kube-system/pods/{daemon_set_name(svc)}-n1")
    bed.fake.put_object(svclb_pod(svc, "n2"))
    await eventually(lambda: ips(bed.fake) == ["10.0.0.2"], "only n2")
    stored = bed.fake.object("/api/v1/namespaces/default/services/web")
    assert stored is not None
    stored["metadata"]["deletionTimestamp"] = "2026-11-26T00:00:00Z"
    bed.fake.put_object(stored)
    await eventually(lambda: bed.daemon_sets() == {}, "the DaemonSet deleted")
    await eventually(
        lambda: (
            (bed.fake.object("/api/v1/namespaces/default/services/web") or {})
            .get("metadata", {})
            .get("finalizers")
            in (None, [])
        ),
        "the finalizer removed",
    )


async def test_with_local_and_endpoint_nodes_only_nodes_with_ready_endpoints_are_listed(
    k3s_bed: Bed,
) -> None:
    """k3s's rule, kept as the option ``localTrafficAddresses: endpointNodes``."""
    bed = k3s_bed
    async with run_controller(bed):
        svc = service(policy="Local")
        bed.fake.put_object(service_body(svc))
        for name in ("n1", "n2", "n3"):
            bed.fake.put_object(svclb_pod(svc, name))
        bed.fake.put_object(endpoint_slice(svc, {"n2": True, "n3": False}))
        await eventually(lambda: ips(bed.fake) == ["10.0.0.2"], "only n2 has a ready backend")
        bed.fake.put_object(endpoint_slice(svc, {"n2": True, "n3": True}))
        await eventually(lambda: ips(bed.fake) == ["10.0.0.2", "10.0.0.3"], "n3 became ready")


async def test_a_local_service_without_endpoints_lists_its_nodes_and_does_not_follow_endpoints(
    running: tuple[Bed, Informer[Service]],
) -> None:
    """The default: a Local Service has its address at creation, before any backend is
    ready (as upstream's e2e expects), and the status stays as endpoints move."""
    bed, _ = running
    svc = service(policy="Local")
    bed.fake.put_object(service_body(svc))
    await eventually(lambda: daemon_set_name(svc) in bed.daemon_sets(), "the DaemonSet")
    for name in ("n1", "n2"):
        bed.fake.put_object(svclb_pod(svc, name))
    await eventually(lambda: ips(bed.fake) == ["10.0.0.1", "10.0.0.2"], "listed with no endpoint")
    status_writes = len([w for w in bed.fake.writes() if w.path.endswith("/services/web/status")])
    bed.fake.put_object(endpoint_slice(svc, {"n2": True}))
    bed.fake.put_object(endpoint_slice(svc, {"n1": True, "n2": False}))
    bed.fake.put_object(endpoint_slice(svc, {"n1": False}))
    await bed.caught_up()
    bed.fake.put_object(svclb_pod(svc, "n3"))
    await eventually(lambda: ips(bed.fake) == ["10.0.0.1", "10.0.0.2", "10.0.0.3"], "n3 added")
    writes = [w for w in bed.fake.writes() if w.path.endswith("/services/web/status")]
    assert len(writes) == status_writes + 1, "only the new svclb pod changed the status"


async def test_the_service_controller_classes_decide_which_services_servicelb_serves(
    running: tuple[Bed, Informer[Service]],
) -> None:
    bed, _ = running
    other = service("other", lb_class="example.com/lb")
    ours = service("ours", lb_class="kube-ccm.io/servicelb", ports=(("TCP", 81, 30081),))
    bed.fake.put_object(service_body(other))
    bed.fake.put_object(service_body(ours))
    await eventually(lambda: daemon_set_name(ours) in bed.daemon_sets(), "the classed one served")
    await asyncio.sleep(0.05)
    assert daemon_set_name(other) not in bed.daemon_sets()


# -- composition ----------------------------------------------------------------------------


def test_composed_with_k3s_instances() -> None:
    registry = Registry(entry_point_group=None)
    registry.register("k3s", k3s_factory)
    registry.register("servicelb", factory)
    composite = build_composite(
        b"providers:\n"
        b"  k3s: {capabilities: [instances]}\n"
        b"  servicelb: {capabilities: [loadBalancer], config: {namespace: svclb}}\n",
        registry=registry,
    )
    assert composite.provider_name() == "k3s"
    member = composite.providers["servicelb"]
    assert isinstance(member, ServiceLBProvider)
    assert member.config.namespace == "svclb"
    assert composite.load_balancer() is member.load_balancer()
