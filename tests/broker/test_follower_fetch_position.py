"""A leader learns where a follower's log ends from its fetches, but only from a fetch whose read
succeeded (Kafka's ReplicaManager skips the update when the read fails): a fetch from past the
leader's log end, or of an offline log, must neither move the high watermark nor bring the
follower back into the ISR."""

from __future__ import annotations

import asyncio
import contextlib

from kio.schema.errors import ErrorCode

from tests.integration.raw import AsyncRawClient
from tidemark.broker.config import BrokerConfig
from tidemark.broker.server import Broker
from tidemark.records import build_batch

NOW = 1_700_000_000_000
LEADER, FOLLOWER = 1, 2
PRODUCE, FETCH = 0, 1


@contextlib.asynccontextmanager
async def leading(tmp_path, isr: frozenset[int]):
    """Broker 1 leading t-0 at epoch 1 (replicas 1 and 2) with three records, and a client."""
    broker = Broker(BrokerConfig({"node.id": str(LEADER)}), tmp_path / "b1", port=0)
    await broker.start()
    client = None
    try:
        broker.replicas.create_topic("t", 1, {})
        partition = broker.replicas.partition("t", 0)
        partition.become_leader(1, (LEADER, FOLLOWER), isr, zk_version=0, now_ms=NOW)
        client = await AsyncRawClient.connect(broker.port)
        for i in range(3):
            response = await client.request(PRODUCE, 9, {"transactional_id": None, "acks": 1, "timeout": 30_000,
                                                         "topic_data": [{"name": "t", "partition_data": [
                                                             {"index": 0, "records": build_batch(
                                                                 [(None, b"v%d" % i, (), NOW)])}]}]})
            assert response.responses[0].partition_responses[0].error_code == ErrorCode.none
        yield partition, client
    finally:
        if client is not None:
            await client.close()
        await broker.stop()


async def _follower_fetch(client: AsyncRawClient, fetch_offset: int) -> ErrorCode:
    response = await client.request(FETCH, 12, {
        "replica_id": FOLLOWER, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "topics": [{"topic": "t", "partitions": [
            {"partition": 0, "current_leader_epoch": 1, "fetch_offset": fetch_offset, "log_start_offset": 0,
             "partition_max_bytes": 1 << 20}]}], "forgotten_topics_data": [], "rack_id": ""})
    return ErrorCode(response.responses[0].partitions[0].error_code)


def test_a_fetch_past_the_leaders_end_does_not_count_as_the_followers_position(tmp_path):
    async def scenario():
        async with leading(tmp_path, isr=frozenset({LEADER, FOLLOWER})) as (partition, client):
            assert partition.high_watermark == 0  # the follower in the ISR has fetched nothing
            assert await _follower_fetch(client, 10) == ErrorCode.offset_out_of_range
            assert partition.followers[FOLLOWER].log_end_offset == -1
            assert partition.high_watermark == 0  # records the follower never had are not committed
            assert await _follower_fetch(client, 2) == ErrorCode.none  # a read that succeeds counts
            assert partition.followers[FOLLOWER].log_end_offset == 2
            assert partition.high_watermark == 2

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))


def test_a_failed_fetch_does_not_bring_a_follower_back_into_the_isr(tmp_path):
    async def scenario():
        async with leading(tmp_path, isr=frozenset({LEADER})) as (partition, client):
            assert await _follower_fetch(client, 10) == ErrorCode.offset_out_of_range
            assert partition.isr_to_expand() is None
            assert await _follower_fetch(client, 3) == ErrorCode.none
            assert partition.isr_to_expand() == frozenset({LEADER, FOLLOWER})

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))


def test_a_fetch_of_an_offline_log_is_a_storage_error_and_not_a_position(tmp_path):
    async def scenario():
        async with leading(tmp_path, isr=frozenset({LEADER, FOLLOWER})) as (partition, client):
            partition.log.local.offline = OSError(5, "Input/output error")  # the disk failed under it
            assert await _follower_fetch(client, 3) == ErrorCode.kafka_storage_error
            assert partition.followers[FOLLOWER].log_end_offset == -1
            assert partition.high_watermark == 0

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))
