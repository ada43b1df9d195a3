"""The failure response of each API the broker serves, built from its request (sans-I/O).

A request that fails as a whole (its handler crashed, its version is not served, its group's
offsets partition is loading) must still name everything it asked about, each carrying the
error where Kafka puts it for that API and version: per partition (Produce, Fetch, ListOffsets,
OffsetCommit, OffsetFetch v0-1, OffsetForLeaderEpoch, DeleteRecords, ElectLeaders), per topic
(Metadata, CreateTopics, DeleteTopics, CreatePartitions), per config resource (DescribeConfigs,
AlterConfigs, IncrementalAlterConfigs), per group (OffsetFetch v8+, DescribeGroups, DeleteGroups),
per coordinator
key (FindCoordinator v4+), or at the top level. An empty response would read as a success.

Every fallback answer, the dispatcher's and the group coordinator's, comes from here, so the
failure shape of an API is defined once. Responses are dicts with Kafka's field names (see
`wire.build`); a field a version lacks is dropped when the entity is built, so each shape lists
every field any version needs, and uses only values every version can encode.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from .list_offsets_v0 import ListOffsetsV0Request, ListOffsetsV0Response

__all__ = ("SHAPES", "coordinator", "deleted_group", "described_group", "heartbeat", "join_group", "leave_group",
           "offset_fetch_group", "response_for", "sync_group")

# No offset, timestamp, epoch or node: Kafka's -1 in every response.
UNKNOWN = -1
# DescribeGroups' "authorized operations not requested".
AUTHORIZED_OPERATIONS_OMITTED = -2147483648

Shape = Callable[[Any, int, ErrorCode], Any]


def _each(items: Any) -> Any:
    """A request array, or nothing when the request body is unknown or the array is null."""
    return items or ()


def produce(body: Any, version: int, code: ErrorCode) -> dict[str, Any] | None:
    if body is not None and body.acks == 0:
        return None  # the client expects no response: Kafka closes the connection instead
    return {"throttle_time": 0, "responses": [
        {"name": getattr(topic, "name", None), "topic_id": getattr(topic, "topic_id", None),
         "partition_responses": [
             {"index": p.index, "error_code": code, "base_offset": UNKNOWN, "log_append_time": UNKNOWN,
              "log_start_offset": UNKNOWN, "record_errors": [], "error_message": None}
             for p in topic.partition_data]}
        for topic in _each(body and body.topic_data)]}


def fetch(body: Any, version: int, code: ErrorCode) -> dict[str, Any]:
    # Top-level from v7; every partition too, for the versions before it (and incremental
    # fetch sessions do not exist here, so each requested partition is named).
    return {"throttle_time": 0, "error_code": code, "session_id": 0, "responses": [
        {"topic": getattr(topic, "topic", None), "topic_id": getattr(topic, "topic_id", None),
         "partitions": [
             {"partition_index": p.partition, "error_code": code, "high_watermark": UNKNOWN,
              "last_stable_offset": UNKNOWN, "log_start_offset": UNKNOWN, "aborted_transactions": None,
              "preferred_read_replica": UNKNOWN, "records": b""}
             for p in topic.partitions]}
        for topic in _each(body and body.topics)]}


def list_offsets(body: Any, version: int, code: ErrorCode) -> Any:
    if version == 0:
        topics = body.topics if isinstance(body, ListOffsetsV0Request) else ()
        return ListOffsetsV0Response(topics=tuple(
            (name, tuple((index, int(code), ()) for index, _, _ in partitions)) for name, partitions in topics))
    return {"throttle_time": 0, "topics": [
        {"name": topic.name, "partitions": [
            {"partition_index": p.partition_index, "error_code": code, "timestamp": UNKNOWN,
             "offset": UNKNOWN, "leader_epoch": UNKNOWN}
            for p in topic.partitions]}
        for topic in _each(body and body.topics)]}


def metadata(body: Any, version: int, code: ErrorCode) -> dict[str, Any]:
    # Topic names are not nullable before v12: a topic asked for by id gets "".
    return {"throttle_time": 0, "brokers": [], "cluster_id": None, "controller_id": UNKNOWN,
            "error_code": code, "topics": [
                {"error_code": code, "name": topic.name if topic.name is not None or version >= 12 else "",
                 "topic_id": getattr(topic, "topic_id", None), "is_internal": False, "partitions": []}
                for topic in _each(body and body.topics)]}


def api_versions(body: Any, version: int, code: ErrorCode) -> dict[str, Any]:
    return {"error_code": code, "api_keys": [], "throttle_time": 0}


def create_topics(body: Any, version: int, code: ErrorCode) -> dict[str, Any]:
    return {"throttle_time": 0, "topics": [
        {"name": topic.name, "topic_id": None, "error_code": code, "error_message": None,
         "num_partitions": UNKNOWN, "replication_factor": UNKNOWN, "configs": None}
        for topic in _each(body and body.topics)]}


def delete_topics(body: Any, version: int, code: ErrorCode) -> dict[str, Any]:
    if body is None:
        wanted: list[tuple[str | None, Any]] = []
    elif hasattr(body, "topic_names"):  # v0-v5 name topics only
        wanted = [(name, None) for name in body.topic_names]
    else:
        wanted = [(topic.name, topic.topic_id) for topic in body.topics]
    return {"throttle_time": 0, "responses": [
        {"name": name, "topic_id": topic_id, "error_code": code, "error_message": None} for name, topic_id in wanted]}


def create_partitions(body: Any, version: int, code: ErrorCode) -> dict[str, Any]:
    return {"throttle_time": 0, "results": [
        {"name": topic.name, "error_code": code, "error_message": None} for topic in _each(body and body.topics)]}


def init_producer_id(body: Any, version: int, code: ErrorCode) -> dict[str, Any]:
    return {"throttle_time": 0, "error_code": code, "producer_id": UNKNOWN, "producer_epoch": UNKNOWN,
            "ongoing_txn_producer_id": UNKNOWN, "ongoing_txn_producer_epoch": UNKNOWN}


def offset_commit(body: Any, version: int, code: ErrorCode) -> dict[str, Any]:
    return {"throttle_time": 0, "topics": [
        {"name": getattr(topic, "name", None), "topic_id": getattr(topic, "topic_id", None),
         "partitions": [{"partition_index": p.partition_index, "error_code": code} for p in topic.partitions]}
        for topic in _each(body and body.topics)]}


def offset_fetch_group(group_id: str, code: ErrorCode) -> dict[str, Any]:
    """One group of an OffsetFetch v8+ response: the group-level error, no topics."""
    return {"group_id": group_id, "error_code": code, "topics": []}


def offset_fetch(body: Any, version: int, code: ErrorCode) -> dict[str, Any]:
    if version >= 8:
        return {"throttle_time": 0, "groups": [offset_fetch_group(g.group_id, code) for g in _each(body and body.groups)]}
    if version >= 2:
        return {"throttle_time": 0, "error_code": code, "topics": []}
    # v0-1 have no group-level error: every requested partition carries it.
    return {"throttle_time": 0, "error_code": code, "topics": [
        {"name": topic.name, "partitions": [
            {"partition_index": index, "committed_offset": UNKNOWN, "committed_leader_epoch": UNKNOWN,
             "metadata": "", "error_code": code}
            for index in topic.partition_indexes]}
        for topic in _each(body and body.topics)]}


def offset_delete(body: Any, version: int, code: ErrorCode) -> dict[str, Any]:
    return {"error_code": code, "throttle_time": 0, "topics": []}


def coordinator(key: str, code: ErrorCode, message: str | None = None) -> dict[str, Any]:
    """One key of a FindCoordinator answer with no coordinator (v0-3 use it without the key)."""
    return {"key": key, "node_id": UNKNOWN, "host": "", "port": UNKNOWN, "error_code": code, "error_message": message}


def find_coordinator(body: Any, version: int, code: ErrorCode) -> dict[str, Any]:
    if version >= 4:
        return {"throttle_time": 0, "coordinators": [coordinator(key, code) for key in _each(body and body.coordinator_keys)]}
    return {"throttle_time": 0, **{k: v for k, v in coordinator("", code).items() if k != "key"}}


def join_group(version: int, code: ErrorCode | int, member_id: str) -> dict[str, Any]:
    """A JoinGroup answer with no group state: Kafka's null protocol name from v7, "" before it
    (where the field is not nullable and null cannot be encoded)."""
    return {"throttle_time": 0, "error_code": code, "generation_id": UNKNOWN, "protocol_type": None,
            "protocol_name": None if version >= 7 else "", "leader": "", "skip_assignment": False,
            "member_id": member_id, "members": []}


def _join_group(body: Any, version: int, code: ErrorCode) -> dict[str, Any]:
    return join_group(version, code, body.member_id if body is not None else "")


def heartbeat(code: ErrorCode | int) -> dict[str, Any]:
    """A Heartbeat response is its error code (none included)."""
    return {"throttle_time": 0, "error_code": code}


def leave_group(code: ErrorCode | int) -> dict[str, Any]:
    """The group-level error, no per-member entries (as Kafka answers v3+ too)."""
    return {"throttle_time": 0, "error_code": code, "members": []}


def sync_group(code: ErrorCode | int) -> dict[str, Any]:
    return {"throttle_time": 0, "error_code": code, "protocol_type": None, "protocol_name": None,
            "assignment": b""}


def described_group(group_id: str, code: ErrorCode) -> dict[str, Any]:
    """One group of a DescribeGroups response that could not be described."""
    return {"error_code": code, "error_message": None, "group_id": group_id, "group_state": "",
            "protocol_type": "", "protocol_data": "", "members": [],
            "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED}


def describe_groups(body: Any, version: int, code: ErrorCode) -> dict[str, Any]:
    return {"throttle_time": 0, "groups": [described_group(g, code) for g in _each(body and body.groups)]}


def list_groups(body: Any, version: int, code: ErrorCode) -> dict[str, Any]:
    return {"throttle_time": 0, "error_code": code, "groups": []}


def deleted_group(group_id: str, code: ErrorCode) -> dict[str, Any]:
    return {"group_id": group_id, "error_code": code}


def delete_groups(body: Any, version: int, code: ErrorCode) -> dict[str, Any]:
    return {"throttle_time": 0, "results": [deleted_group(g, code) for g in _each(body and body.groups_names)]}


def _txn_topics(topics: Any, code: ErrorCode) -> list[dict[str, Any]]:
    return [{"name": t.name, "results_by_partition": [{"partition_index": p, "partition_error_code": code}
                                                      for p in t.partitions]} for t in _each(topics)]


def add_partitions_to_txn(body: Any, version: int, code: ErrorCode) -> dict[str, Any]:
    if version <= 3:
        return {"throttle_time": 0,
                "results_by_topic_v3_and_below": _txn_topics(body and body.v3_and_below_topics, code)}
    return {"throttle_time": 0, "error_code": code, "results_by_transaction": []}


def end_txn(body: Any, version: int, code: ErrorCode) -> dict[str, Any]:
    return {"throttle_time": 0, "error_code": code, "producer_id": UNKNOWN, "producer_epoch": UNKNOWN}


def describe_transactions(body: Any, version: int, code: ErrorCode) -> dict[str, Any]:
    return {"throttle_time": 0, "transaction_states": [
        {"error_code": code, "transactional_id": t, "transaction_state": "", "transaction_timeout": 0,
         "transaction_start_time": 0, "producer_id": UNKNOWN, "producer_epoch": UNKNOWN, "topics": []}
        for t in _each(body and body.transactional_ids)]}


def list_transactions(body: Any, version: int, code: ErrorCode) -> dict[str, Any]:
    return {"throttle_time": 0, "error_code": code, "unknown_state_filters": [], "transaction_states": []}


def consumer_group_heartbeat(code: ErrorCode | int, message: str | None = None) -> dict[str, Any]:
    return {"throttle_time": 0, "error_code": code, "error_message": message, "member_id": None,
            "member_epoch": -1, "heartbeat_interval": 0, "assignment": None}


def consumer_group_described(group_id: str, code: ErrorCode, message: str | None = None) -> dict[str, Any]:
    return {"error_code": code, "error_message": message, "group_id": group_id, "group_state": "",
            "group_epoch": -1, "assignment_epoch": -1, "assignor_name": "", "members": [],
            "authorized_operations": -2147483648}


def consumer_group_describe(body: Any, version: int, code: ErrorCode) -> dict[str, Any]:
    return {"throttle_time": 0, "groups": [consumer_group_described(g, code) for g in _each(body and body.group_ids)]}


def offset_for_leader_epoch(body: Any, version: int, code: ErrorCode) -> dict[str, Any]:
    return {"throttle_time": 0, "topics": [
        {"topic": topic.topic, "partitions": [
            {"partition": p.partition, "error_code": code, "leader_epoch": UNKNOWN, "end_offset": UNKNOWN}
            for p in topic.partitions]}
        for topic in _each(body and body.topics)]}


def delete_records(body: Any, version: int, code: ErrorCode) -> dict[str, Any]:
    return {"throttle_time": 0, "topics": [
        {"name": topic.name, "partitions": [
            {"partition_index": p.partition_index, "low_watermark": UNKNOWN, "error_code": code}
            for p in topic.partitions]}
        for topic in _each(body and body.topics)]}


def _resource(resource: Any, code: ErrorCode) -> dict[str, Any]:
    return {"error_code": code, "error_message": None, "resource_type": resource.resource_type,
            "resource_name": resource.resource_name}


def describe_configs(body: Any, version: int, code: ErrorCode) -> dict[str, Any]:
    return {"throttle_time": 0, "results": [{**_resource(r, code), "configs": []}
                                            for r in _each(body and body.resources)]}


def alter_configs(body: Any, version: int, code: ErrorCode) -> dict[str, Any]:
    """AlterConfigs and IncrementalAlterConfigs: per resource."""
    return {"throttle_time": 0, "responses": [_resource(r, code) for r in _each(body and body.resources)]}


def elect_leaders(body: Any, version: int, code: ErrorCode) -> dict[str, Any]:
    # Top-level from v1; every named partition too (v0 has only those).
    return {"throttle_time": 0, "error_code": code, "replica_election_results": [
        {"topic": t.topic, "partition_result": [
            {"partition_id": p, "error_code": code, "error_message": None} for p in t.partitions]}
        for t in _each(body and body.topic_partitions)]}


def describe_acls(body: Any, version: int, code: ErrorCode) -> dict[str, Any]:
    return {"throttle_time": 0, "error_code": code, "error_message": None, "resources": []}


def create_acls(body: Any, version: int, code: ErrorCode) -> dict[str, Any]:
    return {"throttle_time": 0, "results": [{"error_code": code, "error_message": None}
                                            for _ in _each(body and body.creations)]}


def delete_acls(body: Any, version: int, code: ErrorCode) -> dict[str, Any]:
    return {"throttle_time": 0, "filter_results": [{"error_code": code, "error_message": None, "matching_acls": []}
                                                   for _ in _each(body and body.filters)]}


def alter_user_scram_credentials(body: Any, version: int, code: ErrorCode) -> dict[str, Any]:
    """Per user named by a deletion or an upsertion (KIP-554)."""
    users = dict.fromkeys(i.name for i in [*_each(body and body.deletions), *_each(body and body.upsertions)])
    return {"throttle_time": 0, "results": [{"user": u, "error_code": code, "error_message": None} for u in users]}


def write_txn_markers(body: Any, version: int, code: ErrorCode) -> dict[str, Any]:
    return {"markers": [{"producer_id": m.producer_id, "topics": [
        {"name": t.name, "partitions": [{"partition_index": p, "error_code": code} for p in t.partition_indexes]}
        for t in m.topics]} for m in _each(body and body.markers)]}


def txn_offset_commit(body: Any, version: int, code: ErrorCode) -> dict[str, Any]:
    return {"throttle_time": 0, "topics": [
        {"name": t.name, "partitions": [{"partition_index": p.partition_index, "error_code": code}
                                        for p in t.partitions]} for t in _each(body and body.topics)]}


def describe_client_quotas(body: Any, version: int, code: ErrorCode) -> dict[str, Any]:
    return {"throttle_time": 0, "error_code": code, "error_message": None, "entries": None}


def alter_client_quotas(body: Any, version: int, code: ErrorCode) -> dict[str, Any]:
    """Per entity, each named as it was asked."""
    return {"throttle_time": 0, "entries": [
        {"error_code": code, "error_message": None,
         "entity": [{"entity_type": p.entity_type, "entity_name": p.entity_name} for p in e.entity]}
        for e in _each(body and body.entries)]}


SHAPES: dict[int, Shape] = {
    29: describe_acls,
    30: create_acls,
    31: delete_acls,
    0: produce,
    1: fetch,
    2: list_offsets,
    3: metadata,
    8: offset_commit,
    9: offset_fetch,
    10: find_coordinator,
    11: _join_group,
    12: lambda body, version, code: heartbeat(code),
    13: lambda body, version, code: leave_group(code),
    14: lambda body, version, code: sync_group(code),
    15: describe_groups,
    16: list_groups,
    18: api_versions,
    19: create_topics,
    20: delete_topics,
    21: delete_records,
    22: init_producer_id,
    23: offset_for_leader_epoch,
    32: describe_configs,
    33: alter_configs,
    37: create_partitions,
    42: delete_groups,
    43: elect_leaders,
    44: alter_configs,
    47: offset_delete,
    24: add_partitions_to_txn,
    25: lambda body, version, code: {"throttle_time": 0, "error_code": code},
    26: end_txn,
    65: describe_transactions,
    66: list_transactions,
    51: alter_user_scram_credentials,
    68: lambda body, version, code: consumer_group_heartbeat(code),
    69: consumer_group_describe,
    27: write_txn_markers,
    28: txn_offset_commit,
    48: describe_client_quotas,
    49: alter_client_quotas,
}
"""api key -> its failure response from (request body or None, version, error code)."""


def response_for(api_key: int, body: Any, version: int, code: ErrorCode) -> Any:
    """The failure response dict (or entity) for one request; None when the request expects no
    response; LookupError when this module has no shape for the API."""
    try:
        shape = SHAPES[api_key]
    except KeyError:
        raise LookupError(f"no error response shape for api_key={api_key}") from None
    return shape(body, version, code)
