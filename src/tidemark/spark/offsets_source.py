"""The "tidemark-offsets" data source: the `__consumer_offsets` log, one decoded row per record.

Two ways in, both partition-parallel (one Spark task per offsets partition):

- over the wire, from any Kafka-protocol cluster (tidemark or Apache Kafka)::

      spark.read.format("tidemark-offsets").option("bootstrap.servers", "host:9092").load()

  Each task reads its partition with confluent-kafka from the low to the high watermark the
  driver saw when planning the query (so a re-run task reads the same records), stopping at the
  high watermark or at partition EOF: compacted logs have gaps, and their last offsets may be
  transaction markers no consumer ever sees. Options `kafka.*` go to the client with the prefix
  stripped; `poll.timeout.ms` (default 30000) bounds how long a task waits for the next record.

- offline, from a tidemark data directory (a path every executor can read)::

      spark.read.format("tidemark-offsets").option("path", "tidemark-data").load()

  Each task reads the segment files of one `__consumer_offsets-N` directory (tidemark.log.direct_read):
  a torn tail ends the read. Safe on a running broker's data.

Transactions (TxnOffsetCommit): read from files, an offset commit written in a transaction has
`producer_id` and `producer_epoch` set (it counts only once its marker commits it), and each
transaction marker is a row of record type "transaction_marker" with `transaction_result`
("COMMIT" or "ABORT"), `coordinator_epoch` and the producer. Over the wire the client decides:
it hides markers, and with `kafka.isolation.level=read_committed` (as Spark's Kafka connector
takes it) reads only up to the last stable offset and skips aborted transactions' records; the
transaction columns stay null.

Option `topic` (default `__consumer_offsets`) names another topic of the same layout.

Rows follow `OFFSETS_LOG_SCHEMA`. `record_type` is "offset_commit", "group_metadata",
"transaction_marker", one of the KIP-848 consumer group record types ("consumer_group_metadata",
..., "consumer_group_current_member_assignment", with `group` and the record as JSON in
`consumer_group_record`), or "unknown": a key of a record type tidemark does not decode, or a key
or value that fails to decode; in the latter case `decode_error` says why and the job goes on. Timestamps
of -1 (absent) are null. A tombstone has `tombstone` true and null value fields.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from tidemark.records.consumer_protocol import subscribed_topics
from tidemark.records.offsets_schema import (
    OFFSETS_TOPIC,
    GroupMetadataKey,
    OffsetCommitKey,
    UnknownKey,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_key_tuple,
    decode_offset_commit_value,
    decode_offset_commit_value_tuple,
)

from tidemark.records import consumer_group_schema
from tidemark.records.control import control_type, decode_marker
from tidemark.records.errors import CorruptRecordError
from tidemark.spark.shipping import ShippedToExecutors

FORMAT = "tidemark-offsets"

OFFSET_COMMIT = "offset_commit"
GROUP_METADATA = "group_metadata"
UNKNOWN = "unknown"
# KIP-848 record types (keys 3..8), by Kafka's record names
CONSUMER_GROUP_RECORDS = {3: "consumer_group_metadata", 4: "consumer_group_partition_metadata",
                          5: "consumer_group_member_metadata", 6: "consumer_group_target_assignment_metadata",
                          7: "consumer_group_target_assignment_member", 8: "consumer_group_current_member_assignment"}
TRANSACTION_MARKER = "transaction_marker"

MEMBER_SCHEMA = StructType([
    StructField("member_id", StringType()),
    StructField("group_instance_id", StringType()),
    StructField("client_id", StringType()),
    StructField("client_host", StringType()),
    StructField("rebalance_timeout", IntegerType()),
    StructField("session_timeout", IntegerType()),
    StructField("subscribed_topics", ArrayType(StringType())),
])

#: One row per record of the offsets log. Offset commit rows fill group..expire_timestamp;
#: group metadata rows fill group and protocol_type..subscribed_topics, where
#: subscribed_topics is the union of the members' subscriptions as the coordinator decodes
#: them (null when unknown: not a "consumer" group, or a subscription it cannot decode).
OFFSETS_LOG_SCHEMA = StructType([
    StructField("offsets_partition", IntegerType(), False),
    StructField("log_offset", LongType(), False),
    StructField("timestamp", TimestampType()),
    StructField("record_type", StringType(), False),
    StructField("key_version", ShortType()),
    StructField("group", StringType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("tombstone", BooleanType(), False),
    StructField("value_version", ShortType()),
    StructField("committed_offset", LongType()),
    StructField("leader_epoch", IntegerType()),
    StructField("metadata", StringType()),
    StructField("commit_timestamp", TimestampType()),
    StructField("expire_timestamp", TimestampType()),
    StructField("protocol_type", StringType()),
    StructField("generation", IntegerType()),
    StructField("protocol", StringType()),
    StructField("leader", StringType()),
    StructField("current_state_timestamp", TimestampType()),
    StructField("members", ArrayType(MEMBER_SCHEMA)),
    StructField("subscribed_topics", ArrayType(StringType())),
    StructField("decode_error", StringType()),
    StructField("consumer_group_record", StringType()),
    StructField("producer_id", LongType()),
    StructField("producer_epoch", ShortType()),
    StructField("transaction_result", StringType()),
    StructField("coordinator_epoch", IntegerType()),
])

# The Arrow schema Spark checks every returned RecordBatch against (timestamps: us, UTC).
ARROW_SCHEMA = to_arrow_schema(OFFSETS_LOG_SCHEMA, timezone="UTC")

_GROUP_COLUMNS = ("protocol_type", "generation", "protocol", "leader", "current_state_timestamp", "members",
                  "subscribed_topics")
_TXN_COLUMNS = ("producer_id", "producer_epoch", "transaction_result", "coordinator_epoch")
_MAX_MS = (2**63 - 1) // 1000  # larger millisecond values do not fit a microsecond timestamp
_NULL_INT64 = pa.scalar(None, pa.int64())


def _timestamps(millis: list[int | None]) -> pa.Array:
    """Epoch milliseconds to Spark's timestamp column; -1 (absent) and out-of-range become null."""
    ms = pa.array(millis, pa.int64())
    invalid = pc.or_(pc.less(ms, 0), pc.greater(ms, _MAX_MS))
    ms = pc.if_else(invalid, _NULL_INT64, ms)
    return pc.multiply(ms, 1000).cast(ARROW_SCHEMA.field("timestamp").type)


def _version(data: bytes) -> int | None:
    """The int16 every key and value starts with (None when shorter)."""
    if len(data) < 2:
        return None
    version = data[0] << 8 | data[1]
    return version - 0x10000 if version & 0x8000 else version


def _subscribed_topics(group_id: str, value) -> list[str] | None:
    """Topics the group's members subscribe to, decoded exactly as the coordinator does."""
    topics = subscribed_topics(value)
    return None if topics is None else sorted(topics)


def _member_row(group_id: str, value, member) -> dict[str, Any]:
    single = type(value)(value.protocol_type, value.generation, value.protocol, value.leader,
                         value.current_state_timestamp, (member,))
    return {
        "member_id": member.member_id,
        "group_instance_id": member.group_instance_id,
        "client_id": member.client_id,
        "client_host": member.client_host,
        "rebalance_timeout": member.rebalance_timeout,
        "session_timeout": member.session_timeout,
        "subscribed_topics": _subscribed_topics(group_id, single),
    }


_NO_COMMIT = (None, None, None, None, None)


class OffsetsRowBuilder:
    """Decodes the records of one offsets partition into Arrow record batches of OFFSETS_LOG_SCHEMA.

    Each record appends its values to the lists of the dense columns (`columns`), but for its
    key's columns: those are one tuple per distinct key (`keys`), the row holding its index, since
    a log commits the same (group, topic, partition) over and over. The group metadata columns,
    rare, are filled sparsely.
    """

    # The lists of `columns`; "key" indexes `keys`.
    _DENSE = ("log_offset", "timestamp", "key", "tombstone", "value_version", "committed_offset", "leader_epoch",
              "metadata", "commit_timestamp", "expire_timestamp", "decode_error")
    # The order of the `keys` tuples.
    _KEY = ("record_type", "key_version", "group", "topic", "partition")

    def __init__(self, offsets_partition: int) -> None:
        self.offsets_partition = offsets_partition
        self.columns: tuple[list, ...] = tuple([] for _ in self._DENSE)
        self.keys: list[tuple] = []  # values of _KEY
        self.key_index: dict[bytes, int] = {}  # offset commit key bytes -> index in keys (decode_records)
        self.group_rows: list[tuple[int, tuple]] = []  # (row, values of _GROUP_COLUMNS)
        self.consumer_group_rows: list[tuple[int, str]] = []  # (row, KIP-848 record as JSON)
        self.txn_rows: list[tuple[int, tuple]] = []  # (row, values of _TXN_COLUMNS)

    def __len__(self) -> int:
        return len(self.columns[0])

    def add(self, log_offset: int, timestamp: int, key: bytes | None, value: bytes | None) -> None:
        """Decode one record; a record that does not decode becomes an "unknown" row."""
        record_type = UNKNOWN
        key_version = group = topic = partition = value_version = error = None
        commit = _NO_COMMIT
        try:
            if key is None:
                raise ValueError("null key")
            key_version = _version(key)
            if value is not None:
                value_version = _version(value)
            decoded = decode_key(key)
            if type(decoded) is OffsetCommitKey:
                group, topic, partition = decoded.group, decoded.topic, decoded.partition
                if value is not None:
                    c = decode_offset_commit_value(value)
                    commit = (c.offset, c.leader_epoch, c.metadata, c.commit_timestamp, c.expire_timestamp)
                record_type = OFFSET_COMMIT
            elif type(decoded) is GroupMetadataKey:
                group = decoded.group
                if value is not None:
                    self._add_group(group, decode_group_metadata_value(value))
                record_type = GROUP_METADATA
            else:
                assert isinstance(decoded, UnknownKey)
                if decoded.version in CONSUMER_GROUP_RECORDS:
                    cg_key = consumer_group_schema.decode_key(key)
                    group = cg_key.group
                    cg_value = None if value is None else consumer_group_schema.decode_value(cg_key.record_type, value)
                    self.consumer_group_rows.append((len(self), consumer_group_schema.to_json(
                        {"member_id": cg_key.member_id, "value": cg_value})))
                    record_type = CONSUMER_GROUP_RECORDS[decoded.version]
        except ValueError as exc:
            record_type, commit, error = UNKNOWN, _NO_COMMIT, str(exc) or type(exc).__name__
        self.keys.append((record_type, key_version, group, topic, partition))
        row = (log_offset, timestamp, len(self.keys) - 1, value is None, value_version, *commit, error)
        for column, item in zip(self.columns, row):
            column.append(item)

    def transactional(self, producer_id: int, producer_epoch: int) -> None:
        """The row just added is an offset commit of this producer's transaction."""
        self.txn_rows.append((len(self) - 1, (producer_id, producer_epoch, None, None)))

    def add_marker(self, log_offset: int, timestamp: int, producer_id: int, producer_epoch: int,
                   key: bytes | None, value: bytes | None) -> None:
        """A transaction marker (a control record) as its own row."""
        error = result = coordinator_epoch = None
        try:
            marker = decode_marker(key, value)
            if marker is None:
                raise ValueError(f"control record of type {control_type(key)}")
            result, coordinator_epoch = ("COMMIT" if marker.committed else "ABORT"), marker.coordinator_epoch
        except (ValueError, CorruptRecordError) as exc:
            error = str(exc) or type(exc).__name__
        self.keys.append((TRANSACTION_MARKER if error is None else UNKNOWN, None, None, None, None))
        row = (log_offset, timestamp, len(self.keys) - 1, False, *_TOMBSTONE_COMMIT, error)
        for column, item in zip(self.columns, row):
            column.append(item)
        self.txn_rows.append((len(self) - 1, (producer_id, producer_epoch, result, coordinator_epoch)))

    def _add_group(self, group: str, metadata) -> None:
        self.group_rows.append((len(self), (
            metadata.protocol_type, metadata.generation, metadata.protocol, metadata.leader,
            metadata.current_state_timestamp,
            [_member_row(group, metadata, m) for m in metadata.members],
            _subscribed_topics(group, metadata))))

    def _group_column(self, index: int, rows: int) -> list:
        column: list = [None] * rows
        for row, values in self.group_rows:
            column[row] = values[index]
        return column

    def flush(self) -> pa.RecordBatch | None:
        """The rows added since the last flush as one record batch (None when there are none)."""
        rows = len(self)
        if not rows:
            return None
        schema = ARROW_SCHEMA
        dense = dict(zip(self._DENSE, self.columns))
        columns: dict[str, pa.Array] = {
            "offsets_partition": pa.array([self.offsets_partition] * rows, pa.int32()),
            "current_state_timestamp": _timestamps(self._group_column(4, rows)),
        }
        key_index = pa.array(dense.pop("key"), pa.int32())
        for name, values in zip(self._KEY, zip(*self.keys)):
            columns[name] = _take(pa.array(values, schema.field(name).type), key_index)
        for name in ("timestamp", "commit_timestamp", "expire_timestamp"):
            columns[name] = _timestamps(dense.pop(name))
        for name, values in dense.items():
            columns[name] = pa.array(values, schema.field(name).type)
        for i, name in enumerate(_GROUP_COLUMNS):
            if name not in columns:
                columns[name] = pa.array(self._group_column(i, rows), schema.field(name).type)
        consumer_group_column: list = [None] * rows
        for row, text in self.consumer_group_rows:
            consumer_group_column[row] = text
        columns["consumer_group_record"] = pa.array(consumer_group_column, pa.string())
        for i, name in enumerate(_TXN_COLUMNS):
            column: list = [None] * rows
            for row, values in self.txn_rows:
                column[row] = values[i]
            columns[name] = pa.array(column, schema.field(name).type)
        # Emptied in place: decode_records holds on to these.
        for column in self.columns:
            column.clear()
        self.keys.clear()
        self.key_index.clear()
        self.group_rows.clear()
        self.consumer_group_rows.clear()
        self.txn_rows.clear()
        return pa.RecordBatch.from_arrays([columns[name] for name in schema.names], schema=schema)


def _take(values: pa.Array, indices: pa.Array) -> pa.Array:
    """values.take(indices), without the all-valid bitmap take adds (as pa.array would build it)."""
    taken = values.take(indices)
    if taken.null_count == 0 and taken.buffers()[0] is not None:
        taken = pa.Array.from_buffers(taken.type, len(taken), [None, *taken.buffers()[1:]])
    return taken


_TOMBSTONE_COMMIT = (None, None, None, None, None, None)  # value_version .. expire_timestamp


def decode_records(offsets_partition: int, records: Iterable[tuple[int, int, bytes | None, bytes | None]],
                   batch_rows: int = 65536, transactions: dict[int, tuple[int, int, bool]] | None = None
                   ) -> Iterator[pa.RecordBatch]:
    """Record batches of decoded (log offset, timestamp ms, key, value) records.

    The same rows as OffsetsRowBuilder.add makes of each record, with a lean path for the
    offset commits that fill the log (keys v0/v1, values v1/v3 or tombstones): their key and
    value decoded to tuples, each distinct key once per batch. Any other record, and any
    record that does not decode, goes through add().

    `transactions` (log offset -> producer id, producer epoch, is a marker), filled by the
    records' iterator as it goes, names the records of transactional and control batches.
    """
    builder = OffsetsRowBuilder(offsets_partition)
    add = builder.add
    keys, key_index = builder.keys, builder.key_index
    log_offsets = builder.columns[0]
    (log_offset_append, timestamp_append, key_append, tombstone_append, value_version_append, offset_append,
     leader_epoch_append, metadata_append, commit_append, expire_append, error_append) = (
        column.append for column in builder.columns)
    key_tuple = decode_offset_commit_key_tuple
    value_tuple = decode_offset_commit_value_tuple
    txns = transactions if transactions is not None else {}
    for offset, timestamp, key, value in records:
        if txns:
            txn = txns.pop(offset, None)
            if txn is not None:
                if txn[2]:
                    builder.add_marker(offset, timestamp, txn[0], txn[1], key, value)
                else:
                    add(offset, timestamp, key, value)
                    builder.transactional(txn[0], txn[1])
                if len(log_offsets) >= batch_rows:
                    yield builder.flush()  # type: ignore[misc]
                continue
        k = key_index.get(key)  # type: ignore[arg-type]
        if k is None:
            decoded = None if key is None else key_tuple(key)
            if decoded is not None:
                k = key_index[key] = len(keys)  # type: ignore[index]
                keys.append((OFFSET_COMMIT, *decoded))
        if k is None:
            add(offset, timestamp, key, value)
        else:
            commit = _TOMBSTONE_COMMIT if value is None else value_tuple(value)
            if commit is None:
                add(offset, timestamp, key, value)
            else:
                value_version, committed, leader_epoch, metadata, commit_timestamp, expire_timestamp = commit
                log_offset_append(offset)
                timestamp_append(timestamp)
                key_append(k)
                tombstone_append(value is None)
                value_version_append(value_version)
                offset_append(committed)
                leader_epoch_append(leader_epoch)
                metadata_append(metadata)
                commit_append(commit_timestamp)
                expire_append(expire_timestamp)
                error_append(None)
        if len(log_offsets) >= batch_rows:
            yield builder.flush()  # type: ignore[misc]
    batch = builder.flush()
    if batch is not None:
        yield batch


# --------------------------------------------------------------------------------------------
# Reading the records: segment files or a Kafka-protocol cluster


@dataclass(frozen=True)
class FilesPartition(InputPartition):
    """One offsets partition's directory in a data directory."""

    offsets_partition: int
    directory: str


@dataclass(frozen=True)
class WirePartition(InputPartition):
    """One offsets partition of a cluster, from low to high watermark (as seen when planning)."""

    offsets_partition: int
    low: int
    high: int


def _file_records(directory: str, transactions: dict[int, tuple[int, int, bool]]
                  ) -> Iterator[tuple[int, int, bytes | None, bytes | None]]:
    """The offsets partition's records from its segment files (on the executor), markers
    included; those of transactional batches are entered in `transactions` as they go."""
    from tidemark.log.direct_read import iter_segment_batches, iter_segment_data
    from tidemark.records import iter_timestamped_key_values

    def decode(data: bytes, position: int) -> list[tuple[int, int, bytes | None, bytes | None]]:
        return list(iter_timestamped_key_values(data, position))

    for name, data, first in iter_segment_data(Path(directory)):
        for header, batch in iter_segment_batches(data, label=f"{Path(directory).name}/{name}", decode=decode):
            if header.next_offset <= first:
                continue
            for record in batch:
                if record[0] >= first:
                    if header.is_transactional:
                        transactions[record[0]] = (header.producer_id, header.producer_epoch, header.is_control)
                    yield record


def _client_config(options: dict[str, str]) -> dict[str, Any]:
    from tidemark.spark.clients import quiet

    config: dict[str, Any] = quiet({"bootstrap.servers": options["bootstrap.servers"]})
    config.update({k[len("kafka."):]: v for k, v in options.items() if k.startswith("kafka.")})
    return config


def _wire_records(options: dict[str, str], topic: str, part: WirePartition
                  ) -> Iterator[tuple[int, int, bytes | None, bytes | None]]:
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    config = {
        "group.id": "tidemark-offsets-reader",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": True,
        "fetch.queue.backoff.ms": 10,  # as the topic source: do not idle a drained partition for 1 s
        "isolation.level": "read_uncommitted",  # as Spark's connector, unless kafka.isolation.level says otherwise
        **_client_config(options),
    }
    transient = {KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT}
    poll_timeout_s = int(options.get("poll.timeout.ms", "30000")) / 1000
    batch_size = int(options.get("consume.batch.size", "10000"))
    consumer = Consumer(config)
    try:
        consumer.assign([TopicPartition(topic, part.offsets_partition, part.low)])
        position = part.low
        idle_since = None  # when consume() last started returning nothing (time spent in Spark excluded)
        while position < part.high:
            got_records = False
            # consume() waits out its timeout for the count asked: never ask past the high watermark.
            for msg in consumer.consume(num_messages=min(batch_size, part.high - position), timeout=0.5):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        return
                    if err.fatal() or not (err.retriable() or err.code() in transient):
                        raise KafkaException(err)
                    continue  # the client retries; poll.timeout.ms bounds the wait
                offset = msg.offset()
                if offset >= part.high:
                    return
                got_records = True
                position = offset + 1
                yield offset, msg.timestamp()[1], msg.key(), msg.value()
            if got_records:
                idle_since = None
            elif idle_since is None:
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since > poll_timeout_s:
                raise TimeoutError(
                    f"{topic}-{part.offsets_partition}: no record for {poll_timeout_s:g} s at offset {position}, "
                    f"reading up to the high watermark {part.high}")
    finally:
        consumer.close()


def _wire_partitions(options: dict[str, str], topic: str) -> list[WirePartition]:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    from tidemark.spark.clients import check_authentication

    timeout_s = int(options.get("metadata.timeout.ms", "30000")) / 1000
    check_authentication(_client_config(options), timeout_s)
    consumer = Consumer({"group.id": "tidemark-offsets-reader", **_client_config(options)})
    try:
        metadata = consumer.list_topics(topic, timeout=timeout_s)
        found = metadata.topics.get(topic)
        if found is None or found.error is not None:
            raise KafkaException(found.error if found is not None else f"topic {topic} not found")
        parts = []
        for number in sorted(found.partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, number), timeout=timeout_s,
                                                       cached=False)
            if high > low:
                parts.append(WirePartition(number, low, high))
        return parts
    finally:
        consumer.close()


class OffsetsLogReader(ShippedToExecutors, DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.options = options
        self.topic = options.get("topic", OFFSETS_TOPIC)
        self.batch_rows = int(options.get("batch.rows", "65536"))
        if ("path" in options) == ("bootstrap.servers" in options):
            raise ValueError(f'format "{FORMAT}" needs exactly one of the options "path" (a data directory) '
                             f'and "bootstrap.servers" (a cluster)')

    def partitions(self) -> list[InputPartition]:
        if "path" in self.options:
            from tidemark.log.direct_read import topic_partition_dirs

            data_dir = Path(self.options["path"])
            if not data_dir.is_dir():
                raise FileNotFoundError(f"no data directory {data_dir}")
            parts: list[InputPartition] = [FilesPartition(number, str(directory))
                                           for number, directory in topic_partition_dirs(data_dir, self.topic)]
        else:
            parts = list(_wire_partitions(self.options, self.topic))
        # Spark plans at least one task; an empty one reads nothing.
        return parts or [FilesPartition(-1, "")]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, FilesPartition):
            if partition.offsets_partition < 0:
                return iter(())
            transactions: dict[int, tuple[int, int, bool]] = {}
            records = _file_records(partition.directory, transactions)
            return decode_records(partition.offsets_partition, records, self.batch_rows, transactions)
        assert isinstance(partition, WirePartition)
        records = _wire_records(self.options, self.topic, partition)
        return decode_records(partition.offsets_partition, records, self.batch_rows)


class OffsetsLogDataSource(ShippedToExecutors, DataSource):
    """Format "tidemark-offsets": see the module documentation for the options."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        return OFFSETS_LOG_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return OffsetsLogReader({str(k).lower(): str(v) for k, v in self.options.items()})


__all__ = [
    "ARROW_SCHEMA",
    "FORMAT",
    "GROUP_METADATA",
    "OFFSETS_LOG_SCHEMA",
    "OFFSETS_TOPIC",
    "OFFSET_COMMIT",
    "UNKNOWN",
    "OffsetsLogDataSource",
    "OffsetsLogReader",
    "OffsetsRowBuilder",
    "decode_records",
]
