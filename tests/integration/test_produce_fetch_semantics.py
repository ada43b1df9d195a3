"""Produce and fetch semantics clients rely on, checked with exact requests: idempotence, acks,
size limits and long polls."""

from __future__ import annotations

import threading
import time

from kio.schema.errors import ErrorCode

from tests.integration.raw import RawClient
from tidemark.records.batch import build_batch

PRODUCE, INIT_PRODUCER_ID = 0, 22


def test_idempotent_retry_is_acknowledged_not_appended_twice(broker):
    with RawClient(broker.bootstrap) as client:
        assert client.create_topic("idem").error_code == ErrorCode.none
        ids = client.request(INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout": 60000,
                                                   "producer_id": -1, "producer_epoch": -1})
        assert ids.error_code == ErrorCode.none and ids.producer_id >= 0

        def batch(sequence, count=2):
            return build_batch([(None, b"s%d" % (sequence + i), (), 1) for i in range(count)],
                               producer_id=ids.producer_id, producer_epoch=ids.producer_epoch,
                               base_sequence=sequence)

        first = client.produce("idem", batch(0))
        assert (first.error_code, first.base_offset) == (ErrorCode.none, 0)
        retry = client.produce("idem", batch(0))  # the same batch again, as after a lost response
        assert (retry.error_code, retry.base_offset) == (ErrorCode.none, 0)
        assert client.list_offset("idem", -1).offset == 2
        gap = client.produce("idem", batch(5))
        assert gap.error_code == ErrorCode.out_of_order_sequence_number
        assert client.produce("idem", batch(2)).base_offset == 2
        assert client.list_offset("idem", -1).offset == 4
        # A new epoch starts again at sequence 0 and fences the older epoch.
        fresh = build_batch([(None, b"new-epoch", (), 1)], producer_id=ids.producer_id,
                            producer_epoch=ids.producer_epoch + 1, base_sequence=0)
        assert client.produce("idem", fresh).base_offset == 4
        assert client.produce("idem", batch(4)).error_code == ErrorCode.invalid_producer_epoch
        assert client.list_offset("idem", -1).offset == 5

        # A new producer id never repeats one handed out before.
        # A client naming its current id gets a new one at epoch 0 (no blind epoch bump).
        again = client.request(INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout": 60000,
                                                     "producer_id": ids.producer_id,
                                                     "producer_epoch": ids.producer_epoch})
        assert again.producer_id != ids.producer_id and again.producer_epoch == 0


def test_acks_zero_and_one(broker):
    with RawClient(broker.bootstrap) as client:
        assert client.create_topic("acks").error_code == ErrorCode.none
        one = client.produce("acks", build_batch([(None, b"a", (), 1)]), acks=1)
        assert (one.error_code, one.base_offset) == (ErrorCode.none, 0)
        # acks=0 gets no response: the next response on the connection answers the next request.
        client.send_frame(client.encode(PRODUCE, 9, {"acks": 0, "timeout": 10000, "topic_data": [
            {"name": "acks", "partition_data": [{"index": 0, "records": build_batch([(None, b"b", (), 1)])}]}]}))
        deadline = time.monotonic() + 10
        while client.list_offset("acks", -1).offset < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert client.list_offset("acks", -1).offset == 2
        bad = client.request(PRODUCE, 9, {"acks": 2, "timeout": 10000, "topic_data": [
            {"name": "acks", "partition_data": [{"index": 0, "records": build_batch([(None, b"c", (), 1)])}]}]})
        assert bad.responses[0].partition_responses[0].error_code == ErrorCode.invalid_required_acks


def test_message_larger_than_max_message_bytes(broker):
    with RawClient(broker.bootstrap) as client:
        assert client.create_topic("small-max", configs={"max.message.bytes": "1000"}).error_code == ErrorCode.none
        result = client.produce("small-max", build_batch([(None, b"x" * 2000, (), 1)]))
        assert result.error_code == ErrorCode.message_too_large
        assert client.list_offset("small-max", -1).offset == 0


def test_fetch_limits_whole_batches(broker):
    with RawClient(broker.bootstrap) as client:
        assert client.create_topic("limits", partitions=2).error_code == ErrorCode.none
        for p in (0, 1):
            for i in range(10):
                assert client.produce("limits", build_batch([(None, b"y" * 100, (), 1)]),
                                partition=p).error_code == 0
        one_batch = len(build_batch([(None, b"y" * 100, (), 1)]))
        # partition_max_bytes below one batch still returns the first batch (progress guarantee).
        (tiny,) = client.fetch([("limits", 0, 0, 10)])
        assert len(tiny.records) == one_batch
        # max_bytes caps the response: three batches' worth from partition 0, nothing from 1.
        first, second = client.fetch([("limits", 0, 0, 1 << 20), ("limits", 1, 0, 1 << 20)],
                               max_bytes=3 * one_batch)
        assert len(first.records) == 3 * one_batch and second.records == b""
        # Reading from the middle starts at the batch holding the offset.
        (middle,) = client.fetch([("limits", 0, 7, 1 << 20)])
        assert len(middle.records) == 3 * one_batch
        assert int.from_bytes(middle.records[:8], "big") == 7


def test_long_poll_waits_for_data_then_returns_it(broker):
    with RawClient(broker.bootstrap) as client:
        assert client.create_topic("poll").error_code == ErrorCode.none
    with RawClient(broker.bootstrap) as producer_client:
        timer = threading.Timer(0.5, lambda: producer_client.produce("poll", build_batch([(None, b"late", (), 1)])))
        with RawClient(broker.bootstrap) as consumer_client:
            timer.start()
            # Long poll for up to 10 s: it must come back with the record produced meanwhile.
            (partition,) = consumer_client.fetch([("poll", 0, 0, 1 << 20)], max_wait_ms=10_000, min_bytes=1)
            timer.join(timeout=10)
            assert partition.error_code == ErrorCode.none
            assert partition.high_watermark == 1 and len(partition.records) > 0
            # With nothing new, the poll ends empty at max_wait.
            (empty,) = consumer_client.fetch([("poll", 0, 1, 1 << 20)], max_wait_ms=200, min_bytes=1)
            assert empty.records == b""
