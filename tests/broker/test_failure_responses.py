"""A request whose handler crashes is answered with UNKNOWN_SERVER_ERROR where Kafka puts it.

A real in-process Broker, with a handler table whose every entry raises, answers a request of
every served API at every advertised version over a real socket; the response, decoded with
kio, must name every requested partition, topic, group or coordinator key, each carrying -1,
and every error code it holds (the top-level one included) must be -1: a response with nothing
in it would read as a success.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import io
import struct
import uuid
from typing import Any

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.serial import entity_reader, entity_writer

from tidemark.broker.config import BrokerConfig
from tidemark.broker.context import RequestContext
from tidemark.broker.server import HANDLERS, Broker, supported_versions
from tidemark.wire import list_offsets_v0, produce_v0
from tidemark.wire.build import build
from tidemark.wire.api_keys import ApiKey

TOPIC_ID = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")
OTHER_ID = uuid.UUID("6ba7b811-9dad-11d1-80b4-00c04fd430c8")

# One request per API, with Kafka's field names for every version (build() keeps a version's own).
REQUESTS: dict[int, dict[str, Any]] = {
    0: {"transactional_id": None, "acks": -1, "timeout": 1000, "topic_data": [
        {"name": "a", "topic_id": TOPIC_ID, "partition_data": [{"index": 0, "records": None},
                                                                 {"index": 3, "records": None}]},
        {"name": "b", "topic_id": OTHER_ID, "partition_data": [{"index": 1, "records": None}]}]},
    1: {"replica_id": -1, "max_wait": 100, "min_bytes": 1, "max_bytes": 1 << 20, "session_epoch": -1,
        "forgotten_topics_data": [],
        "topics": [{"topic": "a", "topic_id": TOPIC_ID, "partitions": [
            {"partition": 0, "fetch_offset": 5, "partition_max_bytes": 1024},
            {"partition": 2, "fetch_offset": 0, "partition_max_bytes": 1024}]},
            {"topic": "b", "topic_id": OTHER_ID, "partitions": [{"partition": 1, "fetch_offset": 0, "partition_max_bytes": 1}]}]},
    2: {"replica_id": -1, "isolation_level": 0, "timeout": 1000, "topics": [
        {"name": "a", "partitions": [{"partition_index": 0, "timestamp": -1}, {"partition_index": 4, "timestamp": -2}]},
        {"name": "b", "partitions": [{"partition_index": 1, "timestamp": -3}]}]},
    3: {"topics": [{"name": "a", "topic_id": None}, {"name": "b", "topic_id": None}],
        "allow_auto_topic_creation": True, "include_cluster_authorized_operations": False,
        "include_topic_authorized_operations": False},
    8: {"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "", "topics": [
        {"name": "a", "topic_id": TOPIC_ID, "partitions": [
            {"partition_index": 0, "committed_offset": 5, "committed_metadata": ""},
            {"partition_index": 2, "committed_offset": 7, "committed_metadata": ""}]},
        {"name": "b", "topic_id": OTHER_ID, "partitions": [
            {"partition_index": 1, "committed_offset": 1, "committed_metadata": ""}]}]},
    9: {"group_id": "g", "topics": [
        {"name": "a", "partition_indexes": [0, 2]}, {"name": "b", "partition_indexes": [1]}],
        "groups": [{"group_id": "g1", "member_epoch": -1, "topics": [
            {"name": "a", "topic_id": TOPIC_ID, "partition_indexes": [0]}]},
            {"group_id": "g2", "member_epoch": -1, "topics": None}]},
    10: {"key": "g", "key_type": 0, "coordinator_keys": ["g1", "g2"]},
    11: {"group_id": "g", "session_timeout": 10000, "rebalance_timeout": 10000, "member_id": "m-1",
         "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]},
    12: {"group_id": "g", "generation_id": 1, "member_id": "m-1"},
    13: {"group_id": "g", "member_id": "m-1", "members": [{"member_id": "m-1"}]},
    14: {"group_id": "g", "generation_id": 1, "member_id": "m-1", "assignments": []},
    15: {"groups": ["g1", "g2"], "include_authorized_operations": False},
    16: {},
    18: {"client_software_name": "test", "client_software_version": "1"},
    19: {"topics": [{"name": "a", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []},
                    {"name": "b", "num_partitions": 2, "replication_factor": 1, "assignments": [], "configs": []}],
         "timeout": 1000},
    20: {"topic_names": ["a", "b"], "topics": [{"name": "a", "topic_id": None}, {"name": None, "topic_id": OTHER_ID}],
         "timeout": 1000},
    22: {"transactional_id": None, "transaction_timeout": 1000, "producer_id": -1, "producer_epoch": -1},
    23: {"replica_id": -1, "topics": [
        {"topic": "a", "partitions": [{"partition": 0, "current_leader_epoch": 0, "leader_epoch": 0},
                                      {"partition": 2, "current_leader_epoch": -1, "leader_epoch": 3}]},
        {"topic": "b", "partitions": [{"partition": 1, "current_leader_epoch": 0, "leader_epoch": 0}]}]},
    37: {"topics": [{"name": "a", "count": 3, "assignments": None}, {"name": "b", "count": 2, "assignments": None}],
         "timeout": 1000, "validate_only": False},
    42: {"groups_names": ["g1", "g2"]},
    47: {"group_id": "g", "topics": [{"name": "a", "partitions": [{"partition_index": 0}]}]},
    21: {"topics": [{"name": "a", "partitions": [{"partition_index": 0, "offset": 5}, {"partition_index": 2, "offset": -1}]},
                    {"name": "b", "partitions": [{"partition_index": 1, "offset": 0}]}], "timeout": 1000},
    32: {"resources": [{"resource_type": 2, "resource_name": "a", "configuration_keys": None},
                       {"resource_type": 4, "resource_name": "0", "configuration_keys": ["num.partitions"]}]},
    33: {"resources": [{"resource_type": 2, "resource_name": "a", "configs": [{"name": "retention.ms", "value": "1"}]},
                       {"resource_type": 4, "resource_name": "0", "configs": []}], "validate_only": False},
    44: {"resources": [{"resource_type": 2, "resource_name": "a", "configs": [
        {"name": "retention.ms", "config_operation": 0, "value": "1"}]},
        {"resource_type": 2, "resource_name": "b", "configs": []}], "validate_only": False},
    60: {"include_cluster_authorized_operations": True, "endpoint_type": 1, "include_fenced_brokers": False},
    24: {"v3_and_below_transactional_id": "t", "v3_and_below_producer_id": 1, "v3_and_below_producer_epoch": 0,
         "v3_and_below_topics": [{"name": "a", "partitions": [0, 2]}, {"name": "b", "partitions": [1]}],
         "transactions": [{"transactional_id": "t", "producer_id": 1, "producer_epoch": 0, "verify_only": False,
                           "topics": [{"name": "a", "partitions": [0]}]}]},
    25: {"transactional_id": "t", "producer_id": 1, "producer_epoch": 0, "group_id": "g"},
    26: {"transactional_id": "t", "producer_id": 1, "producer_epoch": 0, "committed": True},
    65: {"transactional_ids": ["t1", "t2"]},
    66: {"state_filters": [], "producer_id_filters": [], "duration_filter": -1, "transactional_id_pattern": None},
    29: {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 3, "principal_filter": None,
         "host_filter": None, "operation": 1, "permission_type": 1},
    30: {"creations": [{"resource_type": 2, "resource_name": "a", "resource_pattern_type": 3, "principal": "User:x",
                        "host": "*", "operation": 3, "permission_type": 3}]},
    31: {"filters": [{"resource_type_filter": 2, "resource_name_filter": "a", "pattern_type_filter": 3,
                      "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}]},
    68: {"group_id": "g", "member_id": "m-1", "member_epoch": 0, "instance_id": None, "rack_id": None,
         "rebalance_timeout": 30000, "subscribed_topic_names": ["a"], "subscribed_topic_regex": None,
         "server_assignor": None, "topic_partitions": []},
    69: {"group_ids": ["g1", "g2"], "include_authorized_operations": False},
    27: {"markers": [{"producer_id": 5, "producer_epoch": 0, "transaction_result": True, "coordinator_epoch": 0,
                      "topics": [{"name": "a", "partition_indexes": [0, 2]}, {"name": "b", "partition_indexes": [1]}]}]},
    28: {"transactional_id": "tx", "group_id": "g", "producer_id": 5, "producer_epoch": 0, "topics": [
        {"name": "a", "partitions": [{"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": -1,
                                      "committed_metadata": ""}]}]},
    43: {"election_type": 0, "topic_partitions": [{"topic": "a", "partitions": [0, 2]}, {"topic": "b", "partitions": [1]}],
         "timeout": 1000},
    48: {"components": [{"entity_type": "user", "match_type": 0, "match": "alice"}], "strict": False},
    49: {"entries": [{"entity": [{"entity_type": "user", "entity_name": "alice"}, {"entity_type": "client-id",
                                                                                   "entity_name": None}],
                      "ops": [{"key": "producer_byte_rate", "value": 1024.0, "remove": False}]},
                     {"entity": [{"entity_type": "client-id", "entity_name": "app"}], "ops": []}],
         "validate_only": False},
    17: {"mechanism": "PLAIN"},
    36: {"auth_bytes": b"\0u\0p"},
    50: {"users": [{"name": "alice"}]},
    51: {"deletions": [{"name": "alice", "mechanism": 2}], "upsertions": [
        {"name": "bob", "mechanism": 1, "iterations": 4096, "salt": b"s", "salted_password": b"p"}]},
}

CASES = [(key, version) for key, (low, high) in sorted(supported_versions().items()) for version in range(low, high + 1)]


def test_every_served_api_has_a_sample_request():
    assert set(REQUESTS) == set(HANDLERS)


def _request_frame(key: int, version: int, correlation_id: int) -> tuple[bytes, Any]:
    if key == 2 and version == 0:
        body = list_offsets_v0.ListOffsetsV0Request(replica_id=-1, topics=tuple(
            list_offsets_v0.ListOffsetsV0Topic(t["name"], tuple(
                list_offsets_v0.ListOffsetsV0Partition(p["partition_index"], p["timestamp"], 1)
                for p in t["partitions"]))
            for t in REQUESTS[2]["topics"]))
        header = struct.pack(">hhih", key, version, correlation_id, 4) + b"test"
        return header + list_offsets_v0.write_request(body), body
    if key == 0 and version < 3:  # Produce v0-v2: hand-written too
        body = produce_v0.ProduceV0Request(acks=-1, timeout=datetime.timedelta(seconds=1), topic_data=tuple(
            produce_v0.ProduceV0TopicData(t["name"], tuple(
                produce_v0.ProduceV0PartitionData(p["index"], None) for p in t["partition_data"]))
            for t in REQUESTS[0]["topic_data"]))
        header = struct.pack(">hhih", key, version, correlation_id, 4) + b"test"
        return header + produce_v0.write_request(body), body
    schema = load_request_schema(key, version)
    body = build(schema, REQUESTS[key])
    buffer = io.BytesIO()
    header_schema = schema.__header_schema__
    entity_writer(header_schema)(buffer, build(header_schema, {
        "request_api_key": key, "request_api_version": version, "correlation_id": correlation_id,
        "client_id": "test"}))
    entity_writer(schema)(buffer, body)
    return buffer.getvalue(), body


def _read_response(key: int, version: int, frame: bytes, correlation_id: int) -> Any:
    if key == 2 and version == 0:
        assert struct.unpack_from(">i", frame)[0] == correlation_id
        body, size = list_offsets_v0.read_response(frame, 4)
        assert 4 + size == len(frame)
        return body
    if key == 0 and version < 3:
        assert struct.unpack_from(">i", frame)[0] == correlation_id
        body, size = produce_v0.read_response(version)(frame, 4)
        assert 4 + size == len(frame)
        return body
    schema = load_response_schema(key, version)
    header_schema = ResponseHeaderV0 if key == 18 else schema.__header_schema__  # KIP-511
    header, offset = entity_reader(header_schema)(frame, 0)
    assert header.correlation_id == correlation_id
    body, size = entity_reader(schema)(frame, offset)
    assert offset + size == len(frame)
    return body


async def _crashing_handler(ctx: RequestContext, request: Any) -> Any:
    raise RuntimeError("injected handler failure")


async def exchange(tmp_path, frames: list[bytes], handlers=None, settings=None) -> list[bytes | None]:
    """Start a Broker on a free loopback port, send `frames` on one connection, return each
    response frame (None once the broker has closed the connection)."""
    broker = Broker(BrokerConfig(settings or {}), tmp_path, port=0, handlers=handlers)
    await broker.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
        try:
            for frame in frames:
                writer.write(struct.pack(">i", len(frame)) + frame)
            await writer.drain()
            responses: list[bytes | None] = []
            for _ in frames:
                try:
                    (size,) = struct.unpack(">i", await reader.readexactly(4))
                    responses.append(await reader.readexactly(size))
                except (asyncio.IncompleteReadError, ConnectionError):
                    responses.append(None)
            return responses
        finally:
            writer.close()
    finally:
        await broker.stop()


CRASHING = {key: (_crashing_handler, low) for key, (_, low) in HANDLERS.items()}


def _error_codes(entity: Any) -> list[int]:
    """Every `error_code` anywhere in a response entity."""
    codes = []
    if dataclasses.is_dataclass(entity):
        for field in dataclasses.fields(entity):
            value = getattr(entity, field.name)
            if field.name in ("error_code", "partition_error_code"):  # the latter: AddPartitionsToTxn
                codes.append(int(value))
            else:
                codes.extend(_error_codes(value))
    elif isinstance(entity, tuple):
        for item in entity:
            codes.extend(_error_codes(item))
    return codes


def _topic(item: Any) -> Any:
    return getattr(item, "name", None) or getattr(item, "topic", None) or getattr(item, "topic_id", None)


def requested(key: int, version: int, body: Any) -> set[Any]:
    """What the request names that its response must carry an error for, in Kafka's place."""
    match key:
        case 0:
            return {(_topic(t), p.index) for t in body.topic_data for p in t.partition_data}
        case 1 | 8:
            index = "partition" if key == 1 else "partition_index"
            return {(_topic(t), getattr(p, index)) for t in body.topics for p in t.partitions}
        case 2:
            return {(t.name, p.partition_index) for t in body.topics for p in t.partitions}
        case 3 | 19 | 37:
            return {t.name for t in body.topics}
        case 9:
            if version >= 8:
                return {g.group_id for g in body.groups}
            if version < 2:
                return {(t.name, p) for t in body.topics for p in t.partition_indexes}
            return set()  # v2-7: the group-level error only
        case 10:
            return set(body.coordinator_keys) if version >= 4 else set()
        case 15:
            return set(body.groups)
        case 20:
            if version < 6:
                return set(body.topic_names)
            return {t.name or t.topic_id for t in body.topics}
        case 42:
            return set(body.groups_names)
        case 21:
            return {(t.name, p.partition_index) for t in body.topics for p in t.partitions}
        case 32 | 33 | 44:
            return {(r.resource_type, r.resource_name) for r in body.resources}
        case 43:
            return {(t.topic, p) for t in body.topic_partitions for p in t.partitions}
        case 49:
            return {tuple((p.entity_type, p.entity_name) for p in e.entity) for e in body.entries}
    return set()


def answered(key: int, version: int, response: Any) -> set[Any]:
    """What the response names, each with its error code."""
    match key:
        case 0:
            return {(_topic(t), p.index) for t in response.responses for p in t.partition_responses}
        case 1:
            return {(_topic(t), p.partition_index) for t in response.responses for p in t.partitions}
        case 2 if version == 0:
            return {(t.name, p.partition_index) for t in response.topics for p in t.partitions}
        case 2 | 8:
            return {(_topic(t), p.partition_index) for t in response.topics for p in t.partitions}
        case 3:
            return {t.name for t in response.topics}
        case 9:
            if version >= 8:
                return {g.group_id for g in response.groups}
            return {(t.name, p.partition_index) for t in response.topics for p in t.partitions}
        case 10:
            return {c.key for c in response.coordinators} if version >= 4 else set()
        case 15:
            return {g.group_id for g in response.groups}
        case 19:
            return {t.name for t in response.topics}
        case 20:
            return {t.name or t.topic_id for t in response.responses}
        case 37:
            return {t.name for t in response.results}
        case 42:
            return {r.group_id for r in response.results}
        case 21:
            return {(t.name, p.partition_index) for t in response.topics for p in t.partitions}
        case 32:
            return {(r.resource_type, r.resource_name) for r in response.results}
        case 33 | 44:
            return {(r.resource_type, r.resource_name) for r in response.responses}
        case 43:
            return {(t.topic, p.partition_id) for t in response.replica_election_results for p in t.partition_result}
        case 49:
            return {tuple((p.entity_type, p.entity_name) for p in e.entity) for e in response.entries}
    return set()


@pytest.mark.parametrize(("key", "version"), CASES)
def test_crashed_handler_answers_unknown_server_error_where_kafka_puts_it(tmp_path, key, version):
    frame, body = _request_frame(key, version, correlation_id=7)
    (response_frame,) = asyncio.run(exchange(tmp_path, [frame], handlers=CRASHING))
    assert response_frame is not None, "the broker closed the connection instead of answering"
    response = _read_response(key, version, response_frame, 7)
    if key == 2 and version == 0:
        codes = [p.error_code for t in response.topics for p in t.partitions]
    else:
        codes = _error_codes(response)
    assert codes, "no error code anywhere: the client would read a success"
    assert set(codes) == {ErrorCode.unknown_server_error}
    # Each requested item answered once, and nothing else (every code in it is -1, checked above).
    assert answered(key, version, response) == requested(key, version, body)


def test_crashed_produce_with_acks_0_closes_the_connection(tmp_path):
    """acks=0 gets no response, so the connection closes: the client's only way to learn of it."""
    schema = load_request_schema(ApiKey.PRODUCE, 9)
    buffer = io.BytesIO()
    entity_writer(schema.__header_schema__)(buffer, build(schema.__header_schema__, {
        "request_api_key": 0, "request_api_version": 9, "correlation_id": 1, "client_id": "t"}))
    entity_writer(schema)(buffer, build(schema, dict(REQUESTS[0], acks=0)))
    heartbeat, _ = _request_frame(ApiKey.HEARTBEAT, 4, correlation_id=2)
    assert asyncio.run(exchange(tmp_path, [buffer.getvalue(), heartbeat], handlers=CRASHING)) == [None, None]


def test_unserved_api_without_a_top_level_error_code_closes_the_connection(tmp_path):
    """DescribeProducers answers only per partition: an empty answer would read as a success."""
    schema = load_request_schema(ApiKey.DESCRIBE_PRODUCERS, 0)
    buffer = io.BytesIO()
    entity_writer(schema.__header_schema__)(buffer, build(schema.__header_schema__, {
        "request_api_key": 61, "request_api_version": 0, "correlation_id": 1, "client_id": "t"}))
    entity_writer(schema)(buffer, build(schema, {"topics": [{"name": "a", "partition_indexes": [0]}]}))
    assert asyncio.run(exchange(tmp_path, [buffer.getvalue()])) == [None]


@pytest.mark.parametrize("version", range(supported_versions()[11][0], supported_versions()[11][1] + 1))
def test_join_group_while_the_offsets_partition_loads(tmp_path, version):
    """The first JoinGroup creates the offsets topic, whose partition is still loading: the
    answer is COORDINATOR_LOAD_IN_PROGRESS at every version (v0-6 cannot encode a null protocol
    name), and the connection goes on serving."""
    join, _ = _request_frame(ApiKey.JOIN_GROUP, version, correlation_id=1)
    heartbeat, _ = _request_frame(ApiKey.HEARTBEAT, 4, correlation_id=2)
    join_answer, heartbeat_answer = asyncio.run(
        exchange(tmp_path, [join, heartbeat], settings={"offsets.topic.num.partitions": "1"}))
    assert join_answer is not None, "the broker closed the connection"
    response = _read_response(11, version, join_answer, 1)
    assert response.error_code == ErrorCode.coordinator_load_in_progress
    assert response.protocol_name == ("" if version < 7 else None)
    assert heartbeat_answer is not None
