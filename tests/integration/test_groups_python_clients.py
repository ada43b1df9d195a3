"""kafka-python's group consumer and admin client, and aiokafka's commit/committed."""

from __future__ import annotations

import asyncio
import time

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata

from tests.integration.clients import create_topic, produce_all

def test_kafka_python_group_consumer_and_admin(group_broker):
    bootstrap = group_broker.bootstrap
    create_topic(bootstrap, "kp-group", 2)
    produce_all(bootstrap, "kp-group", [(i % 2, None, b"g%d" % i) for i in range(200)])

    consumer = KafkaConsumer("kp-group", bootstrap_servers=bootstrap, group_id="kp-consumers",
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             consumer_timeout_ms=3000, request_timeout_ms=20000)
    values = []
    deadline = time.monotonic() + 30
    while len(values) < 200 and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            values.extend(r.value for r in records)
    consumer.commit()
    assert sorted(values) == sorted(b"g%d" % i for i in range(200))

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=20000)
    listed = admin.list_groups()
    assert {"group_id": "kp-consumers", "protocol_type": "consumer", "group_state": "Stable",
            "group_type": "classic"} in listed
    described = admin.describe_groups(["kp-consumers"])["kp-consumers"]
    assert (described["group_state"], described["protocol_type"], described["protocol_data"]) == (
        "Stable", "consumer", "range")
    (member,) = described["members"]
    assert member["client_host"] == "127.0.0.1"
    assert member["member_metadata"]["topics"] == ["kp-group"]
    offsets = admin.list_group_offsets({"kp-consumers": None})["kp-consumers"]
    assert {tp.partition: meta.offset for tp, meta in offsets.items()} == {0: 100, 1: 100}
    consumer.close()
    after = admin.describe_groups(["kp-consumers"])["kp-consumers"]
    assert after["group_state"] == "Empty" and not after["members"]
    admin.close()


def test_aiokafka_commit_and_committed(group_broker):
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as AioTopicPartition

    bootstrap = group_broker.bootstrap
    create_topic(bootstrap, "aio-commits", 1)

    async def scenario() -> tuple[int | None, int | None]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id="aio-group", enable_auto_commit=False)
        await consumer.start()
        try:
            tp = AioTopicPartition("aio-commits", 0)
            before = await consumer.committed(tp)
            consumer.assign([tp])
            await consumer.commit({tp: 33})
            return before, await consumer.committed(tp)
        finally:
            await consumer.stop()

    before, after = asyncio.run(asyncio.wait_for(scenario(), timeout=60))
    assert (before, after) == (None, 33)


def test_kafka_python_commit_with_metadata(group_broker):
    bootstrap = group_broker.bootstrap
    create_topic(bootstrap, "kp-meta", 1)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id="kp-meta-group", enable_auto_commit=False,
                             request_timeout_ms=20000)
    tp = TopicPartition("kp-meta", 0)
    consumer.assign([tp])
    consumer.commit({tp: OffsetAndMetadata(12, "checkpoint-7", -1)})
    assert consumer.committed(tp) == 12
    assert consumer.committed(tp, metadata=True).metadata == "checkpoint-7"
    consumer.close()
