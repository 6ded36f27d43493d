"""load_cloud_config: a provider's typed cloud-config, or one line saying what to fix."""

from __future__ import annotations

from typing import Annotated

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kube_ccm.cloudprovider import (
    CloudConfigError,
    Duration,
    InvalidCloudConfigError,
    load_cloud_config,
    parse_duration,
)


class Limits(msgspec.Struct, forbid_unknown_fields=True, frozen=True, rename="camel"):
    max_calls: Annotated[int, msgspec.Meta(ge=1)] = 10


class MyConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True, rename="camel"):
    endpoint: str
    region: str = "eu-1"
    request_timeout: Duration = Duration(10.0)
    limits: Limits = Limits()
    credentials: dict[str, str] | None = None
    zones: tuple[Limits, ...] = ()


class Defaults(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    region: str = "eu-1"


def load(text: str | None) -> MyConfig:
    return load_cloud_config(text, MyConfig, provider="mycloud", example="endpoint: https://x")


def test_a_good_config_comes_back_typed() -> None:
    config = load("endpoint: https://api\nrequestTimeout: 1m30s\nlimits: {maxCalls: 3}\n")
    assert config == MyConfig(
        endpoint="https://api", request_timeout=Duration(90.0), limits=Limits(max_calls=3)
    )
    assert load_cloud_config(b"endpoint: e\nrequestTimeout: 2.5\n", MyConfig, provider="m")
    assert load_cloud_config(None, Defaults, provider="m") == Defaults()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (None, "the mycloud provider needs a --cloud-config, e.g. `endpoint: https://x`"),
        ("   ", "needs a --cloud-config"),
        ("endpoint: a\nendpoint: b\n", "`endpoint` is given twice in one mapping (line 2)"),
        ("- endpoint: a\n", "must be a YAML mapping"),
        ("endpoint: [unclosed\n", "not valid YAML"),
        (
            "endpoint: a\nregoin: x\n",
            "unknown field `regoin`; known fields: endpoint, region, requestTimeout, limits, "
            "credentials, zones",
        ),
        (
            "endpoint: a\nlimits: {maxCals: 3}\n",
            "unknown field `maxCals` in `limits`; known fields: maxCalls",
        ),
        (
            "endpoint: a\nzones: [{maxCalls: 1}, {maxCals: 3}]\n",
            "unknown field `maxCals` in `zones[1]`; known fields: maxCalls",
        ),
        (
            "endpoint: 3\n",
            "invalid mycloud cloud-config: `endpoint` must be a string, got an integer",
        ),
        ("endpoint: a\ncredentials: /etc/token\n", "`credentials` must be a mapping, got a string"),
        (
            "endpoint: a\ncredentials: {file: 3}\n",
            "`credentials[...]` must be a string, got an integer",
        ),
        (
            "endpoint: a\nlimits: {maxCalls: x}\n",
            "`limits.maxCalls` must be an integer, got a string",
        ),
        ("endpoint: a\nlimits: {maxCalls: 0}\n", "`limits.maxCalls` must be an integer >= 1"),
        ("endpoint: a\nzones: x\n", "`zones` must be a list, got a string"),
        ("region: r\n", "invalid mycloud cloud-config: `endpoint` is required"),
        (
            "endpoint: a\ncredentials: {3: x}\n",
            "a key of `credentials` must be a string, got an integer",
        ),
        (
            "endpoint: a\nrequestTimeout: 5 seconds\n",
            "`requestTimeout`: invalid duration '5 seconds'",
        ),
        ("endpoint: a\nrequestTimeout: -1\n", "cannot be negative"),
    ],
)
def test_a_bad_config_is_one_line_naming_the_key(text: str | None, message: str) -> None:
    with pytest.raises(InvalidCloudConfigError) as caught:
        load(text)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)
    assert isinstance(caught.value, CloudConfigError)  # the daemon's start-up error


def test_a_struct_that_would_ignore_misspelt_keys_is_refused() -> None:
    class Lax(msgspec.Struct):
        region: str = ""

    with pytest.raises(TypeError, match="forbid_unknown_fields=True"):
        load_cloud_config("region: x", Lax, provider="m")


def test_durations_read_as_go_writes_them() -> None:
    assert parse_duration("1h2m3s") == 3723.0
    assert parse_duration("250ms") == 0.25
    assert parse_duration("0") == 0.0
    assert parse_duration(7) == 7.0
    for bad in ("", "1d", "m5", "5 s"):
        with pytest.raises(ValueError, match="invalid duration"):
            parse_duration(bad)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_any_text_is_a_config_or_one_clear_line(text: str) -> None:
    problem = ""
    try:
        load(text)
    except InvalidCloudConfigError as exc:  # anything else (a traceback) fails the test
        problem = str(exc)
    if problem:
        assert "\n" not in problem
        assert "mycloud" in problem


def test_every_unknown_key_is_named_at_once_with_the_first_other_problem() -> None:
    """Issue 39: a user fixes every key in one go, not one per start-up."""
    with pytest.raises(InvalidCloudConfigError) as error:
        load(
            "endpoint: 3\nregoin: x\ninsecure: true\n"
            "limits: {maxCals: 3}\nzones: [{maxCalls: 1}, {maxCals: 3, other: 1}]\n"
        )
    assert str(error.value) == (
        "invalid mycloud cloud-config: unknown fields `regoin`, `insecure`; known fields: "
        "endpoint, region, requestTimeout, limits, credentials, zones; unknown field "
        "`maxCals` in `limits`; known fields: maxCalls; unknown fields `maxCals`, `other` "
        "in `zones[1]`; known fields: maxCalls; also `endpoint` must be a string, got an "
        "integer"
    )


def test_a_provider_s_hint_follows_a_key_it_recognises() -> None:
    with pytest.raises(InvalidCloudConfigError) as error:
        load_cloud_config(
            "endpoint: a\ntoken_id: x\nzones: [{insecure: true}]\n",
            MyConfig,
            provider="mycloud",
            hints={"token_id": "write tokenId", "insecure": "not offered"},
        )
    message = str(error.value)
    assert "unknown field `token_id` (write tokenId); known fields" in message
    assert "unknown field `insecure` (not offered) in `zones[0]`" in message
