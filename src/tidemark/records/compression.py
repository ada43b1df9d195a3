"""Compression codecs of RecordBatch v2 (attributes bits 0-2), via cramjam."""

from __future__ import annotations

import struct
import zlib
from enum import IntEnum

import cramjam

from .errors import CorruptRecordError, DecompressionLimitError


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

# tidemark's limit on what one batch's records section may decompress to (Kafka has none): a
# few KiB of zstd can claim gigabytes. 64 MiB is 64x the default max.message.bytes, far above
# what real producers batch, and the same limit applies to every reader (produce validation,
# cleaner, offsets loader, ListOffsets, offline tools), so whatever was accepted stays readable.
MAX_DECOMPRESSED_BATCH_BYTES = 64 * 1024 * 1024


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


def _u32le(data: bytes, pos: int) -> int:
    if pos + 4 > len(data):
        raise CorruptRecordError("truncated frame")
    return int.from_bytes(data[pos : pos + 4], "little")


def _is_skippable(magic: int) -> bool:
    return magic & 0xFFFFFFF0 == 0x184D2A50  # skippable frames of zstd and LZ4 alike


# cramjam's decompressors only take whole frames, so the bound is checked before decompressing:
# each codec's framing says (or caps) how much every block decompresses to, and the sum of those
# caps is an upper bound read from a few header bytes, with nothing allocated.

_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_MAX_BLOCK = 128 * 1024  # a compressed block never decompresses to more (RFC 8878 3.1.1.2.3)


def _zstd_bound(data: bytes) -> int:
    bound = pos = 0
    while pos < len(data):
        magic = _u32le(data, pos)
        if _is_skippable(magic):
            pos += 8 + _u32le(data, pos + 4)
            continue
        if magic != _ZSTD_MAGIC or pos + 5 > len(data):
            raise CorruptRecordError("not a zstd frame")
        descriptor = data[pos + 4]
        single_segment = descriptor & 0x20
        content_size_len = (1 if single_segment else 0, 2, 4, 8)[descriptor >> 6]
        pos += 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[descriptor & 0x03] + content_size_len
        # The declared content size, when present, is exact (the decoder enforces it).
        declared = int.from_bytes(data[pos - content_size_len : pos], "little") if content_size_len else None
        if content_size_len == 2:
            declared += 256
        blocks = 0
        while True:
            if pos + 3 > len(data):
                raise CorruptRecordError("truncated zstd block")
            block = int.from_bytes(data[pos : pos + 3], "little")
            kind, size = (block >> 1) & 0x03, block >> 3
            pos += 3 + (1 if kind == 1 else size)  # an RLE block stores one byte
            blocks += _ZSTD_MAX_BLOCK if kind == 2 else size
            if block & 1:
                break
        bound += blocks if declared is None else min(blocks, declared)
        pos += 4 if descriptor & 0x04 else 0  # content checksum
    return bound


_LZ4_MAGIC = 0x184D2204
_LZ4_BLOCK_MAX = {4: 64 * 1024, 5: 256 * 1024, 6: 1024 * 1024, 7: 4 * 1024 * 1024}


def _lz4_bound(data: bytes) -> int:
    bound = pos = 0
    while pos < len(data):
        magic = _u32le(data, pos)
        if _is_skippable(magic):
            pos += 8 + _u32le(data, pos + 4)
            continue
        if magic != _LZ4_MAGIC or pos + 7 > len(data):
            raise CorruptRecordError("not an LZ4 frame")
        flags, block_max = data[pos + 4], _LZ4_BLOCK_MAX.get((data[pos + 5] >> 4) & 0x07)
        if block_max is None:
            raise CorruptRecordError("LZ4 frame with an invalid block size")
        pos += 7 + (8 if flags & 0x08 else 0) + (4 if flags & 0x01 else 0)
        while True:
            block = _u32le(data, pos)
            pos += 4
            if block == 0:  # end mark
                break
            size = block & 0x7FFFFFFF
            bound += size if block & 0x80000000 else block_max
            pos += size + (4 if flags & 0x10 else 0)
        pos += 4 if flags & 0x04 else 0
    return bound


def _snappy_raw_bound(data: bytes) -> int:
    try:
        return cramjam.snappy.decompress_raw_len(data)
    except cramjam.DecompressionError as e:
        raise CorruptRecordError(f"SNAPPY decompression failed: {e}") from None


def _xerial_bound(data: bytes) -> int:
    bound, pos = 0, len(_XERIAL_HEADER)
    while pos + 4 <= len(data):
        (n,) = struct.unpack_from(">i", data, pos)
        bound += _snappy_raw_bound(data[pos + 4 : pos + 4 + max(n, 0)])
        pos += 4 + max(n, 0)
    return bound


def _snappy_framed_bound(data: bytes) -> int:
    bound, pos = 0, 0
    while pos + 4 <= len(data):
        kind, size = data[pos], int.from_bytes(data[pos + 1 : pos + 4], "little")
        if kind == 0x00:
            bound += _snappy_raw_bound(data[pos + 8 : pos + 4 + size])
        elif kind == 0x01:
            bound += max(size - 4, 0)
        pos += 4 + size
    return bound


_GZIP_CHUNK = 1 << 20


def _gzip_bounded(data: bytes, limit: int) -> bytes:
    """gzip members one after the other (as Java's GZIPInputStream reads them), inflated 1 MiB
    at a time and stopped as soon as the output passes limit."""
    out = bytearray()
    while data:
        inflater = zlib.decompressobj(wbits=31)
        while not inflater.eof:
            chunk = inflater.decompress(data, _GZIP_CHUNK)
            data = inflater.unconsumed_tail
            out += chunk
            if len(out) > limit:
                raise DecompressionLimitError(f"GZIP batch decompresses to more than {limit} bytes "
                                              "(the limit on a batch's decompressed records)")
            if not chunk and not data and not inflater.eof:
                raise CorruptRecordError("GZIP decompression failed: truncated stream")
        data = inflater.unused_data
    return bytes(out)


def decompress(codec: CompressionType | int, data: bytes, limit: int = MAX_DECOMPRESSED_BATCH_BYTES) -> bytes:
    """Decompress a records section; accepts what Java clients and librdkafka send.

    Raises DecompressionLimitError, before decompressing anything, if it would exceed limit."""
    try:
        codec = CompressionType(codec)
    except ValueError:
        raise CorruptRecordError(f"unknown compression codec {codec}") from None
    data = bytes(data)
    try:
        if codec is CompressionType.NONE:
            return data
        if codec is CompressionType.GZIP:
            return _gzip_bounded(data, limit)
        if codec is CompressionType.SNAPPY:
            if data.startswith(XERIAL_MAGIC):
                kind, bound = "xerial", _xerial_bound(data)
            elif data.startswith(_SNAPPY_FRAMED_MAGIC):
                kind, bound = "framed", _snappy_framed_bound(data)
            else:
                kind, bound = "raw", _snappy_raw_bound(data)  # librdkafka: raw snappy
        elif codec is CompressionType.LZ4:
            bound = _lz4_bound(data)
        else:
            bound = _zstd_bound(data)
        if bound > limit:
            raise DecompressionLimitError(f"{codec.name} batch may decompress to {bound} bytes, more than {limit} "
                                          "(the limit on a batch's decompressed records)")
        if codec is CompressionType.SNAPPY:
            if kind == "xerial":
                return _xerial_decompress(data)
            if kind == "framed":
                return bytes(cramjam.snappy.decompress(data))
            return bytes(cramjam.snappy.decompress_raw(data))
        if codec is CompressionType.LZ4:
            return bytes(cramjam.lz4.decompress(data))
        return bytes(cramjam.zstd.decompress(data))
    except (cramjam.DecompressionError, zlib.error) as e:
        raise CorruptRecordError(f"{codec.name} decompression failed: {e}") from None
