"""Message formats v0 and v1 (Kafka's MessageSet before KIP-98), read only to convert them.

Produce v0-v2 carry them; Kafka 3.x converts them to RecordBatch v2 on the way in
(LogValidator's up-conversion), and so does tidemark: the log only ever holds v2 batches. A
message set is a sequence of entries

    Offset int64, MessageSize int32,
    Crc uint32 (CRC-32 of the rest), Magic int8, Attributes int8 (codec in bits 0-2; v1: bit 3,
    log append time), [Timestamp int64: v1 only], Key bytes, Value bytes (int32 length, -1 null)

and a compressed entry (a "wrapper") holds, in its value, a compressed message set of
uncompressed inner messages of the same magic. v0 has no timestamps (-1 once converted).
"""

from __future__ import annotations

import struct
import zlib
from typing import NamedTuple

from .batch import build_batch
from .compression import MAX_DECOMPRESSED_BATCH_BYTES, CompressionType, decompress
from .errors import CorruptRecordError, InvalidRecordError, UnsupportedCompressionTypeError

_ENTRY = struct.Struct(">qi")  # offset, message size
_MESSAGE = struct.Struct(">Ibb")  # crc, magic, attributes
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
LOG_OVERHEAD = 12
_MIN_MESSAGE_SIZE = {0: 14, 1: 22}  # crc, magic, attributes, [timestamp], two null lengths
_MAGIC_AT = 16  # of the first entry: after offset, size and crc
_CODEC_MASK = 0x07
_LOG_APPEND_TIME_BIT = 0x08


class LegacyRecord(NamedTuple):
    key: bytes | None
    value: bytes | None
    timestamp: int  # -1 for magic 0


def is_legacy(records: bytes) -> bool:
    """True when `records` starts with a v0/v1 message (a v2 batch has magic 2 at the same place)."""
    return len(records) > _MAGIC_AT and records[_MAGIC_AT] in (0, 1)


def read_message_set(data: bytes, limit: int = MAX_DECOMPRESSED_BATCH_BYTES) -> tuple[list[LegacyRecord], int]:
    """The records of a v0/v1 message set, wrappers decompressed (at most `limit` bytes in all),
    and the codec of its last compressed wrapper (Kafka's source codec; 0 when none).

    CorruptRecordError: a CRC mismatch, an entry cut short, a size that disagrees with its
    fields, bytes that do not decompress. InvalidRecordError: a compressed inner message, an
    inner message of another magic, a wrapper without a value. UnsupportedCompressionTypeError:
    zstd, which only v2 batches may use."""
    budget = [limit]
    codec = 0
    out: list[LegacyRecord] = []
    for magic, attributes, timestamp, key, value in _entries(data):
        wrapper_codec = attributes & _CODEC_MASK
        if not wrapper_codec:
            out.append(LegacyRecord(key, value, timestamp))
            continue
        codec = wrapper_codec
        out.extend(_unwrap(magic, attributes, timestamp, value, budget))
    return out, codec


def _unwrap(magic: int, attributes: int, timestamp: int, value: bytes | None,
            budget: list[int]) -> list[LegacyRecord]:
    codec = attributes & _CODEC_MASK
    if codec == CompressionType.ZSTD:
        raise UnsupportedCompressionTypeError("zstd compression is only allowed in record batches of magic 2")
    if codec > CompressionType.ZSTD:
        raise CorruptRecordError(f"unknown compression codec {codec}")
    if value is None:
        raise InvalidRecordError("a compressed message without a value")
    if codec == CompressionType.LZ4 and magic == 0:
        value = _fix_lz4_header_checksum(value)
    inner = decompress(codec, value, budget[0])
    budget[0] -= len(inner)
    records = []
    for inner_magic, inner_attributes, inner_timestamp, key, inner_value in _entries(inner):
        if inner_attributes & _CODEC_MASK:
            raise InvalidRecordError("Compressed outer record should not have an inner record with a "
                                     "compression attribute set")
        if inner_magic != magic:
            raise InvalidRecordError(f"inner record's magic {inner_magic} does not match outer magic {magic}")
        # v1 wrapper stamped with log append time: its timestamp is every inner record's.
        if magic == 1 and attributes & _LOG_APPEND_TIME_BIT:
            inner_timestamp = timestamp
        records.append(LegacyRecord(key, inner_value, inner_timestamp))
    return records


def _entries(data: bytes):
    """(magic, attributes, timestamp, key, value) of each entry of a message set, CRC-checked."""
    pos, end_of_set = 0, len(data)
    view = memoryview(data)
    while pos < end_of_set:
        if end_of_set - pos < LOG_OVERHEAD + 6:
            raise CorruptRecordError(f"message set cut short: {end_of_set - pos} bytes left at position {pos}")
        _, size = _ENTRY.unpack_from(data, pos)
        start, end = pos + LOG_OVERHEAD, pos + LOG_OVERHEAD + size
        crc, magic, attributes = _MESSAGE.unpack_from(data, start)
        if magic not in _MIN_MESSAGE_SIZE:
            raise CorruptRecordError(f"message of magic {magic} in a message set of magic 0/1")
        if size < _MIN_MESSAGE_SIZE[magic]:
            raise CorruptRecordError(f"message size {size} is less than the minimum {_MIN_MESSAGE_SIZE[magic]}")
        if end > end_of_set:
            raise CorruptRecordError(f"message of {size} bytes cut short at position {pos}")
        computed = zlib.crc32(view[start + 4:end])
        if computed != crc:
            raise CorruptRecordError(f"Record is corrupt (stored crc = {crc}, computed crc = {computed})")
        p = start + 6
        timestamp = -1
        if magic == 1:
            (timestamp,) = _I64.unpack_from(data, p)
            p += 8
        key, p = _bytes(data, p, end)
        value, p = _bytes(data, p, end)
        if p != end:
            raise CorruptRecordError(f"message size {size} disagrees with its fields ({p - start} bytes)")
        yield magic, attributes, timestamp, key, value
        pos = end


def _bytes(data: bytes, pos: int, end: int) -> tuple[bytes | None, int]:
    if pos + 4 > end:
        raise CorruptRecordError("message fields run past its size")
    (n,) = _I32.unpack_from(data, pos)
    pos += 4
    if n < 0:
        return None, pos
    if pos + n > end:
        raise CorruptRecordError("message fields run past its size")
    return bytes(data[pos:pos + n]), pos + n


def to_record_batch(data: bytes, limit: int = MAX_DECOMPRESSED_BATCH_BYTES) -> bytes:
    """One RecordBatch v2 holding the records of a v0/v1 message set, in order, with their keys,
    values and timestamps (-1 from magic 0), compressed with the set's codec as Kafka keeps the
    producer's (compression.type=producer). No producer id: these formats have none."""
    records, codec = read_message_set(data, limit)
    if not records:
        raise InvalidRecordError("a produce request without records")
    return build_batch([(r.key, r.value, (), r.timestamp) for r in records], compression=codec)


# --------------------------------------------------------------------------- LZ4 of magic 0

_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def _xxh32_short(data: bytes) -> int:
    """XXH32 with seed 0 of fewer than 16 bytes (an LZ4 frame descriptor is at most 14)."""
    h = (_P5 + len(data)) & _M32
    i = 0
    while i + 4 <= len(data):
        (k,) = struct.unpack_from("<I", data, i)
        h = (_rotl((h + k * _P3) & _M32, 17) * _P4) & _M32
        i += 4
    for b in data[i:]:
        h = (_rotl((h + b * _P5) & _M32, 11) * _P1) & _M32
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    return h ^ (h >> 16)


def _fix_lz4_header_checksum(frame: bytes) -> bytes:
    """Kafka 0.8-0.9 clients (and librdkafka for magic 0) computed an LZ4 frame's header checksum
    over the frame magic as well (KAFKA-3160); Kafka ignores it for magic 0. Rewrite it as the
    LZ4 frame format defines it, so the decoder accepts the frame."""
    if len(frame) < 7:
        return frame
    flags = frame[4]
    descriptor_end = 6 + (8 if flags & 0x08 else 0) + (4 if flags & 0x01 else 0)
    if len(frame) <= descriptor_end:
        return frame
    checksum = (_xxh32_short(frame[4:descriptor_end]) >> 8) & 0xFF
    return frame[:descriptor_end] + bytes((checksum,)) + frame[descriptor_end + 1:]
