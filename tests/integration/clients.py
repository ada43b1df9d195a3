"""Small helpers over the real clients, each wait bounded so a hang fails instead of blocking."""

from __future__ import annotations

import time
from collections import defaultdict

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def create_topic(bootstrap: str, name: str, partitions: int, config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})],
                                  request_timeout=15)
    futures[name].result(timeout=15)


def produce_all(bootstrap: str, topic: str, messages: list[tuple[int, bytes, bytes]], **config: object) -> int:
    """Produce (partition, key, value) triples with delivery reports; returns how many were acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, **config})
    delivered = 0
    failures: list[str] = []

    def on_delivery(err: KafkaError | None, _msg: object) -> None:
        nonlocal delivered
        if err is None:
            delivered += 1
        else:
            failures.append(str(err))

    for partition, key, value in messages:
        while True:
            try:
                producer.produce(topic, value=value, key=key, partition=partition, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
    remaining = producer.flush(60)
    assert remaining == 0, f"{remaining} messages not delivered within 60s"
    assert not failures, failures[:5]
    return delivered


def consume_assigned(bootstrap: str, topic: str, partitions: int, expected: int, timeout_s: float = 60.0,
                     **config: object) -> dict[int, list[tuple[int, bytes | None, bytes | None]]]:
    """Read every partition from offset 0 with assign(): partition -> [(offset, key, value)]."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused-assign-only",
                         "enable.auto.commit": False, "enable.partition.eof": False, **config})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen: dict[int, list[tuple[int, bytes | None, bytes | None]]] = defaultdict(list)
    count = 0
    deadline = time.monotonic() + timeout_s
    try:
        while count < expected and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=10000, timeout=0.5):
                assert msg.error() is None, msg.error()
                seen[msg.partition()].append((msg.offset(), msg.key(), msg.value()))
                count += 1
    finally:
        consumer.close()
    return dict(seen)
