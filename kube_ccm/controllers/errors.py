"""What a controller's sync raises when one of its steps fails.

Upstream wraps with ``fmt.Errorf("failed to ensure load balancer: %w", err)`` and
asks ``errors.As`` later; here the step's failure is a class of its own, so the work
queue, the log and the tests can tell a failed API write from a failed cloud call
without reading messages, and the service controller reads a provider's
:class:`~kube_ccm.cloudprovider.RetryError` from the error it caught rather than
walking back through causes::

    Exception
     └── SyncError            a step failed; the message names it ("failed to ...")
          ├── ApiCallError    a read or write of the API server (a finalizer, a
          │                   status, a Node's pod CIDRs)
          └── CloudCallError  the cloud provider failed, or answered what the step
                              cannot use; ``retry`` is its RetryError, if it gave one

The messages are upstream's (they reach Events and logs); the failure itself is
``__cause__`` (``raise ... from exc``) and :attr:`SyncError.cause`.
"""

from __future__ import annotations

from kube_ccm.cloudprovider import RetryError, find_retry_error


class SyncError(Exception):
    """A step of a controller's sync failed; the queue retries the key with backoff."""

    def __init__(self, message: str, cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.cause = cause
        """What failed (also ``__cause__`` where raised ``from`` it); ``None`` when the
        step itself found the problem."""


class ApiCallError(SyncError):
    """A read or write of the API server failed."""


class CloudCallError(SyncError):
    """The cloud provider failed, or answered what the step cannot use.

    :attr:`retry` is the provider's :class:`~kube_ccm.cloudprovider.RetryError` when
    the failure is one, or carries one (a provider may wrap it: ``raise
    CloudProviderError(...) from retry``, or an ``ExceptionGroup``), found once,
    here, where the provider's error is caught.
    """

    def __init__(self, message: str, cause: BaseException | None = None) -> None:
        super().__init__(message, cause)
        self.retry: RetryError | None = (
            cause
            if isinstance(cause, RetryError)
            else find_retry_error(cause)
            if cause is not None
            else None
        )


__all__ = ["ApiCallError", "CloudCallError", "SyncError"]
