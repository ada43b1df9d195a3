"""The log cleaner task the LogManager runs (Kafka's LogCleaner and its cleaner thread): every
log.cleaner.backoff.ms it picks the dirtiest compacted log and has its worker process clean it
(cleaner_worker): the copy runs outside the broker's interpreter and without the log's lock;
only each segment swap, done here in a thread, takes the lock, so produce, fetch, flush and
retention go on."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import structlog
from prometheus_client import Counter, Gauge

from .cleaner import DEFAULT_MAX_MAP_ENTRIES, CleanerStats, LogCleanerManager, LogToClean
from .cleaner_worker import (CleanerWorker, CleaningFailed, SharedThrottle, StaleJob, WorkerDied, delete_cleaned,
                             make_job, swap_in)
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
    """Owns the cleaner tasks (log.cleaner.threads of them, Kafka's cleaner threads) over the
    logs of one data directory (`logs()` lists them): each cleans the dirtiest log no other is
    cleaning, in its own worker process, all the workers together throttled to
    log.cleaner.io.max.bytes.per.second (one SharedThrottle).
    A worker that dies is noticed, its job abandoned (the log keeps its checkpoint) and the
    worker restarted."""

    def __init__(self, data_dir: Path, logs: Callable[[], dict[tuple[str, int], UnifiedLog]], config: CleanerConfig, *,
                 clock: Callable[[], int] | None = None):
        self.enabled = config.enable
        self.backoff_s = config.backoff_ms / 1000
        self.threads = config.threads
        self.clock = clock or (lambda: int(time.time() * 1000))
        self.manager = LogCleanerManager(data_dir, logs)
        self.throttle = SharedThrottle(config.io_max_bytes_per_second)
        self.max_map_entries = DEFAULT_MAX_MAP_ENTRIES
        self.workers: dict[int, CleanerWorker] = {}  # by task index
        self._tasks: dict[int, asyncio.Task] = {}
        self._backoff_changed = asyncio.Event()

    def reconfigure(self, config: CleanerConfig) -> None:
        """A dynamic change: the cleanings in progress throttle to the new rate from their next
        check, a pause ends at the new back-off, new tasks start at once and surplus ones end
        after their current cleaning (log.cleaner.enable is read-only, as in Kafka)."""
        self.backoff_s = config.backoff_ms / 1000
        self.throttle.rate.value = config.io_max_bytes_per_second
        self.threads = config.threads
        self._backoff_changed.set()
        if self._tasks:
            self._start_tasks()

    def start(self) -> None:
        if self.enabled and not self._tasks:
            self._start_tasks()

    def _start_tasks(self) -> None:
        loop = asyncio.get_running_loop()
        for index in range(self.threads):
            if index not in self._tasks:
                self._tasks[index] = loop.create_task(self._run(index))

    def worker(self, index: int = 0) -> CleanerWorker:
        """Task `index`'s worker process, started if need be (from the event loop's thread)."""
        worker = self.workers.get(index)
        if worker is None:
            worker = self.workers[index] = CleanerWorker(self.throttle)
        if not worker.alive:
            worker.restart()
        return worker

    async def stop(self) -> None:
        """Stop the workers between batches of their jobs (killed if one takes longer than a
        few seconds: what they leave, ".cleaned" files, recovery deletes; nothing half-swapped)."""
        for worker in self.workers.values():
            worker.abort.set()
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks = {}
        workers, self.workers = list(self.workers.values()), {}
        await asyncio.gather(*(asyncio.to_thread(worker.stop) for worker in workers))

    async def _run(self, index: int) -> None:
        self.worker(index)  # started with the task: its imports are done by the first cleaning
        try:
            while index < self.threads:
                try:
                    cleaned = await self.clean_once(index)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("log_cleaner_failed")
                    cleaned = False
                if not cleaned and index < self.threads:  # a shorter back-off set meanwhile ends the pause
                    self._backoff_changed.clear()
                    try:
                        await asyncio.wait_for(self._backoff_changed.wait(), self.backoff_s)
                    except TimeoutError:
                        pass
        finally:
            if self._tasks.get(index) is asyncio.current_task():
                del self._tasks[index]
                if index >= self.threads and index in self.workers:  # a surplus task: its worker goes too
                    await asyncio.to_thread(self.workers.pop(index).stop)

    def update_dirty_ratios(self) -> None:
        ratios = self.manager.dirtiness(self.clock())
        for candidate in ratios:
            DIRTY_RATIO.labels(candidate.tp[0], str(candidate.tp[1])).set(candidate.dirty_ratio)
        MAX_DIRTY_PERCENT.set(100 * max((c.dirty_ratio for c in ratios), default=0.0))
        UNCLEANABLE_PARTITIONS.set(self.manager.uncleanable_count())

    async def clean_once(self, index: int = 0) -> bool:
        """Clean the dirtiest log above its min.cleanable.dirty.ratio with task `index`'s worker;
        False if there was none, or if the cleaning failed (that log is then marked uncleanable,
        with its files left as they were, and later passes skip it), or was abandoned (the log
        changed under it, or the worker died: it is restarted, and the log cleaned again later)."""
        self.update_dirty_ratios()
        target = self.manager.grab_filthiest_log(self.clock())
        if target is None:
            return False
        end = None
        stats = CleanerStats()
        log.info("log_cleaning_started", topic=target.tp[0], partition=target.tp[1],
                 dirty_ratio=round(target.dirty_ratio, 3), first_dirty_offset=target.first_dirty_offset)
        worker = self.worker(index)
        try:
            end, stats = await asyncio.to_thread(self._clean, worker, target)
            RUNS.labels("ok").inc()
        except asyncio.CancelledError:
            RUNS.labels("error").inc()
            raise
        except (WorkerDied, StaleJob) as exc:
            RUNS.labels("abandoned").inc()
            log.warning("log_cleaning_abandoned", topic=target.tp[0], partition=target.tp[1], reason=str(exc))
            if isinstance(exc, WorkerDied):
                self._discard_cleaned(target)
                if self.workers.get(index) is worker:  # not stopping: a new worker (its pipe may
                    await asyncio.to_thread(worker.stop)  # close before the old one is gone)
                    worker.start()
            return False
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

    def _clean(self, worker: CleanerWorker, target: LogToClean) -> tuple[int, CleanerStats]:
        """One job on the worker, its cleaned segments swapped in as they come (in this thread).
        A swap refused (the log no longer has the segments the job read) aborts the job; the
        end offset is then where the refused group started. A failure of the worker's is the
        log's (uncleanable) only if the log is still as the job found it."""
        log_ = target.log
        made = make_job(log_, target.first_dirty_offset, self.clock(), self.max_map_entries)
        if made is None:
            return target.first_dirty_offset, CleanerStats()
        job, segments = made
        by_base = {seg.base_offset: seg for seg in segments}
        refused: list[int] = []

        def on_group(bases: list[int], cleaned_base: int) -> None:
            if refused or not swap_in(log_, job, [by_base[b] for b in bases], cleaned_base):
                if not refused:
                    refused.append(bases[0])
                    worker.abort.set()
                    log.info("log_cleaning_stale", log=log_.directory.name, at=bases[0])
                delete_cleaned(log_.directory, cleaned_base)

        try:
            end, stats = worker.run(job, on_group)
        except CleaningFailed:
            live = {seg.base_offset: seg for seg in log_.segments}
            if refused or log_.local.truncations != job.truncations or any(
                    live.get(base) is not seg or seg.size != spec.size
                    for (base, seg), spec in zip(by_base.items(), job.segments)):
                raise StaleJob("the log changed while its cleaning failed") from None
            raise
        if refused:
            end = max(target.first_dirty_offset, refused[0])
        return end, stats

    @staticmethod
    def _discard_cleaned(target: LogToClean) -> None:
        """A dead worker's partly written ".cleaned" files (only the cleaner makes them)."""
        for path in target.log.directory.glob("*.cleaned"):
            path.unlink(missing_ok=True)

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
