"""One log segment: a .log file of record batches plus its .index and .timeindex.

Like Kafka's LogSegment, a segment is named by its base offset (zero-padded to 20 digits)
and gets a sparse index entry every index_interval_bytes of batches appended.
"""

from __future__ import annotations

import os
from bisect import bisect_left
from collections.abc import Iterator
from pathlib import Path

from tidemark.records import BATCH_OVERHEAD, BatchHeader, CorruptRecordError, read_header, validate_batch
from tidemark.records.batch import LOG_OVERHEAD, MAGIC, MIN_BATCH_LENGTH

from .txn_index import TXN_INDEX_SUFFIX, TransactionIndex
from .index import OffsetIndex, TimeIndex

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
_SCAN_CHUNK = 1 << 20  # reads when validating CRCs
_READ_AHEAD = 64 * 1024  # reads when walking headers
# Batches appended last, remembered (position, last offset, size) so that a read at the tail,
# where followers and caught-up consumers read, finds its batches without reading headers back.
_RECENT_BATCHES = 16


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


def pread_exact(fd: int, n: int, position: int) -> bytes:
    data = os.pread(fd, n, position)
    while len(data) < n:  # short reads are legal; loop until n bytes or EOF
        more = os.pread(fd, n - len(data), position + len(data))
        if not more:
            break
        data += more
    return data


class TornTailError(CorruptRecordError):
    """The file ends inside a batch: a write that did not finish (nothing whole follows it)."""


class LogSegment:
    def __init__(
        self, directory: Path, base_offset: int, *, index_interval_bytes: int, index_max_bytes: int, suffix: str = ""
    ):
        """suffix names the files of a segment still being built or swapped in by the cleaner
        (".cleaned", ".swap"), as Kafka does: "<base>.log.cleaned" and so on."""
        self.base_offset = base_offset
        self.suffix = suffix
        name = segment_name(base_offset)
        self.log_path = directory / (name + LOG_SUFFIX + suffix)
        self.fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self._closed_mtime_ms = 0
        self.size = os.fstat(self.fd).st_size
        self.flushed_size = self.size
        self.offset_index = OffsetIndex(directory / (name + INDEX_SUFFIX + suffix), base_offset, index_max_bytes)
        self.time_index = TimeIndex(directory / (name + TIME_INDEX_SUFFIX + suffix), base_offset, index_max_bytes)
        self.txn_index = TransactionIndex(directory / (name + TXN_INDEX_SUFFIX + suffix))  # aborted transactions
        self.index_interval_bytes = index_interval_bytes
        self.next_offset = base_offset  # one past the last offset in the segment
        self.max_timestamp = -1  # largest batch max_timestamp (Kafka's largestTimestamp)
        self.offset_of_max_timestamp = base_offset
        self.rolling_time_ms: int | None = None  # when the first batch arrived, for log.roll.ms
        self.bytes_since_last_index_entry = 0
        # The last batches appended through this object, contiguous to the end of the file.
        self._recent: list[tuple[int, int, int]] = []

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, next_offset={self.next_offset}, size={self.size})"

    # -- loading ----------------------------------------------------------------------------

    def recover(self, *, validate: bool, active: bool, truncate: bool = True) -> bool:
        """Scan every batch and rebuild the indexes if they are missing or disagree with the
        log. Returns True if bytes were truncated.

        validate checks each batch's CRC (for segments not known to be flushed); batches must
        also have increasing, non-overlapping offsets starting at or after the base offset.
        With truncate the file is cut after the last good batch (a torn tail); without, a bad
        batch raises CorruptRecordError naming the file and nothing is changed.
        """
        self._reset_state()
        offsets: list[tuple[int, int]] = []
        times: list[tuple[int, int]] = []

        def add_time(ts: int, offset: int) -> None:
            if ts > (times[-1][0] if times else -1):
                times.append((ts, offset - self.base_offset))

        valid_end = 0
        try:
            for pos, h in self.scan(validate=validate):
                if valid_end == 0:
                    self.rolling_time_ms = h.max_timestamp
                self._track(pos, h, lambda o, p: offsets.append((o - self.base_offset, p)), add_time)
                valid_end = pos + h.size
        except CorruptRecordError:
            if not truncate:
                raise
        truncated = valid_end < self.size
        if truncated:
            os.ftruncate(self.fd, valid_end)
            self.size = valid_end
            self.flushed_size = 0  # the truncation itself must reach the disk
        self.txn_index.truncate_to(self.next_offset)  # markers cut off with the tail
        if not active and self.max_timestamp >= 0:
            add_time(self.max_timestamp, self.offset_of_max_timestamp)  # see on_roll
        if self.offset_index.read_entries() != offsets or self.time_index.read_entries() != times:
            self.offset_index.rewrite(offsets)
            self.time_index.rewrite(times)
        else:
            self.offset_index._load(offsets)
            self.time_index._load(times)
        return truncated

    def open_from_indexes(self, *, active: bool) -> bool:
        """Load a segment known to be whole (flushed below the recovery point, or after a clean
        shutdown) from its indexes, as Kafka does: only the batch headers after the last
        offset index entry are read. Returns False, with nothing loaded, if the indexes fail
        the sanity check (torn, out of order, pointing past the file, or missing an entry the
        tail shows they should have): the caller then rebuilds them with recover()."""
        offsets = self.offset_index.read_entries()
        times = self.time_index.read_entries()
        if offsets is None or times is None or not _increasing(offsets, self.size) or not _increasing(times, None):
            return False
        self._reset_state()
        if times:
            self.max_timestamp, self.offset_of_max_timestamp = times[-1][0], self.base_offset + times[-1][1]
        start = offsets[-1][1] if offsets else 0
        missing: list[int] = []
        for pos, h in self.scan(start, read_ahead=BATCH_OVERHEAD):  # the indexed batch and those after it
            if pos == start and offsets and h.last_offset != self.base_offset + offsets[-1][0]:
                return False
            self._track(pos, h, lambda o, p: missing.append(o), lambda ts, o: None)
        if missing:
            return False
        if active and self.size:
            self.rolling_time_ms = read_header(pread_exact(self.fd, BATCH_OVERHEAD, 0)).max_timestamp
        self.offset_index._load(offsets)
        self.time_index._load(times)
        return True

    def _reset_state(self) -> None:
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = self.base_offset
        self.bytes_since_last_index_entry = 0

    def _track(self, pos: int, h: BatchHeader, add_offset_entry, add_time_entry) -> None:
        """Account for one batch at pos: the same decisions whether appending or loading."""
        last = h.base_offset + h.last_offset_delta
        if h.max_timestamp > self.max_timestamp:
            self.max_timestamp = h.max_timestamp
            self.offset_of_max_timestamp = last
        if self.bytes_since_last_index_entry > self.index_interval_bytes:
            add_offset_entry(last, pos)
            add_time_entry(self.max_timestamp, self.offset_of_max_timestamp)
            self.bytes_since_last_index_entry = 0
        self.bytes_since_last_index_entry += h.batch_length + LOG_OVERHEAD
        self.next_offset = last + 1

    def scan(self, position: int = 0, *, validate: bool = False, read_ahead: int = _READ_AHEAD,
             fd: int | None = None, with_bytes: bool = False, crc_checked: bool = False) -> Iterator[tuple]:
        """The one walk over this segment file's batches: (position, header) of each batch
        from position to the end. Only headers are read (read_ahead bytes at a time) unless
        validate, which reads each whole batch (_SCAN_CHUNK bytes at a time) to check its CRC.
        with_bytes (validate implied) yields (position, header, the batch's bytes) instead.
        fd reads through another descriptor of the same file (the cleaner's, which outlives a
        concurrent close of the segment). A batch that is not whole and sane raises
        CorruptRecordError naming the file and position (TornTailError where the file ends
        inside one); so does one whose offsets do not grow (the walk would otherwise serve
        them out of order). crc_checked (the cleaner's second walk of a file its first walk
        validated, through the same descriptor) skips each batch's CRC and record-count check,
        not the header checks."""
        fd = self.fd if fd is None else fd
        validate = validate or with_bytes
        if validate:
            read_ahead = max(read_ahead, _SCAN_CHUNK)
        end = self.size
        pos = position
        chunk = b""
        chunk_start = 0
        next_offset = -1
        while pos < end:
            if end - pos < BATCH_OVERHEAD:
                raise TornTailError(f"{self.log_path.name}: partial batch header at {pos}")
            if pos + BATCH_OVERHEAD > chunk_start + len(chunk):
                chunk_start, chunk = pos, pread_exact(fd, min(max(read_ahead, BATCH_OVERHEAD), end - pos), pos)
            rel = pos - chunk_start
            h = read_header(chunk, rel)
            if h.batch_length >= MIN_BATCH_LENGTH and pos + h.size > end:
                raise TornTailError(f"{self.log_path.name}: partial batch at {pos}")
            if h.magic != MAGIC or h.batch_length < MIN_BATCH_LENGTH:
                raise CorruptRecordError(f"{self.log_path.name}: no whole batch at {pos}")
            if h.base_offset < next_offset or h.base_offset < self.base_offset or h.last_offset_delta < 0:
                raise CorruptRecordError(f"{self.log_path.name}: batch at {pos} has offset {h.base_offset}")
            if validate:
                if rel + h.size > len(chunk):
                    chunk_start, chunk, rel = pos, pread_exact(fd, min(max(read_ahead, h.size), end - pos), pos), 0
                if not crc_checked:
                    try:
                        validate_batch(chunk, rel, rel + h.size, origin=chunk_start)
                    except CorruptRecordError as exc:
                        raise CorruptRecordError(f"{self.log_path.name}: {exc}") from None
                if with_bytes:
                    yield pos, h, chunk[rel : rel + h.size]
                    next_offset = h.next_offset
                    pos += h.size
                    continue
            yield pos, h
            next_offset = h.next_offset
            pos += h.size

    # -- appending --------------------------------------------------------------------------

    def append(self, data: bytes | bytearray, headers: list[tuple[int, BatchHeader]], now_ms: int) -> None:
        """Write batches (offsets already assigned) and index them; headers' positions are
        relative to data."""
        if self.size == 0:
            self.rolling_time_ms = now_ms
        try:
            written = os.write(self.fd, data)
            if written < len(data):  # a short write: the rest from a view, no copies
                view = memoryview(data)
                while written < len(data):
                    written += os.write(self.fd, view[written:])
        except OSError:
            # Never leave part of a batch behind: it would sit where the next batch's index
            # entry points. (If even this fails, the log is offline and recovery truncates.)
            os.ftruncate(self.fd, self.size)
            raise
        recent = self._recent
        for rel, h in headers:
            self._track(self.size + rel, h, self.offset_index.append, self.time_index.maybe_append)
            recent.append((self.size + rel, h.base_offset + h.last_offset_delta, h.size))
        if len(recent) > 2 * _RECENT_BATCHES:
            self._recent = recent[-_RECENT_BATCHES:]  # a new list: a reader's snapshot stays whole
        self.size += len(data)

    def on_roll(self) -> None:
        """Kafka adds a last time index entry when a segment stops being active."""
        self._recent = []  # reads move on to the new active segment
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)

    def should_roll(self, batch_bytes: int, last_offset: int, now_ms: int, segment_bytes: int, segment_ms: int) -> bool:
        if self.size == 0:
            return False
        return (
            self.size + batch_bytes > segment_bytes
            or (self.rolling_time_ms is not None and now_ms - self.rolling_time_ms > segment_ms)
            or self.offset_index.is_full
            or self.time_index.is_full
            or last_offset - self.base_offset > 0x7FFFFFFF  # relative offsets are int32
        )

    def truncate_to(self, offset: int) -> int:
        """Cut the batch holding `offset` and every batch after it, with their index entries
        (Kafka's LogSegment.truncateTo). Returns the bytes removed. The cut is not fsynced."""
        found = self.find(offset)
        if found is None:
            return 0
        position, h = found
        removed = self.size - position
        self._recent = []
        os.ftruncate(self.fd, position)
        self.size = position
        self.flushed_size = -1  # the new length must reach the disk
        self.offset_index.rewrite([(rel, pos) for rel, pos in self.offset_index.entries() if pos < position])
        self.time_index.rewrite([(ts, rel) for ts, rel in self.time_index.entries()
                                 if self.base_offset + rel < h.base_offset])
        self.txn_index.truncate_to(h.base_offset)
        if not self.open_from_indexes(active=True):
            self.recover(validate=False, active=True, truncate=False)
        if self.size == 0:
            self.rolling_time_ms = None
        return removed

    # -- reading ----------------------------------------------------------------------------

    def read(self, position: int, size: int) -> bytes:
        return pread_exact(self.fd, size, position)

    def batches_from(self, offset: int) -> Iterator[tuple[int, int, int]]:
        """(position, last offset, size) of each batch from the first whose last offset >= offset
        to the end of the segment: from memory when offset is among the last batches appended,
        otherwise by reading headers from the sparse index's entry on."""
        recent = self._recent
        if recent and offset >= recent[0][1]:
            yield from recent[bisect_left(recent, offset, key=_last_offset):]
            return
        _, start = self.offset_index.lookup(offset)
        for pos, h in self.scan(start):  # one walk: offsets only grow, so skip until the first
            last_offset = h.base_offset + h.last_offset_delta
            if last_offset >= offset:
                yield pos, last_offset, h.size

    def find(self, offset: int) -> tuple[int, BatchHeader] | None:
        """The first batch whose last offset >= offset, via the sparse index."""
        _, start = self.offset_index.lookup(offset)
        for pos, h in self.scan(start):
            if h.base_offset + h.last_offset_delta >= offset:
                return pos, h
        return None

    # -- lifecycle --------------------------------------------------------------------------

    @property
    def files(self) -> list[Path]:
        return [self.log_path, self.offset_index.path, self.time_index.path, self.txn_index.path]

    @property
    def last_modified_ms(self) -> int:
        """The .log file's modification time (Kafka's LogSegment.lastModified); a closed
        segment's (one a truncation removed while the cleaner's thread still looks at it) is
        the time it had when closed."""
        fd = self.fd
        if fd >= 0:
            try:
                return int(os.fstat(fd).st_mtime * 1000)
            except OSError:
                pass  # closed meanwhile
        return self._closed_mtime_ms

    def change_suffix(self, suffix: str) -> None:
        """Rename the segment's files to end in `suffix` ("" for the final names): the indexes
        first, the .log last, so a "<base>.log.swap" on disk implies its indexes were renamed
        too (or are rebuilt from it). Open descriptors keep working across renames."""
        for holder in (self.offset_index, self.time_index):
            new = holder.path.with_name(holder.path.name[: len(holder.path.name) - len(self.suffix)] + suffix)
            os.replace(holder.path, new)
            holder.path = new
        txn = self.txn_index.path
        self.txn_index.rename(txn.with_name(txn.name[: len(txn.name) - len(self.suffix)] + suffix))
        new = self.log_path.with_name(self.log_path.name[: len(self.log_path.name) - len(self.suffix)] + suffix)
        os.replace(self.log_path, new)
        self.log_path = new
        self.suffix = suffix

    def fsync(self) -> None:
        """fsync the .log and both indexes."""
        for fd in (self.fd, self.offset_index.fd, self.time_index.fd):
            os.fsync(fd)
        self.txn_index.sync()
        self.flushed_size = self.size
        self.offset_index.dirty = self.time_index.dirty = False

    def close(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            try:
                self._closed_mtime_ms = int(os.fstat(fd).st_mtime * 1000)
            finally:
                os.close(fd)
        self.offset_index.close()
        self.time_index.close()

    def delete(self) -> None:
        self.close()
        for path in self.files:
            path.unlink(missing_ok=True)


def _increasing(entries: list[tuple[int, int]], size: int | None) -> bool:
    """Index entries in strictly increasing order, relative offsets >= 0, positions (offset
    index: the second field) within the file of `size` bytes."""
    prev = (-1, -1)
    for entry in entries:
        if entry[0] <= prev[0] or entry[1] < 0 or (size is not None and (entry[1] <= prev[1] or entry[1] >= size)):
            return False
        prev = entry
    return True


def _last_offset(batch: tuple[int, int, int]) -> int:
    return batch[1]
