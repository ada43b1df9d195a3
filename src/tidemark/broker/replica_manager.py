"""Topics and the partitions this broker hosts: creation, deletion, lookup, housekeeping.

Named after Kafka's ReplicaManager: it owns the logs (through the LogManager), the partition
objects that produce and fetch go through, the group-commit flusher, and the periodic retention
and recovery-point checkpoint tasks.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import structlog
from kio.schema.errors import ErrorCode

from tidemark.broker import metrics
from tidemark.broker.config import BrokerConfig
from tidemark.broker.errors import PartitionDeletedError
from tidemark.broker.flusher import Flusher
from tidemark.broker.log_cleaner import LogCleaner
from tidemark.broker.partition import Partition
from tidemark.cluster.embedded import EmbeddedMetadata, TopicMetadata
from tidemark.log.config import LogConfig
from tidemark.log.log import AppendInfo
from tidemark.log.manager import LogManager

log = structlog.get_logger("tidemark.replica_manager")

CHECKPOINT_INTERVAL_S = 60.0


def now_ms() -> int:
    return int(time.time() * 1000)


class ReplicaManager:
    def __init__(self, config: BrokerConfig, data_dir: Path) -> None:
        self.config = config
        self.data_dir = data_dir
        self.metadata = EmbeddedMetadata(data_dir, config.node_id)
        self.logs = LogManager(data_dir, self.config.log_config({}))
        self.log_cleaner = LogCleaner(self.logs, config)
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.flusher = Flusher()
        self._tasks: list[asyncio.Task[None]] = []

    def open(self) -> None:
        """Recover every log on disk and attach it to a known topic's partition."""
        def config_for(topic_name: str) -> LogConfig:
            topic = self.metadata.get(topic_name)
            return self.config.log_config(topic.configs if topic else {})

        started = time.perf_counter()
        self.logs.open(config_for=config_for)
        log.info("logs_loaded", logs=len(self.logs.logs()), clean_shutdown=self.logs.clean_shutdown,
                 seconds=round(time.perf_counter() - started, 3))
        for (topic_name, index), partition_log in self.logs.logs().items():
            topic = self.metadata.get(topic_name)
            if topic is None or index >= topic.partitions:
                log.warning("orphan_log_removed", topic=topic_name, partition=index)
                self.logs.delete_partition(topic_name, index)
                continue
            self.partitions[(topic_name, index)] = Partition(topic_name, index, partition_log)
        for topic in self.metadata.topics.values():
            self._ensure_partitions(topic)
        metrics.PARTITIONS.set(len(self.partitions))

    def start(self) -> None:
        self.flusher.start()
        self.log_cleaner.start()
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._every(self.config["log.retention.check.interval.ms"] / 1000, self.enforce_retention)),
            loop.create_task(self._every(CHECKPOINT_INTERVAL_S, self.logs.checkpoint)),
            loop.create_task(self._every(self.config["producer.id.expiration.check.interval.ms"] / 1000,
                                         self.remove_expired_producers)),
        ]

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.log_cleaner.stop()
        await self.flusher.stop()
        self.logs.close()

    async def _every(self, seconds: float, action: Any) -> None:
        while True:
            await asyncio.sleep(seconds)
            try:
                action()
            except Exception:
                log.exception("periodic_task_failed", task=getattr(action, "__name__", str(action)))

    def enforce_retention(self) -> None:
        now = now_ms()
        for partition in self.partitions.values():
            deleted = partition.log.delete_retention(now)
            if deleted:
                log.info(
                    "retention_deleted_segments",
                    topic=partition.topic,
                    partition=partition.index,
                    segments=deleted,
                    log_start_offset=partition.log.log_start_offset,
                )

    def remove_expired_producers(self, now: int | None = None) -> int:
        """Kafka's periodic producer expiration check over every partition; returns how many
        producer ids were dropped."""
        now = now_ms() if now is None else now
        removed = sum(partition.log.producer_state.remove_expired(now) for partition in self.partitions.values())
        if removed:
            log.info("producer_ids_expired", count=removed)
        return removed

    def _ensure_partitions(self, topic: TopicMetadata) -> None:
        config = self.config.log_config(topic.configs)
        for index in range(topic.partitions):
            if (topic.name, index) not in self.partitions:
                partition_log = self.logs.get_or_create(topic.name, index, config)
                self.partitions[(topic.name, index)] = Partition(topic.name, index, partition_log)
        metrics.PARTITIONS.set(len(self.partitions))

    def create_topic(
        self, name: str, partitions: int, configs: dict[str, Any], *, internal: bool = False
    ) -> TopicMetadata:
        topic = self.metadata.create_topic(name, partitions, configs, internal=internal)
        self._ensure_partitions(topic)
        log.info("topic_created", topic=name, partitions=partitions, configs=configs)
        return topic

    def add_partitions(self, name: str, count: int) -> TopicMetadata:
        topic = self.metadata.add_partitions(name, count)
        self._ensure_partitions(topic)
        log.info("partitions_created", topic=name, partitions=count)
        return topic

    def delete_topic(self, name: str) -> None:
        topic = self.metadata.delete_topic(name)
        for index in range(topic.partitions):
            partition = self.partitions.pop((name, index), None)
            if partition is not None:
                self.flusher.forget(partition)
                partition.fail_waiters(PartitionDeletedError(f"{name}-{index} was deleted"))
                self.logs.delete_partition(name, index)
        metrics.PARTITIONS.set(len(self.partitions))
        log.info("topic_deleted", topic=name)

    def append(self, partition: Partition, records: bytes, timestamp_ms: int | None = None) -> AppendInfo:
        """Append to a partition's log and schedule the group-commit flush that commits it."""
        info = partition.log.append(records, leader_epoch=partition.leader_epoch,
                                    now_ms=now_ms() if timestamp_ms is None else timestamp_ms,
                                    producer_id_end=self.metadata.producer_id_end)
        if not info.duplicate:
            self.flusher.mark_dirty(partition)
        return info

    def topic(self, name: str) -> TopicMetadata | None:
        return self.metadata.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None:
        return self.metadata.by_id(topic_id)

    def resolve_topic(self, name: str | None, topic_id: uuid.UUID | None) -> tuple[TopicMetadata | None, ErrorCode]:
        """The topic a request names, by id (newer versions) or by name, and the error for a miss."""
        if topic_id is not None:
            topic = self.metadata.by_id(topic_id)
            return topic, ErrorCode.none if topic else ErrorCode.unknown_topic_id
        topic = self.metadata.get(name) if name is not None else None
        return topic, ErrorCode.none if topic else ErrorCode.unknown_topic_or_partition

    def partition(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get((topic, index))
