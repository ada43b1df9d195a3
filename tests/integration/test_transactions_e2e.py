"""Exactly-once with a real client: confluent-kafka's transactional producer, its offsets sent to
the transaction, and read_committed consumers. This needs both halves of transactions: the
transaction coordinator (InitProducerId with a transactional id, AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn) and the partitions' (WriteTxnMarkers, TxnOffsetCommit, read_committed);
it is skipped on a broker that does not serve the coordinator's APIs."""

from __future__ import annotations

import pytest

from tests.integration.clients import create_topic
from tests.integration.raw import RawClient
from tidemark.wire.api_keys import ApiKey

confluent_kafka = pytest.importorskip("confluent_kafka")

ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN, WRITE_TXN_MARKERS, TXN_OFFSET_COMMIT = 24, 25, 26, 27, 28
TIMEOUT_S = 60.0  # a hang guard, not a margin


def _serves_transactions(bootstrap: str) -> bool:
    with RawClient(bootstrap) as client:
        served = {k.api_key for k in client.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "t",
                                                             "client_software_version": "1"}).api_keys}
    return {ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN, WRITE_TXN_MARKERS, TXN_OFFSET_COMMIT} <= served


def _read_committed(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "reader",
                                         "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                                         "enable.partition.eof": True})
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
        values: list[bytes] = []
        while True:
            msg = consumer.poll(TIMEOUT_S)
            assert msg is not None, f"nothing within {TIMEOUT_S} s after {values}"
            if msg.error() is not None:
                assert msg.error().code() == confluent_kafka.KafkaError._PARTITION_EOF, msg.error()
                if len(values) >= expected:
                    return values
                continue
            values.append(msg.value())
    finally:
        consumer.close()


def test_committed_transactions_and_their_offsets_are_seen_aborted_ones_never(broker):
    if not _serves_transactions(broker.bootstrap):
        pytest.skip("this broker has no transaction coordinator")
    create_topic(broker.bootstrap, "eos-out", 1)
    create_topic(broker.bootstrap, "eos-in", 1)
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "eos"})
    producer.init_transactions(TIMEOUT_S)
    group = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "eos-group"})
    try:
        metadata = group.consumer_group_metadata()
        producer.begin_transaction()
        for i in range(3):
            producer.produce("eos-out", value=b"committed-%d" % i, partition=0)
        producer.send_offsets_to_transaction([confluent_kafka.TopicPartition("eos-in", 0, 3)], metadata, TIMEOUT_S)
        producer.commit_transaction(TIMEOUT_S)

        producer.begin_transaction()
        producer.produce("eos-out", value=b"aborted", partition=0)
        producer.send_offsets_to_transaction([confluent_kafka.TopicPartition("eos-in", 0, 99)], metadata, TIMEOUT_S)
        producer.abort_transaction(TIMEOUT_S)

        producer.begin_transaction()
        producer.produce("eos-out", value=b"last", partition=0)
        producer.commit_transaction(TIMEOUT_S)

        assert _read_committed(broker.bootstrap, "eos-out", 4) == [b"committed-0", b"committed-1", b"committed-2",
                                                                    b"last"]
        [committed] = group.committed([confluent_kafka.TopicPartition("eos-in", 0)], timeout=TIMEOUT_S)
        assert committed.offset == 3
    finally:
        group.close()
