"""Kafka's Log for one partition directory: segments, appends, reads, recovery, retention."""

from __future__ import annotations

import os
import shutil
import threading
import time
from bisect import bisect_right
from pathlib import Path
from typing import Any, NamedTuple

import structlog

from tidemark.hold import hold
from tidemark.records import (
    BatchHeader,
    InvalidRecordError,
    RecordListTooLargeError,
    RecordTooLargeError,
    decode_records,
    iter_batches,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
)

from .config import LogConfig
from .errors import LogOfflineError, OffsetOutOfRangeError
from .producer_state import ProducerStateManager
from .segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, LogSegment

# Kafka's file suffixes for segments mid-operation (see Log.replace_segments).
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"
_TEMP_SUFFIXES = (DELETED_SUFFIX, CLEANED_SUFFIX, SWAP_SUFFIX)
# Kafka's file.delete.delay.ms: how long a replaced segment's descriptors stay open for readers
# that picked it up just before the swap.
FILE_DELETE_DELAY_S = 60.0


_logger = structlog.get_logger("tidemark.log")


def _now_ms() -> int:
    return int(time.time() * 1000)


def _base_offset(seg: LogSegment) -> int:
    return seg.base_offset


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class AppendInfo(NamedTuple):
    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int = -1
    duplicate: bool = False


class Log:
    def __init__(self, directory: Path, config: LogConfig):
        self.offline: BaseException | None = None  # the write or fsync failure that stopped this log
        self.directory = directory
        self.config = config
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []  # segment base offsets, for bisect
        self.log_start_offset = 0
        self.high_watermark = 0  # set by the broker; on one broker, the durably flushed end
        self._recovery_point = 0
        self.producer_state = ProducerStateManager()
        # Guards what flush() snapshots from another thread: the segment list, sizes, offsets.
        self._lock = threading.Lock()
        self._dir_dirty = False  # segment files created since the last directory fsync
        self._closed = False
        self._retired: list[tuple[float, LogSegment]] = []  # (when, segment) replaced by the cleaner
        # Test hook: called with each step name of replace_segments (raise to simulate a crash).
        self.swap_hook: Any = None

    # -- opening and recovery ---------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig,
        *,
        recovery_point: int = 0,
        log_start_offset: int | None = None,
        clean_shutdown: bool = False,
        now_ms: int | None = None,
    ) -> Log:
        """Load (or create) a partition log. After an unclean shutdown every segment that may
        hold data past the recovery point is re-validated and cut at its first bad byte; later
        segments go too. Indexes that are missing or disagree with the log are rebuilt."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        log = cls(directory, config)
        log._complete_swaps()
        bases = []
        for path in directory.iterdir():
            if path.name.endswith(_TEMP_SUFFIXES):
                path.unlink(missing_ok=True)
            elif path.suffix == LOG_SUFFIX and path.stem.isdigit():
                bases.append(int(path.stem))
        bases.sort()
        for path in directory.iterdir():  # indexes whose .log is gone
            if path.suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX) and not (directory / (path.stem + LOG_SUFFIX)).exists():
                path.unlink(missing_ok=True)

        truncated = cut = False
        for i, base in enumerate(bases):
            seg = log._new_segment(base)
            if truncated or (log._segments and base < log._segments[-1].next_offset):
                seg.delete()  # after a cut, or overlapping the previous segment: not trusted
                truncated = cut = True
                continue
            upper = bases[i + 1] if i + 1 < len(bases) else None
            validate = not clean_shutdown and (upper is None or upper > recovery_point)
            truncated = seg.load(validate=validate, active=upper is None, on_batch=log.producer_state.update)
            cut = cut or truncated
            if validate:
                seg.flushed_size = 0  # a process crash can leave valid bytes only in the page cache
            log._add_segment(seg)
        if not log._segments:
            log._add_segment(log._new_segment(log_start_offset or 0))

        start = max(log_start_offset or 0, log._segments[0].base_offset)
        if start > log.log_end_offset:
            # The checkpointed start is past everything left (e.g. a truncated tail): start over there.
            for seg in log._segments:
                seg.delete()
            log._segments.clear()
            log._bases.clear()
            log._add_segment(log._new_segment(start))
            log.producer_state = ProducerStateManager()
        log.log_start_offset = start
        log.high_watermark = log.log_end_offset
        if cut:
            _logger.warning("log_truncated_at_recovery", log=directory.name, log_end_offset=log.log_end_offset,
                            clean_shutdown=clean_shutdown)
        if clean_shutdown and not cut:
            log._recovery_point = log.log_end_offset
        else:
            log._recovery_point = min(recovery_point, log.log_end_offset)
            log._dir_dirty = True
            log.flush()  # what recovery kept (and cut) is now durable
        return log

    def _complete_swaps(self) -> None:
        """Kafka's recovery of an interrupted cleaner swap: ".cleaned" and ".deleted" files are
        dropped (a ".cleaned" segment was never committed to); a "<base>.log.swap" was complete
        and fsynced before it got that name, so it replaces every segment whose base offset lies
        in [base, its next offset) and takes its final name. (A cleaned segment always ends
        where the segments it replaces ended: the cleaner keeps the last batch of a group.)"""
        directory = self.directory
        swaps = []
        for path in directory.iterdir():
            if path.name.endswith((CLEANED_SUFFIX, DELETED_SUFFIX)):
                path.unlink(missing_ok=True)
            elif path.name.endswith(LOG_SUFFIX + SWAP_SUFFIX) and path.name.split(".")[0].isdigit():
                swaps.append(path)
        for path in sorted(swaps):
            base = int(path.name.split(".")[0])
            seg = self._new_segment(base, suffix=SWAP_SUFFIX)
            try:
                seg.load(validate=True, active=False)
                seg.fsync()
                for other in list(directory.iterdir()):
                    if other.suffix == LOG_SUFFIX and other.stem.isdigit() and base <= int(other.stem) < seg.next_offset:
                        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
                            (directory / (other.stem + suffix)).unlink(missing_ok=True)
                seg.change_suffix("")
            finally:
                seg.close()
            _logger.info("cleaner_swap_completed", log=directory.name, base_offset=base, next_offset=seg.next_offset)
        for path in directory.iterdir():  # index .swap files whose .log had already been renamed
            if path.name.endswith(SWAP_SUFFIX):
                path.unlink(missing_ok=True)
        if swaps:
            fsync_directory(directory)

    def _new_segment(self, base_offset: int, *, suffix: str = "") -> LogSegment:
        return LogSegment(
            self.directory,
            base_offset,
            index_interval_bytes=self.config.index_interval_bytes,
            index_max_bytes=self.config.segment_index_bytes,
            suffix=suffix,
        )

    def new_cleaned_segment(self, base_offset: int) -> LogSegment:
        """An empty "<base>.log.cleaned" segment for the cleaner to write into (any leftover
        from an earlier attempt is discarded first)."""
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            (self.directory / (f"{base_offset:020d}" + suffix + CLEANED_SUFFIX)).unlink(missing_ok=True)
        return self._new_segment(base_offset, suffix=CLEANED_SUFFIX)

    def _add_segment(self, seg: LogSegment) -> None:
        self._segments.append(seg)
        self._bases.append(seg.base_offset)

    # -- properties -------------------------------------------------------------------------

    @property
    def segments(self) -> list[LogSegment]:
        return list(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    # -- append -----------------------------------------------------------------------------

    def append(self, records: bytes | bytearray | memoryview, *, leader_epoch: int = 0, now_ms: int) -> AppendInfo:
        """Validate, assign offsets and write the batches of one produce request.

        Nothing is written unless every batch is valid; an idempotent producer's retried batch
        is answered with its original offsets (duplicate=True) and not written again.
        """
        if self.offline is not None:
            raise LogOfflineError(f"{self.directory.name} is offline after: {self.offline!r}")
        buf = bytearray(records)
        batches = list(iter_batches(buf))  # raises CorruptRecordError / UnsupportedMagicError
        if not batches:
            return AppendInfo(-1, -1, -1, -1)
        for pos, h in batches:
            if h.size > self.config.max_message_bytes:
                raise RecordTooLargeError(
                    f"batch of {h.size} bytes exceeds max.message.bytes {self.config.max_message_bytes}"
                )
            # Kafka's LogValidator checks on batches from clients.
            if h.records_count == 0 or h.records_count != h.last_offset_delta + 1:
                raise InvalidRecordError(
                    f"batch at {pos}: {h.records_count} records but last offset delta {h.last_offset_delta}"
                )
            if h.is_control:
                raise InvalidRecordError(f"batch at {pos}: clients may not write control batches")
        if len(buf) > self.config.segment_bytes:
            raise RecordListTooLargeError(
                f"{len(buf)} bytes of batches exceed segment.bytes {self.config.segment_bytes}"
            )
        duplicate = self.producer_state.check([h for _, h in batches])
        if duplicate is not None:
            return AppendInfo(duplicate.first_offset, duplicate.last_offset, -1, -1, duplicate=True)

        log_append_time = now_ms if self.config.message_timestamp_type == "LogAppendTime" else -1
        with self._lock:
            first = next_offset = self.log_end_offset
            assigned: list[tuple[int, BatchHeader]] = []
            max_ts, offset_of_max_ts = -1, first
            for pos, h in batches:
                set_base_offset(buf, pos, next_offset)
                set_partition_leader_epoch(buf, pos, leader_epoch)
                h = h._replace(base_offset=next_offset, partition_leader_epoch=leader_epoch)
                if log_append_time >= 0:
                    set_log_append_time(buf, pos, log_append_time)
                    h = h._replace(attributes=h.attributes | 0x08, max_timestamp=log_append_time)
                assigned.append((pos, h))
                next_offset = h.next_offset
                if h.max_timestamp > max_ts:
                    max_ts, offset_of_max_ts = h.max_timestamp, h.last_offset
            last = next_offset - 1
            seg = self.active_segment
            if seg.should_roll(len(buf), last, now_ms, self.config.segment_bytes, self.config.segment_ms):
                seg = self._roll(first)
            try:
                seg.append(buf, assigned, now_ms)
            except OSError as exc:
                self.offline = exc
                raise LogOfflineError(f"append to {self.directory.name} failed: {exc}") from exc
        for _, h in assigned:
            self.producer_state.update(h)
        return AppendInfo(first, last, max_ts, offset_of_max_ts, log_append_time)

    def _roll(self, base_offset: int) -> LogSegment:
        """Start a new active segment (caller holds the lock)."""
        self.active_segment.on_roll()
        seg = self._new_segment(base_offset)
        self._add_segment(seg)
        self._dir_dirty = True
        return seg

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
        if offset >= bound:
            return b""
        segments = self._segments  # one snapshot: the cleaner swaps in a new list, never edits it
        i = max(0, bisect_right(segments, offset, key=_base_offset) - 1)
        for seg in segments[i:]:
            found = seg.find(offset)
            if found is None:
                continue  # offset lies past this segment's batches (a gap): try the next one
            start, _ = found
            stop = start
            for pos, h in seg.iter_headers(start):
                if h.base_offset + h.last_offset_delta >= bound:
                    break
                if pos + h.size - start > max_bytes and not (min_one_batch and stop == start):
                    break
                stop = pos + h.size
            return seg.read(start, stop - start) if stop > start else b""
        return b""

    def offset_for_timestamp(self, timestamp_ms: int, *, upper_bound: int | None = None) -> tuple[int, int] | None:
        """ListOffsets by time: (offset, timestamp) of the first record with a timestamp >=
        the target, or None if there is none (below upper_bound, if given)."""
        bound = self.log_end_offset if upper_bound is None else min(upper_bound, self.log_end_offset)
        for seg in self._segments:
            if seg.max_timestamp < timestamp_ms:
                continue
            _, start = seg.offset_index.lookup(seg.time_index.lookup(timestamp_ms))
            for pos, h in seg.iter_headers(start):
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
        best = max((seg for seg in self._segments if seg.max_timestamp >= 0),
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

    # -- durability -------------------------------------------------------------------------

    def flush(self) -> int:
        """fsync everything appended so far and advance the recovery point to it.

        Safe to call from a worker thread while the event loop appends: the files and end
        offset are snapshotted under the lock, then synced outside it on duplicated
        descriptors, so a segment deleted meanwhile cannot break the sync."""
        with self._lock:
            if self._closed:
                return self._recovery_point
            if self.offline is not None:
                raise LogOfflineError(f"{self.directory.name} is offline after: {self.offline!r}")
            end = self.log_end_offset
            active = self.active_segment
            targets: list[tuple[LogSegment, int, int]] = []  # (segment, size synced, dup fd)
            index_fds: list[tuple[Any, int]] = []  # (index, dup fd)
            for seg in self._segments:
                if seg.flushed_size != seg.size:
                    targets.append((seg, seg.size, os.dup(seg.fd)))
                if seg is not active:
                    for index in (seg.offset_index, seg.time_index):
                        if index.dirty:
                            index_fds.append((index, os.dup(index.fd)))
            dir_fd = os.open(self.directory, os.O_RDONLY) if self._dir_dirty else -1
            self._dir_dirty = False
        try:
            for _, _, fd in targets:
                os.fsync(fd)
            for _, fd in index_fds:
                os.fsync(fd)
            if dir_fd >= 0:
                os.fsync(dir_fd)
        except OSError as exc:
            self.offline = exc
            raise LogOfflineError(f"fsync of {self.directory.name} failed: {exc}") from exc
        finally:
            for fd in [fd for _, _, fd in targets] + [fd for _, fd in index_fds] + ([dir_fd] if dir_fd >= 0 else []):
                os.close(fd)
        with self._lock:
            for index, _ in index_fds:
                index.dirty = False
            for seg, size, _ in targets:
                seg.flushed_size = max(seg.flushed_size, size)
            self._recovery_point = max(self._recovery_point, end)
            return self._recovery_point

    # -- retention --------------------------------------------------------------------------

    def delete_retention(self, now_ms: int | None = None) -> int:
        """Delete the oldest segments past retention.ms or beyond retention.bytes (never the
        active segment, only segments wholly below the high watermark) and move the log start
        offset up. Returns the number of segments deleted."""
        if not self.config.delete_enabled:
            return 0
        now_ms = _now_ms() if now_ms is None else now_ms
        size_excess = self.size_in_bytes - self.config.retention_bytes if self.config.retention_bytes >= 0 else -1
        doomed = []
        for seg in self._segments[:-1]:
            if seg.next_offset > self.high_watermark:
                break
            if seg.next_offset <= self.log_start_offset:
                pass  # already below the log start offset
            elif self.config.retention_ms >= 0 and now_ms - self._largest_timestamp(seg) > self.config.retention_ms:
                pass
            elif size_excess >= 0 and size_excess - seg.size >= 0:
                pass
            else:
                break
            size_excess -= seg.size
            doomed.append(seg)
        if not doomed:
            return 0
        with self._lock:
            if any(a is not b for a, b in zip(self._segments, doomed)):
                return 0  # the cleaner swapped segments meanwhile: decide again next time
            self._segments = self._segments[len(doomed):]
            self._bases = self._bases[len(doomed):]
            self.log_start_offset = max(self.log_start_offset, self._segments[0].base_offset)
            self._recovery_point = max(self._recovery_point, self.log_start_offset)
            for seg in doomed:
                seg.delete()
            self._dir_dirty = True
        return len(doomed)

    @staticmethod
    def _largest_timestamp(seg: LogSegment) -> int:
        # Like Kafka, fall back to the file's modification time for batches without timestamps.
        if seg.max_timestamp >= 0:
            return seg.max_timestamp
        return int(os.fstat(seg.fd).st_mtime * 1000)

    # -- compaction -------------------------------------------------------------------------

    def cleaning_snapshot(self) -> tuple[list[tuple[LogSegment, int]], int, int]:
        """For the cleaner: the non-active segments, each with a duplicated descriptor (valid
        whatever happens to the segment meanwhile; the caller closes them), the active
        segment's base offset and the high watermark, all taken together under the lock."""
        with self._lock:
            if self._closed:
                raise LogOfflineError(f"{self.directory.name} is closed")
            segments = self._segments
            return [(seg, os.dup(seg.fd)) for seg in segments[:-1]], segments[-1].base_offset, self.high_watermark

    def replace_segments(self, old: list[LogSegment], new: LogSegment) -> bool:
        """Swap the cleaner's `new` (".cleaned", complete and fsynced) in for the consecutive
        segments `old`, crash-safely, as Kafka's replaceSegments: rename it to ".swap" (the
        commit point: recovery completes the swap from here on), rename the old segments'
        files to ".deleted", give the new one its final names, then fsync the directory.
        Readers that picked up an old segment keep its descriptors (closed after
        FILE_DELETE_DELAY_S); the files themselves are unlinked at once. Returns False, with
        nothing changed, if the old segments are no longer all in the log (retention deleted
        some meanwhile) or the log is closed; the caller then deletes `new`."""
        hook = self.swap_hook or (lambda step: hold(f"swap_{step}"))
        with self._lock:
            segments = self._segments
            if self._closed or self.offline is not None or not old:
                return False
            try:
                i = next(n for n, seg in enumerate(segments) if seg is old[0])
            except StopIteration:
                return False
            if len(segments) - 1 < i + len(old) or any(a is not b for a, b in zip(segments[i:], old)):
                return False  # gone, changed, or reaching the active segment
            hook("cleaned")
            new.change_suffix(SWAP_SUFFIX)
            fsync_directory(self.directory)
            hook("swap")
            for seg in old:
                seg.change_suffix(DELETED_SUFFIX)
            hook("deleted")
            new.change_suffix("")
            fsync_directory(self.directory)
            hook("renamed")
            self._segments = segments[:i] + [new] + segments[i + len(old):]
            self._bases = [seg.base_offset for seg in self._segments]
            for seg in old:
                for path in seg.files:
                    path.unlink(missing_ok=True)
            now = time.monotonic()
            self._retired.extend((now, seg) for seg in old)
            self._close_retired(now - FILE_DELETE_DELAY_S)
        return True

    def _close_retired(self, before: float) -> None:
        keep = []
        for when, seg in self._retired:
            if when <= before:
                seg.close()
            else:
                keep.append((when, seg))
        self._retired = keep

    # -- lifecycle --------------------------------------------------------------------------

    def close(self, *, flush: bool = True) -> None:
        """Close the files; with `flush` (and the log still online) make everything durable first."""
        if self._closed:
            return
        if flush and self.offline is None:
            self.flush()
            with self._lock:
                for index in (self.active_segment.offset_index, self.active_segment.time_index):
                    os.fsync(index.fd)
        with self._lock:
            self._closed = True
            for seg in self._segments:
                seg.close()
            self._close_retired(float("inf"))

    def delete(self) -> None:
        self.close(flush=False)
        shutil.rmtree(self.directory, ignore_errors=True)

    def __repr__(self) -> str:
        return (
            f"Log({self.directory.name}, start={self.log_start_offset}, end={self.log_end_offset}, "
            f"hw={self.high_watermark}, segments={len(self._segments)})"
        )
