"""One controller's keys split across worker processes (``--worker-processes``).

A :class:`Shard` owns the keys whose CRC-32 falls on its index: the same key lands
on the same shard in every process (Python's ``hash`` is salted per process), so
each key is synced by exactly one of them. ``WHOLE`` owns every key.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

__all__ = ["WHOLE", "Shard"]


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count`` (0 <= index < count)."""

    index: int = 0
    count: int = 1

    def __post_init__(self) -> None:
        if not 0 <= self.index < self.count:
            raise ValueError(f"shard {self.index} of {self.count} does not exist")

    def owns(self, key: str) -> bool:
        return self.count == 1 or zlib.crc32(key.encode()) % self.count == self.index


WHOLE = Shard()
