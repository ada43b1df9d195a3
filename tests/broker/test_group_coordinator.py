"""The coordinator runtime in a real broker, in-process: its partitions are the broker's own logs;
a commit is released only once its records are durable, a failed append reaches the client as
the coordinator error Kafka answers, and deleting the offsets topic resigns every shard."""

from __future__ import annotations

import asyncio

import pytest
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from tests.broker.inprocess import HeldFlusher, running_broker, until
from tests.coordinator.conftest import commit_code, offset_commit
from tidemark.broker.config import BrokerConfig
from tidemark.broker.errors import (
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    PartitionDeletedError,
)
from tidemark.broker.coordinator_io import LogOffsetsTopic
from tidemark.broker.server import partition_manager_config
from tidemark.coordinator.group_coordinator import GroupCoordinator, LoadState
from tidemark.records.offsets_schema import OFFSETS_TOPIC
from tidemark.replication.partition_manager import PartitionManager
from tidemark.log.errors import LogOfflineError
from tidemark.records.errors import RecordListTooLargeError, RecordTooLargeError
from tidemark.wire.build import build
from tidemark.wire.api_keys import ApiKey

SETTINGS = {"offsets.topic.num.partitions": "1"}


def _commit_request(offset: int):
    return build(load_request_schema(ApiKey.OFFSET_COMMIT, 8), {
        "group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                 "committed_leader_epoch": -1, "committed_metadata": ""}]}]})


async def _commit(coordinator: GroupCoordinator, offset: int) -> ErrorCode:
    response = await coordinator.call(
        "g", lambda shard, token, now: shard.commit_offsets(_commit_request(offset), 8, token, now),
        lambda code: {"topics": [{"partitions": [{"error_code": code}]}]})
    return response["topics"][0]["partitions"][0]["error_code"]


async def _fetched(coordinator: GroupCoordinator) -> int:
    topics = await coordinator.read("g", lambda shard: shard.fetch_offsets("g", [("t", [0])], False), None)
    return topics[0]["partitions"][0]["committed_offset"]


async def _until_loaded(coordinator: GroupCoordinator) -> None:
    coordinator.ensure_offsets_topic()
    await until(lambda: all(shard.state.value == "active" for shard in coordinator.shards.values()))


def test_commit_times_out_without_trace_then_succeeds_once_durable(tmp_path):
    async def scenario() -> None:
        # Held appends never become durable: the commit times out whatever the timeout is.
        async with running_broker(tmp_path, {**SETTINGS, "offsets.commit.timeout.ms": "200"}) as broker:
            broker.replicas.create_topic("t", 1, {})
            await _until_loaded(broker.coordinator)
            broker.replicas.flusher.holding = True
            assert await _commit(broker.coordinator, 41) == ErrorCode.request_timed_out
            assert await _fetched(broker.coordinator) == -1  # the timed-out commit left no trace in the cache
        # Kafka's default offsets.commit.timeout.ms, nothing held: the next commit is acknowledged.
        async with running_broker(tmp_path, SETTINGS) as broker:
            await _until_loaded(broker.coordinator)
            assert await _commit(broker.coordinator, 42) == ErrorCode.none
            assert await _fetched(broker.coordinator) == 42

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))


class FailingReplicas(PartitionManager):
    """The offsets topic's appends raise `failure` while it is set (an injected storage/replication fault)."""

    failure: BaseException | None = None

    def append(self, partition, records, timestamp_ms=None, **kwargs):
        if self.failure is not None and partition.topic == OFFSETS_TOPIC:
            raise self.failure
        return super().append(partition, records, timestamp_ms, **kwargs)


@pytest.mark.parametrize(("failure", "code"), [
    (NotEnoughReplicasError(), ErrorCode.coordinator_not_available),
    (NotEnoughReplicasAfterAppendError(), ErrorCode.coordinator_not_available),
    (PartitionDeletedError(), ErrorCode.coordinator_not_available),
    (NotLeaderOrFollowerError(), ErrorCode.not_coordinator),
    (LogOfflineError("fsync failed"), ErrorCode.not_coordinator),
    (OSError("disk full"), ErrorCode.not_coordinator),
    (RecordTooLargeError("too large"), ErrorCode.invalid_commit_offset_size),
    (RecordListTooLargeError("too large"), ErrorCode.invalid_commit_offset_size),
], ids=lambda value: type(value).__name__ if isinstance(value, BaseException) else value.name)
def test_append_failure_maps_to_the_coordinator_code_and_leaves_no_trace(tmp_path, failure, code):
    async def scenario() -> None:
        config = BrokerConfig(SETTINGS)
        replicas = FailingReplicas(partition_manager_config(config), tmp_path)
        replicas.open()
        replicas.start()
        coordinator = GroupCoordinator(config, topic=LogOffsetsTopic(config, replicas))
        coordinator.start()
        try:
            replicas.create_topic("t", 1, {})
            await _until_loaded(coordinator)
            replicas.failure = failure
            assert await _commit(coordinator, 7) == code
            assert await _fetched(coordinator) == -1
            replicas.failure = None  # the shard keeps serving once appends work again
            assert await _commit(coordinator, 8) == ErrorCode.none
            assert await _fetched(coordinator) == 8
        finally:
            await coordinator.stop()
            await replicas.close()

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))


def test_flush_failure_after_the_append_answers_not_coordinator(tmp_path):
    async def scenario() -> None:
        async with running_broker(tmp_path, SETTINGS) as broker:
            broker.replicas.create_topic("t", 1, {})
            coordinator = broker.coordinator
            await _until_loaded(coordinator)
            flusher: HeldFlusher = broker.replicas.flusher
            flusher.holding = True
            commit = asyncio.ensure_future(_commit(coordinator, 9))
            await until(lambda: flusher.held)  # appended, waiting for its fsync
            (partition,) = flusher.held.values()
            partition.fail_waiters(LogOfflineError("fsync failed"))  # what the flusher does on EIO
            assert await commit == ErrorCode.not_coordinator
            assert await _fetched(coordinator) == -1

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))


async def _fetched_or_error(coordinator: GroupCoordinator) -> tuple[ErrorCode, int]:
    return await coordinator.read(
        "g", lambda shard: (ErrorCode.none, shard.fetch_offsets("g", [("orders", [0])], False)[0]["partitions"][0]
                            ["committed_offset"]), lambda code: (code, -1))


def _all_active(coordinator: GroupCoordinator) -> bool:
    return bool(coordinator.shards) and all(runtime.state is LoadState.ACTIVE for runtime in coordinator.shards.values())


def test_deleting_the_offsets_topic_resigns_every_shard(tmp_path):
    async def scenario() -> None:
        async with running_broker(tmp_path, {"offsets.topic.num.partitions": "2"}) as broker:
            broker.replicas.create_topic("orders", 1, {})
            broker.coordinator.ensure_offsets_topic()
            await until(lambda: _all_active(broker.coordinator))
            assert commit_code(await offset_commit(broker.coordinator, 41)) == ErrorCode.none
            assert await _fetched_or_error(broker.coordinator) == (ErrorCode.none, 41)
            broker.replicas.delete_topic(OFFSETS_TOPIC)
            assert {runtime.state for runtime in broker.coordinator.shards.values()} == {LoadState.UNLOADED}
            assert await _fetched_or_error(broker.coordinator) == (ErrorCode.not_coordinator, -1)
            assert commit_code(await offset_commit(broker.coordinator, 42)) == ErrorCode.not_coordinator
            broker.coordinator.ensure_offsets_topic()  # FindCoordinator creates it again
            await until(lambda: _all_active(broker.coordinator))
            assert await _fetched_or_error(broker.coordinator) == (ErrorCode.none, -1)  # a fresh, empty partition

    asyncio.run(asyncio.wait_for(scenario(), timeout=30))
