"""No module of the product builds an API path: requests name a resource descriptor
(``kube_ccm.runtime.resources``) and the typed client derives the URL, as lightkube's
``prepare_request`` (issue 30, item 2; docs/design.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import kube_ccm

ROOT = Path(kube_ccm.__file__).parent

# Where paths are made, or only matched (never sent).
ALLOWED = {
    "runtime/client.py": "the client",
    "runtime/resources.py": "the descriptors derive every path",
    "runtime/dryrun.py": "matches the review groups' prefix, sends nothing",
    "app/manager.py": "matches the review groups' prefix, sends nothing",
}
TEST_BEDS = ("testing/", "testbed/")
"""The test beds check what goes on the wire, in the wire's terms."""


def _api_paths(path: Path, root: Path = ROOT) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value.startswith(("/api/", "/apis/"))
        ):
            found.append(f"{path.relative_to(root)}:{node.lineno}: {node.value[:80]}")
    return found


def test_no_module_outside_the_client_builds_an_api_path() -> None:
    offenders = []
    for path in sorted(ROOT.rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if relative in ALLOWED or relative.startswith(TEST_BEDS):
            continue
        offenders += _api_paths(path)
    assert offenders == []


def test_the_check_sees_an_f_string_path(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text('name = "n"\npath = f"/api/v1/nodes/{name}"\n')
    assert len(_api_paths(module, tmp_path)) == 1
