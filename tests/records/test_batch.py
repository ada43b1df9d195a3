import struct

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemark.records import (
    BATCH_OVERHEAD,
    CompressionType,
    CorruptRecordError,
    NewRecord,
    Record,
    UnsupportedMagicError,
    build_batch,
    build_key_value_batch,
    collect_latest,
    decode_records,
    iter_batches,
    iter_key_values,
    read_header,
    set_base_offset,
    set_partition_leader_epoch,
    valid_prefix_length,
    walk_records,
)

RECORDS = [
    (b"key-0", b"value-0", [("h1", b"x"), ("h2", None)], 1_700_000_000_000),
    (None, b"value-1", (), 1_700_000_000_005),
    (b"key-2", None, (), 1_699_999_999_990),
]


def sample(**kw) -> bytes:
    return build_batch(RECORDS, **kw)


def test_header_layout_is_byte_exact():
    b = build_batch(
        RECORDS,
        base_offset=0x0102030405060708,
        partition_leader_epoch=7,
        producer_id=42,
        producer_epoch=3,
        base_sequence=9,
        is_transactional=True,
        compression=CompressionType.GZIP,
    )
    assert BATCH_OVERHEAD == 61
    assert b[0:8] == bytes.fromhex("0102030405060708")
    assert int.from_bytes(b[8:12], "big") == len(b) - 12  # batchLength
    assert int.from_bytes(b[12:16], "big") == 7  # partitionLeaderEpoch
    assert b[16] == 2  # magic
    assert int.from_bytes(b[17:21], "big") == crc32c(b[21:])  # CRC32C of attributes..end
    assert int.from_bytes(b[21:23], "big") == 0x10 | 1  # transactional, gzip
    assert int.from_bytes(b[23:27], "big") == 2  # lastOffsetDelta
    assert int.from_bytes(b[27:35], "big") == 1_700_000_000_000  # baseTimestamp = first record
    assert int.from_bytes(b[35:43], "big") == 1_700_000_000_005  # maxTimestamp
    assert int.from_bytes(b[43:51], "big") == 42  # producerId
    assert int.from_bytes(b[51:53], "big") == 3  # producerEpoch
    assert int.from_bytes(b[53:57], "big") == 9  # baseSequence
    assert int.from_bytes(b[57:61], "big") == 3  # recordsCount


def test_uncompressed_record_encoding_is_byte_exact():
    b = build_batch([(b"k", b"vv", [("h", b"x")], 1000)])
    # length 13, attrs 0, tsDelta 0, offsetDelta 0, key len 1 "k", value len 2 "vv",
    # 1 header: key len 1 "h", value len 1 "x" (zigzag varints: n -> 2n)
    assert b[61:] == bytes([26, 0, 0, 0, 2]) + b"k" + bytes([4]) + b"vv" + bytes([2, 2]) + b"h" + bytes([2]) + b"x"
    assert build_batch([(None, None, (), 1000)])[61:] == bytes([12, 0, 0, 0, 1, 1, 0])


def test_header_properties():
    (pos, h), = iter_batches(sample(base_offset=100, producer_id=5, compression=CompressionType.ZSTD))
    assert pos == 0
    assert h.size == len(sample(base_offset=100, producer_id=5, compression=CompressionType.ZSTD))
    assert (h.base_offset, h.last_offset, h.next_offset) == (100, 102, 103)
    assert h.compression is CompressionType.ZSTD
    assert h.timestamp_type == 0
    assert not h.is_transactional and not h.is_control
    assert h.has_producer_id
    (_, h2), = iter_batches(sample(is_control=True, timestamp_type=1))
    assert h2.is_control and h2.timestamp_type == 1 and not h2.has_producer_id


@pytest.mark.parametrize("codec", list(CompressionType))
def test_round_trip_every_codec(codec):
    b = sample(base_offset=10, compression=codec)
    assert decode_records(b) == [
        Record(10, 1_700_000_000_000, b"key-0", b"value-0", (("h1", b"x"), ("h2", None))),
        Record(11, 1_700_000_000_005, None, b"value-1", ()),
        Record(12, 1_699_999_999_990, b"key-2", None, ()),
    ]


def test_log_append_time_gives_every_record_the_max_timestamp():
    recs = decode_records(sample(timestamp_type=1))
    assert {r.timestamp for r in recs} == {1_700_000_000_005}


def test_new_record_defaults_and_empty_batch():
    (r,) = decode_records(build_batch([NewRecord(value=b"v", timestamp=5)]))
    assert r == Record(0, 5, None, b"v", ())
    with pytest.raises(ValueError):
        build_batch([])


def test_iter_batches_many_and_positions():
    parts = [sample(base_offset=i * 3, compression=i % 5) for i in range(10)]
    data = b"".join(parts)
    got = list(iter_batches(data))
    assert [h.base_offset for _, h in got] == [i * 3 for i in range(10)]
    assert [p for p, _ in got] == [sum(map(len, parts[:i])) for i in range(10)]
    assert list(iter_batches(memoryview(data))) == got
    assert list(iter_batches(b"")) == []


def test_crc_detects_a_flip_of_any_byte_after_the_crc_field():
    b = sample(compression=CompressionType.NONE)
    for i in range(17, len(b)):
        bad = bytearray(b)
        bad[i] ^= 0x01
        with pytest.raises(CorruptRecordError):
            list(iter_batches(bad))
        assert valid_prefix_length(bad) == 0


def test_base_offset_and_leader_epoch_are_outside_the_crc():
    buf = bytearray(sample() + sample())
    second = len(buf) // 2
    set_base_offset(buf, second, 1234)
    set_partition_leader_epoch(buf, second, 99)
    (_, a), (_, h) = iter_batches(buf)
    assert (h.base_offset, h.partition_leader_epoch) == (1234, 99)
    assert (a.base_offset, a.partition_leader_epoch) == (0, 0)
    assert decode_records(bytes(buf), second)[0].offset == 1234


def test_partial_trailing_batch():
    b = sample()
    data = b + b
    for cut in range(len(b) + 1, len(data)):
        with pytest.raises(CorruptRecordError, match="partial"):
            list(iter_batches(data[:cut]))
        assert [p for p, _ in iter_batches(data[:cut], validate=False)] == [0]
        assert valid_prefix_length(data[:cut]) == len(b)
    assert valid_prefix_length(data) == len(data)


def test_unsupported_magic():
    bad = bytearray(sample())
    bad[16] = 1
    with pytest.raises(UnsupportedMagicError):
        list(iter_batches(bad))
    with pytest.raises(UnsupportedMagicError):
        decode_records(bytes(bad))


def _recrc(buf: bytearray) -> bytes:
    struct.pack_into(">I", buf, 17, crc32c(bytes(buf[21:])))
    return bytes(buf)


def test_insane_lengths_and_counts_are_corrupt():
    b = bytearray(sample())
    short = bytearray(b)
    struct.pack_into(">i", short, 8, 48)
    with pytest.raises(CorruptRecordError, match="length"):
        list(iter_batches(short))
    too_many = bytearray(b)
    struct.pack_into(">i", too_many, 57, 4)  # 4 records but lastOffsetDelta 2
    with pytest.raises(CorruptRecordError, match="records"):
        list(iter_batches(_recrc(too_many)))
    compacted = bytearray(b)
    struct.pack_into(">i", compacted, 57, 2)  # fewer records than the offset range: allowed
    assert len(list(iter_batches(_recrc(compacted)))) == 1
    codec = bytearray(b)
    struct.pack_into(">h", codec, 21, 6)
    with pytest.raises(CorruptRecordError, match="codec"):
        list(iter_batches(_recrc(codec)))


def test_truncated_records_section_is_corrupt():
    b = bytearray(sample())
    struct.pack_into(">i", b, 8, len(b) - 12 - 3)
    with pytest.raises(CorruptRecordError):
        decode_records(bytes(b[:-3]))


def test_read_header_matches_iter():
    b = sample(base_offset=5)
    assert read_header(b) == next(iter_batches(b))[1]


# -- interoperability with kafka-python's record code (a client nobody here wrote) -----------


@pytest.mark.parametrize("codec", list(CompressionType))
def test_decode_batches_built_by_kafka_python(kafka_python_codecs, codec):
    builder = kafka_python_codecs.DefaultRecordBatchBuilder(
        magic=2, compression_type=int(codec), is_transactional=False,
        producer_id=77, producer_epoch=1, base_sequence=5, batch_size=1 << 20,
    )
    expected = []
    for i in range(50):
        key = None if i % 7 == 0 else f"key-{i}".encode()
        value = None if i % 11 == 0 else (f"value-{i}-" * (i % 13)).encode()
        headers = [("n", str(i).encode())] if i % 3 else []
        builder.append(i, timestamp=1_700_000_000_000 + i * 3, key=key, value=value, headers=headers)
        expected.append(Record(i, 1_700_000_000_000 + i * 3, key, value, tuple(headers)))
    data = bytes(builder.build())
    (_, h), = iter_batches(data)
    assert h.compression == codec
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.records_count) == (77, 1, 5, 50)
    assert decode_records(data) == expected


@pytest.mark.parametrize("codec", list(CompressionType))
def test_kafka_python_reads_our_batches(kafka_python_codecs, codec):
    from kafka.record.memory_records import MemoryRecords

    data = sample(base_offset=40, compression=codec) + sample(base_offset=43, compression=codec)
    got = [
        (r.offset, r.timestamp, r.key, r.value, tuple(r.headers))
        for batch in MemoryRecords(data) for r in batch
    ]
    assert got == [tuple(r) for r in decode_records(data[: len(data) // 2]) + decode_records(data, len(data) // 2)]


def test_uncompressed_bytes_identical_to_kafka_python(kafka_python_codecs):
    builder = kafka_python_codecs.DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False,
        producer_id=-1, producer_epoch=-1, base_sequence=-1, batch_size=1 << 20,
    )
    for i, (k, v, hs, ts) in enumerate(RECORDS):
        builder.append(i, timestamp=ts, key=k, value=v, headers=list(hs))
    assert bytes(builder.build()) == sample()


# -- property: build/decode round trip -------------------------------------------------------

_record = st.tuples(
    st.none() | st.binary(max_size=300),
    st.none() | st.binary(max_size=300),
    st.lists(st.tuples(st.text(max_size=10), st.none() | st.binary(max_size=20)), max_size=3),
    st.integers(min_value=0, max_value=2**50),
)


@settings(max_examples=150, deadline=None)
@given(
    records=st.lists(_record, min_size=1, max_size=20),
    base_offset=st.integers(min_value=0, max_value=2**62),
    codec=st.sampled_from(list(CompressionType)),
)
def test_build_decode_round_trip(records, base_offset, codec):
    data = build_batch(records, base_offset=base_offset, compression=codec)
    (_, h), = iter_batches(data)
    assert h.records_count == len(records) and h.last_offset == base_offset + len(records) - 1
    assert h.max_timestamp == max(r[3] for r in records)
    assert decode_records(data) == [
        Record(base_offset + i, ts, k, v, tuple(hs)) for i, (k, v, hs, ts) in enumerate(records)
    ]


def test_set_log_append_time_restamps_and_keeps_the_crc_valid():
    from tidemark.records import iter_batches, set_log_append_time

    buf = bytearray(build_batch([(b"k", b"v", (), 1000), (None, b"w", (), 1005)]))
    set_log_append_time(buf, 0, 99_999)
    ((_, header),) = list(iter_batches(buf))  # validates the CRC
    assert header.timestamp_type == 1 and header.max_timestamp == 99_999
    assert [r.value for r in decode_records(bytes(buf))] == [b"v", b"w"]


@pytest.mark.parametrize("compression", list(CompressionType))
def test_iter_key_values_matches_decode_records(compression):
    from tidemark.records import iter_key_values

    records = [(b"k%d" % i, None if i % 7 == 0 else b"v" * (i * 13), ((f"h{i}", b"x"),), 1000 + i)
               for i in range(300)]
    data = build_batch(records, base_offset=40, compression=compression)
    expected = [(r.offset, r.key, r.value) for r in decode_records(data)]
    assert list(iter_key_values(data)) == expected
    assert list(iter_key_values(bytearray(data))) == expected


@pytest.mark.parametrize("compression", list(CompressionType))
@pytest.mark.parametrize("timestamp_type", [0, 1])
def test_iter_timestamped_key_values_matches_decode_records(compression, timestamp_type):
    from tidemark.records import iter_timestamped_key_values

    records = [(b"k%d" % i, None if i % 7 == 0 else b"v" * (i * 13), ((f"h{i}", b"x"),), 1000 + i * 50)
               for i in range(300)]
    data = build_batch(records, base_offset=40, compression=compression, timestamp_type=timestamp_type)
    expected = [(r.offset, r.timestamp, r.key, r.value) for r in decode_records(data)]
    assert list(iter_timestamped_key_values(data)) == expected
    assert list(iter_timestamped_key_values(bytearray(data))) == expected


# -- the record walker ------------------------------------------------------------------------


def _batch_around(section: bytes, count: int) -> bytes:
    """An uncompressed batch of `count` records with the given records section, valid CRC."""
    buf = bytearray(build_batch([(b"k", b"v", (), 1000)]))[:BATCH_OVERHEAD] + section
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    struct.pack_into(">i", buf, 23, max(count - 1, 0))
    struct.pack_into(">i", buf, 57, count)
    return _recrc(buf)


def test_walk_records_yields_each_field_in_place():
    data = sample()
    (r0, r1, r2) = walk_records(data, 3, BATCH_OVERHEAD, len(data))
    start, end, attributes, ts_delta, offset_delta, key_pos, key_len, value_pos, value_len, headers = r0
    assert (start, attributes, ts_delta, offset_delta) == (BATCH_OVERHEAD, 0, 0, 0)
    assert data[key_pos:key_pos + key_len] == b"key-0" and data[value_pos:value_pos + value_len] == b"value-0"
    assert [(data[k:k + kn], vn if vn < 0 else data[v:v + vn]) for k, kn, v, vn in headers] == [
        (b"h1", b"x"), (b"h2", -1)]
    assert r1[0] == end  # records follow each other, length prefix included
    assert (r1[3], r1[4], r1[6], r1[9]) == (5, 1, -1, ())  # null key, no headers
    assert (r2[3], r2[4], r2[8], r2[1]) == (-10, 2, -1, len(data))  # null value, the last record


# A record: length, then attributes, timestamp delta, offset delta, key, value, header count
# (zigzag varints: 0x0c = 6, 0x01 = -1, 0x02 = 1). This one has a null key and value, no headers.
NULLS = b"\x0c" + b"\x00\x00\x00" + b"\x01\x01" + b"\x00"


@pytest.mark.parametrize("section,count,match", [
    (NULLS + b"\x00\x00", 1, "2 bytes after the batch's 1 records"),
    (b"\x0c\x00\x00\x00\x01\x01\x01", 1, "record 0 has -1 headers"),
    (b"\x10\x00\x00\x00\x01\x01\x02\x01\x01", 1, "record 0 has a header without a key"),
    (b"\x10" + NULLS[1:], 1, "record 0 of 1 runs past the batch"),
    (b"\x0e" + NULLS[1:] + b"\x00", 1, "record 0: fields take 6 bytes, its length says 7"),
    (NULLS, 2, "the batch ends after 1 of its 2 records"),
], ids=["trailing-bytes", "negative-header-count", "header-without-key", "length-past-end",
        "length-vs-fields", "fewer-records"])
def test_decode_records_is_as_strict_as_kafka(section, count, match):
    with pytest.raises(CorruptRecordError, match=match):
        decode_records(_batch_around(section, count))


# Lengths around the one- and two-byte varint limits and past the lookup table (8191).
SIZED_BYTES = st.none() | st.integers(0, 9000).flatmap(lambda n: st.binary(min_size=n, max_size=n)) \
    | st.binary(max_size=70)


@settings(max_examples=150, deadline=None)
@given(pairs=st.lists(st.tuples(SIZED_BYTES, SIZED_BYTES), min_size=1, max_size=12),
       timestamp=st.integers(-(2**63), 2**63 - 1), codec=st.sampled_from([CompressionType.NONE, CompressionType.GZIP]),
       transactional=st.booleans(), producer_id=st.integers(-1, 2**63 - 1), producer_epoch=st.integers(-1, 2**15 - 1))
def test_key_value_batch_is_build_batchs_bytes(pairs, timestamp, codec, transactional, producer_id, producer_epoch):
    assert build_key_value_batch(pairs, timestamp, compression=codec, producer_id=producer_id,
                                 producer_epoch=producer_epoch, is_transactional=transactional) == \
        build_batch([(key, value, (), timestamp) for key, value in pairs], compression=codec, producer_id=producer_id,
                    producer_epoch=producer_epoch, is_transactional=transactional)


def test_key_value_batch_of_many_records_is_build_batchs_bytes():
    pairs = [(b"k%d" % i, None if i % 7 == 0 else b"v" * (i % 300)) for i in range(10_000)]  # deltas past 8191
    assert build_key_value_batch(pairs, 5) == build_batch([(k, v, (), 5) for k, v in pairs])
    latest: dict = {}
    assert collect_latest(build_batch([(k, v, (), 5) for k, v in pairs], base_offset=3), 0, latest) == len(pairs)
    assert latest == {k: (3 + i, v) for i, (k, v) in enumerate(pairs)}  # offset deltas of 1 to 3 bytes
    with pytest.raises(ValueError):
        build_key_value_batch([], 5)


@settings(max_examples=150, deadline=None)
@given(pairs=st.lists(st.tuples(st.none() | st.sampled_from([b"a", b"b", b"", b"c" * 200]), SIZED_BYTES),
                      min_size=1, max_size=30),
       base_offset=st.integers(0, 2**40), codec=st.sampled_from([CompressionType.NONE, CompressionType.GZIP]),
       known=st.dictionaries(st.sampled_from([b"a", b"z"]), st.tuples(st.integers(0, 9), st.none()), max_size=2))
def test_collect_latest_keeps_what_iter_key_values_reads_last(pairs, base_offset, codec, known):
    batch = build_batch([(key, value, [("h", b"x")] if i % 3 == 0 else (), 7) for i, (key, value) in enumerate(pairs)],
                        base_offset=base_offset, compression=codec)
    data = b"\x00" * 5 + batch  # at a position, as in a read of the log
    expected = dict(known)
    keyed = 0
    for offset, key, value in iter_key_values(data, 5):
        if key is not None:
            expected[key] = (offset, value)
            keyed += 1
    latest = dict(known)
    assert collect_latest(data, 5, latest) == keyed
    assert latest == expected


def test_collect_latest_refuses_a_record_running_past_its_length():
    batch = bytearray(build_batch([(b"k", b"value", (), 1)]))
    batch[BATCH_OVERHEAD] -= 4  # the record's length (zigzag): its value runs past it
    with pytest.raises(CorruptRecordError):
        collect_latest(bytes(batch), 0, {})
