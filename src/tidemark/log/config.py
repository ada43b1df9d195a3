"""Per-log settings, Kafka's topic/broker settings in snake case, with Kafka's defaults."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class LogConfig:
    segment_bytes: int = 1073741824  # log.segment.bytes
    segment_ms: int = 604800000  # log.roll.ms
    retention_ms: int = 604800000  # log.retention.ms; -1 = unlimited
    retention_bytes: int = -1  # log.retention.bytes; -1 = unlimited
    index_interval_bytes: int = 4096  # log.index.interval.bytes
    segment_index_bytes: int = 10485760  # log.index.size.max.bytes
    max_message_bytes: int = 1048588  # message.max.bytes
    cleanup_policy: str = "delete"  # cleanup.policy: "delete", "compact" or "compact,delete"
    message_timestamp_type: str = "CreateTime"  # message.timestamp.type: or "LogAppendTime"
    delete_retention_ms: int = 86400000  # delete.retention.ms (log.cleaner.delete.retention.ms)
    min_cleanable_dirty_ratio: float = 0.5  # min.cleanable.dirty.ratio (log.cleaner.min.cleanable.ratio)
    min_compaction_lag_ms: int = 0  # min.compaction.lag.ms (log.cleaner.min.compaction.lag.ms)
    producer_id_expiration_ms: int = 86400000  # producer.id.expiration.ms (a broker setting)

    @property
    def delete_enabled(self) -> bool:
        return "delete" in self.cleanup_policy.split(",")

    @property
    def compact_enabled(self) -> bool:
        return "compact" in self.cleanup_policy.split(",")


@dataclass(frozen=True)
class CleanerConfig:
    """The log cleaner's broker settings (Kafka's CleanerConfig)."""

    enable: bool = True  # log.cleaner.enable
    backoff_ms: int = 15000  # log.cleaner.backoff.ms: the pause when no log needs cleaning
    io_max_bytes_per_second: float = math.inf  # log.cleaner.io.max.bytes.per.second
    threads: int = 1  # log.cleaner.threads: logs cleaned at the same time
