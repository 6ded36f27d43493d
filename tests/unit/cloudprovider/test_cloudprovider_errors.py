"""The error hierarchy and its exact messages (§1.10)."""

from __future__ import annotations

import pytest

from kube_ccm.cloudprovider import (
    CloudConfigError,
    CloudConfigFileError,
    CloudProviderError,
    CloudProviderInitError,
    DiskNotFoundError,
    DuplicateCloudProviderError,
    ImplementedElsewhereError,
    InstanceNotFoundError,
    InvalidSourceRangeError,
    NotImplementedByProviderError,
    ProviderEntryPointError,
    RetryError,
    UnknownCloudProviderError,
    find_retry_error,
)


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (InstanceNotFoundError(), "instance not found"),
        (NotImplementedByProviderError(), "unimplemented"),
        (ImplementedElsewhereError(), "implemented by alternate to cloud provider"),
        (DiskNotFoundError(), "disk is not found"),
    ],
)
def test_sentinel_errors_carry_upstreams_exact_message(
    error: CloudProviderError, message: str
) -> None:
    assert str(error) == message
    assert isinstance(error, CloudProviderError)


def test_unimplemented_is_not_pythons_builtin_not_implemented_error() -> None:
    assert not issubclass(NotImplementedByProviderError, NotImplementedError)
    assert not isinstance(NotImplementedError(), NotImplementedByProviderError)


def test_configuration_errors_share_a_base_under_the_provider_error() -> None:
    for cls in (
        CloudConfigFileError,
        UnknownCloudProviderError,
        CloudProviderInitError,
        DuplicateCloudProviderError,
        ProviderEntryPointError,
    ):
        assert issubclass(cls, CloudConfigError)
    assert issubclass(CloudConfigError, CloudProviderError)
    assert issubclass(InvalidSourceRangeError, ValueError)


def test_retry_error_text_is_its_message_and_it_carries_the_delay() -> None:
    error = RetryError("quota exhausted, try later", 7.5)
    assert str(error) == "quota exhausted, try later"
    assert error.retry_after == 7.5


def test_retry_error_refuses_a_negative_delay() -> None:
    with pytest.raises(ValueError, match="retry_after"):
        RetryError("x", -1)


def test_find_retry_error_returns_the_error_itself() -> None:
    retry = RetryError("later", 3)
    assert find_retry_error(retry) is retry


def _wrap_explicitly(retry: RetryError) -> None:
    try:
        raise retry
    except RetryError as exc:
        raise CloudProviderError("ensure failed") from exc


def _fail_while_handling(retry: RetryError) -> None:
    try:
        raise retry
    except RetryError:
        raise RuntimeError("cleanup failed")  # noqa: B904 (the implicit context is the point)


def _replace_hiding_context(retry: RetryError) -> None:
    try:
        raise retry
    except RetryError:
        raise CloudProviderError("replaced") from None


def test_find_retry_error_sees_through_explicit_wrapping() -> None:
    retry = RetryError("later", 3)
    with pytest.raises(CloudProviderError) as wrapped:
        _wrap_explicitly(retry)
    assert find_retry_error(wrapped.value) is retry


def test_find_retry_error_sees_an_error_raised_while_handling_it() -> None:
    retry = RetryError("later", 3)
    with pytest.raises(RuntimeError) as implicit:
        _fail_while_handling(retry)
    assert find_retry_error(implicit.value) is retry


def test_find_retry_error_respects_a_suppressed_context() -> None:
    with pytest.raises(CloudProviderError) as hidden:
        _replace_hiding_context(RetryError("later", 3))
    assert find_retry_error(hidden.value) is None


def test_find_retry_error_searches_nested_exception_groups() -> None:
    retry = RetryError("later", 9)
    inner = CloudProviderError("wrapper")
    inner.__cause__ = retry
    group = ExceptionGroup("several", [ValueError("a"), ExceptionGroup("inner", [inner])])
    assert find_retry_error(group) is retry


def test_find_retry_error_is_none_without_one_and_survives_cycles() -> None:
    a = CloudProviderError("a")
    b = CloudProviderError("b")
    a.__cause__ = b
    b.__cause__ = a
    assert find_retry_error(a) is None
