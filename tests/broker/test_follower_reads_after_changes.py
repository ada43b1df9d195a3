"""On RF=3 both followers fetch every replicated write from the same position. Whatever a leader
does to answer them cheaply (sharing one read between the two was tried, see docs/design.md),
a fetch is never answered with bytes read before the log changed: an append between the two
followers' fetches, or a truncation and a new leadership that put other records at the same
offsets."""

from __future__ import annotations

import asyncio
import contextlib

from kio.schema.errors import ErrorCode

from tests.integration.raw import AsyncRawClient
from tidemark.broker.config import BrokerConfig
from tidemark.broker.server import Broker
from tidemark.records import build_batch, decode_records, iter_batches

NOW = 1_700_000_000_000
LEADER, FOLLOWERS = 1, (2, 3)
PRODUCE, FETCH = 0, 1


@contextlib.asynccontextmanager
async def leading(tmp_path):
    """Broker 1 leading t-0 at epoch 1 (replicas 1, 2, 3, all in the ISR), and a client."""
    broker = Broker(BrokerConfig({"node.id": str(LEADER)}), tmp_path / "b1", port=0)
    await broker.start()
    client = None
    try:
        broker.replicas.create_topic("t", 1, {})
        partition = broker.replicas.partition("t", 0)
        partition.become_leader(1, (LEADER, *FOLLOWERS), frozenset({LEADER, *FOLLOWERS}), zk_version=0, now_ms=NOW)
        client = await AsyncRawClient.connect(broker.port)
        yield partition, client
    finally:
        if client is not None:
            await client.close()
        await broker.stop()


async def produce(client: AsyncRawClient, value: bytes) -> None:
    response = await client.request(PRODUCE, 9, {"transactional_id": None, "acks": 1, "timeout": 30_000,
                                                 "topic_data": [{"name": "t", "partition_data": [
                                                     {"index": 0, "records": build_batch([(None, value, (), NOW)])}]}]})
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.none


async def follower_fetch(client: AsyncRawClient, replica_id: int, fetch_offset: int, epoch: int = 1) -> bytes:
    response = await client.request(FETCH, 12, {
        "replica_id": replica_id, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "topics": [{"topic": "t", "partitions": [
            {"partition": 0, "current_leader_epoch": epoch, "fetch_offset": fetch_offset, "log_start_offset": 0,
             "partition_max_bytes": 1 << 20}]}], "forgotten_topics_data": [], "rack_id": ""})
    answer = response.responses[0].partitions[0]
    assert answer.error_code == ErrorCode.none
    return bytes(answer.records or b"")


def values(records: bytes) -> list[tuple[int, bytes]]:
    return [(r.offset, r.value) for position, _ in iter_batches(records) for r in decode_records(records, position)]


def test_a_write_between_the_followers_fetches_is_read_again(tmp_path):
    async def scenario():
        async with leading(tmp_path) as (partition, client):
            await produce(client, b"a")
            assert values(await follower_fetch(client, FOLLOWERS[0], 0)) == [(0, b"a")]
            await produce(client, b"b")
            assert values(await follower_fetch(client, FOLLOWERS[1], 0)) == [(0, b"a"), (1, b"b")]

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))


def test_records_rewritten_at_the_same_offsets_under_a_new_leadership_are_read_again(tmp_path):
    async def scenario():
        async with leading(tmp_path) as (partition, client):
            await produce(client, b"a")
            await produce(client, b"old")
            assert values(await follower_fetch(client, FOLLOWERS[0], 1)) == [(1, b"old")]
            # Followed another leader, lost offset 1 to it, and leads again with other records there.
            assert partition.become_follower(FOLLOWERS[0], 2, (LEADER, *FOLLOWERS), frozenset({FOLLOWERS[0]}), zk_version=1)
            partition.log.truncate_to(1)
            assert partition.become_leader(3, (LEADER, *FOLLOWERS), frozenset({LEADER, *FOLLOWERS}), zk_version=2,
                                           now_ms=NOW)
            await produce(client, b"new")
            assert partition.log.log_end_offset == 2  # the same end as before the truncation
            assert values(await follower_fetch(client, FOLLOWERS[1], 1, epoch=3)) == [(1, b"new")]

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))
