"""Kafka's LogLoader: turn a partition directory into a LocalLog after a clean or unclean stop.

It completes or drops an interrupted cleaner swap, loads each segment (re-validating those an
unclean shutdown may have left half-written), restores producer state and works out the log
start offset and recovery point.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import structlog

from tidemark.records import BATCH_OVERHEAD, CorruptRecordError

from .config import LogConfig
from .leader_epoch import LEADER_EPOCH_CHECKPOINT, CorruptEpochCheckpointError, LeaderEpochFileCache, read_epoch_checkpoint
from .local_log import CLEANED_SUFFIX, DELETED_SUFFIX, SWAP_SUFFIX, TEMP_SUFFIXES, LocalLog, fsync_directory
from .producer_state import ProducerStateManager
from .segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, TornTailError
from .txn_index import TXN_INDEX_SUFFIX

_logger = structlog.get_logger("tidemark.log")


class LoadedLog(NamedTuple):
    local: LocalLog
    log_start_offset: int
    producer_state: ProducerStateManager
    leader_epoch_cache: LeaderEpochFileCache


class LogLoader:
    def __init__(self, directory: Path, config: LogConfig, *, recovery_point: int = 0,
                 log_start_offset: int | None = None, clean_shutdown: bool = False, now_ms: int):
        self.directory = Path(directory)
        self.now_ms = now_ms  # producers idle past producer.id.expiration.ms are not restored
        self.config = config
        self.recovery_point = recovery_point
        self.log_start_offset = log_start_offset
        self.clean_shutdown = clean_shutdown

    def load(self) -> LoadedLog:
        """Load (or create) a partition log.

        Segments wholly below the recovery point (all of them after a clean shutdown) were
        flushed: they are opened from their indexes, as Kafka does, reading only the batch
        headers after each segment's last index entry. One found unreadable takes the
        partition offline (CorruptSegmentError) and no file is changed: a flushed segment is
        never cut, nor are the segments after it deleted. Segments that may hold data past the
        recovery point are re-validated (CRCs) and cut at their first bad byte, later segments
        going too: that is the torn tail of a crash."""
        directory = self.directory
        created = not directory.exists()
        directory.mkdir(parents=True, exist_ok=True)
        local = LocalLog(directory, self.config)
        self._complete_swaps(local)
        bases = []
        for path in directory.iterdir():
            if path.name.endswith(TEMP_SUFFIXES):
                path.unlink(missing_ok=True)
            elif path.suffix == LOG_SUFFIX and path.stem.isdigit():
                bases.append(int(path.stem))
        bases.sort()
        for path in directory.iterdir():  # indexes whose .log is gone
            if path.suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX) and not (directory / (path.stem + LOG_SUFFIX)).exists():
                path.unlink(missing_ok=True)

        truncated = cut = False
        for i, base in enumerate(bases):
            seg = local.new_segment(base)
            segments = local.segments
            if truncated:
                seg.delete()  # after the torn tail of a crash was cut: not trusted
                continue
            upper = bases[i + 1] if i + 1 < len(bases) else None
            active = upper is None
            flushed = self.clean_shutdown or (upper is not None and upper <= self.recovery_point)
            try:
                if segments and base < segments[-1].next_offset:
                    raise CorruptRecordError(f"{seg.log_path.name} overlaps the segment before it")
                if flushed:
                    trusted = recovered = False
                    try:
                        trusted = seg.open_from_indexes(active=active)
                    except TornTailError:
                        if not active:
                            raise
                        # The active segment ends inside a batch: nothing whole follows, so
                        # cutting it loses nothing; recover that segment as after a crash.
                        truncated = seg.recover(validate=True, active=True)
                        recovered = True
                    if not trusted and not recovered:
                        seg.recover(validate=False, active=active, truncate=False)  # rebuild the indexes
                else:
                    truncated = seg.recover(validate=True, active=active)
                    seg.flushed_size = 0  # a process crash can leave valid bytes only in the page cache
            except CorruptRecordError as exc:
                error = local.corrupt(exc)
                _logger.error("log_segment_corrupt", log=directory.name, error=str(error))
                seg.close()
                break  # later segments stay on disk, untouched, for the operator
            cut = cut or truncated
            local.add_segment(seg)
        if not local.segments:
            local.add_segment(local.new_segment(self.log_start_offset or 0))

        start = max(self.log_start_offset or 0, local.segments[0].base_offset)
        if start > local.log_end_offset and local.offline is None:
            # The checkpointed start is past everything left (e.g. a truncated tail): start over there.
            local.clear_segments()
            local.add_segment(local.new_segment(start))
        producer_state = self._restore_producer_state(local, start)
        leader_epoch_cache = self._load_leader_epochs(local, start)
        if cut:
            _logger.warning("log_truncated_at_recovery", log=directory.name, log_end_offset=local.log_end_offset,
                            clean_shutdown=self.clean_shutdown)
        if self.clean_shutdown and not cut:
            local.recovery_point = local.log_end_offset
        else:
            local.recovery_point = min(self.recovery_point, local.log_end_offset)
            local.dir_dirty = True
            if local.offline is None:
                local.flush()  # what recovery kept (and cut) is now durable
        if created:  # a new partition: its directory entry and first files survive a power cut
            fsync_directory(directory)
            fsync_directory(directory.parent)
        return LoadedLog(local, start, producer_state, leader_epoch_cache)

    def _load_leader_epochs(self, local: LocalLog, log_start_offset: int) -> LeaderEpochFileCache:
        """The leader-epoch-checkpoint, cut to what the log holds now: epochs are written there
        before their first batch, and fsynced before the recovery point passes it, so below the
        recovery point a crash can only leave entries at or past the log end. Past it (after a
        crash) the file may be older than the batches that reached the disk: its entries from
        the recovery point on are replaced by the epochs of those batches' headers, as Kafka's
        segment recovery does. Without a readable file (never written, or damaged) it is
        rebuilt from the batch headers, which carry their epochs."""
        entries = None
        if local.offline is None:
            try:
                entries = read_epoch_checkpoint(local.directory / LEADER_EPOCH_CHECKPOINT)
            except CorruptEpochCheckpointError as exc:
                _logger.warning("leader_epoch_checkpoint_rebuilt", log=local.directory.name, error=str(exc))
        else:
            return LeaderEpochFileCache(local.directory)
        if entries is None:
            rebuilt = LeaderEpochFileCache(None)
            try:
                for seg in local.segments:
                    for _, h in seg.scan(read_ahead=BATCH_OVERHEAD):
                        if h.partition_leader_epoch >= 0:
                            rebuilt.assign(h.partition_leader_epoch, h.base_offset)
            except CorruptRecordError as exc:
                _logger.error("log_segment_corrupt", log=local.directory.name, error=str(local.corrupt(exc)))
                return LeaderEpochFileCache(local.directory)
            cache = LeaderEpochFileCache(local.directory, rebuilt.entries)
            cache.flush()
        else:
            cache = LeaderEpochFileCache(local.directory, entries)
            if not self.clean_shutdown and self.recovery_point < local.log_end_offset:
                recovered = LeaderEpochFileCache(None, entries)
                recovered.truncate_from_end(self.recovery_point)
                try:
                    for seg in local.segments:
                        if seg.next_offset <= self.recovery_point:
                            continue
                        for _, h in seg.scan(read_ahead=BATCH_OVERHEAD):
                            if h.last_offset >= self.recovery_point and h.partition_leader_epoch >= 0:
                                recovered.assign(h.partition_leader_epoch, h.base_offset)
                except CorruptRecordError as exc:
                    _logger.error("log_segment_corrupt", log=local.directory.name, error=str(local.corrupt(exc)))
                    return LeaderEpochFileCache(local.directory)
                if recovered.entries != cache.entries:
                    cache = LeaderEpochFileCache(local.directory, recovered.entries)
                    cache.flush()
        cache.truncate_from_end(local.log_end_offset)
        cache.truncate_from_start(log_start_offset)
        cache.sync()
        return cache

    def _restore_producer_state(self, local: LocalLog, log_start_offset: int) -> ProducerStateManager:
        """The one place producer state (idempotent producers' last batches) is restored: from
        the newest intact .snapshot file, then by walking only the batch headers after it (all
        of them without one). A header that cannot be walked takes the partition offline like
        any other unreadable flushed segment."""
        state = ProducerStateManager(local.directory, self.config.producer_id_expiration_ms)
        if local.offline is not None:
            return state
        try:
            state.load(local.segments, log_start_offset, self.now_ms)
        except CorruptRecordError as exc:
            _logger.error("log_segment_corrupt", log=local.directory.name, error=str(local.corrupt(exc)))
        return state

    def _complete_swaps(self, local: LocalLog) -> None:
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
            seg = local.new_segment(base, suffix=SWAP_SUFFIX)
            try:
                seg.recover(validate=True, active=False)
                seg.fsync()
                for other in list(directory.iterdir()):
                    if other.suffix == LOG_SUFFIX and other.stem.isdigit() and base <= int(other.stem) < seg.next_offset:
                        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
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
