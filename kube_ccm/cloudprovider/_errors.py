"""Errors of the provider contract.

Every exception raised by :mod:`kube_ccm.cloudprovider`, or meant to be raised by
a provider to tell a controller something specific, derives from
:class:`CloudProviderError`::

    CloudProviderError                     any error of the contract, also a plain failure
    ├── InstanceNotFoundError              "instance not found": the instance is really gone
    ├── NotImplementedByProviderError      "unimplemented": this method is not supported
    ├── ImplementedElsewhereError          "implemented by alternate to cloud provider"
    ├── DiskNotFoundError                  "disk is not found" (volume plugins only)
    ├── RetryError                         retry this Service after exactly ``retry_after``
    ├── TransientCloudError                worth repeating at once (throttled, 5xx, dropped)
    ├── CloudIdentityError                 the cloud cannot see what it should: a wrong or
    │                                      unprivileged identity, account, region or host
    ├── InvalidSourceRangeError            a bad CIDR in loadBalancerSourceRanges (also ValueError)
    └── CloudConfigError                   the CCM cannot start with this configuration
        ├── CloudConfigFileError           --cloud-config cannot be read
        ├── InvalidCloudConfigError        the cloud-config's content is unusable (also
        │                                  ValueError; ``cloudprovider.config``)
        ├── CredentialsError               the credentials it names cannot be used
        │                                  (``cloudprovider.credentials``)
        ├── UnknownCloudProviderError      no provider of that name is registered or installed
        ├── CloudProviderInitError         the provider's factory failed
        ├── DuplicateCloudProviderError    two registrations of one name
        └── ProviderEntryPointError        an installed provider package failed to load

Providers raise the first five (upstream's), :class:`TransientCloudError` (ours) and,
at start-up, :class:`InvalidCloudConfigError` and :class:`CredentialsError`.
Controllers test for them with ``isinstance`` (a safe superset of upstream's
identity comparisons), so a provider may subclass them or add detail to the
message, but the default messages of upstream's five are upstream's, byte for byte.
:class:`NotImplementedByProviderError` deliberately does not reuse Python's builtin
:class:`NotImplementedError`: a stray builtin raised by a bug must not be mistaken
for a supported "unimplemented" answer.

A :class:`RetryError` may be wrapped (``raise CloudProviderError(...) from retry``)
or sit in an :class:`ExceptionGroup`; :func:`find_retry_error` finds it.
"""

from __future__ import annotations

__all__ = [
    "CloudConfigError",
    "CloudConfigFileError",
    "CloudIdentityError",
    "CloudProviderError",
    "CloudProviderInitError",
    "DiskNotFoundError",
    "DuplicateCloudProviderError",
    "ImplementedElsewhereError",
    "InstanceNotFoundError",
    "InvalidSourceRangeError",
    "NotImplementedByProviderError",
    "ProviderEntryPointError",
    "RetryError",
    "UnknownCloudProviderError",
    "find_retry_error",
]


def one_line(message: str) -> str:
    """``message`` on one line: its lines joined with `` | `` (a YAML parser's error, a
    user's key with a newline in it), so a log line or an Event stays one line."""
    parts = [part.strip() for part in message.splitlines()]
    return " | ".join(part for part in parts if part) or message.strip()


class CloudProviderError(Exception):
    """Base class of every error of the provider contract.

    Raised as is, it is an ordinary failure: controllers log it, record an event
    where upstream does, and retry with backoff.
    """


class InstanceNotFoundError(CloudProviderError):
    """The instance does not exist in the cloud (not merely stopped).

    Raise it from :meth:`Instances.instance_id` for a missing instance only. The
    cloud node controller keeps the node tainted and retries; the lifecycle
    controller deletes the (not Ready) Node. The V1 providerID helper passes it
    through unwrapped.
    """

    def __init__(self, message: str = "instance not found") -> None:
        super().__init__(message)


class NotImplementedByProviderError(CloudProviderError):
    """The provider does not implement this method (upstream ``cloudprovider.NotImplemented``).

    Honoured in two places: from :meth:`Instances.instance_id` the node controller
    initializes the node without a providerID; from
    :meth:`Instances.instance_shutdown_by_provider_id` it means "not shut down".
    """

    def __init__(self, message: str = "unimplemented") -> None:
        super().__init__(message)


class ImplementedElsewhereError(CloudProviderError):
    """This Service's load balancer is managed by another controller.

    From :meth:`LoadBalancer.ensure_load_balancer` / :meth:`LoadBalancer.update_load_balancer`
    the service controller treats it as success and writes no status; it still manages
    its own finalizer.
    """

    def __init__(self, message: str = "implemented by alternate to cloud provider") -> None:
        super().__init__(message)


class DiskNotFoundError(CloudProviderError):
    """A volume does not exist; for volume code, not used by the controllers."""

    def __init__(self, message: str = "disk is not found") -> None:
        super().__init__(message)


class RetryError(CloudProviderError):
    """Ask the service controller to retry after exactly ``retry_after`` seconds.

    The text of the error is ``message``. The service key is re-added after the
    delay, without exponential backoff and without counting as a failure. Only the
    service controller honours it, also when wrapped.
    """

    def __init__(self, message: str, retry_after: float) -> None:
        if retry_after < 0:
            raise ValueError(f"retry_after must be >= 0 seconds, got {retry_after}")
        super().__init__(message)
        self.message = message
        self.retry_after = float(retry_after)


class TransientCloudError(CloudProviderError):
    """A failure worth trying again at once: throttling, a dropped connection, a 5xx.

    The daemon's cloud-call boundary retries the call a few times with jittered
    backoff (``retry_after``, when the cloud suggested a delay, replaces the
    backoff), all within the call's deadline; then the error reaches the controller
    as any other. Use it only where repeating the call cannot do harm twice.
    Unlike :class:`RetryError` it is not an instruction to the service controller.
    """

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class CloudIdentityError(CloudProviderError):
    """The cloud answered, but under an identity that cannot be the right one: a token
    short of a read privilege, another account's key, another region, another host.

    Raise it where an empty answer ("no such instance", "no instances at all") comes
    from who is asking rather than from what exists, so that a controller never reads
    it as "the instance is gone". ``hint`` says what the operator should check (the
    privilege, the account, the region, the URI); it ends up in the log and the Event.
    Controllers treat it as any failure (nothing deleted, retried with backoff).
    """

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(f"{message}: {hint}" if hint else message)
        self.hint = hint


def find_retry_error(exc: BaseException) -> RetryError | None:
    """The first :class:`RetryError` in ``exc``, its causes and its groups, or ``None``.

    Walks ``__cause__`` (``raise ... from retry``), ``__context__`` unless the raiser
    suppressed it (``from None``), and every member of an :class:`ExceptionGroup`,
    depth first, the way Go's ``errors.As`` walks wrapped errors.
    """
    seen: set[int] = set()
    stack: list[BaseException] = [exc]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, RetryError):
            return current
        # Pushed in reverse so the walk visits group members, then cause, then context.
        if current.__context__ is not None and not current.__suppress_context__:
            stack.append(current.__context__)
        if current.__cause__ is not None:
            stack.append(current.__cause__)
        if isinstance(current, BaseExceptionGroup):
            stack.extend(reversed(current.exceptions))
    return None


class InvalidSourceRangeError(CloudProviderError, ValueError):
    """An entry of ``spec.loadBalancerSourceRanges`` or of the source-ranges annotation
    is not an IP network.

    ``value`` is the offending entry and ``field`` where it came from (the spec field
    path or the annotation key); the message names both and shows a valid example.
    """

    def __init__(self, message: str, *, value: str, field: str) -> None:
        super().__init__(one_line(message))
        self.value = value
        self.field = field


class CloudConfigError(CloudProviderError):
    """The cloud provider cannot be set up as configured; the CCM must not start.

    Messages say what is wrong and what to change (a flag, a file, a package).
    """


class CloudConfigFileError(CloudConfigError):
    """The ``--cloud-config`` file could not be read (upstream exits at once)."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(
            f'could not read cloud config file "{path}": {reason}; '
            "check the --cloud-config path and that this process may read it"
        )
        self.path = path


class UnknownCloudProviderError(CloudConfigError):
    """No provider of that name is registered or installed."""

    def __init__(self, name: str, known: tuple[str, ...]) -> None:
        listing = ", ".join(f'"{k}"' for k in known) if known else "none is installed"
        super().__init__(
            f'unknown cloud provider "{name}"; known cloud providers: {listing}. '
            "Check --cloud-provider, or install the package that provides it"
        )
        self.name = name
        self.known = known


class CloudProviderInitError(CloudConfigError):
    """The provider factory failed; ``__cause__`` is the factory's error."""

    def __init__(self, name: str, error: object) -> None:
        super().__init__(f'could not init cloud provider "{name}": {error}')
        self.name = name


class DuplicateCloudProviderError(CloudConfigError):
    """A provider name was registered twice (upstream: fatal)."""

    def __init__(self, name: str, detail: str = "") -> None:
        super().__init__(f'Cloud provider "{name}" was registered twice{detail}')
        self.name = name


class ProviderEntryPointError(CloudConfigError):
    """An installed provider package declared an entry point that cannot be loaded."""

    def __init__(self, message: str, *, name: str, distribution: str) -> None:
        super().__init__(message)
        self.name = name
        self.distribution = distribution
