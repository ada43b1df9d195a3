"""All partition logs under one data directory, with Kafka's checkpoint files, and (like
Kafka's LogManager) the background work on them: retention, the recovery-point and log-start
checkpoints, and the log cleaner."""

from __future__ import annotations

import asyncio
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
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
DELETE_SUFFIX = "-delete"
# Kafka's log.flush.offset.checkpoint.interval.ms and log.flush.start.offset.checkpoint.interval.ms.
CHECKPOINT_INTERVAL_MS = 60000

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
                 producer_id_expiration_check_interval_ms: int = 600000):
        self.data_dir = Path(data_dir)
        self.default_config = default_config or LogConfig()
        self._logs: dict[TopicPartition, UnifiedLog] = {}
        self.clean_shutdown = False  # how the last run ended, as found by open()
        self.new_directory = False  # no run ever ended here, as found by open()
        self.retention_check_interval_ms = retention_check_interval_ms
        self.checkpoint_interval_ms = checkpoint_interval_ms
        self.producer_id_expiration_check_interval_ms = producer_id_expiration_check_interval_ms
        self.cleaner_config = cleaner_config or CleanerConfig()
        self.cleaner: LogCleaner | None = None  # from start() on
        self._tasks: list[asyncio.Task[None]] = []
        self._dir_lock = DirLock(self.data_dir)

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
        for path in sorted(self.data_dir.iterdir()):
            if not path.is_dir():
                continue
            if path.name.endswith(DELETE_SUFFIX):
                shutil.rmtree(path, ignore_errors=True)  # a deletion that did not finish
                continue
            tp = parse_partition_dir(path.name)
            if tp is None:
                continue
            self._logs[tp] = UnifiedLog.open(
                path,
                config_for(tp[0]) if config_for else self.default_config,
                recovery_point=recovery_points.get(tp, 0),
                log_start_offset=start_offsets.get(tp),
                clean_shutdown=self.clean_shutdown,
                now_ms=now_ms,
            )
            self._logs[tp].on_truncate = self.checkpoint
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
            log = UnifiedLog.open(self.data_dir / f"{topic}-{partition}", config or self.default_config, clean_shutdown=True)
            log.on_truncate = self.checkpoint
            self._logs[(topic, partition)] = log
        return log

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

    def checkpoint(self) -> None:
        """Write the recovery-point and log-start-offset checkpoints (periodically, at close,
        and after every truncation: Kafka's LogManager.truncateTo does the same)."""
        write_checkpoint(
            self.data_dir / RECOVERY_POINT_CHECKPOINT, {tp: log.recovery_point for tp, log in self._logs.items()}
        )
        write_checkpoint(
            self.data_dir / LOG_START_OFFSET_CHECKPOINT, {tp: log.log_start_offset for tp, log in self._logs.items()}
        )

    # -- background work ---------------------------------------------------------------------

    def start(self) -> None:
        """Start the retention, checkpoint and producer-expiration loops and the log cleaner
        (Kafka's LogManager.startup)."""
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._every(self.retention_check_interval_ms / 1000, self.enforce_retention)),
            loop.create_task(self._every(self.checkpoint_interval_ms / 1000, self.checkpoint)),
            loop.create_task(self._every(self.producer_id_expiration_check_interval_ms / 1000,
                                         self.remove_expired_producers)),
        ]
        self.cleaner = LogCleaner(self.data_dir, self.logs, self.cleaner_config)
        self.cleaner.start()

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
                action()
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
        for log in self._logs.values():
            log.close()
        self.checkpoint()
        marker = self.data_dir / CLEAN_SHUTDOWN_FILE
        marker.touch()
        fsync_directory(self.data_dir)
        self._dir_lock.release()
