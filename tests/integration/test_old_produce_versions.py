"""Produce v0-v2 with message formats v0/v1, served as Kafka 3.x serves them: converted to
RecordBatch v2 on the way in, never by closing the connection."""

from __future__ import annotations

import datetime
import struct

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from tidemark.records import CompressionType, decode_records, iter_batches
from tidemark.wire import produce_v0

from ..records.legacy_messages import message, message_set
from .raw import RawClient
from tidemark.wire.api_keys import ApiKey


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4"])
@pytest.mark.parametrize("fallback", ["0.9.0", "0.8.2"])  # Produce v1 and v0, message format v0
def test_confluent_kafka_with_an_old_broker_version(broker, fallback, codec):
    topic = f"old-{fallback.replace('.', '')}-{codec}"
    # librdkafka asks no ApiVersions and uses the fallback's protocol, as with a 0.9/0.8 broker.
    producer = Producer({"bootstrap.servers": broker.bootstrap, "api.version.request": False,
                         "broker.version.fallback": fallback, "compression.codec": codec, "linger.ms": 50})
    errors: list[KafkaError | None] = []
    for i in range(20):
        producer.produce(topic, b"v%d" % i, key=b"k%d" % i, partition=0,
                         on_delivery=lambda err, _msg: errors.append(err))
    assert producer.flush(60) == 0
    assert errors == [None] * 20
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{topic}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = []
    try:
        while len(got) < 20:
            msg = consumer.poll(30)
            assert msg is not None, f"only {len(got)} of 20 records read"
            assert msg.error() is None, msg.error()
            got.append((msg.offset(), msg.key(), msg.value(), msg.timestamp()))
    finally:
        consumer.close()
    # Message format v0 has no timestamps: Kafka's converted records carry CreateTime -1.
    assert got == [(i, b"k%d" % i, b"v%d" % i, (1, -1)) for i in range(20)]


class OldProducer:
    """Produce v0-v2 frames over a raw connection (kio has no schemas for them)."""

    def __init__(self, client: RawClient) -> None:
        self.client = client

    def send(self, version: int, topic: str, records: bytes, acks: int = -1, partition: int = 0) -> None:
        self.client.correlation_id += 1
        body = produce_v0.ProduceV0Request(acks=acks, timeout=datetime.timedelta(seconds=10), topic_data=(
            produce_v0.ProduceV0TopicData(topic, (produce_v0.ProduceV0PartitionData(partition, records),)),))
        header = struct.pack(">hhih", ApiKey.PRODUCE, version, self.client.correlation_id, 3) + b"old"
        self.client.send_frame(header + produce_v0.write_request(body))

    def receive(self, version: int) -> produce_v0.ProduceV0PartitionResponse:
        frame = self.client.recv_frame()
        (correlation_id,) = struct.unpack_from(">i", frame)
        assert correlation_id == self.client.correlation_id
        response, size = produce_v0.read_response(version)(frame, 4)
        assert size == len(frame) - 4
        return response.responses[0].partition_responses[0]

    def produce(self, version: int, topic: str, records: bytes) -> produce_v0.ProduceV0PartitionResponse:
        self.send(version, topic, records)
        return self.receive(version)


def test_produce_v2_with_message_format_v1(broker):
    with RawClient(broker.bootstrap) as client:
        assert client.create_topic("old-v2").error_code == 0
        assert client.create_topic("old-v2-append", configs={"message.timestamp.type": "LogAppendTime"}).error_code == 0
        old = OldProducer(client)
        first = old.produce(2, "old-v2", message_set([(b"a", b"1"), (b"b", b"2")], timestamp=1_000))
        second = old.produce(2, "old-v2", message_set([(b"c", b"3")], codec=CompressionType.GZIP, timestamp=2_000))
        stamped = old.produce(2, "old-v2-append", message_set([(b"d", b"4")]))
        (fetched,) = client.fetch([("old-v2", 0, 0, 1 << 20)])
    assert (first.error_code, first.base_offset, first.log_append_time) == (0, 0, -1)
    assert (second.error_code, second.base_offset) == (0, 2)
    assert stamped.error_code == 0 and stamped.log_append_time > 0
    records = [r for position, _ in iter_batches(fetched.records) for r in decode_records(fetched.records, position)]
    assert [(r.offset, r.key, r.value, r.timestamp) for r in records] == \
        [(0, b"a", b"1", 1_000), (1, b"b", b"2", 1_001), (2, b"c", b"3", 2_000)]


def test_refusals_answer_and_keep_the_connection(broker):
    with RawClient(broker.bootstrap) as client:
        assert client.create_topic("old-compacted", configs={"cleanup.policy": "compact"}).error_code == 0
        old = OldProducer(client)
        keyless = old.produce(1, "old-compacted", message_set([(b"k", b"v"), (None, b"v")], magic=0))
        corrupt = bytearray(message(b"k", b"v", magic=0))
        corrupt[-1] ^= 1
        bad_crc = old.produce(0, "old-compacted", bytes(corrupt))
        zstd = old.produce(1, "old-compacted", message_set([(b"k", b"v")], codec=CompressionType.ZSTD))
        old.send(0, "old-compacted", message_set([(b"k", b"acks-0")], magic=0), acks=0)  # no answer expected
        ok = old.produce(1, "old-compacted", message_set([(b"k", b"v")], magic=0))
    assert keyless.error_code == 87  # INVALID_RECORD (v0-v2 cannot name the record)
    assert bad_crc.error_code == 2  # CORRUPT_MESSAGE
    assert zstd.error_code == 76  # UNSUPPORTED_COMPRESSION_TYPE
    assert (ok.error_code, ok.base_offset) == (0, 1)  # after the acks=0 record


def test_api_versions_advertise_produce_from_v0(broker):
    with RawClient(broker.bootstrap) as client:
        response = client.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    produce = next(k for k in response.api_keys if k.api_key == ApiKey.PRODUCE)
    assert (produce.min_version, produce.max_version) == (0, 13)
