"""DeleteRecords and ElectLeaders through confluent-kafka and kafka-python, and their Kafka error
codes on the wire."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, ElectionType, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import TopicPartition as PyTopicPartition
from kafka.admin import KafkaAdminClient
from kio.schema.errors import ErrorCode

from tests.integration.raw import RawClient
from tidemark.records.batch import build_batch
from tidemark.wire.api_keys import ApiKey

DELETE_RECORDS, ELECT_LEADERS, API_VERSIONS = 21, 43, 18


def _produce(client: RawClient, topic: str, count: int) -> None:
    """One batch per record: in 1 KiB segments, a few records per segment."""
    for i in range(count):
        assert client.produce(topic, build_batch([(b"k%d" % i, b"v%03d-" % i + b"x" * 200, (), 0)])).error_code == 0


def _segment_bases(broker, topic: str) -> list[int]:
    return sorted(int(p.stem) for p in (broker.data_dir / f"{topic}-0").glob("*.log"))


def _read_offsets(bootstrap: str, topic: str, count: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{topic}", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, -2)])
    offsets = []
    try:
        while len(offsets) < count:
            msg = consumer.poll(10)
            assert msg is not None, f"read only {offsets}"
            assert msg.error() is None, msg.error()
            offsets.append(msg.offset())
    finally:
        consumer.close()
    return offsets


def test_delete_records_moves_the_log_start_offset_for_good(make_broker):
    broker = make_broker().start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    with RawClient(broker.bootstrap) as client:
        assert client.create_topic("trimmed", configs={"segment.bytes": "1024"}).error_code == 0
        _produce(client, "trimmed", 20)
        bases = _segment_bases(broker, "trimmed")
        cut = bases[2] + 1  # inside the third segment: the first two are wholly below it

        (deleted,) = admin.delete_records([TopicPartition("trimmed", 0, cut)]).values()
        assert deleted.result(10).low_watermark == cut
        assert client.list_offset("trimmed", -2).offset == cut
        assert _segment_bases(broker, "trimmed") == bases[2:]
        assert client.fetch([("trimmed", 0, cut - 1, 1 << 20)])[0].error_code == ErrorCode.offset_out_of_range
        assert _read_offsets(broker.bootstrap, "trimmed", 20 - cut) == list(range(cut, 20))

        # An offset at or below the log start offset changes nothing; beyond the high watermark
        # is out of range.
        (again,) = admin.delete_records([TopicPartition("trimmed", 0, 1)]).values()
        assert again.result(10).low_watermark == cut
        (beyond,) = admin.delete_records([TopicPartition("trimmed", 0, 21)]).values()
        with pytest.raises(KafkaException) as info:
            beyond.result(10)
        assert info.value.args[0].code() == ErrorCode.offset_out_of_range

        python_admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            python_admin.delete_records({PyTopicPartition("trimmed", 0): 15})
        finally:
            python_admin.close()
        assert client.list_offset("trimmed", -2).offset == 15

        # -1: up to the high watermark, every record.
        (everything,) = admin.delete_records([TopicPartition("trimmed", 0, -1)]).values()
        assert everything.result(10).low_watermark == 20
    broker.kill()  # no checkpoint at shutdown: the answer's own must have made it durable

    broker.start()
    with RawClient(broker.bootstrap) as client:
        assert client.list_offset("trimmed", -2).offset == 20
        _produce(client, "trimmed", 1)
        assert client.list_offset("trimmed", -1).offset == 21
        assert client.fetch([("trimmed", 0, 19, 1 << 20)])[0].error_code == ErrorCode.offset_out_of_range


def _delete_raw(client: RawClient, wanted: list[tuple[str, int, int]], version: int = 2) -> list[tuple[int, int]]:
    response = client.request(DELETE_RECORDS, version, {"topics": [
        {"name": topic, "partitions": [{"partition_index": p, "offset": offset}]} for topic, p, offset in wanted],
        "timeout": 10000})
    return [(p.error_code, p.low_watermark) for t in response.topics for p in t.partitions]


def test_delete_records_errors_on_the_wire(broker):
    with RawClient(broker.bootstrap) as client:
        assert client.create_topic("wire-deleted").error_code == 0
        assert client.create_topic("wire-compacted", configs={"cleanup.policy": "compact"}).error_code == 0
        _produce(client, "wire-deleted", 3)
        client.request(ApiKey.FIND_COORDINATOR, 3, {"key": "g", "key_type": 0})  # FindCoordinator creates the offsets topic
        assert _delete_raw(client, [("wire-deleted", 0, 4), ("wire-deleted", 0, -2), ("wire-deleted", 1, 0),
                                    ("absent", 0, 0), ("wire-compacted", 0, 0), ("__consumer_offsets", 0, 0),
                                    ("wire-deleted", 0, 2)], version=0) == [
            (ErrorCode.offset_out_of_range, -1), (ErrorCode.offset_out_of_range, -1),
            (ErrorCode.unknown_topic_or_partition, -1), (ErrorCode.unknown_topic_or_partition, -1),
            (ErrorCode.policy_violation, -1), (ErrorCode.invalid_topic_exception, -1), (ErrorCode.none, 2)]
        assert _delete_raw(client, [("wire-deleted", 0, 3)]) == [(ErrorCode.none, 3)]


def test_elect_leaders_needs_no_election_on_one_broker(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    with RawClient(broker.bootstrap) as client:
        assert client.create_topic("elected", partitions=2).error_code == 0
        for version in (0, 2):
            response = client.request(ELECT_LEADERS, version, {"election_type": 0, "topic_partitions": [
                {"topic": "elected", "partitions": [0, 1, 2]}, {"topic": "absent", "partitions": [0]}],
                "timeout": 10000})
            assert [(t.topic, p.partition_id, p.error_code) for t in response.replica_election_results
                    for p in t.partition_result] == [
                ("elected", 0, ErrorCode.election_not_needed), ("elected", 1, ErrorCode.election_not_needed),
                ("elected", 2, ErrorCode.unknown_topic_or_partition), ("absent", 0, ErrorCode.unknown_topic_or_partition)]
        # Every partition: those that needed no election are left out.
        response = client.request(ELECT_LEADERS, 2, {"election_type": 1, "topic_partitions": None, "timeout": 10000})
        assert (response.error_code, response.replica_election_results) == (ErrorCode.none, ())
        advertised = {k.api_key: (k.min_version, k.max_version) for k in client.request(API_VERSIONS, 3, {
            "client_software_name": "t", "client_software_version": "1"}).api_keys}
        assert {key: advertised[key] for key in (21, 32, 33, 43, 44)} == {
            21: (0, 2), 32: (1, 4), 33: (0, 2), 43: (0, 2), 44: (0, 1)}

    results = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("elected", 0)]).result(10)
    assert results[TopicPartition("elected", 0)].code() == ErrorCode.election_not_needed
