"""The coordinator's writer over a replicated offsets partition: a commit appended under a
leadership that ends before the high watermark passes it is never acknowledged as committed,
however many appends share the leadership's wait and whichever of them commit first."""

from __future__ import annotations

import asyncio

import pytest

from tidemark.broker.config import BrokerConfig
from tidemark.broker.coordinator_io import LogPartitionWriter
from tidemark.coordinator.result import OffsetsRecord
from tidemark.log import AppendOrigin, LogConfig, LogManager
from tidemark.records.compression import CompressionType
from tidemark.records.offsets_schema import (
    OFFSETS_TOPIC,
    OffsetCommitKey,
    OffsetCommitValue,
    encode_key,
    encode_offset_commit_value,
)
from tidemark.replication.errors import NotLeaderOrFollowerError
from tidemark.replication.partition import Partition

NOW = 1_700_000_000_000
LEADER, FOLLOWER = 1, 2


class Replicas:
    """The PartitionManager's append, without a flusher (the follower's fetches move the high
    watermark: its own end counts once appended while the follower is in sync)."""

    def append(self, partition: Partition, records: bytes, *, origin: AppendOrigin = AppendOrigin.CLIENT):
        info = partition.log.append(records, leader_epoch=partition.leader_epoch, now_ms=NOW, origin=origin)
        partition.appended()
        return info

    def topic(self, name: str):
        return None


def _record(offset: int) -> OffsetsRecord:
    key = OffsetCommitKey("g", "t", 0)
    return OffsetsRecord(encode_key(key), encode_offset_commit_value(OffsetCommitValue(offset, commit_timestamp=NOW)),
                         None)


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def _leading_writer(tmp_path):
    """An offsets partition this broker leads in epoch 1 with one follower in sync, and its writer."""
    logs = LogManager(tmp_path, LogConfig(), replicated=True)
    partition = Partition(OFFSETS_TOPIC, 0, logs.get_or_create(OFFSETS_TOPIC, 0), local_id=LEADER)
    partition.become_leader(1, (LEADER, FOLLOWER), frozenset({LEADER, FOLLOWER}), 0, NOW)
    config = BrokerConfig({"zookeeper.connect": "127.0.0.1:1"})
    return logs, partition, LogPartitionWriter(config, Replicas(), partition, CompressionType(0), 1 << 20)

@pytest.mark.parametrize("committed_first", [0, 1, 2])
def test_a_leadership_ending_under_appends_fails_the_wait_for_the_uncommitted_ones(tmp_path, committed_first):
    """Three appends; the follower has the first `committed_first` of them when this broker
    stops leading: waiting for the last one fails with NOT_LEADER_OR_FOLLOWER, never succeeds
    on a later leader's high watermark."""
    async def scenario() -> None:
        logs, partition, writer = _leading_writer(tmp_path)
        ends = [writer.append([_record(i)], NOW) for i in range(3)]
        assert ends == [1, 2, 3]
        if committed_first:
            partition.follower_fetched(FOLLOWER, committed_first, NOW)
            await _settle()  # the leadership's wait for what committed completes, and watches on
            assert partition.high_watermark == committed_first
        waiting = writer.wait_for_high_watermark(3)
        partition.become_follower(FOLLOWER, 2, (LEADER, FOLLOWER), frozenset({LEADER, FOLLOWER}), 1)
        await _settle()
        partition.leader_high_watermark(3)  # the new leader's high watermark passes the offsets
        with pytest.raises(NotLeaderOrFollowerError):
            await asyncio.wait_for(waiting, 30)
        logs.close()

    asyncio.run(scenario())


def test_appends_after_a_committed_round_are_watched_too(tmp_path):
    """The first append commits on its own; two more follow, and the leadership ends: the
    replay's next wait fails (it may not take them as committed)."""
    async def scenario() -> None:
        logs, partition, writer = _leading_writer(tmp_path)
        writer.append([_record(0)], NOW)
        partition.follower_fetched(FOLLOWER, 1, NOW)
        await writer.wait_for_high_watermark(1)
        await _settle()
        writer.append([_record(1)], NOW)
        writer.append([_record(2)], NOW)
        partition.become_follower(FOLLOWER, 2, (LEADER, FOLLOWER), frozenset({LEADER, FOLLOWER}), 1)
        await _settle()
        partition.leader_high_watermark(3)
        with pytest.raises(NotLeaderOrFollowerError):
            await asyncio.wait_for(writer.wait_for_high_watermark(3), 30)
        logs.close()

    asyncio.run(scenario())
