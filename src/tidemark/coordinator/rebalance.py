"""Classic group rebalance mechanics, shared by the request handlers (membership.py): the join
and sync phases, removing members, the timers behind them (sessions, join and sync deadlines),
and replaying committed group records.

A pure state machine: callers pass the current time and get a `Result` back. A request the
protocol holds (a JoinGroup waiting for the join phase, a SyncGroup waiting for the leader's
assignment to commit) is answered by the Result of a later event, keyed by its token.
"""

from __future__ import annotations

import dataclasses
import functools
import uuid
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from tidemark.coordinator.group import Group, GroupState, Member
from tidemark.coordinator.result import OffsetsRecord, Result
from tidemark.coordinator.timer import CoordinatorTimer
from tidemark.records.offsets_schema import GroupMetadataKey, GroupMetadataValue, encode_group_metadata_value, encode_key
from tidemark.wire import error_responses

# Kafka bounds how long a member may sit in its first JoinGroup without being answered.
NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000


@dataclasses.dataclass(frozen=True, slots=True)
class GroupConfig:
    min_session_timeout_ms: int = 6000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1800000  # group.max.session.timeout.ms
    initial_rebalance_delay_ms: int = 3000  # group.initial.rebalance.delay.ms
    max_size: int = 2**31 - 1  # group.max.size



def _code(error: ErrorCode | int) -> int:
    return int(error)


def join_response(version: int, error: ErrorCode | int, member_id: str, *, generation: int = -1,
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


def sync_response(error: ErrorCode | int, *, protocol_type: str | None = None, protocol: str | None = None,
                   assignment: bytes = b"") -> dict[str, Any]:
    return {"throttle_time": 0, "error_code": _code(error), "protocol_type": protocol_type,
            "protocol_name": protocol, "assignment": assignment}


class GroupRebalancer:
    """The rebalance protocol's mechanics over a dict of groups shared with the offset manager."""

    def __init__(self, groups: dict[str, Group], config: GroupConfig,
                 new_member_id: Callable[[str], str] | None = None,
                 timer: CoordinatorTimer | None = None) -> None:
        self.groups = groups
        self.config = config
        self._new_member_id = new_member_id or (lambda prefix: f"{prefix}-{uuid.uuid4()}")
        self.timer = timer if timer is not None else CoordinatorTimer()
        self._scheduled: dict[str, set[tuple[str, ...]]] = {}  # group id -> its timer keys
        # Group records in the latest view and not yet committed, per group in log order: (log
        # offset, the group it was applied to, whether it is a tombstone, the static members it
        # replaced as (instance id, old member id, new member id)).
        self._appended: dict[str, list[tuple[int, Group | None, bool, list[tuple[str, str, str]]]]] = {}

    @staticmethod
    def _answer_held(member: Member, error: ErrorCode, result: Result) -> None:
        """Answer the JoinGroup and SyncGroup a member holds, if any, with `error`."""
        if member.join_token is not None:
            result.respond(member.join_token, error_responses.join_group(member.join_version, error, member.member_id))
            member.join_token = None
        if member.sync_token is not None:
            result.respond(member.sync_token, error_responses.sync_group(error))
            member.sync_token = None

    def _fence(self, member: Member, result: Result) -> None:
        """The old incarnation of a static member is fenced, including requests it has held."""
        self._answer_held(member, ErrorCode.fenced_instance_id, result)

    def _joined_response(self, group: Group, member: Member, version: int) -> dict[str, Any]:
        is_leader = group.is_leader(member.member_id)
        return join_response(
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
        self._answer_held(member, ErrorCode.unknown_member_id, result)
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

    def restart_sessions(self, now_ms: int) -> None:
        """This shard starts serving (a load ended, or a standby became leader): every member's
        session starts now, as Kafka reschedules loaded members' heartbeats."""
        for group_id, group in self.groups.items():
            for member in group.members.values():
                member.last_heartbeat_ms = now_ms
            self.reschedule(group_id)

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

    # -- replay of group records: into the latest view when appended, the committed one when committed

    def replay_group_appended(self, log_offset: int, group_id: str, value: GroupMetadataValue | None,
                              now_ms: int) -> Result:
        """A group's record was appended here: the latest view takes it. A tombstone marks the
        group as being deleted; a Stable group's record of the same generation carries static
        members' new ids, which take the old ones' places now (Kafka replaces a static member in
        memory at once). An assignment moves the group to Stable only once committed, and a
        group's removal waits for its tombstone to commit, as in Kafka."""
        result = Result()
        group = self.groups.get(group_id)
        replaced: list[tuple[str, str, str]] = []
        if group is not None and value is None:
            # Gone from the latest view (a commit may start the group afresh); the committed view
            # keeps it until the tombstone commits.
            del self.groups[group_id]
            group.deleting = True
            for member in group.members.values():
                self._answer_held(member, ErrorCode.not_coordinator, result)
            deleting = getattr(self.groups, "deleting", None)
            if deleting is not None:
                deleting.setdefault(group_id, group)
        elif group is not None and value is not None and value.generation == group.generation \
                and group.state is GroupState.STABLE:
            replaced = self._replacements_stored(group, value, now_ms, result)
        self._appended.setdefault(group_id, []).append((log_offset, group, value is None, replaced))
        self.reschedule(group_id)
        return result

    def drop_appended(self, now_ms: int) -> Result:
        """Every appended group record failed: undo what they did to the latest view, newest
        first (a replaced static member takes its old id back if the new one is still current;
        a group being deleted is not)."""
        result = Result()
        deleting = getattr(self.groups, "deleting", {})
        for group_id, records in self._appended.items():
            for _log_offset, group, tombstone, replaced in reversed(records):
                if group is None:
                    continue
                if tombstone:
                    group.deleting = False
                    self.groups[group_id] = group
                    if deleting.get(group_id) is group:
                        del deleting[group_id]
                    continue
                if self.groups.get(group_id) is not group:
                    continue
                for instance_id, old_id, new_id in reversed(replaced):
                    if group.static_members.get(instance_id) == new_id and new_id in group.members:
                        self._fence(group.members[new_id], result)
                        group.replace_static_member(instance_id, new_id, old_id)
            self.reschedule(group_id)
        self._appended.clear()
        return result

    def _committed_appended(self, group_id: str, log_offset: int) -> tuple[bool, Group | None]:
        """The record at `log_offset` is committed: whether the latest view already has it, and
        the group it was appended for (None if there was none)."""
        records = self._appended.get(group_id)
        if not records or records[0][0] > log_offset:
            return False, None
        was_appended, group = False, None
        while records and records[0][0] <= log_offset:
            at, appended_for, _tombstone, _replaced = records.pop(0)
            was_appended, group = at == log_offset, appended_for
        if not records:
            del self._appended[group_id]
        return was_appended, group

    def replay_group(self, group_id: str, value: GroupMetadataValue | None, now_ms: int,
                     log_offset: int | None = None) -> Result:
        """A group's record is committed: bring the group in line with it (Kafka's
        GroupMetadataManager.replay), but for what the latest view already took when it was
        appended here. The responses are requests the record completes."""
        result = Result()
        appended, appended_for = self._committed_appended(group_id, log_offset) if log_offset is not None \
            else (False, None)
        group = self.groups.get(group_id)
        if appended:
            # The latest view took it when it was appended; what is left is the committed view's:
            # a tombstone removes the group it kept, an assignment makes the group Stable and
            # answers the held SyncGroups (at commit, as in Kafka). Only for the group it was
            # appended for: one deleted since and started afresh by a later join (generations
            # count from 0 again) is another group, which this record says nothing about.
            if value is None:
                deleted = getattr(self.groups, "deleting", {}).pop(group_id, None)
                if deleted is not None:
                    deleted.transition_to(GroupState.DEAD, now_ms)
            elif group is not None and group is appended_for and value.generation == group.generation \
                    and group.state is GroupState.COMPLETING_REBALANCE and value.members:
                self._assignment_stored(group, value, now_ms, result)
            self.reschedule(group_id)
            return result
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
                result.respond(member.sync_token, sync_response(
                    ErrorCode.none, protocol_type=group.protocol_type, protocol=group.protocol,
                    assignment=member.assignment))
                member.sync_token = None
                member.last_heartbeat_ms = now_ms

    def _replacements_stored(self, group: Group, value: GroupMetadataValue, now_ms: int,
                             result: Result) -> list[tuple[str, str, str]]:
        """A static member's new member id is in the record: it takes the old one's place.
        Returns (instance id, old id, new id) of each replacement."""
        replaced = []
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
            replaced.append((instance_id, current, persisted.member_id))
        return replaced

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
            self._answer_held(member, ErrorCode.not_coordinator, result)
        stamp = now_ms if now_ms is not None else (group.state_timestamp_ms or 0)
        group.transition_to(GroupState.DEAD, stamp)
        group.join_deadline_ms = None
        group.sync_deadline_ms = None
        group.pending_members.clear()
        self.reschedule(group_id)
        return result


def _session_deadline(member: Member) -> int | None:
    """When the member expires without a heartbeat (None: kept alive by a held request)."""
    if member.join_token is not None:
        # Waiting in JoinGroup: existing members are bounded by the rebalance timeout instead.
        return member.last_heartbeat_ms + NEW_MEMBER_JOIN_TIMEOUT_MS if member.is_new else None
    if member.sync_token is not None:
        return None
    return member.last_heartbeat_ms + member.session_timeout_ms
