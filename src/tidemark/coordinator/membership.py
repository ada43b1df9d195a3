"""Classic group membership requests: JoinGroup, SyncGroup, Heartbeat, LeaveGroup.

Each handler takes the decoded request, its version, a token naming the request and the current
time, and returns a `Result` (Heartbeat: its response). The mechanics they share (join and sync
phases, timers, replay of committed group records) are in rebalance.py; DescribeGroups and
ListGroups, which only read, in group_views.py. Responses are dicts with Kafka's field names,
every field any version needs.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import functools
from typing import Any

from kio.schema.errors import ErrorCode

from tidemark.coordinator.group import Group, GroupState, Member
from tidemark.coordinator.rebalance import GroupRebalancer, join_response, sync_response
from tidemark.coordinator.result import Result, group_append_error
from tidemark.wire import error_responses


def _ms(value: Any) -> int:
    if isinstance(value, datetime.timedelta):
        return int(value / datetime.timedelta(milliseconds=1))
    return int(value)


def _code(error: ErrorCode | int) -> int:
    return int(error)


class GroupMembership(GroupRebalancer):
    """The classic group protocol's requests."""

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
        result.respond(join.token, join_response(
            join.version, ErrorCode.none, new_id, generation=group.generation,
            protocol_type=group.protocol_type, protocol=group.protocol, leader=leader or "",
            members=self._member_list(image) if skip else None, skip_assignment=skip))
        generation = group.generation

        def failed(code: ErrorCode, _now_ms: int) -> Result:
            group.pending_replacements.pop(new_id, None)
            return Result().respond(join.token, join_response(
                join.version, group_append_error(code), "", generation=generation,
                protocol_type=group.protocol_type, protocol=group.protocol, leader=group.leader or ""))

        result.on_failure = failed

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
            return result.respond(token, sync_response(
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
