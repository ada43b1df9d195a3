"""Writing message formats v0/v1 for tests, as old clients do (the broker only reads them)."""

from __future__ import annotations

import struct
import zlib

from tidemark.records import compress


def message(key: bytes | None, value: bytes | None, *, magic: int = 1, timestamp: int = 1000, attributes: int = 0,
            offset: int = 0) -> bytes:
    """One message set entry: offset, size, then the message with its CRC-32."""
    body = struct.pack(">bb", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", timestamp)
    for field in (key, value):
        body += struct.pack(">i", -1) if field is None else struct.pack(">i", len(field)) + field
    crc_and_body = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", offset, len(crc_and_body)) + crc_and_body


def message_set(records: list[tuple[bytes | None, bytes | None]], *, magic: int = 1, codec: int = 0,
                timestamp: int = 1000) -> bytes:
    """Uncompressed entries, or one wrapper around them (inner offsets 0..n-1, as v1 clients write)."""
    inner = b"".join(message(k, v, magic=magic, timestamp=timestamp + i, offset=i) for i, (k, v) in enumerate(records))
    if not codec:
        return inner
    return message(None, compress(codec, inner), magic=magic, timestamp=timestamp, attributes=codec,
                   offset=len(records) - 1)
