"""The test's own strict reading of one RecordBatch v2, independent of the broker's code: the
oracle for "could a consumer read exactly these records at exactly these offsets"."""

from __future__ import annotations

import struct
from typing import NamedTuple

from crc32c import crc32c

from tidemark.records.compression import decompress

HEADER = struct.Struct(">qiibIhiqqqhii")


class Invalid(Exception):
    """The batch is not one a consumer could read back as sent."""


class Rec(NamedTuple):
    offset_delta: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    z = shift = 0
    while True:
        if pos >= len(buf):
            raise Invalid("varint runs past the records")
        b = buf[pos]
        pos += 1
        z |= (b & 0x7F) << shift
        if b < 0x80:
            return (z >> 1) ^ -(z & 1), pos
        shift += 7
        if shift > 63:
            raise Invalid("varint longer than 10 bytes")


def _bytes(buf: bytes, pos: int, nullable: bool = True) -> tuple[bytes | None, int]:
    n, pos = _varint(buf, pos)
    if n < 0:
        if n != -1 or not nullable:
            raise Invalid(f"bad length {n}")
        return None, pos
    if pos + n > len(buf):
        raise Invalid("field runs past the record")
    return buf[pos : pos + n], pos + n


def read_batch(data: bytes) -> list[Rec]:
    """The records of the single batch in data, or Invalid with the reason."""
    if len(data) < HEADER.size:
        raise Invalid("shorter than a batch header")
    (_, length, _, magic, crc, attributes, last_delta, _, _, _, _, _, count) = HEADER.unpack_from(data)
    if length + 12 != len(data):
        raise Invalid(f"batch length {length} but {len(data) - 12} bytes follow")
    if magic != 2:
        raise Invalid(f"magic {magic}")
    if crc32c(data[21:]) != crc:
        raise Invalid("CRC mismatch")
    if attributes & 0x20:
        raise Invalid("control batch")
    if attributes & 0x07 > 4:
        raise Invalid("unknown codec")
    if count <= 0 or count != last_delta + 1:
        raise Invalid(f"{count} records, last offset delta {last_delta}")
    try:
        section = decompress(attributes & 0x07, data[HEADER.size :])
    except Exception as exc:  # noqa: BLE001 - any decompression failure makes it unreadable
        raise Invalid(f"decompression: {exc}") from None
    records, pos = [], 0
    for index in range(count):
        size, pos = _varint(section, pos)
        end = pos + size
        if size < 0 or end > len(section):
            raise Invalid(f"record {index} of {size} bytes runs past the section")
        body = section[:end]
        if pos >= end:
            raise Invalid(f"record {index} is empty")
        pos += 1  # record attributes
        _, pos = _varint(body, pos)  # timestamp delta
        delta, pos = _varint(body, pos)
        if delta != index:
            raise Invalid(f"record {index} has offset delta {delta}")
        key, pos = _bytes(body, pos)
        value, pos = _bytes(body, pos)
        n_headers, pos = _varint(body, pos)
        if n_headers < 0:
            raise Invalid("negative header count")
        headers = []
        for _ in range(n_headers):
            h_key, pos = _bytes(body, pos, nullable=False)
            h_value, pos = _bytes(body, pos)
            try:
                headers.append((h_key.decode(), h_value))
            except UnicodeDecodeError:
                raise Invalid("header key is not UTF-8") from None
        if pos != end:
            raise Invalid(f"record {index}: fields end at {pos}, record at {end}")
        records.append(Rec(delta, key, value, tuple(headers)))
    if pos != len(section):
        raise Invalid(f"{len(section) - pos} bytes after the last record")
    return records
