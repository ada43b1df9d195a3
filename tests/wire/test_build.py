import datetime

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from tidemark.wire.build import BuildError, build, build_filled
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


def test_build_takes_kafka_defaults_for_fields_left_out():
    # rack, cluster_id and the authorized operations have defaults in Kafka's schema
    cls = load_response_schema(ApiKey.METADATA, 12)
    body = build(cls, {"throttle_time": 0, "brokers": [{"node_id": 1, "host": "h", "port": 9092}], "topics": [],
                       "controller_id": 1})
    assert body.brokers[0].rack is None and body.topics == () and body.cluster_id is None


def test_build_refuses_a_typo_naming_the_field():
    cls = load_request_schema(ApiKey.OFFSET_COMMIT, 8)
    good = {"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": "t", "partitions": [
                {"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": -1, "committed_metadata": ""}]}]}
    assert build(cls, good).topics[0].partitions[0].committed_offset == 5
    with pytest.raises(BuildError, match=r"unknown field grop_id \(OffsetCommitRequest v8\)"):
        build(cls, {**good, "grop_id": "g"})
    typo = {**good, "topics": [{"name": "t", "partitions": [{**good["topics"][0]["partitions"][0], "comitted_offset": 5}]}]}
    with pytest.raises(BuildError, match=r"unknown field topics\.partitions\.comitted_offset"):
        build(cls, typo)


def test_build_refuses_a_missing_field_without_a_default():
    cls = load_request_schema(ApiKey.OFFSET_COMMIT, 8)
    partition = {"partition_index": 0, "committed_leader_epoch": -1, "committed_metadata": ""}  # no committed_offset
    with pytest.raises(BuildError, match=r"missing field topics\.partitions\.committed_offset "
                                         r"\(OffsetCommitRequestPartition v8\)"):
        build(cls, {"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
                    "topics": [{"name": "t", "partitions": [partition]}]})
    with pytest.raises(BuildError, match="missing field error_code"):
        build(load_response_schema(ApiKey.HEARTBEAT, 4), {"throttle_time": 0})


def test_a_field_of_another_version_is_no_typo():
    # v2 has retention_time_ms, v8 does not: one dict serves both, as handlers write them
    body = {"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "retention_time": -1, "topics": []}
    assert build(load_request_schema(ApiKey.OFFSET_COMMIT, 8), body).group_id == "g"
    assert build(load_request_schema(ApiKey.OFFSET_COMMIT, 2), body).retention_time == datetime.timedelta(milliseconds=-1)


def test_build_filled_gives_kafka_zero_values_but_still_refuses_typos():
    cls = load_response_schema(ApiKey.HEARTBEAT, 4)
    assert build_filled(cls, {}).error_code is ErrorCode.none
    with pytest.raises(BuildError, match="unknown field eror_code"):
        build_filled(cls, {"eror_code": 0})


def test_build_drops_fields_a_version_does_not_have():
    # Handlers describe one response for every version; v3 has no log_start_offset or topic_id.
    cls = load_response_schema(ApiKey.PRODUCE, 3)
    body = build(cls, {"responses": [{"name": "t", "topic_id": None, "partition_responses": [
        {"index": 0, "error_code": 0, "base_offset": 7, "log_append_time": -1, "log_start_offset": 0}]}]})
    assert body.responses[0].partition_responses[0].base_offset == 7
    assert body.responses[0].partition_responses[0].log_append_time is None
