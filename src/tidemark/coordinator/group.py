"""A classic consumer group: its states, the transition table, its members.

The state names are the strings DescribeGroups and ListGroups return. Every state change goes
through `Group.transition_to`, which checks `TRANSITIONS`; an illegal transition raises
`IllegalStateTransition` (a bug in the coordinator, never a client error).
"""

from __future__ import annotations

import dataclasses
import enum

from kio.schema.errors import ErrorCode

from tidemark.records.consumer_protocol import CONSUMER_PROTOCOL_TYPE, decode_subscription_topics
from tidemark.records.offsets_schema import GroupMetadataValue, MemberMetadata


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


# Target state -> the states a group may be in before it (Kafka's classic group state table).
TRANSITIONS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.EMPTY, GroupState.STABLE, GroupState.COMPLETING_REBALANCE}),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}


class IllegalStateTransition(AssertionError):
    """A transition the table does not allow: a coordinator bug."""


@dataclasses.dataclass(slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    last_heartbeat_ms: int = 0
    # Token of a JoinGroup request held until the join phase completes.
    join_token: int | None = None
    # Token of a SyncGroup request held until the leader's assignment is stored.
    sync_token: int | None = None
    # Request versions of the held JoinGroup and SyncGroup (their responses differ by version).
    join_version: int = 0
    sync_version: int = 0
    # Joined but not yet answered once (Kafka's isNew: bounded by the new-member join timeout).
    is_new: bool = False

    def metadata(self, protocol: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def vote(self, candidates: set[str]) -> str:
        """The first protocol, in this member's order of preference, that every member supports."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None


class Groups(dict[str, "Group"]):
    """A shard's groups in its two views. The dict itself is the latest view, which handlers
    read: a group leaves it when its tombstone is appended. The committed view, which reads
    answer from, is `committed` and `committed_groups`: groups whose tombstone is appended and
    not committed are kept for it in `deleting`, and a group made by a record not yet committed
    is not in it."""

    def __init__(self) -> None:
        super().__init__()
        self.deleting: dict[str, Group] = {}
        self.committed_to = 0  # every record below this log offset is committed and replayed

    def _visible(self, group: Group | None) -> Group | None:
        if group is None or group.state is GroupState.DEAD:
            return None
        if group.created_at is not None and group.created_at >= self.committed_to:
            return None
        return group

    def committed(self, group_id: str) -> Group | None:
        """The group as the committed log has it, or None."""
        deleting = self.deleting.get(group_id)
        return deleting if deleting is not None else self._visible(self.get(group_id))

    def committed_groups(self) -> list[Group]:
        groups = dict(self.deleting)
        for group_id, group in self.items():
            if group_id not in groups and self._visible(group) is not None:
                groups[group_id] = group
        return list(groups.values())


class Group:
    """One classic group. Membership logic lives in `membership.GroupMembership`."""

    def __init__(self, group_id: str, now_ms: int | None = None) -> None:
        self.group_id = group_id
        self.state = GroupState.EMPTY
        # When the group entered its current state (None when unknown, e.g. loaded without it).
        self.state_timestamp_ms: int | None = now_ms
        self.generation = 0
        self.protocol_type: str | None = None
        self.protocol: str | None = None
        self.leader: str | None = None
        self.members: dict[str, Member] = {}
        self.static_members: dict[str, str] = {}  # group.instance.id -> member id
        # Member ids handed out with MEMBER_ID_REQUIRED, not yet joined: id -> expiry (ms).
        self.pending_members: dict[str, int] = {}
        # Join phase: when it completes (or the initial delay is re-evaluated).
        self.join_deadline_ms: int | None = None
        # Not None while the initial rebalance delay is in effect: rebalance time left after it.
        self.initial_join_remaining_ms: int | None = None
        self.new_member_added = False
        # Members that have not sent SyncGroup since the join phase completed, and the deadline.
        self.pending_sync: set[str] = set()
        self.sync_deadline_ms: int | None = None
        # Its tombstone is appended and not yet committed: gone from the latest view (a request
        # holding it answers as for a Dead group), still the committed view's group for reads.
        self.deleting = False
        # The log offset of the appended record that made the group (a standalone consumer's
        # first commit) while that record is not committed: reads do not see the group till then.
        # None for a group the committed log holds, or one that lives in memory (a join).
        self.created_at: int | None = None
        # Static members rejoining under a new member id whose group record is not committed
        # yet: new member id -> (protocols, rebalance timeout, session timeout) of that JoinGroup.
        self.pending_replacements: dict[str, tuple[tuple[tuple[str, bytes], ...], int, int]] = {}

    def __repr__(self) -> str:
        return (f"Group({self.group_id!r}, {self.state.value}, generation={self.generation}, "
                f"members={list(self.members)})")

    # -- state ---------------------------------------------------------------------------------

    def transition_to(self, state: GroupState, now_ms: int) -> None:
        if self.state not in TRANSITIONS[state]:
            raise IllegalStateTransition(
                f"group {self.group_id!r}: {self.state.value} -> {state.value} is not allowed")
        self.state = state
        self.state_timestamp_ms = now_ms

    @property
    def is_dead(self) -> bool:
        """Dead as a request that would change the group sees it: removed, or being deleted."""
        return self.state is GroupState.DEAD or self.deleting

    def is_empty(self) -> bool:
        return not self.members

    # -- validation (Kafka's ClassicGroup.validateOffsetCommit, validateOffsetDelete, ...) -----

    def validate_offset_commit(self, member_id: str, instance_id: str | None, generation: int) -> ErrorCode | None:
        """Why an OffsetCommit to this group is refused, in Kafka's order, or None."""
        if self.is_dead:
            return ErrorCode.coordinator_not_available
        if generation < 0 and self.state is GroupState.EMPTY:
            return None  # an admin or standalone commit to a group with no members
        if generation >= 0 or member_id or instance_id is not None:
            if instance_id is not None:
                current = self.static_members.get(instance_id)
                if current is None:
                    return ErrorCode.unknown_member_id
                if current != member_id:
                    return ErrorCode.fenced_instance_id
            elif member_id not in self.members:
                return ErrorCode.unknown_member_id
            if generation != self.generation:
                return ErrorCode.illegal_generation
        elif self.state is not GroupState.EMPTY:
            return ErrorCode.unknown_member_id  # no member, no generation: only an Empty group
        if self.state is GroupState.COMPLETING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return None

    def validate_offset_delete(self) -> ErrorCode | None:
        """OffsetDelete: a live group only if it is a consumer group (its subscriptions decide)."""
        if self.is_dead:
            return ErrorCode.group_id_not_found
        if self.state is not GroupState.EMPTY and self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return ErrorCode.non_empty_group
        return None

    def validate_delete_group(self) -> ErrorCode | None:
        if self.is_dead:
            return ErrorCode.group_id_not_found
        if self.state is not GroupState.EMPTY:
            return ErrorCode.non_empty_group
        return None

    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def is_leader(self, member_id: str) -> bool:
        return self.leader == member_id

    # -- membership bookkeeping (no rebalance logic) -------------------------------------------

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if self.leader is None:
            self.leader = member.member_id
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        self.pending_members.pop(member.member_id, None)

    def remove(self, member_id: str) -> Member:
        member = self.members.pop(member_id)
        if member.group_instance_id is not None and \
                self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        self.pending_sync.discard(member_id)
        if self.leader == member_id:
            self.leader = next(iter(self.members), None)
        return member

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> Member:
        """Move the member of `instance_id` from `old_id` to `new_id` (keeping its position)."""
        self.members = {new_id if key == old_id else key: value for key, value in self.members.items()}
        member = self.members[new_id]
        member.member_id = new_id
        self.static_members[instance_id] = new_id
        if self.leader == old_id:
            self.leader = new_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_id)
        return member

    def is_static_member_fenced(self, group_instance_id: str | None, member_id: str) -> bool:
        if group_instance_id is None:
            return False
        current = self.static_members.get(group_instance_id)
        return current is not None and current != member_id

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def awaiting_join_count(self) -> int:
        return sum(1 for m in self.members.values() if m.join_token is not None)

    def has_all_members_joined(self) -> bool:
        return self.awaiting_join_count() == len(self.members) and not self.pending_members

    # -- protocols -----------------------------------------------------------------------------

    def candidate_protocols(self) -> set[str]:
        """Protocols every member supports."""
        members = iter(self.members.values())
        first = next(members, None)
        if first is None:
            return set()
        candidates = {name for name, _ in first.protocols}
        for member in members:
            candidates &= {name for name, _ in member.protocols}
        return candidates

    def supports_protocols(self, protocol_type: str, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        """Whether a member joining with these may be in this group (Kafka's supportsProtocols)."""
        if self.state is GroupState.EMPTY or not self.members:
            return bool(protocol_type) and bool(protocols)
        if protocol_type != self.protocol_type:
            return False
        counts: dict[str, int] = {}
        for member in self.members.values():
            for name, _ in member.protocols:
                counts[name] = counts.get(name, 0) + 1
        return any(counts.get(name, 0) == len(self.members) for name, _ in protocols)

    def select_protocol(self) -> str:
        """A protocol all members support, chosen by the members' votes (ties: earliest vote)."""
        if not self.members:
            raise ValueError(f"cannot select a protocol for empty group {self.group_id!r}")
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = member.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        return max(votes, key=lambda name: votes[name])

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to, for a "consumer" group; None when not known."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return set()
        if self.protocol is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            decoded = decode_subscription_topics(member.metadata(self.protocol))
            if decoded is None:
                return None
            topics |= decoded
        return topics

    # -- persistence ---------------------------------------------------------------------------

    def to_metadata_value(self, assignments: dict[str, bytes] | None = None,
                          state_timestamp_ms: int | None = None) -> GroupMetadataValue:
        """The group's record; with `assignments`, as it will be once they are stored (SyncGroup)."""
        timestamp = self.state_timestamp_ms if state_timestamp_ms is None else state_timestamp_ms
        return GroupMetadataValue(
            protocol_type=self.protocol_type or "",
            generation=self.generation,
            protocol=self.protocol,
            leader=self.leader,
            current_state_timestamp=-1 if timestamp is None else timestamp,
            members=tuple(
                MemberMetadata(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout=m.rebalance_timeout_ms,
                    session_timeout=m.session_timeout_ms,
                    subscription=m.metadata(self.protocol),
                    assignment=m.assignment if assignments is None else assignments.get(m.member_id, b""),
                )
                for m in self.members.values()
            ),
        )

    @classmethod
    def from_metadata_value(cls, group_id: str, value: GroupMetadataValue, now_ms: int) -> Group:
        """A group as loaded from its metadata record: Stable with members, Empty without."""
        group = cls(group_id)
        group.state = GroupState.STABLE if value.members else GroupState.EMPTY
        timestamp = value.current_state_timestamp
        group.state_timestamp_ms = None if timestamp is None or timestamp < 0 else timestamp
        group.generation = value.generation
        group.protocol_type = value.protocol_type or None
        group.protocol = value.protocol
        group.leader = value.leader
        for m in value.members:
            protocol_type = group.protocol_type or ""
            protocols = ((value.protocol, bytes(m.subscription)),) if value.protocol is not None else ()
            group.add(Member(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout_ms=m.rebalance_timeout,
                session_timeout_ms=m.session_timeout,
                protocol_type=protocol_type,
                protocols=protocols,
                assignment=bytes(m.assignment),
                last_heartbeat_ms=now_ms,
            ))
        group.leader = value.leader if value.members else None
        return group
