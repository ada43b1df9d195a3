"""Fetch from follower (KIP-392) between two real brokers in this process, their roles given by
hand: a follower serves a consumer's Fetch v11+ up to its own high watermark (empty above it,
OFFSET_OUT_OF_RANGE past its log end, NOT_LEADER_OR_FOLLOWER before v11), and a leader with
`replica.selector.class` set names an in-sync follower in the consumer's rack, with no records.
And one broker process with a rack, under confluent-kafka."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from tests.broker.inprocess import until
from tests.integration.raw import AsyncRawClient, fetch_body
from tidemark import metrics
from tidemark.broker.apis import fetch as fetch_api
from tidemark.broker.config import BrokerConfig
from tidemark.broker.server import Broker
from tidemark.records import build_batch, iter_batches
from tidemark.replication.replica_fetcher import ReplicaFetcher
from tidemark.replication.replica_selector import ReplicaView, rack_aware_select

NOW = 1_700_000_000_000
PRODUCE, FETCH, LIST_OFFSETS, METADATA, DESCRIBE_CLUSTER = 0, 1, 2, 3, 60
RACK_AWARE = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
WAIT_S = 60


@contextlib.asynccontextmanager
async def two_brokers(tmp_path, leader_settings: dict[str, str] | None = None):
    """Broker 1 leads t-0 at epoch 1, broker 2 follows it (both in the ISR), its fetcher running."""
    brokers = [Broker(BrokerConfig({"node.id": "1", **(leader_settings or {})}), tmp_path / "b1", port=0),
               Broker(BrokerConfig({"node.id": "2"}), tmp_path / "b2", port=0)]
    for broker in brokers:
        await broker.start()
        broker.replicas.create_topic("t", 1, {})
    leader, follower = brokers
    lp, fp = leader.replicas.partition("t", 0), follower.replicas.partition("t", 0)
    lp.become_leader(1, (1, 2), frozenset({1, 2}), zk_version=0, now_ms=NOW)
    fp.become_follower(1, 1, (1, 2), frozenset({1, 2}), zk_version=0)
    fetcher = ReplicaFetcher(2, 1, lambda: ("127.0.0.1", leader.port), append=follower.replicas.append_as_follower,
                             sync_truncations=follower.replicas.sync_truncations, max_wait_ms=100)
    fetcher.add(fp)
    fetcher.start()
    try:
        yield leader, follower, fetcher
    finally:
        await fetcher.stop()
        for broker in brokers:
            await broker.stop()


async def _produce(client: AsyncRawClient, values: list[bytes], acks: int = -1) -> None:
    for value in values:
        records = build_batch([(None, value, (), NOW)])
        response = await client.request(PRODUCE, 9, {"transactional_id": None, "acks": acks, "timeout": 30_000,
                                                     "topic_data": [{"name": "t", "partition_data": [
                                                         {"index": 0, "records": records}]}]})
        assert response.responses[0].partition_responses[0].error_code == ErrorCode.none


async def _fetch(client: AsyncRawClient, offset: int, version: int = 11, rack: str = "", max_wait_ms: int = 0,
                 epoch: int = -1):
    body = fetch_body([("t", 0, offset, 1 << 20)], max_wait_ms=max_wait_ms, min_bytes=1 if max_wait_ms else 0)
    body["rack_id"] = rack
    body["topics"][0]["partitions"][0]["current_leader_epoch"] = epoch
    response = await client.request(FETCH, version, body)
    return response.responses[0].partitions[0]


def _offsets(answer) -> list[int]:
    return [offset for _, batch in iter_batches(bytes(answer.records or b""), validate=False)
            for offset in range(batch.base_offset, batch.last_offset + 1)]


def test_a_follower_serves_a_consumer_fetch_v11_up_to_its_own_high_watermark(tmp_path):
    async def scenario():
        async with two_brokers(tmp_path) as (leader, follower, fetcher):
            lp, fp = leader.replicas.partition("t", 0), follower.replicas.partition("t", 0)
            producer = await AsyncRawClient.connect(leader.port)
            await _produce(producer, [f"v{i}".encode() for i in range(5)])
            await until(lambda: fp.high_watermark == 5)
            consumer = await AsyncRawClient.connect(follower.port)

            answer = await _fetch(consumer, 0)
            assert answer.error_code == ErrorCode.none and answer.high_watermark == 5
            assert _offsets(answer) == [0, 1, 2, 3, 4]
            assert answer.preferred_read_replica == -1  # only a leader names one
            # Before v11 a consumer reads from the leader only, as before KIP-392.
            assert (await _fetch(consumer, 0, version=10)).error_code == ErrorCode.not_leader_or_follower
            # The leader epoch is checked at a follower as at the leader (KIP-320).
            assert (await _fetch(consumer, 0, epoch=0)).error_code == ErrorCode.fenced_leader_epoch
            assert (await _fetch(consumer, 0, epoch=2)).error_code == ErrorCode.unknown_leader_epoch
            # ListOffsets stays the leader's.
            listed = await consumer.request(LIST_OFFSETS, 4, {"replica_id": -1, "isolation_level": 0, "topics": [
                {"name": "t", "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
            assert listed.topics[0].partitions[0].error_code == ErrorCode.not_leader_or_follower

            # The follower holds records its leader has not yet told it are committed: a consumer
            # does not see them there (the answer is empty, not an error) until it learns it.
            await fetcher.stop()
            await _produce(producer, [b"v5", b"v6", b"v7"], acks=1)
            tail = bytes(lp.log.read(5, 1 << 20, upper_bound=lp.log.log_end_offset))
            follower.replicas.append_as_follower(fp, tail)
            assert (fp.log.log_end_offset, fp.high_watermark) == (8, 5)
            above = await _fetch(consumer, 6)
            assert (above.error_code, above.high_watermark, _offsets(above)) == (ErrorCode.none, 5, [])
            past_end = await _fetch(consumer, 9)
            assert past_end.error_code == ErrorCode.offset_out_of_range
            # A consumer waiting at the follower's high watermark is answered when it moves.
            waiting = asyncio.ensure_future(_fetch(consumer, 5, max_wait_ms=30_000))
            await until(lambda: fp._advanced is not None)  # the fetch waits on the high watermark
            fp.leader_high_watermark(8)
            moved = await waiting
            assert (moved.error_code, moved.high_watermark, _offsets(moved)) == (ErrorCode.none, 8, [5, 6, 7])
            await producer.close()
            await consumer.close()

    asyncio.run(asyncio.wait_for(scenario(), timeout=WAIT_S))


@pytest.fixture
def racks(monkeypatch):
    """Broker 1 in rack "a", broker 2 in rack "b" (a cluster's registrations give them)."""
    monkeypatch.setattr(fetch_api, "_broker_racks", lambda ctx: {1: "a", 2: "b"})


def test_the_leader_sends_a_consumer_to_an_in_sync_follower_in_its_rack(tmp_path, racks):
    async def scenario():
        settings = {"broker.rack": "a", "replica.selector.class": RACK_AWARE}
        async with two_brokers(tmp_path, settings) as (leader, follower, fetcher):
            lp = leader.replicas.partition("t", 0)
            fp = follower.replicas.partition("t", 0)
            producer = await AsyncRawClient.connect(leader.port)
            await _produce(producer, [f"v{i}".encode() for i in range(3)])
            await until(lambda: lp.followers[2].log_end_offset == 3)
            client = await AsyncRawClient.connect(leader.port)

            sent = await _fetch(client, 0, rack="b")
            assert (sent.error_code, sent.preferred_read_replica, _offsets(sent)) == (ErrorCode.none, 2, [])
            assert sent.high_watermark == 3 and sent.log_start_offset == 0
            # Even a long poll is answered at once: the consumer is to go elsewhere.
            assert (await _fetch(client, 0, rack="b", max_wait_ms=30_000)).preferred_read_replica == 2
            # The leader's own rack, an unknown rack, no rack, or Fetch v10: read at the leader.
            for rack, version in (("a", 11), ("c", 11), ("", 11), ("b", 10)):
                here = await _fetch(client, 0, rack=rack, version=version)
                assert (getattr(here, "preferred_read_replica", -1), _offsets(here)) == (-1, [0, 1, 2]), (rack, version)
            # A follower without the offset (past its log end) is not offered.
            await fetcher.stop()
            await _produce(producer, [b"v3"], acks=1)
            assert (await _fetch(client, 4, rack="b")).preferred_read_replica == -1
            assert (await _fetch(client, 3, rack="b")).preferred_read_replica == 2
            # Nor is a follower out of the ISR, however caught up.
            lp.update_isr(frozenset({1}), zk_version=1)
            assert (await _fetch(client, 0, rack="b")).preferred_read_replica == -1
            assert fp.log.log_end_offset == 3
            await producer.close()
            await client.close()

    asyncio.run(asyncio.wait_for(scenario(), timeout=WAIT_S))


def test_without_a_replica_selector_the_leader_serves_every_consumer(tmp_path, racks):
    async def scenario():
        async with two_brokers(tmp_path, {"broker.rack": "a"}) as (leader, follower, fetcher):
            producer = await AsyncRawClient.connect(leader.port)
            await _produce(producer, [b"v0"])
            answer = await _fetch(producer, 0, rack="b")
            assert (answer.preferred_read_replica, _offsets(answer)) == (-1, [0])
            await producer.close()

    asyncio.run(asyncio.wait_for(scenario(), timeout=WAIT_S))


def test_fetch_requests_are_counted_by_kind(tmp_path):
    def count(kind: str) -> float:
        return metrics.FETCH_REQUESTS.labels(kind)._value.get()

    async def scenario():
        async with two_brokers(tmp_path) as (leader, follower, fetcher):
            followers_before, consumers_before = count("follower"), count("consumer")
            await until(lambda: count("follower") > followers_before)  # the running fetcher's
            client = await AsyncRawClient.connect(leader.port)
            await _fetch(client, 0)
            await _fetch(client, 0)
            assert count("consumer") == consumers_before + 2
            await client.close()

    asyncio.run(asyncio.wait_for(scenario(), timeout=WAIT_S))


def test_metadata_and_describe_cluster_show_the_brokers_rack(tmp_path):
    async def scenario():
        broker = Broker(BrokerConfig({"broker.rack": "eu-west-1a"}), tmp_path / "b", port=0)
        await broker.start()
        try:
            client = await AsyncRawClient.connect(broker.port)
            metadata = await client.request(METADATA, 12, {"topics": [], "allow_auto_topic_creation": False,
                                                            "include_topic_authorized_operations": False})
            assert [b.rack for b in metadata.brokers] == ["eu-west-1a"]
            described = await client.request(DESCRIBE_CLUSTER, 0, {"include_cluster_authorized_operations": False})
            assert [b.rack for b in described.brokers] == ["eu-west-1a"]
            await client.close()
        finally:
            await broker.stop()

    asyncio.run(asyncio.wait_for(scenario(), timeout=WAIT_S))


def test_the_rack_aware_selector_prefers_the_leader_then_the_most_caught_up_in_the_rack():
    leader = ReplicaView(1, "a", 100, 0)
    behind, ahead, stale = ReplicaView(2, "b", 90, 0), ReplicaView(3, "b", 100, 500), ReplicaView(4, "b", 100, 900)
    assert rack_aware_select("b", [leader, behind, ahead, stale], leader) == ahead
    assert rack_aware_select("a", [leader, behind, ahead], leader) == leader
    assert rack_aware_select("z", [leader, behind], leader) == leader
    assert rack_aware_select(None, [leader, behind], leader) == leader


def test_a_single_broker_shows_its_rack_and_serves_a_consumer_from_another_rack(make_broker):
    """confluent-kafka against one broker process: the rack in DescribeCluster, and a consumer
    with client.rack elsewhere reads everything from the only replica."""
    broker = make_broker({"broker.rack": "az-a", "replica.selector.class": RACK_AWARE}).start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert [node.rack for node in admin.describe_cluster().result(WAIT_S).nodes] == ["az-a"]
    admin.create_topics([NewTopic("single", 1, 1)])["single"].result(WAIT_S)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(10):
        producer.produce("single", f"v{i}".encode(), partition=0)
    assert producer.flush(WAIT_S) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "single", "client.rack": "az-b",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition("single", 0, 0)])
    read = []
    deadline = time.monotonic() + WAIT_S
    while len(read) < 10:
        assert time.monotonic() < deadline, f"read {len(read)} of 10"
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            read.append((message.offset(), message.value()))
    consumer.close()
    assert read == [(i, f"v{i}".encode()) for i in range(10)]
    broker.stop()
