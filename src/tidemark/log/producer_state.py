"""Idempotent producer state, Kafka's ProducerStateManager for non-transactional producers.

Per producer id: its epoch, the metadata of its last 5 batches (Kafka's NUM_BATCHES_TO_RETAIN,
matching max.in.flight.requests.per.connection <= 5), so a retried batch is recognised as a
duplicate and answered with its original offsets, and the timestamp of its last batch, so an
entry idle for producer.id.expiration.ms is dropped (remove_expired). The state is snapshotted
to "<offset>.snapshot" files (see producer_snapshot) at segment roll and clean shutdown, and a
restart loads the latest good snapshot and scans only the batches after it.

Only ids the broker issued may create state: check() refuses a producer id at or above the
end of the issued range (Kafka leaves this to the client; here it keeps a flood of fabricated
ids from filling memory).
"""

from __future__ import annotations

import threading
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import structlog

from tidemark.records import BATCH_OVERHEAD, BatchHeader

from .errors import (
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    OutOfOrderSequenceError,
    UnknownProducerIdError,
)
from .producer_snapshot import (
    CorruptSnapshotError,
    SnapshotEntry,
    list_snapshots,
    read_snapshot,
    snapshot_path,
    write_snapshot,
)

if TYPE_CHECKING:
    from .segment import LogSegment

NUM_BATCHES_TO_RETAIN = 5
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000  # Kafka's producer.id.expiration.ms
# Snapshots kept per partition: the newest may lie past what survives a crash (it is written at
# roll, before the new segment is flushed), so the one before it is kept as well.
SNAPSHOTS_TO_KEEP = 2
_INT32_MAX = 0x7FFFFFFF

_logger = structlog.get_logger("tidemark.log")


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int = -1  # the batch's max timestamp


class ProducerStateEntry:
    __slots__ = ("producer_id", "producer_epoch", "batches")

    def __init__(self, producer_id: int, producer_epoch: int):
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.batches: deque[BatchMetadata] = deque(maxlen=NUM_BATCHES_TO_RETAIN)

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    @property
    def last_timestamp(self) -> int:
        return self.batches[-1].timestamp if self.batches else -1

    def find_duplicate(self, first_seq: int, last_seq: int) -> BatchMetadata | None:
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None


def is_idempotent(h: BatchHeader) -> bool:
    return h.producer_id >= 0 and h.base_sequence >= 0


def _last_seq(h: BatchHeader) -> int:
    return (h.base_sequence + h.last_offset_delta) & _INT32_MAX


class ProducerStateManager:
    def __init__(self, directory: Path | None = None,
                 expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS) -> None:
        self.directory = directory  # where snapshots go; None: never snapshotted
        self.expiration_ms = expiration_ms
        self.producers: dict[int, ProducerStateEntry] = {}
        # Snapshots taken at rolls on the event loop, written by write_snapshots in the disk
        # thread: offset -> (entries, log start offset then). A truncation drops those past its
        # cut, and has the one being written deleted once written (_cancelled).
        self._pending: dict[int, tuple[list[SnapshotEntry], int]] = {}
        self._writing: tuple[int, bool] | None = None  # (offset, any producers) being written
        self._cancelled: set[int] = set()
        self._lock = threading.Lock()  # the three above, shared by the loop and the disk thread

    def check(self, batches: list[BatchHeader], producer_id_end: int | None = None) -> BatchMetadata | None:
        """Validate the idempotent batches of one append, in order, without changing state.

        Returns the cached metadata if a batch is a duplicate of one already appended
        (the whole append is then answered from it); raises on an epoch or sequence error, or
        for a producer without state whose id is not below `producer_id_end` (never issued).
        A producer without state (new, or expired) may start at any sequence, as in Kafka
        since KIP-360.
        """
        pending: dict[int, tuple[int, int]] = {}  # producer id -> (epoch, last seq) within this append
        for h in batches:
            if not is_idempotent(h):
                continue
            first, last = h.base_sequence, _last_seq(h)
            entry = self.producers.get(h.producer_id)
            if h.producer_id in pending:
                epoch, prev_last = pending[h.producer_id]
            elif entry is not None:
                epoch, prev_last = entry.producer_epoch, entry.last_seq
                if h.producer_epoch == epoch:
                    dup = entry.find_duplicate(first, last)
                    if dup is not None:
                        return dup
            else:
                if producer_id_end is not None and h.producer_id >= producer_id_end:
                    _refuse_unissued(h)
                pending[h.producer_id] = (h.producer_epoch, last)
                continue
            if h.producer_epoch < epoch:
                raise InvalidProducerEpochError(
                    f"producer {h.producer_id} epoch {h.producer_epoch} is older than {epoch}"
                )
            if h.producer_epoch > epoch:
                if first != 0:
                    raise OutOfOrderSequenceError(
                        f"producer {h.producer_id} new epoch {h.producer_epoch} starts at sequence {first}, not 0"
                    )
            elif prev_last >= 0 and first != (prev_last + 1) & _INT32_MAX:
                raise OutOfOrderSequenceError(
                    f"producer {h.producer_id} epoch {epoch}: sequence {first} after {prev_last}"
                )
            pending[h.producer_id] = (h.producer_epoch, last)
        return None

    def update(self, h: BatchHeader) -> None:
        """Record an appended batch (its header carries the assigned base offset)."""
        if not is_idempotent(h):
            return
        entry = self.producers.get(h.producer_id)
        if entry is None or entry.producer_epoch != h.producer_epoch:
            entry = self.producers[h.producer_id] = ProducerStateEntry(h.producer_id, h.producer_epoch)
        entry.batches.append(BatchMetadata(h.base_sequence, _last_seq(h), h.base_offset,
                                           h.base_offset + h.last_offset_delta, h.max_timestamp))

    def truncate_fully(self) -> None:
        """Forget every producer and delete every snapshot (the log starts over, empty)."""
        self.producers = {}
        self._cancel_snapshots_past(-1)
        if self.directory is not None:
            for path in list_snapshots(self.directory).values():
                path.unlink(missing_ok=True)

    # -- expiration -------------------------------------------------------------------------

    def remove_expired(self, now_ms: int) -> int:
        """Kafka's removeExpiredProducers: drop producers whose last batch's timestamp is
        producer.id.expiration.ms or more before now (none has an ongoing transaction here).
        Returns how many were dropped."""
        limit = now_ms - self.expiration_ms
        expired = [pid for pid, entry in self.producers.items() if entry.last_timestamp <= limit]
        for pid in expired:
            del self.producers[pid]
        return len(expired)

    # -- snapshots --------------------------------------------------------------------------

    def take_snapshot(self, offset: int, log_start_offset: int) -> None:
        """Write the state as of `offset` (the log end), fsynced, unless that snapshot exists,
        then delete all but the newest SNAPSHOTS_TO_KEEP and any below the log start offset
        (their segments are gone). At close, and from write_snapshots for the rolls'."""
        if self.directory is None:
            return
        self._write_snapshot(offset, self._snapshot_entries(), log_start_offset)

    def snapshot_at_roll(self, offset: int, log_start_offset: int) -> None:
        """The state as of `offset` (the new segment's base), taken now and written by
        write_snapshots, off the event loop: until then (and until fsynced) a crash loses it,
        and loading starts from an older one."""
        if self.directory is None:
            return
        with self._lock:
            self._pending[offset] = (self._snapshot_entries(), log_start_offset)

    def write_snapshots(self) -> None:
        """Write and fsync the snapshots taken at rolls, oldest first (in the disk thread, from
        the log's flush). One a truncation cut while it was written is deleted afterwards."""
        while True:
            with self._lock:
                if not self._pending:
                    return
                offset = min(self._pending)
                entries, log_start_offset = self._pending.pop(offset)
                self._writing = (offset, bool(entries))
            try:
                self._write_snapshot(offset, entries, log_start_offset)
            finally:
                with self._lock:
                    self._writing = None
                    if offset in self._cancelled:
                        self._cancelled.discard(offset)
                        snapshot_path(self.directory, offset).unlink(missing_ok=True)

    def _cancel_snapshots_past(self, end: int) -> None:
        """The log was cut to `end`: snapshots taken past it are not written (or, being written
        now, deleted once written)."""
        with self._lock:
            for offset in [o for o in self._pending if o > end]:
                del self._pending[offset]
            if self._writing is not None and self._writing[0] > end:
                self._cancelled.add(self._writing[0])

    def unwritten_snapshot_offset(self) -> int | float:
        """The first offset a snapshot with producers was taken at and is not written yet
        (infinity if none): retention keeps the segments up to it. One with no producers
        costs nothing to lose: the scan from the log start a restart does without it finds
        every producer that came after."""
        with self._lock:
            offsets = [o for o, (entries, _) in self._pending.items() if entries]
            if self._writing is not None and self._writing[1]:
                offsets.append(self._writing[0])
        return min(offsets, default=float("inf"))

    def _write_snapshot(self, offset: int, entries: list[SnapshotEntry], log_start_offset: int) -> None:
        assert self.directory is not None
        try:
            existing = list_snapshots(self.directory)
            if offset not in existing:
                existing[offset] = snapshot_path(self.directory, offset)
                write_snapshot(existing[offset], entries)
            keep = sorted(o for o in existing if o >= log_start_offset)[-SNAPSHOTS_TO_KEEP:]
            for o, path in existing.items():
                if o not in keep:
                    path.unlink(missing_ok=True)
        except OSError as exc:
            # Only a shortcut for the next start: without it that start scans more batches.
            snapshot_path(self.directory, offset).unlink(missing_ok=True)
            _logger.warning("producer_snapshot_failed", log=self.directory.name, offset=offset, error=str(exc))

    def _snapshot_entries(self) -> list[SnapshotEntry]:
        return [SnapshotEntry(pid, entry.producer_epoch, b.last_seq, b.last_offset, b.last_offset - b.first_offset,
                              b.timestamp)
                for pid, entry in self.producers.items() for b in entry.batches]

    def _restore(self, entries: list[SnapshotEntry]) -> None:
        for e in entries:
            entry = self.producers.get(e.producer_id)
            if entry is None or entry.producer_epoch != e.producer_epoch:
                entry = self.producers[e.producer_id] = ProducerStateEntry(e.producer_id, e.producer_epoch)
            entry.batches.append(BatchMetadata((e.last_sequence - e.offset_delta) & _INT32_MAX, e.last_sequence,
                                               e.last_offset - e.offset_delta, e.last_offset, e.timestamp))

    def load(self, segments: list[LogSegment], log_start_offset: int, now_ms: int) -> tuple[int | None, int]:
        """Rebuild the state of a loaded log (Kafka's loadProducerState): snapshots past the log
        end (cut off by recovery) or below the log start are deleted; the newest remaining one
        that reads back intact is restored (a corrupt one is deleted and the next tried), and
        only the batches from its offset on are scanned; with none, every batch is. Expired
        producers are dropped. Returns (snapshot offset used or None, batches scanned)."""
        self.producers = {}
        log_end = segments[-1].next_offset if segments else log_start_offset
        self._cancel_snapshots_past(log_end)
        start, used = log_start_offset, None
        snapshots = list_snapshots(self.directory) if self.directory is not None else {}
        for offset in sorted(snapshots, reverse=True):
            path = snapshots[offset]
            if offset > log_end or offset < log_start_offset:
                path.unlink(missing_ok=True)
                continue
            if used is not None:
                continue  # older ones stay until take_snapshot prunes them
            try:
                entries = read_snapshot(path)
            except (CorruptSnapshotError, OSError) as exc:
                _logger.warning("producer_snapshot_corrupt", file=str(path.name), log=path.parent.name,
                                error=str(exc))
                path.unlink(missing_ok=True)
                continue
            self._restore(entries)
            start = used = offset
        scanned = 0
        for seg in segments:
            if seg.next_offset <= start:
                continue
            position = 0
            if start > seg.base_offset:
                found = seg.find(start)
                if found is None:
                    continue
                position = found[0]
            for _, h in seg.scan(position, read_ahead=BATCH_OVERHEAD):
                if h.base_offset >= start:
                    self.update(h)
                    scanned += 1
        self.remove_expired(now_ms)
        return used, scanned


def _refuse_unissued(h: BatchHeader) -> None:
    if h.is_transactional:
        # No transactional id was ever given a producer id by this cluster.
        raise InvalidProducerIdMappingError(f"transactional producer id {h.producer_id} was never issued")
    raise UnknownProducerIdError(f"producer id {h.producer_id} was never issued by this cluster")
