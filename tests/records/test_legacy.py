"""Message formats v0/v1 read and converted to one RecordBatch v2, as Kafka 3.x up-converts them."""

from __future__ import annotations

import struct
import zlib

import pytest

from tidemark.records import (
    CompressionType,
    CorruptRecordError,
    InvalidRecordError,
    UnsupportedCompressionTypeError,
    compress,
    decode_records,
    iter_batches,
)
from tidemark.records.legacy import _fix_lz4_header_checksum, _xxh32_short, is_legacy, to_record_batch

from .legacy_messages import message, message_set

RECORDS = [(b"k0", b"v0"), (None, b"v1"), (b"k2", None)]


@pytest.mark.parametrize("codec", [0, CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4])
@pytest.mark.parametrize("magic", [0, 1])
def test_conversion_keeps_keys_values_and_timestamps(magic, codec):
    data = message_set(RECORDS, magic=magic, codec=codec, timestamp=5000)
    assert is_legacy(data)
    batch = to_record_batch(data)
    (_, header), = iter_batches(batch)
    assert header.compression == codec  # the producer's codec, as compression.type=producer keeps it
    assert header.producer_id == -1
    records = decode_records(batch)
    assert [(r.key, r.value) for r in records] == RECORDS
    assert [r.timestamp for r in records] == ([5000, 5001, 5002] if magic == 1 else [-1, -1, -1])


def test_a_v1_wrapper_with_log_append_time_stamps_its_records():
    inner = b"".join(message(k, v, timestamp=1, offset=i) for i, (k, v) in enumerate(RECORDS))
    wrapper = message(None, compress(CompressionType.GZIP, inner), timestamp=777,
                      attributes=CompressionType.GZIP | 0x08)
    assert [r.timestamp for r in decode_records(to_record_batch(wrapper))] == [777, 777, 777]


def test_many_messages_become_one_batch():
    data = message(b"a", b"1") + message_set([(b"b", b"2"), (b"c", b"3")], codec=CompressionType.GZIP) + message(b"d", b"4")
    assert [r.key for r in decode_records(to_record_batch(data))] == [b"a", b"b", b"c", b"d"]


def test_a_bad_crc_is_corrupt():
    data = bytearray(message(b"k", b"v"))
    data[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="Record is corrupt"):
        to_record_batch(bytes(data))


@pytest.mark.parametrize("cut", [1, 5, 20])
def test_a_message_cut_short_is_corrupt(cut):
    with pytest.raises(CorruptRecordError):
        to_record_batch(message(b"k", b"v") + message(b"k", b"v")[:-cut])


def test_a_size_that_disagrees_with_the_fields_is_corrupt():
    data = bytearray(message(b"k", b"v"))
    struct.pack_into(">i", data, len(data) - 5, 2)  # value length 2, one byte there
    with pytest.raises(CorruptRecordError):
        to_record_batch(bytes(data[:12]) + _recrc(bytes(data[12:])))


def _recrc(msg: bytes) -> bytes:
    return struct.pack(">I", zlib.crc32(msg[4:])) + msg[4:]


def test_nested_compression_is_invalid():
    inner = message_set([(b"k", b"v")], codec=CompressionType.GZIP)
    wrapper = message(None, compress(CompressionType.GZIP, inner), attributes=CompressionType.GZIP)
    with pytest.raises(InvalidRecordError, match="inner record with a compression attribute"):
        to_record_batch(wrapper)


def test_inner_magic_must_match_the_wrapper():
    inner = message(b"k", b"v", magic=0)
    wrapper = message(None, compress(CompressionType.GZIP, inner), magic=1, attributes=CompressionType.GZIP)
    with pytest.raises(InvalidRecordError, match="outer magic"):
        to_record_batch(wrapper)


def test_zstd_is_not_a_legacy_codec():
    with pytest.raises(UnsupportedCompressionTypeError):
        to_record_batch(message_set([(b"k", b"v")], codec=CompressionType.ZSTD))


def test_lz4_of_magic_0_with_the_old_header_checksum():
    # Kafka 0.8/0.9 clients hashed the frame magic into the header checksum (KAFKA-3160).
    good = compress(CompressionType.LZ4, message(b"k", b"v", magic=0))
    descriptor_end = 6 + (8 if good[4] & 0x08 else 0) + (4 if good[4] & 0x01 else 0)
    assert good[descriptor_end] == (_xxh32_short(good[4:descriptor_end]) >> 8) & 0xFF  # the frame's own rule
    broken = bytearray(good)
    broken[descriptor_end] ^= 0x5A
    assert _fix_lz4_header_checksum(bytes(broken)) == good
    wrapper = message(None, bytes(broken), magic=0, attributes=CompressionType.LZ4)
    assert [r.key for r in decode_records(to_record_batch(wrapper))] == [b"k"]


def test_v2_batches_are_not_legacy():
    from tidemark.records import build_batch
    assert not is_legacy(build_batch([(b"k", b"v", (), 1)]))
    with pytest.raises(InvalidRecordError):
        to_record_batch(b"")
