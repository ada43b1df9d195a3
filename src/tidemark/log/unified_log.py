"""Kafka's UnifiedLog: one partition's log as the broker sees it, on top of a LocalLog.

It assigns offsets and checks idempotent producers on append (or, on a follower, appends the
leader's batches as they are), writes transaction markers (WriteTxnMarkers) and answers the
last stable offset and the aborted transactions a read_committed fetch needs, keeps the high watermark, the log start offset and the leader
epoch cache, truncates divergent history, deletes segments past retention and answers
ListOffsets by time and OffsetForLeaderEpoch.
"""

from __future__ import annotations

import enum
import os
import time
from pathlib import Path
from collections.abc import Callable
from typing import Any, NamedTuple

from tidemark.records import (
    BATCH_OVERHEAD,
    BatchHeader,
    CorruptRecordError,
    RecordListTooLargeError,
    RecordTooLargeError,
    decode_records,
    iter_batches,
    read_header,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
)

from tidemark.records.control import EndTxnMarker, build_marker_batch, read_marker

from .config import LogConfig
from .errors import LogOfflineError, OffsetOutOfRangeError, UnexpectedAppendOffsetError
from .leader_epoch import LeaderEpochFileCache
from .loader import LogLoader
from .local_log import LocalLog
from .producer_state import CompletedTxn, ProducerStateManager
from .txn_index import AbortedTxn
from .segment import LogSegment


def _now_ms() -> int:
    return int(time.time() * 1000)


class AppendOrigin(enum.Enum):
    """Who made an append (Kafka's AppendOrigin), which decides what is checked: a client's
    batches are checked whole (CRC included); the coordinator's were built in this process
    and are only walked. A leader's batches come through append_as_follower."""

    CLIENT = "client"
    COORDINATOR = "coordinator"


class AppendInfo(NamedTuple):
    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int = -1
    duplicate: bool = False


class UnifiedLog:
    def __init__(self, local: LocalLog, *, log_start_offset: int = 0,
                 producer_state: ProducerStateManager | None = None,
                 leader_epoch_cache: LeaderEpochFileCache | None = None):
        self.local = local
        self.log_start_offset = log_start_offset
        self.producer_state = producer_state or ProducerStateManager()
        self.leader_epoch_cache = leader_epoch_cache or LeaderEpochFileCache(local.directory)
        # Told after every truncation, with the first offset whose record left the log: the
        # LogManager checkpoints the lowered recovery point at once (a stale, higher one would
        # have a restart trust unflushed segments); a reader that replayed past it starts over.
        self.truncation_listeners: list[Callable[[int], None]] = []
        # Makes a checkpoint durable (the LogManager's, after a truncation) before the log rolls:
        # a segment rolled past a truncation is trusted at restart if a stale, higher recovery
        # point still covers it.
        self.roll_barrier: Callable[[], None] | None = None
        local.on_roll = self._rolling
        # The log's flush makes the epochs and snapshots it depends on durable first, in its
        # own thread: nothing on the event loop waits for their fsyncs.
        local.before_sync = self._sync_metadata
        # Moved by update_high_watermark only; open() starts it from the replication-offset-checkpoint.
        self._high_watermark = local.log_end_offset

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig,
        *,
        recovery_point: int = 0,
        log_start_offset: int | None = None,
        clean_shutdown: bool = False,
        high_watermark: int | None = None,
        now_ms: int | None = None,
    ) -> UnifiedLog:
        """Load (or create) the partition log in `directory` (see LogLoader). The high watermark
        starts at `high_watermark` (a replica's checkpointed one), within [log start, log end];
        None starts it at the log end (a log nobody else replicates)."""
        loaded = LogLoader(directory, config, recovery_point=recovery_point, log_start_offset=log_start_offset,
                           clean_shutdown=clean_shutdown, now_ms=_now_ms() if now_ms is None else now_ms).load()
        log = cls(loaded.local, log_start_offset=loaded.log_start_offset, producer_state=loaded.producer_state,
                  leader_epoch_cache=loaded.leader_epoch_cache)
        if high_watermark is not None:
            log.update_high_watermark(high_watermark)
        return log

    def _rolling(self, base_offset: int) -> None:
        barrier, self.roll_barrier = self.roll_barrier, None
        if barrier is not None:
            barrier()
        # Kafka snapshots producer state at every roll: a restart walks only the newest segment.
        # Taken here, written and fsynced by the flush that passes it (`_sync_metadata`), in
        # the disk thread: the event loop writes no file.
        self.producer_state.snapshot_at_roll(base_offset, self.log_start_offset)

    # -- what the LocalLog knows ------------------------------------------------------------

    @property
    def directory(self) -> Path:
        return self.local.directory

    @property
    def config(self) -> LogConfig:
        return self.local.config

    @config.setter
    def config(self, config: LogConfig) -> None:  # a topic's configs (or the broker's defaults) changed
        self.local.config = config
        self.producer_state.expiration_ms = config.producer_id_expiration_ms

    @property
    def offline(self) -> BaseException | None:
        return self.local.offline

    @property
    def segments(self) -> list[LogSegment]:
        return self.local.segments

    @property
    def active_segment(self) -> LogSegment:
        return self.local.active_segment

    @property
    def log_end_offset(self) -> int:
        return self.local.log_end_offset

    @property
    def recovery_point(self) -> int:
        return self.local.recovery_point

    @property
    def size_in_bytes(self) -> int:
        return self.local.size_in_bytes

    @property
    def swap_hook(self) -> Any:
        return self.local.swap_hook

    @swap_hook.setter
    def swap_hook(self, hook: Any) -> None:
        self.local.swap_hook = hook

    def flush(self) -> int:
        return self.local.flush()

    def _sync_metadata(self) -> None:
        """fsync what a flush must not get ahead of: the leader epoch checkpoint (an epoch's
        entry is durable before the recovery point passes its first batch) and the producer
        snapshots taken at rolls (written here)."""
        self.leader_epoch_cache.sync()
        self.producer_state.write_snapshots()

    def sync_truncation(self) -> None:
        """Make the truncations so far durable, in the disk thread (the fetcher appends nothing
        to the log before): the cut segments and the directory first, then the leader epoch
        checkpoint without the epochs cut. The recovery point, lowered by the truncation, is
        moved up by the next flush only."""
        self.local.sync_truncation()
        self.leader_epoch_cache.sync()

    def new_cleaned_segment(self, base_offset: int) -> LogSegment:
        return self.local.new_cleaned_segment(base_offset)

    def replace_segments(self, old: list[LogSegment], new: LogSegment, *,
                         unchanged: Callable[[], bool] | None = None) -> bool:
        return self.local.replace_segments(old, new, unchanged=unchanged)

    def close(self, *, flush: bool = True) -> None:
        if flush and self.offline is None and not self.local.closed:
            self.local.flush()
            # Kafka's snapshot at shutdown: the next start restores producers without a walk.
            self.producer_state.take_snapshot(self.log_end_offset, self.log_start_offset)
        self.local.close(flush=flush)

    def delete(self) -> None:
        self.local.delete()

    # -- high watermark ---------------------------------------------------------------------

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def last_stable_offset(self) -> int:
        """Kafka's LSO: the first offset of the earliest transaction not yet decided (ongoing,
        or its marker not below the high watermark), never above the high watermark."""
        first = self.producer_state.first_unstable_offset(self._high_watermark)
        return self._high_watermark if first is None else min(first, self._high_watermark)

    def collect_aborted_transactions(self, start_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [start_offset, upper_bound) (Kafka's
        collectAbortedTransactions): from the segment holding start_offset on, until an entry's
        last stable offset shows no later one can overlap."""
        found: list[AbortedTxn] = []
        segments = self.local.segments
        first = next((i for i in range(len(segments) - 1, -1, -1) if segments[i].base_offset <= start_offset), 0)
        for seg in segments[first:]:
            entries, complete = seg.txn_index.collect(start_offset, upper_bound)
            found += entries
            if complete:
                break
        return found

    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark, kept within [log start offset, log end offset] as Kafka does."""
        self._high_watermark = min(max(offset, self.log_start_offset), self.log_end_offset)
        self.producer_state.forget_replicated(self._high_watermark)
        return self._high_watermark

    # -- append -----------------------------------------------------------------------------

    def append(self, records: bytes | bytearray | memoryview, *, leader_epoch: int = 0, now_ms: int,
               producer_id_end: int | None = None, origin: AppendOrigin = AppendOrigin.CLIENT,
               checked: BatchHeader | None = None) -> AppendInfo:
        """Assign offsets to and write the batches of one append (a produce request, validated
        before by broker/validator.py, or the coordinator's records).

        Nothing is written unless every batch is valid; an idempotent producer's retried batch
        is answered with its original offsets (duplicate=True) and not written again. A new
        producer id at or above producer_id_end (never issued) is refused.

        A writable memoryview (a produce's records: a view of the request's frame) gets its
        offsets assigned in place and is written from there, so the file write is the only copy
        of a produced byte; anything else is copied once to be changed.

        origin COORDINATOR (batches this broker just built) skips the CRC check: the batches
        are only walked, and must fill the buffer exactly. Everything else is checked as for
        a client. `checked` is the header of the one batch the produce validator has just
        checked whole, CRC included, in these very bytes (broker/validator.validate_produce,
        whose checks are Kafka's LogValidator's): a client's batch is then checked once, not
        walked and checksummed again here.
        """
        self._check_online()
        buf = records if isinstance(records, memoryview) and not records.readonly else bytearray(records)
        if origin is AppendOrigin.COORDINATOR:
            first_header = read_header(buf) if len(buf) >= BATCH_OVERHEAD else None
            if first_header is not None and first_header.size == len(buf):
                batches = [(0, first_header)]  # the usual case: one batch, no walk
            else:
                batches = list(iter_batches(buf, validate=False))
                if not batches or batches[-1][0] + batches[-1][1].size != len(buf):
                    if not buf:
                        return AppendInfo(-1, -1, -1, -1)
                    raise CorruptRecordError(f"the coordinator's {len(buf)} bytes are not whole batches")
        elif checked is not None and checked.size == len(buf):
            batches = [(0, checked)]
        else:
            batches = list(iter_batches(buf))  # raises CorruptRecordError / UnsupportedMagicError
            if not batches:
                return AppendInfo(-1, -1, -1, -1)
        # Sizes bound every append, the coordinator's too (Kafka's UnifiedLog does the same);
        # the rules for what clients may write live in broker/validator.py.
        for _, h in batches:
            if h.size > self.config.max_message_bytes:
                raise RecordTooLargeError(
                    f"batch of {h.size} bytes exceeds max.message.bytes {self.config.max_message_bytes}"
                )
        if len(buf) > self.config.segment_bytes:
            raise RecordListTooLargeError(
                f"{len(buf)} bytes of batches exceed segment.bytes {self.config.segment_bytes}"
            )
        duplicate = self.producer_state.check([h for _, h in batches], producer_id_end)
        if duplicate is not None:
            return AppendInfo(duplicate.first_offset, duplicate.last_offset, -1, -1, duplicate=True)

        log_append_time = now_ms if self.config.message_timestamp_type == "LogAppendTime" else -1
        # Appends come from one thread, so the end offset cannot move between here and the write.
        first = next_offset = self.log_end_offset
        assigned: list[tuple[int, BatchHeader]] = []
        max_ts, offset_of_max_ts = -1, first
        for pos, h in batches:
            set_base_offset(buf, pos, next_offset)
            set_partition_leader_epoch(buf, pos, leader_epoch)
            # One new header, not _replace's keyword machinery: this runs once per batch appended.
            h = BatchHeader(next_offset, h[1], leader_epoch, *h[3:])
            if log_append_time >= 0:
                set_log_append_time(buf, pos, log_append_time)
                h = h._replace(attributes=h.attributes | 0x08, max_timestamp=log_append_time)
            assigned.append((pos, h))
            next_offset = h.next_offset
            if h.max_timestamp > max_ts:
                max_ts, offset_of_max_ts = h.max_timestamp, h.last_offset
        last = next_offset - 1
        if leader_epoch >= 0:
            self.leader_epoch_cache.assign(leader_epoch, first)  # before the batch: see leader_epoch
        self.local.append(buf, assigned, last, now_ms)
        for _, h in assigned:
            self.producer_state.update(h)
        return AppendInfo(first, last, max_ts, offset_of_max_ts, log_append_time)

    def append_marker(self, producer_id: int, producer_epoch: int, committed: bool, coordinator_epoch: int, *,
                      leader_epoch: int = 0, now_ms: int) -> tuple[AppendInfo, CompletedTxn | None]:
        """Write a COMMIT or ABORT marker of the producer's transaction (Kafka's append with
        origin COORDINATOR): a control batch at the log end. Refused, with nothing written, if
        the producer epoch or coordinator epoch is older than the partition has seen. Returns
        where it went and the transaction it completed (None if none was ongoing here)."""
        self._check_online()
        self.producer_state.check_marker(producer_id, producer_epoch, coordinator_epoch)
        timestamp = now_ms  # Kafka stamps markers with the time they are written
        buf = bytearray(build_marker_batch(producer_id, producer_epoch, committed, coordinator_epoch, timestamp,
                                           base_offset=self.log_end_offset,
                                           partition_leader_epoch=max(leader_epoch, -1)))
        h = read_header(buf)
        if leader_epoch >= 0:
            self.leader_epoch_cache.assign(leader_epoch, h.base_offset)
        self.local.append(buf, [(0, h)], h.base_offset, now_ms)
        completed = self.producer_state.update(h, EndTxnMarker(committed, coordinator_epoch))
        if completed is not None:
            self.producer_state.index_completed(self.active_segment, completed)
        return AppendInfo(h.base_offset, h.base_offset, timestamp, h.base_offset), completed

    def append_as_follower(self, records: bytes | bytearray | memoryview, *, now_ms: int | None = None) -> AppendInfo:
        """Append a leader's batches as they are (Kafka's appendAsFollower): offsets, partition
        leader epochs and timestamps kept. Every batch must pass its CRC and continue the log:
        a batch starting below the log end offset, or below the end of the batch before it,
        raises UnexpectedAppendOffsetError and nothing is written. A batch may start past the
        log end offset: compaction on the leader removes whole batches, leaving offset gaps.
        Producer state and the leader epoch cache follow the batches; nothing is checked
        against them (the leader did)."""
        self._check_online()
        now_ms = _now_ms() if now_ms is None else now_ms
        buf = bytes(records)
        batches = list(iter_batches(buf))  # raises CorruptRecordError / UnsupportedMagicError
        if not batches:
            return AppendInfo(-1, -1, -1, -1)
        expected = self.log_end_offset
        max_ts, offset_of_max_ts = -1, batches[0][1].base_offset
        for _, h in batches:
            if h.base_offset < expected:
                raise UnexpectedAppendOffsetError(
                    f"batch at offset {h.base_offset} does not follow offset {expected - 1} in {self.directory.name}"
                )
            expected = h.next_offset
            if h.max_timestamp > max_ts:
                max_ts, offset_of_max_ts = h.max_timestamp, h.last_offset
        for _, h in batches:
            if h.partition_leader_epoch >= 0:
                self.leader_epoch_cache.assign(h.partition_leader_epoch, h.base_offset)
        # A fetch response may be larger than segment.bytes: write it in parts that fit a segment.
        group_start, group = 0, []
        for pos, h in batches:
            if group and pos + h.size - group_start > self.config.segment_bytes:
                self._write_group(buf, group_start, pos, group, now_ms)
                group_start, group = pos, []
            group.append((pos, h))
        self._write_group(buf, group_start, len(buf), group, now_ms)
        return AppendInfo(batches[0][1].base_offset, batches[-1][1].last_offset, max_ts, offset_of_max_ts)

    def _segment_of(self, offset: int) -> LogSegment:
        for seg in reversed(self.local.segments):
            if seg.base_offset <= offset:
                return seg
        return self.local.segments[0]

    def _write_group(self, buf: bytes, start: int, end: int, group: list[tuple[int, BatchHeader]],
                     now_ms: int) -> None:
        self.local.append(buf[start:end], [(pos - start, h) for pos, h in group], group[-1][1].last_offset, now_ms)
        # Producer state follows each part before the next is written: the next part's roll
        # snapshots it, and a restart from that snapshot scans only what comes after.
        for pos, h in group:
            completed = self.producer_state.update(h, read_marker(buf, pos) if h.is_control else None)
            if completed is not None:
                self.producer_state.index_completed(self._segment_of(h.base_offset), completed)

    def _check_online(self) -> None:
        if self.offline is not None:
            raise LogOfflineError(f"{self.directory.name} is offline after: {self.offline!r}")

    # -- leader epochs and truncation -----------------------------------------------------------

    @property
    def latest_epoch(self) -> int:
        """The newest leader epoch in the cache (UNDEFINED_EPOCH, -1, if none)."""
        return self.leader_epoch_cache.latest_epoch

    def assign_epoch_start_offset(self, epoch: int, start_offset: int | None = None) -> None:
        """A new leader records its epoch as starting at its log end offset (the default) before
        appending anything, so OffsetForLeaderEpoch for older epochs ends there at once."""
        self._check_online()
        self.leader_epoch_cache.assign(epoch, self.log_end_offset if start_offset is None else start_offset)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch's answer (KIP-279): (the largest epoch <= `epoch`, the offset
        where it ended: the next epoch's start offset, or the log end offset for the latest
        epoch); (-1, -1) when undefined. See LeaderEpochFileCache.end_offset_for."""
        return self.leader_epoch_cache.end_offset_for(epoch, self.log_end_offset)

    def truncate_to(self, offset: int, *, now_ms: int | None = None) -> bool:
        """Drop every record at and after `offset` (a whole batch if `offset` falls inside one,
        so the log end offset may end up below `offset`): segments and their indexes, the
        leader epochs starting there, producer state (restored from the snapshots and batches
        left), the high watermark and recovery point brought down to the new end. Nothing is
        fsynced on the caller's thread: it is durable once sync_truncation() ran, and nothing may
        be appended before (a crash in between finds the log as before or as cut, with a
        recovery point no higher than before). Below the first segment it is truncate_fully_and_start_at(offset).
        Past the log end nothing is cut, but leader epochs starting at or past the end (a
        former leader's epoch with no batch) are dropped, as in Kafka. True if records went."""
        if offset < 0:
            raise ValueError(f"cannot truncate {self.directory.name} to offset {offset}")
        self._check_online()
        if offset >= self.log_end_offset:
            self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
            return False
        if offset < self.local.segments[0].base_offset:
            self.truncate_fully_and_start_at(offset)
            return True
        try:
            self.local.truncate_to(offset)
        except OSError as exc:
            self.local.offline = exc
            raise LogOfflineError(f"truncation of {self.directory.name} failed: {exc}") from exc
        end = self.log_end_offset
        self.leader_epoch_cache.truncate_from_end(end)
        self.log_start_offset = min(self.log_start_offset, end)
        self.producer_state.load(self.local.segments, self.log_start_offset, _now_ms() if now_ms is None else now_ms)
        self._high_watermark = min(self._high_watermark, end)
        self._truncated(end)
        return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every record and start the log empty at `offset` (a follower whose log does
        not overlap its leader's): no segments, epochs or producers left; the log start offset,
        high watermark and recovery point are `offset`. Durable once sync_truncation() ran."""
        if offset < 0:
            raise ValueError(f"cannot start {self.directory.name} at offset {offset}")
        self._check_online()
        try:
            self.local.truncate_fully_and_start_at(offset)
        except OSError as exc:
            self.local.offline = exc
            raise LogOfflineError(f"truncation of {self.directory.name} failed: {exc}") from exc
        cut_from = self.log_start_offset
        self.leader_epoch_cache.clear()
        self.producer_state.truncate_fully()
        self.log_start_offset = self._high_watermark = offset
        self._truncated(min(cut_from, offset))

    def _truncated(self, cut_from: int) -> None:
        for listener in list(self.truncation_listeners):
            listener(cut_from)

    # -- read -------------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, *, upper_bound: int | None = None, min_one_batch: bool = True) -> bytes:
        """Whole batches from the one containing offset, none reaching upper_bound (the high
        watermark for consumers), at most max_bytes unless min_one_batch and the first batch
        alone is bigger."""
        end = self.log_end_offset
        if offset < self.log_start_offset or offset > end:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{self.log_start_offset}, {end}] in {self.directory.name}"
            )
        bound = end if upper_bound is None else min(upper_bound, end)
        return self.local.read(offset, max_bytes, bound, min_one_batch=min_one_batch)

    def offset_for_timestamp(self, timestamp_ms: int, *, upper_bound: int | None = None) -> tuple[int, int] | None:
        """ListOffsets by time: (offset, timestamp) of the first record with a timestamp >=
        the target, or None if there is none (below upper_bound, if given)."""
        try:
            return self._offset_for_timestamp(timestamp_ms, upper_bound)
        except CorruptRecordError as exc:
            raise self.local.corrupt(exc) from exc

    def _offset_for_timestamp(self, timestamp_ms: int, upper_bound: int | None) -> tuple[int, int] | None:
        bound = self.log_end_offset if upper_bound is None else min(upper_bound, self.log_end_offset)
        for seg in self.local.segments:
            if seg.max_timestamp < timestamp_ms:
                continue
            _, start = seg.offset_index.lookup(seg.time_index.lookup(timestamp_ms))
            for pos, h in seg.scan(start):
                if h.base_offset >= bound:
                    return None
                if h.max_timestamp < timestamp_ms or h.base_offset + h.last_offset_delta < self.log_start_offset:
                    continue
                for r in decode_records(seg.read(pos, h.size)):
                    if r.timestamp >= timestamp_ms and self.log_start_offset <= r.offset < bound:
                        return r.offset, r.timestamp
        return None

    def max_timestamp_entry(self) -> tuple[int, int] | None:
        """ListOffsets MAX_TIMESTAMP (KIP-734): (offset, timestamp) of the first record carrying
        the largest timestamp in the log, or None for an empty log."""
        try:
            return self._max_timestamp_entry()
        except CorruptRecordError as exc:
            raise self.local.corrupt(exc) from exc

    def _max_timestamp_entry(self) -> tuple[int, int] | None:
        best = max((seg for seg in self.local.segments if seg.max_timestamp >= 0),
                   key=lambda seg: seg.max_timestamp, default=None)
        if best is None:
            return None
        found = best.find(best.offset_of_max_timestamp)
        if found is not None:
            pos, h = found
            for r in decode_records(best.read(pos, h.size)):
                if r.timestamp == best.max_timestamp and r.offset >= self.log_start_offset:
                    return r.offset, r.timestamp
        return best.offset_of_max_timestamp, best.max_timestamp

    # -- retention --------------------------------------------------------------------------

    def delete_retention(self, now_ms: int | None = None) -> int:
        """Delete the oldest segments wholly below the log start offset, and (cleanup.policy
        delete) those past retention.ms or beyond retention.bytes (never the active segment,
        only segments wholly below the high watermark), and move the log start offset up.
        A segment whose producers only the snapshot of the roll after it carries stays until a
        flush wrote that snapshot (see _rolling): a restart could not find them otherwise.
        Returns the number of segments deleted."""
        now_ms = _now_ms() if now_ms is None else now_ms
        size_excess = self.size_in_bytes - self.config.retention_bytes if self.config.retention_bytes >= 0 else -1
        doomed = []
        unwritten = self.producer_state.unwritten_snapshot_offset()
        for seg in self.local.segments[:-1]:
            if seg.next_offset > self.high_watermark or seg.next_offset >= unwritten:
                break
            if seg.next_offset <= self.log_start_offset:
                pass  # below the log start offset (DeleteRecords): whatever the cleanup policy
            elif not self.config.delete_enabled:
                break
            elif self.config.retention_ms >= 0 and now_ms - self._largest_timestamp(seg) > self.config.retention_ms:
                pass
            elif size_excess >= 0 and size_excess - seg.size >= 0:
                pass
            else:
                break
            size_excess -= seg.size
            doomed.append(seg)
        if not doomed or not self.local.delete_oldest_segments(doomed):
            return 0
        self.log_start_offset = max(self.log_start_offset, self.local.segments[0].base_offset)
        self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
        return len(doomed)

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords (Kafka's maybeIncrementLogStartOffset): move the log start offset up to
        `offset`, at most the high watermark, and delete the segments wholly below it. Returns
        the log start offset (never moved back)."""
        if offset > self.high_watermark:
            raise OffsetOutOfRangeError(f"Cannot increment the log start offset to {offset} of {self.directory.name} "
                                        f"since it is larger than the high watermark {self.high_watermark}")
        if offset > self.log_start_offset:
            self.log_start_offset = offset
            below = [seg for seg in self.local.segments[:-1] if seg.next_offset <= offset]
            if below:
                # False if the cleaner swapped segments meanwhile: retention deletes them later.
                self.local.delete_oldest_segments(below)
        return self.log_start_offset

    @staticmethod
    def _largest_timestamp(seg: LogSegment) -> int:
        # Like Kafka, fall back to the file's modification time for batches without timestamps.
        if seg.max_timestamp >= 0:
            return seg.max_timestamp
        return int(os.fstat(seg.fd).st_mtime * 1000)

    # -- compaction -------------------------------------------------------------------------

    def cleaning_snapshot(self) -> tuple[list[tuple[LogSegment, int]], int, int]:
        """For the cleaner: the non-active segments with duplicated descriptors (see
        LocalLog.cleaning_snapshot), the active segment's base offset and the last stable
        offset (the high watermark, or before an undecided transaction: that is never cleaned).
        It is read first: it only grows, so it never covers more than the segments taken."""
        high_watermark = self.last_stable_offset
        segments, active_base = self.local.cleaning_snapshot()
        return segments, active_base, high_watermark

    def __repr__(self) -> str:
        return (
            f"UnifiedLog({self.directory.name}, start={self.log_start_offset}, end={self.log_end_offset}, "
            f"hw={self.high_watermark}, segments={len(self.local.segments)})"
        )
