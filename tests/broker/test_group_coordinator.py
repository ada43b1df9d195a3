"""The coordinator runtime in-process: a commit is released only once its records are durable."""

from __future__ import annotations

import asyncio

from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from tidemark.broker.config import BrokerConfig
from tidemark.broker.server import Broker
from tidemark.wire.build import build


def _commit_request(offset: int):
    return build(load_request_schema(8, 8), {
        "group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                 "committed_leader_epoch": -1, "committed_metadata": ""}]}]})


async def _commit(broker: Broker, offset: int) -> ErrorCode:
    response = await broker.coordinator.call(
        "g", lambda shard, token, now: shard.commit_offsets(_commit_request(offset), 8, token, now),
        lambda code: {"topics": [{"partitions": [{"error_code": code}]}]})
    return response["topics"][0]["partitions"][0]["error_code"]


def _fetched(broker: Broker) -> int:
    topics = broker.coordinator.read("g", lambda shard: shard.fetch_offsets("g", [("t", [0])], False), None)
    return topics[0]["partitions"][0]["committed_offset"]


async def _until_loaded(broker: Broker) -> None:
    broker.coordinator.ensure_offsets_topic()
    for _ in range(200):
        if all(shard.state.value == "active" for shard in broker.coordinator.shards.values()):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("offsets partitions never finished loading")


def test_commit_times_out_without_trace_then_succeeds_once_durable(tmp_path):
    async def scenario() -> None:
        config = BrokerConfig({"offsets.commit.timeout.ms": "200", "offsets.topic.num.partitions": "1"})
        broker = Broker(config, tmp_path, port=0)
        await broker.start()
        try:
            broker.replicas.create_topic("t", 1, {})
            await _until_loaded(broker)
            flusher = broker.replicas.flusher
            mark_dirty = flusher.mark_dirty
            flusher.mark_dirty = lambda partition: None  # appends never become durable
            assert await _commit(broker, 41) == ErrorCode.request_timed_out
            assert _fetched(broker) == -1  # the timed-out commit left no trace in the cache
            flusher.mark_dirty = mark_dirty
            assert await _commit(broker, 42) == ErrorCode.none
            assert _fetched(broker) == 42
        finally:
            await broker.stop()

    asyncio.run(asyncio.wait_for(scenario(), timeout=30))
