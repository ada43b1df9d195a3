"""A deleted topic's committed offsets: tombstoned by every active shard (Kafka's
onPartitionsDeleted), so a topic created again under the name starts without them."""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode

from tests.coordinator.test_shard import commit_request
from tidemark.coordinator.shard import CoordinatorConfig, GroupCoordinatorShard
from tidemark.records.offsets_schema import OffsetCommitKey, decode_key

from .memory_log import NOW, InMemoryLog

TOPICS = {("orders", 0), ("orders", 1), ("payments", 0)}


def new_shard() -> GroupCoordinatorShard:
    return GroupCoordinatorShard(0, CoordinatorConfig(), lambda topic, partition: (topic, partition) in TOPICS)


def tombstones(result):
    return [decode_key(r.key) for r in result.records if r.value is None]


def test_every_groups_offsets_of_the_topic_are_tombstoned_and_stay_gone():
    shard, log = new_shard(), InMemoryLog()
    log.append_and_replay(shard, shard.commit_offsets(
        commit_request("a", {"orders": [(0, 5), (1, 6)], "payments": [(0, 7)]}), 8, 1, NOW))
    log.append_and_replay(shard, shard.commit_offsets(commit_request("b", {"orders": [(1, 9)]}), 8, 2, NOW))
    result = shard.delete_topic_offsets(["orders"])
    assert tombstones(result) == [OffsetCommitKey("a", "orders", 0), OffsetCommitKey("a", "orders", 1),
                                  OffsetCommitKey("b", "orders", 1)]
    assert shard.offsets.get("a", ("orders", 0)) is not None  # nothing changes before replay
    log.append_and_replay(shard, result)
    assert set(shard.offsets.group_offsets("a")) == {("payments", 0)}  # other topics untouched
    assert shard.offsets.group_offsets("b") == {}
    fresh = new_shard()
    log.replay_into(fresh)  # a restart does not bring them back
    assert set(fresh.offsets.group_offsets("a")) == {("payments", 0)} and fresh.offsets.group_offsets("b") == {}
    assert shard.delete_topic_offsets(["orders"]).records == []  # nothing left: nothing written


def test_a_commit_in_flight_when_the_topic_goes_is_tombstoned_after_it():
    shard, log = new_shard(), InMemoryLog()
    in_flight = shard.commit_offsets(commit_request("a", {"orders": [(0, 5)]}), 8, 1, NOW)
    first = log.append_pending(shard, in_flight)
    deleted = shard.delete_topic_offsets(["orders"])
    assert tombstones(deleted) == [OffsetCommitKey("a", "orders", 0)]
    log.commit_from(shard, first, in_flight)  # appended first, so replayed first
    log.append_and_replay(shard, deleted)
    assert shard.offsets.group_offsets("a") == {}


def test_runtime_appends_the_tombstones_on_every_active_shard_before_answering(coordinator_harness):
    async def scenario(h):
        await h.start()
        assert h.commit_code(await h.commit(41, group="g")) == ErrorCode.none
        assert h.commit_code(await h.commit(42, group="other", partition=1)) == ErrorCode.none
        h.writer.auto_commit = False  # a commit in flight when the topic is deleted
        in_flight = asyncio.ensure_future(h.commit(43, group="g", partition=1))
        await h.settle()
        deleting = asyncio.ensure_future(h.coordinator.on_topics_deleted(["orders"]))
        await h.settle()
        assert not deleting.done()  # done only once the tombstones are committed
        h.writer.commit()
        await h.settle()
        assert deleting.done() and h.commit_code(in_flight.result()) == ErrorCode.none
        assert [await h.fetch("g", 0), await h.fetch("g", 1), await h.fetch("other", 1)] == [(ErrorCode.none, -1)] * 3
        assert [decode_key(key) for key, value in h.writer.records[-3:] if value is None] == [
            OffsetCommitKey("g", "orders", 0), OffsetCommitKey("g", "orders", 1),
            OffsetCommitKey("other", "orders", 1)]

    coordinator_harness(scenario)


def test_inactive_shards_and_the_offsets_topic_itself_are_left_alone(coordinator_harness):
    async def scenario(h):
        await h.start()
        assert h.commit_code(await h.commit(41)) == ErrorCode.none
        written = len(h.writer.records)
        await h.coordinator.on_topics_deleted(["__consumer_offsets"])
        h.shard.resigned(0)
        await h.coordinator.on_topics_deleted(["orders"])  # no shard active: nothing to write
        assert len(h.writer.records) == written

    coordinator_harness(scenario)
