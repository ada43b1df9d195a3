"""The "tidemark-offsets" source: exact rows from segment files, and the same rows over the wire
from a broker serving a log with gaps and a transaction marker as its last offset."""

from __future__ import annotations

import dataclasses
import datetime
import struct

import pytest
from crc32c import crc32c
from pyspark.sql import Row
from pyspark.testing import assertDataFrameEqual

from tests.conftest import BrokerProcess
from tests.integration.raw import RawClient
from tidemark.records import consumer_group_schema as cg
from tidemark.records import build_batch
from tidemark.records.offsets_schema import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    encode_group_metadata_value,
    encode_key,
    encode_offset_commit_value,
)
from tidemark.spark.offsets_source import OFFSETS_LOG_SCHEMA, OffsetsRowBuilder
from tidemark.wire.api_keys import ApiKey

T = 1_700_000_000_000
SUBSCRIPTION = struct.pack(">hih", 0, 1, 6) + b"orders" + struct.pack(">i", -1)
MEMBER = MemberMetadata("m-1", "static-1", "client-1", "/127.0.0.1", 300000, 45000, SUBSCRIPTION, b"\xff")
OTHER_MEMBER = MemberMetadata("m-2", None, "client-2", "/127.0.0.2", 60000, 10000, b"not a subscription", b"")


def ts(ms: int | None) -> datetime.datetime | None:
    """Spark hands timestamps back as naive local datetimes."""
    if ms is None:
        return None
    return datetime.datetime.fromtimestamp(ms / 1000)


def offset_key(group: str, topic: str, partition: int) -> bytes:
    return encode_key(OffsetCommitKey(group, topic, partition))


def commit_value(offset: int, epoch: int = -1, metadata: str = "", at: int = T, expire: int = -1) -> bytes:
    return encode_offset_commit_value(OffsetCommitValue(offset, epoch, metadata, at, expire))


def with_last_offset_delta(batch: bytes, delta: int) -> bytes:
    """A batch as the log cleaner leaves it: its last records gone, lastOffsetDelta kept."""
    data = bytearray(batch)
    struct.pack_into(">i", data, 23, delta)
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    return bytes(data)


def control_batch(base_offset: int) -> bytes:
    return build_batch([(struct.pack(">hh", 0, 1), b"\x00\x00\x00\x00\x00\x00", (), T)], base_offset=base_offset,
                       is_control=True, is_transactional=True, producer_id=7, producer_epoch=0)


CG_MEMBER = cg.MemberMetadataValue(None, None, "c", "/h", ("orders",), None, 30000, None)


def row(offsets_partition: int, offset: int, timestamp: int, record_type: str, **fields) -> Row:
    values = {name: None for name in OFFSETS_LOG_SCHEMA.fieldNames()}
    values.update(offsets_partition=offsets_partition, log_offset=offset, timestamp=ts(timestamp), record_type=record_type,
                  tombstone=False)
    values.update(fields)
    return Row(**values)


def commit_row(partition, offset, group, topic, tp, committed, *, epoch=-1, metadata="", at=T, expire=None,
               value_version=3, timestamp=T):
    return row(partition, offset, timestamp, "offset_commit", key_version=1, group=group, topic=topic, partition=tp,
               value_version=value_version, committed_offset=committed, leader_epoch=epoch, metadata=metadata,
               commit_timestamp=ts(at), expire_timestamp=ts(expire))


# ---------------------------------------------------------------------------------------------
# Offline: segment files written here, every kind of record


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("offsets-data")
    p0 = root / "__consumer_offsets-0"
    p0.mkdir()
    group_value = encode_group_metadata_value(GroupMetadataValue("consumer", 3, "range", "m-1", T + 5,
                                                                 (MEMBER,)))
    empty_group = encode_group_metadata_value(GroupMetadataValue("consumer", 4, None, None, T + 9, ()))
    first = b"".join([
        build_batch([(offset_key("g1", "orders", 0), commit_value(42, 5, "meta"), (), T),
                     (encode_key(GroupMetadataKey("g1")), group_value, (), T + 1)], base_offset=0),
        build_batch([(offset_key("g1", "orders", 0), None, (), T + 2),
                     (cg.encode_key(cg.ConsumerGroupKey(5, "g1", "m")), cg.encode_value(5, CG_MEMBER), (), T + 2),
                     (offset_key("g2", "t\u00e9", 11), commit_value(7, at=T, expire=T + 60_000), (), T + 2)],
                    base_offset=2),
        control_batch(5),
        # A transactional offset commit of producer 7 (its marker would follow).
        build_batch([(offset_key("g5", "orders", 0), commit_value(3), (), T + 2)], base_offset=6, producer_id=7,
                    producer_epoch=0, is_transactional=True),
    ])
    second = b"".join([
        # A cleaned batch: offsets 10 and 11 kept of 10..13.
        with_last_offset_delta(build_batch([(encode_key(GroupMetadataKey("g1")), empty_group, (), T + 3),
                                            (encode_key(GroupMetadataKey("g3")), None, (), T + 3)],
                                           base_offset=10), 3),
        build_batch([(b"\x00\x01\x00", b"\x00", (), T + 4),  # truncated key
                     (offset_key("g1", "orders", 1), b"\x00\x09" + b"\x00" * 8, (), T + 4),  # unknown value version
                     (None, b"x", (), T + 4)], base_offset=14),
    ])
    (p0 / "00000000000000000000.log").write_bytes(first)
    (p0 / "00000000000000000010.log").write_bytes(second + second[:25])  # and a torn tail
    (p0 / "00000000000000000000.index").write_bytes(b"\x00" * 8)
    p3 = root / "__consumer_offsets-3"
    p3.mkdir()
    two_members = encode_group_metadata_value(GroupMetadataValue("consumer", 1, "range", "m-1", -1,
                                                                 (MEMBER, OTHER_MEMBER)), version=1)
    (p3 / "00000000000000000000.log").write_bytes(b"".join([
        build_batch([(offset_key("g4", "orders", 2), commit_value(9, metadata="", at=T), (), T + 7)]),
        build_batch([(encode_key(GroupMetadataKey("g4")), two_members, (), T + 8)], base_offset=1),
    ]))
    (root / "orders-0").mkdir()  # not the offsets topic
    (root / "__consumer_offsets-9.0123abcd-delete").mkdir()
    return root


def member_row(member: MemberMetadata, topics):
    return Row(member_id=member.member_id, group_instance_id=member.group_instance_id, client_id=member.client_id,
               client_host=member.client_host, rebalance_timeout=member.rebalance_timeout,
               session_timeout=member.session_timeout, subscribed_topics=topics)


EXPECTED = [
    commit_row(0, 0, "g1", "orders", 0, 42, epoch=5, metadata="meta"),
    row(0, 1, T + 1, "group_metadata", key_version=2, group="g1", value_version=3, protocol_type="consumer",
        generation=3, protocol="range", leader="m-1", current_state_timestamp=ts(T + 5),
        members=[member_row(MEMBER, ["orders"])], subscribed_topics=["orders"]),
    row(0, 2, T + 2, "offset_commit", key_version=1, group="g1", topic="orders", partition=0, tombstone=True),
    row(0, 3, T + 2, "consumer_group_member_metadata", key_version=5, group="g1", value_version=0,
        consumer_group_record='{"member_id":"m","value":{"instance_id":null,"rack_id":null,"client_id":"c",'
        '"client_host":"/h","subscribed_topic_names":["orders"],"subscribed_topic_regex":null,'
        '"rebalance_timeout_ms":30000,"server_assignor":null}}'),
    commit_row(0, 4, "g2", "t\u00e9", 11, 7, expire=T + 60_000, value_version=1, timestamp=T + 2),
    row(0, 5, T, "transaction_marker", producer_id=7, producer_epoch=0, transaction_result="COMMIT",
        coordinator_epoch=0),
    Row(**commit_row(0, 6, "g5", "orders", 0, 3, timestamp=T + 2).asDict() | {"producer_id": 7, "producer_epoch": 0}),
    row(0, 10, T + 3, "group_metadata", key_version=2, group="g1", value_version=3, protocol_type="consumer",
        generation=4, current_state_timestamp=ts(T + 9), members=[], subscribed_topics=[]),
    row(0, 11, T + 3, "group_metadata", key_version=2, group="g3", tombstone=True),
    row(0, 14, T + 4, "unknown", key_version=1,
        decode_error="malformed __consumer_offsets key: 1 bytes left, 2 needed at byte 2"),
    row(0, 15, T + 4, "unknown", key_version=1, group="g1", topic="orders", partition=1, value_version=9,
        decode_error="malformed offset commit value: unknown version 9"),
    row(0, 16, T + 4, "unknown", value_version=None, decode_error="null key"),
    commit_row(3, 0, "g4", "orders", 2, 9, timestamp=T + 7),
    row(3, 1, T + 8, "group_metadata", key_version=2, group="g4", value_version=1, protocol_type="consumer",
        generation=1, protocol="range", leader="m-1",
        # Value v1 has no group instance ids; one subscription that does not decode: topics unknown.
        members=[member_row(dataclasses.replace(MEMBER, group_instance_id=None), ["orders"]),
                 member_row(OTHER_MEMBER, None)],
        subscribed_topics=None),
]


def test_every_kind_of_record_from_segment_files(spark, data_dir):
    df = spark.read.format("tidemark-offsets").load(str(data_dir))
    assert df.schema == OFFSETS_LOG_SCHEMA
    assert df.rdd.getNumPartitions() == 2  # one task per offsets partition
    assertDataFrameEqual(df, spark.createDataFrame(EXPECTED, OFFSETS_LOG_SCHEMA), checkRowOrder=False)


def test_an_empty_data_dir_has_no_rows(spark, tmp_path):
    df = spark.read.format("tidemark-offsets").load(str(tmp_path))
    assert df.collect() == []


def test_the_source_needs_exactly_one_of_path_and_bootstrap_servers(spark, data_dir):
    with pytest.raises(Exception, match="exactly one of"):
        spark.read.format("tidemark-offsets").load().collect()
    with pytest.raises(Exception, match="exactly one of"):
        (spark.read.format("tidemark-offsets").option("bootstrap.servers", "127.0.0.1:1")
         .load(str(data_dir)).collect())


def test_row_builder_splits_batches_and_keeps_rows_in_order():
    builder = OffsetsRowBuilder(4)
    for i in range(5):
        builder.add(i, T + i, offset_key("g", "t", i), commit_value(i * 10, at=T))
    batch = builder.flush()
    assert batch.num_rows == 5 and builder.flush() is None
    assert batch.column("committed_offset").to_pylist() == [0, 10, 20, 30, 40]
    assert set(batch.column("offsets_partition").to_pylist()) == {4}
    assert batch.column("expire_timestamp").null_count == 5


# ---------------------------------------------------------------------------------------------
# Over the wire: a broker serving a compacted-looking offsets partition


WIRE_GROUP = "wire"


@pytest.fixture(scope="module")
def seeded_broker(tmp_path_factory):
    """A broker whose offsets partition 0 holds gaps (whole batches and a batch's tail gone) and
    ends with a transaction marker, so the high watermark is past the last record."""
    settings = {"offsets.topic.num.partitions": "2", "group.initial.rebalance.delay.ms": "100"}
    broker = BrokerProcess(tmp_path_factory.mktemp("wire") / "data", settings).start()
    try:
        with RawClient(broker.bootstrap) as client:  # creates the offsets topic
            client.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["anything"]})
        assert broker.stop() == 0
        p0 = broker.data_dir / "__consumer_offsets-0"
        for path in p0.iterdir():
            path.unlink()
        (p0 / "00000000000000000000.log").write_bytes(b"".join([
            build_batch([(offset_key(WIRE_GROUP, "orders", p), commit_value(p), (), T) for p in range(2)]),
            with_last_offset_delta(build_batch([(offset_key(WIRE_GROUP, "orders", 0), commit_value(100), (), T + 1),
                                                (offset_key(WIRE_GROUP, "orders", 1), None, (), T + 1)],
                                               base_offset=5), 3),
            control_batch(9),
        ]))
        broker.start()
        yield broker
        broker.stop()
    finally:
        broker.kill()


def test_wire_rows_equal_file_rows_on_a_log_with_gaps(spark, seeded_broker):
    # No record will ever come after offset 6 (the high watermark, 10, is past a marker): a reader
    # that waited for one instead of stopping at the end would fail the read with its "no record
    # for 60 s" TimeoutError rather than answer.
    wire = (spark.read.format("tidemark-offsets").option("bootstrap.servers", seeded_broker.bootstrap)
            .option("poll.timeout.ms", "60000").load())
    files = spark.read.format("tidemark-offsets").load(str(seeded_broker.data_dir))
    assert [(r.log_offset, r.committed_offset) for r in wire.orderBy("log_offset").collect()] == [
        (0, 0), (1, 1), (5, 100), (6, None)]
    # The client hides transaction markers: the files show them.
    assertDataFrameEqual(wire, files.where("record_type != 'transaction_marker'"))
