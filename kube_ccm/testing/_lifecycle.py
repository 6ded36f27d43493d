"""What the test bed's servers share: ``with Server(...) as server:`` starts it and
stops it, whatever happens inside (internal to the test bed)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Self


class Started:
    """A mixin: ``__enter__`` calls :meth:`start`, ``__exit__`` calls :meth:`stop`."""

    def start(self) -> object:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    @contextlib.contextmanager
    def started_or(
        self, unavailable: Callable[[str], object], *errors: type[Exception]
    ) -> Iterator[Self]:
        """As ``with self:``, for a fixture: when :meth:`start` fails with one of
        ``errors``, ``unavailable(reason)`` skips the test (or fails it where the test
        bed is required) instead."""
        try:
            self.start()
        except errors as exc:
            unavailable(str(exc))
            raise
        try:
            yield self
        finally:
            self.stop()


__all__ = ["Started"]
