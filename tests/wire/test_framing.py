import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemark.wire.errors import FrameTooLarge
from tidemark.wire.errors import ProtocolError
from tidemark.wire.framing import FrameDecoder
from tidemark.wire.framing import frame

PAYLOADS = [b"", b"a", b"hello world", bytes(range(256)) * 3]


def test_frame_prepends_big_endian_length():
    assert frame(b"abc") == b"\x00\x00\x00\x03abc"
    assert frame(b"") == b"\x00\x00\x00\x00"


def test_split_at_every_byte_boundary():
    stream = b"".join(frame(p) for p in PAYLOADS)
    for cut in range(len(stream) + 1):
        decoder = FrameDecoder(max_frame_bytes=10_000)
        got = decoder.feed(stream[:cut]) + decoder.feed(stream[cut:])
        assert got == PAYLOADS, cut
        assert decoder.buffered == 0


def test_byte_at_a_time():
    stream = b"".join(frame(p) for p in PAYLOADS)
    decoder = FrameDecoder(max_frame_bytes=10_000)
    got = []
    for i in range(len(stream)):
        got += decoder.feed(stream[i : i + 1])
    assert got == PAYLOADS


@given(
    payloads=st.lists(st.binary(max_size=300), max_size=8),
    cuts=st.lists(st.integers(min_value=0, max_value=3000), max_size=10),
)
def test_arbitrary_chunking(payloads, cuts):
    stream = b"".join(frame(p) for p in payloads)
    points = sorted({c % (len(stream) + 1) for c in cuts})
    decoder = FrameDecoder(max_frame_bytes=300)
    got = []
    prev = 0
    for p in points + [len(stream)]:
        got += decoder.feed(stream[prev:p])
        prev = p
    assert got == payloads


def test_several_frames_in_one_feed_and_partial_tail():
    decoder = FrameDecoder(max_frame_bytes=100)
    data = frame(b"one") + frame(b"two") + frame(b"three")[:5]
    assert decoder.feed(data) == [b"one", b"two"]
    assert decoder.feed(b"hree" + frame(b"four")) == [b"three", b"four"]


@pytest.mark.parametrize("size", [101, 2**31 - 1, -1, -(2**31)])
def test_bad_prefix_raises_immediately(size):
    decoder = FrameDecoder(max_frame_bytes=100)
    with pytest.raises(FrameTooLarge):
        decoder.feed(struct.pack(">i", size))
    # Also when the prefix arrives piecemeal after buffered data.
    decoder = FrameDecoder(max_frame_bytes=100)
    assert decoder.feed(frame(b"ok") + struct.pack(">i", size)[:2]) == [b"ok"]
    with pytest.raises(FrameTooLarge):
        decoder.feed(struct.pack(">i", size)[2:])


def test_frame_too_large_is_a_protocol_error():
    assert issubclass(FrameTooLarge, ProtocolError)


def test_exact_limit_accepted():
    decoder = FrameDecoder(max_frame_bytes=5)
    assert decoder.feed(frame(b"12345")) == [b"12345"]


def test_large_frame_in_many_chunks():
    payload = bytes(range(256)) * 4096  # 1 MiB
    data = frame(payload)
    decoder = FrameDecoder(max_frame_bytes=2**20)
    got = []
    for i in range(0, len(data), 4096 + 3):
        got += decoder.feed(data[i : i + 4096 + 3])
    assert got == [payload]


def test_receive_into_buffer_grows_for_large_frames_and_keeps_order():
    payloads = [b"a" * 10, b"b" * 300_000, b"", b"c" * 70_000]
    stream = b"".join(frame(p) for p in payloads)
    decoder = FrameDecoder(1 << 20)
    got = []
    pos = 0
    while pos < len(stream):
        target = decoder.get_buffer()
        count = min(len(target), len(stream) - pos, 50_000)
        target[:count] = stream[pos : pos + count]
        target.release()
        pos += count
        got += decoder.buffer_updated(count)
    assert got == payloads and decoder.buffered == 0


def test_large_prefix_with_one_byte_does_not_allocate_the_claimed_size():
    # A prefix near socket.request.max.bytes and one byte: the next receive buffer is sized by
    # what arrived, not by the 100 MB the prefix claims.
    decoder = FrameDecoder(max_frame_bytes=104857600)
    assert decoder.feed(struct.pack(">i", 100_000_000) + b"x") == []
    decoder.get_buffer()
    assert decoder.capacity <= 2 * FrameDecoder.MIN_RECEIVE


def test_buffer_grows_at_most_double_what_arrived_and_shrinks_after_a_large_frame():
    payload = bytes(range(256)) * (3 * 4096 * 4)  # 12 MiB
    stream = frame(payload) + frame(b"next")
    decoder = FrameDecoder(max_frame_bytes=len(payload))
    got, pos = [], 0
    while pos < len(stream):
        target = decoder.get_buffer()
        assert decoder.capacity <= 2 * max(pos, FrameDecoder.MIN_RECEIVE) + FrameDecoder.MIN_RECEIVE
        count = min(len(target), len(stream) - pos)
        target[:count] = stream[pos : pos + count]
        target.release()
        pos += count
        got += decoder.buffer_updated(count)
    assert got == [payload, b"next"]
    assert decoder.capacity <= FrameDecoder.RETAIN_BYTES


def test_shrinking_keeps_the_partial_next_frame():
    big = b"b" * (3 * 1024 * 1024)
    decoder = FrameDecoder(max_frame_bytes=len(big))
    data = frame(big) + frame(b"tail")[:6]
    assert decoder.feed(data) == [big]
    assert decoder.capacity <= FrameDecoder.RETAIN_BYTES and decoder.buffered == 6
    assert decoder.feed(frame(b"tail")[6:]) == [b"tail"]


PRODUCE_KEY = b"\x00\x00"  # a request payload starts with its api key


def _receive(decoder: FrameDecoder, data: bytes) -> list:
    """As asyncio's BufferedProtocol transports do: receive into get_buffer(), then report."""
    frames = []
    view = memoryview(data)
    while view:
        target = decoder.get_buffer(-1)
        count = min(len(target), len(view))
        target[:count] = view[:count]
        del target
        view = view[count:]
        frames += decoder.buffer_updated(count)
    return frames


LENT = FrameDecoder.MIN_RECEIVE // 8  # the smallest frame lent as a view of a fresh buffer


@given(payloads=st.lists(st.integers(LENT, 3 * LENT).map(lambda n: PRODUCE_KEY + bytes([n % 251]) * n),
                         min_size=1, max_size=30),
       others=st.lists(st.binary(min_size=2, max_size=500).filter(lambda b: b[:2] != PRODUCE_KEY), max_size=5))
def test_views_handed_out_are_never_written_over(payloads, others):
    """Produce frames come out as views of the receive buffer; everything received after them,
    kept or not, must leave the bytes of every view still alive as they were."""
    decoder = FrameDecoder(max_frame_bytes=1 << 20, view_api_keys=frozenset({0}))
    kept = []
    stream = [p for pair in zip(payloads, others + [b"\x00\x03"] * len(payloads)) for p in pair]
    for i, payload in enumerate(stream):
        got = _receive(decoder, frame(payload))
        assert got == [payload]
        if payload[:2] == PRODUCE_KEY:
            # (lent unless the buffer grew past eight times its size)
            if isinstance(got[0], memoryview) and i % 3:  # some are dropped at once: their space may be reused
                kept.append((got[0], payload))
        else:
            assert type(got[0]) is bytes
        for view, expected in kept:
            assert view == expected


def test_space_of_dropped_views_is_received_into_again():
    decoder = FrameDecoder(max_frame_bytes=1 << 20, view_api_keys=frozenset({0}))
    for _ in range(50):
        (view,) = _receive(decoder, frame(PRODUCE_KEY + bytes(30_000)))
        del view
    assert decoder.capacity == FrameDecoder.MIN_RECEIVE  # one buffer, reused


def test_a_live_view_moves_reception_to_a_new_buffer():
    decoder = FrameDecoder(max_frame_bytes=1 << 20, view_api_keys=frozenset({0}))
    first = PRODUCE_KEY + b"a" * 40_000
    (view,) = _receive(decoder, frame(first))
    second = PRODUCE_KEY + b"b" * 40_000
    (later,) = _receive(decoder, frame(second))
    assert view == first and later == second
    assert later.obj is not view.obj  # did not fit after it, and could not overwrite it


def test_small_produce_frames_are_copied_not_lent():
    """A view would keep the whole receive buffer alive for a few bytes."""
    decoder = FrameDecoder(max_frame_bytes=1 << 20, view_api_keys=frozenset({0}))
    (small,) = _receive(decoder, frame(PRODUCE_KEY + b"x" * 100))
    assert type(small) is bytes
