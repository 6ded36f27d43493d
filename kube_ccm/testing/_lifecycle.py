"""What the test bed's servers share: ``with Server(...) as server:`` starts it and
stops it, whatever happens inside (internal to the test bed)."""

from __future__ import annotations

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


__all__ = ["Started"]
