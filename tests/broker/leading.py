"""A broker leading t-0 at epoch 1 with a raw client, for tests of what its followers' fetches see."""

from __future__ import annotations

import contextlib

from kio.schema.errors import ErrorCode

from tests.integration.raw import AsyncRawClient
from tidemark.broker.config import BrokerConfig
from tidemark.broker.server import Broker
from tidemark.records import build_batch

NOW = 1_700_000_000_000
LEADER = 1
PRODUCE, FETCH = 0, 1


@contextlib.asynccontextmanager
async def leading(tmp_path, replicas: tuple[int, ...], isr: frozenset[int]):
    """Broker LEADER leading t-0 at epoch 1 with `replicas` and `isr`; yields (partition, client)."""
    broker = Broker(BrokerConfig({"node.id": str(LEADER)}), tmp_path / "b1", port=0)
    await broker.start()
    client = None
    try:
        broker.replicas.create_topic("t", 1, {})
        partition = broker.replicas.partition("t", 0)
        partition.become_leader(1, replicas, isr, zk_version=0, now_ms=NOW)
        client = await AsyncRawClient.connect(broker.port)
        yield partition, client
    finally:
        if client is not None:
            await client.close()
        await broker.stop()


async def produce(client: AsyncRawClient, value: bytes) -> None:
    """One record to t-0 with acks=1."""
    response = await client.request(PRODUCE, 9, {"transactional_id": None, "acks": 1, "timeout": 30_000,
                                                 "topic_data": [{"name": "t", "partition_data": [
                                                     {"index": 0, "records": build_batch([(None, value, (), NOW)])}]}]})
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.none


async def follower_fetch(client: AsyncRawClient, replica_id: int, fetch_offset: int, epoch: int = 1):
    """A follower's Fetch v12 of t-0 from `fetch_offset`: the partition's answer."""
    response = await client.request(FETCH, 12, {
        "replica_id": replica_id, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "topics": [{"topic": "t", "partitions": [
            {"partition": 0, "current_leader_epoch": epoch, "fetch_offset": fetch_offset, "log_start_offset": 0,
             "partition_max_bytes": 1 << 20}]}], "forgotten_topics_data": [], "rack_id": ""})
    return response.responses[0].partitions[0]
