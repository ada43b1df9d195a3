"""Incremental reconciliation (Kafka's CurrentAssignmentBuilder): one member's next state.

A member moves towards the target assignment in steps. While it holds partitions the target
gives to others it stays at its epoch in UNREVOKED_PARTITIONS, keeping only the partitions it
retains; once it reports them revoked (or never reported them) it takes the target epoch. A
partition the target gives it is handed over only when no other member holds it (assigned or
pending revocation): until then the member waits in UNRELEASED_PARTITIONS.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable

from tidemark.coordinator.consumer_group.group import (
    STABLE,
    UNRELEASED_PARTITIONS,
    UNREVOKED_PARTITIONS,
    ConsumerGroupMember,
)
from tidemark.records.consumer_group_schema import Assignment

# (topic id, partition) -> the member holding it, or None
OwnerOf = Callable[[uuid.UUID, int], str | None]


def _owns_any(owned: Assignment | None, partitions: Assignment) -> bool:
    """Whether the member (by what it reported; unreported: assume it still does) holds any."""
    if owned is None:
        return True
    return any(owned.get(topic_id, frozenset()) & ps for topic_id, ps in partitions.items())


def next_state(member: ConsumerGroupMember, target_epoch: int, target: Assignment, owner_of: OwnerOf,
               owned: Assignment | None) -> ConsumerGroupMember:
    """The member's next state (a copy; the member itself is left unchanged)."""
    if member.state == UNREVOKED_PARTITIONS and _owns_any(owned, member.pending_revocation):
        return member  # still revoking
    if member.state == STABLE and member.member_epoch == target_epoch:
        return member
    return _compute(member, target_epoch, target, owner_of, owned)


def _compute(member: ConsumerGroupMember, target_epoch: int, target: Assignment, owner_of: OwnerOf,
             owned: Assignment | None) -> ConsumerGroupMember:
    retained: Assignment = {}
    newly: Assignment = {}
    revoke: Assignment = {}
    unreleased = False
    for topic_id in set(target) | set(member.assigned):
        want = target.get(topic_id, frozenset())
        have = member.assigned.get(topic_id, frozenset())
        keep = want & have
        if keep:
            retained[topic_id] = keep
        gone = have - want
        if gone:
            revoke[topic_id] = gone
        free = set()
        for p in want - have:
            holder = owner_of(topic_id, p)
            if holder is None or holder == member.member_id:
                free.add(p)
            else:
                unreleased = True
        if keep or free:
            newly[topic_id] = keep | frozenset(free)
    if revoke and _owns_any(owned, revoke):
        return dataclasses.replace(member, state=UNREVOKED_PARTITIONS, assigned=retained, pending_revocation=revoke)
    epoch_update = {"previous_member_epoch": member.member_epoch, "member_epoch": target_epoch} \
        if member.member_epoch != target_epoch else {}
    state = UNRELEASED_PARTITIONS if unreleased else STABLE
    return dataclasses.replace(member, state=state, assigned=newly, pending_revocation={}, **epoch_update)
