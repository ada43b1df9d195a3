"""kafka-python without its optional codec packages, given cramjam-backed stand-ins.

kafka-python only calls snappy.compress/decompress (raw blocks; it does the xerial framing
itself), lz4.frame.compress/decompress and zstandard's (de)compressor. The stand-ins supply
just those primitives, so the batch layout and framing under test are still kafka-python's.
"""

import io
import types

import cramjam
import pytest


@pytest.fixture
def kafka_python_codecs(monkeypatch):
    import kafka.codec as codec
    import kafka.record.default_records as default_records

    snappy = types.SimpleNamespace(
        compress=lambda b: bytes(cramjam.snappy.compress_raw(bytes(b))),
        decompress=lambda b: bytes(cramjam.snappy.decompress_raw(bytes(b))),
    )

    class _Compressor:
        def compress(self, b):
            return bytes(cramjam.zstd.compress(bytes(b)))

    class _Decompressor:
        def stream_reader(self, f, read_across_frames=True):
            return io.BytesIO(bytes(cramjam.zstd.decompress(f.read())))

    zstd = types.SimpleNamespace(ZstdCompressor=_Compressor, ZstdDecompressor=_Decompressor)
    lz4_encode = lambda b: bytes(cramjam.lz4.compress(bytes(b)))  # noqa: E731
    lz4_decode = lambda b: bytes(cramjam.lz4.decompress(bytes(b)))  # noqa: E731

    monkeypatch.setattr(codec, "snappy", snappy)
    monkeypatch.setattr(codec, "zstd", zstd)
    monkeypatch.setattr(codec, "lz4", types.SimpleNamespace())
    monkeypatch.setattr(codec, "lz4_encode", lz4_encode)
    monkeypatch.setattr(codec, "lz4_decode", lz4_decode)
    monkeypatch.setattr(default_records, "lz4_encode", lz4_encode)
    monkeypatch.setattr(default_records, "lz4_decode", lz4_decode)
    return default_records
