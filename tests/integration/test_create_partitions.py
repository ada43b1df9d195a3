"""CreatePartitions (KIP-195): growing a topic, through clients we did not write."""

from __future__ import annotations

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kio.schema.errors import ErrorCode
from kafka.admin import KafkaAdminClient
from kafka.admin import NewPartitions as KafkaPythonNewPartitions

from tests.integration.raw import RawClient


def _partition_count(admin: AdminClient, topic: str) -> int:
    return len(admin.list_topics(topic, timeout=10).topics[topic].partitions)


def _grow(admin: AdminClient, topic: str, count: int, **kwargs) -> None:
    admin.create_partitions([NewPartitions(topic, count)], **kwargs)[topic].result(10)


def test_grow_a_topic_and_write_to_the_new_partitions(make_broker):
    broker = make_broker().start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("grow", 2, 1)])["grow"].result(10)
    _grow(admin, "grow", 2 + 1, validate_only=True)
    assert _partition_count(admin, "grow") == 2
    _grow(admin, "grow", 5)
    assert _partition_count(admin, "grow") == 5
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    producer.produce("grow", b"in the new partition", partition=4)
    assert producer.flush(10) == 0

    python_admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        python_admin.create_partitions({"grow": KafkaPythonNewPartitions(total_count=6)})
    finally:
        python_admin.close()
    assert _partition_count(admin, "grow") == 6

    broker.stop()
    broker.start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert _partition_count(admin, "grow") == 6
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g"})
    assert consumer.get_watermark_offsets(TopicPartition("grow", 4), timeout=10) == (0, 1)
    consumer.close()


@pytest.mark.parametrize("topic, count, code", [
    ("shrink", 1, KafkaError.INVALID_PARTITIONS),
    ("shrink", 3, KafkaError.INVALID_PARTITIONS),
    ("missing", 4, KafkaError.UNKNOWN_TOPIC_OR_PART),
    ("__consumer_offsets", 60, KafkaError.INVALID_REQUEST),
])
def test_refusals_carry_kafkas_error_codes(broker, topic, count, code):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    if topic == "shrink" and "shrink" not in admin.list_topics(timeout=10).topics:
        admin.create_topics([NewTopic("shrink", 3, 1)])["shrink"].result(10)
    if topic == "__consumer_offsets":
        # Any group request makes the broker create the offsets topic.
        admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("g")])["g"].result(10)
    with pytest.raises(KafkaException) as failure:
        _grow(admin, topic, count)
    assert failure.value.args[0].code() == code


def test_a_broker_hosts_at_most_tidemark_max_partitions(make_broker):
    """Nothing a client sends makes the broker create unbounded logs: CreateTopics and
    CreatePartitions past tidemark.max.partitions are refused with INVALID_PARTITIONS."""
    broker = make_broker({"tidemark.max.partitions": "10"}).start()
    with RawClient(broker.bootstrap) as client:  # past what librdkafka lets a client ask for
        response = client.create_topic("huge", 2_000_000_000)
    assert response.error_code == ErrorCode.invalid_partitions
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    with pytest.raises(KafkaException) as failure:
        admin.create_topics([NewTopic("huge", 11, 1)])["huge"].result(10)
    assert failure.value.args[0].code() == KafkaError.INVALID_PARTITIONS
    admin.create_topics([NewTopic("fits", 10, 1)])["fits"].result(10)
    with pytest.raises(KafkaException) as failure:
        _grow(admin, "fits", 11)
    assert failure.value.args[0].code() == KafkaError.INVALID_PARTITIONS
    assert _partition_count(admin, "fits") == 10
