"""A consumer group's persisted state, changed only by replaying its records.

`ConsumerGroups` keeps the shard's two views, as the offsets and the classic groups do: the
latest view takes a record when it is appended, the committed view when the high watermark
passes it. A failed log rebuilds the latest view from a copy of the committed one.
"""

from __future__ import annotations

import copy
import dataclasses
import uuid

from tidemark.records import consumer_group_schema as schema
from tidemark.records.consumer_group_schema import Assignment

STABLE, UNREVOKED_PARTITIONS, UNRELEASED_PARTITIONS = 0, 1, 2  # Kafka's MemberState
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2


@dataclasses.dataclass(slots=True)
class ConsumerGroupMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: int = STABLE
    assigned: Assignment = dataclasses.field(default_factory=dict)
    pending_revocation: Assignment = dataclasses.field(default_factory=dict)
    has_metadata: bool = False  # its member metadata record is replayed

    def metadata_value(self) -> schema.MemberMetadataValue:
        return schema.MemberMetadataValue(self.instance_id, self.rack_id, self.client_id, self.client_host,
                                          self.subscribed_topic_names, self.subscribed_topic_regex,
                                          self.rebalance_timeout_ms, self.server_assignor)

    def assignment_value(self) -> schema.CurrentMemberAssignmentValue:
        return schema.CurrentMemberAssignmentValue(self.member_epoch, self.previous_member_epoch, self.state,
                                                   self.assigned, self.pending_revocation)


class ConsumerGroup:
    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.subscription_metadata: dict[str, schema.TopicMetadata] = {}  # topic name -> metadata
        self.members: dict[str, ConsumerGroupMember] = {}
        self.assignment_epoch = 0
        self.target: dict[str, Assignment] = {}  # member id -> target partitions
        # (topic id, partition) -> the member holding it (assigned or pending revocation): a
        # partition goes to a new owner only once this entry is gone (Kafka's currentPartitionEpoch).
        self.owners: dict[tuple[uuid.UUID, int], str] = {}
        self._subscribed_names: frozenset[str] | None = None  # derived from the members, cached
        self._has_regex = False

    def subscribed_names(self) -> tuple[frozenset[str], bool]:
        """The topic names the members subscribe to by name, and whether any subscribes by regex."""
        if self._subscribed_names is None:
            self._subscribed_names = frozenset(n for m in self.members.values() for n in m.subscribed_topic_names)
            self._has_regex = any(m.subscribed_topic_regex for m in self.members.values())
        return self._subscribed_names, self._has_regex

    @property
    def state(self) -> str:
        """Kafka's ConsumerGroup states, as DescribeGroups and ListGroups name them."""
        if not self.members:
            return "Empty"
        if self.group_epoch != self.assignment_epoch:
            return "Assigning"
        if any(m.member_epoch != self.assignment_epoch for m in self.members.values()):
            return "Reconciling"
        return "Stable"

    def static_member(self, instance_id: str) -> ConsumerGroupMember | None:
        for member in self.members.values():
            if member.instance_id == instance_id:
                return member
        return None

    def subscribed_topics(self) -> set[str]:
        return set(self.subscription_metadata)

    def _set_owned(self, member: ConsumerGroupMember, owned: bool) -> None:
        for assignment in (member.assigned, member.pending_revocation):
            for topic_id, partitions in assignment.items():
                for partition in partitions:
                    if owned:
                        self.owners[(topic_id, partition)] = member.member_id
                    elif self.owners.get((topic_id, partition)) == member.member_id:
                        del self.owners[(topic_id, partition)]

    # -- replay --------------------------------------------------------------------------------

    def replay(self, key: schema.ConsumerGroupKey, value: object | None) -> None:
        kind = key.record_type
        if kind == schema.GROUP_METADATA:
            if value is not None:
                self.group_epoch = value.epoch  # type: ignore[attr-defined]
        elif kind == schema.PARTITION_METADATA:
            topics = () if value is None else value.topics  # type: ignore[attr-defined]
            self.subscription_metadata = {t.name: t for t in topics}
        elif kind == schema.TARGET_ASSIGNMENT_METADATA:
            if value is not None:
                self.assignment_epoch = value.assignment_epoch  # type: ignore[attr-defined]
        elif kind == schema.TARGET_ASSIGNMENT_MEMBER:
            if value is None:
                self.target.pop(key.member_id, None)  # type: ignore[arg-type]
            else:
                self.target[key.member_id] = value.partitions  # type: ignore[index, attr-defined]
        elif kind == schema.MEMBER_METADATA:
            self._subscribed_names = None
            if value is None:
                member = self.members.pop(key.member_id, None)  # type: ignore[arg-type]
                if member is not None:
                    self._set_owned(member, False)
                return
            member = self.members.get(key.member_id)  # type: ignore[arg-type]
            if member is None:
                member = self.members[key.member_id] = ConsumerGroupMember(key.member_id)  # type: ignore[index]
            v = value
            member.instance_id, member.rack_id = v.instance_id, v.rack_id  # type: ignore[attr-defined]
            member.client_id, member.client_host = v.client_id, v.client_host  # type: ignore[attr-defined]
            member.subscribed_topic_names = v.subscribed_topic_names  # type: ignore[attr-defined]
            member.subscribed_topic_regex = v.subscribed_topic_regex  # type: ignore[attr-defined]
            member.rebalance_timeout_ms = v.rebalance_timeout_ms  # type: ignore[attr-defined]
            member.server_assignor = v.server_assignor  # type: ignore[attr-defined]
            member.has_metadata = True
        elif kind == schema.CURRENT_MEMBER_ASSIGNMENT:
            member = self.members.get(key.member_id)  # type: ignore[arg-type]
            if value is None:
                if member is not None:
                    self._set_owned(member, False)
                    member.assigned, member.pending_revocation = {}, {}
                    member.member_epoch = member.previous_member_epoch = 0
                return
            if member is None:  # Kafka writes the member's metadata first; tolerate any order
                member = self.members[key.member_id] = ConsumerGroupMember(key.member_id)  # type: ignore[index]
            self._set_owned(member, False)
            member.member_epoch = value.member_epoch  # type: ignore[attr-defined]
            member.previous_member_epoch = value.previous_member_epoch  # type: ignore[attr-defined]
            member.state = value.state  # type: ignore[attr-defined]
            member.assigned = value.assigned  # type: ignore[attr-defined]
            member.pending_revocation = value.pending_revocation  # type: ignore[attr-defined]
            self._set_owned(member, True)


class ConsumerGroups:
    """A shard's consumer groups in their latest and committed views."""

    def __init__(self) -> None:
        self.latest: dict[str, ConsumerGroup] = {}
        self.committed: dict[str, ConsumerGroup] = {}
        self._appended: set[int] = set()  # log offsets appended here and not yet committed

    def __contains__(self, group_id: object) -> bool:
        return group_id in self.latest

    def get(self, group_id: str) -> ConsumerGroup | None:
        return self.latest.get(group_id)

    @staticmethod
    def _apply(groups: dict[str, ConsumerGroup], key: schema.ConsumerGroupKey, value: object | None) -> None:
        group = groups.get(key.group)
        if group is None:
            if value is None:
                return
            group = groups[key.group] = ConsumerGroup(key.group)
        group.replay(key, value)
        if key.record_type == schema.GROUP_METADATA and value is None:
            del groups[key.group]  # the group's tombstone, written after all its other records

    def replay_appended(self, log_offset: int, key: schema.ConsumerGroupKey, value: object | None) -> None:
        self._appended.add(log_offset)
        self._apply(self.latest, key, value)

    def replay(self, log_offset: int, key: schema.ConsumerGroupKey, value: object | None) -> None:
        if log_offset in self._appended:
            self._appended.discard(log_offset)
        else:  # written by an earlier leadership, or read while loading: the latest view too
            self._apply(self.latest, key, value)
        self._apply(self.committed, key, value)

    def rebuild_latest(self) -> None:
        """Appended records failed: the latest view is the committed one again (the survivors
        are replayed by the caller)."""
        self._appended.clear()
        self.latest = copy.deepcopy(self.committed)
