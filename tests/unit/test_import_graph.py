"""The packages of ``kube_ccm`` have an order, and every import follows it.

Two checks, both counting imports inside functions and under ``TYPE_CHECKING``:

* **layers**: each sub-package (``api``, ``runtime``, ...) has a row in :data:`LAYERS`,
  bottom first, naming the packages below it that it may import; an import from one
  sub-package into another that its row does not name (an arrow running back up, or a
  side package reaching past the faces it is allowed) fails;
* **circles**: no two modules import each other, directly or around a circle.

docs/design.md ("Layout and the direction of dependencies") explains the order.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

import kube_ccm

ROOT = Path(kube_ccm.__file__).parent


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module → the modules of the package it imports (``from a import b`` counts ``a.b``
    when that is a module, else ``a``)."""
    files = {_module_name(f, root): f for f in root.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    module = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    module = node.module or ""
                submodules = [f"{module}.{alias.name}" for alias in node.names]
                found = [m for m in submodules if m in files]
                targets = found or [module]
            graph[name].update(t for t in targets if t in files and t != name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


ROOT_PACKAGE = "(root)"
"""The package's own ``__init__`` (``__version__``): anyone may import it."""

PROVIDER_FAKES = frozenset({"moto", "fixtures", "fakepve", "libvirtd"})
"""Modules of a provider package (``kube_ccm.providers.<name>.<module>``) that fake its
cloud for tests and the sandbox, as the out-of-tree DigitalOcean package keeps its fake
beside it: test tools, in the layer :data:`PROVIDER_FAKES_LAYER`, not the provider's."""
PROVIDER_FAKES_LAYER = "providers (fakes)"
PROVIDER_SANDBOX_LAYER = "providers (sandbox hooks)"

LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    # API types: well-known names and compact structs; imports nothing of ours.
    ("api", frozenset()),
    # Generic machinery without cloud knowledge: client, informers, work queue, events.
    ("runtime", frozenset({"api"})),
    # The contract a cloud implements; it may hand providers runtime's client.
    ("cloudprovider", frozenset({"api", "runtime"})),
    # The controllers, and the cloud-call boundary that wraps the contract for them.
    ("controllers", frozenset({"api", "runtime", "cloudprovider"})),
    # At the side: in-tree providers see only the API types and the contract's face,
    # as an out-of-tree provider does (never runtime, never the controllers).
    ("providers", frozenset({"api", "cloudprovider"})),
    # At the side: the public face for provider authors (fake cluster, world,
    # conformance kit), over the machinery and the simulated provider.
    ("testing", frozenset({"api", "runtime", "cloudprovider", "controllers", "providers"})),
    # At the side: a provider's fakes of its cloud, beside it (:data:`PROVIDER_FAKES`),
    # on the testing face; the provider itself never imports them.
    (
        PROVIDER_FAKES_LAYER,
        frozenset({"api", "runtime", "cloudprovider", "controllers", "providers", "testing"}),
    ),
    # Our own real-node, image and control-plane test bed (issue 40's move out of
    # ``testing``); it may use the public face and the providers' fakes.
    (
        "testbed",
        frozenset(
            {
                "api",
                "runtime",
                "cloudprovider",
                "controllers",
                "providers",
                "testing",
                PROVIDER_FAKES_LAYER,
            }
        ),
    ),
    # The local end-to-end environment, over the test bed.
    (
        "sandbox",
        frozenset(
            {"api", "runtime", "cloudprovider", "controllers", "providers", "testing", "testbed"}
        ),
    ),
    # A provider's local cloud for the sandbox (``kube_ccm.providers.<name>.sandbox``,
    # found by name, never imported by the provider): over the sandbox's hook contract.
    (
        PROVIDER_SANDBOX_LAYER,
        frozenset(
            {
                "api",
                "runtime",
                "cloudprovider",
                "controllers",
                "providers",
                "testing",
                PROVIDER_FAKES_LAYER,
                "sandbox",
            }
        ),
    ),
    # The daemon and its commands (the sandbox and control-plane commands included).
    (
        "app",
        frozenset(
            {
                "api",
                "runtime",
                "cloudprovider",
                "controllers",
                "providers",
                "testing",
                "testbed",
                "sandbox",
            }
        ),
    ),
    # ``python -m kube_ccm``.
    ("__main__", frozenset({"app"})),
)
"""Bottom first; each row names the packages below it that it may import."""


def package_of(module: str) -> str:
    """``kube_ccm.runtime.client`` → ``runtime``; the root package → :data:`ROOT_PACKAGE`;
    a provider's fakes and sandbox hook → their layers."""
    parts = module.split(".")
    if len(parts) == 4 and parts[1] == "providers":
        if parts[3] in PROVIDER_FAKES:
            return PROVIDER_FAKES_LAYER
        if parts[3] == "sandbox":
            return PROVIDER_SANDBOX_LAYER
    return parts[1] if len(parts) > 1 else ROOT_PACKAGE


def layer_violations(
    graph: Mapping[str, set[str]],
    layers: Sequence[tuple[str, frozenset[str]]] = LAYERS,
) -> list[str]:
    """Every import between two sub-packages that the importer's row does not allow,
    and every sub-package without a row, as readable lines (empty: the layers hold)."""
    allowed = dict(layers)
    found: list[str] = []
    for package in sorted({package_of(m) for m in graph} - set(allowed) - {ROOT_PACKAGE}):
        found.append(f"{package}: not in the layer table; give it a row")
    for module in sorted(graph):
        source = package_of(module)
        for target in sorted(graph[module]):
            to = package_of(target)
            if to in (source, ROOT_PACKAGE) or source not in allowed:
                continue
            if to not in allowed[source]:
                found.append(f"{module} imports {target}: {source} may not import {to}")
    return found


def test_the_layer_table_points_down() -> None:
    """Each row names only packages of rows below it, so no allowed arrow runs up."""
    below: set[str] = set()
    for package, may_import in LAYERS:
        assert may_import <= below, f"{package} may import {sorted(may_import - below)}"
        below.add(package)


@pytest.fixture(scope="module")
def tree() -> dict[str, set[str]]:
    """The import graph of the installed ``kube_ccm``, parsed once for this module."""
    return import_graph()


def test_every_import_between_packages_points_down(tree: dict[str, set[str]]) -> None:
    assert layer_violations(tree) == []


def test_no_in_tree_provider_imports_the_runtime(tree: dict[str, set[str]]) -> None:
    """What a provider needs of the machinery comes through ``kube_ccm.cloudprovider``."""
    reaching = sorted(
        f"{module} imports {target}"
        for module, targets in tree.items()
        if package_of(module) == "providers"
        for target in targets
        if package_of(target) == "runtime"
    )
    assert reaching == []


def _planted_package(tmp_path: Path, upward: str) -> Path:
    """A package shaped as ours (api, runtime, cloudprovider, providers), each module
    importing down, plus one module with the ``upward`` import line."""
    package = tmp_path / "kube_ccm"
    for sub in ("api", "runtime", "cloudprovider", "providers"):
        (package / sub).mkdir(parents=True)
        (package / sub / "__init__.py").write_text("")
    (package / "__init__.py").write_text('__version__ = "0"\n')
    (package / "api" / "objects.py").write_text("class Node: ...\n")
    (package / "runtime" / "client.py").write_text("from kube_ccm.api.objects import Node\n")
    (package / "cloudprovider" / "__init__.py").write_text(
        "from kube_ccm.runtime.client import Node\n"
    )
    (package / "providers" / "mine.py").write_text(
        "from kube_ccm import __version__\nfrom kube_ccm.cloudprovider import Node\n"
    )
    (package / "runtime" / "planted.py").write_text(upward)
    return package


def test_the_planted_package_holds_without_the_upward_import(tmp_path: Path) -> None:
    assert layer_violations(import_graph(_planted_package(tmp_path, ""))) == []


@pytest.mark.parametrize(
    ("planted", "expected"),
    [
        (
            "from kube_ccm.cloudprovider import Node\n",
            "kube_ccm.runtime.planted imports kube_ccm.cloudprovider: "
            "runtime may not import cloudprovider",
        ),
        (
            "def later():\n    from kube_ccm.providers import mine\n",
            "kube_ccm.runtime.planted imports kube_ccm.providers.mine: "
            "runtime may not import providers",
        ),
        (
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from kube_ccm.cloudprovider import Node\n",
            "kube_ccm.runtime.planted imports kube_ccm.cloudprovider: "
            "runtime may not import cloudprovider",
        ),
    ],
    ids=["module-level", "inside-a-function", "type-checking-only"],
)
def test_a_planted_upward_import_is_found(tmp_path: Path, planted: str, expected: str) -> None:
    """No module circle here (the contract does not import the planted module), so only
    the layer check can see it."""
    graph = import_graph(_planted_package(tmp_path, planted))
    assert cycles(graph) == []
    assert layer_violations(graph) == [expected]


def test_a_provider_reaching_into_the_runtime_is_found(tmp_path: Path) -> None:
    package = _planted_package(tmp_path, "")
    (package / "providers" / "reach.py").write_text("from kube_ccm.runtime.client import Node\n")
    assert layer_violations(import_graph(package)) == [
        "kube_ccm.providers.reach imports kube_ccm.runtime.client: providers may not import runtime"
    ]


def test_a_package_without_a_row_is_found(tmp_path: Path) -> None:
    package = _planted_package(tmp_path, "")
    (package / "newthing").mkdir()
    (package / "newthing" / "__init__.py").write_text("from kube_ccm.api.objects import Node\n")
    assert layer_violations(import_graph(package)) == [
        "newthing: not in the layer table; give it a row"
    ]


def test_no_module_imports_back_up_a_floor(tree: dict[str, set[str]]) -> None:
    assert cycles(tree) == []


def test_a_circle_through_a_function_level_import_is_found(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.b import B\n")
    (package / "b.py").write_text("def f():\n    from pkg import c\n")
    (package / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import A\n"
    )
    (package / "d.py").write_text("from pkg.a import A\n")
    assert cycles(import_graph(package)) == [["pkg.a", "pkg.b", "pkg.c"]]


def test_a_provider_importing_its_own_fake_is_refused() -> None:
    """The fakes beside a provider are test tools: the provider never imports them."""
    planted = {
        "kube_ccm.providers.aws.provider": {"kube_ccm.providers.aws.moto"},
        "kube_ccm.providers.aws.moto": set(),
        "kube_ccm.providers.aws.sandbox": {"kube_ccm.providers.aws.moto"},
    }
    assert layer_violations(planted) == [
        "kube_ccm.providers.aws.provider imports kube_ccm.providers.aws.moto: "
        "providers may not import providers (fakes)"
    ]
