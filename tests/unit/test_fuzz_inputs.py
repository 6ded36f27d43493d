"""Property-based fuzzing of every input a user writes: each one either works or gets
a one-line error of the documented type. No traceback, nothing else escapes."""

from __future__ import annotations

import string
from collections.abc import Callable
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kube_ccm.api.objects import ObjectMeta, Service, ServiceSpec
from kube_ccm.api.selectors import SelectorError, parse_selector
from kube_ccm.app.options.buildconfig import parse_options
from kube_ccm.app.options.flags import FLAGS
from kube_ccm.app.options.pflag import HelpRequested, OptionsError, VersionRequested
from kube_ccm.cloudprovider import InvalidSourceRangeError, get_load_balancer_source_ranges
from kube_ccm.providers.simulated.config import SimulatedConfigError, load_config
from kube_ccm.providers.simulated.provider import _LoadBalancer

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

texts = st.text(alphabet=string.printable, max_size=40)
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**12), 10**12), st.floats(allow_nan=True), texts
)
json_like = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(texts, inner, max_size=4)),
    max_leaves=12,
)
CONFIG_KEYS = [
    "state",
    "region",
    "zones",
    "instanceType",
    "unknownNodes",
    "instancesApi",
    "latency",
    "failureRate",
    "rateLimit",
    "loadBalancer",
    "credentials",
]


def one_line(message: str) -> bool:
    return bool(message) and "\n" not in message and "Traceback" not in message


def error_of(call: Callable[[], object], *expected: type[Exception]) -> str | None:
    """The message of an ``expected`` error ``call`` raised, or None if it worked."""
    try:
        call()
    except expected as exc:
        return str(exc)
    return None


@FUZZ
@given(st.dictionaries(st.sampled_from(CONFIG_KEYS), json_like, max_size=6))
def test_any_simulated_cloud_config_loads_or_says_what_is_wrong_in_one_line(
    document: dict[str, Any],
) -> None:
    document = {"state": ":memory:", **document}
    error = error_of(lambda: load_config(yaml.safe_dump(document)), SimulatedConfigError)
    assert error is None or one_line(error), repr(error)


@FUZZ
@given(st.text(max_size=80))
def test_any_cloud_config_text_loads_or_says_what_is_wrong_in_one_line(text: str) -> None:
    error = error_of(lambda: load_config(text), SimulatedConfigError)
    assert error is None or one_line(error), repr(error)


flag_names = st.sampled_from(sorted(f.name for f in FLAGS if f.name not in ("help", "version")))
flag_values = st.one_of(
    texts,
    st.sampled_from(["0", "-1", "1ns", "5m", "1h", "true", "false", "*", "", "nan", "1e400"]),
)


@FUZZ
@given(st.lists(st.tuples(flag_names, flag_values), max_size=5))
def test_any_flags_parse_or_every_problem_is_one_line(pairs: list[tuple[str, str]]) -> None:
    argv = ["--cloud-provider=simulated", *(f"--{name}={value}" for name, value in pairs)]
    problems: tuple[str, ...] = ()
    try:
        parse_options(argv)
    except OptionsError as exc:
        problems = exc.problems or ("",)
    except (HelpRequested, VersionRequested):
        pass
    assert all(one_line(p) for p in problems), problems


def lb_service(annotations: dict[str, str]) -> Service:
    return Service(
        metadata=ObjectMeta(name="s", namespace="d", annotations=annotations),
        spec=ServiceSpec(type="LoadBalancer"),
    )


@FUZZ
@given(st.text(max_size=60))
def test_any_annotation_value_is_accepted_or_named_in_one_line(value: str) -> None:
    for declared in _LoadBalancer.service_annotations:
        problem = declared.problem(value)
        assert problem is None or one_line(problem)
    service = lb_service({"service.beta.kubernetes.io/load-balancer-source-ranges": value})
    error = error_of(lambda: get_load_balancer_source_ranges(service), InvalidSourceRangeError)
    assert error is None or one_line(error), repr(error)


@FUZZ
@given(st.text(max_size=60))
def test_any_node_selector_parses_or_says_why_in_one_line(text: str) -> None:
    error = error_of(lambda: parse_selector(text), SelectorError)
    assert error is None or one_line(error), repr(error)
