"""Produce and fetch semantics clients rely on, checked with exact requests: idempotence, acks,
size limits and long polls."""

from __future__ import annotations

import threading
import time

from kio.schema.errors import ErrorCode

from tests.integration.raw import RawClient
from tidemark.records.batch import build_batch

PRODUCE, FETCH, LIST_OFFSETS, CREATE_TOPICS, INIT_PRODUCER_ID = 0, 1, 2, 19, 22


def _create(client, name, partitions=1, configs=None):
    response = client.request(CREATE_TOPICS, 7, {"topics": [{"name": name, "num_partitions": partitions,
        "replication_factor": 1, "assignments": [],
        "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
        "timeout": 10000, "validate_only": False})
    assert response.topics[0].error_code == ErrorCode.none


def _produce(client, topic, records, acks=-1, partition=0):
    response = client.request(PRODUCE, 9, {"acks": acks, "timeout": 10000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": records}]}]})
    return response.responses[0].partition_responses[0]


def _fetch(client, topics, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20):
    response = client.request(FETCH, 11, {"replica_id": -1, "max_wait": max_wait_ms, "min_bytes": min_bytes,
        "max_bytes": max_bytes, "isolation_level": 0, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": topic, "partitions": [{"partition": p, "current_leader_epoch": -1, "fetch_offset": offset,
                                                    "log_start_offset": -1, "partition_max_bytes": limit}]}
                   for topic, p, offset, limit in topics],
        "forgotten_topics_data": [], "rack_id": ""})
    return [p for t in response.responses for p in t.partitions]


def _latest(client, topic):
    response = client.request(LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1, "current_leader_epoch": -1}]}]})
    return response.topics[0].partitions[0].offset


def test_idempotent_retry_is_acknowledged_not_appended_twice(broker):
    with RawClient(broker.bootstrap) as client:
        _create(client, "idem")
        ids = client.request(INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout": 60000,
                                                   "producer_id": -1, "producer_epoch": -1})
        assert ids.error_code == ErrorCode.none and ids.producer_id >= 0

        def batch(sequence, count=2):
            return build_batch([(None, b"s%d" % (sequence + i), (), 1) for i in range(count)],
                               producer_id=ids.producer_id, producer_epoch=ids.producer_epoch,
                               base_sequence=sequence)

        first = _produce(client, "idem", batch(0))
        assert (first.error_code, first.base_offset) == (ErrorCode.none, 0)
        retry = _produce(client, "idem", batch(0))  # the same batch again, as after a lost response
        assert (retry.error_code, retry.base_offset) == (ErrorCode.none, 0)
        assert _latest(client, "idem") == 2
        gap = _produce(client, "idem", batch(5))
        assert gap.error_code == ErrorCode.out_of_order_sequence_number
        assert _produce(client, "idem", batch(2)).base_offset == 2
        assert _latest(client, "idem") == 4
        # KIP-360: the producer bumps its epoch; the new epoch starts at sequence 0, the old is fenced.
        bumped = client.request(INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout": 60000,
                                                      "producer_id": ids.producer_id,
                                                      "producer_epoch": ids.producer_epoch})
        assert (bumped.producer_id, bumped.producer_epoch) == (ids.producer_id, ids.producer_epoch + 1)
        fresh = build_batch([(None, b"new-epoch", (), 1)], producer_id=ids.producer_id,
                            producer_epoch=bumped.producer_epoch, base_sequence=0)
        assert _produce(client, "idem", fresh).base_offset == 4
        assert _produce(client, "idem", batch(4)).error_code == ErrorCode.invalid_producer_epoch
        assert _latest(client, "idem") == 5

        # A new producer id never repeats one handed out before.
        again = client.request(INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout": 60000,
                                                     "producer_id": -1, "producer_epoch": -1})
        assert again.producer_id != ids.producer_id


def test_acks_zero_and_one(broker):
    with RawClient(broker.bootstrap) as client:
        _create(client, "acks")
        one = _produce(client, "acks", build_batch([(None, b"a", (), 1)]), acks=1)
        assert (one.error_code, one.base_offset) == (ErrorCode.none, 0)
        # acks=0 gets no response: the next response on the connection answers the next request.
        client.send_frame(client.encode(PRODUCE, 9, {"acks": 0, "timeout": 10000, "topic_data": [
            {"name": "acks", "partition_data": [{"index": 0, "records": build_batch([(None, b"b", (), 1)])}]}]}))
        deadline = time.monotonic() + 10
        while _latest(client, "acks") < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _latest(client, "acks") == 2
        bad = client.request(PRODUCE, 9, {"acks": 2, "timeout": 10000, "topic_data": [
            {"name": "acks", "partition_data": [{"index": 0, "records": build_batch([(None, b"c", (), 1)])}]}]})
        assert bad.responses[0].partition_responses[0].error_code == ErrorCode.invalid_required_acks


def test_message_larger_than_max_message_bytes(broker):
    with RawClient(broker.bootstrap) as client:
        _create(client, "small-max", configs={"max.message.bytes": "1000"})
        result = _produce(client, "small-max", build_batch([(None, b"x" * 2000, (), 1)]))
        assert result.error_code == ErrorCode.message_too_large
        assert _latest(client, "small-max") == 0


def test_fetch_limits_whole_batches(broker):
    with RawClient(broker.bootstrap) as client:
        _create(client, "limits", partitions=2)
        for p in (0, 1):
            for i in range(10):
                assert _produce(client, "limits", build_batch([(None, b"y" * 100, (), 1)]),
                                partition=p).error_code == 0
        one_batch = len(build_batch([(None, b"y" * 100, (), 1)]))
        # partition_max_bytes below one batch still returns the first batch (progress guarantee).
        (tiny,) = _fetch(client, [("limits", 0, 0, 10)])
        assert len(tiny.records) == one_batch
        # max_bytes caps the response: three batches' worth from partition 0, nothing from 1.
        first, second = _fetch(client, [("limits", 0, 0, 1 << 20), ("limits", 1, 0, 1 << 20)],
                               max_bytes=3 * one_batch)
        assert len(first.records) == 3 * one_batch and second.records == b""
        # Reading from the middle starts at the batch holding the offset.
        (middle,) = _fetch(client, [("limits", 0, 7, 1 << 20)])
        assert len(middle.records) == 3 * one_batch
        assert int.from_bytes(middle.records[:8], "big") == 7


def test_long_poll_waits_for_data_then_returns_it(broker):
    with RawClient(broker.bootstrap) as client:
        _create(client, "poll")
    with RawClient(broker.bootstrap) as producer_client:
        timer = threading.Timer(0.5, lambda: _produce(producer_client, "poll", build_batch([(None, b"late", (), 1)])))
        with RawClient(broker.bootstrap) as consumer_client:
            timer.start()
            # Long poll for up to 10 s: it must come back with the record produced meanwhile.
            (partition,) = _fetch(consumer_client, [("poll", 0, 0, 1 << 20)], max_wait_ms=10_000, min_bytes=1)
            timer.join(timeout=10)
            assert partition.error_code == ErrorCode.none
            assert partition.high_watermark == 1 and len(partition.records) > 0
            # With nothing new, the poll ends empty at max_wait.
            (empty,) = _fetch(consumer_client, [("poll", 0, 1, 1 << 20)], max_wait_ms=200, min_bytes=1)
            assert empty.records == b""
