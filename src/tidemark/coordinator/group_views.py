"""DescribeGroups and ListGroups: read-only views of a shard's classic groups.

They read the committed view: a group exists for them once a record of it is committed (or
while its membership lives in memory, as Kafka's classic groups do), until its tombstone is
committed, and its assignment and Stable state are there only once its record is committed.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from tidemark.coordinator.group import Group, Groups, GroupState

# DescribeGroups' "authorized operations not requested" value.
AUTHORIZED_OPERATIONS_OMITTED = -2147483648
CLASSIC_GROUP_TYPE = "classic"


def _code(error: Any) -> int:
    return int(error)


def _committed(groups: dict[str, Group], group_id: str) -> Group | None:
    if isinstance(groups, Groups):
        return groups.committed(group_id)
    group = groups.get(group_id)
    return None if group is None or group.state is GroupState.DEAD else group


def describe_groups(groups: dict[str, Group], request: Any, version: int) -> dict[str, Any]:
    """DescribeGroups from the committed view of `groups` (a shard's `Groups`)."""
    described = []
    for group_id in request.groups:
        group = _committed(groups, group_id)
        if group is None:
            # v6+ (KIP-1043) reports GROUP_ID_NOT_FOUND; older versions describe a Dead group.
            error = ErrorCode.group_id_not_found if version >= 6 else ErrorCode.none
            described.append({
                "error_code": _code(error), "error_message": None if version < 6 else
                f"Group {group_id} not found.", "group_id": group_id,
                "group_state": GroupState.DEAD.value, "protocol_type": "", "protocol_data": "",
                "members": [], "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
            })
            continue
        stable = group.state is GroupState.STABLE
        described.append({
            "error_code": 0,
            "error_message": None,
            "group_id": group_id,
            "group_state": group.state.value,
            "protocol_type": group.protocol_type or "",
            # Kafka fills the protocol, metadata and assignments only for a Stable group.
            "protocol_data": (group.protocol or "") if stable else "",
            "members": [{
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "member_metadata": m.metadata(group.protocol) if stable else b"",
                "member_assignment": m.assignment if stable else b"",
            } for m in group.members.values()],
            "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
        })
    return {"throttle_time": 0, "groups": described}

def list_groups(groups: dict[str, Group], request: Any, version: int) -> dict[str, Any]:
    """ListGroups from the committed view of `groups` (a shard's `Groups`)."""
    states = {s.lower() for s in (getattr(request, "states_filter", None) or ())}
    types = {t.lower() for t in (getattr(request, "types_filter", None) or ())}
    listed = []
    committed = groups.committed_groups() if isinstance(groups, Groups) else groups.values()
    for group in committed:
        if group.state is GroupState.DEAD:
            continue
        if states and group.state.value.lower() not in states:
            continue
        if types and CLASSIC_GROUP_TYPE not in types:
            continue
        listed.append({"group_id": group.group_id, "protocol_type": group.protocol_type or "",
                       "group_state": group.state.value, "group_type": CLASSIC_GROUP_TYPE})
    return {"throttle_time": 0, "error_code": 0, "groups": listed}
