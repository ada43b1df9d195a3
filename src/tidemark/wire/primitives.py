"""Kafka's primitive encodings, shared by the hand-written codecs (wire/*_v0.py, the fast
encoders) and the records' key and value schemas (records/*_schema.py): big-endian integers,
int16-length strings, int32-counted arrays, unsigned varints and tagged-field sections."""

from __future__ import annotations

import struct
from typing import Any

I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
I64 = struct.Struct(">q")


def uvarint(n: int) -> bytes:
    """An unsigned varint (the lengths of flexible versions' compact strings and arrays)."""
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def read_uvarint(buf: Any, pos: int) -> tuple[int, int]:
    """The unsigned varint at `pos` (at most 5 bytes, as Kafka's readUnsignedVarint): its value
    and the position after it. ValueError when it runs past `buf` or is longer."""
    shift = result = 0
    while True:
        if pos >= len(buf):
            raise ValueError("varint runs past the end of the data")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise ValueError("varint longer than 5 bytes")


def skip_tagged_fields(buf: Any, pos: int) -> int:
    """The position after the tagged-field section at `pos` (a count, then tag, size and data
    of each); ValueError when it runs past `buf`."""
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _, pos = read_uvarint(buf, pos)  # the tag
        size, pos = read_uvarint(buf, pos)
        pos += size
    if pos > len(buf):
        raise ValueError("tagged fields run past the end of the data")
    return pos


def write_string(out: bytearray, value: str | None) -> None:
    """An int16-length string; None is the null string (length -1)."""
    if value is None:
        out += I16.pack(-1)
        return
    data = value.encode("utf-8")
    out += I16.pack(len(data))
    out += data


class Reader:
    """Reads primitives from a frame at a moving position; every length is checked against the
    frame before anything is allocated (ValueError, struct.error, UnicodeDecodeError on bad input)."""

    def __init__(self, buf: Any, pos: int) -> None:
        self.buf, self.pos = buf, pos

    def unpack(self, fmt: struct.Struct) -> tuple[Any, ...]:
        values = fmt.unpack_from(self.buf, self.pos)
        self.pos += fmt.size
        return values

    def int16(self) -> int:
        return self.unpack(I16)[0]

    def int32(self) -> int:
        return self.unpack(I32)[0]

    def int64(self) -> int:
        return self.unpack(I64)[0]

    def string(self, nullable: bool = False) -> str | None:
        return self._string(self.int16(), nullable)

    def count(self, min_item_size: int) -> int:
        return self._count(self.int32(), min_item_size)

    def _string(self, n: int, nullable: bool = False) -> str | None:
        """n bytes of UTF-8 (a negative n: null)."""
        if n < 0:
            if nullable:
                return None
            raise ValueError("null string where Kafka requires one")
        end = self.pos + n
        if end > len(self.buf):
            raise ValueError("string runs past the end of the frame")
        value = bytes(self.buf[self.pos:end]).decode("utf-8")
        self.pos = end
        return value

    def _count(self, n: int, min_item_size: int) -> int:
        if n < 0:
            raise ValueError("null array")
        if n * min_item_size > len(self.buf) - self.pos:  # absurd counts, before allocating
            raise ValueError("array count larger than the remaining bytes")
        return n

    def nullable_bytes(self) -> bytes | None:
        n = self.int32()
        if n < 0:
            return None
        if self.pos + n > len(self.buf):
            raise ValueError("bytes run past the end of the frame")
        value = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return value

    # Flexible versions (KIP-482): compact strings and arrays carry their length + 1 as an
    # unsigned varint (0 is null), and every struct ends in tagged fields.

    def uvarint(self) -> int:
        value, self.pos = read_uvarint(self.buf, self.pos)
        return value

    def compact_string(self) -> str:
        return self._string(self.uvarint() - 1)  # type: ignore[return-value]

    def compact_count(self, min_item_size: int) -> int:
        return self._count(self.uvarint() - 1, min_item_size)

    def skip_tagged_fields(self) -> None:
        self.pos = skip_tagged_fields(self.buf, self.pos)
