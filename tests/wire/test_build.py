import datetime

from kio.index import load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from tidemark.wire.build import build
from tidemark.wire.codec import Request
from tidemark.wire.codec import encode_response
from tidemark.wire.api_keys import ApiKey


def test_build_list_offsets_response_from_dicts():
    cls = load_response_schema(ApiKey.LIST_OFFSETS, 7)
    body = build(cls, {"throttle_time": 0, "topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "error_code": 0, "timestamp": -1, "offset": 5, "leader_epoch": 0}]}]})
    assert body.throttle_time == datetime.timedelta(0)
    assert body.topics[0].partitions[0].offset == 5
    assert body.topics[0].partitions[0].error_code is ErrorCode.none
    out = encode_response(Request(2, 7, 3, None, None, False), body)
    assert entity_reader(cls)(out, 9)[0] == body
    assert build(cls, body) is body


def test_build_fills_missing_fields():
    cls = load_response_schema(ApiKey.METADATA, 12)
    body = build(cls, {"brokers": [{"node_id": 1, "host": "h", "port": 9092}]})
    assert body.brokers[0].rack is None and body.topics == () and body.cluster_id is None


def test_build_drops_fields_a_version_does_not_have():
    # Handlers describe one response for every version; v3 has no log_start_offset or topic_id.
    cls = load_response_schema(ApiKey.PRODUCE, 3)
    body = build(cls, {"responses": [{"name": "t", "topic_id": None, "partition_responses": [
        {"index": 0, "error_code": 0, "base_offset": 7, "log_append_time": -1, "log_start_offset": 0}]}]})
    assert body.responses[0].partition_responses[0].base_offset == 7
    assert body.responses[0].partition_responses[0].log_append_time is None
