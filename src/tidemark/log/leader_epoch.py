"""Kafka's LeaderEpochFileCache (KIP-101): which leader epoch began at which offset of a log.

Persisted in the partition directory's "leader-epoch-checkpoint" (Kafka's checkpoint file:
"0", the entry count, then "epoch start_offset" lines), rewritten atomically at every change.
Entries grow in both epoch and start offset. Followers compare histories with it
(OffsetForLeaderEpoch) to find where their log diverged from the leader's.

Changes are made in memory (on the event loop: a new leader's epoch, a follower's appends and
truncations) and written to the file, fsynced, by `sync`, which the log's flush calls in the
flusher's thread before its recovery point passes the batches the entries describe. So after
any crash the file holds every epoch of the flushed log, at worst plus entries at or past the
log end offset, which loading drops; the epochs of batches past the recovery point, which the
file may lack, loading takes from those batches' headers (see LogLoader).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import NamedTuple

import structlog

from .checkpoint import read_checkpoint_entries, write_checkpoint_entries

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1

_logger = structlog.get_logger("tidemark.log")


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class CorruptEpochCheckpointError(ValueError):
    """A leader-epoch-checkpoint that cannot be read, or whose entries do not grow."""


def read_epoch_checkpoint(path: Path) -> list[EpochEntry] | None:
    """The file's entries, None if it does not exist."""
    try:
        lines = read_checkpoint_entries(path)
        if lines is None:
            return None
        entries = [EpochEntry(int(epoch), int(start)) for epoch, start in lines]
    except ValueError as exc:
        raise CorruptEpochCheckpointError(f"{path.parent.name}/{path.name}: {exc}") from None
    for prev, entry in zip(entries, entries[1:]):
        if entry.epoch <= prev.epoch or entry.start_offset < prev.start_offset:
            raise CorruptEpochCheckpointError(f"{path.parent.name}/{path.name}: {entry} after {prev}")
    return entries


class LeaderEpochFileCache:
    def __init__(self, directory: Path | None, entries: list[EpochEntry] | None = None):
        self.path = directory / LEADER_EPOCH_CHECKPOINT if directory is not None else None  # None: memory only
        self._entries: list[EpochEntry] = list(entries or [])
        self._version = self._synced = 0  # of the entries in memory, and of the file on disk
        self._writing = threading.Lock()  # the flusher's thread and a closing log may both sync

    @property
    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        return self._entries[-1].epoch if self._entries else UNDEFINED_EPOCH

    @property
    def earliest_entry(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset` (a leader's first batch of a new epoch, or
        a new leader's log end offset). Nothing changes if the latest entry is that epoch at or
        before that offset. Otherwise entries that would break the order (an epoch >= this one,
        or starting at or after this offset) are dropped first, as in Kafka. True if changed."""
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"leader epoch {epoch} at offset {start_offset}")
        latest = self._entries[-1] if self._entries else None
        if latest is not None and latest.epoch == epoch and latest.start_offset <= start_offset:
            return False
        kept = [e for e in self._entries if e.epoch < epoch and e.start_offset < start_offset]
        if len(kept) < len(self._entries):
            _logger.info("leader_epoch_entries_replaced", log=self._name, dropped=self._entries[len(kept):],
                         epoch=epoch, start_offset=start_offset)
        self._entries = kept + [EpochEntry(epoch, start_offset)]
        self.flush()
        return True

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """KIP-279's answer to OffsetForLeaderEpoch: (the largest epoch <= requested_epoch, the
        start offset of the first epoch after it, or the log end offset when requested_epoch is
        the latest). Below the first epoch known (older history deleted): (requested_epoch, the
        first entry's start offset). (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET) for an undefined
        or unknown-because-too-new epoch, or an empty cache."""
        if requested_epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self._entries[-1].epoch:
            return requested_epoch, log_end_offset
        higher = next((e for e in self._entries if e.epoch > requested_epoch), None)
        if higher is None:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        floor = [e for e in self._entries if e.epoch <= requested_epoch]
        return (floor[-1].epoch if floor else requested_epoch), higher.start_offset

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch the record at `offset` was written in (UNDEFINED_EPOCH below the first entry)."""
        found = UNDEFINED_EPOCH
        for e in self._entries:
            if e.start_offset > offset:
                break
            found = e.epoch
        return found

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop the epochs starting at or after `end_offset` (the log was cut there)."""
        kept = [e for e in self._entries if e.start_offset < end_offset]
        if len(kept) < len(self._entries):
            self._entries = kept
            self.flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at `start_offset`: epochs wholly below it go, and the epoch in force
        there is moved up to start at it (Kafka's truncateFromStart)."""
        below = [e for e in self._entries if e.start_offset <= start_offset]
        if not below or (len(below) == 1 and below[0].start_offset == start_offset):
            return
        self._entries = [EpochEntry(below[-1].epoch, start_offset)] + self._entries[len(below):]
        self.flush()

    def clear(self) -> None:
        self._entries = []
        self.flush()

    def flush(self) -> None:
        """Every change marks the entries for the next `sync`."""
        self._version += 1

    def sync(self) -> None:
        """Atomically rewrite the file, fsynced, if the entries changed since it was (from any
        thread: what it writes is at least as new as the entries when it began)."""
        if self.path is None:
            return
        with self._writing:
            version = self._version
            if self._synced >= version:
                return
            entries = self._entries  # replaced, never edited: one consistent list
            write_checkpoint_entries(self.path, [f"{e.epoch} {e.start_offset}" for e in entries])
            self._synced = version

    @property
    def _name(self) -> str:
        return self.path.parent.name if self.path is not None else "-"
