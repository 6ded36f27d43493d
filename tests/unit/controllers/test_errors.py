"""The errors a controller's sync raises: the step's message, its cause, and the
provider's RetryError read where the provider's error is caught."""

from __future__ import annotations

import pytest

from kube_ccm.cloudprovider import CloudProviderError, RetryError
from kube_ccm.controllers.errors import ApiCallError, CloudCallError, SyncError
from kube_ccm.controllers.service import _retry_after


def _wrapped(retry: RetryError) -> CloudProviderError:
    try:
        raise CloudProviderError("the cloud said later") from retry
    except CloudProviderError as exc:
        return exc


def test_a_cloud_call_error_keeps_the_message_and_the_cause() -> None:
    down = ConnectionError("down")
    error = CloudCallError(f"failed to ensure load balancer: {down}", down)
    assert str(error) == "failed to ensure load balancer: down"
    assert error.cause is down
    assert error.retry is None
    assert isinstance(error, SyncError)


def test_a_retry_error_given_by_the_provider_is_carried() -> None:
    retry = RetryError("busy", 7.5)
    error = CloudCallError(f"failed to ensure load balancer: {retry}", retry)
    assert error.retry is retry
    assert _retry_after(error) == 7.5


def test_a_retry_error_the_provider_wrapped_is_carried() -> None:
    """A provider may wrap its RetryError (docs/providers.md, "Errors"); the boundary
    finds it once, where it catches the provider's error."""
    retry = RetryError("busy", 3)
    error = CloudCallError("failed to delete load balancer: the cloud said later", _wrapped(retry))
    assert error.retry is retry
    assert _retry_after(error) == 3


def test_a_retry_error_in_a_group_is_carried() -> None:
    retry = RetryError("busy", 2)
    group = ExceptionGroup("both zones", [ValueError("one"), retry])
    assert CloudCallError("failed to ensure load balancer", group).retry is retry


def test_an_error_found_by_the_step_itself_has_no_cause() -> None:
    error = CloudCallError("service status returned by EnsureLoadBalancer is nil")
    assert error.cause is None
    assert error.retry is None
    assert _retry_after(error) is None


def test_an_api_call_error_carries_no_retry_delay() -> None:
    """A write to the API server that failed is retried with the queue's backoff."""
    error = ApiCallError("failed to update load balancer status: 500", RuntimeError("500"))
    assert not isinstance(error, CloudCallError)
    assert _retry_after(error) is None


def _fail(kind: type[SyncError], cause: OSError) -> None:
    try:
        raise cause
    except OSError as exc:
        raise kind(f"failed to do it: {exc}", exc) from exc


@pytest.mark.parametrize("kind", [SyncError, ApiCallError, CloudCallError])
def test_raised_from_the_failure_the_chain_is_kept(kind: type[SyncError]) -> None:
    cause = OSError("reset")
    with pytest.raises(kind) as raised:
        _fail(kind, cause)
    assert str(raised.value) == "failed to do it: reset"
    assert raised.value.__cause__ is cause
    assert raised.value.cause is cause
