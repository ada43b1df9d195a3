"""Executor side of the "tidemark" source: read one partition's offset range into Arrow batches.

Runs inside a Spark task (stateless: everything it needs is in the OffsetRange it is handed).
Rows have the schema of Spark's Kafka connector. Offsets in a range may have gaps (compaction,
transaction markers), so a range ends at the first record at or past its end, or at the
partition's end, not at a record numbered end - 1.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from pyspark.sql.datasource import InputPartition

from tidemark.spark.clients import quiet

log = logging.getLogger(__name__)

TOPIC_SCHEMA = ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
                "timestampType int")
TOPIC_SCHEMA_WITH_HEADERS = TOPIC_SCHEMA + ", headers array<struct<key: string, value: binary>>"  # includeHeaders
ARROW_SCHEMA = pa.schema([
    ("key", pa.binary()),
    ("value", pa.binary()),
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("timestamp", pa.timestamp("us", tz="UTC")),
    ("timestampType", pa.int32()),
    ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
])
ARROW_SCHEMA_WITHOUT_HEADERS = ARROW_SCHEMA.remove(ARROW_SCHEMA.get_field_index("headers"))
# Kafka's TimestampType ids, which Spark's connector puts in timestampType.
_TIMESTAMP_TYPES = {TIMESTAMP_CREATE_TIME: 0, TIMESTAMP_LOG_APPEND_TIME: 1}
RECORDS_PER_POLL = 10_000  # also the most rows of one Arrow batch
READER_GROUP_ID = "tidemark-spark-reader"  # librdkafka wants one; this reader never joins or commits


class DataLossError(RuntimeError):
    """Offsets a query needs are gone from the log (retention, deletion) and failOnDataLoss is on."""


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """One Spark task: records [start, end) of one partition."""

    topic: str
    partition: int
    start: int
    end: int
    consumer_config: dict
    fail_on_data_loss: bool
    poll_timeout_ms: int
    include_headers: bool = False


def data_loss(topic: str, partition: int, start: int, end: int, why: str, fail: bool) -> None:
    message = (f"{topic}-{partition}: offsets [{start}, {end}) are no longer available ({why}). "
               "Set failOnDataLoss=false to skip them.")
    if fail:
        raise DataLossError(message)
    log.warning("skipping lost data: %s", message)


_HEADERS_TYPE = ARROW_SCHEMA.field("headers").type


def _headers_column(headers: list) -> pa.Array:
    if not any(headers):  # the common case: no record has headers; skip per-record work
        no_entries = pa.repeat(pa.scalar(0, pa.int32()), len(headers) + 1)
        return pa.ListArray.from_arrays(no_entries, pa.array([], _HEADERS_TYPE.value_type), type=_HEADERS_TYPE)
    return pa.array([[{"key": k, "value": v} for k, v in h] if h else [] for h in headers], _HEADERS_TYPE)


def to_record_batch(topic: str, partition: int, messages: list, headers: bool = True) -> pa.RecordBatch:
    """Arrow columns for records of one partition, one pass per column (no per-row objects); the
    headers column only if asked (includeHeaders)."""
    # Imported here, in the Python workers that build batches, not at module import: the
    # streaming planner (a fresh interpreter for every query, that only plans) would otherwise
    # pay for it (~50 ms of CPU, 0.3 s of wall time on a busy machine) for nothing.
    import pyarrow.compute as pc

    n = len(messages)
    timestamps = [m.timestamp() for m in messages]
    millis = pa.array([t[1] for t in timestamps], pa.int64())
    return pa.RecordBatch.from_arrays([
        pa.array([m.key() for m in messages], pa.binary()),
        pa.array([m.value() for m in messages], pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.array([m.offset() for m in messages], pa.int64()),
        # librdkafka reports -1 when a record has no timestamp.
        pc.if_else(pc.less(millis, 0), None, pc.multiply(millis, 1000)).cast(ARROW_SCHEMA.field("timestamp").type),
        pa.array([_TIMESTAMP_TYPES.get(t[0], -1) for t in timestamps], pa.int32()),
        *([_headers_column([m.headers() for m in messages])] if headers else []),
    ], schema=ARROW_SCHEMA if headers else ARROW_SCHEMA_WITHOUT_HEADERS)


def read_range(task: OffsetRange) -> Iterator[pa.RecordBatch]:
    """Yield the records of task's range, in offset order, as Arrow batches."""
    if not isinstance(task, OffsetRange):
        return  # Spark plans one placeholder task when a read has no partitions at all
    start = task.start
    consumer = Consumer(quiet({
        # librdkafka's default (1 s) pauses a partition whose local queue is full for a whole
        # second; a task that only drains one partition wants it refilled at once.
        "fetch.queue.backoff.ms": 10,
        "group.id": READER_GROUP_ID,
        # Spark's connector (the Java consumer) reads uncommitted unless kafka.isolation.level
        # says read_committed; librdkafka's own default is read_committed.
        "isolation.level": "read_uncommitted",
        **task.consumer_config,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "error",
    }))
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(task.topic, task.partition),
                                                  timeout=task.poll_timeout_ms / 1000)
        if start < low:
            data_loss(task.topic, task.partition, start, min(low, task.end),
                      f"the log now starts at {low}", task.fail_on_data_loss)
            start = low
        if start >= min(task.end, high):
            if high < task.end:
                data_loss(task.topic, task.partition, max(start, high), task.end,
                          f"the log now ends at {high}", task.fail_on_data_loss)
            return
        consumer.assign([TopicPartition(task.topic, task.partition, start)])
        yield from _consume(consumer, task, start)
    finally:
        consumer.close()


def _consume(consumer: Consumer, task: OffsetRange, start: int) -> Iterator[pa.RecordBatch]:
    end = task.end
    next_offset = start
    timeout_s = task.poll_timeout_ms / 1000
    deadline = time.monotonic() + timeout_s
    while next_offset < end:
        # Never ask for more than the range still holds: consume() waits its whole timeout for
        # the count it was asked, even after the partition's end.
        messages = consumer.consume(num_messages=min(RECORDS_PER_POLL, end - next_offset), timeout=1.0)
        if not messages:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{task.topic}-{task.partition}: no records within "
                                   f"{task.poll_timeout_ms} ms while reading [{next_offset}, {end})")
            continue
        deadline = time.monotonic() + timeout_s
        records = [m for m in messages if m.error() is None]
        done = len(records) < len(messages) and _partition_ended(task, messages, end)
        # Offsets only grow: drop what lies at or past the end of the range.
        if records and records[-1].offset() >= end:
            records = [m for m in records if m.offset() < end]
            done = True
        if records:
            next_offset = records[-1].offset() + 1
            yield to_record_batch(task.topic, task.partition, records, task.include_headers)
        if done:
            return


def _partition_ended(task: OffsetRange, messages: list, end: int) -> bool:
    """Handle the error events among messages: True at the partition's end, raise otherwise."""
    for message in messages:
        error = message.error()
        if error is None:
            continue
        if error.code() != KafkaError._PARTITION_EOF:
            raise KafkaException(error)
        # The partition ended before `end`: the log was truncated under us.
        if message.offset() < end:
            data_loss(task.topic, task.partition, message.offset(), end,
                      f"the log now ends at {message.offset()}", task.fail_on_data_loss)
        return True
    return False
