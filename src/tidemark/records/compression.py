"""Compression codecs of RecordBatch v2 (attributes bits 0-2), via cramjam."""

from __future__ import annotations

import struct
from enum import IntEnum

import cramjam

from .errors import CorruptRecordError


class CompressionType(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


# Java clients (snappy-java's SnappyOutputStream) write xerial framing: this magic, a version
# and a compatible version (int32 each), then big-endian int32 length-prefixed raw blocks.
XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024  # snappy-java's default block size
# The standard snappy framing format; no Kafka client sends it, but it is cheap to accept.
_SNAPPY_FRAMED_MAGIC = b"\xff\x06\x00\x00sNaPpY"


def _xerial_compress(data: bytes) -> bytes:
    out = [_XERIAL_HEADER]
    view = memoryview(data)
    for start in range(0, len(data), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK]))
        out.append(struct.pack(">i", len(block)))
        out.append(block)
    return b"".join(out)


def _xerial_decompress(data: bytes) -> bytes:
    out = []
    pos = len(_XERIAL_HEADER)
    end = len(data)
    while pos < end:
        if pos + 4 > end:
            raise CorruptRecordError("truncated xerial snappy block length")
        (n,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if n < 0 or pos + n > end:
            raise CorruptRecordError("truncated xerial snappy block")
        out.append(bytes(cramjam.snappy.decompress_raw(data[pos : pos + n])))
        pos += n
    return b"".join(out)


def _lz4_compress(data: bytes) -> bytes:
    # LZ4 frame format (KIP-57) with independent blocks: Kafka's Java KafkaLZ4BlockInputStream
    # rejects linked blocks, which are the lz4 library's default.
    c = cramjam.lz4.Compressor(content_checksum=False, block_linked=False)
    if data:
        c.compress(data)
    return bytes(c.finish())


def compress(codec: CompressionType | int, data: bytes) -> bytes:
    """Compress a batch's records section the way Kafka's Java client does."""
    codec = CompressionType(codec)
    if codec is CompressionType.NONE:
        return bytes(data)
    if codec is CompressionType.GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec is CompressionType.SNAPPY:
        return _xerial_compress(data)
    if codec is CompressionType.LZ4:
        return _lz4_compress(data)
    return bytes(cramjam.zstd.compress(data))


def decompress(codec: CompressionType | int, data: bytes) -> bytes:
    """Decompress a records section; accepts what Java clients and librdkafka send."""
    try:
        codec = CompressionType(codec)
    except ValueError:
        raise CorruptRecordError(f"unknown compression codec {codec}") from None
    data = bytes(data)
    try:
        if codec is CompressionType.NONE:
            return data
        if codec is CompressionType.GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if codec is CompressionType.SNAPPY:
            if data.startswith(XERIAL_MAGIC):
                return _xerial_decompress(data)
            if data.startswith(_SNAPPY_FRAMED_MAGIC):
                return bytes(cramjam.snappy.decompress(data))
            return bytes(cramjam.snappy.decompress_raw(data))  # librdkafka: raw snappy
        if codec is CompressionType.LZ4:
            return bytes(cramjam.lz4.decompress(data))
        return bytes(cramjam.zstd.decompress(data))
    except cramjam.DecompressionError as e:
        raise CorruptRecordError(f"{codec.name} decompression failed: {e}") from None
