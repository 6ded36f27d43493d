"""deploy/helm/kube-ccm: a real helm lints and renders the chart, and every object it
renders passes server-side dry-run on the real kube-apiserver.

helm is the pinned release built from the Go module proxy
(:func:`kube_ccm.testbed.helm.ensure_helm`, cached after the first build). Every
object is sent as ``helm install`` would send it (a create), with ``dryRun=All``
and ``fieldValidation=Strict`` so that a misspelt or misplaced field fails too;
an object the session already holds under that name (the shipped RBAC, installed
by ``ccm_kubeconfig``) is dry-run replaced instead, as ``helm upgrade`` would.
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from kube_ccm.providers import ippool, libvirt
from kube_ccm.providers import proxmox as proxmox_provider
from kube_ccm.runtime.client import ApiError, KubeClient
from kube_ccm.testbed.helm import Helm
from kube_ccm.testing.controlplane import ControlPlane
from kube_ccm.testing.pytest_plugin import Cleanup
from kube_ccm.testing.waiting import eventually

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "kube-ccm"
DEPLOY = ROOT / "deploy"
RBAC = "rbac.authorization.k8s.io/v1"
SERVICE_MONITOR_CRD = "servicemonitors.monitoring.coreos.com"
COLLECTIONS = {
    ("v1", "ServiceAccount"): "/api/v1/namespaces/{ns}/serviceaccounts",
    ("v1", "Secret"): "/api/v1/namespaces/{ns}/secrets",
    ("v1", "Service"): "/api/v1/namespaces/{ns}/services",
    (RBAC, "ClusterRole"): f"/apis/{RBAC}/clusterroles",
    (RBAC, "ClusterRoleBinding"): f"/apis/{RBAC}/clusterrolebindings",
    (RBAC, "Role"): f"/apis/{RBAC}/namespaces/{{ns}}/roles",
    (RBAC, "RoleBinding"): f"/apis/{RBAC}/namespaces/{{ns}}/rolebindings",
    ("apps/v1", "Deployment"): "/apis/apps/v1/namespaces/{ns}/deployments",
    ("apps/v1", "DaemonSet"): "/apis/apps/v1/namespaces/{ns}/daemonsets",
    ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"): (
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
    ),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"): (
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
    ),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"): (
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"
    ),
    ("monitoring.coreos.com/v1", "ServiceMonitor"): (
        "/apis/monitoring.coreos.com/v1/namespaces/{ns}/servicemonitors"
    ),
}
STRICT_DRY_RUN = {"dryRun": "All", "fieldValidation": "Strict"}


# -- helm (the `helm` fixture is tests/conftest.py's) ------------------------------


@dataclass(frozen=True)
class Rendered:
    objects: list[dict[str, Any]]

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] == kind]

    def one(self, kind: str, name: str | None = None) -> dict[str, Any]:
        found = [o for o in self.of(kind) if name is None or o["metadata"]["name"] == name]
        assert len(found) == 1, f"expected one {kind} {name or ''}, got {len(found)}"
        return found[0]

    def workload(self) -> dict[str, Any]:
        found = self.of("Deployment") + self.of("DaemonSet")
        assert len(found) == 1, [o["kind"] for o in found]
        return found[0]

    def container(self) -> dict[str, Any]:
        container: dict[str, Any] = self.workload()["spec"]["template"]["spec"]["containers"][0]
        return container

    def args(self) -> list[str]:
        args: list[str] = self.container()["args"]
        return args


def run_helm(helm: Helm, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(helm.path), *args], capture_output=True, text=True, check=False, timeout=120
    )


def values_file(tmp_path: Path, values: dict[str, Any]) -> Path:
    path = tmp_path / f"values-{len(list(tmp_path.glob('values-*')))}.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def render(
    helm: Helm, tmp_path: Path, values: dict[str, Any], *extra: str, release: str = "kube-ccm"
) -> Rendered:
    result = run_helm(
        helm, "template", release, str(CHART), "-f", str(values_file(tmp_path, values)), *extra
    )
    assert result.returncode == 0, result.stderr
    return Rendered([d for d in yaml.safe_load_all(result.stdout) if d])


def deploy_documents(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def deploy_object(name: str, kind: str, object_name: str | None = None) -> dict[str, Any]:
    found = [
        d
        for d in deploy_documents(name)
        if d["kind"] == kind and object_name in (None, d["metadata"]["name"])
    ]
    assert len(found) == 1
    return found[0]


COMPARED = ("rules", "roleRef", "subjects", "spec")
"""What a rendered RBAC object or admission policy must share with deploy/'s."""


def assert_renders(rendered: Rendered, manifest: str) -> None:
    """Every object of the deploy/ manifest is rendered under its kind, name and
    namespace, with the same rules, role, subjects or policy spec."""
    for expected in deploy_documents(manifest):
        got = rendered.one(expected["kind"], expected["metadata"]["name"])
        assert got["metadata"].get("namespace") == expected["metadata"].get("namespace")
        for key in COMPARED:
            assert got.get(key) == expected.get(key), (expected["metadata"]["name"], key)


# -- server-side dry-run ---------------------------------------------------------


def collection(obj: dict[str, Any]) -> str:
    key = (obj["apiVersion"], obj["kind"])
    assert key in COLLECTIONS, f"the chart rendered {key}: add it to COLLECTIONS"
    return COLLECTIONS[key].format(ns=obj["metadata"].get("namespace", ""))


async def dry_run(client: KubeClient, obj: dict[str, Any]) -> str:
    """Create (or, when the name is taken, replace) ``obj`` with dryRun=All; say which."""
    base = collection(obj)
    try:
        await client.request("POST", base, params=STRICT_DRY_RUN, body=obj)
    except ApiError as exc:
        if not exc.already_exists:
            raise AssertionError(f"{obj['kind']} {obj['metadata']['name']}: {exc}") from exc
        path = f"{base}/{obj['metadata']['name']}"
        current = await client.get(path)
        replacing = {
            **obj,
            "metadata": {
                **obj["metadata"],
                "resourceVersion": current["metadata"]["resourceVersion"],
            },
        }
        try:
            await client.request("PUT", path, params=STRICT_DRY_RUN, body=replacing)
        except ApiError as put_exc:
            raise AssertionError(f"{obj['kind']} {obj['metadata']['name']}: {put_exc}") from (
                put_exc
            )
        return "replaced"
    return "created"


async def dry_run_all(client: KubeClient, rendered: Rendered) -> list[str]:
    assert rendered.objects
    return [await dry_run(client, obj) for obj in rendered.objects]


# -- lint ------------------------------------------------------------------------


WEBHOOK_TLS = "kube-ccm-webhook-tls"


def ca_bundle(plane: ControlPlane) -> str:
    return base64.b64encode(plane.ca_file.read_bytes()).decode()


def everything_on(plane: ControlPlane | None = None) -> dict[str, Any]:
    return {
        "pvLabels": {"enabled": True},
        "useServiceAccountCredentials": True,
        "webhook": {
            "enabled": True,
            "caBundle": ca_bundle(plane) if plane else "",
            "tls": {"secretName": WEBHOOK_TLS},
        },
        "metrics": {
            "service": {"enabled": True},
            "serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}},
            "readerSubjects": [
                {"kind": "ServiceAccount", "name": "prometheus", "namespace": "monitoring"}
            ],
        },
    }


DEFAULT_MANIFESTS = ("rbac.yaml", "rbac-nodes.yaml", "admission-policies.yaml")
"""What the chart's defaults render of deploy/ (besides the workload)."""
LIBVIRT_SECRET = "kube-ccm-libvirt"
IPPOOL_CLASS = "kube-ccm.io/ippool"
# libvirt instances and ippool load balancers in one daemon (docs/on-prem.md).
COMPOSITE_CONFIG = """\
providers:
  libvirt:
    capabilities: [instances]
    config:
      hosts:
        - uri: qemu+tls://hv1.example/system
          zone: rack-1
          username: ccm
          credentials: {file: /etc/kube-ccm/libvirt/hv1-password}
  ippool:
    capabilities: [loadBalancer]
    config: {configMap: kube-system/kubevip}
"""


def composite() -> dict[str, Any]:
    return {
        "cloudProvider": "composite",
        "cloudConfig": {"content": COMPOSITE_CONFIG},
        "ippool": {"enabled": True},
        "libvirt": {"credentialsSecret": LIBVIRT_SECRET},
        "loadBalancerClasses": [IPPOOL_CLASS],
        "serveUnclassedLoadBalancers": False,
    }


PROXMOX_SECRET = "kube-ccm-proxmox"
PROXMOX_CA = "pve-root-ca"
# proxmox instances and ippool load balancers (docs/on-prem.md), the token secrets
# and PVE's CA from the chart's proxmox values.
PROXMOX_CONFIG = """\
providers:
  proxmox:
    capabilities: [instances]
    config:
      clusters:
        - region: cluster-1
          url: https://pve1.example:8006
          tokenId: kube-ccm@pve!ccm
          tokenSecret: {file: /etc/kube-ccm/proxmox/cluster-1}
          caFile: /etc/kube-ccm/proxmox/ca.crt
  ippool:
    capabilities: [loadBalancer]
    config: {configMap: kube-system/kubevip}
"""


def proxmox() -> dict[str, Any]:
    return {
        **composite(),
        "cloudConfig": {"content": PROXMOX_CONFIG},
        "libvirt": {"credentialsSecret": ""},
        "proxmox": {"tokenSecret": PROXMOX_SECRET, "caConfigMap": PROXMOX_CA},
    }


CREDENTIALS_SECRET = "mycloud-credentials"
# A provider's CA bundle and credentials Secret, as a provider author mounts them.
EXTRA_VOLUMES = [
    {"name": "mycloud-ca", "configMap": {"name": "mycloud-ca-bundle"}},
    {"name": "mycloud-credentials", "secret": {"secretName": CREDENTIALS_SECRET}},
]
EXTRA_VOLUME_MOUNTS = [
    {"name": "mycloud-ca", "mountPath": "/etc/mycloud/ca", "readOnly": True},
    {"name": "mycloud-credentials", "mountPath": "/etc/mycloud/credentials", "readOnly": True},
]
EXTRA_ENV = [
    {"name": "MYCLOUD_CA_FILE", "value": "/etc/mycloud/ca/ca.crt"},
    {
        "name": "MYCLOUD_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": CREDENTIALS_SECRET, "key": "token"}},
    },
]


def extras() -> dict[str, Any]:
    return {
        "cloudProvider": "mycloud",
        "extraVolumes": EXTRA_VOLUMES,
        "extraVolumeMounts": EXTRA_VOLUME_MOUNTS,
        "extraEnv": EXTRA_ENV,
    }


@pytest.mark.parametrize(
    "combination",
    ["defaults", "everything-on", "daemonset", "composite", "libvirt-host", "proxmox", "extras"],
)
def test_helm_lint_strict_passes(helm: Helm, tmp_path: Path, combination: str) -> None:
    values = {
        "defaults": {},
        "everything-on": everything_on(),
        "daemonset": {"kind": "DaemonSet"},
        "composite": composite(),
        "libvirt-host": {**composite(), "kind": "DaemonSet", "libvirt": {"hostSocket": True}},
        "proxmox": proxmox(),
        "extras": extras(),
    }[combination]
    result = run_helm(
        helm, "lint", "--strict", str(CHART), "-f", str(values_file(tmp_path, values))
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout


# -- the defaults are deploy/ -----------------------------------------------------


def test_default_rbac_and_policies_are_exactly_deploy_s(helm: Helm, tmp_path: Path) -> None:
    rendered = render(helm, tmp_path, {})
    for manifest in DEFAULT_MANIFESTS:
        assert_renders(rendered, manifest)
    # Nothing else: deploy/'s objects, the cloud config's Secret and the Deployment.
    shipped = {
        (d["kind"], d["metadata"]["name"])
        for manifest in DEFAULT_MANIFESTS
        for d in deploy_documents(manifest)
    }
    assert {(o["kind"], o["metadata"]["name"]) for o in rendered.objects} == shipped | {
        ("Secret", "cloud-controller-manager-config"),
        ("Deployment", "cloud-controller-manager"),
    }


def test_rbac_nodes_false_leaves_node_writes_out(helm: Helm, tmp_path: Path) -> None:
    """`--cloud-provider=ippool` alone: deploy/rbac.yaml without rbac-nodes.yaml."""
    rendered = render(helm, tmp_path, {"rbac": {"nodes": False}, "ippool": {"enabled": True}})
    for manifest in ("rbac.yaml", "rbac-ippool.yaml", "admission-policies.yaml"):
        assert_renders(rendered, manifest)
    assert not [o for o in rendered.objects if o["metadata"]["name"].endswith(":nodes")]
    base = rendered.one("ClusterRole", "system:cloud-controller-manager")
    assert {"apiGroups": [""], "resources": ["nodes", "services"], "verbs": ["list", "watch"]} in (
        base["rules"]
    )


def test_admission_policies_off_and_renamed(helm: Helm, tmp_path: Path) -> None:
    off = render(helm, tmp_path, {"admissionPolicies": {"enabled": False}})
    assert not off.of("ValidatingAdmissionPolicy")
    assert not off.of("ValidatingAdmissionPolicyBinding")
    values = {"name": "my-ccm", "namespace": "ccm-system"}
    renamed = render(helm, tmp_path, values)
    users = [
        "system:serviceaccount:ccm-system:my-ccm",
        *(
            f"system:serviceaccount:kube-system:{controller}"
            for controller in ("node-controller", "service-controller", "route-controller")
        ),
        "system:serviceaccount:kube-system:pvl-controller",
    ]
    for suffix in ("ipaddresses", "services", "daemonsets"):
        policy = renamed.one("ValidatingAdmissionPolicy", f"my-ccm-{suffix}")
        (condition,) = policy["spec"]["matchConditions"]
        assert condition["expression"] == (
            "request.userInfo.username in [ " + ", ".join(f"'{u}'" for u in users) + "]"
        )
        binding = renamed.one("ValidatingAdmissionPolicyBinding", f"my-ccm-{suffix}")
        assert binding["spec"] == {"policyName": f"my-ccm-{suffix}", "validationActions": ["Deny"]}


def test_admission_policies_are_refused_before_kubernetes_1_30(helm: Helm, tmp_path: Path) -> None:
    result = run_helm(helm, "template", "kube-ccm", str(CHART), "--kube-version", "1.29.4")
    assert result.returncode != 0
    assert "admissionPolicies.enabled needs Kubernetes 1.30 or later" in result.stderr
    assert "set admissionPolicies.enabled=false" in result.stderr
    older = render(
        helm, tmp_path, {"admissionPolicies": {"enabled": False}}, "--kube-version", "1.29.4"
    )
    assert not older.of("ValidatingAdmissionPolicy")


def _comparable_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """A pod spec without what the chart does differently on purpose: the cloud
    config comes from a Secret instead of a ConfigMap, and the image pull policy
    is explicit."""
    pod = json.loads(json.dumps(pod))
    pod.pop("volumes")
    for container in pod["containers"]:
        container.pop("imagePullPolicy", None)
    return pod


@pytest.mark.parametrize(
    ("values", "manifest"),
    # null removes a default map in helm (an empty map would be merged into it).
    [({}, "deployment.yaml"), ({"kind": "DaemonSet", "affinity": None}, "daemonset.yaml")],
    ids=["Deployment", "DaemonSet"],
)
def test_default_workload_is_deploy_s(
    helm: Helm, tmp_path: Path, values: dict[str, Any], manifest: str
) -> None:
    rendered = render(helm, tmp_path, values)
    workload = rendered.workload()
    expected = next(
        d for d in deploy_documents(manifest) if d["kind"] in ("Deployment", "DaemonSet")
    )
    assert workload["kind"] == expected["kind"]
    assert workload["metadata"]["name"] == expected["metadata"]["name"]
    assert workload["metadata"]["namespace"] == "kube-system"
    assert workload["spec"]["selector"] == expected["spec"]["selector"]
    if expected["kind"] == "Deployment":
        # deploy/deployment.yaml runs 2 replicas, the number for a real cloud. The
        # chart's default cloudProvider is simulated, whose state is a file in each
        # pod's own /tmp: a second replica would be a second cloud and every load
        # balancer address would change on failover, so `replicas: null` renders 1
        # for it (and deploy/'s 2 for any other provider, see test_replicas_...).
        assert workload["spec"]["replicas"] == 1
        assert expected["spec"]["replicas"] == 2
    else:
        assert "replicas" not in workload["spec"]
    pod = workload["spec"]["template"]["spec"]
    assert _comparable_pod(pod) == _comparable_pod(expected["spec"]["template"]["spec"])
    # The cloud config: the chart's Secret holds what deploy/'s ConfigMap holds.
    config_map = deploy_object("deployment.yaml", "ConfigMap")
    secret = rendered.one("Secret", "cloud-controller-manager-config")
    assert (
        base64.b64decode(secret["data"]["cloud.yaml"]).decode()
        == (config_map["data"]["cloud.yaml"])
    )
    assert {
        "name": "cloud-config",
        "secret": {"secretName": "cloud-controller-manager-config"},
    } in (pod["volumes"])


# -- every combination passes server-side dry-run ----------------------------------


async def test_defaults_pass_server_side_dry_run(
    helm: Helm, tmp_path: Path, kube_client: KubeClient
) -> None:
    rendered = await asyncio.to_thread(render, helm, tmp_path, {})
    assert rendered.args() == [
        "--cloud-provider=simulated",
        "--cloud-config=/etc/kubernetes/cloud/cloud.yaml",
        "--leader-elect=true",
        "--cluster-cidr=10.244.0.0/16",
        "--secure-port=10258",
        "--v=2",
    ]
    await dry_run_all(kube_client, rendered)


async def test_daemonset_passes_server_side_dry_run(
    helm: Helm, tmp_path: Path, kube_client: KubeClient
) -> None:
    rendered = await asyncio.to_thread(render, helm, tmp_path, {"kind": "DaemonSet"})
    daemonset = rendered.one("DaemonSet")
    assert not rendered.of("Deployment")
    assert "replicas" not in daemonset["spec"]
    assert daemonset["spec"]["updateStrategy"] == {"type": "RollingUpdate"}
    await dry_run_all(kube_client, rendered)


async def test_webhook_passes_server_side_dry_run(
    helm: Helm, tmp_path: Path, kube_client: KubeClient, kube_controlplane: ControlPlane
) -> None:
    values = {
        "webhook": {
            "enabled": True,
            "caBundle": ca_bundle(kube_controlplane),
            "failurePolicy": "Fail",
            "tls": {"secretName": WEBHOOK_TLS},
        }
    }
    rendered = await asyncio.to_thread(render, helm, tmp_path, values)
    args = rendered.args()
    assert "--feature-gates=CloudControllerManagerWebhook=true" in args
    assert "--webhooks=persistent-volume-label" in args
    assert "--webhook-secure-port=10260" in args
    assert "--webhook-tls-cert-file=/etc/kubernetes/webhook-tls/tls.crt" in args
    assert "--webhook-tls-private-key-file=/etc/kubernetes/webhook-tls/tls.key" in args
    configuration = rendered.one("MutatingWebhookConfiguration")
    shipped = deploy_object(
        "webhook/mutatingwebhookconfiguration.yaml", "MutatingWebhookConfiguration"
    )
    hook, shipped_hook = configuration["webhooks"][0], shipped["webhooks"][0]
    assert hook["rules"] == shipped_hook["rules"]
    assert hook["clientConfig"]["service"] == shipped_hook["clientConfig"]["service"]
    assert hook["clientConfig"]["caBundle"] == ca_bundle(kube_controlplane)
    assert hook["failurePolicy"] == "Fail"
    service = rendered.one("Service", "cloud-controller-manager-webhook")
    assert (
        service["spec"]
        == deploy_object("webhook/mutatingwebhookconfiguration.yaml", "Service")["spec"]
    )
    pod = rendered.workload()["spec"]["template"]["spec"]
    assert {"name": "webhook-tls", "secret": {"secretName": WEBHOOK_TLS}} in pod["volumes"]
    await dry_run_all(kube_client, rendered)


def test_pv_labels_rbac_is_deploy_rbac_pv_labels(helm: Helm, tmp_path: Path) -> None:
    rendered = render(helm, tmp_path, {"pvLabels": {"enabled": True}})
    assert "--controllers=*,pvl" in rendered.args()
    assert_renders(rendered, "rbac-pv-labels.yaml")


async def test_pv_labels_and_service_account_credentials_pass_server_side_dry_run(
    helm: Helm, tmp_path: Path, kube_client: KubeClient
) -> None:
    """deploy/rbac-service-account-credentials.yaml, and what the daemon's own identity
    no longer needs when the controllers write as themselves: services/status, the
    Node writes (both then come from the cluster's bootstrap roles) and PV patches
    (pvl-controller's role). deploy/ cannot leave out part of rbac.yaml; the chart
    does (tests/integration/test_rbac_combinations.py runs it)."""
    values = {
        "pvLabels": {"enabled": True},
        "kubeletServingCertApprover": {"enabled": True},
        "useServiceAccountCredentials": True,
    }
    rendered = await asyncio.to_thread(render, helm, tmp_path, values)
    args = rendered.args()
    assert "--controllers=*,pvl,servingcert" in args
    assert "--use-service-account-credentials=true" in args
    assert_renders(rendered, "rbac-service-account-credentials.yaml")
    base = rendered.one("ClusterRole", "system:cloud-controller-manager")
    shipped = deploy_object("rbac.yaml", "ClusterRole", "system:cloud-controller-manager")
    assert base["rules"] == [r for r in shipped["rules"] if r["resources"] != ["services/status"]]
    assert not [o for o in rendered.objects if o["metadata"]["name"].endswith(":nodes")]
    pv_labels = rendered.one("ClusterRole", "system:cloud-controller-manager:pv-labels")
    assert pv_labels["rules"] == [
        {"apiGroups": [""], "resources": ["persistentvolumes"], "verbs": ["list", "watch"]}
    ]
    serving = rendered.one("ClusterRole", "system:cloud-controller-manager:kubelet-serving-certs")
    assert serving["rules"] == [
        {
            "apiGroups": ["certificates.k8s.io"],
            "resources": ["certificatesigningrequests"],
            "verbs": ["list", "watch"],
        }
    ]
    await dry_run_all(kube_client, rendered)


def test_kubelet_serving_cert_rbac_is_deploy_rbac_kubelet_serving_certs(
    helm: Helm, tmp_path: Path
) -> None:
    rendered = render(helm, tmp_path, {"kubeletServingCertApprover": {"enabled": True}})
    assert "--controllers=*,servingcert" in rendered.args()
    assert_renders(rendered, "rbac-kubelet-serving-certs.yaml")
    default = render(helm, tmp_path, {})
    assert not [o for o in default.objects if "kubelet-serving" in o["metadata"]["name"]]


def test_ippool_rbac_is_deploy_rbac_ippool(helm: Helm, tmp_path: Path) -> None:
    rendered = render(helm, tmp_path, {"ippool": {"enabled": True}})
    assert_renders(rendered, "rbac-ippool.yaml")
    # Off by default.
    default = render(helm, tmp_path, {})
    assert not [o for o in default.objects if "ippool" in o["metadata"]["name"]]


def test_servicelb_rbac_is_deploy_rbac_servicelb(helm: Helm, tmp_path: Path) -> None:
    rendered = render(helm, tmp_path, {"servicelb": {"enabled": True}})
    assert_renders(rendered, "rbac-servicelb.yaml")
    default = render(helm, tmp_path, {})
    assert not [o for o in default.objects if "servicelb" in o["metadata"]["name"]]
    elsewhere = render(helm, tmp_path, {"servicelb": {"enabled": True, "namespace": "svclb"}})
    assert (
        elsewhere.one("Role", "system:cloud-controller-manager:servicelb")["metadata"]["namespace"]
        == "svclb"
    )


def test_servicelb_gets_the_chart_s_own_image_as_its_forwarder_image(
    helm: Helm, tmp_path: Path
) -> None:
    """servicelb's default forwarder image (KUBE_CCM_SERVICELB_IMAGE, used when its
    cloud-config has no `image`) is the image the chart deploys, unless
    `servicelb.image` says otherwise; nothing without `servicelb.enabled`."""

    def forwarder_env(values: dict[str, Any]) -> list[Any]:
        env = render(helm, tmp_path, values).container().get("env") or []
        return [e for e in env if e["name"] == "KUBE_CCM_SERVICELB_IMAGE"]

    image = {"repository": "registry.example/kube-ccm", "tag": "0.4.0"}
    assert forwarder_env({"servicelb": {"enabled": True}, "image": image}) == [
        {"name": "KUBE_CCM_SERVICELB_IMAGE", "value": "registry.example/kube-ccm:0.4.0"}
    ]
    chosen = {"servicelb": {"enabled": True, "image": "mirror.example/fwd:1"}, "image": image}
    assert forwarder_env(chosen) == [
        {"name": "KUBE_CCM_SERVICELB_IMAGE", "value": "mirror.example/fwd:1"}
    ]
    assert forwarder_env({"image": image}) == []
    # The user's own env is kept beside it.
    extra = {"servicelb": {"enabled": True}, "extraEnv": [{"name": "A", "value": "b"}]}
    env = render(helm, tmp_path, extra).container()["env"]
    assert {"name": "A", "value": "b"} in env
    assert {"name": "KUBE_CCM_SERVICELB_IMAGE", "value": "kube-ccm:latest"} in env
    refused = run_helm(
        helm,
        "template",
        "kube-ccm",
        str(CHART),
        "-f",
        str(values_file(tmp_path, {"servicelb": {"image": "has space"}})),
    )
    assert refused.returncode != 0


def test_the_daemonset_policy_follows_the_servicelb_values(helm: Helm, tmp_path: Path) -> None:
    """The DaemonSet admission policy allows the pod shape servicelb's values describe
    (and the priority class reaches the daemon): by default the shape of deploy/'s."""

    def variables(values: dict[str, Any]) -> dict[str, str]:
        policy = render(helm, tmp_path, values).one(
            "ValidatingAdmissionPolicy", "cloud-controller-manager-daemonsets"
        )
        return {v["name"]: v["expression"] for v in policy["spec"]["variables"]}

    default = variables({})
    assert default["image"] == "'kube-ccm:latest'"
    assert default["hostNetwork"] == "false"
    assert default["priorityClasses"] == "['']"
    assert default["serviceAccounts"] == "['', 'default']"
    assert default["capabilities"] == "['NET_BIND_SERVICE']"
    chosen = variables(
        {
            "image": {"repository": "registry.example/kube-ccm", "tag": "0.4.0"},
            "servicelb": {
                "enabled": True,
                "namespace": "svclb",
                "priorityClassName": "svclb",
                "policy": {
                    "serviceAccountName": "svclb",
                    "allowedPriorityClasses": ["svclb", "low"],
                    "hostNetwork": True,
                    "forwardMode": "iptables",
                    "labelDomain": "svccontroller.rke2.cattle.io",
                },
            },
        }
    )
    assert chosen["svclbNamespace"] == "'svclb'"
    assert chosen["image"] == "'registry.example/kube-ccm:0.4.0'"
    assert chosen["priorityClasses"] == "['', 'svclb', 'low']"
    assert chosen["serviceAccounts"] == "['svclb']"
    assert chosen["hostNetwork"] == "true"
    assert chosen["capabilities"] == "['NET_BIND_SERVICE', 'NET_ADMIN']"
    assert "'net.ipv4.ip_forward'" in chosen["sysctls"]
    assert chosen["labelDomain"] == "'svccontroller.rke2.cattle.io'"
    env = render(
        helm, tmp_path, {"servicelb": {"enabled": True, "priorityClassName": "svclb"}}
    ).container()["env"]
    assert {"name": "KUBE_CCM_SERVICELB_PRIORITY_CLASS", "value": "svclb"} in env
    env = render(helm, tmp_path, {"servicelb": {"enabled": True}}).container()["env"]
    assert not [e for e in env if e["name"] == "KUBE_CCM_SERVICELB_PRIORITY_CLASS"]


def test_ippool_rbac_binds_the_daemon_s_service_account_only(helm: Helm, tmp_path: Path) -> None:
    """ippool's API client (client_builder.client("ippool")) is not a controller
    identity: with --use-service-account-credentials it still authenticates as the
    daemon's own ServiceAccount, so nothing else is granted IPAddresses."""
    values = {"ippool": {"enabled": True}, "useServiceAccountCredentials": True}
    rendered = render(helm, tmp_path, values)
    ippool_objects = [o for o in rendered.objects if "ippool" in o["metadata"]["name"]]
    assert sorted(o["kind"] for o in ippool_objects) == [
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
    ]
    for binding in ippool_objects:
        if "subjects" in binding:
            assert binding["subjects"] == [
                {
                    "kind": "ServiceAccount",
                    "name": "cloud-controller-manager",
                    "namespace": "kube-system",
                }
            ]


@pytest.mark.parametrize(
    ("config_map", "expected"),
    [("pools/lb-pools", ("pools", "lb-pools")), ("", None)],
    ids=["elsewhere", "none"],
)
def test_ippool_config_map_sets_the_role_or_drops_it(
    helm: Helm, tmp_path: Path, config_map: str, expected: tuple[str, str] | None
) -> None:
    values = {"name": "my-ccm", "ippool": {"enabled": True, "configMap": config_map}}
    rendered = render(helm, tmp_path, values)
    assert rendered.one("ClusterRole", "system:my-ccm:ippool")
    if expected is None:
        for kind in ("Role", "RoleBinding"):
            assert not [o for o in rendered.of(kind) if "ippool" in o["metadata"]["name"]]
        return
    namespace, name = expected
    role = rendered.one("Role", "system:my-ccm:ippool-pools")
    assert role["metadata"]["namespace"] == namespace
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [name], "verbs": ["get"]}
    ]
    binding = rendered.one("RoleBinding", "system:my-ccm:ippool-pools")
    assert binding["metadata"]["namespace"] == namespace
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "my-ccm", "namespace": "kube-system"}
    ]


async def test_composite_libvirt_and_ippool_pass_server_side_dry_run(
    helm: Helm, tmp_path: Path, kube_client: KubeClient
) -> None:
    rendered = await asyncio.to_thread(render, helm, tmp_path, composite())
    assert rendered.args() == [
        "--cloud-provider=composite",
        "--cloud-config=/etc/kubernetes/cloud/cloud.yaml",
        "--leader-elect=true",
        "--cluster-cidr=10.244.0.0/16",
        f"--load-balancer-class={IPPOOL_CLASS}",
        "--serve-unclassed-load-balancers=false",
        "--secure-port=10258",
        "--v=2",
    ]
    # The cloud config is what the composite's members accept.
    secret = rendered.one("Secret", "cloud-controller-manager-config")
    content = base64.b64decode(secret["data"]["cloud.yaml"]).decode()
    assert content == COMPOSITE_CONFIG
    members = yaml.safe_load(content)["providers"]
    hosts = libvirt.load_config(yaml.safe_dump(members["libvirt"]["config"]).encode()).hosts
    assert [h.credentials.file for h in hosts if h.credentials] == [
        "/etc/kube-ccm/libvirt/hv1-password"
    ]
    pools = ippool.load_config(yaml.safe_dump(members["ippool"]["config"]))
    assert pools.config_map == "kube-system/kubevip"
    pod = rendered.workload()["spec"]["template"]["spec"]
    assert {"name": "libvirt-credentials", "secret": {"secretName": LIBVIRT_SECRET}} in (
        pod["volumes"]
    )
    assert {
        "name": "libvirt-credentials",
        "mountPath": "/etc/kube-ccm/libvirt",
        "readOnly": True,
    } in rendered.container()["volumeMounts"]
    assert not [v for v in pod["volumes"] if "hostPath" in v]
    assert rendered.one("ClusterRole", "system:cloud-controller-manager:ippool")
    assert rendered.one("Role", "system:cloud-controller-manager:ippool-pools")
    await dry_run_all(kube_client, rendered)


async def test_proxmox_token_secret_and_ca_pass_server_side_dry_run(
    helm: Helm, tmp_path: Path, kube_client: KubeClient
) -> None:
    rendered = await asyncio.to_thread(render, helm, tmp_path, proxmox())
    secret = rendered.one("Secret", "cloud-controller-manager-config")
    content = base64.b64decode(secret["data"]["cloud.yaml"]).decode()
    members = yaml.safe_load(content)["providers"]
    (cluster,) = proxmox_provider.load_config(
        yaml.safe_dump(members["proxmox"]["config"]).encode()
    ).clusters
    assert cluster.token_secret.file == "/etc/kube-ccm/proxmox/cluster-1"
    assert cluster.ca_file == "/etc/kube-ccm/proxmox/ca.crt"
    pod = rendered.workload()["spec"]["template"]["spec"]
    # One directory for both: a projected volume (a rotated Secret still updates).
    assert {
        "name": "proxmox",
        "projected": {
            "sources": [{"secret": {"name": PROXMOX_SECRET}}, {"configMap": {"name": PROXMOX_CA}}]
        },
    } in pod["volumes"]
    assert {"name": "proxmox", "mountPath": "/etc/kube-ccm/proxmox", "readOnly": True} in (
        rendered.container()["volumeMounts"]
    )
    assert not [v for v in pod["volumes"] if v["name"] == "libvirt-credentials"]
    await dry_run_all(kube_client, rendered)

    # The CA alone (a token from the environment), at another directory.
    rendered = await asyncio.to_thread(
        render,
        helm,
        tmp_path,
        {**proxmox(), "proxmox": {"caConfigMap": PROXMOX_CA, "mountPath": "/etc/pve-ca"}},
    )
    pod = rendered.workload()["spec"]["template"]["spec"]
    assert {"name": "proxmox", "projected": {"sources": [{"configMap": {"name": PROXMOX_CA}}]}} in (
        pod["volumes"]
    )
    assert {"name": "proxmox", "mountPath": "/etc/pve-ca", "readOnly": True} in (
        rendered.container()["volumeMounts"]
    )


async def test_libvirt_host_socket_daemonset_passes_server_side_dry_run(
    helm: Helm, tmp_path: Path, kube_client: KubeClient
) -> None:
    values = {
        **composite(),
        "kind": "DaemonSet",
        "nodeSelector": {"example.com/hypervisor": "true"},
        "affinity": None,
        "podSecurityContext": {"supplementalGroups": [108]},
        "libvirt": {
            "credentialsSecret": LIBVIRT_SECRET,
            "credentialsMountPath": "/etc/libvirt-auth/",
            "hostSocket": True,
        },
    }
    rendered = await asyncio.to_thread(render, helm, tmp_path, values)
    pod = rendered.one("DaemonSet")["spec"]["template"]["spec"]
    assert {
        "name": "libvirt-sockets",
        "hostPath": {"path": "/var/run/libvirt", "type": "Directory"},
    } in pod["volumes"]
    mounts = rendered.container()["volumeMounts"]
    assert {"name": "libvirt-sockets", "mountPath": "/var/run/libvirt", "readOnly": True} in (
        mounts
    )
    assert {
        "name": "libvirt-credentials",
        "mountPath": "/etc/libvirt-auth/",
        "readOnly": True,
    } in mounts
    # helm merges the map into the default podSecurityContext: still non-root.
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["supplementalGroups"] == [108]
    await dry_run_all(kube_client, rendered)


async def test_existing_secret_passes_server_side_dry_run(
    helm: Helm, tmp_path: Path, kube_client: KubeClient
) -> None:
    values = {"cloudConfig": {"existingSecret": "mycloud-credentials", "key": "config.ini"}}
    rendered = await asyncio.to_thread(render, helm, tmp_path, values)
    assert not rendered.of("Secret"), "the chart must not create the user's Secret"
    assert "--cloud-config=/etc/kubernetes/cloud/config.ini" in rendered.args()
    pod = rendered.workload()["spec"]["template"]["spec"]
    assert {"name": "cloud-config", "secret": {"secretName": "mycloud-credentials"}} in (
        pod["volumes"]
    )
    assert "checksum/cloud-config" not in (
        rendered.workload()["spec"]["template"]["metadata"].get("annotations") or {}
    )
    await dry_run_all(kube_client, rendered)


async def test_no_cloud_config_drops_the_flag_and_the_volume(
    helm: Helm, tmp_path: Path, kube_client: KubeClient
) -> None:
    rendered = await asyncio.to_thread(render, helm, tmp_path, {"cloudConfig": {"content": ""}})
    assert not [a for a in rendered.args() if a.startswith("--cloud-config")]
    assert not rendered.of("Secret")
    volumes = rendered.workload()["spec"]["template"]["spec"]["volumes"]
    assert [v["name"] for v in volumes] == ["tmp"]
    await dry_run_all(kube_client, rendered)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        # The simulated cloud's state is a file in each pod's own /tmp: one pod.
        ({}, 1),
        ({"replicas": None}, 1),
        # Any other provider: deploy/deployment.yaml's 2.
        ({"cloudProvider": "mycloud"}, 2),
        ({"cloudProvider": "mycloud", "replicas": None}, 2),
        # An explicit number is kept, with the simulated cloud too (NOTES warns).
        ({"replicas": 2}, 2),
        ({"replicas": 3, "cloudProvider": "mycloud"}, 3),
        ({"replicas": 1, "cloudProvider": "mycloud"}, 1),
    ],
    ids=[
        "simulated-default",
        "simulated-null",
        "other-default",
        "other-null",
        "simulated-explicit-2",
        "other-explicit-3",
        "other-explicit-1",
    ],
)
def test_replicas_default_to_1_with_the_simulated_cloud_and_2_otherwise(
    helm: Helm, tmp_path: Path, values: dict[str, Any], expected: int
) -> None:
    rendered = render(helm, tmp_path, values)
    assert rendered.one("Deployment")["spec"]["replicas"] == expected
    # `helm --set` gives integers another type than a values file: the same result.
    if "replicas" in values and values["replicas"] is not None:
        provider = values.get("cloudProvider", "simulated")
        by_set = render(
            helm,
            tmp_path,
            {"cloudProvider": provider},
            "--set",
            f"replicas={values['replicas']}",
        )
        assert by_set.one("Deployment")["spec"]["replicas"] == expected


def test_a_daemonset_ignores_replicas(helm: Helm, tmp_path: Path) -> None:
    rendered = render(helm, tmp_path, {"kind": "DaemonSet", "replicas": 3})
    assert "replicas" not in rendered.one("DaemonSet")["spec"]


def test_extra_volumes_mounts_and_env_are_added_as_given(helm: Helm, tmp_path: Path) -> None:
    values = {
        **extras(),
        "env": [{"name": "MYCLOUD_REGION", "value": "eu-1"}],
        "libvirt": {"credentialsSecret": LIBVIRT_SECRET},
    }
    rendered = render(helm, tmp_path, values)
    pod = rendered.workload()["spec"]["template"]["spec"]
    container = rendered.container()
    # After the chart's own, in the order given, unchanged.
    assert [v["name"] for v in pod["volumes"]] == [
        "cloud-config",
        "libvirt-credentials",
        "tmp",
        "mycloud-ca",
        "mycloud-credentials",
    ]
    assert pod["volumes"][-2:] == EXTRA_VOLUMES
    assert [m["mountPath"] for m in container["volumeMounts"]] == [
        "/etc/kubernetes/cloud",
        "/etc/kube-ccm/libvirt",
        "/tmp",
        "/etc/mycloud/ca",
        "/etc/mycloud/credentials",
    ]
    assert container["volumeMounts"][-2:] == EXTRA_VOLUME_MOUNTS
    # `env` (the older value) first, then extraEnv.
    assert container["env"] == [{"name": "MYCLOUD_REGION", "value": "eu-1"}, *EXTRA_ENV]
    # Only the kube-ccm container gets them (there is no other), and nothing else moved.
    assert len(pod["containers"]) == 1
    assert rendered.args() == render(helm, tmp_path, {"cloudProvider": "mycloud"}).args()


def test_extras_default_to_nothing(helm: Helm, tmp_path: Path) -> None:
    rendered = render(helm, tmp_path, {})
    pod = rendered.workload()["spec"]["template"]["spec"]
    assert [v["name"] for v in pod["volumes"]] == ["cloud-config", "tmp"]
    assert [m["name"] for m in rendered.container()["volumeMounts"]] == ["cloud-config", "tmp"]
    assert "env" not in rendered.container()
    only_extra_env = render(helm, tmp_path, {"extraEnv": [{"name": "A", "value": "1"}]})
    assert only_extra_env.container()["env"] == [{"name": "A", "value": "1"}]


async def test_extra_volumes_mounts_and_env_pass_server_side_dry_run(
    helm: Helm, tmp_path: Path, kube_client: KubeClient
) -> None:
    """A CA bundle ConfigMap and a credentials Secret mounted, and an env var from a
    secretKeyRef: strict field validation accepts them where the chart puts them."""
    rendered = await asyncio.to_thread(render, helm, tmp_path, extras())
    pod = rendered.one("Deployment")["spec"]["template"]["spec"]
    assert {"name": "mycloud-credentials", "secret": {"secretName": CREDENTIALS_SECRET}} in (
        pod["volumes"]
    )
    token = next(e for e in rendered.container()["env"] if e["name"] == "MYCLOUD_TOKEN")
    assert token["valueFrom"]["secretKeyRef"] == {"name": CREDENTIALS_SECRET, "key": "token"}
    assert await dry_run_all(kube_client, rendered)


@pytest.fixture
def service_monitor_crd(kube_controlplane: ControlPlane) -> Iterator[None]:
    """A ServiceMonitor CRD with the part of the Prometheus Operator's schema the
    chart uses (strict field validation then refuses anything else), removed after."""

    async def install() -> None:
        async with KubeClient.from_kubeconfig(kube_controlplane.kubeconfig) as client:
            crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
            try:
                await client.create(crds, _service_monitor_crd())
            except ApiError as exc:
                if not exc.already_exists:
                    raise

            async def served() -> bool:
                try:
                    await client.get("/apis/monitoring.coreos.com/v1/servicemonitors")
                except ApiError:
                    return False
                return True

            await eventually(served, within=60, interval=0.2, what="the ServiceMonitor CRD served")

    async def remove() -> None:
        async with KubeClient.from_kubeconfig(kube_controlplane.kubeconfig) as client:
            path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{SERVICE_MONITOR_CRD}"
            try:
                await client.delete(path)
            except ApiError as exc:
                if not exc.not_found:
                    raise

    asyncio.run(install())
    try:
        yield
    finally:
        asyncio.run(remove())


def _service_monitor_crd() -> dict[str, Any]:
    string: dict[str, Any] = {"type": "string"}
    labels = {"type": "object", "additionalProperties": string}
    endpoint = {
        "type": "object",
        "properties": {
            "port": string,
            "path": string,
            "scheme": {"type": "string", "enum": ["http", "https"]},
            "interval": {
                "type": "string",
                "pattern": "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?"
                "(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$",
            },
            "bearerTokenFile": string,
            "tlsConfig": {
                "type": "object",
                "properties": {"insecureSkipVerify": {"type": "boolean"}},
            },
        },
    }
    spec = {
        "type": "object",
        "required": ["selector"],
        "properties": {
            "endpoints": {"type": "array", "items": endpoint},
            "namespaceSelector": {
                "type": "object",
                "properties": {"matchNames": {"type": "array", "items": string}},
            },
            "selector": {"type": "object", "properties": {"matchLabels": labels}},
        },
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": SERVICE_MONITOR_CRD},
        "spec": {
            "group": "monitoring.coreos.com",
            "scope": "Namespaced",
            "names": {
                "plural": "servicemonitors",
                "singular": "servicemonitor",
                "kind": "ServiceMonitor",
                "listKind": "ServiceMonitorList",
            },
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "required": ["spec"],
                            "properties": {"spec": spec},
                        }
                    },
                }
            ],
        },
    }


@pytest.mark.usefixtures("service_monitor_crd")
async def test_everything_on_with_metrics_passes_server_side_dry_run(
    helm: Helm, tmp_path: Path, kube_client: KubeClient, kube_controlplane: ControlPlane
) -> None:
    rendered = await asyncio.to_thread(render, helm, tmp_path, everything_on(kube_controlplane))
    service = rendered.one("Service", "cloud-controller-manager-metrics")
    assert service["spec"]["ports"] == [{"name": "https", "port": 10258, "targetPort": 10258}]
    monitor = rendered.one("ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    # The ServiceMonitor selects the metrics Service only (not the webhook's).
    selector = monitor["spec"]["selector"]["matchLabels"]
    for svc in rendered.of("Service"):
        selected = all(svc["metadata"]["labels"].get(k) == v for k, v in selector.items())
        assert selected == (svc is service), svc["metadata"]["name"]
    binding = rendered.one("ClusterRoleBinding", "cloud-controller-manager:metrics-reader")
    assert binding["subjects"][0]["name"] == "prometheus"
    await dry_run_all(kube_client, rendered)


async def test_custom_values_in_the_release_namespace_pass_server_side_dry_run(
    helm: Helm, tmp_path: Path, kube_client: KubeClient, kube_namespace: str
) -> None:
    """Every knob away from its default, objects in `helm --namespace`'s namespace."""
    values: dict[str, Any] = {
        "name": "my-ccm",
        "namespace": "",
        "image": {"repository": "registry.example.com/ccm", "tag": "", "pullPolicy": "Always"},
        "imagePullSecrets": [{"name": "regcred"}],
        "replicas": 3,
        "strategy": {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
        },
        "cloudProvider": "mycloud",
        "controllers": ["*", "-cloud-node-lifecycle"],
        "clusterCIDR": "",
        "configureCloudRoutes": False,
        "leaderElection": {
            "leaseDuration": "30s",
            "renewDeadline": "20s",
            "retryPeriod": "4s",
            "resourceName": "my-ccm",
            "resourceNamespace": kube_namespace,
        },
        "featureGates": {"SomeGate": False},
        "verbosity": 4,
        "securePort": 10358,
        "extraArgs": {"cluster-name": "prod", "kube-api-qps": 50, "profiling": False},
        "env": [{"name": "MYCLOUD_REGION", "value": "eu-1"}],
        "hostNetwork": False,
        "serviceAccount": {"annotations": {"mycloud.example.com/role": "ccm"}},
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "affinity": None,
        "tolerations": [],
        "priorityClassName": "",
        "podAnnotations": {"example.com/a": "b"},
        "podLabels": {"team": "platform"},
        "metrics": {"readerClusterRole": False},
    }
    rendered = await asyncio.to_thread(
        render, helm, tmp_path, values, "--namespace", kube_namespace
    )
    assert rendered.args() == [
        "--cloud-provider=mycloud",
        "--cloud-config=/etc/kubernetes/cloud/cloud.yaml",
        "--leader-elect=true",
        "--leader-elect-lease-duration=30s",
        "--leader-elect-renew-deadline=20s",
        "--leader-elect-retry-period=4s",
        "--leader-elect-resource-name=my-ccm",
        f"--leader-elect-resource-namespace={kube_namespace}",
        "--controllers=*,-cloud-node-lifecycle",
        "--configure-cloud-routes=false",
        "--secure-port=10358",
        "--feature-gates=SomeGate=false",
        "--v=4",
        "--cluster-name=prod",
        "--kube-api-qps=50",
        "--profiling=false",
    ]
    workload = rendered.one("Deployment", "my-ccm")
    assert workload["metadata"]["namespace"] == kube_namespace
    container = rendered.container()
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert container["image"] == f"registry.example.com/ccm:{chart['appVersion']}"
    assert container["livenessProbe"]["httpGet"]["port"] == 10358
    pod = workload["spec"]["template"]["spec"]
    assert "affinity" not in pod
    assert "tolerations" not in pod
    assert "priorityClassName" not in pod
    assert pod["hostNetwork"] is False
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["containers"][0]["env"] == [{"name": "MYCLOUD_REGION", "value": "eu-1"}]
    assert workload["spec"]["template"]["metadata"]["labels"]["team"] == "platform"
    role = rendered.one("Role", "system:my-ccm:leader-election")
    assert role["metadata"]["namespace"] == kube_namespace  # the Lease's, not kube-system
    lease_rule = next(r for r in role["rules"] if r.get("resourceNames"))
    assert lease_rule["resourceNames"] == ["my-ccm", "cloud-provider-extraction-migration"]
    lease_binding = rendered.one("RoleBinding", "system:my-ccm:leader-election")
    assert lease_binding["metadata"]["namespace"] == kube_namespace
    assert not [
        r
        for r in rendered.one("ClusterRole", "system:my-ccm")["rules"]
        if "leases" in r["resources"]
    ]
    binding = rendered.one("RoleBinding", "my-ccm:apiserver-authentication-reader")
    assert binding["metadata"]["namespace"] == "kube-system"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "my-ccm", "namespace": kube_namespace}
    ]
    assert not [o for o in rendered.of("ClusterRole") if "metrics-reader" in o["metadata"]["name"]]
    await dry_run_all(kube_client, rendered)


async def test_an_upgrade_over_an_installed_release_passes_server_side_dry_run(
    *,
    helm: Helm,
    tmp_path: Path,
    kube_client: KubeClient,
    kube_namespace: str,
    kube_cleanup: Cleanup,
    unique_name: Callable[[str], str],
) -> None:
    """Install a release for real (under a unique name, in a fresh namespace), then
    dry-run the objects of a changed release over it, as `helm upgrade` replaces them:
    the immutable fields (the selector) and the updates are accepted."""
    name = unique_name("ccm")
    values: dict[str, Any] = {"name": name, "namespace": "", "pvLabels": {"enabled": True}}
    installed = await asyncio.to_thread(
        render, helm, tmp_path, values, "--namespace", kube_namespace
    )
    for obj in installed.objects:
        await kube_client.create(collection(obj), obj)
        kube_cleanup.add(f"{collection(obj)}/{obj['metadata']['name']}")
    upgraded_values = {
        **values,
        "replicas": 3,
        "image": {"tag": "v2"},
        "cloudConfig": {"content": "state: /tmp/other.db\n"},
    }
    upgraded = await asyncio.to_thread(
        render, helm, tmp_path, upgraded_values, "--namespace", kube_namespace
    )
    assert upgraded.one("Deployment")["spec"]["replicas"] == 3
    assert await dry_run_all(kube_client, upgraded) == ["replaced"] * len(upgraded.objects)


# -- bad values are refused with a message that names them ---------------------------


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"kind": "Pod"}, ["/kind", "'Deployment', 'DaemonSet'"]),
        ({"replicas": -1}, ["/replicas", "minimum"]),
        ({"replicas": 0}, ["/replicas", "minimum"]),
        ({"replicas": "two"}, ["/replicas", "want null or integer"]),
        ({"cloudProvider": ""}, ["/cloudProvider"]),
        ({"replica": 3}, ["'replica' not allowed"]),
        ({"leaderElection": {"leaseDuration": "15 seconds"}}, ["/leaderElection/leaseDuration"]),
        ({"image": {"pullPolicy": "Sometimes"}}, ["/image/pullPolicy"]),
        ({"webhook": {"failurePolicy": "Retry"}}, ["/webhook/failurePolicy"]),
        # (helm v3.22 may report this one at a wrong location; the name is right)
        ({"extraArgs": {"--v": 3}}, ["invalid propertyName '--v'"]),
        ({"securePort": 70000}, ["/securePort", "maximum"]),
        ({"ippool": {"configMap": "kubevip"}}, ["/ippool/configMap"]),
        ({"ippool": {"enable": True}}, ["'enable' not allowed"]),
        ({"rbac": {"nodes": "no"}}, ["/rbac/nodes", "want boolean"]),
        ({"admissionPolicies": {"enable": False}}, ["'enable' not allowed"]),
        ({"loadBalancerClasses": ["kube-ccm.io/ip pool"]}, ["/loadBalancerClasses/0"]),
        ({"loadBalancerClasses": "kube-ccm.io/ippool"}, ["/loadBalancerClasses", "want array"]),
        ({"serveUnclassedLoadBalancers": "no"}, ["/serveUnclassedLoadBalancers"]),
        ({"libvirt": {"credentialsMountPath": "etc/libvirt"}}, ["/libvirt/credentialsMountPath"]),
        ({"libvirt": {"hostSocket": "yes"}}, ["/libvirt/hostSocket", "want boolean"]),
        ({"extraEnv": [{"value": "x"}]}, ["/extraEnv/0", "missing property 'name'"]),
        ({"extraEnv": {"A": "x"}}, ["/extraEnv", "want array"]),
        ({"extraVolumes": [{"emptyDir": {}}]}, ["/extraVolumes/0", "missing property 'name'"]),
        ({"extraVolumes": [{"name": "My_CA"}]}, ["/extraVolumes/0/name"]),
        (
            {"extraVolumeMounts": [{"name": "ca"}]},
            ["/extraVolumeMounts/0", "missing property 'mountPath'"],
        ),
        (
            {"extraVolumeMounts": [{"name": "ca", "mountPath": "etc/ca"}]},
            ["/extraVolumeMounts/0/mountPath"],
        ),
    ],
)
def test_the_schema_refuses_bad_values_with_a_readable_message(
    helm: Helm, tmp_path: Path, values: dict[str, Any], expected: list[str]
) -> None:
    result = run_helm(
        helm, "template", "kube-ccm", str(CHART), "-f", str(values_file(tmp_path, values))
    )
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr
    for text in expected:
        assert text in result.stderr, result.stderr
    assert "kind: Deployment" not in result.stdout


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (
            {"extraArgs": {"cloud-provider": "x"}},
            "extraArgs.cloud-provider: the chart sets --cloud-provider itself; "
            "use the value cloudProvider instead",
        ),
        ({"webhook": {"enabled": True}}, "webhook.enabled needs webhook.tls.secretName"),
        # (With the simulated default a single replica is computed, see below.)
        (
            {"cloudProvider": "mycloud", "leaderElection": {"enabled": False}},
            "leaderElection.enabled=false with more than one replica",
        ),
        (
            {"replicas": 2, "leaderElection": {"enabled": False}},
            "leaderElection.enabled=false with more than one replica",
        ),
        (
            {"kind": "DaemonSet", "leaderElection": {"enabled": False}},
            "leaderElection.enabled=false with kind=DaemonSet",
        ),
        (
            {"serveUnclassedLoadBalancers": False},
            "serveUnclassedLoadBalancers=false with no loadBalancerClasses would serve no Service",
        ),
        (
            {"extraArgs": {"load-balancer-class": "x"}},
            "extraArgs.load-balancer-class: the chart sets --load-balancer-class itself; "
            "use the value loadBalancerClasses instead",
        ),
        (
            {
                "libvirt": {
                    "credentialsSecret": "kube-ccm-libvirt",
                    "credentialsMountPath": "/etc/kubernetes/cloud/",
                }
            },
            "cloudConfig.mountPath and libvirt.credentialsMountPath are both mounted at "
            "/etc/kubernetes/cloud",
        ),
        (
            {
                "extraVolumes": [{"name": "ca", "emptyDir": {}}],
                "extraVolumeMounts": [{"name": "ca", "mountPath": "/etc/kubernetes/cloud/"}],
            },
            "cloudConfig.mountPath and extraVolumeMounts[0] (ca) are both mounted at "
            "/etc/kubernetes/cloud: give one of them another directory",
        ),
        (
            {"extraVolumeMounts": [{"name": "ca", "mountPath": "/tmp"}]},
            "the chart's /tmp and extraVolumeMounts[0] (ca) are both mounted at /tmp",
        ),
        (
            {
                "libvirt": {"credentialsSecret": LIBVIRT_SECRET},
                "extraVolumeMounts": [{"name": "ca", "mountPath": "/etc/kube-ccm/libvirt"}],
            },
            "libvirt.credentialsMountPath and extraVolumeMounts[0] (ca) are both mounted at "
            "/etc/kube-ccm/libvirt",
        ),
        (
            {
                "proxmox": {"tokenSecret": PROXMOX_SECRET, "mountPath": "/etc/kube-ccm/libvirt"},
                "libvirt": {"credentialsSecret": LIBVIRT_SECRET},
            },
            "libvirt.credentialsMountPath and proxmox.mountPath are both mounted at "
            "/etc/kube-ccm/libvirt",
        ),
        (
            {"extraVolumes": [{"name": "proxmox", "emptyDir": {}}]},
            'the chart names a volume "proxmox" itself (for proxmox.tokenSecret and '
            "proxmox.caConfigMap)",
        ),
        (
            {
                "extraVolumeMounts": [
                    {"name": "ca", "mountPath": "/etc/ca"},
                    {"name": "ca-2", "mountPath": "/etc/ca/"},
                ]
            },
            "extraVolumeMounts[0] (ca) and extraVolumeMounts[1] (ca-2) are both mounted at /etc/ca",
        ),
        (
            {"extraVolumes": [{"name": "tmp", "emptyDir": {}}]},
            'extraVolumes[0]: the chart names a volume "tmp" itself (for its /tmp): '
            "give yours another name",
        ),
        (
            {"extraVolumes": [{"name": "cloud-config", "secret": {"secretName": "x"}}]},
            'extraVolumes[0]: the chart names a volume "cloud-config" itself',
        ),
        # Refused even while the webhook is off: enabling it later must not collide.
        (
            {"extraVolumes": [{"name": "ca", "emptyDir": {}}, {"name": "webhook-tls"}]},
            'extraVolumes[1]: the chart names a volume "webhook-tls" itself '
            "(for webhook.tls.secretName)",
        ),
        (
            {"extraVolumes": [{"name": "ca", "emptyDir": {}}, {"name": "ca", "emptyDir": {}}]},
            'extraVolumes[0] and extraVolumes[1] are both named "ca": '
            "give each volume a name of its own",
        ),
        (
            {"env": [{"name": "TOKEN", "value": "a"}], "extraEnv": [{"name": "TOKEN"}]},
            "env[0] and extraEnv[0] both set the environment variable TOKEN: keep one of them",
        ),
    ],
)
def test_contradicting_values_fail_rendering_with_what_to_do(
    helm: Helm, tmp_path: Path, values: dict[str, Any], expected: str
) -> None:
    result = run_helm(
        helm, "template", "kube-ccm", str(CHART), "-f", str(values_file(tmp_path, values))
    )
    assert result.returncode != 0
    assert expected in result.stderr, result.stderr


@pytest.mark.parametrize(
    "values",
    [{"replicas": 1}, {"cloudProvider": "mycloud", "replicas": 1}, {}],
    ids=["explicit", "explicit-other-provider", "simulated-default"],
)
def test_a_single_replica_may_run_without_leader_election(
    helm: Helm, tmp_path: Path, values: dict[str, Any]
) -> None:
    rendered = render(helm, tmp_path, {**values, "leaderElection": {"enabled": False}})
    assert rendered.one("Deployment")["spec"]["replicas"] == 1
    assert "--leader-elect=false" in rendered.args()
    assert not [a for a in rendered.args() if a.startswith("--leader-elect-")]


def test_notes_tell_what_to_check(
    helm: Helm,
    tmp_path: Path,
    kube_controlplane: ControlPlane,
    unique_name: Callable[[str], str],
) -> None:
    # A name of its own: helm checks (read-only) that no object of another owner is taken.
    name = unique_name("ccm")
    result = run_helm(
        helm,
        "install",
        "kube-ccm",
        str(CHART),
        "--dry-run=client",
        "--kubeconfig",
        str(kube_controlplane.kubeconfig),
        "-f",
        str(values_file(tmp_path, {"name": name})),
    )
    assert result.returncode == 0, result.stderr
    notes = result.stdout.split("NOTES:", 1)[1]
    assert "--cloud-provider=external" in notes
    assert f"get pods -l app.kubernetes.io/name={name}" in notes
    assert "kubectl -n kube-system get lease cloud-controller-manager" in notes
    assert 'cloudProvider is "simulated"' in notes
    assert "WARNING" not in notes  # one simulated replica: nothing changes on failover


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"replicas": 2}, "each of the 2 replicas is a cloud of its own"),
        ({"kind": "DaemonSet"}, "every pod of the DaemonSet is a cloud of its own"),
        ({"cloudProvider": "mycloud", "replicas": 3}, None),
        ({"cloudProvider": "mycloud", "kind": "DaemonSet"}, None),
    ],
    ids=["simulated-2", "simulated-daemonset", "other-3", "other-daemonset"],
)
def test_notes_warn_that_simulated_replicas_are_separate_clouds(
    *,
    helm: Helm,
    tmp_path: Path,
    kube_controlplane: ControlPlane,
    unique_name: Callable[[str], str],
    values: dict[str, Any],
    expected: str | None,
) -> None:
    result = run_helm(
        helm,
        "install",
        "kube-ccm",
        str(CHART),
        "--dry-run=client",
        "--kubeconfig",
        str(kube_controlplane.kubeconfig),
        "-f",
        str(values_file(tmp_path, {"name": unique_name("ccm"), **values})),
    )
    assert result.returncode == 0, result.stderr
    notes = " ".join(result.stdout.split("NOTES:", 1)[1].split())
    if expected is None:
        assert "WARNING" not in notes
        return
    assert expected in notes
    assert "every load balancer address changes when another pod takes the lease over" in notes
