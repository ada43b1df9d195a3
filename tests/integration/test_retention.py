"""Retention by time and size advances the log start offset; fetching below it is out of range."""

from __future__ import annotations

import time

from kio.schema.errors import ErrorCode

from tests.integration.raw import RawClient
from tidemark.records.batch import build_batch

DAY_MS = 24 * 3600 * 1000


def _produce_batches(client, topic, count, timestamp_ms):
    for i in range(count):
        batch = build_batch([(None, b"r%03d-" % i + b"x" * 200, (), timestamp_ms)])
        assert client.produce(topic, batch).error_code == ErrorCode.none


def _fetch_error(client, topic, offset):
    partition = client.fetch([(topic, 0, offset, 1 << 20)])[0]
    return partition.error_code, partition.log_start_offset


def _wait_for_earliest_above(client, topic, offset, timeout_s=20.0):
    """The log start once retention has moved it past offset and then left it alone for 0.5 s.

    A retention pass may run while the records are still being produced, so the first moved
    log start is not necessarily the last one.
    """
    deadline = time.monotonic() + timeout_s
    earliest, unchanged = offset, 0
    while time.monotonic() < deadline:
        now = client.list_offset(topic, -2).offset
        unchanged = unchanged + 1 if now == earliest else 0
        earliest = now
        if earliest > offset and unchanged >= 5:
            return earliest
        time.sleep(0.1)
    raise AssertionError(f"log start offset of {topic} did not settle above {offset} within {timeout_s}s")


def test_retention_by_time_and_size(make_broker):
    broker = make_broker({"log.retention.check.interval.ms": "100"}).start()
    with RawClient(broker.bootstrap) as client:
        # Old records in small segments: every closed segment is past retention.ms at once.
        assert client.create_topic("by-time", configs={"retention.ms": "60000", "segment.bytes": "1024"}).error_code == ErrorCode.none
        _produce_batches(client, "by-time", 20, int(time.time() * 1000) - DAY_MS)
        earliest = _wait_for_earliest_above(client, "by-time", 0)
        assert 0 < earliest < 20  # the active segment is never deleted
        assert _fetch_error(client, "by-time", 0) == (ErrorCode.offset_out_of_range, earliest)
        assert _fetch_error(client, "by-time", earliest)[0] == ErrorCode.none

        assert client.create_topic("by-size", configs={"retention.bytes": "2048", "segment.bytes": "1024"}).error_code == ErrorCode.none
        _produce_batches(client, "by-size", 30, int(time.time() * 1000))
        earliest = _wait_for_earliest_above(client, "by-size", 0)
        assert _fetch_error(client, "by-size", earliest - 1)[0] == ErrorCode.offset_out_of_range
    broker.stop()


def test_list_offsets_max_timestamp_and_by_time(broker):
    with RawClient(broker.bootstrap) as client:
        assert client.create_topic("times", configs={}).error_code == ErrorCode.none
        for ts in (5_000, 9_000, 7_000):
            _produce_batches(client, "times", 1, ts)

        def lookup(timestamp):
            partition = client.list_offset("times", timestamp)
            return partition.offset, partition.timestamp

        assert lookup(-3) == (1, 9_000)
        assert lookup(6_000) == (1, 9_000)
        assert lookup(5_000) == (0, 5_000)
        assert lookup(9_001) == (-1, -1)
        assert lookup(-1)[0] == 3
