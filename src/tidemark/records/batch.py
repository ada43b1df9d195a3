"""Kafka RecordBatch v2 (magic 2): header parsing, validation, building and record decoding.

Layout (big-endian): baseOffset i64, batchLength i32, partitionLeaderEpoch i32, magic i8,
crc u32, attributes i16, lastOffsetDelta i32, baseTimestamp i64, maxTimestamp i64,
producerId i64, producerEpoch i16, baseSequence i32, recordsCount i32, then the records.
The CRC (CRC32C) covers attributes to the end, so baseOffset and partitionLeaderEpoch can be
rewritten by the broker without re-checksumming.
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple

from crc32c import crc32c

from .compression import CompressionType, compress, decompress
from .errors import CorruptRecordError, UnsupportedMagicError

MAGIC = 2
BATCH_OVERHEAD = 61  # header size
LOG_OVERHEAD = 12  # baseOffset + batchLength: the part batchLength does not count
MIN_BATCH_LENGTH = BATCH_OVERHEAD - LOG_OVERHEAD  # 49

_HEADER = struct.Struct(">qiibIhiqqqhii")
_LENGTH_AT = 8
_EPOCH_AT = 12
_MAGIC_AT = 16
_CRC_AT = 17
_ATTRIBUTES_AT = 21  # CRC coverage starts here

_COMPRESSION_MASK = 0x07
_TIMESTAMP_TYPE_BIT = 0x08
_TRANSACTIONAL_BIT = 0x10
_CONTROL_BIT = 0x20

TIMESTAMP_CREATE_TIME = 0
TIMESTAMP_LOG_APPEND_TIME = 1
NO_TIMESTAMP = -1


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies in a log or a request."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> CompressionType:
        return CompressionType(self.attributes & _COMPRESSION_MASK)

    @property
    def timestamp_type(self) -> int:
        """0 = CreateTime, 1 = LogAppendTime."""
        return 1 if self.attributes & _TIMESTAMP_TYPE_BIT else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _CONTROL_BIT)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record, wrapping at int32 like Kafka's producer."""
        if self.base_sequence < 0:
            return -1
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF


class Record(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


class NewRecord(NamedTuple):
    """A record to put into a new batch; plain (key, value, headers, timestamp_ms) tuples work too."""

    key: bytes | None = None
    value: bytes | None = None
    headers: Sequence[tuple[str, bytes | None]] = ()
    timestamp: int | None = None


def read_header(data, position: int = 0) -> BatchHeader:
    """Unpack the 61-byte header at position without any checks."""
    return BatchHeader._make(_HEADER.unpack_from(data, position))


def _validated_header(data, pos: int, end: int, origin: int = 0) -> BatchHeader:
    remaining = end - pos
    at = origin + pos  # where the batch is, for messages
    if remaining < LOG_OVERHEAD:
        raise CorruptRecordError(f"partial batch at {at}: {remaining} bytes left")
    if remaining > _MAGIC_AT and data[pos + _MAGIC_AT] != MAGIC:
        raise UnsupportedMagicError(f"batch at {at} has magic {data[pos + _MAGIC_AT]}, only 2 is supported")
    (batch_length,) = struct.unpack_from(">i", data, pos + _LENGTH_AT)
    if batch_length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(f"batch at {at} has length {batch_length} < {MIN_BATCH_LENGTH}")
    if batch_length + LOG_OVERHEAD > remaining:
        raise CorruptRecordError(
            f"partial batch at {at}: length {batch_length} but only {remaining - LOG_OVERHEAD} bytes"
        )
    header = BatchHeader._make(_HEADER.unpack_from(data, pos))
    computed = crc32c(memoryview(data)[pos + _ATTRIBUTES_AT : pos + LOG_OVERHEAD + batch_length])
    if computed != header.crc:
        raise CorruptRecordError(f"batch at {at}: CRC mismatch (stored {header.crc:#010x}, computed {computed:#010x})")
    if header.attributes & _COMPRESSION_MASK > CompressionType.ZSTD:
        raise CorruptRecordError(f"batch at {at}: unknown compression codec {header.attributes & _COMPRESSION_MASK}")
    # Compaction may remove records but keeps lastOffsetDelta, so count <= delta + 1.
    if header.last_offset_delta < 0 or not 0 <= header.records_count <= header.last_offset_delta + 1:
        raise CorruptRecordError(
            f"batch at {at}: {header.records_count} records with last offset delta {header.last_offset_delta}"
        )
    return header


def validate_batch(data, position: int = 0, end: int | None = None, *, origin: int = 0) -> BatchHeader:
    """Check the one batch at position (magic, length, CRC, counts) and return its header.

    end bounds the buffer (default: its length); a batch running past it is partial. Errors
    name the batch's position as origin + position (origin: where data was read from a file).
    """
    return _validated_header(data, position, len(data) if end is None else end, origin)


def iter_batches(data, *, validate: bool = True) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) of each complete batch in data.

    With validate, every batch is checked (magic, length, CRC, counts) and a partial trailing
    batch is an error; without, iteration just stops at the first incomplete batch.
    """
    end = len(data)
    pos = 0
    unpack_from = _HEADER.unpack_from
    make = BatchHeader._make
    while pos < end:
        if validate:
            header = _validated_header(data, pos, end)
        else:
            if end - pos < BATCH_OVERHEAD:
                return
            header = make(unpack_from(data, pos))
            if header.batch_length < MIN_BATCH_LENGTH or pos + header.batch_length + LOG_OVERHEAD > end:
                return
        yield pos, header
        pos += header.batch_length + LOG_OVERHEAD


def valid_prefix_length(data) -> int:
    """Bytes of complete, valid batches from the start of data (for log recovery)."""
    end = len(data)
    pos = 0
    while pos < end:
        try:
            header = _validated_header(data, pos, end)
        except CorruptRecordError:
            break
        pos += header.size
    return pos


def set_base_offset(buf: bytearray | memoryview, position: int, base_offset: int) -> None:
    struct.pack_into(">q", buf, position, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, position: int, epoch: int) -> None:
    struct.pack_into(">i", buf, position + _EPOCH_AT, epoch)


_MAX_TIMESTAMP_AT = 35  # after attributes (2), last offset delta (4), base timestamp (8)


def set_log_append_time(buf: bytearray, position: int, timestamp_ms: int) -> None:
    """Stamp a batch with the broker's time (message.timestamp.type=LogAppendTime), as Kafka does:
    the timestamp-type bit set, max_timestamp = append time, the CRC recomputed."""
    (attributes,) = struct.unpack_from(">h", buf, position + _ATTRIBUTES_AT)
    struct.pack_into(">h", buf, position + _ATTRIBUTES_AT, attributes | _TIMESTAMP_TYPE_BIT)
    struct.pack_into(">q", buf, position + _MAX_TIMESTAMP_AT, timestamp_ms)
    (batch_length,) = struct.unpack_from(">i", buf, position + _LENGTH_AT)
    end = position + LOG_OVERHEAD + batch_length
    struct.pack_into(">I", buf, position + _CRC_AT, crc32c(memoryview(buf)[position + _ATTRIBUTES_AT : end]))


# -- varints (zigzag, as Kafka's ByteUtils.writeVarint/writeVarlong) --------------------------


def _write_varint(out: bytearray, n: int) -> None:
    z = (n << 1) ^ (n >> 63)
    if z < 0x80:  # one byte: small lengths and deltas, most of every batch
        out.append(z)
        return
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)


def read_varint(buf, pos: int) -> tuple[int, int]:
    """A zigzag varint (Kafka's ByteUtils.readVarint) at pos: (value, position after it)."""
    b = buf[pos]
    if b < 0x80:  # one byte: the common case for small lengths and deltas
        return (b >> 1) ^ -(b & 1), pos + 1
    z = b & 0x7F
    shift = 7
    while True:
        pos += 1
        b = buf[pos]
        z |= (b & 0x7F) << shift
        if b < 0x80:
            return (z >> 1) ^ -(z & 1), pos + 1
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint too long")


def _write_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        _write_varint(out, -1)
    else:
        _write_varint(out, len(data))
        out += data


def _encode_record(out: bytearray, offset_delta: int, timestamp_delta: int, key, value, headers) -> None:
    body = bytearray(b"\x00")  # record attributes: unused
    _write_varint(body, timestamp_delta)
    _write_varint(body, offset_delta)
    _write_bytes(body, key)
    _write_bytes(body, value)
    _write_varint(body, len(headers))
    for h_key, h_value in headers:
        _write_bytes(body, h_key.encode() if isinstance(h_key, str) else h_key)
        _write_bytes(body, h_value)
    _write_varint(out, len(body))
    out += body


def build_batch(
    records: Iterable[NewRecord | tuple],
    *,
    base_offset: int = 0,
    compression: CompressionType | int = CompressionType.NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = 0,
    is_transactional: bool = False,
    is_control: bool = False,
    timestamp_type: int = TIMESTAMP_CREATE_TIME,
) -> bytes:
    """Build one RecordBatch v2 from (key, value, headers, timestamp_ms) records."""
    items = [NewRecord(*r) for r in records]
    if not items:
        raise ValueError("a batch needs at least one record")
    now_ms = None
    timestamps = []
    for r in items:
        ts = r.timestamp
        if ts is None:
            if now_ms is None:
                now_ms = int(time.time() * 1000)
            ts = now_ms
        timestamps.append(ts)
    base_timestamp = timestamps[0]
    section = bytearray()
    for delta, (r, ts) in enumerate(zip(items, timestamps)):
        _encode_record(section, delta, ts - base_timestamp, r.key, r.value, r.headers)
    return _finish_batch(section, len(items), base_timestamp, max(timestamps), base_offset=base_offset,
                         compression=compression, producer_id=producer_id, producer_epoch=producer_epoch,
                         base_sequence=base_sequence, partition_leader_epoch=partition_leader_epoch,
                         is_transactional=is_transactional, is_control=is_control, timestamp_type=timestamp_type)


def _finish_batch(section: bytes | bytearray, count: int, base_timestamp: int, max_timestamp: int, *,
                  base_offset: int = 0, compression: CompressionType | int = CompressionType.NONE,
                  producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                  partition_leader_epoch: int = 0, is_transactional: bool = False, is_control: bool = False,
                  timestamp_type: int = TIMESTAMP_CREATE_TIME) -> bytes:
    """A batch around an encoded records section: compressed, headed, checksummed."""
    codec = CompressionType(compression)
    payload = compress(codec, bytes(section)) if codec else section
    attributes = (
        codec
        | (_TIMESTAMP_TYPE_BIT if timestamp_type == TIMESTAMP_LOG_APPEND_TIME else 0)
        | (_TRANSACTIONAL_BIT if is_transactional else 0)
        | (_CONTROL_BIT if is_control else 0)
    )
    buf = bytearray(BATCH_OVERHEAD)
    _HEADER.pack_into(
        buf,
        0,
        base_offset,
        BATCH_OVERHEAD - LOG_OVERHEAD + len(payload),
        partition_leader_epoch,
        MAGIC,
        0,
        attributes,
        count - 1,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    )
    buf += payload
    struct.pack_into(">I", buf, _CRC_AT, crc32c(memoryview(buf)[_ATTRIBUTES_AT:]))
    return bytes(buf)


def _varint_bytes(n: int) -> bytes:
    out = bytearray()
    _write_varint(out, n)
    return bytes(out)


# -1 (a null key or value) and 0..8191 as zigzag varints (one or two bytes): every length and
# offset delta of a coordinator's batch, looked up instead of encoded.
_SMALL_VARINTS = tuple(_varint_bytes(n) for n in range(-1, 8192))


def build_key_value_batch_py(
    pairs: Iterable[tuple[bytes | None, bytes | None]],
    timestamp: int,
    *,
    compression: CompressionType | int = CompressionType.NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    is_transactional: bool = False,
) -> bytes:
    """The batch `build_batch` builds from (key, value, (), timestamp) records, byte for byte:
    records without headers that share one timestamp, as a coordinator writes them (an offset
    commit of hundreds of partitions is one such batch). Each record is a few table lookups and
    one join instead of an encoder call per field."""
    small = _SMALL_VARINTS
    parts: list[bytes] = []
    count = 0
    for count, (key, value) in enumerate(pairs, start=1):
        key_length = -1 if key is None else len(key)
        value_length = -1 if value is None else len(value)
        delta = count - 1
        head = small[delta + 1] if delta < 8192 else _varint_bytes(delta)
        key_head = small[key_length + 1] if key_length < 8192 else _varint_bytes(key_length)
        value_head = small[value_length + 1] if value_length < 8192 else _varint_bytes(value_length)
        # attributes, timestamp delta, offset delta, key, value, header count
        size = 3 + len(head) + len(key_head) + len(value_head) + (key_length if key_length > 0 else 0) \
            + (value_length if value_length > 0 else 0)
        parts += (small[size + 1] if size < 8192 else _varint_bytes(size), b"\x00\x00", head, key_head, key or b"",
                  value_head, value or b"", b"\x00")
    if not count:
        raise ValueError("a batch needs at least one record")
    return _finish_batch(b"".join(parts), count, timestamp, timestamp, compression=compression,
                         producer_id=producer_id, producer_epoch=producer_epoch, is_transactional=is_transactional)


def records_section(batch, position: int = 0) -> tuple[BatchHeader, bytes | memoryview, int, int]:
    """(header, buffer, start, end) of the records of the batch at position: an uncompressed
    batch's records are batch[start:end] in place (no copy), a compressed one's its whole
    decompressed section. Checks the framing (magic, length) but not the CRC."""
    if len(batch) - position < BATCH_OVERHEAD:
        raise CorruptRecordError("batch shorter than its header")
    header = read_header(batch, position)
    if header.magic != MAGIC:
        raise UnsupportedMagicError(f"magic {header.magic}, only 2 is supported")
    end = position + header.size
    if end > len(batch) or header.batch_length < MIN_BATCH_LENGTH:
        raise CorruptRecordError("partial batch")
    codec = header.attributes & _COMPRESSION_MASK
    if codec:
        section = decompress(codec, memoryview(batch)[position + BATCH_OVERHEAD : end])
        return header, section, 0, len(section)
    return header, batch, position + BATCH_OVERHEAD, end


def walk_records(buf, count: int, pos: int = 0, end: int | None = None) -> Iterator[tuple]:
    """The one walk over a records section (Kafka's DefaultRecord): the `count` records in
    buf[pos:end] (end: len(buf)), read in place, nothing copied. For each record it yields

        (start, end, attributes, timestamp_delta, offset_delta,
         key_pos, key_len, value_pos, value_len, headers)

    where start:end are the record's bytes (length prefix included), a length < 0 is a null key
    or value, and headers is a tuple of (key_pos, key_len, value_pos, value_len), () if none.
    Strict, as Kafka's record reader: a record that does not fill exactly its declared length,
    a field running past it, a header without a key, a negative header count, fewer than count
    records or bytes after them raise CorruptRecordError (the validator reports the same text
    as InvalidRecordError). One-byte varints, nearly all of them, are read inline."""
    size = len(buf) if end is None else end
    index = 0
    try:
        for index in range(count):
            if pos >= size:
                raise CorruptRecordError(f"the batch ends after {index} of its {count} records")
            start = pos
            b = buf[pos]
            if b < 0x80:
                length, pos = (b >> 1) ^ -(b & 1), pos + 1
            else:
                length, pos = read_varint(buf, pos)
            record_end = pos + length
            if length <= 0 or record_end > size:
                raise CorruptRecordError(f"record {index} of {count} runs past the batch")
            attributes = buf[pos]
            b = buf[pos + 1]
            if b < 0x80:
                timestamp_delta, pos = (b >> 1) ^ -(b & 1), pos + 2
            else:
                timestamp_delta, pos = read_varint(buf, pos + 1)
            b = buf[pos]
            if b < 0x80:
                offset_delta, pos = (b >> 1) ^ -(b & 1), pos + 1
            else:
                offset_delta, pos = read_varint(buf, pos)
            b = buf[pos]
            if b < 0x80:
                key_len, pos = (b >> 1) ^ -(b & 1), pos + 1
            else:
                key_len, pos = read_varint(buf, pos)
            key_pos = pos
            if key_len > 0:
                pos += key_len
            b = buf[pos]
            if b < 0x80:
                value_len, pos = (b >> 1) ^ -(b & 1), pos + 1
            else:
                value_len, pos = read_varint(buf, pos)
            value_pos = pos
            if value_len > 0:
                pos += value_len
            b = buf[pos]
            if b == 0:  # no headers: the common case
                headers = ()
                pos += 1
            else:
                n_headers, pos = read_varint(buf, pos)
                if n_headers < 0:
                    raise CorruptRecordError(f"record {index} has {n_headers} headers")
                spans = []
                for _ in range(n_headers):
                    b = buf[pos]
                    if b < 0x80:
                        n, pos = (b >> 1) ^ -(b & 1), pos + 1
                    else:
                        n, pos = read_varint(buf, pos)
                    if n < 0:
                        raise CorruptRecordError(f"record {index} has a header without a key")
                    h_key_pos = pos
                    b = buf[pos + n]
                    if b < 0x80:
                        n_value, pos = (b >> 1) ^ -(b & 1), pos + n + 1
                    else:
                        n_value, pos = read_varint(buf, pos + n)
                    spans.append((h_key_pos, n, pos, n_value))
                    if n_value > 0:
                        pos += n_value
                    if pos > record_end:  # stop here: the length check below reports it
                        break
                headers = tuple(spans)
            if pos != record_end:
                raise CorruptRecordError(f"record {index}: fields take {pos - record_end + length} bytes, "
                                         f"its length says {length}")
            yield (start, record_end, attributes, timestamp_delta, offset_delta,
                   key_pos, key_len, value_pos, value_len, headers)
    except IndexError:  # a varint ran off the end of the buffer
        raise CorruptRecordError(f"record {index} of {count} is malformed: it runs past the buffer") from None
    if pos != size:
        raise CorruptRecordError(f"{size - pos} bytes after the batch's {count} records")


def decode_records(batch, position: int = 0) -> list[Record]:
    """Decode (and decompress) the records of the batch at position; the CRC is not re-checked."""
    header, buf, start, end = records_section(batch, position)
    log_append = header.timestamp_type == TIMESTAMP_LOG_APPEND_TIME
    base_offset, base_timestamp = header.base_offset, header.base_timestamp
    out = []
    try:
        for (_, _, _, ts_delta, offset_delta, key_pos, key_len, value_pos, value_len,
             spans) in walk_records(buf, header.records_count, start, end):
            out.append(Record(
                base_offset + offset_delta,
                header.max_timestamp if log_append else base_timestamp + ts_delta,
                None if key_len < 0 else bytes(buf[key_pos : key_pos + key_len]),
                None if value_len < 0 else bytes(buf[value_pos : value_pos + value_len]),
                tuple((str(buf[k : k + kn], "utf-8"), None if vn < 0 else bytes(buf[v : v + vn]))
                      for k, kn, v, vn in spans)))
    except UnicodeDecodeError:
        raise CorruptRecordError(f"record {len(out)} has a header key that is not UTF-8") from None
    return out


def _lean_section(batch, position: int) -> tuple[BatchHeader, bytes, int]:
    """(header, buffer, position of the first record) for the lean readers below: uncompressed
    records are read in place, compressed ones from their decompressed section."""
    header, buf, start, end = records_section(batch, position)
    if buf is not batch or isinstance(batch, bytes):  # a decompressed section is bytes already
        return header, buf, start
    return header, bytes(memoryview(batch)[start:end]), 0


def iter_key_values(batch, position: int = 0) -> Iterator[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of each record of the batch at position, headers skipped: the lean
    path for loading a compacted topic such as __consumer_offsets (millions of records), with
    one-byte varints read inline and uncompressed records sliced straight from `batch`."""
    header, buf, pos = _lean_section(batch, position)
    base_offset = header.base_offset
    size = len(buf)
    try:
        for _ in range(header.records_count):
            length, pos = read_varint(buf, pos)
            record_end = pos + length
            if length < 0 or record_end > size:
                raise CorruptRecordError("record extends past the batch")
            pos += 1  # attributes
            pos = pos + 1 if buf[pos] < 0x80 else read_varint(buf, pos)[1]  # timestamp delta
            b = buf[pos]
            if b < 0x80:
                offset_delta, pos = (b >> 1) ^ -(b & 1), pos + 1
            else:
                offset_delta, pos = read_varint(buf, pos)
            b = buf[pos]
            if b < 0x80:
                n, pos = (b >> 1) ^ -(b & 1), pos + 1
            else:
                n, pos = read_varint(buf, pos)
            key = None if n < 0 else buf[pos : pos + n]
            pos += max(n, 0)
            b = buf[pos]
            if b < 0x80:
                n, pos = (b >> 1) ^ -(b & 1), pos + 1
            else:
                n, pos = read_varint(buf, pos)
            value = None if n < 0 else buf[pos : pos + n]
            if pos + max(n, 0) > record_end:
                raise CorruptRecordError("record fields extend past its length")
            pos = record_end
            yield base_offset + offset_delta, key, value
    except IndexError as e:
        raise CorruptRecordError(f"malformed record: {e}") from None


def key_values_py(batch, position: int = 0) -> list[tuple[int, bytes | None, bytes | None]]:
    """iter_key_values's records as one list: what a coordinator reads from its log per batch
    (a standby's replay and loading's transactional batches take it whole)."""
    return list(iter_key_values(batch, position))


def collect_latest_py(batch, position: int, latest: dict) -> int:
    """Put (offset, value) of each keyed record of the batch at position into `latest` under its
    key, later records replacing earlier ones; returns how many keyed records there were. The
    load of a compacted topic such as __consumer_offsets keeps only each key's last record:
    this is iter_key_values and the dict write in one loop, without a tuple per record read."""
    header, buf, pos = _lean_section(batch, position)
    base_offset = header.base_offset
    size = len(buf)
    keyed = 0
    try:
        for _ in range(header.records_count):
            b = buf[pos]
            if b < 0x80:
                length, pos = (b >> 1) ^ -(b & 1), pos + 1
            elif buf[pos + 1] < 0x80:  # two bytes: a record of 64 to 8191 bytes, most of them
                z = (b & 0x7F) | (buf[pos + 1] << 7)
                length, pos = (z >> 1) ^ -(z & 1), pos + 2
            else:
                length, pos = read_varint(buf, pos)
            record_end = pos + length
            if length < 0 or record_end > size:
                raise CorruptRecordError("record extends past the batch")
            b = buf[pos + 1]  # after the attributes byte: the timestamp delta
            at = pos + 2 if b < 0x80 else read_varint(buf, pos + 1)[1]
            b = buf[at]
            if b < 0x80:
                offset_delta, at = (b >> 1) ^ -(b & 1), at + 1
            elif buf[at + 1] < 0x80:  # two bytes: deltas 64 to 8191
                z = (b & 0x7F) | (buf[at + 1] << 7)
                offset_delta, at = (z >> 1) ^ -(z & 1), at + 2
            else:
                offset_delta, at = read_varint(buf, at)
            b = buf[at]
            if b < 0x80:
                n, at = (b >> 1) ^ -(b & 1), at + 1
            else:
                n, at = read_varint(buf, at)
            key = buf[at : at + n] if n >= 0 else None
            if n > 0:
                at += n
            b = buf[at]
            if b < 0x80:
                n, at = (b >> 1) ^ -(b & 1), at + 1
            else:
                n, at = read_varint(buf, at)
            if at + (n if n > 0 else 0) > record_end:
                raise CorruptRecordError("record fields extend past its length")
            if key is not None:  # a record without a key has nothing to keep
                latest[key] = (base_offset + offset_delta, buf[at : at + n] if n >= 0 else None)
                keyed += 1
            pos = record_end
    except IndexError as e:
        raise CorruptRecordError(f"malformed record: {e}") from None
    return keyed


def iter_timestamped_key_values(batch, position: int = 0) -> Iterator[tuple[int, int, bytes | None, bytes | None]]:
    """(offset, timestamp, key, value) of each record of the batch at position, headers skipped:
    iter_key_values plus each record's timestamp, for tools that decode whole offsets logs.
    A copy of that loop rather than a wrapper, so the broker's load loop pays nothing for it."""
    header, buf, pos = _lean_section(batch, position)
    base_offset = header.base_offset
    log_append_time = header.max_timestamp if header.attributes & _TIMESTAMP_TYPE_BIT else None
    base_timestamp = header.base_timestamp
    size = len(buf)
    try:
        for _ in range(header.records_count):
            length, pos = read_varint(buf, pos)
            record_end = pos + length
            if length < 0 or record_end > size:
                raise CorruptRecordError("record extends past the batch")
            b = buf[pos + 1]  # after the attributes byte
            if b < 0x80:
                timestamp_delta, pos = (b >> 1) ^ -(b & 1), pos + 2
            else:
                timestamp_delta, pos = read_varint(buf, pos + 1)
            b = buf[pos]
            if b < 0x80:
                offset_delta, pos = (b >> 1) ^ -(b & 1), pos + 1
            else:
                offset_delta, pos = read_varint(buf, pos)
            b = buf[pos]
            if b < 0x80:
                n, pos = (b >> 1) ^ -(b & 1), pos + 1
            else:
                n, pos = read_varint(buf, pos)
            key = None if n < 0 else buf[pos : pos + n]
            pos += max(n, 0)
            b = buf[pos]
            if b < 0x80:
                n, pos = (b >> 1) ^ -(b & 1), pos + 1
            else:
                n, pos = read_varint(buf, pos)
            value = None if n < 0 else buf[pos : pos + n]
            if pos + max(n, 0) > record_end:
                raise CorruptRecordError("record fields extend past its length")
            pos = record_end
            yield (base_offset + offset_delta,
                   base_timestamp + timestamp_delta if log_append_time is None else log_append_time, key, value)
    except IndexError as e:
        raise CorruptRecordError(f"malformed record: {e}") from None



def map_key_offsets_py(batch, position: int, offsets: dict) -> tuple[int, bool]:
    """Put each keyed record's offset into `offsets` under its key, later records replacing
    earlier ones (the log cleaner's offset map); returns (how many keyed records, whether one of
    them has a null value: a tombstone). One loop per record like collect_latest, values never
    sliced. As strict as walk_records: a record that does not end where its length says, one
    with headers, or records that do not fill the section exactly send the batch through
    walk_records, which raises its CorruptRecordError (or, for valid headers, passes), so a
    batch the cleaner then drops unread was still checked."""
    header, buf, pos = _lean_section(batch, position)
    base_offset = header.base_offset
    start = pos
    size = len(buf) if buf is not batch else position + header.size
    count = header.records_count
    null_keys = 0
    tombstone = False
    walked = False
    try:
        for _ in range(count):
            # Lengths are zigzag varints: an even first byte is a length >= 0 (of one byte below
            # 0x80, else of two if the second is below 0x80); the rest takes read_varint.
            b = buf[pos]
            if b < 0x80 and not b & 1:
                pos += 1
                record_end = pos + (b >> 1)
            elif not b & 1 and buf[pos + 1] < 0x80:  # a record of 64 to 8191 bytes
                record_end = pos + 2 + ((b & 0x7F) >> 1 | buf[pos + 1] << 6)
                pos += 2
            else:
                length, pos = read_varint(buf, pos)
                record_end = pos + length
            at = pos + 2 if buf[pos + 1] < 0x80 else read_varint(buf, pos + 1)[1]  # attributes, timestamp delta
            b = buf[at]
            if b < 0x80:
                offset_delta, at = (b >> 1) ^ -(b & 1), at + 1
            elif buf[at + 1] < 0x80:  # two bytes: deltas 64 to 8191
                z = (b & 0x7F) | (buf[at + 1] << 7)
                offset_delta, at = (z >> 1) ^ -(z & 1), at + 2
            else:
                offset_delta, at = read_varint(buf, at)
            b = buf[at]
            if b < 0x80 and not b & 1:  # a key of up to 63 bytes
                at += 1
                offsets[buf[at : at + (b >> 1)]] = base_offset + offset_delta
                at += b >> 1
            else:
                n, at = read_varint(buf, at)
                if n >= 0:
                    offsets[buf[at : at + n]] = base_offset + offset_delta
                    at += n
                else:
                    null_keys += 1
            b = buf[at]
            if b < 0x80 and not b & 1:  # a value of up to 63 bytes
                at += 1 + (b >> 1)
            elif not b & 1 and buf[at + 1] < 0x80:  # 64 to 8191 bytes
                at += 2 + ((b & 0x7F) >> 1 | buf[at + 1] << 6)
            else:
                n, at = read_varint(buf, at)
                if n > 0:
                    at += n
                elif n < 0:  # a null value (of a keyed record or not: the caller only looks closer)
                    tombstone = True
            if at + 1 != record_end or buf[at]:  # not "no headers, then the end"
                if not walked:
                    for _ in walk_records(buf, count, start, size):  # raises if the batch is malformed
                        pass
                    walked = True
            pos = record_end
    except IndexError:  # a field ran off the end of the buffer
        pos = -1
    if pos != size and not walked:
        for _ in walk_records(buf, count, start, size):  # raises the precise error
            pass
        raise CorruptRecordError(f"the batch's {count} records do not fill its records section")
    return count - null_keys, tombstone


def latest_record_ranges_py(buf, start: int, end: int, count: int, base_offset: int, offsets: dict,
                         retain_tombstones: bool) -> tuple[list[tuple[int, int]], int, int | None]:
    """The records of buf[start:end] (a records section of `count` records, as records_section
    gives it) that `offsets` holds as their key's latest: (their byte ranges, adjacent ones
    merged; how many; the largest timestamp delta among them, None if none: deltas may be
    negative). Records without a
    key go, and tombstones (null values) unless retain_tombstones. For a batch map_key_offsets
    read already (so checked): one-byte varints inline, headers not parsed (a record ends where
    its length says)."""
    ranges: list[tuple[int, int]] = []
    kept = 0
    max_ts = None
    pos = start
    get = offsets.get
    try:
        for _ in range(count):
            record_start = pos
            b = buf[pos]
            if b < 0x80:
                length, pos = (b >> 1) ^ -(b & 1), pos + 1
            elif buf[pos + 1] < 0x80:  # two bytes: a record of 64 to 8191 bytes
                z = (b & 0x7F) | (buf[pos + 1] << 7)
                length, pos = (z >> 1) ^ -(z & 1), pos + 2
            else:
                length, pos = read_varint(buf, pos)
            record_end = pos + length
            b = buf[pos + 1]  # after the attributes byte: the timestamp delta
            if b < 0x80:
                ts_delta, at = (b >> 1) ^ -(b & 1), pos + 2
            else:
                ts_delta, at = read_varint(buf, pos + 1)
            b = buf[at]
            if b < 0x80:
                offset_delta, at = (b >> 1) ^ -(b & 1), at + 1
            elif buf[at + 1] < 0x80:  # two bytes: deltas 64 to 8191
                z = (b & 0x7F) | (buf[at + 1] << 7)
                offset_delta, at = (z >> 1) ^ -(z & 1), at + 2
            else:
                offset_delta, at = read_varint(buf, at)
            b = buf[at]
            if b < 0x80:
                n, at = (b >> 1) ^ -(b & 1), at + 1
            else:
                n, at = read_varint(buf, at)
            pos = record_end
            if n < 0 or get(buf[at : at + n]) != base_offset + offset_delta:
                continue
            if not retain_tombstones and buf[at + n] & 1:  # a zigzag varint's sign: a null value
                continue
            kept += 1
            if max_ts is None or ts_delta > max_ts:
                max_ts = ts_delta
            if ranges and ranges[-1][1] == record_start:
                ranges[-1] = (ranges[-1][0], record_end)
            else:
                ranges.append((record_start, record_end))
    except IndexError:
        raise CorruptRecordError("malformed record: it runs past the batch") from None
    if pos != end:
        raise CorruptRecordError(f"{end - pos} bytes after the batch's {count} records")
    return ranges, kept, max_ts


# -- the compiled loops (_speedups.c) ----------------------------------------------------------
# The functions above ending in _py are the reference. The compiled ones take the common case
# (a bytes buffer, an exact dict, well-formed records) and return None for anything else,
# having written nothing the reference would not write itself; the reference then gives the
# result or raises its exact error. TIDEMARK_PURE_PYTHON=1 keeps the reference throughout.


def _build_key_value_batch_compiled(pairs, timestamp: int, *, compression: CompressionType | int = CompressionType.NONE,
                                    producer_id: int = -1, producer_epoch: int = -1,
                                    is_transactional: bool = False) -> bytes:
    if compression is CompressionType.NONE or (type(compression) is int and compression == 0):
        # The whole batch in C, header and CRC included (crc32c called once on the bytes).
        batch = _speedups.key_value_batch(pairs, timestamp, producer_id, producer_epoch,
                                          _TRANSACTIONAL_BIT if is_transactional else 0, crc32c)
        if batch is not None:
            return batch
    else:  # the compression costs more than the rest: the section in C, the batch as the reference's
        section = _speedups.key_value_section(pairs)
        if section is not None:
            return _finish_batch(section, len(pairs), timestamp, timestamp, compression=compression,
                                 producer_id=producer_id, producer_epoch=producer_epoch,
                                 is_transactional=is_transactional)
    return build_key_value_batch_py(pairs, timestamp, compression=compression, producer_id=producer_id,
                                    producer_epoch=producer_epoch, is_transactional=is_transactional)


def _collect_latest_compiled(batch, position: int, latest: dict) -> int:
    keyed = _speedups.collect_latest_batch(batch, position, latest)  # an uncompressed batch: header and all in C
    if keyed is None:
        header, buf, pos = _lean_section(batch, position)
        keyed = _speedups.collect_latest(buf, pos, header.records_count, header.base_offset, latest)
    return collect_latest_py(batch, position, latest) if keyed is None else keyed


def _key_values_compiled(batch, position: int = 0) -> list[tuple[int, bytes | None, bytes | None]]:
    listed = _speedups.read_key_values_batch(batch, position)  # an uncompressed batch: header and all in C
    if listed is None:
        header, buf, pos = _lean_section(batch, position)
        listed = _speedups.read_key_values(buf, pos, header.records_count, header.base_offset)
    return key_values_py(batch, position) if listed is None else listed


def _map_key_offsets_compiled(batch, position: int, offsets: dict) -> tuple[int, bool]:
    found = _speedups.map_key_offsets_batch(batch, position, offsets)
    if found is None:
        header, buf, pos = _lean_section(batch, position)
        size = len(buf) if buf is not batch else position + header.size
        found = _speedups.map_key_offsets(buf, pos, size, header.records_count, header.base_offset, offsets)
    return map_key_offsets_py(batch, position, offsets) if found is None else found


def _latest_record_ranges_compiled(buf, start: int, end: int, count: int, base_offset: int, offsets: dict,
                                   retain_tombstones: bool) -> tuple[list[tuple[int, int]], int, int | None]:
    found = _speedups.latest_record_ranges(buf, start, end, count, base_offset, offsets, retain_tombstones)
    if found is None:
        return latest_record_ranges_py(buf, start, end, count, base_offset, offsets, retain_tombstones)
    return found


def produce_records_valid_py(buf, start: int, end: int, count: int, compacted: bool) -> bool:
    """Never decides: the produce validator's own walk over the records is the reference."""
    return False


def _produce_records_valid_compiled(buf, start: int, end: int, count: int, compacted: bool) -> bool:
    """True when the compiled walk finds buf[start:end] to be exactly `count` records that pass
    every per-record check of the produce validator (see _speedups.produce_records_valid);
    False when it leaves them to the validator's walk, which then passes them or raises."""
    return _speedups.produce_records_valid(buf, start, end, count, compacted) is True


try:
    from . import _speedups
except ImportError:  # not built (a source tree without `make install`): the reference alone
    _speedups = None

#: Whether the compiled loops are in use (the one place that decides): built, and not refused.
COMPILED = _speedups is not None and os.environ.get("TIDEMARK_PURE_PYTHON", "") in ("", "0")
if COMPILED:
    build_key_value_batch = _build_key_value_batch_compiled
    collect_latest = _collect_latest_compiled
    key_values = _key_values_compiled
    map_key_offsets = _map_key_offsets_compiled
    latest_record_ranges = _latest_record_ranges_compiled
    produce_records_valid = _produce_records_valid_compiled
else:
    build_key_value_batch = build_key_value_batch_py
    collect_latest = collect_latest_py
    key_values = key_values_py
    map_key_offsets = map_key_offsets_py
    latest_record_ranges = latest_record_ranges_py
    produce_records_valid = produce_records_valid_py
