"""What users read (docstrings, manifests, the chart's README, docs/) never cites the
sections of a reference they do not have (``upstream-behaviour.md §2.5``): each says
the behaviour itself, or names the upstream source."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_shipped_text_cites_no_private_reference() -> None:
    offenders = []
    for base in ("kube_ccm", "deploy", "docs", "examples"):
        for path in (ROOT / base).rglob("*"):
            if path.suffix not in {".py", ".md", ".yaml", ".tpl", ".txt", ".json"}:
                continue
            text = path.read_text(errors="replace")
            for number, line in enumerate(text.splitlines(), 1):
                if "§" in line or "upstream-behaviour" in line:
                    offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert offenders == [], "\n".join(offenders)
