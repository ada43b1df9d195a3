"""Mutated RecordBatch v2 bytes, produced to a live broker: each is refused with an error code or
stored exactly as sent. At the end a real client (confluent-kafka) reads every acknowledged
record back at exactly its acknowledged offset, unaltered."""

from __future__ import annotations

import struct
import time

import pytest
from confluent_kafka import Consumer, TopicPartition
from crc32c import crc32c
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from tests.fuzz.conftest import FUZZ, assert_broker_survived
from tests.fuzz.reference import Invalid, Rec, read_batch
from tests.fuzz.wire import Conn
from tidemark.records.batch import build_batch
from tidemark.records.compression import CompressionType
from tidemark.wire.api_keys import ApiKey

TOPIC, GARBAGE_TOPIC, COMPACTED_TOPIC = "fuzz-batches", "fuzz-garbage", "fuzz-compacted"
PRODUCE = 0
BASE_TIMESTAMP = 1_700_000_000_000

# Refusals a client may see for a batch it got wrong; UNKNOWN_SERVER_ERROR is not one of them
# (it means validation itself crashed).
REFUSALS = {ErrorCode.corrupt_message, ErrorCode.invalid_record, ErrorCode.unsupported_for_message_format,
            ErrorCode.message_too_large, ErrorCode.record_list_too_large, ErrorCode.invalid_timestamp,
            ErrorCode.invalid_producer_epoch, ErrorCode.out_of_order_sequence_number,
            ErrorCode.unknown_producer_id, ErrorCode.duplicate_sequence_number,
            ErrorCode.invalid_producer_id_mapping, ErrorCode.invalid_txn_state}

# Header fields: (offset, struct format). base_offset and partition_leader_epoch precede the CRC'd
# part and are overwritten by the broker, so changing them keeps a batch valid.
FIELDS = {"base_offset": (0, ">q"), "batch_length": (8, ">i"), "partition_leader_epoch": (12, ">i"),
          "magic": (16, ">b"), "crc": (17, ">I"), "attributes": (21, ">h"), "last_offset_delta": (23, ">i"),
          "base_timestamp": (27, ">q"), "max_timestamp": (35, ">q"), "producer_id": (43, ">q"),
          "producer_epoch": (51, ">h"), "base_sequence": (53, ">i"), "records_count": (57, ">i")}
OUTSIDE_CRC = ("base_offset", "partition_leader_epoch")
# Changing these (CRC recomputed) leaves the records readable as sent.
HARMLESS_WITH_CRC = ("base_timestamp", "max_timestamp", "producer_id", "producer_epoch", "base_sequence")
RANGES = {">q": (-(2**63), 2**63 - 1), ">i": (-(2**31), 2**31 - 1), ">h": (-(2**15), 2**15 - 1),
          ">b": (-128, 127), ">I": (0, 2**32 - 1)}
HEADER_BYTES = 61


# -- strategies -------------------------------------------------------------------------------

records_st = st.lists(
    st.tuples(st.none() | st.binary(max_size=16), st.none() | st.binary(max_size=48),
              st.lists(st.tuples(st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=6), st.none() | st.binary(max_size=6)), max_size=2).map(tuple),
              st.integers(0, 10_000).map(lambda d: BASE_TIMESTAMP + d)),
    min_size=1, max_size=5)
codec_st = st.sampled_from(list(CompressionType))


def field_value(name: str) -> st.SearchStrategy[int]:
    lo, hi = RANGES[FIELDS[name][1]]
    return st.one_of(st.integers(lo, hi), st.sampled_from([lo, hi, -1, 0, 1, 2]))


def set_field(name: str, fix_crc: bool) -> st.SearchStrategy[tuple]:
    return field_value(name).map(lambda v: ("set", name, v, fix_crc))


control_mutation = st.one_of(*(set_field(name, False) for name in OUTSIDE_CRC))
# Mutations the broker must catch from the header and CRC alone.
header_mutation = st.one_of(
    control_mutation,
    st.sampled_from(list(FIELDS)).flatmap(lambda name: set_field(name, False)),
    st.sampled_from(HARMLESS_WITH_CRC).flatmap(lambda name: set_field(name, True)),
    st.integers(0, 2**16).map(lambda bit: ("flip", bit, False)),
    st.integers(0, 4096).map(lambda n: ("truncate", n)),
    st.binary(min_size=1, max_size=80).map(lambda b: ("append", b)),
    st.integers(0, 2**32 - 1).map(lambda crc: ("set", "crc", crc, False)),
    # Timestamp type and transactional bits, codec bits untouched, CRC recomputed.
    st.sampled_from([0x08, 0x10, 0x18]).map(lambda bits: ("attributes", bits)),
    st.sampled_from(["batch_length", "magic", "records_count", "last_offset_delta"]).flatmap(
        lambda name: set_field(name, True)).filter(lambda m: m[1] in ("batch_length", "magic")),
)
# Mutations a valid CRC hides: only checking the records themselves catches them.
record_mutation = st.one_of(
    st.integers(HEADER_BYTES * 8, 2**14).map(lambda bit: ("flip", bit, True)),
    st.sampled_from(["records_count", "last_offset_delta"]).flatmap(lambda name: set_field(name, True)),
    st.integers(-3, 3).map(lambda d: ("count_and_delta", d)),
    st.binary(max_size=120).map(lambda b: ("payload", b)),
    st.integers(0, 7).map(lambda codec: ("codec", codec)),
)


def apply(batch: bytes, mutations: list[tuple]) -> bytes:
    buf = bytearray(batch)
    for mutation in mutations:
        kind, *args = mutation
        fix_crc = False
        if kind == "set":
            name, value, fix_crc = args
            at, fmt = FIELDS[name]
            struct.pack_into(fmt, buf, at, value)
        elif kind == "flip":
            bit, fix_crc = args
            if bit // 8 < len(buf):
                buf[bit // 8] ^= 1 << (bit % 8)
        elif kind == "truncate":
            del buf[args[0]:]
        elif kind == "append":
            buf += args[0]
        elif kind == "attributes":
            struct.pack_into(">h", buf, 21, struct.unpack_from(">h", buf, 21)[0] | args[0])
            fix_crc = True
        elif kind == "count_and_delta":
            count = max(struct.unpack_from(">i", buf, 57)[0] + args[0], 0)
            struct.pack_into(">i", buf, 57, count)
            struct.pack_into(">i", buf, 23, count - 1)
            fix_crc = True
        elif kind == "payload":
            del buf[HEADER_BYTES:]
            buf += args[0]
            struct.pack_into(">i", buf, 8, len(buf) - 12)
            fix_crc = True
        elif kind == "codec":
            struct.pack_into(">h", buf, 21, (struct.unpack_from(">h", buf, 21)[0] & ~0x07) | args[0])
            fix_crc = True
        if fix_crc and len(buf) >= HEADER_BYTES:
            struct.pack_into(">I", buf, 17, crc32c(bytes(buf[21:])))
    return bytes(buf)


# -- the acknowledged records ----------------------------------------------------------------


class Ledger:
    """Every record the broker acknowledged, by partition and offset, as the client sent it."""

    def __init__(self) -> None:
        self.records: dict[tuple[str, int], dict[int, Rec]] = {}
        self.next_offset: dict[tuple[str, int], int] = {}

    def acknowledged(self, topic: str, base_offset: int, records: list[Rec], partition: int = 0) -> None:
        key = (topic, partition)
        expected = self.next_offset.get(key, 0)
        stored = self.records.setdefault(key, {})
        if base_offset < expected:
            # An idempotent producer's retry (same producer id, epoch and sequences; Kafka does not
            # compare the records) is answered with the original batch's offsets.
            assert all(base_offset + r.offset_delta in stored for r in records), (base_offset, expected)
            return
        assert base_offset == expected, f"acknowledged at {base_offset}, the log ended at {expected}"
        for record in records:
            stored[base_offset + record.offset_delta] = record
        self.next_offset[key] = base_offset + len(records)


@pytest.fixture(scope="module")
def ledger() -> Ledger:
    return Ledger()


@pytest.fixture(scope="module")
def client(fuzz_broker):
    with Conn(fuzz_broker.bootstrap) as conn:
        for topic, configs in ((TOPIC, {}), (GARBAGE_TOPIC, {}), (COMPACTED_TOPIC, {"cleanup.policy": "compact"})):
            response = conn.request(ApiKey.CREATE_TOPICS, 7, {"topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1,
                                    "assignments": [], "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
                                    "timeout": 10000, "validate_only": False})
            assert response.topics[0].error_code == ErrorCode.none
        yield conn


def produce(conn: Conn, topic: str, records: bytes, partition: int = 0):
    response = conn.request(PRODUCE, 9, {"acks": -1, "timeout": 30000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": records}]}]})
    return response.responses[0].partition_responses[0]


def produce_and_check(conn: Conn, ledger: Ledger, topic: str, sent: bytes) -> tuple[ErrorCode, str]:
    """Produce sent; a refusal must be a client error code, an acknowledgement must be of a batch a
    consumer can read as sent. Returns (error code, the oracle's verdict)."""
    result = produce(conn, topic, sent)
    try:
        records, verdict = read_batch(sent), "valid"
    except Invalid as exc:
        records, verdict = None, f"invalid: {exc}"
    if result.error_code != ErrorCode.none:
        assert result.error_code in REFUSALS, (result.error_code, result.error_message, verdict)
        return result.error_code, verdict
    assert records is not None, f"broker acknowledged offset {result.base_offset} for a batch that is {verdict}"
    ledger.acknowledged(topic, result.base_offset, records)
    return result.error_code, verdict


def batch_of(records: list[tuple], codec: CompressionType) -> bytes:
    return build_batch(records, compression=codec)


@FUZZ
@given(records=records_st, codec=codec_st, mutations=st.lists(control_mutation, max_size=2))
def test_control_batches_round_trip(client, ledger, records, codec, mutations):
    """Changes outside the CRC (base offset, leader epoch) keep a batch valid: it is stored."""
    code, verdict = produce_and_check(client, ledger, TOPIC, apply(batch_of(records, codec), mutations))
    assert (code, verdict) == (ErrorCode.none, "valid")


@FUZZ
@given(records=records_st, codec=codec_st, mutations=st.lists(header_mutation, min_size=1, max_size=3))
def test_header_mutations_refused_or_stored_as_sent(client, ledger, records, codec, mutations):
    produce_and_check(client, ledger, TOPIC, apply(batch_of(records, codec), mutations))


# Shrinking a known failure costs hundreds of produce requests; the reproduction is in the report.
NO_SHRINK = settings(FUZZ, phases=[Phase.explicit, Phase.reuse, Phase.generate])


@NO_SHRINK
@given(records=records_st, codec=codec_st, mutations=st.lists(record_mutation, min_size=1, max_size=2))
def test_record_mutations_refused_or_stored_as_sent(client, ledger, records, codec, mutations):
    # Mutations behind a recomputed CRC: the validator must refuse whatever its records contradict,
    # so everything acknowledged here is read back by the final check like any other record.
    produce_and_check(client, ledger, TOPIC, apply(batch_of(records, codec), mutations))


# -- the known bugs, one reproduction each ------------------------------------------------------


def test_header_claiming_more_records_than_it_holds(client):
    sent = apply(build_batch([(b"k", b"v", (), BASE_TIMESTAMP)]), [("count_and_delta", 2)])  # says 3, holds 1
    assert produce(client, GARBAGE_TOPIC, sent).error_code in (ErrorCode.corrupt_message, ErrorCode.invalid_record)


def test_two_batches_for_one_partition(client):
    one = build_batch([(b"k", b"v", (), BASE_TIMESTAMP)])
    assert produce(client, GARBAGE_TOPIC, one + one).error_code == ErrorCode.invalid_record


def test_keyless_record_to_compacted_topic(client):
    result = produce(client, COMPACTED_TOPIC, build_batch([(None, b"v", (), BASE_TIMESTAMP)]))
    assert result.error_code == ErrorCode.invalid_record


def test_decompression_bomb(client, fuzz_broker):
    bomb = build_batch([(b"k", bytes(64 << 20), (), BASE_TIMESTAMP)], compression=CompressionType.ZSTD)
    assert len(bomb) < 64 << 10
    result = produce(client, GARBAGE_TOPIC, bomb)
    assert_broker_survived(fuzz_broker)
    assert result.error_code in REFUSALS


def test_produce_to_the_offsets_topic(client):
    found = client.request(ApiKey.FIND_COORDINATOR, 3, {"key": "fuzz-group", "key_type": 0})  # FindCoordinator creates the topic
    assert found.error_code == ErrorCode.none
    result = produce(client, "__consumer_offsets", build_batch([(b"k", b"v", (), BASE_TIMESTAMP)]))
    assert result.error_code == ErrorCode.invalid_topic_exception


# -- the end of the module: everything acknowledged reads back -----------------------------------


def read_back(bootstrap: str, topic: str, end_offset: int) -> dict[int, Rec]:
    """Every record of partition 0 below end_offset, read with confluent-kafka."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "fuzz-read-back", "enable.auto.commit": False,
                         "isolation.level": "read_uncommitted", "check.crcs": True, "enable.partition.eof": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen: dict[int, Rec] = {}
    deadline = time.monotonic() + 60  # a bound on a hang, not a margin: the records are all there
    try:
        while (not seen or max(seen) < end_offset - 1) and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                assert msg.error() is None, msg.error()
                assert msg.offset() not in seen, f"offset {msg.offset()} delivered twice"
                seen[msg.offset()] = Rec(0, msg.key(), msg.value(), tuple(msg.headers() or ()))
    finally:
        consumer.close()
    return seen


def test_every_acknowledged_record_reads_back(fuzz_broker, client, ledger, capsys):
    assert_broker_survived(fuzz_broker, capsys)
    expected = ledger.records.get((TOPIC, 0), {})
    assert len(expected) > 100, "the fuzzing acknowledged too few records to mean anything"
    seen = read_back(fuzz_broker.bootstrap, TOPIC, ledger.next_offset[(TOPIC, 0)])
    assert sorted(seen) == sorted(expected)
    for offset, record in expected.items():
        assert seen[offset] == record._replace(offset_delta=0), offset
