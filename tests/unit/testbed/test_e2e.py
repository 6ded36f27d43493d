"""The pure parts of :mod:`kube_ccm.testbed.e2e`: the pins, the spec selection, the
skips, reading ginkgo's report and writing the docs' table. The run itself is
``tests/integration/test_e2e_loadbalancer.py``."""

from __future__ import annotations

import ipaddress
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from kube_ccm.testbed import e2e, image
from kube_ccm.testing import binaries

LB = "[sig-network] LoadBalancers [Feature:LoadBalancer]"
LOCAL = "[sig-network] LoadBalancers ExternalTrafficPolicy: Local [Feature:LoadBalancer] [Slow]"
SERVICES = "[sig-network] Services"
UPSTREAM_NAMES = (
    f"{LB} should be able to change the type and ports of a TCP service [Slow]",
    f"{LB} should handle load balancer cleanup finalizer for service [Slow]",
    f"{LB} should be able to create LoadBalancer Service without NodePort and change it [Slow]",
    f"{LB} should only allow access from service loadbalancer source ranges [Slow]",
    f"{LB} should be able to preserve UDP traffic when server pod cycles for a LoadBalancer "
    "service on the same nodes",
    f"{LOCAL} should work from pods",
    f"{SERVICES} should fail health check node port if there are only terminating endpoints",
    f"{SERVICES} should implement NodePort and HealthCheckNodePort correctly when "
    "ExternalTrafficPolicy changes",
    f"{LOCAL} should work for type=LoadBalancer",
    f"{LOCAL} should only target nodes with endpoints",
    f"{LB} should be able to switch session affinity for LoadBalancer service with Local "
    "traffic policy [Slow] [LinuxOnly]",
)
"""Spec texts as v1.36.3's e2e.test reports them (labels rendered into the text)."""


def _replaces(go_mod: Path) -> str:
    return go_mod.read_text().partition("\nreplace (")[2]


def test_the_e2e_module_builds_the_control_planes_kubernetes_with_the_same_replaces() -> None:
    assert e2e.kubernetes_version() == binaries.pinned_versions().kubernetes
    replaces = _replaces(Path(e2e.__file__).parent / "gobuild-e2e" / "go.mod")
    assert replaces
    assert replaces == _replaces(Path(binaries.__file__).parent / "gobuild" / "go.mod")


def test_the_e2e_builds_are_keyed_apart_from_the_control_plane() -> None:
    assert e2e.e2e_cache_dir().parent != binaries.cache_dir().parent
    assert e2e.coredns_cache_dir().name.startswith(f"coredns-{e2e.coredns_version()}_")
    assert e2e.coredns_version() == "v1.15.0"


def test_the_full_focus_selects_every_loadbalancer_spec_and_the_service_specs() -> None:
    focus = re.compile(e2e.FULL_FOCUS)
    assert all(focus.search(name) for name in UPSTREAM_NAMES)
    assert not focus.search(f"{SERVICES} should serve a basic endpoint from pods [Conformance]")


def test_the_quick_and_ippool_forms_select_a_subset_without_slow_rolling_updates() -> None:
    full = re.compile(e2e.FULL_FOCUS)
    for focus in (e2e.QUICK_FOCUS, e2e.IPPOOL_FOCUS):
        selected = [n for n in UPSTREAM_NAMES if re.search(focus, n)]
        assert selected
        assert all(full.search(n) for n in selected)
        assert not re.search(
            focus,
            f"{LB} should not have connectivity disruption during "
            "rolling update with externalTrafficPolicy=Cluster [Slow]",
        )
        assert not re.search(focus, f"{LOCAL} should work for type=LoadBalancer")


def test_every_skip_has_a_reason_and_matches_a_spec_of_the_focus() -> None:
    for skip in (*e2e.SKIPS, *e2e.UPSTREAM_SKIPS):
        assert skip.reason
        assert any(re.search(skip.pattern, n) for n in UPSTREAM_NAMES), skip.pattern


def _spec(name: str, state: str, seconds: float = 1.0, message: str = "") -> dict[str, Any]:
    prefix, _, leaf = name.partition(" should ")
    return {
        "ContainerHierarchyTexts": [prefix],
        "LeafNodeText": f"should {leaf}",
        "LeafNodeType": "It",
        "State": state,
        "RunTime": int(seconds * 1e9),
        "Failure": {"Message": message} if message else None,
    }


def _report(tmp_path: Path, *specs: dict[str, Any]) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    suite = {"LeafNodeType": "SynchronizedBeforeSuite", "State": "passed"}
    (tmp_path / "report.json").write_text(json.dumps([{"SpecReports": [suite, *specs]}]))
    return tmp_path


def test_results_keep_the_selected_specs_and_tell_listed_from_unexpected_skips(
    tmp_path: Path,
) -> None:
    finalizer, udp, local, hc_change, terminating = (UPSTREAM_NAMES[i] for i in (1, 4, 5, 7, 6))
    report = _report(
        tmp_path,
        _spec(finalizer, "passed", 12),
        _spec(udp, "failed", 90, "timed out waiting\nsecond line"),
        _spec(local, "skipped", 0, "skipped - LoadBalancer uses 'Proxy' IPMode"),
        _spec(hc_change, "skipped", 0),
        _spec(terminating, "skipped"),  # not selected by the focus below
        _spec(f"{SERVICES} should serve a basic endpoint from pods", "skipped"),
    )
    focus = "|".join(re.escape(n) for n in (finalizer, udp, local, hc_change))
    results = e2e.Results.read(report, focus, e2e.SKIPS, 1, 100.0)
    assert [s.name for s in results.specs] == [finalizer, udp, local]
    assert [s.name for s in results.failed()] == [udp]
    assert [s.name for s in results.unexpected_skips()] == [local]
    assert [name for name, _ in results.listed_skips] == [hc_change]
    assert results.specs[1].seconds == 90
    table = results.table()
    assert "| LoadBalancers [Feature:LoadBalancer] should handle load balancer cleanup" in table
    assert "| passed | 12 s |" in table
    assert "**failed**: timed out waiting |" in table
    assert "skipped (listed): upstream skips it below 3 schedulable nodes" in table
    assert (
        results.summary()
        == "3 specs ran: 1 failed, 1 passed, 1 skipped, 1 skipped by the listed skips"
    )


def test_the_table_says_which_specs_cloud_provider_kind_skips(tmp_path: Path) -> None:
    report = _report(
        tmp_path, _spec(UPSTREAM_NAMES[2], "passed"), _spec(UPSTREAM_NAMES[1], "passed")
    )
    rows = e2e.Results.read(report, e2e.FULL_FOCUS, (), 0, 1.0).table().splitlines()[2:]
    assert rows[0].endswith("| skips it |"), rows[0]
    assert rows[1].endswith("| runs it |"), rows[1]


def test_a_missing_report_says_so(tmp_path: Path) -> None:
    with pytest.raises(e2e.E2EError, match=re.escape("wrote no report (exit 2)")):
        e2e.Results.read(tmp_path, e2e.FULL_FOCUS, (), 2, 1.0)


def test_a_relative_report_dir_is_where_the_run_reads_the_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The make target's default ``_artifacts/e2e`` is relative and e2e.test runs in
    it: the report must land where the run reads it (a full run of 17 passed specs
    once ended in "wrote no report" because it did not)."""
    monkeypatch.chdir(tmp_path)

    def e2e_test(argv: list[str], *, cwd: Path, **_: Any) -> Any:
        flag = "--ginkgo.json-report="
        path = Path(next(a for a in argv if a.startswith(flag)).removeprefix(flag))
        (cwd / path).write_text(json.dumps([{"SpecReports": []}]))  # as Go resolves it
        return type("Done", (), {"returncode": 0})()

    async def nothing(*_: Any) -> None:
        return None

    bed: Any = object.__new__(e2e.E2EBed)
    bed.binaries = e2e.E2EBinaries(
        e2e_test=tmp_path / "e2e.test",
        agnhost=tmp_path / "agnhost",
        kubectl=tmp_path / "kubectl",
        coredns=tmp_path / "coredns",
        builds={},
    )
    bed.kubeconfig = tmp_path / "kubeconfig"
    bed.cluster = type("C", (), {"nodes": type("N", (), {"client_netns": "client"})()})()
    monkeypatch.setattr(subprocess, "run", e2e_test)
    monkeypatch.setattr(bed, "_namespaces_gone", nothing)
    results = bed.run("quick", Path("_artifacts/e2e/servicelb"), skips=())
    assert results.returncode == 0
    assert (tmp_path / "_artifacts/e2e/servicelb/report.json").exists()


def test_the_docs_table_is_replaced_between_its_markers_only(tmp_path: Path) -> None:
    docs = tmp_path / "e2e.md"
    docs.write_text("# e2e\n\nintro\n")
    first = e2e.Results.read(
        _report(tmp_path / "a", _spec(UPSTREAM_NAMES[1], "failed")), e2e.FULL_FOCUS, (), 1, 1.0
    )
    e2e.write_docs_table(first, "servicelb", "first run", docs)
    e2e.write_docs_table(first, "ippool", "ippool run", docs)
    second = e2e.Results.read(
        _report(tmp_path / "b", _spec(UPSTREAM_NAMES[1], "passed")), e2e.FULL_FOCUS, (), 0, 1.0
    )
    e2e.write_docs_table(second, "servicelb", "second run", docs)
    text = docs.read_text()
    assert text.startswith("# e2e\n\nintro\n")
    assert "first run" not in text
    assert "second run" in text
    assert "ippool run" in text
    assert text.count("<!-- e2e:servicelb:begin -->") == 1
    assert text.index("## servicelb") < text.index("## ippool")


def test_coredns_answers_the_cluster_zones_only_at_the_dns_service_address() -> None:
    objects = e2e.coredns_manifests("localhost/kube-ccm-e2e/coredns:v1.15.0-x")
    (config,) = [o for o in objects if o["kind"] == "ConfigMap"]
    corefile = config["data"]["Corefile"]
    assert "kubernetes cluster.local" in corefile
    assert "forward" not in corefile  # nothing asked outside the machine
    (service,) = [o for o in objects if o["kind"] == "Service"]
    assert service["metadata"]["name"] == "kube-dns"
    assert service["spec"]["clusterIP"] == e2e.DNS_IP
    assert ipaddress.ip_address(e2e.DNS_IP) in ipaddress.ip_network(e2e.SERVICE_CIDR)
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["imagePullPolicy"] == "Never"
    assert [e2e._collection(o) for o in objects] == [
        "/api/v1/namespaces/kube-system/serviceaccounts",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        "/api/v1/namespaces/kube-system/configmaps",
        "/apis/apps/v1/namespaces/kube-system/deployments",
        "/api/v1/namespaces/kube-system/services",
    ]
    yaml.safe_dump_all(objects)  # plain data


def test_the_agnhost_base_has_what_the_specs_run_and_a_wget_that_tries_once() -> None:
    packages = set(e2e.AGNHOST_BASE.packages)
    assert {"curl", "wget", "netcat-openbsd", "dnsutils", "iproute2"} <= packages
    assert "tries = 1" in e2e.WGETRC.splitlines()
    assert e2e.AGNHOST_BASE.name != image.STAND_IN_RECIPE.name  # its own base


def test_specs_a_suite_timeout_left_out_are_not_run_not_unexpected_skips(tmp_path: Path) -> None:
    report = _report(
        tmp_path,
        _spec(UPSTREAM_NAMES[1], "interrupted", 30, "Interrupted by Timeout"),
        _spec(UPSTREAM_NAMES[2], "skipped"),
    )
    results = e2e.Results.read(report, e2e.FULL_FOCUS, (), 1, 60.0)
    assert [s.name for s in results.not_run()] == [UPSTREAM_NAMES[2]]
    assert results.unexpected_skips() == []
    assert [s.name for s in results.failed()] == [UPSTREAM_NAMES[1]]
    assert "| not run (suite timeout) |" in results.table()
    assert results.summary() == "2 specs ran: 1 interrupted, 1 not run"
