"""The log cleaner task the LogManager runs (Kafka's LogCleaner and its cleaner thread): every
log.cleaner.backoff.ms it picks the dirtiest compacted log and cleans it in a worker thread. The
copy runs without the log's lock; only each segment swap takes it, so produce, fetch, flush and
retention go on."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import structlog
from prometheus_client import Counter, Gauge

from .cleaner import Cleaner, CleanerStats, LogCleanerManager, Throttler
from .config import CleanerConfig
from .unified_log import UnifiedLog

log = structlog.get_logger("tidemark.log.log_cleaner")

BYTES_READ = Counter("tidemark_log_cleaner_bytes_read_total", "Segment bytes the log cleaner recopied from")
BYTES_WRITTEN = Counter("tidemark_log_cleaner_bytes_written_total", "Bytes the log cleaner wrote to cleaned segments")
RECORDS_READ = Counter("tidemark_log_cleaner_records_read_total", "Records the log cleaner read")
RECORDS_WRITTEN = Counter("tidemark_log_cleaner_records_written_total", "Records the log cleaner kept")
SEGMENTS_CLEANED = Counter("tidemark_log_cleaner_segments_cleaned_total", "Segments replaced by cleaned ones")
RUNS = Counter("tidemark_log_cleaner_runs_total", "Cleanings, by outcome", ["outcome"])
LAST_RUN_SECONDS = Gauge("tidemark_log_cleaner_last_run_duration_seconds", "Duration of the last cleaning")
RECOPY_PERCENT = Gauge("tidemark_log_cleaner_recopy_percent", "Bytes written / bytes read in the last cleaning (%)")
DIRTY_RATIO = Gauge("tidemark_log_cleaner_dirty_ratio", "Dirty bytes / cleanable bytes of a compacted log",
                    ["topic", "partition"])
UNCLEANABLE_PARTITIONS = Gauge("tidemark_log_cleaner_uncleanable_partitions",
                                "Compacted logs the cleaner skips after a cleaning of theirs failed")
MAX_DIRTY_PERCENT = Gauge("tidemark_log_cleaner_max_dirty_percent", "Largest dirty ratio of any compacted log (%)")


class LogCleaner:
    """Owns the cleaner task over the logs of one data directory (`logs()` lists them)."""

    def __init__(self, data_dir: Path, logs: Callable[[], dict[tuple[str, int], UnifiedLog]], config: CleanerConfig, *,
                 clock: Callable[[], int] | None = None):
        self.enabled = config.enable
        self.backoff_s = config.backoff_ms / 1000
        self.clock = clock or (lambda: int(time.time() * 1000))
        self.manager = LogCleanerManager(data_dir, logs)
        self.cleaner = Cleaner(throttler=Throttler(config.io_max_bytes_per_second), clock=self.clock)
        self._task: asyncio.Task | None = None
        self._backoff_changed = asyncio.Event()

    def reconfigure(self, config: CleanerConfig) -> None:
        """A dynamic change of the rate or the back-off: the cleaning in progress throttles to the
        new rate from its next check, the next pause is the new back-off (log.cleaner.enable is
        read-only, as in Kafka)."""
        self.backoff_s = config.backoff_ms / 1000
        self.cleaner.throttler.rate = config.io_max_bytes_per_second
        self._backoff_changed.set()

    def start(self) -> None:
        if self.enabled and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Stop between batches of the current cleaning (nothing half-swapped is left behind)."""
        if self._task is None:
            return
        self.cleaner.abort.set()
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        self._task = None

    async def _run(self) -> None:
        while True:
            try:
                cleaned = await self.clean_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("log_cleaner_failed")
                cleaned = False
            if not cleaned:  # a shorter back-off set meanwhile ends the pause early
                self._backoff_changed.clear()
                try:
                    await asyncio.wait_for(self._backoff_changed.wait(), self.backoff_s)
                except TimeoutError:
                    pass

    def update_dirty_ratios(self) -> None:
        ratios = self.manager.dirtiness(self.clock())
        for candidate in ratios:
            DIRTY_RATIO.labels(candidate.tp[0], str(candidate.tp[1])).set(candidate.dirty_ratio)
        MAX_DIRTY_PERCENT.set(100 * max((c.dirty_ratio for c in ratios), default=0.0))
        UNCLEANABLE_PARTITIONS.set(self.manager.uncleanable_count())

    async def clean_once(self) -> bool:
        """Clean the dirtiest log above its min.cleanable.dirty.ratio; False if there was none,
        or if the cleaning failed (that log is then marked uncleanable, with its files left as
        they were, and later passes skip it)."""
        self.update_dirty_ratios()
        target = self.manager.grab_filthiest_log(self.clock())
        if target is None:
            return False
        end = None
        stats = CleanerStats()
        log.info("log_cleaning_started", topic=target.tp[0], partition=target.tp[1],
                 dirty_ratio=round(target.dirty_ratio, 3), first_dirty_offset=target.first_dirty_offset)
        try:
            end, stats = await asyncio.to_thread(self.cleaner.clean, target.log, target.first_dirty_offset)
            RUNS.labels("ok").inc()
        except asyncio.CancelledError:
            RUNS.labels("error").inc()
            raise
        except Exception as exc:
            RUNS.labels("error").inc()
            self.manager.mark_uncleanable(target.tp, target.log)
            log.error("log_uncleanable", topic=target.tp[0], partition=target.tp[1], error=str(exc), exc_info=exc)
            return False
        finally:
            self.manager.done_cleaning(target.tp, end)
            self._record(stats)
            self.update_dirty_ratios()
        log.info("log_cleaned", topic=target.tp[0], partition=target.tp[1], dirty_ratio=round(target.dirty_ratio, 3),
                 first_dirty_offset=target.first_dirty_offset, end_offset=end, bytes_read=stats.bytes_read,
                 bytes_written=stats.bytes_written, records_read=stats.records_read,
                 records_written=stats.records_written, segments=stats.segments_read,
                 seconds=round(stats.elapsed_s, 3))
        return True

    @staticmethod
    def _record(stats: CleanerStats) -> None:
        BYTES_READ.inc(stats.bytes_read)
        BYTES_WRITTEN.inc(stats.bytes_written)
        RECORDS_READ.inc(stats.records_read)
        RECORDS_WRITTEN.inc(stats.records_written)
        SEGMENTS_CLEANED.inc(stats.segments_read)
        LAST_RUN_SECONDS.set(stats.elapsed_s)
        if stats.bytes_read:
            RECOPY_PERCENT.set(100 * stats.bytes_written / stats.bytes_read)
