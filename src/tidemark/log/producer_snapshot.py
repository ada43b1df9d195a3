"""Producer state snapshot files: Kafka's "<20-digit offset>.snapshot" in the partition directory.

The layout is Kafka's ProducerSnapshot version 1 (big-endian): version int16, crc uint32 (CRC32C
of everything after it), then an int32 count of 46-byte entries: producer id int64, epoch int16,
last sequence int32, last offset int64, offset delta int32 (last offset - first offset of the
batch), timestamp int64, coordinator epoch int32, current transaction first offset int64 (-1:
none; we have no transactions). The file's offset is the log offset the state covers up to
(exclusive): a restart loads it and scans only the batches from there on.

One divergence: Kafka writes one entry per producer (its last batch); we write one per retained
batch (up to five per producer, oldest first), so a retry of any of a producer's last five
batches is still recognised after a restart. A reader that keeps the last entry per producer
id, as Kafka's does, sees exactly Kafka's snapshot.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import NamedTuple

from crc32c import crc32c

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
_PREFIX = struct.Struct(">hIi")  # version, crc, entry count
_CRC_FROM = 6  # the CRC covers the entry count and the entries
_ENTRY = struct.Struct(">qhiqiqiq")


class CorruptSnapshotError(Exception):
    """A snapshot file that is truncated, of an unknown version, or fails its CRC."""


class SnapshotEntry(NamedTuple):
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def list_snapshots(directory: Path) -> dict[int, Path]:
    """offset -> path of every snapshot file in the directory."""
    found = {}
    for path in directory.iterdir():
        if path.suffix == SNAPSHOT_SUFFIX and path.stem.isdigit():
            found[int(path.stem)] = path
    return found


def encode(entries: list[SnapshotEntry]) -> bytes:
    body = bytearray(_PREFIX.size + _ENTRY.size * len(entries))
    _PREFIX.pack_into(body, 0, SNAPSHOT_VERSION, 0, len(entries))
    pack_into, size = _ENTRY.pack_into, _ENTRY.size
    for i, entry in enumerate(entries):
        pack_into(body, _PREFIX.size + i * size, *entry)
    struct.pack_into(">I", body, 2, crc32c(memoryview(body)[_CRC_FROM:]))
    return bytes(body)


def decode(data: bytes) -> list[SnapshotEntry]:
    if len(data) < _PREFIX.size:
        raise CorruptSnapshotError(f"{len(data)} bytes is too short for a snapshot")
    version, crc, count = _PREFIX.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"unknown snapshot version {version}")
    computed = crc32c(memoryview(data)[_CRC_FROM:])
    if computed != crc:
        raise CorruptSnapshotError(f"CRC mismatch (stored {crc:#010x}, computed {computed:#010x})")
    if count < 0 or len(data) != _PREFIX.size + count * _ENTRY.size:
        raise CorruptSnapshotError(f"{count} entries do not fit {len(data)} bytes")
    return [SnapshotEntry._make(fields) for fields in _ENTRY.iter_unpack(memoryview(data)[_PREFIX.size:])]


def write_snapshot(path: Path, entries: list[SnapshotEntry]) -> None:
    """Write the file, fsynced (a torn one fails its CRC at load and is not trusted; one past
    the recovered log end is deleted)."""
    data = encode(entries)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def read_snapshot(path: Path) -> list[SnapshotEntry]:
    return decode(path.read_bytes())
