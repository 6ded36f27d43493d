"""``kube-ccm new-provider NAME``: a provider package to start from.

It writes a pip package ``kube-ccm-NAME`` whose provider already works against an
in-memory fake of a cloud that it ships (``fake.py``): instances and load balancers
behind a small client class (``client.py``), the seam where the author puts their
cloud's SDK, whose credentials ``initialize`` proves with one call at start-up. It
has its entry point, a command of its own (``NAME-cloud-controller-manager``, the
counterpart of upstream's template ``main.go``), a typed cloud-config, tests that run
kube-ccm's controllers against it, a Dockerfile and a README with the next steps. Nothing in
it is generated at run time: it is an ordinary package to edit.

The template is a real package, shipped as package data in
``kube_ccm/app/tools/templates/provider/``: the provider ``mycloud``, valid Python that
ruff and mypy check as it is. Rendering replaces its four spellings of that name
(:data:`PLACEHOLDERS`) by the new provider's, in file contents and paths, and
nothing else; ``examples/minimal-provider`` is its output for ``example``
(``python -m kube_ccm.app.tools.newprovider --update-example`` writes it again, and a
unit test fails when it drifts).
"""

from __future__ import annotations

import argparse
import keyword
import re
import shutil
import sys
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from kube_ccm import __version__

__all__ = [
    "EXAMPLE_NAME",
    "PLACEHOLDERS",
    "TEMPLATE_NAME",
    "NewProviderError",
    "files_for",
    "main",
    "minor_range",
    "template_files",
    "update_example",
    "write_package",
]

_NAME = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")

TEMPLATE_NAME = "mycloud"
"""The provider name the template is written for; rendering replaces it."""

EXAMPLE_NAME = "example"
"""The name ``examples/minimal-provider`` is rendered for."""

_SKIPPED = {"__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache", "build", "dist"}


class NewProviderError(ValueError):
    """The name or the target directory cannot be used; the message says why."""


def minor_range() -> str:
    """The kube-ccm requirement a new package pins (the template's own must equal it)."""
    major, minor = (int(p) for p in __version__.split(".")[:2])
    return f"kube-ccm>={major}.{minor},<{major}.{minor + 1}"


def _params(name: str) -> dict[str, str]:
    """The four spellings of a provider name, keyed by the template's own."""
    if not _NAME.match(name) or len(name) > 40:
        raise NewProviderError(
            f"provider name {name!r}: use lowercase letters, digits and single dashes, "
            "starting with a letter (it becomes the providerID scheme, e.g. mycloud://...)"
        )
    module = "kube_ccm_" + name.replace("-", "_")
    if keyword.iskeyword(module):
        raise NewProviderError(f"provider name {name!r} makes a Python keyword")
    return {
        "kube_ccm_" + TEMPLATE_NAME: module,  # the import package
        TEMPLATE_NAME.capitalize(): "".join(part.capitalize() for part in name.split("-")),
        TEMPLATE_NAME.upper(): name.upper().replace("-", "_"),  # environment variables
        TEMPLATE_NAME: name,  # the provider name, providerID scheme, distribution suffix
    }


PLACEHOLDERS = tuple(_params(TEMPLATE_NAME))
"""What rendering replaces: ``kube_ccm_mycloud``, ``Mycloud``, ``MYCLOUD``, ``mycloud``."""

_PLACEHOLDER = re.compile("|".join(re.escape(p) for p in PLACEHOLDERS))


def _template() -> Traversable:
    return resources.files("kube_ccm.app.tools") / "templates" / "provider"


def template_files() -> dict[str, str]:
    """Relative path → content of the template itself (the provider ``mycloud``)."""
    found: dict[str, str] = {}

    def walk(directory: Traversable, prefix: str) -> None:
        for entry in sorted(directory.iterdir(), key=lambda e: e.name):
            if entry.name in _SKIPPED or entry.name.endswith((".egg-info", ".pyc")):
                continue
            if entry.is_dir():
                walk(entry, f"{prefix}{entry.name}/")
            else:
                found[prefix + entry.name] = entry.read_text(encoding="utf-8")

    walk(_template(), "")
    return found


def files_for(name: str) -> dict[str, str]:
    """Relative path → content of the package for provider ``name``."""
    params = _params(name)

    def render(text: str) -> str:
        return _PLACEHOLDER.sub(lambda match: params[match.group(0)], text)

    return {render(path): render(text) for path, text in template_files().items()}


def write_package(name: str, directory: Path) -> list[Path]:
    """Write the package into ``directory`` (created; it must not hold files yet)."""
    files = files_for(name)
    if directory.exists() and any(directory.iterdir()):
        raise NewProviderError(f"{directory} is not empty: choose a new directory (--dir)")
    written = []
    for relative, content in files.items():
        path = directory / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
        written.append(path)
    return written


def update_example(directory: Path) -> list[Path]:
    """Write ``examples/minimal-provider`` again: the template's output for ``example``."""
    if directory.exists():
        shutil.rmtree(directory)
    return write_package(EXAMPLE_NAME, directory)


def main(argv: list[str] | None = None) -> int:
    """``python -m kube_ccm.app.tools.newprovider --update-example`` (from a checkout)."""
    parser = argparse.ArgumentParser(prog="python -m kube_ccm.app.tools.newprovider")
    parser.add_argument(
        "--update-example",
        action="store_true",
        help="write examples/minimal-provider again from the template",
    )
    parser.add_argument(
        "--checkout", type=Path, default=Path(__file__).resolve().parents[3], help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if not args.update_example:
        parser.error("nothing to do: kube-ccm new-provider NAME writes a package")
    directory = args.checkout / "examples" / "minimal-provider"
    written = update_example(directory)
    print(f"wrote {len(written)} files to {directory}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
