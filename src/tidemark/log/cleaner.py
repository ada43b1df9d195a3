"""Log compaction after Kafka's LogCleaner: the Cleaner (one cleaning of one log), the
LogCleanerManager (which log is dirtiest, the cleaner-offset-checkpoint file) and an I/O
Throttler.

A compacted log is split at the first dirty offset (the checkpoint) into a clean head and a
dirty tail; the tail ends at the first uncleanable offset: the active segment's base offset,
or earlier where a segment is still within min.compaction.lag.ms or reaches past the last
stable offset (the high watermark, or an undecided transaction's first offset: its records are
never cleaned). A cleaning builds a key -> last offset map over the dirty part, then recopies every
segment below that end, in groups of consecutive segments that fit into one segment, keeping a
record only if no later offset has its key and dropping tombstones whose segment was last
modified more than delete.retention.ms ago. Each group's ".cleaned" segment is swapped in with
LocalLog.replace_segments. The map pass reads records without per-record objects
(records.map_key_offsets); the copy pass keeps or drops a batch the map read without reading its
records again when all or none of them survive (_Survivors), and walks only the others.

Rewritten batches, as Kafka does for magic 2: each keeps its base offset, last offset delta,
base timestamp, partition leader epoch, attributes and producer id/epoch/base sequence, so
every kept record keeps its offset (and its bytes: offset and timestamp deltas are unchanged)
and the batch keeps its place in its producer's sequence; only the records count, the max
timestamp (recomputed over the kept records, CreateTime) and the CRC change. Compressed
batches are decompressed and recompressed with the same codec. A batch that loses every record
is dropped, except (kept as an empty batch, records count 0, no compression) the last batch of
each group, so a cleaned segment ends exactly where the segments it replaces ended (which is
what crash recovery relies on to know which segments a ".swap" replaces), and the latest batch
of each producer the log knows, so its sequence state survives a reload. Records without a key
are dropped (Kafka refuses them on compacted topics).

Transactions (see cleaned_txns): batches of aborted transactions (the .txnindex entries) are
dropped and never mapped; committed ones are compacted as any. A marker is kept as it is while
its transaction has a batch left, then until its segment passes the delete horizon, and always
as a producer's last marker (its epochs) or a group's last batch; each cleaned .txnindex keeps
the aborted transactions with data left.
"""

from __future__ import annotations

import ctypes
import math
import os
from bisect import bisect_left, bisect_right
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import structlog
from crc32c import crc32c

from tidemark.hold import hold
from tidemark.records import (
    BatchHeader,
    CorruptRecordError,
    iter_key_values,
    latest_record_ranges,
    map_key_offsets,
    read_header,
    records_section,
    walk_records,
)
from tidemark.records.batch import BATCH_OVERHEAD, LOG_OVERHEAD
from tidemark.records.compression import compress

from .checkpoint import TopicPartition, read_checkpoint, write_checkpoint
from .cleaned_txns import CleanedTransactions
from .local_log import CLEANED_SUFFIX
from .unified_log import UnifiedLog
from .segment import LogSegment
from .txn_index import AbortedTxn

CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
# log.cleaner.dedupe.buffer.size (128 MiB) at Kafka's 24 bytes per entry (MD5 + offset) and
# log.cleaner.io.buffer.load.factor 0.9: the keys one cleaning maps.
DEFAULT_MAX_MAP_ENTRIES = int(134217728 // 24 * 0.9)
_WRITE_CHUNK = 1 << 20
# A cleaned segment goes to the disk in steps of this many bytes as it is written, one step in
# flight at a time (Linux's sync_file_range), and its files' write-back is started together
# before the fsyncs that end it: the fsyncs then have little left to write and one journal
# commit covers all of them, so the cleaner never holds the journal (and every commit's fsync
# queued behind it) while a whole segment's data goes out.
WRITE_BACK_BYTES = 4 << 20
SYNC_FILE_RANGE_WAIT_BEFORE, SYNC_FILE_RANGE_WRITE, SYNC_FILE_RANGE_WAIT_AFTER = 1, 2, 4


def _libc_sync_file_range() -> Callable[[int, int, int, int], None] | None:
    """Linux's sync_file_range(2) (Python's os module has none), None elsewhere."""
    try:
        call = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    call.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
    call.restype = ctypes.c_int

    def sync_file_range(fd: int, offset: int, nbytes: int, flags: int) -> None:
        if call(fd, offset, nbytes, flags) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))

    return sync_file_range


_SYNC_RANGE = _libc_sync_file_range()
_INT32_MAX = 0x7FFFFFFF

_HEADER = struct.Struct(">qiibIhiqqqhii")
_CRC_AT = 17
_ATTRIBUTES_AT = 21
_COMPRESSION_MASK = 0x07
_TIMESTAMP_TYPE_BIT = 0x08

_logger = structlog.get_logger("tidemark.log.cleaner")


def _now_ms() -> int:
    return int(time.time() * 1000)


class ThrottlePeriod:
    """A Throttler's current period: when it began and the bytes reported since, and the lock
    over both. Throttlers sharing one period share one rate (cleaner_worker keeps one in
    shared memory for every worker process)."""

    def __init__(self, start: float):
        self.start = start
        self.observed = 0.0
        self.lock = threading.Lock()


class Throttler:
    """Kafka's Throttler for log.cleaner.io.max.bytes.per.second: callers report the bytes they
    read or wrote; once they run ahead of the rate, they sleep until they are back on it.
    Every cleaner shares one period (Kafka's cleaner threads share one Throttler): a cleaner
    that reports bytes while another sleeps off the period waits for the end of that sleep, as
    Kafka's threads wait for its lock. The sleep itself is outside the lock, so a worker process
    killed while throttled leaves no lock held."""

    def __init__(self, bytes_per_second: float = math.inf, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep, check_interval_s: float = 0.1,
                 period: ThrottlePeriod | None = None):
        self.rate = bytes_per_second
        self.clock, self.sleep = clock, sleep
        self.check_interval_s = check_interval_s
        self.period = period if period is not None else ThrottlePeriod(clock())
        self.throttled_s = 0.0

    def maybe_throttle(self, nbytes: int) -> None:
        rate = self.rate
        if rate == math.inf or rate <= 0:
            return
        period = self.period
        with period.lock:
            period.observed += nbytes
            now = self.clock()
            elapsed = now - period.start
            if elapsed < 0:  # another cleaner sleeps until the period starts: wait with it
                delay = -elapsed
            elif elapsed < self.check_interval_s:
                return
            else:
                delay = max(0.0, period.observed / rate - elapsed)
                period.start, period.observed = now + delay, 0.0
        if delay > 0:
            self.sleep(delay)
            self.throttled_s += delay


@dataclass
class CleanerStats:
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_written: int = 0
    map_records: int = 0
    map_bytes: int = 0
    segments_read: int = 0
    segments_written: int = 0
    start: float = field(default_factory=time.monotonic)
    end: float = 0.0
    cpu_s: float = 0.0  # CPU seconds of the cleaning's thread (the worker's process)

    @property
    def elapsed_s(self) -> float:
        return (self.end or time.monotonic()) - self.start


@dataclass
class LogToClean:
    """Kafka's LogToClean: a log's clean and dirty byte counts and cleanable range."""

    tp: TopicPartition
    log: UnifiedLog
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    dirty_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.dirty_bytes

    @property
    def dirty_ratio(self) -> float:
        return self.dirty_bytes / self.total_bytes if self.total_bytes else 0.0


def first_uncleanable_offset(segments: list[LogSegment], active_base: int, last_stable_offset: int,
                             min_compaction_lag_ms: int, now_ms: int) -> int:
    """The active segment's base offset, or the base of the first segment reaching past the
    last stable offset (the high watermark, or an undecided transaction's first offset) or
    holding a record newer than min.compaction.lag.ms."""
    for seg in segments:
        if seg.next_offset > last_stable_offset:
            return seg.base_offset
        if min_compaction_lag_ms > 0:
            newest = seg.max_timestamp if seg.max_timestamp >= 0 else seg.last_modified_ms
            if newest > now_ms - min_compaction_lag_ms:
                return seg.base_offset
    return active_base


def log_to_clean(tp: TopicPartition, log: UnifiedLog, checkpoint: int | None, now_ms: int) -> LogToClean:
    """Where the log's dirty part starts and ends, and how dirty it is. A checkpoint below the
    log start offset (retention moved on) or past the end (a recreated log) is reset to the
    log start offset, as Kafka does."""
    segments = log.segments
    first_dirty = checkpoint if checkpoint is not None else log.log_start_offset
    if first_dirty < log.log_start_offset or first_dirty > log.log_end_offset:
        first_dirty = log.log_start_offset
    end = first_uncleanable_offset(segments[:-1], segments[-1].base_offset, log.last_stable_offset,
                                   log.config.min_compaction_lag_ms, now_ms)
    end = max(end, first_dirty)
    clean = sum(s.size for s in segments if s.base_offset < first_dirty)
    dirty = sum(s.size for s in segments if s.next_offset > first_dirty and s.base_offset < end)
    return LogToClean(tp, log, first_dirty, end, clean, dirty)


def _in_batch(seg: LogSegment, position: int, exc: CorruptRecordError) -> CorruptRecordError:
    """A batch whose records do not parse (its CRC passed), named by segment file and position."""
    return CorruptRecordError(f"{seg.log_path.name}: batch at {position}: {exc}")


def _build(h: BatchHeader, attributes: int, count: int, max_ts: int, payload: bytes) -> bytes:
    out = bytearray(_HEADER.pack(h.base_offset, BATCH_OVERHEAD - LOG_OVERHEAD + len(payload), h.partition_leader_epoch,
                                 h.magic, 0, attributes, h.last_offset_delta, h.base_timestamp, max_ts,
                                 h.producer_id, h.producer_epoch, h.base_sequence, count))
    out += payload
    struct.pack_into(">I", out, _CRC_AT, crc32c(memoryview(out)[_ATTRIBUTES_AT:]))
    return bytes(out)


# -- the cleaner ------------------------------------------------------------------------------


class Cleaner:
    """Kafka's Cleaner: cleans one log at a time (call clean() from a worker thread)."""

    def __init__(self, *, throttler: Throttler | None = None, max_map_entries: int = DEFAULT_MAX_MAP_ENTRIES,
                 clock: Callable[[], int] = _now_ms):
        self.throttler = throttler or Throttler()
        self._last_yield = time.monotonic()
        self.max_map_entries = max_map_entries
        self.clock = clock
        self.abort = threading.Event()  # set to stop a cleaning between batches

    def clean(self, log: UnifiedLog, first_dirty_offset: int) -> tuple[int, CleanerStats]:
        """Clean the log from its start up to its first uncleanable offset (mapping keys from
        first_dirty_offset on). Returns the offset to checkpoint as the next first dirty
        offset, and the statistics of the run."""
        stats = CleanerStats()
        cpu = time.thread_time()
        now = self.clock()
        truncations = log.local.truncations  # read first: a truncation after it shows
        snapshot, active_base, hw = log.cleaning_snapshot()
        try:
            segments = [seg for seg, _ in snapshot]
            fds = {id(seg): fd for seg, fd in snapshot}
            end = first_uncleanable_offset(segments, active_base, hw, log.config.min_compaction_lag_ms, now)
            segments = [seg for seg in segments if seg.next_offset <= end and seg.next_offset > log.log_start_offset]
            first_dirty = max(first_dirty_offset, log.log_start_offset)
            if not segments or first_dirty >= end:
                return first_dirty_offset, stats
            aborted = aborted_transactions(log, segments, end)
            producers, active = known_producers(log)
            sizes = {id(seg): seg.size for seg in segments}

            def swap(old: list[LogSegment], cleaned: LogSegment) -> bool:
                # As the worker's swap_in, under the log's lock: no truncation since the offset
                # map was built (it may hold keys whose newer records a truncation removed;
                # Kafka aborts a cleaning before truncating), the segments still as read.
                return log.replace_segments(old, cleaned, unchanged=lambda: log.local.truncations == truncations and all(
                    seg.size == sizes.get(id(seg)) for seg in old))

            return self.clean_segments(segments, fds, first_dirty_offset, first_dirty, end, aborted, producers, active,
                                       log.config.delete_retention_ms, log.config.segment_bytes, now, stats,
                                       log.new_cleaned_segment, swap, log.directory.name)
        finally:
            for _, fd in snapshot:
                os.close(fd)
            stats.end = time.monotonic()
            stats.cpu_s = time.thread_time() - cpu

    def clean_segments(self, segments: list, fds: dict[int, int], first_dirty_offset: int, first_dirty: int, end: int,
                       aborted: list[AbortedTxn], producers: dict[int, int], active: set[int], delete_retention_ms: int,
                       segment_bytes: int, now: int, stats: CleanerStats, new_cleaned: Callable[[int], LogSegment],
                       swap: Callable[[list, LogSegment], bool], name: str) -> tuple[int, CleanerStats]:
        """The cleaning itself, over segments read through `fds` (LogSegments, or the worker's
        SegmentFiles): each group's cleaned segment comes from new_cleaned(base) and is handed
        to swap(group, cleaned), which swaps it in (or, in the worker, hands it to the broker)
        or returns False to stop the cleaning there."""
        txns = CleanedTransactions(aborted)
        offset_map, end, survivors = self._build_offset_map(segments, fds, first_dirty, end, txns, stats)
        segments = [seg for seg in segments if seg.next_offset <= end]
        last_markers = self._last_markers(segments, fds, active)
        horizon = now - delete_retention_ms
        for group in self._group_segments(segments, segment_bytes):
            if self.abort.is_set() or not self._clean_group(new_cleaned, swap, group, fds, offset_map, survivors,
                                                            producers, last_markers, txns, horizon, now, stats):
                _logger.info("cleaning_stopped", log=name, at=group[0].base_offset, aborted=self.abort.is_set())
                end = max(first_dirty_offset, group[0].base_offset)
                break
        return end, stats

    # The cleaner runs in a thread of the broker's process: every YIELD_EVERY_S of work it sleeps
    # YIELD_FOR_S so the event loop's thread takes the GIL at once instead of waiting out
    # CPython's switch interval on each of its hand-offs (commits stalled for seconds without it).
    YIELD_EVERY_S = 0.004
    YIELD_FOR_S = 0.001

    def _share_the_gil(self) -> None:
        if time.monotonic() - self._last_yield >= self.YIELD_EVERY_S:
            time.sleep(self.YIELD_FOR_S)
            self._last_yield = time.monotonic()

    def _last_markers(self, segments: list[LogSegment], fds: dict[int, int], active: set[int]) -> dict[int, int]:
        """producer id -> offset of its last marker in these segments, for the producers the
        log knows: that marker stays, so a reload that scans the log gets back the producer's
        epoch and coordinator epoch (a marker may bump the epoch past its last data batch's)."""
        last: dict[int, int] = {}
        for seg in segments:
            for _, h in seg.scan(fd=fds[id(seg)]):  # headers only
                self._share_the_gil()
                if h.is_control and h.producer_id in active:
                    last[h.producer_id] = h.base_offset
        return last

    def _build_offset_map(self, segments: list[LogSegment], fds: dict[int, int], first_dirty: int, end: int,
                          txns: CleanedTransactions, stats: CleanerStats) -> tuple[dict[bytes, int], int, _Survivors]:
        """key -> last offset over [first_dirty, end), whole segments at a time; if the map
        fills up, the cleaning ends after the segment that filled it. Records of aborted
        transactions are not mapped: they must not shadow an older committed value. Also
        returns what the copy pass needs to keep or drop a mapped batch without reading its
        records again (_Survivors)."""
        offset_map: dict[bytes, int] = {}
        tombstones: set[int] = set()
        for i, seg in enumerate(segments):
            if seg.next_offset <= first_dirty:
                continue
            # Every batch CRC-checked; one that fails, or bytes that are no batch, raise
            # CorruptRecordError: a cleaning never copies a corrupt batch nor ends a segment early.
            for pos, h, data in seg.scan(fd=fds[id(seg)], with_bytes=True):
                self.throttler.maybe_throttle(len(data))
                self._share_the_gil()
                stats.map_bytes += len(data)
                if h.is_control or h.base_offset + h.last_offset_delta < first_dirty or txns.is_aborted(h):
                    continue
                try:
                    if h.base_offset >= first_dirty:
                        keyed, tombstone = map_key_offsets(data, 0, offset_map)
                        stats.map_records += keyed
                        if tombstone:
                            tombstones.add(h.base_offset)
                        continue
                    for offset, key, _ in iter_key_values(data):  # a batch across first_dirty: rare
                        if key is not None and offset >= first_dirty:
                            offset_map[bytes(key)] = offset
                            stats.map_records += 1
                except CorruptRecordError as exc:
                    raise _in_batch(seg, pos, exc) from None
            if len(offset_map) >= self.max_map_entries and i + 1 < len(segments):
                end = segments[i + 1].base_offset
                break
        return offset_map, end, _Survivors(offset_map, first_dirty, tombstones)

    @staticmethod
    def _group_segments(segments: list[LogSegment], max_bytes: int) -> list[list[LogSegment]]:
        """Consecutive segments whose files add up to at most one segment (Kafka's
        groupSegmentsBySize), with relative offsets within int32."""
        groups: list[list[LogSegment]] = []
        for seg in segments:
            group = groups[-1] if groups else None
            if (group and sum(s.size for s in group) + seg.size <= max_bytes
                    and seg.next_offset - 1 - group[0].base_offset <= _INT32_MAX):
                group.append(seg)
            else:
                groups.append([seg])
        return groups

    def _clean_group(self, new_cleaned: Callable[[int], LogSegment], swap: Callable[[list, LogSegment], bool],
                     group: list[LogSegment], fds: dict[int, int], offset_map: dict[bytes, int],
                     survivors: _Survivors, producers: dict[int, int], last_markers: dict[int, int], txns: CleanedTransactions,
                     horizon: int, now: int, stats: CleanerStats) -> bool:
        cleaned = new_cleaned(group[0].base_offset)
        try:
            write_back = WriteBack(cleaned.fd)
            buf = bytearray()
            headers: list[tuple[int, BatchHeader]] = []
            last_modified = 0
            kept_aborted: list[AbortedTxn] = []
            for n, seg in enumerate(group):
                retain_deletes = seg.last_modified_ms > horizon
                last_modified = max(last_modified, seg.last_modified_ms)
                # Checked as above; the CRCs of a segment the offset map read (every one past
                # first_dirty: whole, through the same descriptor) were checked then.
                batches = list(seg.scan(fd=fds[id(seg)], with_bytes=True,
                                        crc_checked=seg.next_offset > survivors.first_dirty))
                for b, (pos, h, data) in enumerate(batches):
                    if self.abort.is_set():
                        raise _Aborted
                    stats.bytes_read += len(data)
                    last_in_group = n == len(group) - 1 and b == len(batches) - 1
                    if h.is_control:
                        has_data, txn = txns.on_marker(h)
                        if txn is not None:
                            kept_aborted.append(txn)
                        keep = (has_data or retain_deletes or last_in_group
                                or last_markers.get(h.producer_id) == h.base_offset)
                        out = data if keep else None
                        stats.records_read += h.records_count
                        stats.records_written += h.records_count if keep else 0
                    else:
                        must_keep = last_in_group or (
                            h.producer_id >= 0 and producers.get(h.producer_id) == h.base_offset + h.last_offset_delta)
                        try:
                            out = self._filter_batch(h, data, offset_map, retain_deletes, must_keep,
                                                     txns.on_batch(h), stats, survivors)
                        except CorruptRecordError as exc:
                            raise _in_batch(seg, pos, exc) from None
                    if out is not None:
                        headers.append((len(buf), read_header(out)))
                        buf += out
                    if len(buf) >= _WRITE_CHUNK:
                        self._write(cleaned, buf, headers, now, stats)
                        write_back.step(cleaned.size)
                        buf, headers = bytearray(), []
                    self.throttler.maybe_throttle(len(data) + (len(out) if out is not None else 0))
                    self._share_the_gil()
                stats.segments_read += 1
            if buf:
                self._write(cleaned, buf, headers, now, stats)
            for aborted in kept_aborted:  # those with data left stay flagged for read_committed readers
                cleaned.txn_index.append(aborted)
            cleaned.on_roll()
            sync_cleaned(cleaned)
            # Kafka keeps the replaced segments' last modified time: it is what tombstone
            # retention counts from.
            os.utime(cleaned.log_path, ns=(last_modified * 1_000_000, last_modified * 1_000_000))
            if not swap(group, cleaned):
                cleaned.delete()
                return False
            stats.segments_written += 1
            return True
        except _Aborted:
            cleaned.delete()
            return False
        except BaseException:
            discard_cleaned(cleaned)
            raise

    @staticmethod
    def _write(cleaned: LogSegment, buf: bytearray, headers: list[tuple[int, BatchHeader]], now: int,
               stats: CleanerStats) -> None:
        cleaned.append(buf, headers, now)
        stats.bytes_written += len(buf)
        hold("cleaner_write")

    @staticmethod
    def _filter_batch(h: BatchHeader, data: bytes, offset_map: dict[bytes, int], retain_deletes: bool,
                      must_keep: bool, aborted: bool, stats: CleanerStats,
                      survivors: _Survivors | None = None) -> bytes | None:
        """The data batch with only the records to keep: itself if all are kept, None if none
        (an aborted transaction's keeps none). A batch the offset map read whole is decided
        from `survivors` when it keeps all its records or none; only the others are walked."""
        if aborted:
            stats.records_read += h.records_count
            return _build(h, h.attributes & ~_COMPRESSION_MASK, 0, h.max_timestamp, b"") if must_keep else None
        if survivors is not None and h.base_offset >= survivors.first_dirty:  # a batch the map read whole
            kept_count = survivors.count(h, retain_deletes)
            if kept_count is not None:  # all or none: decided without reading a record
                return Cleaner._rebuilt(h, data, None, [], kept_count, None, must_keep, stats)
            _, section, first, last = records_section(data)
            ranges, kept, max_ts = latest_record_ranges(section, first, last, h.records_count, h.base_offset,
                                                        offset_map, retain_deletes)
            return Cleaner._rebuilt(h, data, section, ranges, kept, max_ts, must_keep, stats)
        _, section, first, last = records_section(data)
        base = h.base_offset
        ranges = []
        max_ts = None  # the largest kept timestamp delta (a record may be older than the batch's first)
        get = offset_map.get
        for (start, end, _, ts_delta, offset_delta, key_pos, key_len, _, value_len,
             _) in walk_records(section, h.records_count, first, last):
            if (key_len < 0 or get(section[key_pos:key_pos + key_len], -1) > base + offset_delta
                    or (value_len < 0 and not retain_deletes)):  # a null value is a tombstone
                continue
            ranges.append((start, end))
            if max_ts is None or ts_delta > max_ts:
                max_ts = ts_delta
        return Cleaner._rebuilt(h, data, section, ranges, len(ranges), max_ts, must_keep, stats)

    @staticmethod
    def _rebuilt(h: BatchHeader, data: bytes, section, ranges: list[tuple[int, int]], kept: int, max_ts: int | None,
                 must_keep: bool, stats: CleanerStats) -> bytes | None:
        """The batch rebuilt around the kept records (their byte ranges in `section`): itself if
        all are kept, None if none (or, must_keep, an empty batch)."""
        count = h.records_count
        stats.records_read += count
        stats.records_written += kept
        if kept == count:
            return data
        log_append = h.attributes & _TIMESTAMP_TYPE_BIT
        if not kept:
            if not must_keep:
                return None
            return _build(h, h.attributes & ~_COMPRESSION_MASK, 0, h.max_timestamp, b"")
        payload = b"".join(section[s:e] for s, e in ranges)
        codec = h.attributes & _COMPRESSION_MASK
        if codec:
            payload = compress(codec, bytes(payload))
        return _build(h, h.attributes, kept, h.max_timestamp if log_append else h.base_timestamp + max_ts,
                      bytes(payload))


class WriteBack:
    """A file's data sent to the disk in steps of WRITE_BACK_BYTES while it is written: each
    step starts once the one before it is on the disk, so at most one step is in flight and
    the writer goes at the disk's pace instead of piling up dirty pages for the fsync."""

    def __init__(self, fd: int):
        self.fd = fd
        self.started = 0  # bytes whose write-back was started
        self.in_flight: tuple[int, int] | None = None  # the last step: offset, length

    def step(self, size: int) -> None:
        if _SYNC_RANGE is None or size - self.started < WRITE_BACK_BYTES:
            return
        if self.in_flight is not None:
            _SYNC_RANGE(self.fd, *self.in_flight, SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE
                        | SYNC_FILE_RANGE_WAIT_AFTER)
        self.in_flight = (self.started, size - self.started)
        _SYNC_RANGE(self.fd, *self.in_flight, SYNC_FILE_RANGE_WRITE)
        self.started = size


def sync_cleaned(cleaned: LogSegment) -> None:
    """fsync a cleaned segment's files, their write-back started together first: ext4 then
    allocates all their blocks before the first fsync's journal commit, which covers the
    others' too (one commit per segment, not one per file)."""
    if _SYNC_RANGE is not None:
        for fd in (cleaned.fd, cleaned.offset_index.fd, cleaned.time_index.fd):
            _SYNC_RANGE(fd, 0, 0, SYNC_FILE_RANGE_WRITE)
    cleaned.fsync()


class _Aborted(Exception):
    pass


class _Survivors:
    """Which mapped records survive, for the copy pass: a record the offset map read (a data
    batch at or past first_dirty, not aborted) is kept exactly when the map holds its offset
    under its key, and a map holds one offset per key, so the offsets of a batch's survivors
    are the map's values within the batch's offset range. A batch whose records all survive
    (none of them a tombstone about to go) is kept whole, one with none dropped, neither read
    again."""

    def __init__(self, offset_map: dict[bytes, int], first_dirty: int, tombstones: set[int]):
        self.offsets = sorted(offset_map.values())
        self.first_dirty = first_dirty
        self.tombstones = tombstones  # base offsets of mapped batches with a keyed null value

    def count(self, h: BatchHeader, retain_deletes: bool) -> int | None:
        """How many records of the mapped data batch `h` survive, if all or none; None if some
        (or the batch was not mapped): its records must be walked."""
        if h.base_offset < self.first_dirty:
            return None
        offsets = self.offsets
        last = h.base_offset + h.last_offset_delta
        lo = bisect_left(offsets, h.base_offset)
        if lo == len(offsets) or offsets[lo] > last:
            return 0
        kept = bisect_right(offsets, last, lo) - lo
        if kept == h.records_count and (retain_deletes or h.base_offset not in self.tombstones):
            return kept
        return None


def discard_cleaned(cleaned: LogSegment) -> None:
    """A cleaning that failed: its `.cleaned` files deleted, or, once the swap began, only closed
    (the files are recovery's now)."""
    if cleaned.suffix == CLEANED_SUFFIX:
        cleaned.delete()
    else:
        cleaned.close()


def aborted_transactions(log: UnifiedLog, segments: list[LogSegment], end: int) -> list[AbortedTxn]:
    """The aborted transactions a cleaning of `segments` up to `end` must know. Every
    transaction below `end` is decided (end <= LSO); an aborted one's marker may lie past it
    (its entry is then in a later segment's .txnindex)."""
    aborted = dict.fromkeys(log.collect_aborted_transactions(log.log_start_offset, end))
    for seg in segments:
        aborted.update(dict.fromkeys(seg.txn_index.entries))
    return list(aborted)


def known_producers(log: UnifiedLog) -> tuple[dict[int, int], set[int]]:
    """The producers the log knows: producer id -> last offset of its latest batch (that batch
    stays, kept empty if need be, so its sequence state survives a reload), and every id."""
    active = dict(log.producer_state.producers)
    return {pid: entry.batches[-1].last_offset for pid, entry in active.items() if entry.batches}, set(active)


# -- choosing what to clean -------------------------------------------------------------------


class LogCleanerManager:
    """Kafka's LogCleanerManager: the first dirty offset of every compacted log, kept in the
    data directory's cleaner-offset-checkpoint file, the choice of the dirtiest log, and the
    logs a cleaning failed on (uncleanable: skipped until restart, so one bad batch does not
    stop the cleaning of every other log)."""

    def __init__(self, data_dir: Path, logs: Callable[[], dict[TopicPartition, UnifiedLog]]):
        self.path = Path(data_dir) / CLEANER_OFFSET_CHECKPOINT
        self.logs = logs
        try:
            self.checkpoints = read_checkpoint(self.path)
        except ValueError:
            _logger.warning("cleaner_checkpoint_unreadable", file=self.path.name)
            self.checkpoints = {}
        self.in_progress: set[TopicPartition] = set()
        # The UnifiedLog itself, so a partition deleted and created again is cleaned again.
        self.uncleanable: dict[TopicPartition, UnifiedLog] = {}

    def compacted_logs(self) -> dict[TopicPartition, UnifiedLog]:
        return {tp: log for tp, log in self.logs().items() if log.config.compact_enabled and log.offline is None}

    def dirtiness(self, now_ms: int) -> list[LogToClean]:
        return [log_to_clean(tp, log, self.checkpoints.get(tp), now_ms) for tp, log in self.compacted_logs().items()]

    def grab_filthiest_log(self, now_ms: int) -> LogToClean | None:
        """The dirtiest compacted log at or above its min.cleanable.dirty.ratio, if any."""
        best = None
        for candidate in self.dirtiness(now_ms):
            if candidate.tp in self.in_progress or candidate.dirty_bytes == 0 or self.is_uncleanable(candidate):
                continue
            if candidate.dirty_ratio < candidate.log.config.min_cleanable_dirty_ratio:
                continue
            if best is None or candidate.dirty_ratio > best.dirty_ratio:
                best = candidate
        if best is not None:
            self.in_progress.add(best.tp)
        return best

    def is_uncleanable(self, candidate: LogToClean) -> bool:
        return self.uncleanable.get(candidate.tp) is candidate.log

    def mark_uncleanable(self, tp: TopicPartition, log: UnifiedLog) -> None:
        self.uncleanable[tp] = log

    def uncleanable_count(self) -> int:
        live = self.logs()
        return sum(1 for tp, log in self.uncleanable.items() if live.get(tp) is log)

    def done_cleaning(self, tp: TopicPartition, end_offset: int | None) -> None:
        """Record the next first dirty offset (None: the cleaning failed) and write the
        checkpoint file, for the logs that still exist."""
        self.in_progress.discard(tp)
        if end_offset is not None:
            self.checkpoints[tp] = end_offset
        self.write()

    def write(self) -> None:
        live = self.logs()
        self.checkpoints = {tp: o for tp, o in self.checkpoints.items() if tp in live}
        write_checkpoint(self.path, self.checkpoints)
