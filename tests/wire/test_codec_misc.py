import dataclasses
import io
import struct

import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from kio.index import load_response_schema
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.errors import ErrorCode
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.serial import entity_reader
from kio.serial import entity_writer

from tidemark.wire import error_responses
from tidemark.wire.codec import CODEC_API_RANGES
from tidemark.wire.codec import KIO_API_RANGES
from tidemark.wire.codec import Request
from tidemark.wire.codec import api_versions_fallback
from tidemark.wire.codec import decode_request
from tidemark.wire.codec import encode_response
from tidemark.wire.codec import error_response
from tidemark.wire.codec import kio_versions
from tidemark.wire.errors import MalformedRequest
from tidemark.wire.errors import ProtocolError
from tidemark.wire.framing import FrameDecoder
from tidemark.wire.api_keys import ApiKey

SUPPORTED = dict(CODEC_API_RANGES)
BROKER_SUPPORTED = {18: (0, 3), 3: (0, 12), 2: (0, 7), 8: (2, 8)}


def test_kio_versions():
    assert kio_versions(18) == (0, 4)
    assert kio_versions(2) == (1, 11)
    assert kio_versions(8) == (2, 10)
    assert kio_versions(9999) is None
    assert KIO_API_RANGES[3] == (0, 13)
    assert CODEC_API_RANGES[2] == (0, 11)


def test_unsupported_key_and_version():
    frame = struct.pack(">hhih", ApiKey.API_VERSIONS, 4, 77, 3) + b"abc" + b"\x00garbage"
    req = decode_request(frame, BROKER_SUPPORTED)
    assert req == Request(18, 4, 77, "abc", None, True)
    req = decode_request(struct.pack(">hhi", 99, 0, 5), BROKER_SUPPORTED)
    assert req == Request(99, 0, 5, None, None, True)
    # client_id length past the end: still unsupported, client_id unknown
    req = decode_request(struct.pack(">hhih", 99, 0, 5, 40) + b"ab", BROKER_SUPPORTED)
    assert req.unsupported and req.client_id is None


def test_api_versions_fallback_is_v0_with_error_35():
    request = Request(18, 9, 1234, "x", None, True)
    out = api_versions_fallback(request, BROKER_SUPPORTED)
    (payload,) = FrameDecoder(len(out)).feed(out)
    header, offset = entity_reader(ResponseHeaderV0)(payload, 0)
    assert header.correlation_id == 1234
    body, size = entity_reader(ApiVersionsResponseV0)(payload, offset)
    assert offset + size == len(payload)
    assert body.error_code == ErrorCode.unsupported_version == 35
    assert [(k.api_key, k.min_version, k.max_version) for k in body.api_keys] == [
        (2, 0, 7), (3, 0, 12), (8, 2, 8), (18, 0, 3)
    ]


def test_api_versions_response_uses_header_v0_even_when_flexible():
    request = Request(18, 3, 42, None, None, False)
    body = error_response(request, ErrorCode.none)
    out = encode_response(request, body)
    # size, correlation id, then straight into the body (error_code int16 = 0)
    assert out[4:8] == struct.pack(">i", 42)
    assert out[8:10] == b"\x00\x00"


def test_flexible_response_uses_header_v1():
    request = Request(3, 12, 42, None, None, False)
    out = encode_response(request, error_response(request, ErrorCode.none))
    assert out[4:9] == struct.pack(">i", 42) + b"\x00"  # empty tagged fields


def _top_level_error_code(cls) -> bool:
    return any(f.metadata.get("kafka_type") == "error_code" for f in dataclasses.fields(cls))


@pytest.mark.parametrize("key", sorted(KIO_API_RANGES))
def test_error_response_every_kio_api(key):
    """Every API kio covers, every version: an error answer carries the code, or there is none.

    The APIs the broker serves have a shape of their own (tests/broker/test_failure_responses.py
    checks each against a real request); here, without a request body (an unsupported version
    that does not decode), they must still encode. Any other API is answered only through a
    top-level error code; where its response has none, LookupError (the connection closes).
    """
    lo, hi = KIO_API_RANGES[key]
    for version in range(lo, hi + 1):
        request = Request(key, version, 1, None, None, True)
        if key in error_responses.SHAPES:
            body = error_response(request, ErrorCode.unsupported_version)
            encode_response(request, body)
            if hasattr(body, "error_code"):
                assert body.error_code == ErrorCode.unsupported_version
        elif _top_level_error_code(load_response_schema(key, version)):
            body = error_response(request, ErrorCode.unsupported_version)
            assert body.error_code == ErrorCode.unsupported_version
            encode_response(request, body)
        else:
            with pytest.raises(LookupError):
                error_response(request, ErrorCode.unsupported_version)


def test_unserved_apis_split_into_answered_and_closed():
    """Pins the split above, so no API silently falls out of the test: of kio's APIs the broker
    serves 25; the others are answered through a top-level error code or refused."""
    unserved = sorted(set(KIO_API_RANGES) - set(error_responses.SHAPES))
    refused = [key for key in unserved if not _top_level_error_code(load_response_schema(key, KIO_API_RANGES[key][1]))]
    assert len(KIO_API_RANGES) == len(error_responses.SHAPES) + len(unserved)
    assert 61 in refused and 60 not in refused  # DescribeProducers has only per-partition codes


def test_error_response_list_offsets_v0_and_unknown():
    body = error_response(Request(2, 0, 1, None, None, False), ErrorCode.unknown_server_error)
    assert body.topics == ()
    with pytest.raises(LookupError):
        error_response(Request(9999, 0, 1, None, None, True), ErrorCode.unknown_server_error)
    with pytest.raises(LookupError):
        error_response(Request(18, 99, 1, None, None, True), ErrorCode.unsupported_version)


# ----------------------------------------------------------------- malformed frames



def metadata_frame() -> bytes:
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
    from kio.schema.request_header.v2.header import RequestHeader

    buf = io.BytesIO()
    entity_writer(RequestHeader)(buf, RequestHeader(request_api_key=ApiKey.METADATA, request_api_version=12, correlation_id=1, client_id="c"))
    entity_writer(MetadataRequest)(
        buf,
        MetadataRequest(
            topics=(MetadataRequestTopic(topic_id=None, name="orders"),),
            allow_auto_topic_creation=True,
            include_topic_authorized_operations=False,
        ),
    )
    return buf.getvalue()


def test_truncated_and_trailing():
    frame = metadata_frame()
    assert not decode_request(frame, SUPPORTED).unsupported
    for cut in range(len(frame)):
        with pytest.raises(MalformedRequest):
            decode_request(frame[:cut], SUPPORTED)
    # Trailing bytes are ignored, as Kafka does (librdkafka's AdminClient sends some).
    assert decode_request(frame + b"\x01\x00\x00", SUPPORTED).body == decode_request(frame, SUPPORTED).body


def test_invalid_utf8():
    frame = bytearray(metadata_frame())
    i = frame.index(b"orders")
    frame[i] = 0xFF
    with pytest.raises(MalformedRequest):
        decode_request(bytes(frame), SUPPORTED)


def test_huge_array_count_is_malformed():
    header = struct.pack(">hhih", ApiKey.LIST_OFFSETS, 0, 1, 0)
    with pytest.raises(MalformedRequest):
        decode_request(header + struct.pack(">ii", -1, 2**31 - 1), SUPPORTED)
    header = struct.pack(">hhih", ApiKey.METADATA, 4, 1, 0)
    with pytest.raises(MalformedRequest):
        decode_request(header + struct.pack(">i", 2**31 - 1), SUPPORTED)


def _check_garbage(frame):
    try:
        decode_request(frame, SUPPORTED)
    except MalformedRequest:
        pass


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_random_garbage(data):
    _check_garbage(data)


@settings(max_examples=300, deadline=None)
@given(
    key=st.sampled_from(sorted(SUPPORTED)),
    version=st.integers(0, 20),
    tail=st.binary(max_size=64),
)
def test_random_garbage_behind_valid_keys(key, version, tail):
    _check_garbage(struct.pack(">hhi", key, version, 1) + tail)


@settings(max_examples=200, deadline=None)
@given(cut=st.integers(0, 10_000), flip=st.integers(0, 10_000), byte=st.integers(0, 255))
def test_mutated_valid_frame(cut, flip, byte):
    frame = bytearray(metadata_frame())
    frame[flip % len(frame)] = byte
    _check_garbage(bytes(frame[: cut % (len(frame) + 1)]))


def test_malformed_is_protocol_error():
    assert issubclass(MalformedRequest, ProtocolError)


def test_api_versions_encode_cache_tracks_body():
    from kio.schema.api_versions.v3.response import ApiVersion, ApiVersionsResponse

    request = Request(18, 3, 5, None, None, False)
    base = error_response(request, ErrorCode.none)
    a = ApiVersionsResponse(error_code=ErrorCode.none, api_keys=(ApiVersion(api_key=ApiKey.METADATA, min_version=0, max_version=12),), throttle_time=base.throttle_time)
    b = ApiVersionsResponse(error_code=ErrorCode.none, api_keys=(ApiVersion(api_key=ApiKey.METADATA, min_version=0, max_version=11),), throttle_time=base.throttle_time)
    out_a = encode_response(request, a)
    out_b = encode_response(request, b)
    assert out_a != out_b
    assert encode_response(request, a) == out_a
    assert encode_response(Request(18, 3, 6, None, None, False), a)[8:] == out_a[8:]
    reader = entity_reader(ApiVersionsResponse)
    assert reader(out_b, 8)[0] == b
