"""All partition logs under one data directory, with Kafka's checkpoint files, and (like
Kafka's LogManager) the background work on them: retention, the recovery-point, log-start and
replication-offset (high watermark) checkpoints, and the log cleaner.

Checkpoint files are written on a disk thread of their own, one write at a time in the order
asked (each write takes its offsets when asked), never fsyncing on the event loop."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import os
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import structlog

from .checkpoint import TopicPartition, read_checkpoint, write_checkpoint
from .config import CleanerConfig, LogConfig
from .dir_lock import DirLock
from .local_log import fsync_directory
from .log_cleaner import LogCleaner
from .unified_log import UnifiedLog

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
# Kafka's high watermark checkpoint (ReplicaManager's, in each log directory).
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
DELETE_SUFFIX = "-delete"
# Kafka's log.flush.offset.checkpoint.interval.ms and log.flush.start.offset.checkpoint.interval.ms.
CHECKPOINT_INTERVAL_MS = 60000
# Kafka's replica.high.watermark.checkpoint.interval.ms.
HIGH_WATERMARK_CHECKPOINT_INTERVAL_MS = 5000

_logger = structlog.get_logger("tidemark.log.manager")


def parse_partition_dir(name: str) -> TopicPartition | None:
    """"my-topic-3" -> ("my-topic", 3); topic names may contain '-', so split on the last."""
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        return None
    return topic, int(partition)


class LogManager:
    def __init__(self, data_dir: Path, default_config: LogConfig | None = None, *,
                 cleaner_config: CleanerConfig | None = None, retention_check_interval_ms: int = 300000,
                 checkpoint_interval_ms: int = CHECKPOINT_INTERVAL_MS,
                 high_watermark_checkpoint_interval_ms: int = HIGH_WATERMARK_CHECKPOINT_INTERVAL_MS,
                 producer_id_expiration_check_interval_ms: int = 600000, replicated: bool = False):
        """`replicated`: the logs are replicas of a cluster's partitions (their high watermarks
        start from the replication-offset-checkpoint); else this broker alone holds them."""
        self.data_dir = Path(data_dir)
        self.replicated = replicated
        self.default_config = default_config or LogConfig()
        self._logs: dict[TopicPartition, UnifiedLog] = {}
        self.clean_shutdown = False  # how the last run ended, as found by open()
        self.new_directory = False  # no run ever ended here, as found by open()
        self.retention_check_interval_ms = retention_check_interval_ms
        self.checkpoint_interval_ms = checkpoint_interval_ms
        self.high_watermark_checkpoint_interval_ms = high_watermark_checkpoint_interval_ms
        self.producer_id_expiration_check_interval_ms = producer_id_expiration_check_interval_ms
        self.cleaner_config = cleaner_config or CleanerConfig()
        self.cleaner: LogCleaner | None = None  # from start() on
        self._tasks: list[asyncio.Task[None]] = []
        self._dir_lock = DirLock(self.data_dir)
        self._disk: concurrent.futures.ThreadPoolExecutor | None = None  # the checkpoints' thread
        self._truncation_write_due = False  # truncations happened: a checkpoint write is scheduled
        self._truncation_written: concurrent.futures.Future[None] | None = None

    def lock(self) -> None:
        """Take the data directory's lock (open() does) before anything reads or writes in it;
        held until close(). Raises DataDirLockedError if another process holds it."""
        self._dir_lock.acquire()

    def open(self, *, now_ms: int | None = None, config_for: Callable[[str], LogConfig] | None = None) -> None:
        """Load every partition directory; recover them all if the last shutdown was unclean.

        `config_for(topic)` gives a topic's own config (its overrides); the default otherwise.
        """
        self.lock()
        marker = self.data_dir / CLEAN_SHUTDOWN_FILE
        self.clean_shutdown = marker.exists()
        # Nothing ever ran here: no shutdown, clean or not, to report.
        self.new_directory = not self.clean_shutdown and not (self.data_dir / RECOVERY_POINT_CHECKPOINT).exists() \
            and not any(parse_partition_dir(p.name) for p in self.data_dir.iterdir() if p.is_dir())
        recovery_points = read_checkpoint(self.data_dir / RECOVERY_POINT_CHECKPOINT)
        start_offsets = read_checkpoint(self.data_dir / LOG_START_OFFSET_CHECKPOINT)
        high_watermarks = read_checkpoint(self.data_dir / REPLICATION_OFFSET_CHECKPOINT)
        for path in sorted(self.data_dir.iterdir()):
            if not path.is_dir():
                continue
            if path.name.endswith(DELETE_SUFFIX):
                shutil.rmtree(path, ignore_errors=True)  # a deletion that did not finish
                continue
            tp = parse_partition_dir(path.name)
            if tp is None:
                continue
            log = UnifiedLog.open(
                path,
                config_for(tp[0]) if config_for else self.default_config,
                recovery_point=recovery_points.get(tp, 0),
                log_start_offset=start_offsets.get(tp),
                clean_shutdown=self.clean_shutdown,
                # A replica's log end may hold records no leader ever committed: its high
                # watermark is the one it last checkpointed (0 without one), never its log end.
                high_watermark=high_watermarks.get(tp, 0) if self.replicated else 0,
                now_ms=now_ms,
            )
            if not self.replicated:
                self._start_alone(log)
            log.truncation_listeners.append(functools.partial(self._truncated, log))
            self._logs[tp] = log
        # From here on a crash must be seen as unclean: the removal must reach the disk before
        # anything is appended, or a power cut could bring the marker back over unflushed data.
        if self.clean_shutdown:
            marker.unlink()
            fsync_directory(self.data_dir)

    def get(self, topic: str, partition: int) -> UnifiedLog | None:
        return self._logs.get((topic, partition))

    def get_or_create(self, topic: str, partition: int, config: LogConfig | None = None) -> UnifiedLog:
        log = self._logs.get((topic, partition))
        if log is None:
            # A new partition's directory is fsynced with its parent by the loader.
            log = UnifiedLog.open(self.data_dir / f"{topic}-{partition}", config or self.default_config,
                                  clean_shutdown=True, high_watermark=0)
            log.truncation_listeners.append(functools.partial(self._truncated, log))
            self._logs[(topic, partition)] = log
        return log

    @staticmethod
    def _start_alone(log: UnifiedLog) -> None:
        """On a broker alone with its logs the high watermark is the durably flushed end, as the
        partition keeps it while running: the recovery point (the loader fsyncs what an unclean
        shutdown left, so it is the log end unless the log is offline)."""
        log.update_high_watermark(log.recovery_point)

    def logs(self) -> dict[TopicPartition, UnifiedLog]:
        return dict(self._logs)

    def delete_partition(self, topic: str, partition: int) -> None:
        log = self._logs.pop((topic, partition), None)
        if log is None:
            return
        log.close(flush=False)  # about to be deleted: nothing to make durable
        doomed = log.directory.with_name(f"{log.directory.name}.{uuid.uuid4().hex}{DELETE_SUFFIX}")
        os.rename(log.directory, doomed)
        shutil.rmtree(doomed, ignore_errors=True)

    def _offset_checkpoints(self) -> list[tuple[Path, dict[TopicPartition, int]]]:
        return [
            (self.data_dir / RECOVERY_POINT_CHECKPOINT, {tp: log.recovery_point for tp, log in self._logs.items()}),
            (self.data_dir / LOG_START_OFFSET_CHECKPOINT, {tp: log.log_start_offset for tp, log in self._logs.items()}),
        ]

    def _high_watermark_checkpoint(self) -> list[tuple[Path, dict[TopicPartition, int]]]:
        return [(self.data_dir / REPLICATION_OFFSET_CHECKPOINT,
                 {tp: log.high_watermark for tp, log in self._logs.items()})]

    def _write(self, files: list[tuple[Path, dict[TopicPartition, int]]]) -> concurrent.futures.Future[None]:
        """Write checkpoint files on the disk thread, after every write asked before."""
        if self._disk is None:
            self._disk = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="log-checkpoints")
        future = self._disk.submit(_write_checkpoints, files)
        future.add_done_callback(_report_failure)
        return future

    def checkpoint(self) -> None:
        """Write the recovery-point and log-start-offset checkpoints and wait for them (off the
        event loop only: the broker awaits checkpoint_async)."""
        self._write(self._offset_checkpoints()).result()

    def checkpoint_high_watermarks(self) -> None:
        """Write the replication-offset-checkpoint and wait for it."""
        self._write(self._high_watermark_checkpoint()).result()

    async def checkpoint_async(self) -> None:
        """The recovery-point and log-start-offset checkpoints, written off the event loop
        (periodically, and before DeleteRecords answers)."""
        await asyncio.wrap_future(self._write(self._offset_checkpoints()))

    async def checkpoint_high_watermarks_async(self) -> None:
        await asyncio.wrap_future(self._write(self._high_watermark_checkpoint()))

    def _truncated(self, log: UnifiedLog, cut_from: int) -> None:
        """After a truncation (Kafka's LogManager.truncateTo checkpoints too): the recovery
        points, log start offsets and high watermarks, which went down, are written once the
        current run of truncations is done (a view change truncates many logs at once: one
        write for them all), and are durable before the log rolls a segment past the cut (a
        stale, higher recovery point would have a restart trust it unchecked)."""
        log.roll_barrier = self._truncation_checkpoint_durable
        if self._truncation_write_due:
            return
        self._truncation_write_due = True
        try:
            asyncio.get_running_loop().call_soon(self._write_after_truncations)
        except RuntimeError:  # no event loop (tools, tests): at once
            self._write_after_truncations()

    def _write_after_truncations(self) -> None:
        if not self._truncation_write_due:
            return  # a roll or a wait forced it already
        self._truncation_write_due = False
        self._truncation_written = self._write(self._offset_checkpoints() + self._high_watermark_checkpoint())

    def _truncation_checkpoint_durable(self) -> None:
        self._write_after_truncations()
        if self._truncation_written is not None:
            concurrent.futures.wait([self._truncation_written])  # a failed write is reported by _write

    async def truncations_checkpointed(self) -> None:
        """Wait, off the event loop, for the checkpoint write of the truncations so far (started
        now if still due): a log that then rolls finds its barrier passed and waits for nothing."""
        self._write_after_truncations()
        written = self._truncation_written
        if written is not None:
            await asyncio.wait([asyncio.wrap_future(written)])  # a failed write is reported by _write

    def checkpoints_written(self) -> None:
        """Wait until every checkpoint write asked so far (a truncation's too) is done."""
        self._write_after_truncations()
        if self._disk is not None:
            self._disk.submit(lambda: None).result()

    # -- background work ---------------------------------------------------------------------

    def start(self) -> None:
        """Start the retention, checkpoint and producer-expiration loops and the log cleaner
        (Kafka's LogManager.startup)."""
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._every(self.retention_check_interval_ms / 1000, self.enforce_retention)),
            loop.create_task(self._every(self.checkpoint_interval_ms / 1000, self.checkpoint_async)),
            loop.create_task(self._every(self.high_watermark_checkpoint_interval_ms / 1000,
                                         self.checkpoint_high_watermarks_async)),
            loop.create_task(self._every(self.producer_id_expiration_check_interval_ms / 1000,
                                         self.remove_expired_producers)),
        ]
        self.cleaner = LogCleaner(self.data_dir, self.logs, self.cleaner_config)
        self.cleaner.start()

    def reconfigure_cleaner(self, config: CleanerConfig) -> None:
        """Dynamic cleaner settings: kept for a cleaner started later, applied to a running one."""
        self.cleaner_config = config
        if self.cleaner is not None:
            self.cleaner.reconfigure(config)

    async def stop(self) -> None:
        """Stop the background work (the cleaner between batches); the logs stay open."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        if self.cleaner is not None:
            await self.cleaner.stop()

    @staticmethod
    async def _every(seconds: float, action: Callable[[], object]) -> None:
        while True:
            await asyncio.sleep(seconds)
            try:
                result = action()
                if asyncio.iscoroutine(result):
                    await result
            except Exception:
                _logger.exception("periodic_task_failed", task=getattr(action, "__name__", str(action)))

    def enforce_retention(self, now_ms: int | None = None) -> None:
        """Delete the segments past retention of every log (Kafka's cleanupLogs)."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        for (topic, partition), log in list(self._logs.items()):
            deleted = log.delete_retention(now)
            if deleted:
                _logger.info("retention_deleted_segments", topic=topic, partition=partition, segments=deleted,
                             log_start_offset=log.log_start_offset)

    def remove_expired_producers(self, now_ms: int | None = None) -> int:
        """Kafka's producer expiration check (producer.id.expiration.ms) over every log; returns
        how many producer ids were dropped."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        removed = sum(log.producer_state.remove_expired(now) for log in list(self._logs.values()))
        if removed:
            _logger.info("producer_ids_expired", count=removed)
        return removed

    def close(self) -> None:
        """Flush and close every log, checkpoint, then mark the shutdown clean."""
        self._truncation_write_due = False  # the write below covers them
        for log in self._logs.values():
            log.close()
        self._write(self._offset_checkpoints() + self._high_watermark_checkpoint()).result()
        if self._disk is not None:
            self._disk.shutdown()
            self._disk = None
        marker = self.data_dir / CLEAN_SHUTDOWN_FILE
        marker.touch()
        fsync_directory(self.data_dir)
        self._dir_lock.release()


def _write_checkpoints(files: list[tuple[Path, dict[TopicPartition, int]]]) -> None:
    for path, entries in files:
        write_checkpoint(path, entries)


def _report_failure(future: concurrent.futures.Future[None]) -> None:
    if not future.cancelled() and future.exception() is not None:
        _logger.error("checkpoint_write_failed", error=repr(future.exception()))
