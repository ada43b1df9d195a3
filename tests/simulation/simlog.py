"""An in-memory partition log with UnifiedLog's contract for what Partition, the fetcher and
the OffsetForLeaderEpoch answer use, on a simulated disk where a power loss drops what was not
fsynced.

Why not the real UnifiedLog in a temporary directory: a crash that loses unflushed bytes would
mean cutting segment and index files back by hand, and thousands of seeds on two cores leave a
few milliseconds per seed, not the tens that real appends, fsyncs and reloads cost. What this
log must agree with UnifiedLog on is pinned by `test_simulation.py::test_simlog_matches_unified_log`,
which runs the same operations on both.

The leader epoch history IS tidemark's: a memory-only LeaderEpochFileCache, so assign,
truncate_from_end and end_offset_for (OffsetForLeaderEpoch's answer) are the real ones. One
record per batch; a record is (leader epoch, value).
"""

from __future__ import annotations

import random
from typing import NamedTuple

from tidemark.log.errors import OffsetOutOfRangeError, UnexpectedAppendOffsetError
from tidemark.log.leader_epoch import EpochEntry, LeaderEpochFileCache


class Record(NamedTuple):
    epoch: int  # the batch's partition leader epoch
    value: str


class SimLog:
    def __init__(self, name: str, records: list[Record] | None = None, epochs: list[EpochEntry] | None = None,
                 recovery_point: int = 0, high_watermark: int | None = None) -> None:
        self.name = name
        self.records: list[Record] = list(records or [])
        self.leader_epoch_cache = LeaderEpochFileCache(None, epochs)
        self.log_start_offset = 0
        self.offline = None
        self._recovery_point = recovery_point
        # UnifiedLog's constructor: the high watermark starts at the log end (defect 5 on main).
        self._high_watermark = len(self.records) if high_watermark is None else high_watermark
        self._truncations = 0
        self.modified_from = 0  # lowest offset changed since the checker last looked

    # -- UnifiedLog's properties --------------------------------------------------------------

    @property
    def log_end_offset(self) -> int:
        return len(self.records)

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def latest_epoch(self) -> int:
        return self.leader_epoch_cache.latest_epoch

    def update_high_watermark(self, offset: int) -> int:
        self._high_watermark = min(max(offset, self.log_start_offset), self.log_end_offset)
        return self._high_watermark

    # -- append, read -------------------------------------------------------------------------

    def append(self, value: str, *, leader_epoch: int) -> int:
        """A leader's append of one record: its offset (the epoch is recorded before the batch)."""
        offset = len(self.records)
        if leader_epoch >= 0:
            self.leader_epoch_cache.assign(leader_epoch, offset)
        self.records.append(Record(leader_epoch, value))
        return offset

    def append_as_follower(self, base_offset: int, records: list[Record]) -> None:
        """The leader's records as they are, continuing this log (UnexpectedAppendOffsetError
        otherwise, nothing written)."""
        if not records:
            return
        if base_offset < len(self.records) or base_offset > len(self.records):
            # UnifiedLog allows a gap (compaction); there is none here, so a gap is a sim bug.
            raise UnexpectedAppendOffsetError(f"batch at offset {base_offset} does not follow "
                                              f"offset {len(self.records) - 1} in {self.name}")
        for i, record in enumerate(records):
            if record.epoch >= 0:
                self.leader_epoch_cache.assign(record.epoch, base_offset + i)
            self.records.append(record)

    def read(self, offset: int, max_records: int, upper_bound: int) -> list[Record]:
        end = self.log_end_offset
        if offset < self.log_start_offset or offset > end:
            raise OffsetOutOfRangeError(f"offset {offset} is outside [{self.log_start_offset}, {end}] in {self.name}")
        return self.records[offset:min(upper_bound, end, offset + max_records)]

    # -- epochs and truncation ----------------------------------------------------------------

    def assign_epoch_start_offset(self, epoch: int, start_offset: int | None = None) -> None:
        self.leader_epoch_cache.assign(epoch, self.log_end_offset if start_offset is None else start_offset)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self.leader_epoch_cache.end_offset_for(epoch, self.log_end_offset)

    def truncate_to(self, offset: int) -> bool:
        """UnifiedLog.truncate_to: records at and after `offset` go, durably; epochs starting
        there go; high watermark and recovery point come down to the new end. Past the end only
        the epochs starting at or past the end go."""
        if offset < 0:
            raise ValueError(f"cannot truncate {self.name} to offset {offset}")
        if offset >= self.log_end_offset:
            self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
            return False
        del self.records[offset:]
        self._truncations += 1
        self.modified_from = min(self.modified_from, offset)
        self.leader_epoch_cache.truncate_from_end(offset)
        self._high_watermark = min(self._high_watermark, offset)
        self._recovery_point = min(self._recovery_point, offset)
        return True

    # -- durability ---------------------------------------------------------------------------

    def begin_flush(self) -> tuple[int, int]:
        """LocalLog.flush's first half (under its lock): the end to make durable."""
        return self.log_end_offset, self._truncations

    def finish_flush(self, started: tuple[int, int]) -> int:
        """LocalLog.flush's second half, after the fsync: the recovery point (unchanged when a
        truncation came in between: it synced what it kept itself)."""
        end, truncations = started
        if truncations == self._truncations:
            self._recovery_point = max(self._recovery_point, end)
        return self._recovery_point

    def flush(self) -> int:
        return self.finish_flush(self.begin_flush())

    def after_crash(self, rng: random.Random, power_loss: bool) -> SimLog:
        """What a restart finds on disk. A process kill leaves the OS's page cache: every record
        survives. A power loss keeps the fsynced records and any prefix of the rest (the kernel
        may have written some back). The leader-epoch-checkpoint is rewritten durably at every
        change; loading drops the entries at or past the log end (LogLoader)."""
        keep = len(self.records)
        if power_loss:
            keep = rng.randint(self._recovery_point, len(self.records))
        log = SimLog(self.name, self.records[:keep], self.leader_epoch_cache.entries,
                     recovery_point=min(self._recovery_point, keep))
        log.leader_epoch_cache.truncate_from_end(keep)
        return log
