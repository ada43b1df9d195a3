"""kafka-python and aiokafka round trips (clients nobody here wrote), including bootstrap."""

from __future__ import annotations

import asyncio
import time

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from tests.integration.clients import create_topic

COUNT = 2000
READ_BOUND_S = 120  # ends a hung read; reads stop at the end offsets, not after an idle gap


def _read_to_end(consumer: KafkaConsumer) -> list:
    """Every record of the assigned partitions up to their end offsets (as the read starts)."""
    partitions = consumer.assignment()
    ends = consumer.end_offsets(list(partitions))
    records = []
    deadline = time.monotonic() + READ_BOUND_S
    while any(consumer.position(tp) < ends[tp] for tp in partitions):
        assert time.monotonic() < deadline, f"read {len(records)} records, never reached {ends}"
        for batch in consumer.poll(timeout_ms=1000).values():
            records.extend(batch)
    return records


def test_kafka_python_bootstrap_produce_consume(broker):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    admin.create_topics([NewTopic("kp-topic", num_partitions=3, replication_factor=1)])
    assert "kp-topic" in admin.list_topics()
    admin.close()

    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", compression_type="gzip",
                             request_timeout_ms=10000)
    futures = [producer.send("kp-topic", key=b"k%d" % i, value=b"v%d" % i, partition=i % 3) for i in range(COUNT)]
    producer.flush(timeout=30)
    offsets = [f.get(timeout=10).offset for f in futures]
    producer.close()
    # Each partition's offsets are 0, 1, 2, ... in send order.
    for partition in range(3):
        assert offsets[partition::3] == list(range(len(offsets[partition::3])))

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False,
                             request_timeout_ms=10000)
    consumer.assign([TopicPartition("kp-topic", p) for p in range(3)])
    consumer.seek_to_beginning()
    received = {(m.partition, m.offset): (m.key, m.value) for m in _read_to_end(consumer)}
    consumer.close()
    assert len(received) == COUNT
    for i in range(COUNT):
        assert received[(i % 3, i // 3)] == (b"k%d" % i, b"v%d" % i)


def test_kafka_python_end_offsets_and_offsets_for_times(broker):
    create_topic(broker.bootstrap, "kp-times", 1)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    for i in range(10):
        producer.send("kp-times", value=b"%d" % i, partition=0, timestamp_ms=1_000_000 + i * 1000)
    producer.flush(timeout=30)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, request_timeout_ms=10000)
    tp = TopicPartition("kp-times", 0)
    assert consumer.beginning_offsets([tp]) == {tp: 0}
    assert consumer.end_offsets([tp]) == {tp: 10}
    found = consumer.offsets_for_times({tp: 1_004_500})[tp]
    assert (found.offset, found.timestamp) == (5, 1_005_000)
    assert consumer.offsets_for_times({tp: 2_000_000})[tp] is None
    consumer.close()


def test_aiokafka_round_trip(broker):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as AioTopicPartition

    create_topic(broker.bootstrap, "aio-topic", 2)

    async def scenario() -> list[tuple[int, int, bytes]]:
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", compression_type="lz4")
        await producer.start()
        try:
            for i in range(500):
                await producer.send("aio-topic", value=b"a%d" % i, partition=i % 2)
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False,
                                    auto_offset_reset="earliest")
        await consumer.start()
        try:
            consumer.assign([AioTopicPartition("aio-topic", 0), AioTopicPartition("aio-topic", 1)])
            got: list[tuple[int, int, bytes]] = []
            while len(got) < 500:
                batches = await asyncio.wait_for(consumer.getmany(timeout_ms=500), timeout=10)
                for records in batches.values():
                    got.extend((r.partition, r.offset, r.value) for r in records)
            return got
        finally:
            await consumer.stop()

    got = asyncio.run(asyncio.wait_for(scenario(), timeout=60))
    assert sorted(got) == sorted((i % 2, i // 2, b"a%d" % i) for i in range(500))


def test_log_append_time_topic(broker):
    create_topic(broker.bootstrap, "kp-append-time", 1, {"message.timestamp.type": "LogAppendTime"})
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    metadata = producer.send("kp-append-time", value=b"x", timestamp_ms=1_000).get(timeout=10)
    producer.close()
    assert metadata.timestamp > 1_000_000_000_000  # the broker's clock, not the client's 1000
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None)
    consumer.assign([TopicPartition("kp-append-time", 0)])
    consumer.seek_to_beginning()
    (record,) = _read_to_end(consumer)
    consumer.close()
    assert (record.timestamp_type, record.timestamp) == (1, metadata.timestamp)
