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


def _wait_for_earliest_above(client, topic, offset, timeout_s=60.0):
    """The log start once retention has moved it past offset (the timeout only ends a hang)."""
    deadline = time.monotonic() + timeout_s
    while (earliest := client.list_offset(topic, -2).offset) <= offset:
        assert time.monotonic() < deadline, f"log start offset of {topic} never moved past {offset}"
        time.sleep(0.05)
    return earliest


def test_retention_by_time_and_size(make_broker):
    # Records are produced while retention cannot run, then the broker restarts with a fast
    # retention check: its first pass sees the final logs and deletes everything due at once
    # (one pass deletes every due segment), so the first log start that moves is the final one.
    first = make_broker({"log.retention.check.interval.ms": str(24 * 3600 * 1000)}).start()
    with RawClient(first.bootstrap) as client:
        # Old records in small segments: every closed segment is past retention.ms.
        assert client.create_topic("by-time", configs={"retention.ms": "60000", "segment.bytes": "1024"}).error_code == ErrorCode.none
        _produce_batches(client, "by-time", 20, int(time.time() * 1000) - DAY_MS)
        assert client.create_topic("by-size", configs={"retention.bytes": "2048", "segment.bytes": "1024"}).error_code == ErrorCode.none
        _produce_batches(client, "by-size", 30, int(time.time() * 1000))
        assert client.list_offset("by-time", -2).offset == client.list_offset("by-size", -2).offset == 0
    assert first.stop() == 0
    active_base = max(int(p.stem) for p in (first.data_dir / "by-time-0").glob("*.log"))

    broker = make_broker({"log.retention.check.interval.ms": "100"}, data_dir=first.data_dir).start()
    with RawClient(broker.bootstrap) as client:
        earliest = _wait_for_earliest_above(client, "by-time", 0)
        assert earliest == active_base  # every closed segment went, the active segment stays
        # As Kafka's, an error answer carries no offsets (log start -1): clients ask ListOffsets.
        assert _fetch_error(client, "by-time", 0) == (ErrorCode.offset_out_of_range, -1)
        assert _fetch_error(client, "by-time", earliest)[0] == ErrorCode.none

        earliest = _wait_for_earliest_above(client, "by-size", 0)
        assert _fetch_error(client, "by-size", earliest - 1)[0] == ErrorCode.offset_out_of_range
        assert _fetch_error(client, "by-size", earliest)[0] == ErrorCode.none
        size = sum(p.stat().st_size for p in (broker.data_dir / "by-size-0").glob("*.log"))
        assert size - 1024 < 2048  # within retention.bytes but for at most one segment
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
