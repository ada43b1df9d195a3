import struct

import cramjam
import pytest

from tidemark.records import CompressionType, CorruptRecordError, compress, decompress
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
