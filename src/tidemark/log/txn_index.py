"""Kafka's TransactionIndex: the aborted transactions of one segment, "<base>.txnindex".

An entry is written to the segment where the ABORT marker lands: version int16 (0), producer id
int64, first offset int64, last offset int64 (the marker's offset), last stable offset int64
(the LSO once this transaction completed: the first offset of the next ongoing transaction, or
the marker's offset + 1), 34 bytes, big-endian, in marker order. A read_committed fetch
collects the entries that overlap what it returns (its consumer drops those producers' batches
from the first offset on until their marker); an entry whose last stable offset is past the
fetch's end means later segments cannot hold more that matter.

The file is created with the first entry, appended to in place and fsynced with its segment;
the entries live in memory too (aborted transactions are few).
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import NamedTuple

TXN_INDEX_SUFFIX = ".txnindex"
TXN_INDEX_VERSION = 0
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34


class CorruptTxnIndexError(Exception):
    """A .txnindex whose size is no whole number of entries or of an unknown version."""


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def encode(entry: AbortedTxn) -> bytes:
    return _ENTRY.pack(TXN_INDEX_VERSION, *entry)


def decode(data: bytes) -> list[AbortedTxn]:
    if len(data) % ENTRY_SIZE:
        raise CorruptTxnIndexError(f"{len(data)} bytes are no whole number of {ENTRY_SIZE}-byte entries")
    entries = []
    for version, *fields in _ENTRY.iter_unpack(data):
        if version != TXN_INDEX_VERSION:
            raise CorruptTxnIndexError(f"unknown aborted transaction version {version}")
        entries.append(AbortedTxn(*fields))
    return entries


class TransactionIndex:
    def __init__(self, path: Path):
        self.path = path
        self.dirty = False
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            data = b""
        try:
            self.entries = decode(data)
        except CorruptTxnIndexError:
            # A torn last entry (a crash mid-write): keep the whole ones, as a rebuild would.
            self.entries = decode(data[: len(data) - len(data) % ENTRY_SIZE]) if data[:2] == b"\x00\x00" else []
            self._rewrite()

    def append(self, entry: AbortedTxn) -> None:
        """Add an aborted transaction; one already indexed (a rebuild scanning its marker again)
        is skipped. A marker names its transaction: after cleaning, a scan may find it with a
        later first offset or another last stable offset than the entry kept."""
        if any(e.last_offset == entry.last_offset for e in self.entries):
            return
        if self.entries and entry.last_offset <= self.entries[-1].last_offset:
            raise ValueError(f"aborted transaction ending at {entry.last_offset} does not follow "
                             f"{self.entries[-1].last_offset} in {self.path.name}")
        self.entries.append(entry)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, encode(entry))
        finally:
            os.close(fd)
        self.dirty = True

    def truncate_to(self, offset: int) -> None:
        """Drop the transactions whose marker is at or after `offset` (Kafka's truncateTo)."""
        kept = [e for e in self.entries if e.last_offset < offset]
        if len(kept) != len(self.entries):
            self.entries = kept
            self._rewrite()

    def collect(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        """The transactions overlapping [fetch_offset, upper_bound), and whether the search is
        complete (an entry's last stable offset reaches upper_bound: no later segment holds
        one that overlaps)."""
        found = []
        for entry in self.entries:
            if entry.last_offset >= fetch_offset and entry.first_offset < upper_bound:
                found.append(entry)
            if entry.last_stable_offset >= upper_bound:
                return found, True
        return found, False

    def rename(self, path: Path) -> None:
        if self.path.exists():
            os.replace(self.path, path)
        self.path = path

    def sync(self) -> None:
        if not self.dirty:
            return
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            self.dirty = False
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self.dirty = False

    def _rewrite(self) -> None:
        if not self.entries:
            self.path.unlink(missing_ok=True)
            self.dirty = False
            return
        data = b"".join(encode(e) for e in self.entries)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        self.dirty = True
