"""Declared Service annotations and their typed checks."""

from __future__ import annotations

import pytest

from kube_ccm.cloudprovider.annotations import (
    boolean,
    cidr_list,
    duration,
    integer,
    one_of,
    parse_duration,
    problems,
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
