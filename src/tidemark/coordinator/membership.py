"""Classic group membership: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, DescribeGroups,
ListGroups, and the timers behind them (session expiry, join and sync deadlines).

A pure state machine: the caller passes the decoded request, its version, a token naming the
request and the current time, and gets a `Result` back. A request the protocol holds (a JoinGroup
waiting for the join phase, a follower's SyncGroup waiting for the leader) has no response in its
own Result; the Result of a later event (another request, or `poll`) carries it, keyed by token.
Responses are dicts with Kafka's field names, every field any version needs.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import functools
import uuid
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from tidemark.coordinator.group import Group, GroupState, Member
from tidemark.coordinator.result import OffsetsRecord, Result, group_append_error
from tidemark.coordinator.timer import CoordinatorTimer
from tidemark.records.offsets_schema import GroupMetadataKey, GroupMetadataValue, encode_group_metadata_value, encode_key
from tidemark.wire import error_responses

# Kafka bounds how long a member may sit in its first JoinGroup without being answered.
NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000
# DescribeGroups' "authorized operations not requested" value.
AUTHORIZED_OPERATIONS_OMITTED = -2147483648
CLASSIC_GROUP_TYPE = "classic"


@dataclasses.dataclass(frozen=True, slots=True)
class GroupConfig:
    min_session_timeout_ms: int = 6000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1800000  # group.max.session.timeout.ms
    initial_rebalance_delay_ms: int = 3000  # group.initial.rebalance.delay.ms
    max_size: int = 2**31 - 1  # group.max.size


def _ms(value: Any) -> int:
    if isinstance(value, datetime.timedelta):
        return int(value / datetime.timedelta(milliseconds=1))
    return int(value)


def _code(error: ErrorCode | int) -> int:
    return int(error)


def _join_response(version: int, error: ErrorCode | int, member_id: str, *, generation: int = -1,
                   protocol_type: str | None = None, protocol: str | None = None, leader: str = "",
                   members: list[dict[str, Any]] | None = None, skip_assignment: bool = False) -> dict[str, Any]:
    return {
        "throttle_time": 0,
        "error_code": _code(error),
        "generation_id": generation,
        "protocol_type": protocol_type,
        # Non-nullable before v7: Kafka sends "" for no protocol there.
        "protocol_name": protocol if version >= 7 else (protocol or ""),
        "leader": leader,
        "skip_assignment": skip_assignment,
        "member_id": member_id,
        "members": members or [],
    }


def _sync_response(error: ErrorCode | int, *, protocol_type: str | None = None, protocol: str | None = None,
                   assignment: bytes = b"") -> dict[str, Any]:
    return {"throttle_time": 0, "error_code": _code(error), "protocol_type": protocol_type,
            "protocol_name": protocol, "assignment": assignment}


class GroupMembership:
    """The classic group protocol over a dict of groups shared with the offset manager."""

    def __init__(self, groups: dict[str, Group], config: GroupConfig,
                 new_member_id: Callable[[str], str] | None = None,
                 timer: CoordinatorTimer | None = None) -> None:
        self.groups = groups
        self.config = config
        self._new_member_id = new_member_id or (lambda prefix: f"{prefix}-{uuid.uuid4()}")
        self.timer = timer if timer is not None else CoordinatorTimer()
        self._scheduled: dict[str, set[tuple[str, ...]]] = {}  # group id -> its timer keys

    # -- JoinGroup ------------------------------------------------------------------------------

    def join_group(self, request: Any, version: int, token: int, now_ms: int,
                   client_id: str, client_host: str) -> Result:
        result = self._join_group(request, version, token, now_ms, client_id, client_host)
        self.reschedule(request.group_id)
        return result

    def _join_group(self, request: Any, version: int, token: int, now_ms: int,
                    client_id: str, client_host: str) -> Result:
        result = Result()
        group_id = request.group_id
        member_id = request.member_id or ""
        instance_id = getattr(request, "group_instance_id", None)
        session_timeout = _ms(request.session_timeout)
        rebalance_timeout = getattr(request, "rebalance_timeout", None)
        rebalance_timeout = session_timeout if rebalance_timeout is None else _ms(rebalance_timeout)
        protocol_type = request.protocol_type
        protocols = tuple((p.name, bytes(p.metadata)) for p in request.protocols)

        def fail(error: ErrorCode, response_member_id: str = member_id) -> Result:
            return result.respond(token, error_responses.join_group(version, error, response_member_id))

        if not group_id:
            return fail(ErrorCode.invalid_group_id)
        if not self.config.min_session_timeout_ms <= session_timeout <= self.config.max_session_timeout_ms:
            return fail(ErrorCode.invalid_session_timeout)
        group = self.groups.get(group_id)
        is_new_group = group is None
        if group is None:
            if member_id:
                return fail(ErrorCode.unknown_member_id)
            group = Group(group_id, now_ms)
        if group.is_dead:
            # Being removed (unloaded or deleted): let the client find the coordinator again.
            return fail(ErrorCode.coordinator_not_available)
        if not self._accept_joining_member(group, member_id):
            return fail(ErrorCode.group_max_size_reached, "")
        if not group.supports_protocols(protocol_type, protocols):
            return fail(ErrorCode.inconsistent_group_protocol)

        join = _Join(token, version, now_ms, client_id, client_host, instance_id, session_timeout,
                     rebalance_timeout, protocol_type, protocols)
        if not member_id:
            if is_new_group:
                self.groups[group_id] = group
            self._new_member_join(group, join, result)
        else:
            self._current_member_join(group, member_id, join, result)
        self._maybe_complete_join(group, now_ms, result)
        if group.state is GroupState.PREPARING_REBALANCE and group.join_deadline_ms is not None \
                and group.join_deadline_ms <= now_ms:
            self._on_join_deadline(group, now_ms, result)
        return result

    def _accept_joining_member(self, group: Group, member_id: str) -> bool:
        max_size = self.config.max_size
        if group.state in (GroupState.EMPTY, GroupState.DEAD):
            return True
        member = group.members.get(member_id)
        if group.state is GroupState.PREPARING_REBALANCE:
            return (member is not None and member.join_token is not None) or \
                group.awaiting_join_count() < max_size
        return member is not None or len(group.members) < max_size

    def _new_member_join(self, group: Group, join: _Join, result: Result) -> None:
        new_id = self._new_member_id(join.instance_id if join.instance_id is not None else join.client_id)
        if join.instance_id is not None:
            old_id = group.static_members.get(join.instance_id)
            if old_id is None:
                self._add_member_and_rebalance(group, new_id, join, result)
            else:
                self._update_static_member_and_rebalance(group, old_id, new_id, join, result)
        elif join.version >= 4:
            # KIP-394: hand out the member id first; the client rejoins with it.
            group.pending_members[new_id] = join.now_ms + join.session_timeout_ms
            result.respond(join.token, error_responses.join_group(join.version, ErrorCode.member_id_required, new_id))
        else:
            self._add_member_and_rebalance(group, new_id, join, result)

    def _current_member_join(self, group: Group, member_id: str, join: _Join, result: Result) -> None:
        if member_id in group.pending_members:
            self._add_member_and_rebalance(group, member_id, join, result)
            return
        if group.is_static_member_fenced(join.instance_id, member_id):
            result.respond(join.token, error_responses.join_group(join.version, ErrorCode.fenced_instance_id, member_id))
            return
        member = group.members.get(member_id)
        if member is None or group.state is GroupState.EMPTY:
            result.respond(join.token, error_responses.join_group(join.version, ErrorCode.unknown_member_id, member_id))
            return
        state = group.state
        if state is GroupState.PREPARING_REBALANCE:
            self._update_member_and_rebalance(group, member, join, result)
        elif state is GroupState.COMPLETING_REBALANCE:
            if member.protocols == join.protocols:
                # Same metadata: the member probably lost the join response; send it again.
                member.last_heartbeat_ms = join.now_ms
                result.respond(join.token, self._joined_response(group, member, join.version))
            else:
                self._update_member_and_rebalance(group, member, join, result)
        elif state is GroupState.STABLE:
            if group.is_leader(member_id) or member.protocols != join.protocols:
                self._update_member_and_rebalance(group, member, join, result)
            else:
                member.last_heartbeat_ms = join.now_ms
                result.respond(join.token, self._joined_response(group, member, join.version))

    def _add_member_and_rebalance(self, group: Group, member_id: str, join: _Join, result: Result) -> None:
        member = Member(
            member_id=member_id, group_instance_id=join.instance_id, client_id=join.client_id,
            client_host=join.client_host, rebalance_timeout_ms=join.rebalance_timeout_ms,
            session_timeout_ms=join.session_timeout_ms, protocol_type=join.protocol_type,
            protocols=join.protocols, last_heartbeat_ms=join.now_ms, join_token=join.token,
            join_version=join.version, is_new=True,
        )
        group.add(member)
        # During the initial delay, each new member earns the group a little more waiting.
        if group.state is GroupState.PREPARING_REBALANCE and group.generation == 0:
            group.new_member_added = True
        self._maybe_prepare_rebalance(group, join.now_ms, result)

    def _set_join(self, member: Member, join: _Join, result: Result) -> None:
        if member.join_token is not None and member.join_token != join.token:
            # A newer JoinGroup from the same member supersedes the held one.
            result.respond(member.join_token, error_responses.join_group(
                member.join_version, ErrorCode.rebalance_in_progress, member.member_id))
        member.join_token = join.token
        member.join_version = join.version

    def _update_member_and_rebalance(self, group: Group, member: Member, join: _Join, result: Result) -> None:
        member.protocols = join.protocols
        member.rebalance_timeout_ms = join.rebalance_timeout_ms
        member.session_timeout_ms = join.session_timeout_ms
        self._set_join(member, join, result)
        self._maybe_prepare_rebalance(group, join.now_ms, result)

    def _update_static_member_and_rebalance(self, group: Group, old_id: str, new_id: str, join: _Join,
                                            result: Result) -> None:
        assert join.instance_id is not None
        if group.state is GroupState.STABLE and group.protocol == self._protocol_with(group, old_id, join):
            self._replace_stable_static_member(group, old_id, new_id, join, result)
            return
        # Rebalancing anyway: the new incarnation takes the old one's place at once (nothing of
        # it is persisted until the rebalance completes).
        old_member = group.members[old_id]
        self._fence(old_member, result)
        member = group.replace_static_member(join.instance_id, old_id, new_id)
        member.protocols = join.protocols
        member.rebalance_timeout_ms = join.rebalance_timeout_ms
        member.session_timeout_ms = join.session_timeout_ms
        member.last_heartbeat_ms = join.now_ms
        self._set_join(member, join, result)
        if group.state is GroupState.STABLE:
            self._maybe_prepare_rebalance(group, join.now_ms, result)
        elif group.state is GroupState.COMPLETING_REBALANCE:
            # The leader may already be assigning to the old member id: rebalance again.
            self._prepare_rebalance(group, join.now_ms, result)
        elif group.state is GroupState.PREPARING_REBALANCE:
            pass  # wait for the join phase like everyone else
        else:
            raise AssertionError(f"static member in group {group.group_id!r} in state {group.state.value}")

    @staticmethod
    def _protocol_with(group: Group, old_id: str, join: _Join) -> str:
        """The protocol the group would select with the member's new protocols."""
        member = group.members[old_id]
        saved = member.protocols
        member.protocols = join.protocols
        try:
            return group.select_protocol()
        finally:
            member.protocols = saved

    def _replace_stable_static_member(self, group: Group, old_id: str, new_id: str, join: _Join,
                                      result: Result) -> None:
        """A static member rejoins a Stable group under a new id with nothing to rebalance: the
        new id is persisted, and takes the old one's place when that record is replayed."""
        assert join.instance_id is not None
        image = copy.deepcopy(group)
        replaced = image.replace_static_member(join.instance_id, old_id, new_id)
        replaced.protocols = join.protocols
        replaced.rebalance_timeout_ms = join.rebalance_timeout_ms
        replaced.session_timeout_ms = join.session_timeout_ms
        result.records.append(self._group_record(image))
        group.pending_replacements[new_id] = (join.protocols, join.rebalance_timeout_ms, join.session_timeout_ms)
        is_leader = image.is_leader(new_id)
        skip = is_leader and join.version >= 9
        # Before v9 the member must not run an assignment again: it is told the leader from
        # before its replacement (KIP-814 gave v9+ skip_assignment instead).
        leader = image.leader if join.version >= 9 else group.leader
        result.respond(join.token, _join_response(
            join.version, ErrorCode.none, new_id, generation=group.generation,
            protocol_type=group.protocol_type, protocol=group.protocol, leader=leader or "",
            members=self._member_list(image) if skip else None, skip_assignment=skip))
        generation = group.generation

        def failed(code: ErrorCode, _now_ms: int) -> Result:
            group.pending_replacements.pop(new_id, None)
            return Result().respond(join.token, _join_response(
                join.version, group_append_error(code), "", generation=generation,
                protocol_type=group.protocol_type, protocol=group.protocol, leader=group.leader or ""))

        result.on_failure = failed

    @staticmethod
    def _fence(member: Member, result: Result) -> None:
        """The old incarnation of a static member is fenced, including requests it has held."""
        if member.join_token is not None:
            result.respond(member.join_token, error_responses.join_group(
                member.join_version, ErrorCode.fenced_instance_id, member.member_id))
            member.join_token = None
        if member.sync_token is not None:
            result.respond(member.sync_token, error_responses.sync_group(ErrorCode.fenced_instance_id))
            member.sync_token = None

    def _joined_response(self, group: Group, member: Member, version: int) -> dict[str, Any]:
        is_leader = group.is_leader(member.member_id)
        return _join_response(
            version, ErrorCode.none, member.member_id, generation=group.generation,
            protocol_type=group.protocol_type, protocol=group.protocol, leader=group.leader or "",
            members=self._member_list(group) if is_leader else None)

    @staticmethod
    def _member_list(group: Group) -> list[dict[str, Any]]:
        return [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                 "metadata": m.metadata(group.protocol)} for m in group.members.values()]

    # -- rebalance mechanics ----------------------------------------------------------------------

    def _maybe_prepare_rebalance(self, group: Group, now_ms: int, result: Result) -> None:
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY):
            self._prepare_rebalance(group, now_ms, result)

    def _prepare_rebalance(self, group: Group, now_ms: int, result: Result) -> None:
        if group.state is GroupState.COMPLETING_REBALANCE:
            # Followers waiting for the leader's assignment must rejoin instead.
            for member in group.members.values():
                member.assignment = b""
                if member.sync_token is not None:
                    result.respond(member.sync_token, error_responses.sync_group(ErrorCode.rebalance_in_progress))
                    member.sync_token = None
        group.pending_sync.clear()
        group.sync_deadline_ms = None
        rebalance_timeout = group.rebalance_timeout_ms()
        if group.state is GroupState.EMPTY:
            delay = self.config.initial_rebalance_delay_ms
            group.join_deadline_ms = now_ms + delay
            group.initial_join_remaining_ms = max(rebalance_timeout - delay, 0)
            group.new_member_added = False
        else:
            group.join_deadline_ms = now_ms + rebalance_timeout
            group.initial_join_remaining_ms = None
        group.transition_to(GroupState.PREPARING_REBALANCE, now_ms)

    def _maybe_complete_join(self, group: Group, now_ms: int, result: Result) -> None:
        if group.state is GroupState.PREPARING_REBALANCE and group.initial_join_remaining_ms is None \
                and group.has_all_members_joined():
            self._complete_join(group, now_ms, result)

    def _on_join_deadline(self, group: Group, now_ms: int, result: Result) -> None:
        remaining = group.initial_join_remaining_ms
        if remaining is not None and group.new_member_added and remaining > 0:
            delay = self.config.initial_rebalance_delay_ms
            group.new_member_added = False
            group.join_deadline_ms = now_ms + min(delay, remaining)
            group.initial_join_remaining_ms = max(remaining - delay, 0)
            return
        self._complete_join(group, now_ms, result)

    def _complete_join(self, group: Group, now_ms: int, result: Result) -> None:
        group.join_deadline_ms = None
        group.initial_join_remaining_ms = None
        group.new_member_added = False
        # Dynamic members that did not rejoin are gone; static ones keep their place.
        for member in list(group.members.values()):
            if member.join_token is None and not member.is_static:
                self._drop_member(group, member, result)
        if group.members and not self._elect_joined_leader(group):
            # Only static members that did not rejoin are left: wait another rebalance timeout.
            group.join_deadline_ms = now_ms + group.rebalance_timeout_ms()
            return
        group.generation += 1
        if group.members:
            group.protocol = group.select_protocol()
            group.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
            for member in group.members.values():
                if member.join_token is not None:
                    result.respond(member.join_token, self._joined_response(group, member, member.join_version))
                    member.join_token = None
                    member.is_new = False
                    member.last_heartbeat_ms = now_ms
            group.pending_sync = set(group.members)
            group.sync_deadline_ms = now_ms + group.rebalance_timeout_ms()
        else:
            group.protocol = None
            group.leader = None
            group.transition_to(GroupState.EMPTY, now_ms)
            result.records.append(self._group_record(group))

    @staticmethod
    def _elect_joined_leader(group: Group) -> bool:
        leader = group.members.get(group.leader) if group.leader is not None else None
        if leader is not None and leader.join_token is not None:
            return True
        for member in group.members.values():
            if member.join_token is not None:
                group.leader = member.member_id
                return True
        return False

    def _drop_member(self, group: Group, member: Member, result: Result) -> None:
        """Remove a member, answering any request it has held (no rebalance logic)."""
        if member.join_token is not None:
            result.respond(member.join_token, error_responses.join_group(
                member.join_version, ErrorCode.unknown_member_id, member.member_id))
            member.join_token = None
        if member.sync_token is not None:
            result.respond(member.sync_token, error_responses.sync_group(ErrorCode.unknown_member_id))
            member.sync_token = None
        group.remove(member.member_id)

    def _remove_member_and_update_group(self, group: Group, member_id: str, now_ms: int, result: Result) -> None:
        self._drop_member(group, group.members[member_id], result)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, now_ms, result)
        # Leaving Stable or CompletingRebalance with nobody left completes the join at once.
        self._maybe_complete_join(group, now_ms, result)

    @staticmethod
    def _group_record(group: Group, value: GroupMetadataValue | None = None) -> OffsetsRecord:
        value = group.to_metadata_value() if value is None else value
        return OffsetsRecord(encode_key(GroupMetadataKey(group.group_id)), encode_group_metadata_value(value),
                             (GroupMetadataKey(group.group_id), value))

    # -- SyncGroup --------------------------------------------------------------------------------

    def sync_group(self, request: Any, version: int, token: int, now_ms: int) -> Result:
        result = self._sync_group(request, version, token, now_ms)
        self.reschedule(request.group_id)
        return result

    def _sync_group(self, request: Any, version: int, token: int, now_ms: int) -> Result:
        result = Result()
        group_id = request.group_id
        member_id = request.member_id
        instance_id = getattr(request, "group_instance_id", None)
        protocol_type = getattr(request, "protocol_type", None)
        protocol_name = getattr(request, "protocol_name", None)

        def fail(error: ErrorCode) -> Result:
            return result.respond(token, error_responses.sync_group(error))

        if not group_id:
            return fail(ErrorCode.invalid_group_id)
        group = self.groups.get(group_id)
        if group is None:
            return fail(ErrorCode.unknown_member_id)
        if group.is_dead:
            return fail(ErrorCode.coordinator_not_available)
        if group.is_static_member_fenced(instance_id, member_id):
            return fail(ErrorCode.fenced_instance_id)
        member = group.members.get(member_id)
        if member is None:
            return fail(ErrorCode.unknown_member_id)
        if request.generation_id != group.generation:
            return fail(ErrorCode.illegal_generation)
        if protocol_type is not None and protocol_type != group.protocol_type:
            return fail(ErrorCode.inconsistent_group_protocol)
        if protocol_name is not None and protocol_name != group.protocol:
            return fail(ErrorCode.inconsistent_group_protocol)
        if group.state is GroupState.EMPTY:
            return fail(ErrorCode.unknown_member_id)
        if group.state is GroupState.PREPARING_REBALANCE:
            return fail(ErrorCode.rebalance_in_progress)
        if group.state is GroupState.STABLE:
            self._synced(group, member_id)
            member.last_heartbeat_ms = now_ms
            return result.respond(token, _sync_response(
                ErrorCode.none, protocol_type=group.protocol_type, protocol=group.protocol,
                assignment=member.assignment))

        # CompletingRebalance: hold until the leader's assignment is stored.
        if member.sync_token is not None and member.sync_token != token:
            result.respond(member.sync_token, error_responses.sync_group(ErrorCode.rebalance_in_progress))
        member.sync_token = token
        member.sync_version = version
        self._synced(group, member_id)
        if not group.is_leader(member_id):
            return result

        # The leader's assignment: persisted first, applied (Stable, every held SyncGroup
        # answered) when its record is replayed.
        assignments = {a.member_id: bytes(a.assignment) for a in request.assignments}
        result.records.append(self._group_record(group, group.to_metadata_value(assignments, now_ms)))
        result.on_failure = functools.partial(self._assignment_not_stored, group, group.generation)
        return result

    def _assignment_not_stored(self, group: Group, generation: int, code: ErrorCode, now_ms: int) -> Result:
        """Storing the leader's assignment failed: every held SyncGroup gets the error and the
        group rebalances (Kafka's SyncGroup append callback)."""
        result = Result()
        if self.groups.get(group.group_id) is not group or group.generation != generation \
                or group.state is not GroupState.COMPLETING_REBALANCE:
            return result  # the group moved on (or the record committed after all)
        error = error_responses.sync_group(group_append_error(code))
        for member in group.members.values():
            if member.sync_token is not None:
                result.respond(member.sync_token, dict(error))
                member.sync_token = None
        self._prepare_rebalance(group, now_ms, result)
        self.reschedule(group.group_id)
        return result

    @staticmethod
    def _synced(group: Group, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            group.sync_deadline_ms = None

    # -- Heartbeat --------------------------------------------------------------------------------

    def heartbeat(self, request: Any, version: int, now_ms: int) -> dict[str, Any]:
        group_id = request.group_id
        member_id = request.member_id
        instance_id = getattr(request, "group_instance_id", None)
        if not group_id:
            return error_responses.heartbeat(ErrorCode.invalid_group_id)
        group = self.groups.get(group_id)
        if group is not None and group.is_dead:
            return error_responses.heartbeat(ErrorCode.coordinator_not_available)
        if group is None or group.state is GroupState.EMPTY:
            return error_responses.heartbeat(ErrorCode.unknown_member_id)
        if group.is_static_member_fenced(instance_id, member_id):
            return error_responses.heartbeat(ErrorCode.fenced_instance_id)
        member = group.members.get(member_id)
        if member is None:
            return error_responses.heartbeat(ErrorCode.unknown_member_id)
        if request.generation_id != group.generation:
            return error_responses.heartbeat(ErrorCode.illegal_generation)
        self.keep_alive(group, member, now_ms)
        if group.state is GroupState.PREPARING_REBALANCE:
            return error_responses.heartbeat(ErrorCode.rebalance_in_progress)
        return error_responses.heartbeat(ErrorCode.none)

    # -- LeaveGroup -------------------------------------------------------------------------------

    def leave_group(self, request: Any, version: int, token: int, now_ms: int) -> Result:
        """Remove members; the LeaveGroup response is `responses[token]` (never held).

        The Result may also answer JoinGroup/SyncGroup requests the leaving members held, and
        carry the empty-group record when the last member leaves.
        """
        result = self._leave_group(request, version, token, now_ms)
        if request.group_id:
            self.reschedule(request.group_id)
        return result

    def _leave_group(self, request: Any, version: int, token: int, now_ms: int) -> Result:
        result = Result()
        if version >= 3:
            leaving = [(m.member_id or "", getattr(m, "group_instance_id", None)) for m in request.members]
        else:
            leaving = [(request.member_id or "", None)]

        def respond(top_error: ErrorCode | int, member_errors: list[int]) -> Result:
            members = [{"member_id": mid, "group_instance_id": iid, "error_code": code}
                       for (mid, iid), code in zip(leaving, member_errors, strict=True)]
            if version < 3 and _code(top_error) == 0 and member_errors:
                top_error = member_errors[0]
            result.respond(token, {"throttle_time": 0, "error_code": _code(top_error), "members": members})
            return result

        if not request.group_id:
            return respond(ErrorCode.invalid_group_id, [0] * len(leaving))
        group = self.groups.get(request.group_id)
        if group is None:
            return respond(ErrorCode.none, [_code(ErrorCode.unknown_member_id)] * len(leaving))
        if group.is_dead:
            # Kafka sends the group-level error with no per-member entries.
            return result.respond(token, error_responses.leave_group(ErrorCode.coordinator_not_available))
        errors = []
        for member_id, instance_id in leaving:
            errors.append(_code(self._leave_one(group, member_id, instance_id, now_ms, result)))
        return respond(ErrorCode.none, errors)

    def _leave_one(self, group: Group, member_id: str, instance_id: str | None, now_ms: int,
                   result: Result) -> ErrorCode:
        if not member_id:
            # Administrative removal of a static member by its instance id alone.
            current = group.static_members.get(instance_id) if instance_id is not None else None
            if current is None:
                return ErrorCode.unknown_member_id
            self._remove_member_and_update_group(group, current, now_ms, result)
            return ErrorCode.none
        if member_id in group.pending_members:
            del group.pending_members[member_id]
            self._maybe_complete_join(group, now_ms, result)
            return ErrorCode.none
        if group.is_static_member_fenced(instance_id, member_id):
            return ErrorCode.fenced_instance_id
        if member_id not in group.members:
            return ErrorCode.unknown_member_id
        self._remove_member_and_update_group(group, member_id, now_ms, result)
        return ErrorCode.none

    # -- timers -----------------------------------------------------------------------------------
    # One key per member (its session, or its pending member id) and per group (join and sync
    # deadlines) in the shard's CoordinatorTimer. Every handler reschedules the keys of the one
    # group it touched, so an event costs O(group size + log n), not a scan of every member.

    def poll(self, now_ms: int) -> Result:
        """Fire every timer due at `now_ms` (including what firing makes due at once)."""
        result = Result()
        while due := self.timer.pop_due(now_ms):
            for _key, event in due:
                result.merge(event(now_ms))
        return result

    def next_deadline(self) -> int | None:
        """The earliest time `poll` has something to do, or None."""
        return self.timer.next_deadline()

    def keep_alive(self, group: Group, member: Member, now_ms: int) -> None:
        """A heartbeat (or an accepted commit): the member's session restarts now."""
        member.last_heartbeat_ms = now_ms
        keys = self._scheduled.setdefault(group.group_id, set())
        key = ("session", group.group_id, member.member_id)
        deadline = _session_deadline(member)
        if deadline is None:
            self.timer.cancel(key)
            keys.discard(key)
        else:
            self.timer.schedule(key, deadline, functools.partial(self._on_timer, key))
            keys.add(key)

    def reschedule(self, group_id: str) -> None:
        """Bring the group's timer keys in line with its state (all cancelled once it is gone)."""
        old = self._scheduled.pop(group_id, set())
        group = self.groups.get(group_id)
        keys: set[tuple[str, ...]] = set()
        if group is not None and group.state is not GroupState.DEAD:
            deadlines: list[tuple[tuple[str, ...], int]] = []
            for member in group.members.values():
                deadline = _session_deadline(member)
                if deadline is not None:
                    deadlines.append((("session", group_id, member.member_id), deadline))
            for member_id, deadline in group.pending_members.items():
                deadlines.append((("pending", group_id, member_id), deadline))
            if group.state is GroupState.PREPARING_REBALANCE and group.join_deadline_ms is not None:
                deadlines.append((("join", group_id), group.join_deadline_ms))
            if group.sync_deadline_ms is not None and group.pending_sync:
                deadlines.append((("sync", group_id), group.sync_deadline_ms))
            for key, deadline in deadlines:
                self.timer.schedule(key, deadline, functools.partial(self._on_timer, key))
                keys.add(key)
            self._scheduled[group_id] = keys
        for key in old - keys:
            self.timer.cancel(key)

    def _on_timer(self, key: tuple[str, ...], now_ms: int) -> Result:
        """One key's deadline passed: act if the state still says it is due."""
        result = Result()
        kind, group_id = key[0], key[1]
        group = self.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return result
        if kind == "session":
            member = group.members.get(key[2])
            deadline = _session_deadline(member) if member is not None else None
            if member is not None and deadline is not None and deadline <= now_ms:
                self._remove_member_and_update_group(group, member.member_id, now_ms, result)
        elif kind == "pending":
            deadline = group.pending_members.get(key[2])
            if deadline is not None and deadline <= now_ms:
                del group.pending_members[key[2]]
                self._maybe_complete_join(group, now_ms, result)
        elif kind == "join":
            if group.state is GroupState.PREPARING_REBALANCE and group.join_deadline_ms is not None \
                    and group.join_deadline_ms <= now_ms:
                self._on_join_deadline(group, now_ms, result)
        elif kind == "sync":
            if group.state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE) \
                    and group.sync_deadline_ms is not None and group.sync_deadline_ms <= now_ms:
                self._expire_pending_sync(group, now_ms, result)
        self.reschedule(group_id)
        return result

    def _expire_pending_sync(self, group: Group, now_ms: int, result: Result) -> None:
        group.sync_deadline_ms = None
        if not group.pending_sync:
            return
        for member_id in list(group.pending_sync):
            if member_id in group.members:
                self._drop_member(group, group.members[member_id], result)
        group.pending_sync.clear()
        self._prepare_rebalance(group, now_ms, result)
        self._maybe_complete_join(group, now_ms, result)

    # -- DescribeGroups / ListGroups --------------------------------------------------------------

    def describe_groups(self, request: Any, version: int) -> dict[str, Any]:
        described = []
        for group_id in request.groups:
            group = self.groups.get(group_id)
            if group is None or group.state is GroupState.DEAD:
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

    def list_groups(self, request: Any, version: int) -> dict[str, Any]:
        states = {s.lower() for s in (getattr(request, "states_filter", None) or ())}
        types = {t.lower() for t in (getattr(request, "types_filter", None) or ())}
        listed = []
        for group in self.groups.values():
            if group.state is GroupState.DEAD:
                continue
            if states and group.state.value.lower() not in states:
                continue
            if types and CLASSIC_GROUP_TYPE not in types:
                continue
            listed.append({"group_id": group.group_id, "protocol_type": group.protocol_type or "",
                           "group_state": group.state.value, "group_type": CLASSIC_GROUP_TYPE})
        return {"throttle_time": 0, "error_code": 0, "groups": listed}

    # -- replay of committed group records -------------------------------------------------------

    def replay_group(self, group_id: str, value: GroupMetadataValue | None, now_ms: int) -> Result:
        """A group's record is committed: bring the group in line with it (Kafka's
        GroupMetadataManager.replay). The responses are requests the record completes."""
        result = Result()
        group = self.groups.get(group_id)
        if value is None:
            return self.remove_group(group_id, now_ms)  # a tombstone: DeleteGroups or expiry
        if group is None or value.generation > group.generation:
            # Loading, a standby, or a record of a leadership ahead of this one.
            if group is not None:
                result.merge(self.remove_group(group_id, now_ms))
            self.groups[group_id] = Group.from_metadata_value(group_id, value, now_ms)
        elif value.generation == group.generation:
            if group.state is GroupState.COMPLETING_REBALANCE and value.members:
                self._assignment_stored(group, value, now_ms, result)
            elif group.state is GroupState.STABLE:
                self._replacements_stored(group, value, now_ms, result)
        # else: an older generation's record committing late; the group has moved on.
        self.reschedule(group_id)  # loaded members' sessions start now
        return result

    def _assignment_stored(self, group: Group, value: GroupMetadataValue, now_ms: int, result: Result) -> None:
        """The leader's SyncGroup record is committed: Stable, and every held SyncGroup answered."""
        assignments = {m.member_id: bytes(m.assignment) for m in value.members}
        for member in group.members.values():
            member.assignment = assignments.get(member.member_id, b"")
        stamp = value.current_state_timestamp
        group.transition_to(GroupState.STABLE, stamp if stamp is not None and stamp >= 0 else now_ms)
        for member in group.members.values():
            if member.sync_token is not None:
                result.respond(member.sync_token, _sync_response(
                    ErrorCode.none, protocol_type=group.protocol_type, protocol=group.protocol,
                    assignment=member.assignment))
                member.sync_token = None
                member.last_heartbeat_ms = now_ms

    def _replacements_stored(self, group: Group, value: GroupMetadataValue, now_ms: int, result: Result) -> None:
        """A static member's new member id is committed: it takes the old one's place."""
        for persisted in value.members:
            instance_id = persisted.group_instance_id
            current = group.static_members.get(instance_id) if instance_id is not None else None
            if current is None or current == persisted.member_id:
                continue
            self._fence(group.members[current], result)
            member = group.replace_static_member(instance_id, current, persisted.member_id)
            joined = group.pending_replacements.pop(persisted.member_id, None)
            if joined is not None:
                member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms = joined
            member.last_heartbeat_ms = now_ms

    # -- for the offset manager -------------------------------------------------------------------

    def remove_group(self, group_id: str, now_ms: int | None = None) -> Result:
        """Mark a group Dead and forget it (deletion, expiry, unload).

        Requests it still holds are answered with NOT_COORDINATOR, as Kafka does on unload, so
        clients look the coordinator up again.
        """
        result = Result()
        group = self.groups.pop(group_id, None)
        if group is None:
            return result
        for member in group.members.values():
            if member.join_token is not None:
                result.respond(member.join_token, error_responses.join_group(
                    member.join_version, ErrorCode.not_coordinator, member.member_id))
                member.join_token = None
            if member.sync_token is not None:
                result.respond(member.sync_token, error_responses.sync_group(ErrorCode.not_coordinator))
                member.sync_token = None
        stamp = now_ms if now_ms is not None else (group.state_timestamp_ms or 0)
        group.transition_to(GroupState.DEAD, stamp)
        group.join_deadline_ms = None
        group.sync_deadline_ms = None
        group.pending_members.clear()
        self.reschedule(group_id)
        return result


@dataclasses.dataclass(frozen=True, slots=True)
class _Join:
    token: int
    version: int
    now_ms: int
    client_id: str
    client_host: str
    instance_id: str | None
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]


def _session_deadline(member: Member) -> int | None:
    """When the member expires without a heartbeat (None: kept alive by a held request)."""
    if member.join_token is not None:
        # Waiting in JoinGroup: existing members are bounded by the rebalance timeout instead.
        return member.last_heartbeat_ms + NEW_MEMBER_JOIN_TIMEOUT_MS if member.is_new else None
    if member.sync_token is not None:
        return None
    return member.last_heartbeat_ms + member.session_timeout_ms
