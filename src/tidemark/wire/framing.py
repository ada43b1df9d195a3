"""Kafka's size-delimited framing: a 4-byte big-endian signed length, then the payload.

Sans-I/O: the connection feeds whatever bytes it read, and gets back the complete
frame payloads; a partial frame stays buffered until the rest arrives.
"""

from __future__ import annotations

import struct

from .errors import FrameTooLarge

__all__ = ("FrameDecoder", "frame")

_SIZE = struct.Struct(">i")
_pack_size = _SIZE.pack
_unpack_size_from = _SIZE.unpack_from


def frame(payload: bytes) -> bytes:
    """Prepend the 4-byte big-endian length to ``payload``."""
    return _pack_size(len(payload)) + payload


class FrameDecoder:
    """Split a byte stream into frame payloads.

    ``max_frame_bytes`` is Kafka's ``socket.request.max.bytes``: a size prefix above it
    (or a negative one) raises :class:`FrameTooLarge` as soon as the prefix is seen,
    before any of the body is buffered.
    """

    __slots__ = ("max_frame_bytes", "_buffer", "_expected")

    def __init__(self, max_frame_bytes: int) -> None:
        if max_frame_bytes < 0:
            raise ValueError("max_frame_bytes must not be negative")
        self.max_frame_bytes = max_frame_bytes
        self._buffer = bytearray()
        # Size of the frame whose prefix has been consumed, or -1 while waiting for a
        # prefix.
        self._expected = -1

    @property
    def buffered(self) -> int:
        """Bytes held for a frame that is not complete yet (prefix excluded once read)."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[bytes]:
        """Add ``data`` and return every frame payload completed by it, in order."""
        buffer = self._buffer
        frames: list[bytes] = []
        expected = self._expected
        if not buffer and expected < 0:
            # Fast path: nothing buffered, parse straight out of ``data``; only a tail
            # that does not form a complete frame gets copied into the buffer.
            view = memoryview(data)
            pos = 0
            end = len(view)
            while end - pos >= 4:
                size = _unpack_size_from(view, pos)[0]
                self._check(size)
                if end - pos - 4 < size:
                    expected = size
                    pos += 4
                    break
                start = pos + 4
                pos = start + size
                frames.append(bytes(view[start:pos]))
            buffer += view[pos:]
            self._expected = expected
            return frames

        buffer += data
        pos = 0
        end = len(buffer)
        while True:
            if expected < 0:
                if end - pos < 4:
                    break
                size = _unpack_size_from(buffer, pos)[0]
                self._check(size)
                expected = size
                pos += 4
            if end - pos < expected:
                break
            frames.append(bytes(buffer[pos : pos + expected]))
            pos += expected
            expected = -1
        if pos:
            del buffer[:pos]
        self._expected = expected
        return frames

    def _check(self, size: int) -> None:
        if size < 0:
            raise FrameTooLarge(f"negative frame size {size}")
        if size > self.max_frame_bytes:
            raise FrameTooLarge(
                f"frame size {size} exceeds socket.request.max.bytes "
                f"({self.max_frame_bytes})"
            )
