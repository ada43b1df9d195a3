"""Bad input gets the Kafka error code clients expect and never takes the broker down."""

from __future__ import annotations

import struct
import subprocess
import sys

import cramjam
import pytest
from crc32c import crc32c
from kio.schema.errors import ErrorCode

from tests.broker.test_validator import raw_batch, records
from tests.integration.raw import RawClient
from tidemark.coordinator.partitioner import partition_for
from tidemark.records import CompressionType
from tidemark.records.batch import _write_varint, build_batch
from tidemark.records.offsets_schema import (
    OffsetCommitKey,
    OffsetCommitValue,
    encode_key,
    encode_offset_commit_value,
)
from tidemark.wire.list_offsets_v0 import ListOffsetsV0Request, read_response, write_request
from tidemark.wire.api_keys import ApiKey

PRODUCE, FETCH, LIST_OFFSETS, METADATA, API_VERSIONS = 0, 1, 2, 3, 18


def _metadata_ok(bootstrap: str) -> bool:
    with RawClient(bootstrap) as client:
        response = client.request(METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                                 "include_topic_authorized_operations": False})
        return [b.node_id for b in response.brokers] == [0]


def test_oversized_frame_closes_only_that_connection(broker):
    with RawClient(broker.bootstrap) as bad:
        bad.sock.sendall(struct.pack(">i", 200 * 1024 * 1024))  # over socket.request.max.bytes
        assert bad.is_closed_by_peer()
    assert _metadata_ok(broker.bootstrap)


def test_garbage_frame_closes_only_that_connection(broker):
    with RawClient(broker.bootstrap) as bystander:
        with RawClient(broker.bootstrap) as bad:
            # Metadata v12 header, then a body that claims a huge topic array.
            bad.send_frame(struct.pack(">hhi", METADATA, 12, 1) + b"\x00\x00\x00" + b"\xff" * 9)
            assert bad.is_closed_by_peer()
        response = bystander.request(METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                                    "include_topic_authorized_operations": False})
        assert [b.node_id for b in response.brokers] == [0]


def test_api_versions_unknown_version_falls_back_to_v0(broker):
    with RawClient(broker.bootstrap) as client:
        client.correlation_id = 7
        client.send_frame(struct.pack(">hhi", API_VERSIONS, 99, 7) + struct.pack(">h", 4) + b"test")
        frame = client.recv_frame()
        correlation_id, error_code, count = struct.unpack_from(">ihi", frame, 0)
        assert (correlation_id, error_code) == (7, ErrorCode.unsupported_version)
        ranges = {struct.unpack_from(">hhh", frame, 10 + 6 * i)[0] for i in range(count)}
        assert {PRODUCE, FETCH, LIST_OFFSETS, METADATA, API_VERSIONS} <= ranges


def test_api_not_served_gets_unsupported_version(broker):
    with RawClient(broker.bootstrap) as client:
        # RenewDelegationToken (39) is a Kafka API this broker does not serve (no delegation tokens).
        response = client.request(39, 1, {"hmac": b"token", "renew_period": 60000})
        assert response.error_code == ErrorCode.unsupported_version
    assert _metadata_ok(broker.bootstrap)


def test_corrupt_batch_is_rejected_and_nothing_stored(broker):
    with RawClient(broker.bootstrap) as client:
        assert client.create_topic("crc-topic").error_code == ErrorCode.none
        good = build_batch([(b"k", b"v", (), 1000)])
        corrupt = bytearray(good)
        corrupt[-1] ^= 0xFF  # a byte covered by the CRC
        result = client.produce("crc-topic", good + bytes(corrupt))
        assert result.error_code == ErrorCode.corrupt_message
        assert client.list_offset("crc-topic", -1).offset == 0
        assert client.produce("crc-topic", good).error_code == ErrorCode.none
        assert client.list_offset("crc-topic", -1).offset == 1
        # Well-formed batches a client may not write: a control batch, a record count that
        # disagrees with the offset delta.
        control = build_batch([(b"\x00\x00\x00\x00", b"", (), 1000)], is_control=True)
        assert client.produce("crc-topic", control).error_code == ErrorCode.invalid_record
        miscounted = bytearray(build_batch([(None, b"a", (), 1000), (None, b"b", (), 1000)]))
        struct.pack_into(">i", miscounted, 57, 1)  # records count 1, last offset delta 1
        struct.pack_into(">I", miscounted, 17, crc32c(bytes(miscounted[21:])))
        assert client.produce("crc-topic", bytes(miscounted)).error_code == ErrorCode.invalid_record
        assert client.list_offset("crc-topic", -1).offset == 1


def test_invalid_topic_names(broker):
    with RawClient(broker.bootstrap) as client:
        for name in ("bad/name", "..", "x" * 250, ""):
            assert client.create_topic(name).error_code == ErrorCode.invalid_topic_exception, name
        response = client.request(METADATA, 12, {"topics": [{"name": "no$such", "topic_id": None}],
                                                 "allow_auto_topic_creation": True,
                                                 "include_topic_authorized_operations": False})
        assert response.topics[0].error_code == ErrorCode.invalid_topic_exception


def test_duplicate_topic_and_bad_replication_factor(broker):
    with RawClient(broker.bootstrap) as client:
        assert client.create_topic("twice").error_code == ErrorCode.none
        assert client.create_topic("twice").error_code == ErrorCode.topic_already_exists
        assert client.create_topic("rf3", replication_factor=3).error_code == ErrorCode.invalid_replication_factor


def test_produce_to_unknown_topic_and_partition(broker):
    with RawClient(broker.bootstrap) as client:
        good = build_batch([(None, b"v", (), 1000)])
        assert client.produce("never-created", good).error_code == ErrorCode.unknown_topic_or_partition
        assert client.create_topic("one-partition").error_code == ErrorCode.none
        assert client.produce("one-partition", good, partition=5).error_code == ErrorCode.unknown_topic_or_partition


def test_fetch_out_of_range_and_empty_records_are_empty_bytes(broker):
    with RawClient(broker.bootstrap) as client:
        assert client.create_topic("fetch-range").error_code == ErrorCode.none
        assert client.produce("fetch-range", build_batch([(None, b"a", (), 1), (None, b"b", (), 2)])).base_offset == 0

        def fetch(offset: int) -> object:
            return client.fetch([("fetch-range", 0, offset, 1 << 20)])[0]

        at_end = fetch(2)
        assert (at_end.error_code, at_end.high_watermark, at_end.records) == (ErrorCode.none, 2, b"")
        assert fetch(3).error_code == ErrorCode.offset_out_of_range
        assert len(fetch(0).records) > 0


def test_list_offsets_v0_for_old_go_clients(broker):
    with RawClient(broker.bootstrap) as client:
        assert client.create_topic("v0-topic").error_code == ErrorCode.none
        assert client.produce("v0-topic", build_batch([(None, b"%d" % i, (), i) for i in range(3)])).error_code == 0
        for timestamp, expected in ((-1, (3,)), (-2, (0,))):
            client.correlation_id += 1
            body = write_request(ListOffsetsV0Request(replica_id=-1, topics=(("v0-topic", ((0, timestamp, 1),)),)))
            client.send_frame(struct.pack(">hhi", LIST_OFFSETS, 0, client.correlation_id)
                              + struct.pack(">h", 3) + b"old" + body)
            frame = client.recv_frame()
            assert struct.unpack_from(">i", frame)[0] == client.correlation_id
            response, _ = read_response(frame, 4)
            partition = response.topics[0].partitions[0]
            assert (partition.error_code, tuple(partition.old_style_offsets)) == (0, expected)


def test_unknown_setting_is_refused_at_start(tmp_path):
    for setting, word in (("no.such.setting=1", "no.such.setting"), ("num.partitions=many", "num.partitions")):
        result = subprocess.run([sys.executable, "-m", "tidemark.cli", "serve", "--listen", "127.0.0.1:0",
                                 "--data-dir", str(tmp_path), "--set", setting],
                                capture_output=True, text=True, timeout=60)
        assert result.returncode != 0
        assert word in result.stderr


@pytest.fixture(scope="module")
def no_auto_create_broker(tmp_path_factory):
    from tests.conftest import BrokerProcess

    process = BrokerProcess(tmp_path_factory.mktemp("noauto") / "data",
                            {"auto.create.topics.enable": "false"}).start()
    yield process
    process.kill()


def test_unknown_topic_without_auto_creation(no_auto_create_broker):
    with RawClient(no_auto_create_broker.bootstrap) as client:
        response = client.request(METADATA, 12, {"topics": [{"name": "absent", "topic_id": None}],
                                                 "allow_auto_topic_creation": True,
                                                 "include_topic_authorized_operations": False})
        assert response.topics[0].error_code == ErrorCode.unknown_topic_or_partition


def test_topic_configs_kafka_knows_are_accepted_unknown_refused(broker):
    with RawClient(broker.bootstrap) as client:
        stored = {"min.insync.replicas": "2", "compression.type": "zstd", "delete.retention.ms": "1000"}
        assert client.create_topic("with-configs", configs=stored).error_code == ErrorCode.none
        assert client.create_topic("bad-config", configs={"no.such.config": "1"}).error_code == ErrorCode.invalid_config
        assert client.create_topic("bad-value", configs={"retention.ms": "soon"}).error_code == ErrorCode.invalid_config


def test_internal_and_duplicate_topic_names(broker):
    with RawClient(broker.bootstrap) as client:
        assert client.create_topic("__consumer_offsets").error_code == ErrorCode.invalid_request
        twice = {"name": "dup", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}
        response = client.request(ApiKey.CREATE_TOPICS, 7, {"topics": [twice, twice], "timeout": 10000, "validate_only": False})
        assert [t.error_code for t in response.topics] == [ErrorCode.invalid_request] * 2


# -- what the produce validator refuses (broker/validator.py) --------------------------------

def _end_offset(client: RawClient, topic: str, partition: int = 0) -> int:
    return client.list_offset(topic, -1, partition).offset


def test_clients_cannot_produce_to_the_offsets_topic(broker):
    with RawClient(broker.bootstrap) as client:
        assert client.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["forged"]}).coordinators[0].error_code == 0
        assert client.create_topic("forged-topic").error_code == ErrorCode.none
        assert _commit(client, "forged", "forged-topic", 5) == ErrorCode.none
        partition = partition_for("forged", 50)
        end = _end_offset(client, "__consumer_offsets", partition)
        # A well-formed commit record (it would replay later in the log and win) and one whose
        # key is cut short (the partition would fail to load after a restart).
        key = encode_key(OffsetCommitKey("forged", "forged-topic", 0))
        value = encode_offset_commit_value(OffsetCommitValue(999, -1, "", 1000, -1))
        for record_key in (key, key[:-3]):
            result = client.produce("__consumer_offsets", build_batch([(record_key, value, (), 1000)]),
                                    partition=partition)
            assert result.error_code == ErrorCode.invalid_topic_exception
            assert result.error_message == "Cannot append to internal topic __consumer_offsets"
        assert _end_offset(client, "__consumer_offsets", partition) == end
        # The coordinator's own appends still go through.
        assert _commit(client, "forged", "forged-topic", 7) == ErrorCode.none
        response = client.request(ApiKey.OFFSET_FETCH, 7, {"group_id": "forged", "require_stable": False,
                                         "topics": [{"name": "forged-topic", "partition_indexes": [0]}]})
        assert response.topics[0].partitions[0].committed_offset == 7


def _commit(client: RawClient, group: str, topic: str, offset: int) -> ErrorCode:
    response = client.request(ApiKey.OFFSET_COMMIT, 8, {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                                     "group_instance_id": None, "retention_time": -1,
                                     "topics": [{"name": topic, "partitions": [
                                         {"partition_index": 0, "committed_offset": offset,
                                          "committed_leader_epoch": -1, "committed_metadata": None}]}]})
    return response.topics[0].partitions[0].error_code


def test_one_batch_per_partition_so_a_retry_cannot_hide_a_new_batch(broker):
    with RawClient(broker.bootstrap) as client:
        assert client.create_topic("one-batch").error_code == ErrorCode.none
        ids = client.request(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout": 60000,
                                     "producer_id": -1, "producer_epoch": -1})
        first, second = (build_batch([(b"k", b"%d" % seq, (), 1000)], producer_id=ids.producer_id,
                                     producer_epoch=ids.producer_epoch, base_sequence=seq) for seq in (0, 1))
        assert client.produce("one-batch", first).base_offset == 0
        # The first batch retried with the next one behind it: acknowledged, the second never
        # written, before this was refused.
        result = client.produce("one-batch", first + second)
        assert result.error_code == ErrorCode.invalid_record
        assert _end_offset(client, "one-batch") == 1
        assert client.produce("one-batch", second).base_offset == 1


def test_compacted_topic_refuses_records_without_a_key(broker):
    with RawClient(broker.bootstrap) as client:
        assert client.create_topic("keyed", configs={"cleanup.policy": "compact"}).error_code == ErrorCode.none
        result = client.produce("keyed", build_batch([(b"k", b"v", (), 1000), (None, b"v", (), 1000)]))
        assert result.error_code == ErrorCode.invalid_record
        # KIP-467: the keyless record is named by its index in the batch.
        message = "Compacted topic cannot accept message without key in topic partition keyed-0."
        assert [(e.batch_index, e.batch_index_error_message) for e in result.record_errors] == [(1, message)]
        assert client.produce("keyed", build_batch([(b"k", b"v", (), 1000)])).base_offset == 0


def test_records_are_checked_against_their_batch_header(broker):
    with RawClient(broker.bootstrap) as client:
        assert client.create_topic("shapes").error_code == ErrorCode.none
        for codec in (CompressionType.NONE, CompressionType.GZIP):
            for bad in (raw_batch(records([0, 2]), 2, 1, codec),  # offset deltas not 0..n-1
                        raw_batch(records([0, 1]) + b"\x00", 2, 1, codec),  # trailing garbage
                        raw_batch(records([0, 1]), 3, 2, codec)):  # fewer records than counted
                assert client.produce("shapes", bad).error_code == ErrorCode.invalid_record
        assert _end_offset(client, "shapes") == 0


@pytest.mark.parametrize("codec", [CompressionType.ZSTD, CompressionType.GZIP])
def test_decompression_bomb_is_refused_and_the_broker_keeps_serving(broker, codec):
    # One record whose value is 256 MiB of zeros: ~8 KiB of zstd, ~250 KiB of gzip.
    size = 256 << 20
    head = bytearray()
    body = bytearray(b"\x00\x00\x00\x02k")  # attributes, timestamp delta, offset delta, key "k"
    _write_varint(body, size)
    _write_varint(head, len(body) + size + 1)  # + the header count after the value
    stream = cramjam.zstd.Compressor() if codec is CompressionType.ZSTD else cramjam.gzip.Compressor()
    stream.compress(bytes(head + body))
    zeros = bytes(1 << 20)
    for _ in range(size >> 20):
        stream.compress(zeros)
    stream.compress(b"\x00")  # no headers
    bomb = raw_batch(b"", 1, 0, codec, payload=bytes(stream.finish()))
    assert len(bomb) < 1 << 20  # within max.message.bytes
    with RawClient(broker.bootstrap) as client:
        assert client.create_topic(f"bomb-{codec.name}").error_code in (ErrorCode.none, ErrorCode.topic_already_exists)
        result = client.produce(f"bomb-{codec.name}", bomb)
        assert result.error_code == ErrorCode.invalid_record
        assert "67108864" in result.error_message
        assert _end_offset(client, f"bomb-{codec.name}") == 0
    assert _metadata_ok(broker.bootstrap)


def test_segment_bytes_is_bounded(broker, tmp_path):
    with RawClient(broker.bootstrap) as client:
        for value, code in (("2147483648", ErrorCode.invalid_config), ("13", ErrorCode.invalid_config),
                            ("2147483647", ErrorCode.none)):
            assert client.create_topic(f"seg-{value}", configs={"segment.bytes": value}).error_code == code
    for setting in ("log.segment.bytes", "offsets.topic.segment.bytes"):
        result = subprocess.run([sys.executable, "-m", "tidemark.cli", "serve", "--listen", "127.0.0.1:0",
                                 "--data-dir", str(tmp_path), "--set", f"{setting}=2147483648"],
                                capture_output=True, text=True, timeout=60)
        assert result.returncode != 0
        assert f"{setting}='2147483648' is invalid: must be at most 2147483647" in result.stderr


def test_producer_id_never_issued_is_refused_and_writes_nothing(make_broker):
    """UNKNOWN_PRODUCER_ID (59) for an idempotent batch whose producer id this cluster never
    issued, INVALID_PRODUCER_ID_MAPPING (49) for a transactional one; ids issued before a
    restart keep working after it."""
    broker = make_broker().start()

    def idempotent(producer_id: int, sequence: int, transactional: bool = False) -> bytes:
        return build_batch([(None, b"v", (), None)], producer_id=producer_id, producer_epoch=0,
                           base_sequence=sequence, is_transactional=transactional)

    with RawClient(broker.bootstrap) as client:
        assert client.create_topic("pids").error_code == 0
        issued = client.init_producer_id()
        for fabricated in (issued + 1, 2**40, 2**63 - 1):
            response = client.produce("pids", idempotent(fabricated, 0))
            assert (response.error_code, response.base_offset) == (ErrorCode.unknown_producer_id, -1)
            assert client.produce("pids", idempotent(fabricated, 7)).error_code == ErrorCode.unknown_producer_id
        assert client.produce("pids", idempotent(2**40, 0, transactional=True)).error_code == \
            ErrorCode.invalid_producer_id_mapping
        assert client.list_offset("pids", -1).offset == 0  # nothing was written
        assert client.produce("pids", idempotent(issued, 0)).base_offset == 0
    broker.stop()
    broker.start()
    with RawClient(broker.bootstrap) as client:
        assert client.produce("pids", idempotent(issued, 1)).base_offset == 1
        assert client.produce("pids", idempotent(2**40, 0)).error_code == ErrorCode.unknown_producer_id
        later = client.init_producer_id()
        assert later > issued
        assert client.produce("pids", idempotent(later, 0)).base_offset == 2
