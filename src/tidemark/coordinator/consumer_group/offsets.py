"""OffsetCommit and OffsetFetch of a consumer group: the member and its epoch are checked.

As Kafka's ConsumerGroup.validateOffsetCommit / validateOffsetFetch: a commit with a negative
epoch is a standalone commit, accepted only while the group has no members; otherwise the member
must exist (UNKNOWN_MEMBER_ID), commit with OffsetCommit v9+ (UNSUPPORTED_VERSION before) and at
its current epoch (STALE_MEMBER_EPOCH). A fetch without member id and epoch (an admin client, an
older client) is accepted; one with them is checked the same way.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from tidemark.coordinator.consumer_group.group import ConsumerGroup

OFFSET_COMMIT_MEMBER_EPOCH_VERSION = 9


def validate_commit(group: ConsumerGroup, member_id: str, member_epoch: int, version: int) -> ErrorCode | None:
    if member_epoch < 0 and not group.members:
        return None
    member = group.members.get(member_id)
    if member is None:
        return ErrorCode.unknown_member_id
    if version < OFFSET_COMMIT_MEMBER_EPOCH_VERSION:
        return ErrorCode.unsupported_version
    if member_epoch != member.member_epoch:
        return ErrorCode.stale_member_epoch
    return None


def validate_fetch(group: ConsumerGroup | None, member_id: str | None, member_epoch: int) -> ErrorCode | None:
    if group is None or (member_id is None and member_epoch < 0):
        return None
    member = group.members.get(member_id or "")
    if member is None:
        return ErrorCode.unknown_member_id
    if member_epoch != member.member_epoch:
        return ErrorCode.stale_member_epoch
    return None
