import resource
import struct

import cramjam
import pytest

from tidemark.records import (
    MAX_DECOMPRESSED_BATCH_BYTES,
    CompressionType,
    CorruptRecordError,
    DecompressionLimitError,
    compress,
    decompress,
)
from tidemark.records.compression import XERIAL_MAGIC

DATA = b"tidemark " * 10_000 + bytes(range(256))


@pytest.mark.parametrize("codec", list(CompressionType))
def test_round_trip(codec):
    assert decompress(codec, compress(codec, DATA)) == DATA
    assert decompress(codec, compress(codec, b"")) == b""


def test_codec_values_match_kafka():
    assert [c.value for c in CompressionType] == [0, 1, 2, 3, 4]
    assert [c.name for c in CompressionType] == ["NONE", "GZIP", "SNAPPY", "LZ4", "ZSTD"]


def test_snappy_is_xerial_framed_like_java_clients():
    out = compress(CompressionType.SNAPPY, DATA)
    assert out.startswith(XERIAL_MAGIC + struct.pack(">ii", 1, 1))
    # 32 KiB blocks, each a big-endian length then a raw snappy block
    pos, blocks = 16, []
    while pos < len(out):
        (n,) = struct.unpack_from(">i", out, pos)
        blocks.append(bytes(cramjam.snappy.decompress_raw(out[pos + 4 : pos + 4 + n])))
        pos += 4 + n
    assert pos == len(out)
    assert all(len(b) == 32 * 1024 for b in blocks[:-1])
    assert b"".join(blocks) == DATA


def test_snappy_accepts_raw_blocks_like_librdkafka():
    assert decompress(CompressionType.SNAPPY, bytes(cramjam.snappy.compress_raw(DATA))) == DATA


def test_snappy_accepts_framing_format():
    assert decompress(CompressionType.SNAPPY, bytes(cramjam.snappy.compress(DATA))) == DATA


def test_lz4_is_frame_format():
    out = compress(CompressionType.LZ4, DATA)
    assert out[:4] == b"\x04\x22\x4d\x18"  # LZ4 frame magic
    flg, bd = out[4], out[5]
    assert flg >> 6 == 1  # frame version 1
    assert flg & 0x20  # independent blocks: Java's KafkaLZ4BlockInputStream rejects linked ones
    assert not flg & 0x04  # no content checksum, like Java's KafkaLZ4BlockOutputStream
    assert bd == 0x40  # 64 KiB blocks, Java's default


def test_zstd_and_gzip_magic():
    assert compress(CompressionType.ZSTD, DATA)[:4] == b"\x28\xb5\x2f\xfd"
    assert compress(CompressionType.GZIP, DATA)[:2] == b"\x1f\x8b"


@pytest.mark.parametrize("codec", [c for c in CompressionType if c])
@pytest.mark.parametrize(
    "garbage", [b"\xff" * 50, XERIAL_MAGIC + b"\x00\x00\x00\x01\x00\x00\x00\x01\x00\x00\x00\x09abc"]
)
def test_garbage_is_corrupt(codec, garbage):
    with pytest.raises(CorruptRecordError):
        decompress(codec, garbage)


def test_unknown_codec_is_corrupt():
    with pytest.raises(CorruptRecordError):
        decompress(6, b"abc")


def _every_framing() -> list[tuple[str, int, bytes]]:
    """(name, codec, compressed DATA) for each framing clients send: Java's and librdkafka's."""
    linked = cramjam.lz4.Compressor(block_linked=True)  # python clients' lz4 frames link blocks
    linked.compress(DATA)
    gzip_members = bytes(cramjam.gzip.compress(DATA[:5000])) + bytes(cramjam.gzip.compress(DATA[5000:]))
    return [
        ("gzip", CompressionType.GZIP, compress(CompressionType.GZIP, DATA)),
        ("gzip-two-members", CompressionType.GZIP, gzip_members),
        ("snappy-xerial", CompressionType.SNAPPY, compress(CompressionType.SNAPPY, DATA)),
        ("snappy-raw", CompressionType.SNAPPY, bytes(cramjam.snappy.compress_raw(DATA))),
        ("snappy-framed", CompressionType.SNAPPY, bytes(cramjam.snappy.compress(DATA))),
        ("lz4-independent", CompressionType.LZ4, compress(CompressionType.LZ4, DATA)),
        ("lz4-linked", CompressionType.LZ4, bytes(linked.finish())),
        ("zstd", CompressionType.ZSTD, compress(CompressionType.ZSTD, DATA)),
    ]


@pytest.mark.parametrize("name,codec,data", _every_framing(), ids=[f[0] for f in _every_framing()])
def test_decompression_stops_at_the_limit(name, codec, data):
    # The bound comes from the framing: exact for gzip, snappy and zstd frames that declare
    # their size; a streamed LZ4 frame counts each compressed block at its maximum size.
    slack = 64 * 1024 if codec is CompressionType.LZ4 else 0
    assert decompress(codec, data, limit=len(DATA) + slack) == DATA
    with pytest.raises(DecompressionLimitError, match=str(len(DATA) - 1)):
        decompress(codec, data, limit=len(DATA) - 1)


def test_bomb_is_refused_without_decompressing_it():
    # 256 MiB of zeros in ~8 KiB of zstd: refused from its frame header, nothing allocated.
    stream = cramjam.zstd.Compressor()
    chunk = bytes(1 << 20)
    for _ in range(256):
        stream.compress(chunk)
    bomb = bytes(stream.finish())
    assert len(bomb) < 64 * 1024
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(DecompressionLimitError, match=str(MAX_DECOMPRESSED_BATCH_BYTES)):
        decompress(CompressionType.ZSTD, bomb)
    # Peak RSS (KiB) did not grow by anything near the 256 MiB the bomb claims.
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 32 * 1024
