"""Raw bytes at the broker: random data, lying length prefixes, garbage bodies behind valid
headers, unknown APIs. Each case on its own connection, which must end answered or closed, never
hung; afterwards a separate connection must still get correct ApiVersions and Metadata answers."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from tests.fuzz.conftest import FUZZ, assert_broker_survived, rss_mib
from tests.fuzz.wire import (
    API_VERSIONS,
    METADATA,
    Conn,
    Outcome,
    canary_ok,
    decode_response,
    encode_header,
    encode_request,
)

PRODUCE = 0
LIST_OFFSETS = 2
MAX_REQUEST_BYTES = 104857600  # socket.request.max.bytes default


@pytest.fixture(scope="module")
def served(fuzz_broker) -> dict[int, tuple[int, int]]:
    """api key -> (min, max) version, as the broker advertises them."""
    with Conn(fuzz_broker.bootstrap) as conn:
        response = conn.request(API_VERSIONS, 3, {"client_software_name": "fuzz", "client_software_version": "1"})
    return {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}


def raw_header(api_key: int, version: int, correlation_id: int, client_id: bytes | None) -> bytes:
    """Request header v1 for any key and version, even ones no schema exists for."""
    cid = struct.pack(">h", -1) if client_id is None else struct.pack(">h", len(client_id)) + client_id
    return struct.pack(">hhi", api_key, version, correlation_id) + cid


def exchange(bootstrap: str, data: bytes) -> Outcome:
    """Send data, half-close, read until the broker closes."""
    with Conn(bootstrap) as conn:
        conn.send(data)
        conn.half_close()
        return conn.drain()


def check_answers(outcome: Outcome, api_key: int, version: int, correlation_id: int,
                  served: dict[int, tuple[int, int]]) -> None:
    """Whatever came back is whole, and each response decodes (kio) as the API asked."""
    assert outcome.trailing == b"", f"torn response: {outcome.trailing!r}"
    for frame in outcome.frames:
        low, high = served.get(api_key, (0, -1))
        if api_key == API_VERSIONS and not low <= version <= high:
            decode_response(API_VERSIONS, 0, frame, correlation_id)  # KIP-511 fallback
        else:
            decode_response(api_key, version, frame, correlation_id)


@FUZZ
@given(data=st.binary(max_size=300))
def test_random_bytes(fuzz_broker, served, data):
    outcome = exchange(fuzz_broker.bootstrap, data)
    assert outcome.trailing == b""
    assert all(len(frame) >= 4 for frame in outcome.frames)
    assert canary_ok(fuzz_broker.bootstrap)


@FUZZ
@given(size=st.one_of(st.integers(-(2**31), -1), st.integers(MAX_REQUEST_BYTES + 1, 2**31 - 1),
                      st.sampled_from([-1, -(2**31), 2**31 - 1, MAX_REQUEST_BYTES + 1])),
       body=st.binary(max_size=64))
def test_length_prefix_out_of_bounds_closes(fuzz_broker, served, size, body):
    """A negative or over-limit size prefix closes that connection before any body is buffered."""
    with Conn(fuzz_broker.bootstrap) as conn:
        conn.send(struct.pack(">i", size) + body)
        # No half-close: the broker must close on the prefix alone, not wait for the body.
        outcome = conn.drain()
    assert outcome.frames == [] and outcome.trailing == b""
    assert canary_ok(fuzz_broker.bootstrap)


@FUZZ
@given(api=st.sampled_from([API_VERSIONS, METADATA]), declared=st.integers(0, 400), extra=st.binary(max_size=64))
def test_length_prefix_lies_about_a_valid_request(fuzz_broker, served, api, declared, extra):
    """A valid request whose prefix claims fewer or more bytes than follow: the broker answers
    what parses, closes on what does not, and waits for missing bytes only until EOF."""
    body = {"client_software_name": "fuzz", "client_software_version": "1"} if api == API_VERSIONS else \
        {"topics": None, "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}
    version = 3 if api == API_VERSIONS else 12
    request = encode_request(api, version, body, 77)
    outcome = exchange(fuzz_broker.bootstrap, struct.pack(">i", declared) + request + extra)
    assert outcome.trailing == b""
    if declared >= len(request):  # the whole request is inside the declared frame
        check_answers(outcome, api, version, 77, served)
    assert canary_ok(fuzz_broker.bootstrap)


@FUZZ
@given(data=st.data(), garbage=st.binary(max_size=200))
def test_valid_header_garbage_body(fuzz_broker, served, data, garbage):
    api_key = data.draw(st.sampled_from(sorted(served)), label="api_key")
    low, high = served[api_key]
    version = data.draw(st.integers(low, high), label="version")
    # kio has no schema for ListOffsets v0 or Produce v0-v2 (the broker's codec hand-writes
    # them): header v1 by hand.
    no_kio_schema = (api_key, version) == (LIST_OFFSETS, 0) or (api_key == PRODUCE and version <= 2)
    head = raw_header(api_key, version, 4242, b"fuzz") if no_kio_schema else encode_header(api_key, version, 4242)
    outcome = exchange(fuzz_broker.bootstrap, struct.pack(">i", len(head) + len(garbage)) + head + garbage)
    if no_kio_schema:
        assert outcome.trailing == b""
        assert all(struct.unpack_from(">i", frame)[0] == 4242 for frame in outcome.frames)
    else:
        check_answers(outcome, api_key, version, 4242, served)
    assert canary_ok(fuzz_broker.bootstrap)


@FUZZ
@given(api_key=st.integers(-(2**15), 2**15 - 1), version=st.integers(-(2**15), 2**15 - 1),
       client_id=st.none() | st.binary(max_size=20), tail=st.binary(max_size=40))
def test_unknown_api_keys_and_versions(fuzz_broker, served, api_key, version, client_id, tail):
    payload = raw_header(api_key, version, 99, client_id) + tail
    outcome = exchange(fuzz_broker.bootstrap, struct.pack(">i", len(payload)) + payload)
    low, high = served.get(api_key, (0, -1))
    if not low <= version <= high:
        # Not served: an UNSUPPORTED_VERSION answer kio can read, or the connection closed.
        check_answers(outcome, api_key, version, 99, served)
        for frame in outcome.frames:
            body = decode_response(api_key, version if api_key != API_VERSIONS else 0, frame, 99)
            if hasattr(body, "error_code"):
                assert body.error_code == ErrorCode.unsupported_version
    else:
        check_answers(outcome, api_key, version, 99, served)
    assert canary_ok(fuzz_broker.bootstrap)


@FUZZ
@given(garbage=st.binary(min_size=1, max_size=200), framed=st.booleans())
def test_valid_request_then_garbage(fuzz_broker, served, garbage, framed):
    """Garbage after a good request on the same connection: the good request is answered
    correctly or the connection closed, and the connection never hangs."""
    with Conn(fuzz_broker.bootstrap) as conn:
        good = conn.encode(METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                          "include_topic_authorized_operations": False})
        tail = struct.pack(">i", len(garbage)) + garbage if framed else garbage
        conn.send(struct.pack(">i", len(good)) + good + tail)
        conn.half_close()
        outcome = conn.drain()
    assert outcome.trailing == b""
    if outcome.frames:
        metadata = decode_response(METADATA, 12, outcome.frames[0], 1)
        assert [b.node_id for b in metadata.brokers] == [0]
    assert canary_ok(fuzz_broker.bootstrap)


def test_partial_frames_from_many_connections_at_once(fuzz_broker):
    """Connections each holding half a frame do not stop the broker serving others."""
    conns = [Conn(fuzz_broker.bootstrap) for _ in range(50)]
    try:
        for i, conn in enumerate(conns):
            conn.send(struct.pack(">i", 1000 + i) + b"\x00\x03" * 10)
        assert canary_ok(fuzz_broker.bootstrap)
    finally:
        for conn in conns:
            conn.sock.close()


def test_size_prefixes_alone_do_not_grow_the_broker(fuzz_broker):
    """Connections that announce maximum-size frames and send one byte of them cost the broker
    what they sent, not what they announced."""
    before = rss_mib(fuzz_broker)
    conns = [Conn(fuzz_broker.bootstrap) for _ in range(4)]
    try:
        for conn in conns:
            conn.send(struct.pack(">i", MAX_REQUEST_BYTES) + b"\x00")
        assert canary_ok(fuzz_broker.bootstrap)  # the broker has read every prefix by now
        for conn in conns:
            conn.send(b"\x00")  # the next read on each connection is where the buffer grows
        assert canary_ok(fuzz_broker.bootstrap)
        grown = rss_mib(fuzz_broker) - before
    finally:
        for conn in conns:
            conn.sock.close()
    assert grown < 64, f"RSS grew {grown:.0f} MiB for 4 connections that sent 6 bytes each"


def test_broker_survived(fuzz_broker, capsys):
    assert_broker_survived(fuzz_broker, capsys)

