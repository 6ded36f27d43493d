"""Cloud credentials from a file or an environment variable, reloaded when the file changes.

A helper for provider authors. The cloud-config names *where* the credentials are,
never the credentials themselves (the cloud-config usually lives in a ConfigMap)::

    credentials: {file: /etc/mycloud/token}     # e.g. a mounted Kubernetes Secret
    credentials: {env: MYCLOUD_TOKEN}           # e.g. env[].valueFrom.secretKeyRef

The provider's factory parses that with :meth:`CredentialsSource.from_config`, builds
:class:`Credentials` and calls :meth:`Credentials.load` at once, so a missing file or
an unset variable stops the daemon at start-up with a :class:`CredentialsError` (a
:class:`~kube_ccm.cloudprovider.CloudConfigError`: exit status 1, the message says
what to fix). In :meth:`~kube_ccm.cloudprovider.CloudProvider.initialize` it starts
:meth:`Credentials.watch`, and each cloud call uses :meth:`Credentials.current`.

Reloading: every ``reload_interval`` seconds the file is read again by its path (a
few hundred bytes from a tmpfs, off the event loop) and compared with the value in
use by SHA-256. Reading through the path follows whatever the path points to *now*,
which covers both a plain rewrite and the kubelet's update of a Secret volume (the
file ``key`` is a symlink to ``..data/key``; the kubelet writes a new timestamped
directory and atomically renames a new ``..data`` symlink over the old one, so the
path and its own symlink never change, only their target). When the value changed,
the callbacks registered with :meth:`Credentials.on_change` run once. A file that
later vanishes, becomes empty or unreadable does not stop anything: the last good
value stays in use, a warning (without the value) is logged once per distinct
problem, and the next poll tries again. An environment variable cannot change for a
running process, so it is read once.

Never logged: every :class:`Secret` registers its value with the daemon's log filter
(:mod:`kube_ccm.runtime.redaction`), which replaces it wherever a library would log
it; and the value lives in a :class:`Secret` whose ``repr``/``str`` show
``***`` and the first 8 hex digits of the value's SHA-256 (compare with
``sha256sum`` of the file to see which credentials are in use); only
:meth:`Secret.reveal` returns the value, to be handed to the cloud SDK and nowhere
else. No message of this module contains the value or a byte of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import hmac
import inspect
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from kube_ccm.cloudprovider._errors import CloudConfigError
from kube_ccm.runtime.redaction import register_secret

__all__ = [
    "DEFAULT_RELOAD_INTERVAL",
    "Credentials",
    "CredentialsError",
    "CredentialsSource",
    "Secret",
]

log = logging.getLogger(__name__)

DEFAULT_RELOAD_INTERVAL = 10.0
"""Seconds between two reads of a credentials file (the kubelet itself takes up to a
minute or so to project a changed Secret)."""

MAX_BYTES = 1 << 20
"""A credentials file larger than this is refused: it is not the file meant."""

ChangeCallback = Callable[["Secret"], Awaitable[None] | None]


class CredentialsError(CloudConfigError):
    """The credentials named in the cloud-config cannot be used at start-up.

    The message names the file or variable and what to do; it never contains the value.
    """


class Secret:
    """A credential value that does not show itself.

    ``repr`` is ``Secret('***', sha256=1a2b3c4d)``; ``str`` and formatting give
    ``***``. Two secrets are equal when their values are. It cannot be pickled (so
    it is not written anywhere by accident); :meth:`reveal` returns the value.
    """

    __slots__ = ("_digest", "_value")

    def __init__(self, value: str) -> None:
        if not value:
            raise ValueError("a Secret cannot be empty")
        self._value = value
        self._digest = hashlib.sha256(value.encode()).hexdigest()
        register_secret(value)  # never in the log, whichever library would write it

    @property
    def fingerprint(self) -> str:
        """The first 8 hex digits of the value's SHA-256: tells two values apart in logs."""
        return self._digest[:8]

    def reveal(self) -> str:
        """The value. Hand it to the cloud's SDK; never log or store it."""
        return self._value

    def __repr__(self) -> str:
        return f"Secret('***', sha256={self.fingerprint})"

    def __str__(self) -> str:
        return "***"

    def __format__(self, spec: str) -> str:
        return format("***", spec)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Secret):
            return NotImplemented
        return hmac.compare_digest(self._digest, other._digest)

    def __hash__(self) -> int:
        return hash(self._digest)

    def __copy__(self) -> Secret:
        return self

    def __deepcopy__(self, memo: object) -> Secret:
        return self

    def __reduce__(self) -> NoReturn:
        raise TypeError("a Secret cannot be pickled: it would write the credentials out")


@dataclass(frozen=True, slots=True)
class CredentialsSource:
    """Where the credentials are: exactly one of ``file`` (a path) or ``env`` (a name)."""

    file: str = ""
    env: str = ""
    field: str = "credentials"
    """The cloud-config field this came from, for messages."""

    def __post_init__(self) -> None:
        if bool(self.file) == bool(self.env):
            raise CredentialsError(
                f"`{self.field}` must name exactly one source: write "
                f"`{self.field}: {{file: PATH}}` or `{self.field}: {{env: VARIABLE}}`"
            )

    @classmethod
    def from_config(
        cls, value: object, *, field: str = "credentials", base_dir: Path | None = None
    ) -> CredentialsSource:
        """Parse the cloud-config value ``{file: PATH}`` or ``{env: NAME}``.

        A relative ``file`` is taken from ``base_dir`` (default: the working directory)
        and made absolute. Anything else raises :class:`CredentialsError` naming
        ``field`` and what to write.
        """
        usage = f"write `{field}: {{file: PATH}}` or `{field}: {{env: VARIABLE}}`"
        if not isinstance(value, Mapping):
            raise CredentialsError(f"`{field}` must be a mapping: {usage}")
        unknown = sorted(str(k) for k in value if k not in ("file", "env"))
        if unknown:
            raise CredentialsError(f"`{field}` has unknown keys {', '.join(unknown)}: {usage}")
        file, env = value.get("file"), value.get("env")
        for key, given in (("file", file), ("env", env)):
            if given is not None and (not isinstance(given, str) or not given.strip()):
                raise CredentialsError(f"`{field}.{key}` must be a non-empty string: {usage}")
        if file is not None and env is not None:
            raise CredentialsError(f"`{field}` names both a file and a variable: {usage}")
        if file is None and env is None:
            raise CredentialsError(f"`{field}` names no source: {usage}")
        if file is not None:
            path = Path(file)
            if not path.is_absolute():
                path = (base_dir or Path.cwd()) / path
            return cls(file=str(path), field=field)
        assert isinstance(env, str)
        return cls(env=env, field=field)

    def describe(self) -> str:
        """``file "/path"`` or ``environment variable "NAME"``."""
        return f'file "{self.file}"' if self.file else f'environment variable "{self.env}"'


class _Unusable(Exception):  # noqa: N818 (internal signal, never escapes this module)
    """The source cannot give credentials now; ``str`` is the reason and what to do."""


def _read(source: CredentialsSource) -> Secret:
    """Read the source once; raises :class:`_Unusable` (never with the value)."""
    field = source.field
    if source.env:
        env_value = os.environ.get(source.env)
        if env_value is None:
            raise _Unusable(
                f'the environment variable "{source.env}" named in `{field}.env` is not set: '
                "set it for the daemon (e.g. from a Secret with env[].valueFrom.secretKeyRef) "
                f"or name another variable in `{field}.env`"
            )
        if not env_value.strip():
            raise _Unusable(
                f'the environment variable "{source.env}" named in `{field}.env` is empty: '
                "give it the credentials"
            )
        return Secret(env_value.strip())
    path = source.file
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise _Unusable(
            f'the credentials file "{path}" named in `{field}.file` does not exist: create it, '
            "mount the Secret holding the credentials there, or correct the path"
        ) from None
    except IsADirectoryError:
        raise _Unusable(
            f'the credentials file "{path}" named in `{field}.file` is a directory: name the '
            "file inside it (a Secret volume holds one file per key)"
        ) from None
    except PermissionError:
        raise _Unusable(
            f'the credentials file "{path}" named in `{field}.file` is not readable by this '
            f"process (uid {os.getuid()}): allow it to read the file (e.g. the Secret volume's "
            "defaultMode or the pod's fsGroup)"
        ) from None
    except OSError as exc:
        reason = exc.strerror or errno.errorcode.get(exc.errno or 0, type(exc).__name__)
        raise _Unusable(
            f'the credentials file "{path}" named in `{field}.file` cannot be read: {reason}; '
            "check the file and its mount"
        ) from None
    if len(data) > MAX_BYTES:
        raise _Unusable(
            f'the credentials file "{path}" named in `{field}.file` is larger than '
            f"{MAX_BYTES // (1 << 20)} MiB: name the file that holds only the credentials"
        )
    try:
        text = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise _Unusable(
            f'the credentials file "{path}" named in `{field}.file` is not UTF-8 text: '
            "write the credentials as text (base64-decoded, as a Secret volume shows them)"
        ) from None
    if not text:
        raise _Unusable(
            f'the credentials file "{path}" named in `{field}.file` is empty: write the '
            "credentials into it (or into the Secret key mounted there)"
        )
    return Secret(text)


class Credentials:
    """The credentials of one source: loaded at start-up, then kept current.

    Use from one event loop. ``reload_interval`` (seconds, > 0) is how often
    :meth:`watch` reads a file again; the cost of a poll is one ``open`` and a
    small ``read`` on a worker thread.
    """

    def __init__(
        self, source: CredentialsSource, *, reload_interval: float = DEFAULT_RELOAD_INTERVAL
    ) -> None:
        if not reload_interval > 0:
            raise ValueError(f"reload_interval must be > 0 seconds, got {reload_interval}")
        self.source = source
        self.reload_interval = float(reload_interval)
        self._current: Secret | None = None
        self._callbacks: list[ChangeCallback] = []
        self._problem: str | None = None
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"Credentials({self.source.describe()}, current={self._current!r})"

    # -- reading --------------------------------------------------------------

    def load(self) -> Secret:
        """Read the source now and use its value; for start-up (it reads on this thread).

        Raises :class:`CredentialsError` saying what to fix when the file is missing,
        empty, unreadable or not text, or the variable is unset or empty.
        """
        try:
            secret = _read(self.source)
        except _Unusable as problem:
            raise CredentialsError(f"cloud credentials: {problem}") from None
        self._current = secret
        self._problem = None
        log.info(
            "Loaded cloud credentials from %s (sha256 %s)",
            self.source.describe(),
            secret.fingerprint,
        )
        return secret

    def current(self) -> Secret:
        """The credentials in use: the last good value read (loads them on first use)."""
        if self._current is None:
            return self.load()
        return self._current

    def on_change(self, callback: ChangeCallback) -> Callable[[], None]:
        """Call ``callback(new_secret)`` (a function or a coroutine function) once per change.

        Returns a function that unregisters it. A callback's exception is logged and
        does not stop the others or the watch.
        """
        self._callbacks.append(callback)

        def remove() -> None:
            with contextlib.suppress(ValueError):
                self._callbacks.remove(callback)

        return remove

    async def refresh(self) -> bool:
        """Read the source again; ``True`` if the value changed (callbacks have run).

        Never raises for an unusable source: the last good value stays, a warning is
        logged once per distinct problem, and ``False`` is returned. Also useful right
        after the cloud rejected the credentials: the file may have changed since the
        last poll. An environment variable is not read again (it cannot change).
        """
        if self.source.env and self._current is not None:
            return False
        async with self._lock:
            try:
                secret = await asyncio.to_thread(_read, self.source)
            except _Unusable as problem:
                self._report(str(problem))
                return False
            if self._problem is not None:
                log.info("Cloud credentials from %s are readable again", self.source.describe())
                self._problem = None
            previous = self._current
            if secret == previous:
                return False
            self._current = secret
            log.info(
                "Cloud credentials from %s changed (sha256 %s -> %s); using the new ones",
                self.source.describe(),
                previous.fingerprint if previous is not None else "none",
                secret.fingerprint,
            )
            for callback in list(self._callbacks):
                try:
                    result = callback(secret)
                    if inspect.isawaitable(result):
                        await result
                except Exception:
                    log.exception("A cloud-credentials change callback %r failed", callback)
            return True

    def _report(self, problem: str) -> None:
        if problem == self._problem:
            return
        self._problem = problem
        kept = (
            f"keeping the credentials loaded earlier (sha256 {self._current.fingerprint})"
            if self._current is not None
            else "no credentials loaded yet"
        )
        log.warning("%s; %s, retrying every %g s", problem, kept, self.reload_interval)

    # -- watching -------------------------------------------------------------

    async def watch(self, stop: asyncio.Event | None = None) -> None:
        """Poll the file every ``reload_interval`` seconds until ``stop`` is set.

        Reads once at once (the daemon may have waited for leadership since
        :meth:`load`). Returns at once for an environment variable. Cancellable.
        """
        if self.source.env:
            return
        stop = stop or asyncio.Event()
        while not stop.is_set():
            try:
                await self.refresh()
            except Exception:
                log.exception(
                    "Checking the cloud credentials in %s failed; retrying in %g s",
                    self.source.describe(),
                    self.reload_interval,
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.reload_interval)

    def start(self, stop: asyncio.Event) -> asyncio.Task[None]:
        """Run :meth:`watch` as a task owned by this object (until ``stop`` or :meth:`close`)."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self.watch(stop), name="cloud-credentials-watch"
            )
        return self._task

    def close(self) -> None:
        """Cancel the task started by :meth:`start`, if any."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
