"""Retention by time and size advances the log start offset; fetching below it is out of range."""

from __future__ import annotations

import time

from kio.schema.errors import ErrorCode

from tests.integration.raw import RawClient
from tidemark.records.batch import build_batch

PRODUCE, FETCH, LIST_OFFSETS, CREATE_TOPICS = 0, 1, 2, 19
DAY_MS = 24 * 3600 * 1000


def _create(client, name, configs):
    response = client.request(CREATE_TOPICS, 7, {"topics": [{"name": name, "num_partitions": 1,
        "replication_factor": 1, "assignments": [], "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
        "timeout": 10000, "validate_only": False})
    assert response.topics[0].error_code == ErrorCode.none


def _produce_batches(client, topic, count, timestamp_ms):
    for i in range(count):
        batch = build_batch([(None, b"r%03d-" % i + b"x" * 200, (), timestamp_ms)])
        response = client.request(PRODUCE, 9, {"acks": -1, "timeout": 10000, "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
        assert response.responses[0].partition_responses[0].error_code == ErrorCode.none


def _earliest(client, topic):
    response = client.request(LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -2, "current_leader_epoch": -1}]}]})
    return response.topics[0].partitions[0].offset


def _fetch_error(client, topic, offset):
    response = client.request(FETCH, 11, {"replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [{"topic": topic, "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "fetch_offset": offset, "log_start_offset": -1,
             "partition_max_bytes": 1 << 20}]}], "forgotten_topics_data": [], "rack_id": ""})
    partition = response.responses[0].partitions[0]
    return partition.error_code, partition.log_start_offset


def _wait_for_earliest_above(client, topic, offset, timeout_s=20.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        earliest = _earliest(client, topic)
        if earliest > offset:
            return earliest
        time.sleep(0.1)
    raise AssertionError(f"log start offset of {topic} stayed at {offset} for {timeout_s}s")


def test_retention_by_time_and_size(make_broker):
    broker = make_broker({"log.retention.check.interval.ms": "100"}).start()
    with RawClient(broker.bootstrap) as client:
        # Old records in small segments: every closed segment is past retention.ms at once.
        _create(client, "by-time", {"retention.ms": "60000", "segment.bytes": "1024"})
        _produce_batches(client, "by-time", 20, int(time.time() * 1000) - DAY_MS)
        earliest = _wait_for_earliest_above(client, "by-time", 0)
        assert 0 < earliest < 20  # the active segment is never deleted
        assert _fetch_error(client, "by-time", 0) == (ErrorCode.offset_out_of_range, earliest)
        assert _fetch_error(client, "by-time", earliest)[0] == ErrorCode.none

        _create(client, "by-size", {"retention.bytes": "2048", "segment.bytes": "1024"})
        _produce_batches(client, "by-size", 30, int(time.time() * 1000))
        earliest = _wait_for_earliest_above(client, "by-size", 0)
        assert _fetch_error(client, "by-size", earliest - 1)[0] == ErrorCode.offset_out_of_range
    broker.stop()


def test_list_offsets_max_timestamp_and_by_time(broker):
    with RawClient(broker.bootstrap) as client:
        _create(client, "times", {})
        for ts in (5_000, 9_000, 7_000):
            _produce_batches(client, "times", 1, ts)

        def lookup(timestamp):
            response = client.request(LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
                {"name": "times", "partitions": [{"partition_index": 0, "timestamp": timestamp,
                                                  "current_leader_epoch": -1}]}]})
            partition = response.topics[0].partitions[0]
            return partition.offset, partition.timestamp

        assert lookup(-3) == (1, 9_000)
        assert lookup(6_000) == (1, 9_000)
        assert lookup(5_000) == (0, 5_000)
        assert lookup(9_001) == (-1, -1)
        assert lookup(-1)[0] == 3
