"""The group coordinator: the coordinator runtime driving one group shard (shard.py) per
`__consumer_offsets` partition (Kafka's GroupCoordinatorService over CoordinatorRuntime)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import structlog
from kio.schema.errors import ErrorCode

from tidemark.coordinator.consumer_group import views as consumer_group_views
from tidemark.coordinator.consumer_group.heartbeat import ConsumerGroupConfig
from tidemark.coordinator.group_views import list_groups
from tidemark.coordinator.rebalance import GroupConfig
from tidemark.coordinator.runtime import Clock, CoordinatorRuntime, CoordinatorTopic, LoadState, ShardNotAvailable
from tidemark.coordinator.shard import CoordinatorConfig, GroupCoordinatorShard
from tidemark.records.offsets_schema import OFFSETS_TOPIC

log = structlog.get_logger("tidemark.group_coordinator")

__all__ = ["OFFSETS_TOPIC", "GroupCoordinator", "LoadState"]


class GroupCoordinator(CoordinatorRuntime[GroupCoordinatorShard]):
    """All offsets partitions this broker leads (on one broker: all of them)."""

    def __init__(self, config: Mapping[str, Any], *, topic: CoordinatorTopic, clock: Clock | None = None) -> None:
        self.shard_config = CoordinatorConfig(
            offset_metadata_max_bytes=config["offset.metadata.max.bytes"],
            retention_check_interval_ms=config["offsets.retention.check.interval.ms"],
            retention_ms=config["offsets.retention.minutes"] * 60_000,
            group=GroupConfig(
                min_session_timeout_ms=config["group.min.session.timeout.ms"],
                max_session_timeout_ms=config["group.max.session.timeout.ms"],
                initial_rebalance_delay_ms=config["group.initial.rebalance.delay.ms"],
                max_size=config["group.max.size"],
            ),
            consumer=ConsumerGroupConfig(
                session_timeout_ms=config["group.consumer.session.timeout.ms"],
                heartbeat_interval_ms=config["group.consumer.heartbeat.interval.ms"],
                max_size=config["group.consumer.max.size"],
                assignors=tuple(config["group.consumer.assignors"]),
                migration_policy=config["group.consumer.migration.policy"],
            ),
        )
        super().__init__(OFFSETS_TOPIC, config, topic,
                         lambda index: GroupCoordinatorShard(index, self.shard_config, topic.partition_exists,
                                                              getattr(topic, "topic_partitions", None)),
                         config["offsets.topic.num.partitions"], clock)

    async def on_topics_deleted(self, topics: list[str]) -> None:
        """Deleted topics: every active shard tombstones their offsets as one event (Kafka's
        onPartitionsDeleted), done once those records are committed or have failed. A shard not
        active keeps them (as in Kafka), for retention to expire."""
        topics = [topic for topic in topics if topic != OFFSETS_TOPIC]  # that one unloads the shards
        events = [runtime.submit(lambda shard, now: shard.delete_topic_offsets(topics))
                  for runtime in self.shards.values() if topics and runtime.state is LoadState.ACTIVE]
        for outcome in await asyncio.gather(*events, return_exceptions=True):
            if isinstance(outcome, BaseException):
                log.warning("offsets_of_deleted_topic_kept", topics=topics, error=repr(outcome))

    async def complete_transaction(self, partition_index: int, producer_id: int, producer_epoch: int,
                                   committed: bool, coordinator_epoch: int) -> ErrorCode:
        """A transaction marker for one offsets partition (WriteTxnMarkers): written through its
        shard, answered once committed; the shard's state code if it is not active here."""
        runtime = self.shards.get(partition_index)
        if runtime is None:
            return ErrorCode.not_coordinator
        token, response = self.new_token()
        try:
            try:
                handled = runtime.submit(lambda shard, now: shard.complete_transaction(
                    producer_id, producer_epoch, committed, coordinator_epoch, token))
                await handled
            except ShardNotAvailable as exc:
                response.cancel()
                return exc.code
            return await response
        finally:
            self.forget_token(token)

    def list_groups(self, body: Any, version: int) -> tuple[list[dict[str, Any]], ErrorCode]:
        """ListGroups across every loaded shard, from their committed views: (groups, NONE), or
        while any shard this broker leads is not loaded ([], COORDINATOR_LOAD_IN_PROGRESS): Kafka
        answers only the error then, not a partial list."""
        self.ensure_offsets_topic()
        groups: list[dict[str, Any]] = []
        error = ErrorCode.none
        for runtime in self.shards.values():
            if runtime.state is LoadState.ACTIVE and runtime.shard is not None:
                groups.extend(list_groups(runtime.shard.groups, body, version)["groups"])
                groups.extend(consumer_group_views.list_entries(runtime.shard.consumer_groups.committed, body))
            elif runtime.leading:  # loading, or failed and retrying; the others are not ours
                error = ErrorCode.coordinator_load_in_progress
        return ([], error) if error is not ErrorCode.none else (groups, error)
