"""What users read (docstrings, manifests, the chart's README, docs/, the README, the
changelog, the benchmarks) never cites what they do not have: the sections of a
reference (``upstream-behaviour.md §2.5``), or any file of the team's shared notes
beside the checkout (``../shared/...``, the style guide, the field notes, the Go
baseline). Each says the behaviour itself, or names the public upstream source."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRIVATE = (
    "§",
    "upstream-behaviour",
    "shared/reference",
    "../shared",
    "/work/",
    "STYLE.md",
    "field-notes",
    "go-baseline",
    "python-ecosystem",
)
SHIPPED = ("kube_ccm", "deploy", "docs", "examples", "benchmarks", "README.md", "CHANGELOG.md")


def _files() -> list[Path]:
    found: list[Path] = []
    for base in SHIPPED:
        path = ROOT / base
        found += [path] if path.is_file() else sorted(path.rglob("*"))
    return [p for p in found if p.suffix in {".py", ".md", ".yaml", ".tpl", ".txt", ".json", ".sh"}]


def test_shipped_text_cites_no_private_reference() -> None:
    offenders = []
    for path in _files():
        text = path.read_text(errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            if any(marker in line for marker in PRIVATE):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:160]}")
    assert offenders == [], "\n".join(offenders)
