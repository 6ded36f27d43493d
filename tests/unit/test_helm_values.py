"""deploy/helm/kube-ccm: every value is documented (values.yaml comment, README row)
and described by values.schema.json, without needing helm; and how
kube_ccm.testbed.helm finds helm or says why it cannot build it.

The rendering itself and the schema's refusals are proven with a real helm in
tests/integration/test_helm_chart.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from kube_ccm.testbed import helm
from kube_ccm.testing.binaries import CACHE_ENV, GO_ENV

CHART = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "kube-ccm"
ROW = re.compile(r"^\| `([^`]+)` \|")
KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z][A-Za-z0-9]*):")


def values() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    return loaded


def schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
    return loaded


def leaves(node: dict[str, Any], prefix: str = "") -> list[str]:
    """Value paths the schema describes as leaves (objects with fixed properties
    are descended into; free-form maps and lists are leaves)."""
    found: list[str] = []
    for key, sub in node["properties"].items():
        if key == "global":
            continue
        path = f"{prefix}{key}"
        if "properties" in sub:
            found += leaves(sub, path + ".")
        else:
            found.append(path)
    return found


def readme_rows() -> list[str]:
    return [
        match.group(1)
        for line in (CHART / "README.md").read_text().splitlines()
        if (match := ROW.match(line)) and match.group(1) != "Value"
    ]


def lookup(tree: dict[str, Any], path: str) -> tuple[bool, Any]:
    node: Any = tree
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


def test_the_schema_describes_exactly_the_values_in_values_yaml() -> None:
    def walk(tree: dict[str, Any], node: dict[str, Any], prefix: str) -> list[str]:
        problems: list[str] = []
        declared = set(node["properties"]) - {"global"}
        given = set(tree)
        problems += [f"{prefix}{k}: in values.yaml, not in the schema" for k in given - declared]
        problems += [f"{prefix}{k}: in the schema, not in values.yaml" for k in declared - given]
        for key in declared & given:
            sub = node["properties"][key]
            if "properties" in sub:
                assert isinstance(tree[key], dict), f"{prefix}{key} should be a map"
                problems += walk(tree[key], sub, f"{prefix}{key}.")
        return problems

    assert schema()["additionalProperties"] is False  # a mistyped key is refused
    assert walk(values(), schema(), "") == []


def test_every_value_has_a_readme_row_and_every_row_a_value() -> None:
    paths = leaves(schema())
    rows = readme_rows()
    assert sorted(set(paths) - set(rows)) == [], "values missing from README.md's table"
    assert sorted(set(rows) - set(paths)) == [], "README.md documents values that do not exist"
    assert len(rows) == len(set(rows)), "a value is documented twice"


def test_every_value_in_values_yaml_has_a_comment_above_it() -> None:
    documented = set(leaves(schema()))
    stack: list[tuple[int, str]] = []
    previous = ""
    undocumented: list[str] = []
    for line in (CHART / "values.yaml").read_text().splitlines():
        match = KEY.match(line)
        if match:
            indent = len(match.group("indent"))
            while stack and stack[-1][0] >= indent:
                stack.pop()
            path = ".".join([*(key for _, key in stack), match.group("key")])
            stack.append((indent, match.group("key")))
            if path in documented and not previous.lstrip().startswith("#"):
                undocumented.append(path)
        if line.strip():
            previous = line
    assert undocumented == []


def test_readme_defaults_of_scalar_values_match_values_yaml() -> None:
    """A README default written as a plain scalar must be the real default."""
    given = values()
    wrong: list[str] = []
    for line in (CHART / "README.md").read_text().splitlines():
        match = re.match(r"^\| `([^`]+)` \| `([^`]*)` \|", line)
        if not match or match.group(1) == "Value":
            continue
        found, default = lookup(given, match.group(1))
        assert found, match.group(1)
        if isinstance(default, (dict, list)):
            continue
        written = yaml.safe_load(match.group(2)) if match.group(2) else ""
        if written != default and not (written is None and default == ""):
            wrong.append(f"{match.group(1)}: README says {match.group(2)!r}, values {default!r}")
    assert wrong == []


def test_the_defaults_mirror_deploy() -> None:
    given = values()
    deployment = next(
        d
        for d in yaml.safe_load_all((CHART.parents[2] / "deploy" / "deployment.yaml").read_text())
        if d and d["kind"] == "Deployment"
    )
    pod = deployment["spec"]["template"]["spec"]
    # replicas is computed (helpers.tpl "kube-ccm.replicas"): deploy/'s 2 for a real
    # provider, 1 for the default simulated cloud, whose state is per pod (a second
    # replica would be a second cloud). Rendered in tests/integration/test_helm_chart.py.
    assert given["replicas"] is None
    assert deployment["spec"]["replicas"] == 2
    assert given["nodeSelector"] == pod["nodeSelector"]
    assert given["tolerations"] == pod["tolerations"]
    assert given["affinity"] == pod["affinity"]
    assert given["priorityClassName"] == pod["priorityClassName"]
    assert given["podSecurityContext"] == pod["securityContext"]
    container = pod["containers"][0]
    assert given["resources"] == container["resources"]
    assert given["securityContext"] == container["securityContext"]


def test_chart_metadata() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2"
    assert chart["name"] == "kube-ccm"
    assert re.fullmatch(r"\d+\.\d+\.\d+", chart["version"])
    assert (CHART / "templates" / "NOTES.txt").is_file()


# -- kube_ccm.testbed.helm: finding helm, and the errors when it cannot be built --------


def _script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(helm.HELM_ENV, raising=False)
    return tmp_path


def test_the_pin_is_read_from_the_wrapper_module() -> None:
    pin = helm.pinned()
    assert re.fullmatch(r"v3\.\d+\.\d+", pin.helm)
    assert re.fullmatch(r"v0\.\d+\.\d+", pin.client_go)
    assert pin.go.startswith("1.")
    assert pin.helm in helm.cache_dir(pin).name


def test_without_go_the_error_says_to_install_it(
    empty_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(GO_ENV, raising=False)
    monkeypatch.setenv("PATH", str(empty_cache / "nothing-here"))
    with pytest.raises(helm.HelmBinaryError, match=r"install Go >= 1\.\d+.*KUBE_CCM_HELM"):
        helm.ensure_helm(log=False)


def test_a_too_old_go_is_refused_before_building(
    empty_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = _script(empty_cache / "go", 'echo "go version go1.20.3 linux/amd64"')
    monkeypatch.setenv(GO_ENV, str(old))
    with pytest.raises(helm.HelmBinaryError, match=r"needs Go >= .* is go1\.20\.3"):
        helm.ensure_helm(log=False)


def test_a_failed_build_reports_go_s_output_and_what_to_check(
    empty_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    failing = _script(
        empty_cache / "go",
        'if [ "$1" = version ]; then echo "go version go9.9.9 linux/amd64"; exit 0; fi\n'
        'echo "dial tcp: lookup proxy.golang.org: no such host" >&2; exit 1',
    )
    monkeypatch.setenv(GO_ENV, str(failing))
    with pytest.raises(helm.HelmBinaryError, match=r"(?s)no such host.*module proxy is reachable"):
        helm.ensure_helm(log=False)
    assert not (helm.cache_dir() / "helm").exists()


def test_kube_ccm_helm_overrides_and_is_checked(
    empty_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = _script(empty_cache / "helm", 'echo "v3.19.1+g1234abc"')
    monkeypatch.setenv(helm.HELM_ENV, str(fake))
    found = helm.ensure_helm(log=False)
    assert (found.path, found.version, found.source) == (fake, "v3.19.1", "env")
    monkeypatch.setenv(helm.HELM_ENV, str(empty_cache))  # a directory
    with pytest.raises(helm.HelmBinaryError, match="not an executable file"):
        helm.ensure_helm(log=False)


def test_a_cached_build_is_used_without_go(
    empty_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = helm.cache_dir()
    target.mkdir(parents=True)
    _script(target / "helm", "true")
    monkeypatch.setenv("PATH", str(empty_cache / "nothing-here"))
    found = helm.ensure_helm(log=False)
    assert (found.path, found.source) == (target / "helm", "cache")
