"""The hand-written Fetch request encoder writes exactly what kio writes, and a broker reads it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tidemark.wire.client import encode_request_with_kio
from tidemark.wire.codec import decode_request
from tidemark.wire.api_keys import ApiKey
from tidemark.wire.fast_requests import FETCH_VERSION, encode_fetch_request

I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
NAMES = st.text(max_size=60)
FETCH_PARTITION = st.fixed_dictionaries(
    {"partition": I32, "current_leader_epoch": I32, "fetch_offset": I64, "log_start_offset": I64,
     "partition_max_bytes": I32}, optional={"last_fetched_epoch": I32})
BODY = st.fixed_dictionaries({
    "replica_id": I32, "max_wait": st.integers(0, 2**31 - 1), "min_bytes": I32, "max_bytes": I32,
    "isolation_level": st.integers(0, 1), "session_id": I32, "session_epoch": I32,
    "topics": st.lists(st.fixed_dictionaries({"topic": NAMES, "partitions": st.lists(FETCH_PARTITION, max_size=50)}),
                       max_size=4),
    "forgotten_topics_data": st.lists(st.fixed_dictionaries({"topic": NAMES, "partitions": st.lists(I32, max_size=20)}),
                                      max_size=3),
    "rack_id": NAMES})


@settings(max_examples=80, deadline=None)
@given(body=BODY, correlation_id=I32, client_id=st.none() | NAMES)
def test_fetch_request_matches_kio(body, correlation_id, client_id):
    expected = encode_request_with_kio(ApiKey.FETCH, FETCH_VERSION, correlation_id, body, client_id)
    assert encode_fetch_request(correlation_id, client_id, body) == expected


def test_a_broker_decodes_a_followers_fetch():
    body = {"replica_id": 2, "max_wait": 500, "min_bytes": 1, "max_bytes": 1048576, "isolation_level": 0,
            "session_id": 7, "session_epoch": 3, "rack_id": "",
            "topics": [{"topic": "__consumer_offsets", "partitions": [
                {"partition": 4, "current_leader_epoch": 5, "fetch_offset": 1234, "log_start_offset": 0,
                 "partition_max_bytes": 1048576}]}],
            "forgotten_topics_data": [{"topic": "orders", "partitions": [1, 2]}]}
    request = decode_request(encode_fetch_request(9, "replica-2", body), {ApiKey.FETCH: (0, 16)})
    assert (request.api_key, request.api_version, request.correlation_id, request.client_id) == \
        (ApiKey.FETCH, FETCH_VERSION, 9, "replica-2")
    (topic,) = request.body.topics
    (partition,) = topic.partitions
    assert (request.body.replica_id, request.body.session_id, request.body.session_epoch) == (2, 7, 3)
    assert (topic.topic, partition.partition, partition.current_leader_epoch, partition.fetch_offset,
            partition.last_fetched_epoch) == ("__consumer_offsets", 4, 5, 1234, -1)
    assert [(t.topic, list(t.partitions)) for t in request.body.forgotten_topics_data] == [("orders", [1, 2])]
