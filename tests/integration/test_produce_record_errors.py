"""Per-record produce errors (KIP-467): a batch with some bad records names them in
`record_errors`, and the producer fails exactly those records, the others as collateral."""

from __future__ import annotations

from confluent_kafka import KafkaError, Producer

from tidemark.records import build_batch

from .clients import create_topic
from .raw import RawClient

KEYLESS = {3, 13, 23, 33, 43, 53, 63, 73, 83, 93}


def test_confluent_kafka_fails_exactly_the_keyless_records(broker):
    create_topic(broker.bootstrap, "keys-compacted", 1, {"cleanup.policy": "compact"})
    # One batch of 100: linger long enough that nothing is sent before flush().
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 60000,
                         "batch.num.messages": 1000, "retries": 0})
    errors: dict[int, KafkaError | None] = {}
    for i in range(100):
        producer.produce("keys-compacted", value=b"v%d" % i, key=None if i in KEYLESS else b"k%d" % i,
                         partition=0, on_delivery=lambda err, _msg, i=i: errors.__setitem__(i, err))
    assert producer.flush(60) == 0
    assert len(errors) == 100
    assert {i for i, err in errors.items() if err.code() == KafkaError.INVALID_RECORD} == KEYLESS
    assert {i for i, err in errors.items() if err.code() == KafkaError._INVALID_DIFFERENT_RECORD} == \
        set(range(100)) - KEYLESS
    # Nothing of the batch was written; the keyed records go through when sent again.
    with RawClient(broker.bootstrap) as client:
        assert client.list_offset("keys-compacted", -1).offset == 0


def test_record_errors_on_the_wire(broker):
    with RawClient(broker.bootstrap) as client:
        assert client.create_topic("wire-compacted", configs={"cleanup.policy": "compact"}).error_code == 0
        batch = build_batch([(None if i in (1, 4) else b"k", b"v", (), 1000) for i in range(6)])
        response = client.produce("wire-compacted", batch)
    message = "Compacted topic cannot accept message without key in topic partition wire-compacted-0."
    assert response.error_code == 87  # INVALID_RECORD
    assert [(e.batch_index, e.batch_index_error_message) for e in response.record_errors] == \
        [(1, message), (4, message)]
    assert response.error_message == (
        "One or more records have been rejected due to 2 record errors in total, and only showing the "
        f"first three errors at most: [RecordError(batchIndex=1, message='{message}'), "
        f"RecordError(batchIndex=4, message='{message}')]")
    assert (response.base_offset, response.log_start_offset) == (-1, 0)
