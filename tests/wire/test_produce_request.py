"""Produce v3+ bodies read by hand: the same entities kio reads, records as views of the frame."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.serial import entity_reader

from tidemark.wire.api_keys import ApiKey
from tidemark.wire.client import encode_request_with_kio
from tidemark.wire.codec import CODEC_API_RANGES, decode_request
from tidemark.wire.errors import MalformedRequest

VERSIONS = list(range(3, CODEC_API_RANGES[ApiKey.PRODUCE][1] + 1))
PARTITIONS = st.lists(st.fixed_dictionaries({"index": st.integers(-(2**31), 2**31 - 1),
                                             "records": st.none() | st.binary(max_size=300)}), max_size=5)
TOPICS = st.lists(st.fixed_dictionaries({"name": st.text(max_size=40), "topic_id": st.uuids(),
                                         "partition_data": PARTITIONS}), max_size=3)
SUPPORTED = {ApiKey.PRODUCE: (0, VERSIONS[-1])}


def _body(version: int, topics: list, transactional_id: str | None, acks: int, timeout: int) -> dict:
    key = "topic_id" if version >= 13 else "name"
    return {"transactional_id": transactional_id, "acks": acks, "timeout": timeout,
            "topic_data": [{key: t[key], "partition_data": t["partition_data"]} for t in topics]}


@settings(max_examples=100, deadline=None)
@given(version=st.sampled_from(VERSIONS), topics=TOPICS, transactional_id=st.none() | st.text(max_size=30),
       acks=st.integers(-(2**15), 2**15 - 1), timeout=st.integers(0, 2**31 - 1),
       correlation_id=st.integers(-(2**31), 2**31 - 1))
def test_produce_request_reads_as_kio_reads_it(version, topics, transactional_id, acks, timeout, correlation_id):
    payload = encode_request_with_kio(ApiKey.PRODUCE, version, correlation_id,
                                      _body(version, topics, transactional_id, acks, timeout))
    cls = load_request_schema(ApiKey.PRODUCE, version)
    _, offset = entity_reader(cls.__header_schema__)(payload, 0)
    expected, _ = entity_reader(cls)(payload, offset)
    frame = memoryview(bytearray(payload))
    request = decode_request(frame, SUPPORTED)
    assert request.correlation_id == correlation_id and not request.unsupported
    assert request.body == expected
    for topic in request.body.topic_data:
        for partition in topic.partition_data:
            if partition.records is not None:
                # A view of the frame's own memory, not a copy.
                assert isinstance(partition.records, memoryview) and partition.records.obj is frame.obj


@pytest.mark.parametrize("version", [3, 9, 13])
def test_truncated_produce_request_is_malformed(version):
    topics = [{"name": "t", "topic_id": __import__("uuid").uuid4(),
               "partition_data": [{"index": 0, "records": b"r" * 100}]}]
    payload = encode_request_with_kio(ApiKey.PRODUCE, version, 1, _body(version, topics, None, -1, 1000))
    for cut in (len(payload) - 1, len(payload) - 60):
        with pytest.raises(MalformedRequest):
            decode_request(memoryview(bytearray(payload[:cut])), SUPPORTED)


def test_produce_v0_to_v2_frames_given_as_views_are_read_as_bytes():
    """The frame decoder hands every Produce frame out as a view; the old versions' readers
    (and kio's header reader) still get what they read."""
    from tidemark.wire.produce_v0 import ProduceV0PartitionData, ProduceV0Request, ProduceV0TopicData, write_request
    import datetime
    import struct
    body = ProduceV0Request(acks=1, timeout=datetime.timedelta(seconds=1), topic_data=(
        ProduceV0TopicData("t", (ProduceV0PartitionData(0, b"legacy"),)),))
    for version in (0, 1, 2):
        payload = struct.pack(">hhih", ApiKey.PRODUCE, version, 9, 1) + b"c" + write_request(body)
        request = decode_request(memoryview(bytearray(payload)), SUPPORTED)
        assert request.correlation_id == 9 and request.body == body
