"""The "tidemark" sink: DataFrame rows to a topic, with acks=all.

Columns, as in Spark's Kafka connector: value (required; string or binary), key (optional),
topic (optional; the "topic" option, when set, overrides it), partition (optional: otherwise
the producer's partitioner), headers (optional: array<struct<key: string, value: binary>>). Other columns are
ignored. A task waits for every record's acknowledgement and fails, naming the first error and
how many records were not written, when any was refused or not acknowledged in time: Spark
then reports the failed job instead of dropping writes. Kafka writes cannot be rolled back, so
a retried task can write a record twice (at-least-once, like Spark's own connector).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from confluent_kafka import KafkaException, Producer
from pyspark.sql import Row
from pyspark.sql.datasource import (
    DataSourceStreamWriter,
    DataSourceWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructType

from tidemark.spark.clients import check_authentication, quiet
from tidemark.spark.options import OptionError, SinkOptions
from tidemark.spark.shipping import ShippedToExecutors

FLUSH_TIMEOUT_S = 120.0
_COLUMN_TYPES = {
    "key": (StringType, BinaryType),
    "value": (StringType, BinaryType),
    "topic": (StringType,),
    "partition": (IntegerType,),
}


class SinkWriteError(RuntimeError):
    """Records of a task were refused by the cluster or not acknowledged in time."""


@dataclass
class WrittenRecords(WriterCommitMessage):
    count: int


def check_sink_schema(schema: StructType, options: SinkOptions) -> None:
    names = set(schema.fieldNames())
    if "value" not in names:
        raise OptionError('the sink needs a "value" column')
    if "topic" not in names and not options.topic:
        raise OptionError('the sink needs a "topic" column or the "topic" option')
    for field in schema.fields:
        allowed = _COLUMN_TYPES.get(field.name)
        if allowed and not isinstance(field.dataType, allowed):
            kinds = " or ".join(t.typeName() for t in allowed)
            raise OptionError(f'column "{field.name}" must be {kinds}, not {field.dataType.simpleString()}')


def _as_bytes(value) -> bytes | None:
    return value.encode() if isinstance(value, str) else value


def _producer_config(options: SinkOptions) -> dict:
    return {"bootstrap.servers": options.bootstrap_servers, "linger.ms": 5, **options.client_config, "acks": "all"}


def write_rows(options: SinkOptions, rows: Iterator[Row]) -> WrittenRecords:
    """Produce every row, wait for all acknowledgements, fail loudly on any error."""
    producer = Producer(quiet(_producer_config(options)))
    try:
        return _produce_all(producer, options, rows)
    except BaseException:
        producer.purge()  # the task failed: close() below must not wait to deliver its queue
        raise
    finally:
        producer.close()  # the task's connections end with the task, not when it is collected


def _produce_all(producer: Producer, options: SinkOptions, rows: Iterator[Row]) -> WrittenRecords:
    errors: list = []

    def delivered(error, _message) -> None:
        if error is not None:
            errors.append(error)

    count = 0
    for row in rows:
        fields = row.asDict()
        topic = options.topic or fields.get("topic")
        if not topic:
            raise SinkWriteError(f"row {count} has no topic and the sink has no \"topic\" option")
        extra = {}
        if fields.get("partition") is not None:
            extra["partition"] = fields["partition"]
        if fields.get("headers"):
            extra["headers"] = [(h["key"], _as_bytes(h["value"])) for h in fields["headers"]]
        while True:
            try:
                producer.produce(topic, _as_bytes(fields["value"]), _as_bytes(fields.get("key")),
                                 on_delivery=delivered, **extra)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.1)
            except KafkaException as exc:
                raise SinkWriteError(f"could not produce to {topic}: {exc}") from exc
        count += 1
        if count % 1000 == 0:
            producer.poll(0)
    remaining = producer.flush(FLUSH_TIMEOUT_S)
    if errors or remaining:
        first = f"; first error: {errors[0]}" if errors else ""
        raise SinkWriteError(f"{len(errors) + remaining} of {count} records were not written "
                             f"({remaining} not acknowledged within {FLUSH_TIMEOUT_S:.0f} s){first}")
    return WrittenRecords(count)


class TopicWriter(ShippedToExecutors, DataSourceWriter):
    def __init__(self, options: SinkOptions, schema: StructType) -> None:
        check_sink_schema(schema, options)
        # On the driver: refused credentials fail the write now, not each task after its timeouts.
        check_authentication(_producer_config(options))
        self.options = options

    def write(self, iterator: Iterator[Row]) -> WrittenRecords:
        return write_rows(self.options, iterator)


class TopicStreamWriter(ShippedToExecutors, DataSourceStreamWriter):
    def __init__(self, options: SinkOptions, schema: StructType) -> None:
        check_sink_schema(schema, options)
        check_authentication(_producer_config(options))
        self.options = options

    def write(self, iterator: Iterator[Row]) -> WrittenRecords:
        return write_rows(self.options, iterator)

    def commit(self, messages, batchId: int) -> None:
        """Every record was acknowledged before its task finished: nothing left to do."""

    def abort(self, messages, batchId: int) -> None:
        """Acknowledged records stay in the topic; Spark retries the batch (at-least-once)."""
