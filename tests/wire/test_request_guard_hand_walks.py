"""The hand-written walks of hot requests refuse exactly what the schema's generic walk refuses."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kio.index import load_request_schema

from tidemark.wire import request_guard
from tidemark.wire.api_keys import ApiKey
from tidemark.wire.client import encode_request

HEADER_END = 8 + 2 + len("c") + 1  # api key, version, correlation id, client id, header tags


def commit_frame(version: int, topics: list[tuple[str, list[tuple[int, str | None]]]]) -> bytes:
    return encode_request(ApiKey.OFFSET_COMMIT, version, 1, {
        "group_id": "group", "generation_id_or_member_epoch": 3, "member_id": "m", "group_instance_id": None,
        "topics": [{"name": name, "partitions": [
            {"partition_index": p, "committed_offset": 10 * p, "committed_leader_epoch": -1,
             "committed_metadata": metadata} for p, metadata in partitions]} for name, partitions in topics]},
        client_id="c")


def outcome(walk, frame: bytes) -> str:
    try:
        walk(frame)
    except request_guard.ClaimTooLarge:
        return "refused"
    return "passed"


def generic(version: int):
    plan = request_guard._plan(load_request_schema(ApiKey.OFFSET_COMMIT, version))

    def walk(frame: bytes) -> None:
        try:
            request_guard._skip_entity(plan, frame, HEADER_END)
        except request_guard._Stop:
            pass
    return walk


TOPICS = st.lists(st.tuples(st.text(max_size=20), st.lists(
    st.tuples(st.integers(0, 1000), st.none() | st.text(max_size=200)), max_size=20)), max_size=3)


@settings(max_examples=300, deadline=None)
@given(version=st.sampled_from([8, 9]), topics=TOPICS, data=st.data())
def test_offset_commit_walk_refuses_what_the_generic_walk_refuses(version, topics, data):
    frame = bytearray(commit_frame(version, topics))
    for _ in range(data.draw(st.integers(0, 4))):  # corrupt a few bytes of the body
        at = data.draw(st.integers(HEADER_END, len(frame) - 1))
        frame[at] = data.draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF, data.draw(st.integers(0, 255))]))
    if data.draw(st.booleans()):
        frame = frame[:data.draw(st.integers(HEADER_END, len(frame)))]
    frame = bytes(frame)
    assert outcome(lambda f: request_guard.check(load_request_schema(ApiKey.OFFSET_COMMIT, version), f, HEADER_END), frame) == \
        outcome(generic(version), frame)


@pytest.mark.parametrize("version", [8, 9])
def test_a_huge_partition_count_is_refused(version):
    frame = commit_frame(version, [("t", [])])
    # the topic's partition count (empty: 0x01) becomes 2**28
    huge = frame[:-3] + b"\x81\x80\x80\x80\x01" + frame[-2:]
    with pytest.raises(request_guard.ClaimTooLarge):
        request_guard.check(load_request_schema(ApiKey.OFFSET_COMMIT, version), huge, HEADER_END)
    with pytest.raises(request_guard.ClaimTooLarge):
        generic(version)(huge)
