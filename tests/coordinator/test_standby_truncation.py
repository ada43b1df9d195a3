"""The offsets standby over a real replica log: it replays only what its leader confirmed (a
restarted replica's checkpointed high watermark, never its log end) and starts over when a
truncation cuts below what it replayed, also when the log is refetched past its old end before
the standby looks again."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from tests.coordinator.conftest import ManualClock
from tidemark.broker.config import BrokerConfig
from tidemark.broker.coordinator_io import LogPartitionWriter
from tidemark.coordinator.group_coordinator import OFFSETS_TOPIC, GroupCoordinator, LoadState
from tidemark.log import LogConfig, LogManager
from tidemark.records import build_batch
from tidemark.records.compression import CompressionType
from tidemark.records.offsets_schema import OffsetCommitKey, OffsetCommitValue, encode_key, encode_offset_commit_value
from tidemark.replication.partition import Partition

NOW = 1_700_000_000_000
LEADER, FOLLOWER = 1, 2


def _commit(partition: int, offset: int, base_offset: int, epoch: int = 1) -> bytes:
    """A leader's batch (as a follower fetches it) holding one offset commit of g/orders-`partition`."""
    key = encode_key(OffsetCommitKey("g", "orders", partition))
    value = encode_offset_commit_value(OffsetCommitValue(offset, commit_timestamp=NOW))
    return build_batch([(key, value, (), NOW)], base_offset=base_offset, partition_leader_epoch=epoch)


class ReplicaTopic:
    """The offsets topic as one follower broker holds it: partition 0, a real log."""

    def __init__(self, config: BrokerConfig, partition: Partition) -> None:
        self.config = config
        self.partition = partition

    def partition_count(self) -> int:
        return 1

    def create(self) -> None:
        raise AssertionError("a follower never creates the offsets topic")

    def writer(self, index: int) -> LogPartitionWriter:
        return LogPartitionWriter(self.config, None, self.partition, CompressionType(0), 1 << 20)

    def partition_exists(self, topic: str, partition: int) -> bool:
        return topic == "orders"

    def on_deleted(self, callback: Callable[[], None]) -> None:
        pass


def _follower(logs: LogManager) -> Partition:
    partition = Partition(OFFSETS_TOPIC, 0, logs.get_or_create(OFFSETS_TOPIC, 0), local_id=FOLLOWER)
    partition.become_follower(LEADER, 1, (LEADER, FOLLOWER), frozenset({LEADER, FOLLOWER}), 0)
    return partition


async def _settle() -> None:
    for _ in range(50):
        await asyncio.sleep(0)


def _committed(coordinator: GroupCoordinator) -> dict[int, int]:
    shard = coordinator.shards[0].shard
    return {tp[1]: committed.offset for tp, committed in shard.offsets.group_offsets("g").items()}


def _run(tmp_path, scenario) -> None:
    config = BrokerConfig({"offsets.topic.num.partitions": "1", "zookeeper.connect": "127.0.0.1:1"})
    logs = LogManager(tmp_path, LogConfig(), replicated=True)
    logs.open()

    async def main() -> None:
        coordinator = GroupCoordinator(config, topic=ReplicaTopic(config, None), clock=ManualClock())
        try:
            await scenario(config, logs, coordinator)
        finally:
            await coordinator.stop()

    try:
        asyncio.run(asyncio.wait_for(main(), 30))
    finally:
        logs.close()


def test_a_truncation_refetched_past_the_old_end_resets_the_standby(tmp_path):
    async def scenario(config, logs, coordinator) -> None:
        partition = _follower(logs)
        coordinator.topic.partition = partition
        log = partition.log
        log.append_as_follower(_commit(0, 10, 0))
        log.append_as_follower(_commit(0, 20, 1))
        partition.leader_high_watermark(2)
        coordinator.partition_followed(OFFSETS_TOPIC, 0, 1)
        await _settle()
        assert coordinator.shards[0].state is LoadState.STANDBY
        assert _committed(coordinator) == {0: 20}
        # An unclean leader change: the new leader never had offset 1. The follower truncates
        # below what the standby replayed, then fetches the new leader's records past the old end.
        log.truncate_to(1)
        log.append_as_follower(_commit(1, 5, 1, epoch=2))
        log.append_as_follower(_commit(1, 6, 2, epoch=2))
        partition.leader_high_watermark(3)
        await _settle()
        # What the log now holds, and nothing of the record that left it.
        assert _committed(coordinator) == {0: 10, 1: 6}

    _run(tmp_path, scenario)


def test_a_truncation_above_what_the_standby_replayed_keeps_it(tmp_path):
    async def scenario(config, logs, coordinator) -> None:
        partition = _follower(logs)
        coordinator.topic.partition = partition
        log = partition.log
        for base, offset in enumerate((10, 20, 30)):
            log.append_as_follower(_commit(0, offset, base))
        partition.leader_high_watermark(2)
        coordinator.partition_followed(OFFSETS_TOPIC, 0, 1)
        await _settle()
        runtime = coordinator.shards[0]
        shard = runtime.shard
        assert _committed(coordinator) == {0: 20}
        log.truncate_to(2)  # the uncommitted tail only (a leader change's usual truncation)
        await _settle()
        assert runtime.shard is shard and runtime.state is LoadState.STANDBY
        log.append_as_follower(_commit(0, 40, 2, epoch=2))
        partition.leader_high_watermark(3)
        await _settle()
        assert _committed(coordinator) == {0: 40}

    _run(tmp_path, scenario)


def test_a_restarted_standby_replays_only_up_to_the_checkpointed_high_watermark(tmp_path):
    """leo=4, hw was 2: after a restart the standby holds the commits below 2 only, until its
    leader confirms more."""
    first = LogManager(tmp_path, LogConfig(), replicated=True)
    first.open()
    log = first.get_or_create(OFFSETS_TOPIC, 0)
    for base, offset in enumerate((10, 20, 30, 40)):
        log.append_as_follower(_commit(0, offset, base))
    log.update_high_watermark(2)
    first.close()

    async def scenario(config, logs, coordinator) -> None:
        partition = _follower(logs)
        coordinator.topic.partition = partition
        assert (partition.log.log_end_offset, partition.high_watermark) == (4, 2)
        coordinator.partition_followed(OFFSETS_TOPIC, 0, 1)
        await _settle()
        assert _committed(coordinator) == {0: 20}
        partition.leader_high_watermark(3)
        await _settle()
        assert _committed(coordinator) == {0: 30}

    _run(tmp_path, scenario)
