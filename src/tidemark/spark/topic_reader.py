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

log = logging.getLogger(__name__)

TOPIC_SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
    "timestampType int, headers array<struct<key: string, value: binary>>"
)
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
# Kafka's TimestampType ids, which Spark's connector puts in timestampType.
_TIMESTAMP_TYPES = {TIMESTAMP_CREATE_TIME: 0, TIMESTAMP_LOG_APPEND_TIME: 1}
ROWS_PER_BATCH = 10_000
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


def data_loss(topic: str, partition: int, start: int, end: int, why: str, fail: bool) -> None:
    message = (f"{topic}-{partition}: offsets [{start}, {end}) are no longer available ({why}). "
               "Set failOnDataLoss=false to skip them.")
    if fail:
        raise DataLossError(message)
    log.warning("skipping lost data: %s", message)


class _Columns:
    """Column lists for one Arrow batch."""

    def __init__(self) -> None:
        self.keys: list = []
        self.values: list = []
        self.offsets: list[int] = []
        self.timestamps: list = []
        self.timestamp_types: list[int] = []
        self.headers: list = []

    def to_batch(self, topic: str, partition: int) -> pa.RecordBatch:
        n = len(self.offsets)
        return pa.RecordBatch.from_arrays([
            pa.array(self.keys, pa.binary()),
            pa.array(self.values, pa.binary()),
            pa.array([topic] * n, pa.string()),
            pa.array([partition] * n, pa.int32()),
            pa.array(self.offsets, pa.int64()),
            pa.array(self.timestamps, pa.timestamp("us", tz="UTC")),
            pa.array(self.timestamp_types, pa.int32()),
            pa.array(self.headers, ARROW_SCHEMA.field("headers").type),
        ], schema=ARROW_SCHEMA)


def read_range(task: OffsetRange) -> Iterator[pa.RecordBatch]:
    """Yield the records of task's range, in offset order, as Arrow batches."""
    start = task.start
    consumer = Consumer({
        **task.consumer_config,
        "group.id": READER_GROUP_ID,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "error",
    })
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
    columns = _Columns()
    deadline = time.monotonic() + task.poll_timeout_ms / 1000
    end = task.end
    while True:
        messages = consumer.consume(num_messages=ROWS_PER_BATCH, timeout=1.0)
        if not messages:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{task.topic}-{task.partition}: no records within "
                                   f"{task.poll_timeout_ms} ms while reading [{start}, {end})")
            continue
        deadline = time.monotonic() + task.poll_timeout_ms / 1000
        done = False
        for message in messages:
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    # The partition ended before `end`: the log was truncated under us.
                    if message.offset() < end:
                        data_loss(task.topic, task.partition, message.offset(), end,
                                  f"the log now ends at {message.offset()}", task.fail_on_data_loss)
                    done = True
                    break
                raise KafkaException(error)
            offset = message.offset()
            if offset >= end:
                done = True
                break
            timestamp_type, timestamp_ms = message.timestamp()
            columns.keys.append(message.key())
            columns.values.append(message.value())
            columns.offsets.append(offset)
            columns.timestamps.append(timestamp_ms * 1000 if timestamp_ms >= 0 else None)
            columns.timestamp_types.append(_TIMESTAMP_TYPES.get(timestamp_type, -1))
            headers = message.headers()
            columns.headers.append([{"key": k, "value": v} for k, v in headers] if headers else [])
            if offset == end - 1:
                done = True
                break
        if len(columns.offsets) >= ROWS_PER_BATCH or (done and columns.offsets):
            yield columns.to_batch(task.topic, task.partition)
            columns = _Columns()
        if done:
            return
