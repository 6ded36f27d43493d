"""examples/minimal-provider is exactly what ``kube-ccm new-provider example`` writes.

There is one provider skeleton: the template in ``kube_ccm/app/tools/templates/provider``.
The example is its output, checked in so that it can be read, linted and type-checked
(mypy checks ``kube_ccm_example``), installed with pip and run against a real
kube-apiserver (``tests/integration/test_example_provider.py``) and put through the
conformance kit (``tests/conformance/test_conformance_example_provider.py``). After
a change to the template, write it again::

    python -m kube_ccm.app.tools.newprovider --update-example

Its own tests are the template's, which ``tests/unit/app/test_new_provider_template.py``
runs on a freshly generated package.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from kube_ccm_example.main import main as example_main
from kube_ccm_example.provider import PROVIDER_NAME, factory

from kube_ccm.app.tools.newprovider import EXAMPLE_NAME, files_for, write_package
from kube_ccm.cloudprovider import Registry

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "minimal-provider"
SKIPPED = {"__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache", "build"}


def checked_in() -> dict[str, str]:
    files = {}
    for path in sorted(EXAMPLE.rglob("*")):
        parts = path.relative_to(EXAMPLE).parts
        if path.is_dir() or any(p in SKIPPED or p.endswith(".egg-info") for p in parts):
            continue
        files["/".join(parts)] = path.read_text(encoding="utf-8")
    return files


def test_the_example_is_the_templates_output_file_by_file(tmp_path: Path) -> None:
    """Regenerated into a temporary directory and compared: a template change without
    ``python -m kube_ccm.app.tools.newprovider --update-example`` fails here."""
    written = write_package(EXAMPLE_NAME, tmp_path / "example")
    generated = {
        path.relative_to(tmp_path / "example").as_posix(): path.read_text(encoding="utf-8")
        for path in written
    }
    assert generated == files_for(EXAMPLE_NAME)
    example = checked_in()
    stale = "python -m kube_ccm.app.tools.newprovider --update-example"
    assert sorted(example) == sorted(generated), f"files differ; run {stale}"
    for path, text in generated.items():
        assert example[path] == text, f"{path} differs from the template's output; run {stale}"


def test_it_declares_its_entry_point_and_command() -> None:
    project = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["project"]
    entry_points = project["entry-points"]["kube_ccm.cloud_providers"]
    assert entry_points == {"example": "kube_ccm_example.provider:factory"}
    assert project["scripts"] == {"example-cloud-controller-manager": "kube_ccm_example.main:main"}
    assert PROVIDER_NAME == "example"
    assert callable(example_main)


def test_the_registry_builds_it_from_the_entry_points_target() -> None:
    registry = Registry(entry_point_group=None)
    registry.register(PROVIDER_NAME, factory)
    provider = registry.get_cloud_provider("example", b"region: r2\n")
    assert provider is not None
    assert provider.provider_name() == "example"
    assert provider.instances_v2() is not None
    assert provider.load_balancer() is not None
