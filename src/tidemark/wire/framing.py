"""Kafka's size-delimited framing: a 4-byte big-endian signed length, then the payload.

Sans-I/O: the connection feeds whatever bytes it read, and gets back the complete
frame payloads; a partial frame stays buffered until the rest arrives.
"""

from __future__ import annotations

import struct

from .errors import FrameTooLarge

__all__ = ("FrameDecoder", "OutboundFrame", "frame")

_SIZE = struct.Struct(">i")
_pack_size = _SIZE.pack
_unpack_size_from = _SIZE.unpack_from
_unpack_key_from = struct.Struct(">h").unpack_from  # a request's api key, first in its header


def _exported(buffer: bytearray) -> bool:
    """Whether a view of `buffer` is still alive: CPython refuses to resize a bytearray that has
    one (BufferError)."""
    try:
        buffer.append(0)
    except BufferError:
        return True
    del buffer[-1]
    return False


def frame(payload: bytes) -> bytes:
    """Prepend the 4-byte big-endian length to ``payload``."""
    return _pack_size(len(payload)) + payload


class OutboundFrame:
    """A frame (size prefix included) as the buffers it is made of, in order, written to the
    transport one by one and never joined: large records go out as the objects the log read.
    len() is the frame's size, which back-pressure accounts for."""

    __slots__ = ("parts", "size")

    def __init__(self, parts: list, size: int) -> None:
        self.parts = parts
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __bytes__(self) -> bytes:
        return b"".join(self.parts)

    def write_to(self, transport) -> None:
        for part in self.parts:
            transport.write(part)


class FrameDecoder:
    """Split a byte stream into frame payloads.

    ``max_frame_bytes`` is Kafka's ``socket.request.max.bytes``: a size prefix above it
    (or a negative one) raises :class:`FrameTooLarge` as soon as the prefix is seen,
    before any of the body is buffered.

    Two ways in: ``feed(data)`` with bytes already read, or, to save copies on the hot path,
    ``get_buffer()`` to receive straight into the decoder's buffer (asyncio's
    ``BufferedProtocol``) followed by ``buffer_updated(nbytes)``. Each frame payload is
    copied out exactly once, except requests of the API keys in ``view_api_keys`` (the broker's
    Produce) of at least an eighth of the buffer: those are memoryviews of the buffer itself,
    and the bytes under a live view are
    never written again (the decoder receives past them, or into a new buffer), so a request may
    keep its records for as long as it likes.

    The buffer grows with the bytes that have arrived, not with the size a prefix claims (at most
    doubling per receive), so a peer that sends a large prefix and then nothing holds little
    memory; after a frame larger than ``RETAIN_BYTES`` is consumed it shrinks back.
    """

    __slots__ = ("max_frame_bytes", "view_api_keys", "_buffer", "_start", "_end", "_lent")

    MIN_RECEIVE = 64 * 1024
    # Kept across frames so that normal requests (a produce is at most ~1 MB) are received
    # without reallocating; anything larger is given back once its frame is consumed.
    RETAIN_BYTES = 2 * 1024 * 1024

    def __init__(self, max_frame_bytes: int, view_api_keys: frozenset[int] = frozenset()) -> None:
        if max_frame_bytes < 0:
            raise ValueError("max_frame_bytes must not be negative")
        self.max_frame_bytes = max_frame_bytes
        self.view_api_keys = view_api_keys  # request frames handed out as views (see the class)
        self._buffer = bytearray(self.MIN_RECEIVE)
        self._start = 0  # first byte not yet returned as part of a frame
        self._end = 0  # one past the last byte received
        self._lent = False  # a view of a frame in _buffer was handed out: it may still live

    @property
    def buffered(self) -> int:
        """Bytes held for a frame that is not complete yet."""
        return self._end - self._start

    @property
    def capacity(self) -> int:
        """Bytes allocated for receiving."""
        return len(self._buffer)

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        """Writable space for the next receive: at least MIN_RECEIVE, and for a frame in progress
        up to as much again as has arrived of it (never more than its rest)."""
        wanted = max(self.MIN_RECEIVE, sizehint)
        pending = self._end - self._start
        if pending >= 4:
            rest = 4 + _unpack_size_from(self._buffer, self._start)[0] - pending
            wanted = max(wanted, min(rest, pending))
        if len(self._buffer) - self._end < wanted:
            self._make_room(pending, wanted)
        return memoryview(self._buffer)[self._end :]

    def _make_room(self, pending: int, wanted: int) -> None:
        if self._lent and _exported(self._buffer):
            # Bytes before _start are a frame someone still reads: receive into a new buffer,
            # with the partial frame (if any) moved there.
            # As large as the old one (up to RETAIN_BYTES): regrowing from MIN_RECEIVE for every
            # large produce would copy it again and again.
            fresh = bytearray(max(min(len(self._buffer), self.RETAIN_BYTES), pending + wanted))
            fresh[:pending] = self._buffer[self._start : self._end]
            self._buffer, self._start, self._end, self._lent = fresh, 0, pending, False
            return
        self._lent = False
        if self._start:
            # Slide the partial frame to the front before growing.
            self._buffer[:pending] = self._buffer[self._start : self._end]
            self._start, self._end = 0, pending
        if len(self._buffer) - self._end < wanted:
            self._buffer.extend(bytes(self._end + wanted - len(self._buffer)))

    def buffer_updated(self, nbytes: int) -> list[bytes]:
        """Account for ``nbytes`` received into ``get_buffer()``; return completed frames."""
        self._end += nbytes
        return self._split()

    def feed(self, data: bytes) -> list[bytes]:
        """Add ``data`` and return every frame payload completed by it, in order."""
        frames: list[bytes] = []
        view = memoryview(data)
        while view:
            target = self.get_buffer(len(view))
            count = min(len(target), len(view))
            target[:count] = view[:count]
            target.release()  # the buffer may be resized by the next get_buffer()
            view = view[count:]
            frames += self.buffer_updated(count)
        return frames

    def _split(self) -> list[bytes]:
        pos, end = self._start, self._end
        frames: list = []
        view_keys = self.view_api_keys
        with memoryview(self._buffer) as buffer:
            while end - pos >= 4:
                size = _unpack_size_from(buffer, pos)[0]
                self._check(size)
                if end - pos - 4 < size:
                    break
                # A view keeps the whole buffer alive: only frames of at least an eighth of it
                # are lent (smaller ones cost little to copy), so what a view holds stays within
                # eight times what it reads.
                if size >= len(buffer) >> 3 and size >= 2 and _unpack_key_from(buffer, pos + 4)[0] in view_keys:
                    frames.append(buffer[pos + 4 : pos + 4 + size])
                    self._lent = True
                else:
                    frames.append(bytes(buffer[pos + 4 : pos + 4 + size]))
                pos += 4 + size
        if pos == end and not self._lent:
            pos = end = 0  # (with a view lent, get_buffer decides whether the space is free again)
        if frames and len(self._buffer) > self.RETAIN_BYTES and end - pos <= self.MIN_RECEIVE:
            # A large frame is done: give its memory back. (A new buffer, not a resize: the
            # caller may still hold a view of the old one.)
            smaller = bytearray(self.MIN_RECEIVE)
            smaller[: end - pos] = self._buffer[pos:end]
            self._buffer, pos, end, self._lent = smaller, 0, end - pos, False
        self._start, self._end = pos, end
        return frames

    def _check(self, size: int) -> None:
        if size < 0:
            raise FrameTooLarge(f"negative frame size {size}")
        if size > self.max_frame_bytes:
            raise FrameTooLarge(
                f"frame size {size} exceeds socket.request.max.bytes "
                f"({self.max_frame_bytes})"
            )
