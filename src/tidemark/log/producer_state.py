"""Producer state: Kafka's ProducerStateManager, for idempotent and transactional producers.

Per producer id: its epoch, the metadata of its last 5 batches (Kafka's NUM_BATCHES_TO_RETAIN,
matching max.in.flight.requests.per.connection <= 5), so a retried batch is recognised as a
duplicate and answered with its original offsets, and the timestamp of its last batch, so an
entry idle for producer.id.expiration.ms is dropped (remove_expired). The state is snapshotted
to "<offset>.snapshot" files (see producer_snapshot) at segment roll and clean shutdown, and a
restart loads the latest good snapshot and scans only the batches after it.

Transactions: a producer's first transactional batch on the partition opens its ongoing
transaction (current_txn_first_offset); the COMMIT or ABORT marker (a control batch) completes
it. The first unstable offset is the first offset of the earliest transaction still ongoing or
whose marker is not yet below the high watermark (Kafka's ongoing and unreplicated
transactions); the last stable offset is that, capped by the high watermark. A marker with an
older producer epoch than the producer's is refused (INVALID_PRODUCER_EPOCH) and one from an
older coordinator epoch too (TRANSACTION_COORDINATOR_FENCED); a newer epoch bumps the
producer's. Snapshots carry each producer's ongoing transaction and coordinator epoch, so a
restart rebuilds them; producers with an ongoing transaction never expire.

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

from tidemark.records.control import EndTxnMarker, read_marker

from .errors import (
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
    UnknownProducerIdError,
)
from .txn_index import AbortedTxn
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


class CompletedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    aborted: bool


class ProducerStateEntry:
    __slots__ = ("producer_id", "producer_epoch", "batches", "coordinator_epoch", "current_txn_first_offset",
                 "marker_timestamp")

    def __init__(self, producer_id: int, producer_epoch: int):
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.batches: deque[BatchMetadata] = deque(maxlen=NUM_BATCHES_TO_RETAIN)
        self.coordinator_epoch = -1
        self.current_txn_first_offset = -1  # the first offset of its ongoing transaction, -1 if none
        self.marker_timestamp = -1  # of its last marker

    def bump_epoch(self, epoch: int) -> None:
        """A new epoch: sequence numbers start over (Kafka's maybeUpdateProducerEpoch)."""
        if epoch != self.producer_epoch:
            self.producer_epoch = epoch
            self.batches.clear()

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    @property
    def last_timestamp(self) -> int:
        return max(self.batches[-1].timestamp if self.batches else -1, self.marker_timestamp)

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
        # first offset -> producer id of every ongoing transaction, and (first offset -> the
        # completed transaction) of those whose marker the high watermark has not passed yet.
        self.ongoing_txns: dict[int, int] = {}
        self.unreplicated_txns: dict[int, CompletedTxn] = {}
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
                if h.is_transactional and h.producer_id >= 0:  # the coordinator's: the epoch still fences
                    entry = self.producers.get(h.producer_id)
                    if entry is not None and h.producer_epoch < entry.producer_epoch:
                        raise InvalidProducerEpochError(
                            f"producer {h.producer_id} epoch {h.producer_epoch} is older than {entry.producer_epoch}")
                continue
            entry = self.producers.get(h.producer_id)
            if entry is not None and entry.current_txn_first_offset >= 0 and not h.is_transactional:
                raise InvalidTxnStateError(
                    f"producer {h.producer_id} has an ongoing transaction but wrote a non-transactional batch")
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

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """Kafka's appendEndTxnMarker checks, before a marker is written (a follower's are not
        checked: its leader did)."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if producer_epoch < entry.producer_epoch:
            raise InvalidProducerEpochError(
                f"marker of producer {producer_id} has epoch {producer_epoch}, older than {entry.producer_epoch}")
        if coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"marker of producer {producer_id} from coordinator epoch {coordinator_epoch}, "
                f"older than {entry.coordinator_epoch}")

    def update(self, h: BatchHeader, marker: EndTxnMarker | None = None) -> CompletedTxn | None:
        """Record an appended batch (its header carries the assigned base offset); for a control
        batch `marker` is what it carries. Returns the transaction a marker completes."""
        if h.is_control:
            return self._update_marker(h, marker) if marker is not None else None
        # The group coordinator's transactional offset commits carry no sequence.
        if not is_idempotent(h) and not (h.is_transactional and h.producer_id >= 0):
            return None
        entry = self.producers.get(h.producer_id)
        if entry is None:
            entry = self.producers[h.producer_id] = ProducerStateEntry(h.producer_id, h.producer_epoch)
        entry.bump_epoch(h.producer_epoch)
        if h.base_sequence >= 0:
            entry.batches.append(BatchMetadata(h.base_sequence, _last_seq(h), h.base_offset,
                                               h.base_offset + h.last_offset_delta, h.max_timestamp))
        else:
            entry.marker_timestamp = max(entry.marker_timestamp, h.max_timestamp)
        if h.is_transactional and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = h.base_offset
            self.ongoing_txns[h.base_offset] = h.producer_id
        return None

    def _update_marker(self, h: BatchHeader, marker: EndTxnMarker) -> CompletedTxn | None:
        entry = self.producers.get(h.producer_id)
        if entry is None:
            entry = self.producers[h.producer_id] = ProducerStateEntry(h.producer_id, h.producer_epoch)
        entry.bump_epoch(max(h.producer_epoch, entry.producer_epoch))
        entry.coordinator_epoch = marker.coordinator_epoch
        entry.marker_timestamp = h.max_timestamp
        first, entry.current_txn_first_offset = entry.current_txn_first_offset, -1
        if first < 0:
            return None  # nothing of the transaction reached this partition
        self.ongoing_txns.pop(first, None)
        completed = CompletedTxn(h.producer_id, first, h.base_offset, not marker.committed)
        self.unreplicated_txns[first] = completed
        return completed

    def last_stable_offset_of(self, completed: CompletedTxn) -> int:
        """The LSO once `completed` completed (Kafka's lastStableOffset(completedTxn)): the first
        offset of the earliest other ongoing transaction, or just past the marker."""
        others = [first for first, pid in self.ongoing_txns.items() if pid != completed.producer_id]
        return min(others) if others else completed.last_offset + 1

    def index_completed(self, segment: LogSegment, completed: CompletedTxn) -> None:
        """An aborted transaction goes to the .txnindex of the segment holding its marker."""
        if completed.aborted:
            segment.txn_index.append(AbortedTxn(completed.producer_id, completed.first_offset,
                                                completed.last_offset, self.last_stable_offset_of(completed)))

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The first offset of the earliest transaction ongoing or whose marker is not below
        `high_watermark`, or None. Only reads (the cleaner's thread asks too)."""
        if not self.ongoing_txns and not self.unreplicated_txns:
            return None  # every fetch asks: the common case costs two truth tests
        firsts = list(self.ongoing_txns)
        firsts += [first for first, txn in list(self.unreplicated_txns.items()) if txn.last_offset >= high_watermark]
        return min(firsts) if firsts else None

    def forget_replicated(self, high_watermark: int) -> None:
        """Completed transactions whose marker is below the high watermark are decided."""
        if self.unreplicated_txns:
            for first in [f for f, txn in self.unreplicated_txns.items() if txn.last_offset < high_watermark]:
                del self.unreplicated_txns[first]

    def ongoing_txn_first_offset(self, producer_id: int) -> int:
        entry = self.producers.get(producer_id)
        return -1 if entry is None else entry.current_txn_first_offset

    def truncate_fully(self) -> None:
        """Forget every producer and delete every snapshot (the log starts over, empty)."""
        self.producers = {}
        self.ongoing_txns, self.unreplicated_txns = {}, {}
        self._cancel_snapshots_past(-1)
        if self.directory is not None:
            for path in list_snapshots(self.directory).values():
                path.unlink(missing_ok=True)

    # -- expiration -------------------------------------------------------------------------

    def remove_expired(self, now_ms: int) -> int:
        """Kafka's removeExpiredProducers: drop producers whose last batch's timestamp is
        producer.id.expiration.ms or more before now, unless one has an ongoing transaction.
        Returns how many were dropped."""
        limit = now_ms - self.expiration_ms
        expired = [pid for pid, entry in self.producers.items()
                   if entry.last_timestamp <= limit and entry.current_txn_first_offset < 0]
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
        entries = []
        for pid, entry in self.producers.items():
            txn = (entry.coordinator_epoch, entry.current_txn_first_offset)
            if not entry.batches:  # only a marker so far: Kafka's entry without a batch
                entries.append(SnapshotEntry(pid, entry.producer_epoch, -1, -1, 0, entry.last_timestamp, *txn))
            entries += [SnapshotEntry(pid, entry.producer_epoch, b.last_seq, b.last_offset,
                                      b.last_offset - b.first_offset, max(b.timestamp, entry.marker_timestamp)
                                      if b is entry.batches[-1] else b.timestamp, *txn)
                        for b in entry.batches]
        return entries

    def _restore(self, entries: list[SnapshotEntry]) -> None:
        for e in entries:
            entry = self.producers.get(e.producer_id)
            if entry is None or entry.producer_epoch != e.producer_epoch:
                entry = self.producers[e.producer_id] = ProducerStateEntry(e.producer_id, e.producer_epoch)
            if e.last_offset >= 0:
                entry.batches.append(BatchMetadata((e.last_sequence - e.offset_delta) & _INT32_MAX, e.last_sequence,
                                                   e.last_offset - e.offset_delta, e.last_offset, e.timestamp))
            else:
                entry.marker_timestamp = e.timestamp
            entry.coordinator_epoch = e.coordinator_epoch
            if entry.current_txn_first_offset >= 0:
                self.ongoing_txns.pop(entry.current_txn_first_offset, None)
            entry.current_txn_first_offset = e.current_txn_first_offset
            if e.current_txn_first_offset >= 0:
                self.ongoing_txns[e.current_txn_first_offset] = e.producer_id

    def load(self, segments: list[LogSegment], log_start_offset: int, now_ms: int) -> tuple[int | None, int]:
        """Rebuild the state of a loaded log (Kafka's loadProducerState): snapshots past the log
        end (cut off by recovery) or below the log start are deleted; the newest remaining one
        that reads back intact is restored (a corrupt one is deleted and the next tried), and
        only the batches from its offset on are scanned; with none, every batch is. Expired
        producers are dropped. Each transaction a scanned marker aborts is indexed again in the
        marker's segment (a crash may have lost the .txnindex's tail). Returns
        (snapshot offset used or None, batches scanned)."""
        self.producers = {}
        self.ongoing_txns, self.unreplicated_txns = {}, {}
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
            for pos, h in seg.scan(position, read_ahead=BATCH_OVERHEAD):
                if h.base_offset >= start:
                    marker = read_marker(seg.read(pos, h.size)) if h.is_control else None
                    completed = self.update(h, marker)
                    if completed is not None:
                        self.index_completed(seg, completed)
                    scanned += 1
        self.remove_expired(now_ms)
        return used, scanned


def _refuse_unissued(h: BatchHeader) -> None:
    if h.is_transactional:
        # No transactional id was ever given a producer id by this cluster.
        raise InvalidProducerIdMappingError(f"transactional producer id {h.producer_id} was never issued")
    raise UnknownProducerIdError(f"producer id {h.producer_id} was never issued by this cluster")
