"""Declared Service annotations and their typed checks."""

from __future__ import annotations

import pytest

from kube_ccm.cloudprovider.annotations import (
    MAX_VALUE_LENGTH,
    AnnotationTooLongError,
    boolean,
    bounded,
    cidr_list,
    duration,
    integer,
    one_of,
    parse_duration,
    problems,
    quoted,
)

DECLARED = [
    boolean("x/internal", "internal LB"),
    integer("x/weight", "weight", minimum=1, maximum=100),
    one_of("x/scheme", "scheme", ["tcp", "http"]),
    duration("x/idle", "idle timeout", minimum=1, maximum=3600),
    cidr_list("x/ranges", "source ranges"),
]


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("x/internal", "yes", "use true or false"),
        ("x/weight", "0", "from 1 to 100"),
        ("x/weight", "ten", "from 1 to 100"),
        ("x/scheme", "udp", "use one of tcp, http"),
        ("x/idle", "2h", "from 1s to 3600s"),
        ("x/idle", "soon", "such as 30s"),
        ("x/ranges", "10.0.0.1/33", "'10.0.0.1/33' is not a CIDR"),
        ("x/ranges", "10.0.0.0/8,", "'' is not a CIDR"),
        ("x/ranges", "10.0.0.1", "'10.0.0.1' is not a CIDR"),
    ],
)
def test_a_bad_value_is_named_with_what_is_accepted(key: str, value: str, fragment: str) -> None:
    [problem] = problems(DECLARED, {key: value})
    assert problem.startswith(f"metadata.annotations[{key}]: invalid value {value!r}: ")
    assert fragment in problem


def test_good_values_and_undeclared_keys_pass() -> None:
    good = {
        "x/internal": "true",
        "x/weight": "100",
        "x/scheme": "http",
        "x/idle": "1m30s",
        "x/ranges": "10.0.0.0/8, 192.168.0.0/16",
        "other/key": "anything",
    }
    assert problems(DECLARED, good) == []
    assert problems(DECLARED, {"x/ranges": ""}) == [], "empty: allow all, as upstream"
    assert parse_duration("1h2m3.5s") == 3723.5


def test_values_are_bounded_before_use_and_quoted_short() -> None:
    assert bounded({"k": "v"}, "k", 1) == "v"
    assert bounded({}, "k", 1) == ""
    with pytest.raises(AnnotationTooLongError, match="annotation k is 2 characters long"):
        bounded({"k": "vv"}, "k", 1)
    assert quoted("a\x1bb") == "'a\\x1bb'"
    long = quoted("z" * 10_000)
    assert len(long) < 80
    assert long.endswith("... (10000 characters)")
    declared = [boolean("k", "a flag")]
    [problem] = problems(declared, {"k": "y" * (MAX_VALUE_LENGTH + 1)})
    assert "over the limit" in problem
    assert "yyy" not in problem
    [problem] = problems(declared, {"k": "y" * 1000})
    assert len(problem) < 200
