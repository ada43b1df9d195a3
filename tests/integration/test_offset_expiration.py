"""KIP-211 end to end: a standalone consumer's offsets expire; an active group's never do."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaException, TopicPartition

from tests.integration.clients import create_topic, produce_all

RETENTION_S = 60  # offsets.retention.minutes=1, the smallest Kafka allows
SETTINGS = {"offsets.retention.minutes": "1", "offsets.retention.check.interval.ms": "1000",
            "group.initial.rebalance.delay.ms": "100", "offsets.topic.num.partitions": "5"}


def _consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                     "auto.offset.reset": "earliest", "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})


def test_standalone_offsets_expire_and_active_group_offsets_stay(make_broker):
    broker = make_broker(SETTINGS).start()
    create_topic(broker.bootstrap, "kept", 1)
    produce_all(broker.bootstrap, "kept", [(0, None, b"x")])

    standalone = _consumer(broker.bootstrap, "standalone")
    standalone.assign([TopicPartition("kept", 0, 0)])
    standalone.commit(offsets=[TopicPartition("kept", 0, 1)], asynchronous=False)

    active = _consumer(broker.bootstrap, "rarely-commits")  # KAFKA-4682: commits once, stays alive
    active.subscribe(["kept"])
    deadline = time.monotonic() + 30
    while not active.assignment() and time.monotonic() < deadline:
        active.poll(0.1)
    assert active.assignment()
    active.commit(offsets=[TopicPartition("kept", 0, 1)], asynchronous=False)

    def committed(consumer: Consumer) -> int:
        return consumer.committed([TopicPartition("kept", 0)], timeout=10)[0].offset

    expired_at = None
    deadline = time.monotonic() + RETENTION_S + 30
    while time.monotonic() < deadline:
        active.poll(0.2)  # keep the group alive (heartbeats)
        if committed(standalone) < 0:
            expired_at = time.monotonic()
            break
    assert expired_at is not None, "the standalone consumer's offset never expired"
    assert committed(active) == 1, "the active group's offset expired"
    standalone.close()
    active.close()
    broker.stop()

    restarted = make_broker(SETTINGS, data_dir=broker.data_dir, port=broker.port).start()
    again = _consumer(restarted.bootstrap, "standalone")
    deadline = time.monotonic() + 30
    while True:  # bounded retry while the offsets partitions load
        try:
            assert committed(again) < 0, "a restart resurrected an expired offset"
            break
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    again.close()
    restarted.stop()
