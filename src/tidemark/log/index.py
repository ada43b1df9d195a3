"""Kafka's sparse segment indexes, as plain append-only files with in-memory copies.

.index entries: relative offset i32 + file position i32 (8 bytes), one per
index_interval_bytes of log. .timeindex entries: timestamp i64 + relative offset i32
(12 bytes), added at the same points when the largest timestamp so far has grown.
"""

from __future__ import annotations

import os
import struct
from bisect import bisect_right
from pathlib import Path

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


class _Index:
    entry: struct.Struct

    def __init__(self, path: Path, base_offset: int, max_bytes: int):
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_bytes // self.entry.size)
        self.keys: list[int] = []  # what lookups bisect on
        self.values: list[int] = []
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self.dirty = False  # written since the last fsync

    def read_entries(self) -> list[tuple[int, int]] | None:
        """The entries on disk, or None if the file is torn (not a whole number of entries)."""
        size = os.fstat(self.fd).st_size
        if size % self.entry.size:
            return None
        data = os.pread(self.fd, size, 0)
        return [e for e in self.entry.iter_unpack(data)]

    @property
    def is_full(self) -> bool:
        return len(self.keys) >= self.max_entries

    def __len__(self) -> int:
        return len(self.keys)

    def _write(self, entries: list[tuple[int, int]]) -> None:
        if entries:
            os.write(self.fd, b"".join(self.entry.pack(*e) for e in entries))
            self.dirty = True

    def rewrite(self, entries: list[tuple[int, int]]) -> None:
        """Replace the file's content (index rebuild)."""
        os.ftruncate(self.fd, 0)
        self._write(entries)
        self._load(entries)
        self.dirty = True

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class OffsetIndex(_Index):
    entry = _OFFSET_ENTRY

    def _load(self, entries: list[tuple[int, int]]) -> None:
        self.keys = [self.base_offset + rel for rel, _ in entries]
        self.values = [pos for _, pos in entries]

    def entries(self) -> list[tuple[int, int]]:
        return [(o - self.base_offset, p) for o, p in zip(self.keys, self.values)]

    def append(self, offset: int, position: int) -> None:
        self._write([(offset - self.base_offset, position)])
        self.keys.append(offset)
        self.values.append(position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """The largest indexed (offset, position) with offset <= the target, else (base, 0)."""
        i = bisect_right(self.keys, offset)
        if i == 0:
            return self.base_offset, 0
        return self.keys[i - 1], self.values[i - 1]


class TimeIndex(_Index):
    entry = _TIME_ENTRY

    def _load(self, entries: list[tuple[int, int]]) -> None:
        self.keys = [ts for ts, _ in entries]
        self.values = [self.base_offset + rel for _, rel in entries]

    def entries(self) -> list[tuple[int, int]]:
        return [(t, o - self.base_offset) for t, o in zip(self.keys, self.values)]

    @property
    def last_timestamp(self) -> int:
        return self.keys[-1] if self.keys else -1

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add an entry only if the timestamp grew (Kafka keeps timestamps increasing)."""
        if timestamp > self.last_timestamp and (not self.values or offset >= self.values[-1]):
            self._write([(timestamp, offset - self.base_offset)])
            self.keys.append(timestamp)
            self.values.append(offset)

    def lookup(self, timestamp: int) -> int:
        """Offset to start searching for the first record with a timestamp >= the target:
        the entry with the largest timestamp < target (every record before its offset is
        older than it), else the base offset."""
        i = bisect_right(self.keys, timestamp - 1)
        return self.values[i - 1] if i else self.base_offset
