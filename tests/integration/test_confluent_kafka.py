"""confluent-kafka (librdkafka) against a real tidemark broker: bulk produce with acks=all and read back."""

from __future__ import annotations

import pytest

from tests.integration.clients import consume_assigned, create_topic, produce_all

PARTITIONS = 6
MESSAGES = 100_000


def _messages(count: int) -> list[tuple[int, bytes, bytes]]:
    # Message i goes to partition i % 6 as its (i // 6)-th record: offsets are predictable.
    return [(i % PARTITIONS, str(i).encode(), b"value-%d-" % i + b"x" * (i % 50)) for i in range(count)]


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_acks_all_round_trip_exact(broker, compression):
    topic = f"bulk-{compression}"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    messages = _messages(MESSAGES)
    delivered = produce_all(broker.bootstrap, topic, messages, **{"compression.type": compression})
    assert delivered == MESSAGES

    seen = consume_assigned(broker.bootstrap, topic, PARTITIONS, MESSAGES)
    assert sum(len(v) for v in seen.values()) == MESSAGES
    for partition in range(PARTITIONS):
        expected = [(seq, key, value) for seq, (_, key, value) in
                    enumerate(m for m in messages if m[0] == partition)]
        assert seen[partition] == expected, f"partition {partition} differs"


def test_idempotent_producer_no_duplicates(broker):
    topic = "idempotent"
    create_topic(broker.bootstrap, topic, 2)
    messages = [(i % 2, None, b"m%d" % i) for i in range(5000)]
    produce_all(broker.bootstrap, topic, messages, **{"enable.idempotence": True, "max.in.flight": 5})
    seen = consume_assigned(broker.bootstrap, topic, 2, 5000)
    for partition in (0, 1):
        values = [v for _, _, v in seen[partition]]
        assert values == [b"m%d" % i for i in range(partition, 5000, 2)]


def test_admin_client_lists_topics(broker):
    from confluent_kafka.admin import AdminClient

    create_topic(broker.bootstrap, "listed", 2)
    metadata = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10)
    assert len(metadata.topics["listed"].partitions) == 2
    assert [b.id for b in metadata.brokers.values()] == [0]
