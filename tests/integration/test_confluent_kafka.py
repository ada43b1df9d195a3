"""confluent-kafka (librdkafka) against a real tidemark broker: bulk produce with acks=all and read back."""

from __future__ import annotations

import pytest

from tests.integration.clients import consume_assigned, create_topic, produce_all
from tests.integration.raw import RawClient
from tidemark.records import iter_batches

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


def test_idempotent_producer_retry_is_deduplicated(broker):
    """librdkafka's idempotent producer writes; then each of its last five batches per partition
    is sent again byte for byte, as librdkafka retries a batch whose response it lost (nothing
    makes librdkafka itself retry here). Each retry gets its original base offset and nothing
    is written twice."""
    topic = "idempotent"
    create_topic(broker.bootstrap, topic, 2)
    messages = [(i % 2, None, b"m%d" % i) for i in range(5000)]
    produce_all(broker.bootstrap, topic, messages, **{"enable.idempotence": True, "max.in.flight": 5,
                                                      "batch.num.messages": 100})
    with RawClient(broker.bootstrap) as client:
        for partition in (0, 1):
            end = client.list_offset(topic, -1, partition).offset
            assert end == 2500
            records = bytearray()
            offset = 0
            while offset < end:
                (fetched,) = client.fetch([(topic, partition, offset, 1 << 20)])
                records += fetched.records
                offset = list(iter_batches(fetched.records))[-1][1].next_offset
            batches = [(h, bytes(records[pos:pos + h.size])) for pos, h in iter_batches(records)]
            assert len(batches) > 5 and all(h.producer_id >= 0 and h.base_sequence >= 0 for h, _ in batches)
            for header, raw in batches[-5:]:
                response = client.produce(topic, raw, partition=partition)
                assert (response.error_code, response.base_offset) == (0, header.base_offset)
            assert client.list_offset(topic, -1, partition).offset == end
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
