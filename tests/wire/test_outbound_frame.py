"""A response frame made of several buffers (a Fetch answer's records as the log read them)
reaches the peer whole and in order, however much of it the socket takes at once, and a peer
gone mid-answer ends the connection rather than the broker's writer."""

import asyncio
import socket

from tidemark.wire.framing import OutboundFrame

HANG_GUARD_S = 60


def _frame(sizes: list[int], seed: int) -> OutboundFrame:
    parts = []
    for index, size in enumerate(sizes):
        chunk = bytes((seed + index + i) % 251 for i in range(min(size, 251))) * (size // 251 + 1)
        kind = index % 3  # the encoder's bytearrays, the log's bytes, views of either
        part = bytearray(chunk[:size]) if kind == 0 else chunk[:size] if kind == 1 else memoryview(chunk)[:size]
        parts.append(part)
    return OutboundFrame(parts, sum(sizes))


async def _serve(frames: list[OutboundFrame], sndbuf: int | None) -> bytes:
    """Write `frames` one after another from a plain asyncio transport; what the peer reads."""
    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair()
    if sndbuf is not None:
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
    theirs.setblocking(False)
    transport, _ = await loop.connect_accepted_socket(asyncio.Protocol, ours)
    expected = sum(len(f) for f in frames)
    for f in frames:
        f.write_to(transport)
    received = bytearray()
    while len(received) < expected:
        chunk = await loop.sock_recv(theirs, 1 << 20)
        assert chunk, "the peer saw the end of the stream before the whole frame"
        received += chunk
    transport.close()
    theirs.close()
    return bytes(received)


def test_frames_larger_than_the_socket_buffer_arrive_whole_and_in_order():
    frames = [_frame([75, 900_000, 39, 1_200_000, 39, 5, 700_000, 3], seed) for seed in range(3)]
    got = asyncio.run(asyncio.wait_for(_serve(frames, sndbuf=16_384), HANG_GUARD_S))
    assert got == b"".join(bytes(f) for f in frames)


def test_small_frames_arrive_whole_and_in_order():
    frames = [_frame([9, 30_000, 20, 17_000, 3], seed) for seed in range(20)]
    got = asyncio.run(asyncio.wait_for(_serve(frames, sndbuf=None), HANG_GUARD_S))
    assert got == b"".join(bytes(f) for f in frames)


def test_a_frame_to_a_closed_peer_ends_the_connection_without_raising():
    async def scenario():
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair()
        lost = loop.create_future()

        class Watcher(asyncio.Protocol):
            def connection_lost(self, exc):
                lost.set_result(exc)

        transport, _ = await loop.connect_accepted_socket(Watcher, ours)
        theirs.close()
        _frame([75, 300_000, 39, 300_000, 3], 0).write_to(transport)  # the send fails: EPIPE
        await lost
        assert transport.is_closing()

    asyncio.run(asyncio.wait_for(scenario(), HANG_GUARD_S))


class _RecordingTransport:
    """Not asyncio's plain socket transport (as a TLS one is not): gets every buffer in order."""

    def __init__(self):
        self.written = []

    def write(self, data):
        self.written.append(bytes(data))


def test_other_transports_get_each_buffer_in_order():
    f = _frame([75, 20_000, 39, 3], 1)
    transport = _RecordingTransport()
    f.write_to(transport)
    assert transport.written == [bytes(part) for part in f.parts]
