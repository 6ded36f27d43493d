"""Label selectors in kubectl's string form."""

from __future__ import annotations

import pytest

from kube_ccm.api.selectors import SelectorError, parse_selector

LABELS = {"role": "worker", "zone": "a", "example.com/gpu": ""}


@pytest.mark.parametrize(
    ("text", "matches"),
    [
        ("", True),
        ("role=worker", True),
        ("role==worker", True),
        ("role=control", False),
        ("role!=control", True),
        ("missing!=x", True),
        ("example.com/gpu", True),
        ("!example.com/gpu", False),
        ("!missing", True),
        ("zone in (a, b)", True),
        ("zone notin (a,b)", False),
        ("missing notin (a)", True),
        ("role=worker,zone in (b,c)", False),
        ("role = worker , zone in (a)", True),
        ("example.com/gpu=", True),
    ],
)
def test_selectors_match_as_kubernetes_does(text: str, matches: bool) -> None:
    assert parse_selector(text).matches(LABELS) is matches


@pytest.mark.parametrize("text", ["a in (b", "a in ()", "=x", "a=b=c", "a in (b,,c)", "a b"])
def test_a_bad_selector_says_what_the_grammar_is(text: str) -> None:
    with pytest.raises(SelectorError):
        parse_selector(text)
