"""ConsumerGroupHeartbeat (KIP-848): join, heartbeat, leave, sessions, in Kafka's order.

A heartbeat decides on the latest view and returns the records of what changed, in the order
Kafka writes them: the member's metadata, the subscribed topics' metadata and the group epoch
when the group changed; the target assignment (its members, then its epoch) when the group epoch
is ahead of it; the member's current assignment when it moved. The shard's runtime replays them;
nothing here changes the persisted state directly. Sessions and revocation deadlines are timers,
in memory as in Kafka.
"""

from __future__ import annotations

import dataclasses
import re
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from tidemark.coordinator.consumer_group import assignors as assignors_module
from tidemark.coordinator.consumer_group.group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    UNREVOKED_PARTITIONS,
    ConsumerGroup,
    ConsumerGroupMember,
    ConsumerGroups,
)
from tidemark.coordinator.consumer_group.reconciliation import next_state
from tidemark.coordinator.result import OffsetsRecord, Result, group_append_error
from tidemark.coordinator.timer import CoordinatorTimer
from tidemark.records import consumer_group_schema as schema
from tidemark.records.consumer_group_schema import Assignment, ConsumerGroupKey, TopicMetadata
from tidemark.records.offsets_schema import GroupMetadataKey, encode_key

CONSUMER_GENERATED_MEMBER_ID_REQUIRED_VERSION = 1  # KIP-1082: v1 clients make their member id
TopicsImage = Mapping[str, TopicMetadata]  # every topic a consumer may subscribe to, by name


@dataclasses.dataclass(frozen=True)
class ConsumerGroupConfig:
    session_timeout_ms: int = 45_000  # group.consumer.session.timeout.ms
    heartbeat_interval_ms: int = 5_000  # group.consumer.heartbeat.interval.ms
    max_size: int = 2**31 - 1  # group.consumer.max.size
    assignors: tuple[str, ...] = ("uniform", "range")  # group.consumer.assignors, the first the default
    migration_policy: str = "bidirectional"  # group.consumer.migration.policy


class HeartbeatError(Exception):
    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _record(key: ConsumerGroupKey, value: Any | None) -> OffsetsRecord:
    return OffsetsRecord(schema.encode_key(key),
                         None if value is None else schema.encode_value(key.record_type, value), (key, value))


def _blank(value: str | None) -> bool:
    return value is not None and not value.strip()


def _ms(value: Any) -> int:
    return value if isinstance(value, int) else round(value.total_seconds() * 1000)


def _plain(assignment: Assignment) -> dict[uuid.UUID, frozenset[int]]:
    return {t: frozenset(ps) for t, ps in assignment.items() if ps}


def _assignment_of(topic_partitions: Any) -> Assignment | None:
    if topic_partitions is None:
        return None
    return {tp.topic_id: frozenset(tp.partitions) for tp in topic_partitions if tp.topic_id is not None}


# What Python's re accepts and RE2 (Kafka's RE2J) refuses: lookarounds, atomic groups,
# conditionals, backreferences, possessive quantifiers.
_PERL_ONLY_GROUPS = ("(?=", "(?!", "(?<=", "(?<!", "(?>", "(?(", "(?P=")
_QUANTIFIERS = "*+?}"


def compile_regex(pattern: str) -> re.Pattern[str]:
    """A KIP-848 subscription regex in RE2 syntax (its common subset with Python's; what only
    Perl-style engines accept is refused as RE2J refuses it), matched against whole topic names
    as Kafka's RE2J matches()."""
    _refuse_perl_only(pattern)
    return re.compile(pattern)


def _refuse_perl_only(pattern: str) -> None:
    in_class, i = False, 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            following = pattern[i + 1:i + 2]
            if not in_class and (following.isdigit() and following != "0" or following in ("g", "k")):
                raise re.error(f"backreference \\{following} is not supported by RE2", pattern, i)
            i += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
            if pattern[i + 1:i + 2] == "]" or pattern[i + 1:i + 3] == "^]":  # a leading ] is literal
                i += 2 if pattern[i + 1] == "]" else 3
                continue
        elif pattern.startswith(_PERL_ONLY_GROUPS, i):
            raise re.error(f"{pattern[i:i + 3]}... is not supported by RE2", pattern, i)
        elif char == "+" and i and pattern[i - 1] in _QUANTIFIERS and pattern[i - 2:i] != "\\" + pattern[i - 1]:
            raise re.error("possessive quantifiers are not supported by RE2", pattern, i)
        i += 1


class ConsumerGroupHeartbeats:
    def __init__(self, groups: ConsumerGroups, config: ConsumerGroupConfig, timer: CoordinatorTimer,
                 classic_group_exists: Any = lambda group_id: False) -> None:
        self.groups = groups
        self.config = config
        self.timer = timer
        self.classic_group_exists = classic_group_exists  # group id -> "empty" | "active" | None
        self._regexes: dict[str, re.Pattern[str]] = {}
        # (group, member) -> partitions handed to the member that it has not yet reported owning.
        # Its owned list may lag what it was given (a client reports what it has finished
        # assigning), so their absence there is not a revocation. In memory: after a load, the
        # owned list is taken as it is, as Kafka takes it.
        self._unconfirmed: dict[tuple[str, str], set[tuple[uuid.UUID, int]]] = {}

    # -- validation (Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid) ---------------------

    def _validate(self, request: Any, version: int) -> None:
        def invalid(message: str) -> HeartbeatError:
            return HeartbeatError(ErrorCode.invalid_request, message)

        epoch = request.member_epoch
        if (version >= CONSUMER_GENERATED_MEMBER_ID_REQUIRED_VERSION or epoch > 0
                or epoch == LEAVE_GROUP_MEMBER_EPOCH) and not request.member_id.strip():
            raise invalid("MemberId can't be empty.")
        if not request.group_id.strip():
            raise invalid("GroupId can't be empty.")
        if _blank(request.instance_id):
            raise invalid("InstanceId can't be empty.")
        if _blank(request.rack_id):
            raise invalid("RackId can't be empty.")
        if epoch == 0:
            if _ms(request.rebalance_timeout) == -1:
                raise invalid("RebalanceTimeoutMs must be provided in first request.")
            if request.topic_partitions is None or request.topic_partitions:
                raise invalid("TopicPartitions must be empty when (re-)joining.")
            if request.subscribed_topic_names is None and request.subscribed_topic_regex is None:
                raise invalid("Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.")
        elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if request.instance_id is None:
                raise invalid("InstanceId can't be null.")
        elif epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise invalid("MemberEpoch is invalid.")
        if request.subscribed_topic_regex is not None:
            try:
                compile_regex(request.subscribed_topic_regex)
            except re.error as exc:  # Kafka's InvalidRegularExpression
                raise HeartbeatError(ErrorCode.invalid_regular_expression,
                                     f"SubscribedTopicRegex `{request.subscribed_topic_regex}` is not a valid "
                                     f"regular expression: {exc}.") from None
        if request.server_assignor is not None and request.server_assignor not in self.config.assignors:
            raise HeartbeatError(ErrorCode.unsupported_assignor,
                                 f"ServerAssignor {request.server_assignor} is not supported. Supported assignors: "
                                 f"{', '.join(self.config.assignors)}.")

    # -- the heartbeat ----------------------------------------------------------------------

    def heartbeat(self, request: Any, version: int, token: int, now_ms: int, topics: TopicsImage,
                  client_id: str, client_host: str, describable: Callable[[str], bool] | None = None) -> Result:
        """`describable`: the topics the heartbeating member's principal may DESCRIBE (None: all,
        no authorizer). As Kafka resolves a group's regexes with the context of the heartbeat that
        resolves them, every regex of the group matches only those."""
        def error(code: ErrorCode, message: str | None) -> Result:
            return Result().respond(token, {"throttle_time": 0, "error_code": code, "error_message": message,
                                            "member_id": None, "member_epoch": -1, "heartbeat_interval": 0,
                                            "assignment": None})
        try:
            self._validate(request, version)
            if request.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                result = self._leave(request, token, now_ms)
            else:
                result = self._join_or_heartbeat(request, version, token, now_ms, topics, client_id, client_host,
                                                 describable)
        except HeartbeatError as exc:
            return error(exc.code, exc.message)
        if result.records:
            result.on_failure = lambda code, _now: error(group_append_error(code), None)
        return result

    def _group_for(self, group_id: str, create: bool) -> tuple[ConsumerGroup, list[OffsetsRecord]]:
        """The consumer group, or a new empty one (with the records that make it, converting an
        empty classic group as the migration policy allows)."""
        group = self.groups.get(group_id)
        if group is not None:
            return group, []
        classic = self.classic_group_exists(group_id)
        if not create:
            raise HeartbeatError(ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group."
                                 if classic is not None else f"Group {group_id} not found.")
        records: list[OffsetsRecord] = []
        if classic is not None:
            if classic != "empty" or self.config.migration_policy not in ("bidirectional", "upgrade"):
                raise HeartbeatError(ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group.")
            # The empty classic group goes (its offsets stay, now the consumer group's).
            records.append(OffsetsRecord(encode_key(GroupMetadataKey(group_id)), None))
        return ConsumerGroup(group_id), records

    def _join_or_heartbeat(self, request: Any, version: int, token: int, now_ms: int, topics: TopicsImage,
                           client_id: str, client_host: str, describable: Callable[[str], bool] | None) -> Result:
        group_id, epoch = request.group_id, request.member_epoch
        group, records = self._group_for(group_id, create=epoch == 0)
        member_id = request.member_id or str(uuid.uuid4())
        owned = _assignment_of(request.topic_partitions)
        removed_static: ConsumerGroupMember | None = None
        stored = group.members.get(member_id)
        if epoch == 0:
            if request.instance_id is not None:
                existing = group.static_member(request.instance_id)
                if existing is not None and existing.member_id != member_id:
                    if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                        raise HeartbeatError(ErrorCode.unreleased_instance_id,
                                             f"Static member {existing.member_id} with instance id "
                                             f"{request.instance_id} is not released yet.")
                    removed_static = existing  # the new incarnation takes over its assignment
            member = group.members.get(member_id)
            if member is None and len(group.members) - (removed_static is not None) >= self.config.max_size:
                raise HeartbeatError(ErrorCode.group_max_size_reached,
                                     f"The consumer group has reached its maximum capacity of "
                                     f"{self.config.max_size} members.")
            if member is None:
                base = removed_static
                member = ConsumerGroupMember(member_id) if base is None else dataclasses.replace(
                    base, member_id=member_id, has_metadata=False)
            else:
                # A member joining again abandons what it held: it starts from nothing.
                member = dataclasses.replace(member, member_epoch=0, previous_member_epoch=0, state=0,
                                             assigned={}, pending_revocation={})
        else:
            member = group.members.get(member_id)
            if member is None:
                raise HeartbeatError(ErrorCode.unknown_member_id,
                                     f"Member {member_id} is not a member of group {group_id}.")
            if request.instance_id is not None and member.instance_id != request.instance_id:
                raise HeartbeatError(ErrorCode.fenced_instance_id,
                                     f"Static member {member_id} with instance id {request.instance_id} "
                                     "is fenced by another member.")
            self._check_epoch(member, epoch, owned)
            if self._steady(group, member, request, owned, topics, client_id, client_host):
                # Nothing changes: no record, no assignment in the answer (Kafka's steady heartbeat).
                if owned is not None:  # it reported all it was given
                    self._unconfirmed.pop((group_id, member_id), None)
                self._schedule_session(group_id, member_id, now_ms)
                return Result().respond(token, {
                    "throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "member_id": member_id,
                    "member_epoch": member.member_epoch, "heartbeat_interval": self.config.heartbeat_interval_ms,
                    "assignment": None})

        # 1. The member's metadata; the group epoch moves when subscriptions change.
        updated = dataclasses.replace(
            member,
            instance_id=request.instance_id if epoch == 0 else member.instance_id,
            rack_id=request.rack_id if request.rack_id is not None else member.rack_id,
            client_id=client_id, client_host=client_host,
            subscribed_topic_names=tuple(request.subscribed_topic_names)
            if request.subscribed_topic_names is not None else member.subscribed_topic_names,
            subscribed_topic_regex=(request.subscribed_topic_regex or None)
            if request.subscribed_topic_regex is not None else member.subscribed_topic_regex,
            rebalance_timeout_ms=_ms(request.rebalance_timeout)
            if _ms(request.rebalance_timeout) != -1 else member.rebalance_timeout_ms,
            server_assignor=request.server_assignor if request.server_assignor is not None else member.server_assignor,
        )
        group_epoch = group.group_epoch
        bump = False
        if removed_static is not None:
            records += self._member_tombstones(group_id, removed_static.member_id)
            # the new incarnation keeps the old one's target (Kafka's static member replacement)
            records.append(_record(ConsumerGroupKey(schema.TARGET_ASSIGNMENT_MEMBER, group_id, member_id),
                                   schema.TargetAssignmentMemberValue(group.target.get(removed_static.member_id, {}))))
        if updated.metadata_value() != member.metadata_value() or not member.has_metadata:
            records.append(_record(ConsumerGroupKey(schema.MEMBER_METADATA, group_id, member_id),
                                   updated.metadata_value()))
            if member_id not in group.members and removed_static is None:
                bump = True
            elif (updated.subscribed_topic_names != member.subscribed_topic_names
                  or updated.subscribed_topic_regex != member.subscribed_topic_regex
                  or updated.server_assignor != member.server_assignor):
                bump = True
        members = dict(group.members)
        if removed_static is not None:
            members.pop(removed_static.member_id, None)
        members[member_id] = updated
        subscriptions = {m.member_id: self._subscribed(m, topics, describable) for m in members.values()}
        metadata = {name: topics[name] for names in subscriptions.values() for name in names}
        if metadata != group.subscription_metadata:
            records.append(_record(ConsumerGroupKey(schema.PARTITION_METADATA, group_id),
                                   schema.PartitionMetadataValue(tuple(metadata[n] for n in sorted(metadata)))))
            bump = True
        if bump or not group.group_epoch:
            group_epoch = group.group_epoch + 1
            records.append(_record(ConsumerGroupKey(schema.GROUP_METADATA, group_id),
                                   schema.GroupMetadataValue(group_epoch)))

        # 2. The target assignment, when the group epoch is ahead of it.
        target_epoch = group.assignment_epoch
        target = dict(group.target)
        if removed_static is not None:
            target[member_id] = target.pop(removed_static.member_id, {})
        if group_epoch > target_epoch:
            assignor = self._assignor(members)
            new_target = assignor(subscriptions, metadata, target)
            for mid, partitions in new_target.items():
                if target.get(mid) != partitions:
                    records.append(_record(ConsumerGroupKey(schema.TARGET_ASSIGNMENT_MEMBER, group_id, mid),
                                           schema.TargetAssignmentMemberValue(partitions)))
            target, target_epoch = new_target, group_epoch
            records.append(_record(ConsumerGroupKey(schema.TARGET_ASSIGNMENT_METADATA, group_id),
                                   schema.TargetAssignmentMetadataValue(target_epoch)))

        # 3. Reconcile the member's current assignment towards its target.
        def owner_of(topic_id: uuid.UUID, partition: int) -> str | None:
            holder = group.owners.get((topic_id, partition))
            if removed_static is not None and holder == removed_static.member_id:
                return member_id
            return holder

        reconciled = next_state(updated, target_epoch, target.get(member_id, {}), owner_of,
                                self._owned(group_id, member_id, updated, owned))
        self._handed(group_id, member_id, updated, reconciled)
        if stored is None or reconciled.assignment_value() != stored.assignment_value():
            records.append(_record(ConsumerGroupKey(schema.CURRENT_MEMBER_ASSIGNMENT, group_id, member_id),
                                   reconciled.assignment_value()))
        self._schedule_session(group_id, member_id, now_ms)
        self._schedule_revocation(group_id, reconciled, now_ms)

        send_assignment = epoch == 0 or stored is None or reconciled.assigned != stored.assigned or (
            owned is not None and owned != reconciled.assigned)
        response = {
            "throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "member_id": member_id,
            "member_epoch": reconciled.member_epoch, "heartbeat_interval": self.config.heartbeat_interval_ms,
            "assignment": {"topic_partitions": [
                {"topic_id": topic_id, "partitions": sorted(ps)}
                for topic_id, ps in sorted(reconciled.assigned.items(), key=lambda i: str(i[0]))]}
            if send_assignment else None,
        }
        return Result(records=records).respond(token, response)

    @staticmethod
    def _steady(group: ConsumerGroup, member: ConsumerGroupMember, request: Any, owned: Assignment | None,
                topics: TopicsImage, client_id: str, client_host: str) -> bool:
        """Whether this heartbeat changes nothing: a stable member at the group's epochs, the same
        subscription and details, reporting nothing new, its group's topics as they were."""
        if not (member.state == 0 and request.member_epoch == member.member_epoch == group.assignment_epoch
                == group.group_epoch):
            return False
        if (request.subscribed_topic_names is not None
                and tuple(request.subscribed_topic_names) != member.subscribed_topic_names):
            return False
        if request.subscribed_topic_regex is not None and (request.subscribed_topic_regex or None) \
                != member.subscribed_topic_regex:
            return False
        if (request.server_assignor not in (None, member.server_assignor)
                or request.rack_id not in (None, member.rack_id)
                or _ms(request.rebalance_timeout) not in (-1, member.rebalance_timeout_ms)
                or client_id != member.client_id or client_host != member.client_host):
            return False
        if owned is not None and _plain(owned) != _plain(member.assigned):
            return False
        names, has_regex = group.subscribed_names()
        if has_regex:
            return False  # a regex is matched against the topics at every heartbeat
        metadata = group.subscription_metadata
        return all(topics.get(name) == metadata.get(name) for name in names)

    def _owned(self, group_id: str, member_id: str, member: ConsumerGroupMember,
               owned: Assignment | None) -> Assignment | None:
        """What the member holds as far as revocation goes: what it reports, plus what it was
        handed and has not reported yet (it may still be assigning it)."""
        if owned is None:
            return None
        unconfirmed = self._unconfirmed.get((group_id, member_id))
        if not unconfirmed:
            return owned
        unconfirmed -= {(t, p) for t, ps in owned.items() for p in ps}
        if member.state == UNREVOKED_PARTITIONS and _plain(owned) == _plain(member.assigned):
            # It reports exactly what it was told to keep: it has applied that answer, and with
            # it given up the rest (a client may skip reporting the larger assignment before).
            unconfirmed.clear()
        held = dict(owned)
        for topic_id, partition in unconfirmed:
            held[topic_id] = held.get(topic_id, frozenset()) | {partition}
        return held

    def _handed(self, group_id: str, member_id: str, before: ConsumerGroupMember,
                after: ConsumerGroupMember) -> None:
        key = (group_id, member_id)
        unconfirmed = self._unconfirmed.setdefault(key, set())
        for topic_id, partitions in after.assigned.items():
            unconfirmed |= {(topic_id, p) for p in partitions - before.assigned.get(topic_id, frozenset())}
        holding = {(t, p) for a in (after.assigned, after.pending_revocation) for t, ps in a.items() for p in ps}
        unconfirmed &= holding
        if not unconfirmed:
            del self._unconfirmed[key]

    @staticmethod
    def _check_epoch(member: ConsumerGroupMember, epoch: int, owned: Assignment | None) -> None:
        """Kafka's throwIfMemberEpochIsInvalid: a member may lag one epoch (its last answer lost)
        if it owns nothing beyond what it is assigned now."""
        if epoch > member.member_epoch:
            raise HeartbeatError(ErrorCode.fenced_member_epoch,
                                 f"The consumer group member has a greater member epoch ({epoch}) than the one "
                                 f"known by the group coordinator ({member.member_epoch}). The member must "
                                 "abandon all its partitions and rejoin.")
        if epoch < member.member_epoch:
            subset = owned is None or all(ps <= member.assigned.get(t, frozenset()) for t, ps in owned.items())
            if epoch != member.previous_member_epoch or not subset:
                raise HeartbeatError(ErrorCode.fenced_member_epoch,
                                     f"The consumer group member has a smaller member epoch ({epoch}) than the "
                                     f"one known by the group coordinator ({member.member_epoch}). The member "
                                     "must abandon all its partitions and rejoin.")

    def _subscribed(self, member: ConsumerGroupMember, topics: TopicsImage,
                    describable: Callable[[str], bool] | None = None) -> frozenset[str]:
        names = {n for n in member.subscribed_topic_names if n in topics}
        if member.subscribed_topic_regex:
            pattern = self._regexes.get(member.subscribed_topic_regex)
            if pattern is None:
                pattern = self._regexes[member.subscribed_topic_regex] = compile_regex(member.subscribed_topic_regex)
            names |= {n for n in topics if pattern.fullmatch(n) and (describable is None or describable(n))}
        return frozenset(names)

    def _assignor(self, members: Mapping[str, ConsumerGroupMember]) -> Any:
        """The members' most preferred server assignor, else the first configured (Kafka)."""
        wanted = Counter(m.server_assignor for m in members.values() if m.server_assignor)
        name = min(wanted, key=lambda n: (-wanted[n], n)) if wanted else self.config.assignors[0]
        return assignors_module.ASSIGNORS[name]

    # -- leaving and fencing ----------------------------------------------------------------------

    @staticmethod
    def _member_tombstones(group_id: str, member_id: str) -> list[OffsetsRecord]:
        return [_record(ConsumerGroupKey(kind, group_id, member_id), None)
                for kind in (schema.CURRENT_MEMBER_ASSIGNMENT, schema.TARGET_ASSIGNMENT_MEMBER, schema.MEMBER_METADATA)]

    def remove_member(self, group: ConsumerGroup, member_id: str) -> list[OffsetsRecord]:
        """The records removing a member: its three records, then the group's new epoch (the
        others' target is recomputed at their next heartbeat)."""
        self._unconfirmed.pop((group.group_id, member_id), None)
        self.timer.cancel(("consumer-session", group.group_id, member_id))
        self.timer.cancel(("consumer-revocation", group.group_id, member_id))
        records = self._member_tombstones(group.group_id, member_id)
        records.append(_record(ConsumerGroupKey(schema.GROUP_METADATA, group.group_id),
                               schema.GroupMetadataValue(group.group_epoch + 1)))
        return records

    def group_tombstones(self, group: ConsumerGroup) -> list[OffsetsRecord]:
        """Every record of a group, tombstoned as Kafka deletes one (the group's own last)."""
        records = [r for member_id in group.members for r in self._member_tombstones(group.group_id, member_id)]
        records += [_record(ConsumerGroupKey(kind, group.group_id), None)
                    for kind in (schema.TARGET_ASSIGNMENT_METADATA, schema.PARTITION_METADATA, schema.GROUP_METADATA)]
        return records

    def _leave(self, request: Any, token: int, now_ms: int) -> Result:
        group = self.groups.get(request.group_id)
        if group is None:
            raise HeartbeatError(ErrorCode.group_id_not_found, f"Group {request.group_id} not found.")
        member = group.members.get(request.member_id)
        if request.instance_id is not None:
            member = group.static_member(request.instance_id)
            if member is None:
                raise HeartbeatError(ErrorCode.unknown_member_id,
                                     f"Instance id {request.instance_id} is unknown.")
            if member.member_id != request.member_id:
                raise HeartbeatError(ErrorCode.fenced_instance_id,
                                     f"Static member {request.member_id} with instance id {request.instance_id} "
                                     "is fenced by another member.")
        if member is None:
            raise HeartbeatError(ErrorCode.unknown_member_id,
                                 f"Member {request.member_id} is not a member of group {request.group_id}.")
        response = {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None,
                    "member_id": member.member_id, "member_epoch": request.member_epoch, "heartbeat_interval": 0,
                    "assignment": None}
        if request.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            # A static member leaving for now: it keeps its assignment, at epoch -2, until its
            # instance id comes back or its session ends.
            left = dataclasses.replace(member, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH)
            records = [_record(ConsumerGroupKey(schema.CURRENT_MEMBER_ASSIGNMENT, group.group_id, member.member_id),
                               left.assignment_value())]
            self.timer.cancel(("consumer-revocation", group.group_id, member.member_id))
            return Result(records=records).respond(token, response)
        return Result(records=self.remove_member(group, member.member_id)).respond(token, response)

    # -- timers -----------------------------------------------------------------------------

    def _schedule_session(self, group_id: str, member_id: str, now_ms: int) -> None:
        key = ("consumer-session", group_id, member_id)
        self.timer.schedule(key, now_ms + self.config.session_timeout_ms,
                            lambda fired: self._expire(group_id, member_id, None))

    def _schedule_revocation(self, group_id: str, member: ConsumerGroupMember, now_ms: int) -> None:
        key = ("consumer-revocation", group_id, member.member_id)
        if member.state != UNREVOKED_PARTITIONS:
            self.timer.cancel(key)
        elif not self.timer.is_scheduled(key):
            epoch = member.member_epoch
            self.timer.schedule(key, now_ms + max(member.rebalance_timeout_ms, 0),
                                lambda fired: self._expire(group_id, member.member_id, epoch))

    def _expire(self, group_id: str, member_id: str, revoking_at: int | None) -> Result:
        """A session ended, or a member did not revoke within its rebalance timeout: fenced."""
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None:
            return Result()
        if revoking_at is not None and (member.state != UNREVOKED_PARTITIONS or member.member_epoch != revoking_at):
            return Result()
        return Result(records=self.remove_member(group, member_id))

    def restart_sessions(self, now_ms: int) -> None:
        """The shard starts serving: every loaded member's session starts now (Kafka)."""
        for group_id, group in self.groups.latest.items():
            for member_id, member in group.members.items():
                self._schedule_session(group_id, member_id, now_ms)
                self._schedule_revocation(group_id, member, now_ms)
