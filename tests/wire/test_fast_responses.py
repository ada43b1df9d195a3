"""The hand-written response encoders write exactly what kio writes, for every version."""

from __future__ import annotations

import io
import uuid
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.index import load_response_schema
from kio.serial import entity_writer

from tidemark.wire.build import build
from tidemark.wire.codec import Request, encode_response
from tidemark.wire import fast_responses
from tidemark.wire.fast_responses import FAST_ENCODERS, encode_fast
from tidemark.wire.api_keys import ApiKey

ERROR_CODES = st.sampled_from([0, 3, 12, 14, 15, 16, 22, 25, 27, 28, 82, 100])
PARTITIONS = st.lists(st.fixed_dictionaries({"partition_index": st.integers(0, 2**31 - 1),
                                             "error_code": ERROR_CODES}), max_size=200)
TOPICS = st.lists(st.fixed_dictionaries({"name": st.text(max_size=140), "topic_id": st.none() | st.uuids(),
                                         "partitions": PARTITIONS}), max_size=4)


@settings(max_examples=60, deadline=None)
@given(version=st.sampled_from(list(FAST_ENCODERS[8][0])), topics=TOPICS,
       throttle=st.integers(0, 2**31 - 1), correlation_id=st.integers(-(2**31), 2**31 - 1))
def test_offset_commit_response_matches_kio(version, topics, throttle, correlation_id):
    request = Request(8, version, correlation_id, "c", None, False)
    response = {"throttle_time": throttle, "topics": topics}
    expected = encode_response(request, build(load_response_schema(ApiKey.OFFSET_COMMIT, version), response))
    assert encode_fast(request, response) == expected


OFFSETS = st.lists(st.fixed_dictionaries({
    "partition_index": st.integers(-(2**31), 2**31 - 1), "committed_offset": st.integers(-(2**63), 2**63 - 1),
    "committed_leader_epoch": st.integers(-(2**31), 2**31 - 1), "metadata": st.none() | st.text(max_size=40),
    "error_code": ERROR_CODES}), max_size=120)
OFFSET_TOPICS = st.lists(st.fixed_dictionaries({"name": st.text(max_size=60), "topic_id": st.none() | st.uuids(),
                                                "partitions": OFFSETS}), max_size=4)
OFFSET_GROUPS = st.lists(st.fixed_dictionaries({"group_id": st.text(max_size=40), "topics": OFFSET_TOPICS,
                                                "error_code": ERROR_CODES}), max_size=3)


@settings(max_examples=100, deadline=None)
@given(version=st.sampled_from(list(FAST_ENCODERS[9][0])), topics=OFFSET_TOPICS, groups=OFFSET_GROUPS,
       error_code=ERROR_CODES, throttle=st.integers(0, 2**31 - 1), correlation_id=st.integers(-(2**31), 2**31 - 1))
def test_offset_fetch_response_matches_kio(version, topics, groups, error_code, throttle, correlation_id):
    request = Request(9, version, correlation_id, "c", None, False)
    response = {"throttle_time": throttle, "groups": groups} if version >= 8 else \
        {"throttle_time": throttle, "error_code": error_code,
         "topics": [{k: v for k, v in t.items() if k != "topic_id"} for t in topics]}  # v10's groups alone
    expected = encode_response(request, build(load_response_schema(9, version), response))
    assert encode_fast(request, response) == expected


FETCHED_PARTITIONS = st.lists(st.fixed_dictionaries({
    "partition_index": st.integers(0, 2**31 - 1), "error_code": ERROR_CODES,
    "high_watermark": st.integers(-1, 2**63 - 1), "last_stable_offset": st.integers(-1, 2**63 - 1),
    "log_start_offset": st.integers(-1, 2**63 - 1),
    "aborted_transactions": st.none() | st.lists(st.fixed_dictionaries({
        "producer_id": st.integers(-1, 2**63 - 1), "first_offset": st.integers(0, 2**63 - 1)}), max_size=3),
    "preferred_read_replica": st.integers(-1, 2**31 - 1),
    "records": st.none() | st.binary(max_size=300)}), max_size=20)
FETCHED_TOPICS = st.lists(st.fixed_dictionaries({"topic": st.text(max_size=60), "topic_id": st.uuids(),
                                                 "partitions": FETCHED_PARTITIONS}), max_size=4)


@settings(max_examples=100, deadline=None)
@given(version=st.sampled_from(list(FAST_ENCODERS[1][0])), topics=FETCHED_TOPICS,
       error_code=ERROR_CODES, session_id=st.integers(0, 2**31 - 1), correlation_id=st.integers(-(2**31), 2**31 - 1))
def test_fetch_response_matches_kio(version, topics, error_code, session_id, correlation_id):
    request = Request(1, version, correlation_id, "c", None, False)
    response = {"throttle_time": 0, "error_code": error_code, "session_id": session_id, "responses": topics}
    expected = encode_response(request, build(load_response_schema(ApiKey.FETCH, version), response))
    assert bytes(encode_fast(request, response)) == expected


@settings(max_examples=60, deadline=None)
@given(version=st.sampled_from(list(FAST_ENCODERS[1][0])), topics=FETCHED_TOPICS,
       session_id=st.integers(0, 2**31 - 1), correlation_id=st.integers(-(2**31), 2**31 - 1))
def test_fetch_frame_written_in_parts_is_what_kio_writes(version, topics, session_id, correlation_id):
    """Records written as parts of their own (here from 1 byte on) make the same frame."""
    request = Request(1, version, correlation_id, "c", None, False)
    response = {"throttle_time": 0, "error_code": 0, "session_id": session_id, "responses": topics}
    expected = encode_response(request, build(load_response_schema(ApiKey.FETCH, version), response))
    with mock.patch.object(fast_responses, "SEPARATE_RECORDS_BYTES", 1):
        frame = encode_fast(request, response)
    assert len(frame) == len(expected)
    assert bytes(frame) == expected


def test_fetch_frame_carries_the_records_object_the_log_read():
    """Large records are a part of the frame as they are: the same object, never copied."""
    records = bytes(range(256)) * 256  # 64 KiB
    response = {"throttle_time": 0, "error_code": 0, "session_id": 0, "responses": [
        {"topic": "t", "topic_id": None, "partitions": [
            {"partition_index": i, "error_code": 0, "high_watermark": 10, "last_stable_offset": 10,
             "log_start_offset": 0, "aborted_transactions": None, "preferred_read_replica": -1,
             "records": records if i != 1 else b"small"} for i in range(3)]}]}
    for version in (4, 12, 13):
        frame = encode_fast(Request(1, version, 7, "c", None, False), response)
        assert [part is records for part in frame.parts] == [False, True, False, True, False]
        assert bytes(frame) == encode_response(Request(1, version, 7, "c", None, False),
                                               build(load_response_schema(ApiKey.FETCH, version), response))


def test_apis_without_a_fast_encoder_are_left_to_kio():
    assert encode_fast(Request(10, 3, 1, "c", None, False), {"coordinators": []}) is None
    assert encode_fast(Request(8, 1, 1, "c", None, False), {"topics": []}) is None
    body = io.BytesIO()
    entity_writer(load_response_schema(ApiKey.OFFSET_COMMIT, 10))(body, build(load_response_schema(ApiKey.OFFSET_COMMIT, 10), {
        "throttle_time": 0, "topics": [{"topic_id": uuid.UUID(int=7), "partitions": []}]}))
    assert encode_fast(Request(8, 10, 5, "c", None, False), {
        "throttle_time": 0, "topics": [{"topic_id": uuid.UUID(int=7), "partitions": []}]}).endswith(body.getvalue())
