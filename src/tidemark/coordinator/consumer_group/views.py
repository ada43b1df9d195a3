"""ConsumerGroupDescribe, and consumer groups in ListGroups: read from the committed view."""

from __future__ import annotations

from collections import Counter
from typing import Any

from kio.schema.errors import ErrorCode

from tidemark.coordinator.consumer_group.group import ConsumerGroup
from tidemark.records.consumer_group_schema import Assignment, TopicMetadata

AUTHORIZED_OPERATIONS_OMITTED = -2147483648
CONSUMER_GROUP_TYPE = "consumer"
CONSUMER_MEMBER_TYPE = 1  # ConsumerGroupDescribe v1's member_type: uses the consumer protocol


def describe_error(group_id: str, code: ErrorCode, message: str | None = None) -> dict[str, Any]:
    return {"error_code": code, "error_message": message, "group_id": group_id, "group_state": "",
            "group_epoch": -1, "assignment_epoch": -1, "assignor_name": "", "members": [],
            "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED}


def assignor_name(group: ConsumerGroup, default: str) -> str:
    wanted = Counter(m.server_assignor for m in group.members.values() if m.server_assignor)
    return min(wanted, key=lambda n: (-wanted[n], n)) if wanted else default


def _assignment(assignment: Assignment, names: dict[Any, str]) -> dict[str, Any]:
    return {"topic_partitions": [
        {"topic_id": topic_id, "topic_name": names.get(topic_id, ""), "partitions": sorted(ps)}
        for topic_id, ps in sorted(assignment.items(), key=lambda i: names.get(i[0], str(i[0])))]}


def describe(shard: Any, group_id: str, topics: dict[str, TopicMetadata]) -> dict[str, Any]:
    group = shard.consumer_groups.committed.get(group_id)
    if group is None:
        if shard.groups.committed(group_id) is not None:
            return describe_error(group_id, ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group.")
        return describe_error(group_id, ErrorCode.group_id_not_found, f"Group {group_id} not found.")
    names = {t.topic_id: t.name for t in topics.values()}
    return {
        "error_code": ErrorCode.none, "error_message": None, "group_id": group_id, "group_state": group.state,
        "group_epoch": group.group_epoch, "assignment_epoch": group.assignment_epoch,
        "assignor_name": assignor_name(group, shard.config.consumer.assignors[0]),
        "members": [{
            "member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
            "member_epoch": m.member_epoch, "client_id": m.client_id, "client_host": m.client_host,
            "subscribed_topic_names": list(m.subscribed_topic_names), "subscribed_topic_regex": m.subscribed_topic_regex,
            "assignment": _assignment(m.assigned, names),
            "target_assignment": _assignment(group.target.get(m.member_id, {}), names),
            "member_type": CONSUMER_MEMBER_TYPE,
        } for m in group.members.values()],
        "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }


def list_entries(groups: dict[str, ConsumerGroup], request: Any) -> list[dict[str, Any]]:
    """ListGroups' consumer groups (v5 filters by state and type, case-insensitively, as Kafka)."""
    states = {s.lower() for s in (getattr(request, "states_filter", None) or ())}
    types = {t.lower() for t in (getattr(request, "types_filter", None) or ())}
    if types and CONSUMER_GROUP_TYPE not in types:
        return []
    listed = []
    for group in groups.values():
        state = group.state
        if states and state.lower() not in states:
            continue
        listed.append({"group_id": group.group_id, "protocol_type": "consumer", "group_state": state,
                       "group_type": CONSUMER_GROUP_TYPE})
    return listed
