import io

import pytest
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.index import load_response_schema
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader
from kio.serial import entity_writer

from tidemark.broker.server import supported_versions
from tidemark.wire import list_offsets_v0
from tidemark.wire.codec import CODEC_API_RANGES
from tidemark.wire.codec import Request
from tidemark.wire.codec import decode_request
from tidemark.wire.codec import encode_response
from tidemark.wire.codec import error_response
from kio.schema.errors import ErrorCode
from tidemark.wire.framing import FrameDecoder

from .strategies import entities
from tidemark.wire.api_keys import ApiKey

# The APIs the broker serves, at every version it advertises: from its handler table, so no
# served API can be missing here. ListOffsets v0 is hand-written and tested below.
CASES = [
    (key, version)
    for key, (low, high) in sorted(supported_versions().items())
    for version in range(low, high + 1)
    if (key, version) != (2, 0) and not (key == 0 and version < 3)  # hand-written: tests/integration
]
SUPPORTED = dict(CODEC_API_RANGES)

headers = st.fixed_dictionaries(
    {
        "correlation_id": st.integers(-(2**31), 2**31 - 1),
        "client_id": st.none() | st.text(max_size=10),
    }
)


def request_frame(schema, correlation_id, client_id, body) -> bytes:
    buf = io.BytesIO()
    header = schema.__header_schema__(
        request_api_key=schema.__api_key__,
        request_api_version=schema.__version__,
        correlation_id=correlation_id,
        client_id=client_id,
    )
    entity_writer(schema.__header_schema__)(buf, header)
    entity_writer(schema)(buf, body)
    return buf.getvalue()


def test_every_served_version_is_in_kio():
    for key, version in CASES:
        load_request_schema(key, version)
        load_response_schema(key, version)


@pytest.mark.parametrize(("api_key", "version"), CASES)
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_request_round_trip(api_key, version, data):
    schema = load_request_schema(api_key, version)
    body = data.draw(entities(schema), label="body")
    h = data.draw(headers, label="header")
    frame = request_frame(schema, h["correlation_id"], h["client_id"], body)
    request = decode_request(frame, SUPPORTED)
    assert request == Request(api_key, version, h["correlation_id"], h["client_id"], body, False)


@pytest.mark.parametrize(("api_key", "version"), CASES)
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_response_round_trip(api_key, version, data):
    schema = load_response_schema(api_key, version)
    body = data.draw(entities(schema), label="body")
    correlation_id = data.draw(st.integers(-(2**31), 2**31 - 1), label="correlation_id")
    request = Request(api_key, version, correlation_id, "c", None, False)
    out = encode_response(request, body)
    (payload,) = FrameDecoder(len(out)).feed(out)
    flexible_header = schema.__flexible__ and api_key != 18
    header_schema = ResponseHeaderV1 if flexible_header else ResponseHeaderV0
    header, offset = entity_reader(header_schema)(payload, 0)
    assert header.correlation_id == correlation_id
    decoded, size = entity_reader(schema)(payload, offset)
    assert offset + size == len(payload)
    assert decoded == body


def test_response_header_versions():
    """ApiVersions always answers with header v0 (KIP-511); other flexible APIs v1."""
    for version in range(0, 5):
        assert load_response_schema(ApiKey.API_VERSIONS, version).__header_schema__ is ResponseHeaderV0
    assert load_response_schema(ApiKey.METADATA, 9).__header_schema__ is ResponseHeaderV1
    assert load_response_schema(ApiKey.METADATA, 8).__header_schema__ is ResponseHeaderV0


def test_encode_response_rejects_mismatched_body():
    body = error_response(Request(3, 12, 1, None, None, False), ErrorCode.none)
    with pytest.raises(ValueError):
        encode_response(Request(3, 11, 1, None, None, False), body)


# ---------------------------------------------------------------- ListOffsets v0

lo_v0_requests = st.builds(
    list_offsets_v0.ListOffsetsV0Request,
    replica_id=st.integers(-(2**31), 2**31 - 1),
    topics=st.lists(
        st.builds(
            list_offsets_v0.ListOffsetsV0Topic,
            st.text(max_size=10),
            st.lists(
                st.builds(
                    list_offsets_v0.ListOffsetsV0Partition,
                    st.integers(-(2**31), 2**31 - 1),
                    st.integers(-(2**63), 2**63 - 1),
                    st.integers(-(2**31), 2**31 - 1),
                ),
                max_size=3,
            ).map(tuple),
        ),
        max_size=3,
    ).map(tuple),
)

lo_v0_responses = st.builds(
    list_offsets_v0.ListOffsetsV0Response,
    topics=st.lists(
        st.builds(
            list_offsets_v0.ListOffsetsV0ResponseTopic,
            st.text(max_size=10),
            st.lists(
                st.builds(
                    list_offsets_v0.ListOffsetsV0ResponsePartition,
                    st.integers(-(2**31), 2**31 - 1),
                    st.sampled_from([0, 3, 6, -1]),
                    st.lists(st.integers(-(2**63), 2**63 - 1), max_size=4).map(tuple),
                ),
                max_size=3,
            ).map(tuple),
        ),
        max_size=3,
    ).map(tuple),
)


def v0_request_frame(correlation_id, client_id, body) -> bytes:
    from kio.schema.request_header.v1.header import RequestHeader

    buf = io.BytesIO()
    entity_writer(RequestHeader)(
        buf,
        RequestHeader(
            request_api_key=ApiKey.LIST_OFFSETS, request_api_version=0, correlation_id=correlation_id, client_id=client_id
        ),
    )
    return buf.getvalue() + list_offsets_v0.write_request(body)


@given(body=lo_v0_requests, h=headers)
def test_list_offsets_v0_request_round_trip(body, h):
    frame = v0_request_frame(h["correlation_id"], h["client_id"], body)
    request = decode_request(frame, SUPPORTED)
    assert request == Request(2, 0, h["correlation_id"], h["client_id"], body, False)


def test_list_offsets_v0_request_bytes():
    body = list_offsets_v0.ListOffsetsV0Request(
        replica_id=-1,
        topics=(list_offsets_v0.ListOffsetsV0Topic("t", (list_offsets_v0.ListOffsetsV0Partition(0, -1, 1),)),),
    )
    assert list_offsets_v0.write_request(body) == (
        b"\xff\xff\xff\xff"  # replica_id
        b"\x00\x00\x00\x01" b"\x00\x01t"  # topics[1], name
        b"\x00\x00\x00\x01" b"\x00\x00\x00\x00"  # partitions[1], partition_index
        b"\xff\xff\xff\xff\xff\xff\xff\xff"  # timestamp -1 (latest)
        b"\x00\x00\x00\x01"  # max_num_offsets
    )


def test_list_offsets_v0_unsupported_when_not_advertised():
    """A version we can read but do not serve is read anyway, so the UNSUPPORTED_VERSION answer
    names each requested partition."""
    body = list_offsets_v0.ListOffsetsV0Request(replica_id=-1, topics=(
        list_offsets_v0.ListOffsetsV0Topic("t", (list_offsets_v0.ListOffsetsV0Partition(3, -1, 1),)),))
    request = decode_request(v0_request_frame(ApiKey.OFFSET_FETCH, "x", body), {ApiKey.LIST_OFFSETS: (1, 11)})
    assert request.unsupported and request.body == body and request.client_id == "x"
    answer = error_response(request, ErrorCode.unsupported_version)
    assert answer == list_offsets_v0.ListOffsetsV0Response(topics=(("t", ((3, 35, ()),)),))
    # Unreadable, it is still unsupported (answered without the body), not malformed.
    cut = decode_request(v0_request_frame(ApiKey.OFFSET_FETCH, "x", body)[:-3], {ApiKey.LIST_OFFSETS: (1, 11)})
    assert cut.unsupported and cut.body is None


@given(body=lo_v0_responses, correlation_id=st.integers(-(2**31), 2**31 - 1))
def test_list_offsets_v0_response_round_trip(body, correlation_id):
    out = encode_response(Request(2, 0, correlation_id, None, None, False), body)
    (payload,) = FrameDecoder(len(out)).feed(out)
    header, offset = entity_reader(ResponseHeaderV0)(payload, 0)
    assert header.correlation_id == correlation_id
    decoded, size = list_offsets_v0.read_response(payload, offset)
    assert offset + size == len(payload)
    assert decoded == body


def test_list_offsets_v0_response_bytes():
    body = list_offsets_v0.ListOffsetsV0Response(topics=(("t", ((0, 0, (42,)),)),))
    out = encode_response(Request(2, 0, 7, None, None, False), body)
    assert out == (
        b"\x00\x00\x00\x21"  # frame size 33
        b"\x00\x00\x00\x07"  # correlation id, header v0
        b"\x00\x00\x00\x01" b"\x00\x01t"  # topics[1], name
        b"\x00\x00\x00\x01" b"\x00\x00\x00\x00" b"\x00\x00"  # partitions[1], index, error
        b"\x00\x00\x00\x01" b"\x00\x00\x00\x00\x00\x00\x00\x2a"  # offsets [42]
    )
