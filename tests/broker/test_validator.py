"""The produce validator: each rule, and the Kafka error code a client gets for it."""

from __future__ import annotations

import struct

import cramjam
import pytest
from crc32c import crc32c
from kio.schema.errors import ErrorCode

from tidemark.broker.errors import error_code_for
from tidemark.broker.validator import validate_produce
from tidemark.cluster.embedded import InvalidTopicError
from tidemark.log.config import LogConfig
from tidemark.records import (
    CompressionType,
    CorruptRecordError,
    DecompressionLimitError,
    InvalidRecordError,
    RecordListTooLargeError,
    RecordTooLargeError,
    RecordValidationError,
    build_batch,
    compress,
)
from tidemark.records.batch import _encode_record

PLAIN = LogConfig()
COMPACTED = LogConfig(cleanup_policy="compact,delete")


def validate(records: bytes, config: LogConfig = PLAIN, *, internal: bool = False):
    return validate_produce(records, config, topic="t", partition=0, internal=internal)


def raw_batch(section: bytes, count: int, last_offset_delta: int, codec: int = 0, *,
              payload: bytes | None = None) -> bytes:
    """A v2 batch around an arbitrary records section (or compressed payload), with a correct CRC."""
    if payload is None:
        payload = compress(codec, section)
    batch = bytearray(build_batch([(b"k", b"v", (), 1000)]))[:61] + payload
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">h", batch, 21, codec)
    struct.pack_into(">i", batch, 23, last_offset_delta)
    struct.pack_into(">i", batch, 57, count)
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    return bytes(batch)


def records(deltas, key: bytes | None = b"k") -> bytes:
    out = bytearray()
    for delta in deltas:
        _encode_record(out, delta, 0, key, b"value", [("h", b"x")])
    return bytes(out)


@pytest.mark.parametrize("codec", list(CompressionType))
def test_what_real_clients_send_passes(codec):
    batch = build_batch([(b"k%d" % i, b"v" * i, [("h", b"1")], 1000 + i) for i in range(50)], compression=codec)
    assert validate(batch).records_count == 50
    assert validate(batch, COMPACTED).records_count == 50
    assert validate(raw_batch(records(range(3)), 3, 2, CompressionType.ZSTD)).records_count == 3


def test_internal_topics_are_refused():
    with pytest.raises(InvalidTopicError, match="Cannot append to internal topic t") as info:
        validate(build_batch([(b"k", b"v", (), 1000)]), internal=True)
    assert error_code_for(info.value) == ErrorCode.invalid_topic_exception


def test_exactly_one_batch_per_partition():
    one = build_batch([(b"k", b"v", (), 1000)])
    for records_ in (one + one, b""):
        with pytest.raises(InvalidRecordError, match="exactly one record batch") as info:
            validate(records_)
        assert error_code_for(info.value) == ErrorCode.invalid_record


def test_batch_size_limits():
    batch = build_batch([(b"k", b"v" * 400, (), 1000)])
    with pytest.raises(RecordTooLargeError, match="max.message.bytes 400") as info:
        validate(batch, LogConfig(max_message_bytes=400))
    assert error_code_for(info.value) == ErrorCode.message_too_large
    with pytest.raises(RecordListTooLargeError, match="segment.bytes 400") as info:
        validate(batch, LogConfig(segment_bytes=400))
    assert error_code_for(info.value) == ErrorCode.record_list_too_large


@pytest.mark.parametrize("section,count,last_delta,match", [
    (records([0, 1]), 1, 1, "last offset delta"),  # header count vs delta
    (records([0, 1]), 0, 0, "0 records"),  # no records
    (records([0, 1]), 3, 2, "ends after 2 of its 3 records"),  # header claims more than present
    (records([0, 1, 2]), 2, 1, "bytes after"),  # more records than the header says
    (records([0, 2]), 2, 1, "offset delta 2, expected 1"),  # deltas must be 0..n-1
    (records([1, 0]), 2, 1, "offset delta 1, expected 0"),
    (records([0, 1]) + b"\x00\x00", 2, 1, "2 bytes after"),  # trailing garbage
    (b"\x7f" + records([0])[1:], 1, 0, "runs past the batch"),  # a length past the end
], ids=["count-vs-delta", "no-records", "fewer-records", "more-records", "delta-gap", "delta-order",
        "trailing-bytes", "length-past-end"])
@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.ZSTD])
def test_records_must_agree_with_the_header(section, count, last_delta, match, codec):
    with pytest.raises(InvalidRecordError, match=match) as info:
        validate(raw_batch(section, count, last_delta, codec))
    assert error_code_for(info.value) == ErrorCode.invalid_record


def test_more_records_than_offsets_is_corrupt():
    # A batch that cannot exist in any log (compaction only ever removes records): the records
    # layer refuses it as corrupt before the validator's rules.
    with pytest.raises(CorruptRecordError) as info:
        validate(raw_batch(records([0, 1]), 2, 0))
    assert error_code_for(info.value) == ErrorCode.corrupt_message


def test_record_length_must_match_its_fields():
    section = bytearray(records([0, 1]))
    section[0] -= 2  # first record's length says one byte less (zigzag varint)
    with pytest.raises(InvalidRecordError, match="its length says") as info:
        validate(raw_batch(bytes(section), 2, 1))
    assert error_code_for(info.value) == ErrorCode.invalid_record


def test_control_batches_from_clients_are_refused():
    control = build_batch([(b"\x00\x00\x00\x00", b"", (), 1000)], is_control=True)
    with pytest.raises(InvalidRecordError, match="control"):
        validate(control)


def test_compacted_topic_needs_keys():
    keyless = build_batch([(b"k", b"v", (), 1000), (None, b"v", (), 1000)], compression=CompressionType.LZ4)
    assert validate(keyless, PLAIN).records_count == 2
    with pytest.raises(RecordValidationError) as info:
        validate(keyless, COMPACTED)
    # Kafka's per-record error (KIP-467): the record's index in its batch, and its message.
    assert info.value.record_errors == [(1, "Compacted topic cannot accept message without key in topic partition t-0.")]
    assert error_code_for(info.value) == ErrorCode.invalid_record


def test_every_keyless_record_is_named():
    keyless = build_batch([(None if i % 3 == 0 else b"k", b"v", (), 1000) for i in range(10)])
    with pytest.raises(RecordValidationError) as info:
        validate(keyless, COMPACTED)
    assert [index for index, _ in info.value.record_errors] == [0, 3, 6, 9]
    assert str(info.value).startswith("One or more records have been rejected due to 4 record errors in total, "
                                      "and only showing the first three errors at most: [RecordError(batchIndex=0, ")
    assert str(info.value).count("RecordError(") == 3


def test_header_keys_must_be_utf8():
    good = bytearray()
    _encode_record(good, 0, 0, b"k", b"v", [("h\u00e9", b"x")])
    assert validate(raw_batch(bytes(good), 1, 0)).records_count == 1
    bad = bytes(good).replace("h\u00e9".encode(), b"h\xc3(")  # same length, not UTF-8
    with pytest.raises(InvalidRecordError, match="header key that is not UTF-8") as info:
        validate(raw_batch(bad, 1, 0))
    assert error_code_for(info.value) == ErrorCode.invalid_record


def test_many_batches_are_refused_without_walking_them_all():
    one = build_batch([(b"k", b"v", (), 1000)])
    corrupt_third = one + one + b"\x00" * 70  # a third "batch" that is not one: never read
    with pytest.raises(InvalidRecordError, match="exactly one record batch"):
        validate(corrupt_third)


def test_unparseable_bytes_are_corrupt():
    with pytest.raises(CorruptRecordError) as info:
        validate(raw_batch(b"", 1, 0, CompressionType.GZIP, payload=b"not gzip at all"))
    assert error_code_for(info.value) == ErrorCode.corrupt_message


def test_decompression_bomb_is_refused():
    stream = cramjam.zstd.Compressor()
    stream.compress(records([0]))
    for _ in range(128):  # then 128 MiB of zeros: past the 64 MiB limit
        stream.compress(bytes(1 << 20))
    bomb = raw_batch(b"", 1, 0, CompressionType.ZSTD, payload=bytes(stream.finish()))
    assert len(bomb) < 16 * 1024
    with pytest.raises(DecompressionLimitError, match="67108864") as info:
        validate(bomb)
    assert error_code_for(info.value) == ErrorCode.invalid_record


def test_negative_header_count_is_invalid():
    # A record claiming -1 headers (Kafka: "Found invalid number of record headers"): null key
    # and value, then the count as zigzag varint 0x01; its length (6) matches its fields.
    section = b"\x0c\x00\x00\x00\x01\x01\x01"
    with pytest.raises(InvalidRecordError, match="record 0 has -1 headers") as info:
        validate(raw_batch(section, 1, 0))
    assert error_code_for(info.value) == ErrorCode.invalid_record
