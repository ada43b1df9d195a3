"""All partition logs under one data directory, with Kafka's checkpoint files."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

from .config import LogConfig
from .local_log import fsync_directory
from .unified_log import UnifiedLog

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
DELETE_SUFFIX = "-delete"
_CHECKPOINT_VERSION = 0

TopicPartition = tuple[str, int]


def parse_partition_dir(name: str) -> TopicPartition | None:
    """"my-topic-3" -> ("my-topic", 3); topic names may contain '-', so split on the last."""
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        return None
    return topic, int(partition)


def read_checkpoint(path: Path) -> dict[TopicPartition, int]:
    """Kafka's OffsetCheckpointFile: version line, entry count line, 'topic partition offset' lines."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return {}
    if len(lines) < 2 or lines[0].strip() != str(_CHECKPOINT_VERSION):
        raise ValueError(f"unrecognised checkpoint file {path.name}")
    count = int(lines[1])
    entries = {}
    for line in lines[2 : 2 + count]:
        topic, partition, offset = line.split()
        entries[(topic, int(partition))] = int(offset)
    if len(entries) != count:
        raise ValueError(f"checkpoint file {path.name} expected {count} entries, found {len(entries)}")
    return entries


def write_checkpoint(path: Path, entries: dict[TopicPartition, int]) -> None:
    """Atomically replace the file: write a temp file, fsync it, rename, fsync the directory."""
    lines = [str(_CHECKPOINT_VERSION), str(len(entries))]
    lines += [f"{t} {p} {o}" for (t, p), o in sorted(entries.items())]
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_directory(path.parent)


class LogManager:
    def __init__(self, data_dir: Path, default_config: LogConfig | None = None):
        self.data_dir = Path(data_dir)
        self.default_config = default_config or LogConfig()
        self._logs: dict[TopicPartition, UnifiedLog] = {}
        self.clean_shutdown = False  # how the last run ended, as found by open()

    def open(self, *, now_ms: int | None = None, config_for: Callable[[str], LogConfig] | None = None) -> None:
        """Load every partition directory; recover them all if the last shutdown was unclean.

        `config_for(topic)` gives a topic's own config (its overrides); the default otherwise.
        """
        self.data_dir.mkdir(parents=True, exist_ok=True)
        marker = self.data_dir / CLEAN_SHUTDOWN_FILE
        self.clean_shutdown = marker.exists()
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
        # From here on a crash must be seen as unclean.
        marker.unlink(missing_ok=True)

    def get(self, topic: str, partition: int) -> UnifiedLog | None:
        return self._logs.get((topic, partition))

    def get_or_create(self, topic: str, partition: int, config: LogConfig | None = None) -> UnifiedLog:
        log = self._logs.get((topic, partition))
        if log is None:
            log = UnifiedLog.open(self.data_dir / f"{topic}-{partition}", config or self.default_config, clean_shutdown=True)
            fsync_directory(self.data_dir)
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
        write_checkpoint(
            self.data_dir / RECOVERY_POINT_CHECKPOINT, {tp: log.recovery_point for tp, log in self._logs.items()}
        )
        write_checkpoint(
            self.data_dir / LOG_START_OFFSET_CHECKPOINT, {tp: log.log_start_offset for tp, log in self._logs.items()}
        )

    def close(self) -> None:
        """Flush and close every log, checkpoint, then mark the shutdown clean."""
        for log in self._logs.values():
            log.close()
        self.checkpoint()
        marker = self.data_dir / CLEAN_SHUTDOWN_FILE
        marker.touch()
        fsync_directory(self.data_dir)
