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
record per batch; a record is (leader epoch, value), and for a transactional batch or a
transaction marker also its batch header (and the marker's bytes).

Transactions are tidemark's too: the log holds a real ProducerStateManager (its snapshots in a
real directory) and a real TransactionIndex (kept in memory: one segment, whose file is not
written), and UnifiedLog's own methods do the leader's transactional append, the marker's
append, the high watermark's update (which forgets replicated transactions), the last stable
offset and collect_aborted_transactions. What is written here is what UnifiedLog does around
them on the follower's append, the truncation and the restart (producer state rebuilt by
ProducerStateManager.load over this log's batches); the same test pins it.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from tidemark.log.config import LogConfig
from tidemark.log.errors import OffsetOutOfRangeError, UnexpectedAppendOffsetError
from tidemark.log.leader_epoch import EpochEntry, LeaderEpochFileCache
from tidemark.log.producer_state import ProducerStateManager
from tidemark.log.txn_index import AbortedTxn, TransactionIndex
from tidemark.log.unified_log import UnifiedLog
from tidemark.records import BatchHeader, decode_records
from tidemark.records.control import read_marker


class Record(NamedTuple):
    epoch: int  # the batch's partition leader epoch
    value: str
    header: BatchHeader | None = None  # a transactional batch's or a marker's (None: a plain batch)
    marker: bytes | None = None  # a marker's control batch

    @property
    def is_marker(self) -> bool:
        return self.marker is not None


class MemoryTxnIndex(TransactionIndex):
    """The real TransactionIndex (append, collect, truncate_to) without its file: what a crash
    keeps of it is decided by SimLog.after_crash."""

    def __init__(self, entries: list[AbortedTxn] | None = None) -> None:
        self.path = Path(os.devnull)  # append's write goes nowhere
        self.dirty = False
        self.entries = list(entries or [])

    def _rewrite(self) -> None:
        pass


class _Segment:
    """The one segment this log is, as ProducerStateManager.load and index_completed see a
    LogSegment: base offset 0, its batches by position (= offset) and its txn index."""

    base_offset = 0

    def __init__(self, log: SimLog, txn_index: MemoryTxnIndex) -> None:
        self._log = log
        self.txn_index = txn_index

    @property
    def next_offset(self) -> int:
        return len(self._log.records)

    def find(self, offset: int) -> tuple[int, Any] | None:
        return (offset, None) if offset < len(self._log.records) else None

    def scan(self, position: int, read_ahead: int = 0) -> Iterator[tuple[int, BatchHeader]]:
        # Plain batches carry no producer: ProducerStateManager.update ignores them.
        for offset in range(position, len(self._log.records)):
            header = self._log.records[offset].header
            if header is not None:
                yield offset, header

    def read(self, position: int, size: int) -> bytes:
        return self._log.records[position].marker


class _Local:
    """LocalLog as UnifiedLog's append and append_marker call it."""

    def __init__(self, log: SimLog) -> None:
        self._log = log

    @property
    def segments(self) -> list[_Segment]:
        return [self._log.segment]

    def append(self, buf: Any, assigned: list[tuple[int, BatchHeader]], last_offset: int, now_ms: int) -> None:
        self._log.maybe_roll()  # LocalLog.append rolls first if the active segment is full
        for pos, h in assigned:
            if h.is_control:
                raw = bytes(buf[pos:pos + h.size])
                marker = read_marker(raw)
                value = f"{'COMMIT' if marker.committed else 'ABORT'}:{h.producer_id}.{h.producer_epoch}"
                self._log.records.append(Record(h.partition_leader_epoch, value, h, raw))
            else:
                value = decode_records(buf, pos)[0].value.decode()
                self._log.records.append(Record(h.partition_leader_epoch, value, h))


class SimLog:
    config = LogConfig()

    def __init__(self, name: str, records: list[Record] | None = None, epochs: list[EpochEntry] | None = None,
                 recovery_point: int = 0, high_watermark: int | None = None,
                 snapshot_dir: Path | None = None, aborted: list[AbortedTxn] | None = None,
                 now_ms: int = 0, roll_records: int | None = None) -> None:
        self.name = name
        self.records: list[Record] = list(records or [])
        self.leader_epoch_cache = LeaderEpochFileCache(None, epochs)
        self.log_start_offset = 0
        self.offline = None
        self.snapshot_dir = snapshot_dir
        # Segments of this many records: at each roll producer state is snapshotted (UnifiedLog's
        # _rolling: snapshot_at_roll), written by the next flush (write_snapshots). None: no rolls.
        self.roll_records = roll_records
        self.segment = _Segment(self, MemoryTxnIndex(aborted))
        self.local = _Local(self)
        # LogLoader: producer state from the newest snapshot and the batches after it.
        self.producer_state = ProducerStateManager(snapshot_dir)
        self.producer_state.load([self.segment], 0, now_ms)
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

    @property
    def active_segment(self) -> _Segment:
        return self.segment

    # UnifiedLog's own: the high watermark forgets replicated transactions; the LSO; the
    # aborted transactions a read_committed fetch returns.
    update_high_watermark = UnifiedLog.update_high_watermark
    last_stable_offset = UnifiedLog.last_stable_offset
    collect_aborted_transactions = UnifiedLog.collect_aborted_transactions
    _check_online = UnifiedLog._check_online

    @property
    def aborted(self) -> list[AbortedTxn]:
        """The .txnindex's entries."""
        return list(self.segment.txn_index.entries)

    # -- append, read -------------------------------------------------------------------------

    def maybe_roll(self) -> None:
        end = len(self.records)
        if self.roll_records and end and end % self.roll_records == 0:
            self.producer_state.snapshot_at_roll(end, self.log_start_offset)

    def append(self, value: str, *, leader_epoch: int) -> int:
        """A leader's append of one record: its offset (the epoch is recorded before the batch)."""
        self.maybe_roll()
        offset = len(self.records)
        if leader_epoch >= 0:
            self.leader_epoch_cache.assign(leader_epoch, offset)
        self.records.append(Record(leader_epoch, value))
        return offset

    # A transactional batch (UnifiedLog.append: checked by producer state, offsets assigned, its
    # epoch recorded, producer state updated) and a marker (UnifiedLog.append_marker: fenced by
    # producer and coordinator epoch, its completed transaction indexed if aborted).
    append_batches = UnifiedLog.append
    append_marker = UnifiedLog.append_marker

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
        for i, record in enumerate(records):  # each batch a part of UnifiedLog.append_as_follower's write
            self.maybe_roll()
            self.records.append(record)
            # Producer state follows each part before the next is written (and rolls); before
            # issue 25's fix, only after the last part.
            if self.follower_state_per_part:
                self._follow_producer_state(records[i:i + 1])
        if not self.follower_state_per_part:
            self._follow_producer_state(records)

    def _follow_producer_state(self, records: list[Record]) -> None:
        for record in records:
            if self.follower_tracks_transactions and record.header is not None:
                completed = self.producer_state.update(record.header, read_marker(record.marker)
                                                       if record.is_marker else None)
                if completed is not None:
                    self.producer_state.index_completed(self.segment, completed)

    # The simulator's switch for a follower that ignores transactions (a defect it must find).
    follower_tracks_transactions = True
    follower_state_per_part = True

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
        self.segment.txn_index.truncate_to(offset)  # LogSegment.truncate_to
        self.producer_state.load([self.segment], self.log_start_offset, self._now_ms)  # UnifiedLog.truncate_to
        self._high_watermark = min(self._high_watermark, offset)
        self._recovery_point = min(self._recovery_point, offset)
        return True

    # -- durability ---------------------------------------------------------------------------

    def begin_flush(self) -> tuple[int, int]:
        """LocalLog.flush's first half (under its lock): the end to make durable; the snapshots
        taken at rolls are written first (UnifiedLog._sync_metadata)."""
        self.producer_state.write_snapshots()
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

    _now_ms = 0  # the simulated clock, for producer expiration (set by the simulation)

    def close(self) -> None:
        """UnifiedLog.close: flushed, then producer state snapshotted at the log end."""
        self.flush()
        self.producer_state.take_snapshot(self.log_end_offset, self.log_start_offset)

    def after_crash(self, rng: random.Random, power_loss: bool, now_ms: int = 0) -> SimLog:
        """What a restart finds on disk. A process kill leaves the OS's page cache: every record
        survives. A power loss keeps the fsynced records and any prefix of the rest (the kernel
        may have written some back), and of the .txnindex the entries fsynced with their segment
        (markers below the recovery point) and any prefix of the others. The
        leader-epoch-checkpoint is rewritten durably at every change; loading drops the entries
        at or past the log end (LogLoader), and producer state is loaded from the snapshots
        (fsynced when written) and the batches after the newest one that the log still holds."""
        keep = len(self.records)
        aborted = [e for e in self.segment.txn_index.entries if e.last_offset < keep]
        if power_loss:
            keep = rng.randint(self._recovery_point, len(self.records))
            durable = [e for e in aborted if e.last_offset < min(self._recovery_point, keep)]
            rest = [e for e in aborted[len(durable):] if e.last_offset < keep]
            aborted = durable + (rest[:rng.randint(0, len(rest))] if rest else [])
        log = SimLog(self.name, self.records[:keep], self.leader_epoch_cache.entries,
                     recovery_point=min(self._recovery_point, keep), snapshot_dir=self.snapshot_dir,
                     aborted=aborted, now_ms=now_ms, roll_records=self.roll_records)
        log.leader_epoch_cache.truncate_from_end(keep)
        log._now_ms = now_ms
        return log
