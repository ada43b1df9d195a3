"""Kafka's LocalLog: the segment files of one partition directory.

It owns the segment list (under a lock that flush() shares with the appending thread), rolls
and appends to the active segment, reads whole batches, makes appends durable (the recovery
point) and swaps the cleaner's segments in. Offsets, producers, the high watermark and the
log start offset are the UnifiedLog's business.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from bisect import bisect_right
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tidemark.hold import hold
from tidemark.records import BatchHeader, CorruptRecordError

from .config import LogConfig
from .errors import CorruptSegmentError, LogOfflineError
from .segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, LogSegment
from .txn_index import TXN_INDEX_SUFFIX

# Kafka's file suffixes for segments mid-operation (see LocalLog.replace_segments).
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"
TEMP_SUFFIXES = (DELETED_SUFFIX, CLEANED_SUFFIX, SWAP_SUFFIX)
# Kafka's file.delete.delay.ms: how long a replaced segment's descriptors stay open for readers
# that picked it up just before the swap.
FILE_DELETE_DELAY_S = 60.0


def _base_offset(seg: LogSegment) -> int:
    return seg.base_offset


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalLog:
    def __init__(self, directory: Path, config: LogConfig):
        self.offline: BaseException | None = None  # the write or fsync failure that stopped this log
        self.directory = directory
        self.config = config
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []  # segment base offsets, for bisect
        self._recovery_point = 0
        # Guards what flush() snapshots from another thread: the segment list, sizes, offsets.
        self.lock = threading.Lock()
        self.dir_dirty = False  # segment files created since the last directory fsync
        self._closed = False
        # Called with the new segment's base offset when the log rolls (UnifiedLog snapshots
        # producer state there), under the lock.
        self.on_roll: Callable[[int], None] | None = None
        # Called by flush() (outside the lock, before the segments are fsynced) to fsync the
        # files the recovery point may not get ahead of (UnifiedLog: the epochs, the snapshots).
        self.before_sync: Callable[[], None] | None = None
        self._retired: list[tuple[float, LogSegment]] = []  # (when, segment) replaced by the cleaner
        # Bumped by each truncation: a flush that began before one must not move the recovery
        # point (or a segment's flushed size) to what it synced of the removed tail.
        self._truncations = 0
        self._synced_truncations = 0  # the truncations sync_truncation made durable
        # Test hook: called with each step name of replace_segments (raise to simulate a crash).
        self.swap_hook: Any = None

    # -- segments ---------------------------------------------------------------------------

    def new_segment(self, base_offset: int, *, suffix: str = "") -> LogSegment:
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
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            (self.directory / (f"{base_offset:020d}" + suffix + CLEANED_SUFFIX)).unlink(missing_ok=True)
        return self.new_segment(base_offset, suffix=CLEANED_SUFFIX)

    def add_segment(self, seg: LogSegment) -> None:
        self._segments.append(seg)
        self._bases.append(seg.base_offset)

    def clear_segments(self) -> None:
        """Delete every segment's files (loading found nothing worth keeping)."""
        for seg in self._segments:
            seg.delete()
        self._segments.clear()
        self._bases.clear()

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

    @recovery_point.setter
    def recovery_point(self, offset: int) -> None:
        self._recovery_point = offset

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    # -- append -----------------------------------------------------------------------------

    def append(self, buf: bytearray, assigned: list[tuple[int, BatchHeader]], last_offset: int, now_ms: int) -> None:
        """Write batches whose offsets are assigned (from log_end_offset on), rolling first if
        the active segment is full or old."""
        with self.lock:
            seg = self.active_segment
            if seg.should_roll(len(buf), last_offset, now_ms, self.config.segment_bytes, self.config.segment_ms):
                seg = self._roll(assigned[0][1].base_offset)
            try:
                seg.append(buf, assigned, now_ms)
            except OSError as exc:
                self.offline = exc
                raise LogOfflineError(f"append to {self.directory.name} failed: {exc}") from exc

    def _roll(self, base_offset: int) -> LogSegment:
        """Start a new active segment (caller holds the lock)."""
        self.active_segment.on_roll()
        if self.on_roll is not None:
            self.on_roll(base_offset)
        seg = self.new_segment(base_offset)
        self.add_segment(seg)
        self.dir_dirty = True
        return seg

    # -- read -------------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, bound: int, *, min_one_batch: bool = True) -> bytes:
        """Whole batches from the one containing offset, none reaching bound, at most max_bytes
        unless min_one_batch and the first batch alone is bigger."""
        if offset >= bound:
            return b""
        try:
            return self._read(offset, max_bytes, bound, min_one_batch)
        except CorruptRecordError as exc:
            raise self.corrupt(exc) from exc

    def corrupt(self, exc: CorruptRecordError) -> CorruptSegmentError:
        """Take the log offline after finding a flushed segment unreadable (see CorruptSegmentError)."""
        error = CorruptSegmentError(f"{self.directory.name}/{exc}")
        if self.offline is None:
            self.offline = error
        return error

    def _read(self, offset: int, max_bytes: int, bound: int, min_one_batch: bool) -> bytes:
        segments = self._segments  # one snapshot: the cleaner swaps in a new list, never edits it
        i = max(0, bisect_right(segments, offset, key=_base_offset) - 1)
        for seg in segments[i:]:
            start = stop = -1
            for pos, last_offset, size in seg.batches_from(offset):
                if start < 0:
                    start = stop = pos
                if last_offset >= bound:
                    break
                if pos + size - start > max_bytes and not (min_one_batch and stop == start):
                    break
                stop = pos + size
            if start < 0:
                continue  # offset lies past this segment's batches (a gap): try the next one
            return seg.read(start, stop - start) if stop > start else b""
        return b""

    # -- durability -------------------------------------------------------------------------

    def flush(self) -> int:
        """fsync everything appended so far and advance the recovery point to it.

        Safe to call from a worker thread while the event loop appends: the files and end
        offset are snapshotted under the lock, then synced outside it on duplicated
        descriptors, so a segment deleted meanwhile cannot break the sync."""
        with self.lock:
            if self._closed:
                return self._recovery_point
            if self.offline is not None:
                raise LogOfflineError(f"{self.directory.name} is offline after: {self.offline!r}")
            end = self.log_end_offset
            truncations = self._truncations
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
            dir_fd = os.open(self.directory, os.O_RDONLY) if self.dir_dirty else -1
            self.dir_dirty = False
        try:
            if self.before_sync is not None:
                self.before_sync()
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
        with self.lock:
            if truncations != self._truncations:
                return self._recovery_point  # truncate_to synced what it kept itself
            for index, _ in index_fds:
                index.dirty = False
            for seg, size, _ in targets:
                seg.flushed_size = max(seg.flushed_size, size)
            self._recovery_point = max(self._recovery_point, end)
            return self._recovery_point

    # -- truncation (a follower dropping history its leader does not have) --------------------

    def truncate_to(self, offset: int) -> None:
        """Drop the batch holding `offset` and everything after it (segments with a base offset
        above it, then the tail of the one holding it), and lower the recovery point to the new
        end. Nothing is fsynced here, on the event loop: the cut is durable once
        sync_truncation() ran, in the disk thread, and the caller appends nothing before. A
        crash midway leaves a prefix of the old log: the newest segments go first.

        A cut segment that was not the active one is reopened as a new LogSegment, so a
        cleaner pass that picked up the old one can never swap its old content back in (the
        swap requires the very segments it cleaned). The old one's descriptors close at once:
        the cleaner reads through its own duplicates, and reads on the event loop never span
        a truncation."""
        with self.lock:
            if self._closed:
                raise LogOfflineError(f"{self.directory.name} is closed")
            keep = [seg for seg in self._segments if seg.base_offset <= offset]
            if not keep:
                raise ValueError(f"offset {offset} is below the first segment of {self.directory.name}")
            doomed = self._segments[len(keep):]
            self._truncations += 1
            for seg in reversed(doomed):
                seg.delete()
            cut = keep[-1]
            cut.truncate_to(offset)
            if doomed:
                fresh = self.new_segment(cut.base_offset)
                if not fresh.open_from_indexes(active=True):
                    fresh.recover(validate=False, active=True, truncate=False)
                fresh.flushed_size = -1  # its new length must reach the disk
                keep[-1] = fresh
                cut.close()
            self._segments = keep
            self._bases = [seg.base_offset for seg in keep]
            self._recovery_point = min(self._recovery_point, self.log_end_offset)
            self.dir_dirty = True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and start empty at `offset`; durable once sync_truncation() ran."""
        with self.lock:
            if self._closed:
                raise LogOfflineError(f"{self.directory.name} is closed")
            self._truncations += 1
            for seg in reversed(self._segments):
                seg.delete()
            self._segments, self._bases = [], []
            self.add_segment(self.new_segment(offset))
            self._recovery_point = offset
            self.dir_dirty = True

    def sync_truncation(self) -> None:
        """fsync what the truncations so far changed (the cut segments' new lengths, the
        directory without the deleted segments), from the disk thread. The recovery point stays
        where the truncation lowered it: the next flush moves it."""
        with self.lock:
            if self._closed or self._synced_truncations == self._truncations:
                return
            if self.offline is not None:
                raise LogOfflineError(f"{self.directory.name} is offline after: {self.offline!r}")
            truncations = self._truncations
            targets = [(seg, seg.size, os.dup(seg.fd)) for seg in self._segments if seg.flushed_size < 0]
            dir_fd = os.open(self.directory, os.O_RDONLY)
            self.dir_dirty = False
        try:
            for _, _, fd in targets:
                os.fsync(fd)
            os.fsync(dir_fd)
        except OSError as exc:
            self.offline = exc
            raise LogOfflineError(f"fsync of {self.directory.name} after a truncation failed: {exc}") from exc
        finally:
            for fd in [fd for _, _, fd in targets] + [dir_fd]:
                os.close(fd)
        with self.lock:
            self._synced_truncations = max(self._synced_truncations, truncations)
            if truncations == self._truncations:
                for seg, size, _ in targets:
                    seg.flushed_size = max(seg.flushed_size, size)

    # -- deletion and replacement -----------------------------------------------------------

    def delete_oldest_segments(self, doomed: list[LogSegment]) -> bool:
        """Drop `doomed`, the oldest segments (never the active one), and delete their files.
        False, with nothing changed, if they are no longer the oldest (the cleaner swapped
        segments meanwhile)."""
        with self.lock:
            if len(doomed) >= len(self._segments) or any(a is not b for a, b in zip(self._segments, doomed)):
                return False
            self._segments = self._segments[len(doomed):]
            self._bases = self._bases[len(doomed):]
            self._recovery_point = max(self._recovery_point, self._segments[0].base_offset)
            for seg in doomed:
                seg.delete()
            self.dir_dirty = True
        return True

    def cleaning_snapshot(self) -> tuple[list[tuple[LogSegment, int]], int]:
        """For the cleaner: the non-active segments, each with a duplicated descriptor (valid
        whatever happens to the segment meanwhile; the caller closes them), and the active
        segment's base offset, taken together under the lock."""
        with self.lock:
            if self._closed:
                raise LogOfflineError(f"{self.directory.name} is closed")
            segments = self._segments
            return [(seg, os.dup(seg.fd)) for seg in segments[:-1]], segments[-1].base_offset

    @property
    def truncations(self) -> int:
        """How many truncations this log has had: a cleaning whose key map was built before
        one must not swap anything in."""
        return self._truncations

    def replace_segments(self, old: list[LogSegment], new: LogSegment, *,
                         unchanged: Callable[[], bool] | None = None) -> bool:
        """Swap the cleaner's `new` (".cleaned", complete and fsynced) in for the consecutive
        segments `old`, crash-safely, as Kafka's replaceSegments: rename it to ".swap" (the
        commit point: recovery completes the swap from here on), rename the old segments'
        files to ".deleted", give the new one its final names, then fsync the directory.
        Readers that picked up an old segment keep its descriptors (closed after
        FILE_DELETE_DELAY_S); the files themselves are unlinked at once. Returns False, with
        nothing changed, if the old segments are no longer all in the log (retention deleted
        some meanwhile), the log is closed, or `unchanged()`, asked under the lock, is False;
        the caller then deletes `new`."""
        hook = self.swap_hook or (lambda step: hold(f"swap_{step}"))  # hold points for fault tests
        with self.lock:
            segments = self._segments
            if self._closed or self.offline is not None or not old:
                return False
            try:
                i = next(n for n, seg in enumerate(segments) if seg is old[0])
            except StopIteration:
                return False
            if len(segments) - 1 < i + len(old) or any(a is not b for a, b in zip(segments[i:], old)):
                return False  # gone, changed, or reaching the active segment
            if unchanged is not None and not unchanged():
                return False
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

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self, *, flush: bool = True) -> None:
        """Close the files; with `flush` (and the log still online) make everything durable first."""
        if self._closed:
            return
        if flush and self.offline is None:
            self.flush()
            with self.lock:
                for index in (self.active_segment.offset_index, self.active_segment.time_index):
                    os.fsync(index.fd)
        with self.lock:
            self._closed = True
            for seg in self._segments:
                seg.close()
            self._close_retired(float("inf"))

    def delete(self) -> None:
        self.close(flush=False)
        shutil.rmtree(self.directory, ignore_errors=True)
