"""Topics and the partitions this broker hosts: creation, deletion, lookup, appends.

It maps topics to the partitions of this one broker and appends through them (no replication:
Kafka's ReplicaManager would also fetch from leaders and track ISRs). It owns the logs (through
the LogManager, which runs retention, checkpoints and the cleaner), the partition objects that
produce and fetch go through, and the group-commit flusher. The broker calls it `replicas`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import structlog
from kio.schema.errors import ErrorCode

from tidemark import metrics
from tidemark.replication.errors import NotLeaderOrFollowerError
from tidemark.replication.fetch_sessions import FetchSessionCache
from tidemark.replication.flusher import Flusher
from tidemark.replication.partition import Partition
from tidemark.cluster.embedded import EmbeddedMetadata, TopicMetadata
from tidemark.log.config import CleanerConfig, LogConfig
from tidemark.log.unified_log import AppendInfo, AppendOrigin, UnifiedLog
from tidemark.log.manager import LogManager
from tidemark.records import BatchHeader

log = structlog.get_logger("tidemark.partition_manager")


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclasses.dataclass(frozen=True)
class PartitionManagerConfig:
    """What the partition manager needs of the broker's settings, built once by the broker."""

    node_id: int
    replicated: bool  # the logs are a ZooKeeper cluster's replicas (zookeeper.connect is set)
    # A topic's LogConfig: its overrides (as the metadata holds them now) over the broker's
    # defaults; asked again whenever a topic's configs change.
    log_config: Callable[[Mapping[str, Any]], LogConfig]
    cleaner: CleanerConfig
    retention_check_interval_ms: int  # log.retention.check.interval.ms
    producer_id_expiration_check_interval_ms: int  # producer.id.expiration.check.interval.ms
    high_watermark_checkpoint_interval_ms: int  # replica.high.watermark.checkpoint.interval.ms
    replica_flush_interval_ms: int  # tidemark.replica.flush.interval.ms
    flush_threads: int = 1  # tidemark.log.flush.threads


class PartitionManager:
    def __init__(self, config: PartitionManagerConfig, data_dir: Path) -> None:
        self.config = config
        self.data_dir = data_dir
        self.metadata: EmbeddedMetadata  # loaded by open(), under the data directory's lock
        self.logs = LogManager(data_dir, config.log_config({}), cleaner_config=config.cleaner,
                               retention_check_interval_ms=config.retention_check_interval_ms,
                               producer_id_expiration_check_interval_ms=config.producer_id_expiration_check_interval_ms,
                               high_watermark_checkpoint_interval_ms=config.high_watermark_checkpoint_interval_ms,
                               replicated=config.replicated)
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.flusher = Flusher(config.replica_flush_interval_ms, config.flush_threads)
        self.fetch_sessions = FetchSessionCache()  # followers' incremental fetches of partitions led here
        self._deleted_listeners: list[Callable[[str], None]] = []

    def open(self, metadata: Callable[[], Any] | None = None) -> None:
        """Recover every log on disk and attach it to a known topic's partition hosted here.
        `metadata` makes the topic registry (a ZooKeeper cluster's); by default the embedded one."""
        def config_for(topic_name: str) -> LogConfig:
            topic = self.metadata.get(topic_name)
            return self.config.log_config(topic.configs if topic else {})

        started = time.perf_counter()
        self.logs.lock()  # before the metadata file is read or created
        self.metadata = metadata() if metadata is not None else EmbeddedMetadata(self.data_dir, self.config.node_id)
        self.logs.open(config_for=config_for)
        last_run = {"new_data_dir": True} if self.logs.new_directory else {"clean_shutdown": self.logs.clean_shutdown}
        log.info("logs_loaded", logs=len(self.logs.logs()), seconds=round(time.perf_counter() - started, 3), **last_run)
        for (topic_name, index), partition_log in self.logs.logs().items():
            topic = self.metadata.get(topic_name)
            if topic is None or index >= topic.partitions or not topic.hosted_by(self.config.node_id, index):
                log.warning("orphan_log_removed", topic=topic_name, partition=index)
                self.logs.delete_partition(topic_name, index)
                continue
            self.partitions[(topic_name, index)] = self._partition(topic, index, partition_log)
        for topic in self.metadata.topics.values():
            self._ensure_partitions(topic)
        metrics.PARTITIONS.set(len(self.partitions))

    def start(self) -> None:
        self.flusher.start()
        self.logs.start()

    async def close(self) -> None:
        # Writes still waiting for replication are not this broker's to acknowledge any more.
        for (topic, index), partition in self.partitions.items():
            partition.fail_waiters(NotLeaderOrFollowerError(f"{topic}-{index}: the broker is stopping"))
        await self.logs.stop()
        await self.flusher.stop()
        self.logs.close()

    def _partition(self, topic: TopicMetadata, index: int, partition_log: UnifiedLog) -> Partition:
        """A hosted partition: on one broker its leader; in a cluster without a role until the
        cluster's view names its leader."""
        clustered = topic.replica_assignment is not None
        partition = Partition(topic.name, index, partition_log, leader_epoch=-1 if clustered else 0,
                              local_id=self.config.node_id)
        partition.change_listener = self.fetch_sessions.partition_changed
        if clustered:  # no leader at epoch -1: any epoch the controller names is above it
            partition.become_follower(None, -1, topic.replica_assignment[index], frozenset(), -1)
        return partition

    def _ensure_partitions(self, topic: TopicMetadata) -> None:
        config = self.config.log_config(topic.configs)
        for index in range(topic.partitions):
            if (topic.name, index) not in self.partitions and topic.hosted_by(self.config.node_id, index):
                partition_log = self.logs.get_or_create(topic.name, index, config)
                self.partitions[(topic.name, index)] = self._partition(topic, index, partition_log)
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

    def set_topic_configs(self, name: str, configs: dict[str, Any]) -> TopicMetadata:
        """Replace a topic's overrides: persisted first, then applied to its live logs at once."""
        topic = self.metadata.set_topic_configs(name, configs)
        self.apply_topic_configs(topic)
        log.info("topic_configs_altered", topic=name, configs=configs)
        return topic

    def apply_topic_configs(self, topic: TopicMetadata) -> None:
        """A topic's overrides as the metadata now holds them, applied to its live logs."""
        config = self.config.log_config(topic.configs)
        for index in range(topic.partitions):
            partition = self.partitions.get((topic.name, index))
            if partition is not None:
                partition.log.config = config

    async def delete_records(self, partition: Partition, offset: int) -> int:
        """DeleteRecords (and a follower following its leader's log start): move the log start
        offset up to `offset` and checkpoint it, on the LogManager's disk thread, before the
        answer, so deleted records never come back after a crash; returns the low watermark."""
        before = partition.log.log_start_offset
        low_watermark = partition.log.delete_records_before(offset)
        if low_watermark != before:
            await self.logs.checkpoint_async()
        return low_watermark

    async def sync_truncations(self, partitions: list[Partition]) -> list[BaseException | None]:
        """A follower's truncations made durable before it fetches on, nothing on the event
        loop: the logs on the flusher's disk thread (what each failed with, or None), and the
        lowered recovery points checkpointed on the LogManager's (so the next roll need not
        wait for that write)."""
        errors, _ = await asyncio.gather(self.flusher.sync_truncations(partitions),
                                         self.logs.truncations_checkpointed())
        return errors

    def host(self, topic: TopicMetadata) -> None:
        """A cluster topic new or grown: create the logs of its partitions assigned here."""
        self._ensure_partitions(topic)

    def delete_topic(self, name: str) -> None:
        topic = self.metadata.delete_topic(name)
        self.remove_local_topic(name, topic.partitions)

    def remove_local_topic(self, name: str, partitions: int | None = None) -> None:
        """A deleted topic's partitions leave this broker: waiters fail, logs are deleted."""
        count = partitions if partitions is not None else 1 + max(
            (index for (topic, index) in self.partitions if topic == name), default=-1)
        for index in range(count):
            partition = self.partitions.pop((name, index), None)
            if partition is not None:
                self.flusher.forget(partition)
                # Kafka answers a produce waiting on a deleted partition NOT_LEADER_OR_FOLLOWER.
                partition.fail_waiters(NotLeaderOrFollowerError(f"{name}-{index} was deleted"))
                self.logs.delete_partition(name, index)
        metrics.PARTITIONS.set(len(self.partitions))
        log.info("topic_deleted", topic=name)
        for listener in self._deleted_listeners:
            listener(name)

    def on_topic_deleted(self, listener: Callable[[str], None]) -> None:
        """Call `listener(topic)` after a topic is deleted (the coordinator resigns its shards)."""
        self._deleted_listeners.append(listener)

    def append(self, partition: Partition, records: bytes, timestamp_ms: int | None = None, *,
               origin: AppendOrigin = AppendOrigin.CLIENT, checked: BatchHeader | None = None) -> AppendInfo:
        """Append to a partition's log and schedule its flush (`schedule_flush`); `origin`
        COORDINATOR for batches this broker built, `checked` the header the produce validator
        checked (see UnifiedLog.append)."""
        info = partition.log.append(records, leader_epoch=partition.leader_epoch,
                                    now_ms=now_ms() if timestamp_ms is None else timestamp_ms,
                                    producer_id_end=self.metadata.producer_id_end, origin=origin,
                                    checked=checked)
        if not info.duplicate:
            self.schedule_flush(partition)
            partition.appended()
        return info

    def schedule_flush(self, partition: Partition) -> None:
        """Flush a leader's partition as its ISR asks: in the next round while it is alone in the
        ISR (its own end counts only once durable), within tidemark.replica.flush.interval.ms
        while followers are in sync. Called on every append and whenever the ISR or the
        leadership changes, so a leader left alone flushes at once what it appended before."""
        if partition.has_in_sync_followers:
            self.flusher.mark_replicated(partition)
        else:
            self.flusher.mark_dirty(partition)

    def append_as_follower(self, partition: Partition, records: bytes) -> AppendInfo:
        """Append a leader's batches as they are (offsets and epochs kept), flushed within
        tidemark.replica.flush.interval.ms."""
        info = partition.log.append_as_follower(records, now_ms=now_ms())
        self.flusher.mark_replicated(partition)
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

    def has_partition(self, topic: str, index: int) -> bool:
        """Whether the topic has this partition (in a cluster, on whichever broker)."""
        metadata = self.metadata.get(topic)
        return metadata is not None and 0 <= index < metadata.partitions

    def absent_code(self, topic: str, index: int) -> ErrorCode:
        """The error for a partition this broker has no replica of: NOT_LEADER_OR_FOLLOWER if the
        cluster has it (clients refresh metadata and go to its leader), else unknown."""
        return ErrorCode.not_leader_or_follower if self.has_partition(topic, index) \
            else ErrorCode.unknown_topic_or_partition

    def leader_partition(self, topic: str, index: int) -> tuple[Partition | None, ErrorCode]:
        """The partition if this broker leads it, else None and the error to answer."""
        partition = self.partitions.get((topic, index))
        if partition is None:
            return None, self.absent_code(topic, index)
        if not partition.is_leader:
            return None, ErrorCode.not_leader_or_follower
        return partition, ErrorCode.none
